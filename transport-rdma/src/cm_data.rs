//! NVMe/RDMA connection-manager private data (NVMe over Fabrics RDMA transport binding):
//! the connect request a host sends, the accept and the reject a target answers with.
//!
//! Every field is a little-endian u16. Over IB/RoCE the connection manager pads private data
//! with zeroes to its message size, so lengths are "at least", never "exactly".

/// Size of the request and accept records.
pub const RECORD_LEN: usize = 32;
/// Size of the reject record.
pub const REJECT_LEN: usize = 4;

/// Why a connect request is refused (the reject record's STS field).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum RejectStatus {
    /// Private data missing or shorter than the record.
    InvalidPrivateDataLength = 1,
    /// RECFMT is not 0.
    InvalidRecfmt = 2,
    /// QID out of range.
    InvalidQid = 3,
    /// HSQSIZE too large (or zero).
    InvalidHsqsize = 4,
    /// HRQSIZE too small or too large.
    InvalidHrqsize = 5,
    /// The target ran out of resources.
    NoResources = 6,
    /// The host offered no RDMA READ resources (IRD 0).
    InvalidIrd = 7,
    /// Invalid ORD.
    InvalidOrd = 8,
}

impl RejectStatus {
    /// Encodes the 4-byte reject record: RECFMT 0, STS.
    pub fn encode(self) -> [u8; REJECT_LEN] {
        let sts = self as u16;
        let mut b = [0u8; REJECT_LEN];
        b[2..4].copy_from_slice(&sts.to_le_bytes());
        b
    }

    /// Decodes a reject record (hosts and tests): the status, if the record is well formed.
    pub fn decode(b: &[u8]) -> Option<u16> {
        let r = b.get(..REJECT_LEN)?;
        (u16::from_le_bytes([r[0], r[1]]) == 0).then(|| u16::from_le_bytes([r[2], r[3]]))
    }
}

/// A connect request record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectRequestData {
    /// Record format (0).
    pub recfmt: u16,
    /// Queue id: 0 for the admin queue.
    pub qid: u16,
    /// Receives the host posted for responses (1's based).
    pub hrqsize: u16,
    /// Host send queue size, 0's based (equals the Connect SQSIZE).
    pub hsqsize: u16,
    /// Controller id (I/O queues; informational).
    pub cntlid: u16,
}

impl ConnectRequestData {
    /// Decodes and checks the record: length and RECFMT. Queue sizes are checked by
    /// [`ConnectRequestData::check_sizes`] once the limits are known.
    pub fn decode(b: &[u8]) -> Result<Self, RejectStatus> {
        tracing::trace!(target: target_core::hex::WIRE_TARGET, kind = "nvme_rdma_cm",
                        data = %target_core::hex::Hex(b));
        if b.len() < RECORD_LEN {
            return Err(RejectStatus::InvalidPrivateDataLength);
        }
        let u = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let d = Self {
            recfmt: u(0),
            qid: u(2),
            hrqsize: u(4),
            hsqsize: u(6),
            cntlid: u(8),
        };
        if d.recfmt != 0 {
            return Err(RejectStatus::InvalidRecfmt);
        }
        Ok(d)
    }

    /// Encodes the record (test hosts).
    pub fn encode(&self) -> [u8; RECORD_LEN] {
        let mut b = [0u8; RECORD_LEN];
        for (i, v) in [
            self.recfmt,
            self.qid,
            self.hrqsize,
            self.hsqsize,
            self.cntlid,
        ]
        .into_iter()
        .enumerate()
        {
            b[i * 2..i * 2 + 2].copy_from_slice(&v.to_le_bytes());
        }
        b
    }

