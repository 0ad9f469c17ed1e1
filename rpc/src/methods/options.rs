//! The option setters of SPDK subsystems that rtgt has no counterpart for (iobuf, sock,
//! accel, VMD, the bdev layer and the NVMe/RAID/iSCSI bdev modules, the scheduler), and the
//! file keyring.
//!
//! Stock SPDK configurations contain these setters, and rpc.py's `load_config` refuses a file
//! that names a method the target does not list. So each is registered under SPDK's name, with
//! SPDK's state mask and parameters (checked strictly: unknown keys, missing required keys and
//! wrong types are `-32602`), and the values are *recorded*: `save_config` prints them back in
//! their subsystem exactly as they were set, so a configuration survives a round trip through
//! rtgt. They change nothing in rtgt itself (it has no iobuf pools, sockets, accel engines,
//! VMD or NVMe bdevs; its reactors always run the static schedule), and the log says so.
//!
//! The keyring is real: `keyring_file_add_key` checks the file as SPDK does and remembers the
//! key, `keyring_get_keys` lists keys, and `save_config` re-creates them.

use std::os::unix::fs::PermissionsExt;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Kind, Param, Rtgt, add, check_params, log_failure, opt, params_object, req};
use crate::params::{Decode, DecodeFlavor};
use crate::{Methods, Params, RegisterError, RpcError, RpcResult, StateMask};

/// A setter: its method, the subsystem whose configuration it belongs to, its state mask and
/// parameters.
#[derive(Debug)]
pub struct Setter {
    /// SPDK's method name.
    pub method: &'static str,
    /// The subsystem that dumps it in `save_config`.
    pub subsystem: &'static str,
    /// When it may be called.
    pub mask: StateMask,
    /// Its parameters.
    pub params: &'static [Param],
    /// Values are recorded per value of this parameter (e.g. per socket implementation);
    /// `None` keeps one record.
    pub key: Option<&'static str>,
    /// Extra validation of the values.
    pub check: Option<CheckFn>,
}

/// Extra validation of a setter's values; `Err` gives the reason.
pub type CheckFn = fn(&Map<String, Value>) -> Result<(), String>;

const U8: Kind = Kind::Uint(8);
const U16: Kind = Kind::Uint(16);
const U32: Kind = Kind::Uint(32);
const U64: Kind = Kind::Uint(64);

