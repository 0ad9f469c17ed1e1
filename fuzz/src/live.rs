//! In-process targets for the fuzz targets that go through the real runtime: an RPC rig (the
//! daemon's method table over a live target) and NVMe/RDMA and SRP rigs (a target on the
//! simulated fabric with a fuzzed host and an independent witness host whose data is checked
//! after every input).
//!
//! Each rig is created once per fuzzing process and reused across inputs; state an input
//! creates is removed before the next one, so inputs stay independent and memory bounded.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use rpc::methods::TargetContext;
use rpc::{CoreHooks, MethodTable, Methods, RpcState, StateHandle};
use rtgt_tests::TestTarget;
use rtgt_tests::nvme_host::{
    ConnectOpts, HOSTNQN, HostCtrl, HostError, Mode, NvmfEnv, Workload, read_verify, write_all,
};
use rtgt_tests::srp_initiator::{self, BS, Layout, LoginParams, SrpInitiator};
use serde_json::Value;
use target_core::target::{AdrFam, ListenAddr, SubsystemParams};
use transport_srp::proto::PortId;

/// The discovery subsystem every target has.
const DISCOVERY: &str = "nqn.2014-08.org.nvmexpress.discovery";

// ---------------------------------------------------------------------------------------------
// RPC

/// A live target and the daemon's method table (core methods with a harmless kill hook, and
/// every storage method), in the STARTUP or RUNTIME state as an input asks.
pub struct RpcRig {
    /// The target.
    pub tt: TestTarget,
    /// The method table.
    pub table: MethodTable,
    /// Its RPC state.
    pub state: StateHandle,
    /// A file `bdev_aio_create` may use.
    pub aio_file: String,
}

impl RpcRig {
    /// Starts the rig (one reactor).
    pub fn new() -> Self {
        let tt = TestTarget::start(1);
        let state = StateHandle::new(RpcState::Runtime);
        let ctx = Arc::new(TargetContext::new(Arc::clone(&tt.target)));
        let mut m = Methods::from_arc(ctx, state.clone());
        m.register_core(CoreHooks::new().on_kill(|_| {}))
            .expect("core methods");
        rpc::methods::register(&mut m).expect("storage methods");
        let aio_file = format!("/tmp/rtgt-fuzz-aio-{}.img", std::process::id());
        std::fs::write(&aio_file, vec![0u8; 1 << 20]).expect("aio backing file");
        Self {
            tt,
            table: m.build(),
            state,
            aio_file,
        }
    }

    /// Calls `method` with `params` (JSON text), with a deadline: a method that does not
    /// answer within 20 s is a hang (except `framework_wait_init`, which waits by design).
    pub fn call(&self, method: &str, params: Option<&str>) -> Option<Result<Value, rpc::RpcError>> {
        let fut = self.table.call(method, params);
        // framework_wait_init answers only once the framework is initialized: in the STARTUP
        // state it is expected to wait, and waiting 20 s for it made the fuzzer crawl.
        let limit = if method == "framework_wait_init" {
            Duration::from_millis(50)
        } else {
            Duration::from_secs(20)
        };
        let r = self
            .tt
            .rt
            .block_on(async { tokio::time::timeout(limit, fut).await });
        match r {
            Ok(Ok(raw)) => Some(Ok(
                serde_json::from_str(raw.get()).expect("a method result is JSON")
            )),
            Ok(Err(e)) => Some(Err(e)),
            Err(_) if method == "framework_wait_init" => None,
            Err(_) => panic!("{method} did not answer within 20 s (params {params:?})"),
        }
    }

