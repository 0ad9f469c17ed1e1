//! Unit attention conditions: one queue per I_T nexus per logical unit (sans-I/O).
//!
//! Rules (SAM-5 5.14 / SPC-4 "unit attention conditions", LIO's ordering as reference):
//!
//! - A new nexus starts with POWER ON, RESET, OR BUS DEVICE RESET OCCURRED pending
//!   ([`UaQueue::new`]): its first command to the LU reports it.
//! - The same condition is never queued twice.
//! - Order: the reset family first, in SAM-4's precedence — POWER ON, RESET, OR BUS DEVICE
//!   RESET OCCURRED (29h/00h), then BUS DEVICE RESET FUNCTION OCCURRED (29h/03h, a LOGICAL
//!   UNIT RESET), then I_T NEXUS LOSS OCCURRED (29h/07h) — then everything else in the order
//!   it was established.
//! - Overflow (more distinct conditions than the queue holds; with the conditions below and
//!   the default capacity it cannot happen): the queue collapses to the single POWER ON,
//!   RESET, OR BUS DEVICE RESET OCCURRED, which tells the initiator that anything may have
//!   changed.
//! - Which commands report (see [`UaQueue::check`]): INQUIRY neither reports nor clears
//!   anything; REPORT LUNS does not report, and clears REPORTED LUNS DATA HAS CHANGED;
//!   REQUEST SENSE returns the condition as its sense data with GOOD status and clears it;
//!   every other command is terminated with CHECK CONDITION / UNIT ATTENTION, not run, and
//!   that condition is cleared (UA_INTLCK_CTRL 00b).

use arrayvec::ArrayVec;

use crate::reservation::NoticeKind;

use super::cdb::op;
use super::sense::{Sense, SenseKey};

/// A unit attention condition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum UnitAttention {
    /// 29h/00h POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (first access, target reset).
    PowerOnReset,
    /// 29h/03h BUS DEVICE RESET FUNCTION OCCURRED (LOGICAL UNIT RESET).
    LogicalUnitReset,
    /// 29h/07h I_T NEXUS LOSS OCCURRED.
    ItNexusLoss,
    /// 2Ah/01h MODE PARAMETERS CHANGED (another nexus ran MODE SELECT).
    ModeParametersChanged,
    /// 2Ah/03h RESERVATIONS PREEMPTED.
    ReservationsPreempted,
    /// 2Ah/04h RESERVATIONS RELEASED.
    ReservationsReleased,
    /// 2Ah/05h REGISTRATIONS PREEMPTED.
    RegistrationsPreempted,
    /// 2Ah/06h ASYMMETRIC ACCESS STATE CHANGED.
    AsymmetricAccessStateChanged,
    /// 2Ah/09h CAPACITY DATA HAS CHANGED.
    CapacityDataChanged,
    /// 2Fh/00h COMMANDS CLEARED BY ANOTHER INITIATOR.
    CommandsClearedByAnotherInitiator,
    /// 3Fh/03h INQUIRY DATA HAS CHANGED.
    InquiryDataChanged,
    /// 3Fh/0Eh REPORTED LUNS DATA HAS CHANGED.
    ReportedLunsDataChanged,
}

impl UnitAttention {
    /// (ASC, ASCQ).
    pub const fn code(self) -> (u8, u8) {
        match self {
            UnitAttention::PowerOnReset => (0x29, 0x00),
            UnitAttention::LogicalUnitReset => (0x29, 0x03),
            UnitAttention::ItNexusLoss => (0x29, 0x07),
            UnitAttention::ModeParametersChanged => (0x2A, 0x01),
            UnitAttention::ReservationsPreempted => (0x2A, 0x03),
            UnitAttention::ReservationsReleased => (0x2A, 0x04),
            UnitAttention::RegistrationsPreempted => (0x2A, 0x05),
            UnitAttention::AsymmetricAccessStateChanged => (0x2A, 0x06),
            UnitAttention::CapacityDataChanged => (0x2A, 0x09),
            UnitAttention::CommandsClearedByAnotherInitiator => (0x2F, 0x00),
            UnitAttention::InquiryDataChanged => (0x3F, 0x03),
            UnitAttention::ReportedLunsDataChanged => (0x3F, 0x0E),
        }
    }

    /// The sense data reporting it.
    pub const fn sense(self) -> Sense {
        let (asc, ascq) = self.code();
        Sense::new(SenseKey::UnitAttention, asc, ascq)
    }

