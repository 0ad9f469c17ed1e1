//! H2CTermReq and C2HTermReq: a fatal error, then the sender closes the connection.

use super::{
    BufferTooSmall, CommonHeader, Fes, PduType, TERM_HLEN, TERM_MAX_ERROR_DATA, finish_header, le,
    need,
};

/// A termination request (either direction; the direction is the PDU type).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TermReq {
    /// Fatal Error Status, raw (a received value may be unknown).
    pub fes: u16,
    /// Fatal Error Information: the byte offset of the field in error for FES 1 and 6, else 0.
    pub fei: u32,
}

impl TermReq {
    /// A request for a known status.
    pub fn new(fes: Fes, fei: u32) -> TermReq {
        TermReq {
            fes: fes as u16,
            fei: if fes.has_offset() { fei } else { 0 },
        }
    }

    /// The status, if known.
    pub fn status(&self) -> Option<Fes> {
        Fes::from_u16(self.fes)
    }

    /// Decodes the 24 header bytes.
    pub fn decode(b: &[u8]) -> TermReq {
        TermReq {
            fes: le::u16_at(b, 8),
            fei: le::u32_at(b, 10),
        }
    }

    /// Encodes the PDU of type `ty` (H2CTermReq or C2HTermReq) with `error_data` (the header
    /// of the PDU in error, cut to 128 bytes) after the header. Termination requests carry no
    /// digests and PDO 0.
    pub fn encode(
        &self,
        ty: PduType,
        error_data: &[u8],
        buf: &mut [u8],
    ) -> Result<usize, BufferTooSmall> {
        let data = &error_data[..error_data.len().min(TERM_MAX_ERROR_DATA)];
        let total = TERM_HLEN + data.len();
        need(buf, total)?;
        buf[..TERM_HLEN].fill(0);
        le::put_u16(buf, 8, self.fes);
        le::put_u32(buf, 10, self.fei);
        let ch = CommonHeader {
            pdu_type: ty as u8,
            flags: 0,
            hlen: TERM_HLEN as u8,
            pdo: 0,
            plen: total as u32,
        };
        let n = finish_header(buf, ch)?;
        buf[n..total].copy_from_slice(data);
        Ok(total)
    }
}
