//! Errors of target management, each naming the object concerned.

use crate::bdev::BdevError;

/// What went wrong in a management operation. The RPC layer maps each kind to SPDK's code for
/// the method at hand; the message always names the object (NQN, bdev, address).
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum CoreError {
    /// The named object does not exist.
    #[error("{0}")]
    NotFound(String),
    /// The object exists already.
    #[error("{0}")]
    Exists(String),
    /// A parameter is invalid.
    #[error("{0}")]
    Invalid(String),
    /// The operation is not allowed in the current state.
    #[error("{0}")]
    State(String),
    /// A bdev operation failed; the negative errno and message.
    #[error("{1}")]
    Bdev(i32, String),
    /// A transport refused or failed.
    #[error("{0}")]
    Transport(String),
    /// Resources ran out (subsystem ids, memory).
    #[error("{0}")]
    NoResources(String),
    /// Anything else.
    #[error("{0}")]
    Internal(String),
}

impl From<BdevError> for CoreError {
    fn from(e: BdevError) -> Self {
        CoreError::Bdev(e.errno(), e.to_string())
    }
}