/// Every recorded setter, in the order `save_config` prints them within a subsystem.
pub const SETTERS: &[Setter] = &[
    Setter {
        method: "iobuf_set_options",
        subsystem: "iobuf",
        mask: StateMask::STARTUP,
        params: &[
            opt("small_pool_count", U64),
            opt("large_pool_count", U64),
            opt("small_bufsize", U32),
            opt("large_bufsize", U32),
            opt("enable_numa", Kind::Bool),
        ],
        key: None,
        check: None,
    },
    Setter {
        method: "sock_set_default_impl",
        subsystem: "sock",
        mask: StateMask::STARTUP,
        params: &[req("impl_name", Kind::Str)],
        key: None,
        check: Some(check_sock_impl),
    },
    Setter {
        method: "sock_impl_set_options",
        subsystem: "sock",
        mask: StateMask::STARTUP,
        params: &[
            req("impl_name", Kind::Str),
            opt("recv_buf_size", U32),
            opt("send_buf_size", U32),
            opt("enable_recv_pipe", Kind::Bool),
            opt("enable_quickack", Kind::Bool),
            opt("enable_placement_id", U32),
            opt("enable_zerocopy_send_server", Kind::Bool),
            opt("enable_zerocopy_send_client", Kind::Bool),
            opt("zerocopy_threshold", U32),
            opt("tls_version", U32),
            opt("enable_ktls", Kind::Bool),
            // Older SPDK releases.
            opt("enable_zerocopy_send", Kind::Bool),
        ],
        key: Some("impl_name"),
        check: Some(check_sock_impl),
    },
    Setter {
        method: "vmd_enable",
        subsystem: "vmd",
        mask: StateMask::STARTUP,
        params: &[],
        key: None,
        check: None,
    },
    Setter {
        method: "accel_set_options",
        subsystem: "accel",
        mask: StateMask::STARTUP,
        params: &[
            opt("small_cache_size", U32),
            opt("large_cache_size", U32),
            opt("task_count", U32),
            opt("sequence_count", U32),
            opt("buf_count", U32),
        ],
        key: None,
        check: None,
    },
    Setter {
        method: "accel_assign_opc",
        subsystem: "accel",
        mask: StateMask::STARTUP,
        params: &[req("opname", Kind::Str), req("module", Kind::Str)],
        key: Some("opname"),
        check: None,
    },
    Setter {
        method: "bdev_set_options",
        subsystem: "bdev",
        mask: StateMask::STARTUP,
        params: &[
            opt("bdev_io_pool_size", U32),
            opt("bdev_io_cache_size", U32),
            opt("bdev_auto_examine", Kind::Bool),
            opt("iobuf_small_cache_size", U32),
            opt("iobuf_large_cache_size", U32),
        ],
        key: None,
        check: None,
    },
    Setter {
        method: "bdev_raid_set_options",
        subsystem: "bdev",
        mask: StateMask::ANY,
        params: &[
            opt("process_window_size_kb", U32),
            opt("process_max_bandwidth_mb_sec", U32),
        ],
        key: None,
        check: None,
    },
    Setter {
        method: "bdev_iscsi_set_options",
        subsystem: "bdev",
        mask: StateMask::ANY,
        params: &[opt("timeout_sec", U64)],
        key: None,
        check: None,
    },
    Setter {
        method: "bdev_nvme_set_options",
        subsystem: "bdev",
        mask: StateMask::ANY,
        params: &[
            opt("action_on_timeout", Kind::Str),
            opt("timeout_us", U64),
            opt("timeout_admin_us", U64),
            opt("keep_alive_timeout_ms", U32),
            opt("arbitration_burst", U32),
            opt("low_priority_weight", U32),
            opt("medium_priority_weight", U32),
            opt("high_priority_weight", U32),
            opt("nvme_adminq_poll_period_us", U64),
            opt("nvme_ioq_poll_period_us", U64),
            opt("io_queue_requests", U32),
            opt("delay_cmd_submit", Kind::Bool),
            opt("transport_retry_count", U32),
            opt("bdev_retry_count", Kind::I32),
            opt("transport_ack_timeout", U8),
            opt("ctrlr_loss_timeout_sec", Kind::I32),
            opt("reconnect_delay_sec", U32),
            opt("fast_io_fail_timeout_sec", U32),
            opt("disable_auto_failback", Kind::Bool),
            opt("generate_uuids", Kind::Bool),
            opt("transport_tos", U8),
            opt("nvme_error_stat", Kind::Bool),
            opt("rdma_srq_size", U32),
            opt("io_path_stat", Kind::Bool),
            opt("allow_accel_sequence", Kind::Bool),
            opt("rdma_max_cq_size", U32),
            opt("rdma_cm_event_timeout_ms", U16),
            opt("dhchap_digests", Kind::StrList),
            opt("dhchap_dhgroups", Kind::StrList),
            opt("rdma_umr_per_io", Kind::Bool),
            opt("tcp_connect_timeout_ms", U32),
            opt("enable_flush", Kind::Bool),
            opt("multipath_opts", Kind::Object),
            // Older SPDK releases.
            opt("retry_count", U32),
        ],
        key: None,
        check: Some(check_nvme_timeout_action),
    },
    Setter {
        method: "bdev_nvme_set_hotplug",
        subsystem: "bdev",
        mask: StateMask::RUNTIME,
        params: &[req("enable", Kind::Bool), opt("period_us", U64)],
        key: None,
        check: None,
    },
    Setter {
        method: "framework_set_scheduler",
        subsystem: "scheduler",
        mask: StateMask::ANY,
        params: &[
            req("name", Kind::Str),
            opt("period", U64),
            opt("load_limit", U8),
            opt("core_limit", U8),
            opt("core_busy", U8),
            opt("mappings", Kind::Str),
        ],
        key: None,
        check: Some(check_scheduler),
    },
    Setter {
        method: "keyring_linux_set_options",
        subsystem: "keyring",
        mask: StateMask::STARTUP,
        params: &[opt("enable", Kind::Bool)],
        key: None,
        check: None,
    },
];

fn check_sock_impl(p: &Map<String, Value>) -> Result<(), String> {
    match p.get("impl_name").and_then(Value::as_str) {
        Some("posix" | "ssl" | "uring") => Ok(()),
        other => Err(format!("unknown socket implementation {other:?}")),
    }
}

fn check_nvme_timeout_action(p: &Map<String, Value>) -> Result<(), String> {
    match p.get("action_on_timeout").map(|v| v.as_str()) {
        None | Some(Some("none" | "reset" | "abort")) => Ok(()),
        Some(other) => Err(format!("invalid action_on_timeout {other:?}")),
    }
}

