//! PDU layouts against the specification's figures, round trips, streaming, and every class of
//! malformed header.

use target_core::nvme::spec::{fctype, io_opc};
use target_core::nvme::{Cqe, SglDescriptor, Sqe, Status};

use super::*;

/// What a reader produced, owned (consecutive data pieces merged).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Ev {
    Header(Pdu, u32),
    Data(Vec<u8>),
    End(bool),
    Fatal(Fatal),
    Abort,
}

/// Feeds `bytes` to `r` in pieces of `piece` bytes; stops at a fatal error.
pub(crate) fn read_all(r: &mut PduReader, bytes: &[u8], piece: usize) -> Vec<Ev> {
    let mut evs = Vec::new();
    for chunk in bytes.chunks(piece.max(1)) {
        let mut at = 0;
        loop {
            let (n, ev) = r.read(&chunk[at..]);
            at += n;
            match ev {
                ReadEvent::NeedMore => break,
                ReadEvent::Header { pdu, data_len } => evs.push(Ev::Header(pdu, data_len)),
                ReadEvent::Data(d) => match evs.last_mut() {
                    Some(Ev::Data(v)) => v.extend_from_slice(d),
                    _ => evs.push(Ev::Data(d.to_vec())),
                },
                ReadEvent::End { data_digest_ok } => evs.push(Ev::End(data_digest_ok)),
                ReadEvent::Fatal(f) => {
                    evs.push(Ev::Fatal(f));
                    return evs;
                }
                ReadEvent::Abort => {
                    evs.push(Ev::Abort);
                    return evs;
                }
            }
            if at == chunk.len() && r.needed() > 0 {
                break;
            }
        }
    }
    evs
}

fn framing(header: bool, data: bool, pda: u8) -> Framing {
    Framing {
        digests: Digests { header, data },
        pda,
    }
}

fn enc(f: impl FnOnce(&mut [u8]) -> Result<usize, BufferTooSmall>) -> Vec<u8> {
    let mut b = [0u8; MAX_ENCODED_HEADER];
    let n = f(&mut b).expect("encodes");
    b[..n].to_vec()
}