    /// The unit attention a reservation notice raises on the recipient nexus.
    pub const fn for_notice(kind: NoticeKind) -> UnitAttention {
        match kind {
            NoticeKind::RegistrationPreempted => UnitAttention::RegistrationsPreempted,
            NoticeKind::ReservationReleased => UnitAttention::ReservationsReleased,
            NoticeKind::ReservationPreempted => UnitAttention::ReservationsPreempted,
        }
    }

    /// Reporting precedence: lower goes first.
    const fn precedence(self) -> u8 {
        match self {
            UnitAttention::PowerOnReset => 0,
            UnitAttention::LogicalUnitReset => 1,
            UnitAttention::ItNexusLoss => 2,
            _ => 3,
        }
    }
}

/// Conditions one queue holds by default (more than there are distinct conditions).
pub const UA_CAPACITY: usize = 16;

/// What to do with a command given the pending unit attentions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UaCheck {
    /// Run the command.
    Proceed,
    /// Do not run it: CHECK CONDITION with this UNIT ATTENTION sense (now cleared).
    Report(Sense),
    /// REQUEST SENSE: return this sense as its parameter data, GOOD status (now cleared).
    Deliver(Sense),
}

/// The pending unit attentions of one I_T nexus for one logical unit. Fixed size, no heap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UaQueue<const N: usize = UA_CAPACITY> {
    q: ArrayVec<UnitAttention, N>,
}

impl<const N: usize> Default for UaQueue<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> UaQueue<N> {
    /// A queue for a new nexus: POWER ON, RESET, OR BUS DEVICE RESET OCCURRED pending.
    pub fn new() -> Self {
        let mut q = Self::empty();
        q.establish(UnitAttention::PowerOnReset);
        q
    }

    /// A queue with nothing pending.
    pub fn empty() -> Self {
        UaQueue { q: ArrayVec::new() }
    }

    /// Pending conditions in reporting order.
    pub fn pending(&self) -> &[UnitAttention] {
        &self.q
    }

    /// Establishes a condition (see the module documentation for order and overflow).
    pub fn establish(&mut self, ua: UnitAttention) {
        if self.q.contains(&ua) {
            return;
        }
        if self.q.is_full() {
            self.q.clear();
            self.q.push(UnitAttention::PowerOnReset);
            if ua == UnitAttention::PowerOnReset || N == 1 {
                return;
            }
        }
        let at = self
            .q
            .iter()
            .position(|p| p.precedence() > ua.precedence())
            .unwrap_or(self.q.len());
        self.q.insert(at, ua);
    }

    /// Drops every pending condition (e.g. a new power-on replaces the queue).
    pub fn clear(&mut self) {
        self.q.clear();
    }

    /// Checks a command (its CDB) against the queue, clearing what it reports.
    pub fn check(&mut self, cdb: &[u8]) -> UaCheck {
        let opcode = cdb.first().copied().unwrap_or(0);
        match opcode {
            op::INQUIRY => UaCheck::Proceed,
            op::REPORT_LUNS => {
                self.q
                    .retain(|u| *u != UnitAttention::ReportedLunsDataChanged);
                UaCheck::Proceed
            }
            op::REQUEST_SENSE => match self.pop() {
                Some(ua) => UaCheck::Deliver(ua.sense()),
                None => UaCheck::Proceed,
            },
            _ => match self.pop() {
                Some(ua) => UaCheck::Report(ua.sense()),
                None => UaCheck::Proceed,
            },
        }
    }

