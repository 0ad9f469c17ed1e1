//! The controller connection: negotiation, data movement, flow control and every fatal error,
//! with byte arrays and against the host side.

use target_core::nvme::spec::{fctype, io_opc};
use target_core::nvme::{Cqe, SglDescriptor, Sqe, Status};

use super::*;
use crate::host::{HostConfig, HostError, HostState};
use crate::pdu::{CapsuleCmd, Digests, H2cData, IcReq, MAX_ENCODED_HEADER, data_digest};
use crate::testing::{BLOCK, Ctrl, Rng, connected, pattern, pump, read_cmd, write_cmd};

fn plain() -> Framing {
    Framing::default()
}

fn enc(f: impl FnOnce(&mut [u8]) -> Result<usize, crate::pdu::BufferTooSmall>) -> Vec<u8> {
    let mut b = [0u8; MAX_ENCODED_HEADER];
    let n = f(&mut b).expect("encodes");
    b[..n].to_vec()
}

fn icreq(d: Digests) -> Vec<u8> {
    enc(|b| IcReq::linux(d).encode(b))
}

/// A live controller (ICResp taken) without a host.
fn live(cfg: Config, d: Digests) -> Ctrl {
    let mut c = Ctrl::new(cfg, 4096);
    c.feed(&icreq(d));
    let resp = c.flush();
    assert_eq!(resp.len(), 128);
    c.conn.connected(1, true);
    c
}

fn capsule(f: &Framing, sqe: Sqe, icd: &[u8]) -> Vec<u8> {
    let mut v = enc(|b| CapsuleCmd { sqe }.encode(f, icd.len() as u32, b));
    v.extend_from_slice(icd);
    if f.digests.data && !icd.is_empty() {
        v.extend_from_slice(&data_digest(icd).to_le_bytes());
    }
    v
}

fn with_sgl(mut s: Sqe, d: SglDescriptor) -> Sqe {
    s.set_sgl1(d);
    s
}

fn h2c(f: &Framing, d: H2cData, data: &[u8]) -> Vec<u8> {
    let mut v = enc(|b| d.encode(f, b));
    v.extend_from_slice(data);
    if f.digests.data {
        v.extend_from_slice(&data_digest(data).to_le_bytes());
    }
    v
}

/// Asserts that `wire` is exactly one C2HTermReq with `fes`/`fei` and the offending header, and
/// that the connection asked to close and ignores what follows.
fn assert_terminated(c: &mut Ctrl, fes: Fes, fei: u32, offending: &[u8]) {
    let wire = c.flush();
    assert!(!wire.is_empty(), "a C2HTermReq was sent");
    assert_eq!(wire[0], PduType::C2hTermReq as u8);
    assert_eq!(wire[1], 0, "no digests on a termination request");
    assert_eq!(wire[2], 24);
    let plen = u32::from_le_bytes(wire[4..8].try_into().unwrap()) as usize;
    assert_eq!(plen, wire.len(), "the termination request is the last PDU");
    assert_eq!(u16::from_le_bytes([wire[8], wire[9]]), fes as u16, "FES");
    assert_eq!(
        u32::from_le_bytes(wire[10..14].try_into().unwrap()),
        fei,
        "FEI"
    );
    let n = offending.len().min(128);
    assert_eq!(&wire[24..], &offending[..n], "the offending header follows");
    c.run_actions();
    assert!(c.closed, "Close follows the termination request");
    assert_eq!(c.conn.state(), ConnState::Closed);
    // Whatever else arrives is consumed and dropped; nothing more is sent.
    assert_eq!(c.conn.recv(&[0xFF; 100], &mut c.bufs), 100);
    assert!(c.flush().is_empty());
}

// ------------------------------------------------------------------------- negotiation

#[test]
fn icresp_echoes_digests_and_advertises_cpda_and_maxh2cdata() {
    for d in [
        Digests::default(),
        Digests {
            header: true,
            data: false,
        },
        Digests {
            header: false,
            data: true,
        },
        Digests {
            header: true,
            data: true,
        },
    ] {
        let cfg = Config {
            maxh2cdata: 65536,
            ..Config::default()
        };
        let mut c = Ctrl::new(cfg, 8);
        assert_eq!(c.conn.state(), ConnState::AwaitIcReq);
        c.feed(&icreq(d));
        assert_eq!(c.conn.state(), ConnState::Live);
        let r = c.flush();
        let mut want = [0u8; 128];
        want[0] = 1;
        want[2] = 128;
        want[4] = 128;
        want[11] = d.to_byte();
        want[12..16].copy_from_slice(&65536u32.to_le_bytes());
        assert_eq!(r, want, "{d:?}");
        assert_eq!(c.conn.digests(), d);
    }
}

