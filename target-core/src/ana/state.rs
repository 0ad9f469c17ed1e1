//! The asymmetric access state of one path (listener) to one ANA group, with the names SPDK's
//! RPCs use and the codes the NVMe ANA log page carries.

use std::fmt;
use std::str::FromStr;

/// The access state a listener reports for an ANA group (NVMe base spec 2.0 §8.1.3; the
/// values are the ANA log page's ANA State codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum AnaState {
    /// Optimized: the preferred path; commands are processed.
    Optimized = 0x1,
    /// Non-optimized: commands are processed, the host prefers an optimized path if it has one.
    NonOptimized = 0x2,
    /// Inaccessible: the namespaces of the group cannot be reached through this listener for
    /// now; I/O completes with Asymmetric Access Inaccessible.
    Inaccessible = 0x3,
    /// Persistent loss: the namespaces of the group will not be reachable through this listener
    /// again; I/O completes with Asymmetric Access Persistent Loss.
    PersistentLoss = 0x4,
    /// Change: a transition between states is in progress (bounded by ANATT); I/O completes
    /// with Asymmetric Access Transition.
    Change = 0xF,
}

/// Every state, in code order.
pub const ALL_STATES: [AnaState; 5] = [
    AnaState::Optimized,
    AnaState::NonOptimized,
    AnaState::Inaccessible,
    AnaState::PersistentLoss,
    AnaState::Change,
];

impl AnaState {
    /// The ANA State code of the ANA log page group descriptor (byte 16, bits 3:0).
    pub const fn code(self) -> u8 {
        self as u8
    }

    /// The state for an ANA State code; `None` for reserved values.
    pub const fn from_code(code: u8) -> Option<AnaState> {
        Some(match code {
            0x1 => AnaState::Optimized,
            0x2 => AnaState::NonOptimized,
            0x3 => AnaState::Inaccessible,
            0x4 => AnaState::PersistentLoss,
            0xF => AnaState::Change,
            _ => return None,
        })
    }

    /// The name SPDK's RPCs use (`ana_state` of `nvmf_subsystem_add_listener` /
    /// `nvmf_subsystem_listener_set_ana_state`, `ana_states` of `nvmf_subsystem_get_listeners`).
    pub const fn name(self) -> &'static str {
        match self {
            AnaState::Optimized => "optimized",
            AnaState::NonOptimized => "non_optimized",
            AnaState::Inaccessible => "inaccessible",
            AnaState::PersistentLoss => "persistent_loss",
            AnaState::Change => "change",
        }
    }

    /// Commands that access the namespaces of the group are processed through this path.
    pub const fn is_accessible(self) -> bool {
        matches!(self, AnaState::Optimized | AnaState::NonOptimized)
    }
}

impl fmt::Display for AnaState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A state name that is not one of SPDK's.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid ANA state {0:?} (optimized, non_optimized, inaccessible, persistent_loss)")]
pub struct UnknownAnaState(pub String);

impl FromStr for AnaState {
    type Err = UnknownAnaState;

    /// Parses SPDK's names (exact, lower case, as SPDK's JSON decoder accepts them).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        ALL_STATES
            .into_iter()
            .find(|st| st.name() == s)
            .ok_or_else(|| UnknownAnaState(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_the_log_page_values() {
        let codes: Vec<u8> = ALL_STATES.iter().map(|s| s.code()).collect();
        assert_eq!(codes, [1, 2, 3, 4, 0xF]);
        for s in ALL_STATES {
            assert_eq!(AnaState::from_code(s.code()), Some(s));
        }
        for reserved in [0u8, 5, 6, 0xE, 0x10, 0xFF] {
            assert_eq!(AnaState::from_code(reserved), None);
        }
    }

    #[test]
    fn names_round_trip_and_unknown_names_fail() {
        for s in ALL_STATES {
            assert_eq!(s.name().parse::<AnaState>(), Ok(s));
            assert_eq!(s.to_string(), s.name());
        }
        assert!("Optimized".parse::<AnaState>().is_err());
        assert!("non-optimized".parse::<AnaState>().is_err());
        assert_eq!("".parse::<AnaState>(), Err(UnknownAnaState(String::new())));
    }

    #[test]
    fn only_optimized_and_non_optimized_are_accessible() {
        let acc: Vec<bool> = ALL_STATES.iter().map(|s| s.is_accessible()).collect();
        assert_eq!(acc, [true, true, false, false, false]);
    }
}
