//! Host access control on both transports: allow lists enforced at connect and login (host
//! NQNs compared byte for byte), `allow_any_host false` (new connections from hosts not on the
//! list are refused, established ones stay, as in SPDK), the discovery log following the
//! list, and host removal re-checking access and disconnecting what is no longer allowed.

use std::time::Duration;

use rtgt_tests::nvme_host::*;
use rtgt_tests::srp_initiator::{BS, Layout, SrpFixture};
use serde_json::json;
use target_core::nvme::{DISCOVERY_NQN, Status};

const NQN: &str = "nqn.2016-06.io.rtgt:acl";
const OTHER: &str = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-3333-4444-555555555555";
const WAIT: Duration = Duration::from_secs(10);

fn cstr(b: &[u8]) -> String {
    let n = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..n]).into_owned()
}

/// The subsystems the discovery log lists for `host`.
fn discovered(e: &NvmfEnv, host: &str) -> Vec<String> {
    let mut o = e.opts(DISCOVERY_NQN);
    o.hostnqn = host.into();
    o.io_queues = 0;
    let mut d = e.connect(o).expect("discovery connect");
    let hdr = d.get_log(0x70, 0, 0, 20, true).expect("log header");
    let n = u64::from_le_bytes(hdr[8..16].try_into().unwrap()) as usize;
    let entries = d.get_log(0x70, 0, 1024, 4096, false).expect("log");
    d.shutdown().expect("shutdown");
    (0..n.min(4))
        .map(|i| cstr(&entries[i * 1024 + 256..i * 1024 + 512]))
        .collect()
}

fn refused(r: Result<HostCtrl, HostError>) {
    match r {
        Err(HostError::Nvme(c)) => assert_eq!(c.status, Status::CONNECT_INVALID_HOST),
        Err(e) => panic!("refused the wrong way: {e}"),
        Ok(_) => panic!("connected"),
    }
}

fn with_host(e: &NvmfEnv, host: &str) -> ConnectOpts {
    let mut o = e.opts(NQN);
    o.hostnqn = host.into();
    o.io_queues = 1;
    o
}

fn verified_io(c: &mut HostCtrl, seed: u32) {
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: u64::from(seed % 8) * 64,
        blocks: 8,
        count: 4,
        qd: 4,
        seed,
    };
    write_read_verify(&mut c.io[0], &w, Mode::KeyedInvalidate).expect("verified I/O");
}

#[test]
fn host_nqns_are_compared_byte_for_byte() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(NQN, false, 1024, 512);
    e.t.target.add_host(NQN, HOSTNQN).unwrap();
    // Same NQN in another case, or with something appended: not the allowed host.
    let upper = HOSTNQN.to_uppercase().replace("NQN.", "nqn.");
    let suffixed = format!("{HOSTNQN}x");
    for h in [upper.as_str(), suffixed.as_str()] {
        refused(e.connect(with_host(&e, h)));
        assert!(discovered(&e, h).is_empty(), "{h} discovers the subsystem");
    }
    assert_eq!(discovered(&e, HOSTNQN), [NQN]);
    let mut c = e.connect(with_host(&e, HOSTNQN)).expect("the allowed host");
    verified_io(&mut c, 1);
    // Both spellings are distinct entries; removing the other spelling does not remove (or
    // disconnect) the allowed host.
    e.t.target.add_host(NQN, &upper).expect("another host");
    e.t.rt
        .block_on(e.t.target.remove_host(NQN, &upper))
        .expect("remove the other spelling");
    assert!(
        e.t.rt
            .block_on(e.t.target.remove_host(NQN, &upper))
            .is_err(),
        "removed twice"
    );
    std::thread::sleep(Duration::from_millis(50));
    assert!(!c.admin.is_disconnected());
    verified_io(&mut c, 2);
    assert_eq!(e.controllers(NQN).len(), 1);
    c.shutdown().expect("shutdown");
    e.assert_quiescent(WAIT);
}

