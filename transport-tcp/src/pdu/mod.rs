//! NVMe/TCP PDUs (NVMe TCP Transport Specification 1.0; NVMe-oF 1.1 §7.4): the 8-byte common
//! header, every PDU type, digests, data alignment, and a streaming reader.
//!
//! Every PDU starts with the common header ([`CommonHeader`]): type, flags, HLEN (header length
//! without digest), PDO (offset of the data from the start of the PDU, 0 without data) and PLEN
//! (the whole PDU: header, header digest, padding, data and data digest). After the
//! Initialize Connection exchange, a PDU carries a CRC-32C header digest right after its
//! header when header digests were negotiated, and a data digest after its data when data
//! digests were (never on the termination requests or the IC PDUs).
//!
//! ```text
//!  0      8          HLEN    +4          PDO                       PLEN
//!  │ CH   │ PSH       │ HDGST │ PAD (PDA) │ DATA            │ DDGST │
//! ```
//!
//! - [`PduReader`] decodes a byte stream that arrives in pieces of any size, into headers and
//!   data slices, without allocating; it rejects bad headers with the Fatal Error Status and
//!   offset a termination request must carry ([`Fatal`]).
//! - Each PDU type encodes its header (and header digest, and the padding up to PDO) into a
//!   caller's buffer; data and data digest are sent by the caller from where the data lives
//!   ([`data_digest`] computes the trailer).

mod capsule;
mod data;
mod digest;
mod header;
mod ic;
mod r2t;
mod reader;
mod term;

#[cfg(test)]
mod tests;

pub use capsule::{CapsuleCmd, CapsuleResp};
pub use data::{C2hData, H2cData};
pub use digest::{DataDigest, data_digest, header_digest};
pub use header::CommonHeader;
pub use ic::{IcReq, IcResp};
pub use r2t::R2t;
pub use reader::{Fatal, Pdu, PduReader, ReadEvent, Role};
pub use term::TermReq;

/// Size of the common header.
pub const CH_LEN: usize = 8;
/// Size of a header or data digest.
pub const DIGEST_LEN: usize = 4;
/// HLEN (and PLEN) of ICReq and ICResp.
pub const IC_LEN: usize = 128;
/// HLEN of a termination request.
pub const TERM_HLEN: usize = 24;
/// Most bytes of the offending PDU header a termination request carries.
pub const TERM_MAX_ERROR_DATA: usize = 128;
/// Largest PLEN of a termination request (24 + 128).
pub const TERM_MAX_PLEN: usize = TERM_HLEN + TERM_MAX_ERROR_DATA;
/// HLEN of a command capsule (8 + the 64-byte SQE).
pub const CAPSULE_CMD_HLEN: usize = 72;
/// HLEN of a response capsule (8 + the 16-byte CQE).
pub const CAPSULE_RESP_HLEN: usize = 24;
/// HLEN of H2CData, C2HData and R2T.
pub const DATA_HLEN: usize = 24;
/// Largest header with its digest (ICReq/ICResp have no digest: 128).
pub const MAX_HEADER_LEN: usize = IC_LEN + DIGEST_LEN;
/// Room for any header this crate encodes, with digest and padding up to PDO (PDO is a byte),
/// or a termination request with its error data.
pub const MAX_ENCODED_HEADER: usize = 256;
/// Largest PDU data alignment value (HPDA/CPDA are 0's based dwords: 31 = 128 bytes).
pub const MAX_PDA: u8 = 31;
/// Smallest MAXH2CDATA a controller may advertise (and the Linux host accepts).
pub const MIN_MAXH2CDATA: u32 = 4096;
/// In-capsule data every command capsule on an admin queue, and every fabrics command, may carry
/// whatever IOCCSZ says (the Linux host sends Connect data in-capsule).
pub const ADMIN_IN_CAPSULE_DATA: u32 = 8192;
/// PFV of the NVMe/TCP 1.0 PDU format.
pub const PFV_1_0: u16 = 0;
/// Default TCP port for I/O controllers.
pub const DEFAULT_IO_PORT: u16 = 4420;
/// Default TCP port for the discovery controller.
pub const DEFAULT_DISCOVERY_PORT: u16 = 8009;

