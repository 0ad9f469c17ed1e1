//! SRP_LOGIN_REQ (IB CM form, 64 bytes, and RDMA CM form, 56 bytes), SRP_LOGIN_RSP (52 bytes)
//! and SRP_LOGIN_REJ (32 bytes) with its reason codes.

use super::{BufFormats, DecodeError, PortId, Tag, arr, be16, be32, expect_opcode, need, opcode};

/// Length of SRP_LOGIN_REQ as IB CM REQ private data.
pub const LOGIN_REQ_LEN: usize = 64;
/// Length of the RDMA CM login private data (`srp_login_req_rdma`).
pub const LOGIN_REQ_RDMA_LEN: usize = 56;
/// Length of SRP_LOGIN_RSP.
pub const LOGIN_RSP_LEN: usize = 52;
/// Length of SRP_LOGIN_REJ.
pub const LOGIN_REJ_LEN: usize = 32;

/// REQ_FLAGS bit: the initiator asks for immediate data at `imm_data_offset` (SRP-2).
pub const REQ_FLAG_IMMED_REQUESTED: u8 = 0x80;
/// RSP_FLAGS bit: immediate data accepted (SRP-2).
pub const RSP_FLAG_IMMED_SUPPORTED: u8 = 0x80;
/// RSP_FLAGS bit: the target supports solicited notification on T_LOGOUT etc.
pub const RSP_FLAG_SOLNT: u8 = 0x10;

/// MULTI-CHANNEL ACTION of a login (REQ_FLAGS bits 1:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MultiChannelAction {
    /// 0: terminate every existing channel of the I_T nexus.
    Single,
    /// 1: keep the existing channels.
    Multi,
    /// 2 or 3 (reserved). ib_srpt treats these like 1; so does this target.
    Reserved(u8),
}

impl MultiChannelAction {
    /// From REQ_FLAGS.
    pub fn from_flags(flags: u8) -> Self {
        match flags & 0x03 {
            0 => Self::Single,
            1 => Self::Multi,
            v => Self::Reserved(v),
        }
    }

    /// The two-bit wire value.
    pub fn bits(self) -> u8 {
        match self {
            Self::Single => 0,
            Self::Multi => 1,
            Self::Reserved(v) => v & 0x03,
        }
    }
}

/// MULTI-CHANNEL RESULT of a login response (RSP_FLAGS bits 1:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MultiChannelResult {
    /// 0: no existing channels were terminated.
    NoneExisting,
    /// 1: existing channels were terminated.
    Terminated,
    /// 2: existing channels were maintained.
    Maintained,
}

impl MultiChannelResult {
    /// The two-bit wire value.
    pub fn bits(self) -> u8 {
        match self {
            Self::NoneExisting => 0,
            Self::Terminated => 1,
            Self::Maintained => 2,
        }
    }

    fn from_bits(b: u8) -> Self {
        match b & 0x03 {
            1 => Self::Terminated,
            2 => Self::Maintained,
            _ => Self::NoneExisting,
        }
    }
}

/// A decoded SRP_LOGIN_REQ, whichever CM carried it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginReq {
    /// Tag (ib_srp sends 0); echoed in the response or reject.
    pub tag: Tag,
    /// REQUESTED MAXIMUM INITIATOR TO TARGET IU LENGTH.
    pub req_it_iu_len: u32,
    /// REQUIRED BUFFER FORMATS.
    pub req_buf_fmt: BufFormats,
    /// REQ_FLAGS: multi-channel action, LOSOLNT/CRSOLNT/AESOLNT, IMMED_REQUESTED.
    pub req_flags: u8,
    /// IMMEDIATE DATA OFFSET (meaningful only with IMMED_REQUESTED).
    pub imm_data_offset: u16,
    /// INITIATOR PORT IDENTIFIER.
    pub initiator_port_id: PortId,
    /// TARGET PORT IDENTIFIER.
    pub target_port_id: PortId,
}

impl LoginReq {
    /// Decodes the 64-byte IB CM form. Extra private-data bytes are ignored.
    pub fn decode_ib(b: &[u8]) -> Result<Self, DecodeError> {
        need(b, LOGIN_REQ_LEN)?;
        expect_opcode(b, opcode::LOGIN_REQ)?;
        Ok(LoginReq {
            tag: Tag(arr(b, 8)),
            req_it_iu_len: be32(b, 16),
            req_buf_fmt: BufFormats(be16(b, 24)),
            req_flags: b[26],
            imm_data_offset: be16(b, 28),
            initiator_port_id: PortId(arr(b, 32)),
            target_port_id: PortId(arr(b, 48)),
        })
    }

