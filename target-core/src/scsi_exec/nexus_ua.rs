//! The unit attention conditions of one I_T nexus, one queue per logical unit (SAM-5 5.14,
//! SPC-4 "unit attention conditions"), shared by every channel of the nexus on every poll
//! group.
//!
//! - A condition is established per LU and reported once, by the first command of the nexus
//!   to that LU on any of its channels; a command to another LU does not see it.
//! - An LU the nexus has never addressed has POWER ON, RESET, OR BUS DEVICE RESET OCCURRED
//!   (29h/00h) pending: its first command reports it, and conditions established meanwhile
//!   follow it in the queue's order. A nexus that comes back after its nexus loss (the same
//!   initiator port through the same target port: [`NexusUnitAttentions::returned`]) has
//!   I_T NEXUS LOSS OCCURRED (29h/07h) pending instead (SPC-4 6.2: established for the
//!   initiator port when its nexus is lost, reported when it addresses the LU again).
//! - The per-command cost: one atomic load of the LU's bit while nothing is pending for it;
//!   the queue's lock only when something is (or for the LU's first command).
//!
//! The rules of each queue are [`UaQueue`]'s (order, overflow, INQUIRY / REPORT LUNS /
//! REQUEST SENSE). REPORT LUNS clears REPORTED LUNS DATA HAS CHANGED on every LU of the nexus,
//! since it answers for the whole inventory.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;

use crate::reservation::Nexus;
use crate::scsi::cdb::op;
use crate::scsi::lun::MAX_LUN;
use crate::scsi::ua::{UaCheck, UaQueue, UnitAttention};

const WORDS: usize = (MAX_LUN as usize + 1).div_ceil(64);

/// The unit attention queues of one I_T nexus, per logical unit.
pub struct NexusUnitAttentions {
    identity: Nexus,
    /// A bit per LUN: something may be pending there (a condition, or the LU's first access).
    pending: Box<[AtomicU64]>,
    /// The queue of every LU the nexus addressed.
    queues: Mutex<HashMap<u16, UaQueue>>,
    /// An LU's first command reports POWER ON (false: [`NexusUnitAttentions::settled`]).
    power_on: bool,
    /// ... or I_T NEXUS LOSS OCCURRED instead ([`NexusUnitAttentions::returned`]).
    after_loss: AtomicBool,
}

impl std::fmt::Debug for NexusUnitAttentions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NexusUnitAttentions")
            .field("identity", &self.identity)
            .finish()
    }
}

fn bit(lun: u16) -> (usize, u64) {
    let l = usize::from(lun.min(MAX_LUN));
    (l / 64, 1u64 << (l % 64))
}

impl NexusUnitAttentions {
    /// A new nexus: every LU has POWER ON, RESET, OR BUS DEVICE RESET OCCURRED pending.
    pub fn new(identity: Nexus) -> Self {
        NexusUnitAttentions {
            identity,
            pending: (0..WORDS).map(|_| AtomicU64::new(u64::MAX)).collect(),
            queues: Mutex::new(HashMap::new()),
            power_on: true,
            after_loss: AtomicBool::new(false),
        }
    }

    fn fresh_queue(&self) -> UaQueue {
        if !self.power_on {
            return UaQueue::empty();
        }
        if self.after_loss.load(Ordering::Acquire) {
            let mut q = UaQueue::empty();
            q.establish(UnitAttention::ItNexusLoss);
            return q;
        }
        UaQueue::new()
    }

    /// The nexus was lost before and is back (its initiator port logged in again): an LU's
    /// first command reports I_T NEXUS LOSS OCCURRED rather than POWER ON. Call it before the
    /// nexus's first command.
    pub fn returned(&self) {
        self.after_loss.store(true, Ordering::Release);
    }

    /// A nexus that has addressed every LU and has nothing pending (for tests of other
    /// behaviour).
    pub fn settled(identity: Nexus) -> Self {
        NexusUnitAttentions {
            identity,
            pending: (0..WORDS).map(|_| AtomicU64::new(0)).collect(),
            queues: Mutex::new(HashMap::new()),
            power_on: false,
            after_loss: AtomicBool::new(false),
        }
    }

    /// The nexus as reservations name it.
    pub fn identity(&self) -> Nexus {
        self.identity
    }

    fn set(&self, lun: u16) {
        let (w, b) = bit(lun);
        self.pending[w].fetch_or(b, Ordering::Release);
    }

    fn clear(&self, lun: u16) {
        let (w, b) = bit(lun);
        self.pending[w].fetch_and(!b, Ordering::Release);
    }

    /// Whether a condition may be pending on `lun` (one atomic load; `false`: none is).
    #[inline]
    pub(super) fn may_be_pending(&self, lun: u16) -> bool {
        let (w, b) = bit(lun);
        self.pending[w].load(Ordering::Acquire) & b != 0
    }

    /// Establishes `ua` on `lun`.
    pub fn establish(&self, lun: u16, ua: UnitAttention) {
        let mut g = self.queues.lock();
        g.entry(lun)
            .or_insert_with(|| self.fresh_queue())
            .establish(ua);
        self.set(lun);
    }

    /// Establishes `ua` on every LU the nexus has addressed (REPORTED LUNS DATA HAS CHANGED:
    /// the initiator hears it on an LU it uses).
    pub fn establish_everywhere(&self, ua: UnitAttention) {
        let mut g = self.queues.lock();
        for (lun, q) in g.iter_mut() {
            q.establish(ua);
            self.set(*lun);
        }
    }