#[test]
fn bad_icreqs_are_terminated_with_the_field() {
    let mut bad_pfv = icreq(Digests::default());
    bad_pfv[8] = 1;
    let mut c = Ctrl::new(Config::default(), 8);
    c.feed(&bad_pfv);
    assert_terminated(&mut c, Fes::InvalidHeaderField, 8, &bad_pfv);
    let mut bad_hpda = icreq(Digests::default());
    bad_hpda[10] = 32;
    let mut c = Ctrl::new(Config::default(), 8);
    c.feed(&bad_hpda);
    assert_terminated(&mut c, Fes::InvalidHeaderField, 10, &bad_hpda);
}

#[test]
fn a_capsule_before_icreq_is_a_sequence_error() {
    let mut c = Ctrl::new(Config::default(), 8);
    let cap = capsule(&plain(), Sqe::new(io_opc::FLUSH, 1), &[]);
    c.feed(&cap);
    assert_terminated(&mut c, Fes::PduSequenceError, 0, &cap[..8]);
}

#[test]
fn hpda_pads_c2h_data_and_maxr2t_caps_outstanding_r2ts() {
    let cfg = Config {
        r2t_size: 4096,
        max_r2t_per_command: 16,
        ..Config::default()
    };
    for (hpda, maxr2t) in [(0u8, 0u32), (3, 1), (31, 7)] {
        let h = HostConfig {
            hpda,
            maxr2t,
            ..HostConfig::default()
        };
        let (mut c, mut host) = connected(cfg, h, 1024);
        let data = pattern(u64::from(hpda), 64 * 1024);
        host.submit_write(write_cmd(1, 0, 128), data.clone())
            .unwrap();
        let mut rng = Rng(7);
        let done = pump(&mut c, &mut host, &mut rng, 999);
        assert_eq!(done.len(), 1, "hpda {hpda} maxr2t {maxr2t}");
        host.submit_read(read_cmd(2, 0, 128), 64 * 1024).unwrap();
        let done = pump(&mut c, &mut host, &mut rng, 999);
        assert_eq!(done[0].data, data);
        assert_eq!(host.r2ts_received, 16);
        assert_eq!(
            host.max_r2ts_pending,
            maxr2t + 1,
            "the host's limit is used"
        );
    }
}

// ------------------------------------------------------------------------ data movement

#[test]
fn a_command_without_data_is_executed_and_answered() {
    let mut c = live(Config::default(), Digests::default());
    let s = with_sgl(Sqe::new(io_opc::FLUSH, 0x42), SglDescriptor::transport(0));
    c.feed(&capsule(&plain(), s, &[]));
    assert_eq!(c.actions, vec![Action::Execute { slot: SlotId(0) }]);
    let r = c.flush();
    let cqe = Cqe {
        dw0: 0,
        dw1: 0,
        sqhd: 0xFFFF,
        sqid: 1,
        cid: 0x42,
        status: Status::SUCCESS,
    };
    let mut want = vec![5, 0, 24, 0, 24, 0, 0, 0];
    want.extend_from_slice(&cqe.encode());
    assert_eq!(r, want);
    assert_eq!(c.conn.outstanding(), 0);
}

#[test]
fn in_capsule_data_waits_for_its_buffer() {
    let mut c = Ctrl::new(Config::default(), 64);
    c.feed(&icreq(Digests::default()));
    c.flush();
    c.conn.connected(1, false);
    let data = pattern(3, 4096);
    let s = with_sgl(write_cmd(9, 2, 8), SglDescriptor::unkeyed(0, 1, 0, 4096));
    let bytes = capsule(&plain(), s, &data);
    // Without a buffer the machine stops right after the header.
    let n = c.conn.recv(&bytes, &mut c.bufs);
    assert_eq!(n, 72);
    assert_eq!(
        c.conn.poll_action(),
        Some(Action::NeedBuffer {
            slot: SlotId(0),
            len: 4096
        })
    );
    assert_eq!(c.conn.recv(&bytes[n..], &mut c.bufs), 0, "still waiting");
    c.bufs.map.insert(SlotId(0), vec![0; 4096]);
    c.conn.buffer_ready(SlotId(0)).unwrap();
    assert_eq!(c.conn.recv(&bytes[n..], &mut c.bufs), 4096);
    c.run_actions();
    assert_eq!(c.actions, vec![Action::Execute { slot: SlotId(0) }]);
    assert_eq!(&c.disk[2 * BLOCK..2 * BLOCK + 4096], &data[..]);
    assert_eq!(c.flush().len(), 24);
}

