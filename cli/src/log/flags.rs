//! Log flags: SPDK's component names (`log_set_flag nvmf_rdma`) mapped onto `tracing` targets,
//! and the per-output filter they build.
//!
//! A flag that is set lets its components' `debug!` events through whatever the output's
//! level is (SPDK also needs the print level at DEBUG for its `SPDK_DEBUGLOG`; here the flag
//! alone is enough). The `trace` flag, rtgt's own, raises every set flag to `trace!` events:
//! trace logging is compiled into release builds, and costs one comparison per call site while
//! nothing enables it.

use std::collections::BTreeSet;

use tracing_subscriber::filter::{LevelFilter, Targets};

/// Every component flag: its name and the `tracing` targets (module paths) it covers.
pub const FLAGS: &[(&str, &[&str])] = &[
    (
        "ana",
        &[
            "target_core::ana",
            "target_core::target::ana",
            "target_core::nvme::ana",
            "target_core::scsi::alua",
        ],
    ),
    ("bdev", &["target_core::bdev"]),
    ("bdev_aio", &["target_core::bdev::aio"]),
    ("bdev_delay", &["target_core::bdev::delay"]),
    ("bdev_malloc", &["target_core::bdev::malloc"]),
    ("bdev_null", &["target_core::bdev::null"]),
    ("bdev_rbd", &["bdev_rbd"]),
    ("iobuf", &["iobuf"]),
    (
        "nvmf",
        &[
            "target_core::nvme",
            "target_core::nvme_exec",
            "target_core::target",
        ],
    ),
    (
        "nvmf_auth",
        &[
            "target_core::nvme::auth",
            "target_core::nvme_exec::auth_cmd",
        ],
    ),
    ("nvmf_rdma", &["transport_rdma"]),
    ("nvmf_tcp", &["transport_tcp"]),
    ("rdma", &["fabric", "rdma_plumbing"]),
    ("reactor", &["target_core::reactor"]),
    (
        "reservation",
        &["target_core::reservation", "target_core::compare_write"],
    ),
    ("rpc", &["rpc"]),
    ("rtgt", &["rtgt"]),
    ("scsi", &["target_core::scsi", "target_core::scsi_exec"]),
    ("srp", &["transport_srp"]),
    (WIRE_FLAG, &[target_core::hex::WIRE_TARGET]),
];

/// Wire dumps (`trace` events of the decoders, the raw bytes hosts send): always TRACE.
pub const WIRE_FLAG: &str = "wire";

/// rtgt's own flag: set flags log at TRACE instead of DEBUG.
pub const TRACE_FLAG: &str = "trace";

/// The flags that are set.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FlagSet {
    set: BTreeSet<&'static str>,
    trace: bool,
}

