//! The option setters of SPDK subsystems that rtgt has no counterpart for (iobuf, sock,
//! accel, VMD, the bdev layer and the NVMe/RAID/iSCSI bdev modules, the scheduler, the Linux
//! keyring).
//!
//! Stock SPDK configurations contain these setters: SPDK's `save_config` writes most of them
//! with their default values, and rpc.py's `load_config` refuses a file that names a method
//! the target does not list. So each is registered under SPDK's name, with SPDK's state mask
//! and parameters (checked strictly: unknown keys, missing required keys and wrong types are
//! `-32602`). A call is accepted only when every value it gives is one SPDK itself writes by
//! default ([`Setter::accepts`]; where releases differ, each release's default): such a call
//! changes nothing in SPDK's default configuration, and nothing in rtgt. Any other value would
//! be an option rtgt takes and ignores, so it is refused with `-32602` naming the parameter,
//! the values accepted and why rtgt has no use for it. Nothing is recorded, so `save_config`
//! writes none of these setters (their subsystems' lists are empty, as SPDK's are for
//! subsystems without configuration).

use serde_json::{Map, Value, json};

use super::nvmf::{DHGROUPS, DIGESTS};
use super::{Param, TargetContext, check_params, log_failure, params_object};
use crate::params::DecodeFlavor;
use crate::{Methods, Params, RegisterError, RpcError, RpcResult, StateMask};

/// A value SPDK's `save_config` writes for a parameter when nobody set it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dflt {
    /// A boolean.
    Bool(bool),
    /// An unsigned integer.
    Uint(u64),
    /// A signed integer.
    Int(i64),
    /// A string.
    Str(&'static str),
    /// A list of strings, in any order.
    Strs(&'static [&'static str]),
    /// An object `{"policy": <string>}` (bdev_nvme's `multipath_opts`).
    Policy(&'static str),
}

impl Dflt {
    /// Whether `v` is this value (a list: the same strings in any order).
    pub fn matches(&self, v: &Value) -> bool {
        match *self {
            Dflt::Bool(b) => v.as_bool() == Some(b),
            Dflt::Uint(n) => v.as_u64() == Some(n),
            Dflt::Int(n) => v.as_i64() == Some(n),
            Dflt::Str(s) => v.as_str() == Some(s),
            Dflt::Strs(list) => v.as_array().is_some_and(|a| {
                a.len() == list.len() && list.iter().all(|s| a.iter().any(|x| x == s))
            }),
            Dflt::Policy(p) => v.as_object().is_some_and(|o| {
                o.len() == 1 && o.get("policy").and_then(Value::as_str) == Some(p)
            }),
        }
    }

    fn to_json(self) -> Value {
        match self {
            Dflt::Bool(b) => json!(b),
            Dflt::Uint(n) => json!(n),
            Dflt::Int(n) => json!(n),
            Dflt::Str(s) => json!(s),
            Dflt::Strs(l) => json!(l),
            Dflt::Policy(p) => json!({ "policy": p }),
        }
    }
}

