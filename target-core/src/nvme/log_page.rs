//! Get Log Page (admin opcode 0x02): supported pages, error information, SMART / health,
//! firmware slot, changed namespace list, commands supported and effects, discovery.

use std::collections::VecDeque;

use super::aer::AsyncEvent;
use super::controller::Controller;
use super::spec::{NSID_ALL, Status, admin_opc, io_opc, le, lid};
use super::sqe::Sqe;
use super::view::{SubsystemKind, SubsystemView};

/// Entries kept in the Error Information log (Identify ELPE + 1).
pub const ERROR_LOG_ENTRIES: usize = 64;
/// Size of one Error Information entry.
pub const ERROR_LOG_ENTRY_SIZE: usize = 64;
/// Most NSIDs in the Changed Namespace List.
pub const MAX_CHANGED_NAMESPACES: usize = 1024;

/// The Get Log Page fields of an SQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GetLogPage {
    /// Log page identifier.
    pub lid: u8,
    /// Log specific field.
    pub lsp: u8,
    /// Retain Asynchronous Event.
    pub rae: bool,
    /// Transfer length in bytes: (NUMDU:NUMDL + 1) × 4.
    pub len: u64,
    /// Byte offset into the log (LPOU:LPOL).
    pub offset: u64,
}

impl GetLogPage {
    /// Decodes CDW10-13.
    pub fn from_sqe(sqe: &Sqe) -> GetLogPage {
        let cdw10 = sqe.cdw10();
        let numd = (u64::from(sqe.cdw11() & 0xFFFF) << 16 | u64::from(cdw10 >> 16)) + 1;
        GetLogPage {
            lid: cdw10 as u8,
            lsp: ((cdw10 >> 8) & 0x7F) as u8,
            rae: cdw10 & 1 << 15 != 0,
            len: numd * 4,
            offset: u64::from(sqe.cdw13()) << 32 | u64::from(sqe.cdw12()),
        }
    }
}

/// Executes Get Log Page into `out`; returns the number of bytes to send.
pub(super) fn execute(
    ctrl: &mut Controller,
    view: &SubsystemView<'_>,
    sqe: &Sqe,
    out: &mut [u8],
) -> Result<usize, Status> {
    let g = GetLogPage::from_sqe(sqe);
    if !g.offset.is_multiple_of(4) {
        return Err(Status::INVALID_FIELD);
    }
    let len = usize::try_from(g.len).map_err(|_| Status::DATA_SGL_LENGTH_INVALID)?;
    let out = out.get_mut(..len).ok_or(Status::DATA_SGL_LENGTH_INVALID)?;

    if ctrl.kind == SubsystemKind::Discovery {
        if g.lid != lid::DISCOVERY {
            return Err(Status::INVALID_LOG_PAGE);
        }
        let log = view
            .discovery_log
            .unwrap_or(super::discovery::DiscoveryLog {
                genctr: 0,
                entries: &[],
            });
        log.read(g.offset, out);
        // The host knows this generation now: only later changes are news to it.
        ctrl.disc_genctr = log.genctr;
        if !g.rae {
            ctrl.aer.clear(AsyncEvent::DiscoveryLogChanged);
        }
        return Ok(len);
    }

    if g.lid == super::ana::LID_ANA
        && let Some(a) = &view.ana
    {
        let rgo = g.lsp & super::ana::LSP_RGO != 0;
        super::ana_log::read(a.log, rgo, g.offset, out)?;
        // The host knows this generation now: only later changes are news to it.
        ctrl.ana_gen = Some(a.generation);
        if !g.rae {
            ctrl.aer.clear(AsyncEvent::AnaChange);
        }
        return Ok(len);
    }

    let mut img = [0u8; 4096];
    let size = match g.lid {
        lid::SUPPORTED_LOG_PAGES => {
            for l in [
                lid::SUPPORTED_LOG_PAGES,
                lid::ERROR,
                lid::SMART,
                lid::FW_SLOT,
                lid::CHANGED_NS_LIST,
                lid::CMD_EFFECTS,
                super::resv_log::LID_RESERVATION_NOTIFICATION,
            ] {
                le::put_u32(&mut img, usize::from(l) * 4, 1); // LSUPP
            }
            if view.ana.is_some() {
                le::put_u32(&mut img, usize::from(super::ana::LID_ANA) * 4, 1);
            }
            1024
        }
        lid::ERROR => ctrl.errors.encode(&mut img),
        lid::SMART => {
            // Controller-wide only (LPA bit 0 clear): any other NSID is Invalid Field.
            let nsid = sqe.nsid();
            if nsid != 0 && nsid != NSID_ALL {
                return Err(Status::INVALID_FIELD);
            }
            smart(ctrl, &mut img);
            512
        }
        lid::FW_SLOT => {
            img[0] = 1; // AFI: slot 1 active
            le::put_padded(&mut img, 8, 8, view.firmware.as_bytes(), b' ');
            512
        }
        lid::CHANGED_NS_LIST => ctrl.changed_ns.encode(&mut img),
        lid::CMD_EFFECTS => {
            effects(&mut img);
            4096
        }
        super::resv_log::LID_RESERVATION_NOTIFICATION => {
            // Reading takes the oldest page off the queue (an empty page when none).
            let (page, again) = ctrl.resv_log.read(g.rae);
            img[..page.len()].copy_from_slice(&page);
            if !g.rae {
                ctrl.aer.clear(AsyncEvent::ReservationLog);
                if again {
                    ctrl.aer.post_queued(AsyncEvent::ReservationLog);
                }
            }
            page.len()
        }
        _ => return Err(Status::INVALID_LOG_PAGE),
    };
    if g.offset > size as u64 {
        return Err(Status::INVALID_FIELD);
    }
    let start = g.offset as usize;
    let n = (size - start).min(len);
    out[..n].copy_from_slice(&img[start..start + n]);
    out[n..].fill(0);
    if g.lid == lid::CHANGED_NS_LIST {
        ctrl.changed_ns.clear();
        if !g.rae {
            ctrl.aer.clear(AsyncEvent::NamespaceAttributeChanged);
        }
    }
    Ok(len)
}

