//! NVMe in-band authentication: DH-HMAC-CHAP (base spec 2.0 §8.13, TP 8006), sans-I/O.
//!
//! - [`secret`]: DHHC-1 secrets (`DHHC-1:0X:<base64>:`) and the transformed key.
//! - [`hash`]: SHA-256/384/512, HMAC, constant-time comparison.
//! - [`dh`]: the DH groups (null, ffdhe2048…8192) and ephemeral keys.
//! - [`chap`]: the augmented challenge and the host/controller responses.
//! - [`messages`]: AUTH_Negotiate, Challenge, Reply, Success1/2, Failure1/2 codec.
//! - [`command`]: Authentication Send/Receive command fields.
//! - [`ctrl`]: the controller-side state machine of one queue ([`CtrlAuth`]).
//! - [`host`]: the host side ([`HostAuth`]), for the test host and the tests.
//! - [`idset`]: sets of hashes and groups (the configured offer).
//! - [`random`]: where challenges and exponents come from.
//!
//! The exec layer binds it to the queues (`crate::nvme_exec`'s `auth_cmd`): it
//! 1. answers Connect with AUTHREQ.ATR (DW0 bit 17) when the host has a `dhchap_key`, and creates
//!    a [`CtrlAuth`] for that queue (admin and every I/O queue);
//! 2. until [`CtrlAuth::is_authenticated`], refuses every command but Connect, Property Get of
//!    CAP and Authentication Send/Receive ([`AUTH_REQUIRED`]);
//! 3. parses Authentication Send/Receive with [`AuthCmd::parse`] (its error is the completion),
//!    passes the data to [`CtrlAuth::send`] or the AL to [`CtrlAuth::receive`] (the DH steps on
//!    an authentication thread), completes with the [`AuthOutcome`]'s status and data, and on
//!    [`AuthEvent::Failed`] tears the queue down once that completion was sent;
//! 4. closes a queue whose [`CtrlAuth::deadline`] passed (with the keep-alive timer).

pub mod chap;
pub mod command;
pub mod ctrl;
pub mod dh;
mod ffdhe;
pub mod hash;
pub mod host;
pub mod idset;
pub mod messages;
pub mod random;
pub mod secret;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod vectors;

use super::spec::Status;

pub use command::{AuthCmd, AuthCmdError, AuthDirection};
pub use ctrl::{AuthEvent, AuthOutcome, AuthPolicy, CtrlAuth, CtrlAuthParams, HostKeys};
pub use dh::{DhGroup, DhGroupSet};
pub use hash::{Digest, DigestSet};
pub use host::{HostAction, HostAuth, HostAuthParams};
pub use idset::{AuthId, IdSet};
pub use messages::{FailureReason, Message};
pub use random::{OsRandom, Random, SeededRandom};
pub use secret::{DhchapSecret, SecretError};

/// Authentication Required (Fabrics command-specific status 91h, with DNR as nvmet sets it): a
/// command other than Connect, Property Get and Authentication Send/Receive on a queue that has
/// not authenticated yet. The Linux host answers it by (re-)authenticating.
pub const AUTH_REQUIRED: Status = Status::command_specific(0x91).dnr();

/// Connect response DW0 bit 17, AUTHREQ.ATR: the host must authenticate on this queue.
pub const CONNECT_AUTHREQ_ATR: u32 = 1 << 17;
