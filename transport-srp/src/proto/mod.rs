//! SRP information units (T10 SRP r16a plus the SRP-2 immediate-data additions Linux uses):
//! byte-exact encoders and decoders. Decoders take `&[u8]` and return `Result`; they never
//! panic and never allocate.
//!
//! Multi-byte fields are big-endian except tags, which are 8 opaque bytes echoed verbatim
//! ([`Tag`]).

pub mod cmd;
pub mod cred;
pub mod login;
pub mod logout;
pub mod rsp;
pub mod tsk_mgmt;

pub use cmd::{DataDesc, DirectDesc, Direction, IndirectDesc, SrpCmd, TaskAttr};
pub use cred::{AerReq, AerRsp, CredReq, CredRsp};
pub use login::{
    LoginRej, LoginReq, LoginRsp, MultiChannelAction, MultiChannelResult, RejectReason,
};
pub use logout::{ILogout, TLogout, TLogoutReason};
pub use rsp::{Residual, SrpRsp};
pub use tsk_mgmt::{TaskMgmt, TmResponse, TskMgmt};

/// IU opcodes (byte 0 of every IU; byte 11 of the RDMA CM login private data).
pub mod opcode {
    /// SRP_LOGIN_REQ (I→T, CM REQ private data).
    pub const LOGIN_REQ: u8 = 0x00;
    /// SRP_TSK_MGMT (I→T).
    pub const TSK_MGMT: u8 = 0x01;
    /// SRP_CMD (I→T).
    pub const CMD: u8 = 0x02;
    /// SRP_I_LOGOUT (I→T).
    pub const I_LOGOUT: u8 = 0x03;
    /// SRP_CRED_RSP (I→T).
    pub const CRED_RSP: u8 = 0x41;
    /// SRP_AER_RSP (I→T).
    pub const AER_RSP: u8 = 0x42;
    /// SRP_T_LOGOUT (T→I).
    pub const T_LOGOUT: u8 = 0x80;
    /// SRP_CRED_REQ (T→I).
    pub const CRED_REQ: u8 = 0x81;
    /// SRP_AER_REQ (T→I).
    pub const AER_REQ: u8 = 0x82;
    /// SRP_LOGIN_RSP (T→I, CM REP private data).
    pub const LOGIN_RSP: u8 = 0xC0;
    /// SRP_RSP (T→I).
    pub const RSP: u8 = 0xC1;
    /// SRP_LOGIN_REJ (T→I, CM REJ private data).
    pub const LOGIN_REJ: u8 = 0xC2;
}

/// Smallest IU length a target must accept as `req_it_iu_len` (ib_srpt rejects less).
pub const MIN_IU_LEN: u32 = 64;

/// An IU tag: 8 opaque bytes in the initiator's byte order, echoed byte for byte.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(pub [u8; 8]);

impl Tag {
    /// The tag as the little-endian u64 a Linux initiator put there (for logs only).
    pub fn as_le_u64(&self) -> u64 {
        u64::from_le_bytes(self.0)
    }
}

/// A 16-byte SRP port identifier (initiator or target).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PortId(pub [u8; 16]);

impl PortId {
    /// Builds an identifier from its two 8-byte halves (as numbers, big-endian on the wire):
    /// for a target port `id_ext` and `ioc_guid`; for an initiator port `initiator_ext` and
    /// the port GUID.
    pub fn from_halves(hi: u64, lo: u64) -> Self {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&hi.to_be_bytes());
        b[8..].copy_from_slice(&lo.to_be_bytes());
        PortId(b)
    }

    /// Bytes 0..8 as a big-endian number.
    pub fn hi(&self) -> u64 {
        u64::from_be_bytes(self.0[..8].try_into().unwrap_or([0; 8]))
    }

    /// Bytes 8..16 as a big-endian number.
    pub fn lo(&self) -> u64 {
        u64::from_be_bytes(self.0[8..].try_into().unwrap_or([0; 8]))
    }
}

impl std::fmt::Display for PortId {
    /// The LIO / targetcli form: `0x` and 32 hex digits.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "0x{:016x}{:016x}", self.hi(), self.lo())
    }
}

/// Buffer-format bits (REQUIRED / SUPPORTED BUFFER FORMATS, SRP r16a 5.6.2.1).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct BufFormats(pub u16);

impl BufFormats {
    /// Direct data buffer descriptors (bit 1).
    pub const DIRECT: u16 = 0x0002;
    /// Indirect data buffer descriptors (bit 2).
    pub const INDIRECT: u16 = 0x0004;
    /// Both formats, what Linux sends and answers (0x0006).
    pub const BOTH: BufFormats = BufFormats(Self::DIRECT | Self::INDIRECT);

    /// `true` if direct descriptors are included.
    pub fn direct(self) -> bool {
        self.0 & Self::DIRECT != 0
    }

    /// `true` if indirect descriptors are included.
    pub fn indirect(self) -> bool {
        self.0 & Self::INDIRECT != 0
    }
}

