//! COMPARE AND WRITE (SBC-3 5.2): the CDB check and the MISCOMPARE sense. The atomicity
//! comes from the per-bdev range lock (`compare_write`); the exec layer reads the range,
//! compares it with the first half of the data-out buffer
//! ([`first_mismatch`](crate::compare_write::first_mismatch)), and writes the second half
//! if they are equal, all while holding the lock.

use super::cdb::Cdb;
use super::logical_unit::LogicalUnit;
use super::sense::{Sense, SenseKey};

/// COMPARE AND WRITE operation code.
pub const COMPARE_AND_WRITE: u8 = 0x89;

/// A checked COMPARE AND WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompareAndWrite {
    /// First block.
    pub lba: u64,
    /// Blocks to compare and then write (> 0).
    pub blocks: u8,
    /// FUA: the write must be durable before GOOD.
    pub fua: bool,
}

impl CompareAndWrite {
    /// Data-out bytes: the verify data then the write data, `blocks` blocks each.
    pub fn data_out_len(&self, block_size: u32) -> u64 {
        2 * u64::from(self.blocks) * u64::from(block_size)
    }
}

/// Checks a COMPARE AND WRITE CDB for `lu`, whose VPD page B0h advertises `max_blocks` as
/// MAXIMUM COMPARE AND WRITE LENGTH; `data_out_len` is what the initiator declared.
/// `Ok(None)`: NUMBER OF LOGICAL BLOCKS is 0, which SBC-3 defines as GOOD without reading or
/// writing anything.
pub fn decode_compare_and_write(
    cdb: &[u8],
    lu: &LogicalUnit,
    max_blocks: u8,
    data_out_len: u32,
) -> Result<Option<CompareAndWrite>, Sense> {
    let Some((c, _)) = Cdb::new(cdb).filter(|(c, _)| c.opcode() == COMPARE_AND_WRITE) else {
        return Err(Sense::invalid_field_in_cdb(0, None));
    };
    if c.u8(1) >> 5 != 0 {
        // WRPROTECT: no protection information.
        return Err(Sense::invalid_field_in_cdb(1, Some(7)));
    }
    let lba = c.be64(2);
    let blocks = c.u8(13);
    if blocks > max_blocks {
        return Err(Sense::invalid_field_in_cdb(13, None));
    }
    if !lu.in_range(lba, u64::from(blocks)) {
        return Err(Sense::lba_out_of_range());
    }
    if lu.write_protected() {
        return Err(Sense::write_protected());
    }
    let cmd = CompareAndWrite {
        lba,
        blocks,
        fua: c.bit(1, 3),
    };
    if u64::from(data_out_len) != cmd.data_out_len(lu.block_size) {
        return Err(Sense::invalid_field_in_command_iu());
    }
    Ok((blocks > 0).then_some(cmd))
}

/// MISCOMPARE, MISCOMPARE DURING VERIFY OPERATION (1Dh/00h) with INFORMATION = the offset of
/// the first differing byte from the start of the data-out buffer.
pub fn miscompare_sense(offset: u64) -> Sense {
    let mut s = Sense::new(SenseKey::Miscompare, 0x1D, 0x00);
    s.information = Some(offset);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scsi::NaaId;

    fn lu() -> LogicalUnit {
        LogicalUnit::new(512, 100, NaaId::Local([0x30; 8]), "s")
    }

    fn cdb(flags: u8, lba: u64, n: u8) -> [u8; 16] {
        let mut c = [0u8; 16];
        c[0] = COMPARE_AND_WRITE;
        c[1] = flags;
        c[2..10].copy_from_slice(&lba.to_be_bytes());
        c[13] = n;
        c
    }

    #[test]
    fn decode() {
        let l = lu();
        assert_eq!(
            decode_compare_and_write(&cdb(0x08, 99, 1), &l, 1, 1024),
            Ok(Some(CompareAndWrite {
                lba: 99,
                blocks: 1,
                fua: true
            }))
        );
        assert_eq!(decode_compare_and_write(&cdb(0, 5, 0), &l, 1, 0), Ok(None));
        let bad = [
            (
                cdb(0x20, 0, 1),
                1024,
                Sense::invalid_field_in_cdb(1, Some(7)),
            ),
            (cdb(0, 0, 2), 2048, Sense::invalid_field_in_cdb(13, None)),
            (cdb(0, 100, 1), 1024, Sense::lba_out_of_range()),
            (cdb(0, u64::MAX, 1), 1024, Sense::lba_out_of_range()),
            (cdb(0, 0, 1), 512, Sense::invalid_field_in_command_iu()),
        ];
        for (c, len, want) in bad {
            assert_eq!(
                decode_compare_and_write(&c, &l, 1, len),
                Err(want),
                "{c:02x?}"
            );
        }
        let mut ro = lu();
        ro.read_only = true;
        assert_eq!(
            decode_compare_and_write(&cdb(0, 0, 1), &ro, 1, 1024),
            Err(Sense::write_protected())
        );
        assert!(decode_compare_and_write(&cdb(0, 0, 1)[..15], &l, 1, 1024).is_err());
    }

    #[test]
    fn miscompare_sense_bytes() {
        let b = miscompare_sense(513).to_fixed();
        assert_eq!(b[0], 0xF0, "current, VALID");
        assert_eq!(b[2], 0x0E);
        assert_eq!(&b[3..7], &513u32.to_be_bytes());
        assert_eq!((b[12], b[13]), (0x1D, 0x00));
    }
}
