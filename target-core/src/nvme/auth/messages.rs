//! The authentication messages carried by Authentication Send/Receive (base spec §8.13.5,
//! TP 8006; the kernel's `struct nvmf_auth_dhchap_*_data`): encode and decode.
//!
//! Every message starts with AUTH_TYPE (00h common, 01h DH-HMAC-CHAP), AUTH_ID, two reserved
//! bytes and the little-endian transaction id T_ID. Layouts (byte offsets):
//!
//! | message | after the 6-byte header |
//! |---|---|
//! | AUTH_Negotiate (00h/00h) | 6 SC_C, 7 NAPD, then NAPD 64-byte descriptors: 0 AUTHID (01h), 2 HALEN, 3 DHLEN, 4..34 hash ids, 34..64 DH group ids |
//! | Challenge (01h/01h) | 6 HL, 8 HASHID, 9 DHGID, 10 DHVLEN (le16), 12 SEQNUM (le32), 16 C (HL bytes), then DHVLEN bytes of DH value |
//! | Reply (01h/02h) | 6 HL, 8 CVALID, 10 DHVLEN, 12 SEQNUM, 16 R (HL), then C2 (HL, zero unless CVALID), then DH value |
//! | Success1 (01h/03h) | 6 HL, 8 RVALID, 16 R2 (HL bytes, only if RVALID) |
//! | Success2 (01h/04h) | 16 bytes in all |
//! | AUTH_Failure2/1 (00h/F0h, 00h/F1h) | 6 REASON CODE (01h), 7 REASON CODE EXPLANATION |
//!
//! The decoder checks every length against the buffer and never panics; it ignores reserved
//! bytes and bytes past the message (the kernel target pads Authentication Receive data to the
//! allocation length). [`Message::encoded_len`] is the exact length, for callers that require
//! the transfer to be exactly one message, as SPDK does.

use core::fmt;

use arrayvec::ArrayVec;

/// AUTH_TYPE values.
pub mod auth_type {
    /// Common messages (negotiate, failures).
    pub const COMMON: u8 = 0x00;
    /// DH-HMAC-CHAP messages.
    pub const DHCHAP: u8 = 0x01;
}

/// AUTH_ID values.
pub mod auth_id {
    /// AUTH_Negotiate.
    pub const NEGOTIATE: u8 = 0x00;
    /// DH-HMAC-CHAP_Challenge.
    pub const CHALLENGE: u8 = 0x01;
    /// DH-HMAC-CHAP_Reply.
    pub const REPLY: u8 = 0x02;
    /// DH-HMAC-CHAP_Success1.
    pub const SUCCESS1: u8 = 0x03;
    /// DH-HMAC-CHAP_Success2.
    pub const SUCCESS2: u8 = 0x04;
    /// AUTH_Failure2 (host to controller).
    pub const FAILURE2: u8 = 0xF0;
    /// AUTH_Failure1 (controller to host).
    pub const FAILURE1: u8 = 0xF1;
}

/// AUTHID of the DH-HMAC-CHAP protocol descriptor.
pub const PROTOCOL_DHCHAP: u8 = 0x01;
/// Size of one protocol descriptor in AUTH_Negotiate.
pub const DESCRIPTOR_LEN: usize = 64;
/// At most this many hash ids and this many DH group ids fit in a descriptor.
pub const MAX_IDS: usize = 30;
/// REASON CODE of a failure message: authentication failure.
pub const REASON_FAILED: u8 = 0x01;
/// Size of the fixed part of the Challenge, Reply, Success1 and Success2 messages.
pub const DHCHAP_HEADER_LEN: usize = 16;
/// Size of the AUTH_Negotiate header (before the descriptors).
pub const NEGOTIATE_HEADER_LEN: usize = 8;
/// Size of a failure message.
pub const FAILURE_LEN: usize = 8;

/// REASON CODE EXPLANATION of AUTH_Failure1/2.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailureReason {
    /// 01h: authentication failed (wrong response, missing key, …).
    Failed,
    /// 02h: authentication protocol not usable.
    ProtocolUnusable,
    /// 03h: secure channel concatenation mismatch.
    ConcatMismatch,
    /// 04h: hash function not usable.
    HashUnusable,
    /// 05h: DH group not usable.
    DhGroupUnusable,
    /// 06h: incorrect payload.
    IncorrectPayload,
    /// 07h: incorrect protocol message.
    IncorrectProtocolMessage,
    /// Any other value, as received.
    Other(u8),
}