    /// Decodes the 56-byte RDMA CM form (what a CONNECT_REQUEST carries after the RDMA CM
    /// header). Shorter private data is rejected, as ib_srpt does.
    pub fn decode_rdma_cm(b: &[u8]) -> Result<Self, DecodeError> {
        tracing::trace!(target: target_core::hex::WIRE_TARGET, kind = "srp_login",
                        data = %target_core::hex::Hex(b));
        need(b, LOGIN_REQ_RDMA_LEN)?;
        let op = b[11];
        if op != opcode::LOGIN_REQ {
            return Err(DecodeError::Opcode {
                expected: opcode::LOGIN_REQ,
                got: op,
            });
        }
        Ok(LoginReq {
            tag: Tag(arr(b, 0)),
            req_buf_fmt: BufFormats(be16(b, 8)),
            req_flags: b[10],
            req_it_iu_len: be32(b, 12),
            initiator_port_id: PortId(arr(b, 16)),
            target_port_id: PortId(arr(b, 32)),
            imm_data_offset: be16(b, 48),
        })
    }

    /// The 64-byte IB CM form.
    pub fn encode_ib(&self) -> [u8; LOGIN_REQ_LEN] {
        let mut b = [0u8; LOGIN_REQ_LEN];
        b[0] = opcode::LOGIN_REQ;
        b[8..16].copy_from_slice(&self.tag.0);
        b[16..20].copy_from_slice(&self.req_it_iu_len.to_be_bytes());
        b[24..26].copy_from_slice(&self.req_buf_fmt.0.to_be_bytes());
        b[26] = self.req_flags;
        b[28..30].copy_from_slice(&self.imm_data_offset.to_be_bytes());
        b[32..48].copy_from_slice(&self.initiator_port_id.0);
        b[48..64].copy_from_slice(&self.target_port_id.0);
        b
    }

    /// The 56-byte RDMA CM form.
    pub fn encode_rdma_cm(&self) -> [u8; LOGIN_REQ_RDMA_LEN] {
        let mut b = [0u8; LOGIN_REQ_RDMA_LEN];
        b[0..8].copy_from_slice(&self.tag.0);
        b[8..10].copy_from_slice(&self.req_buf_fmt.0.to_be_bytes());
        b[10] = self.req_flags;
        b[11] = opcode::LOGIN_REQ;
        b[12..16].copy_from_slice(&self.req_it_iu_len.to_be_bytes());
        b[16..32].copy_from_slice(&self.initiator_port_id.0);
        b[32..48].copy_from_slice(&self.target_port_id.0);
        b[48..50].copy_from_slice(&self.imm_data_offset.to_be_bytes());
        b
    }

    /// MULTI-CHANNEL ACTION.
    pub fn multi_channel_action(&self) -> MultiChannelAction {
        MultiChannelAction::from_flags(self.req_flags)
    }

    /// The immediate-data offset the initiator asks for, if it asks.
    pub fn immediate_requested(&self) -> Option<u16> {
        (self.req_flags & REQ_FLAG_IMMED_REQUESTED != 0).then_some(self.imm_data_offset)
    }
}

/// SRP_LOGIN_RSP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginRsp {
    /// REQUEST LIMIT DELTA: the initial credits.
    pub req_lim_delta: u32,
    /// Tag of the LOGIN_REQ.
    pub tag: Tag,
    /// MAXIMUM INITIATOR TO TARGET IU LENGTH.
    pub max_it_iu_len: u32,
    /// MAXIMUM TARGET TO INITIATOR IU LENGTH.
    pub max_ti_iu_len: u32,
    /// SUPPORTED BUFFER FORMATS.
    pub buf_fmt: BufFormats,
    /// MULTI-CHANNEL RESULT.
    pub multi_channel: MultiChannelResult,
    /// SOLNT: solicited notification supported.
    pub solnt: bool,
    /// IMMED_SUPP: immediate data accepted.
    pub immediate: bool,
}

impl LoginRsp {
    /// RSP_FLAGS byte.
    pub fn rsp_flags(&self) -> u8 {
        self.multi_channel.bits()
            | if self.solnt { RSP_FLAG_SOLNT } else { 0 }
            | if self.immediate {
                RSP_FLAG_IMMED_SUPPORTED
            } else {
                0
            }
    }

