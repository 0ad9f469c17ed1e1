//! Writes the seed corpora of every fuzz target into `fuzz/seeds/<target>/`.
//!
//! Sources, in order of preference:
//! - `seeds/captures/rpc/*.bin`: the bytes SPDK's own client (`spdk-rpc` 26.9, i.e. rpc.py) sent
//!   to a live `rtgt serve`, captured by a Unix-socket proxy (one file per connection);
//! - `seeds/captures/wire/*.bin`: NVMe/RDMA capsules, RDMA CM private data and SRP IUs the Linux
//!   kernel initiators sent over soft-RoCE, extracted from a packet capture in the QEMU guest
//!   (`seeds/captures/guest/`, extracted by `seeds/captures/extract.py`);
//! - the command sequences the Linux host and ib_srp send (reference §8.2 and the srp
//!   reference), built here with the same encoders the test initiators use, for what the
//!   captures do not cover;
//! - for `tcp_pdu`, NVMe/TCP byte streams recorded from `transport_tcp::host::Host` talking to
//!   a `Connection`, and captures of what the Rust NVMe/TCP test host (`tcp_host`) wrote to a
//!   socket of rtgt's TCP transport on loopback, one seed per connection (no Linux nvme-tcp
//!   capture yet).
//!
//! Run: `cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds` (from the repository
//! root). The seeds are committed; run it again after changing an input format.

use std::fs;
use std::path::{Path, PathBuf};

use rtgt_tests::nvme_host::{read_sqe, write_sqe};
use target_core::nvme::fabrics::build;
use target_core::nvme::spec::{admin_opc, fctype, io_opc, prop};
use target_core::nvme::{SglDescriptor, Sqe};
use transport_rdma::cm_data::ConnectRequestData;
use transport_srp::proto::cmd::{DirectDesc, IndirectDesc, LINUX_IMM_DATA_OFFSET};
use transport_srp::proto::login::REQ_FLAG_IMMED_REQUESTED;
use transport_srp::proto::{
    AerRsp, BufFormats, CredRsp, DataDesc, ILogout, LoginReq, PortId, SrpCmd, Tag, TaskAttr,
    TaskMgmt, TskMgmt,
};
use transport_tcp::conn::{Action, Config, Connection, DataBuffers, SlotId};
use transport_tcp::host::{Host, HostConfig};
use transport_tcp::pdu::{
    CapsuleCmd, Digests, Fes, Framing, H2cData, IcReq, MAX_ENCODED_HEADER, PduType, TermReq,
};

const SUBNQN: &str = "nqn.2016-06.io.spdk:cnode1";
const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4b10-8044-b3c04f4e4433";

struct Out {
    root: PathBuf,
}

impl Out {
    fn put(&self, target: &str, name: &str, bytes: &[u8]) {
        let dir = self.root.join(target);
        fs::create_dir_all(&dir).expect("seed dir");
        fs::write(dir.join(name), bytes).expect("seed file");
    }
}

// ------------------------------------------------------------------------ DH-HMAC-CHAP

/// `nvme_auth` records (see the target): an honest host's whole exchange and variations, and
/// every message kind and command sent raw.
fn auth_seeds(o: &Out) {
    use target_core::nvme::auth::messages::{
        Challenge, Failure, Negotiate, ProtocolDescriptor, Reply, Success1, Success2,
    };
    use target_core::nvme::auth::{AuthCmd, AuthDirection, FailureReason, Message};
    // Ops: 0 raw send, 1 receive, 2 host step, 3 host start, 4 time, 5 host raw, 6 SQE, 7 keys.
    let start = |tid: u16| [vec![3], tid.to_le_bytes().to_vec(), vec![0, 0, 0]].concat();
    let recv = [1u8, 0x00, 0x10]; // AL 4096
    let step = [2u8, 0, 0, 0];
    let honest = |tid: u16, bidirectional: bool| {
        let mut v = start(tid);
        v.extend(recv);
        v.extend(step);
        v.extend(recv);
        if bidirectional {
            v.extend(step);
        }
        v
    };
    // [seed][policy][flags]: flags bit 0 controller key, bit 1 host asks, bit 2 wrong key.
    for (name, cfg, body) in [
        ("honest-null-sha256", [1u8, 0x01, 0x10], honest(1, false)),
        (
            "honest-ffdhe2048-sha512-bidi",
            [2, 0x14, 0x13],
            honest(7, true),
        ),
        ("honest-any", [3, 0x0F, 0x10], honest(0x1234, false)),
        ("wrong-key", [4, 0x01, 0x14], honest(1, false)),
        ("bidi-without-ctrl-key", [5, 0x01, 0x12], honest(1, true)),
        (
            "reauth",
            [6, 0x0A, 0x13],
            [honest(1, true), honest(2, true)].concat(),
        ),
        (
            "timeout",
            [7, 0x01, 0x00],
            [start(3), recv.to_vec(), vec![4, 200]].concat(),
        ),
        (
            "tampered-reply",
            [8, 0x01, 0x10],
            [start(3), recv.to_vec(), vec![2, 0x01, 20, 0], recv.to_vec()].concat(),
        ),
    ] {
        let mut v = cfg.to_vec();
        v.extend(body);
        o.put("nvme_auth", name, &v);
    }
    let mut linux = ProtocolDescriptor {
        auth_id: 1,
        ..Default::default()
    };
    linux.hash_ids.extend([1, 2, 3]);
    linux.dh_ids.extend([0, 1, 2, 3, 4, 5]);
    let failure = Failure {
        tid: 1,
        reason_code: 1,
        reason: FailureReason::Failed,
    };
    let raw = [
        Message::Negotiate(Negotiate {
            tid: 1,
            sc_c: 0,
            protocols: vec![linux],
        }),
        Message::Challenge(Challenge {
            tid: 1,
            hash_id: 1,
            dh_id: 0,
            seqnum: 1,
            challenge: vec![0xC1; 32],
            dh_value: vec![],
        }),
        Message::Reply(Reply {
            tid: 1,
            response: vec![0xA1; 32],
            challenge: Some(vec![0xC2; 32]),
            seqnum: 2,
            dh_value: vec![2; 256],
        }),
        Message::Success1(Success1 {
            tid: 1,
            hl: 32,
            response: Some(vec![0xA2; 32]),
        }),
        Message::Success2(Success2 { tid: 1 }),
        Message::Failure1(failure),
        Message::Failure2(failure),
    ];
    // Each message raw, after a raw AUTH_Negotiate and its Challenge, then to the host side.
    let raw_send = |v: &mut Vec<u8>, b: &[u8]| {
        v.push(0);
        v.extend((b.len() as u16).to_le_bytes());
        v.extend(b);
    };
    for (i, m) in raw.iter().enumerate() {
        let mut v = vec![9u8, 0x0F, 0x11];
        raw_send(&mut v, &raw[0].encode());
        v.extend(recv);
        let b = m.encode();
        raw_send(&mut v, &b);
        v.extend(recv);
        v.push(5);
        v.extend((b.len() as u16).to_le_bytes());
        v.extend(&b);
        o.put("nvme_auth", &format!("raw-{i}-{}", m.name()), &v);
    }
    let mut v = vec![10u8, 0x01, 0x10];
    for (dir, len) in [(AuthDirection::Send, 72u32), (AuthDirection::Receive, 4096)] {
        v.push(6);
        v.extend(AuthCmd::sqe(dir, 1, len).as_bytes());
    }
    v.extend([7, 0x93]);
    v.extend(honest(5, false));
    o.put("nvme_auth", "commands-and-rotation", &v);
}