    /// Checks a command to `lun` (`None`: no logical unit is there for the nexus, nothing is
    /// reported), clearing what it reports.
    pub fn check(&self, lun: Option<u16>, cdb: &[u8]) -> UaCheck {
        if cdb.first() == Some(&op::REPORT_LUNS) {
            self.clear_reported_luns_changed();
            return UaCheck::Proceed;
        }
        let Some(lun) = lun else {
            return UaCheck::Proceed;
        };
        if !self.may_be_pending(lun) {
            return UaCheck::Proceed;
        }
        let mut g = self.queues.lock();
        let q = g.entry(lun).or_insert_with(|| self.fresh_queue());
        let r = q.check(cdb);
        if q.pending().is_empty() {
            self.clear(lun);
        }
        r
    }

    fn clear_reported_luns_changed(&self) {
        let mut g = self.queues.lock();
        for (lun, q) in g.iter_mut() {
            if q.pending()
                .contains(&UnitAttention::ReportedLunsDataChanged)
            {
                let _ = q.check(&[op::REPORT_LUNS]);
                if q.pending().is_empty() {
                    self.clear(*lun);
                }
            }
        }
    }

    /// The conditions pending on `lun`, in reporting order (`None`: never addressed, so POWER
    /// ON is pending).
    pub fn pending(&self, lun: u16) -> Option<Vec<UnitAttention>> {
        self.queues.lock().get(&lun).map(|q| q.pending().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reservation::InitiatorPort;
    use crate::scsi::Sense;

    const READ_10: [u8; 10] = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];
    const TUR: [u8; 6] = [0; 6];

    fn nexus() -> NexusUnitAttentions {
        NexusUnitAttentions::new(Nexus {
            initiator: InitiatorPort::srp([1; 16]),
            relative_target_port: 1,
        })
    }

    #[test]
    fn power_on_is_reported_once_per_lu_on_its_first_command() {
        let n = nexus();
        assert_eq!(
            n.check(Some(0), &READ_10),
            UaCheck::Report(Sense::reset_occurred())
        );
        assert_eq!(n.check(Some(0), &READ_10), UaCheck::Proceed);
        // Another LU has its own.
        assert_eq!(
            n.check(Some(7), &TUR),
            UaCheck::Report(Sense::reset_occurred())
        );
        assert_eq!(n.check(Some(7), &TUR), UaCheck::Proceed);
        assert_eq!(
            n.check(Some(MAX_LUN), &TUR),
            UaCheck::Report(Sense::reset_occurred())
        );
        // No LU there: nothing.
        assert_eq!(n.check(None, &TUR), UaCheck::Proceed);
    }

    #[test]
    fn a_condition_is_reported_only_on_its_lu_and_only_once() {
        let n = nexus();
        for lun in [0, 1] {
            let _ = n.check(Some(lun), &TUR);
        }
        n.establish(1, UnitAttention::CapacityDataChanged);
        assert_eq!(
            n.check(Some(0), &READ_10),
            UaCheck::Proceed,
            "LU 0 has nothing"
        );
        assert_eq!(
            n.check(Some(1), &READ_10),
            UaCheck::Report(Sense::capacity_changed())
        );
        assert_eq!(n.check(Some(1), &READ_10), UaCheck::Proceed);
    }

    #[test]
    fn an_lu_never_addressed_reports_power_on_first() {
        let n = nexus();
        assert_eq!(n.pending(3), None);
        n.establish(3, UnitAttention::ReservationsPreempted);
        assert_eq!(
            n.pending(3),
            Some(vec![
                UnitAttention::PowerOnReset,
                UnitAttention::ReservationsPreempted
            ])
        );
        assert_eq!(
            n.check(Some(3), &TUR),
            UaCheck::Report(Sense::reset_occurred())
        );
        assert!(
            matches!(n.check(Some(3), &TUR), UaCheck::Report(s) if (s.asc, s.ascq) == (0x2A, 0x03))
        );
        assert_eq!(n.check(Some(3), &TUR), UaCheck::Proceed);
    }

    #[test]
    fn report_luns_clears_reported_luns_data_changed_on_every_lu() {
        let n = nexus();
        for lun in [0, 2] {
            let _ = n.check(Some(lun), &TUR);
        }
        n.establish_everywhere(UnitAttention::ReportedLunsDataChanged);
        n.establish(2, UnitAttention::ReservationsReleased);
        assert_eq!(
            n.check(None, &[op::REPORT_LUNS, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]),
            UaCheck::Proceed
        );
        assert_eq!(n.check(Some(0), &TUR), UaCheck::Proceed);
        assert_eq!(
            n.pending(2),
            Some(vec![UnitAttention::ReservationsReleased]),
            "only its own condition"
        );
        assert!(
            matches!(n.check(Some(2), &TUR), UaCheck::Report(s) if (s.asc, s.ascq) == (0x2A, 0x04))
        );
        assert_eq!(n.check(Some(2), &TUR), UaCheck::Proceed);
    }

    #[test]
    fn shared_by_threads_a_condition_is_heard_once() {
        let n = std::sync::Arc::new(nexus());
        let _ = n.check(Some(0), &TUR);
        n.establish(0, UnitAttention::LogicalUnitReset);
        let reported: usize = (0..4)
            .map(|_| {
                let n = std::sync::Arc::clone(&n);
                std::thread::spawn(move || {
                    (0..100)
                        .filter(|_| matches!(n.check(Some(0), &READ_10), UaCheck::Report(_)))
                        .count()
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .sum();
        assert_eq!(reported, 1);
    }
}