#[test]
fn connect_data_is_in_capsule_up_to_8k_on_any_queue() {
    let mut c = live(
        Config {
            in_capsule_data_size: 0,
            ..Config::default()
        },
        Digests::default(),
    );
    c.conn.connected(3, false);
    let s = with_sgl(
        Sqe::fabrics(fctype::CONNECT, 1),
        SglDescriptor::unkeyed(0, 1, 0, 1024),
    );
    c.feed(&capsule(&plain(), s, &[0x11; 1024]));
    assert!(matches!(
        c.actions[..],
        [Action::NeedBuffer { len: 1024, .. }, Action::Execute { .. }]
    ));
    // A non-fabrics command gets the I/O queue's limit (0 here).
    let s = with_sgl(write_cmd(2, 0, 1), SglDescriptor::unkeyed(0, 1, 0, 512));
    let bytes = capsule(&plain(), s, &[0; 512]);
    c.flush();
    c.feed(&bytes);
    assert_terminated(&mut c, Fes::DataTransferLimitExceeded, 0, &bytes[..72]);
}

#[test]
fn r2t_flow_control_with_maxr2t_1_and_more() {
    for (max_r2t, host_maxr2t, expect_peak) in [(1u8, 0u32, 1u32), (4, 0, 1), (4, 3, 4), (2, 7, 2)]
    {
        let cfg = Config {
            r2t_size: 8192,
            max_r2t_per_command: max_r2t,
            maxh2cdata: 4096,
            ..Config::default()
        };
        let h = HostConfig {
            maxr2t: host_maxr2t,
            ..HostConfig::default()
        };
        let (mut c, mut host) = connected(cfg, h, 1024);
        let data = pattern(11, 128 * 1024);
        host.submit_write(write_cmd(5, 10, 256), data.clone())
            .unwrap();
        let done = pump(&mut c, &mut host, &mut Rng(3), 5000);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].cqe.status, Status::SUCCESS);
        assert_eq!(&c.disk[10 * BLOCK..10 * BLOCK + data.len()], &data[..]);
        assert_eq!(host.r2ts_received, 16, "128 KiB in R2Ts of 8 KiB");
        assert_eq!(
            host.max_r2ts_pending, expect_peak,
            "{max_r2t} / {host_maxr2t}"
        );
        assert_eq!(c.conn.stats().h2c_pdus, 32, "split at MAXH2CDATA 4096");
    }
}

#[test]
fn c2h_data_is_split_and_success_replaces_the_response_when_allowed() {
    for (c2h_success, fc_disabled, dw0, want_flag) in [
        (true, true, 0, true),
        (true, false, 0, false),
        (false, true, 0, false),
        (true, true, 1, false),
    ] {
        let cfg = Config {
            c2h_chunk: 16 * 1024,
            c2h_success,
            ..Config::default()
        };
        let (mut c, mut host) = connected(cfg, HostConfig::default(), 1024);
        c.conn.connected(1, fc_disabled);
        c.dw0 = dw0;
        host.submit_read(read_cmd(1, 4, 128), 64 * 1024).unwrap();
        let done = pump(&mut c, &mut host, &mut Rng(5), 1 << 20);
        assert_eq!(done.len(), 1);
        assert_eq!(done[0].data, c.disk[4 * BLOCK..4 * BLOCK + 64 * 1024]);
        assert_eq!(done[0].by_success_flag, want_flag);
        assert_eq!(host.c2h_received, 4);
        assert_eq!(c.conn.stats().responses, 1);
        assert_eq!(c.conn.outstanding(), 0);
    }
}

#[test]
fn a_failed_read_sends_no_data() {
    let (mut c, mut host) = connected(Config::default(), HostConfig::default(), 8);
    // Past the end of the 8-block disk: the core fails it.
    host.submit_read(read_cmd(1, 100, 8), 4096).unwrap();
    let done = pump(&mut c, &mut host, &mut Rng(5), 100);
    assert_eq!(done[0].cqe.status, Status::LBA_OUT_OF_RANGE);
    assert_eq!(host.c2h_received, 0);
}

#[test]
fn transfers_above_max_io_size_move_no_data_and_the_core_answers() {
    let cfg = Config {
        max_io_size: 8192,
        ..Config::default()
    };
    let mut c = live(cfg, Digests::default());
    let s = with_sgl(read_cmd(3, 0, 32), SglDescriptor::transport(16384));
    c.feed(&capsule(&plain(), s, &[]));
    assert_eq!(c.actions, vec![Action::Execute { slot: SlotId(0) }]);
    assert_eq!(c.conn.xfer(SlotId(0)), Some(Xfer::None));
    let wire = c.flush();
    // The test core fails it (no buffer); only a response goes out, even if asked for data.
    assert_eq!(wire.len(), 24);
    assert_eq!(wire[0], PduType::CapsuleResp as u8);
}

