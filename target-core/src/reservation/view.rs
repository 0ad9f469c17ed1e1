//! The data path's copy of the reservation state.
//!
//! The authoritative [`Reservation`] lives on one owner (see the module documentation of
//! `reservation`); reactors keep an [`AccessView`] each, replaced by message after every
//! change, and sessions (an NVMe controller's queues, an SRP channel's nexus) keep the
//! [`Standing`] it gives them. Per command only `Standing::permits` runs: no lock, no
//! allocation, no walk over the registrants.

use super::state::{Reservation, Reserved, standing_of};
use super::types::{Initiator, Nexus, Standing};

/// An immutable snapshot of what the conflict check needs.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AccessView {
    epoch: u64,
    reserved: Option<Reserved>,
    registered: Vec<Initiator>,
    legacy: Option<Nexus>,
}

impl AccessView {
    /// A snapshot of `state`.
    pub fn of(state: &Reservation) -> AccessView {
        AccessView {
            epoch: state.epoch(),
            reserved: state.reserved(),
            registered: state.registrants().iter().map(|r| r.who).collect(),
            legacy: state.legacy_holder(),
        }
    }

    /// The state's epoch when the snapshot was taken: a session whose cached standing has
    /// another epoch recomputes it.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The standing of `who` (walks the registrant list once; call it when the view
    /// changes, not per command).
    pub fn standing(&self, who: Initiator) -> Standing {
        standing_of(
            self.reserved,
            self.registered.contains(&who),
            self.legacy,
            who,
        )
    }
}

impl AccessView {
    /// May `who` run a command of `class`? Constant time while nothing is reserved (the
    /// usual case); otherwise one walk over the registrants. No lock, no allocation.
    #[inline]
    pub fn permits(&self, who: Initiator, class: crate::reservation::CommandClass) -> bool {
        if self.reserved.is_none() && self.legacy.is_none() {
            return true;
        }
        self.standing(who).permits(class)
    }
}

/// A session's cached standing towards one volume.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CachedStanding {
    epoch: u64,
    standing: Standing,
}

impl CachedStanding {
    /// Computes the standing of `who` in `view`.
    pub fn new(view: &AccessView, who: Initiator) -> CachedStanding {
        CachedStanding {
            epoch: view.epoch(),
            standing: view.standing(who),
        }
    }

    /// The cached standing, recomputed first if `view` is newer.
    pub fn get(&mut self, view: &AccessView, who: Initiator) -> Standing {
        if self.epoch != view.epoch() {
            *self = CachedStanding::new(view, who);
        }
        self.standing
    }
}
