//! The DH-HMAC-CHAP hash functions (SHA-256/384/512), HMAC over them, the small zeroizing buffer
//! their outputs live in, and constant-time comparison.

use core::fmt;

use hmac::{Hmac, Mac};
use sha2::{Digest as _, Sha256, Sha384, Sha512};
use subtle::ConstantTimeEq;
use zeroize::Zeroize;

use super::idset::{AuthId, IdSet};

/// The longest hash output (SHA-512), and so the longest challenge, response and secret.
pub const MAX_HASH_LEN: usize = 64;

/// A hash function DH-HMAC-CHAP can negotiate (base spec Figure "Hash Function Identifiers").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum Digest {
    /// SHA-256, identifier 01h, 32-byte output.
    Sha256 = 1,
    /// SHA-384, identifier 02h, 48-byte output.
    Sha384 = 2,
    /// SHA-512, identifier 03h, 64-byte output.
    Sha512 = 3,
}

impl Digest {
    /// Every hash function, weakest first.
    pub const ALL: [Digest; 3] = [Digest::Sha256, Digest::Sha384, Digest::Sha512];

    /// The hash function with this identifier (1..=3).
    pub fn from_id(id: u8) -> Option<Digest> {
        Digest::ALL.into_iter().find(|d| d.id() == id)
    }

    /// The hash function SPDK's RPCs name `name` (`sha256`, `sha384`, `sha512`).
    pub fn from_name(name: &str) -> Option<Digest> {
        Digest::ALL.into_iter().find(|d| d.name() == name)
    }

    /// The wire identifier.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// SPDK's name (`nvmf_set_config` `dhchap_digests`, `nvmf_subsystem_get_qpairs` `auth`).
    pub fn name(self) -> &'static str {
        match self {
            Digest::Sha256 => "sha256",
            Digest::Sha384 => "sha384",
            Digest::Sha512 => "sha512",
        }
    }

    /// Output length in bytes: the HL of the messages, the challenge and response length.
    pub fn hash_len(self) -> usize {
        match self {
            Digest::Sha256 => 32,
            Digest::Sha384 => 48,
            Digest::Sha512 => 64,
        }
    }

    /// `H(data)`.
    pub fn hash(self, data: &[u8]) -> Buf64 {
        match self {
            Digest::Sha256 => Buf64::from_slice(&Sha256::digest(data)),
            Digest::Sha384 => Buf64::from_slice(&Sha384::digest(data)),
            Digest::Sha512 => Buf64::from_slice(&Sha512::digest(data)),
        }
    }

    /// `HMAC(key, parts[0] || parts[1] || ...)` with this hash function; any key length.
    pub fn hmac(self, key: &[u8], parts: &[&[u8]]) -> Buf64 {
        fn run<M: Mac + hmac::digest::KeyInit>(key: &[u8], parts: &[&[u8]]) -> Buf64 {
            // HMAC takes keys of any length: `new_from_slice` cannot fail for it.
            let Ok(mut mac) = <M as hmac::digest::KeyInit>::new_from_slice(key) else {
                unreachable!("HMAC accepts every key length")
            };
            for p in parts {
                mac.update(p);
            }
            let mut out = mac.finalize().into_bytes();
            let buf = Buf64::from_slice(&out);
            out.zeroize();
            buf
        }
        match self {
            Digest::Sha256 => run::<Hmac<Sha256>>(key, parts),
            Digest::Sha384 => run::<Hmac<Sha384>>(key, parts),
            Digest::Sha512 => run::<Hmac<Sha512>>(key, parts),
        }
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of hash functions (what `nvmf_set_config` `dhchap_digests` allows).
pub type DigestSet = IdSet<Digest>;

impl AuthId for Digest {
    const ALL: &'static [Digest] = &Digest::ALL;

    fn id(self) -> u8 {
        self as u8
    }

    fn name(self) -> &'static str {
        Digest::name(self)
    }
}

/// Up to 64 bytes inline (a hash output, a challenge, a transformed key), wiped on drop.
///
/// Its `Debug` prints the length only: some of these are key material.
#[derive(Clone)]
pub struct Buf64 {
    bytes: [u8; MAX_HASH_LEN],
    len: u8,
}

impl Default for Buf64 {
    fn default() -> Self {
        Buf64 {
            bytes: [0; MAX_HASH_LEN],
            len: 0,
        }
    }
}

impl Buf64 {
    /// A copy of `b`; `b` longer than 64 bytes is cut (callers never pass more).
    pub fn from_slice(b: &[u8]) -> Buf64 {
        let mut out = Buf64::default();
        let n = b.len().min(MAX_HASH_LEN);
        out.bytes[..n].copy_from_slice(&b[..n]);
        out.len = n as u8;
        out
    }

    /// `len` zero bytes (at most 64), to be filled through [`Buf64::as_bytes_mut`].
    pub fn zeroed(len: usize) -> Buf64 {
        Buf64 {
            bytes: [0; MAX_HASH_LEN],
            len: len.min(MAX_HASH_LEN) as u8,
        }
    }

    /// The bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }

    /// The bytes, writable.
    pub fn as_bytes_mut(&mut self) -> &mut [u8] {
        &mut self.bytes[..usize::from(self.len)]
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        usize::from(self.len)
    }

    /// Whether it holds no byte.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Buf64 {
    fn drop(&mut self) {
        self.bytes.zeroize();
    }
}

impl fmt::Debug for Buf64 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Buf64({} bytes)", self.len)
    }
}

/// Constant-time equality of two byte strings (a response against the expected one); strings of
/// different lengths are unequal (the lengths are public).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    #[test]
    fn ids_names_and_lengths() {
        for (d, id, name, len) in [
            (Digest::Sha256, 1, "sha256", 32),
            (Digest::Sha384, 2, "sha384", 48),
            (Digest::Sha512, 3, "sha512", 64),
        ] {
            assert_eq!(Digest::from_id(id), Some(d));
            assert_eq!(Digest::from_name(name), Some(d));
            assert_eq!((d.id(), d.name(), d.hash_len()), (id, name, len));
            assert_eq!(d.hash(b"").len(), len);
            assert_eq!(d.hmac(b"k", &[b"x"]).len(), len);
        }
        assert_eq!(Digest::from_id(0), None);
        assert_eq!(Digest::from_id(4), None);
        assert_eq!(Digest::from_name("SHA256"), None);
    }

    #[test]
    fn known_answers() {
        // FIPS 180-2 "abc" and RFC 4231 test case 2 ("Jefe").
        assert_eq!(
            hex(Digest::Sha256.hash(b"abc").as_bytes()),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            hex(Digest::Sha256
                .hmac(b"Jefe", &[b"what do ya want ", b"for nothing?"])
                .as_bytes()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn digest_sets() {
        let s = DigestSet::of(&[Digest::Sha512, Digest::Sha256]);
        assert!(s.contains(Digest::Sha256) && !s.contains(Digest::Sha384));
        assert_eq!(
            s.iter().collect::<Vec<_>>(),
            [Digest::Sha256, Digest::Sha512]
        );
        assert_eq!(DigestSet::all().iter().count(), 3);
        assert_eq!(DigestSet::EMPTY.iter().count(), 0);
        assert_eq!(format!("{s:?}"), r#"{"sha256", "sha512"}"#);
    }

    #[test]
    fn buf64_and_ct_eq() {
        let b = Buf64::from_slice(&[7; 70]);
        assert_eq!(b.len(), 64);
        assert_eq!(format!("{b:?}"), "Buf64(64 bytes)");
        assert!(ct_eq(b"abc", b"abc"));
        assert!(!ct_eq(b"abc", b"abd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }
}
