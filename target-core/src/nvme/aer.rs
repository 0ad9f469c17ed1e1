//! Asynchronous Event Requests: parked AER slots, pending events, configuration and masking.
//!
//! Behaviour (reference §4.8, nvmet): an AER is held without a response until an event occurs;
//! at most AERL+1 are held (more get AER Limit Exceeded). An event is only generated when enabled
//! by Set Features 0Bh, and once one of a type has been generated, further events of that type
//! are suppressed until the host reads the associated log page with RAE = 0.

use arrayvec::ArrayVec;

use super::cqe::Cqe;
use super::spec::{Status, aen};

/// AERL (0's based) advertised in Identify: 4 outstanding requests.
pub const AERL: u8 = 3;
const MAX_SLOTS: usize = AERL as usize + 1;
const MAX_PENDING: usize = 8;

/// An asynchronous event the controller can report.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AsyncEvent {
    /// Namespace attribute changed (read LID 04h).
    NamespaceAttributeChanged,
    /// Discovery log page changed (read LID 70h).
    DiscoveryLogChanged,
    /// Asymmetric Namespace Access change (read LID 0Ch).
    AnaChange,
    /// Reservation Log Page Available (I/O command specific, read LID 80h). Not gated by
    /// Set Features 0Bh: the Reservation Notification Mask (82h) filters these.
    ReservationLog,
}

/// The internal masking bit of [`AsyncEvent::ReservationLog`] (no Async Event Configuration
/// bit enables it; bit 30 is reserved there).
const RESERVATION_LOG_BIT: u32 = 1 << 30;

impl AsyncEvent {
    /// The Async Event Configuration bit that enables this event (also its masking bit).
    pub fn config_bit(self) -> u32 {
        match self {
            AsyncEvent::NamespaceAttributeChanged => aen::CFG_NS_ATTR,
            AsyncEvent::DiscoveryLogChanged => aen::CFG_DISCOVERY_CHANGE,
            AsyncEvent::AnaChange => super::ana::OAES_ANA_CHANGE,
            AsyncEvent::ReservationLog => RESERVATION_LOG_BIT,
        }
    }

    /// Completion DW0: type | info << 8 | log page << 16.
    pub fn dw0(self) -> u32 {
        if self == AsyncEvent::ReservationLog {
            return super::resv_log::AEN_DW0;
        }
        let (info, lid) = match self {
            AsyncEvent::NamespaceAttributeChanged => (aen::NOTICE_NS_ATTR_CHANGED, 0x04u8),
            AsyncEvent::DiscoveryLogChanged => (aen::NOTICE_DISCOVERY_CHANGED, 0x70u8),
            AsyncEvent::AnaChange => (super::ana::NOTICE_ANA_CHANGE, super::ana::LID_ANA),
            AsyncEvent::ReservationLog => (0, super::resv_log::LID_RESERVATION_NOTIFICATION),
        };
        u32::from(aen::TYPE_NOTICE) | u32::from(info) << 8 | u32::from(lid) << 16
    }
}

/// A parked AER to complete now: send this on the admin queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AerCompletion {
    /// CID of the parked AER.
    pub cid: u16,
    /// Event information (DW0).
    pub dw0: u32,
}

impl AerCompletion {
    /// The CQE (SQID 0, success) with the given SQ head.
    pub fn cqe(&self, sqhd: u16) -> Cqe {
        Cqe {
            dw0: self.dw0,
            dw1: 0,
            sqhd,
            sqid: 0,
            cid: self.cid,
            status: Status::SUCCESS,
        }
    }
}

/// What happened to a submitted AER.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AerSubmit {
    /// Complete it now with this DW0 (an event was pending).
    Complete(u32),
    /// Held until an event.
    Parked,
}

/// AER state of one controller.
#[derive(Clone, Debug, Default)]
pub(crate) struct AerState {
    slots: ArrayVec<u16, MAX_SLOTS>,
    pending: ArrayVec<u32, MAX_PENDING>,
    enabled: u32,
    masked: u32,
}

impl AerState {
    /// Handles an AER command.
    pub fn submit(&mut self, cid: u16) -> Result<AerSubmit, Status> {
        if !self.pending.is_empty() {
            return Ok(AerSubmit::Complete(self.pending.remove(0)));
        }
        self.slots
            .try_push(cid)
            .map_err(|_| Status::AER_LIMIT_EXCEEDED)?;
        Ok(AerSubmit::Parked)
    }