#[test]
fn a_command_can_fail_before_its_data_moves() {
    let mut c = live(Config::default(), Digests::default());
    // Host data: no R2T is sent.
    let s = with_sgl(write_cmd(1, 0, 8), SglDescriptor::transport(4096));
    assert_eq!(c.conn.recv(&capsule(&plain(), s, &[]), &mut c.bufs), 72);
    let a = c.conn.poll_action().unwrap();
    assert_eq!(
        a,
        Action::NeedBuffer {
            slot: SlotId(0),
            len: 4096
        }
    );
    let cqe = Cqe::for_command(&s, 1, 0, Status::INVALID_NAMESPACE);
    c.conn.complete(SlotId(0), cqe, 4096).unwrap();
    let wire = c.flush();
    assert_eq!(wire.len(), 24, "a response and no R2T");
    assert_eq!(c.conn.outstanding(), 0);
    // In-capsule data: it is dropped, the response follows it.
    let s = with_sgl(write_cmd(2, 0, 8), SglDescriptor::unkeyed(0, 1, 0, 4096));
    let bytes = capsule(&plain(), s, &[7; 4096]);
    assert_eq!(c.conn.recv(&bytes, &mut c.bufs), 72);
    let Some(Action::NeedBuffer { slot, .. }) = c.conn.poll_action() else {
        panic!("NeedBuffer expected");
    };
    c.conn
        .complete(slot, Cqe::for_command(&s, 1, 0, Status::INTERNAL_ERROR), 0)
        .unwrap();
    assert!(c.flush().is_empty(), "not before the data has passed");
    assert_eq!(c.conn.recv(&bytes[72..], &mut c.bufs), 4096);
    let wire = c.flush();
    assert_eq!(wire.len(), 24);
    assert_eq!(c.conn.poll_action(), None, "nothing executed");
    assert!(!c.bufs.map.contains_key(&slot), "no buffer was touched");
}

#[test]
fn usage_errors_are_refused() {
    let mut c = live(Config::default(), Digests::default());
    assert_eq!(
        c.conn.buffer_ready(SlotId(0)),
        Err(UsageError::NotOutstanding)
    );
    assert_eq!(
        c.conn.buffer_ready(SlotId(999)),
        Err(UsageError::NotOutstanding)
    );
    let s = with_sgl(Sqe::new(io_opc::FLUSH, 1), SglDescriptor::transport(0));
    c.conn.recv(&capsule(&plain(), s, &[]), &mut c.bufs);
    assert_eq!(
        c.conn.buffer_ready(SlotId(0)),
        Err(UsageError::WrongState(SlotState::Executing))
    );
}

#[test]
fn a_data_digest_error_fails_the_command_and_the_connection_goes_on() {
    let d = Digests {
        header: true,
        data: true,
    };
    let f = Framing { digests: d, pda: 0 };
    let mut c = live(Config::default(), d);
    let s = with_sgl(write_cmd(1, 0, 8), SglDescriptor::transport(4096));
    c.feed(&capsule(&f, s, &[]));
    let r2t = c.flush();
    assert_eq!(r2t[0], PduType::R2t as u8);
    assert_eq!(r2t.len(), 28);
    let mut pdu = h2c(
        &f,
        H2cData {
            cccid: 1,
            ttag: 0,
            datao: 0,
            datal: 4096,
            last: true,
        },
        &[9; 4096],
    );
    let n = pdu.len();
    pdu[n - 1] ^= 0xFF;
    c.feed(&pdu);
    assert_eq!(
        c.actions.last(),
        Some(&Action::Fail {
            slot: SlotId(0),
            status: Status::TRANSIENT_TRANSPORT_ERROR
        })
    );
    assert_eq!(c.disk[0], (7u8), "not written");
    let resp = c.flush();
    let cqe = Cqe::decode(&resp[8..24]).unwrap();
    assert_eq!(cqe.status, Status::TRANSIENT_TRANSPORT_ERROR);
    assert_eq!(c.conn.stats().data_digest_errors, 1);
    // The next command works.
    let s = with_sgl(write_cmd(2, 0, 1), SglDescriptor::unkeyed(0, 1, 0, 512));
    c.feed(&capsule(&f, s, &[1; 512]));
    assert_eq!(c.actions.last(), Some(&Action::Execute { slot: SlotId(0) }));
    assert_eq!(c.disk[..512], [1; 512]);
}

#[test]
fn c2h_data_carries_digests_the_host_checks() {
    let d = Digests {
        header: true,
        data: true,
    };
    let h = HostConfig {
        digests: d,
        ..HostConfig::default()
    };
    let cfg = Config {
        c2h_chunk: 3000,
        ..Config::default()
    };
    let (mut c, mut host) = connected(cfg, h, 64);
    host.submit_read(read_cmd(1, 0, 16), 8192).unwrap();
    let done = pump(&mut c, &mut host, &mut Rng(9), 77);
    assert_eq!(done[0].cqe.status, Status::SUCCESS);
    assert_eq!(done[0].data, c.disk[..8192]);
    assert_eq!(host.c2h_received, 3);
}

