//! The transport-wide view of channels: the nexus table (multi-channel rules), where each
//! channel lives (poll group, connection-manager handle), and the SRP sessions registered as
//! controllers of their subsystem. Touched on logins, CM events and channel release only —
//! control path, under one mutex.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

use target_core::scsi_exec::NexusUnitAttentions;
use target_core::target::{ControllerInfo, Subsystem};

use crate::nexus::{LoginEffects, NexusKey, NexusTable};
use crate::proto::MultiChannelAction;

/// A global channel id (unique for the life of the transport).
pub type Gid = u64;

/// Where a channel lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route {
    /// Poll group (reactor) index.
    pub pg: usize,
    /// The connection identifier's handle ([`fabric::CmId::handle`]).
    pub cm: u64,
}

/// What an SRP session (an I_T nexus with at least one live channel) shows as its controller
/// object.
#[derive(Debug)]
pub struct SrpSession {
    /// The nexus.
    pub nexus: NexusKey,
}

struct SessionEntry {
    sub: Arc<Subsystem>,
    cntlid: u16,
    channels: u32,
    /// The I_T nexus identity its SPC-2 reservations are held under.
    identity: target_core::reservation::Nexus,
    /// Its unit attention queues, shared by its channels.
    ua: Arc<NexusUnitAttentions>,
}

/// A session: the nexus within one subsystem object (a subsystem deleted and created again
/// under the same NQN starts new sessions).
type SessionKey = (NexusKey, usize);

#[derive(Default)]
struct Inner {
    nexus: NexusTable<Gid>,
    routes: HashMap<Gid, Route>,
    by_cm: HashMap<u64, Gid>,
    sessions: HashMap<SessionKey, SessionEntry>,
    live: HashMap<Gid, SessionKey>,
}

/// The registry.
#[derive(Default)]
pub struct Sessions(parking_lot::Mutex<Inner>);

/// Why a session could not be registered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcceptError {
    /// A later single-channel login of the same nexus superseded this one.
    Superseded,
    /// The subsystem has no free controller id.
    NoControllerId,
}

impl Sessions {
    /// Records a login that is about to be handed to poll group `route.pg`, and applies its
    /// multi-channel action. The caller terminates `effects.terminate` (their routes are
    /// returned alongside).
    pub fn login(
        &self,
        key: NexusKey,
        gid: Gid,
        action: MultiChannelAction,
        route: Route,
    ) -> (LoginEffects<Gid>, Vec<(Gid, Route)>) {
        let mut g = self.0.lock();
        let effects = g.nexus.login(key, gid, action);
        g.routes.insert(gid, route);
        g.by_cm.insert(route.cm, gid);
        let term = effects
            .terminate
            .iter()
            .filter_map(|id| g.routes.get(id).map(|r| (*id, *r)))
            .collect();
        (effects, term)
    }

    /// The login of `gid` is about to be answered with LOGIN_RSP: mark it accepted and
    /// register (or join) its session. `make` builds the controller view for a new session.
    /// Returns the session id and the session's unit attention queues (a new session's are
    /// registered with the subsystem, every LU with POWER ON pending).
    pub fn accept(
        &self,
        gid: Gid,
        sub: &Arc<Subsystem>,
        identity: target_core::reservation::Nexus,
        make: impl FnOnce(u16) -> ControllerInfo,
    ) -> Result<(u16, Arc<NexusUnitAttentions>), AcceptError> {
        let mut g = self.0.lock();
        let key = g.nexus.nexus_of(gid).ok_or(AcceptError::Superseded)?;
        if !g.nexus.accepted(gid) {
            return Err(AcceptError::Superseded);
        }
        let skey = (key, Arc::as_ptr(sub) as usize);
        let (cntlid, ua) = match g.sessions.get_mut(&skey) {
            Some(e) => {
                e.channels += 1;
                let n = e.channels;
                let id = e.cntlid;
                sub.update_controller(id, |i| i.num_io_qpairs = n);
                (id, Arc::clone(&e.ua))
            }
            _ => {
                let handle: Arc<dyn Any + Send + Sync> = Arc::new(SrpSession { nexus: key });
                let Some(id) = sub.add_controller(|id| (make(id), handle)) else {
                    g.nexus.closing(gid);
                    return Err(AcceptError::NoControllerId);
                };
                let ua = Arc::new(NexusUnitAttentions::new(identity));
                sub.scsi_nexus_attach(Arc::clone(&ua));
                g.sessions.insert(
                    skey,
                    SessionEntry {
                        sub: Arc::clone(sub),
                        cntlid: id,
                        channels: 1,
                        identity,
                        ua: Arc::clone(&ua),
                    },
                );
                (id, ua)
            }
        };
        g.live.insert(gid, skey);
        Ok((cntlid, ua))
    }

    /// `gid` started closing (a later single-channel login will not terminate it again).
    pub fn closing(&self, gid: Gid) {
        self.0.lock().nexus.closing(gid);
    }

    /// Forgets `gid`: its nexus membership, its route and (for an accepted channel) its share
    /// of the session, which is unregistered with its last channel.
    pub fn remove(&self, gid: Gid) {
        let mut g = self.0.lock();
        g.nexus.remove(gid);
        if let Some(r) = g.routes.remove(&gid) {
            g.by_cm.remove(&r.cm);
        }
        if let Some(key) = g.live.remove(&gid)
            && let Some(e) = g.sessions.get_mut(&key)
        {
            e.channels = e.channels.saturating_sub(1);
            if e.channels == 0 {
                let e = g.sessions.remove(&key).expect("present");
                e.sub.remove_controller(e.cntlid);
                // The I_T nexus is gone: its SPC-2 reservations go with it.
                e.sub.scsi_nexus_lost(e.identity);
            } else {
                let n = e.channels;
                e.sub.update_controller(e.cntlid, |i| i.num_io_qpairs = n);
            }
        }
    }

    /// The channel and poll group a connection identifier belongs to.
    pub fn route_of_cm(&self, cm: u64) -> Option<(Gid, Route)> {
        let g = self.0.lock();
        let gid = *g.by_cm.get(&cm)?;
        g.routes.get(&gid).map(|r| (gid, *r))
    }

    /// The session id (controller id) of an accepted channel.
    pub fn cntlid(&self, gid: Gid) -> Option<u16> {
        let g = self.0.lock();
        let key = g.live.get(&gid)?;
        g.sessions.get(key).map(|e| e.cntlid)
    }

    /// Channels known (pending, live or closing).
    pub fn channels(&self) -> usize {
        self.0.lock().nexus.len()
    }

    /// Sessions registered.
    pub fn sessions(&self) -> usize {
        self.0.lock().sessions.len()
    }
}
