//! The mode parameters of one volume's SCSI logical unit (caching page WCE, control page
//! SWP), set by MODE SELECT and shared by every nexus and poll group: one atomic byte, read
//! with one load per command (no lock, no allocation).

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::scsi::ModeParams;

const WCE: u8 = 0x01;
const SWP: u8 = 0x02;

/// The current mode parameters of a namespace's logical unit. Not persisted: a restart
/// returns to the defaults (rtgt has no saved pages).
#[derive(Debug)]
pub struct LuModes {
    bits: AtomicU8,
}

impl LuModes {
    /// Mode parameters starting at `p`.
    pub fn new(p: ModeParams) -> LuModes {
        LuModes {
            bits: AtomicU8::new(Self::encode(p)),
        }
    }

    fn encode(p: ModeParams) -> u8 {
        (if p.wce { WCE } else { 0 }) | if p.swp { SWP } else { 0 }
    }

    /// The current values.
    pub fn load(&self) -> ModeParams {
        let b = self.bits.load(Ordering::Acquire);
        ModeParams {
            wce: b & WCE != 0,
            swp: b & SWP != 0,
        }
    }

    /// Replaces the values (MODE SELECT); `true` when they changed.
    pub fn store(&self, p: ModeParams) -> bool {
        self.bits.swap(Self::encode(p), Ordering::AcqRel) != Self::encode(p)
    }
}

/// A namespace's [`LuModes`] as the data path holds it: equal only to itself (one per
/// namespace), so comparing namespace views does not compare the values.
#[derive(Clone, Debug)]
pub struct SharedModes(pub Arc<LuModes>);

impl PartialEq for SharedModes {
    fn eq(&self, other: &SharedModes) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for SharedModes {}

impl std::ops::Deref for SharedModes {
    type Target = LuModes;
    fn deref(&self) -> &LuModes {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_change() {
        let m = LuModes::new(ModeParams::defaults(true));
        assert_eq!(
            m.load(),
            ModeParams {
                wce: true,
                swp: false
            }
        );
        let off = ModeParams {
            wce: false,
            swp: true,
        };
        assert!(m.store(off));
        assert_eq!(m.load(), off);
        assert!(!m.store(off), "same values: no change");
        let a = SharedModes(Arc::new(LuModes::new(off)));
        let b = SharedModes(Arc::new(LuModes::new(off)));
        assert_eq!(a, a.clone());
        assert_ne!(a, b, "one per namespace");
    }
}