// ------------------------------------------------------------------ fatal errors (per class)

/// A live controller with a write of 16 KiB waiting for host data (R2T sent, TTAG 0, CID 1),
/// and the framing to talk to it.
fn awaiting_h2c(cfg: Config, d: Digests) -> (Ctrl, Framing) {
    let f = Framing { digests: d, pda: 0 };
    let mut c = live(cfg, d);
    let s = with_sgl(write_cmd(1, 0, 32), SglDescriptor::transport(16384));
    c.feed(&capsule(&f, s, &[]));
    let r2t = c.flush();
    assert_eq!(r2t[0], PduType::R2t as u8);
    (c, f)
}

fn h2c_case(d: H2cData, fes: Fes, fei: u32) {
    let cfg = Config {
        maxh2cdata: 8192,
        ..Config::default()
    };
    let (mut c, f) = awaiting_h2c(cfg, Digests::default());
    let pdu = h2c(&f, d, &vec![0; d.datal as usize]);
    c.feed(&pdu);
    assert_terminated(&mut c, fes, fei, &pdu[..24]);
}

#[test]
fn h2c_data_errors() {
    let ok = H2cData {
        cccid: 1,
        ttag: 0,
        datao: 0,
        datal: 8192,
        last: false,
    };
    // Unknown TTAG (no such slot, or a free one).
    h2c_case(H2cData { ttag: 500, ..ok }, Fes::InvalidHeaderField, 10);
    h2c_case(H2cData { ttag: 5, ..ok }, Fes::InvalidHeaderField, 10);
    // Wrong CCCID for the TTAG.
    h2c_case(H2cData { cccid: 2, ..ok }, Fes::InvalidHeaderField, 8);
    // Not the next offset of the R2T, or past its end.
    h2c_case(
        H2cData { datao: 4096, ..ok },
        Fes::DataTransferOutOfRange,
        0,
    );
    h2c_case(
        H2cData {
            datao: 16384,
            datal: 4,
            ..ok
        },
        Fes::DataTransferOutOfRange,
        0,
    );
    // Above MAXH2CDATA.
    h2c_case(
        H2cData { datal: 12288, ..ok },
        Fes::DataTransferLimitExceeded,
        0,
    );
    // LAST on a PDU that does not end the R2T, and missing on the one that does.
    h2c_case(H2cData { last: true, ..ok }, Fes::InvalidHeaderField, 1);
    let cfg = Config {
        maxh2cdata: 16384,
        ..Config::default()
    };
    let (mut c, f) = awaiting_h2c(cfg, Digests::default());
    let d = H2cData { datal: 16384, ..ok };
    let pdu = h2c(&f, d, &[0; 16384]);
    c.feed(&pdu);
    assert_terminated(&mut c, Fes::InvalidHeaderField, 1, &pdu[..24]);
}

#[test]
fn unsolicited_h2c_data_is_a_sequence_error() {
    let mut c = live(Config::default(), Digests::default());
    // A read in flight (slot 0, executing, not completed): data for it was never asked.
    c.complete_at_once = false;
    let s = with_sgl(read_cmd(1, 0, 8), SglDescriptor::transport(4096));
    c.feed(&capsule(&plain(), s, &[]));
    let d = H2cData {
        cccid: 1,
        ttag: 0,
        datao: 0,
        datal: 512,
        last: true,
    };
    let pdu = h2c(&plain(), d, &[0; 512]);
    c.feed(&pdu);
    assert_terminated(&mut c, Fes::PduSequenceError, 0, &pdu[..24]);
}

#[test]
fn capsule_errors() {
    let cases: Vec<(&str, Sqe, Vec<u8>, Fes, u32)> = vec![
        (
            "in-capsule offset",
            with_sgl(write_cmd(1, 0, 1), SglDescriptor::unkeyed(0, 1, 64, 512)),
            vec![0; 512],
            Fes::UnsupportedParameter,
            32,
        ),
        (
            "SGL length not the capsule's data",
            with_sgl(write_cmd(1, 0, 1), SglDescriptor::unkeyed(0, 1, 0, 1024)),
            vec![0; 512],
            Fes::InvalidHeaderField,
            4,
        ),
        (
            "in-capsule data beyond in_capsule_data_size",
            with_sgl(write_cmd(1, 0, 16), SglDescriptor::unkeyed(0, 1, 0, 8192)),
            vec![0; 8192],
            Fes::DataTransferLimitExceeded,
            0,
        ),
        (
            "data with a transport SGL",
            with_sgl(write_cmd(1, 0, 1), SglDescriptor::transport(512)),
            vec![0; 512],
            Fes::UnsupportedParameter,
            47,
        ),
        (
            "data with a keyed SGL",
            with_sgl(
                write_cmd(1, 0, 1),
                SglDescriptor::keyed(0x1000, 512, 7, true),
            ),
            vec![0; 512],
            Fes::UnsupportedParameter,
            47,
        ),
    ];
    for (name, sqe, icd, fes, fei) in cases {
        let mut c = live(Config::default(), Digests::default());
        let bytes = capsule(&plain(), sqe, &icd);
        c.feed(&bytes);
        assert!(c.actions.is_empty(), "{name}: nothing executed");
        assert_terminated(&mut c, fes, fei, &bytes[..72]);
    }
}