    /// The 52-byte wire form.
    pub fn encode(&self) -> [u8; LOGIN_RSP_LEN] {
        let mut b = [0u8; LOGIN_RSP_LEN];
        b[0] = opcode::LOGIN_RSP;
        b[4..8].copy_from_slice(&self.req_lim_delta.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.0);
        b[16..20].copy_from_slice(&self.max_it_iu_len.to_be_bytes());
        b[20..24].copy_from_slice(&self.max_ti_iu_len.to_be_bytes());
        b[24..26].copy_from_slice(&self.buf_fmt.0.to_be_bytes());
        b[26] = self.rsp_flags();
        b
    }

    /// Decodes the wire form (test initiators).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        need(b, LOGIN_RSP_LEN)?;
        expect_opcode(b, opcode::LOGIN_RSP)?;
        Ok(LoginRsp {
            req_lim_delta: be32(b, 4),
            tag: Tag(arr(b, 8)),
            max_it_iu_len: be32(b, 16),
            max_ti_iu_len: be32(b, 20),
            buf_fmt: BufFormats(be16(b, 24)),
            multi_channel: MultiChannelResult::from_bits(b[26]),
            solnt: b[26] & RSP_FLAG_SOLNT != 0,
            immediate: b[26] & RSP_FLAG_IMMED_SUPPORTED != 0,
        })
    }
}

/// SRP_LOGIN_REJ REASON codes (SRP r16a table 9; the 0x0001xxxx half-word marks an SRP
/// reject).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RejectReason {
    /// 0x00010000: unable to establish the RDMA channel, no reason given.
    NoReason,
    /// 0x00010001: insufficient RDMA channel resources (also: port not enabled).
    InsufficientResources,
    /// 0x00010002: requested max IT IU length too large (or below 64).
    ItIuLengthTooLarge,
    /// 0x00010003: unable to associate the channel with the I_T nexus (wrong target port id).
    UnableToAssociate,
    /// 0x00010004: requested buffer formats not supported.
    BufferFormatsUnsupported,
    /// 0x00010005: multiple channels per I_T nexus not supported.
    MultiChannelUnsupported,
    /// 0x00010006: channel limit reached for this initiator (ib_srpt: no ACL).
    ChannelLimitReached,
    /// Any other value.
    Other(u32),
}

impl RejectReason {
    /// The 32-bit wire value.
    pub fn code(self) -> u32 {
        match self {
            Self::NoReason => 0x0001_0000,
            Self::InsufficientResources => 0x0001_0001,
            Self::ItIuLengthTooLarge => 0x0001_0002,
            Self::UnableToAssociate => 0x0001_0003,
            Self::BufferFormatsUnsupported => 0x0001_0004,
            Self::MultiChannelUnsupported => 0x0001_0005,
            Self::ChannelLimitReached => 0x0001_0006,
            Self::Other(v) => v,
        }
    }

    /// From the wire value.
    pub fn from_code(v: u32) -> Self {
        match v {
            0x0001_0000 => Self::NoReason,
            0x0001_0001 => Self::InsufficientResources,
            0x0001_0002 => Self::ItIuLengthTooLarge,
            0x0001_0003 => Self::UnableToAssociate,
            0x0001_0004 => Self::BufferFormatsUnsupported,
            0x0001_0005 => Self::MultiChannelUnsupported,
            0x0001_0006 => Self::ChannelLimitReached,
            v => Self::Other(v),
        }
    }
}

/// SRP_LOGIN_REJ. Send it as REJ private data with reject status CONSUMER_DEFINED (28):
/// ib_srp only recognises an SRP reject with that status and opcode 0xC2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginRej {
    /// REASON.
    pub reason: RejectReason,
    /// Tag of the LOGIN_REQ.
    pub tag: Tag,
    /// SUPPORTED BUFFER FORMATS.
    pub buf_fmt: BufFormats,
}

/// IB CM reject status to use with [`LoginRej`].
pub const IB_CM_REJ_CONSUMER_DEFINED: u8 = 28;

impl LoginRej {
    /// The 32-byte wire form.
    pub fn encode(&self) -> [u8; LOGIN_REJ_LEN] {
        let mut b = [0u8; LOGIN_REJ_LEN];
        b[0] = opcode::LOGIN_REJ;
        b[4..8].copy_from_slice(&self.reason.code().to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.0);
        b[24..26].copy_from_slice(&self.buf_fmt.0.to_be_bytes());
        b
    }

    /// Decodes the wire form (test initiators).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        need(b, LOGIN_REJ_LEN)?;
        expect_opcode(b, opcode::LOGIN_REJ)?;
        Ok(LoginRej {
            reason: RejectReason::from_code(be32(b, 4)),
            tag: Tag(arr(b, 8)),
            buf_fmt: BufFormats(be16(b, 24)),
        })
    }
}
