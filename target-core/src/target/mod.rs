//! The target: subsystems, transports and poll groups, and every management operation on them.
//!
//! Operations that touch the data path go through the subsystem state machine (`state.rs`):
//! they queue per subsystem, pause what they affect on every poll group, apply the change, and
//! resume. They are `async` and finish when every poll group has done its part.

mod ana;
mod caw_lock;
mod error;
pub mod listener_io;
mod lu_modes;
mod poll_group;
mod preempt_abort;
pub mod scsi_port;
mod state;
mod subsystem;
mod volume_resv;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Value, json};

pub use ana::SubsystemAna;
pub(crate) use caw_lock::owner_of;
pub use caw_lock::{CawLock, CawRequest};
pub use error::CoreError;
pub use lu_modes::{LuModes, SharedModes};
pub use poll_group::{
    Admission, AdmitKind, NsGroup, NsInfo, PgCore, PgStats, PollGroup, TAG_MASK,
    resume_transport_request, with_poll_group, with_transport_pg,
};
pub use preempt_abort::{AbortFence, PreemptAbort};
pub use state::{PauseScope, SubsystemState};
pub use subsystem::{
    AdrFam, ControllerInfo, DEFAULT_MAX_NAMESPACES, DEFAULT_MODEL, DEFAULT_SERIAL, DISCOVERY_NQN,
    HostDhchap, ListenAddr, MAX_LISTENERS, Namespace, Subsystem, SubsystemConfig, SubsystemType,
    validate_ascii_field, validate_nqn,
};
pub use volume_resv::VolumeReservation;

use crate::bdev::{BdevRegistry, Claim};
use crate::reactor::{PollStatus, Reactors};
use crate::registry::{
    self, PollGroupLoad, Transport, TransportContext, TransportEnv, TransportError, TransportParams,
};
use state::Change;

/// Subsystems the target holds unless `nvmf_set_max_subsystems` says otherwise.
pub const DEFAULT_MAX_SUBSYSTEMS: u32 = 1024;

/// Connection counts of one poll group, readable by acceptors on other reactors.
#[derive(Debug, Default)]
pub(crate) struct PgLoad {
    pub admin: AtomicUsize,
    pub io: AtomicUsize,
}

struct TransportSlot {
    name: &'static str,
    transport: Option<Arc<dyn Transport>>,
    listeners: Vec<(ListenAddr, usize)>,
}

#[derive(Default)]
struct Inner {
    subsystems: BTreeMap<String, Arc<Subsystem>>,
    ids: Vec<bool>,
    transports: Vec<Option<TransportSlot>>,
}

/// Target-wide settings (SPDK's STARTUP-time `nvmf_set_config` and friends).
#[derive(Debug, Clone)]
pub struct TargetSettings {
    /// Most subsystems, discovery included.
    pub max_subsystems: u32,
    /// Whether `nvmf_set_max_subsystems` was called (SPDK allows it once).
    pub max_subsystems_set: bool,
    /// The `nvmf_set_config` parameters in effect, as given (replayed by save_config).
    pub nvmf_config: serde_json::Map<String, Value>,
    /// Command retry delay times (100 ms units).
    pub crdt: [u16; 3],
    /// What DH-HMAC-CHAP may negotiate (`nvmf_set_config` `dhchap_digests` /
    /// `dhchap_dhgroups`).
    pub auth_policy: crate::nvme::auth::AuthPolicy,
}

impl Default for TargetSettings {
    fn default() -> Self {
        Self {
            max_subsystems: DEFAULT_MAX_SUBSYSTEMS,
            max_subsystems_set: false,
            nvmf_config: serde_json::Map::new(),
            crdt: [0; 3],
            auth_policy: crate::nvme::auth::AuthPolicy::default(),
        }
    }
}

/// Parameters of a new subsystem.
#[derive(Debug, Clone)]
pub struct SubsystemParams {
    /// NQN.
    pub nqn: String,
    /// Serial number (default twenty zeroes).
    pub serial: Option<String>,
    /// Model number.
    pub model: Option<String>,
    /// Highest NSID (0 = 32).
    pub max_namespaces: u32,
    /// Accept any host.
    pub allow_any_host: bool,
    /// ANA reporting.
    pub ana_reporting: bool,
    /// Lowest controller id.
    pub min_cntlid: u16,
    /// Highest controller id.
    pub max_cntlid: u16,
    /// Administrative label (informational).
    pub admin_label: Option<String>,
    /// Transport-declared subsystem attributes, validated and in canonical form
    /// ([`crate::registry::TransportAttr::validate`]).
    pub transport_attrs: crate::registry::TransportAttrs,
}

impl SubsystemParams {
    /// Defaults for an NQN.
    pub fn new(nqn: &str) -> Self {
        Self {
            nqn: nqn.to_string(),
            serial: None,
            model: None,
            max_namespaces: 0,
            allow_any_host: false,
            ana_reporting: false,
            min_cntlid: 1,
            max_cntlid: 0xffef,
            admin_label: None,
            transport_attrs: crate::registry::TransportAttrs::new(),
        }
    }
}

/// Parameters of a new namespace.
#[derive(Debug, Clone, Default)]
pub struct NsParams {
    /// The bdev to export.
    pub bdev_name: String,
    /// Requested NSID (0 = the lowest free one).
    pub nsid: u32,
    /// NGUID (default: the UUID's bytes).
    pub nguid: Option<[u8; 16]>,
    /// EUI-64.
    pub eui64: Option<[u8; 8]>,
    /// UUID (default: the bdev's).
    pub uuid: Option<uuid::Uuid>,
    /// ANA group (0 = the NSID).
    pub anagrpid: u32,
    /// Hide from hosts until added per host.
    pub no_auto_visible: bool,
    /// PTPL file.
    pub ptpl_file: Option<String>,
}