// ----------------------------------------------------------------------------------- NVMe

/// Linux's keyed SGL: subtype 0xF (invalidate), page-aligned address.
fn keyed(len: u32) -> SglDescriptor {
    SglDescriptor::keyed(0x7f3a_2000_0000, len, 0x1234_5601, true)
}

fn with_sgl(mut s: Sqe, sgl: SglDescriptor) -> Sqe {
    s.set_sgl1(sgl);
    s
}

fn admin(opc: u8, nsid: u32, cdw10: u32, cdw11: u32, len: u32) -> Sqe {
    let mut s = Sqe::new(opc, 0);
    s.set_nsid(nsid).set_cdw(10, cdw10).set_cdw(11, cdw11);
    with_sgl(
        s,
        if len == 0 {
            SglDescriptor::null_keyed()
        } else {
            keyed(len)
        },
    )
}

fn get_log(lid: u8, nsid: u32, len: u32, offset: u64, rae: bool) -> Sqe {
    let numd = len / 4 - 1;
    let mut s = admin(
        admin_opc::GET_LOG_PAGE,
        nsid,
        u32::from(lid) | u32::from(rae) << 15 | (numd & 0xFFFF) << 16,
        numd >> 16,
        len,
    );
    s.set_cdw(12, offset as u32)
        .set_cdw(13, (offset >> 32) as u32);
    s
}

/// The admin commands of `nvme connect` (reference §8.2, steps 3–22) and of a discovery.
fn linux_admin_sequence(discovery: bool) -> Vec<(Sqe, Vec<u8>)> {
    let mut v = vec![
        (build::property_get(0, prop::CAP, true), vec![]),
        (build::property_set(0, prop::CC, 0x0046_0000), vec![]),
        (build::property_get(0, prop::CAP, true), vec![]),
        (build::property_set(0, prop::CC, 0x0046_0001), vec![]),
        (build::property_get(0, prop::CSTS, false), vec![]),
        (build::property_get(0, prop::VS, false), vec![]),
        (admin(admin_opc::IDENTIFY, 0, 1, 0, 4096), vec![]),
    ];
    if discovery {
        v.push((get_log(0x70, 0, 20, 0, true), vec![]));
        v.push((get_log(0x70, 0, 4096, 1024, false), vec![]));
        v.push((get_log(0x70, 0, 20, 0, false), vec![]));
    } else {
        v.extend([
            (get_log(0x05, 0, 4096, 0, false), vec![]),
            (admin(admin_opc::IDENTIFY, 0, 6, 0, 4096), vec![]),
            (get_log(0x02, 0xFFFF_FFFF, 512, 0, false), vec![]),
            (
                admin(admin_opc::SET_FEATURES, 0, 0x07, 0x0001_0001, 0),
                vec![],
            ),
            (
                admin(admin_opc::SET_FEATURES, 0, 0x0B, 0x0000_0900, 0),
                vec![],
            ),
            (admin(admin_opc::ASYNC_EVENT_REQUEST, 0, 0, 0, 0), vec![]),
            (admin(admin_opc::IDENTIFY, 0, 2, 0, 4096), vec![]),
            (admin(admin_opc::IDENTIFY, 1, 3, 0, 4096), vec![]),
            (admin(admin_opc::IDENTIFY, 1, 0, 0, 4096), vec![]),
            (admin(admin_opc::GET_FEATURES, 0, 0x07, 0, 0), vec![]),
            (admin(admin_opc::KEEP_ALIVE, 0, 0, 0, 0), vec![]),
            (get_log(0x04, 0, 4096, 0, true), vec![]),
            (admin(admin_opc::ABORT, 0, 0x001F_0000, 0, 0), vec![]),
        ]);
    }
    v.push((build::property_set(0, prop::CC, 0x0046_4001), vec![]));
    v.push((build::property_get(0, prop::CSTS, false), vec![]));
    v
}

/// I/O commands as Linux sends them: in-capsule writes up to the in-capsule size, keyed
/// reads and large writes, Flush, Write Zeroes, DSM with its 4 KiB range buffer.
fn linux_io_sequence() -> Vec<(Sqe, Vec<u8>)> {
    let data: Vec<u8> = (0..4096u32).map(|i| (i * 7 + 3) as u8).collect();
    let mut dsm = vec![0u8; 4096];
    dsm[4..8].copy_from_slice(&8u32.to_le_bytes());
    dsm[8..16].copy_from_slice(&64u64.to_le_bytes());
    let mut d = Sqe::new(io_opc::DATASET_MANAGEMENT, 0);
    d.set_nsid(1).set_cdw(10, 0).set_cdw(11, 1 << 2);
    let mut wz = Sqe::new(io_opc::WRITE_ZEROES, 0);
    wz.set_nsid(1).set_cdw(10, 100).set_cdw(12, 7 | 1 << 25);
    let mut flush = Sqe::new(io_opc::FLUSH, 0);
    flush.set_nsid(1);
    vec![
        (with_sgl(read_sqe(1, 0, 8), keyed(4096)), vec![]),
        (with_sgl(read_sqe(1, 2040, 8), keyed(4096)), vec![]),
        (
            with_sgl(write_sqe(1, 16, 8), SglDescriptor::in_capsule(0, 4096)),
            data.clone(),
        ),
        (with_sgl(write_sqe(1, 256, 256), keyed(131072)), vec![]),
        (with_sgl(flush, SglDescriptor::null_keyed()), vec![]),
        (with_sgl(wz, SglDescriptor::null_keyed()), vec![]),
        (with_sgl(d, keyed(4096)), dsm),
        (
            with_sgl(
                {
                    let mut c = write_sqe(1, 16, 8);
                    c.0[0] = io_opc::COMPARE;
                    c
                },
                SglDescriptor::in_capsule(0, 4096),
            ),
            data,
        ),
    ]
}