    /// Removes what inputs created: subsystems (but the discovery one), bdevs, keys; puts the
    /// RPC state back to `state`.
    pub fn reset(&self, state: RpcState) {
        let t = &self.tt.target;
        for s in t.subsystems() {
            if s.nqn() != DISCOVERY {
                let _ = self.tt.rt.block_on(t.delete_subsystem(s.nqn()));
            }
        }
        for name in t.bdevs().names() {
            let _ = self.call(
                "bdev_malloc_delete",
                Some(&serde_json::json!({ "name": name }).to_string()),
            );
            let _ = self.call(
                "bdev_null_delete",
                Some(&serde_json::json!({ "name": name }).to_string()),
            );
            let _ = self.call(
                "bdev_aio_delete",
                Some(&serde_json::json!({ "name": name }).to_string()),
            );
        }
        if let Some(Ok(Value::Array(keys))) = self.call("keyring_get_keys", None) {
            for k in keys {
                if let Some(n) = k["name"].as_str() {
                    let _ = self.call(
                        "keyring_file_remove_key",
                        Some(&serde_json::json!({ "name": n }).to_string()),
                    );
                }
            }
        }
        self.state.set(state);
    }

    /// Whether a call would only exercise a legitimate, large resource request (memory an
    /// operator may ask for, files outside the fuzzer's sandbox) rather than decoding: such
    /// calls are skipped so that the fuzzer's memory limit and the host's files stay safe.
    pub fn skip(&self, method: &str, params: &Value) -> bool {
        let num = |k: &str| params.get(k).and_then(Value::as_u64);
        match method {
            "bdev_malloc_create" => {
                let blocks = num("num_blocks").unwrap_or(0);
                let bs = num("block_size").unwrap_or(512).max(512);
                blocks.saturating_mul(bs) > 64 << 20
            }
            "bdev_aio_create" => params
                .get("filename")
                .and_then(Value::as_str)
                .is_some_and(|f| {
                    f != self.aio_file && f != "/nonexistent/rtgt" && f != "/dev/null"
                }),
            "keyring_file_add_key" => params
                .get("path")
                .and_then(Value::as_str)
                .is_some_and(|p| !p.starts_with("/tmp/rtgt-fuzz")),
            "nvmf_create_transport" => {
                let bufs = num("num_shared_buffers").unwrap_or(0);
                let unit = num("io_unit_size").unwrap_or(0).max(128 << 10);
                bufs.saturating_mul(unit) > 512 << 20
                    || [
                        "max_queue_depth",
                        "sq_size",
                        "srq_size",
                        "max_srq_depth",
                        "num_cqe",
                    ]
                    .iter()
                    .any(|k| num(k).unwrap_or(0) > 1 << 16)
            }
            _ => false,
        }
    }
}

impl Default for RpcRig {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for RpcRig {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.aio_file);
    }
}

// ---------------------------------------------------------------------------------------------
// NVMe/RDMA

/// The fuzzed subsystem.
pub const NVMF_FUZZ: &str = "nqn.2016-06.io.rtgt:fuzz";
/// The witness's subsystem.
pub const NVMF_WITNESS: &str = "nqn.2016-06.io.rtgt:witness";
const WITNESS_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";

/// A target with the RDMA transport, a fuzzed controller on one subsystem and a witness
/// controller on another whose data is verified after every input.
pub struct NvmfRig {
    /// The target environment.
    pub env: NvmfEnv,
    /// The fuzzed controller (reconnected whenever an input killed it).
    pub fuzzed: Option<HostCtrl>,
    witness: HostCtrl,
    witness_work: Workload,
    /// CIDs of raw capsules sent on the fuzzed controller's queues and not yet answered (their
    /// completions arrive for no tracked command). Raw CIDs have bit 11 set, which tracked
    /// commands never have (their low bits are a slot index below the queue depth).
    pub raw_sent: Vec<u16>,
    /// Inputs run.
    pub runs: u64,
}

/// The CID bit that marks raw capsules.
pub const RAW_CID: u16 = 0x0800;

