//! A subsystem's ANA state on the control path and the per-poll-group snapshot the data path
//! reads.
//!
//! [`SubsystemAna`] wraps the sans-I/O [`AnaModel`] with what the model does not know: which
//! listen address each [`ListenerId`] stands for, and, per listener, the change count at which
//! its ANA log page last changed (its *log generation*: a controller connected through the
//! listener gets an ANA change notice when the generation moves past the one it last saw).
//! Every listener is a path of the model; an SRP listener is also a SCSI target port
//! ([`ScsiPort`], its ids from [`super::scsi_port`]) whose states are its ALUA states.
//!
//! [`PgAna`] is what a poll group keeps per subsystem, rebuilt on every resume: each listener's
//! [`PathView`] and log generation. Admission reads it per command without a lock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::error::CoreError;
use super::state::{Change, PauseScope};
use super::subsystem::{ListenAddr, Subsystem};
use super::{Target, not_found};
use crate::ana::{
    ActiveActive, AnaConfig, AnaError, AnaEvents, AnaModel, AnaState, ListenerId, PathView,
    ScsiPort, TpgEntry,
};

/// The ANA state of a subsystem created with `ana_reporting`.
#[derive(Debug, Clone)]
pub struct SubsystemAna {
    /// The model: groups, namespaces, listeners and their states.
    pub model: AnaModel,
    ids: Vec<(ListenAddr, ListenerId)>,
    next_id: u32,
    gens: BTreeMap<ListenerId, u64>,
    /// Per NSID, the count of ALUA changes at its last one (see [`PgAna::alua`]).
    alua_gens: BTreeMap<u32, u64>,
    alua_count: u64,
}

impl SubsystemAna {
    /// A subsystem whose groups are 1..=`anagrpmax` (its `max_namespaces`, as SPDK).
    pub fn new(anagrpmax: u32) -> Result<Self, AnaError> {
        Ok(Self {
            model: AnaModel::new(AnaConfig::new(anagrpmax))?,
            ids: Vec::new(),
            next_id: 1,
            gens: BTreeMap::new(),
            alua_gens: BTreeMap::new(),
            alua_count: 0,
        })
    }

    /// The model's id of a listener.
    pub fn id_of(&self, addr: &ListenAddr) -> Option<ListenerId> {
        self.ids.iter().find(|(a, _)| a == addr).map(|(_, id)| *id)
    }

    /// The log generation of a listener (see the module documentation).
    pub fn generation(&self, id: ListenerId) -> u64 {
        self.gens.get(&id).copied().unwrap_or(0)
    }

    /// Adds a listener whose every group starts in `initial`; `scsi` for an SRP listener.
    pub fn add_listener(
        &mut self,
        addr: &ListenAddr,
        initial: AnaState,
        scsi: Option<ScsiPort>,
    ) -> Result<(), AnaError> {
        let id = ListenerId(self.next_id);
        let ev = self.model.add_listener(id, initial, scsi)?;
        self.next_id += 1;
        self.ids.push((addr.clone(), id));
        self.gens.insert(id, self.model.change_count());
        self.record(&ev);
        Ok(())
    }

    /// Removes a listener (unknown ones are ignored).
    pub fn remove_listener(&mut self, addr: &ListenAddr) {
        if let Some(id) = self.id_of(addr) {
            if let Ok(ev) = self.model.remove_listener(id) {
                self.record(&ev);
            }
            self.ids.retain(|(_, i)| *i != id);
            self.gens.remove(&id);
        }
    }

    /// Adds a namespace to its group; `aa` says whether its backend is safe for writes
    /// through several optimized paths at once.
    pub fn add_namespace(
        &mut self,
        nsid: u32,
        group: u32,
        aa: ActiveActive,
    ) -> Result<(), AnaError> {
        let ev = self.model.add_namespace(nsid, Some(group), aa)?;
        self.record(&ev);
        Ok(())
    }

    /// Removes a namespace.
    pub fn remove_namespace(&mut self, nsid: u32) {
        if let Ok(ev) = self.model.remove_namespace(nsid) {
            self.record(&ev);
        }
    }

