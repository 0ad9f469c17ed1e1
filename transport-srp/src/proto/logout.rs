//! SRP_I_LOGOUT and SRP_T_LOGOUT (16 bytes each).

use super::{DecodeError, Tag, arr, be32, expect_opcode, need, opcode};

/// Length of both logout IUs.
pub const LOGOUT_LEN: usize = 16;

/// SRP_I_LOGOUT: the initiator ends the channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ILogout {
    /// Tag.
    pub tag: Tag,
}

impl ILogout {
    /// Decodes the wire form.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        need(b, LOGOUT_LEN)?;
        expect_opcode(b, opcode::I_LOGOUT)?;
        Ok(ILogout {
            tag: Tag(arr(b, 8)),
        })
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; LOGOUT_LEN] {
        let mut b = [0u8; LOGOUT_LEN];
        b[0] = opcode::I_LOGOUT;
        b[8..].copy_from_slice(&self.tag.0);
        b
    }
}

/// SRP_T_LOGOUT REASON values (SRP r16a; from COMSTAR's header, unverified against the
/// standard text).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TLogoutReason {
    /// 0: no reason specified.
    NoReason,
    /// 1: inactive RDMA channel (the target reclaims resources).
    InactiveChannel,
    /// 2: an IU with an invalid type code was received.
    InvalidIuType,
    /// 3: a response arrived with no outstanding target request.
    UnexpectedResponse,
    /// 4: a new login with MULTI-CHANNEL ACTION 0 terminated this channel.
    MultiChannelAction,
    /// 6: unsupported DATA-OUT buffer descriptor format.
    UnsupportedDataOutFormat,
    /// 7: unsupported DATA-IN buffer descriptor format.
    UnsupportedDataInFormat,
    /// 8: invalid IU length.
    InvalidIuLength,
    /// Any other value.
    Other(u32),
}

impl TLogoutReason {
    /// The wire value.
    pub fn code(self) -> u32 {
        match self {
            Self::NoReason => 0,
            Self::InactiveChannel => 1,
            Self::InvalidIuType => 2,
            Self::UnexpectedResponse => 3,
            Self::MultiChannelAction => 4,
            Self::UnsupportedDataOutFormat => 6,
            Self::UnsupportedDataInFormat => 7,
            Self::InvalidIuLength => 8,
            Self::Other(v) => v,
        }
    }

    /// From the wire value.
    pub fn from_code(v: u32) -> Self {
        match v {
            0 => Self::NoReason,
            1 => Self::InactiveChannel,
            2 => Self::InvalidIuType,
            3 => Self::UnexpectedResponse,
            4 => Self::MultiChannelAction,
            6 => Self::UnsupportedDataOutFormat,
            7 => Self::UnsupportedDataInFormat,
            8 => Self::InvalidIuLength,
            v => Self::Other(v),
        }
    }
}

/// SRP_T_LOGOUT: the target ends the channel. The Linux initiator logs and ignores it, so
/// the target disconnects afterwards anyway.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TLogout {
    /// SOLNT: ask for a solicited completion at the initiator.
    pub solnt: bool,
    /// REASON.
    pub reason: TLogoutReason,
    /// Tag (chosen by the target).
    pub tag: Tag,
}

impl TLogout {
    /// The wire form.
    pub fn encode(&self) -> [u8; LOGOUT_LEN] {
        let mut b = [0u8; LOGOUT_LEN];
        b[0] = opcode::T_LOGOUT;
        b[1] = u8::from(self.solnt);
        b[4..8].copy_from_slice(&self.reason.code().to_be_bytes());
        b[8..].copy_from_slice(&self.tag.0);
        b
    }

    /// Decodes the wire form (test initiators).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        need(b, LOGOUT_LEN)?;
        expect_opcode(b, opcode::T_LOGOUT)?;
        Ok(TLogout {
            solnt: b[1] & 1 != 0,
            reason: TLogoutReason::from_code(be32(b, 4)),
            tag: Tag(arr(b, 8)),
        })
    }
}