/// The storage target.
pub struct Target {
    reactors: Reactors,
    env: TransportEnv,
    bdevs: Arc<BdevRegistry>,
    bdev_modules: crate::bdev::module::ModuleStates,
    pub(crate) loads: Vec<PgLoad>,
    inner: Mutex<Inner>,
    settings: Mutex<TargetSettings>,
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target").finish_non_exhaustive()
    }
}

fn not_found(nqn: &str) -> CoreError {
    CoreError::NotFound(format!("Subsystem with NQN '{nqn}' not found"))
}

impl Target {
    /// Creates the target: a poll group on every reactor and the discovery subsystem. Transports
    /// created later find what they need to open their wire in `env` (for RDMA, a
    /// `fabric::Provider`: real RDMA, or the in-process simulation).
    pub fn start(
        reactors: Reactors,
        bdevs: Arc<BdevRegistry>,
        env: TransportEnv,
    ) -> Result<Arc<Self>, CoreError> {
        let target = Arc::new(Self {
            env,
            loads: (0..reactors.len()).map(|_| PgLoad::default()).collect(),
            reactors: reactors.clone(),
            bdevs,
            bdev_modules: Default::default(),
            inner: Mutex::new(Inner::default()),
            settings: Mutex::new(TargetSettings::default()),
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let t = Arc::clone(&target);
        reactors
            .for_each_reactor(
                move |ctx| {
                    ctx.set_local(PollGroup::new(ctx.index(), Arc::clone(&t)));
                    ctx.poller("nvmf_poll_group")
                        .arm(|ctx| with_poll_group(ctx, |pg| pg.arm()).unwrap_or(false))
                        .register(|ctx| {
                            let now = ctx.now();
                            PollStatus::from_count(
                                with_poll_group(ctx, |pg| pg.poll(now)).unwrap_or(0),
                            )
                        });
                },
                move |_| {
                    let _ = tx.send(());
                },
            )
            .map_err(|e| CoreError::Internal(format!("cannot start poll groups: {e}")))?;
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| CoreError::Internal("poll groups did not start".into()))?;

        let mut p = SubsystemParams::new(DISCOVERY_NQN);
        p.allow_any_host = true;
        let sub = target.insert_subsystem(&p, SubsystemType::Discovery)?;
        let (tx, rx) = std::sync::mpsc::channel();
        state::submit(
            &target,
            &sub,
            Change::Activate,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.recv_timeout(Duration::from_secs(30))
            .map_err(|_| CoreError::Internal("discovery subsystem did not start".into()))??;
        let weak = Arc::downgrade(&target);
        target.bdevs.on_resize(Arc::new(move |name| {
            if let Some(t) = weak.upgrade() {
                t.bdev_resized(name);
            }
        }));
        Ok(target)
    }

    /// The reactors.
    pub fn reactors(&self) -> &Reactors {
        &self.reactors
    }

    /// The environment transports open their wire from.
    pub fn transport_env(&self) -> &TransportEnv {
        &self.env
    }

    /// The bdevs.
    pub fn bdevs(&self) -> &Arc<BdevRegistry> {
        &self.bdevs
    }

    /// The state of a bdev module on this target (created on first use), if it has one.
    pub(crate) fn bdev_module_state(
        &self,
        module: &crate::bdev::module::BdevModuleOps,
    ) -> Option<crate::bdev::module::ModuleState> {
        self.bdev_modules.get(module)
    }

    /// Target-wide settings.
    pub fn settings(&self) -> TargetSettings {
        self.settings.lock().clone()
    }

    /// What DH-HMAC-CHAP may negotiate now.
    pub fn auth_policy(&self) -> crate::nvme::auth::AuthPolicy {
        self.settings.lock().auth_policy
    }

    /// Changes target-wide settings.
    pub fn update_settings<R>(&self, f: impl FnOnce(&mut TargetSettings) -> R) -> R {
        f(&mut self.settings.lock())
    }

    /// Connection counts per poll group, for choosing where a new connection goes.
    pub fn loads(&self) -> Vec<PollGroupLoad> {
        self.loads
            .iter()
            .enumerate()
            .map(|(index, l)| PollGroupLoad {
                index,
                admin_qpairs: l.admin.load(Ordering::Relaxed),
                io_qpairs: l.io.load(Ordering::Relaxed),
            })
            .collect()
    }

    async fn change(
        self: &Arc<Self>,
        sub: &Arc<Subsystem>,
        change: Change,
    ) -> Result<u32, CoreError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        state::submit(
            self,
            sub,
            change,
            Box::new(move |r| {
                let _ = tx.send(r);
            }),
        );
        rx.await
            .map_err(|_| CoreError::Internal("the target is shutting down".into()))?
    }

    // ----- transports -----

    /// Creates a transport by registered name and gives it a poll group on every reactor.
    pub async fn create_transport(
        self: &Arc<Self>,
        name: &str,
        params: &TransportParams,
    ) -> Result<(), CoreError> {
        let ops = registry::find(name)
            .ok_or_else(|| CoreError::Invalid(format!("Invalid transport type '{name}'")))?;
        let index = {
            let mut inner = self.inner.lock();
            if inner
                .transports
                .iter()
                .flatten()
                .any(|s| s.name == ops.name)
            {
                return Err(CoreError::Exists(format!(
                    "Transport type '{}' already exists",
                    ops.name
                )));
            }
            let slot = TransportSlot {
                name: ops.name,
                transport: None,
                listeners: Vec::new(),
            };
            match inner.transports.iter().position(Option::is_none) {
                Some(i) => {
                    inner.transports[i] = Some(slot);
                    i
                }
                None => {
                    inner.transports.push(Some(slot));
                    inner.transports.len() - 1
                }
            }
        };
        let ctx = TransportContext {
            target: Arc::downgrade(self),
            reactors: self.reactors.clone(),
            env: self.env.clone(),
            index,
        };
        let transport = match (ops.create)(ctx, params) {
            Ok(t) => t,
            Err(e) => {
                self.inner.lock().transports[index] = None;
                let text = format!("Transport type '{}' create failed: {e}", ops.name);
                return Err(match e {
                    TransportError::Unsupported(_) => CoreError::Invalid(text),
                    _ => CoreError::Transport(text),
                });
            }
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let t = Arc::clone(&transport);
        let sent = self.reactors.for_each_reactor_async::<CoreError>(
            move |ctx, step| {
                let r = with_poll_group(ctx, |pg| match t.poll_group_create(pg.core()) {
                    Ok(tpg) => {
                        pg.add_transport(index, tpg);
                        Ok(())
                    }
                    Err(e) => Err(CoreError::Transport(e.to_string())),
                });
                step.next(r.unwrap_or(Ok(())));
            },
            move |_, res| {
                let _ = tx.send(res);
            },
        );
        let res = match sent {
            Ok(()) => rx
                .await
                .unwrap_or_else(|_| Err(CoreError::Internal("reactors stopped".into()))),
            Err(e) => Err(CoreError::Internal(e.to_string())),
        };
        if let Err(e) = res {
            self.remove_transport_pgs(index).await;
            transport.destroy();
            self.inner.lock().transports[index] = None;
            return Err(CoreError::Transport(format!(
                "Failed to add transport to tgt.({e})"
            )));
        }
        tracing::info!("transport {} created", ops.name);
        if let Some(slot) = self.inner.lock().transports[index].as_mut() {
            slot.transport = Some(transport);
        }
        Ok(())
    }

    async fn remove_transport_pgs(self: &Arc<Self>, index: usize) {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sent = self.reactors.for_each_reactor(
            move |ctx| {
                with_poll_group(ctx, |pg| pg.remove_transport(index));
            },
            move |_| {
                let _ = tx.send(());
            },
        );
        if sent.is_ok() {
            let _ = rx.await;
        }
    }

    /// The transports, in creation order.
    pub fn transports(&self) -> Vec<Arc<dyn Transport>> {
        self.inner
            .lock()
            .transports
            .iter()
            .flatten()
            .filter_map(|s| s.transport.clone())
            .collect()
    }

    /// A transport by name (ignoring case), with its index.
    pub fn transport(&self, name: &str) -> Option<(usize, Arc<dyn Transport>)> {
        self.inner
            .lock()
            .transports
            .iter()
            .enumerate()
            .find_map(|(i, s)| {
                let s = s.as_ref()?;
                (s.name.eq_ignore_ascii_case(name))
                    .then(|| s.transport.clone().map(|t| (i, t)))
                    .flatten()
            })
    }

    fn ref_listener(&self, addr: &ListenAddr) -> Result<(), CoreError> {
        let mut inner = self.inner.lock();
        let slot = inner
            .transports
            .iter_mut()
            .flatten()
            .find(|s| s.name.eq_ignore_ascii_case(&addr.trtype) && s.transport.is_some())
            .ok_or_else(|| {
                CoreError::Invalid(format!(
                    "Unable to find {} transport; create it with nvmf_create_transport first",
                    addr.trtype
                ))
            })?;
        if let Some((_, n)) = slot.listeners.iter_mut().find(|(a, _)| a == addr) {
            *n += 1;
            return Ok(());
        }
        let t = slot.transport.clone().expect("checked");
        t.listen(addr)
            .map_err(|e| CoreError::Transport(format!("cannot listen on {addr}: {e}")))?;
        tracing::info!("listening on {addr}");
        slot.listeners.push((addr.clone(), 1));
        Ok(())
    }

    fn unref_listener(&self, addr: &ListenAddr) {
        let mut inner = self.inner.lock();
        let Some(slot) = inner
            .transports
            .iter_mut()
            .flatten()
            .find(|s| s.name.eq_ignore_ascii_case(&addr.trtype))
        else {
            return;
        };
        let Some(pos) = slot.listeners.iter().position(|(a, _)| a == addr) else {
            return;
        };
        slot.listeners[pos].1 -= 1;
        if slot.listeners[pos].1 == 0 {
            slot.listeners.remove(pos);
            if let Some(t) = &slot.transport {
                match t.stop_listen(addr) {
                    Ok(()) => tracing::info!("stopped listening on {addr}"),
                    Err(e) => tracing::warn!("stop listening on {addr}: {e}"),
                }
            }
        }
    }

    // ----- subsystems -----

    fn insert_subsystem(
        &self,
        p: &SubsystemParams,
        kind: SubsystemType,
    ) -> Result<Arc<Subsystem>, CoreError> {
        let max = self.settings.lock().max_subsystems as usize;
        let limit = if p.max_namespaces == 0 {
            DEFAULT_MAX_NAMESPACES
        } else {
            p.max_namespaces
        };
        let ana = if p.ana_reporting {
            Some(SubsystemAna::new(limit).map_err(|e| CoreError::Invalid(e.to_string()))?)
        } else {
            None
        };
        let mut inner = self.inner.lock();
        if inner.subsystems.contains_key(&p.nqn) {
            return Err(CoreError::Exists(format!(
                "Unable to create subsystem {}: it already exists",
                p.nqn
            )));
        }
        let id = match inner.ids.iter().position(|used| !used) {
            Some(i) => i,
            None if inner.ids.len() < max => {
                inner.ids.push(false);
                inner.ids.len() - 1
            }
            None => {
                return Err(CoreError::NoResources(format!(
                    "Unable to create subsystem {}: the limit of {max} subsystems is reached",
                    p.nqn
                )));
            }
        };
        inner.ids[id] = true;
        let config = SubsystemConfig {
            serial: p
                .serial
                .clone()
                .unwrap_or_else(|| DEFAULT_SERIAL.to_string()),
            model: p.model.clone().unwrap_or_else(|| DEFAULT_MODEL.to_string()),
            max_namespaces: p.max_namespaces,
            allow_any_host: p.allow_any_host,
            hosts: Vec::new(),
            host_keys: BTreeMap::new(),
            listeners: Vec::new(),
            namespaces: BTreeMap::new(),
            min_cntlid: p.min_cntlid,
            max_cntlid: p.max_cntlid,
            ana_reporting: p.ana_reporting,
            ana,
            admin_label: p.admin_label.clone(),
            transport_attrs: p.transport_attrs.clone(),
        };
        let sub = Arc::new(Subsystem::new(id as u32, p.nqn.clone(), kind, config));
        inner.subsystems.insert(p.nqn.clone(), Arc::clone(&sub));
        Ok(sub)
    }

    fn forget_subsystem(&self, sub: &Subsystem) {
        let mut inner = self.inner.lock();
        inner.subsystems.remove(sub.nqn());
        if let Some(used) = inner.ids.get_mut(sub.id() as usize) {
            *used = false;
        }
    }

    /// Creates and starts an NVM subsystem.
    pub async fn create_subsystem(
        self: &Arc<Self>,
        p: SubsystemParams,
    ) -> Result<Arc<Subsystem>, CoreError> {
        validate_nqn(&p.nqn)?;
        if p.nqn == DISCOVERY_NQN {
            return Err(CoreError::Exists(format!(
                "Unable to create subsystem {}: it already exists",
                p.nqn
            )));
        }
        if let Some(s) = &p.serial {
            validate_ascii_field("SN", s, 20)?;
        }
        if let Some(m) = &p.model {
            validate_ascii_field("MN", m, 40)?;
        }
        if p.min_cntlid == 0 || p.min_cntlid > p.max_cntlid || p.max_cntlid > 0xffef {
            return Err(CoreError::Invalid(format!(
                "Invalid cntlid range [{}-{}]",
                p.min_cntlid, p.max_cntlid
            )));
        }
        let sub = self.insert_subsystem(&p, SubsystemType::Nvme)?;
        if let Err(e) = self.change(&sub, Change::Activate).await {
            self.forget_subsystem(&sub);
            return Err(CoreError::Internal(format!(
                "Subsystem {} start failed: {e}",
                p.nqn
            )));
        }
        tracing::info!("subsystem {} created", p.nqn);
        self.discovery_changed();
        Ok(sub)
    }

    /// Stops a subsystem (disconnecting every host), releases its listeners and bdevs, and
    /// forgets it.
    pub async fn delete_subsystem(self: &Arc<Self>, nqn: &str) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        if sub.kind() == SubsystemType::Discovery {
            return Err(CoreError::Invalid(
                "the discovery subsystem cannot be deleted".into(),
            ));
        }
        if sub.destroying.swap(true, Ordering::AcqRel) {
            return Err(CoreError::State(
                "Subsystem is already being destroyed.".into(),
            ));
        }
        self.change(&sub, Change::Deactivate).await?;
        let cfg = sub.config();
        for l in &cfg.listeners {
            self.unref_listener(l);
        }
        for ns in cfg.namespaces.values() {
            self.bdevs.release(&ns.bdev_name);
        }
        self.forget_subsystem(&sub);
        tracing::info!("subsystem {nqn} deleted");
        self.discovery_changed();
        Ok(())
    }

    /// A subsystem by NQN.
    pub fn subsystem(&self, nqn: &str) -> Option<Arc<Subsystem>> {
        self.inner.lock().subsystems.get(nqn).cloned()
    }

    /// A subsystem by id.
    pub fn subsystem_by_id(&self, id: u32) -> Option<Arc<Subsystem>> {
        self.inner
            .lock()
            .subsystems
            .values()
            .find(|s| s.id() == id)
            .cloned()
    }

    /// Every subsystem, sorted by NQN (byte-wise), the discovery subsystem included.
    pub fn subsystems(&self) -> Vec<Arc<Subsystem>> {
        self.inner.lock().subsystems.values().cloned().collect()
    }

    // ----- listeners -----

    /// Adds a listener to a subsystem (starting the transport listener if it is new).
    pub async fn add_listener(
        self: &Arc<Self>,
        nqn: &str,
        addr: ListenAddr,
    ) -> Result<(), CoreError> {
        self.add_listener_ana(nqn, addr, None).await
    }

    /// Adds a listener whose every ANA group starts in `ana_state` (SPDK's `ana_state` of
    /// `nvmf_subsystem_add_listener`: atomic with the listener, so a new path can come up
    /// inaccessible). `None` is optimized. A state other than optimized needs a subsystem
    /// with ANA reporting. An SRP listener gets its SCSI port ids ([`scsi_port::assign`]).
    pub async fn add_listener_ana(
        self: &Arc<Self>,
        nqn: &str,
        addr: ListenAddr,
        ana_state: Option<crate::ana::AnaState>,
    ) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        let initial = ana_state.unwrap_or(crate::ana::AnaState::Optimized);
        if initial != crate::ana::AnaState::Optimized {
            let ana = sub.with_config(|c| c.ana.is_some());
            if !ana {
                return Err(CoreError::Invalid(format!(
                    "ana_state {initial} is not supported: subsystem {nqn} was created without \
                     ana_reporting (every listener is optimized)"
                )));
            }
        }
        let t = Arc::clone(self);
        let nqn = nqn.to_string();
        let f = Box::new(move |s: &Arc<Subsystem>| {
            let mut addr = addr;
            {
                let c = s.config.read();
                if c.listeners.contains(&addr) {
                    return Err(CoreError::Exists(format!(
                        "Listener {addr} already exists on subsystem {nqn}"
                    )));
                }
                if c.listeners.len() >= MAX_LISTENERS {
                    return Err(CoreError::NoResources(format!(
                        "subsystem {nqn} has the maximum of {MAX_LISTENERS} listeners"
                    )));
                }
                // An SRP listener is a SCSI target port: its relative port and group ids.
                scsi_port::assign(&mut addr, &c.listeners)?;
            }
            if let Some(a) = s.config.write().ana.as_mut() {
                a.add_listener(&addr, initial, scsi_port::scsi_port(&addr))
                    .map_err(|e| CoreError::Invalid(e.to_string()))?;
            }
            if let Err(e) = t.ref_listener(&addr) {
                if let Some(a) = s.config.write().ana.as_mut() {
                    a.remove_listener(&addr);
                }
                return Err(e);
            }
            s.config.write().listeners.push(addr.clone());
            let undo: state::UndoFn = Box::new(move |s: &Arc<Subsystem>| {
                let mut c = s.config.write();
                c.listeners.retain(|l| *l != addr);
                if let Some(a) = c.ana.as_mut() {
                    a.remove_listener(&addr);
                }
                drop(c);
                t.unref_listener(&addr);
            });
            Ok((0, Some(undo)))
        });
        self.change(
            &sub,
            Change::Modify {
                scope: PauseScope::Admin,
                f,
            },
        )
        .await?;
        self.discovery_changed();
        Ok(())
    }

