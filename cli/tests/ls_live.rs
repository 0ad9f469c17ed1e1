//! `ls` with hosts connected: an in-process target on the simulated fabric serves JSON-RPC on
//! a temporary socket while the test NVMe host and the test SRP initiator are connected, and
//! the shell draws their controllers (SRP: sessions) and queue pairs (SRP: channels).

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rpc::methods::TargetContext;
use rpc::{CoreHooks, Methods, RpcState, StateHandle, UnixOptions};
use rtgt::client::Endpoint;
use rtgt::exec::Conn;
use rtgt::shell::{Next, Shell};
use rtgt_tests::nvme_host::{HOSTNQN, NvmfEnv};
use rtgt_tests::srp_initiator::SrpFixture;
use serde_json::json;
use target_core::target::Target;

const NQN: &str = "nqn.2016-06.io.spdk:live1";

/// Serves the target's methods on `sock` from a thread of its own until the sender drops.
fn serve(target: &Arc<Target>, sock: &Path) -> std::sync::mpsc::Sender<()> {
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let target = Arc::clone(target);
    let sock = sock.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let state = StateHandle::new(RpcState::Runtime);
            let mut m = Methods::from_arc(Arc::new(TargetContext::new(target)), state);
            m.register_core(CoreHooks::new()).expect("core");
            rpc::methods::register(&mut m).expect("methods");
            let h = rpc::serve_unix(m.build(), &sock, UnixOptions::default())
                .await
                .expect("serve");
            ready_tx.send(()).expect("ready");
            // Wait for the test to finish without blocking the runtime's thread for good.
            while let Err(std::sync::mpsc::TryRecvError::Empty) = stop_rx.try_recv() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            h.shutdown().await;
        });
    });
    ready_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("RPC server up");
    stop_tx
}

fn ls(sock: PathBuf, what: &str) -> String {
    let sh = Shell::new(Conn {
        endpoint: Endpoint::Unix(sock),
        timeout: Duration::from_secs(30),
        retries: 0,
    });
    let (mut out, mut err) = (Vec::new(), Vec::new());
    assert_eq!(
        sh.execute(&format!("ls {what}"), &mut out, &mut err),
        Next::Continue { ok: true },
        "{}",
        String::from_utf8_lossy(&err)
    );
    String::from_utf8(out).expect("utf-8")
}

#[test]
fn ls_shows_nvme_controllers_and_their_queue_pairs() {
    let env = NvmfEnv::new(2, json!({}));
    env.subsystem(NQN, true, 1024, 512);
    let ctrl = env.connect(env.opts(NQN)).expect("connect");
    let dir = common::temp_dir("ls-nvme");
    let sock = dir.join("rpc.sock");
    let stop = serve(&env.t.target, &sock);

    let tree = ls(sock.clone(), NQN);
    let ctrl_line = format!("controller 1  io  host {HOSTNQN}  2 I/O qpairs");
    assert!(tree.contains(&ctrl_line), "{tree}");
    for qid in 0..3 {
        let q = format!("qpair {qid}  active  from 10.0.0.2:");
        assert!(tree.contains(&q), "no {q:?} in\n{tree}");
    }
    assert!(tree.contains("connections  (1)"));
    assert!(tree.contains("RDMA  IPv4  10.0.0.1:4420"));

    // After the host leaves, the connections are gone.
    ctrl.shutdown().expect("shutdown");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let tree = ls(sock.clone(), NQN);
        if tree.contains("connections  (none)") {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still connected:\n{tree}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(stop);
}

#[test]
fn ls_shows_srp_sessions_and_channels() {
    let fx = SrpFixture::new(2, json!({}), 1, 1024);
    let ini = fx.login(0x5254_0012_3456_7890);
    let dir = common::temp_dir("ls-srp");
    let sock = dir.join("rpc.sock");
    let stop = serve(&fx.t.target, &sock);

    let tree = ls(sock, &fx.nqn);
    assert!(
        tree.contains("session ") && tree.contains("initiator 0x00000000000000005254001234567890"),
        "{tree}"
    );
    assert!(tree.contains("└── channel "), "{tree}");
    assert!(tree.contains("SRP  IPv4  10.0.0.1:"), "{tree}");
    drop(ini);
    drop(stop);
}
