//! Initialize Connection Request and Response (128 bytes each, never digested).

use super::{BufferTooSmall, CommonHeader, Digests, IC_LEN, PduType, finish_header, le, need};

/// ICReq: the host's first PDU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcReq {
    /// PDU format version (0).
    pub pfv: u16,
    /// Host PDU data alignment for controller-to-host data PDUs, 0's based dwords.
    pub hpda: u8,
    /// Digests the host asks for.
    pub digests: Digests,
    /// Maximum outstanding R2Ts per command, 0's based (Linux sends 0: one).
    pub maxr2t: u32,
}

impl IcReq {
    /// What the Linux host sends without digests: PFV 0, HPDA 0, MAXR2T 0.
    pub fn linux(digests: Digests) -> IcReq {
        IcReq {
            pfv: 0,
            hpda: 0,
            digests,
            maxr2t: 0,
        }
    }

    /// Decodes the 128 header bytes (`b` may be longer); fields past the end read 0.
    pub fn decode(b: &[u8]) -> IcReq {
        IcReq {
            pfv: le::u16_at(b, 8),
            hpda: b.get(10).copied().unwrap_or(0),
            digests: Digests::from_byte(b.get(11).copied().unwrap_or(0)),
            maxr2t: le::u32_at(b, 12),
        }
    }

    /// Encodes the whole PDU (128 bytes) into `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        need(buf, IC_LEN)?;
        buf[..IC_LEN].fill(0);
        le::put_u16(buf, 8, self.pfv);
        buf[10] = self.hpda;
        buf[11] = self.digests.to_byte();
        le::put_u32(buf, 12, self.maxr2t);
        finish_header(buf, ic_header(PduType::IcReq))
    }
}

/// ICResp: the controller's answer to ICReq.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct IcResp {
    /// PDU format version (0).
    pub pfv: u16,
    /// Controller PDU data alignment for host-to-controller data PDUs, 0's based dwords.
    pub cpda: u8,
    /// Digests enabled: the host's request, echoed.
    pub digests: Digests,
    /// Maximum data bytes per H2CData PDU (a multiple of 4, at least 4096).
    pub maxh2cdata: u32,
}

impl IcResp {
    /// Decodes the 128 header bytes.
    pub fn decode(b: &[u8]) -> IcResp {
        IcResp {
            pfv: le::u16_at(b, 8),
            cpda: b.get(10).copied().unwrap_or(0),
            digests: Digests::from_byte(b.get(11).copied().unwrap_or(0)),
            maxh2cdata: le::u32_at(b, 12),
        }
    }

    /// Encodes the whole PDU (128 bytes) into `buf`.
    pub fn encode(&self, buf: &mut [u8]) -> Result<usize, BufferTooSmall> {
        need(buf, IC_LEN)?;
        buf[..IC_LEN].fill(0);
        le::put_u16(buf, 8, self.pfv);
        buf[10] = self.cpda;
        buf[11] = self.digests.to_byte();
        le::put_u32(buf, 12, self.maxh2cdata);
        finish_header(buf, ic_header(PduType::IcResp))
    }
}

fn ic_header(ty: PduType) -> CommonHeader {
    CommonHeader {
        pdu_type: ty as u8,
        flags: 0,
        hlen: IC_LEN as u8,
        pdo: 0,
        plen: IC_LEN as u32,
    }
}