impl FlagSet {
    /// Sets or clears `name`, SPDK's `all` meaning every component flag (not `trace`, not
    /// `wire`: both change what is logged, not which component logs).
    /// `Err` names the flags that exist.
    pub fn apply(&mut self, name: &str, enabled: bool) -> Result<(), String> {
        let names: Vec<&'static str> = if name == "all" {
            FLAGS
                .iter()
                .map(|(n, _)| *n)
                .filter(|n| *n != WIRE_FLAG)
                .collect()
        } else if name == TRACE_FLAG {
            self.trace = enabled;
            return Ok(());
        } else {
            match FLAGS.iter().find(|(n, _)| *n == name) {
                Some((n, _)) => vec![*n],
                None => {
                    return Err(format!(
                        "unknown log flag '{name}' (all, {TRACE_FLAG}, {})",
                        FLAGS.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
                    ));
                }
            }
        };
        for n in names {
            if enabled {
                self.set.insert(n);
            } else {
                self.set.remove(n);
            }
        }
        Ok(())
    }

    /// `log_get_flags`: every flag and whether it is set, by name.
    pub fn listing(&self) -> Vec<(String, bool)> {
        let mut v: Vec<(String, bool)> = FLAGS
            .iter()
            .map(|(n, _)| ((*n).to_owned(), self.set.contains(n)))
            .collect();
        v.push((TRACE_FLAG.to_owned(), self.trace));
        v.sort();
        v
    }

    /// The filter of an output whose level is `level`: every target at `level`, the targets of
    /// set flags at DEBUG (TRACE with the `trace` flag) or `level` if that is more verbose.
    pub fn filter(&self, level: LevelFilter) -> Targets {
        let flagged = if self.trace {
            LevelFilter::TRACE
        } else {
            LevelFilter::DEBUG
        }
        .max(level);
        let mut t = Targets::new().with_default(level);
        for (name, targets) in FLAGS {
            if self.set.contains(name) {
                let level = if *name == WIRE_FLAG {
                    LevelFilter::TRACE
                } else {
                    flagged
                };
                for target in *targets {
                    t = t.with_target(*target, level);
                }
            }
        }
        t
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing::Level;

    #[test]
    fn a_set_flag_lets_its_components_debug_through_at_notice() {
        let mut f = FlagSet::default();
        let quiet = f.filter(LevelFilter::INFO);
        assert!(!quiet.would_enable("transport_rdma::poll_group", &Level::DEBUG));
        f.apply("nvmf_rdma", true).unwrap();
        let t = f.filter(LevelFilter::INFO);
        assert!(t.would_enable("transport_rdma::poll_group", &Level::DEBUG));
        assert!(!t.would_enable("transport_rdma::poll_group", &Level::TRACE));
        assert!(!t.would_enable("transport_srp::channel", &Level::DEBUG));
        assert!(t.would_enable("transport_srp::channel", &Level::INFO));
        f.apply(TRACE_FLAG, true).unwrap();
        assert!(
            f.filter(LevelFilter::INFO)
                .would_enable("transport_rdma::cm_data", &Level::TRACE)
        );
        f.apply("nvmf_rdma", false).unwrap();
        assert_eq!(f.filter(LevelFilter::INFO).to_string(), quiet.to_string());
    }

    #[test]
    fn a_child_flag_is_more_specific_than_its_parent() {
        let mut f = FlagSet::default();
        f.apply("bdev_malloc", true).unwrap();
        let t = f.filter(LevelFilter::WARN);
        assert!(t.would_enable("target_core::bdev::malloc", &Level::DEBUG));
        assert!(!t.would_enable("target_core::bdev::null", &Level::DEBUG));
        assert!(!t.would_enable("target_core::bdev", &Level::INFO));
    }

    #[test]
    fn the_wire_flag_dumps_at_trace_without_the_trace_flag() {
        let mut f = FlagSet::default();
        f.apply(WIRE_FLAG, true).unwrap();
        let t = f.filter(LevelFilter::INFO);
        assert!(t.would_enable(target_core::hex::WIRE_TARGET, &Level::TRACE));
        assert!(!t.would_enable("transport_srp::channel", &Level::DEBUG));
    }

    #[test]
    fn all_sets_every_component_and_unknown_flags_are_refused() {
        let mut f = FlagSet::default();
        f.apply("all", true).unwrap();
        let listing = f.listing();
        assert_eq!(listing.len(), FLAGS.len() + 1);
        assert!(
            listing
                .iter()
                .all(|(n, on)| *on == (n != TRACE_FLAG && n != WIRE_FLAG))
        );
        let e = f.apply("nvmf_fc", true).unwrap_err();
        assert!(e.contains("nvmf_rdma"), "{e}");
        f.apply("all", false).unwrap();
        assert!(f.listing().iter().all(|(_, on)| !on));
    }

    #[test]
    fn every_flag_names_a_module_of_the_workspace() {
        // A target that names no module would make its flag a no-op.
        let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
        for (flag, targets) in FLAGS.iter().filter(|(f, _)| *f != WIRE_FLAG) {
            for target in *targets {
                let mut parts = target.split("::");
                let krate = parts.next().unwrap();
                let dir = match krate {
                    "rtgt" => "cli".to_owned(),
                    k => k.replace('_', "-"),
                };
                let rest: Vec<&str> = parts.collect();
                let base = format!("{root}/{dir}/src/{}", rest.join("/"));
                let exists = rest.is_empty()
                    || std::path::Path::new(&format!("{base}.rs")).exists()
                    || std::path::Path::new(&format!("{base}/mod.rs")).exists();
                assert!(exists, "flag {flag}: no module {target} ({base})");
            }
        }
    }
}