/// A reflected CRC-32C computed bit by bit, to check the crate's.
fn crc32c_bitwise(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

fn read_sqe() -> Sqe {
    let mut s = Sqe::new(io_opc::READ, 0x1234);
    s.set_nsid(1)
        .set_cdw(10, 0x100)
        .set_cdw(12, 7)
        .set_sgl1(SglDescriptor::transport(4096));
    s
}

// ------------------------------------------------------------------------------- layouts

#[test]
fn crc32c_check_values() {
    assert_eq!(data_digest(b"123456789"), 0xE306_9283);
    assert_eq!(crc32c_bitwise(b"123456789"), 0xE306_9283);
    let data: Vec<u8> = (0..=255u8).cycle().take(5000).collect();
    assert_eq!(data_digest(&data), crc32c_bitwise(&data));
    let mut d = DataDigest::new();
    for piece in data.chunks(7) {
        d.update(piece);
    }
    assert_eq!(d.value(), crc32c_bitwise(&data), "digest over pieces");
}

#[test]
fn icreq_layout_as_linux_sends_it() {
    let b = enc(|b| {
        IcReq::linux(Digests {
            header: true,
            data: true,
        })
        .encode(b)
    });
    let mut want = [0u8; 128];
    want[0] = 0x00; // ICReq
    want[2] = 128; // HLEN
    want[4] = 128; // PLEN
    want[11] = 0x03; // HDGST_ENABLE | DDGST_ENABLE
    assert_eq!(b, want);
    let mut b = enc(|b| {
        IcReq {
            pfv: 0,
            hpda: 3,
            digests: Digests::default(),
            maxr2t: 0x0102_0304,
        }
        .encode(b)
    });
    assert_eq!(&b[8..16], &[0, 0, 3, 0, 0x04, 0x03, 0x02, 0x01]);
    b[8] = 1;
    assert_eq!(IcReq::decode(&b).pfv, 1);
}

#[test]
fn icresp_layout() {
    let b = enc(|b| {
        IcResp {
            pfv: 0,
            cpda: 0,
            digests: Digests {
                header: true,
                data: false,
            },
            maxh2cdata: 131072,
        }
        .encode(b)
    });
    assert_eq!(b.len(), 128);
    assert_eq!(
        &b[..16],
        &[1, 0, 128, 0, 128, 0, 0, 0, 0, 0, 0, 1, 0, 0, 2, 0]
    );
    assert!(b[16..].iter().all(|&x| x == 0));
}

#[test]
fn capsule_cmd_layout_with_and_without_digests() {
    let sqe = read_sqe();
    // No digests, no data: PDO 0, PLEN 72.
    let b = enc(|b| CapsuleCmd { sqe }.encode(&Framing::default(), 0, b));
    assert_eq!(&b[..8], &[4, 0, 72, 0, 72, 0, 0, 0]);
    assert_eq!(&b[8..72], sqe.as_bytes());
    // Header digest and 1024 bytes of in-capsule data with data digest (a Linux Connect):
    // PDO = 72 + 4, PLEN = 76 + 1024 + 4.
    let f = framing(true, true, 0);
    let b = enc(|b| CapsuleCmd { sqe }.encode(&f, 1024, b));
    assert_eq!(b.len(), 76);
    assert_eq!(&b[..8], &[4, 3, 72, 76, 0x50, 0x04, 0, 0]);
    assert_eq!(
        u32::from_le_bytes(b[72..76].try_into().unwrap()),
        crc32c_bitwise(&b[..72])
    );
}

#[test]
fn capsule_resp_layout() {
    let cqe = Cqe {
        dw0: 0x0001_0002,
        dw1: 0,
        sqhd: 3,
        sqid: 1,
        cid: 0x1234,
        status: Status::INVALID_FIELD,
    };
    let b = enc(|b| CapsuleResp { cqe }.encode(&Framing::default(), b));
    assert_eq!(&b[..8], &[5, 0, 24, 0, 24, 0, 0, 0]);
    assert_eq!(&b[8..24], &cqe.encode());
    let b = enc(|b| CapsuleResp { cqe }.encode(&framing(true, true, 0), b));
    // The data digest flag never appears on a PDU without data.
    assert_eq!(&b[..8], &[5, 1, 24, 0, 28, 0, 0, 0]);
    assert_eq!(b.len(), 28);
}

#[test]
fn data_and_r2t_layouts() {
    let h = H2cData {
        cccid: 0x0102,
        ttag: 0x0304,
        datao: 0x1000,
        datal: 0x2000,
        last: true,
    };
    let b = enc(|b| h.encode(&Framing::default(), b));
    assert_eq!(
        b,
        [
            6, 0x04, 24, 24, 0x18, 0x20, 0, 0, 0x02, 0x01, 0x04, 0x03, 0, 0x10, 0, 0, 0, 0x20, 0,
            0, 0, 0, 0, 0
        ]
    );
    let c = C2hData {
        cccid: 7,
        datao: 0,
        datal: 512,
        last: true,
        success: true,
    };
    let b = enc(|b| c.encode(&framing(true, true, 0), b));
    // HDGSTF|DDGSTF|LAST|SUCCESS; PDO 28; PLEN 28 + 512 + 4.
    assert_eq!(&b[..8], &[7, 0x0F, 24, 28, 0x20, 0x02, 0, 0]);
    assert_eq!(&b[8..12], &[7, 0, 0, 0], "C2HData bytes 10-11 are reserved");
    let r = R2t {
        cccid: 9,
        ttag: 2,
        r2to: 4096,
        r2tl: 8192,
    };
    let b = enc(|b| r.encode(&Framing::default(), b));
    assert_eq!(
        b,
        [
            9, 0, 24, 0, 24, 0, 0, 0, 9, 0, 2, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0
        ]
    );
}

#[test]
fn c2h_data_is_padded_to_the_hosts_alignment() {
    let c = C2hData {
        cccid: 1,
        datao: 0,
        datal: 4,
        last: true,
        success: false,
    };
    // HPDA 31: data at 128; the padding is zero.
    let b = enc(|b| c.encode(&framing(true, false, 31), b));
    assert_eq!(b.len(), 128);
    assert_eq!(b[3], 128, "PDO");
    assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), 132);
    assert!(b[28..128].iter().all(|&x| x == 0));
    // HPDA 1 (8 bytes) without header digest: 24 is already aligned.
    let b = enc(|b| c.encode(&framing(false, false, 1), b));
    assert_eq!(b[3], 24);
    // HPDA 3 (16 bytes): 28 rounds up to 32.
    let b = enc(|b| c.encode(&framing(true, false, 3), b));
    assert_eq!(b[3], 32);
}