fn check_scheduler(p: &Map<String, Value>) -> Result<(), String> {
    // rtgt's reactors each run one poll group on a fixed core: SPDK's static scheduler.
    match p.get("name").and_then(Value::as_str) {
        Some("static") => Ok(()),
        other => Err(format!(
            "scheduler {other:?} is not supported: rtgt's reactors run the static schedule"
        )),
    }
}

/// One recorded setter call.
#[derive(Debug, Clone)]
struct Record {
    method: &'static str,
    key: Option<String>,
    params: Map<String, Value>,
}

/// The values given to the recorded setters, in the order they were first set.
#[derive(Debug, Default)]
pub(crate) struct OptionStore {
    records: Vec<Record>,
}

impl OptionStore {
    fn set(&mut self, setter: &Setter, params: Map<String, Value>) {
        let key = setter
            .key
            .and_then(|k| params.get(k))
            .and_then(Value::as_str)
            .map(str::to_string);
        match self
            .records
            .iter_mut()
            .find(|r| r.method == setter.method && r.key == key)
        {
            Some(r) => {
                for (k, v) in params {
                    r.params.insert(k, v);
                }
            }
            None => self.records.push(Record {
                method: setter.method,
                key,
                params,
            }),
        }
    }

    /// The calls that re-create what was set for `subsystem`, in [`SETTERS`] order.
    pub(crate) fn dump(&self, subsystem: &str) -> Vec<Value> {
        SETTERS
            .iter()
            .filter(|s| s.subsystem == subsystem)
            .flat_map(|s| {
                self.records
                    .iter()
                    .filter(move |r| r.method == s.method)
                    .map(|r| json!({"method": r.method, "params": r.params}))
            })
            .collect()
    }
}

/// A key of the file keyring.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KeyEntry {
    pub name: String,
    pub path: String,
}

#[derive(Deserialize)]
struct AddKey {
    name: String,
    path: String,
}

#[derive(Deserialize)]
struct KeyName {
    name: String,
}

pub(crate) fn register(m: &mut Methods<Rtgt>) -> Result<(), RegisterError> {
    for setter in SETTERS {
        m.register(
            setter.method,
            setter.mask,
            move |p: Params<'_>, ctx: &Rtgt| {
                apply_setter(setter, &p, ctx).inspect_err(|e| log_failure(setter.method, e))
            },
        )?;
    }

    add(
        m,
        "keyring_file_add_key",
        StateMask::RUNTIME,
        Decode::Strict,
        |a: AddKey, ctx: Arc<Rtgt>| async move {
            check_key_file(&a.path)?;
            let mut keys = ctx.keys.lock();
            if keys.iter().any(|k| k.name == a.name) {
                return Err(RpcError::errno(
                    libc::EEXIST,
                    format!("Key '{}' already exists", a.name),
                ));
            }
            tracing::info!("keyring: added key {} ({})", a.name, a.path);
            keys.push(KeyEntry {
                name: a.name,
                path: a.path,
            });
            Ok(true)
        },
    )?;
    add(
        m,
        "keyring_file_remove_key",
        StateMask::RUNTIME,
        Decode::Strict,
        |a: KeyName, ctx: Arc<Rtgt>| async move {
            let mut keys = ctx.keys.lock();
            let before = keys.len();
            keys.retain(|k| k.name != a.name);
            if keys.len() == before {
                return Err(RpcError::errno(
                    libc::ENODEV,
                    format!("Key '{}' does not exist", a.name),
                ));
            }
            Ok(true)
        },
    )?;
    super::add_sync(
        m,
        "keyring_get_keys",
        StateMask::RUNTIME,
        |p: Params<'_>, ctx: &Rtgt| {
            crate::params::no_params(&p, "keyring_get_keys requires no parameters")?;
            Ok(ctx
                .keys
                .lock()
                .iter()
                .map(|k| {
                    json!({"name": k.name, "module": "keyring_file", "removed": false,
                           "probed": false, "refcnt": 1, "path": k.path})
                })
                .collect::<Vec<_>>())
        },
    )?;
    Ok(())
}

fn apply_setter(setter: &Setter, p: &Params<'_>, ctx: &Rtgt) -> RpcResult<bool> {
    let params = params_object(p, DecodeFlavor::InvalidParams)?;
    let bad = |why: String| {
        tracing::warn!(method = setter.method, "{why}");
        RpcError::invalid_params(format!("Invalid parameters: {why}"))
    };
    check_params(&params, setter.params, false).map_err(bad)?;
    if let Some(check) = setter.check {
        check(&params).map_err(bad)?;
    }
    tracing::info!(
        method = setter.method,
        "recorded for save_config; rtgt has no {} subsystem to apply it to",
        setter.subsystem
    );
    ctx.options.lock().set(setter, params);
    Ok(true)
}

