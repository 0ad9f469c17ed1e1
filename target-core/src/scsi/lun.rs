//! SAM LUN encoding (8 bytes, first level only) and the REPORT LUNS parameter data.
//!
//! LUNs below 256 are reported with the peripheral device addressing method (`00 LL`), LUNs
//! 256..16383 with the flat space method (`4H LL`). Both methods decode to the same number, so
//! an initiator that re-encodes a LUN its own way still reaches the same logical unit.

use super::Verdict;
use super::cdb::Cdb;
use super::data_in::DataIn;
use super::sense::Sense;

/// The largest LUN a single-level flat-space address can carry.
pub const MAX_LUN: u16 = 0x3FFF;

/// Why an 8-byte LUN was not understood.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LunError {
    /// A second or later level is not zero (hierarchical addressing is not supported).
    #[error("multi-level LUN not supported")]
    MultiLevel,
    /// The address method is logical unit addressing or extended addressing.
    #[error("LUN address method {0} not supported")]
    AddressMethod(u8),
    /// Peripheral device addressing with a non-zero bus identifier.
    #[error("peripheral LUN with bus id {0}")]
    Bus(u8),
}

/// Encodes `lun` (0..=16383) as an 8-byte SAM LUN, the form REPORT LUNS returns.
/// Values above [`MAX_LUN`] are clamped to it.
pub fn encode(lun: u16) -> [u8; 8] {
    let lun = lun.min(MAX_LUN);
    let mut b = [0u8; 8];
    if lun < 256 {
        b[1] = lun as u8;
    } else {
        b[0] = 0x40 | (lun >> 8) as u8;
        b[1] = lun as u8;
    }
    b
}

/// Decodes an 8-byte SAM LUN as carried in SRP_CMD and SRP_TSK_MGMT. Inlined: SRP decodes
/// one per command.
#[inline]
pub fn decode(b: [u8; 8]) -> Result<u16, LunError> {
    // Bytes 2..8 (the second to fourth levels) all zero, in one comparison.
    if u64::from_be_bytes(b) & 0xFFFF_FFFF_FFFF != 0 {
        return Err(LunError::MultiLevel);
    }
    match b[0] >> 6 {
        0b00 => {
            let bus = b[0] & 0x3F;
            if bus != 0 {
                return Err(LunError::Bus(bus));
            }
            Ok(u16::from(b[1]))
        }
        0b01 => Ok(u16::from(b[0] & 0x3F) << 8 | u16::from(b[1])),
        m => Err(LunError::AddressMethod(m)),
    }
}

/// REPORT LUNS (SPC-4 6.33). `luns` must be sorted and without duplicates.
pub(crate) fn report_luns(cdb: &Cdb<'_>, luns: &[u16], data_in: &mut [u8]) -> Verdict {
    let select = cdb.u8(2);
    let alloc = cdb.be32(6);
    if alloc < 16 {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(6, None));
    }
    let list: &[u16] = match select {
        // All logical units; 0x02 adds well-known LUs (there are none); 0x10/0x12 are the
        // administrative variants of SPC-5, which report the same set with no conglomerates.
        0x00 | 0x02 | 0x10 | 0x12 => luns,
        // Well-known logical units only, or subsidiary LUs of an administrative LU: none.
        0x01 | 0x11 => &[],
        _ => return Verdict::CheckCondition(Sense::invalid_field_in_cdb(2, None)),
    };
    let mut w = DataIn::new(data_in, alloc);
    let list_len = u32::try_from(list.len().saturating_mul(8)).unwrap_or(u32::MAX);
    w.be32(list_len);
    w.zeros(4);
    for &l in list {
        w.put(&encode(l));
    }
    Verdict::DataIn { len: w.finish() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encode_decode() {
        assert_eq!(encode(0), [0; 8]);
        assert_eq!(encode(5), [0, 5, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode(255), [0, 255, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode(256), [0x41, 0, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode(0x3FFF), [0x7F, 0xFF, 0, 0, 0, 0, 0, 0]);
        assert_eq!(encode(0xFFFF), encode(0x3FFF));
        for l in [0, 1, 200, 255, 256, 1000, 0x3FFF] {
            assert_eq!(decode(encode(l)), Ok(l));
        }
        // Flat addressing of a small LUN reaches the same LU as peripheral addressing.
        assert_eq!(decode([0x40, 1, 0, 0, 0, 0, 0, 0]), Ok(1));
        assert_eq!(decode([0, 1, 0, 2, 0, 0, 0, 0]), Err(LunError::MultiLevel));
        // Any byte of the second to fourth levels set, and only those, makes it multi-level.
        for i in 2..8 {
            let mut b = [0, 1, 0, 0, 0, 0, 0, 0];
            b[i] = 0x80;
            assert_eq!(decode(b), Err(LunError::MultiLevel), "byte {i}");
        }
        assert_eq!(decode([0x7F, 0xFF, 0, 0, 0, 0, 0, 0]), Ok(0x3FFF));
        assert_eq!(decode([0x02, 1, 0, 0, 0, 0, 0, 0]), Err(LunError::Bus(2)));
        assert_eq!(
            decode([0x80, 1, 0, 0, 0, 0, 0, 0]),
            Err(LunError::AddressMethod(2))
        );
        assert_eq!(
            decode([0xC0, 1, 0, 0, 0, 0, 0, 0]),
            Err(LunError::AddressMethod(3))
        );
    }
}