#[test]
fn term_req_layout_and_cut() {
    let offending = [0xAAu8; 200];
    let b = enc(|b| {
        TermReq::new(Fes::InvalidHeaderField, 2).encode(PduType::C2hTermReq, &offending, b)
    });
    assert_eq!(
        b.len(),
        152,
        "24 + at most 128 bytes of the offending header"
    );
    assert_eq!(&b[..14], &[3, 0, 24, 0, 152, 0, 0, 0, 1, 0, 2, 0, 0, 0]);
    assert!(b[24..].iter().all(|&x| x == 0xAA));
    // FEI is reserved for statuses other than 1 and 6.
    let t = TermReq::new(Fes::HeaderDigestError, 99);
    assert_eq!(t.fei, 0);
}

#[test]
fn encoders_refuse_small_buffers() {
    let mut b = [0u8; 100];
    assert_eq!(
        IcReq::linux(Digests::default()).encode(&mut b),
        Err(BufferTooSmall { needed: 128 })
    );
    let mut b = [0u8; 27];
    assert_eq!(
        CapsuleResp {
            cqe: Cqe::decode(&[0; 16]).unwrap()
        }
        .encode(&framing(true, false, 0), &mut b),
        Err(BufferTooSmall { needed: 28 })
    );
}

// --------------------------------------------------------------------------- round trips

/// One PDU of every type, with data where the type carries some.
fn every_pdu(f: &Framing) -> Vec<(Role, Vec<u8>, Pdu, Vec<u8>)> {
    let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
    let mut out = Vec::new();
    let with_data = |hdr: Vec<u8>, d: &[u8], ddgst: bool| {
        let mut v = hdr;
        v.extend_from_slice(d);
        if ddgst {
            v.extend_from_slice(&data_digest(d).to_le_bytes());
        }
        v
    };
    let icreq = IcReq {
        pfv: 0,
        hpda: 2,
        digests: f.digests,
        maxr2t: 3,
    };
    out.push((
        Role::Controller,
        enc(|b| icreq.encode(b)),
        Pdu::IcReq(icreq),
        vec![],
    ));
    let icresp = IcResp {
        pfv: 0,
        cpda: 1,
        digests: f.digests,
        maxh2cdata: 8192,
    };
    out.push((
        Role::Host,
        enc(|b| icresp.encode(b)),
        Pdu::IcResp(icresp),
        vec![],
    ));
    let mut sqe = Sqe::new(io_opc::WRITE, 5);
    sqe.set_sgl1(SglDescriptor::unkeyed(0, 1, 0, 1000));
    let h = enc(|b| CapsuleCmd { sqe }.encode(f, 1000, b));
    out.push((
        Role::Controller,
        with_data(h, &data, f.digests.data),
        Pdu::CapsuleCmd(CapsuleCmd { sqe }),
        data.clone(),
    ));
    let cqe = Cqe {
        dw0: 1,
        dw1: 2,
        sqhd: 3,
        sqid: 4,
        cid: 5,
        status: Status::SUCCESS,
    };
    out.push((
        Role::Host,
        enc(|b| CapsuleResp { cqe }.encode(f, b)),
        Pdu::CapsuleResp(CapsuleResp { cqe }),
        vec![],
    ));
    let h2c = H2cData {
        cccid: 5,
        ttag: 6,
        datao: 4096,
        datal: 1000,
        last: true,
    };
    out.push((
        Role::Controller,
        with_data(enc(|b| h2c.encode(f, b)), &data, f.digests.data),
        Pdu::H2cData(h2c),
        data.clone(),
    ));
    let c2h = C2hData {
        cccid: 5,
        datao: 0,
        datal: 1000,
        last: true,
        success: true,
    };
    out.push((
        Role::Host,
        with_data(enc(|b| c2h.encode(f, b)), &data, f.digests.data),
        Pdu::C2hData(c2h),
        data.clone(),
    ));
    let r2t = R2t {
        cccid: 5,
        ttag: 6,
        r2to: 0,
        r2tl: 65536,
    };
    out.push((Role::Host, enc(|b| r2t.encode(f, b)), Pdu::R2t(r2t), vec![]));
    let t = TermReq::new(Fes::DataTransferOutOfRange, 0);
    let err = [9u8; 24];
    out.push((
        Role::Controller,
        enc(|b| t.encode(PduType::H2cTermReq, &err, b)),
        Pdu::H2cTermReq(t),
        err.to_vec(),
    ));
    out.push((
        Role::Host,
        enc(|b| t.encode(PduType::C2hTermReq, &err, b)),
        Pdu::C2hTermReq(t),
        err.to_vec(),
    ));
    out
}

