//! The login decision, as a pure function: a decoded SRP_LOGIN_REQ and the target port's
//! configuration in, accept parameters or an SRP reject reason out.
//!
//! The checks run in ib_srpt's order so that a Linux initiator sees the same reason codes:
//! IU length (0x10002), port enabled (0x10001), target port id (0x10003), then the buffer
//! formats (0x10004, which ib_srpt never checks), the ACL (0x10006: "channel limit reached"
//! is what a missing ACL looks like on the wire), and resources (0x10001).

use std::net::IpAddr;

use crate::proto::cmd::{CMD_LEN, IMM_DESC_LEN};
use crate::proto::{
    BufFormats, LoginRej, LoginReq, LoginRsp, MIN_IU_LEN, MultiChannelAction, MultiChannelResult,
    PortId, RejectReason, Tag,
};

/// What identifies an initiator in an ACL entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InitiatorMatch {
    /// The full 16-byte initiator port identifier (LIO's `0x<32 hex>` ACL form).
    PortId(PortId),
    /// The port GUID: bytes 8..16 of the initiator port id (LIO's `xxxx:xxxx:xxxx:xxxx` form).
    Guid(u64),
    /// The initiator's IP address as seen by RDMA CM (the peer address, not the local one).
    Addr(IpAddr),
}

/// Which initiators may log in.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Acl {
    /// Any initiator (LIO's `generate_node_acls`).
    #[default]
    AllowAny,
    /// Only initiators matching one of these entries.
    Allow(Vec<InitiatorMatch>),
}

impl Acl {
    /// `true` if the initiator with `port_id` (connecting from `peer`, if known) may log in.
    pub fn permits(&self, port_id: &PortId, peer: Option<IpAddr>) -> bool {
        match self {
            Acl::AllowAny => true,
            Acl::Allow(entries) => entries.iter().any(|e| match e {
                InitiatorMatch::PortId(p) => p == port_id,
                InitiatorMatch::Guid(g) => port_id.lo() == *g,
                InitiatorMatch::Addr(a) => peer == Some(*a),
            }),
        }
    }
}

/// Configuration of one SRP target port, as the login decision needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PortConfig {
    /// High 8 bytes of the target port id (`id_ext` on the initiator side).
    pub id_ext: u64,
    /// Low 8 bytes of the target port id (`ioc_guid`).
    pub ioc_guid: u64,
    /// Logins are accepted only while the port is enabled.
    pub enabled: bool,
    /// Which initiators may log in.
    pub acl: Acl,
    /// Receive buffer size: the largest IU the target accepts (ib_srpt `srp_max_req_size`,
    /// default 8276; Linux initiators ask for 8260 by default).
    pub max_req_size: u32,
    /// Send buffer size: the largest IU the target sends, advertised as max_ti_iu_len
    /// (ib_srpt `srp_max_rsp_size`, default 256).
    pub max_rsp_size: u32,
    /// Credits per channel (ib_srpt `rq_size`, 128).
    pub queue_depth: u32,
    /// Supported buffer formats (Linux: direct and indirect).
    pub buf_formats: BufFormats,
    /// Accept immediate data when asked (ib_srpt: only without SRQ).
    pub immediate_data: bool,
}

impl PortConfig {
    /// ib_srpt's defaults for a port with this target port id.
    pub fn new(id_ext: u64, ioc_guid: u64) -> Self {
        PortConfig {
            id_ext,
            ioc_guid,
            enabled: false,
            acl: Acl::AllowAny,
            max_req_size: DEFAULT_MAX_REQ_SIZE,
            max_rsp_size: DEFAULT_MAX_RSP_SIZE,
            queue_depth: DEFAULT_QUEUE_DEPTH,
            buf_formats: BufFormats::BOTH,
            immediate_data: true,
        }
    }

    /// The target port identifier logins must name.
    pub fn target_port_id(&self) -> PortId {
        PortId::from_halves(self.id_ext, self.ioc_guid)
    }
}

