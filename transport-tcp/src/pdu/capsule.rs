//! CapsuleCmd (the 64-byte SQE, then in-capsule data) and CapsuleResp (the 16-byte CQE).

use target_core::nvme::spec::{CQE_SIZE, SQE_SIZE};
use target_core::nvme::{Cqe, Sqe};

use super::{
    BufferTooSmall, CAPSULE_CMD_HLEN, CAPSULE_RESP_HLEN, CH_LEN, Framing, PduType, data_pdu_header,
    finish_header, need,
};

/// A command capsule header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapsuleCmd {
    /// The submission queue entry.
    pub sqe: Sqe,
}

impl CapsuleCmd {
    /// Decodes the 72 header bytes.
    pub fn decode(b: &[u8]) -> CapsuleCmd {
        CapsuleCmd {
            sqe: b
                .get(CH_LEN..)
                .and_then(Sqe::from_bytes)
                .unwrap_or_default(),
        }
    }

    /// Encodes the header (and header digest, and padding up to PDO) of a capsule that carries
    /// `icd_len` bytes of in-capsule data; the caller sends the data and, with data digests,
    /// its digest. Returns the header length.
    pub fn encode(
        &self,
        f: &Framing,
        icd_len: u32,
        buf: &mut [u8],
    ) -> Result<usize, BufferTooSmall> {
        need(buf, CAPSULE_CMD_HLEN)?;
        buf[CH_LEN..CH_LEN + SQE_SIZE].copy_from_slice(self.sqe.as_bytes());
        finish_header(buf, data_pdu_header(PduType::CapsuleCmd, 0, f, icd_len))
    }
}

/// A response capsule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CapsuleResp {
    /// The completion queue entry.
    pub cqe: Cqe,
}

impl CapsuleResp {
    /// Decodes the 24 header bytes.
    pub fn decode(b: &[u8]) -> CapsuleResp {
        let cqe = b.get(CH_LEN..).and_then(Cqe::decode).unwrap_or(Cqe {
            dw0: 0,
            dw1: 0,
            sqhd: 0,
            sqid: 0,
            cid: 0,
            status: target_core::nvme::Status::SUCCESS,
        });
        CapsuleResp { cqe }
    }

    /// Encodes the PDU (header and header digest; it has no data).
    pub fn encode(&self, f: &Framing, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        need(buf, CAPSULE_RESP_HLEN)?;
        buf[CH_LEN..CH_LEN + CQE_SIZE].copy_from_slice(&self.cqe.encode());
        finish_header(buf, data_pdu_header(PduType::CapsuleResp, 0, f, 0))
    }
}