fn reader_for(role: Role, pdu: &Pdu, f: Framing) -> PduReader {
    let mut r = PduReader::new(role);
    if !matches!(pdu, Pdu::IcReq(_) | Pdu::IcResp(_)) {
        r.set_framing(f);
    }
    r
}

#[test]
fn every_pdu_round_trips_with_and_without_digests_in_any_pieces() {
    for (hd, dd) in [(false, false), (true, false), (false, true), (true, true)] {
        for pda in [0u8, 3, 31] {
            let f = framing(hd, dd, pda);
            for (role, bytes, pdu, data) in every_pdu(&f) {
                for piece in [1, 3, 8, 100, bytes.len()] {
                    let mut r = reader_for(role, &pdu, f);
                    let evs = read_all(&mut r, &bytes, piece);
                    let mut want = vec![Ev::Header(pdu, data.len() as u32)];
                    if !data.is_empty() {
                        want.push(Ev::Data(data.clone()));
                    }
                    want.push(Ev::End(true));
                    assert_eq!(evs, want, "{pdu:?} hd={hd} dd={dd} pda={pda} piece={piece}");
                    assert!(r.is_idle());
                }
            }
        }
    }
}

#[test]
fn a_stream_of_pdus_byte_by_byte_gives_the_same_events() {
    let f = framing(true, true, 0);
    let mut stream = Vec::new();
    let mut want = Vec::new();
    for (role, bytes, pdu, data) in every_pdu(&f) {
        if role != Role::Controller || matches!(pdu, Pdu::IcReq(_) | Pdu::H2cTermReq(_)) {
            continue;
        }
        for _ in 0..3 {
            stream.extend_from_slice(&bytes);
            want.push(Ev::Header(pdu, data.len() as u32));
            if !data.is_empty() {
                want.push(Ev::Data(data.clone()));
            }
            want.push(Ev::End(true));
        }
    }
    let mut r = PduReader::new(Role::Controller);
    r.set_framing(f);
    let mut r2 = r.clone();
    assert_eq!(read_all(&mut r, &stream, 1), want);
    assert_eq!(read_all(&mut r2, &stream, stream.len()), want);
}

