//! MODE SENSE(6) and (10) (SPC-4 6.11, 6.12): the read-write error recovery (0x01), caching
//! (0x08) and control (0x0A) pages, alone or all together (0x3F), with short or long block
//! descriptors.

use super::Verdict;
use super::cdb::Cdb;
use super::data_in::DataIn;
use super::logical_unit::LogicalUnit;
use super::sense::Sense;

/// Page codes this device server returns.
pub const PAGE_RW_ERROR_RECOVERY: u8 = 0x01;
/// Caching mode page.
pub const PAGE_CACHING: u8 = 0x08;
/// Control mode page.
pub const PAGE_CONTROL: u8 = 0x0A;
/// "Return all pages".
pub const PAGE_ALL: u8 = 0x3F;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Pc {
    Current,
    Changeable,
    Default,
}

pub(crate) fn mode_sense(cdb: &Cdb<'_>, lu: &LogicalUnit, data_in: &mut [u8]) -> Verdict {
    let ten = cdb.len() == 10;
    let dbd = cdb.bit(1, 3);
    let llbaa = ten && cdb.bit(1, 4);
    let pc = match cdb.u8(2) >> 6 {
        0 => Pc::Current,
        1 => Pc::Changeable,
        2 => Pc::Default,
        _ => return Verdict::CheckCondition(Sense::saving_params_not_supported()),
    };
    let page = cdb.u8(2) & 0x3F;
    let subpage = cdb.u8(3);
    let alloc = if ten {
        u32::from(cdb.be16(7))
    } else {
        u32::from(cdb.u8(4))
    };

    // Subpage 0 is the page itself; 0xFF asks for all subpages, and these pages have none.
    if subpage != 0 && subpage != 0xFF {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(3, None));
    }
    if !matches!(
        page,
        PAGE_RW_ERROR_RECOVERY | PAGE_CACHING | PAGE_CONTROL | PAGE_ALL
    ) {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(2, Some(5)));
    }

    let mut w = DataIn::new(data_in, alloc);
    let dev_specific = if lu.read_only { 0x80 } else { 0x00 } | 0x10; // WP, DPOFUA
    let bd_len: u16 = match (dbd, llbaa) {
        (true, _) => 0,
        (false, true) => 16,
        (false, false) => 8,
    };
    if ten {
        w.be16(0); // MODE DATA LENGTH, patched below
        w.u8(0); // medium type
        w.u8(dev_specific);
        w.u8(if llbaa && !dbd { 0x01 } else { 0x00 }); // LONGLBA
        w.u8(0);
        w.be16(bd_len);
    } else {
        w.u8(0);
        w.u8(0);
        w.u8(dev_specific);
        w.u8(bd_len as u8);
    }
    match bd_len {
        8 => {
            w.be32(u32::try_from(lu.num_blocks).unwrap_or(u32::MAX));
            w.u8(0);
            w.put(&lu.block_size.to_be_bytes()[1..]);
        }
        16 => {
            w.be64(lu.num_blocks);
            w.be32(0);
            w.be32(lu.block_size);
        }
        _ => {}
    }
    if matches!(page, PAGE_RW_ERROR_RECOVERY | PAGE_ALL) {
        rw_error_recovery(&mut w);
    }
    if matches!(page, PAGE_CACHING | PAGE_ALL) {
        caching(&mut w, lu, pc);
    }
    if matches!(page, PAGE_CONTROL | PAGE_ALL) {
        control(&mut w, pc);
    }
    let total = w.total();
    if ten {
        w.patch(
            0,
            &u16::try_from(total - 2).unwrap_or(u16::MAX).to_be_bytes(),
        );
    } else {
        w.patch(0, &[u8::try_from(total - 1).unwrap_or(u8::MAX)]);
    }
    Verdict::DataIn { len: w.finish() }
}

fn rw_error_recovery(w: &mut DataIn<'_>) {
    // No field is changeable, and the defaults (all zero) are the current values.
    w.u8(PAGE_RW_ERROR_RECOVERY);
    w.u8(0x0A);
    w.zeros(0x0A);
}

fn caching(w: &mut DataIn<'_>, lu: &LogicalUnit, pc: Pc) {
    w.u8(PAGE_CACHING);
    w.u8(0x12);
    // WCE (bit 2); RCD = 0. Not changeable: MODE SELECT is not implemented.
    w.u8(if pc != Pc::Changeable && lu.write_cache {
        0x04
    } else {
        0x00
    });
    w.zeros(0x12 - 1);
}

fn control(w: &mut DataIn<'_>, pc: Pc) {
    w.u8(PAGE_CONTROL);
    w.u8(0x0A);
    if pc == Pc::Changeable {
        w.zeros(0x0A);
        return;
    }
    w.u8(0x00); // TST = 0 (one task set), D_SENSE = 0 (fixed-format sense)
    w.u8(0x10); // QUEUE ALGORITHM MODIFIER = 1 (unrestricted reordering), QERR = 0
    w.u8(0x00);
    // ATO = 0; TAS = 1: a task another I_T nexus's task management (or PREEMPT AND ABORT)
    // aborts ends with TASK ABORTED status, as Linux LIO (emulate_tas) answers it.
    w.u8(0x40);
    w.be16(0); // obsolete
    w.be16(0xFFFF); // BUSY TIMEOUT PERIOD: unlimited
    w.be16(0); // EXTENDED SELF-TEST COMPLETION TIME
}