/// PDU types (byte 0 of the common header). Bit 0 is the direction: 0 host to controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum PduType {
    /// Initialize Connection Request (host → controller).
    IcReq = 0x00,
    /// Initialize Connection Response (controller → host).
    IcResp = 0x01,
    /// Host to Controller Terminate Connection Request.
    H2cTermReq = 0x02,
    /// Controller to Host Terminate Connection Request.
    C2hTermReq = 0x03,
    /// Command Capsule (host → controller).
    CapsuleCmd = 0x04,
    /// Response Capsule (controller → host).
    CapsuleResp = 0x05,
    /// Host to Controller Data.
    H2cData = 0x06,
    /// Controller to Host Data.
    C2hData = 0x07,
    /// Ready to Transfer (controller → host).
    R2t = 0x09,
}

impl PduType {
    /// The type for a byte, if it is one.
    pub fn from_u8(b: u8) -> Option<PduType> {
        Some(match b {
            0x00 => PduType::IcReq,
            0x01 => PduType::IcResp,
            0x02 => PduType::H2cTermReq,
            0x03 => PduType::C2hTermReq,
            0x04 => PduType::CapsuleCmd,
            0x05 => PduType::CapsuleResp,
            0x06 => PduType::H2cData,
            0x07 => PduType::C2hData,
            0x09 => PduType::R2t,
            _ => return None,
        })
    }

    /// `true` for the types a host sends (the controller receives).
    pub fn is_host_to_controller(self) -> bool {
        matches!(
            self,
            PduType::IcReq | PduType::H2cTermReq | PduType::CapsuleCmd | PduType::H2cData
        )
    }

    /// HLEN every PDU of this type has.
    pub fn hlen(self) -> usize {
        match self {
            PduType::IcReq | PduType::IcResp => IC_LEN,
            PduType::CapsuleCmd => CAPSULE_CMD_HLEN,
            PduType::H2cTermReq
            | PduType::C2hTermReq
            | PduType::CapsuleResp
            | PduType::H2cData
            | PduType::C2hData
            | PduType::R2t => TERM_HLEN,
        }
    }

    /// Flags this type may carry.
    pub fn valid_flags(self) -> u8 {
        match self {
            PduType::IcReq | PduType::IcResp | PduType::H2cTermReq | PduType::C2hTermReq => 0,
            PduType::CapsuleCmd => flags::HDGSTF | flags::DDGSTF,
            PduType::CapsuleResp | PduType::R2t => flags::HDGSTF,
            PduType::H2cData => flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU,
            PduType::C2hData => flags::HDGSTF | flags::DDGSTF | flags::LAST_PDU | flags::SUCCESS,
        }
    }

    /// `true` if PDUs of this type may carry data after the header.
    pub fn may_carry_data(self) -> bool {
        matches!(
            self,
            PduType::CapsuleCmd | PduType::H2cData | PduType::C2hData
        )
    }

    /// `true` if digests apply to this type once negotiated (all but IC and TermReq PDUs).
    pub fn takes_digests(self) -> bool {
        !matches!(
            self,
            PduType::IcReq | PduType::IcResp | PduType::H2cTermReq | PduType::C2hTermReq
        )
    }
}

/// Common header flag bits.
pub mod flags {
    /// A header digest follows the header.
    pub const HDGSTF: u8 = 1 << 0;
    /// A data digest follows the data.
    pub const DDGSTF: u8 = 1 << 1;
    /// H2CData/C2HData: last data PDU of the R2T (H2C) or of the command (C2H).
    pub const LAST_PDU: u8 = 1 << 2;
    /// C2HData: the command completed successfully; no response capsule follows.
    pub const SUCCESS: u8 = 1 << 3;
}

/// Fatal Error Status of a termination request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Fes {
    /// A PDU header field is invalid; FEI is the byte offset of the field.
    InvalidHeaderField = 0x01,
    /// A PDU arrived out of sequence.
    PduSequenceError = 0x02,
    /// The header digest did not match.
    HeaderDigestError = 0x03,
    /// Data offset or length outside the range of the transfer.
    DataTransferOutOfRange = 0x04,
    /// More data than allowed in one PDU (MAXH2CDATA, in-capsule size), or more R2Ts than MAXR2T.
    DataTransferLimitExceeded = 0x05,
    /// A parameter the receiver does not support; FEI is the byte offset of the field.
    UnsupportedParameter = 0x06,
}

