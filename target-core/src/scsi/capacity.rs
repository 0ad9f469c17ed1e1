//! READ CAPACITY(10) and (16) (SBC-3 5.15, 5.16).

use super::Verdict;
use super::cdb::Cdb;
use super::data_in::DataIn;
use super::logical_unit::LogicalUnit;
use super::sense::Sense;

pub(crate) fn read_capacity_10(cdb: &Cdb<'_>, lu: &LogicalUnit, data_in: &mut [u8]) -> Verdict {
    // With PMI = 0 the LOGICAL BLOCK ADDRESS field must be zero.
    if !cdb.bit(8, 0) && cdb.be32(2) != 0 {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(2, None));
    }
    let mut w = DataIn::new(data_in, 8);
    w.be32(u32::try_from(lu.last_lba()).unwrap_or(u32::MAX));
    w.be32(lu.block_size);
    Verdict::DataIn { len: w.finish() }
}

pub(crate) fn read_capacity_16(cdb: &Cdb<'_>, lu: &LogicalUnit, data_in: &mut [u8]) -> Verdict {
    if !cdb.bit(14, 0) && cdb.be64(2) != 0 {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(2, None));
    }
    let mut w = DataIn::new(data_in, cdb.be32(10));
    w.be64(lu.last_lba());
    w.be32(lu.block_size);
    w.u8(0); // P_TYPE, PROT_EN
    w.u8(lu.physical_block_exp & 0x0F); // P_I_EXPONENT = 0, LOGICAL BLOCKS PER PHYSICAL BLOCK EXPONENT
    let mut b14 = 0u8;
    if lu.unmap {
        b14 |= 0x80; // LBPME
        if lu.unmap_reads_zero {
            b14 |= 0x40; // LBPRZ
        }
    }
    w.u8(b14); // LOWEST ALIGNED LBA (13:8) = 0
    w.u8(0);
    w.zeros(16);
    Verdict::DataIn { len: w.finish() }
}
