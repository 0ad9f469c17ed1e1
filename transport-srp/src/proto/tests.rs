//! Byte-array tests for every IU, malformed and truncated input, and a no-panic test feeding
//! random bytes to every decoder.

use super::cmd::{CMD_LEN, LINUX_IMM_DATA_OFFSET};
use super::login::{LOGIN_REQ_LEN, LOGIN_REQ_RDMA_LEN};
use super::*;

const GUID: u64 = 0x0002_c903_000e_8acd;

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

// ---- LOGIN_REQ ----

/// What ib_srp puts into the RDMA CM private data (reference §1.4, §4.3): tag 0, buf_fmt 6,
/// single-channel action with immediate data at 68, it_iu_len 8260.
fn linux_rdma_login() -> Vec<u8> {
    hex("0000000000000000 0006 80 00 00002044
         0000000000000000 0002c903000e8acd
         0002c903000e8acd 0002c903000e8acd
         0044 000000000000")
}

#[test]
fn login_req_rdma_cm_form() {
    let b = linux_rdma_login();
    assert_eq!(b.len(), LOGIN_REQ_RDMA_LEN);
    let r = LoginReq::decode_rdma_cm(&b).unwrap();
    assert_eq!(r.tag, Tag([0; 8]));
    assert_eq!(r.req_it_iu_len, 8260);
    assert_eq!(r.req_buf_fmt, BufFormats::BOTH);
    assert_eq!(r.multi_channel_action(), MultiChannelAction::Single);
    assert_eq!(r.immediate_requested(), Some(68));
    assert_eq!(r.initiator_port_id, PortId::from_halves(0, GUID));
    assert_eq!(r.target_port_id, PortId::from_halves(GUID, GUID));
    assert_eq!(
        r.initiator_port_id.to_string(),
        "0x00000000000000000002c903000e8acd"
    );
    assert_eq!(r.encode_rdma_cm().as_slice(), b.as_slice());
    // Longer private data (the CM pads to 56 or more) is fine.
    let mut long = b.clone();
    long.extend_from_slice(&[0xEE; 8]);
    assert_eq!(LoginReq::decode_rdma_cm(&long).unwrap(), r);
    // Shorter is rejected, as ib_srpt does.
    assert_eq!(
        LoginReq::decode_rdma_cm(&b[..55]),
        Err(DecodeError::Truncated { need: 56, got: 55 })
    );
    // Wrong opcode byte (offset 11).
    let mut bad = b.clone();
    bad[11] = 0x02;
    assert_eq!(
        LoginReq::decode_rdma_cm(&bad),
        Err(DecodeError::Opcode {
            expected: 0,
            got: 2
        })
    );
}

#[test]
fn login_req_ib_form() {
    let b = hex("00 00000000000000 1122334455667788 00002044 00000000
                 0006 01 00 0000 0000
                 0000000000000000 0002c903000e8acd
                 0002c903000e8acd 0002c903000e8acd");
    assert_eq!(b.len(), LOGIN_REQ_LEN);
    let r = LoginReq::decode_ib(&b).unwrap();
    assert_eq!(r.tag, Tag([0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88]));
    assert_eq!(r.req_it_iu_len, 8260);
    assert_eq!(r.multi_channel_action(), MultiChannelAction::Multi);
    assert_eq!(r.immediate_requested(), None);
    assert_eq!(r.encode_ib().as_slice(), b.as_slice());
    // The same request in the other form decodes to the same value.
    assert_eq!(LoginReq::decode_rdma_cm(&r.encode_rdma_cm()).unwrap(), r);
    assert!(matches!(
        LoginReq::decode_ib(&b[..63]),
        Err(DecodeError::Truncated { .. })
    ));
    let mut bad = b.clone();
    bad[0] = 0xC0;
    assert!(matches!(
        LoginReq::decode_ib(&bad),
        Err(DecodeError::Opcode { .. })
    ));
    assert_eq!(
        MultiChannelAction::from_flags(0x82),
        MultiChannelAction::Reserved(2)
    );
}

// ---- LOGIN_RSP / LOGIN_REJ ----

#[test]
fn login_rsp_bytes() {
    let rsp = LoginRsp {
        req_lim_delta: 128,
        tag: Tag([0; 8]),
        max_it_iu_len: 8276,
        max_ti_iu_len: 256,
        buf_fmt: BufFormats::BOTH,
        multi_channel: MultiChannelResult::Terminated,
        solnt: false,
        immediate: true,
    };
    let b = rsp.encode();
    let want = hex("c0 000000 00000080 0000000000000000 00002054 00000100 0006 81");
    assert_eq!(&b[..want.len()], want.as_slice());
    assert!(b[want.len()..].iter().all(|&x| x == 0));
    assert_eq!(b.len(), 52);
    assert_eq!(LoginRsp::decode(&b).unwrap(), rsp);
    assert!(LoginRsp::decode(&b[..51]).is_err());
    let m = LoginRsp {
        multi_channel: MultiChannelResult::Maintained,
        immediate: false,
        ..rsp
    };
    assert_eq!(m.encode()[26], 0x02);
}

#[test]
fn login_rej_bytes() {
    for (reason, code) in [
        (RejectReason::NoReason, 0x10000),
        (RejectReason::InsufficientResources, 0x10001),
        (RejectReason::ItIuLengthTooLarge, 0x10002),
        (RejectReason::UnableToAssociate, 0x10003),
        (RejectReason::BufferFormatsUnsupported, 0x10004),
        (RejectReason::MultiChannelUnsupported, 0x10005),
        (RejectReason::ChannelLimitReached, 0x10006),
        (RejectReason::Other(0x1234), 0x1234),
    ] {
        let rej = LoginRej {
            reason,
            tag: Tag([7; 8]),
            buf_fmt: BufFormats::BOTH,
        };
        let b = rej.encode();
        assert_eq!(b.len(), 32);
        assert_eq!(b[0], 0xC2);
        assert_eq!(u32::from_be_bytes(b[4..8].try_into().unwrap()), code);
        assert_eq!(&b[8..16], &[7; 8]);
        assert_eq!(&b[24..26], &[0, 6]);
        assert_eq!(RejectReason::from_code(code), reason);
        assert_eq!(LoginRej::decode(&b).unwrap(), rej);
    }
}

// ---- logout, credit and AER IUs ----

#[test]
fn logout_ius() {
    let b = hex("03 00000000000000 0102030405060708");
    let l = ILogout::decode(&b).unwrap();
    assert_eq!(l.tag, Tag([1, 2, 3, 4, 5, 6, 7, 8]));
    assert_eq!(l.encode().as_slice(), b.as_slice());
    assert!(ILogout::decode(&b[..15]).is_err());
    let t = TLogout {
        solnt: true,
        reason: TLogoutReason::MultiChannelAction,
        tag: Tag([9; 8]),
    };
    assert_eq!(
        t.encode().as_slice(),
        hex("80 01 0000 00000004 0909090909090909").as_slice()
    );
    assert_eq!(TLogout::decode(&t.encode()).unwrap(), t);
    for v in [0, 1, 2, 3, 4, 5, 6, 7, 8, 99] {
        assert_eq!(TLogoutReason::from_code(v).code(), v);
    }
}

#[test]
fn credit_and_aer_ius() {
    let c = CredReq {
        solnt: false,
        req_lim_delta: 5,
        tag: Tag([1; 8]),
    };
    assert_eq!(
        c.encode().as_slice(),
        hex("81 00 0000 00000005 0101010101010101").as_slice()
    );
    assert_eq!(CredReq::decode(&c.encode()).unwrap(), c);
    let r = hex("41 00000000000000 0101010101010101");
    assert_eq!(CredRsp::decode(&r).unwrap().tag, Tag([1; 8]));
    assert_eq!(
        CredRsp { tag: Tag([1; 8]) }.encode().as_slice(),
        r.as_slice()
    );
    let a = hex("42 00000000000000 0202020202020202");
    assert_eq!(AerRsp::decode(&a).unwrap().tag, Tag([2; 8]));
    assert_eq!(
        AerRsp { tag: Tag([2; 8]) }.encode().as_slice(),
        a.as_slice()
    );
    assert!(AerRsp::decode(&r).is_err());

    let sense = [
        0x70, 0, 6, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x2A, 0x09, 0, 0, 0, 0,
    ];
    let aer = AerReq {
        solnt: true,
        req_lim_delta: 0,
        tag: Tag([3; 8]),
        lun: [0, 1, 0, 0, 0, 0, 0, 0],
        sense: &sense,
    };
    let mut buf = [0u8; 64];
    let n = aer.encode(&mut buf).unwrap();
    assert_eq!(n, 36 + 18);
    assert_eq!(&buf[..4], &[0x82, 1, 0, 0]);
    assert_eq!(&buf[20..22], &[0, 1]);
    assert_eq!(&buf[28..32], &[0, 0, 0, 18]);
    assert_eq!(AerReq::decode(&buf[..n]).unwrap(), aer);
    assert!(AerReq::decode(&buf[..n - 1]).is_err());
    assert!(aer.encode(&mut [0u8; 40]).is_err());
}

// ---- SRP_CMD ----

fn cmd_header(buf_fmt: u8, out_cnt: u8, in_cnt: u8, add_cdb: u8, cdb: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; 48];
    b[0] = 0x02;
    b[1] = 0x06;
    b[5] = buf_fmt;
    b[6] = out_cnt;
    b[7] = in_cnt;
    b[8..16].copy_from_slice(&[0x2A, 0, 0x01, 0, 0, 0, 0, 0]); // blk_mq_unique_tag, LE
    b[20..22].copy_from_slice(&[0, 1]);
    b[29] = 0;
    b[31] = add_cdb;
    b[32..32 + cdb.len()].copy_from_slice(cdb);
    b
}

fn direct(va: u64, rkey: u32, len: u32) -> [u8; 16] {
    DirectDesc { va, rkey, len }.encode()
}

#[test]
fn cmd_read_direct() {
    let mut b = cmd_header(0x01, 0, 0, 0, &[0x28, 0, 0, 0, 0, 8, 0, 0, 8, 0]);
    b.extend_from_slice(&direct(0x7f00_1000, 0x1234, 4096));
    let c = SrpCmd::decode(&b, None).unwrap();
    assert_eq!(c.tag.0, [0x2A, 0, 1, 0, 0, 0, 0, 0]);
    assert_eq!(c.tag.as_le_u64(), 0x1_002A);
    assert_eq!(c.sol_not, 0x06);
    assert_eq!(c.lun, [0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(c.task_attr, TaskAttr::Simple);
    assert_eq!(c.cdb.len(), 16);
    assert_eq!(c.cdb[0], 0x28);
    assert_eq!(c.direction(), Direction::Read);
    assert_eq!(c.data_out, DataDesc::None);
    assert_eq!(
        c.data_in,
        DataDesc::Direct(DirectDesc {
            va: 0x7f00_1000,
            rkey: 0x1234,
            len: 4096
        })
    );
    assert_eq!(c.data_in.len(), 4096);
    let mut re = [0u8; 128];
    let n = c.encode(&mut re, 0).unwrap();
    assert_eq!(&re[..n], b.as_slice());
}

#[test]
fn cmd_write_indirect_complete() {
    let mut b = cmd_header(0x20, 3, 0, 0, &[0x2A; 16]);
    b.extend_from_slice(&direct(0xAAAA_0000, 7, 48)); // table: 3 descriptors
    b.extend_from_slice(&(4096u32 + 8192 + 512).to_be_bytes());
    b.extend_from_slice(&direct(0x1000, 1, 4096));
    b.extend_from_slice(&direct(0x3000, 2, 8192));
    b.extend_from_slice(&direct(0x9000, 3, 512));
    let c = SrpCmd::decode(&b, None).unwrap();
    assert_eq!(c.direction(), Direction::Write);
    let DataDesc::Indirect(i) = c.data_out else {
        panic!()
    };
    assert_eq!(i.table_count(), 3);
    assert_eq!(i.in_iu_count(), 3);
    assert!(!i.is_partial());
    assert_eq!(i.total_len, 12800);
    let ds: Vec<_> = i.descriptors().collect();
    assert_eq!(
        ds[1],
        DirectDesc {
            va: 0x3000,
            rkey: 2,
            len: 8192
        }
    );
    let mut re = [0u8; 256];
    let n = c.encode(&mut re, 0).unwrap();
    assert_eq!(&re[..n], b.as_slice());
}

#[test]
fn cmd_indirect_partial_table() {
    // 4 descriptors in the table, 2 carried in the IU (ib_srp with allow_ext_sg).
    let mut b = cmd_header(0x02, 0, 2, 0, &[0x28; 16]);
    b.extend_from_slice(&direct(0xBBBB_0000, 9, 64));
    b.extend_from_slice(&(4 * 4096u32).to_be_bytes());
    b.extend_from_slice(&direct(0x1000, 1, 4096));
    b.extend_from_slice(&direct(0x2000, 1, 4096));
    let c = SrpCmd::decode(&b, None).unwrap();
    let DataDesc::Indirect(i) = c.data_in else {
        panic!()
    };
    assert!(i.is_partial());
    assert_eq!((i.in_iu_count(), i.table_count()), (2, 4));
    assert_eq!(
        i.table,
        DirectDesc {
            va: 0xBBBB_0000,
            rkey: 9,
            len: 64
        }
    );
    // The fetched table parses the same way.
    let mut table = Vec::new();
    for k in 0..4u64 {
        table.extend_from_slice(&direct(0x1000 * (k + 1), 1, 4096));
    }
    assert_eq!(IndirectDesc::parse_table(&table).count(), 4);
    // Entirely external (count 0).
    let mut e = cmd_header(0x02, 0, 0, 0, &[0x28; 16]);
    e.extend_from_slice(&direct(0xBBBB_0000, 9, 64));
    e.extend_from_slice(&(4 * 4096u32).to_be_bytes());
    let DataDesc::Indirect(i) = SrpCmd::decode(&e, None).unwrap().data_in else {
        panic!()
    };
    assert_eq!((i.in_iu_count(), i.table_count()), (0, 4));
}

#[test]
fn cmd_indirect_malformed() {
    // More descriptors in the IU than the table holds.
    let mut b = cmd_header(0x02, 0, 2, 0, &[0x28; 16]);
    b.extend_from_slice(&direct(0, 0, 16));
    b.extend_from_slice(&8192u32.to_be_bytes());
    b.extend_from_slice(&direct(0x1000, 1, 4096));
    b.extend_from_slice(&direct(0x2000, 1, 4096));
    assert_eq!(
        SrpCmd::decode(&b, None),
        Err(DecodeError::IndirectCount {
            in_iu: 2,
            in_table: 1
        })
    );
    // Complete table whose lengths disagree with TOTAL LENGTH.
    let mut b = cmd_header(0x02, 0, 2, 0, &[0x28; 16]);
    b.extend_from_slice(&direct(0, 0, 32));
    b.extend_from_slice(&9000u32.to_be_bytes());
    b.extend_from_slice(&direct(0x1000, 1, 4096));
    b.extend_from_slice(&direct(0x2000, 1, 4096));
    assert_eq!(
        SrpCmd::decode(&b, None),
        Err(DecodeError::IndirectLength {
            total: 9000,
            sum: 8192
        })
    );
    // Descriptor list past the received bytes.
    let mut b = cmd_header(0x02, 0, 3, 0, &[0x28; 16]);
    b.extend_from_slice(&direct(0, 0, 48));
    b.extend_from_slice(&12288u32.to_be_bytes());
    b.extend_from_slice(&direct(0x1000, 1, 4096));
    assert_eq!(
        SrpCmd::decode(&b, None),
        Err(DecodeError::Truncated { need: 116, got: 84 })
    );
}

#[test]
fn cmd_immediate_data() {
    let off = LINUX_IMM_DATA_OFFSET;
    let data: Vec<u8> = (0..512u32).map(|i| i as u8).collect();
    let mut b = cmd_header(0x30, 0, 0, 0, &[0x2A, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    b.extend_from_slice(&512u32.to_be_bytes());
    b.resize(usize::from(off), 0);
    b.extend_from_slice(&data);
    let c = SrpCmd::decode(&b, Some(off)).unwrap();
    assert_eq!(c.direction(), Direction::Write);
    assert_eq!(c.data_out, DataDesc::Immediate(&data));
    assert_eq!(c.data_out.len(), 512);
    let mut re = [0u8; 1024];
    let n = c.encode(&mut re, off).unwrap();
    assert_eq!(&re[..n], b.as_slice());
    // Not negotiated at login.
    assert_eq!(
        SrpCmd::decode(&b, None),
        Err(DecodeError::ImmediateNotNegotiated)
    );
    // Fewer bytes received than offset + len.
    assert!(matches!(
        SrpCmd::decode(&b[..b.len() - 1], Some(off)),
        Err(DecodeError::ImmediateOutOfBounds { .. })
    ));
    // len = 0xFFFFFFFF and 0xFFFFFFC0 must not wrap past the bound (ib_srpt's 2026 fix).
    for bad_len in [0xFFFF_FFFFu32, 0xFFFF_FFC0, 0x8000_0000] {
        let mut x = b.clone();
        x[48..52].copy_from_slice(&bad_len.to_be_bytes());
        assert!(matches!(
            SrpCmd::decode(&x, Some(off)),
            Err(DecodeError::ImmediateOutOfBounds { .. })
        ));
    }
    // The descriptor would end after the data offset.
    assert!(matches!(
        SrpCmd::decode(&b, Some(50)),
        Err(DecodeError::ImmediateOutOfBounds { .. })
    ));
    // Immediate data-in is not a thing.
    let mut x = b.clone();
    x[5] = 0x03;
    assert_eq!(
        SrpCmd::decode(&x, Some(off)),
        Err(DecodeError::DescriptorFormat(3))
    );
}

#[test]
fn cmd_additional_cdb_task_attr_and_formats() {
    // 32-byte CDB: additional CDB length 16 (bits 7:2 = 4 words); descriptors after it.
    let mut cdb = [0u8; 32];
    cdb[0] = 0x7F;
    let mut b = cmd_header(0x01, 0, 0, 16 | 0x03, &cdb[..16]);
    b.extend_from_slice(&cdb[16..]);
    b.extend_from_slice(&direct(0x10, 1, 512));
    b[29] = 2;
    let c = SrpCmd::decode(&b, None).unwrap();
    assert_eq!(c.cdb.len(), 32);
    assert_eq!(c.task_attr, TaskAttr::Ordered);
    assert_eq!(c.data_in.len(), 512);
    // Additional CDB pushing the descriptors past the IU.
    let mut b = cmd_header(0x01, 0, 0, 0xFC, &[0; 16]);
    b.extend_from_slice(&direct(0, 0, 0));
    assert!(matches!(
        SrpCmd::decode(&b, None),
        Err(DecodeError::Truncated { .. })
    ));
    // Task attributes: unknown values are ORDERED, like ib_srpt.
    for (v, a) in [
        (0, TaskAttr::Simple),
        (1, TaskAttr::HeadOfQueue),
        (2, TaskAttr::Ordered),
        (4, TaskAttr::Aca),
        (5, TaskAttr::Ordered),
    ] {
        assert_eq!(TaskAttr::from_wire(v), a);
    }
    // Bidirectional decodes; the caller decides.
    let mut b = cmd_header(0x11, 0, 0, 0, &[0; 16]);
    b.extend_from_slice(&direct(1, 1, 1));
    b.extend_from_slice(&direct(2, 2, 2));
    let c = SrpCmd::decode(&b, None).unwrap();
    assert_eq!(c.direction(), Direction::Bidirectional);
    assert_eq!((c.data_out.len(), c.data_in.len()), (1, 2));
    // No data.
    let none = cmd_header(0, 0, 0, 0, &[0; 16]);
    assert_eq!(
        SrpCmd::decode(&none, None).unwrap().direction(),
        Direction::None
    );
    // Reserved formats.
    for f in [0x04u8, 0x40, 0x0F, 0xF0] {
        let mut b = cmd_header(f, 0, 0, 0, &[0; 16]);
        b.extend_from_slice(&[0; 32]);
        assert!(matches!(
            SrpCmd::decode(&b, None),
            Err(DecodeError::DescriptorFormat(_))
        ));
    }
    // Truncated fixed part, wrong opcode.
    assert!(matches!(
        SrpCmd::decode(&b[..47], None),
        Err(DecodeError::Truncated { .. })
    ));
    let mut w = cmd_header(0, 0, 0, 0, &[0; 16]);
    w[0] = 0x01;
    assert!(matches!(
        SrpCmd::decode(&w, None),
        Err(DecodeError::Opcode { .. })
    ));
}

#[test]
fn cmd_encode_rejects_bad_fields() {
    let cdb = [0u8; 16];
    let c = SrpCmd {
        sol_not: 0,
        tag: Tag::default(),
        lun: [0; 8],
        task_attr: TaskAttr::Simple,
        cdb: &cdb,
        data_out: DataDesc::Immediate(&[1, 2, 3]),
        data_in: DataDesc::None,
    };
    assert!(c.encode(&mut [0u8; 128], 40).is_err()); // offset inside the descriptors
    assert!(c.encode(&mut [0u8; 60], 68).is_err()); // buffer too small
    assert_eq!(c.encode(&mut [0u8; 128], 68).unwrap(), 71);
    let short = SrpCmd {
        cdb: &cdb[..10],
        ..c
    };
    assert!(short.encode(&mut [0u8; 128], 68).is_err());
}

// ---- TSK_MGMT ----

#[test]
fn tsk_mgmt_functions() {
    let b = hex(
        "01 04 000000000000 8000000000000000 00000000 0001000000000000 0000 01 00
                 2a00010000000000 0000000000000000",
    );
    assert_eq!(b.len(), 48);
    let t = TskMgmt::decode(&b).unwrap();
    assert_eq!(t.sol_not, 0x04);
    assert_eq!(t.lun, [0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(
        t.action,
        TaskMgmt::AbortTask {
            task_tag: Tag([0x2A, 0, 1, 0, 0, 0, 0, 0])
        }
    );
    assert_eq!(t.encode().as_slice(), b.as_slice());
    for (f, a) in [
        (0x02, TaskMgmt::AbortTaskSet),
        (0x04, TaskMgmt::ClearTaskSet),
        (0x08, TaskMgmt::LunReset),
        (0x40, TaskMgmt::ClearAca),
        (0x10, TaskMgmt::Unsupported(0x10)),
    ] {
        let mut x = b.clone();
        x[30] = f;
        let t = TskMgmt::decode(&x).unwrap();
        assert_eq!(t.action, a);
        assert_eq!(t.action.function(), f);
        assert_eq!(
            t.action.is_supported(),
            !matches!(a, TaskMgmt::ClearAca | TaskMgmt::Unsupported(_))
        );
    }
    assert!(TskMgmt::decode(&b[..47]).is_err());
    for c in [
        TmResponse::Complete,
        TmResponse::InvalidFields,
        TmResponse::NotSupported,
        TmResponse::Failed,
    ] {
        assert_eq!(TmResponse::from_code(c.code()), c);
    }
    assert_eq!(TmResponse::Complete.code(), 0);
    assert_eq!(TmResponse::NotSupported.code(), 4);
    assert_eq!(TmResponse::Failed.code(), 5);
}

// ---- SRP_RSP ----

#[test]
fn rsp_good_with_underflow() {
    let r = SrpRsp {
        data_in: Residual::Under(60),
        ..SrpRsp::scsi(Tag([5; 8]), 1, 0, &[])
    };
    let mut b = [0u8; 64];
    let n = r.encode(&mut b, 256).unwrap();
    assert_eq!(n, 36);
    let want =
        hex("c1 00 0000 00000001 0505050505050505 0000 20 00 00000000 0000003c 00000000 00000000");
    assert_eq!(&b[..n], want.as_slice());
    assert_eq!(SrpRsp::decode(&b[..n]).unwrap(), r);
}

#[test]
fn rsp_without_sense_overwrites_a_used_buffer() {
    // The fixed-size path writes all 36 bytes: a send buffer still holding an earlier,
    // longer response is not left with its bytes.
    let r = SrpRsp {
        solnt: true,
        data_out: Residual::Over(512),
        data_in: Residual::Under(7),
        ..SrpRsp::scsi(Tag([9; 8]), 0x0102_0304, 0x18, &[])
    };
    let mut b = [0xFFu8; 64];
    let n = r.encode(&mut b, 36).unwrap();
    assert_eq!(n, 36);
    let want =
        hex("c1 01 0000 01020304 0909090909090909 0000 24 18 00000200 00000007 00000000 00000000");
    assert_eq!(&b[..n], want.as_slice());
    assert_eq!(&b[n..], &[0xFF; 28]);
    assert_eq!(SrpRsp::decode(&b[..n]).unwrap(), r);
    // A limit below the fixed part cannot be met, sense or not.
    assert!(r.encode(&mut b, 35).is_err());
}

#[test]
fn rsp_check_condition_with_sense() {
    let sense = [
        0x70, 0, 5, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x24, 0, 0, 0xC0, 0, 2,
    ];
    let r = SrpRsp {
        solnt: true,
        data_out: Residual::Over(512),
        ..SrpRsp::scsi(Tag([1; 8]), 3, 0x02, &sense)
    };
    let mut b = [0u8; 128];
    let n = r.encode(&mut b, 256).unwrap();
    assert_eq!(n, 36 + 18);
    assert_eq!(b[1], 1);
    assert_eq!(b[18], 0x02 | 0x04);
    assert_eq!(b[19], 0x02);
    assert_eq!(&b[20..24], &[0, 0, 2, 0]);
    assert_eq!(&b[28..32], &[0, 0, 0, 18]);
    assert_eq!(&b[36..n], &sense);
    assert_eq!(SrpRsp::decode(&b[..n]).unwrap(), r);
    // Sense is truncated to fit max_ti_iu_len.
    let n = r.encode(&mut b, 40).unwrap();
    assert_eq!(n, 40);
    assert_eq!(&b[28..32], &[0, 0, 0, 4]);
    // A limit below the fixed part cannot be met.
    let tm = SrpRsp::tm_response_data(TmResponse::Complete);
    assert!(
        SrpRsp::task_mgmt(Tag::default(), 1, &tm)
            .encode(&mut b, 39)
            .is_err()
    );
    assert!(r.encode(&mut [0u8; 30], 256).is_err());
}

#[test]
fn rsp_task_mgmt() {
    let data = SrpRsp::tm_response_data(TmResponse::NotSupported);
    let r = SrpRsp::task_mgmt(Tag([8; 8]), 1, &data);
    let mut b = [0u8; 64];
    let n = r.encode(&mut b, 64).unwrap();
    assert_eq!(n, 40);
    assert_eq!(b[18], 0x01);
    assert_eq!(&b[32..36], &[0, 0, 0, 4]);
    assert_eq!(&b[36..40], &[0, 0, 0, 4]);
    let d = SrpRsp::decode(&b[..n]).unwrap();
    assert_eq!(d.tm_response(), Some(TmResponse::NotSupported));
    assert!(SrpRsp::decode(&b[..39]).is_err());
}

#[test]
fn residual_and_solicit() {
    assert_eq!(Residual::compute(4096, 4096), Residual::None);
    assert_eq!(Residual::compute(4096, 36), Residual::Under(4060));
    assert_eq!(Residual::compute(36, 96), Residual::Over(60));
    assert_eq!(Residual::compute(0, 1 << 40), Residual::Over(u32::MAX));
    assert!(rsp::solicited(0x02, true));
    assert!(!rsp::solicited(0x02, false));
    assert!(rsp::solicited(0x04, false));
}

// ---- dispatch and fuzz ----

#[test]
fn initiator_iu_dispatch() {
    let mut b = cmd_header(0, 0, 0, 0, &[0; 16]);
    assert!(matches!(
        decode_initiator_iu(&b, None),
        Ok(InitiatorIu::Cmd(_))
    ));
    b[0] = 0x03;
    assert!(matches!(
        decode_initiator_iu(&b, None),
        Ok(InitiatorIu::ILogout(_))
    ));
    b[0] = 0x01;
    assert!(matches!(
        decode_initiator_iu(&b, None),
        Ok(InitiatorIu::TskMgmt(_))
    ));
    b[0] = 0x41;
    assert!(matches!(
        decode_initiator_iu(&b, None),
        Ok(InitiatorIu::CredRsp(_))
    ));
    b[0] = 0x42;
    assert!(matches!(
        decode_initiator_iu(&b, None),
        Ok(InitiatorIu::AerRsp(_))
    ));
    for op in [0x00, 0xC1, 0x80, 0x99] {
        b[0] = op;
        assert_eq!(
            decode_initiator_iu(&b, None),
            Err(DecodeError::UnknownOpcode(op))
        );
    }
    assert!(decode_initiator_iu(&[], None).is_err());
    assert_eq!(CMD_LEN, 48);
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = Rng(0xDEAD_BEEF_1234_5678);
    let mut buf = vec![0u8; 512];
    for i in 0..300_000u32 {
        let len = (rng.next() % 200) as usize;
        for b in buf[..len].iter_mut() {
            *b = rng.next() as u8;
        }
        // Bias towards valid opcodes and small descriptor counts so the deep paths run.
        if len > 0 && i % 2 == 0 {
            buf[0] = [
                0x02, 0x01, 0x03, 0x41, 0x42, 0x00, 0xC0, 0xC1, 0xC2, 0x80, 0x81, 0x82,
            ][i as usize % 12];
        }
        if len > 7 && i % 3 == 0 {
            buf[5] = [0x01, 0x10, 0x02, 0x20, 0x30, 0x11, 0x22][(i / 3) as usize % 7];
            buf[6] %= 4;
            buf[7] %= 4;
        }
        if len > 31 && i % 5 == 0 {
            buf[31] &= 0x1F;
        }
        let b = &buf[..len];
        let imm = [None, Some(68u16), Some(0), Some(u16::MAX)][(i % 4) as usize];
        if let Ok(InitiatorIu::Cmd(c)) = decode_initiator_iu(b, imm) {
            // Everything a decoded command points at lies inside the IU.
            if let DataDesc::Immediate(d) = c.data_out {
                assert!(d.len() <= len);
            }
            if let DataDesc::Indirect(ind) = c.data_in {
                assert!(ind.in_iu_count() <= ind.table_count());
                let _ = ind.descriptors().count();
            }
            let _ = c.direction();
        }
        let _ = LoginReq::decode_ib(b);
        let _ = LoginReq::decode_rdma_cm(b);
        let _ = LoginRsp::decode(b);
        let _ = LoginRej::decode(b);
        let _ = TLogout::decode(b);
        let _ = CredReq::decode(b);
        let _ = AerReq::decode(b);
        if let Ok(r) = SrpRsp::decode(b) {
            let _ = r.tm_response();
            let mut out = [0u8; 512];
            let _ = r.encode(&mut out, (rng.next() % 300) as u32);
        }
    }
}