    /// Removes a listener from a subsystem (stopping the transport listener when unused).
    pub async fn remove_listener(
        self: &Arc<Self>,
        nqn: &str,
        addr: ListenAddr,
    ) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        let t = Arc::clone(self);
        let nqn = nqn.to_string();
        let f = Box::new(move |s: &Arc<Subsystem>| {
            let removed = {
                let mut c = s.config.write();
                let before = c.listeners.len();
                c.listeners.retain(|l| *l != addr);
                if let Some(a) = c.ana.as_mut() {
                    a.remove_listener(&addr);
                }
                before != c.listeners.len()
            };
            if !removed {
                return Err(CoreError::NotFound(format!(
                    "Listener {addr} not found on subsystem {nqn}"
                )));
            }
            t.unref_listener(&addr);
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
        self.discovery_changed();
        Ok(())
    }

    // ----- namespaces -----

    /// Exports a bdev as a namespace; returns the NSID.
    pub async fn add_namespace(self: &Arc<Self>, nqn: &str, p: NsParams) -> Result<u32, CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        if sub.kind() == SubsystemType::Discovery {
            return Err(CoreError::Invalid(
                "the discovery subsystem has no namespaces".into(),
            ));
        }
        let limit = sub.with_config(|c| c.ns_limit());
        if p.nsid == u32::MAX || p.nsid > limit {
            return Err(CoreError::Invalid(format!(
                "Invalid NSID {} (subsystem {nqn} allows 1-{limit})",
                p.nsid
            )));
        }
        let bdev = self.bdevs.claim(
            &p.bdev_name,
            Claim {
                module: "nvmf".into(),
                holder: nqn.to_string(),
            },
        )?;
        // The volume's reservation state, from its ptpl_file (a decode error fails the RPC).
        let bdev_uuid = bdev.uuid();
        let reservation = match VolumeReservation::load(
            p.ptpl_file.as_deref().map(std::path::Path::new),
            bdev_uuid,
        ) {
            Ok(r) => Arc::new(r),
            Err(e) => {
                self.bdevs.release(&p.bdev_name);
                return Err(CoreError::Invalid(e.to_string()));
            }
        };
        let scope = if p.nsid == 0 {
            PauseScope::Admin
        } else {
            PauseScope::Namespace(p.nsid)
        };
        let nqn_s = nqn.to_string();
        let pp = p.clone();
        let reactor_count = self.reactors().len();
        let f = Box::new(move |s: &Arc<Subsystem>| {
            let mut c = s.config.write();
            let nsid = if pp.nsid == 0 {
                (1..=c.ns_limit())
                    .find(|n| !c.namespaces.contains_key(n))
                    .ok_or_else(|| {
                        CoreError::NoResources(format!("subsystem {nqn_s} has no free NSID"))
                    })?
            } else if c.namespaces.contains_key(&pp.nsid) {
                return Err(CoreError::Exists(format!(
                    "Requested NSID {} already in use in subsystem {nqn_s}",
                    pp.nsid
                )));
            } else {
                pp.nsid
            };
            let uuid = pp.uuid.unwrap_or_else(|| bdev.uuid());
            if c.namespaces.values().any(|n| n.uuid == uuid) {
                return Err(CoreError::Exists(format!(
                    "a namespace with UUID {uuid} already exists in subsystem {nqn_s}"
                )));
            }
            let anagrpid = if pp.anagrpid == 0 { nsid } else { pp.anagrpid };
            if let Some(a) = c.ana.as_mut() {
                // Within one process every listener reaches the bdev through the same object, so
                // several optimized paths are safe (as SPDK, which allows them). No backend is
                // declared unsafe for active/active yet (docs/ha.md: RBD with exclusive-lock
                // across gateways is the candidate).
                a.add_namespace(nsid, anagrpid, crate::ana::ActiveActive::Safe)
                    .map_err(|e| CoreError::Invalid(e.to_string()))?;
            } else if anagrpid != nsid {
                return Err(CoreError::Invalid(format!(
                    "anagrpid {anagrpid} is not supported: subsystem {nqn_s} was created \
                     without ana_reporting (a namespace is in the ANA group of its NSID)"
                )));
            }
            c.namespaces.insert(
                nsid,
                Namespace {
                    nsid,
                    bdev_name: pp.bdev_name.clone(),
                    bdev: Arc::clone(&bdev),
                    uuid,
                    nguid: pp.nguid.unwrap_or(*uuid.as_bytes()),
                    eui64: pp.eui64,
                    anagrpid,
                    no_auto_visible: pp.no_auto_visible,
                    visible_hosts: Vec::new(),
                    ptpl_file: pp.ptpl_file.clone(),
                    reservation: Arc::clone(&reservation),
                    modes: SharedModes(Arc::new(LuModes::new(crate::scsi::ModeParams::defaults(
                        bdev.write_cache(),
                    )))),
                    caw: Arc::new(CawLock::new(s.id(), nsid, reactor_count)),
                },
            );
            s.ns_generation.fetch_add(1, Ordering::AcqRel);
            let undo: state::UndoFn = Box::new(move |s: &Arc<Subsystem>| {
                let mut c = s.config.write();
                c.namespaces.remove(&nsid);
                if let Some(a) = c.ana.as_mut() {
                    a.remove_namespace(nsid);
                }
                s.ns_generation.fetch_add(1, Ordering::AcqRel);
            });
            Ok((nsid, Some(undo)))
        });
        match self.change(&sub, Change::Modify { scope, f }).await {
            Ok(nsid) => {
                tracing::info!("subsystem {nqn}: namespace {nsid} is bdev {}", p.bdev_name);
                Ok(nsid)
            }
            Err(e) => {
                self.bdevs.release(&p.bdev_name);
                Err(e)
            }
        }
    }

