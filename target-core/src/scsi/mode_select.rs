//! MODE SELECT(6) and (10) (SPC-4 6.9, 6.10): the CDB check and the parameter list. The
//! parameter list is checked completely before anything changes: a field that is not
//! changeable (per [`super::mode::page_bytes`] with page control "changeable") must hold its
//! current value, otherwise ILLEGAL REQUEST / INVALID FIELD IN PARAMETER LIST pointing at
//! it. The result is the LU's new [`ModeParams`]; the exec layer stores them for the LU
//! (shared by every nexus) and applies them (WCE = 0: writes become FUA; SWP: writes are
//! refused).

use super::cdb::{Cdb, op};
use super::logical_unit::LogicalUnit;
use super::mode::{ModeParams, PAGE_CACHING, PAGE_CONTROL, Pc, page_bytes};
use super::sense::Sense;

/// Longest parameter list accepted: header (8), long block descriptor (16) and every page
/// this device server has fit several times over.
pub const MAX_PARAM_LEN: u32 = 512;

/// A checked MODE SELECT CDB.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModeSelectCdb {
    /// MODE SELECT(10) (8-byte header) rather than (6) (4-byte header).
    pub ten: bool,
    /// PARAMETER LIST LENGTH.
    pub param_len: u32,
    /// Bytes of data-out to fetch: the parameter list length, at most what the initiator
    /// declared (a shorter list is a PARAMETER LIST LENGTH ERROR once fetched).
    pub fetch_len: u32,
}

/// Checks a MODE SELECT(6/10) CDB; `data_out_len` is what the initiator declared.
/// `Ok(None)`: PARAMETER LIST LENGTH 0, GOOD with nothing changed (SPC-4).
pub fn decode_mode_select(cdb: &[u8], data_out_len: u32) -> Result<Option<ModeSelectCdb>, Sense> {
    let Some((c, _)) =
        Cdb::new(cdb).filter(|(c, _)| matches!(c.opcode(), op::MODE_SELECT_6 | op::MODE_SELECT_10))
    else {
        return Err(Sense::invalid_field_in_cdb(0, None));
    };
    if c.control() & 0x04 != 0 {
        let byte = u16::try_from(c.len() - 1).unwrap_or(0);
        return Err(Sense::invalid_field_in_cdb(byte, Some(2)));
    }
    let ten = c.opcode() == op::MODE_SELECT_10;
    if !c.bit(1, 4) {
        // PF = 0: vendor-specific page format, which this device server has none of.
        return Err(Sense::invalid_field_in_cdb(1, Some(4)));
    }
    if c.bit(1, 0) {
        // SP = 1: no saved pages.
        return Err(Sense::invalid_field_in_cdb(1, Some(0)));
    }
    let (param_len, len_byte) = if ten {
        (u32::from(c.be16(7)), 7)
    } else {
        (u32::from(c.u8(4)), 4)
    };
    if param_len == 0 {
        return Ok(None);
    }
    if param_len > MAX_PARAM_LEN {
        return Err(Sense::invalid_field_in_cdb(len_byte, None));
    }
    Ok(Some(ModeSelectCdb {
        ten,
        param_len,
        fetch_len: param_len.min(data_out_len),
    }))
}

/// The highest bit set in `b` (which is not 0), for a field pointer.
fn top_bit(b: u8) -> u8 {
    7 - b.leading_zeros() as u8
}