    /// Checks the queue sizes: the admin queue against `max_admin` entries, I/O queues against
    /// `max_io` entries (CAP.MQES + 1); HSQSIZE + 1 receives must be within those, HRQSIZE must
    /// be at least HSQSIZE + 1, and the QID at most `max_qid`.
    pub fn check_sizes(
        &self,
        max_admin: u32,
        max_io: u32,
        max_qid: u16,
    ) -> Result<(), RejectStatus> {
        if self.qid > max_qid {
            return Err(RejectStatus::InvalidQid);
        }
        let limit = if self.qid == 0 { max_admin } else { max_io };
        let depth = u32::from(self.hsqsize) + 1;
        if self.hsqsize == 0 || depth > limit {
            return Err(RejectStatus::InvalidHsqsize);
        }
        if u32::from(self.hrqsize) < depth {
            return Err(RejectStatus::InvalidHrqsize);
        }
        Ok(())
    }
}

/// Encodes the accept record: RECFMT 0 and CRQSIZE, the receives posted for this queue.
pub fn accept_record(crqsize: u16) -> [u8; RECORD_LEN] {
    let mut b = [0u8; RECORD_LEN];
    b[2..4].copy_from_slice(&crqsize.to_le_bytes());
    b
}

/// Decodes CRQSIZE from an accept record (test hosts).
pub fn decode_accept(b: &[u8]) -> Option<u16> {
    let r = b.get(..4)?;
    (u16::from_le_bytes([r[0], r[1]]) == 0).then(|| u16::from_le_bytes([r[2], r[3]]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn linux_admin_request() {
        let raw = [
            0, 0, 0, 0, 32, 0, 31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0, 0,
        ];
        let d = ConnectRequestData::decode(&raw).unwrap();
        assert_eq!((d.qid, d.hrqsize, d.hsqsize, d.cntlid), (0, 32, 31, 0));
        assert_eq!(d.encode(), raw);
        assert_eq!(d.check_sizes(32, 128, 127), Ok(()));
        // Zero-padded to the CM message size: still fine.
        let mut padded = [0u8; 56];
        padded[..32].copy_from_slice(&raw);
        assert_eq!(ConnectRequestData::decode(&padded), Ok(d));
    }

    #[test]
    fn rejections() {
        assert_eq!(
            ConnectRequestData::decode(&[0; 31]),
            Err(RejectStatus::InvalidPrivateDataLength)
        );
        let mut b = [0u8; 32];
        b[0] = 1;
        assert_eq!(
            ConnectRequestData::decode(&b),
            Err(RejectStatus::InvalidRecfmt)
        );
        let io = ConnectRequestData {
            recfmt: 0,
            qid: 3,
            hrqsize: 128,
            hsqsize: 127,
            cntlid: 1,
        };
        assert_eq!(io.check_sizes(32, 128, 127), Ok(()));
        assert_eq!(
            io.check_sizes(32, 64, 127),
            Err(RejectStatus::InvalidHsqsize)
        );
        assert_eq!(io.check_sizes(32, 128, 2), Err(RejectStatus::InvalidQid));
        let small_rq = ConnectRequestData { hrqsize: 127, ..io };
        assert_eq!(
            small_rq.check_sizes(32, 128, 127),
            Err(RejectStatus::InvalidHrqsize)
        );
        let zero = ConnectRequestData { hsqsize: 0, ..io };
        assert_eq!(
            zero.check_sizes(32, 128, 127),
            Err(RejectStatus::InvalidHsqsize)
        );
        let admin = ConnectRequestData {
            qid: 0,
            hrqsize: 33,
            hsqsize: 32,
            ..io
        };
        assert_eq!(
            admin.check_sizes(32, 128, 127),
            Err(RejectStatus::InvalidHsqsize),
            "admin queue limit, not MQES"
        );
    }

    #[test]
    fn accept_and_reject_records() {
        let a = accept_record(128);
        assert_eq!(&a[..4], &[0, 0, 128, 0]);
        assert!(a[4..].iter().all(|&x| x == 0));
        assert_eq!(decode_accept(&a), Some(128));
        assert_eq!(RejectStatus::InvalidIrd.encode(), [0, 0, 7, 0]);
        assert_eq!(RejectStatus::decode(&[0, 0, 6, 0, 0, 0]), Some(6));
        assert_eq!(RejectStatus::decode(&[1, 0, 6, 0]), None);
    }
}
