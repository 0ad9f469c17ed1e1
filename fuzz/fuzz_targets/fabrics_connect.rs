//! Fabrics Connect: the 64-byte command and its 1024 bytes of data, as the exec layer checks
//! them (parse, allow list, admin checks, then a controller and I/O queue connects on it).
//!
//! Input: `[64-byte Connect SQE][1024 bytes of data][selector]`, optionally followed by more
//! `[SQE][data]` records that are I/O-queue Connects for the controller the first one made.
//! Properties: nothing panics; parsed NQNs are what the data field holds up to its NUL and
//! compare byte-exact; an accepted admin Connect leads to a controller whose I/O queues are
//! refused exactly when they do not match it (host, controller id, queue id, size).
#![no_main]
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::{Bytes, nvme};
use target_core::nvme::fabrics::build;
use target_core::nvme::spec::CNTLID_DYNAMIC;
use target_core::nvme::{
    Controller, Nqn, Sqe, SubsystemKind, SubsystemView, TransportLimits, check_admin_connect,
    host_allowed, parse_connect,
};

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let sqe = Sqe(b.array::<64>());
    let cdata = b.take(1024);
    let sel = b.u8();
    let limits = TransportLimits {
        max_admin_queue_depth: u16::from(sel & 0x3F) + 2,
        max_io_queues: u16::from(sel >> 4) + 1,
        ..TransportLimits::default()
    };
    let Ok(c) = parse_connect(&sqe, cdata) else {
        return;
    };
    // The NQNs are the field contents up to the first NUL.
    for (off, nqn) in [(256usize, &c.data.subnqn), (512, &c.data.hostnqn)] {
        let field = &cdata[off..off + 256];
        let end = field.iter().position(|&x| x == 0).expect("NUL-terminated");
        assert_eq!(nqn.as_bytes(), &field[..end]);
        assert_eq!(Nqn::new(nqn.as_str()).as_ref(), Ok(nqn));
    }
    let allowed = [nvme::HOSTNQN, "nqn.2014-08.org.nvmexpress:uuid:"];
    assert_eq!(
        host_allowed(false, allowed, &c.data.hostnqn),
        allowed.contains(&c.data.hostnqn.as_str())
    );
    assert!(host_allowed(true, [], &c.data.hostnqn));
    if check_admin_connect(&c, &limits).is_err() {
        return;
    }
    assert!(c.is_admin() && c.cmd.sqsize > 0 && c.data.cntlid == CNTLID_DYNAMIC);
    let kind = if sel & 0x40 != 0 {
        SubsystemKind::Discovery
    } else {
        SubsystemKind::Nvm
    };
    let now = Instant::now();
    let mut ctrl = Controller::new(0x11, &c, kind, limits, now);
    let _ = c.success_cqe(&sqe, ctrl.connect_dw0()).encode();
    // Enable it the way Linux does, and ask for queues, so I/O Connects can succeed.
    let nss = nvme::namespaces();
    let view = SubsystemView {
        kind,
        serial: "S",
        model: "M",
        firmware: "F",
        max_namespaces: 8,
        namespaces: &nss,
        discovery_log: None,
        ana: None,
    };
    let mut buf = [0u8; 64];
    let _ = ctrl.admin(
        &view,
        &build::property_set(1, 0x14, 0x0046_0001),
        &mut buf,
        now,
    );
    let mut nq = Sqe::new(0x09, 2);
    nq.set_cdw(10, 0x07)
        .set_cdw(11, u32::from(sel) | u32::from(sel) << 16);
    let _ = ctrl.admin(&view, &nq, &mut buf, now);
    let mut connected = 0usize;
    while b.len() >= 64 {
        let io = Sqe(b.array::<64>());
        let iod = b.take(1024);
        let Ok(ic) = parse_connect(&io, iod) else {
            continue;
        };
        let before = ctrl.io_queue_connected(ic.cmd.qid);
        match ctrl.accept_io_queue(&ic) {
            Ok(dw0) => {
                assert_eq!(dw0, 0x11);
                assert!(!before, "a queue id connected twice");
                assert_eq!(kind, SubsystemKind::Nvm);
                assert_eq!(ic.data.hostnqn, c.data.hostnqn);
                assert_eq!(ic.data.hostid, c.data.hostid);
                assert!(ic.cmd.qid >= 1 && ic.cmd.qid <= ctrl.granted_io_queues());
                assert!(ic.cmd.sqsize >= 1 && ic.cmd.sqsize <= limits.mqes());
                connected += 1;
            }
            Err(r) => {
                let _ = r.cqe(&io, ic.cmd.qid, 1).encode();
                if ic.cmd.qid % 3 == 0 {
                    ctrl.io_queue_closed(ic.cmd.qid);
                    if before {
                        connected -= 1;
                    }
                }
            }
        }
        assert_eq!(ctrl.num_io_queues(), connected);
    }
});