    /// Moves a namespace to another group.
    pub fn set_ns_group(&mut self, nsid: u32, group: u32) -> Result<(), AnaError> {
        let ev = self.model.set_ns_group(nsid, group)?;
        self.record(&ev);
        Ok(())
    }

    /// Sets a listener's state for one group or all; with `transition`, the paths leaving an
    /// accessible state report `change` until [`SubsystemAna::finish`] (at most ANATT).
    pub fn set_state(
        &mut self,
        id: ListenerId,
        group: Option<u32>,
        state: AnaState,
        transition: bool,
        now: Instant,
    ) -> Result<(), AnaError> {
        let dur = if transition {
            self.model.config().anatt()
        } else {
            std::time::Duration::ZERO
        };
        let ev = self.model.set_state(id, group, state, dur, now)?;
        self.record(&ev);
        Ok(())
    }

    /// Whether setting `state` on listener `id` (one group or all) takes a path from an
    /// accessible state to one that is not: then its in-flight I/O must drain first.
    pub fn needs_drain(&self, id: ListenerId, group: Option<u32>, state: AnaState) -> bool {
        if state.is_accessible() {
            return false;
        }
        let groups = match group {
            Some(g) => g..=g,
            None => 1..=self.model.config().anagrpmax,
        };
        groups.into_iter().any(|g| {
            self.model
                .target(id, g)
                .is_some_and(AnaState::is_accessible)
        })
    }

    /// Ends a listener's running transitions (its I/O has drained).
    pub fn finish(&mut self, id: ListenerId) {
        if let Ok(ev) = self.model.finish_transition(id, None) {
            self.record(&ev);
        }
    }

    /// Ends the transitions whose ANATT deadline passed.
    pub fn poll(&mut self, now: Instant) {
        let ev = self.model.poll(now);
        self.record(&ev);
    }

    /// The listeners' addresses and ids, in the order they were added.
    pub fn listeners(&self) -> impl Iterator<Item = &(ListenAddr, ListenerId)> {
        self.ids.iter()
    }

    fn record(&mut self, ev: &AnaEvents) {
        for id in &ev.ana_changed {
            self.gens.insert(*id, ev.change_count);
        }
        if !ev.alua_changed.is_empty() {
            self.alua_count += 1;
            for &nsid in &ev.alua_changed {
                self.alua_gens.insert(nsid, self.alua_count);
            }
        }
    }

    /// The snapshot poll groups keep.
    pub(crate) fn snapshot(&self) -> PgAna {
        PgAna {
            paths: self
                .ids
                .iter()
                .filter_map(|(a, id)| {
                    Some(PgPath {
                        addr: a.clone(),
                        view: self.model.path_view(*id)?,
                        generation: self.generation(*id),
                        scsi: self.model.scsi_port(*id),
                    })
                })
                .collect(),
            alua: self.alua_gens.iter().map(|(&n, &g)| (n, g)).collect(),
            anatt_secs: self.model.config().anatt_secs,
        }
    }
}

fn invalid(e: AnaError) -> CoreError {
    CoreError::Invalid(e.to_string())
}

fn not_ana(nqn: &str) -> CoreError {
    CoreError::Invalid(format!(
        "subsystem {nqn} was created without ana_reporting: it has no ANA groups"
    ))
}

