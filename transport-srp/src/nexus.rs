//! Channel grouping per I_T nexus (initiator port id, target port id) and the multi-channel
//! rules of SRP r16a 4.1.2–4.1.3.
//!
//! A login with MULTI-CHANNEL ACTION 0 (single channel) terminates every established channel
//! of its nexus (T_LOGOUT, abort their commands, disconnect) and rejects that nexus's logins
//! that have not been answered yet; the response says TERMINATED if it closed anything.
//! Action 1 leaves the other channels alone and answers MAINTAINED (as ib_srpt does, even
//! when there are none). Channels of other initiators, or of the same initiator on another
//! target port, are never touched.
//!
//! A nexus entry exists only while it has members, so logins from many random initiator ids
//! do not grow the table (ib_srpt keeps them until the port goes away).

use std::collections::HashMap;
use std::hash::Hash;

use crate::proto::{MultiChannelAction, MultiChannelResult, PortId};

/// An I_T nexus.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NexusKey {
    /// Initiator port identifier.
    pub initiator: PortId,
    /// Target port identifier.
    pub target: PortId,
}

/// Where a member of a nexus is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Phase {
    /// Login received, not yet answered (the session is being set up).
    Pending,
    /// Login accepted: the channel is CONNECTING or LIVE.
    Active,
    /// The channel is being torn down.
    Closing,
}

/// What a new login does to the other members of its nexus.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginEffects<K> {
    /// MULTI-CHANNEL RESULT for the LOGIN_RSP.
    pub result: MultiChannelResult,
    /// Established channels to terminate: send T_LOGOUT (reason 4), abort their outstanding
    /// commands, disconnect. They are now marked closing.
    pub terminate: Vec<K>,
    /// Logins of the nexus not yet answered: reject them (SRP r16a gives no specific reason;
    /// 0x10000, "no reason given", fits). They are removed from the table.
    pub reject: Vec<K>,
}

/// Channels grouped by nexus. `K` identifies a channel (e.g. a slab key).
#[derive(Clone, Debug)]
pub struct NexusTable<K> {
    nexuses: HashMap<NexusKey, Vec<(K, Phase)>>,
    index: HashMap<K, NexusKey>,
}

impl<K: Copy + Eq + Hash> Default for NexusTable<K> {
    fn default() -> Self {
        NexusTable {
            nexuses: HashMap::new(),
            index: HashMap::new(),
        }
    }
}

