//! The reservation state of one logical volume and its operations.
//!
//! The operations follow SPC-4 5.12 (persistent reservations) and the NVMe base
//! specification's reservation section; where the two differ only in a code point the
//! protocol translations map the neutral [`PrError`] to their own status. Every operation
//! either succeeds and returns its [`Effects`] or fails and leaves the state untouched.

use super::types::{CommandClass, Initiator, Nexus, ResvType, Role, Standing};

/// Most registrants one volume keeps (SCSI: INSUFFICIENT REGISTRATION RESOURCES beyond it).
pub const MAX_REGISTRANTS: usize = 128;

/// One registration: who, and the reservation key it registered.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Registrant {
    /// The registered host or I_T nexus.
    pub who: Initiator,
    /// Its reservation key (never 0).
    pub key: u64,
}

/// The persistent reservation currently held.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Reserved {
    /// Its type.
    pub rtype: ResvType,
    /// The holder; `None` for All Registrants types, where every registrant holds it.
    pub holder: Option<Initiator>,
}

impl Reserved {
    /// A reservation of `rtype` taken by `who` (held by every registrant for All
    /// Registrants types).
    pub fn by(rtype: ResvType, who: Initiator) -> Reserved {
        Reserved {
            rtype,
            holder: (!rtype.all_registrants()).then_some(who),
        }
    }
}

/// Why a reservation operation failed. The state is unchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum PrError {
    /// Not registered, wrong key, reservation held by someone else, or another I_T
    /// nexus's SPC-2 reservation: NVMe Reservation Conflict (83h), SCSI RESERVATION
    /// CONFLICT.
    #[error("reservation conflict")]
    Conflict,
    /// A release by the holder named a type other than the reservation's: NVMe Invalid
    /// Field in Command, SCSI ILLEGAL REQUEST / INVALID RELEASE OF PERSISTENT RESERVATION.
    #[error("the release names another reservation type")]
    InvalidReleaseType,
    /// Preempt with a zero preempt key while no All Registrants reservation is held: NVMe
    /// Invalid Field in Command, SCSI INVALID FIELD IN PARAMETER LIST.
    #[error("preempt with a zero reservation key")]
    ZeroPreemptKey,
    /// A new registration key of zero (NVMe Register / Replace): Invalid Field in Command.
    #[error("a reservation key of zero cannot be registered")]
    ZeroNewKey,
    /// Persist through power loss was asked for but the volume has no `ptpl_file`: NVMe
    /// Invalid Field in Command, SCSI INVALID FIELD IN PARAMETER LIST (APTPL).
    #[error("persist through power loss is not available on this volume")]
    PtplNotCapable,
    /// The registrant list is full: SCSI INSUFFICIENT REGISTRATION RESOURCES, NVMe Internal
    /// Error.
    #[error("no room for another registrant")]
    NoResources,
}

/// What happened to whom because of an operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NoticeKind {
    /// The recipient's registration was removed by a preempt (NVMe log page type 1,
    /// SCSI UA REGISTRATIONS PREEMPTED 2Ah/05h).
    RegistrationPreempted,
    /// The reservation was released (or changed type) and the recipient is still a
    /// registrant (NVMe type 2, SCSI UA RESERVATIONS RELEASED 2Ah/04h).
    ReservationReleased,
    /// The reservation and every registration were cleared (NVMe type 3, SCSI UA
    /// RESERVATIONS PREEMPTED 2Ah/03h).
    ReservationPreempted,
}

/// One notification to deliver: an NVMe Reservation Notification log page on every
/// controller of the host, or a unit attention on the I_T nexus.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Notice {
    /// The recipient (never the requester of the operation).
    pub to: Initiator,
    /// What happened.
    pub kind: NoticeKind,
}

