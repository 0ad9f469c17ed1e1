//! Shared helpers for rtgt's cross-crate tests: an in-process target on the simulated fabric,
//! and (in their own modules) test initiators.

use std::net::IpAddr;
use std::sync::Arc;

pub mod nvme_cmds;
pub mod nvme_host;

use fabric::{Fabric, Provider, SimNetwork};
use serde_json::Value;
use target_core::bdev::{Bdev, MallocBdev, MallocParams, NullBdev, NullParams};
use target_core::reactor::{ReactorConfig, Reactors};
use target_core::registry::TransportParams;
use target_core::target::{AdrFam, ListenAddr, NsParams, SubsystemParams, Target};

pub mod ceph;
pub mod daemon;
pub mod dhchap_env;
pub mod faults;
pub mod gate;
pub mod rpc_rig;
pub mod srp_initiator;
pub mod tcp_host;

// The daemon links every transport; so do the tests.
use transport_rdma as _;
use transport_srp as _;
use transport_tcp as _;

/// The address of the target's simulated RDMA device.
pub const TARGET_IP: &str = "10.0.0.1";
/// The address of the initiators' simulated RDMA device.
pub const HOST_IP: &str = "10.0.0.2";

/// A target running in this process on its own simulated network, with a second simulated
/// device for test initiators. Dropping it shuts the target down and stops its reactors.
pub struct TestTarget {
    /// A runtime to drive the target's async management calls.
    pub rt: tokio::runtime::Runtime,
    /// The target.
    pub target: Arc<Target>,
    /// The simulated network (for fault hooks).
    pub net: SimNetwork,
    /// The fabric initiators open on the same network.
    pub fabric: Fabric,
}

impl TestTarget {
    /// Starts a target with `reactors` reactors on a fresh simulated network.
    pub fn start(reactors: usize) -> Self {
        Self::start_with(ReactorConfig::with_count(reactors))
    }

    /// Starts a target with the given reactor configuration on a fresh simulated network.
    pub fn start_with(config: ReactorConfig) -> Self {
        let net = SimNetwork::new();
        net.add_device("sim_tgt", TARGET_IP.parse::<IpAddr>().expect("ip"))
            .expect("target device");
        net.add_device("sim_host", HOST_IP.parse::<IpAddr>().expect("ip"))
            .expect("host device");
        Self::start_on(net, config)
    }

    /// Starts a target on `net`, which has devices at [`TARGET_IP`] and [`HOST_IP`] (a test
    /// gives the target's device other limits with [`SimNetwork::add_device_with_attr`]).
    pub fn start_on(net: SimNetwork, config: ReactorConfig) -> Self {
        let r = Reactors::start(config).expect("reactors");
        let target = Target::start(
            r,
            target_core::bdev::BdevRegistry::new(),
            target_core::registry::TransportEnv::new().with(Provider::Sim(net.clone())),
        )
        .expect("target");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let fabric = Fabric::sim(&net);
        Self {
            rt,
            target,
            net,
            fabric,
        }
    }

    /// Creates a transport (`RDMA`, `SRP`) with options given as a JSON object.
    pub fn transport(&self, name: &str, params: Value) {
        let params: TransportParams = match params {
            Value::Object(m) => m,
            _ => TransportParams::new(),
        };
        self.rt
            .block_on(self.target.create_transport(name, &params))
            .expect("create transport");
    }

    /// Registers a malloc bdev.
    pub fn malloc(&self, name: &str, num_blocks: u64, block_size: u32) -> Arc<dyn Bdev> {
        let b = malloc_bdev(name, num_blocks, block_size);
        self.target
            .bdevs()
            .register(Arc::clone(&b))
            .expect("register");
        b
    }

    /// Registers a malloc bdev behind a gate (I/O parks while the gate is closed); returns the
    /// gate.
    pub fn gated(&self, name: &str, num_blocks: u64, block_size: u32) -> Arc<gate::Gate> {
        let inner = malloc_bdev(&format!("{name}_inner"), num_blocks, block_size);
        let (b, gate) = gate::GateBdev::new(name, inner);
        self.target.bdevs().register(b).expect("register");
        gate
    }

    /// Registers a null bdev.
    pub fn null(&self, name: &str, num_blocks: u64, block_size: u32) -> Arc<dyn Bdev> {
        let b: Arc<dyn Bdev> = NullBdev::create(NullParams {
            name: name.into(),
            num_blocks,
            block_size,
            physical_block_size: 0,
            uuid: None,
        })
        .expect("null");
        self.target
            .bdevs()
            .register(Arc::clone(&b))
            .expect("register");
        b
    }

    /// Creates a subsystem.
    pub fn subsystem(&self, nqn: &str, allow_any_host: bool) {
        let mut p = SubsystemParams::new(nqn);
        p.allow_any_host = allow_any_host;
        self.rt
            .block_on(self.target.create_subsystem(p))
            .expect("create subsystem");
    }

    /// Exports a bdev as the next free namespace; returns the NSID.
    pub fn add_ns(&self, nqn: &str, bdev: &str) -> u32 {
        self.rt
            .block_on(self.target.add_namespace(
                nqn,
                NsParams {
                    bdev_name: bdev.into(),
                    ..NsParams::default()
                },
            ))
            .expect("add namespace")
    }

    /// Adds a listener on the target's simulated device.
    pub fn listen(&self, nqn: &str, trtype: &str, port: u16) -> ListenAddr {
        let addr = ListenAddr::new(trtype, AdrFam::Ipv4, TARGET_IP, &port.to_string());
        self.rt
            .block_on(self.target.add_listener(nqn, addr.clone()))
            .expect("add listener");
        addr
    }
}

/// A malloc bdev, not registered.
fn malloc_bdev(name: &str, num_blocks: u64, block_size: u32) -> Arc<dyn Bdev> {
    MallocBdev::create(MallocParams {
        name: name.into(),
        num_blocks,
        block_size,
        physical_block_size: 0,
        uuid: None,
        optimal_io_boundary: 0,
    })
    .expect("malloc")
}

impl Drop for TestTarget {
    fn drop(&mut self) {
        self.rt.block_on(self.target.shutdown());
        self.target.reactors().stop();
    }
}
