//! Why the model refused a configuration change. Every variant is an operator error: the RPC
//! layer answers it with JSON-RPC -32602 and this message.

use super::model::{AnaGroupId, ListenerId};

/// A refused ANA configuration change. Nothing was changed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AnaError {
    /// ANAGRPMAX outside 1..=65535 (the log page counts its descriptors in 16 bits).
    #[error("invalid ANA group limit {0} (1..=65535)")]
    GroupLimit(u32),
    /// ANATT of 0 seconds (it bounds every transition and the Linux host's change timer).
    #[error("invalid ANA transition time 0 (1..=255 seconds)")]
    ZeroAnatt,
    /// An ANA group id outside 1..=ANAGRPMAX.
    #[error("invalid ANA group {group} (1..={max})")]
    InvalidGroup {
        /// The id asked for.
        group: AnaGroupId,
        /// ANAGRPMAX.
        max: u32,
    },
    /// A namespace id of 0 or 0xFFFFFFFF.
    #[error("invalid namespace id {0}")]
    InvalidNsid(u32),
    /// The namespace is not in the model.
    #[error("namespace {0} not found")]
    UnknownNamespace(u32),
    /// The namespace is already in the model.
    #[error("namespace {0} already exists")]
    DuplicateNamespace(u32),
    /// The listener is not in the model.
    #[error("listener {0} not found")]
    UnknownListener(ListenerId),
    /// The listener is already in the model.
    #[error("listener {0} already exists")]
    DuplicateListener(ListenerId),
    /// `change` was asked for directly: it is only reported while a transition runs.
    #[error("ANA state change cannot be set; it is reported while a transition runs")]
    ChangeNotSettable,
    /// A transition longer than ANATT (the host would reset the controller).
    #[error("transition time {ms} ms exceeds the ANA transition time (ANATT) of {anatt_secs} s")]
    TransitionTooLong {
        /// The transition asked for, in milliseconds.
        ms: u128,
        /// ANATT in seconds.
        anatt_secs: u8,
    },
    /// A group holding a namespace whose backend is not declared safe for active/active access
    /// would have more than one optimized path in one multipath domain (NVMe listeners, or SRP
    /// target ports).
    #[error(
        "ANA group {group} would have {} optimized {} ({}) but namespace {nsid} is not declared \
         safe for active/active access: keep one optimized path per group and set the others \
         non_optimized or inaccessible",
        listeners.len(),
        if *scsi { "SRP target ports" } else { "NVMe listeners" },
        listeners.iter().map(ToString::to_string).collect::<Vec<_>>().join(", ")
    )]
    SecondOptimized {
        /// The group.
        group: AnaGroupId,
        /// The listeners that would be optimized.
        listeners: Vec<ListenerId>,
        /// The (lowest) namespace of the group whose backend is not safe for active/active.
        nsid: u32,
        /// The domain: SRP target ports (`true`) or NVMe listeners.
        scsi: bool,
    },
    /// A SCSI relative target port identifier of 0 (reserved) or already used by another
    /// listener.
    #[error("relative target port identifier {0} is reserved or already used")]
    RelativePort(u16),
    /// A SCSI target port group id of 0 (rtgt gives every target port a group id of its own,
    /// 1..=65535) or already used by another listener.
    #[error("target port group {0} is 0 or already used")]
    TargetPortGroup(u16),
}