impl FailureReason {
    /// The wire value.
    pub fn code(self) -> u8 {
        match self {
            FailureReason::Failed => 0x01,
            FailureReason::ProtocolUnusable => 0x02,
            FailureReason::ConcatMismatch => 0x03,
            FailureReason::HashUnusable => 0x04,
            FailureReason::DhGroupUnusable => 0x05,
            FailureReason::IncorrectPayload => 0x06,
            FailureReason::IncorrectProtocolMessage => 0x07,
            FailureReason::Other(v) => v,
        }
    }

    /// The explanation for a wire value.
    pub fn from_code(v: u8) -> FailureReason {
        match v {
            0x01 => FailureReason::Failed,
            0x02 => FailureReason::ProtocolUnusable,
            0x03 => FailureReason::ConcatMismatch,
            0x04 => FailureReason::HashUnusable,
            0x05 => FailureReason::DhGroupUnusable,
            0x06 => FailureReason::IncorrectPayload,
            0x07 => FailureReason::IncorrectProtocolMessage,
            v => FailureReason::Other(v),
        }
    }
}

impl fmt::Display for FailureReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FailureReason::Failed => f.write_str("authentication failed"),
            FailureReason::ProtocolUnusable => f.write_str("authentication protocol not usable"),
            FailureReason::ConcatMismatch => f.write_str("secure channel concatenation mismatch"),
            FailureReason::HashUnusable => f.write_str("hash function not usable"),
            FailureReason::DhGroupUnusable => f.write_str("DH group not usable"),
            FailureReason::IncorrectPayload => f.write_str("incorrect payload"),
            FailureReason::IncorrectProtocolMessage => f.write_str("incorrect protocol message"),
            FailureReason::Other(v) => write!(f, "reason explanation {v:#04x}"),
        }
    }
}

/// One authentication protocol descriptor of AUTH_Negotiate.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProtocolDescriptor {
    /// AUTHID ([`PROTOCOL_DHCHAP`] for DH-HMAC-CHAP).
    pub auth_id: u8,
    /// The hash function ids the host offers, in its order of preference.
    pub hash_ids: ArrayVec<u8, MAX_IDS>,
    /// The DH group ids the host offers.
    pub dh_ids: ArrayVec<u8, MAX_IDS>,
}

/// AUTH_Negotiate (host to controller): starts a transaction.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Negotiate {
    /// Transaction id.
    pub tid: u16,
    /// Secure channel concatenation (0: none; rtgt supports no other).
    pub sc_c: u8,
    /// The protocol descriptors (NAPD of them).
    pub protocols: Vec<ProtocolDescriptor>,
}

/// DH-HMAC-CHAP_Challenge (controller to host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    /// Transaction id.
    pub tid: u16,
    /// The selected hash function id.
    pub hash_id: u8,
    /// The selected DH group id.
    pub dh_id: u8,
    /// Sequence number S1.
    pub seqnum: u32,
    /// The challenge C1 (HL bytes).
    pub challenge: Vec<u8>,
    /// The controller's DH public value (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Reply (host to controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reply {
    /// Transaction id.
    pub tid: u16,
    /// The host's response R1 (HL bytes).
    pub response: Vec<u8>,
    /// The host's challenge C2 when it asks the controller to authenticate (CVALID).
    pub challenge: Option<Vec<u8>>,
    /// Sequence number S2 (0 when the controller is not authenticated).
    pub seqnum: u32,
    /// The host's DH public value (empty for the null group).
    pub dh_value: Vec<u8>,
}

/// DH-HMAC-CHAP_Success1 (controller to host).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Success1 {
    /// Transaction id.
    pub tid: u16,
    /// HL: the hash length, set even without a response (the Linux host checks it).
    pub hl: u8,
    /// The controller's response R2 (RVALID), HL bytes.
    pub response: Option<Vec<u8>>,
}