#[test]
fn a_keyed_sgl_without_data_goes_to_the_core() {
    let mut c = live(Config::default(), Digests::default());
    let s = with_sgl(
        read_cmd(1, 0, 1),
        SglDescriptor::keyed(0x1000, 512, 7, true),
    );
    c.feed(&capsule(&plain(), s, &[]));
    assert_eq!(c.actions, vec![Action::Execute { slot: SlotId(0) }]);
    assert_eq!(c.conn.state(), ConnState::Live);
}

#[test]
fn more_commands_than_the_queue_depth_are_a_sequence_error() {
    let cfg = Config {
        queue_depth: 4,
        ..Config::default()
    };
    let mut c = live(cfg, Digests::default());
    c.complete_at_once = false;
    let mut last = Vec::new();
    for cid in 0..5 {
        last = capsule(
            &plain(),
            with_sgl(Sqe::new(io_opc::FLUSH, cid), SglDescriptor::transport(0)),
            &[],
        );
        c.feed(&last);
    }
    assert_eq!(c.pending.len(), 4);
    assert_terminated(&mut c, Fes::PduSequenceError, 0, &last[..72]);
    // The core's completions after the close free the slots and send nothing.
    c.complete_pending(&mut Rng(1));
    assert_eq!(c.conn.outstanding(), 0);
    assert!(c.flush().is_empty());
}

#[test]
fn a_header_digest_error_terminates() {
    let d = Digests {
        header: true,
        data: false,
    };
    let f = Framing { digests: d, pda: 0 };
    let mut c = live(Config::default(), d);
    let mut bytes = capsule(&f, Sqe::new(io_opc::FLUSH, 1), &[]);
    bytes[50] ^= 4;
    c.feed(&bytes);
    assert_terminated(&mut c, Fes::HeaderDigestError, 0, &bytes[..72]);
}

#[test]
fn malformed_headers_reach_the_wire_with_fes_and_fei() {
    let mut c = live(Config::default(), Digests::default());
    let mut bytes = capsule(&plain(), Sqe::new(io_opc::FLUSH, 1), &[]);
    bytes[2] = 70;
    c.feed(&bytes);
    assert_terminated(&mut c, Fes::InvalidHeaderField, 2, &bytes[..8]);
    let mut c = live(Config::default(), Digests::default());
    let bytes = [0x05u8, 0, 24, 0, 24, 0, 0, 0];
    c.feed(&bytes);
    assert_terminated(&mut c, Fes::InvalidHeaderField, 0, &bytes);
}

#[test]
fn a_host_termination_request_closes_without_an_answer() {
    let mut c = live(Config::default(), Digests::default());
    let t = enc(|b| {
        crate::pdu::TermReq::new(Fes::PduSequenceError, 0).encode(PduType::H2cTermReq, &[1; 30], b)
    });
    c.feed(&t);
    c.run_actions();
    assert!(c.closed);
    assert!(c.flush().is_empty(), "no C2HTermReq answers an H2CTermReq");
    // One of impossible length: the same, at once.
    let mut c = live(Config::default(), Digests::default());
    let mut t = t.clone();
    t[4] = 200;
    c.feed(&t[..8]);
    assert!(c.closed);
    assert!(c.flush().is_empty());
}

#[test]
fn a_local_close_stops_everything() {
    let (mut c, mut host) = connected(Config::default(), HostConfig::default(), 64);
    c.complete_at_once = false;
    host.submit_read(read_cmd(1, 0, 8), 4096).unwrap();
    pump(&mut c, &mut host, &mut Rng(2), 100);
    c.conn.close();
    c.run_actions();
    assert!(c.closed);
    c.complete_pending(&mut Rng(1));
    assert!(c.flush().is_empty());
    assert_eq!(c.conn.outstanding(), 0);
}

#[test]
fn the_host_sees_a_termination_with_its_offending_header() {
    let (mut c, mut host) = connected(Config::default(), HostConfig::default(), 64);
    let mut bad = capsule(&plain(), Sqe::new(io_opc::FLUSH, 1), &[]);
    bad[1] = 0x80;
    host.send_raw(&bad);
    pump(&mut c, &mut host, &mut Rng(2), 10);
    assert_eq!(
        *host.state(),
        HostState::Failed(HostError::Terminated {
            fes: 1,
            fei: 1,
            error_data: bad[..8].to_vec(),
        })
    );
}

