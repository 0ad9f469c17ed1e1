//! Device-scoped registration faults of the sim provider: a test fails one chosen registration
//! of one device (a target's) without its initiators' registrations consuming the fault.

use std::net::{IpAddr, Ipv4Addr};

use fabric::mem::IoBuf;
use fabric::{Access, FabricError, FaultCounts, SimNetwork};

#[test]
fn a_registration_fault_hits_the_chosen_registration_of_its_device_only() {
    let net = SimNetwork::new();
    let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let da = net.add_device("a", a).expect("device a");
    let db = net.add_device("b", b).expect("device b");
    let (pa, pb) = (da.alloc_pd().expect("pd"), db.alloc_pd().expect("pd"));
    let io = IoBuf::alloc(4096).expect("alloc");
    net.faults().fail_registration_on(a, 2);
    // Device b is not affected, however often it registers.
    for _ in 0..4 {
        pb.register(io.region(), Access::LOCAL_WRITE)
            .expect("b registers");
    }
    // On a: two succeed, the third fails, then it works again.
    let _m1 = pa.register(io.region(), Access::LOCAL_WRITE).expect("1st");
    let _m2 = pa.register(io.region(), Access::LOCAL_WRITE).expect("2nd");
    let e = pa.register(io.region(), Access::LOCAL_WRITE).unwrap_err();
    assert!(matches!(e, FabricError::InjectedFault(_)), "{e}");
    pa.register(io.region(), Access::LOCAL_WRITE)
        .expect("the fault fired once");
    assert_eq!(
        net.faults().fired(),
        FaultCounts {
            registrations_failed: 1,
            ..Default::default()
        }
    );
    assert_eq!(net.faults().pending(), 0);
}