/// DH-HMAC-CHAP_Success2 (host to controller): the host accepted the controller's response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Success2 {
    /// Transaction id.
    pub tid: u16,
}

/// AUTH_Failure1 (controller to host) or AUTH_Failure2 (host to controller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Transaction id.
    pub tid: u16,
    /// REASON CODE ([`REASON_FAILED`]).
    pub reason_code: u8,
    /// REASON CODE EXPLANATION.
    pub reason: FailureReason,
}

/// Any authentication message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Message {
    /// AUTH_Negotiate.
    Negotiate(Negotiate),
    /// DH-HMAC-CHAP_Challenge.
    Challenge(Challenge),
    /// DH-HMAC-CHAP_Reply.
    Reply(Reply),
    /// DH-HMAC-CHAP_Success1.
    Success1(Success1),
    /// DH-HMAC-CHAP_Success2.
    Success2(Success2),
    /// AUTH_Failure1.
    Failure1(Failure),
    /// AUTH_Failure2.
    Failure2(Failure),
}

/// Why bytes are not an authentication message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The buffer ends before the message does.
    Short {
        /// Bytes the message needs.
        need: usize,
        /// Bytes there are.
        have: usize,
    },
    /// AUTH_TYPE/AUTH_ID name no message.
    UnknownMessage {
        /// AUTH_TYPE.
        auth_type: u8,
        /// AUTH_ID.
        auth_id: u8,
    },
    /// A field holds a value the layout does not allow.
    BadField {
        /// Which field.
        field: &'static str,
        /// Its value.
        value: u32,
    },
}

impl DecodeError {
    /// The failure explanation a controller answers this with.
    pub fn reason(&self) -> FailureReason {
        match self {
            DecodeError::UnknownMessage { .. } => FailureReason::IncorrectProtocolMessage,
            _ => FailureReason::IncorrectPayload,
        }
    }
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::Short { need, have } => {
                write!(f, "message needs {need} bytes, has {have}")
            }
            DecodeError::UnknownMessage { auth_type, auth_id } => {
                write!(f, "unknown message type {auth_type:#04x} id {auth_id:#04x}")
            }
            DecodeError::BadField { field, value } => write!(f, "invalid {field} {value}"),
        }
    }
}

impl std::error::Error for DecodeError {}

fn need(b: &[u8], n: usize) -> Result<(), DecodeError> {
    if b.len() < n {
        Err(DecodeError::Short {
            need: n,
            have: b.len(),
        })
    } else {
        Ok(())
    }
}

fn u16_at(b: &[u8], off: usize) -> u16 {
    b.get(off..off + 2)
        .map_or(0, |s| u16::from_le_bytes([s[0], s[1]]))
}