// ----------------------------------------------------------------- exchanges with the host

fn verified_io(cfg: Config, hcfg: HostConfig, sizes: &[u32], seed: u64, piece: usize) {
    let (mut c, mut host) = connected(cfg, hcfg, 8192);
    let mut rng = Rng(seed);
    let mut slba = 0u64;
    for (i, &size) in sizes.iter().enumerate() {
        let blocks = size / BLOCK as u32;
        let data = pattern(seed + i as u64, size as usize);
        host.submit_write(write_cmd(i as u16, slba, blocks), data.clone())
            .unwrap();
        let done = pump(&mut c, &mut host, &mut rng, piece);
        assert_eq!(done.len(), 1, "write {size}");
        assert_eq!(done[0].cqe.status, Status::SUCCESS, "write {size}");
        host.submit_read(read_cmd(i as u16, slba, blocks), size)
            .unwrap();
        let done = pump(&mut c, &mut host, &mut rng, piece);
        assert_eq!(done.len(), 1, "read {size}");
        assert_eq!(done[0].data, data, "read back {size}");
        slba += u64::from(blocks);
    }
    assert_eq!(c.conn.outstanding(), 0);
    assert!(c.bufs.map.is_empty(), "every buffer was released");
}

#[test]
fn verified_io_512b_to_1mib_digests_off_and_on() {
    let sizes = [512, 4096, 4608, 65536, 131072, 1 << 20];
    let cfg = Config {
        max_io_size: 1 << 20,
        maxh2cdata: 65536,
        r2t_size: 256 * 1024,
        max_r2t_per_command: 2,
        c2h_chunk: 128 * 1024,
        in_capsule_data_size: 8192,
        ..Config::default()
    };
    for (hd, dd) in [(false, false), (true, true), (true, false), (false, true)] {
        let h = HostConfig {
            digests: Digests {
                header: hd,
                data: dd,
            },
            maxr2t: 1,
            in_capsule_limit: 8192,
            ..HostConfig::default()
        };
        verified_io(cfg, h, &sizes, 100, 70_000);
    }
}

#[test]
fn verified_io_in_one_byte_pieces() {
    let cfg = Config {
        maxh2cdata: 4096,
        r2t_size: 4096,
        c2h_chunk: 1024,
        ..Config::default()
    };
    let h = HostConfig {
        digests: Digests {
            header: true,
            data: true,
        },
        hpda: 2,
        ..HostConfig::default()
    };
    verified_io(cfg, h, &[512, 4096, 12288], 5, 1);
}

/// Random exchanges: configurations, command mixes, piece sizes and completion orders.
#[test]
fn random_exchanges_settle_with_the_right_data() {
    for seed in 1..=40u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let max_io = rng.pick(&[65536u32, 131072, 262144]);
        let cfg = Config {
            queue_depth: rng.pick(&[4u16, 16, 128]),
            in_capsule_data_size: rng.pick(&[0u32, 4096, 8192]),
            max_io_size: max_io,
            maxh2cdata: rng.pick(&[4096u32, 8192, 65536]),
            r2t_size: rng.pick(&[4096u32, 16384, max_io]),
            max_r2t_per_command: rng.pick(&[1u8, 2, 4, 16]),
            c2h_chunk: rng.pick(&[512u32, 4096, 100_000, max_io]),
            c2h_success: rng.next() & 1 == 0,
            cpda: rng.pick(&[0u8, 1, 7]),
        };
        let hcfg = HostConfig {
            digests: Digests::from_byte(rng.next() as u8),
            hpda: rng.pick(&[0u8, 1, 31]),
            maxr2t: rng.pick(&[0u32, 1, 3, 100]),
            in_capsule_limit: cfg.in_capsule_data_size,
            qid: 1,
        };
        let (mut c, mut host) = connected(cfg, hcfg, 24 * (max_io as usize / BLOCK));
        c.conn.connected(1, rng.next() & 1 == 0);
        c.complete_at_once = rng.next() & 1 == 0;
        c.buffers_at_once = rng.next() & 1 == 0;
        c.rng = Rng(rng.next() | 1);
        let mut model = c.disk.clone();
        let mut expect = std::collections::BTreeMap::new();
        let n = rng.range(1, u64::from(cfg.queue_depth.min(24)));
        for cid in 0..n as u16 {
            // Distinct regions per command so that completion order does not matter.
            let slba = u64::from(cid) * u64::from(max_io) / BLOCK as u64;
            let max_blocks = max_io / BLOCK as u32;
            let any = rng.range(1, u64::from(max_blocks)) as u32;
            let blocks = rng.pick(&[1, 8, 9, 64, any, max_blocks]);
            let len = blocks as usize * BLOCK;
            match rng.range(0, 2) {
                0 => {
                    let data = pattern(seed ^ u64::from(cid), len);
                    let at = slba as usize * BLOCK;
                    model[at..at + len].copy_from_slice(&data);
                    host.submit_write(write_cmd(cid, slba, blocks), data)
                        .unwrap();
                    expect.insert(cid, None);
                }
                1 => {
                    let at = slba as usize * BLOCK;
                    host.submit_read(read_cmd(cid, slba, blocks), len as u32)
                        .unwrap();
                    expect.insert(cid, Some(c.disk[at..at + len].to_vec()));
                }
                _ => {
                    host.submit(with_sgl(
                        Sqe::new(io_opc::FLUSH, cid),
                        SglDescriptor::transport(0),
                    ))
                    .unwrap();
                    expect.insert(cid, None);
                }
            }
        }
        let piece = rng.pick(&[61usize, 1000, 65536, 1 << 20]);
        let done = pump(&mut c, &mut host, &mut rng, piece);
        assert_eq!(
            *host.state(),
            HostState::Live,
            "seed {seed}: {cfg:?} {hcfg:?}"
        );
        assert_eq!(done.len(), expect.len(), "seed {seed}");
        for d in done {
            assert_eq!(d.cqe.status, Status::SUCCESS, "seed {seed}");
            match expect.remove(&d.cqe.cid).expect("expected cid") {
                Some(data) => assert_eq!(d.data, data, "seed {seed} cid {}", d.cqe.cid),
                None => assert!(d.data.is_empty()),
            }
        }
        assert_eq!(c.disk, model, "seed {seed}");
        assert_eq!(c.conn.outstanding(), 0);
        assert!(c.bufs.map.is_empty());
    }
}