impl NvmfRig {
    /// Starts the target and connects both hosts.
    pub fn new() -> Self {
        let env = NvmfEnv::new(1, serde_json::json!({"max_io_size": 131072}));
        env.subsystem(NVMF_FUZZ, true, 8192, 512);
        env.subsystem(NVMF_WITNESS, true, 1024, 512);
        let mut wo = env.opts(NVMF_WITNESS);
        wo.hostnqn = WITNESS_HOST.into();
        wo.io_queues = 1;
        wo.kato_ms = 0;
        let mut witness = env.connect(wo).expect("witness connects");
        let witness_work = Workload {
            nsid: 1,
            bs: 512,
            lba0: 0,
            blocks: 8,
            count: 16,
            qd: 8,
            seed: 77,
        };
        write_all(&mut witness.io[0], &witness_work, Mode::Keyed).expect("witness data");
        Self {
            env,
            fuzzed: None,
            witness,
            witness_work,
            raw_sent: Vec::new(),
            runs: 0,
        }
    }

    /// Connect options of the fuzzed host.
    pub fn fuzz_opts(&self) -> ConnectOpts {
        let mut o = self.env.opts(NVMF_FUZZ);
        o.hostnqn = HOSTNQN.into();
        o.io_queues = 1;
        o.io_depth = 32;
        o
    }

    /// The fuzzed controller, connecting it if needed.
    pub fn fuzzed(&mut self) -> &mut HostCtrl {
        if self.fuzzed.is_none() {
            self.raw_sent.clear();
            let c = self
                .env
                .connect(self.fuzz_opts())
                .unwrap_or_else(|e| panic!("the fuzzed host cannot connect any more: {e}"));
            self.fuzzed = Some(c);
        }
        self.fuzzed.as_mut().expect("connected")
    }

    /// After an input: no completion arrived for a command that was not outstanding, the
    /// witness reads its data back intact, and the fuzzed host can still connect and do I/O.
    pub fn check(&mut self) {
        self.runs += 1;
        if let Some(c) = &mut self.fuzzed {
            for q in std::iter::once(&mut c.admin).chain(c.io.iter_mut()) {
                for cqe in q.stray.drain(..) {
                    // A raw capsule's completion, once per capsule; anything else is a
                    // completion for a command that was not outstanding.
                    let i = self.raw_sent.iter().position(|&r| r == cqe.cid);
                    match i {
                        Some(i) if cqe.cid & RAW_CID != 0 => {
                            self.raw_sent.swap_remove(i);
                        }
                        _ => panic!("a completion for no outstanding command: {cqe:?}"),
                    }
                }
            }
        }
        read_verify(&mut self.witness.io[0], &self.witness_work, false)
            .unwrap_or_else(|e| panic!("witness lost its data or its connection: {e}"));
        assert!(self.witness.admin.stray.is_empty() && self.witness.io[0].stray.is_empty());
        // Now and then, prove the fuzzed subsystem still serves a well-behaved host.
        if self.runs.is_multiple_of(64) {
            self.fuzzed = None;
            let c = self.fuzzed();
            let w = Workload {
                nsid: 1,
                bs: 512,
                lba0: 4096,
                blocks: 8,
                count: 4,
                qd: 4,
                seed: 5,
            };
            rtgt_tests::nvme_host::write_read_verify(&mut c.io[0], &w, Mode::InCapsule)
                .unwrap_or_else(|e| panic!("a fresh host cannot do verified I/O: {e}"));
        }
    }
}

impl Default for NvmfRig {
    fn default() -> Self {
        Self::new()
    }
}

/// Whether a host error means the connection is gone (reconnect) rather than a command error.
pub fn connection_lost(e: &HostError) -> bool {
    !matches!(e, HostError::Nvme(_) | HostError::Full)
}

// ---------------------------------------------------------------------------------------------
// SRP

/// A target with the SRP transport: the fixture's subsystem for the fuzzed initiator, and a
/// second subsystem (another target port) for the witness.
pub struct SrpRig {
    /// The fixture (fuzzed initiator's target port).
    pub fx: srp_initiator::SrpFixture,
    /// The fuzzed initiator (logged in again whenever an input killed its channel).
    pub fuzzed: Option<SrpInitiator>,
    witness: SrpInitiator,
    witness_data: Vec<u8>,
    /// Inputs run.
    pub runs: u64,
}