fn u32_at(b: &[u8], off: usize) -> u32 {
    b.get(off..off + 4)
        .map_or(0, |s| u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

fn bytes(b: &[u8], off: usize, len: usize) -> Vec<u8> {
    b.get(off..off + len).map_or_else(Vec::new, <[u8]>::to_vec)
}

/// Writes exactly `len` bytes of `src` (cut or zero-padded), so a message is always consistent
/// with its length fields.
fn put_fixed(out: &mut Vec<u8>, src: &[u8], len: usize) {
    let n = src.len().min(len);
    out.extend_from_slice(&src[..n]);
    out.resize(out.len() + (len - n), 0);
}

fn flag(b: &[u8], off: usize, field: &'static str) -> Result<bool, DecodeError> {
    match b.get(off).copied().unwrap_or(0) {
        0 => Ok(false),
        1 => Ok(true),
        v => Err(DecodeError::BadField {
            field,
            value: v.into(),
        }),
    }
}

impl Message {
    /// Decodes the message at the start of `b`.
    pub fn decode(b: &[u8]) -> Result<Message, DecodeError> {
        need(b, FAILURE_LEN)?;
        let (ty, id, tid) = (b[0], b[1], u16_at(b, 4));
        match (ty, id) {
            (auth_type::COMMON, auth_id::NEGOTIATE) => decode_negotiate(b, tid),
            (auth_type::COMMON, auth_id::FAILURE1 | auth_id::FAILURE2) => {
                let f = Failure {
                    tid,
                    reason_code: b[6],
                    reason: FailureReason::from_code(b[7]),
                };
                Ok(if id == auth_id::FAILURE1 {
                    Message::Failure1(f)
                } else {
                    Message::Failure2(f)
                })
            }
            (auth_type::DHCHAP, auth_id::CHALLENGE) => {
                need(b, DHCHAP_HEADER_LEN)?;
                let hl = usize::from(b[6]);
                let dhvlen = usize::from(u16_at(b, 10));
                need(b, DHCHAP_HEADER_LEN + hl + dhvlen)?;
                Ok(Message::Challenge(Challenge {
                    tid,
                    hash_id: b[8],
                    dh_id: b[9],
                    seqnum: u32_at(b, 12),
                    challenge: bytes(b, DHCHAP_HEADER_LEN, hl),
                    dh_value: bytes(b, DHCHAP_HEADER_LEN + hl, dhvlen),
                }))
            }
            (auth_type::DHCHAP, auth_id::REPLY) => {
                need(b, DHCHAP_HEADER_LEN)?;
                let hl = usize::from(b[6]);
                let cvalid = flag(b, 8, "CVALID")?;
                let dhvlen = usize::from(u16_at(b, 10));
                need(b, DHCHAP_HEADER_LEN + 2 * hl + dhvlen)?;
                Ok(Message::Reply(Reply {
                    tid,
                    response: bytes(b, DHCHAP_HEADER_LEN, hl),
                    challenge: cvalid.then(|| bytes(b, DHCHAP_HEADER_LEN + hl, hl)),
                    seqnum: u32_at(b, 12),
                    dh_value: bytes(b, DHCHAP_HEADER_LEN + 2 * hl, dhvlen),
                }))
            }
            (auth_type::DHCHAP, auth_id::SUCCESS1) => {
                need(b, DHCHAP_HEADER_LEN)?;
                let hl = b[6];
                let rvalid = flag(b, 8, "RVALID")?;
                if rvalid {
                    need(b, DHCHAP_HEADER_LEN + usize::from(hl))?;
                }
                Ok(Message::Success1(Success1 {
                    tid,
                    hl,
                    response: rvalid.then(|| bytes(b, DHCHAP_HEADER_LEN, usize::from(hl))),
                }))
            }
            (auth_type::DHCHAP, auth_id::SUCCESS2) => {
                need(b, DHCHAP_HEADER_LEN)?;
                Ok(Message::Success2(Success2 { tid }))
            }
            (auth_type, auth_id) => Err(DecodeError::UnknownMessage { auth_type, auth_id }),
        }
    }

    /// The transaction id.
    pub fn tid(&self) -> u16 {
        match self {
            Message::Negotiate(m) => m.tid,
            Message::Challenge(m) => m.tid,
            Message::Reply(m) => m.tid,
            Message::Success1(m) => m.tid,
            Message::Success2(m) => m.tid,
            Message::Failure1(m) | Message::Failure2(m) => m.tid,
        }
    }

    /// The message's name, for logs.
    pub fn name(&self) -> &'static str {
        match self {
            Message::Negotiate(_) => "AUTH_Negotiate",
            Message::Challenge(_) => "DH-HMAC-CHAP_Challenge",
            Message::Reply(_) => "DH-HMAC-CHAP_Reply",
            Message::Success1(_) => "DH-HMAC-CHAP_Success1",
            Message::Success2(_) => "DH-HMAC-CHAP_Success2",
            Message::Failure1(_) => "AUTH_Failure1",
            Message::Failure2(_) => "AUTH_Failure2",
        }
    }

    /// The exact length of the encoded message.
    pub fn encoded_len(&self) -> usize {
        match self {
            Message::Negotiate(m) => NEGOTIATE_HEADER_LEN + DESCRIPTOR_LEN * m.protocols.len(),
            Message::Challenge(m) => {
                DHCHAP_HEADER_LEN + hl(&m.challenge) + m.dh_value.len().min(0xFFFF)
            }
            Message::Reply(m) => {
                DHCHAP_HEADER_LEN + 2 * hl(&m.response) + m.dh_value.len().min(0xFFFF)
            }
            Message::Success1(m) => {
                DHCHAP_HEADER_LEN + m.response.as_ref().map_or(0, |_| usize::from(m.hl))
            }
            Message::Success2(_) => DHCHAP_HEADER_LEN,
            Message::Failure1(_) | Message::Failure2(_) => FAILURE_LEN,
        }
    }

    /// The encoded message. Lengths that do not fit their fields are cut (hash values to 255
    /// bytes, DH values to 65535, descriptors to 255, id lists to 30), so the result always
    /// decodes; the state machines never produce such values.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.encoded_len());
        let (ty, id) = match self {
            Message::Negotiate(_) => (auth_type::COMMON, auth_id::NEGOTIATE),
            Message::Challenge(_) => (auth_type::DHCHAP, auth_id::CHALLENGE),
            Message::Reply(_) => (auth_type::DHCHAP, auth_id::REPLY),
            Message::Success1(_) => (auth_type::DHCHAP, auth_id::SUCCESS1),
            Message::Success2(_) => (auth_type::DHCHAP, auth_id::SUCCESS2),
            Message::Failure1(_) => (auth_type::COMMON, auth_id::FAILURE1),
            Message::Failure2(_) => (auth_type::COMMON, auth_id::FAILURE2),
        };
        out.extend_from_slice(&[ty, id, 0, 0]);
        out.extend_from_slice(&self.tid().to_le_bytes());
        match self {
            Message::Negotiate(m) => {
                let napd = m.protocols.len().min(255);
                out.extend_from_slice(&[m.sc_c, napd as u8]);
                for p in &m.protocols[..napd] {
                    let start = out.len();
                    out.extend_from_slice(&[
                        p.auth_id,
                        0,
                        p.hash_ids.len() as u8,
                        p.dh_ids.len() as u8,
                    ]);
                    put_fixed(&mut out, &p.hash_ids, MAX_IDS);
                    put_fixed(&mut out, &p.dh_ids, MAX_IDS);
                    debug_assert_eq!(out.len() - start, DESCRIPTOR_LEN);
                }
            }
            Message::Challenge(m) => {
                let (hl, dhvlen) = (hl(&m.challenge), m.dh_value.len().min(0xFFFF));
                out.extend_from_slice(&[hl as u8, 0, m.hash_id, m.dh_id]);
                out.extend_from_slice(&(dhvlen as u16).to_le_bytes());
                out.extend_from_slice(&m.seqnum.to_le_bytes());
                put_fixed(&mut out, &m.challenge, hl);
                put_fixed(&mut out, &m.dh_value, dhvlen);
            }
            Message::Reply(m) => {
                let (hl, dhvlen) = (hl(&m.response), m.dh_value.len().min(0xFFFF));
                out.extend_from_slice(&[hl as u8, 0, u8::from(m.challenge.is_some()), 0]);
                out.extend_from_slice(&(dhvlen as u16).to_le_bytes());
                out.extend_from_slice(&m.seqnum.to_le_bytes());
                put_fixed(&mut out, &m.response, hl);
                put_fixed(&mut out, m.challenge.as_deref().unwrap_or(&[]), hl);
                put_fixed(&mut out, &m.dh_value, dhvlen);
            }
            Message::Success1(m) => {
                out.extend_from_slice(&[m.hl, 0, u8::from(m.response.is_some())]);
                out.resize(DHCHAP_HEADER_LEN, 0);
                if let Some(r) = &m.response {
                    put_fixed(&mut out, r, usize::from(m.hl));
                }
            }
            Message::Success2(_) => out.resize(DHCHAP_HEADER_LEN, 0),
            Message::Failure1(f) | Message::Failure2(f) => {
                out.extend_from_slice(&[f.reason_code, f.reason.code()]);
            }
        }
        out
    }
}

