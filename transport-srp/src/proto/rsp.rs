//! SRP_RSP (36 bytes + response data + sense data): SCSI status, residuals, autosense, and
//! task management response codes.

use super::{
    DecodeError, EncodeError, Tag, TmResponse, arr, be32, expect_opcode, need, opcode, out_buf,
};

/// Fixed part of SRP_RSP.
pub const RSP_LEN: usize = 36;

/// An SRP_RSP without response or sense data before its per-command fields are filled in.
const RSP_TEMPLATE: [u8; RSP_LEN] = {
    let mut b = [0u8; RSP_LEN];
    b[0] = opcode::RSP;
    b
};

/// FLAGS bits (byte 18).
pub mod flags {
    /// RSPVALID: response data present.
    pub const RSPVALID: u8 = 0x01;
    /// SNSVALID: sense data present.
    pub const SNSVALID: u8 = 0x02;
    /// DOOVER: data-out overflow.
    pub const DOOVER: u8 = 0x04;
    /// DOUNDER: data-out underflow.
    pub const DOUNDER: u8 = 0x08;
    /// DIOVER: data-in overflow.
    pub const DIOVER: u8 = 0x10;
    /// DIUNDER: data-in underflow.
    pub const DIUNDER: u8 = 0x20;
}

/// A residual for one direction, from what the initiator's buffer expected and what the
/// command moved (or wanted to move).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Residual {
    /// Exactly the expected amount.
    #[default]
    None,
    /// Less than the buffer (count = buffer − transferred).
    Under(u32),
    /// The command wanted more than the buffer (count = wanted − buffer).
    Over(u32),
}

impl Residual {
    /// Residual of a transfer: `expected` is the initiator's buffer length (SRP descriptor),
    /// `wanted` what the command would have moved.
    pub fn compute(expected: u32, wanted: u64) -> Self {
        let exp = u64::from(expected);
        match wanted.cmp(&exp) {
            std::cmp::Ordering::Equal => Self::None,
            std::cmp::Ordering::Less => Self::Under((exp - wanted) as u32),
            std::cmp::Ordering::Greater => {
                Self::Over(u32::try_from(wanted - exp).unwrap_or(u32::MAX))
            }
        }
    }

    fn count(self) -> u32 {
        match self {
            Self::None => 0,
            Self::Under(c) | Self::Over(c) => c,
        }
    }
}

/// `true` if the initiator asked for a solicited event on this completion: SRP_CMD and
/// SRP_TSK_MGMT byte 1 carry SCSOLNT (bit 1, on success) and UCSOLNT (bit 2, on failure).
pub fn solicited(sol_not: u8, success: bool) -> bool {
    if success {
        sol_not & 0x02 != 0
    } else {
        sol_not & 0x04 != 0
    }
}

/// An SRP_RSP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrpRsp<'a> {
    /// SOLNT (byte 1 bit 0).
    pub solnt: bool,
    /// REQUEST LIMIT DELTA: credits returned with this response.
    pub req_lim_delta: u32,
    /// Tag of the request.
    pub tag: Tag,
    /// SCSI status.
    pub status: u8,
    /// Data-out residual.
    pub data_out: Residual,
    /// Data-in residual.
    pub data_in: Residual,
    /// Response data (4 bytes for task management), placed before the sense data.
    pub resp_data: &'a [u8],
    /// Sense data (autosense).
    pub sense: &'a [u8],
}

impl<'a> SrpRsp<'a> {
    /// A response to an SRP_CMD.
    pub fn scsi(tag: Tag, req_lim_delta: u32, status: u8, sense: &'a [u8]) -> Self {
        SrpRsp {
            solnt: false,
            req_lim_delta,
            tag,
            status,
            data_out: Residual::None,
            data_in: Residual::None,
            resp_data: &[],
            sense,
        }
    }

    /// The 4 bytes of task management response data for `code`.
    pub fn tm_response_data(code: TmResponse) -> [u8; 4] {
        [0, 0, 0, code.code()]
    }

    /// A response to an SRP_TSK_MGMT; `data` comes from [`SrpRsp::tm_response_data`].
    pub fn task_mgmt(tag: Tag, req_lim_delta: u32, data: &'a [u8; 4]) -> Self {
        SrpRsp {
            resp_data: data,
            ..Self::scsi(tag, req_lim_delta, 0, &[])
        }
    }

    /// FLAGS byte.
    pub fn flags(&self) -> u8 {
        let mut f = 0;
        if !self.resp_data.is_empty() {
            f |= flags::RSPVALID;
        }
        if !self.sense.is_empty() {
            f |= flags::SNSVALID;
        }
        f |= match self.data_out {
            Residual::None => 0,
            Residual::Under(_) => flags::DOUNDER,
            Residual::Over(_) => flags::DOOVER,
        };
        f |= match self.data_in {
            Residual::None => 0,
            Residual::Under(_) => flags::DIUNDER,
            Residual::Over(_) => flags::DIOVER,
        };
        f
    }