impl Fes {
    /// The value for a wire u16, if it is one.
    pub fn from_u16(v: u16) -> Option<Fes> {
        Some(match v {
            0x01 => Fes::InvalidHeaderField,
            0x02 => Fes::PduSequenceError,
            0x03 => Fes::HeaderDigestError,
            0x04 => Fes::DataTransferOutOfRange,
            0x05 => Fes::DataTransferLimitExceeded,
            0x06 => Fes::UnsupportedParameter,
            _ => return None,
        })
    }

    /// `true` when FEI carries a byte offset (the other statuses leave it 0).
    pub fn has_offset(self) -> bool {
        matches!(self, Fes::InvalidHeaderField | Fes::UnsupportedParameter)
    }

    /// The specification's name, for logs.
    pub fn name(self) -> &'static str {
        match self {
            Fes::InvalidHeaderField => "invalid PDU header field",
            Fes::PduSequenceError => "PDU sequence error",
            Fes::HeaderDigestError => "header digest error",
            Fes::DataTransferOutOfRange => "data transfer out of range",
            Fes::DataTransferLimitExceeded => "data transfer limit exceeded",
            Fes::UnsupportedParameter => "unsupported parameter",
        }
    }
}

/// Byte offsets of header fields, for FEI.
pub mod field {
    /// PDU-type.
    pub const TYPE: u32 = 0;
    /// FLAGS.
    pub const FLAGS: u32 = 1;
    /// HLEN.
    pub const HLEN: u32 = 2;
    /// PDO.
    pub const PDO: u32 = 3;
    /// PLEN.
    pub const PLEN: u32 = 4;
    /// ICReq PFV.
    pub const ICREQ_PFV: u32 = 8;
    /// ICReq HPDA.
    pub const ICREQ_HPDA: u32 = 10;
    /// ICReq DGST.
    pub const ICREQ_DGST: u32 = 11;
    /// CapsuleCmd: SGL1 address (the in-capsule data offset), SQE byte 24.
    pub const CMD_SGL1_ADDRESS: u32 = 8 + 24;
    /// CapsuleCmd: SGL1 identifier (type/subtype), SQE byte 39.
    pub const CMD_SGL1_ID: u32 = 8 + 39;
    /// H2CData CCCID.
    pub const H2C_CCCID: u32 = 8;
    /// H2CData TTAG.
    pub const H2C_TTAG: u32 = 10;
    /// H2CData DATAO.
    pub const H2C_DATAO: u32 = 12;
    /// H2CData DATAL.
    pub const H2C_DATAL: u32 = 16;
}

/// Digests negotiated for a connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Digests {
    /// Header digests on every PDU but IC and TermReq.
    pub header: bool,
    /// Data digests on every PDU with data but TermReq.
    pub data: bool,
}

impl Digests {
    /// The DGST byte of ICReq/ICResp (bit 0 header, bit 1 data).
    pub fn to_byte(self) -> u8 {
        u8::from(self.header) | u8::from(self.data) << 1
    }

    /// From a DGST byte (reserved bits ignored).
    pub fn from_byte(b: u8) -> Digests {
        Digests {
            header: b & 1 != 0,
            data: b & 2 != 0,
        }
    }

    /// Header digest length (0 or 4).
    pub fn hdgst_len(self) -> usize {
        if self.header { DIGEST_LEN } else { 0 }
    }

    /// Data digest length (0 or 4).
    pub fn ddgst_len(self) -> usize {
        if self.data { DIGEST_LEN } else { 0 }
    }
}

/// How PDUs are framed on one direction of a connection: digests and the data alignment the
/// receiver asked for (HPDA for controller-to-host PDUs, CPDA for host-to-controller ones).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Framing {
    /// Negotiated digests.
    pub digests: Digests,
    /// PDU data alignment, 0's based dwords (0 = 4 bytes, 31 = 128 bytes).
    pub pda: u8,
}

impl Framing {
    /// Alignment of PDU data in bytes.
    pub fn alignment(&self) -> usize {
        (usize::from(self.pda.min(MAX_PDA)) + 1) * 4
    }