/// Checks the parameter list of `c` for `lu` and returns the mode parameters it sets.
/// Nothing is applied on error.
pub fn mode_select(
    c: &ModeSelectCdb,
    params: &[u8],
    lu: &LogicalUnit,
) -> Result<ModeParams, Sense> {
    let len = c.param_len as usize;
    let header = if c.ten { 8 } else { 4 };
    if params.len() < len || len < header {
        return Err(Sense::param_list_length_error());
    }
    let p = &params[..len];
    let medium = if c.ten { 2 } else { 1 };
    if p[medium] != 0 {
        return Err(Sense::invalid_field_in_param(medium as u16, None));
    }
    // MODE DATA LENGTH and the device-specific parameter (WP, DPOFUA) are reserved in MODE
    // SELECT (SPC-4, SBC-3) and ignored.
    let (bd_len, bd_len_at, long) = if c.ten {
        (
            usize::from(u16::from_be_bytes([p[6], p[7]])),
            6u16,
            p[4] & 0x01 != 0,
        )
    } else {
        (usize::from(p[3]), 3, false)
    };
    let want_bd = if long { 16 } else { 8 };
    if bd_len != 0 && bd_len != want_bd {
        return Err(Sense::invalid_field_in_param(bd_len_at, None));
    }
    if header + bd_len > len {
        return Err(Sense::param_list_length_error());
    }
    if bd_len != 0 {
        check_block_descriptor(&p[header..header + bd_len], header as u16, long, lu)?;
    }
    let mut out = lu.modes;
    let mut off = header + bd_len;
    while off < len {
        let Some(&[b0, plen]) = p.get(off..off + 2) else {
            return Err(Sense::param_list_length_error());
        };
        let at = off as u16;
        if b0 & 0x40 != 0 {
            // SPF: these pages have no subpages.
            return Err(Sense::invalid_field_in_param(at, Some(6)));
        }
        let code = b0 & 0x3F;
        let (Some((cur, n)), Some((mask, _))) = (
            page_bytes(code, lu, Pc::Current),
            page_bytes(code, lu, Pc::Changeable),
        ) else {
            return Err(Sense::invalid_field_in_param(at, Some(5)));
        };
        if usize::from(plen) != n - 2 {
            return Err(Sense::invalid_field_in_param(at + 1, None));
        }
        let Some(page) = p.get(off..off + n) else {
            return Err(Sense::param_list_length_error());
        };
        for i in 2..n {
            let bad = (page[i] ^ cur[i]) & !mask[i];
            if bad != 0 {
                return Err(Sense::invalid_field_in_param(
                    at + i as u16,
                    Some(top_bit(bad)),
                ));
            }
        }
        match code {
            PAGE_CACHING => out.wce = page[2] & 0x04 != 0,
            PAGE_CONTROL => out.swp = page[4] & 0x08 != 0,
            _ => {}
        }
        off += n;
    }
    Ok(out)
}

