//! Asymmetric access of a subsystem's paths, one model for NVMe ANA and SCSI ALUA (sans-I/O).
//!
//! A subsystem with ANA reporting has **ANA groups** 1..=ANAGRPMAX; every namespace belongs to
//! one (by default the group numbered like it). Every **listener** (an NVMe-oF listen address,
//! or an SRP target port) reports, for every group, one [`AnaState`]: optimized,
//! non-optimized, inaccessible, persistent loss, or change while a [`Transition`] runs. The
//! NVMe and SCSI code translate that one state into their own bytes: `nvme::ana` /
//! `nvme::ana_log` (Identify fields, the ANA log page, path-related status, the ANA change
//! notice) and `scsi::alua` (TPGS, VPD 83h, REPORT TARGET PORT GROUPS, NOT READY sense,
//! ASYMMETRIC ACCESS STATE CHANGED). An SRP listener is one SCSI target port in a target port
//! group of its own, so a listener's ANA state for a namespace's group is the ALUA state of
//! that port for the namespace's LU.
//!
//! - [`state`]: the states, their codes and SPDK's names.
//! - [`transition`]: the change state as a pure timer bounded by ANATT.
//! - [`model`]: [`AnaModel`], its operations and its invariants ([`AnaModel::check`]).
//! - [`events`]: what a change must tell hosts (ANA change AENs, unit attentions).
//! - [`report`]: what the model hands out (log page content, target port groups, data-path
//!   views, `save_config` content).
//!
//! # Invariants (within one process)
//!
//! Every operation is applied to a copy, checked, and only then kept: a refused operation
//! changes nothing. [`AnaError`] says why (the RPC layer answers -32602 with its message).
//!
//! 1. Group ids are 1..=ANAGRPMAX; ANAGRPMAX is 1..=65535; a namespace is in exactly one group.
//! 2. `change` is never set directly: it is what a path reports during a transition, and a
//!    transition lasts at most ANATT.
//! 3. **One optimized path for a backend that is not safe for active/active.** A namespace is
//!    declared [`ActiveActive::Safe`] or [`ActiveActive::Unsafe`]. A group that holds an unsafe
//!    namespace has at most one optimized path (state optimized, or a transition headed there)
//!    per multipath domain: one among the NVMe listeners, one among the SRP target ports. A
//!    host's NVMe multipath sees only NVMe listeners and dm-multipath only SCSI ports, so a
//!    gateway exporting the namespace over both protocols can still own its group. Within one
//!    process the rule is conservative (every listener reaches the bdev through the same
//!    object; a gateway with two NICs keeps the second non-optimized); it exists so that
//!    ownership is expressed the same way inside a gateway as across the gateways of a group,
//!    where it is what keeps such a backend from being written by two gateways at once. A
//!    process cannot see the other gateways: keeping one owner across them, and demoting the
//!    old owner before promoting the new one, is the operator's part (docs/ha.md).
//! 4. SRP listeners have distinct, non-zero relative target port identifiers and target port
//!    group ids.
//!
//! # How it runs (design for the wiring)
//!
//! The model lives with the subsystem on the control path (created when `ana_reporting` is
//! true; without it nothing is reported and every path is optimized, as in SPDK). An RPC
//! calls an operation; on success the subsystem is paused (as SPDK: nsid 0 for state changes,
//! the namespace for a group move), each poll group receives the listeners' new
//! [`PathView`]s, the subsystem resumes, and the [`AnaEvents`] are delivered: ANA change AENs
//! to the controllers of [`AnaEvents::ana_changed`], namespace attribute notices for
//! [`AnaEvents::ns_attr_changed`], unit attentions on every nexus of the LUs in
//! [`AnaEvents::alua_changed`]. A timer fires at [`AnaModel::next_deadline`] and calls
//! [`AnaModel::poll`], which ends due transitions and returns their events the same way.
//! Admission per command reads the connection's [`PathView`]: no lock, no allocation.

pub mod error;
pub mod events;
pub mod model;
pub mod report;
pub mod state;
pub mod transition;

#[cfg(test)]
mod cross_tests;
#[cfg(test)]
mod tests;

pub use error::AnaError;
pub use events::AnaEvents;
pub use model::{
    ANAGRPMAX_LIMIT, ActiveActive, AnaConfig, AnaGroupId, AnaModel, DEFAULT_ANATT_SECS, ListenerId,
    ScsiPort,
};
pub use report::{AnaGroupLog, AnaLog, PathView, SavedAna, TpgEntry};
pub use state::{ALL_STATES, AnaState, UnknownAnaState};
pub use transition::Transition;
