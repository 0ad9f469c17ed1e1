//! MODE SENSE(6) and (10) (SPC-4 6.11, 6.12): the read-write error recovery (0x01), caching
//! (0x08) and control (0x0A) pages, alone or all together (0x3F), with short or long block
//! descriptors. The current values of the changeable fields are the LU's [`ModeParams`];
//! MODE SELECT (`mode_select`) changes them, and the changeable-values page control
//! reports exactly the bits MODE SELECT accepts ([`page_bytes`] with [`Pc::Changeable`]).

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

/// The mode parameters MODE SELECT can change, per logical unit (shared by every nexus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeParams {
    /// Caching page WCE: writes may complete from a volatile cache. With WCE = 0 every write
    /// is written through (FUA). Changeable only when the LU has a volatile write cache.
    pub wce: bool,
    /// Control page SWP (software write protect): writes to the medium are refused with DATA
    /// PROTECT / WRITE PROTECTED, and MODE SENSE reports WP.
    pub swp: bool,
}

impl ModeParams {
    /// The default (power-on) values for an LU with or without a volatile write cache.
    pub const fn defaults(write_cache: bool) -> ModeParams {
        ModeParams {
            wce: write_cache,
            swp: false,
        }
    }
}

/// Page control: which values a page reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Pc {
    /// Current values.
    Current,
    /// A mask of the changeable bits.
    Changeable,
    /// Default values.
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
    let dev_specific = if lu.write_protected() { 0x80 } else { 0x00 } | 0x10; // WP, DPOFUA
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
    for code in [PAGE_RW_ERROR_RECOVERY, PAGE_CACHING, PAGE_CONTROL] {
        if page == code || page == PAGE_ALL {
            let (bytes, n) = page_bytes(code, lu, pc).unwrap_or(([0; MAX_PAGE_LEN], 0));
            w.put(&bytes[..n]);
        }
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

/// The longest page this device server has (the caching page: 2 + 0x12 bytes).
pub(crate) const MAX_PAGE_LEN: usize = 20;

/// Page `code` as MODE SENSE reports it for page control `pc` (with the page code and page
/// length bytes), and its length; `None` for a page this device server does not have.
pub(crate) fn page_bytes(
    code: u8,
    lu: &LogicalUnit,
    pc: Pc,
) -> Option<([u8; MAX_PAGE_LEN], usize)> {
    let mut b = [0u8; MAX_PAGE_LEN];
    let mut w = DataIn::new(&mut b, MAX_PAGE_LEN as u32);
    match code {
        PAGE_RW_ERROR_RECOVERY => rw_error_recovery(&mut w),
        PAGE_CACHING => caching(&mut w, lu, pc),
        PAGE_CONTROL => control(&mut w, lu, pc),
        _ => return None,
    }
    let n = w.total();
    Some((b, n))
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
    // WCE (bit 2), changeable when the LU has a volatile write cache; RCD = 0, not
    // changeable (reads have no cache to bypass that the bdevs would honour).
    let wce = match pc {
        Pc::Current => lu.write_cache && lu.modes.wce,
        Pc::Default => lu.write_cache,
        Pc::Changeable => lu.write_cache,
    };
    w.u8(if wce { 0x04 } else { 0x00 });
    w.zeros(0x12 - 1);
}

fn control(w: &mut DataIn<'_>, lu: &LogicalUnit, pc: Pc) {
    w.u8(PAGE_CONTROL);
    w.u8(0x0A);
    if pc == Pc::Changeable {
        // SWP (byte 4 bit 3) is the only changeable field.
        w.zeros(2);
        w.u8(0x08);
        w.zeros(7);
        return;
    }
    let swp = pc == Pc::Current && lu.modes.swp;
    w.u8(0x00); // TST = 0 (one task set), D_SENSE = 0 (fixed-format sense)
    // QUEUE ALGORITHM MODIFIER = 1: SIMPLE tasks are reordered freely; ORDERED and HEAD OF
    // QUEUE are honoured whatever it says (scsi::task_order). QERR = 0.
    w.u8(0x10);
    w.u8(if swp { 0x08 } else { 0x00 }); // SWP
    // ATO = 0; TAS = 1: a task another I_T nexus's task management (or PREEMPT AND ABORT)
    // aborts ends with TASK ABORTED status, as Linux LIO (emulate_tas) answers it.
    w.u8(0x40);
    w.be16(0); // obsolete
    w.be16(0xFFFF); // BUSY TIMEOUT PERIOD: unlimited
    w.be16(0); // EXTENDED SELF-TEST COMPLETION TIME
}
