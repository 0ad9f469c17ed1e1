//! NVMe in-band authentication: DH-HMAC-CHAP (base spec 2.0 §8.13, TP 8006), sans-I/O.
//!
//! - [`secret`]: DHHC-1 secrets (`DHHC-1:0X:<base64>:`) and the transformed key.
//! - [`hash`]: SHA-256/384/512, HMAC, constant-time comparison.
//! - [`dh`]: the DH groups (null, ffdhe2048…8192) and ephemeral keys.
//! - [`chap`]: the augmented challenge and the host/controller responses.
//! - [`messages`]: AUTH_Negotiate, Challenge, Reply, Success1/2, Failure1/2 codec.
//! - [`command`]: Authentication Send/Receive command fields.
//! - [`random`]: where challenges and exponents come from.

pub mod chap;
pub mod command;
pub mod dh;
mod ffdhe;
pub mod hash;
pub mod messages;
pub mod random;
pub mod secret;

pub use command::{AuthCmd, AuthCmdError, AuthDirection};
pub use dh::{DhGroup, DhGroupSet};
pub use hash::{Digest, DigestSet};
pub use messages::{FailureReason, Message};
pub use random::{OsRandom, Random, SeededRandom};
pub use secret::{DhchapSecret, SecretError};