fn hl(v: &[u8]) -> usize {
    v.len().min(255)
}

fn decode_negotiate(b: &[u8], tid: u16) -> Result<Message, DecodeError> {
    let (sc_c, napd) = (b[6], usize::from(b[7]));
    need(b, NEGOTIATE_HEADER_LEN + napd * DESCRIPTOR_LEN)?;
    let mut protocols = Vec::with_capacity(napd);
    for i in 0..napd {
        let d = &b[NEGOTIATE_HEADER_LEN + i * DESCRIPTOR_LEN..][..DESCRIPTOR_LEN];
        let (halen, dhlen) = (usize::from(d[2]), usize::from(d[3]));
        for (field, n) in [("HALEN", halen), ("DHLEN", dhlen)] {
            if n > MAX_IDS {
                return Err(DecodeError::BadField {
                    field,
                    value: n as u32,
                });
            }
        }
        let mut p = ProtocolDescriptor {
            auth_id: d[0],
            ..Default::default()
        };
        p.hash_ids.extend(d[4..4 + halen].iter().copied());
        p.dh_ids.extend(d[34..34 + dhlen].iter().copied());
        protocols.push(p);
    }
    Ok(Message::Negotiate(Negotiate {
        tid,
        sc_c,
        protocols,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the Linux host sends (`nvme_auth_set_dhchap_negotiate_data`).
    fn linux_negotiate(tid: u16) -> Vec<u8> {
        let mut v = vec![0u8; 72];
        v[..8].copy_from_slice(&[0, 0, 0, 0, tid as u8, (tid >> 8) as u8, 0, 1]);
        v[8] = 1;
        v[10] = 3;
        v[11] = 6;
        v[12..15].copy_from_slice(&[1, 2, 3]);
        v[42..48].copy_from_slice(&[0, 1, 2, 3, 4, 5]);
        v
    }

    fn samples() -> Vec<Message> {
        let desc = |auth_id, h: &[u8], d: &[u8]| ProtocolDescriptor {
            auth_id,
            hash_ids: h.iter().copied().collect(),
            dh_ids: d.iter().copied().collect(),
        };
        vec![
            Message::Negotiate(Negotiate {
                tid: 0x1234,
                sc_c: 0,
                protocols: vec![desc(1, &[1, 2, 3], &[0, 1, 2, 3, 4, 5])],
            }),
            Message::Negotiate(Negotiate {
                tid: 1,
                sc_c: 2,
                protocols: vec![desc(7, &[], &[]), desc(1, &[3; 30], &[5; 30])],
            }),
            Message::Negotiate(Negotiate {
                tid: 2,
                sc_c: 0,
                protocols: vec![],
            }),
            Message::Challenge(Challenge {
                tid: 9,
                hash_id: 3,
                dh_id: 1,
                seqnum: 0xDEAD_BEEF,
                challenge: vec![0xC1; 64],
                dh_value: vec![0xD5; 256],
            }),
            Message::Challenge(Challenge {
                tid: 9,
                hash_id: 1,
                dh_id: 0,
                seqnum: 1,
                challenge: vec![0xC1; 32],
                dh_value: vec![],
            }),
            Message::Reply(Reply {
                tid: 9,
                response: vec![0xA1; 48],
                challenge: Some(vec![0xC2; 48]),
                seqnum: 77,
                dh_value: vec![0xD6; 384],
            }),
            Message::Reply(Reply {
                tid: 9,
                response: vec![0xA1; 32],
                challenge: None,
                seqnum: 0,
                dh_value: vec![],
            }),
            Message::Success1(Success1 {
                tid: 9,
                hl: 32,
                response: None,
            }),
            Message::Success1(Success1 {
                tid: 9,
                hl: 64,
                response: Some(vec![0xA2; 64]),
            }),
            Message::Success2(Success2 { tid: 9 }),
            Message::Failure1(Failure {
                tid: 9,
                reason_code: REASON_FAILED,
                reason: FailureReason::IncorrectPayload,
            }),
            Message::Failure2(Failure {
                tid: 9,
                reason_code: REASON_FAILED,
                reason: FailureReason::Other(0x42),
            }),
        ]
    }

    #[test]
    fn every_message_round_trips() {
        for m in samples() {
            let b = m.encode();
            assert_eq!(b.len(), m.encoded_len(), "{m:?}");
            assert_eq!(Message::decode(&b).as_ref(), Ok(&m));
            // Bytes after the message (the kernel's zero padding) are ignored.
            let mut padded = b.clone();
            padded.resize(b.len() + 100, 0);
            assert_eq!(Message::decode(&padded).as_ref(), Ok(&m));
            // Every truncation is refused, never a panic.
            for n in 0..b.len() {
                assert!(Message::decode(&b[..n]).is_err(), "{} cut to {n}", m.name());
            }
        }
    }

    #[test]
    fn decodes_the_linux_negotiate() {
        let m = Message::decode(&linux_negotiate(0x0102)).unwrap();
        let Message::Negotiate(n) = &m else {
            panic!("{m:?}")
        };
        assert_eq!((n.tid, n.sc_c, n.protocols.len()), (0x0102, 0, 1));
        assert_eq!(n.protocols[0].auth_id, PROTOCOL_DHCHAP);
        assert_eq!(&n.protocols[0].hash_ids[..], &[1, 2, 3]);
        assert_eq!(&n.protocols[0].dh_ids[..], &[0, 1, 2, 3, 4, 5]);
        assert_eq!(m.encode(), linux_negotiate(0x0102));
    }

    #[test]
    fn layouts_match_the_kernel_structs() {
        let c = Message::Challenge(Challenge {
            tid: 0x0201,
            hash_id: 2,
            dh_id: 3,
            seqnum: 0x0706_0504,
            challenge: vec![0xCC; 48],
            dh_value: vec![0xDD; 512],
        })
        .encode();
        assert_eq!(&c[..16], &[1, 1, 0, 0, 1, 2, 48, 0, 2, 3, 0, 2, 4, 5, 6, 7]);
        assert_eq!(
            (c[16], c[63], c[64], c.len()),
            (0xCC, 0xCC, 0xDD, 16 + 48 + 512)
        );
        let r = Message::Reply(Reply {
            tid: 5,
            response: vec![0xAA; 32],
            challenge: Some(vec![0xBB; 32]),
            seqnum: 9,
            dh_value: vec![0xEE; 256],
        })
        .encode();
        assert_eq!(&r[..16], &[1, 2, 0, 0, 5, 0, 32, 0, 1, 0, 0, 1, 9, 0, 0, 0]);
        assert_eq!(
            (r[16], r[48], r[80], r.len()),
            (0xAA, 0xBB, 0xEE, 16 + 64 + 256)
        );
        let f = Message::Failure1(Failure {
            tid: 5,
            reason_code: 1,
            reason: FailureReason::HashUnusable,
        })
        .encode();
        assert_eq!(f, [0, 0xF1, 0, 0, 5, 0, 1, 4]);
        let s = Message::Success1(Success1 {
            tid: 5,
            hl: 48,
            response: None,
        })
        .encode();
        assert_eq!(s, [1, 3, 0, 0, 5, 0, 48, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn refuses_bad_fields() {
        assert_eq!(
            Message::decode(&[1, 9, 0, 0, 0, 0, 0, 0]),
            Err(DecodeError::UnknownMessage {
                auth_type: 1,
                auth_id: 9
            })
        );
        assert_eq!(
            Message::decode(&[2, 0, 0, 0, 0, 0, 0, 0]).map_err(|e| e.reason()),
            Err(FailureReason::IncorrectProtocolMessage)
        );
        let mut n = linux_negotiate(1);
        n[10] = 31;
        assert_eq!(
            Message::decode(&n),
            Err(DecodeError::BadField {
                field: "HALEN",
                value: 31
            })
        );
        let mut r = Message::Reply(Reply {
            tid: 1,
            response: vec![1; 32],
            challenge: None,
            seqnum: 0,
            dh_value: vec![],
        })
        .encode();
        r[8] = 2;
        assert_eq!(
            Message::decode(&r).map_err(|e| e.reason()),
            Err(FailureReason::IncorrectPayload)
        );
        // A DHVLEN past the end.
        let mut c = samples()[4].encode();
        c[10] = 1;
        assert_eq!(
            Message::decode(&c),
            Err(DecodeError::Short {
                need: 16 + 32 + 1,
                have: 48
            })
        );
    }

    #[test]
    fn reasons_round_trip() {
        for v in 0..=255u8 {
            assert_eq!(FailureReason::from_code(v).code(), v);
        }
        assert_eq!(FailureReason::Failed.to_string(), "authentication failed");
    }
}
