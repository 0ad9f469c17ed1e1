//! Reservation commands from both protocols against one volume's shared model: NVMe
//! Reservation Register/Acquire/Release/Report capsule fields and data
//! (`nvme::resv::decode`/`execute`/`report`), SCSI PERSISTENT RESERVE OUT/IN CDBs and
//! parameter lists (`scsi::pr_out`, `scsi::pr_in`), RESERVE/RELEASE(6/10), nexus loss, LU
//! reset and Set Features Reservation Persistence, from two NVMe hosts and two SRP nexuses.
//!
//! Input: `[flags]` then steps `[selector][requester][fields…]` (see `step`).
//! Properties (model consistency), after every step:
//! - the state's invariants: keys non-zero, identities unique, at most the registrant
//!   limit, a single holder is registered, an All Registrants reservation has registrants;
//! - a refused command changes nothing (the state compares equal to before);
//! - the generation moves by at most one per command, and only on success;
//! - notices never go to the requester; aborted requesters are neither the requester nor
//!   still registered, and each got Registration Preempted; `changed` moves the epoch;
//! - the data path's snapshot gives every requester the same standing as the state;
//! - the NVMe report and SCSI READ KEYS / READ FULL STATUS describe exactly the
//!   registrants; with PTPL on, the `ptpl_file` encoding decodes back to the same state.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use target_core::nvme::resv::{self as nresv, ResvCommand};
use target_core::nvme::Sqe;
use target_core::reservation::{
    AccessView, Effects, HostId, Initiator, InitiatorPort, Nexus, NoticeKind, Reservation, ptpl,
};
use target_core::scsi::pr_in::{decode_pr_in, execute_pr_in};
use target_core::scsi::pr_out::{PrStatus, decode_pr_out, execute_pr_out};
use target_core::scsi::reserve::execute_reserve_release;

const NVME_OPS: [u8; 5] = [0x0D, 0x0E, 0x11, 0x15, 0x01];
const SCSI_OPS: [u8; 7] = [0x5F, 0x5E, 0x16, 0x17, 0x56, 0x57, 0x00];

fn who(i: u8) -> Initiator {
    match i & 3 {
        0 => Initiator::Nvme(HostId([0xA0; 16])),
        1 => Initiator::Nvme(HostId([0xB0; 16])),
        2 => Initiator::Scsi(Nexus {
            initiator: InitiatorPort::srp([0xC0; 16]),
            relative_target_port: 1,
        }),
        _ => Initiator::Scsi(Nexus {
            initiator: InitiatorPort::srp([0xC0; 16]),
            relative_target_port: 2,
        }),
    }
}

fn invariants(r: &Reservation, max: usize) {
    let regs = r.registrants();
    assert!(regs.len() <= max);
    for (i, a) in regs.iter().enumerate() {
        assert_ne!(a.key, 0);
        assert!(regs[i + 1..].iter().all(|b| b.who != a.who), "duplicate");
    }
    if let Some(res) = r.reserved() {
        assert!(!regs.is_empty(), "a reservation without registrants");
        match res.holder {
            Some(h) => {
                assert!(!res.rtype.all_registrants());
                assert!(r.key_of(h).is_some(), "holder not registered");
            }
            None => assert!(res.rtype.all_registrants()),
        }
    }
}

/// Checks a command's outcome against the state before and after it.
fn check(before: &Reservation, after: &Reservation, by: Initiator, r: Result<&Effects, ()>) {
    match r {
        Err(()) => assert_eq!(before, after, "a refused command changed the state"),
        Ok(fx) => {
            let g = after.generation().wrapping_sub(before.generation());
            assert!(g <= 1, "generation moved by {g}");
            assert!(fx.notices.iter().all(|n| n.to != by), "notice to the requester");
            for a in &fx.aborted {
                assert_ne!(*a, by);
                assert!(after.key_of(*a).is_none(), "aborted but still registered");
                assert!(fx.notices.iter().any(|n| n.to == *a
                    && n.kind == NoticeKind::RegistrationPreempted));
            }
            if fx.changed {
                assert!(after.epoch() > before.epoch());
            } else {
                assert_eq!(after.registrants(), before.registrants());
                assert_eq!(after.reserved(), before.reserved());
            }
            if fx.persist {
                assert!(after.ptpl() || before.ptpl());
            }
        }
    }
}