/// Which calls of a setter are accepted.
#[derive(Debug)]
pub enum Accepts {
    /// Calls whose every parameter has one of its listed values (SPDK's defaults). A parameter
    /// not listed is refused whenever it is given.
    Defaults(&'static [(&'static str, &'static [Dflt])]),
    /// No call: SPDK writes this setter only when it was used, and it would have no effect.
    Nothing,
}

/// A setter: its method, the subsystem whose configuration it belongs to, its state mask,
/// parameters and the values accepted.
#[derive(Debug)]
pub struct Setter {
    /// SPDK's method name.
    pub method: &'static str,
    /// The subsystem SPDK dumps it in.
    pub subsystem: &'static str,
    /// When it may be called.
    pub mask: StateMask,
    /// The calls accepted (without effect).
    pub accepts: Accepts,
    /// Why rtgt has no use for it (the end of the refusal's message).
    pub why: &'static str,
    /// Extra validation of the values.
    pub check: Option<CheckFn>,
}

/// Extra validation of a setter's values; `Err` gives the reason.
pub type CheckFn = fn(&Map<String, Value>) -> Result<(), String>;

use Dflt::{Bool, Int, Policy, Str, Strs, Uint};

const F: &[Dflt] = &[Bool(false)];
const T: &[Dflt] = &[Bool(true)];
const ZERO: &[Dflt] = &[Uint(0)];
/// posix and uring: 2 MiB; ssl: 4 KiB (2 MiB before SPDK v24.01).
const SOCK_BUF: &[Dflt] = &[Uint(2 << 20), Uint(4096)];

/// Every setter, with SPDK's default values (v24.01 to HEAD; the sources are SPDK's
/// `*_write_config_json` functions and the option structures they print).
pub const SETTERS: &[Setter] = &[
    Setter {
        method: "iobuf_set_options",
        subsystem: "iobuf",
        mask: StateMask::STARTUP,
        accepts: Accepts::Defaults(&[
            ("small_pool_count", &[Uint(8192)]),
            ("large_pool_count", &[Uint(1024)]),
            ("small_bufsize", &[Uint(8192)]),
            ("large_bufsize", &[Uint(135_168)]),
            ("enable_numa", F),
        ]),
        why: "rtgt has no iobuf pools (each transport sizes its own data buffers: num_shared_buffers)",
        check: None,
    },
    Setter {
        method: "sock_set_default_impl",
        subsystem: "sock",
        mask: StateMask::STARTUP,
        accepts: Accepts::Defaults(&[("impl_name", &[Str("posix")])]),
        why: "rtgt has no socket layer (its transports are RDMA and SRP)",
        check: Some(check_sock_impl),
    },
    Setter {
        method: "sock_impl_set_options",
        subsystem: "sock",
        mask: StateMask::STARTUP,
        accepts: Accepts::Defaults(&[
            ("impl_name", &[Str("posix"), Str("ssl"), Str("uring")]),
            ("recv_buf_size", SOCK_BUF),
            ("send_buf_size", SOCK_BUF),
            ("enable_recv_pipe", T),
            ("enable_quickack", F),
            ("enable_placement_id", ZERO),
            ("enable_zerocopy_send_server", &[Bool(true), Bool(false)]),
            ("enable_zerocopy_send_client", F),
            ("zerocopy_threshold", ZERO),
            ("tls_version", ZERO),
            ("enable_ktls", F),
            ("enable_zerocopy_send", &[Bool(true), Bool(false)]),
        ]),
        why: "rtgt has no socket layer (its transports are RDMA and SRP)",
        check: Some(check_sock_impl_defaults),
    },
    Setter {
        method: "vmd_enable",
        subsystem: "vmd",
        mask: StateMask::STARTUP,
        accepts: Accepts::Nothing,
        why: "rtgt has no VMD driver (and no NVMe bdevs behind one)",
        check: None,
    },
    Setter {
        method: "accel_set_options",
        subsystem: "accel",
        mask: StateMask::STARTUP,
        accepts: Accepts::Defaults(&[
            ("small_cache_size", &[Uint(128)]),
            ("large_cache_size", &[Uint(16)]),
            ("task_count", &[Uint(2048)]),
            ("sequence_count", &[Uint(2048)]),
            ("buf_count", &[Uint(2048)]),
        ]),
        why: "rtgt has no acceleration framework",
        check: None,
    },
    Setter {
        method: "accel_assign_opc",
        subsystem: "accel",
        mask: StateMask::STARTUP,
        accepts: Accepts::Nothing,
        why: "rtgt has no acceleration framework",
        check: None,
    },
    Setter {
        method: "bdev_set_options",
        subsystem: "bdev",
        mask: StateMask::STARTUP,
        accepts: Accepts::Defaults(&[
            ("bdev_io_pool_size", &[Uint(65535)]),
            ("bdev_io_cache_size", &[Uint(256)]),
            ("bdev_auto_examine", T),
            ("iobuf_small_cache_size", &[Uint(128)]),
            ("iobuf_large_cache_size", &[Uint(16)]),
        ]),
        why: "rtgt's bdev layer has no bdev_io pool, no iobuf caches and no examine step",
        check: None,
    },
    Setter {
        method: "bdev_raid_set_options",
        subsystem: "bdev",
        mask: StateMask::ANY,
        accepts: Accepts::Defaults(&[
            ("process_window_size_kb", &[Uint(1024)]),
            ("process_max_bandwidth_mb_sec", ZERO),
        ]),
        why: "rtgt has no RAID bdevs",
        check: None,
    },
    Setter {
        method: "bdev_iscsi_set_options",
        subsystem: "bdev",
        mask: StateMask::ANY,
        accepts: Accepts::Defaults(&[("timeout_sec", &[Uint(30)])]),
        why: "rtgt has no iSCSI bdevs",
        check: None,
    },
    Setter {
        method: "bdev_nvme_set_options",
        subsystem: "bdev",
        mask: StateMask::ANY,
        accepts: Accepts::Defaults(&[
            ("action_on_timeout", &[Str("none")]),
            ("timeout_us", ZERO),
            ("timeout_admin_us", ZERO),
            ("keep_alive_timeout_ms", &[Uint(10_000)]),
            ("arbitration_burst", ZERO),
            ("low_priority_weight", ZERO),
            ("medium_priority_weight", ZERO),
            ("high_priority_weight", ZERO),
            ("nvme_adminq_poll_period_us", &[Uint(10_000)]),
            ("nvme_ioq_poll_period_us", ZERO),
            ("io_queue_requests", ZERO),
            ("delay_cmd_submit", T),
            ("transport_retry_count", &[Uint(4)]),
            ("bdev_retry_count", &[Int(3)]),
            ("transport_ack_timeout", ZERO),
            ("ctrlr_loss_timeout_sec", &[Int(0)]),
            ("reconnect_delay_sec", ZERO),
            ("fast_io_fail_timeout_sec", ZERO),
            ("disable_auto_failback", F),
            ("generate_uuids", F),
            ("transport_tos", ZERO),
            ("nvme_error_stat", F),
            ("rdma_srq_size", ZERO),
            ("io_path_stat", F),
            ("allow_accel_sequence", F),
            ("rdma_max_cq_size", ZERO),
            ("rdma_cm_event_timeout_ms", ZERO),
            ("dhchap_digests", &[Strs(DIGESTS)]),
            ("dhchap_dhgroups", &[Strs(DHGROUPS)]),
            ("rdma_umr_per_io", F),
            ("tcp_connect_timeout_ms", ZERO),
            ("enable_flush", F),
            ("multipath_opts", &[Policy("active_passive")]),
            ("retry_count", &[Uint(4)]),
        ]),
        why: "rtgt has no NVMe bdevs",
        check: Some(check_nvme_timeout_action),
    },
    Setter {
        method: "bdev_nvme_set_hotplug",
        subsystem: "bdev",
        mask: StateMask::RUNTIME,
        accepts: Accepts::Defaults(&[("enable", F), ("period_us", &[Uint(100_000)])]),
        why: "rtgt has no NVMe bdevs",
        check: None,
    },
    Setter {
        method: "framework_set_scheduler",
        subsystem: "scheduler",
        mask: StateMask::ANY,
        // The static scheduler has no period (SPDK writes none), nor the dynamic one's limits.
        accepts: Accepts::Defaults(&[("name", &[Str("static")]), ("period", ZERO)]),
        why: "rtgt's reactors run the static schedule: one poll group on each reactor's core",
        check: Some(check_scheduler),
    },
    Setter {
        method: "keyring_linux_set_options",
        subsystem: "keyring",
        mask: StateMask::STARTUP,
        accepts: Accepts::Defaults(&[("enable", F)]),
        why: "rtgt has no Linux keyring module (keys come from files: keyring_file_add_key)",
        check: None,
    },
];

fn check_sock_impl(p: &Map<String, Value>) -> Result<(), String> {
    match p.get("impl_name").and_then(Value::as_str) {
        Some("posix" | "ssl" | "uring") => Ok(()),
        other => Err(format!("unknown socket implementation {other:?}")),
    }
}

/// The socket implementations' defaults differ in buffer sizes and zero-copy send.
fn check_sock_impl_defaults(p: &Map<String, Value>) -> Result<(), String> {
    check_sock_impl(p)?;
    let imp = p.get("impl_name").and_then(Value::as_str).unwrap_or("");
    let (buf, zcopy) = match imp {
        "posix" => (2u64 << 20, true),
        "uring" => (2 << 20, false),
        _ => (4096, true),
    };
    for key in ["recv_buf_size", "send_buf_size"] {
        if let Some(v) = p.get(key).and_then(Value::as_u64)
            && v != buf
            && !(imp == "ssl" && v == 2 << 20)
        {
            return Err(format!(
                "{key} {v} is not supported for {imp}: rtgt has no socket layer (its transports \
                 are RDMA and SRP); only SPDK's default {buf} is accepted, without effect"
            ));
        }
    }
    for key in ["enable_zerocopy_send_server", "enable_zerocopy_send"] {
        if let Some(v) = p.get(key).and_then(Value::as_bool)
            && v != zcopy
        {
            return Err(format!(
                "{key} {v} is not supported for {imp}: rtgt has no socket layer (its transports \
                 are RDMA and SRP); only SPDK's default {zcopy} is accepted, without effect"
            ));
        }
    }
    Ok(())
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

impl Setter {
    /// Its parameters: its method's spec ([`super::specs`]).
    pub fn params(&self) -> Vec<Param> {
        super::specs::find(self.method)
            .map(|s| crate::request_check::request_params(s).0)
            .unwrap_or_default()
    }

    /// Why `params` (already type-checked) would have no effect, if they would: the first
    /// parameter whose value is not one of SPDK's defaults.
    pub fn refusal(&self, params: &Map<String, Value>) -> Option<String> {
        let defaults = match self.accepts {
            Accepts::Nothing => {
                return Some(format!("{} is not supported: {}", self.method, self.why));
            }
            Accepts::Defaults(d) => d,
        };
        for (key, value) in params {
            let allowed = defaults
                .iter()
                .find(|(k, _)| k == key)
                .map_or(&[][..], |(_, a)| *a);
            if allowed.iter().any(|d| d.matches(value)) {
                continue;
            }
            let accepted = match allowed {
                [] => return Some(format!("{key} is not supported: {}", self.why)),
                [one] => format!("only SPDK's default {} is accepted", one.to_json()),
                many => format!(
                    "only SPDK's defaults {} are accepted",
                    many.iter()
                        .map(|d| d.to_json().to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            };
            return Some(format!(
                "{key} {value} is not supported: {}; {accepted}, without effect",
                self.why
            ));
        }
        None
    }
}

pub(crate) fn register(m: &mut Methods<TargetContext>) -> Result<(), RegisterError> {
    for setter in SETTERS {
        m.register(
            setter.method,
            setter.mask,
            move |p: Params<'_>, _: &TargetContext| {
                apply_setter(setter, &p).inspect_err(|e| log_failure(setter.method, e))
            },
        )?;
    }
    Ok(())
}

fn apply_setter(setter: &Setter, p: &Params<'_>) -> RpcResult<bool> {
    let params = params_object(p, DecodeFlavor::InvalidParams)?;
    let bad = |why: String| RpcError::invalid_params(format!("Invalid parameters: {why}"));
    check_params(&params, &setter.params(), false).map_err(bad)?;
    if let Some(check) = setter.check {
        check(&params).map_err(bad)?;
    }
    if let Some(why) = setter.refusal(&params) {
        return Err(bad(why));
    }
    tracing::debug!(
        method = setter.method,
        "SPDK's default values: accepted without effect"
    );
    Ok(true)
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
    fn only_spdk_defaults_are_accepted() {
        let iobuf = setter("iobuf_set_options");
        assert_eq!(
            iobuf.refusal(&map(
                json!({"small_pool_count": 8192, "large_bufsize": 135168})
            )),
            None
        );
        let why = iobuf
            .refusal(&map(json!({"small_pool_count": 4096})))
            .unwrap();
        assert!(
            why.contains("small_pool_count 4096 is not supported")
                && why.contains("iobuf")
                && why.contains("8192"),
            "{why}"
        );
        let nvme = setter("bdev_nvme_set_options");
        let defaults = map(json!({"dhchap_digests": ["sha512", "sha256", "sha384"],
                                  "multipath_opts": {"policy": "active_passive"},
                                  "bdev_retry_count": 3}));
        assert_eq!(nvme.refusal(&defaults), None);
        assert!(
            nvme.refusal(&map(json!({"dhchap_digests": ["sha256"]})))
                .is_some()
        );
        assert!(
            nvme.refusal(&map(json!({"multipath_opts": {"policy": "active_active"}})))
                .is_some()
        );
        assert!(setter("vmd_enable").refusal(&Map::new()).is_some());
        let sched = setter("framework_set_scheduler");
        assert_eq!(sched.refusal(&map(json!({"name": "static"}))), None);
        assert!(
            sched
                .refusal(&map(json!({"name": "static", "period": 5})))
                .is_some()
        );
        assert!(
            sched
                .refusal(&map(json!({"name": "static", "core_limit": 1})))
                .is_some()
        );
    }

    #[test]
    fn socket_defaults_depend_on_the_implementation() {
        let ok = |v: Value| check_sock_impl_defaults(&map(v));
        assert!(ok(json!({"impl_name": "posix", "recv_buf_size": 2097152})).is_ok());
        assert!(ok(json!({"impl_name": "ssl", "recv_buf_size": 4096})).is_ok());
        assert!(ok(json!({"impl_name": "posix", "recv_buf_size": 4096})).is_err());
        assert!(ok(json!({"impl_name": "uring", "enable_zerocopy_send_server": true})).is_err());
        assert!(ok(json!({"impl_name": "posix", "enable_zerocopy_send_server": true})).is_ok());
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
            if let Accepts::Defaults(d) = s.accepts {
                for (k, values) in d {
                    let params = s.params();
                    let p = params.iter().find(|p| p.name == *k);
                    let p = p.unwrap_or_else(|| panic!("{}: default for unknown {k}", s.method));
                    for v in *values {
                        assert!(
                            rpc_spec::kind_ok(p.kind, &v.to_json()),
                            "{}: default {v:?} of {k} has the wrong type",
                            s.method
                        );
                    }
                }
            }
        }
        assert!(check_scheduler(&map(json!({"name":"static"}))).is_ok());
        assert!(check_scheduler(&map(json!({"name":"dynamic"}))).is_err());
        assert!(check_sock_impl(&map(json!({"impl_name":"bogus"}))).is_err());
    }
}
