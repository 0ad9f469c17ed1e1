//! SRP login private data (the 56-byte RDMA CM form and the 64-byte IB CM form) through the
//! login decision and the nexus table, as the SRP acceptor uses them.
//!
//! Input: `[port selector: 8 bytes]` then logins `[channel id][56 or 64 bytes]`.
//! Properties: nothing panics; an accepted login satisfies every check the decision makes
//! (IU length bounds, target port id, ACL, buffer formats, credits within the device limit,
//! immediate data only when asked and room for it) and its LOGIN_RSP round-trips; a rejected
//! one produces a LOGIN_REJ that round-trips with the same reason; a single-channel login
//! leaves no other live channel in its nexus.
#![no_main]
use std::net::{IpAddr, Ipv4Addr};

use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use transport_srp::login::{Acl, InitiatorMatch, Limits, PortConfig, decide};
use transport_srp::nexus::{NexusKey, NexusTable, Phase};
use transport_srp::proto::{
    BufFormats, LoginRej, LoginReq, LoginRsp, MultiChannelAction, MultiChannelResult, PortId,
};

const G: u64 = 0x0002_c903_000e_8acd;

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let sel = b.array::<8>();
    let mut port = PortConfig::new(G, G);
    port.enabled = sel[0] & 1 != 0;
    port.immediate_data = sel[0] & 2 != 0;
    port.buf_formats = BufFormats(u16::from(sel[0] >> 2 & 0x6));
    port.max_req_size = 64 + u32::from(u16::from_le_bytes([sel[1], sel[2]]));
    port.max_rsp_size = u32::from(sel[3]) * 4;
    port.queue_depth = u32::from(sel[4]);
    if sel[0] & 0x40 != 0 {
        port.acl = Acl::Allow(vec![
            InitiatorMatch::Guid(0x5254_0012_3456_7890),
            InitiatorMatch::PortId(PortId::from_halves(0, 7)),
            InitiatorMatch::Addr(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2))),
        ]);
    }
    let limits = Limits {
        max_qp_wr: u32::from(sel[5]) * 16,
        srq: sel[6] & 2 != 0,
    };
    let peer = (sel[6] & 1 != 0).then_some(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)));
    let mut table: NexusTable<u8> = NexusTable::new();
    while !b.is_empty() {
        let ch = b.u8() % 16;
        let ib = ch & 8 != 0;
        let pdata = b.take(if ib { 64 } else { 56 });
        let req = if ib {
            LoginReq::decode_ib(pdata)
        } else {
            LoginReq::decode_rdma_cm(pdata)
        };
        let Ok(req) = req else {
            continue;
        };
        // The encodings are lossless.
        if ib {
            assert_eq!(LoginReq::decode_ib(&req.encode_ib()), Ok(req));
        } else {
            assert_eq!(LoginReq::decode_rdma_cm(&req.encode_rdma_cm()), Ok(req));
        }
        match decide(&req, &port, peer, &limits) {
            Ok(acc) => {
                assert!(port.enabled);
                assert!(req.req_it_iu_len >= 64 && req.req_it_iu_len <= port.max_req_size);
                assert_eq!(req.target_port_id, port.target_port_id());
                assert!(port.acl.permits(&req.initiator_port_id, peer));
                assert_eq!(req.req_buf_fmt.0 & 0x6 & !port.buf_formats.0, 0);
                assert!(acc.credits >= 1 && acc.credits <= port.queue_depth.min(limits.max_qp_wr));
                // The channel's queue pair fits the device.
                let (rq, sq) = limits.queue_depths(acc.credits, 4096);
                assert!(sq <= limits.max_qp_wr && (limits.srq || rq <= limits.max_qp_wr));
                if let Some(off) = acc.imm_data_offset {
                    assert!(port.immediate_data && req.immediate_requested() == Some(off));
                    assert!(u32::from(off) < acc.max_it_iu_len);
                }
                let key = NexusKey {
                    initiator: req.initiator_port_id,
                    target: req.target_port_id,
                };
                let eff = table.login(key, ch, acc.action);
                for t in &eff.terminate {
                    assert_eq!(table.phase(*t), Some(Phase::Closing));
                    table.remove(*t);
                }
                if acc.action == MultiChannelAction::Single {
                    assert!(
                        table
                            .members(&key)
                            .all(|(id, p)| id == ch || p == Phase::Closing),
                        "single-channel login left another channel live"
                    );
                    assert_ne!(eff.result, MultiChannelResult::Maintained);
                }
                if table.accepted(ch) {
                    let rsp = acc.response(req.tag, eff.result);
                    let back = LoginRsp::decode(&rsp.encode()).expect("LOGIN_RSP decodes");
                    assert_eq!(back, rsp);
                    assert_eq!(back.immediate, acc.imm_data_offset.is_some());
                }
                // Channels come and go.
                if pdata.last().is_some_and(|x| x & 1 != 0) {
                    table.closing(ch);
                    table.remove(ch);
                }
            }
            Err(rej) => {
                let r = rej.rej(req.tag, &port);
                let back = LoginRej::decode(&r.encode()).expect("LOGIN_REJ decodes");
                assert_eq!(back.reason, rej.reason);
                assert_eq!(back.tag, req.tag);
            }
        }
        assert!(table.nexus_count() <= table.len());
    }
});
