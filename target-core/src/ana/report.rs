//! What the model hands to the protocols, the data path and the RPC layer: the ANA log page
//! content of a listener, the target port groups of an LU, a listener's per-group states for
//! admission, and what `save_config` writes.

use super::model::{AnaGroupId, AnaModel, ListenerId};
use super::state::AnaState;

/// One group descriptor of an ANA log page.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnaGroupLog {
    /// ANAGRPID.
    pub grpid: AnaGroupId,
    /// The state the listener reports for the group.
    pub state: AnaState,
    /// The change count when this descriptor last changed.
    pub change_count: u64,
    /// The group's NSIDs visible to the controller, ascending (the Linux host merges them
    /// with its own sorted namespace list).
    pub nsids: Vec<u32>,
}

/// The ANA log page content for one controller.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnaLog {
    /// CHGCNT of the header.
    pub change_count: u64,
    /// One descriptor per group that holds a namespace visible to the controller, ascending by
    /// group id.
    pub groups: Vec<AnaGroupLog>,
}

/// One target port group of an LU: an SRP listener, alone in its group.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TpgEntry {
    /// TARGET PORT GROUP.
    pub tpg_id: u16,
    /// The RELATIVE TARGET PORT IDENTIFIER of its only port.
    pub relative_port: u16,
    /// The state the listener reports for the LU's ANA group.
    pub state: AnaState,
    /// The state was changed by the operator since the listener was added (STATUS CODE 02h,
    /// altered by implicit ALUA behaviour).
    pub altered: bool,
}

/// A listener's states indexed by group, for admission on the data path: built on the control
/// path after every change, sent to the poll groups, read per command without a lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathView {
    states: Box<[AnaState]>,
    altered: Box<[bool]>,
}

impl PathView {
    /// What the listener reports for `group`; `None` for a group outside 1..=ANAGRPMAX.
    pub fn state(&self, group: AnaGroupId) -> Option<AnaState> {
        let i = usize::try_from(group).ok()?.checked_sub(1)?;
        self.states.get(i).copied()
    }

    /// Whether the operator changed the listener's state for `group` since it was added
    /// (RTPG STATUS CODE 02h).
    pub fn altered(&self, group: AnaGroupId) -> bool {
        usize::try_from(group)
            .ok()
            .and_then(|g| g.checked_sub(1))
            .and_then(|i| self.altered.get(i).copied())
            .unwrap_or(false)
    }
}

/// A listener's configured states as `save_config` writes them: `ana_state` of
/// `nvmf_subsystem_add_listener` (the state most groups have), then one
/// `nvmf_subsystem_listener_set_ana_state` per group that differs. A running transition is
/// saved as its target.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedAna {
    /// The state of most groups (ties: the lower state code).
    pub base: AnaState,
    /// Groups in another state, ascending.
    pub exceptions: Vec<(AnaGroupId, AnaState)>,
}

impl AnaModel {
    /// The ANA log page content for a controller connected through `id` that sees the
    /// namespaces for which `visible` is true (every namespace without masking).
    pub fn log_for(&self, id: ListenerId, visible: impl Fn(u32) -> bool) -> Option<AnaLog> {
        let listener = self.listeners.get(&id)?;
        let mut groups = Vec::new();
        for (grpid, nsids) in super::events::members(self) {
            let nsids: Vec<u32> = nsids.into_iter().filter(|&n| visible(n)).collect();
            if nsids.is_empty() {
                continue;
            }
            let path = listener.paths.get(grpid as usize - 1)?;
            groups.push(AnaGroupLog {
                grpid,
                state: path.reported(),
                change_count: path.chgcnt,
                nsids,
            });
        }
        Some(AnaLog {
            change_count: self.chgcnt,
            groups,
        })
    }

    /// The target port groups of the LU of namespace `nsid`, one per SRP listener, ascending
    /// by target port group id.
    pub fn tpgs_for(&self, nsid: u32) -> Option<Vec<TpgEntry>> {
        let group = self.ns_group(nsid)?;
        let mut v: Vec<TpgEntry> = self
            .listeners
            .values()
            .filter_map(|l| {
                let port = l.scsi?;
                let path = l.paths.get(group as usize - 1)?;
                Some(TpgEntry {
                    tpg_id: port.tpg_id,
                    relative_port: port.relative_port,
                    state: path.reported(),
                    altered: path.altered,
                })
            })
            .collect();
        v.sort_by_key(|t| t.tpg_id);
        Some(v)
    }

    /// The SCSI identity of listener `id`, if it is an SRP target port.
    pub fn scsi_port(&self, id: ListenerId) -> Option<super::model::ScsiPort> {
        self.listeners.get(&id)?.scsi
    }

    /// The per-group states `id` reports, for the data path.
    pub fn path_view(&self, id: ListenerId) -> Option<PathView> {
        let l = self.listeners.get(&id)?;
        Some(PathView {
            states: l.paths.iter().map(|p| p.reported()).collect(),
            altered: l.paths.iter().map(|p| p.altered).collect(),
        })
    }

    /// `ana_states` of `nvmf_subsystem_get_listeners`: every group 1..=ANAGRPMAX with the state
    /// the listener reports.
    pub fn ana_states(&self, id: ListenerId) -> Option<Vec<(AnaGroupId, AnaState)>> {
        let l = self.listeners.get(&id)?;
        Some(
            (1..)
                .zip(l.paths.iter())
                .map(|(g, p)| (g, p.reported()))
                .collect(),
        )
    }

    /// What `save_config` writes for listener `id`.
    pub fn saved(&self, id: ListenerId) -> Option<SavedAna> {
        let l = self.listeners.get(&id)?;
        let mut counts: Vec<(AnaState, usize)> = Vec::new();
        for p in &l.paths {
            match counts.iter_mut().find(|(s, _)| *s == p.target) {
                Some((_, n)) => *n += 1,
                None => counts.push((p.target, 1)),
            }
        }
        // Most groups first; ties to the lower code.
        counts.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.code().cmp(&b.0.code())));
        let base = counts.first().map(|c| c.0)?;
        let exceptions = (1..)
            .zip(l.paths.iter())
            .filter(|(_, p)| p.target != base)
            .map(|(g, p)| (g, p.target))
            .collect();
        Some(SavedAna { base, exceptions })
    }
}