    /// PDO for a data PDU of header length `hlen`: after the header digest, rounded up to the
    /// alignment.
    pub fn data_offset(&self, hlen: usize) -> usize {
        let a = self.alignment();
        (hlen + self.digests.hdgst_len()).div_ceil(a) * a
    }
}

/// The buffer given to an encoder is too small.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BufferTooSmall {
    /// Bytes the encoder needs.
    pub needed: usize,
}

impl core::fmt::Display for BufferTooSmall {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "PDU buffer too small: {} bytes needed", self.needed)
    }
}

impl std::error::Error for BufferTooSmall {}

/// Little-endian field access on byte slices (out of range reads 0, writes are ignored).
pub(crate) mod le {
    pub fn u16_at(b: &[u8], off: usize) -> u16 {
        match b.get(off..off + 2) {
            Some(s) => u16::from_le_bytes([s[0], s[1]]),
            None => 0,
        }
    }

    pub fn u32_at(b: &[u8], off: usize) -> u32 {
        match b.get(off..off + 4) {
            Some(s) => u32::from_le_bytes([s[0], s[1], s[2], s[3]]),
            None => 0,
        }
    }

    pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
        if let Some(s) = b.get_mut(off..off + 2) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }

    pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
        if let Some(s) = b.get_mut(off..off + 4) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
}

/// Writes the common header `ch` over `buf[..8]` (the PDU-specific bytes in `buf[8..hlen]` are
/// the caller's), then the header digest if HDGSTF is set, then zero padding up to PDO. Returns
/// the number of bytes written: PDO, or HLEN plus the digest when the PDU has no data.
pub(crate) fn finish_header(buf: &mut [u8], ch: CommonHeader) -> Result<usize, BufferTooSmall> {
    let hlen = usize::from(ch.hlen);
    let hd = if ch.flags & flags::HDGSTF != 0 {
        DIGEST_LEN
    } else {
        0
    };
    let end = if ch.pdo != 0 {
        usize::from(ch.pdo).max(hlen + hd)
    } else {
        hlen + hd
    };
    if buf.len() < end {
        return Err(BufferTooSmall { needed: end });
    }
    ch.write(buf);
    if hd != 0 {
        let d = header_digest(&buf[..hlen]);
        buf[hlen..hlen + DIGEST_LEN].copy_from_slice(&d.to_le_bytes());
    }
    buf[hlen + hd..end].fill(0);
    Ok(end)
}

/// Checks that `buf` can hold `n` bytes.
pub(crate) fn need(buf: &[u8], n: usize) -> Result<(), BufferTooSmall> {
    if buf.len() < n {
        Err(BufferTooSmall { needed: n })
    } else {
        Ok(())
    }
}

/// Common header for a PDU of type `ty` carrying `data_len` bytes of data, framed by `f`.
/// PLEN saturates at `u32::MAX` for a data length that cannot be framed (above
/// `u32::MAX` − PDO − 4); no transfer this crate moves comes near.
pub(crate) fn data_pdu_header(
    ty: PduType,
    extra_flags: u8,
    f: &Framing,
    data_len: u32,
) -> CommonHeader {
    let hlen = ty.hlen();
    let mut fl = extra_flags;
    let digests = if ty.takes_digests() {
        f.digests
    } else {
        Digests::default()
    };
    if digests.header {
        fl |= flags::HDGSTF;
    }
    let (pdo, plen) = if data_len == 0 {
        (0, (hlen + digests.hdgst_len()) as u64)
    } else {
        if digests.data {
            fl |= flags::DDGSTF;
        }
        let framing = Framing {
            digests,
            pda: f.pda,
        };
        let pdo = framing.data_offset(hlen);
        let plen = (pdo + digests.ddgst_len()) as u64 + u64::from(data_len);
        (pdo, plen)
    };
    CommonHeader {
        pdu_type: ty as u8,
        flags: fl,
        // HLEN ≤ 128 and PDO ≤ 76 rounded up to at most 128: both fit in a byte.
        hlen: hlen as u8,
        pdo: pdo as u8,
        plen: u32::try_from(plen).unwrap_or(u32::MAX),
    }
}
