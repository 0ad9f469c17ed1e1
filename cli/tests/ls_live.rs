//! `ls` with hosts connected: an in-process target on the simulated fabric serves JSON-RPC on
//! a temporary socket while the test NVMe host and the test SRP initiator are connected, and
//! the shell draws their controllers (SRP: sessions) and queue pairs (SRP: channels).

mod common;

use std::path::PathBuf;
use std::time::Duration;

use rtgt::client::Endpoint;
use rtgt::exec::Conn;
use rtgt::shell::{Next, Shell};
use rtgt_tests::nvme_host::{HOSTNQN, NvmfEnv};
use rtgt_tests::srp_initiator::SrpFixture;
use serde_json::json;

const NQN: &str = "nqn.2016-06.io.spdk:live1";

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
    let stop = common::serve_target(&env.t.target, &sock);

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
    let stop = common::serve_target(&fx.t.target, &sock);

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
