//! The Reservation Notification log page (LID 80h) of one controller, and its AEN.
//!
//! Each notification is a 64-byte log page: Log Page Count (u64, bytes 0–7), Reservation
//! Notification Log Page Type (byte 8: 0 empty, 1 Registration Preempted, 2 Reservation
//! Released, 3 Reservation Preempted), Number of Available Log Pages (byte 9), NSID (bytes
//! 12–15). A Get Log Page of 80h returns and removes the oldest page; with none queued it
//! returns an empty page (type 0, all zeros).
//!
//! The count increments for every page created, skipping 0 when it wraps. The queue holds
//! [`LOG_CAPACITY`] pages; when it is full the newest queued page is replaced by the new
//! one, so the counts jump and the host can tell pages were lost (SPDK keeps the old page
//! and only advances its count; replacing it keeps the latest event).
//!
//! AEN: Asynchronous Event type 6h (I/O command specific), information 0h (Reservation Log
//! Page Available), log page 80h. After one is sent, no further one is sent until the host
//! reads the log with RAE = 0.

use std::collections::VecDeque;

use crate::reservation::NoticeKind;

use super::resv::NotifyMask;

/// Log identifier of the Reservation Notification log page.
pub const LID_RESERVATION_NOTIFICATION: u8 = 0x80;

/// Length of one log page.
pub const LOG_PAGE_LEN: usize = 64;

/// Pages kept per controller.
pub const LOG_CAPACITY: usize = 64;

/// Completion DW0 of the reservation AEN: type 6h | information 0h << 8 | LID 80h << 16.
pub const AEN_DW0: u32 = 0x6 | (LID_RESERVATION_NOTIFICATION as u32) << 16;

/// The log page type of a notice.
pub const fn log_type(kind: NoticeKind) -> u8 {
    match kind {
        NoticeKind::RegistrationPreempted => 1,
        NoticeKind::ReservationReleased => 2,
        NoticeKind::ReservationPreempted => 3,
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Page {
    count: u64,
    kind: NoticeKind,
    nsid: u32,
}

/// One controller's queue of reservation notifications.
#[derive(Clone, Debug, Default)]
pub struct ResvLog {
    pages: VecDeque<Page>,
    counter: u64,
    aen_outstanding: bool,
}

impl ResvLog {
    /// An empty log.
    pub fn new() -> ResvLog {
        ResvLog::default()
    }

    /// Pages queued.
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// No page queued.
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Queues a notification for namespace `nsid` unless `mask` suppresses it. Returns
    /// `true` when an AEN ([`AEN_DW0`]) should be sent now.
    pub fn notify(&mut self, nsid: u32, kind: NoticeKind, mask: NotifyMask) -> bool {
        if mask.masks(kind) {
            return false;
        }
        self.counter = self.counter.wrapping_add(1).max(1);
        let page = Page {
            count: self.counter,
            kind,
            nsid,
        };
        if self.pages.len() >= LOG_CAPACITY {
            if let Some(last) = self.pages.back_mut() {
                *last = page;
            }
        } else {
            self.pages.push_back(page);
        }
        if self.aen_outstanding {
            return false;
        }
        self.aen_outstanding = true;
        true
    }

    /// Get Log Page 80h: the oldest page (removed), or an empty page. With `rae` false the
    /// AEN is re-armed; the return's `bool` says whether to send an AEN again at once
    /// (pages are still queued).
    pub fn read(&mut self, rae: bool) -> ([u8; LOG_PAGE_LEN], bool) {
        let mut b = [0u8; LOG_PAGE_LEN];
        if let Some(p) = self.pages.pop_front() {
            b[..8].copy_from_slice(&p.count.to_le_bytes());
            b[8] = log_type(p.kind);
            b[9] = u8::try_from(self.pages.len()).unwrap_or(u8::MAX);
            b[12..16].copy_from_slice(&p.nsid.to_le_bytes());
        }
        let mut again = false;
        if !rae {
            self.aen_outstanding = false;
            if !self.pages.is_empty() {
                self.aen_outstanding = true;
                again = true;
            }
        }
        (b, again)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn count(b: &[u8; LOG_PAGE_LEN]) -> u64 {
        u64::from_le_bytes(b[..8].try_into().unwrap())
    }

    #[test]
    fn pages_in_order_with_counts_and_remaining() {
        let mut log = ResvLog::new();
        let none = NotifyMask::default();
        assert!(log.notify(1, NoticeKind::RegistrationPreempted, none));
        assert!(
            !log.notify(2, NoticeKind::ReservationReleased, none),
            "one AEN"
        );
        let (p, again) = log.read(true);
        assert!(!again);
        assert_eq!(count(&p), 1);
        assert_eq!(p[8], 1);
        assert_eq!(p[9], 1, "one more available");
        assert_eq!(u32::from_le_bytes(p[12..16].try_into().unwrap()), 1);
        assert_eq!(&p[16..], &[0; 48]);
        let (p, _) = log.read(false);
        assert_eq!((count(&p), p[8], p[9]), (2, 2, 0));
        // Empty: a zero page.
        assert_eq!(log.read(false).0, [0; LOG_PAGE_LEN]);
        // Re-armed by the RAE = 0 read.
        assert!(log.notify(1, NoticeKind::ReservationPreempted, none));
    }

    #[test]
    fn rae_zero_with_pages_left_sends_another_aen() {
        let mut log = ResvLog::new();
        let none = NotifyMask::default();
        log.notify(1, NoticeKind::RegistrationPreempted, none);
        log.notify(1, NoticeKind::RegistrationPreempted, none);
        let (_, again) = log.read(false);
        assert!(again);
        assert!(!log.notify(1, NoticeKind::ReservationReleased, none));
    }

    #[test]
    fn masked_kinds_are_not_queued() {
        let mut log = ResvLog::new();
        let m = NotifyMask::from_cdw11(NotifyMask::RESREL).unwrap();
        assert!(!log.notify(1, NoticeKind::ReservationReleased, m));
        assert!(log.is_empty());
        assert!(log.notify(1, NoticeKind::ReservationPreempted, m));
        assert_eq!(log.len(), 1);
    }

    #[test]
    fn overflow_replaces_the_newest_and_shows_a_gap() {
        let mut log = ResvLog::new();
        let none = NotifyMask::default();
        for _ in 0..LOG_CAPACITY + 3 {
            log.notify(7, NoticeKind::RegistrationPreempted, none);
        }
        log.notify(7, NoticeKind::ReservationPreempted, none);
        assert_eq!(log.len(), LOG_CAPACITY);
        let mut last = [0u8; LOG_PAGE_LEN];
        let mut counts = Vec::new();
        while !log.is_empty() {
            last = log.read(true).0;
            counts.push(count(&last));
        }
        assert_eq!(
            counts[..LOG_CAPACITY - 1],
            (1..LOG_CAPACITY as u64).collect::<Vec<_>>()
        );
        assert_eq!(
            counts[LOG_CAPACITY - 1],
            LOG_CAPACITY as u64 + 4,
            "gap of 4 lost pages"
        );
        assert_eq!(last[8], 3, "the newest event is kept");
    }

    #[test]
    fn count_skips_zero_when_it_wraps() {
        let mut log = ResvLog::new();
        log.counter = u64::MAX;
        log.notify(1, NoticeKind::RegistrationPreempted, NotifyMask::default());
        assert_eq!(count(&log.read(false).0), 1);
    }

    #[test]
    fn aen_dw0_layout() {
        assert_eq!(AEN_DW0, 0x0080_0006);
    }
}