fn smart(ctrl: &Controller, b: &mut [u8; 4096]) {
    b[0] = 0; // critical warning
    le::put_u16(b, 1, 311); // composite temperature, Kelvin (38 °C, as SPDK)
    b[3] = 100; // available spare
    b[4] = 10; // available spare threshold
    b[5] = 0; // percentage used
    le::put_u64(b, 176, ctrl.errors.count()); // number of error log entries
}

fn effects(b: &mut [u8; 4096]) {
    const CSUPP: u32 = 1 << 0;
    const LBCC: u32 = 1 << 1;
    for opc in [
        admin_opc::GET_LOG_PAGE,
        admin_opc::IDENTIFY,
        admin_opc::ABORT,
        admin_opc::SET_FEATURES,
        admin_opc::GET_FEATURES,
        admin_opc::ASYNC_EVENT_REQUEST,
        admin_opc::KEEP_ALIVE,
    ] {
        le::put_u32(b, usize::from(opc) * 4, CSUPP);
    }
    for (opc, eff) in [
        (io_opc::FLUSH, CSUPP),
        (io_opc::WRITE, CSUPP | LBCC),
        (io_opc::READ, CSUPP),
        (io_opc::COMPARE, CSUPP),
        (io_opc::WRITE_ZEROES, CSUPP | LBCC),
        (io_opc::DATASET_MANAGEMENT, CSUPP | LBCC),
        (super::resv::opc::REGISTER, CSUPP),
        (super::resv::opc::REPORT, CSUPP),
        (super::resv::opc::ACQUIRE, CSUPP),
        (super::resv::opc::RELEASE, CSUPP),
    ] {
        le::put_u32(b, 1024 + usize::from(opc) * 4, eff);
    }
}

/// The Changed Namespace List: NSIDs changed since the host last read LID 04h.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChangedNsList {
    nsids: Vec<u32>,
    overflow: bool,
}

impl ChangedNsList {
    /// Adds an NSID; beyond 1024 distinct entries the list reports only 0xFFFFFFFF.
    pub fn add(&mut self, nsid: u32) {
        if self.overflow || self.nsids.contains(&nsid) {
            return;
        }
        if self.nsids.len() == MAX_CHANGED_NAMESPACES {
            self.overflow = true;
            self.nsids.clear();
            return;
        }
        self.nsids.push(nsid);
    }

    /// Writes the 4096-byte log; returns its size.
    pub fn encode(&self, b: &mut [u8; 4096]) -> usize {
        if self.overflow {
            le::put_u32(b, 0, NSID_ALL);
        } else {
            let mut sorted = self.nsids.clone();
            sorted.sort_unstable();
            for (i, n) in sorted.iter().enumerate() {
                le::put_u32(b, i * 4, *n);
            }
        }
        4096
    }

