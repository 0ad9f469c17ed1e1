//! CDB field access and operation codes.

/// Operation codes this device server knows (SPC-4, SBC-3).
#[allow(missing_docs)]
pub mod op {
    pub const TEST_UNIT_READY: u8 = 0x00;
    pub const REQUEST_SENSE: u8 = 0x03;
    pub const READ_6: u8 = 0x08;
    pub const WRITE_6: u8 = 0x0A;
    pub const INQUIRY: u8 = 0x12;
    pub const MODE_SELECT_6: u8 = 0x15;
    pub const MODE_SENSE_6: u8 = 0x1A;
    pub const START_STOP_UNIT: u8 = 0x1B;
    pub const READ_CAPACITY_10: u8 = 0x25;
    pub const READ_10: u8 = 0x28;
    pub const WRITE_10: u8 = 0x2A;
    pub const VERIFY_10: u8 = 0x2F;
    pub const SYNCHRONIZE_CACHE_10: u8 = 0x35;
    pub const WRITE_SAME_10: u8 = 0x41;
    pub const UNMAP: u8 = 0x42;
    pub const MODE_SELECT_10: u8 = 0x55;
    pub const MODE_SENSE_10: u8 = 0x5A;
    pub const READ_16: u8 = 0x88;
    pub const WRITE_16: u8 = 0x8A;
    pub const VERIFY_16: u8 = 0x8F;
    pub const SYNCHRONIZE_CACHE_16: u8 = 0x91;
    pub const WRITE_SAME_16: u8 = 0x93;
    /// SERVICE ACTION IN(16); service action 0x10 is READ CAPACITY(16).
    pub const SERVICE_ACTION_IN_16: u8 = 0x9E;
    pub const REPORT_LUNS: u8 = 0xA0;
    /// MAINTENANCE IN; service action 0x0C is REPORT SUPPORTED OPERATION CODES.
    pub const MAINTENANCE_IN: u8 = 0xA3;
    pub const READ_12: u8 = 0xA8;
    pub const WRITE_12: u8 = 0xAA;

    /// SERVICE ACTION IN(16) / READ CAPACITY(16).
    pub const SA_READ_CAPACITY_16: u8 = 0x10;
    /// MAINTENANCE IN / REPORT SUPPORTED OPERATION CODES.
    pub const SA_REPORT_SUPPORTED_OPCODES: u8 = 0x0C;
}

/// The CDB length implied by the group code of `opcode` (SPC-4 4.2.5.1), or `None` for the
/// reserved and vendor-specific groups and variable-length CDBs.
pub fn cdb_len(opcode: u8) -> Option<usize> {
    match opcode >> 5 {
        0 => Some(6),
        1 | 2 => Some(10),
        4 => Some(16),
        5 => Some(12),
        _ => None,
    }
}

/// A CDB whose length has been checked against its group code. Field accessors read
/// big-endian values; out-of-range reads (impossible after the length check) yield zero.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Cdb<'a> {
    b: &'a [u8],
}

impl<'a> Cdb<'a> {
    /// Wraps `b` if it is at least as long as its opcode's group requires.
    pub(crate) fn new(b: &'a [u8]) -> Option<(Self, usize)> {
        let len = cdb_len(*b.first()?)?;
        let b = b.get(..len)?;
        Some((Cdb { b }, len))
    }

    pub(crate) fn opcode(&self) -> u8 {
        self.u8(0)
    }

    pub(crate) fn len(&self) -> usize {
        self.b.len()
    }

    pub(crate) fn u8(&self, i: usize) -> u8 {
        self.b.get(i).copied().unwrap_or(0)
    }

    pub(crate) fn bit(&self, i: usize, bit: u8) -> bool {
        self.u8(i) & (1 << bit) != 0
    }

    fn be(&self, i: usize, n: usize) -> u64 {
        match self.b.get(i..i + n) {
            Some(s) => s.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)),
            None => 0,
        }
    }

    pub(crate) fn be16(&self, i: usize) -> u16 {
        self.be(i, 2) as u16
    }

    pub(crate) fn be32(&self, i: usize) -> u32 {
        self.be(i, 4) as u32
    }

    pub(crate) fn be64(&self, i: usize) -> u64 {
        self.be(i, 8)
    }

    /// The CONTROL byte (last byte of the CDB).
    pub(crate) fn control(&self) -> u8 {
        self.u8(self.b.len() - 1)
    }
}

/// Big-endian read of `N` bytes at `off` from a parameter list; `None` if out of range.
pub(crate) fn read_be<const N: usize>(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(N)?)?;
    Some(s.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_lengths() {
        assert_eq!(cdb_len(0x00), Some(6));
        assert_eq!(cdb_len(0x28), Some(10));
        assert_eq!(cdb_len(0x5A), Some(10));
        assert_eq!(cdb_len(0x7F), None);
        assert_eq!(cdb_len(0x88), Some(16));
        assert_eq!(cdb_len(0xA0), Some(12));
        assert_eq!(cdb_len(0xC0), None);
    }

    #[test]
    fn fields() {
        let raw = [0x88u8, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0x10, 0, 0, 0];
        let (c, n) = Cdb::new(&raw).unwrap();
        assert_eq!(n, 16);
        assert_eq!(c.be64(2), 0x0102_0304_0506_0708);
        assert_eq!(c.be32(10), 0x1000);
        assert_eq!(c.be16(0), 0x8800);
        assert_eq!(c.u8(99), 0);
        assert!(Cdb::new(&raw[..10]).is_none());
        assert!(Cdb::new(&[]).is_none());
        assert_eq!(read_be::<2>(&[1, 2, 3], 1), Some(0x0203));
        assert_eq!(read_be::<2>(&[1, 2, 3], 2), None);
        assert_eq!(read_be::<2>(&[1, 2, 3], usize::MAX), None);
    }
}
