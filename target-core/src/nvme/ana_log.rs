//! The Asymmetric Namespace Access log page (LID 0Ch, NVMe base spec 2.0 §5.16.1.13).
//!
//! ```text
//! header      0..8   CHGCNT      change count
//!             8..10  NGRPS       number of group descriptors
//!            10..16  reserved
//! descriptor  0..4   ANAGRPID
//! (32 + 4n)   4..8   NNSIDS      0 with RGO
//!             8..16  CHGCNT      change count of this descriptor
//!            16      ANA state   bits 3:0
//!            17..32  reserved
//!            32..    NSIDs       n × 4 bytes, ascending; none with RGO
//! ```
//!
//! Descriptors come in ascending group order, one per group holding a namespace the controller
//! can see ([`crate::ana::AnaModel::log_for`]). With RGO (LSP bit 0) the descriptors carry no
//! NSIDs. Reads take any dword-aligned offset up to the end of the log (past it: Invalid
//! Field, as for the other log pages here); the log is produced for the requested window only,
//! never as a whole image, and bytes past its end are zero.

use crate::ana::AnaLog;

use super::spec::Status;

/// Length of the header.
pub const HEADER_LEN: usize = 16;
/// Length of a group descriptor without its NSIDs.
pub const DESCRIPTOR_LEN: usize = 32;

/// The size of the log in bytes.
pub fn log_size(log: &AnaLog, rgo: bool) -> u64 {
    let nsids: u64 = if rgo {
        0
    } else {
        log.groups.iter().map(|g| g.nsids.len() as u64).sum()
    };
    HEADER_LEN as u64 + log.groups.len() as u64 * DESCRIPTOR_LEN as u64 + nsids * 4
}

/// Writes the bytes `[offset, offset + out.len())` of the log into `out`, zero past its end.
///
/// Errors: an offset that is not a multiple of 4, or beyond the end of the log, is Invalid
/// Field in Command.
pub fn read(log: &AnaLog, rgo: bool, offset: u64, out: &mut [u8]) -> Result<(), Status> {
    if !offset.is_multiple_of(4) || offset > log_size(log, rgo) {
        return Err(Status::INVALID_FIELD);
    }
    out.fill(0);
    let mut w = Window {
        out,
        start: offset,
        pos: 0,
    };
    let ngrps = u16::try_from(log.groups.len()).unwrap_or(u16::MAX);
    let mut hdr = [0u8; HEADER_LEN];
    hdr[0..8].copy_from_slice(&log.change_count.to_le_bytes());
    hdr[8..10].copy_from_slice(&ngrps.to_le_bytes());
    w.put(&hdr);
    for g in log.groups.iter().take(usize::from(ngrps)) {
        if w.done() {
            break;
        }
        let nnsids = if rgo { 0 } else { g.nsids.len() };
        let mut d = [0u8; DESCRIPTOR_LEN];
        d[0..4].copy_from_slice(&g.grpid.to_le_bytes());
        d[4..8].copy_from_slice(&u32::try_from(nnsids).unwrap_or(u32::MAX).to_le_bytes());
        d[8..16].copy_from_slice(&g.change_count.to_le_bytes());
        d[16] = g.state.code();
        w.put(&d);
        if rgo {
            continue;
        }
        if w.skip_if_before(nnsids as u64 * 4) {
            continue;
        }
        for nsid in &g.nsids {
            if w.done() {
                break;
            }
            w.put(&nsid.to_le_bytes());
        }
    }
    Ok(())
}

/// A window `[start, start + out.len())` over a byte stream produced piece by piece.
struct Window<'a> {
    out: &'a mut [u8],
    start: u64,
    pos: u64,
}

