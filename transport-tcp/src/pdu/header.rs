//! The 8-byte common header every PDU starts with.

use super::{CH_LEN, le};

/// The common header: PDU-type, FLAGS, HLEN, PDO, PLEN.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct CommonHeader {
    /// PDU-type (byte 0), kept raw: unknown values must be reported, not dropped.
    pub pdu_type: u8,
    /// FLAGS (byte 1).
    pub flags: u8,
    /// Header length without the header digest (byte 2).
    pub hlen: u8,
    /// PDU data offset from the start of the PDU, 0 without data (byte 3).
    pub pdo: u8,
    /// Total PDU length in bytes (bytes 4-7).
    pub plen: u32,
}

impl CommonHeader {
    /// Decodes the first 8 bytes of `b`; `None` if `b` is shorter.
    pub fn parse(b: &[u8]) -> Option<CommonHeader> {
        let b = b.get(..CH_LEN)?;
        Some(CommonHeader {
            pdu_type: b[0],
            flags: b[1],
            hlen: b[2],
            pdo: b[3],
            plen: le::u32_at(b, 4),
        })
    }

    /// Encodes into the first 8 bytes of `b` (ignored if `b` is shorter).
    pub fn write(&self, b: &mut [u8]) {
        if let Some(b) = b.get_mut(..CH_LEN) {
            b[0] = self.pdu_type;
            b[1] = self.flags;
            b[2] = self.hlen;
            b[3] = self.pdo;
            le::put_u32(b, 4, self.plen);
        }
    }

    /// The 8 encoded bytes.
    pub fn to_bytes(&self) -> [u8; CH_LEN] {
        let mut b = [0u8; CH_LEN];
        self.write(&mut b);
        b
    }
}
