//! SRP_CRED_REQ / SRP_CRED_RSP (16 bytes) and SRP_AER_REQ (36 bytes + sense) / SRP_AER_RSP
//! (16 bytes). Initiator responses do not consume credits; a target must never have more
//! than one of its own requests outstanding (ib_srp keeps a single spare send slot).

use super::{DecodeError, EncodeError, Tag, arr, be32, expect_opcode, need, opcode, out_buf};

/// Length of CRED_REQ, CRED_RSP and AER_RSP.
pub const SHORT_IU_LEN: usize = 16;
/// Fixed part of AER_REQ.
pub const AER_REQ_LEN: usize = 36;

/// SRP_CRED_REQ: grants credits outside a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CredReq {
    /// SOLNT.
    pub solnt: bool,
    /// REQUEST LIMIT DELTA.
    pub req_lim_delta: u32,
    /// Tag (chosen by the target).
    pub tag: Tag,
}

impl CredReq {
    /// The wire form.
    pub fn encode(&self) -> [u8; SHORT_IU_LEN] {
        let mut b = [0u8; SHORT_IU_LEN];
        b[0] = opcode::CRED_REQ;
        b[1] = u8::from(self.solnt);
        b[4..8].copy_from_slice(&self.req_lim_delta.to_be_bytes());
        b[8..].copy_from_slice(&self.tag.0);
        b
    }

    /// Decodes the wire form (test initiators).
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        need(b, SHORT_IU_LEN)?;
        expect_opcode(b, opcode::CRED_REQ)?;
        Ok(CredReq {
            solnt: b[1] & 1 != 0,
            req_lim_delta: be32(b, 4),
            tag: Tag(arr(b, 8)),
        })
    }
}

fn short_encode(op: u8, tag: Tag) -> [u8; SHORT_IU_LEN] {
    let mut b = [0u8; SHORT_IU_LEN];
    b[0] = op;
    b[8..].copy_from_slice(&tag.0);
    b
}

fn short_decode(b: &[u8], op: u8) -> Result<Tag, DecodeError> {
    need(b, SHORT_IU_LEN)?;
    expect_opcode(b, op)?;
    Ok(Tag(arr(b, 8)))
}

/// SRP_CRED_RSP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CredRsp {
    /// Tag of the CRED_REQ.
    pub tag: Tag,
}

impl CredRsp {
    /// Decodes the wire form.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        Ok(CredRsp {
            tag: short_decode(b, opcode::CRED_RSP)?,
        })
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; SHORT_IU_LEN] {
        short_encode(opcode::CRED_RSP, self.tag)
    }
}

/// SRP_AER_RSP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AerRsp {
    /// Tag of the AER_REQ.
    pub tag: Tag,
}

impl AerRsp {
    /// Decodes the wire form.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        Ok(AerRsp {
            tag: short_decode(b, opcode::AER_RSP)?,
        })
    }

    /// The wire form.
    pub fn encode(&self) -> [u8; SHORT_IU_LEN] {
        short_encode(opcode::AER_RSP, self.tag)
    }
}

/// SRP_AER_REQ: asynchronous event (sense data) for a LUN. Linux logs "ignoring AER".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AerReq<'a> {
    /// SOLNT.
    pub solnt: bool,
    /// REQUEST LIMIT DELTA.
    pub req_lim_delta: u32,
    /// Tag (chosen by the target).
    pub tag: Tag,
    /// LUN the event concerns.
    pub lun: [u8; 8],
    /// Sense data.
    pub sense: &'a [u8],
}

impl<'a> AerReq<'a> {
    /// Encodes into `buf`, returning the IU length.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, EncodeError> {
        let sense_len = u32::try_from(self.sense.len()).map_err(|_| EncodeError::Field("sense"))?;
        let n = AER_REQ_LEN + self.sense.len();
        let b = out_buf(buf, n)?;
        b[0] = opcode::AER_REQ;
        b[1] = u8::from(self.solnt);
        b[4..8].copy_from_slice(&self.req_lim_delta.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.0);
        b[20..28].copy_from_slice(&self.lun);
        b[28..32].copy_from_slice(&sense_len.to_be_bytes());
        b[AER_REQ_LEN..].copy_from_slice(self.sense);
        Ok(n)
    }

    /// Decodes the wire form (test initiators).
    pub fn decode(b: &'a [u8]) -> Result<Self, DecodeError> {
        need(b, AER_REQ_LEN)?;
        expect_opcode(b, opcode::AER_REQ)?;
        let len = be32(b, 28) as usize;
        let end = AER_REQ_LEN.saturating_add(len);
        let sense = b.get(AER_REQ_LEN..end).ok_or(DecodeError::Truncated {
            need: end,
            got: b.len(),
        })?;
        Ok(AerReq {
            solnt: b[1] & 1 != 0,
            req_lim_delta: be32(b, 4),
            tag: Tag(arr(b, 8)),
            lun: arr(b, 20),
            sense,
        })
    }
}