/// The side effects of a successful operation, for the caller to carry out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Effects {
    /// Notifications to deliver.
    pub notices: Vec<Notice>,
    /// Preempt and Abort: the requesters whose outstanding commands to this volume must be
    /// aborted before the command completes (never the requester itself).
    pub aborted: Vec<Initiator>,
    /// Registrations, the reservation or the SPC-2 reservation changed: republish the
    /// access view to the data path before completing the command.
    pub changed: bool,
    /// Write the `ptpl_file` (the persisted state, or the empty file when persistence was
    /// just turned off) before completing the command.
    pub persist: bool,
}

/// How a registration's current key is checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyCheck {
    /// The registered key must equal this value.
    Match(u64),
    /// Ignore the registered key (NVMe IEKEY, SCSI REGISTER AND IGNORE EXISTING KEY).
    Ignore,
}

impl KeyCheck {
    fn passes(self, key: u64) -> bool {
        match self {
            KeyCheck::Match(k) => k == key,
            KeyCheck::Ignore => true,
        }
    }
}

/// A registration change, protocol neutral. NVMe Reservation Register's RREGA maps to it
/// directly; SCSI REGISTER / REGISTER AND IGNORE EXISTING KEY map to it depending on whether
/// the nexus is registered (see `scsi::pr_out`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RegisterAction {
    /// Register `new_key`. Already registered with the same key: success, no change;
    /// with another key: conflict.
    Register {
        /// The key to register (not 0).
        new_key: u64,
    },
    /// Remove the requester's registration.
    Unregister {
        /// The current key check.
        current: KeyCheck,
    },
    /// Replace the requester's key; if not registered and the check is
    /// [`KeyCheck::Ignore`], register instead.
    Replace {
        /// The current key check.
        current: KeyCheck,
        /// The new key (not 0).
        new_key: u64,
    },
}

/// A change of the persist-through-power-loss state requested with a registration (NVMe
/// CPTPL, SCSI APTPL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PtplChange {
    /// Leave it as it is (NVMe CPTPL 00b).
    Keep,
    /// Set it (NVMe CPTPL 10b/11b; SCSI APTPL on every REGISTER).
    Set(bool),
}

/// What an SPC-2 RESERVE or RELEASE did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum LegacyOutcome {
    /// GOOD, and the SPC-2 reservation changed.
    Changed,
    /// GOOD, nothing changed (SPC-4 5.13.3 exceptions, or a RELEASE by a non-holder).
    NoChange,
}

/// The reservation state of one logical volume (bdev), shared by every NVMe controller and
/// SCSI I_T nexus that reaches it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reservation {
    registrants: Vec<Registrant>,
    reserved: Option<Reserved>,
    generation: u32,
    ptpl: bool,
    ptpl_capable: bool,
    legacy: Option<Nexus>,
    epoch: u64,
    max_registrants: usize,
}

impl Reservation {
    /// An empty state. `ptpl_capable` is true when the volume has a `ptpl_file`.
    pub fn new(ptpl_capable: bool) -> Reservation {
        Reservation {
            registrants: Vec::new(),
            reserved: None,
            generation: 0,
            ptpl: false,
            ptpl_capable,
            legacy: None,
            epoch: 0,
            max_registrants: MAX_REGISTRANTS,
        }
    }

    /// The same with a smaller registrant limit (tests).
    pub fn with_max_registrants(mut self, n: usize) -> Reservation {
        self.max_registrants = n.clamp(1, MAX_REGISTRANTS);
        self
    }

    /// Rebuilds a state from persisted parts (see `ptpl`): the generation restarts at 0, as
    /// after a power on.
    pub(crate) fn restored(
        ptpl_capable: bool,
        ptpl: bool,
        registrants: Vec<Registrant>,
        reserved: Option<Reserved>,
    ) -> Reservation {
        Reservation {
            registrants,
            reserved,
            ptpl,
            ..Reservation::new(ptpl_capable)
        }
    }

    /// Registrants in registration order.
    pub fn registrants(&self) -> &[Registrant] {
        &self.registrants
    }

