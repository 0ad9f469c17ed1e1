//! The Authentication Send (FCTYPE 05h) and Authentication Receive (06h) command fields.
//!
//! Both are fabrics commands with the security protocol fields of Security Send/Receive (the
//! kernel's `struct nvmf_auth_send_command`): byte 40 NSSF (reserved here), 41 SPSP0, 42 SPSP1,
//! 43 SECP, 44..48 TL (Send: the message length) or AL (Receive: the host's buffer length).
//! NVMe in-band authentication uses SECP E9h with SPSP0 = SPSP1 = 01h; anything else, or a
//! zero length, is Invalid Field in Command at that byte (as the kernel and SPDK answer).

use crate::nvme::spec::{Status, fctype};
use crate::nvme::sqe::Sqe;

/// SECP of NVMe in-band authentication.
pub const SECP_NVME_AUTH: u8 = 0xE9;
/// SPSP0 and SPSP1 of DH-HMAC-CHAP.
pub const SPSP_DHCHAP: u8 = 0x01;
/// The longest message an Authentication Send may carry. The largest DH-HMAC-CHAP message is a
/// Reply with SHA-512 and ffdhe8192 (16 + 2·64 + 1024 bytes); the Linux host and SPDK use a
/// 4 KiB buffer.
pub const MAX_SEND_LEN: u32 = 4096;

/// SQE byte offsets (for the error location).
pub mod off {
    /// SPSP0.
    pub const SPSP0: u16 = 41;
    /// SPSP1.
    pub const SPSP1: u16 = 42;
    /// SECP.
    pub const SECP: u16 = 43;
    /// TL / AL.
    pub const LEN: u16 = 44;
}

/// Which of the two commands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AuthDirection {
    /// Authentication Send: the host sends a message (TL bytes).
    Send,
    /// Authentication Receive: the host asks for the next message (up to AL bytes).
    Receive,
}

/// A checked Authentication Send/Receive command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthCmd {
    /// Send or Receive.
    pub direction: AuthDirection,
    /// TL (Send) or AL (Receive), nonzero.
    pub len: u32,
}

/// Why an Authentication Send/Receive command was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AuthCmdError {
    /// The completion status (Invalid Field in Command, DNR).
    pub status: Status,
    /// The offending SQE byte (for the error location).
    pub offset: u16,
}

impl AuthCmd {
    /// Checks the command fields of an Authentication Send/Receive SQE. `None` if the SQE is not
    /// one of them.
    pub fn parse(sqe: &Sqe) -> Option<Result<AuthCmd, AuthCmdError>> {
        if !sqe.is_fabrics() {
            return None;
        }
        let direction = match sqe.fctype() {
            fctype::AUTH_SEND => AuthDirection::Send,
            fctype::AUTH_RECV => AuthDirection::Receive,
            _ => return None,
        };
        let bad = |offset| {
            Some(Err(AuthCmdError {
                status: Status::INVALID_FIELD,
                offset,
            }))
        };
        if sqe.u8_at(usize::from(off::SECP)) != SECP_NVME_AUTH {
            return bad(off::SECP);
        }
        if sqe.u8_at(usize::from(off::SPSP0)) != SPSP_DHCHAP {
            return bad(off::SPSP0);
        }
        if sqe.u8_at(usize::from(off::SPSP1)) != SPSP_DHCHAP {
            return bad(off::SPSP1);
        }
        let len = sqe.u32_at(usize::from(off::LEN));
        if len == 0 || (direction == AuthDirection::Send && len > MAX_SEND_LEN) {
            return bad(off::LEN);
        }
        Some(Ok(AuthCmd { direction, len }))
    }

    /// Whether the data the command transfers (its SGL's length) is what TL/AL says; the kernel
    /// and SPDK refuse a mismatch with Invalid Field in Command.
    pub fn transfer_matches(&self, data_len: u32) -> bool {
        data_len == self.len
    }

    /// An Authentication Send/Receive SQE as the Linux host builds it (`nvme_auth_submit`),
    /// without its data SGL.
    pub fn sqe(direction: AuthDirection, cid: u16, len: u32) -> Sqe {
        let ft = match direction {
            AuthDirection::Send => fctype::AUTH_SEND,
            AuthDirection::Receive => fctype::AUTH_RECV,
        };
        let mut s = Sqe::fabrics(ft, cid);
        s.set_u8_at(usize::from(off::SPSP0), SPSP_DHCHAP)
            .set_u8_at(usize::from(off::SPSP1), SPSP_DHCHAP)
            .set_u8_at(usize::from(off::SECP), SECP_NVME_AUTH)
            .set_u32_at(usize::from(off::LEN), len);
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_linux_commands() {
        for dir in [AuthDirection::Send, AuthDirection::Receive] {
            let s = AuthCmd::sqe(dir, 7, 72);
            assert_eq!(
                AuthCmd::parse(&s),
                Some(Ok(AuthCmd {
                    direction: dir,
                    len: 72
                }))
            );
            assert_eq!(&s.as_bytes()[40..48], &[0, 1, 1, 0xE9, 72, 0, 0, 0]);
        }
        let a = AuthCmd::parse(&AuthCmd::sqe(AuthDirection::Receive, 1, 1 << 20))
            .unwrap()
            .unwrap();
        assert!(a.transfer_matches(1 << 20) && !a.transfer_matches(4096));
    }

    #[test]
    fn refuses_bad_fields_at_their_offset() {
        let base = AuthCmd::sqe(AuthDirection::Send, 1, 100);
        for (offset, value) in [(off::SECP, 0xEA), (off::SPSP0, 0), (off::SPSP1, 2)] {
            let mut s = base;
            s.set_u8_at(usize::from(offset), value);
            assert_eq!(
                AuthCmd::parse(&s),
                Some(Err(AuthCmdError {
                    status: Status::INVALID_FIELD,
                    offset
                }))
            );
        }
        for len in [0, MAX_SEND_LEN + 1] {
            let s = AuthCmd::sqe(AuthDirection::Send, 1, len);
            assert_eq!(AuthCmd::parse(&s).unwrap().unwrap_err().offset, off::LEN);
        }
        assert_eq!(
            AuthCmd::parse(&AuthCmd::sqe(AuthDirection::Receive, 1, 0))
                .unwrap()
                .unwrap_err()
                .offset,
            off::LEN
        );
        assert_eq!(AuthCmd::parse(&Sqe::fabrics(fctype::CONNECT, 1)), None);
        assert_eq!(AuthCmd::parse(&Sqe::new(0x06, 1)), None);
    }
}