#[test]
fn allow_any_host_off_refuses_new_hosts_and_removal_disconnects() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem(NQN, true, 1024, 512);
    e.t.target.add_host(NQN, OTHER).unwrap();
    // HOSTNQN is not on the list; it gets in while any host may.
    let mut a = e.connect(with_host(&e, HOSTNQN)).expect("any host");
    let mut b = e.connect(with_host(&e, OTHER)).expect("listed host");
    assert_eq!(discovered(&e, HOSTNQN), [NQN]);
    e.t.rt
        .block_on(e.t.target.allow_any_host(NQN, false))
        .unwrap();
    // Established connections stay (SPDK does the same); new ones are refused, and the
    // discovery log no longer shows the subsystem to that host.
    verified_io(&mut a, 3);
    refused(e.connect(with_host(&e, HOSTNQN)));
    assert!(discovered(&e, HOSTNQN).is_empty());
    assert_eq!(discovered(&e, OTHER), [NQN]);
    // Listed: connects again.
    e.t.target.add_host(NQN, HOSTNQN).unwrap();
    let mut a2 = e.connect(with_host(&e, HOSTNQN)).expect("now listed");
    verified_io(&mut a2, 4);
    // Removed: every controller of that host goes (both associations), the other host stays.
    e.t.rt
        .block_on(e.t.target.remove_host(NQN, HOSTNQN))
        .unwrap();
    for c in [&mut a, &mut a2] {
        assert!(c.admin.wait_disconnected(WAIT));
        for q in &mut c.io {
            assert!(q.wait_disconnected(WAIT));
        }
    }
    verified_io(&mut b, 5);
    assert_eq!(e.controllers(NQN).len(), 1);
    assert_eq!(e.controllers(NQN)[0].hostnqn, OTHER);
    refused(e.connect(with_host(&e, HOSTNQN)));
    // With any host allowed again, removing a host re-checks access: it still may, so its
    // controller stays.
    e.t.rt
        .block_on(e.t.target.allow_any_host(NQN, true))
        .unwrap();
    e.t.rt.block_on(e.t.target.remove_host(NQN, OTHER)).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    verified_io(&mut b, 6);
    drop((a, a2));
    b.shutdown().expect("shutdown");
    e.assert_quiescent(WAIT);
}

const INI: u64 = 0x5254_0012_3456_7890;

#[test]
fn srp_initiator_allow_lists() {
    let fx = SrpFixture::new(2, json!({}), 1, 1024);
    let nqn = fx.nqn.clone();
    let rt = &fx.t.rt;
    // Logged in while any initiator may.
    let mut x = fx.login(INI);
    let mut y = fx.login(INI + 1);
    rt.block_on(fx.t.target.allow_any_host(&nqn, false))
        .unwrap();
    // Established channels stay; new logins of unlisted initiators get "channel limit
    // reached" (0x10006, what ib_srpt answers without an ACL entry).
    assert_eq!(x.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
    let r = fx.login_with(&fx.params(INI + 2));
    assert_eq!(r.err().and_then(|e| e.reason()), Some(0x10006));
    // An initiator listed under two spellings (port id and GUID form) keeps its channel when
    // one goes, and loses it when the last one goes; the other initiator is not touched.
    let t = &fx.t.target;
    t.add_host(&nqn, "0x00000000000000005254001234567890")
        .unwrap();
    t.add_host(&nqn, "5254:0012:3456:7890").unwrap();
    t.add_host(&nqn, "0x00000000000000005254001234567891")
        .unwrap();
    rt.block_on(t.remove_host(&nqn, "0x00000000000000005254001234567890"))
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    assert!(!x.wait_disconnected(Duration::from_millis(50)));
    assert_eq!(x.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
    rt.block_on(t.remove_host(&nqn, "5254:0012:3456:7890"))
        .unwrap();
    assert!(
        x.wait_disconnected(WAIT),
        "the unlisted initiator kept its channel"
    );
    assert_eq!(y.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
    let r = fx.login_with(&fx.params(INI));
    assert_eq!(r.err().and_then(|e| e.reason()), Some(0x10006));
    // Listed again: logs in.
    t.add_host(&nqn, "5254:0012:3456:7890").unwrap();
    let mut x = fx.login(INI);
    assert_eq!(x.read(0, 0, BS, 1, 0, Layout::Direct).unwrap().0.status, 0);
    drop((x, y));
    fx.wait_until("channels released", |f| f.qpairs().is_empty());
}