/// `[len u16][sqe][data]` records.
fn records(cmds: &[(Sqe, Vec<u8>)], with_flags: Option<u8>) -> Vec<u8> {
    let mut v = Vec::new();
    for (s, d) in cmds {
        if let Some(f) = with_flags {
            v.push(f);
        }
        v.extend_from_slice(&(d.len() as u16).to_le_bytes());
        v.extend_from_slice(s.as_bytes());
        v.extend_from_slice(d);
    }
    v
}

fn nvme_seeds(o: &Out, w: &Wire) {
    let wire = &w.nvme;
    // nvme_capsule: [selector][records].
    for (name, sel, cmds) in [
        ("linux-connect", 0u8, linux_admin_sequence(false)),
        ("linux-discover", 4, linux_admin_sequence(true)),
        ("linux-io", 0, linux_io_sequence()),
        ("linux-io-msdbd16", 3, linux_io_sequence()),
    ] {
        let mut v = vec![sel];
        v.extend(records(&cmds, None));
        o.put("nvme_capsule", name, &v);
    }
    if !wire.is_empty() {
        let mut v = vec![0u8];
        v.extend(records(wire, None));
        o.put("nvme_capsule", "captured-linux", &v);
    }
    // fabrics_connect: admin Connect + I/O Connects of the same host.
    let admin = build::connect_sqe(0, 0, 31, 5000, keyed(1024));
    let data = build::connect_data([0x4c; 16], 0xFFFF, SUBNQN, HOSTNQN);
    let mut v = admin.as_bytes().to_vec();
    v.extend_from_slice(&data);
    v.push(0x1F);
    for qid in 1..=4u16 {
        v.extend_from_slice(
            build::connect_sqe(0, qid, 127, 0, SglDescriptor::in_capsule(0, 1024)).as_bytes(),
        );
        v.extend_from_slice(&build::connect_data([0x4c; 16], 0x11, SUBNQN, HOSTNQN));
    }
    o.put("fabrics_connect", "linux-admin-and-io", &v);
    let mut v = build::connect_sqe(0, 0, 31, 0, keyed(1024))
        .as_bytes()
        .to_vec();
    v.extend_from_slice(&build::connect_data(
        [1; 16],
        0xFFFF,
        "nqn.2014-08.org.nvmexpress.discovery",
        HOSTNQN,
    ));
    v.push(0x7F);
    o.put("fabrics_connect", "linux-discovery", &v);
    // Captured: the admin Connect, then the I/O Connects after it.
    if let Some((first, rest)) = w.connects.split_first() {
        let mut v = first.clone();
        v.push(0x1F);
        for c in rest {
            v.extend_from_slice(c);
        }
        o.put("fabrics_connect", "captured-linux", &v);
    }
    for (i, c) in w.cm.iter().enumerate() {
        let mut v = Vec::new();
        for x in [32u16, 128, 127] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(c);
        o.put("rdma_cm_data", &format!("captured-linux-{i}"), &v);
    }
    // rdma_cm_data: [max admin][max io][max qid] + the private data Linux sends.
    for (name, rec) in [
        (
            "linux-admin",
            ConnectRequestData {
                recfmt: 0,
                qid: 0,
                hrqsize: 32,
                hsqsize: 31,
                cntlid: 0,
            },
        ),
        (
            "linux-io",
            ConnectRequestData {
                recfmt: 0,
                qid: 1,
                hrqsize: 128,
                hsqsize: 127,
                cntlid: 1,
            },
        ),
    ] {
        let mut v = Vec::new();
        for x in [32u16, 128, 127] {
            v.extend_from_slice(&x.to_le_bytes());
        }
        v.extend_from_slice(&rec.encode());
        // Over IB/RoCE the CM pads private data to 92 bytes (REQ).
        v.resize(6 + 92, 0);
        o.put("rdma_cm_data", name, &v);
    }
    // nvmf_wire: [flags][len][sqe][data]; keyed SGLs redirected into the host's memory.
    let mut v = Vec::new();
    for (s, d) in linux_admin_sequence(false)
        .iter()
        .filter(|(s, _)| s.opcode() != admin_opc::ASYNC_EVENT_REQUEST && !is_shutdown(s))
    {
        v.push(2);
        v.extend_from_slice(&(d.len() as u16).to_le_bytes());
        v.extend_from_slice(s.as_bytes());
        v.extend_from_slice(d);
    }
    o.put("nvmf_wire", "linux-admin", &v);
    o.put(
        "nvmf_wire",
        "linux-io",
        &records(&linux_io_sequence(), Some(3)),
    );
    o.put(
        "nvmf_wire",
        "linux-io-pipelined",
        &records(&linux_io_sequence(), Some(7)),
    );
    if !wire.is_empty() {
        o.put("nvmf_wire", "captured-linux", &records(wire, Some(3)));
    }
}

fn is_shutdown(s: &Sqe) -> bool {
    s.opcode() == admin_opc::FABRICS
        && s.fctype() == fctype::PROPERTY_SET
        && s.u32_at(48) & 0xC000 != 0
}

// ------------------------------------------------------------------------------------ SRP

fn cdb16(bytes: &[u8]) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..bytes.len()].copy_from_slice(bytes);
    c
}

