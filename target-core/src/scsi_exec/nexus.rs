//! The I_T nexus a command came through, as the SCSI exec layer sees it.

use std::cell::Cell;

use crate::reservation::{InitiatorPort, Nexus};
use crate::scsi::TargetPort;
use crate::target::ListenAddr;

/// One I_T nexus: the initiator port and the target port it logged in through. A SCSI
/// transport keeps one per session (SRP: per channel, built from its LOGIN_REQ) and passes it
/// with every command.
///
/// The nexus's unit attention queues are its session's
/// ([`super::NexusUnitAttentions`], shared by every channel), passed beside it to
/// [`super::ScsiEngine::drive`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ItNexus {
    /// The initiator port (for SRP the 16-byte initiator port id of LOGIN_REQ).
    pub initiator: InitiatorPort,
    /// The target port (VPD 0x83 target-port designators; its relative port id is the one
    /// reservations and ALUA name it by).
    pub port: TargetPort,
    /// The listener the nexus came through: its ANA path, whose state for an LU's group is
    /// the ALUA state of the port (`None`: every LU is active/optimized through it).
    pub listener: Option<ListenAddr>,
    /// The target port group of the port when the subsystem reports asymmetric access
    /// (`ana_reporting`): implicit ALUA is reported (TPGS, VPD 83h, REPORT TARGET PORT GROUPS)
    /// and each command is checked against the port's state.
    pub tpg_id: Option<u16>,
    /// The index of [`ItNexus::listener`] in the poll group's ANA snapshot, with the snapshot's
    /// epoch (a memo: the state check finds its path without searching).
    pub ana_cache: Cell<Option<(u64, usize)>>,
}

impl ItNexus {
    /// The nexus as reservations identify it: the initiator port through one relative target
    /// port.
    pub fn identity(&self) -> Nexus {
        Nexus {
            initiator: self.initiator,
            relative_target_port: self.port.relative_port,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scsi::PROTOCOL_ID_SRP;

    #[test]
    fn the_identity_is_the_initiator_port_through_the_relative_target_port() {
        let n = ItNexus {
            initiator: InitiatorPort::srp([7; 16]),
            port: TargetPort {
                protocol_id: PROTOCOL_ID_SRP,
                relative_port: 3,
                port_id: Some([9; 16]),
            },
            listener: None,
            tpg_id: None,
            ana_cache: Cell::new(None),
        };
        let id = n.identity();
        assert_eq!(id.initiator.id, [7; 16]);
        assert_eq!(id.initiator.protocol_id, PROTOCOL_ID_SRP);
        assert_eq!(id.relative_target_port, 3);
    }
}