fn reports(r: &Reservation) {
    let n = r.registrants().len();
    // NVMe extended report.
    let mut out = vec![0u8; 64 + 64 * n];
    assert_eq!(nresv::report(r, true, &mut out), Ok(out.len()));
    assert_eq!(usize::from(u16::from_le_bytes([out[5], out[6]])), n);
    assert_eq!(out[4], r.reserved().map_or(0, |x| x.rtype.nvme()));
    for (i, reg) in r.registrants().iter().enumerate() {
        let e = &out[64 + 64 * i..];
        assert_eq!(u64::from_le_bytes(e[8..16].try_into().unwrap()), reg.key);
        assert_eq!(e[2] == 1, r.is_holder(reg.who));
    }
    // SCSI READ KEYS and READ FULL STATUS.
    let mut buf = vec![0u8; 8 + 48 * n];
    let keys = decode_pr_in(&[0x5E, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]).unwrap();
    let len = execute_pr_in(r, &keys, &mut buf) as usize;
    assert_eq!(len, 8 + 8 * n);
    for (i, reg) in r.registrants().iter().enumerate() {
        assert_eq!(&buf[8 + 8 * i..16 + 8 * i], &reg.key.to_be_bytes());
    }
    let full = decode_pr_in(&[0x5E, 3, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0]).unwrap();
    let len = execute_pr_in(r, &full, &mut buf) as usize;
    assert_eq!(len, 8 + 48 * n);
    for (i, reg) in r.registrants().iter().enumerate() {
        let d = &buf[8 + 48 * i..];
        assert_eq!(d[12] & 1 == 1, r.is_holder(reg.who));
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let flags = b.u8();
    let max = if flags & 1 != 0 { 2 } else { 128 };
    let ptpl_capable = flags & 2 != 0;
    let mut r = Reservation::new(ptpl_capable).with_max_registrants(max);
    let bdev = uuid::Uuid::from_bytes([7; 16]);
    let mut steps = 0;
    while !b.is_empty() && steps < 64 {
        steps += 1;
        let sel = b.u8();
        let by = who(b.u8());
        let before = r.clone();
        // `None`: not a state-changing command (queries, legacy, resets: checked inline).
        let outcome: Option<Result<Effects, ()>> = match (sel % 5, by) {
            (0 | 1, Initiator::Nvme(host)) => {
                let mut s = Sqe::new(NVME_OPS[usize::from(b.u8()) % NVME_OPS.len()], 1);
                s.set_nsid(1).set_cdw(10, b.u32()).set_cdw(11, b.u32());
                let sgl = u32::from(b.u8());
                let payload = b.array::<16>();
                match nresv::decode(&s, Ok(sgl)) {
                    Ok(ResvCommand::Report { len, eds }) => {
                        let mut out = vec![0u8; len.min(4096) as usize];
                        if let Ok(n) = nresv::report(&r, eds, &mut out) {
                            assert!(n <= out.len());
                        }
                        None
                    }
                    Ok(cmd) => {
                        assert!(cmd.data_out_len() <= sgl);
                        let d = &payload[..cmd.data_out_len() as usize];
                        Some(nresv::execute(&cmd, &mut r, host, d).map_err(|_| ()))
                    }
                    Err(_) => Some(Err(())),
                }
            }
            (0 | 1, Initiator::Scsi(nexus)) => {
                let mut cdb = b.array::<10>();
                cdb[0] = SCSI_OPS[usize::from(cdb[0]) % SCSI_OPS.len()];
                let data_out = u32::from(b.u8());
                let plen = usize::from(b.u8() % 40);
                let params = b.take(plen);
                match cdb[0] {
                    0x5F => match decode_pr_out(&cdb, data_out) {
                        Ok(c) => {
                            let p = &params[..params.len().min(c.fetch_len as usize)];
                            let res = execute_pr_out(&mut r, nexus, &c, p);
                            Some(match res.status {
                                PrStatus::Good => Ok(res.effects),
                                _ => {
                                    assert_eq!(res.effects, Effects::default());
                                    Err(())
                                }
                            })
                        }
                        Err(_) => Some(Err(())),
                    },
                    0x5E => {
                        if let Ok(c) = decode_pr_in(&cdb) {
                            let mut out = vec![0u8; usize::from(c.alloc_len).min(2048)];
                            assert!(execute_pr_in(&r, &c, &mut out) as usize <= out.len());
                        }
                        None
                    }
                    0x16 | 0x17 | 0x56 | 0x57 => {
                        let len = if cdb[0] < 0x20 { 6 } else { 10 };
                        let st = execute_reserve_release(&mut r, nexus, &cdb[..len]);
                        if st != PrStatus::Good {
                            assert_eq!(r, before, "refused RESERVE/RELEASE changed the state");
                        }
                        // Legacy changes do not touch registrations or the generation.
                        assert_eq!(r.registrants(), before.registrants());
                        assert_eq!(r.generation(), before.generation());
                        None
                    }
                    _ => None,
                }
            }
            (2, Initiator::Scsi(nexus)) => {
                r.nexus_lost(nexus);
                assert_eq!(r.registrants(), before.registrants(), "registrations survive");
                None
            }
            (3, _) => {
                r.lu_reset();
                assert_eq!(r.registrants(), before.registrants(), "registrations survive");
                None
            }
            (4, _) => Some(r.set_ptpl(b.u8() & 1 != 0).map_err(|_| ())),
            _ => None,
        };
        if let Some(o) = &outcome {
            check(&before, &r, by, o.as_ref().map_err(|_| ()));
        }
        invariants(&r, max);
        let view = AccessView::of(&r);
        for i in 0..4 {
            assert_eq!(view.standing(who(i)), r.standing(who(i)));
        }
        reports(&r);
        if r.ptpl() {
            let text = ptpl::encode(&r, &bdev);
            let back = ptpl::decode(&text, &bdev, ptpl_capable).expect("own file decodes");
            assert_eq!(back.registrants(), r.registrants());
            assert_eq!(back.reserved(), r.reserved());
        }
    }
});