    pub fn clear(&mut self) {
        self.nsids.clear();
        self.overflow = false;
    }
}

/// One Error Information log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ErrorEntry {
    count: u64,
    sqid: u16,
    cid: u16,
    status: Status,
    nsid: u32,
    lba: u64,
}

/// The Error Information log: the last [`ERROR_LOG_ENTRIES`] errors, newest first.
#[derive(Clone, Debug, Default)]
pub(crate) struct ErrorLog {
    entries: VecDeque<ErrorEntry>,
    count: u64,
}

impl ErrorLog {
    pub fn record(&mut self, sqid: u16, cid: u16, status: Status, nsid: u32, lba: u64) {
        self.count += 1;
        if self.entries.len() == ERROR_LOG_ENTRIES {
            self.entries.pop_back();
        }
        self.entries.push_front(ErrorEntry {
            count: self.count,
            sqid,
            cid,
            status,
            nsid,
            lba,
        });
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    /// Writes the log (64 entries of 64 bytes); returns its size.
    pub fn encode(&self, b: &mut [u8; 4096]) -> usize {
        for (i, e) in self.entries.iter().enumerate() {
            let o = i * ERROR_LOG_ENTRY_SIZE;
            le::put_u64(b, o, e.count);
            le::put_u16(b, o + 8, e.sqid);
            le::put_u16(b, o + 10, e.cid);
            le::put_u16(b, o + 12, e.status.to_cqe_field());
            le::put_u16(b, o + 14, 0xFFFF); // parameter error location: not reported
            le::put_u64(b, o + 16, e.lba);
            le::put_u32(b, o + 24, e.nsid);
        }
        ERROR_LOG_ENTRIES * ERROR_LOG_ENTRY_SIZE
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numd_and_offset_decoding() {
        let mut s = Sqe::new(admin_opc::GET_LOG_PAGE, 1);
        // LID 0x70, RAE, NUMDL 4 (20 bytes).
        s.set_cdw(10, 0x70 | 1 << 15 | 4 << 16);
        let g = GetLogPage::from_sqe(&s);
        assert_eq!((g.lid, g.rae, g.len, g.offset), (0x70, true, 20, 0));
        // NUMDU/NUMDL = 0x1_0000 dwords - 1, LPO = 1 << 32 | 1024.
        s.set_cdw(10, 0x02 | 0xFFFF << 16)
            .set_cdw(11, 0)
            .set_cdw(12, 1024)
            .set_cdw(13, 1);
        let g = GetLogPage::from_sqe(&s);
        assert_eq!(g.len, 0x1_0000 * 4);
        assert_eq!(g.offset, (1 << 32) | 1024);
        s.set_cdw(11, 0xFFFF).set_cdw(10, 0xFFFF << 16);
        assert_eq!(GetLogPage::from_sqe(&s).len, 0x1_0000_0000 * 4);
    }

    #[test]
    fn changed_ns_list_overflow() {
        let mut l = ChangedNsList::default();
        for n in (1..=1024).rev() {
            l.add(n);
        }
        l.add(5);
        let mut b = [0u8; 4096];
        l.encode(&mut b);
        assert_eq!(le::u32_at(&b, 0), 1);
        assert_eq!(le::u32_at(&b, 4092), 1024);
        l.add(2000);
        let mut b = [0u8; 4096];
        l.encode(&mut b);
        assert_eq!(le::u32_at(&b, 0), NSID_ALL);
        assert_eq!(le::u32_at(&b, 4), 0);
        l.clear();
        l.add(3);
        let mut b = [0u8; 4096];
        l.encode(&mut b);
        assert_eq!(le::u32_at(&b, 0), 3);
    }

    #[test]
    fn error_log_ring() {
        let mut e = ErrorLog::default();
        for i in 0..70u16 {
            e.record(1, i, Status::LBA_OUT_OF_RANGE, 1, u64::from(i));
        }
        let mut b = [0u8; 4096];
        assert_eq!(e.encode(&mut b), 4096);
        assert_eq!(e.count(), 70);
        assert_eq!(le::u64_at(&b, 0), 70);
        assert_eq!(le::u16_at(&b, 10), 69);
        assert_eq!(le::u16_at(&b, 12) >> 1, 0x4080);
        assert_eq!(le::u64_at(&b, 63 * 64), 7, "oldest kept entry");
    }
}