    /// The persistent reservation held, if any.
    pub fn reserved(&self) -> Option<Reserved> {
        self.reserved
    }

    /// PRgeneration / NVMe GEN: bumped by every successful registration change, clear and
    /// preempt (not by reserve or release).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// Persist through power loss is on (SCSI PTPL_A, NVMe PTPLS).
    pub fn ptpl(&self) -> bool {
        self.ptpl
    }

    /// The volume can persist (it has a `ptpl_file`): SCSI PTPL_C, NVMe RESCAP bit 0.
    pub fn ptpl_capable(&self) -> bool {
        self.ptpl_capable
    }

    /// The I_T nexus holding an SPC-2 reservation.
    pub fn legacy_holder(&self) -> Option<Nexus> {
        self.legacy
    }

    /// Bumped by every change that can change someone's [`Standing`]; sessions recompute
    /// their standing when it moves.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The requester's registered key.
    pub fn key_of(&self, who: Initiator) -> Option<u64> {
        self.find(who).map(|i| self.registrants[i].key)
    }

    /// The holder's key: for a single-holder reservation the holder's registered key, for
    /// All Registrants types 0 (as SPC-4 reports it).
    pub fn reservation_key(&self) -> Option<u64> {
        let r = self.reserved?;
        Some(match r.holder {
            Some(h) => self.key_of(h).unwrap_or(0),
            None => 0,
        })
    }

    /// Does `who` hold the reservation (any registrant, for All Registrants types)?
    pub fn is_holder(&self, who: Initiator) -> bool {
        match self.reserved {
            Some(Reserved {
                holder: Some(h), ..
            }) => h == who,
            Some(Reserved { holder: None, .. }) => self.find(who).is_some(),
            None => false,
        }
    }

    /// The requester's standing (see [`Standing`]).
    pub fn standing(&self, who: Initiator) -> Standing {
        standing_of(self.reserved, self.find(who).is_some(), self.legacy, who)
    }

    /// The conflict check: may `who` run a command of `class` now?
    pub fn permits(&self, who: Initiator, class: CommandClass) -> bool {
        self.standing(who).permits(class)
    }

    /// Turns persistence on or off outside a registration (NVMe Set Features Reservation
    /// Persistence).
    pub fn set_ptpl(&mut self, on: bool) -> Result<Effects, PrError> {
        if on && !self.ptpl_capable {
            return Err(PrError::PtplNotCapable);
        }
        let mut fx = Effects::default();
        if self.ptpl != on {
            self.ptpl = on;
            fx.persist = true;
        }
        Ok(fx)
    }

    /// Registration changes (NVMe Reservation Register; SCSI REGISTER and REGISTER AND
    /// IGNORE EXISTING KEY). Unregistering the holder of a single-holder reservation
    /// releases it (registrants get Reservation Released for Registrants Only types); the
    /// last registrant leaving an All Registrants reservation releases it.
    pub fn register(
        &mut self,
        who: Initiator,
        action: RegisterAction,
        ptpl: PtplChange,
    ) -> Result<Effects, PrError> {
        if ptpl == PtplChange::Set(true) && !self.ptpl_capable {
            return Err(PrError::PtplNotCapable);
        }
        self.check_legacy(who)?;
        let mut fx = Effects::default();
        let at = self.find(who);
        match (action, at) {
            (RegisterAction::Register { new_key: 0 }, _)
            | (RegisterAction::Replace { new_key: 0, .. }, _) => return Err(PrError::ZeroNewKey),
            (RegisterAction::Register { new_key }, Some(i)) => {
                if self.registrants[i].key != new_key {
                    return Err(PrError::Conflict);
                }
            }
            (RegisterAction::Register { new_key }, None)
            | (
                RegisterAction::Replace {
                    current: KeyCheck::Ignore,
                    new_key,
                },
                None,
            ) => {
                if self.registrants.len() >= self.max_registrants {
                    return Err(PrError::NoResources);
                }
                self.registrants.push(Registrant { who, key: new_key });
                fx.changed = true;
            }
            (RegisterAction::Replace { .. }, None) | (RegisterAction::Unregister { .. }, None) => {
                return Err(PrError::Conflict);
            }
            (RegisterAction::Replace { current, new_key }, Some(i)) => {
                if !current.passes(self.registrants[i].key) {
                    return Err(PrError::Conflict);
                }
                if self.registrants[i].key != new_key {
                    self.registrants[i].key = new_key;
                    fx.changed = true;
                }
            }
            (RegisterAction::Unregister { current }, Some(i)) => {
                if !current.passes(self.registrants[i].key) {
                    return Err(PrError::Conflict);
                }
                self.unregister_at(i, who, &mut fx);
                fx.changed = true;
            }
        }
        self.generation = self.generation.wrapping_add(1);
        if let PtplChange::Set(on) = ptpl {
            if self.ptpl != on {
                self.ptpl = on;
                fx.persist = true;
            }
        }
        Ok(self.finish(fx))
    }

