//! Namespace masking (SPDK's `no_auto_visible` with `nvmf_ns_add_host` / `nvmf_ns_remove_host`)
//! seen by two NVMe/RDMA hosts on the sim fabric: a hidden namespace is absent from the host's
//! active namespace list, Identify Namespace answers zeroes, I/O gets Invalid Namespace or
//! Format; showing or hiding it while the host is connected raises a Namespace Attribute
//! Changed notice whose Changed Namespace List names it.

use std::time::Duration;

use rtgt_tests::nvme_host::*;
use serde_json::json;
use target_core::nvme::Status;
use target_core::target::NsParams;

const A: &str = "nqn.2016-06.io.rtgt:masked";
const OTHER_HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:99999999-2222-3333-4444-555555555555";

fn active_nsids(c: &mut HostCtrl) -> Vec<u32> {
    nsid_list(&c.identify(2, 0).expect("active namespace list"))
}

fn read_status(c: &mut HostCtrl, nsid: u32) -> Status {
    c.read_status(nsid)
}

fn enable_ns_notices(c: &mut HostCtrl) -> u16 {
    c.park_aer(1 << 8)
}

fn changed_list(c: &mut HostCtrl) -> Vec<u32> {
    nsid_list(&c.get_log(0x04, 0xFFFF_FFFF, 0, 4096, false).unwrap())
}

#[test]
fn a_hidden_namespace_is_inactive_for_hosts_it_was_not_added_to() {
    let e = NvmfEnv::new(2, json!({}));
    // Namespace 1 is visible to all; namespace 2 only to the hosts added to it.
    e.subsystem(A, true, 1024, 512);
    e.t.malloc("hidden", 1024, 512);
    let add = |name: &str, hidden: bool| {
        e.t.rt
            .block_on(e.t.target.add_namespace(
                A,
                NsParams {
                    bdev_name: name.into(),
                    no_auto_visible: hidden,
                    ..Default::default()
                },
            ))
            .unwrap()
    };
    let nsid = add("hidden", true);
    assert_eq!(nsid, 2);
    let set = |host: &str, visible: bool| {
        e.t.rt
            .block_on(e.t.target.set_ns_host_visible(A, nsid, host, visible))
    };

    let mut me = e.connect(e.opts(A)).unwrap();
    let mut other = {
        let mut o = e.opts(A);
        o.hostnqn = OTHER_HOST.into();
        e.connect(o).unwrap()
    };
    for c in [&mut me, &mut other] {
        assert_eq!(active_nsids(c), [1], "only the auto-visible namespace");
        assert!(
            c.identify(0, nsid).unwrap().iter().all(|&b| b == 0),
            "Identify Namespace of a hidden namespace: zeroes"
        );
        assert_eq!(read_status(c, nsid), Status::INVALID_NAMESPACE);
        assert_eq!(read_status(c, 1), Status::SUCCESS);
    }

    // Shown to this host while it is connected: a notice, then the namespace is there for it
    // (and still not for the other host).
    let aer = enable_ns_notices(&mut me);
    let other_aer = enable_ns_notices(&mut other);
    set(HOSTNQN, true).unwrap();
    let done = me.admin.wait(aer).unwrap().ok().unwrap();
    assert_eq!(done.cqe.dw0, 0x0004_0002, "Namespace Attribute Changed");
    assert_eq!(changed_list(&mut me), [nsid]);
    assert_eq!(active_nsids(&mut me), [1, nsid]);
    let id = me.identify(0, nsid).unwrap();
    assert_eq!(
        u64::from_le_bytes(id[0..8].try_into().unwrap()),
        1024,
        "NSZE"
    );
    let w = Workload {
        nsid,
        bs: 512,
        lba0: 0,
        blocks: 1,
        count: 8,
        qd: 4,
        seed: 3,
    };
    write_read_verify(&mut me.io[0], &w, Mode::KeyedInvalidate).unwrap();
    assert_eq!(active_nsids(&mut other), [1]);
    assert_eq!(read_status(&mut other, nsid), Status::INVALID_NAMESPACE);
    // Every controller of the subsystem hears that the namespace changed (a host that sees no
    // difference rescans and finds none, as with SPDK's notices); what the other host sees is
    // unchanged.
    assert_eq!(other.admin.wait(other_aer).unwrap().cqe.dw0, 0x0004_0002);
    assert_eq!(changed_list(&mut other), [nsid]);
    assert_eq!(active_nsids(&mut other), [1]);

    // Adding the same host again changes nothing.
    set(HOSTNQN, true).unwrap();
    assert_eq!(active_nsids(&mut me), [1, nsid]);

    // Hidden again: a notice, and it is gone for this host.
    let aer = enable_ns_notices(&mut me);
    set(HOSTNQN, false).unwrap();
    assert_eq!(me.admin.wait(aer).unwrap().cqe.dw0, 0x0004_0002);
    assert_eq!(changed_list(&mut me), [nsid]);
    assert_eq!(active_nsids(&mut me), [1]);
    assert_eq!(read_status(&mut me, nsid), Status::INVALID_NAMESPACE);

    me.shutdown().unwrap();
    other.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn per_host_visibility_needs_a_namespace_added_with_no_auto_visible() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(A, true, 1024, 512);
    let set = |nsid: u32, host: &str| {
        e.t.rt
            .block_on(e.t.target.set_ns_host_visible(A, nsid, host, true))
    };
    let err = set(1, HOSTNQN).unwrap_err().to_string();
    assert!(err.contains("no_auto_visible"), "{err}");
    let err = set(7, HOSTNQN).unwrap_err().to_string();
    assert!(err.contains("Namespace 7 not found"), "{err}");
    let err = set(1, "").unwrap_err().to_string();
    assert!(err.contains("invalid host"), "{err}");
    // Nothing changed: every host still sees namespace 1.
    let mut c = e.connect(e.opts(A)).unwrap();
    assert_eq!(active_nsids(&mut c), [1]);
    c.shutdown().unwrap();
}