    fn pop(&mut self) -> Option<UnitAttention> {
        (!self.q.is_empty()).then(|| self.q.remove(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READ_10: [u8; 10] = [0x28, 0, 0, 0, 0, 0, 0, 0, 1, 0];

    #[test]
    fn first_access_reports_power_on_once() {
        let mut q: UaQueue = UaQueue::new();
        assert_eq!(q.check(&READ_10), UaCheck::Report(Sense::reset_occurred()));
        assert_eq!(q.check(&READ_10), UaCheck::Proceed);
    }

    #[test]
    fn inquiry_and_report_luns_do_not_report() {
        let mut q: UaQueue = UaQueue::new();
        q.establish(UnitAttention::ReportedLunsDataChanged);
        assert_eq!(q.check(&[op::INQUIRY, 0, 0, 0, 36, 0]), UaCheck::Proceed);
        assert_eq!(q.pending().len(), 2, "INQUIRY clears nothing");
        assert_eq!(q.check(&[op::REPORT_LUNS]), UaCheck::Proceed);
        assert_eq!(
            q.pending(),
            &[UnitAttention::PowerOnReset],
            "REPORT LUNS clears only its own condition"
        );
    }

    #[test]
    fn request_sense_delivers_and_clears() {
        let mut q: UaQueue = UaQueue::empty();
        assert_eq!(
            q.check(&[op::REQUEST_SENSE, 0, 0, 0, 18, 0]),
            UaCheck::Proceed
        );
        q.establish(UnitAttention::CapacityDataChanged);
        assert_eq!(
            q.check(&[op::REQUEST_SENSE, 0, 0, 0, 18, 0]),
            UaCheck::Deliver(Sense::capacity_changed())
        );
        assert!(q.pending().is_empty());
    }

    #[test]
    fn ordering_resets_first_then_fifo_without_duplicates() {
        let mut q: UaQueue = UaQueue::empty();
        q.establish(UnitAttention::RegistrationsPreempted);
        q.establish(UnitAttention::CapacityDataChanged);
        q.establish(UnitAttention::ItNexusLoss);
        q.establish(UnitAttention::RegistrationsPreempted);
        q.establish(UnitAttention::LogicalUnitReset);
        q.establish(UnitAttention::ReservationsReleased);
        q.establish(UnitAttention::PowerOnReset);
        assert_eq!(
            q.pending(),
            &[
                UnitAttention::PowerOnReset,
                UnitAttention::LogicalUnitReset,
                UnitAttention::ItNexusLoss,
                UnitAttention::RegistrationsPreempted,
                UnitAttention::CapacityDataChanged,
                UnitAttention::ReservationsReleased,
            ]
        );
        let mut seen = Vec::new();
        while let UaCheck::Report(s) = q.check(&READ_10) {
            seen.push((s.asc, s.ascq));
        }
        assert_eq!(
            seen,
            vec![
                (0x29, 0x00),
                (0x29, 0x03),
                (0x29, 0x07),
                (0x2A, 0x05),
                (0x2A, 0x09),
                (0x2A, 0x04)
            ]
        );
    }

    #[test]
    fn overflow_collapses_to_power_on_reset() {
        let mut q: UaQueue<3> = UaQueue::empty();
        q.establish(UnitAttention::ReservationsReleased);
        q.establish(UnitAttention::CapacityDataChanged);
        q.establish(UnitAttention::ItNexusLoss);
        assert_eq!(q.pending().len(), 3);
        q.establish(UnitAttention::ReservationsReleased); // duplicate: no overflow
        assert_eq!(q.pending().len(), 3);
        q.establish(UnitAttention::RegistrationsPreempted);
        assert_eq!(
            q.pending(),
            &[
                UnitAttention::PowerOnReset,
                UnitAttention::RegistrationsPreempted
            ]
        );
    }

    #[test]
    fn the_default_capacity_holds_every_distinct_condition() {
        let all = [
            UnitAttention::PowerOnReset,
            UnitAttention::LogicalUnitReset,
            UnitAttention::ItNexusLoss,
            UnitAttention::ModeParametersChanged,
            UnitAttention::ReservationsPreempted,
            UnitAttention::ReservationsReleased,
            UnitAttention::RegistrationsPreempted,
            UnitAttention::AsymmetricAccessStateChanged,
            UnitAttention::CapacityDataChanged,
            UnitAttention::CommandsClearedByAnotherInitiator,
            UnitAttention::InquiryDataChanged,
            UnitAttention::ReportedLunsDataChanged,
        ];
        let mut q: UaQueue = UaQueue::empty();
        for ua in all.iter().rev() {
            q.establish(*ua);
        }
        assert_eq!(q.pending().len(), all.len());
        for ua in all {
            assert_eq!(ua.sense().key, SenseKey::UnitAttention);
        }
    }

    #[test]
    fn reservation_notices_map_to_their_conditions() {
        assert_eq!(
            UnitAttention::for_notice(NoticeKind::RegistrationPreempted).code(),
            (0x2A, 0x05)
        );
        assert_eq!(
            UnitAttention::for_notice(NoticeKind::ReservationReleased).code(),
            (0x2A, 0x04)
        );
        assert_eq!(
            UnitAttention::for_notice(NoticeKind::ReservationPreempted).code(),
            (0x2A, 0x03)
        );
    }
}