#[test]
fn needed_tells_the_bytes_to_finish_each_part() {
    let f = framing(true, true, 0);
    let mut sqe = Sqe::new(io_opc::WRITE, 1);
    sqe.set_sgl1(SglDescriptor::unkeyed(0, 1, 0, 10));
    let mut bytes = enc(|b| CapsuleCmd { sqe }.encode(&f, 10, b));
    bytes.extend_from_slice(&[1; 10]);
    bytes.extend_from_slice(&data_digest(&[1; 10]).to_le_bytes());
    let mut r = PduReader::new(Role::Controller);
    r.set_framing(f);
    assert_eq!(r.needed(), 8);
    assert_eq!(r.read(&bytes[..5]), (5, ReadEvent::NeedMore));
    assert_eq!(r.needed(), 3);
    assert_eq!(r.read(&bytes[5..8]), (3, ReadEvent::NeedMore));
    assert_eq!(r.needed(), 68, "rest of the header and its digest");
    let (n, ev) = r.read(&bytes[8..]);
    assert_eq!(n, 68);
    assert!(matches!(ev, ReadEvent::Header { data_len: 10, .. }));
    assert_eq!(r.needed(), 10);
    assert_eq!(r.read(&bytes[76..80]), (4, ReadEvent::Data(&[1; 4])));
    assert_eq!(r.needed(), 6);
    assert_eq!(r.read(&bytes[80..86]), (6, ReadEvent::Data(&[1; 6])));
    assert_eq!(r.read(&bytes[86..88]), (2, ReadEvent::NeedMore));
    assert_eq!(r.needed(), 2, "rest of the data digest");
    assert_eq!(
        r.read(&bytes[88..]),
        (
            2,
            ReadEvent::End {
                data_digest_ok: true
            }
        )
    );
}

#[test]
fn a_bad_data_digest_is_reported_at_the_end_not_fatal() {
    let f = framing(false, true, 0);
    let h = H2cData {
        cccid: 1,
        ttag: 0,
        datao: 0,
        datal: 8,
        last: true,
    };
    let mut bytes = enc(|b| h.encode(&f, b));
    bytes.extend_from_slice(&[5; 8]);
    bytes.extend_from_slice(&(data_digest(&[5; 8]) ^ 1).to_le_bytes());
    let mut r = PduReader::new(Role::Controller);
    r.set_framing(f);
    let evs = read_all(&mut r, &bytes, 3);
    assert_eq!(evs.last(), Some(&Ev::End(false)));
    assert!(r.is_idle(), "the stream goes on");
}

// ------------------------------------------------------------------------ malformed input

/// Reads one malformed PDU and returns the reader's verdict.
fn verdict(role: Role, f: Option<Framing>, bytes: &[u8]) -> Ev {
    let mut r = PduReader::new(role);
    if let Some(f) = f {
        r.set_framing(f);
    }
    let evs = read_all(&mut r, bytes, 1);
    let last = evs.last().cloned().expect("an event");
    if let Ev::Fatal(_) = last {
        assert!(r.is_failed());
        // The reader stays failed.
        assert!(matches!(r.read(&[0; 8]), (0, ReadEvent::Fatal(_))));
    }
    last
}

fn fatal(fes: Fes, fei: u32) -> Ev {
    Ev::Fatal(Fatal::new(fes, fei))
}

fn resp_bytes(f: &Framing) -> Vec<u8> {
    enc(|b| {
        CapsuleResp {
            cqe: Cqe::decode(&[0; 16]).unwrap(),
        }
        .encode(f, b)
    })
}

fn cmd_bytes(f: &Framing, icd: u32) -> Vec<u8> {
    let mut sqe = Sqe::fabrics(fctype::CONNECT, 1);
    sqe.set_sgl1(SglDescriptor::unkeyed(0, 1, 0, icd));
    let mut v = enc(|b| CapsuleCmd { sqe }.encode(f, icd, b));
    v.extend(std::iter::repeat_n(0u8, icd as usize));
    if f.digests.data && icd > 0 {
        v.extend_from_slice(&data_digest(&vec![0u8; icd as usize]).to_le_bytes());
    }
    v
}

