//! NVMe command capsules through the sans-I/O controller logic, the way the exec layer calls
//! it: SQE decoding, SGL1 parsing under the I/O and admin policies of the RDMA transport,
//! I/O-command decoding against namespaces (with Dataset Management range parsing), and a
//! sequence of admin-queue commands (Fabrics Property Get/Set included) on one controller,
//! NVM or discovery.
//!
//! Input: a selector byte, then records of `[data length u16][64-byte SQE][data]`.
//! Properties: nothing panics; a decoded SGL never claims more than the policy allows or more
//! in-capsule bytes than arrived; an admin completion never reports more data than the buffer
//! it was given; a decoded I/O command stays inside its namespace and the transfer limit.
#![no_main]
use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::{Bytes, nvme};
use target_core::nvme::sgl::{self, DataSgl};
use target_core::nvme::{
    AdminOutcome, DiscoveryLog, IoCmd, Sqe, SubsystemKind, SubsystemView, TransportLimits, io,
};

fn check_sgl(sgl: &DataSgl, in_capsule: &[u8], policy: &sgl::SglPolicy) {
    assert!(
        sgl.len() <= policy.max_len,
        "SGL longer than the policy allows"
    );
    if let DataSgl::InCapsule { offset, len } = *sgl {
        let end = offset as usize + len as usize;
        assert!(
            end <= in_capsule.len(),
            "in-capsule SGL past the received bytes"
        );
        assert!(end <= policy.in_capsule_capacity as usize);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let sel = b.u8();
    let limits = TransportLimits {
        msdbd: if sel & 1 != 0 { 16 } else { 1 },
        in_capsule_data_size: if sel & 2 != 0 { 8192 } else { 4096 },
        ..TransportLimits::default()
    };
    let kind = if sel & 4 != 0 {
        SubsystemKind::Discovery
    } else {
        SubsystemKind::Nvm
    };
    let nss = nvme::namespaces();
    let entries = nvme::discovery_entries();
    let view = SubsystemView {
        kind,
        serial: "SPDK00000000000001",
        model: "SPDK_Controller1",
        firmware: "0.1.0",
        max_namespaces: 32,
        namespaces: &nss,
        discovery_log: (kind == SubsystemKind::Discovery).then_some(DiscoveryLog {
            genctr: 3,
            entries: &entries,
        }),
        ana: None,
    };
    let mut ctrl = nvme::controller(kind, limits);
    let now = Instant::now();
    let io_policy = limits.io_sgl_policy();
    let admin_policy = limits.admin_sgl_policy(0, 128 * 1024);
    let mut buf = vec![0u8; 128 * 1024];
    let mut steps = 0u32;
    while !b.is_empty() && steps < 64 {
        steps += 1;
        let dlen = usize::from(b.u16() % 9000);
        let sqe = Sqe(b.array::<64>());
        let payload = b.take(dlen);
        // SGL decoding under both policies.
        let io_sgl = sgl::parse(&sqe, payload, &io_policy);
        if let Ok(s) = &io_sgl {
            check_sgl(s, payload, &io_policy);
        }
        if let Ok(s) = sgl::parse(&sqe, payload, &admin_policy) {
            check_sgl(&s, payload, &admin_policy);
        }
        let _ = sqe.direction();
        // The I/O path.
        let ns = nss.iter().find(|n| n.nsid == sqe.nsid());
        let sgl_len = io_sgl.map(|s| s.len());
        if let Ok(cmd) = io::decode(&sqe, ns, sgl_len, limits.max_io_size) {
            match cmd {
                IoCmd::Read { slba, blocks, .. }
                | IoCmd::Write { slba, blocks, .. }
                | IoCmd::Compare { slba, blocks } => {
                    let n = ns.expect("an I/O command needs a namespace");
                    assert!(blocks > 0);
                    assert!(
                        slba.checked_add(u64::from(blocks))
                            .is_some_and(|e| e <= n.num_blocks)
                    );
                    assert!(cmd.data_len(n.block_size) <= u64::from(limits.max_io_size));
                    assert_eq!(Ok(cmd.data_len(n.block_size) as u32), sgl_len);
                }
                IoCmd::WriteZeroes { slba, blocks, .. } => {
                    let n = ns.expect("Write Zeroes needs a namespace");
                    assert!(
                        slba.checked_add(u64::from(blocks))
                            .is_some_and(|e| e <= n.num_blocks)
                    );
                }
                IoCmd::Deallocate { ranges } => {
                    let n = ns.expect("DSM needs a namespace");
                    if let Ok(it) = io::dsm_ranges(payload, ranges, n) {
                        for r in it {
                            assert!(r.blocks > 0);
                            assert!(r.slba + u64::from(r.blocks) <= n.num_blocks);
                        }
                    }
                }
                IoCmd::Flush | IoCmd::Nop | IoCmd::Disconnect => {}
            }
        }
        // The admin path: the host buffer is as long as SGL1 says (capped), filled from the input.
        let want = (sqe.sgl1().keyed_length() as usize).min(buf.len());
        let out = &mut buf[..want];
        let n = payload.len().min(want);
        out[..n].copy_from_slice(&payload[..n]);
        match ctrl.admin(
            &view,
            &sqe,
            out,
            now + Duration::from_millis(u64::from(steps)),
        ) {
            AdminOutcome::Complete(c) => {
                assert!(c.data_len <= want, "data beyond the host buffer");
                if !c.status.is_success() {
                    assert_eq!(c.data_len, 0);
                }
                let _ = c.cqe(&sqe, 1).encode();
            }
            AdminOutcome::Parked => {}
            AdminOutcome::Abort { cid, .. } => {
                let _ = ctrl.cancel_aer(cid);
            }
        }
        if steps.is_multiple_of(8) {
            let _ = ctrl.ns_changed(&[1, 2]);
            let _ = ctrl.discovery_log_changed();
        }
    }
    let _ = ctrl.keep_alive_expired(now + Duration::from_secs(3600));
});