/// A block descriptor may only restate the LU's geometry: NUMBER OF LOGICAL BLOCKS 0 (no
/// change) or the current count, LOGICAL BLOCK LENGTH the current one.
fn check_block_descriptor(bd: &[u8], at: u16, long: bool, lu: &LogicalUnit) -> Result<(), Sense> {
    let (blocks, blocks_ok, len_at, block_len) = if long {
        let mut n = [0u8; 8];
        n.copy_from_slice(&bd[..8]);
        let blocks = u64::from_be_bytes(n);
        let bl = u32::from_be_bytes([bd[12], bd[13], bd[14], bd[15]]);
        (blocks, blocks == lu.num_blocks, 12, bl)
    } else {
        let blocks = u64::from(u32::from_be_bytes([bd[0], bd[1], bd[2], bd[3]]));
        let cur = u32::try_from(lu.num_blocks).unwrap_or(u32::MAX);
        let bl = u32::from_be_bytes([0, bd[5], bd[6], bd[7]]);
        (blocks, blocks == u64::from(cur), 5, bl)
    };
    if blocks != 0 && !blocks_ok {
        return Err(Sense::invalid_field_in_param(at, None));
    }
    if !long && bd[4] != 0 {
        // DENSITY CODE.
        return Err(Sense::invalid_field_in_param(at + 4, None));
    }
    if block_len != lu.block_size {
        return Err(Sense::invalid_field_in_param(at + len_at, None));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scsi::NaaId;
    use crate::scsi::sense::SenseKey;

    fn lu() -> LogicalUnit {
        LogicalUnit::new(512, 1000, NaaId::Local([0x30; 8]), "s")
    }

    fn six(len: u8) -> ModeSelectCdb {
        decode_mode_select(&[op::MODE_SELECT_6, 0x10, 0, 0, len, 0], 255)
            .unwrap()
            .unwrap()
    }

    /// A MODE SELECT(6) list: 4-byte header, optional short block descriptor, pages.
    fn list(bd: Option<(u32, u32)>, pages: &[&[u8]]) -> Vec<u8> {
        let mut v = vec![0, 0, 0, if bd.is_some() { 8 } else { 0 }];
        if let Some((blocks, bl)) = bd {
            v.extend_from_slice(&blocks.to_be_bytes());
            v.push(0);
            v.extend_from_slice(&bl.to_be_bytes()[1..]);
        }
        for p in pages {
            v.extend_from_slice(p);
        }
        v
    }

    fn caching(wce: bool) -> Vec<u8> {
        let mut p = vec![0u8; 20];
        p[0] = PAGE_CACHING;
        p[1] = 0x12;
        p[2] = if wce { 0x04 } else { 0 };
        p
    }

    fn control(swp: bool) -> Vec<u8> {
        let (mut b, n) = page_bytes(PAGE_CONTROL, &lu(), Pc::Current).unwrap();
        if swp {
            b[4] |= 0x08;
        }
        b[..n].to_vec()
    }

    fn select(l: &LogicalUnit, p: &[u8]) -> Result<ModeParams, Sense> {
        mode_select(&six(p.len() as u8), p, l)
    }

    #[test]
    fn cdb_checks() {
        let ok = decode_mode_select(&[op::MODE_SELECT_10, 0x10, 0, 0, 0, 0, 0, 0, 28, 0], 28);
        assert_eq!(
            ok,
            Ok(Some(ModeSelectCdb {
                ten: true,
                param_len: 28,
                fetch_len: 28
            }))
        );
        assert_eq!(
            decode_mode_select(&[op::MODE_SELECT_6, 0x10, 0, 0, 0, 0], 0),
            Ok(None),
            "length 0: nothing to do"
        );
        assert_eq!(
            decode_mode_select(&[op::MODE_SELECT_6, 0x00, 0, 0, 24, 0], 24),
            Err(Sense::invalid_field_in_cdb(1, Some(4))),
            "PF = 0"
        );
        assert_eq!(
            decode_mode_select(&[op::MODE_SELECT_6, 0x11, 0, 0, 24, 0], 24),
            Err(Sense::invalid_field_in_cdb(1, Some(0))),
            "SP = 1"
        );
        assert_eq!(
            decode_mode_select(&[op::MODE_SELECT_10, 0x10, 0, 0, 0, 0, 0, 0x10, 0, 0], 4096),
            Err(Sense::invalid_field_in_cdb(7, None))
        );
        assert_eq!(
            decode_mode_select(&[op::MODE_SELECT_6, 0x10, 0, 0, 24, 4], 24),
            Err(Sense::invalid_field_in_cdb(5, Some(2))),
            "NACA"
        );
        let short = decode_mode_select(&[op::MODE_SELECT_6, 0x10, 0, 0, 24, 0], 10)
            .unwrap()
            .unwrap();
        assert_eq!(short.fetch_len, 10);
        assert_eq!(
            mode_select(&short, &[0u8; 10], &lu()),
            Err(Sense::param_list_length_error()),
            "less data-out than the list length"
        );
    }

    #[test]
    fn wce_and_swp_change_and_nothing_else() {
        let l = lu();
        assert_eq!(
            l.modes,
            ModeParams {
                wce: true,
                swp: false
            }
        );
        let r = select(&l, &list(Some((1000, 512)), &[&caching(false)])).unwrap();
        assert_eq!(
            r,
            ModeParams {
                wce: false,
                swp: false
            }
        );
        let r = select(&l, &list(None, &[&caching(false), &control(true)])).unwrap();
        assert_eq!(
            r,
            ModeParams {
                wce: false,
                swp: true
            }
        );
        // The whole list is checked before anything is taken: a bad second page fails all.
        let mut bad = control(true);
        bad[2] = 0x04; // D_SENSE: not changeable
        assert_eq!(
            select(&l, &list(None, &[&caching(false), &bad])),
            Err(Sense::invalid_field_in_param(4 + 20 + 2, Some(2)))
        );
        // RCD is not changeable.
        let mut rcd = caching(true);
        rcd[2] |= 0x01;
        assert_eq!(
            select(&l, &list(None, &[&rcd])),
            Err(Sense::invalid_field_in_param(6, Some(0)))
        );
        // A header and nothing else.
        assert_eq!(select(&l, &list(None, &[])), Ok(l.modes));
        // Without a volatile cache WCE cannot be turned on.
        let mut nc = lu();
        nc.write_cache = false;
        nc.modes.wce = false;
        assert_eq!(
            select(&nc, &list(None, &[&caching(true)])),
            Err(Sense::invalid_field_in_param(6, Some(2)))
        );
        assert_eq!(select(&nc, &list(None, &[&caching(false)])), Ok(nc.modes));
    }

    #[test]
    fn parameter_list_errors() {
        let l = lu();
        let invalid = |s: Result<ModeParams, Sense>| {
            let s = s.unwrap_err();
            assert_eq!((s.key, s.asc, s.ascq), (SenseKey::IllegalRequest, 0x26, 0));
            s.field.map(|f| f.byte)
        };
        // Medium type.
        let mut p = list(None, &[&caching(true)]);
        p[1] = 1;
        assert_eq!(invalid(select(&l, &p)), Some(1));
        // Block descriptor length, block count, block length, density.
        let mut p = list(None, &[]);
        p[3] = 4;
        p.extend_from_slice(&[0; 4]);
        assert_eq!(invalid(select(&l, &p)), Some(3));
        assert_eq!(invalid(select(&l, &list(Some((999, 512)), &[]))), Some(4));
        assert_eq!(invalid(select(&l, &list(Some((0, 4096)), &[]))), Some(9));
        assert_eq!(select(&l, &list(Some((0, 512)), &[])), Ok(l.modes));
        let mut p = list(Some((0, 512)), &[]);
        p[8] = 1;
        assert_eq!(invalid(select(&l, &p)), Some(8));
        // Unknown page, subpage format, wrong page length.
        assert_eq!(
            invalid(select(
                &l,
                &list(None, &[&[0x1C, 0x0A, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]])
            )),
            Some(4)
        );
        let mut spf = caching(true);
        spf[0] |= 0x40;
        assert_eq!(invalid(select(&l, &list(None, &[&spf]))), Some(4));
        let mut plen = caching(true);
        plen[1] = 0x0A;
        assert_eq!(invalid(select(&l, &list(None, &[&plen[..12]]))), Some(5));
        // A page cut short, a lone page code byte.
        let p = list(None, &[&caching(true)[..10]]);
        assert_eq!(select(&l, &p), Err(Sense::param_list_length_error()));
        let p = list(None, &[&[PAGE_CACHING]]);
        assert_eq!(select(&l, &p), Err(Sense::param_list_length_error()));
        // MODE SELECT(10) with a long block descriptor.
        let c = decode_mode_select(&[op::MODE_SELECT_10, 0x10, 0, 0, 0, 0, 0, 0, 44, 0], 44)
            .unwrap()
            .unwrap();
        let mut p = vec![0, 0, 0, 0, 1, 0, 0, 16];
        p.extend_from_slice(&1000u64.to_be_bytes());
        p.extend_from_slice(&[0, 0, 0, 0]);
        p.extend_from_slice(&512u32.to_be_bytes());
        p.extend_from_slice(&caching(false));
        assert_eq!(
            mode_select(&c, &p, &l),
            Ok(ModeParams {
                wce: false,
                swp: false
            })
        );
        p[4] = 0; // LONGLBA = 0 with a 16-byte descriptor
        assert_eq!(invalid(mode_select(&c, &p, &l)), Some(6));
    }
}
