//! What `framework_get_config` prints for each subsystem, i.e. the body of `save_config`.
//!
//! Each subsystem's list replays, in order, the calls that rebuild its current state:
//!
//! * `keyring`: `keyring_file_add_key` per key;
//! * `iobuf`, `sock`, `vmd`, `accel`, `scheduler`: nothing (rtgt has none of these subsystems;
//!   their setters accept only SPDK's defaults, which need no saving);
//! * `bdev`: one create call per bdev in creation order, then `bdev_wait_for_examine`;
//! * `nvmf`: `nvmf_set_config`, `nvmf_set_max_subsystems`, `nvmf_set_crdt`, the transports,
//!   then every subsystem, every host, every namespace and every listener (SPDK HEAD's order).
//!
//! Loading what this prints into a fresh rtgt (`rtgt serve --json`) and printing again gives
//! the same text.

use serde_json::Value;

use super::{TargetContext, bdev, keyring, nvmf};

/// The configuration calls of subsystem `name` (one of [`super::framework::SUBSYSTEMS`]).
/// With `with_batches`, groups SPDK emits as batches are nested arrays.
pub fn subsystem_config(ctx: &TargetContext, name: &str, with_batches: bool) -> Vec<Value> {
    match name {
        "keyring" => keyring::keyring_config(ctx),
        "bdev" => bdev::bdev_config(ctx),
        "nvmf" => nvmf::nvmf_config(ctx, with_batches),
        _ => Vec::new(),
    }
}

/// The whole `save_config` document, as rpc.py builds it from `framework_get_subsystems` and
/// `framework_get_config`.
pub fn save_config(ctx: &TargetContext) -> Value {
    let subsystems: Vec<Value> = super::framework::SUBSYSTEMS
        .iter()
        .map(|(name, _)| {
            serde_json::json!({
                "subsystem": name,
                "config": subsystem_config(ctx, name, false),
            })
        })
        .collect();
    serde_json::json!({ "subsystems": subsystems })
}
