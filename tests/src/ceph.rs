//! A real Ceph cluster for the cross-crate RBD tests: one monitor and one OSD started with
//! scripts/ceph-cluster.sh, stopped (and its directory removed) when dropped. A missing Ceph
//! installation is a failure, not a skip: scripts/install-deps.sh installs the packages.

use std::path::PathBuf;
use std::process::Command;

/// A cluster of this test, stopped (and its directory removed) when dropped.
pub struct CephCluster {
    /// Its directory (under /tmp).
    pub dir: String,
    /// Its ceph.conf (auth off, monitor on loopback).
    pub conf: String,
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/ceph-cluster.sh")
}

impl CephCluster {
    /// Starts a cluster in a directory named after `tag` and this process; it also stops when
    /// this process dies without dropping it.
    pub fn start(tag: &str) -> Self {
        let dir = format!("/tmp/rtgt-rpc-rbd-{tag}-{}", std::process::id());
        let out = Command::new(script())
            .args([
                "start",
                &dir,
                "--owner-pid",
                &std::process::id().to_string(),
            ])
            .output()
            .expect("running scripts/ceph-cluster.sh");
        assert!(
            out.status.success(),
            "the test cluster did not start (scripts/install-deps.sh installs Ceph):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let conf = String::from_utf8_lossy(&out.stdout).trim().to_string();
        Self { dir, conf }
    }

    /// Runs `rbd ARGS` against the cluster (as client.admin); panics unless it succeeds.
    pub fn rbd(&self, args: &[&str]) {
        let out = Command::new("rbd")
            .arg("--conf")
            .arg(&self.conf)
            .args(args)
            .output()
            .expect("running rbd");
        assert!(
            out.status.success(),
            "rbd {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for CephCluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).args(["stop", &self.dir]).status();
    }
}