/// ib_srpt's `srp_max_req_size` default: max(48 + 16 + 20 + 128 × 16, 80 + 4 + 8192).
pub const DEFAULT_MAX_REQ_SIZE: u32 = 8276;
/// ib_srpt's `srp_max_rsp_size` default.
pub const DEFAULT_MAX_RSP_SIZE: u32 = 256;
/// ib_srpt's `MAX_SRPT_RQ_SIZE`: credits granted per channel.
pub const DEFAULT_QUEUE_DEPTH: u32 = 128;
/// Smallest send buffer: an SRP_RSP with a full 18-byte fixed sense fits, and so does every
/// other target-to-initiator IU without sense.
pub const MIN_RSP_SIZE: u32 = 64;
/// Receives a channel posts beyond its credits: the initiator's answers to target requests
/// (SRP_CRED_RSP, SRP_AER_RSP) and SRP_I_LOGOUT take no credit.
pub const RECV_SPARE: u32 = 2;
/// Send-queue entries a channel keeps for target-initiated IUs (SRP_T_LOGOUT, SRP_CRED_REQ,
/// the BUSY answers to credit overruns).
pub const SEND_SPARES: u32 = 4;
/// Smallest send queue: the spare entries and room for requests' work.
pub const MIN_SEND_DEPTH: u32 = SEND_SPARES + 2;
/// Fewest credits a channel is granted: ib_srp keeps one for task management, so with fewer
/// it could send no command.
pub const MIN_CREDITS: u32 = 2;

/// Device limits that bound what a channel can get.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Largest send or receive queue the device allows (`max_qp_wr`).
    pub max_qp_wr: u32,
    /// Receives come from a shared receive queue: the channel has no receive queue of its own
    /// to fit.
    pub srq: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_qp_wr: u32::MAX,
            srq: false,
        }
    }
}

impl Limits {
    /// Receive and send depths of a channel granted `credits` by [`decide`] (which made them
    /// fit) that asks for `sq_size` send-queue entries: the credits and [`RECV_SPARE`]
    /// receives (posted to its own receive queue, or taken from the shared one), and
    /// `sq_size` within the device, at least [`MIN_SEND_DEPTH`].
    pub fn queue_depths(&self, credits: u32, sq_size: u32) -> (u32, u32) {
        (
            credits + RECV_SPARE,
            sq_size.max(MIN_SEND_DEPTH).min(self.max_qp_wr),
        )
    }
}

/// The parameters of an accepted login.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// Initial credits (LOGIN_RSP REQUEST LIMIT DELTA) and receive buffers to post.
    pub credits: u32,
    /// MAXIMUM INITIATOR TO TARGET IU LENGTH (the receive buffer size, as ib_srpt).
    pub max_it_iu_len: u32,
    /// MAXIMUM TARGET TO INITIATOR IU LENGTH: every response must fit in it.
    pub max_ti_iu_len: u32,
    /// SUPPORTED BUFFER FORMATS.
    pub buf_fmt: BufFormats,
    /// Negotiated immediate data offset, if immediate data was accepted.
    pub imm_data_offset: Option<u16>,
    /// The login's MULTI-CHANNEL ACTION (the nexus decides what it does to other channels).
    pub action: MultiChannelAction,
}

impl Accept {
    /// The LOGIN_RSP for this accept; `result` comes from the nexus table.
    pub fn response(&self, tag: Tag, result: MultiChannelResult) -> LoginRsp {
        LoginRsp {
            req_lim_delta: self.credits,
            tag,
            max_it_iu_len: self.max_it_iu_len,
            max_ti_iu_len: self.max_ti_iu_len,
            buf_fmt: self.buf_fmt,
            multi_channel: result,
            solnt: false,
            immediate: self.imm_data_offset.is_some(),
        }
    }
}

/// Why a login was rejected: the wire reason and a cause for the log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reject {
    /// REASON sent in SRP_LOGIN_REJ.
    pub reason: RejectReason,
    /// Human-readable cause (for logs and RPC listings, never sent).
    pub cause: &'static str,
}