    /// Reports an event; returns the parked AER to complete, if any.
    pub fn post(&mut self, ev: AsyncEvent) -> Option<AerCompletion> {
        let bit = ev.config_bit();
        let enabled = ev == AsyncEvent::ReservationLog || self.enabled & bit != 0;
        if !enabled || self.masked & bit != 0 {
            return None;
        }
        self.masked |= bit;
        if self.slots.is_empty() {
            // Kept until an AER arrives; the mask bounds this to one per event type.
            let _ = self.pending.try_push(ev.dw0());
            return None;
        }
        let cid = self.slots.remove(0);
        Some(AerCompletion { cid, dw0: ev.dw0() })
    }

    /// Reports an event for the next AER the host submits (not a parked one): for an event
    /// raised while a command runs, which cannot complete a parked AER itself.
    pub fn post_queued(&mut self, ev: AsyncEvent) {
        let bit = ev.config_bit();
        if self.masked & bit == 0 {
            self.masked |= bit;
            let _ = self.pending.try_push(ev.dw0());
        }
    }

    /// The host read the event's log page with RAE = 0: unmask the event.
    pub fn clear(&mut self, ev: AsyncEvent) {
        self.masked &= !ev.config_bit();
    }

    /// Set Features 0Bh.
    pub fn set_enabled(&mut self, mask: u32) {
        self.enabled = mask;
    }

    /// Get Features 0Bh.
    pub fn enabled(&self) -> u32 {
        self.enabled
    }

    /// Removes a parked AER (for Abort); true if it was parked.
    pub fn cancel(&mut self, cid: u16) -> bool {
        match self.slots.iter().position(|&c| c == cid) {
            Some(i) => {
                self.slots.remove(i);
                true
            }
            None => false,
        }
    }

    /// CIDs of the parked AERs.
    pub fn parked(&self) -> &[u16] {
        &self.slots
    }

    /// Controller reset: drop parked AERs, pending events, configuration and masks.
    pub fn reset(&mut self) {
        *self = AerState::default();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dw0_values() {
        assert_eq!(AsyncEvent::NamespaceAttributeChanged.dw0(), 0x0004_0002);
        assert_eq!(AsyncEvent::DiscoveryLogChanged.dw0(), 0x0070_F002);
        assert_eq!(
            AsyncEvent::AnaChange.dw0(),
            super::super::ana::ANA_CHANGE_DW0
        );
        assert_eq!(AsyncEvent::AnaChange.dw0(), 0x000C_0302);
    }

    #[test]
    fn park_then_event() {
        let mut a = AerState::default();
        a.set_enabled(aen::CFG_NS_ATTR);
        assert_eq!(a.submit(0x1F), Ok(AerSubmit::Parked));
        let c = a.post(AsyncEvent::NamespaceAttributeChanged).unwrap();
        assert_eq!(
            c,
            AerCompletion {
                cid: 0x1F,
                dw0: 0x0004_0002
            }
        );
        let cqe = c.cqe(7);
        assert_eq!((cqe.cid, cqe.sqid, cqe.sqhd), (0x1F, 0, 7));
        // Masked until cleared.
        assert_eq!(a.submit(0x101F), Ok(AerSubmit::Parked));
        assert_eq!(a.post(AsyncEvent::NamespaceAttributeChanged), None);
        a.clear(AsyncEvent::NamespaceAttributeChanged);
        assert_eq!(
            a.post(AsyncEvent::NamespaceAttributeChanged).unwrap().cid,
            0x101F
        );
    }

    #[test]
    fn disabled_events_dropped() {
        let mut a = AerState::default();
        a.submit(1).unwrap();
        assert_eq!(a.post(AsyncEvent::NamespaceAttributeChanged), None);
        a.set_enabled(aen::CFG_DISCOVERY_CHANGE);
        assert_eq!(a.post(AsyncEvent::NamespaceAttributeChanged), None);
        assert!(a.post(AsyncEvent::DiscoveryLogChanged).is_some());
    }

    #[test]
    fn pending_event_completes_next_aer() {
        let mut a = AerState::default();
        a.set_enabled(aen::CFG_NS_ATTR);
        assert_eq!(a.post(AsyncEvent::NamespaceAttributeChanged), None);
        assert_eq!(a.submit(5), Ok(AerSubmit::Complete(0x0004_0002)));
        assert_eq!(a.submit(6), Ok(AerSubmit::Parked));
    }

    #[test]
    fn limit_and_cancel() {
        let mut a = AerState::default();
        for cid in 0..4 {
            assert_eq!(a.submit(cid), Ok(AerSubmit::Parked));
        }
        assert_eq!(a.submit(9), Err(Status::AER_LIMIT_EXCEEDED));
        assert!(a.cancel(2));
        assert!(!a.cancel(2));
        assert_eq!(a.parked(), &[0, 1, 3]);
        a.reset();
        assert!(a.parked().is_empty());
        assert_eq!(a.enabled(), 0);
    }
}
