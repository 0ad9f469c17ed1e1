//! Errors of the fabric API.

use std::fmt;

/// An error from a control-path fabric call (devices, registration, queues, connection manager).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FabricError {
    /// The RDMA provider found no RDMA device (no NIC, no soft-RoCE link, or no kernel support).
    #[error("no RDMA device found ({0})")]
    NoDevice(String),
    /// A verbs or RDMA CM call failed with an OS error number.
    #[error("{op} failed: {} (errno {errno})", errno_str(*.errno))]
    Os {
        /// The library call that failed.
        op: &'static str,
        /// The `errno` value it reported.
        errno: i32,
    },
    /// An argument was out of range or inconsistent.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The object is not in a state that allows the call.
    #[error("invalid state: {0}")]
    InvalidState(&'static str),
    /// Objects from different providers (or different simulated networks) were mixed.
    #[error("objects from different fabric providers or devices were mixed: {0}")]
    Mismatch(&'static str),
    /// The address is already bound by another identifier.
    #[error("address already in use")]
    AddrInUse,
    /// The address does not belong to any device.
    #[error("address not available")]
    AddrNotAvailable,
    /// The operation is not supported by this provider or device.
    #[error("not supported: {0}")]
    NotSupported(&'static str),
    /// A test fault hook made the call fail (sim provider only).
    #[error("injected fault: {0}")]
    InjectedFault(&'static str),
    /// A memory or queue resource limit was reached.
    #[error("resource exhausted: {0}")]
    Exhausted(&'static str),
}

impl FabricError {
    /// The errno-style number closest to this error (for logs and RPC replies).
    pub fn errno(&self) -> i32 {
        match self {
            FabricError::NoDevice(_) => libc::ENODEV,
            FabricError::Os { errno, .. } => *errno,
            FabricError::InvalidArgument(_) | FabricError::Mismatch(_) => libc::EINVAL,
            FabricError::InvalidState(_) => libc::EINVAL,
            FabricError::AddrInUse => libc::EADDRINUSE,
            FabricError::AddrNotAvailable => libc::EADDRNOTAVAIL,
            FabricError::NotSupported(_) => libc::EOPNOTSUPP,
            FabricError::InjectedFault(_) => libc::EIO,
            FabricError::Exhausted(_) => libc::ENOMEM,
        }
    }

    /// Builds an [`FabricError::Os`] from the calling thread's current `errno`.
    pub(crate) fn last_os(op: &'static str) -> Self {
        let errno = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO);
        FabricError::Os { op, errno }
    }

    /// Builds an [`FabricError::Os`] from a returned error number (positive or negative).
    pub(crate) fn from_ret(op: &'static str, ret: i32) -> Self {
        FabricError::Os {
            op,
            errno: ret.abs(),
        }
    }
}

fn errno_str(errno: i32) -> String {
    std::io::Error::from_raw_os_error(errno).to_string()
}

/// Result of control-path fabric calls.
pub type Result<T> = std::result::Result<T, FabricError>;

/// Why a work request could not be posted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PostErrorKind {
    /// The send or receive queue is full (`ENOMEM` in verbs).
    QueueFull,
    /// The work request has more scatter/gather entries than the queue allows, or is malformed.
    InvalidWr,
    /// The queue pair is not in a state that accepts this work request (e.g. sending before RTS).
    InvalidState,
    /// Another error number reported by the provider.
    Os(i32),
}

/// A failed post: the first `posted` work requests of the list were accepted (they will
/// complete); the one at index `posted` and all after it were not.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PostError {
    /// How many work requests from the front of the list were posted.
    pub posted: usize,
    /// Why the work request at index `posted` was refused.
    pub kind: PostErrorKind,
}

impl PostError {
    /// Maps a verbs error number to a post error.
    pub(crate) fn from_errno(posted: usize, errno: i32) -> Self {
        let kind = match errno {
            libc::ENOMEM => PostErrorKind::QueueFull,
            libc::EINVAL => PostErrorKind::InvalidWr,
            e => PostErrorKind::Os(e),
        };
        PostError { posted, kind }
    }
}

impl fmt::Display for PostError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.kind {
            PostErrorKind::QueueFull => "queue full".to_string(),
            PostErrorKind::InvalidWr => "invalid work request".to_string(),
            PostErrorKind::InvalidState => "queue pair state does not allow posting".to_string(),
            PostErrorKind::Os(e) => errno_str(e),
        };
        write!(f, "post failed at work request {}: {why}", self.posted)
    }
}

impl std::error::Error for PostError {}
