//! A transition between ANA states: a pure timer.
//!
//! While a transition runs, the path reports [`AnaState::Change`]; it ends when the exec
//! layer says the path is ready (e.g. the listener's in-flight I/O to the group has drained)
//! or, at the latest, at its deadline, which is never later than ANATT after it began (the
//! Linux host resets a controller whose group stays in the change state past 2 × ANATT).
//! Nothing here reads a clock: callers pass `now`.

use std::time::{Duration, Instant};

use super::state::AnaState;

/// A transition towards `to`, begun at `since`, ending at the latest at `deadline`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transition {
    to: AnaState,
    since: Instant,
    deadline: Instant,
}

impl Transition {
    /// A transition to `to` starting at `now` that lasts at most `max` (callers bound `max` by
    /// ANATT). `to` is never [`AnaState::Change`]; the caller refuses that.
    pub fn new(to: AnaState, now: Instant, max: Duration) -> Transition {
        Transition {
            to,
            since: now,
            deadline: now.checked_add(max).unwrap_or(now),
        }
    }

    /// The state the transition ends in.
    pub fn to(&self) -> AnaState {
        self.to
    }

    /// When it began.
    pub fn since(&self) -> Instant {
        self.since
    }

    /// When it completes if nothing ends it earlier.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// `true` once `now` has reached the deadline.
    pub fn is_due(&self, now: Instant) -> bool {
        now >= self.deadline
    }

    /// What the path reports at `now`: change until the deadline, then the target state.
    pub fn reported_at(&self, now: Instant) -> AnaState {
        if self.is_due(now) {
            self.to
        } else {
            AnaState::Change
        }
    }

    /// Time left until the deadline (zero once due).
    pub fn remaining(&self, now: Instant) -> Duration {
        self.deadline.saturating_duration_since(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reports_change_until_the_deadline_then_the_target() {
        let t0 = Instant::now();
        let t = Transition::new(AnaState::Optimized, t0, Duration::from_millis(1500));
        assert_eq!(t.to(), AnaState::Optimized);
        assert_eq!(t.since(), t0);
        assert_eq!(t.deadline(), t0 + Duration::from_millis(1500));
        assert_eq!(t.reported_at(t0), AnaState::Change);
        assert_eq!(
            t.reported_at(t0 + Duration::from_millis(1499)),
            AnaState::Change
        );
        assert!(!t.is_due(t0 + Duration::from_millis(1499)));
        assert_eq!(
            t.remaining(t0 + Duration::from_millis(1000)),
            Duration::from_millis(500)
        );
        assert!(t.is_due(t0 + Duration::from_millis(1500)));
        assert_eq!(
            t.reported_at(t0 + Duration::from_millis(1500)),
            AnaState::Optimized
        );
        assert_eq!(t.remaining(t0 + Duration::from_secs(9)), Duration::ZERO);
    }

    #[test]
    fn zero_length_transition_is_due_at_once() {
        let t0 = Instant::now();
        let t = Transition::new(AnaState::Inaccessible, t0, Duration::ZERO);
        assert!(t.is_due(t0));
        assert_eq!(t.reported_at(t0), AnaState::Inaccessible);
    }
}