#[test]
fn actions_and_transmits_only_name_outstanding_commands() {
    // Drive a connection by hand and check every slot the machine names.
    let (mut c, mut host) = connected(Config::default(), HostConfig::default(), 256);
    for cid in 0..8u16 {
        if cid % 2 == 0 {
            host.submit_write(write_cmd(cid, u64::from(cid) * 8, 8), vec![cid as u8; 4096])
                .unwrap();
        } else {
            host.submit_read(read_cmd(cid, 0, 8), 4096).unwrap();
        }
    }
    let up = host.take_output();
    c.feed(&up);
    let mut hdr = [0u8; MAX_ENCODED_HEADER];
    let mut seen = 0;
    while let Some(t) = c.conn.poll_send(&mut hdr, &c.bufs) {
        if let Some(d) = t.data {
            // A slot still held, or the one this very PDU releases.
            assert!(
                c.conn.slot_state(d.slot) != Some(SlotState::Free) || t.release == Some(d.slot),
                "data of a live slot"
            );
            assert!(c.bufs.map.contains_key(&d.slot));
        }
        if let Some(s) = t.release {
            assert_eq!(c.conn.slot_state(s), Some(SlotState::Free));
            c.bufs.map.remove(&s);
        }
        seen += 1;
    }
    assert!(seen >= 8);
}

/// Fuzz finding (tcp_pdu): a buffer attached after a fatal error made the dead connection ask
/// to execute the command, after its Close.
#[test]
fn a_buffer_attached_after_a_fatal_error_executes_nothing() {
    let mut c = live(Config::default(), Digests::default());
    let s = with_sgl(read_cmd(1, 0, 8), SglDescriptor::transport(4096));
    c.conn.recv(&capsule(&plain(), s, &[]), &mut c.bufs);
    assert_eq!(
        c.conn.poll_action(),
        Some(Action::NeedBuffer {
            slot: SlotId(0),
            len: 4096
        })
    );
    // A bad header, then the runtime gets round to attaching the buffer.
    c.conn.recv(&[0xFF, 0, 24, 0, 24, 0, 0, 0], &mut c.bufs);
    assert_eq!(c.conn.state(), ConnState::Terminating);
    assert_eq!(c.conn.buffer_ready(SlotId(0)), Ok(()));
    assert_eq!(c.conn.outstanding(), 0, "the command is dropped");
    let wire = c.flush();
    assert_eq!(wire[0], PduType::C2hTermReq as u8);
    assert_eq!(c.conn.poll_action(), Some(Action::Close));
    assert_eq!(c.conn.poll_action(), None, "nothing after Close");
}

#[test]
fn a_short_header_buffer_loses_no_pdu() {
    let mut c = Ctrl::new(Config::default(), 8);
    c.feed(&icreq(Digests::default()));
    let mut small = [0u8; 100];
    assert_eq!(c.conn.poll_send(&mut small, &c.bufs), None);
    assert_eq!(c.flush().len(), 128, "the ICResp is still there");
}