fn srp_cmd(tag: u64, lun: u16, cdb: &[u8], out: DataDesc<'_>, inn: DataDesc<'_>) -> Vec<u8> {
    let c = cdb16(cdb);
    let cmd = SrpCmd {
        sol_not: 0,
        tag: Tag(tag.to_le_bytes()),
        lun: target_core::scsi::lun::encode(lun),
        task_attr: TaskAttr::Simple,
        cdb: &c,
        data_out: out,
        data_in: inn,
    };
    let mut buf = vec![0u8; 8260];
    let n = cmd
        .encode(&mut buf, LINUX_IMM_DATA_OFFSET)
        .expect("SRP_CMD encodes");
    buf.truncate(n);
    buf
}

fn direct(len: u32) -> DirectDesc {
    DirectDesc {
        va: 0xffff_8881_0a40_0000,
        rkey: 0x0001_2345,
        len,
    }
}

/// What ib_srp sends after login and for I/O: INQUIRY (standard and VPD), REPORT LUNS, READ
/// CAPACITY, MODE SENSE, TEST UNIT READY, READ/WRITE(10) with direct, indirect and immediate
/// descriptors, SYNCHRONIZE CACHE, a LUN reset, an abort, a logout.
fn linux_ius() -> Vec<Vec<u8>> {
    let d = |n| DataDesc::Direct(direct(n));
    let list: Vec<u8> = [1024u32, 1024, 2048]
        .iter()
        .enumerate()
        .flat_map(|(i, &l)| {
            DirectDesc {
                va: 0xffff_8881_0a40_0000 + i as u64 * 0x10000,
                rkey: 0x0001_2345,
                len: l,
            }
            .encode()
        })
        .collect();
    let ind = DataDesc::Indirect(IndirectDesc::new(
        DirectDesc {
            va: 0xffff_8881_0b00_0044,
            rkey: 0x0001_2346,
            len: list.len() as u32,
        },
        4096,
        &list,
    ));
    let imm_data = vec![0x5a; 4096];
    let rw10 = |op: u8, lba: u32, blocks: u16| {
        let mut c = [0u8; 10];
        c[0] = op;
        c[2..6].copy_from_slice(&lba.to_be_bytes());
        c[7..9].copy_from_slice(&blocks.to_be_bytes());
        c
    };
    vec![
        srp_cmd(1, 0, &[0x12, 0, 0, 0, 36, 0], DataDesc::None, d(36)),
        srp_cmd(
            2,
            0,
            &[0xa0, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0],
            DataDesc::None,
            d(4096),
        ),
        srp_cmd(3, 0, &[0x12, 1, 0x00, 0, 0xff, 0], DataDesc::None, d(255)),
        srp_cmd(4, 0, &[0x12, 1, 0x83, 0, 0xff, 0], DataDesc::None, d(255)),
        srp_cmd(5, 0, &[0x12, 1, 0xb0, 0, 0x40, 0], DataDesc::None, d(64)),
        srp_cmd(
            6,
            0,
            &[0x9e, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 32, 0, 0],
            DataDesc::None,
            d(32),
        ),
        srp_cmd(
            7,
            0,
            &[0x25, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            DataDesc::None,
            d(8),
        ),
        srp_cmd(8, 0, &[0x1a, 0, 0x3f, 0, 0xc0, 0], DataDesc::None, d(192)),
        srp_cmd(9, 0, &[0, 0, 0, 0, 0, 0], DataDesc::None, DataDesc::None),
        srp_cmd(10, 0, &rw10(0x28, 0, 8), DataDesc::None, d(4096)),
        srp_cmd(11, 0, &rw10(0x28, 8, 8), DataDesc::None, ind),
        srp_cmd(
            12,
            0,
            &rw10(0x2a, 16, 8),
            DataDesc::Immediate(&imm_data),
            DataDesc::None,
        ),
        srp_cmd(13, 0, &rw10(0x2a, 24, 8), d(4096), DataDesc::None),
        srp_cmd(14, 0, &rw10(0x2a, 32, 8), ind, DataDesc::None),
        srp_cmd(
            15,
            0,
            &[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            DataDesc::None,
            DataDesc::None,
        ),
        TskMgmt {
            sol_not: 0,
            tag: Tag((16u64 | 1 << 31).to_le_bytes()),
            lun: target_core::scsi::lun::encode(0),
            action: TaskMgmt::LunReset,
        }
        .encode()
        .to_vec(),
        TskMgmt {
            sol_not: 0,
            tag: Tag((17u64 | 1 << 31).to_le_bytes()),
            lun: target_core::scsi::lun::encode(0),
            action: TaskMgmt::AbortTask {
                task_tag: Tag(10u64.to_le_bytes()),
            },
        }
        .encode()
        .to_vec(),
        CredRsp {
            tag: Tag(0x11u64.to_le_bytes()),
        }
        .encode()
        .to_vec(),
        AerRsp {
            tag: Tag(0x12u64.to_le_bytes()),
        }
        .encode()
        .to_vec(),
        ILogout {
            tag: Tag(0xdeadu64.to_le_bytes()),
        }
        .encode()
        .to_vec(),
    ]
}

fn ib_srp_login(target: PortId) -> LoginReq {
    LoginReq {
        tag: Tag(0u64.to_le_bytes()),
        req_it_iu_len: 8260,
        req_buf_fmt: BufFormats::BOTH,
        req_flags: REQ_FLAG_IMMED_REQUESTED,
        imm_data_offset: LINUX_IMM_DATA_OFFSET,
        initiator_port_id: PortId::from_halves(0, 0x5254_00ff_fe12_3456),
        target_port_id: target,
    }
}

fn srp_seeds(o: &Out, captured_ius: &[Vec<u8>], captured_logins: &[Vec<u8>]) {
    let ius = linux_ius();
    let mut all: Vec<&[u8]> = ius.iter().map(Vec::as_slice).collect();
    all.extend(captured_ius.iter().map(Vec::as_slice));
    // srp_iu: [selector][imm offset][records]; selector 0x8A: live channel, immediate data.
    for (name, sel, set) in [
        ("linux-session", 0x8Au8, &all[..]),
        ("linux-no-imm", 0x82, &all[..]),
        ("linux-connecting", 0x80, &all[..]),
    ] {
        let mut v = vec![sel];
        v.extend_from_slice(&68u16.to_le_bytes());
        for iu in set {
            v.extend_from_slice(&(iu.len() as u16).to_le_bytes());
            v.extend_from_slice(iu);
        }
        o.put("srp_iu", name, &v);
    }
    // srp_iu: target-initiated sends failing. One credit (limit 1), live, overruns allowed: a
    // command takes the credit; an IU of no known opcode (0x48) ends it without a response
    // (0x40) and triggers a CRED_REQ (0x08) whose send fails (second byte, bit 0); a command
    // beyond the credit is answered BUSY, and that send fails too; then a CRED_REQ goes.
    let cmd = &ius[0];
    let mut failing_cmd = cmd.clone();
    failing_cmd[1] |= 1;
    let mut v = vec![0x06u8];
    v.extend_from_slice(&68u16.to_le_bytes());
    for iu in [
        cmd.clone(),
        [&[0x48u8, 1][..], &[0; 14]].concat(),
        failing_cmd,
        [&[0x08u8, 0][..], &[0; 14]].concat(),
    ] {
        v.extend_from_slice(&(iu.len() as u16).to_le_bytes());
        v.extend_from_slice(&iu);
    }
    o.put("srp_iu", "spare-sends-fail", &v);
    // srp_wire: [flags][len][IU]; descriptors redirected to the initiator's memory. The logout
    // goes last: it ends the channel.
    let mut v = Vec::new();
    for iu in &all {
        v.push(1);
        v.extend_from_slice(&(iu.len() as u16).to_le_bytes());
        v.extend_from_slice(iu);
    }
    o.put("srp_wire", "linux-session", &v);
    // scsi_cdb: [selector][data-in len][data-out len][cdb len][cdb][params].
    for (i, iu) in all.iter().enumerate() {
        if let Ok(cmd) = SrpCmd::decode(iu, Some(LINUX_IMM_DATA_OFFSET)) {
            let mut v = vec![0x04 | (i as u8) << 5];
            v.extend_from_slice(&4096u16.to_le_bytes());
            v.extend_from_slice(&cmd.data_out.len().to_le_bytes());
            v.push(cmd.cdb.len() as u8);
            v.extend_from_slice(cmd.cdb);
            o.put("scsi_cdb", &format!("linux-{i:02}"), &v);
        }
    }
    let mut unmap = vec![0x05u8];
    unmap.extend_from_slice(&0u16.to_le_bytes());
    unmap.extend_from_slice(&24u32.to_le_bytes());
    unmap.push(10);
    unmap.extend_from_slice(&[0x42, 0, 0, 0, 0, 0, 0, 0, 24, 0]);
    unmap.extend_from_slice(&[0, 22, 0, 16, 0, 0, 0, 0]);
    unmap.extend_from_slice(&100u64.to_be_bytes());
    unmap.extend_from_slice(&8u32.to_be_bytes());
    unmap.extend_from_slice(&[0; 4]);
    o.put("scsi_cdb", "linux-unmap", &unmap);
    let mut ws = vec![0x05u8];
    ws.extend_from_slice(&0u16.to_le_bytes());
    ws.extend_from_slice(&512u32.to_le_bytes());
    ws.push(16);
    let mut c = [0u8; 16];
    c[0] = 0x93;
    c[1] = 0x08;
    c[2..10].copy_from_slice(&64u64.to_be_bytes());
    c[10..14].copy_from_slice(&16u32.to_be_bytes());
    ws.extend_from_slice(&c);
    o.put("scsi_cdb", "linux-write-same-unmap", &ws);
    // srp_login: [8 selector bytes] + [channel][56-byte RDMA CM login].
    let target = PortId::from_halves(0x0002_c903_000e_8acd, 0x0002_c903_000e_8acd);
    let mut v = vec![0x03, 0x54, 0x20, 64, 128, 0xFF, 1, 0];
    v.push(0);
    v.extend_from_slice(&ib_srp_login(target).encode_rdma_cm());
    let mut second = ib_srp_login(target);
    second.req_flags |= 1; // multi-channel: keep the first
    v.push(1);
    v.extend_from_slice(&second.encode_rdma_cm());
    v.push(2);
    v.extend_from_slice(&ib_srp_login(target).encode_rdma_cm());
    for p in captured_logins {
        v.push(3);
        v.extend_from_slice(&p[..p.len().min(56)]);
    }
    o.put("srp_login", "ib_srp-logins", &v);
    let mut v = vec![0x43, 0x54, 0x20, 64, 128, 0xFF, 0, 0];
    v.push(8);
    v.extend_from_slice(&ib_srp_login(target).encode_ib());
    o.put("srp_login", "ib_srp-ib-cm-acl", &v);
}

// ------------------------------------------------------------------------------------ RPC

fn rpc_seeds(o: &Out, captures: &[(String, Vec<u8>)]) {
    let rig = rtgt_fuzz::live::RpcRig::new();
    let methods: Vec<&str> = rig.table.methods().into_iter().map(|m| m.name).collect();
    let mut params_seed = vec![0u8];
    let mut n = 0;
    for (name, bytes) in captures {
        let mut v = vec![0x2Au8];
        v.extend_from_slice(bytes);
        o.put("rpc_framing", name, &v);
        o.put("rpc_stream", name, &v);
        // rpc_params: each captured call as [method][mode 0][len][params text].
        let mut s = rpc::framing::Scanner::new();
        while let rpc::framing::Scan::Complete { start, end } = s.next(bytes) {
            let Ok(req) = serde_json::from_slice::<serde_json::Value>(&bytes[start..end]) else {
                continue;
            };
            let Some(i) = req["method"]
                .as_str()
                .and_then(|m| methods.iter().position(|x| *x == m))
            else {
                continue;
            };
            let p = req.get("params").map(|p| p.to_string()).unwrap_or_default();
            let mut call = vec![i as u8, if req.get("params").is_some() { 0 } else { 1 }];
            call.extend_from_slice(&(p.len() as u16).to_le_bytes());
            call.extend_from_slice(p.as_bytes());
            let mut one = vec![0u8];
            one.extend_from_slice(&call);
            o.put("rpc_params", &format!("{name}-{i:03}"), &one);
            if n < 12 {
                params_seed.extend_from_slice(&call);
                n += 1;
            }
        }
    }
    o.put("rpc_params", "sequence", &params_seed);
    // A batch, a notification and a pretty-printed multi-request stream.
    let batch = br#"[{"jsonrpc":"2.0","method":"spdk_get_version","id":1},{"jsonrpc":"2.0","method":"bdev_get_bdevs"},{"jsonrpc":"2.0","method":"nvmf_get_subsystems","id":"x"}]"#;
    let mut v = vec![3u8];
    v.extend_from_slice(batch);
    o.put("rpc_framing", "batch", &v);
    o.put("rpc_stream", "batch", &v);
}

fn read_dir(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = fs::read_dir(dir)
        .map(|it| {
            it.filter_map(Result::ok)
                .filter(|e| e.path().extension().is_some_and(|x| x == "bin"))
                .map(|e| {
                    let name = e
                        .path()
                        .file_stem()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned();
                    (name, fs::read(e.path()).expect("capture"))
                })
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// Captured wire records (see `captures/extract.py`).
#[derive(Default)]
struct Wire {
    /// `nvme-*.bin`: capsules (64-byte SQE + in-capsule data).
    nvme: Vec<(Sqe, Vec<u8>)>,
    /// `connect-*.bin`: Connect SQE + 1024 bytes of data.
    connects: Vec<Vec<u8>>,
    /// `cm-*.bin`: NVMe/RDMA CM private data.
    cm: Vec<Vec<u8>>,
    /// `srp-iu-*.bin`: SRP IUs.
    ius: Vec<Vec<u8>>,
    /// `srp-login-*.bin`: SRP login private data.
    logins: Vec<Vec<u8>>,
}

fn wire_captures(dir: &Path) -> Wire {
    let mut w = Wire::default();
    for (name, b) in read_dir(dir) {
        if name.starts_with("connect-") {
            w.connects.push(b);
        } else if name.starts_with("cm-") {
            w.cm.push(b);
        } else if name.starts_with("nvme-") {
            if let Some(s) = Sqe::from_bytes(&b) {
                w.nvme.push((s, b[64..].to_vec()));
            }
        } else if name.starts_with("srp-iu-") {
            w.ius.push(b);
        } else if name.starts_with("srp-login-") {
            w.logins.push(b);
        }
    }
    w
}

// -------------------------------------------------------------------------------- NVMe/TCP

/// Buffers of the recording runtime.
#[derive(Default)]
struct TcpBufs(std::collections::BTreeMap<SlotId, Vec<u8>>);

impl DataBuffers for TcpBufs {
    fn write(&mut self, slot: SlotId, offset: u32, data: &[u8]) {
        let b = self.0.get_mut(&slot).expect("buffer");
        b[offset as usize..offset as usize + data.len()].copy_from_slice(data);
    }
    fn read(&self, slot: SlotId, offset: u32, len: u32, f: &mut dyn FnMut(&[u8])) {
        f(&self.0[&slot][offset as usize..(offset + len) as usize]);
    }
}

/// The `tcp_pdu` configuration byte 8: depth 16, 8 KiB in-capsule, 128 KiB I/O, MAXH2CDATA and
/// R2T size 128 KiB, one R2T per command (the harness derives the same from it).
const TCP_CFG: u8 = 8;

fn tcp_config(sel: u8) -> Config {
    Config {
        queue_depth: 16,
        in_capsule_data_size: 8192,
        max_io_size: 131072,
        maxh2cdata: 131072,
        r2t_size: 131072,
        max_r2t_per_command: 1,
        c2h_chunk: if sel & 0x40 != 0 { 1000 } else { 131072 },
        c2h_success: sel & 0x80 != 0,
        cpda: 0,
    }
}

/// Records a host talking to a controller as `tcp_pdu` input: the host's bytes as feed
/// records, each followed by a drain record, with the harness's "at once" policy (buffers
/// attached and commands completed with success as soon as asked).
fn tcp_exchange(sel: u8, hcfg: HostConfig, submit: &dyn Fn(&mut Host, usize)) -> Vec<u8> {
    let mut conn = Connection::new(tcp_config(sel)).expect("config");
    let mut bufs = TcpBufs::default();
    let mut host = Host::new(hcfg);
    let mut out = vec![sel, TCP_CFG];
    let mut hdr = [0u8; MAX_ENCODED_HEADER];
    for round in 0..12 {
        if round > 0 {
            submit(&mut host, round);
        }
        let up = host.take_output();
        if !up.is_empty() {
            out.push(0);
            out.extend((up.len() as u16).to_le_bytes());
            out.extend_from_slice(&up);
        }
        let mut at = 0;
        while at < up.len() {
            at += conn.recv(&up[at..], &mut bufs);
            while let Some(a) = conn.poll_action() {
                match a {
                    Action::NeedBuffer { slot, len } => {
                        bufs.0.insert(slot, vec![0x3C; len as usize]);
                        conn.buffer_ready(slot).expect("buffer");
                    }
                    Action::Execute { slot } | Action::Fail { slot, .. } => {
                        let sqe = *conn.sqe(slot).expect("command");
                        let cqe = target_core::nvme::Cqe::for_command(
                            &sqe,
                            1,
                            0xFFFF,
                            target_core::nvme::Status::SUCCESS,
                        );
                        conn.complete(slot, cqe, u32::MAX).expect("complete");
                    }
                    Action::Close => {}
                }
            }
        }
        out.extend([3, 0xFF, 0xFF]);
        let mut down = Vec::new();
        while let Some(t) = conn.poll_send(&mut hdr, &bufs) {
            down.extend_from_slice(&hdr[..t.header_len]);
            if let Some(d) = t.data {
                down.extend_from_slice(&bufs.0[&d.slot][d.offset as usize..][..d.len as usize]);
            }
            if let Some(dd) = t.ddgst {
                down.extend_from_slice(&dd);
            }
            if let Some(s) = t.release {
                bufs.0.remove(&s);
            }
        }
        host.recv(&down).expect("the controller's answer");
        while host.poll_completion().is_some() {}
    }
    out
}

/// The Linux host's session: Connect with its data in-capsule, Identify-sized read, a 4 KiB
/// in-capsule write, a 64 KiB write through R2T, a flush, a 128 KiB read.
fn tcp_linux_session(h: &mut Host, round: usize) {
    let cid = round as u16;
    let r = match round {
        1 => {
            let mut s = Sqe::fabrics(fctype::CONNECT, cid);
            s.set_u16_at(42, 1);
            h.submit_write(s, vec![0; 1024])
        }
        2 => h.submit_read(with_cid(read_sqe(1, 0, 8), cid), 4096),
        3 => h.submit_write(with_cid(write_sqe(1, 8, 8), cid), vec![0xA5; 4096]),
        4 => h.submit_write(with_cid(write_sqe(1, 16, 128), cid), vec![0x5A; 65536]),
        5 => h.submit(Sqe::new(io_opc::FLUSH, cid)),
        6 => h.submit_read(with_cid(read_sqe(1, 0, 256), cid), 131072),
        _ => Ok(()),
    };
    r.expect("submit");
}

fn with_cid(mut s: Sqe, cid: u16) -> Sqe {
    s.set_cid(cid);
    s
}

fn tcp_record(v: &mut Vec<u8>, op: u8, bytes: &[u8]) {
    v.push(op);
    v.extend((bytes.len() as u16).to_le_bytes());
    v.extend_from_slice(bytes);
}

fn tcp_header(f: impl FnOnce(&mut [u8]) -> usize) -> Vec<u8> {
    let mut b = [0u8; MAX_ENCODED_HEADER];
    let n = f(&mut b);
    b[..n].to_vec()
}

/// Captures from a live target: the Rust NVMe/TCP test host connects over loopback to rtgt's
/// TCP transport (an admin queue and one I/O queue, digests off and on) and runs ICReq,
/// Connect with in-capsule data, property and Identify commands, a 4 KiB in-capsule write, a
/// 32 KiB write through R2T/H2CData, a read and a flush. Each connection's host bytes, piece by
/// piece as written to the socket, become feed records each followed by a drain.
fn tcp_socket_seeds(o: &Out) {
    use rtgt_tests::tcp_host::{TcpConnectOpts, TcpEnv};
    for (name, sel) in [("socket", 0u8), ("socket-digests", 0x03)] {
        let e = TcpEnv::new(1, serde_json::json!({}));
        e.subsystem(SUBNQN, true, 2048, 512);
        let mut opts = TcpConnectOpts::new(SUBNQN);
        opts.digests = Digests::from_byte(sel);
        opts.io_queues = 1;
        opts.capture = true;
        let mut c = e.connect(&opts).expect("connect over loopback");
        let q = &mut c.io[0];
        q.cmd_ok(write_sqe(1, 0, 8), Some(vec![0xA5; 4096]), 0)
            .expect("in-capsule write");
        q.cmd_ok(write_sqe(1, 8, 64), Some(vec![0x5A; 32768]), 0)
            .expect("write through R2T");
        q.cmd_ok(read_sqe(1, 0, 16), None, 8192).expect("read");
        let mut flush = Sqe::new(io_opc::FLUSH, 0);
        flush.set_nsid(1);
        q.cmd_ok(flush, None, 0).expect("flush");
        for (queue, pieces) in [("admin", &c.admin.capture), ("io", &c.io[0].capture)] {
            let mut v = vec![sel, TCP_CFG];
            for piece in pieces.iter().flatten() {
                tcp_record(&mut v, 0, piece);
                v.extend([3, 0xFF, 0xFF]);
            }
            o.put("tcp_pdu", &format!("{name}-{queue}"), &v);
        }
    }
}

fn tcp_seeds(o: &Out) {
    let both = Digests {
        header: true,
        data: true,
    };
    for (name, sel, hcfg) in [
        ("linux-session", 0u8, HostConfig::default()),
        (
            "linux-session-digests",
            0x03,
            HostConfig {
                digests: both,
                ..HostConfig::default()
            },
        ),
        (
            "hpda-success-chunks",
            0xC0 | 3 << 2,
            HostConfig {
                hpda: 3,
                ..HostConfig::default()
            },
        ),
        (
            "maxr2t-4",
            0,
            HostConfig {
                maxr2t: 3,
                ..HostConfig::default()
            },
        ),
    ] {
        o.put(
            "tcp_pdu",
            name,
            &tcp_exchange(sel, hcfg, &tcp_linux_session),
        );
    }
    // Malformed PDUs after a good ICReq, one per class, with late buffers and completions.
    let plain = Framing::default();
    let icreq = tcp_header(|b| IcReq::linux(Digests::default()).encode(b).expect("icreq"));
    let flush = tcp_header(|b| {
        CapsuleCmd {
            sqe: Sqe::new(io_opc::FLUSH, 1),
        }
        .encode(&plain, 0, b)
        .expect("capsule")
    });
    let mut write = with_cid(write_sqe(1, 0, 8), 2);
    write.set_sgl1(SglDescriptor::transport(4096));
    let write = tcp_header(|b| {
        CapsuleCmd { sqe: write }
            .encode(&plain, 0, b)
            .expect("capsule")
    });
    let h2c = |ttag: u16, datao: u32, datal: u32, last: bool| {
        let mut v = tcp_header(|b| {
            H2cData {
                cccid: 2,
                ttag,
                datao,
                datal,
                last,
            }
            .encode(&plain, b)
            .expect("h2c")
        });
        v.extend(std::iter::repeat_n(0x77u8, datal as usize));
        v
    };
    let mut bad_hlen = flush.clone();
    bad_hlen[2] = 64;
    let mut bad_pfv = icreq.clone();
    bad_pfv[8] = 1;
    let term = tcp_header(|b| {
        TermReq::new(Fes::PduSequenceError, 0)
            .encode(PduType::H2cTermReq, &flush, b)
            .expect("term")
    });
    let cases: Vec<(&str, Vec<Vec<u8>>)> = vec![
        ("bad-hlen", vec![icreq.clone(), bad_hlen]),
        ("bad-pfv", vec![bad_pfv]),
        ("capsule-before-icreq", vec![flush.clone()]),
        (
            "h2c-unknown-ttag",
            vec![icreq.clone(), write.clone(), h2c(9, 0, 4096, true)],
        ),
        (
            "h2c-bad-offset",
            vec![icreq.clone(), write.clone(), h2c(0, 512, 512, false)],
        ),
        (
            "h2c-split",
            vec![
                icreq.clone(),
                write.clone(),
                h2c(0, 0, 2048, false),
                h2c(0, 2048, 2048, true),
            ],
        ),
        ("host-term", vec![icreq.clone(), flush.clone(), term]),
    ];
    for (name, pdus) in cases {
        // sel 0x30: buffers and completions wait for their records.
        let mut v = vec![0x30u8, TCP_CFG];
        for p in pdus {
            tcp_record(&mut v, 0, &p);
            v.extend([1, 0xFF, 0xFF]); // attach every waiting buffer
            v.extend([2, 1, 0, 0]); // complete one command, successfully
            v.extend([3, 0xFF, 0xFF]); // drain
        }
        o.put("tcp_pdu", name, &v);
    }
}

// ---------------------------------------------------------------------------- reservation

/// An NVMe reservation step of the `reservation` target: requester 0/1 (hosts A/B), op index
/// into [Register, Report, Acquire, Release, Write], CDW10, CDW11, then the 16-byte keys.
fn resv_nvme(v: &mut Vec<u8>, host: u8, op: u8, cdw10: u32, cdw11: u32, k1: u64, k2: u64) {
    v.extend([0, host, op]);
    v.extend(cdw10.to_le_bytes());
    v.extend(cdw11.to_le_bytes());
    v.push(if op == 1 { 255 } else { 16 });
    v.extend(k1.to_le_bytes());
    v.extend(k2.to_le_bytes());
}

/// A SCSI step: requester 2/3 (one SRP initiator through two target ports), op index into
/// [PR OUT, PR IN, RESERVE(6), RELEASE(6), RESERVE(10), RELEASE(10)], service action,
/// scope/type, then the 24-byte basic parameter list (reservation key, service action key).
fn resv_scsi(
    v: &mut Vec<u8>,
    nexus: u8,
    op: u8,
    sa: u8,
    rtype: u8,
    (key, sa_key): (u64, u64),
    flags: u8,
) {
    v.extend([
        1,
        nexus,
        op,
        sa,
        rtype,
        0,
        0,
        0,
        0,
        0,
        if op == 1 { 0xFF } else { 24 },
        0,
    ]);
    v.push(24);
    v.push(24);
    v.extend(key.to_be_bytes());
    v.extend(sa_key.to_be_bytes());
    v.extend([0, 0, 0, 0, flags, 0, 0, 0]);
}

fn reservation_seeds(o: &Out) {
    // nvme-cli: register, acquire WE, the other host conflicts, report, release, clear.
    let mut v = vec![2u8];
    resv_nvme(&mut v, 0, 0, 3 << 30, 0, 0, 0xAAA);
    resv_nvme(&mut v, 1, 0, 0, 0, 0, 0xBBB);
    resv_nvme(&mut v, 0, 2, 1 << 8, 0, 0xAAA, 0);
    resv_nvme(&mut v, 1, 2, 1 << 8, 0, 0xBBB, 0);
    resv_nvme(&mut v, 0, 1, 1023, 1, 0, 0);
    resv_nvme(&mut v, 0, 3, 1 << 8, 0, 0xAAA, 0);
    resv_nvme(&mut v, 1, 3, 1, 0, 0xBBB, 0);
    o.put("reservation", "nvme-cli", &v);
    // fence_scsi / sg_persist: register both nexuses, reserve WE-RO, preempt and abort,
    // read keys and full status, clear.
    let mut v = vec![2u8];
    resv_scsi(&mut v, 2, 0, 0x00, 0, (0, 0xA), 0x01);
    resv_scsi(&mut v, 3, 0, 0x06, 0, (0, 0xB), 0);
    resv_scsi(&mut v, 2, 0, 0x01, 0x05, (0xA, 0), 0);
    resv_scsi(&mut v, 3, 0, 0x05, 0x05, (0xB, 0xA), 0);
    resv_scsi(&mut v, 3, 1, 0x00, 0, (0, 0), 0);
    resv_scsi(&mut v, 3, 1, 0x03, 0, (0, 0), 0);
    resv_scsi(&mut v, 3, 0, 0x03, 0, (0xB, 0), 0);
    o.put("reservation", "sg-persist", &v);
    // Both protocols: NVMe host holds EA-AR, an SRP nexus registers and preempts with key 0,
    // RESERVE(6)/RELEASE(6) interplay.
    let mut v = vec![3u8];
    resv_nvme(&mut v, 0, 0, 0, 0, 0, 0x1);
    resv_nvme(&mut v, 0, 2, 6 << 8, 0, 0x1, 0);
    resv_scsi(&mut v, 2, 0, 0x00, 0, (0, 0x2), 0);
    resv_scsi(&mut v, 2, 2, 0, 0, (0, 0), 0);
    resv_scsi(&mut v, 2, 0, 0x04, 0x01, (0x2, 0), 0);
    resv_scsi(&mut v, 3, 2, 0, 0, (0, 0), 0);
    resv_nvme(&mut v, 0, 1, 255, 1, 0, 0);
    resv_scsi(&mut v, 2, 0, 0x00, 0, (0x2, 0), 0);
    resv_scsi(&mut v, 3, 2, 0, 0, (0, 0), 0);
    resv_scsi(&mut v, 2, 2, 0, 0, (0, 0), 0);
    resv_scsi(&mut v, 3, 3, 0, 0, (0, 0), 0);
    o.put("reservation", "cross", &v);
}

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("seeds");
    let o = Out { root: root.clone() };
    let w = wire_captures(&root.join("captures/wire"));
    nvme_seeds(&o, &w);
    auth_seeds(&o);
    srp_seeds(&o, &w.ius, &w.logins);
    rpc_seeds(&o, &read_dir(&root.join("captures/rpc")));
    reservation_seeds(&o);
    tcp_seeds(&o);
    tcp_socket_seeds(&o);
    println!(
        "seeds written to {} (captured: {} capsules, {} Connects, {} CM records, {} SRP IUs, {} logins)",
        root.display(),
        w.nvme.len(),
        w.connects.len(),
        w.cm.len(),
        w.ius.len(),
        w.logins.len()
    );
}