impl<K: Copy + Eq + Hash> NexusTable<K> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a login for `ch` on `key` (as [`Phase::Pending`]) and applies its
    /// MULTI-CHANNEL ACTION to the other members.
    pub fn login(&mut self, key: NexusKey, ch: K, action: MultiChannelAction) -> LoginEffects<K> {
        self.remove(ch);
        let members = self.nexuses.entry(key).or_default();
        let mut effects = LoginEffects {
            result: MultiChannelResult::Maintained,
            terminate: Vec::new(),
            reject: Vec::new(),
        };
        if action == MultiChannelAction::Single {
            for (id, phase) in members.iter_mut() {
                match *phase {
                    Phase::Active => {
                        *phase = Phase::Closing;
                        effects.terminate.push(*id);
                    }
                    Phase::Pending => effects.reject.push(*id),
                    Phase::Closing => {}
                }
            }
            members.retain(|(_, p)| *p != Phase::Pending);
            effects.result = if effects.terminate.is_empty() {
                MultiChannelResult::NoneExisting
            } else {
                MultiChannelResult::Terminated
            };
        }
        members.push((ch, Phase::Pending));
        for id in &effects.reject {
            self.index.remove(id);
        }
        self.index.insert(ch, key);
        effects
    }

    fn set_phase(&mut self, ch: K, to: Phase) -> bool {
        let Some(key) = self.index.get(&ch) else {
            return false;
        };
        let Some(members) = self.nexuses.get_mut(key) else {
            return false;
        };
        match members.iter_mut().find(|(id, _)| *id == ch) {
            Some((_, p)) if *p != Phase::Closing => {
                *p = to;
                true
            }
            _ => false,
        }
    }

    /// The login of `ch` was accepted (LOGIN_RSP sent). `false` if `ch` is unknown or already
    /// closing (e.g. a later single-channel login superseded it while it was being set up:
    /// then the caller must not accept it).
    pub fn accepted(&mut self, ch: K) -> bool {
        let pending = self.phase(ch) == Some(Phase::Pending);
        pending && self.set_phase(ch, Phase::Active)
    }

    /// `ch` started its teardown. `false` if it was unknown or already closing.
    pub fn closing(&mut self, ch: K) -> bool {
        self.set_phase(ch, Phase::Closing)
    }

    /// Forgets `ch` (released, or its login rejected). Empty nexuses are dropped.
    pub fn remove(&mut self, ch: K) -> bool {
        let Some(key) = self.index.remove(&ch) else {
            return false;
        };
        if let Some(members) = self.nexuses.get_mut(&key) {
            members.retain(|(id, _)| *id != ch);
            if members.is_empty() {
                self.nexuses.remove(&key);
            }
        }
        true
    }

    /// The phase of `ch`.
    pub fn phase(&self, ch: K) -> Option<Phase> {
        let key = self.index.get(&ch)?;
        self.nexuses
            .get(key)?
            .iter()
            .find(|(id, _)| *id == ch)
            .map(|(_, p)| *p)
    }

    /// The nexus of `ch`.
    pub fn nexus_of(&self, ch: K) -> Option<NexusKey> {
        self.index.get(&ch).copied()
    }

    /// Members of a nexus.
    pub fn members(&self, key: &NexusKey) -> impl Iterator<Item = (K, Phase)> + '_ {
        self.nexuses.get(key).into_iter().flatten().copied()
    }

    /// Every channel and its phase (e.g. to close them all when the port is disabled).
    pub fn all(&self) -> impl Iterator<Item = (NexusKey, K, Phase)> + '_ {
        self.nexuses
            .iter()
            .flat_map(|(k, m)| m.iter().map(move |(id, p)| (*k, *id, *p)))
    }

    /// Number of nexuses with at least one member.
    pub fn nexus_count(&self) -> usize {
        self.nexuses.len()
    }

    /// Number of channels.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// `true` if no channel is known.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(i: u64, t: u64) -> NexusKey {
        NexusKey {
            initiator: PortId::from_halves(0, i),
            target: PortId::from_halves(t, t),
        }
    }

    #[test]
    fn first_login_finds_nothing() {
        let mut t = NexusTable::new();
        let e = t.login(key(1, 9), 1u32, MultiChannelAction::Single);
        assert_eq!(
            e,
            LoginEffects {
                result: MultiChannelResult::NoneExisting,
                terminate: vec![],
                reject: vec![]
            }
        );
        assert_eq!(t.phase(1), Some(Phase::Pending));
        assert!(t.accepted(1));
        assert_eq!(t.phase(1), Some(Phase::Active));
        assert!(!t.accepted(1));
    }

    #[test]
    fn multi_channel_logins_are_maintained() {
        // ib_srp with ch_count = 4: first login action 0, the rest action 1.
        let mut t = NexusTable::new();
        let k = key(1, 9);
        t.login(k, 0u32, MultiChannelAction::Single);
        t.accepted(0);
        for ch in 1..4 {
            let e = t.login(k, ch, MultiChannelAction::Multi);
            assert_eq!(e.result, MultiChannelResult::Maintained);
            assert!(e.terminate.is_empty() && e.reject.is_empty());
            t.accepted(ch);
        }
        assert_eq!(t.members(&k).count(), 4);
        assert!(t.members(&k).all(|(_, p)| p == Phase::Active));
        // Reserved actions behave like 1.
        let e = t.login(k, 9, MultiChannelAction::Reserved(3));
        assert_eq!(e.result, MultiChannelResult::Maintained);
    }

    #[test]
    fn single_channel_relogin_terminates_and_rejects() {
        let mut t = NexusTable::new();
        let k = key(1, 9);
        for ch in 0..3u32 {
            t.login(
                k,
                ch,
                if ch == 0 {
                    MultiChannelAction::Single
                } else {
                    MultiChannelAction::Multi
                },
            );
            t.accepted(ch);
        }
        // Channel 3's login is still being set up; channel 2 is already closing.
        t.login(k, 3, MultiChannelAction::Multi);
        assert!(t.closing(2));
        // Another initiator, and the same initiator on another target port.
        t.login(key(2, 9), 10, MultiChannelAction::Single);
        t.accepted(10);
        t.login(key(1, 8), 11, MultiChannelAction::Single);
        t.accepted(11);

        // A reconnect: channel 0 logs in again with action 0.
        let e = t.login(k, 20, MultiChannelAction::Single);
        assert_eq!(e.result, MultiChannelResult::Terminated);
        assert_eq!(e.terminate, vec![0, 1]);
        assert_eq!(e.reject, vec![3]);
        assert_eq!(t.phase(0), Some(Phase::Closing));
        assert_eq!(t.phase(1), Some(Phase::Closing));
        assert_eq!(t.phase(3), None);
        assert_eq!(t.phase(20), Some(Phase::Pending));
        assert_eq!(t.phase(10), Some(Phase::Active));
        assert_eq!(t.phase(11), Some(Phase::Active));
        // A closing channel is not terminated twice, and a superseded login cannot be accepted.
        let e = t.login(k, 21, MultiChannelAction::Single);
        assert_eq!(e.result, MultiChannelResult::NoneExisting);
        assert!(e.terminate.is_empty());
        assert_eq!(e.reject, vec![20]);
        assert!(!t.accepted(20));
        assert!(t.accepted(21));
    }

    #[test]
    fn nexus_entries_do_not_outlive_their_channels() {
        let mut t = NexusTable::new();
        for i in 0..1000u64 {
            t.login(key(i, 9), i, MultiChannelAction::Single);
            assert!(t.remove(i));
        }
        assert_eq!(t.nexus_count(), 0);
        assert!(t.is_empty());
        assert!(!t.remove(5));
        assert!(!t.closing(5));
        assert_eq!(t.nexus_of(5), None);
    }

    #[test]
    fn listing_and_relogin_of_same_id() {
        let mut t = NexusTable::new();
        t.login(key(1, 9), 1u8, MultiChannelAction::Single);
        t.login(key(2, 9), 2u8, MultiChannelAction::Single);
        // The same channel id logging in again moves it.
        t.login(key(3, 9), 1u8, MultiChannelAction::Single);
        assert_eq!(t.nexus_of(1), Some(key(3, 9)));
        assert_eq!(t.len(), 2);
        assert_eq!(t.nexus_count(), 2);
        let mut all: Vec<_> = t.all().map(|(_, id, _)| id).collect();
        all.sort();
        assert_eq!(all, vec![1, 2]);
    }
}