impl Target {
    /// Moves namespace `nsid` to ANA group `anagrpid` (`nvmf_subsystem_set_ns_ana_group`),
    /// with the namespace paused, as SPDK. Every controller gets a namespace attribute changed
    /// notice (its ANAGRPID changed); controllers whose ANA log changed get an ANA change
    /// notice.
    pub async fn set_ns_ana_group(
        self: &Arc<Self>,
        nqn: &str,
        nsid: u32,
        anagrpid: u32,
    ) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        let nqn_s = nqn.to_string();
        let f = Box::new(move |s: &Arc<Subsystem>| {
            let mut c = s.config.write();
            let c = &mut *c;
            let a = c.ana.as_mut().ok_or_else(|| not_ana(&nqn_s))?;
            let ns = c.namespaces.get_mut(&nsid).ok_or_else(|| {
                CoreError::NotFound(format!("Namespace {nsid} not found in subsystem {nqn_s}"))
            })?;
            a.set_ns_group(nsid, anagrpid).map_err(invalid)?;
            if ns.anagrpid != anagrpid {
                ns.anagrpid = anagrpid;
                s.ns_generation.fetch_add(1, Ordering::AcqRel);
            }
            Ok((0, None))
        });
        self.change(
            &sub,
            Change::Modify {
                scope: PauseScope::Namespace(nsid),
                f,
            },
        )
        .await?;
        tracing::info!("subsystem {nqn}: namespace {nsid} in ANA group {anagrpid}");
        Ok(())
    }

    /// Sets the ANA state of listener `addr` for group `anagrpid`, or for every group
    /// (`nvmf_subsystem_listener_set_ana_state`).
    ///
    /// A path that leaves an accessible state (optimized, non-optimized) for one that is not
    /// goes through `change`: first the path reports change (its new I/O gets Asymmetric
    /// Access Transition, the host holds it), then the subsystem pauses until the I/O in
    /// flight has drained, and the path reports its new state. The transition never lasts
    /// longer than ANATT: when the drain takes longer, the state is set at the deadline and the
    /// hosts see it as soon as the drain ends. Other changes apply at once. Controllers
    /// connected through the listener get an ANA change notice at every step.
    pub async fn set_listener_ana_state(
        self: &Arc<Self>,
        nqn: &str,
        addr: &ListenAddr,
        state: AnaState,
        anagrpid: Option<u32>,
    ) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        if state == AnaState::Change {
            return Err(invalid(AnaError::ChangeNotSettable));
        }
        let (id, drain, anatt) = sub.with_config(|c| {
            if !c.listeners.contains(addr) {
                return Err(CoreError::NotFound(format!(
                    "Listener {addr} not found on subsystem {nqn}"
                )));
            }
            let a = c.ana.as_ref().ok_or_else(|| not_ana(nqn))?;
            let id = a.id_of(addr).ok_or_else(|| {
                CoreError::Internal(format!("listener {addr} is not in the model"))
            })?;
            Ok((
                id,
                a.needs_drain(id, anagrpid, state),
                a.model.config().anatt(),
            ))
        })?;
        let f = Box::new(move |s: &Arc<Subsystem>| {
            let mut c = s.config.write();
            let a = c
                .ana
                .as_mut()
                .ok_or_else(|| CoreError::Internal("ANA is gone".into()))?;
            a.set_state(id, anagrpid, state, drain, Instant::now())
                .map_err(invalid)?;
            Ok((0, None))
        });
        self.change(
            &sub,
            Change::Modify {
                scope: PauseScope::Admin,
                f,
            },
        )
        .await?;
        tracing::info!(
            "subsystem {nqn}: listener {addr} ANA state {state} for {}",
            anagrpid.map_or("every group".to_string(), |g| format!("group {g}"))
        );
        if !drain {
            return Ok(());
        }
        let f = Box::new(move |s: &Arc<Subsystem>| {
            if let Some(a) = s.config.write().ana.as_mut() {
                a.finish(id);
            }
            Ok((0, None))
        });
        let drained = self.change(
            &sub,
            Change::Modify {
                scope: PauseScope::All,
                f,
            },
        );
        match tokio::time::timeout(anatt, drained).await {
            Ok(r) => r.map(|_| ()),
            Err(_) => {
                // ANATT passed: the state is final now; hosts see it when the drain ends.
                tracing::warn!(
                    "subsystem {nqn}: listener {addr} did not drain within ANATT ({anatt:?})"
                );
                if let Some(a) = sub.config.write().ana.as_mut() {
                    a.poll(Instant::now());
                }
                Ok(())
            }
        }
    }
}

/// One listener as a poll group sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct PgPath {
    pub addr: ListenAddr,
    pub view: PathView,
    pub generation: u64,
    /// Set for an SRP listener: its SCSI target port ids.
    pub scsi: Option<ScsiPort>,
}

