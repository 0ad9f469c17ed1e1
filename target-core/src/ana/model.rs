//! The ANA model of one subsystem: groups, namespaces, listeners and the state of every
//! listener for every group.
//!
//! Every change is transactional: it is applied to a copy, the copy is checked against the
//! invariants ([`AnaModel::check`]), and only then replaces the model. The events of a change
//! are the difference between the old and the new model as hosts see it (see
//! [`super::events`]).

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, Instant};

use super::error::AnaError;
use super::events::{AnaEvents, diff};
use super::state::AnaState;
use super::transition::Transition;

/// An ANA group identifier, 1..=ANAGRPMAX (0 is not a group).
pub type AnaGroupId = u32;

/// ANAGRPMAX may not exceed this: the ANA log page header counts descriptors in 16 bits.
pub const ANAGRPMAX_LIMIT: u32 = 0xFFFF;

/// ANATT rtgt reports unless configured otherwise (seconds; SPDK and nvmet report 10).
pub const DEFAULT_ANATT_SECS: u8 = 10;

/// A listener of the subsystem, as the subsystem model names it (an index it assigns; the
/// model never sees addresses).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerId(pub u32);

impl fmt::Display for ListenerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{}", self.0)
    }
}

/// Subsystem-wide ANA parameters, fixed at creation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnaConfig {
    /// ANAGRPMAX (and NANAGRPID): the highest group id, 1..=[`ANAGRPMAX_LIMIT`]. SPDK uses the
    /// subsystem's `max_namespaces`, so that the default group of a namespace (its NSID) is
    /// always valid.
    pub anagrpmax: u32,
    /// ANATT in seconds, 1..=255: the longest a transition may last, and the implicit
    /// transition time REPORT TARGET PORT GROUPS reports.
    pub anatt_secs: u8,
}

impl AnaConfig {
    /// `anagrpmax` groups with the default ANATT.
    pub fn new(anagrpmax: u32) -> AnaConfig {
        AnaConfig {
            anagrpmax,
            anatt_secs: DEFAULT_ANATT_SECS,
        }
    }

    /// ANATT as a duration.
    pub fn anatt(&self) -> Duration {
        Duration::from_secs(u64::from(self.anatt_secs))
    }

    fn validate(&self) -> Result<(), AnaError> {
        if !(1..=ANAGRPMAX_LIMIT).contains(&self.anagrpmax) {
            return Err(AnaError::GroupLimit(self.anagrpmax));
        }
        if self.anatt_secs == 0 {
            return Err(AnaError::ZeroAnatt);
        }
        Ok(())
    }

    fn check_group(&self, group: AnaGroupId) -> Result<(), AnaError> {
        if group == 0 || group > self.anagrpmax {
            return Err(AnaError::InvalidGroup {
                group,
                max: self.anagrpmax,
            });
        }
        Ok(())
    }
}

/// Whether writes to a namespace's backend through more than one path at a time are safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ActiveActive {
    /// Several optimized paths may write at once (e.g. a block device without a cache in
    /// rtgt, shared by the gateways).
    Safe,
    /// One path owns the namespace's group: at most one listener may be optimized for it (e.g.
    /// an RBD image with exclusive-lock, or a backend with a volatile cache in the target).
    Unsafe,
}

/// The SCSI identity of a listener that is an SRP target port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ScsiPort {
    /// RELATIVE TARGET PORT IDENTIFIER (VPD 83h type 4, RTPG port descriptors), 1..=65535,
    /// unique in the subsystem — and across the gateways of a group.
    pub relative_port: u16,
    /// The target port group this port alone forms (VPD 83h type 5, RTPG), 1..=65535, unique
    /// in the subsystem — and across the gateways of a group.
    pub tpg_id: u16,
}

/// One listener's state for one group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Path {
    /// The state asked for (where a running transition ends).
    pub target: AnaState,
    /// A running transition: the path reports change until it ends.
    pub transition: Option<Transition>,
    /// The change count when this descriptor of the listener's log page last changed.
    pub chgcnt: u64,
    /// The state was changed since the listener was added (RTPG STATUS CODE 02h).
    pub altered: bool,
}

