//! The 16-byte completion queue entry (the whole response capsule over RDMA).

use super::spec::{CQE_SIZE, Status, le};
use super::sqe::Sqe;

/// SQHD value to report when SQ flow control is disabled (Connect CATTR bit 2).
pub const SQHD_FLOW_CONTROL_DISABLED: u16 = 0xFFFF;

/// A completion queue entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cqe {
    /// Command specific DW0.
    pub dw0: u32,
    /// Command specific DW1.
    pub dw1: u32,
    /// SQ head pointer after this command.
    pub sqhd: u16,
    /// Queue id the command was submitted on.
    pub sqid: u16,
    /// Command identifier, copied from the SQE.
    pub cid: u16,
    /// Status (the phase bit is always sent as 0 on fabrics).
    pub status: Status,
}

impl Cqe {
    /// A completion for `sqe` with the given status and zero DW0/DW1.
    pub fn for_command(sqe: &Sqe, sqid: u16, sqhd: u16, status: Status) -> Cqe {
        Cqe {
            dw0: 0,
            dw1: 0,
            sqhd,
            sqid,
            cid: sqe.cid(),
            status,
        }
    }

    /// Encodes the 16 bytes that go on the wire.
    #[inline]
    pub fn encode(&self) -> [u8; CQE_SIZE] {
        let mut b = [0u8; CQE_SIZE];
        le::put_u32(&mut b, 0, self.dw0);
        le::put_u32(&mut b, 4, self.dw1);
        le::put_u16(&mut b, 8, self.sqhd);
        le::put_u16(&mut b, 10, self.sqid);
        le::put_u16(&mut b, 12, self.cid);
        le::put_u16(&mut b, 14, self.status.to_cqe_field());
        b
    }

    /// Decodes 16 bytes (test initiators use this); `None` if `b` is shorter.
    pub fn decode(b: &[u8]) -> Option<Cqe> {
        let b = b.get(..CQE_SIZE)?;
        Some(Cqe {
            dw0: le::u32_at(b, 0),
            dw1: le::u32_at(b, 4),
            sqhd: le::u16_at(b, 8),
            sqid: le::u16_at(b, 10),
            cid: le::u16_at(b, 12),
            status: Status::from_cqe_field(le::u16_at(b, 14)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_layout() {
        let c = Cqe {
            dw0: 0x0004_0002,
            dw1: 0x1122_3344,
            sqhd: 5,
            sqid: 0,
            cid: 0x001F,
            status: Status::INVALID_FIELD,
        };
        let b = c.encode();
        assert_eq!(
            b,
            [
                0x02, 0x00, 0x04, 0x00, 0x44, 0x33, 0x22, 0x11, 5, 0, 0, 0, 0x1F, 0x00, 0x04, 0x80
            ]
        );
        assert_eq!(Cqe::decode(&b), Some(c));
        assert_eq!(Cqe::decode(&b[..15]), None);
    }

    #[test]
    fn cid_echoed_verbatim() {
        for cid in [0u16, 1, 0x1F, 0xF01F, 0xFFFF, 0x8000] {
            let s = Sqe::new(0x18, cid);
            let c = Cqe::for_command(&s, 3, 1, Status::SUCCESS);
            let b = c.encode();
            assert_eq!(u16::from_le_bytes([b[12], b[13]]), cid);
            assert_eq!(u16::from_le_bytes([b[10], b[11]]), 3);
            assert_eq!(b[14] & 1, 0, "phase is 0");
        }
    }
}