    /// Encodes into `buf`, fitting the IU into `max_ti_iu_len` by truncating the sense data
    /// (as ib_srpt does). Returns the IU length.
    pub fn encode(&self, buf: &mut [u8], max_ti_iu_len: u32) -> Result<usize, EncodeError> {
        if self.resp_data.is_empty()
            && self.sense.is_empty()
            && max_ti_iu_len >= RSP_LEN as u32
            && let Some(out) = buf.get_mut(..RSP_LEN)
        {
            out.copy_from_slice(&self.fixed_part());
            return Ok(RSP_LEN);
        }
        let limit = usize::try_from(max_ti_iu_len)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let room = limit.saturating_sub(RSP_LEN + self.resp_data.len());
        if limit < RSP_LEN + self.resp_data.len() {
            return Err(EncodeError::BufferTooSmall {
                need: RSP_LEN + self.resp_data.len(),
                have: limit,
            });
        }
        let sense = self.sense.get(..self.sense.len().min(room)).unwrap_or(&[]);
        let n = RSP_LEN + self.resp_data.len() + sense.len();
        let resp_len =
            u32::try_from(self.resp_data.len()).map_err(|_| EncodeError::Field("resp_data"))?;
        let b = out_buf(buf, n)?;
        b[0] = opcode::RSP;
        b[1] = u8::from(self.solnt);
        b[4..8].copy_from_slice(&self.req_lim_delta.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.0);
        let truncated = SrpRsp { sense, ..*self };
        b[18] = truncated.flags();
        b[19] = self.status;
        b[20..24].copy_from_slice(&self.data_out.count().to_be_bytes());
        b[24..28].copy_from_slice(&self.data_in.count().to_be_bytes());
        b[28..32].copy_from_slice(&(sense.len() as u32).to_be_bytes());
        b[32..36].copy_from_slice(&resp_len.to_be_bytes());
        let r_end = RSP_LEN + self.resp_data.len();
        b[RSP_LEN..r_end].copy_from_slice(self.resp_data);
        b[r_end..n].copy_from_slice(sense);
        Ok(n)
    }

    /// The 36 bytes of a response without response or sense data (every command that ends
    /// GOOD): the template's opcode and zeroes, with the tag, credits, status, flags and
    /// residuals of this one, built in registers and stored at once.
    fn fixed_part(&self) -> [u8; RSP_LEN] {
        let mut b = RSP_TEMPLATE;
        b[1] = u8::from(self.solnt);
        b[4..8].copy_from_slice(&self.req_lim_delta.to_be_bytes());
        b[8..16].copy_from_slice(&self.tag.0);
        b[18] = self.flags();
        b[19] = self.status;
        b[20..24].copy_from_slice(&self.data_out.count().to_be_bytes());
        b[24..28].copy_from_slice(&self.data_in.count().to_be_bytes());
        b
    }

    /// Decodes the wire form (test initiators). Residual counts are read only where the
    /// matching flag is set.
    pub fn decode(b: &'a [u8]) -> Result<Self, DecodeError> {
        need(b, RSP_LEN)?;
        expect_opcode(b, opcode::RSP)?;
        let f = b[18];
        let resid = |under: u8, over: u8, off: usize| {
            if f & under != 0 {
                Residual::Under(be32(b, off))
            } else if f & over != 0 {
                Residual::Over(be32(b, off))
            } else {
                Residual::None
            }
        };
        let resp_len = if f & flags::RSPVALID != 0 {
            be32(b, 32) as usize
        } else {
            0
        };
        let sense_len = if f & flags::SNSVALID != 0 {
            be32(b, 28) as usize
        } else {
            0
        };
        let r_end = RSP_LEN.saturating_add(resp_len);
        let s_end = r_end.saturating_add(sense_len);
        let resp_data = b.get(RSP_LEN..r_end).ok_or(DecodeError::Truncated {
            need: r_end,
            got: b.len(),
        })?;
        let sense = b.get(r_end..s_end).ok_or(DecodeError::Truncated {
            need: s_end,
            got: b.len(),
        })?;
        Ok(SrpRsp {
            solnt: b[1] & 1 != 0,
            req_lim_delta: be32(b, 4),
            tag: Tag(arr(b, 8)),
            status: b[19],
            data_out: resid(flags::DOUNDER, flags::DOOVER, 20),
            data_in: resid(flags::DIUNDER, flags::DIOVER, 24),
            resp_data,
            sense,
        })
    }

    /// The task management response code, if this response carries one.
    pub fn tm_response(&self) -> Option<TmResponse> {
        self.resp_data.get(3).map(|&c| TmResponse::from_code(c))
    }
}