/// A subsystem's ANA paths on one poll group.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct PgAna {
    pub paths: Vec<PgPath>,
    /// Per namespace whose SCSI target port group states ever changed, the generation of its
    /// last change (ascending by NSID): a moved generation is an ASYMMETRIC ACCESS STATE
    /// CHANGED unit attention on every nexus of the LU.
    pub alua: Vec<(u32, u64)>,
    /// ANATT: the implicit transition time REPORT TARGET PORT GROUPS reports.
    pub anatt_secs: u8,
}

impl PgAna {
    /// The index of the path for `addr`.
    pub fn find(&self, addr: &ListenAddr) -> Option<usize> {
        self.paths.iter().position(|p| p.addr == *addr)
    }

    /// The NSIDs whose ALUA generation differs from `old`'s (none without an `old`: nobody
    /// has seen the states yet).
    pub fn alua_moved(&self, old: Option<&PgAna>) -> Vec<u32> {
        let Some(old) = old else {
            return Vec::new();
        };
        self.alua
            .iter()
            .filter(|(n, g)| !old.alua.iter().any(|(m, h)| m == n && h == g))
            .map(|&(n, _)| n)
            .collect()
    }

    /// The target port groups of an LU whose namespace is in `group`, one per SRP listener,
    /// ascending by group id, into `out` (cleared first; reused, so no allocation once it has
    /// grown to the number of listeners).
    pub fn tpgs(&self, group: u32, out: &mut Vec<TpgEntry>) {
        out.clear();
        for p in &self.paths {
            let (Some(port), Some(state)) = (p.scsi, p.view.state(group)) else {
                continue;
            };
            out.push(TpgEntry {
                tpg_id: port.tpg_id,
                relative_port: port.relative_port,
                state,
                altered: p.view.altered(group),
            });
        }
        out.sort_unstable_by_key(|t| t.tpg_id);
    }

    /// Whether any listener's log generation differs from `old`'s.
    pub fn generations_moved(&self, old: Option<&PgAna>) -> bool {
        self.paths.iter().any(|p| {
            old.and_then(|o| o.paths.iter().find(|q| q.addr == p.addr))
                .is_none_or(|q| q.generation != p.generation)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::AdrFam;

    fn addr(port: &str) -> ListenAddr {
        ListenAddr::new("RDMA", AdrFam::Ipv4, "10.0.0.1", port)
    }

    #[test]
    fn generations_move_only_for_the_listener_whose_log_changed() {
        let mut a = SubsystemAna::new(4).unwrap();
        a.add_listener(&addr("4420"), AnaState::Optimized, None)
            .unwrap();
        a.add_listener(&addr("4421"), AnaState::Inaccessible, None)
            .unwrap();
        a.add_namespace(1, 1, ActiveActive::Unsafe).unwrap();
        let (l1, l2) = (
            a.id_of(&addr("4420")).unwrap(),
            a.id_of(&addr("4421")).unwrap(),
        );
        let before = a.snapshot();
        let (g1, g2) = (a.generation(l1), a.generation(l2));
        // A second optimized path for an unsafe namespace is refused and changes nothing.
        let now = Instant::now();
        assert!(
            a.set_state(l2, Some(1), AnaState::Optimized, false, now)
                .is_err()
        );
        assert_eq!(a.snapshot(), before);
        a.set_state(l1, Some(1), AnaState::Inaccessible, true, now)
            .unwrap();
        assert!(a.generation(l1) > g1);
        assert_eq!(a.generation(l2), g2);
        assert_eq!(a.model.reported(l1, 1), Some(AnaState::Change));
        assert!(a.snapshot().generations_moved(Some(&before)));
        a.finish(l1);
        assert_eq!(a.model.reported(l1, 1), Some(AnaState::Inaccessible));
        assert!(!a.needs_drain(l1, Some(1), AnaState::Inaccessible));
        assert!(
            a.needs_drain(l1, None, AnaState::Inaccessible),
            "groups 2-4 are optimized"
        );
        assert!(!a.needs_drain(l2, Some(2), AnaState::Inaccessible));
        assert!(!a.needs_drain(l1, None, AnaState::Optimized));
        a.remove_listener(&addr("4420"));
        assert!(a.id_of(&addr("4420")).is_none());
        assert_eq!(a.snapshot().paths.len(), 1);
    }
}
