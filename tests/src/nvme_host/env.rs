//! A target with the RDMA transport on the simulated fabric, ready for host tests.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::Value;
use transport_rdma::{PgResources, PoolCounts, RdmaPg, RdmaTransport};

use super::ctrl::{ConnectOpts, HostCtrl};
use super::queue::HostError;
use crate::{HOST_IP, TARGET_IP, TestTarget};

/// A host NQN for tests.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";

/// A target, its RDMA listener address, and helpers.
pub struct NvmfEnv {
    /// The target.
    pub t: TestTarget,
    /// The listener.
    pub to: SocketAddr,
}

impl NvmfEnv {
    /// A target with `reactors` reactors, the RDMA transport created with `opts`, and a
    /// listener on port 4420 of the target device (added to subsystems by [`NvmfEnv::subsystem`]).
    pub fn new(reactors: usize, opts: Value) -> Self {
        let t = TestTarget::start(reactors);
        t.transport("RDMA", opts);
        Self {
            t,
            to: format!("{TARGET_IP}:4420").parse().expect("addr"),
        }
    }

    /// Creates a subsystem exported on the listener, with a malloc namespace of `blocks`
    /// blocks of `bs` bytes named after it.
    pub fn subsystem(&self, nqn: &str, allow_any: bool, blocks: u64, bs: u32) {
        self.t.subsystem(nqn, allow_any);
        if blocks > 0 {
            let name = format!("m_{}", nqn.rsplit(':').next().unwrap_or("x"));
            self.t.malloc(&name, blocks, bs);
            self.t.add_ns(nqn, &name);
        }
        self.t.listen(nqn, "RDMA", 4420);
    }

    /// Connect options from the host device.
    pub fn opts(&self, nqn: &str) -> ConnectOpts {
        let mut o = ConnectOpts::new(nqn, HOSTNQN);
        o.src = Some(HOST_IP.parse().expect("ip"));
        o
    }

    /// Connects a controller.
    pub fn connect(&self, o: ConnectOpts) -> Result<HostCtrl, HostError> {
        HostCtrl::connect(&self.t.fabric, self.to, o)
    }

    /// The RDMA transport object.
    pub fn transport(&self) -> (usize, std::sync::Arc<dyn target_core::registry::Transport>) {
        self.t.target.transport("RDMA").expect("RDMA transport")
    }

    /// Buffer pool accounting.
    pub fn pools(&self) -> PoolCounts {
        let (_, tr) = self.transport();
        let any: &dyn std::any::Any = &*tr;
        any.downcast_ref::<RdmaTransport>()
            .expect("an RdmaTransport")
            .pool_counts()
    }

    /// Resource counts of every poll group.
    pub fn pg_resources(&self) -> Vec<PgResources> {
        let (idx, _) = self.transport();
        self.t.rt.block_on(self.t.target.gather(move |pg| {
            pg.transport_mut::<RdmaPg>(idx)
                .map(|(p, _)| p.resources())
                .unwrap_or_default()
        }))
    }

    /// Waits until no queue pair is left, every request is free, and every data buffer is back
    /// in the pool or a poll group's cache; fails the test otherwise.
    pub fn assert_quiescent(&self, within: Duration) {
        let deadline = Instant::now() + within;
        loop {
            let pgs = self.pg_resources();
            let p = self.pools();
            let cached_small: usize = pgs.iter().map(|r| r.cached_small).sum();
            let cached_large: usize = pgs.iter().map(|r| r.cached_large).sum();
            let ok = pgs.iter().all(|r| r.qpairs == 0 && r.requests_busy == 0)
                && p.small_free + cached_small == p.small_total
                && p.large_free + cached_large == p.large_total;
            let stats = self.t.rt.block_on(self.t.target.stats());
            let counters_ok = stats["poll_groups"]
                .as_array()
                .expect("groups")
                .iter()
                .all(|g| {
                    g["current_admin_qpairs"] == 0
                        && g["current_io_qpairs"] == 0
                        && g["current_unassociated_qpairs"] == 0
                        && g["pending_bdev_io"] == 0
                });
            if ok && counters_ok {
                // Every receive slot is back with the adapter.
                for r in &pgs {
                    assert_eq!(
                        r.receives, r.receives_posted,
                        "receives not reposted: {r:?}"
                    );
                }
                return;
            }
            assert!(
                Instant::now() < deadline,
                "resources not released: pools {p:?}, poll groups {pgs:?}, stats {stats}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The controllers of a subsystem.
    pub fn controllers(&self, nqn: &str) -> Vec<target_core::target::ControllerInfo> {
        self.t
            .target
            .subsystem(nqn)
            .map(|s| s.controllers())
            .unwrap_or_default()
    }
}