/// The fuzzed initiator's port GUID.
pub const SRP_FUZZ_INITIATOR: u64 = 0x5254_0012_3456_7890;

impl SrpRig {
    /// Starts the target and logs both initiators in.
    pub fn new() -> Self {
        let fx = srp_initiator::SrpFixture::new(1, serde_json::json!({}), 2, 4096);
        let nqn = "nqn.2016-06.io.rtgt:srpwitness";
        let mut p = SubsystemParams::new(nqn);
        p.allow_any_host = true;
        transport_srp::port_id::set_target_port_id(
            &mut p.transport_attrs,
            (0x0002_c903_00ff_0001, 0x0002_c903_00ff_0001),
        );
        fx.t.rt
            .block_on(fx.t.target.create_subsystem(p))
            .expect("witness subsystem");
        fx.t.malloc("Witness0", 1024, BS);
        fx.t.add_ns(nqn, "Witness0");
        let addr = ListenAddr::new(
            "SRP",
            AdrFam::Ipv4,
            rtgt_tests::TARGET_IP,
            &fx.addr.port().to_string(),
        );
        fx.t.rt
            .block_on(fx.t.target.add_listener(nqn, addr))
            .expect("witness listener");
        let mut wp = fx.params(0x77);
        wp.target = PortId::from_halves(0x0002_c903_00ff_0001, 0x0002_c903_00ff_0001);
        let mut witness = fx.login_with(&wp).expect("witness logs in");
        let witness_data = srp_initiator::pattern(99, 8 * BS as usize);
        let r = witness
            .write(0, 0, BS, 0, &witness_data, Layout::Direct)
            .expect("witness write");
        assert_eq!(r.status, 0);
        Self {
            fx,
            fuzzed: None,
            witness,
            witness_data,
            runs: 0,
        }
    }

    /// Login parameters of the fuzzed initiator.
    pub fn fuzz_params(&self) -> LoginParams {
        let mut p = self.fx.params(SRP_FUZZ_INITIATOR);
        p.send_slots = 64;
        p
    }

    /// The fuzzed initiator, logging it in if needed.
    pub fn fuzzed(&mut self) -> &mut SrpInitiator {
        if self.fuzzed.is_none() {
            let p = self.fuzz_params();
            let i = self
                .fx
                .login_with(&p)
                .unwrap_or_else(|e| panic!("the fuzzed initiator cannot log in any more: {e:?}"));
            self.fuzzed = Some(i);
        }
        self.fuzzed.as_mut().expect("logged in")
    }

    /// After an input: the witness reads its data back intact (a fresh read into a poisoned
    /// buffer), and now and then the fuzzed port serves a fresh login.
    pub fn check(&mut self) {
        self.runs += 1;
        self.witness.mem()[8192..8192 + 4096].fill(0xE5);
        let (r, d) = self
            .witness
            .read(0, 0, BS, 8, 8192, Layout::Direct)
            .unwrap_or_else(|e| panic!("witness read failed: {e}"));
        assert_eq!(r.status, 0, "witness read: {r:?}");
        assert!(d == self.witness_data, "witness data corrupted");
        if self.runs.is_multiple_of(64) {
            self.fuzzed = None;
            let d = srp_initiator::pattern(self.runs, 4096);
            let i = self.fuzzed();
            let r = i
                .write(0, 100, BS, 0, &d, Layout::Direct)
                .expect("fresh write");
            assert_eq!(r.status, 0);
            let (r, back) = i
                .read(0, 100, BS, 8, 65536, Layout::Direct)
                .expect("fresh read");
            assert_eq!(r.status, 0);
            assert!(back == d, "a fresh initiator read back other data");
        }
    }

    /// The target's address.
    pub fn addr(&self) -> SocketAddr {
        self.fx.addr
    }
}

impl Default for SrpRig {
    fn default() -> Self {
        Self::new()
    }
}
