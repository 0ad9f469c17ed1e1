//! The error of every RBD operation: an errno (SPDK reports failures of its bdev_rbd RPCs as
//! negative errno codes) and a message naming what failed and why, or a parameter decoding
//! failure (which SPDK answers with `-32603 spdk_json_decode_object failed`).

use target_core::bdev::BdevError;

/// An RBD failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RbdError {
    /// The operation failed with this (positive) errno.
    #[error("{message}")]
    Errno {
        /// Positive errno (`libc::ETIMEDOUT`, `libc::ENOENT`, …).
        errno: i32,
        /// What failed and why.
        message: String,
    },
    /// A parameter could not be decoded (a malformed UUID, a non-string config value).
    #[error("spdk_json_decode_object failed: {0}")]
    Decode(String),
}

impl RbdError {
    /// An errno failure.
    pub fn errno(errno: i32, message: impl Into<String>) -> Self {
        RbdError::Errno {
            errno: errno.abs(),
            message: message.into(),
        }
    }

    /// `EINVAL` with a message.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::errno(libc::EINVAL, message)
    }

    /// The positive errno, or `None` for a decoding failure.
    pub fn code(&self) -> Option<i32> {
        match self {
            RbdError::Errno { errno, .. } => Some(*errno),
            RbdError::Decode(_) => None,
        }
    }
}

impl From<BdevError> for RbdError {
    fn from(e: BdevError) -> Self {
        RbdError::errno(e.errno(), e.to_string())
    }
}

/// The text of an errno (`strerror`), e.g. "Connection timed out".
pub fn strerror(errno: i32) -> String {
    let s = std::io::Error::from_raw_os_error(errno.abs()).to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}
