//! Fixed NVMe objects for the sans-I/O targets: a Linux-style admin Connect, namespaces and a
//! discovery log.

use std::time::Instant;

use target_core::nvme::discovery::adrfam;
use target_core::nvme::fabrics::build;
use target_core::nvme::{
    Connect, Controller, DiscoveryEntry, NamespaceView, SglDescriptor, SubsystemKind,
    TransportLimits, parse_connect,
};

/// The subsystem NQN of the fixed objects.
pub const SUBNQN: &str = "nqn.2016-06.io.spdk:cnode1";
/// Linux's default host NQN form.
pub const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4b10-8044-b3c04f4e4433";

/// An admin Connect as Linux sends it (qid 0, SQSIZE 31, KATO 5000, dynamic controller id).
pub fn linux_admin_connect() -> Connect {
    let sqe = build::connect_sqe(
        0,
        0,
        31,
        5000,
        SglDescriptor::keyed(0x1000, 1024, 0x42, true),
    );
    let data = build::connect_data([7; 16], 0xFFFF, SUBNQN, HOSTNQN);
    parse_connect(&sqe, &data).expect("the fixed Connect parses")
}

/// A controller connected the way Linux connects, NVM or discovery, optionally enabled.
pub fn controller(kind: SubsystemKind, limits: TransportLimits) -> Controller {
    Controller::new(1, &linux_admin_connect(), kind, limits, Instant::now())
}

/// Namespaces with varied capabilities: 512-byte and 4 KiB blocks, thin, read-only, cached.
pub fn namespaces() -> Vec<NamespaceView> {
    let mut a = NamespaceView::new(1, 512, 2048);
    a.supports_unmap = true;
    a.supports_write_zeroes = true;
    a.volatile_write_cache = true;
    let mut b = NamespaceView::new(2, 4096, 1 << 20);
    b.read_only = true;
    let c = NamespaceView::new(5, 512, u64::MAX / 512);
    vec![a, b, c]
}

/// Discovery entries for two subsystems.
pub fn discovery_entries() -> [DiscoveryEntry<'static>; 2] {
    [
        DiscoveryEntry::nvme_rdma(SUBNQN, adrfam::IPV4, "10.0.0.1", "4420", 1),
        DiscoveryEntry::nvme_rdma(
            "nqn.2016-06.io.spdk:cnode2",
            adrfam::IPV6,
            "fe80::1",
            "4421",
            2,
        ),
    ]
}