impl Path {
    /// What the path reports now.
    pub fn reported(&self) -> AnaState {
        match self.transition {
            Some(_) => AnaState::Change,
            None => self.target,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Listener {
    pub scsi: Option<ScsiPort>,
    /// Indexed by group id − 1, ANAGRPMAX entries.
    pub paths: Vec<Path>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Namespace {
    pub group: AnaGroupId,
    pub aa: ActiveActive,
}

/// The ANA model of one subsystem (sans-I/O; owned by the control path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaModel {
    pub(super) cfg: AnaConfig,
    pub(super) listeners: BTreeMap<ListenerId, Listener>,
    pub(super) namespaces: BTreeMap<u32, Namespace>,
    /// The ANA log page header's change count.
    pub(super) chgcnt: u64,
}

impl AnaModel {
    /// An empty model.
    pub fn new(cfg: AnaConfig) -> Result<AnaModel, AnaError> {
        cfg.validate()?;
        Ok(AnaModel {
            cfg,
            listeners: BTreeMap::new(),
            namespaces: BTreeMap::new(),
            chgcnt: 0,
        })
    }

    /// The subsystem-wide parameters.
    pub fn config(&self) -> AnaConfig {
        self.cfg
    }

    /// The ANA change count (the log page header's CHGCNT).
    pub fn change_count(&self) -> u64 {
        self.chgcnt
    }

    /// Adds a listener whose every group starts in `initial` (SPDK's `ana_state` of
    /// `nvmf_subsystem_add_listener`, applied atomically with the listener: a new path can come
    /// up inaccessible). `scsi` is set for SRP target ports.
    pub fn add_listener(
        &mut self,
        id: ListenerId,
        initial: AnaState,
        scsi: Option<ScsiPort>,
    ) -> Result<AnaEvents, AnaError> {
        if initial == AnaState::Change {
            return Err(AnaError::ChangeNotSettable);
        }
        if self.listeners.contains_key(&id) {
            return Err(AnaError::DuplicateListener(id));
        }
        let path = Path {
            target: initial,
            transition: None,
            chgcnt: self.chgcnt,
            altered: false,
        };
        let paths = vec![path; self.group_count()];
        self.edit(|m| {
            m.listeners.insert(id, Listener { scsi, paths });
            Ok(())
        })
    }

    /// Removes a listener (its controllers and nexuses go with it).
    pub fn remove_listener(&mut self, id: ListenerId) -> Result<AnaEvents, AnaError> {
        self.edit(|m| {
            m.listeners
                .remove(&id)
                .map(drop)
                .ok_or(AnaError::UnknownListener(id))
        })
    }

    /// Adds a namespace to group `group`, or to the group numbered like the namespace when
    /// `None` (SPDK's default `anagrpid`).
    pub fn add_namespace(
        &mut self,
        nsid: u32,
        group: Option<AnaGroupId>,
        aa: ActiveActive,
    ) -> Result<AnaEvents, AnaError> {
        if nsid == 0 || nsid == u32::MAX {
            return Err(AnaError::InvalidNsid(nsid));
        }
        let group = group.unwrap_or(nsid);
        self.cfg.check_group(group)?;
        if self.namespaces.contains_key(&nsid) {
            return Err(AnaError::DuplicateNamespace(nsid));
        }
        self.edit(|m| {
            m.namespaces.insert(nsid, Namespace { group, aa });
            Ok(())
        })
    }

    /// Removes a namespace.
    pub fn remove_namespace(&mut self, nsid: u32) -> Result<AnaEvents, AnaError> {
        self.edit(|m| {
            m.namespaces
                .remove(&nsid)
                .map(drop)
                .ok_or(AnaError::UnknownNamespace(nsid))
        })
    }

    /// Moves a namespace to another group (`nvmf_subsystem_set_ns_ana_group`).
    pub fn set_ns_group(&mut self, nsid: u32, group: AnaGroupId) -> Result<AnaEvents, AnaError> {
        self.cfg.check_group(group)?;
        self.edit(|m| {
            m.ns_mut(nsid)?.group = group;
            Ok(())
        })
    }

    /// Declares whether a namespace's backend is safe for active/active access.
    pub fn set_ns_active_active(
        &mut self,
        nsid: u32,
        aa: ActiveActive,
    ) -> Result<AnaEvents, AnaError> {
        self.edit(|m| {
            m.ns_mut(nsid)?.aa = aa;
            Ok(())
        })
    }

    /// Sets the state of a listener for one group, or for every group when `group` is `None`
    /// (`nvmf_subsystem_listener_set_ana_state`).
    ///
    /// With a zero `transition` the state applies at once. Otherwise each path whose state
    /// changes reports [`AnaState::Change`] until [`AnaModel::finish_transition`] or until
    /// `transition` has passed ([`AnaModel::poll`]); `transition` may not exceed ANATT. A
    /// path already headed for `state` is left alone (idempotent).
    pub fn set_state(
        &mut self,
        id: ListenerId,
        group: Option<AnaGroupId>,
        state: AnaState,
        transition: Duration,
        now: Instant,
    ) -> Result<AnaEvents, AnaError> {
        if state == AnaState::Change {
            return Err(AnaError::ChangeNotSettable);
        }
        if transition > self.cfg.anatt() {
            return Err(AnaError::TransitionTooLong {
                ms: transition.as_millis(),
                anatt_secs: self.cfg.anatt_secs,
            });
        }
        self.edit(|m| {
            for path in m.paths_mut(id, group)? {
                if path.target == state {
                    continue;
                }
                path.target = state;
                path.altered = true;
                path.transition =
                    (!transition.is_zero()).then(|| Transition::new(state, now, transition));
            }
            Ok(())
        })
    }

    /// Ends the running transitions of a listener (one group, or all when `group` is `None`):
    /// the exec layer calls it once the path is ready (e.g. its in-flight I/O has drained).
    pub fn finish_transition(
        &mut self,
        id: ListenerId,
        group: Option<AnaGroupId>,
    ) -> Result<AnaEvents, AnaError> {
        self.edit(|m| {
            for path in m.paths_mut(id, group)? {
                path.transition = None;
            }
            Ok(())
        })
    }

    /// Ends every transition whose deadline has passed at `now`. Call it at
    /// [`AnaModel::next_deadline`].
    pub fn poll(&mut self, now: Instant) -> AnaEvents {
        if self.next_deadline().is_none_or(|d| d > now) {
            return AnaEvents::default();
        }
        let mut next = self.clone();
        for l in next.listeners.values_mut() {
            for p in &mut l.paths {
                if p.transition.is_some_and(|t| t.is_due(now)) {
                    p.transition = None;
                }
            }
        }
        // Ending a transition cannot break an invariant: targets do not change.
        self.commit(next).unwrap_or_default()
    }

    /// The earliest deadline of a running transition.
    pub fn next_deadline(&self) -> Option<Instant> {
        self.listeners
            .values()
            .flat_map(|l| l.paths.iter())
            .filter_map(|p| p.transition.map(|t| t.deadline()))
            .min()
    }

    /// What `id` reports for `group` now.
    pub fn reported(&self, id: ListenerId, group: AnaGroupId) -> Option<AnaState> {
        self.path(id, group).map(Path::reported)
    }

    /// The state `id` is headed for in `group` (the reported state, or where a running
    /// transition ends).
    pub fn target(&self, id: ListenerId, group: AnaGroupId) -> Option<AnaState> {
        self.path(id, group).map(|p| p.target)
    }

    /// The running transition of `id` in `group`.
    pub fn transition(&self, id: ListenerId, group: AnaGroupId) -> Option<Transition> {
        self.path(id, group).and_then(|p| p.transition)
    }

    /// The group of a namespace.
    pub fn ns_group(&self, nsid: u32) -> Option<AnaGroupId> {
        self.namespaces.get(&nsid).map(|n| n.group)
    }

    /// The listeners, ascending.
    pub fn listeners(&self) -> impl Iterator<Item = ListenerId> + '_ {
        self.listeners.keys().copied()
    }

    /// Checks the invariants an operator must keep within one process:
    ///
    /// 1. every namespace is in a group 1..=ANAGRPMAX;
    /// 2. a group holding a namespace whose backend is [`ActiveActive::Unsafe`] has at most one
    ///    NVMe listener and at most one SRP target port whose state is (or is headed for)
    ///    optimized;
    /// 3. SRP listeners have distinct, non-zero relative target port identifiers and target
    ///    port group ids.
    pub fn check(&self) -> Result<(), AnaError> {
        for ns in self.namespaces.values() {
            self.cfg.check_group(ns.group)?;
        }
        // The lowest unsafe namespace of each group.
        let mut unsafe_groups: BTreeMap<AnaGroupId, u32> = BTreeMap::new();
        for (&nsid, ns) in &self.namespaces {
            if ns.aa == ActiveActive::Unsafe {
                unsafe_groups.entry(ns.group).or_insert(nsid);
            }
        }
        for (&group, &nsid) in &unsafe_groups {
            // NVMe hosts see NVMe listeners, SCSI hosts see SRP target ports: one multipath
            // domain each.
            for scsi in [false, true] {
                let optimized: Vec<ListenerId> = self
                    .listeners
                    .iter()
                    .filter(|(_, l)| {
                        l.scsi.is_some() == scsi
                            && l.paths
                                .get(group as usize - 1)
                                .is_some_and(|p| p.target == AnaState::Optimized)
                    })
                    .map(|(&id, _)| id)
                    .collect();
                if optimized.len() > 1 {
                    return Err(AnaError::SecondOptimized {
                        group,
                        listeners: optimized,
                        nsid,
                        scsi,
                    });
                }
            }
        }
        let mut rel = Vec::new();
        let mut tpg = Vec::new();
        for p in self.listeners.values().filter_map(|l| l.scsi) {
            if p.relative_port == 0 || rel.contains(&p.relative_port) {
                return Err(AnaError::RelativePort(p.relative_port));
            }
            if p.tpg_id == 0 || tpg.contains(&p.tpg_id) {
                return Err(AnaError::TargetPortGroup(p.tpg_id));
            }
            rel.push(p.relative_port);
            tpg.push(p.tpg_id);
        }
        Ok(())
    }

    pub(super) fn group_count(&self) -> usize {
        self.cfg.anagrpmax as usize
    }

    pub(super) fn path(&self, id: ListenerId, group: AnaGroupId) -> Option<&Path> {
        let i = usize::try_from(group).ok()?.checked_sub(1)?;
        self.listeners.get(&id)?.paths.get(i)
    }

    /// The paths of listener `id` for one group, or for all groups when `group` is `None`.
    fn paths_mut(
        &mut self,
        id: ListenerId,
        group: Option<AnaGroupId>,
    ) -> Result<&mut [Path], AnaError> {
        let range = match group {
            None => 0..self.group_count(),
            Some(g) => {
                self.cfg.check_group(g)?;
                let i = g as usize - 1;
                i..i + 1
            }
        };
        let listener = self
            .listeners
            .get_mut(&id)
            .ok_or(AnaError::UnknownListener(id))?;
        Ok(listener.paths.get_mut(range).unwrap_or_default())
    }

    fn ns_mut(&mut self, nsid: u32) -> Result<&mut Namespace, AnaError> {
        self.namespaces
            .get_mut(&nsid)
            .ok_or(AnaError::UnknownNamespace(nsid))
    }

    /// Applies `f` to a copy of the model and commits the copy.
    fn edit(
        &mut self,
        f: impl FnOnce(&mut AnaModel) -> Result<(), AnaError>,
    ) -> Result<AnaEvents, AnaError> {
        let mut next = self.clone();
        f(&mut next)?;
        self.commit(next)
    }

    /// Replaces the model by `next` if it keeps the invariants, and returns what hosts must be
    /// told; the change count moves when any listener's log page changed.
    fn commit(&mut self, mut next: AnaModel) -> Result<AnaEvents, AnaError> {
        next.check()?;
        let d = diff(self, &next);
        if !d.changed_paths.is_empty() {
            next.chgcnt = self.chgcnt.wrapping_add(1);
            for &(id, group) in &d.changed_paths {
                if let Some(p) = next
                    .listeners
                    .get_mut(&id)
                    .and_then(|l| l.paths.get_mut(group as usize - 1))
                {
                    p.chgcnt = next.chgcnt;
                }
            }
        }
        let events = d.into_events(next.chgcnt);
        *self = next;
        Ok(events)
    }
}