/// SPDK's file keyring rules: an absolute path to a file only its owner can read.
fn check_key_file(path: &str) -> RpcResult<()> {
    if !path.starts_with('/') {
        return Err(RpcError::errno(
            libc::EINVAL,
            format!("Non-absolute key path '{path}' is not allowed"),
        ));
    }
    let meta = std::fs::metadata(path).map_err(|e| {
        RpcError::errno(
            e.raw_os_error().unwrap_or(libc::EIO),
            format!("Cannot stat key file '{path}': {e}"),
        )
    })?;
    if !meta.is_file() {
        return Err(RpcError::errno(
            libc::EINVAL,
            format!("Key path '{path}' is not a regular file"),
        ));
    }
    if meta.permissions().mode() & 0o077 != 0 {
        return Err(RpcError::errno(
            libc::EPERM,
            format!("Invalid permissions on key file '{path}': only the owner may access it"),
        ));
    }
    Ok(())
}

/// The `keyring` subsystem's configuration: the recorded setters, then one
/// `keyring_file_add_key` per key.
pub(crate) fn keyring_config(ctx: &Rtgt) -> Vec<Value> {
    let mut out = ctx.options.lock().dump("keyring");
    out.extend(ctx.keys.lock().iter().map(
        |k| json!({"method": "keyring_file_add_key", "params": {"name": k.name, "path": k.path}}),
    ));
    out
}

/// Whether the keyring holds a key of this name.
pub(crate) fn key_exists(ctx: &Rtgt, name: &str) -> bool {
    ctx.keys.lock().iter().any(|k| k.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn setter(name: &str) -> &'static Setter {
        SETTERS.iter().find(|s| s.method == name).unwrap()
    }

    fn map(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn records_merge_per_key_and_dump_in_setter_order() {
        let mut s = OptionStore::default();
        s.set(
            setter("sock_impl_set_options"),
            map(json!({"impl_name":"posix","recv_buf_size":1})),
        );
        s.set(
            setter("sock_set_default_impl"),
            map(json!({"impl_name":"posix"})),
        );
        s.set(
            setter("sock_impl_set_options"),
            map(json!({"impl_name":"ssl","recv_buf_size":2})),
        );
        s.set(
            setter("sock_impl_set_options"),
            map(json!({"impl_name":"posix","send_buf_size":3})),
        );
        let d = s.dump("sock");
        assert_eq!(d.len(), 3);
        assert_eq!(d[0]["method"], "sock_set_default_impl");
        assert_eq!(
            d[1]["params"],
            json!({"impl_name":"posix","recv_buf_size":1,"send_buf_size":3})
        );
        assert_eq!(d[2]["params"]["impl_name"], "ssl");
        assert!(s.dump("iobuf").is_empty());
    }

    #[test]
    fn setter_tables_are_consistent() {
        for s in SETTERS {
            assert!(
                super::super::framework::is_subsystem(s.subsystem),
                "{} names subsystem {}",
                s.method,
                s.subsystem
            );
            if let Some(k) = s.key {
                assert!(s.params.iter().any(|p| p.name == k && p.required));
            }
        }
        assert!(check_scheduler(&map(json!({"name":"static"}))).is_ok());
        assert!(check_scheduler(&map(json!({"name":"dynamic"}))).is_err());
        assert!(check_sock_impl(&map(json!({"impl_name":"bogus"}))).is_err());
    }

    #[test]
    fn key_files_follow_spdk_rules() {
        assert_eq!(check_key_file("relative").unwrap_err().code, -libc::EINVAL);
        assert_eq!(
            check_key_file("/nonexistent/rtgt-key").unwrap_err().code,
            -libc::ENOENT
        );
        let dir = std::env::temp_dir().join(format!("rtgt-key-{}", std::process::id()));
        std::fs::write(&dir, "NVMeTLSkey-1:01:x:").unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o644)).unwrap();
        assert_eq!(
            check_key_file(dir.to_str().unwrap()).unwrap_err().code,
            -libc::EPERM
        );
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert!(check_key_file(dir.to_str().unwrap()).is_ok());
        let _ = std::fs::remove_file(&dir);
    }
}
