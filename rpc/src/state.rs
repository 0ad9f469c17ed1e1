//! RPC states (SPDK's `SPDK_RPC_STARTUP` / `SPDK_RPC_RUNTIME`) and per-method state masks.
//!
//! A method registered with mask `m` may be called in state `s` iff `m & s == s`. The target
//! starts in STARTUP; without `--wait-for-rpc` the daemon initialises and switches to RUNTIME
//! before serving, with `--wait-for-rpc` it stays in STARTUP until `framework_start_init`.

use std::fmt;
use std::ops::BitOr;

use tokio::sync::watch;

use crate::error::{MSG_ALREADY_INITIALIZED, MSG_NOT_YET_INITIALIZED, RpcError, codes};

/// The RPC state of the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RpcState {
    /// Before subsystem initialisation (`--wait-for-rpc`): only STARTUP methods are callable.
    Startup,
    /// After initialisation: only RUNTIME methods are callable.
    Runtime,
}

impl RpcState {
    /// SPDK's bit for this state (`0x1` / `0x2`).
    pub const fn bits(self) -> u8 {
        match self {
            RpcState::Startup => 0x1,
            RpcState::Runtime => 0x2,
        }
    }
}

/// The set of states in which a method may be called.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct StateMask(u8);

impl StateMask {
    /// Callable only before `framework_start_init` (e.g. `nvmf_set_config`).
    pub const STARTUP: StateMask = StateMask(0x1);
    /// Callable only after initialisation (all nvmf and bdev CRUD methods).
    pub const RUNTIME: StateMask = StateMask(0x2);
    /// Callable in both states (`rpc_get_methods`, `spdk_get_version`, …).
    pub const ANY: StateMask = StateMask(0x3);

    /// The raw mask bits.
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether a method with this mask may be called in `state` (SPDK's rule).
    pub const fn allows(self, state: RpcState) -> bool {
        self.0 & state.bits() == state.bits()
    }

    /// `Ok(())` if the call is allowed in `state`, else the `-1` error SPDK returns.
    pub fn check(self, state: RpcState) -> Result<(), RpcError> {
        if self.allows(state) {
            return Ok(());
        }
        let msg = match state {
            RpcState::Startup => MSG_NOT_YET_INITIALIZED,
            RpcState::Runtime => MSG_ALREADY_INITIALIZED,
        };
        Err(RpcError::new(codes::INVALID_STATE, msg))
    }
}

impl BitOr for StateMask {
    type Output = StateMask;
    fn bitor(self, rhs: StateMask) -> StateMask {
        StateMask(self.0 | rhs.0)
    }
}

impl fmt::Debug for StateMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            0x1 => f.write_str("STARTUP"),
            0x2 => f.write_str("RUNTIME"),
            0x3 => f.write_str("STARTUP|RUNTIME"),
            b => write!(f, "StateMask({b:#x})"),
        }
    }
}

/// Shared, observable RPC state. Cloning gives another handle to the same state.
#[derive(Clone, Debug)]
pub struct StateHandle {
    tx: watch::Sender<RpcState>,
}

impl StateHandle {
    /// A new state cell starting in `initial`.
    pub fn new(initial: RpcState) -> Self {
        let (tx, _rx) = watch::channel(initial);
        Self { tx }
    }

    /// The current state.
    pub fn get(&self) -> RpcState {
        *self.tx.borrow()
    }

    /// Switch state (e.g. to RUNTIME once subsystems are initialised). Wakes
    /// `framework_wait_init` callers.
    pub fn set(&self, state: RpcState) {
        self.tx.send_replace(state);
    }

    /// Wait until the state is `state`.
    pub async fn wait_for(&self, state: RpcState) {
        let mut rx = self.tx.subscribe();
        // The sender lives in `self`, so `wait_for` cannot fail while we hold it.
        let _ = rx.wait_for(|s| *s == state).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mask_rule_matches_spdk() {
        assert!(StateMask::ANY.allows(RpcState::Startup));
        assert!(StateMask::ANY.allows(RpcState::Runtime));
        assert!(StateMask::STARTUP.allows(RpcState::Startup));
        assert!(!StateMask::STARTUP.allows(RpcState::Runtime));
        assert!(!StateMask::RUNTIME.allows(RpcState::Startup));
        assert_eq!(StateMask::STARTUP | StateMask::RUNTIME, StateMask::ANY);
        let e = StateMask::RUNTIME.check(RpcState::Startup).unwrap_err();
        assert_eq!(e.code, -1);
        assert_eq!(e.message, MSG_NOT_YET_INITIALIZED);
        let e = StateMask::STARTUP.check(RpcState::Runtime).unwrap_err();
        assert_eq!(e.message, MSG_ALREADY_INITIALIZED);
    }

    #[tokio::test]
    async fn wait_for_wakes_on_set() {
        let s = StateHandle::new(RpcState::Startup);
        let s2 = s.clone();
        let t = tokio::spawn(async move { s2.wait_for(RpcState::Runtime).await });
        tokio::task::yield_now().await;
        assert!(!t.is_finished());
        s.set(RpcState::Runtime);
        t.await.unwrap();
        assert_eq!(s.get(), RpcState::Runtime);
    }
}