    /// Reserve / Acquire: take a reservation of `rtype`. The holder asking again for the
    /// same type succeeds without a change; any other existing reservation conflicts.
    pub fn reserve(
        &mut self,
        who: Initiator,
        key: u64,
        rtype: ResvType,
    ) -> Result<Effects, PrError> {
        self.check_registered(who, KeyCheck::Match(key))?;
        let mut fx = Effects::default();
        match self.reserved {
            Some(r) if r.rtype == rtype && self.is_holder(who) => {}
            Some(_) => return Err(PrError::Conflict),
            None => {
                self.reserved = Some(Reserved::by(rtype, who));
                fx.changed = true;
            }
        }
        Ok(self.finish(fx))
    }

    /// Release by the holder. A release by a registrant that is not the holder, or with no
    /// reservation, succeeds without a change. Releasing a Registrants Only or All
    /// Registrants reservation sends Reservation Released to every other registrant.
    pub fn release(
        &mut self,
        who: Initiator,
        key: u64,
        rtype: ResvType,
    ) -> Result<Effects, PrError> {
        self.check_registered(who, KeyCheck::Match(key))?;
        let mut fx = Effects::default();
        let Some(r) = self.reserved else {
            return Ok(fx);
        };
        if !self.is_holder(who) {
            return Ok(fx);
        }
        if r.rtype != rtype {
            return Err(PrError::InvalidReleaseType);
        }
        self.reserved = None;
        fx.changed = true;
        if r.rtype.registrants_only() || r.rtype.all_registrants() {
            self.notify_registrants(who, NoticeKind::ReservationReleased, &mut fx);
        }
        Ok(self.finish(fx))
    }

    /// Clear: release the reservation and remove every registration. Every other
    /// registrant gets Reservation Preempted.
    pub fn clear(&mut self, who: Initiator, key: u64) -> Result<Effects, PrError> {
        self.check_registered(who, KeyCheck::Match(key))?;
        let mut fx = Effects::default();
        self.notify_registrants(who, NoticeKind::ReservationPreempted, &mut fx);
        self.registrants.clear();
        self.reserved = None;
        fx.changed = true;
        self.generation = self.generation.wrapping_add(1);
        Ok(self.finish(fx))
    }