impl Window<'_> {
    fn end(&self) -> u64 {
        self.start.saturating_add(self.out.len() as u64)
    }

    /// Appends `bytes` to the stream, copying what falls inside the window.
    fn put(&mut self, bytes: &[u8]) {
        let from = self.pos;
        let to = from + bytes.len() as u64;
        let lo = from.max(self.start);
        let hi = to.min(self.end());
        if lo < hi {
            let src = (lo - from) as usize..(hi - from) as usize;
            let dst = (lo - self.start) as usize..(hi - self.start) as usize;
            if let (Some(d), Some(s)) = (self.out.get_mut(dst), bytes.get(src)) {
                d.copy_from_slice(s);
            }
        }
        self.pos = to;
    }

    /// Skips `n` bytes of the stream if they all lie before the window; returns whether it did.
    fn skip_if_before(&mut self, n: u64) -> bool {
        if self.pos + n <= self.start {
            self.pos += n;
            true
        } else {
            false
        }
    }

    /// The window is filled.
    fn done(&self) -> bool {
        self.pos >= self.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ana::{AnaGroupLog, AnaState};

    fn log() -> AnaLog {
        AnaLog {
            change_count: 0x0102_0304_0506_0708,
            groups: vec![
                AnaGroupLog {
                    grpid: 1,
                    state: AnaState::Optimized,
                    change_count: 5,
                    nsids: vec![1, 3],
                },
                AnaGroupLog {
                    grpid: 4,
                    state: AnaState::Inaccessible,
                    change_count: 7,
                    nsids: vec![0x0A0B_0C0D],
                },
                AnaGroupLog {
                    grpid: 9,
                    state: AnaState::Change,
                    change_count: 8,
                    nsids: vec![2, 5, 6],
                },
            ],
        }
    }

    fn full(log: &AnaLog, rgo: bool) -> Vec<u8> {
        let mut v = vec![0xEE; log_size(log, rgo) as usize];
        read(log, rgo, 0, &mut v).unwrap();
        v
    }

    fn desc(grpid: u32, nnsids: u32, chg: u64, state: u8) -> Vec<u8> {
        let mut d = vec![0u8; 32];
        d[0..4].copy_from_slice(&grpid.to_le_bytes());
        d[4..8].copy_from_slice(&nnsids.to_le_bytes());
        d[8..16].copy_from_slice(&chg.to_le_bytes());
        d[16] = state;
        d
    }

    #[test]
    fn bytes_with_nsids() {
        let b = full(&log(), false);
        assert_eq!(b.len(), 16 + 3 * 32 + 6 * 4);
        let mut want = vec![8, 7, 6, 5, 4, 3, 2, 1, 3, 0, 0, 0, 0, 0, 0, 0];
        want.extend(desc(1, 2, 5, 0x1));
        want.extend([1, 0, 0, 0, 3, 0, 0, 0]);
        want.extend(desc(4, 1, 7, 0x3));
        want.extend([0x0D, 0x0C, 0x0B, 0x0A]);
        want.extend(desc(9, 3, 8, 0xF));
        want.extend([2, 0, 0, 0, 5, 0, 0, 0, 6, 0, 0, 0]);
        assert_eq!(b, want);
    }

    #[test]
    fn bytes_with_rgo() {
        let b = full(&log(), true);
        assert_eq!(b.len(), 16 + 3 * 32);
        let mut want = vec![8, 7, 6, 5, 4, 3, 2, 1, 3, 0, 0, 0, 0, 0, 0, 0];
        want.extend(desc(1, 0, 5, 0x1));
        want.extend(desc(4, 0, 7, 0x3));
        want.extend(desc(9, 0, 8, 0xF));
        assert_eq!(b, want);
    }

    #[test]
    fn empty_log_is_a_header() {
        let l = AnaLog {
            change_count: 3,
            groups: vec![],
        };
        assert_eq!(log_size(&l, false), 16);
        let mut b = [0xEEu8; 64];
        read(&l, false, 0, &mut b).unwrap();
        assert_eq!(b[0], 3);
        assert!(b[1..].iter().all(|&x| x == 0), "zero past the end");
    }

    #[test]
    fn every_partial_read_matches_the_whole() {
        for rgo in [false, true] {
            let l = log();
            let whole = full(&l, rgo);
            let size = whole.len();
            for off in (0..=size).step_by(4) {
                for len in [4usize, 8, 12, 20, 36, 64, 4096] {
                    let mut out = vec![0xEE; len];
                    read(&l, rgo, off as u64, &mut out).unwrap();
                    for (i, &b) in out.iter().enumerate() {
                        let want = whole.get(off + i).copied().unwrap_or(0);
                        assert_eq!(b, want, "rgo {rgo} offset {off} len {len} byte {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn offsets_must_be_aligned_and_inside() {
        let l = log();
        let size = log_size(&l, false);
        let mut out = [0u8; 8];
        assert_eq!(read(&l, false, 2, &mut out), Err(Status::INVALID_FIELD));
        assert_eq!(
            read(&l, false, size + 4, &mut out),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            read(&l, false, u64::MAX - 3, &mut out),
            Err(Status::INVALID_FIELD)
        );
        out.fill(0xEE);
        read(&l, false, size, &mut out).unwrap();
        assert_eq!(out, [0; 8], "reading at the end gives zeros");
        // RGO makes the log shorter: an offset valid without it may be past the end with it.
        assert_eq!(
            read(&l, true, log_size(&l, true) + 4, &mut out),
            Err(Status::INVALID_FIELD)
        );
        let mut nothing = [0u8; 0];
        read(&l, false, 16, &mut nothing).unwrap();
    }

    /// The checks the Linux host makes when it parses the log (nvme_parse_ana_log and
    /// nvme_update_ana_state): non-zero group ids up to ANAGRPMAX, valid states, descriptors
    /// inside the buffer, NSIDs ascending within a group.
    fn linux_parse(b: &[u8], anagrpmax: u32) -> Result<Vec<(u32, u8, Vec<u32>)>, String> {
        let ngrps = u16::from_le_bytes([b[8], b[9]]);
        let mut off = 16;
        let mut out = Vec::new();
        for _ in 0..ngrps {
            let d = b.get(off..off + 32).ok_or("descriptor past the end")?;
            let grpid = u32::from_le_bytes(d[0..4].try_into().unwrap());
            let n = u32::from_le_bytes(d[4..8].try_into().unwrap()) as usize;
            let state = d[16];
            if grpid == 0 || grpid > anagrpmax {
                return Err(format!("bad grpid {grpid}"));
            }
            if state == 0 || state > 0xF || AnaState::from_code(state).is_none() {
                return Err(format!("bad state {state}"));
            }
            off += 32;
            let ids = b.get(off..off + 4 * n).ok_or("nsids past the end")?;
            let ids: Vec<u32> = ids
                .chunks(4)
                .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
                .collect();
            if ids.windows(2).any(|w| w[0] >= w[1]) {
                return Err("nsids not ascending".into());
            }
            off += 4 * n;
            out.push((grpid, state, ids));
        }
        Ok(out)
    }

    #[test]
    fn the_linux_host_parses_it() {
        let parsed = linux_parse(&full(&log(), false), 0x0B0C_0D0E).unwrap();
        assert_eq!(
            parsed,
            vec![
                (1, 1, vec![1, 3]),
                (4, 3, vec![0x0A0B_0C0D]),
                (9, 0xF, vec![2, 5, 6])
            ]
        );
        // A buffer sized as Linux sizes it (header + NANAGRPID descriptors + MNAN NSIDs)
        // holds the whole log.
        let mut buf = vec![0u8; 16 + 9 * 32 + 6 * 4];
        read(&log(), false, 0, &mut buf).unwrap();
        assert_eq!(linux_parse(&buf, 9).unwrap().len(), 3);
        assert!(
            linux_parse(&full(&log(), false), 8).is_err(),
            "group 9 > ANAGRPMAX 8"
        );
    }
}