/// Why an IU could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the fixed part (or the part the fields describe) needs.
    #[error("IU truncated: need {need} bytes, got {got}")]
    Truncated {
        /// Bytes required.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// Byte 0 (or the login opcode byte) is not the opcode this decoder handles.
    #[error("unexpected opcode {got:#04x} (expected {expected:#04x})")]
    Opcode {
        /// Opcode the decoder handles.
        expected: u8,
        /// Opcode found.
        got: u8,
    },
    /// An opcode no I→T IU uses.
    #[error("unknown IU opcode {0:#04x}")]
    UnknownOpcode(u8),
    /// A DATA-OUT or DATA-IN buffer descriptor format that is reserved (or immediate data
    /// for DATA-IN).
    #[error("unsupported data buffer descriptor format {0}")]
    DescriptorFormat(u8),
    /// Immediate data in a command on a channel that did not negotiate it.
    #[error("immediate data not negotiated")]
    ImmediateNotNegotiated,
    /// The immediate data does not lie inside the IU, or starts before its descriptor ends.
    #[error("immediate data (offset {offset}, length {len}) outside the {iu_len}-byte IU")]
    ImmediateOutOfBounds {
        /// Negotiated immediate data offset.
        offset: u16,
        /// Immediate data length from the descriptor.
        len: u32,
        /// Bytes received.
        iu_len: usize,
    },
    /// An indirect descriptor lists more descriptors in the IU than its table holds.
    #[error("indirect descriptor: {in_iu} descriptors in the IU, table holds {in_table}")]
    IndirectCount {
        /// Descriptors carried in the IU.
        in_iu: u32,
        /// Descriptors the table descriptor covers.
        in_table: u32,
    },
    /// A complete indirect table whose lengths do not add up to TOTAL LENGTH.
    #[error("indirect descriptor: total length {total} but descriptors add up to {sum}")]
    IndirectLength {
        /// TOTAL LENGTH field.
        total: u32,
        /// Sum of the descriptor lengths.
        sum: u64,
    },
}

/// Why an IU could not be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The output buffer is too small.
    #[error("buffer too small: need {need} bytes, have {have}")]
    BufferTooSmall {
        /// Bytes required.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// A field value cannot be represented.
    #[error("field out of range: {0}")]
    Field(&'static str),
}

/// An IU from the initiator, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InitiatorIu<'a> {
    /// SRP_CMD.
    Cmd(SrpCmd<'a>),
    /// SRP_TSK_MGMT.
    TskMgmt(TskMgmt),
    /// SRP_I_LOGOUT.
    ILogout(ILogout),
    /// SRP_CRED_RSP.
    CredRsp(CredRsp),
    /// SRP_AER_RSP.
    AerRsp(AerRsp),
}

/// Decodes an IU received on a channel. `imm_data_offset` is the negotiated immediate-data
/// offset, or `None` if the channel did not negotiate immediate data.
pub fn decode_initiator_iu(
    iu: &[u8],
    imm_data_offset: Option<u16>,
) -> Result<InitiatorIu<'_>, DecodeError> {
    let op = *iu
        .first()
        .ok_or(DecodeError::Truncated { need: 1, got: 0 })?;
    Ok(match op {
        opcode::CMD => InitiatorIu::Cmd(SrpCmd::decode(iu, imm_data_offset)?),
        opcode::TSK_MGMT => InitiatorIu::TskMgmt(TskMgmt::decode(iu)?),
        opcode::I_LOGOUT => InitiatorIu::ILogout(ILogout::decode(iu)?),
        opcode::CRED_RSP => InitiatorIu::CredRsp(CredRsp::decode(iu)?),
        opcode::AER_RSP => InitiatorIu::AerRsp(AerRsp::decode(iu)?),
        other => return Err(DecodeError::UnknownOpcode(other)),
    })
}

// ---- byte helpers shared by the codecs ----

pub(crate) fn need(b: &[u8], n: usize) -> Result<(), DecodeError> {
    if b.len() < n {
        Err(DecodeError::Truncated {
            need: n,
            got: b.len(),
        })
    } else {
        Ok(())
    }
}

pub(crate) fn expect_opcode(b: &[u8], expected: u8) -> Result<(), DecodeError> {
    match b.first() {
        Some(&got) if got == expected => Ok(()),
        Some(&got) => Err(DecodeError::Opcode { expected, got }),
        None => Err(DecodeError::Truncated { need: 1, got: 0 }),
    }
}

pub(crate) fn arr<const N: usize>(b: &[u8], off: usize) -> [u8; N] {
    let mut out = [0u8; N];
    if let Some(s) = b.get(off..off + N) {
        out.copy_from_slice(s);
    }
    out
}

pub(crate) fn be16(b: &[u8], off: usize) -> u16 {
    u16::from_be_bytes(arr(b, off))
}

pub(crate) fn be32(b: &[u8], off: usize) -> u32 {
    u32::from_be_bytes(arr(b, off))
}

pub(crate) fn be64(b: &[u8], off: usize) -> u64 {
    u64::from_be_bytes(arr(b, off))
}

pub(crate) fn out_buf(buf: &mut [u8], n: usize) -> Result<&mut [u8], EncodeError> {
    let have = buf.len();
    let out = buf
        .get_mut(..n)
        .ok_or(EncodeError::BufferTooSmall { need: n, have })?;
    out.fill(0);
    Ok(out)
}

#[cfg(test)]
mod tests;