    /// Preempt (and abort). `victim` is the preempt reservation key (NVMe PRKEY, SCSI
    /// SERVICE ACTION RESERVATION KEY); `rtype` the type of the reservation to establish
    /// when the holder is preempted.
    ///
    /// - All Registrants reservation, `victim` 0: the requester takes a new reservation of
    ///   `rtype` and every other registration is removed.
    /// - `victim` is the single holder's key: the reservation moves to the requester with
    ///   `rtype`, every other registration with that key is removed; if the type changed,
    ///   the remaining registrants get Reservation Released. The holder preempting itself
    ///   just changes the type.
    /// - Otherwise (no reservation, or `victim` names non-holders): every registration with
    ///   key `victim` is removed, the requester's own included; the reservation stays. No
    ///   registration with that key: conflict. `victim` 0 here: [`PrError::ZeroPreemptKey`].
    ///
    /// Removed registrants (but the requester) get Registration Preempted; with `abort` they
    /// are listed in [`Effects::aborted`].
    pub fn preempt(
        &mut self,
        who: Initiator,
        key: u64,
        victim: u64,
        rtype: ResvType,
        abort: bool,
    ) -> Result<Effects, PrError> {
        self.check_registered(who, KeyCheck::Match(key))?;
        let mut fx = Effects::default();
        match self.reserved {
            Some(Reserved { holder: None, .. }) if victim == 0 => {
                self.remove_matching(who, |r| r.who != who, abort, &mut fx);
                self.reserved = Some(Reserved::by(rtype, who));
            }
            Some(Reserved {
                rtype: old,
                holder: Some(h),
            }) if victim != 0 && self.key_of(h) == Some(victim) => {
                self.remove_matching(who, |r| r.key == victim && r.who != who, abort, &mut fx);
                self.reserved = Some(Reserved::by(rtype, who));
                if old != rtype {
                    self.notify_registrants(who, NoticeKind::ReservationReleased, &mut fx);
                }
            }
            _ if victim == 0 => return Err(PrError::ZeroPreemptKey),
            _ => {
                if !self.registrants.iter().any(|r| r.key == victim) {
                    return Err(PrError::Conflict);
                }
                self.remove_matching(who, |r| r.key == victim, abort, &mut fx);
                if let Some(Reserved { holder: None, .. }) = self.reserved {
                    if self.registrants.is_empty() {
                        self.reserved = None;
                    }
                }
            }
        }
        fx.changed = true;
        self.generation = self.generation.wrapping_add(1);
        Ok(self.finish(fx))
    }

    /// SPC-2 RESERVE(6/10) from `nexus`, with the SPC-4 5.13.3 exceptions for logical units
    /// that also have persistent reservations (CRH = 1):
    /// - from the persistent reservation holder, or from a registered nexus while a
    ///   Registrants Only or All Registrants reservation exists: GOOD, nothing changes;
    /// - from anyone else while any registration exists: conflict;
    /// - otherwise SPC-2: conflict if another nexus holds the SPC-2 reservation.
    pub fn legacy_reserve(&mut self, nexus: Nexus) -> Result<LegacyOutcome, PrError> {
        if let Some(o) = self.legacy_exception(nexus)? {
            return Ok(o);
        }
        match self.legacy {
            Some(l) if l != nexus => Err(PrError::Conflict),
            Some(_) => Ok(LegacyOutcome::NoChange),
            None => {
                self.legacy = Some(nexus);
                self.epoch += 1;
                Ok(LegacyOutcome::Changed)
            }
        }
    }

    /// SPC-2 RELEASE(6/10) from `nexus`, with the same exceptions as
    /// [`Reservation::legacy_reserve`]. A release by a nexus that holds nothing is GOOD.
    pub fn legacy_release(&mut self, nexus: Nexus) -> Result<LegacyOutcome, PrError> {
        if let Some(o) = self.legacy_exception(nexus)? {
            return Ok(o);
        }
        if self.legacy == Some(nexus) {
            self.legacy = None;
            self.epoch += 1;
            return Ok(LegacyOutcome::Changed);
        }
        Ok(LegacyOutcome::NoChange)
    }

    /// The I_T nexus is gone (logout, channel loss): its SPC-2 reservation goes with it.
    /// Persistent registrations survive. Returns whether anything changed.
    pub fn nexus_lost(&mut self, nexus: Nexus) -> bool {
        if self.legacy == Some(nexus) {
            self.legacy = None;
            self.epoch += 1;
            return true;
        }
        false
    }

