//! H2CData and C2HData: a piece of a command's data, at an offset within it.

use super::{
    BufferTooSmall, DATA_HLEN, Framing, PduType, data_pdu_header, finish_header, flags, le, need,
};

/// An H2CData header: host data answering an R2T.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct H2cData {
    /// Command capsule CID.
    pub cccid: u16,
    /// Transfer tag from the R2T.
    pub ttag: u16,
    /// Offset of this data within the command's data.
    pub datao: u32,
    /// Bytes of data in this PDU.
    pub datal: u32,
    /// LAST_PDU: the last data PDU for the R2T.
    pub last: bool,
}

impl H2cData {
    /// Decodes the 24 header bytes (and the LAST_PDU flag of the common header).
    pub fn decode(b: &[u8]) -> H2cData {
        H2cData {
            cccid: le::u16_at(b, 8),
            ttag: le::u16_at(b, 10),
            datao: le::u32_at(b, 12),
            datal: le::u32_at(b, 16),
            last: b.get(1).is_some_and(|f| f & flags::LAST_PDU != 0),
        }
    }

    /// Encodes the header (with digest and padding up to PDO) for `datal` bytes of data.
    pub fn encode(&self, f: &Framing, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        need(buf, DATA_HLEN)?;
        buf[8..DATA_HLEN].fill(0);
        le::put_u16(buf, 8, self.cccid);
        le::put_u16(buf, 10, self.ttag);
        le::put_u32(buf, 12, self.datao);
        le::put_u32(buf, 16, self.datal);
        let fl = if self.last { flags::LAST_PDU } else { 0 };
        finish_header(buf, data_pdu_header(PduType::H2cData, fl, f, self.datal))
    }
}

/// A C2HData header: controller data for a read-like command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct C2hData {
    /// Command capsule CID.
    pub cccid: u16,
    /// Offset of this data within the command's data.
    pub datao: u32,
    /// Bytes of data in this PDU.
    pub datal: u32,
    /// LAST_PDU: the last data PDU of the command.
    pub last: bool,
    /// SUCCESS: the command completed successfully and no response capsule follows (only with
    /// LAST_PDU).
    pub success: bool,
}

impl C2hData {
    /// Decodes the 24 header bytes (and the LAST_PDU and SUCCESS flags).
    pub fn decode(b: &[u8]) -> C2hData {
        let fl = b.get(1).copied().unwrap_or(0);
        C2hData {
            cccid: le::u16_at(b, 8),
            datao: le::u32_at(b, 12),
            datal: le::u32_at(b, 16),
            last: fl & flags::LAST_PDU != 0,
            success: fl & flags::SUCCESS != 0,
        }
    }

    /// Encodes the header (with digest and padding up to PDO) for `datal` bytes of data.
    pub fn encode(&self, f: &Framing, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        need(buf, DATA_HLEN)?;
        buf[8..DATA_HLEN].fill(0);
        le::put_u16(buf, 8, self.cccid);
        le::put_u32(buf, 12, self.datao);
        le::put_u32(buf, 16, self.datal);
        let mut fl = 0;
        if self.last {
            fl |= flags::LAST_PDU;
        }
        if self.success {
            fl |= flags::SUCCESS;
        }
        finish_header(buf, data_pdu_header(PduType::C2hData, fl, f, self.datal))
    }
}
