//! What hosts must be told after a change: the difference between two models as hosts see
//! them.
//!
//! - **NVMe.** A controller's ANA log page (LID 0Ch) has one descriptor per group that holds
//!   a namespace, with the state its listener reports and the group's NSIDs. When a
//!   descriptor of listener *L* differs (state, NSID list, or the group appearing or
//!   disappearing), every controller connected through *L* gets an *ANA change* notice (AEN
//!   DW0 `000C0302h`, when enabled and not masked) and the change count moves. A namespace
//!   that moved to another group also changed its Identify Namespace data (ANAGRPID): a
//!   *namespace attribute changed* notice with the NSID in the Changed Namespace List.
//! - **SCSI.** An LU's REPORT TARGET PORT GROUPS data has one target port group per SRP
//!   listener, in the state that listener reports for the LU's group. When the state of any
//!   port differs, every I_T nexus of the LU (through every port) gets the unit attention
//!   ASYMMETRIC ACCESS STATE CHANGED (2Ah/06h), as SPC-4 requires after an implicit change.
//!
//! Listeners added or removed by the change itself, and namespaces added or removed, are not
//! compared: a new path has no controller or nexus yet, a removed one has none left, and a new
//! or removed namespace is announced by the namespace-change machinery (Changed Namespace
//! List, REPORTED LUNS DATA HAS CHANGED). Adding or removing a namespace still changes the
//! NSID lists, so the other listeners' controllers get an ANA change notice.

use std::collections::{BTreeMap, BTreeSet};

use super::model::{AnaGroupId, AnaModel, ListenerId};
use super::state::AnaState;

/// What to tell hosts after a change.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnaEvents {
    /// Listeners whose ANA log page changed: post an ANA change notice to every controller
    /// connected through them. Ascending.
    pub ana_changed: Vec<ListenerId>,
    /// Namespaces whose ANAGRPID changed: a namespace attribute changed notice (and the NSID in
    /// the Changed Namespace List) on every controller. Ascending.
    pub ns_attr_changed: Vec<u32>,
    /// LUs (by NSID) whose target port group states changed: establish ASYMMETRIC ACCESS STATE
    /// CHANGED on every I_T nexus of the LU. Ascending.
    pub alua_changed: Vec<u32>,
    /// The change count after the change.
    pub change_count: u64,
}

impl AnaEvents {
    /// Nothing to tell anyone.
    pub fn is_empty(&self) -> bool {
        self.ana_changed.is_empty()
            && self.ns_attr_changed.is_empty()
            && self.alua_changed.is_empty()
    }
}

/// The raw difference, before the change count is assigned.
pub(super) struct Diff {
    /// (listener, group) descriptors that changed, ascending.
    pub changed_paths: Vec<(ListenerId, AnaGroupId)>,
    pub ns_attr_changed: Vec<u32>,
    pub alua_changed: Vec<u32>,
}

impl Diff {
    pub fn into_events(self, change_count: u64) -> AnaEvents {
        let listeners: BTreeSet<ListenerId> = self.changed_paths.iter().map(|&(l, _)| l).collect();
        AnaEvents {
            ana_changed: listeners.into_iter().collect(),
            ns_attr_changed: self.ns_attr_changed,
            alua_changed: self.alua_changed,
            change_count,
        }
    }
}

/// The NSIDs of each group that holds one, ascending.
pub(super) fn members(m: &AnaModel) -> BTreeMap<AnaGroupId, Vec<u32>> {
    let mut g: BTreeMap<AnaGroupId, Vec<u32>> = BTreeMap::new();
    for (&nsid, ns) in &m.namespaces {
        g.entry(ns.group).or_default().push(nsid);
    }
    g
}

pub(super) fn diff(before: &AnaModel, after: &AnaModel) -> Diff {
    let gb = members(before);
    let ga = members(after);
    let groups: BTreeSet<AnaGroupId> = gb.keys().chain(ga.keys()).copied().collect();
    let mut changed_paths = Vec::new();
    for &id in after.listeners.keys() {
        if !before.listeners.contains_key(&id) {
            continue;
        }
        for &g in &groups {
            let was = gb.get(&g).map(|n| (before.reported(id, g), n));
            let is = ga.get(&g).map(|n| (after.reported(id, g), n));
            if was != is {
                changed_paths.push((id, g));
            }
        }
    }
    let mut ns_attr_changed = Vec::new();
    let mut alua_changed = Vec::new();
    let srp_ports: Vec<ListenerId> = after
        .listeners
        .iter()
        .filter(|(id, l)| {
            l.scsi.is_some() && before.listeners.get(id).is_some_and(|b| b.scsi.is_some())
        })
        .map(|(&id, _)| id)
        .collect();
    for (&nsid, ns) in &after.namespaces {
        let Some(old) = before.namespaces.get(&nsid) else {
            continue;
        };
        if old.group != ns.group {
            ns_attr_changed.push(nsid);
        }
        let state_of = |m: &AnaModel, id, g| -> Option<AnaState> { m.reported(id, g) };
        if srp_ports
            .iter()
            .any(|&id| state_of(before, id, old.group) != state_of(after, id, ns.group))
        {
            alua_changed.push(nsid);
        }
    }
    Diff {
        changed_paths,
        ns_attr_changed,
        alua_changed,
    }
}