    /// Logical unit reset: clears the SPC-2 reservation (persistent reservations are not
    /// affected by resets). Returns whether anything changed.
    pub fn lu_reset(&mut self) -> bool {
        if self.legacy.take().is_some() {
            self.epoch += 1;
            return true;
        }
        false
    }

    // ----- internals -----

    fn find(&self, who: Initiator) -> Option<usize> {
        self.registrants.iter().position(|r| r.who == who)
    }

    fn check_legacy(&self, who: Initiator) -> Result<(), PrError> {
        match self.legacy {
            Some(l) if Initiator::Scsi(l) != who => Err(PrError::Conflict),
            _ => Ok(()),
        }
    }

    fn check_registered(&self, who: Initiator, check: KeyCheck) -> Result<(), PrError> {
        self.check_legacy(who)?;
        match self.find(who) {
            Some(i) if check.passes(self.registrants[i].key) => Ok(()),
            _ => Err(PrError::Conflict),
        }
    }

    fn legacy_exception(&self, nexus: Nexus) -> Result<Option<LegacyOutcome>, PrError> {
        let who = Initiator::Scsi(nexus);
        if self.find(who).is_some() {
            let shared = self
                .reserved
                .is_some_and(|r| r.rtype.registrants_only() || r.rtype.all_registrants());
            if self.is_holder(who) || shared {
                return Ok(Some(LegacyOutcome::NoChange));
            }
            return Err(PrError::Conflict);
        }
        if !self.registrants.is_empty() {
            return Err(PrError::Conflict);
        }
        Ok(None)
    }

    /// Removes the registration at `i` on the requester's own behalf (unregister).
    fn unregister_at(&mut self, i: usize, who: Initiator, fx: &mut Effects) {
        let gone = self.registrants.remove(i);
        match self.reserved {
            Some(Reserved { holder: None, .. }) if self.registrants.is_empty() => {
                self.reserved = None;
            }
            Some(Reserved {
                rtype,
                holder: Some(h),
            }) if h == gone.who => {
                self.reserved = None;
                if rtype.registrants_only() {
                    self.notify_registrants(who, NoticeKind::ReservationReleased, fx);
                }
            }
            _ => {}
        }
    }

    /// Removes every registration `pred` selects; all but the requester get Registration
    /// Preempted (and are aborted with `abort`).
    fn remove_matching(
        &mut self,
        who: Initiator,
        pred: impl Fn(&Registrant) -> bool,
        abort: bool,
        fx: &mut Effects,
    ) {
        self.registrants.retain(|r| {
            if !pred(r) {
                return true;
            }
            if r.who != who {
                fx.notices.push(Notice {
                    to: r.who,
                    kind: NoticeKind::RegistrationPreempted,
                });
                if abort {
                    fx.aborted.push(r.who);
                }
            }
            false
        });
    }

    fn notify_registrants(&self, who: Initiator, kind: NoticeKind, fx: &mut Effects) {
        fx.notices.extend(
            self.registrants
                .iter()
                .filter(|r| r.who != who)
                .map(|r| Notice { to: r.who, kind }),
        );
    }

    fn finish(&mut self, mut fx: Effects) -> Effects {
        if fx.changed {
            self.epoch += 1;
            fx.persist |= self.ptpl;
        }
        fx
    }
}

/// The standing of `who` given the parts of a state (shared by [`Reservation`] and the
/// data-path snapshot).
pub(crate) fn standing_of(
    reserved: Option<Reserved>,
    registered: bool,
    legacy: Option<Nexus>,
    who: Initiator,
) -> Standing {
    let role = match reserved {
        Some(Reserved {
            holder: Some(h), ..
        }) if h == who => Role::Holder,
        Some(Reserved { holder: None, .. }) if registered => Role::Holder,
        _ if registered => Role::Registrant,
        _ => Role::NonRegistrant,
    };
    Standing {
        rtype: reserved.map(|r| r.rtype),
        role,
        legacy_conflict: legacy.is_some_and(|l| Initiator::Scsi(l) != who),
    }
}