impl Reject {
    /// The SRP_LOGIN_REJ to send.
    pub fn rej(&self, tag: Tag, port: &PortConfig) -> LoginRej {
        LoginRej {
            reason: self.reason,
            tag,
            buf_fmt: port.buf_formats,
        }
    }
}

fn reject(reason: RejectReason, cause: &'static str) -> Reject {
    Reject { reason, cause }
}

/// Decides a login. `peer` is the initiator's address when the login came over RDMA CM.
pub fn decide(
    req: &LoginReq,
    port: &PortConfig,
    peer: Option<IpAddr>,
    limits: &Limits,
) -> Result<Accept, Reject> {
    if req.req_it_iu_len > port.max_req_size || req.req_it_iu_len < MIN_IU_LEN {
        return Err(reject(
            RejectReason::ItIuLengthTooLarge,
            "requested max IT IU length out of range",
        ));
    }
    if !port.enabled {
        return Err(reject(
            RejectReason::InsufficientResources,
            "target port not enabled",
        ));
    }
    if req.target_port_id != port.target_port_id() {
        return Err(reject(
            RejectReason::UnableToAssociate,
            "wrong target port identifier",
        ));
    }
    let required = req.req_buf_fmt.0 & BufFormats::BOTH.0;
    if required & !port.buf_formats.0 != 0 {
        return Err(reject(
            RejectReason::BufferFormatsUnsupported,
            "required buffer formats not supported",
        ));
    }
    if !port.acl.permits(&req.initiator_port_id, peer) {
        return Err(reject(
            RejectReason::ChannelLimitReached,
            "initiator not allowed (no ACL entry)",
        ));
    }
    // The channel's queue pair must fit the device: its receive queue holds the credits and
    // RECV_SPARE more (none of its own with a shared receive queue), its send queue at least
    // MIN_SEND_DEPTH entries. Credits shrink to fit (ib_srpt: min(rq_size, max_qp_wr)); a
    // device too small for any channel refuses the login.
    let recv_room = if limits.srq {
        limits.max_qp_wr
    } else {
        limits.max_qp_wr.saturating_sub(RECV_SPARE)
    };
    let credits = port.queue_depth.min(recv_room);
    if credits < MIN_CREDITS || limits.max_qp_wr < MIN_SEND_DEPTH {
        return Err(reject(
            RejectReason::InsufficientResources,
            "the device's queues are too small for a channel",
        ));
    }
    // Immediate data needs room for the 4-byte descriptor before the data and at least one
    // byte of data in a receive buffer; otherwise it is declined, not the login.
    let imm_data_offset = req.immediate_requested().filter(|&off| {
        port.immediate_data
            && usize::from(off) >= CMD_LEN + IMM_DESC_LEN
            && u32::from(off) < port.max_req_size
    });
    Ok(Accept {
        credits,
        max_it_iu_len: port.max_req_size,
        max_ti_iu_len: port.max_rsp_size.max(MIN_RSP_SIZE),
        buf_fmt: port.buf_formats,
        imm_data_offset,
        action: req.multi_channel_action(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::login::REQ_FLAG_IMMED_REQUESTED;

    const G: u64 = 0x0002_c903_000e_8acd;
    const IG: u64 = 0x5254_00ff_fe12_3456;

    fn port() -> PortConfig {
        let mut p = PortConfig::new(G, G);
        p.enabled = true;
        p
    }

    fn linux_req() -> LoginReq {
        LoginReq {
            tag: Tag([0; 8]),
            req_it_iu_len: 8260,
            req_buf_fmt: BufFormats::BOTH,
            req_flags: REQ_FLAG_IMMED_REQUESTED,
            imm_data_offset: 68,
            initiator_port_id: PortId::from_halves(0, IG),
            target_port_id: PortId::from_halves(G, G),
        }
    }

    fn reason(r: Result<Accept, Reject>) -> u32 {
        r.unwrap_err().reason.code()
    }

    #[test]
    fn linux_login_is_accepted_like_ib_srpt() {
        let a = decide(&linux_req(), &port(), None, &Limits::default()).unwrap();
        assert_eq!(a.credits, 128);
        assert_eq!(a.max_it_iu_len, 8276);
        assert_eq!(a.max_ti_iu_len, 256);
        assert_eq!(a.buf_fmt, BufFormats::BOTH);
        assert_eq!(a.imm_data_offset, Some(68));
        assert_eq!(a.action, MultiChannelAction::Single);
        let rsp = a.response(Tag([0; 8]), MultiChannelResult::NoneExisting);
        let b = rsp.encode();
        assert_eq!(&b[..8], &[0xC0, 0, 0, 0, 0, 0, 0, 128]);
        assert_eq!(b[26], 0x80);
    }

    #[test]
    fn reject_table() {
        let l = Limits::default();
        // IU length: above srp_max_req_size, or below 64.
        let mut r = linux_req();
        r.req_it_iu_len = 8277;
        assert_eq!(reason(decide(&r, &port(), None, &l)), 0x10002);
        r.req_it_iu_len = 63;
        assert_eq!(reason(decide(&r, &port(), None, &l)), 0x10002);
        // A target configured below 8260 rejects default Linux initiators (reference §6.8).
        let mut small = port();
        small.max_req_size = 4096;
        assert_eq!(reason(decide(&linux_req(), &small, None, &l)), 0x10002);
        // Port disabled.
        let mut off = port();
        off.enabled = false;
        assert_eq!(reason(decide(&linux_req(), &off, None, &l)), 0x10001);
        // The IU length check comes first, as in ib_srpt.
        r.req_it_iu_len = 10_000;
        assert_eq!(reason(decide(&r, &off, None, &l)), 0x10002);
        // Wrong target port id (either half).
        let mut r = linux_req();
        r.target_port_id = PortId::from_halves(G, G + 1);
        assert_eq!(reason(decide(&r, &port(), None, &l)), 0x10003);
        r.target_port_id = PortId::from_halves(0, G);
        assert_eq!(reason(decide(&r, &port(), None, &l)), 0x10003);
        // Buffer formats the port does not support.
        let mut direct_only = port();
        direct_only.buf_formats = BufFormats(BufFormats::DIRECT);
        assert_eq!(
            reason(decide(&linux_req(), &direct_only, None, &l)),
            0x10004
        );
        let mut r = linux_req();
        r.req_buf_fmt = BufFormats(BufFormats::DIRECT | 0x8000); // reserved bits are ignored
        assert!(decide(&r, &direct_only, None, &l).is_ok());
        // Not in the ACL.
        let mut acl = port();
        acl.acl = Acl::Allow(vec![InitiatorMatch::PortId(PortId::from_halves(0, 1))]);
        assert_eq!(reason(decide(&linux_req(), &acl, None, &l)), 0x10006);
        // No receive queue.
        let none = Limits {
            max_qp_wr: 0,
            srq: false,
        };
        assert_eq!(reason(decide(&linux_req(), &port(), None, &none)), 0x10001);
    }

    #[test]
    fn credits_are_sized_so_the_queue_pair_fits_the_device() {
        let credits = |max_qp_wr, srq| {
            decide(&linux_req(), &port(), None, &Limits { max_qp_wr, srq }).map(|a| a.credits)
        };
        // The receive queue holds the credits and two spare receives.
        assert_eq!(credits(16384, false), Ok(128));
        assert_eq!(credits(130, false), Ok(128));
        assert_eq!(credits(129, false), Ok(127));
        assert_eq!(credits(64, false), Ok(62));
        // With a shared receive queue only the send queue bounds the queue pair.
        assert_eq!(credits(64, true), Ok(64));
        // The smallest device: two credits, the send queue's spares and two entries more.
        assert_eq!(credits(MIN_SEND_DEPTH, false), Ok(4));
        for (max_qp_wr, srq) in [(3, false), (5, false), (5, true), (1, true), (0, true)] {
            assert_eq!(
                credits(max_qp_wr, srq).map_err(|r| r.reason.code()),
                Err(0x10001),
                "max_qp_wr {max_qp_wr} srq {srq}"
            );
        }
        // The depths the runtime creates always fit.
        for max_qp_wr in [6, 7, 64, 130, 4097, 16384] {
            let l = Limits {
                max_qp_wr,
                srq: false,
            };
            let a = decide(&linux_req(), &port(), None, &l).unwrap();
            for sq_size in [1, 16, 4096, 65535] {
                let (rq, sq) = l.queue_depths(a.credits, sq_size);
                assert!(rq <= max_qp_wr && sq <= max_qp_wr, "{max_qp_wr} {sq_size}");
                assert!(sq >= MIN_SEND_DEPTH && rq == a.credits + RECV_SPARE);
            }
        }
    }

    #[test]
    fn acl_forms() {
        let id = PortId::from_halves(0, IG);
        let peer: IpAddr = "10.77.0.2".parse().unwrap();
        let by = |m| Acl::Allow(vec![m]);
        assert!(Acl::AllowAny.permits(&id, None));
        assert!(by(InitiatorMatch::PortId(id)).permits(&id, None));
        assert!(by(InitiatorMatch::Guid(IG)).permits(&id, None));
        assert!(!by(InitiatorMatch::Guid(IG + 1)).permits(&id, None));
        assert!(by(InitiatorMatch::Addr(peer)).permits(&id, Some(peer)));
        assert!(!by(InitiatorMatch::Addr(peer)).permits(&id, None));
        assert!(!Acl::Allow(vec![]).permits(&id, Some(peer)));
        let mut p = port();
        p.acl = by(InitiatorMatch::Addr(peer));
        assert!(decide(&linux_req(), &p, Some(peer), &Limits::default()).is_ok());
    }

    #[test]
    fn negotiation() {
        let l = Limits {
            max_qp_wr: 64,
            srq: false,
        };
        let a = decide(&linux_req(), &port(), None, &l).unwrap();
        assert_eq!(a.credits, 62);
        // Immediate data declined, login accepted: not configured, not asked, offset too small.
        let mut no_imm = port();
        no_imm.immediate_data = false;
        assert_eq!(
            decide(&linux_req(), &no_imm, None, &l)
                .unwrap()
                .imm_data_offset,
            None
        );
        let mut r = linux_req();
        r.req_flags = 0x01;
        let a = decide(&r, &port(), None, &l).unwrap();
        assert_eq!(a.imm_data_offset, None);
        assert_eq!(a.action, MultiChannelAction::Multi);
        assert_eq!(
            a.response(Tag([0; 8]), MultiChannelResult::Maintained)
                .encode()[26],
            0x02
        );
        r.req_flags = REQ_FLAG_IMMED_REQUESTED;
        r.imm_data_offset = 48;
        assert_eq!(decide(&r, &port(), None, &l).unwrap().imm_data_offset, None);
        r.imm_data_offset = 52;
        assert_eq!(
            decide(&r, &port(), None, &l).unwrap().imm_data_offset,
            Some(52)
        );
        // Offset beyond the receive buffer.
        r.imm_data_offset = 9000;
        assert_eq!(decide(&r, &port(), None, &l).unwrap().imm_data_offset, None);
        // A tiny max_rsp_size is raised to what a sense-carrying SRP_RSP needs.
        let mut p = port();
        p.max_rsp_size = 40;
        assert_eq!(
            decide(&linux_req(), &p, None, &l).unwrap().max_ti_iu_len,
            64
        );
        // The reject echoes the tag and the supported formats.
        let mut off = port();
        off.enabled = false;
        let rj = decide(&linux_req(), &off, None, &l).unwrap_err();
        let rej = rj.rej(Tag([9; 8]), &off);
        assert_eq!(rej.encode()[8..16], [9; 8]);
        assert_eq!(rej.encode()[24..26], [0, 6]);
    }
}
