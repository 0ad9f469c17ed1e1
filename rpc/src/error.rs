//! SPDK-compatible JSON-RPC errors.
//!
//! SPDK uses the JSON-RPC 2.0 codes for envelope and decoding failures, `-1` for a method called
//! in the wrong RPC state, and negative errno values (with `strerror` text) for many storage
//! failures. The error object on the wire is always `{"code": <int>, "message": <string>}`: SPDK
//! never sends a `data` member, and neither do we.

use jsonrpsee::types::ErrorObjectOwned;

/// The JSON-RPC error codes SPDK uses (include/spdk/jsonrpc.h).
pub mod codes {
    /// Malformed JSON. The connection is closed after this error.
    pub const PARSE_ERROR: i32 = -32700;
    /// The envelope is not a valid request object.
    pub const INVALID_REQUEST: i32 = -32600;
    /// No method with that name is registered.
    pub const METHOD_NOT_FOUND: i32 = -32601;
    /// Parameter decoding or validation failed (also "object not found" in many nvmf RPCs).
    pub const INVALID_PARAMS: i32 = -32602;
    /// A runtime failure (also decode failures in the bdev RPCs).
    pub const INTERNAL_ERROR: i32 = -32603;
    /// The method may not be called in the current RPC state (STARTUP/RUNTIME).
    pub const INVALID_STATE: i32 = -1;
    /// rtgt: the server is serving its maximum number of connections; this one is closed
    /// after the error. (JSON-RPC 2.0 reserves -32000 to -32099 for server errors; SPDK
    /// instead leaves such clients waiting in the listen backlog.)
    pub const SERVER_BUSY: i32 = -32000;
}

/// Message SPDK sends when a RUNTIME-only method is called in the STARTUP state.
pub const MSG_NOT_YET_INITIALIZED: &str =
    "Method may only be called after framework is initialized using framework_start_init RPC.";

/// Message SPDK sends when a STARTUP-only method is called in the RUNTIME state.
pub const MSG_ALREADY_INITIALIZED: &str = "Method may only be called before framework is initialized. Use --wait-for-rpc command line parameter and then issue this RPC before the framework_start_init RPC.";

/// Result type of RPC handlers.
pub type RpcResult<T> = Result<T, RpcError>;

/// A JSON-RPC error as SPDK sends it: a code and a message, nothing else.
///
/// Messages should name the object involved ("Subsystem with NQN 'nqn…' not found"); codes are
/// the part of the interface clients match on, so keep them SPDK's.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message} (code {code})")]
pub struct RpcError {
    /// The JSON-RPC error code (see [`codes`]) or a negative errno.
    pub code: i32,
    /// Human-readable message.
    pub message: String,
}

impl RpcError {
    /// An error with an explicit code and message.
    pub fn new(code: i32, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// `-32700 Parse error`.
    pub fn parse_error() -> Self {
        Self::new(codes::PARSE_ERROR, "Parse error")
    }

    /// `-32600 Invalid request`.
    pub fn invalid_request() -> Self {
        Self::new(codes::INVALID_REQUEST, "Invalid request")
    }

    /// `-32601 Method not found`.
    pub fn method_not_found() -> Self {
        Self::new(codes::METHOD_NOT_FOUND, "Method not found")
    }

    /// `-32602` with a specific message, e.g. `Subsystem with NQN 'x' not found`.
    pub fn invalid_params(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_PARAMS, message)
    }

    /// `-32602 Invalid parameters`, SPDK's canned message.
    pub fn invalid_params_default() -> Self {
        Self::invalid_params("Invalid parameters")
    }

    /// `-32603` with a specific message, e.g. `Unable to create subsystem nqn…`.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(codes::INTERNAL_ERROR, message)
    }

    /// `-32603 Internal error`, SPDK's canned message.
    pub fn internal_default() -> Self {
        Self::internal("Internal error")
    }

    /// `-1` (wrong RPC state) with a specific message. The dispatcher produces the two standard
    /// state errors itself; handlers rarely need this.
    pub fn invalid_state(message: impl Into<String>) -> Self {
        Self::new(codes::INVALID_STATE, message)
    }

    /// A negative-errno error with the C library's text: `from_errno(-19)` (or `19`) gives
    /// `{"code": -19, "message": "No such device"}`.
    pub fn from_errno(errno: i32) -> Self {
        let e = errno.checked_abs().unwrap_or(i32::MAX);
        Self::new(-e, strerror(e))
    }

    /// A negative-errno error with a custom message naming the object, e.g.
    /// `errno(-17, "Bdev 'Malloc0' already exists")`.
    pub fn errno(errno: i32, message: impl Into<String>) -> Self {
        let e = errno.checked_abs().unwrap_or(i32::MAX);
        Self::new(-e, message)
    }

    /// `-19 No such device`, SPDK's answer for a missing bdev or subsystem in several RPCs.
    pub fn no_such_device() -> Self {
        Self::from_errno(libc::ENODEV)
    }

    /// `-17 File exists`.
    pub fn exists() -> Self {
        Self::from_errno(libc::EEXIST)
    }

    /// `-22 Invalid argument`.
    pub fn einval() -> Self {
        Self::from_errno(libc::EINVAL)
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(e: RpcError) -> Self {
        ErrorObjectOwned::owned(e.code, e.message, None::<()>)
    }
}

impl From<&ErrorObjectOwned> for RpcError {
    fn from(e: &ErrorObjectOwned) -> Self {
        // Deliberately drops `data`: SPDK never sends it.
        RpcError::new(e.code(), e.message())
    }
}

/// The C library's text for a (positive) errno value, as `strerror` gives it.
pub fn strerror(errno: i32) -> String {
    let full = std::io::Error::from_raw_os_error(errno).to_string();
    // std formats "<strerror text> (os error N)"; keep the C text only.
    match full.rfind(" (os error ") {
        Some(i) => full[..i].to_string(),
        None => full,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errno_text_matches_libc() {
        assert_eq!(
            RpcError::from_errno(-19),
            RpcError::new(-19, "No such device")
        );
        assert_eq!(RpcError::from_errno(17), RpcError::new(-17, "File exists"));
        assert_eq!(RpcError::einval().message, "Invalid argument");
        assert_eq!(RpcError::from_errno(-110).message, "Connection timed out");
        assert_eq!(RpcError::from_errno(-12).message, "Cannot allocate memory");
        assert_eq!(RpcError::from_errno(i32::MIN).code, -i32::MAX);
    }

    #[test]
    fn converts_without_data() {
        let e: ErrorObjectOwned = RpcError::invalid_params("Bdev 'x' not found").into();
        assert_eq!(e.code(), -32602);
        assert_eq!(e.message(), "Bdev 'x' not found");
        assert!(e.data().is_none());
        let back = RpcError::from(&ErrorObjectOwned::owned(-32602, "m", Some("detail")));
        assert_eq!(back, RpcError::invalid_params("m"));
    }
}
