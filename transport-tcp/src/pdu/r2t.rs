//! R2T: the controller asks the host for a range of a command's data.

use super::{
    BufferTooSmall, DATA_HLEN, Framing, PduType, data_pdu_header, finish_header, le, need,
};

/// Ready to Transfer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct R2t {
    /// Command capsule CID.
    pub cccid: u16,
    /// Transfer tag the host echoes in its H2CData PDUs.
    pub ttag: u16,
    /// Offset of the requested range within the command's data.
    pub r2to: u32,
    /// Length of the requested range.
    pub r2tl: u32,
}

impl R2t {
    /// Decodes the 24 header bytes.
    pub fn decode(b: &[u8]) -> R2t {
        R2t {
            cccid: le::u16_at(b, 8),
            ttag: le::u16_at(b, 10),
            r2to: le::u32_at(b, 12),
            r2tl: le::u32_at(b, 16),
        }
    }

    /// Encodes the PDU (header and header digest; it has no data).
    pub fn encode(&self, f: &Framing, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        need(buf, DATA_HLEN)?;
        buf[8..DATA_HLEN].fill(0);
        le::put_u16(buf, 8, self.cccid);
        le::put_u16(buf, 10, self.ttag);
        le::put_u32(buf, 12, self.r2to);
        le::put_u32(buf, 16, self.r2tl);
        finish_header(buf, data_pdu_header(PduType::R2t, 0, f, 0))
    }
}