#[test]
fn malformed_common_headers_get_the_lowest_field_in_error() {
    let plain = framing(false, false, 0);
    let hd = framing(true, false, 0);
    let live = Some(plain);
    let c = Role::Controller;
    let cmd = cmd_bytes(&plain, 0);
    let with = |f: &dyn Fn(&mut Vec<u8>)| {
        let mut v = cmd.clone();
        f(&mut v);
        v
    };
    type Case = (&'static str, Role, Option<Framing>, Vec<u8>, Ev);
    let cases: Vec<Case> = vec![
        (
            "unknown type 0x08",
            c,
            live,
            with(&|v| v[0] = 0x08),
            fatal(Fes::InvalidHeaderField, 0),
        ),
        (
            "unknown type 0xFF",
            c,
            live,
            with(&|v| v[0] = 0xFF),
            fatal(Fes::InvalidHeaderField, 0),
        ),
        (
            "C2H type to a controller",
            c,
            live,
            resp_bytes(&plain),
            fatal(Fes::InvalidHeaderField, 0),
        ),
        (
            "H2C type to a host",
            Role::Host,
            live,
            cmd.clone(),
            fatal(Fes::InvalidHeaderField, 0),
        ),
        (
            "capsule before ICReq",
            c,
            None,
            cmd.clone(),
            fatal(Fes::PduSequenceError, 0),
        ),
        (
            "ICReq after ICReq",
            c,
            live,
            enc(|b| IcReq::linux(Digests::default()).encode(b)),
            fatal(Fes::PduSequenceError, 0),
        ),
        (
            "reserved flag bit",
            c,
            live,
            with(&|v| v[1] = 0x10),
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "LAST on a capsule",
            c,
            live,
            with(&|v| v[1] = 0x04),
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "HDGSTF without header digests",
            c,
            live,
            cmd_bytes(&hd, 0),
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "no HDGSTF with header digests",
            c,
            Some(hd),
            cmd.clone(),
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "DDGSTF on a capsule without data",
            c,
            Some(framing(false, true, 0)),
            with(&|v| v[1] = 0x02),
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "no DDGSTF on data with data digests",
            c,
            Some(framing(false, true, 0)),
            cmd_bytes(&plain, 16),
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "HLEN 64 on a capsule",
            c,
            live,
            with(&|v| v[2] = 64),
            fatal(Fes::InvalidHeaderField, 2),
        ),
        (
            "HLEN 0",
            c,
            live,
            with(&|v| v[2] = 0),
            fatal(Fes::InvalidHeaderField, 2),
        ),
        (
            "PDO inside the header",
            c,
            live,
            with(&|v| {
                v[3] = 8;
                v[4] = 80
            }),
            fatal(Fes::InvalidHeaderField, 3),
        ),
        (
            "PDO past PLEN",
            c,
            live,
            with(&|v| {
                v[3] = 76;
                v[4] = 74
            }),
            fatal(Fes::InvalidHeaderField, 3),
        ),
        (
            "data without PDO",
            c,
            live,
            with(&|v| v[4] = 80),
            fatal(Fes::InvalidHeaderField, 3),
        ),
        (
            "PDO off the CPDA alignment",
            c,
            Some(framing(false, false, 1)),
            with(&|v| {
                v[3] = 76;
                v[4] = 80
            }),
            fatal(Fes::InvalidHeaderField, 3),
        ),
        (
            "PLEN below HLEN",
            c,
            live,
            with(&|v| v[4] = 71),
            fatal(Fes::InvalidHeaderField, 4),
        ),
        (
            "PLEN 0",
            c,
            live,
            with(&|v| v[4] = 0),
            fatal(Fes::InvalidHeaderField, 4),
        ),
        (
            "PDO on a response",
            Role::Host,
            live,
            {
                let mut v = resp_bytes(&plain);
                v[3] = 24;
                v
            },
            fatal(Fes::InvalidHeaderField, 3),
        ),
        (
            "PLEN beyond a response",
            Role::Host,
            live,
            {
                let mut v = resp_bytes(&plain);
                v[4] = 28;
                v
            },
            fatal(Fes::InvalidHeaderField, 4),
        ),
        (
            "ICReq PLEN 132",
            c,
            None,
            {
                let mut v = enc(|b| IcReq::linux(Digests::default()).encode(b));
                v[4] = 132;
                v
            },
            fatal(Fes::InvalidHeaderField, 4),
        ),
        (
            "ICReq with HDGSTF",
            c,
            None,
            {
                let mut v = enc(|b| IcReq::linux(Digests::default()).encode(b));
                v[1] = 1;
                v
            },
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "data digest flag with no room for it",
            c,
            Some(framing(false, true, 0)),
            with(&|v| {
                v[1] = 2;
                v[3] = 72;
                v[4] = 76
            }),
            fatal(Fes::InvalidHeaderField, 4),
        ),
        (
            "SUCCESS without LAST",
            Role::Host,
            live,
            enc(|b| {
                C2hData {
                    cccid: 1,
                    datao: 0,
                    datal: 4,
                    last: false,
                    success: true,
                }
                .encode(&plain, b)
            }),
            fatal(Fes::InvalidHeaderField, 1),
        ),
        (
            "H2CData DATAL not matching PLEN",
            c,
            live,
            {
                let mut v = enc(|b| {
                    H2cData {
                        cccid: 1,
                        ttag: 0,
                        datao: 0,
                        datal: 8,
                        last: true,
                    }
                    .encode(&plain, b)
                });
                v[16] = 9;
                v.extend_from_slice(&[0; 8]);
                v
            },
            fatal(Fes::InvalidHeaderField, 16),
        ),
        (
            "TermReq with PLEN 23",
            c,
            live,
            {
                let mut v = enc(|b| {
                    TermReq::new(Fes::PduSequenceError, 0).encode(PduType::H2cTermReq, &[], b)
                });
                v[4] = 23;
                v
            },
            Ev::Abort,
        ),
        (
            "TermReq with PLEN 153",
            c,
            live,
            {
                let mut v = enc(|b| {
                    TermReq::new(Fes::PduSequenceError, 0).encode(PduType::H2cTermReq, &[], b)
                });
                v[4] = 153;
                v
            },
            Ev::Abort,
        ),
    ];
    for (name, role, f, bytes, want) in cases {
        assert_eq!(verdict(role, f, &bytes), want, "{name}");
    }
}

#[test]
fn a_wrong_header_digest_is_a_header_digest_error() {
    let f = framing(true, false, 0);
    let mut v = cmd_bytes(&f, 0);
    v[72] ^= 0x80;
    assert_eq!(
        verdict(Role::Controller, Some(f), &v),
        fatal(Fes::HeaderDigestError, 0)
    );
    // A changed header byte under a correct-looking digest is caught the same way.
    let mut v = cmd_bytes(&f, 0);
    v[20] ^= 1;
    assert_eq!(
        verdict(Role::Controller, Some(f), &v),
        fatal(Fes::HeaderDigestError, 0)
    );
}

#[test]
fn the_error_header_for_a_termination_request() {
    let plain = framing(false, false, 0);
    let mut r = PduReader::new(Role::Controller);
    r.set_framing(plain);
    let mut v = cmd_bytes(&plain, 0);
    v[2] = 64;
    let evs = read_all(&mut r, &v, v.len());
    assert_eq!(evs, vec![fatal(Fes::InvalidHeaderField, 2)]);
    assert_eq!(r.header_bytes(), &v[..8], "only the common header was read");
    let f = framing(true, false, 0);
    let mut r = PduReader::new(Role::Controller);
    r.set_framing(f);
    let v = cmd_bytes(&f, 0);
    let (_, ev) = r.read(&v);
    assert!(matches!(ev, ReadEvent::Header { .. }));
    assert_eq!(r.header_bytes(), &v[..72], "the header without its digest");
}

/// Fuzz finding (tcp_pdu): the encoder cut data lengths to `u32::MAX − 512`, so a received
/// capsule announcing more in-capsule data re-encoded with a different PLEN. Any length a
/// received PDU can announce frames exactly.
#[test]
fn the_largest_data_lengths_frame_exactly() {
    let f = framing(true, true, 0);
    let sqe = read_sqe();
    let icd = u32::MAX - 80;
    let b = enc(|b| CapsuleCmd { sqe }.encode(&f, icd, b));
    assert_eq!(u32::from_le_bytes(b[4..8].try_into().unwrap()), u32::MAX);
    let mut r = PduReader::new(Role::Controller);
    r.set_framing(f);
    let (_, ev) = r.read(&b);
    assert_eq!(
        ev,
        ReadEvent::Header {
            pdu: Pdu::CapsuleCmd(CapsuleCmd { sqe }),
            data_len: icd
        }
    );
}