    /// Removes a namespace (after draining its I/O) and releases its bdev.
    pub async fn remove_namespace(self: &Arc<Self>, nqn: &str, nsid: u32) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        let bdevs = Arc::clone(&self.bdevs);
        let nqn_s = nqn.to_string();
        let f = Box::new(move |s: &Arc<Subsystem>| {
            let ns = {
                let mut c = s.config.write();
                let ns = c.namespaces.remove(&nsid).ok_or_else(|| {
                    CoreError::NotFound(format!("Namespace {nsid} not found in subsystem {nqn_s}"))
                })?;
                if let Some(a) = c.ana.as_mut() {
                    a.remove_namespace(nsid);
                }
                ns
            };
            s.ns_generation.fetch_add(1, Ordering::AcqRel);
            bdevs.release(&ns.bdev_name);
            Ok((0, None))
        });
        self.change(
            &sub,
            Change::Modify {
                scope: PauseScope::Namespace(nsid),
                f,
            },
        )
        .await
        .map(|_| ())
    }

    /// Removes every namespace backed by a bdev (the bdev is being deleted).
    pub async fn remove_bdev_namespaces(
        self: &Arc<Self>,
        bdev_name: &str,
    ) -> Result<(), CoreError> {
        for sub in self.subsystems() {
            let nsids: Vec<u32> = sub.with_config(|c| {
                c.namespaces
                    .values()
                    .filter(|n| n.bdev_name == bdev_name)
                    .map(|n| n.nsid)
                    .collect()
            });
            for nsid in nsids {
                self.remove_namespace(sub.nqn(), nsid).await?;
            }
        }
        Ok(())
    }

    /// Bdev `bdev_name` changed size: every subsystem with a namespace on it pauses its admin
    /// commands (I/O keeps flowing, as SPDK's pause(0) on a resize) and resumes. On the resume
    /// each poll group re-reads the namespace (its I/O channel checks the new size), NVMe
    /// controllers get a Namespace Attribute Changed notice listing it, SCSI nexuses that see
    /// the LU a CAPACITY DATA HAS CHANGED unit attention. Returns at once; the change runs by
    /// messages to the reactors, after the subsystem's earlier changes.
    pub fn bdev_resized(self: &Arc<Self>, bdev_name: &str) {
        for sub in self.subsystems() {
            let on_it =
                sub.with_config(|c| c.namespaces.values().any(|n| n.bdev_name == bdev_name));
            if !on_it {
                continue;
            }
            let f = Box::new(|s: &Arc<Subsystem>| {
                s.ns_generation.fetch_add(1, Ordering::AcqRel);
                Ok((0, None))
            });
            let (nqn, bdev) = (sub.nqn().to_string(), bdev_name.to_string());
            state::submit(
                self,
                &sub,
                Change::Modify {
                    scope: PauseScope::Admin,
                    f,
                },
                Box::new(move |r| match r {
                    Ok(_) => tracing::info!("subsystem {nqn}: bdev {bdev} resized, hosts told"),
                    Err(e) => tracing::warn!("subsystem {nqn}: resize of bdev {bdev}: {e}"),
                }),
            );
        }
    }

    /// Makes namespace `nsid` of `nqn` visible (`visible`) or hidden to `host`
    /// (`nvmf_ns_add_host` / `nvmf_ns_remove_host`). Only a namespace added with
    /// `no_auto_visible` has per-host visibility (SPDK refuses the others too). The namespace
    /// pauses while it changes, so no I/O of a host that loses it is in flight afterwards;
    /// every controller of the subsystem gets a Namespace Attribute Changed notice listing it,
    /// and the host that gained or lost it rescans. Adding a host twice, or removing one that
    /// was not added, changes nothing and succeeds (as in SPDK).
    pub async fn set_ns_host_visible(
        self: &Arc<Self>,
        nqn: &str,
        nsid: u32,
        host: &str,
        visible: bool,
    ) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        if host.is_empty() || host.len() > 223 {
            return Err(CoreError::Invalid(format!("invalid host '{host}'")));
        }
        sub.with_config(|c| match c.namespaces.get(&nsid) {
            None => Err(CoreError::NotFound(format!(
                "Namespace {nsid} not found in subsystem {nqn}"
            ))),
            Some(ns) if !ns.no_auto_visible => Err(CoreError::Invalid(format!(
                "namespace {nsid} of {nqn} is visible to every host: per-host visibility needs \
                 a namespace added with no_auto_visible"
            ))),
            Some(_) => Ok(()),
        })?;
        let host_s = host.to_string();
        let f = Box::new(move |s: &Arc<Subsystem>| {
            let mut c = s.config.write();
            let Some(ns) = c.namespaces.get_mut(&nsid) else {
                return Err(CoreError::NotFound(format!("Namespace {nsid} is gone")));
            };
            let had = ns.visible_hosts.contains(&host_s);
            if visible && !had {
                ns.visible_hosts.push(host_s.clone());
            } else if !visible && had {
                ns.visible_hosts.retain(|h| *h != host_s);
            }
            if had != visible {
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
        tracing::info!(
            "subsystem {nqn}: namespace {nsid} {} host {host}",
            if visible { "visible to" } else { "hidden from" }
        );
        Ok(())
    }

    // ----- hosts -----

    /// Allows a host (NVMe host NQN or SRP initiator port id).
    pub fn add_host(&self, nqn: &str, host: &str) -> Result<(), CoreError> {
        self.add_host_keyed(nqn, host, None)
    }

    /// Allows a host that, with `keys`, must authenticate with DH-HMAC-CHAP on every queue.
    pub fn add_host_keyed(
        &self,
        nqn: &str,
        host: &str,
        keys: Option<HostDhchap>,
    ) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        if host.is_empty() || host.len() > 223 {
            return Err(CoreError::Invalid(format!("invalid host '{host}'")));
        }
        let mut c = sub.config.write();
        if c.hosts.iter().any(|h| h == host) {
            return Err(CoreError::Exists(format!(
                "Host {host} is already allowed on subsystem {nqn}"
            )));
        }
        c.hosts.push(host.to_string());
        if let Some(k) = keys {
            tracing::info!(
                "subsystem {nqn}: host {host} must authenticate (DH-HMAC-CHAP {})",
                key_names(&k)
            );
            c.host_keys.insert(host.to_string(), k);
        }
        drop(c);
        self.discovery_changed();
        Ok(())
    }

    /// Replaces the DH-HMAC-CHAP keys of an allowed host (`nvmf_subsystem_set_keys`); `None`
    /// removes them (the host no longer authenticates). Connected queues keep their
    /// authentication; the new keys apply from the next authentication transaction.
    pub fn set_host_keys(
        &self,
        nqn: &str,
        host: &str,
        keys: Option<HostDhchap>,
    ) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        let mut c = sub.config.write();
        if !c.hosts.iter().any(|h| h == host) {
            return Err(CoreError::NotFound(format!(
                "Host {host} is not allowed on subsystem {nqn}"
            )));
        }
        match keys {
            Some(k) => {
                tracing::info!(
                    "subsystem {nqn}: host {host} DH-HMAC-CHAP keys set to {}",
                    key_names(&k)
                );
                c.host_keys.insert(host.to_string(), k);
            }
            None => {
                tracing::info!("subsystem {nqn}: host {host} DH-HMAC-CHAP keys removed");
                c.host_keys.remove(host);
            }
        }
        Ok(())
    }

    /// Disallows a host and disconnects its connections to the subsystem.
    pub async fn remove_host(self: &Arc<Self>, nqn: &str, host: &str) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        {
            let mut c = sub.config.write();
            let before = c.hosts.len();
            c.hosts.retain(|h| h != host);
            c.host_keys.remove(host);
            if before == c.hosts.len() {
                return Err(CoreError::NotFound(format!(
                    "Host {host} is not allowed on subsystem {nqn}"
                )));
            }
        }
        self.disconnect_host(&sub, host).await;
        self.discovery_changed();
        Ok(())
    }

    async fn disconnect_host(self: &Arc<Self>, sub: &Arc<Subsystem>, host: &str) {
        if sub.with_config(|c| c.host_allowed(host)) {
            return;
        }
        let (tx, rx) = tokio::sync::oneshot::channel();
        let (id, host) = (sub.id(), host.to_string());
        let sent = self.reactors.for_each_reactor(
            move |ctx| {
                with_poll_group(ctx, |pg| pg.disconnect_host(id, &host));
            },
            move |_| {
                let _ = tx.send(());
            },
        );
        if sent.is_ok() {
            let _ = rx.await;
        }
    }

    /// Sets whether any host may connect. Existing connections stay, as in SPDK.
    pub async fn allow_any_host(self: &Arc<Self>, nqn: &str, allow: bool) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        sub.config.write().allow_any_host = allow;
        self.discovery_changed();
        Ok(())
    }

    /// What a discovery host may see changed (a subsystem, a listener, an allowed host): every
    /// poll group tells its discovery controllers, which notify their hosts when the log they
    /// see differs from the one they saw. Sent after the change is in place; not awaited.
    fn discovery_changed(&self) {
        let sent = self.reactors.for_each_reactor(
            |ctx| {
                with_poll_group(ctx, PollGroup::discovery_changed);
            },
            |_| {},
        );
        if let Err(e) = sent {
            tracing::debug!("cannot tell the poll groups of a discovery change: {e}");
        }
    }

    // ----- pause / resume -----

    /// Pauses a subsystem (all namespaces, or one): new commands queue, and this returns once
    /// every poll group has drained what was outstanding.
    pub async fn pause(self: &Arc<Self>, nqn: &str, nsid: Option<u32>) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        let scope = match nsid {
            None => PauseScope::All,
            Some(n) => {
                if !sub.with_config(|c| c.namespaces.contains_key(&n)) {
                    return Err(CoreError::NotFound(format!(
                        "Namespace {n} not found in subsystem {nqn}"
                    )));
                }
                PauseScope::Namespace(n)
            }
        };
        self.change(&sub, Change::Pause { scope, user: true })
            .await?;
        tracing::info!("subsystem {nqn} paused");
        Ok(())
    }

    /// Resumes a paused subsystem, replaying what queued meanwhile.
    pub async fn resume(self: &Arc<Self>, nqn: &str) -> Result<(), CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        self.change(&sub, Change::Resume { user: true }).await?;
        tracing::info!("subsystem {nqn} resumed");
        Ok(())
    }

    // ----- queries -----

    /// Runs `f` on every poll group and collects the results in reactor order.
    pub async fn gather<R: Send + 'static>(
        self: &Arc<Self>,
        f: impl Fn(&mut PollGroup) -> R + Send + Sync + 'static,
    ) -> Vec<R> {
        let out = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = tokio::sync::oneshot::channel();
        let o = Arc::clone(&out);
        let sent = self.reactors.for_each_reactor(
            move |ctx| {
                if let Some(r) = with_poll_group(ctx, &f) {
                    o.lock().push(r);
                }
            },
            move |_| {
                let _ = tx.send(());
            },
        );
        if sent.is_ok() {
            let _ = rx.await;
        }
        std::mem::take(&mut *out.lock())
    }

    /// The connections of a subsystem on every poll group (`nvmf_subsystem_get_qpairs`).
    pub async fn qpairs(self: &Arc<Self>, nqn: &str) -> Result<Vec<Value>, CoreError> {
        let sub = self.subsystem(nqn).ok_or_else(|| not_found(nqn))?;
        let id = sub.id();
        let per_pg = self
            .gather(move |pg| {
                pg.transports()
                    .flat_map(|t| t.qpairs(Some(id)))
                    .collect::<Vec<_>>()
            })
            .await;
        Ok(per_pg.into_iter().flatten().collect())
    }

    /// `nvmf_get_stats`.
    pub async fn stats(self: &Arc<Self>) -> Value {
        let groups = self
            .gather(|pg| {
                let transports: Vec<Value> = pg.transports().map(|t| t.stats()).collect();
                let core = pg.core();
                let s = core.stats();
                let listeners: Vec<Value> = core
                    .listener_io_snapshot()
                    .into_iter()
                    .map(|(a, io)| {
                        let mut v = io.to_json();
                        v["trtype"] = json!(a.trtype);
                        v["adrfam"] = json!(a.adrfam.as_str());
                        v["traddr"] = json!(a.traddr);
                        v["trsvcid"] = json!(a.trsvcid);
                        v
                    })
                    .collect();
                json!({
                    "name": format!("nvmf_tgt_poll_group_{:03}", core.index()),
                    "admin_qpairs": s.admin_qpairs,
                    "io_qpairs": s.io_qpairs,
                    "current_admin_qpairs": s.current_admin_qpairs,
                    "current_io_qpairs": s.current_io_qpairs,
                    "current_unassociated_qpairs": s.current_unassociated_qpairs,
                    "pending_bdev_io": s.pending_bdev_io,
                    "completed_nvme_io": s.completed_nvme_io,
                    "transports": transports,
                    "listeners": listeners,
                })
            })
            .await;
        json!({ "tick_rate": 1_000_000_000u64, "poll_groups": groups })
    }

    // ----- shutdown -----

    /// Stops every subsystem (disconnecting every host), closes every listener and destroys
    /// every transport. The reactors keep running; stop them afterwards.
    pub async fn shutdown(self: &Arc<Self>) {
        for sub in self.subsystems() {
            if let Err(e) = self.change(&sub, Change::Deactivate).await {
                tracing::warn!("stopping subsystem {}: {e}", sub.nqn());
            }
        }
        let slots: Vec<(Arc<dyn Transport>, Vec<ListenAddr>)> = {
            let mut inner = self.inner.lock();
            inner
                .transports
                .iter_mut()
                .flatten()
                .filter_map(|s| {
                    let l = s.listeners.drain(..).map(|(a, _)| a).collect();
                    s.transport.clone().map(|t| (t, l))
                })
                .collect()
        };
        for (t, listeners) in &slots {
            for a in listeners {
                if let Err(e) = t.stop_listen(a) {
                    tracing::warn!("stop listening on {a}: {e}");
                }
            }
        }
        let _ = self.gather(|pg| pg.shutdown_transports()).await;
        for (t, _) in &slots {
            t.destroy();
        }
        tracing::info!("target stopped");
    }

    /// At exit, after [`Target::shutdown`]: each bdev module whose state exists releases what
    /// it holds (its `fini`). Blocking: call it off the async runtime's threads.
    pub fn fini_bdev_modules(&self) {
        for m in crate::bdev::module::modules() {
            if let (Some(fini), Some(state)) = (m.fini, self.bdev_modules.existing(m)) {
                fini(&state, &self.bdevs);
            }
        }
    }
}

#[cfg(test)]
mod tests;

/// The keyring names of a host's DH-HMAC-CHAP keys, for logs (never the secrets).
fn key_names(k: &HostDhchap) -> String {
    match &k.ctrlr_key_name {
        Some(c) => format!("key '{}', controller key '{c}'", k.key_name),
        None => format!("key '{}'", k.key_name),
    }
}
