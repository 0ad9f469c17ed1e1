//! DH-HMAC-CHAP secrets in the DHHC-1 representation, and the transformed key.
//!
//! The representation (base spec §8.13.5.8, nvme-cli `gen-dhchap-key`, the kernel's
//! `nvme_auth_extract_key`, SPDK's `nvme_auth_get_key`) is
//!
//! ```text
//! DHHC-1:<hh>:<base64(key || crc32(key) little-endian)>:
//! ```
//!
//! where `<hh>` is `00` (the key is used as it is), `01`, `02` or `03` (the key is transformed with
//! HMAC-SHA-256/384/512 before use), the key is 32, 48 or 64 bytes, and the CRC is the IEEE CRC-32
//! zlib computes. nvme-cli only makes keys whose length matches the transform's hash (32 for 01,
//! 48 for 02, 64 for 03); the kernel and SPDK accept any of the three lengths with any hash, and
//! so does this parser.
//!
//! The transformed key (`nvme_auth_transform_key`) is `HMAC(key, NQN || "NVMe-over-Fabrics")`
//! with the secret's own hash (the host key with the host NQN, the controller key with the
//! subsystem NQN), or the key itself for `00`.

use core::fmt;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use zeroize::Zeroizing;

use super::hash::{Buf64, Digest, MAX_HASH_LEN};

/// The representation's fixed prefix.
pub const DHHC1_PREFIX: &str = "DHHC-1:";

/// The key lengths a DH-HMAC-CHAP secret may have.
pub const KEY_LENGTHS: [usize; 3] = [32, 48, 64];

/// The text appended to the NQN in the key transformation.
const TRANSFORM_SUFFIX: &[u8] = b"NVMe-over-Fabrics";

/// Why a DHHC-1 string was refused. The messages never contain key material.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretError {
    /// Not `DHHC-1:<hh>:<base64>:`.
    Format,
    /// The hash identifier is not 00..03.
    HashId,
    /// The key part is not valid base64.
    Base64,
    /// The key is not 32, 48 or 64 bytes (the length found).
    Length(usize),
    /// The CRC-32 after the key does not match it.
    Crc,
}

impl fmt::Display for SecretError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretError::Format => f.write_str("not a DHHC-1 secret (DHHC-1:<hh>:<base64>:)"),
            SecretError::HashId => f.write_str("invalid hash identifier (expected 00 to 03)"),
            SecretError::Base64 => f.write_str("invalid base64 in the key"),
            SecretError::Length(n) => write!(f, "invalid key length {n} (32, 48 or 64 bytes)"),
            SecretError::Crc => f.write_str("key CRC-32 mismatch"),
        }
    }
}

impl std::error::Error for SecretError {}

/// A DH-HMAC-CHAP secret: the key bytes and the hash its transformation uses.
///
/// The key is wiped when the value is dropped; `Debug` shows the hash and length only.
#[derive(Clone)]
pub struct DhchapSecret {
    key: Buf64,
    transform: Option<Digest>,
}

impl DhchapSecret {
    /// A secret from raw key bytes (32, 48 or 64) and the transformation hash (`None` = `00`).
    pub fn from_key(transform: Option<Digest>, key: &[u8]) -> Result<DhchapSecret, SecretError> {
        if !KEY_LENGTHS.contains(&key.len()) {
            return Err(SecretError::Length(key.len()));
        }
        Ok(DhchapSecret {
            key: Buf64::from_slice(key),
            transform,
        })
    }

    /// Parses `DHHC-1:<hh>:<base64>:` (the trailing colon may be missing, surrounding white space
    /// as a key file may have is ignored), checking the hash id, the length and the CRC.
    pub fn parse(text: &str) -> Result<DhchapSecret, SecretError> {
        let rest = text
            .trim()
            .strip_prefix(DHHC1_PREFIX)
            .ok_or(SecretError::Format)?;
        let (hh, rest) = rest.split_once(':').ok_or(SecretError::Format)?;
        let b64 = rest.strip_suffix(':').unwrap_or(rest);
        if b64.contains(':') {
            return Err(SecretError::Format);
        }
        let transform = match hh {
            "00" => None,
            "01" | "02" | "03" => Digest::from_id(hh.as_bytes()[1] - b'0'),
            _ => return Err(SecretError::HashId),
        };
        // 68 + 4 bytes is the most a valid key decodes to; refuse longer text before decoding.
        if b64.len() > 4 * (MAX_HASH_LEN + 4).div_ceil(3) {
            return Err(SecretError::Length(b64.len() / 4 * 3));
        }
        let raw = Zeroizing::new(STANDARD.decode(b64).map_err(|_| SecretError::Base64)?);
        let Some(key_len) = raw.len().checked_sub(4) else {
            return Err(SecretError::Length(raw.len()));
        };
        if !KEY_LENGTHS.contains(&key_len) {
            return Err(SecretError::Length(key_len));
        }
        let (key, crc) = raw.split_at(key_len);
        if crc32fast::hash(key).to_le_bytes() != crc {
            return Err(SecretError::Crc);
        }
        DhchapSecret::from_key(transform, key)
    }

    /// The DHHC-1 representation (`DHHC-1:<hh>:<base64>:`), as nvme-cli prints it.
    pub fn to_dhhc1(&self) -> Zeroizing<String> {
        let mut raw = Zeroizing::new([0u8; MAX_HASH_LEN + 4]);
        let n = self.key.len();
        raw[..n].copy_from_slice(self.key.as_bytes());
        raw[n..n + 4].copy_from_slice(&crc32fast::hash(self.key.as_bytes()).to_le_bytes());
        let mut b64 = Zeroizing::new(String::new());
        STANDARD.encode_string(&raw[..n + 4], &mut b64);
        let mut out = String::with_capacity(DHHC1_PREFIX.len() + 4 + b64.len());
        out.push_str(DHHC1_PREFIX);
        out.push_str(&format!("{:02x}:", self.hash_id()));
        out.push_str(&b64);
        out.push(':');
        Zeroizing::new(out)
    }

    /// The transformation hash (`None` for `00`).
    pub fn transform_hash(&self) -> Option<Digest> {
        self.transform
    }

    /// The hash identifier of the representation (0..=3).
    pub fn hash_id(&self) -> u8 {
        self.transform.map_or(0, Digest::id)
    }

    /// Key length in bytes (32, 48 or 64).
    pub fn key_len(&self) -> usize {
        self.key.len()
    }

    /// The raw key. Only the CHAP computations need it; never log it.
    pub fn key_bytes(&self) -> &[u8] {
        self.key.as_bytes()
    }

    /// The transformed key for `nqn`: `HMAC(key, nqn || "NVMe-over-Fabrics")` with the secret's
    /// hash, or a copy of the key for hash id `00`.
    pub fn transform(&self, nqn: &str) -> Buf64 {
        match self.transform {
            None => self.key.clone(),
            Some(d) => d.hmac(self.key.as_bytes(), &[nqn.as_bytes(), TRANSFORM_SUFFIX]),
        }
    }
}

impl PartialEq for DhchapSecret {
    /// Constant-time over the key bytes.
    fn eq(&self, other: &DhchapSecret) -> bool {
        self.transform == other.transform
            && super::hash::ct_eq(self.key.as_bytes(), other.key.as_bytes())
    }
}

impl Eq for DhchapSecret {}

impl fmt::Debug for DhchapSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DhchapSecret")
            .field("transform", &self.transform.map_or("none", Digest::name))
            .field("key_len", &self.key.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NQN: &str = "nqn.2014-08.org.nvmexpress:uuid:0f0e0d0c-0b0a-0908-0706-050403020100";

    /// Printed by nvme-cli 2.3 (`nvme gen-dhchap-key --secret=<00 01 02 ..> --hmac=H
    /// --key-length=L --nqn=NQN`) on this project's build machine; with a hash, nvme-cli prints
    /// the secret already transformed with the NQN.
    const NVME_CLI: [(&str, u8, usize); 6] = [
        (
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
            0,
            32,
        ),
        (
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vcSEgBQ==:",
            0,
            48,
        ),
        (
            "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8gISIjJCUmJygpKissLS4vMDEyMzQ1Njc4OTo7PD0+P4zODhA=:",
            0,
            64,
        ),
        (
            "DHHC-1:01:Fm2CIELwRfD78oTjkx2ymCdhf3el0WFeEhYN4oFanL0eoJ69:",
            1,
            32,
        ),
        (
            "DHHC-1:02:m86TqA71bku/ilvuoXttWzkXCWKMX6uLFCsLmpLRRD1070FP4P2/5bNEpXf9jTOGI4TYkA==:",
            2,
            48,
        ),
        (
            "DHHC-1:03:fKZUIWBl30vQU+qyQoI5SlPMyHWHYXOU1B79aUY4YpucrMsbl5A6cUVmK1QoZEqgjBRJjiGStVEXvVaz1scF3rXwqYQ=:",
            3,
            64,
        ),
    ];

    fn counting(n: usize) -> Vec<u8> {
        (0..n as u8).collect()
    }

    #[test]
    fn parses_and_reprints_nvme_cli_keys() {
        for (text, hash, len) in NVME_CLI {
            let s = DhchapSecret::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!((s.hash_id(), s.key_len()), (hash, len), "{text}");
            assert_eq!(s.to_dhhc1().as_str(), text);
            // nvme-cli's key is the counting secret, transformed with the NQN when hashed.
            let raw = DhchapSecret::from_key(Digest::from_id(hash), &counting(len)).unwrap();
            assert_eq!(s.key_bytes(), raw.transform(NQN).as_bytes(), "{text}");
        }
    }

    #[test]
    fn format_details() {
        // Also without the trailing colon and with a key file's newline.
        let (text, ..) = NVME_CLI[3];
        let bare = text.strip_suffix(':').unwrap();
        assert_eq!(DhchapSecret::parse(bare), DhchapSecret::parse(text));
        assert_eq!(
            DhchapSecret::parse(&format!("{text}\n")),
            DhchapSecret::parse(text)
        );
        // Any of the three lengths with any hash, as the kernel and SPDK accept.
        let s = DhchapSecret::from_key(Some(Digest::Sha256), &counting(64)).unwrap();
        assert_eq!(DhchapSecret::parse(&s.to_dhhc1()).unwrap(), s);
        assert_eq!(s.transform(NQN).len(), 32);
        assert_eq!(
            DhchapSecret::from_key(None, &counting(48))
                .unwrap()
                .transform(NQN)
                .as_bytes(),
            &counting(48)[..]
        );
    }

    #[test]
    fn refuses_bad_secrets() {
        let good = NVME_CLI[0].0;
        let cases: &[(&str, SecretError)] = &[
            ("", SecretError::Format),
            ("DHHC-2:00:AAAA:", SecretError::Format),
            ("DHHC-1:00", SecretError::Format),
            (
                "DHHC-1:04:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
                SecretError::HashId,
            ),
            (
                "DHHC-1:1:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaR:",
                SecretError::HashId,
            ),
            ("DHHC-1:00:AAEC*wQF:", SecretError::Base64),
            ("DHHC-1:00:AA:BB:", SecretError::Format),
            (
                "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYX:",
                SecretError::Length(20),
            ),
            (
                "DHHC-1:00:AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh+KfiaS:",
                SecretError::Crc,
            ),
        ];
        for (text, err) in cases {
            assert_eq!(DhchapSecret::parse(text).err(), Some(*err), "{text:?}");
        }
        // Far too long text is refused before decoding.
        let long = format!("DHHC-1:00:{}:", "A".repeat(10_000));
        assert!(matches!(
            DhchapSecret::parse(&long),
            Err(SecretError::Length(_))
        ));
        assert!(DhchapSecret::parse(good).is_ok());
        assert_eq!(
            DhchapSecret::from_key(None, &[1; 33]).err(),
            Some(SecretError::Length(33))
        );
    }

    #[test]
    fn debug_and_errors_show_no_key() {
        let s = DhchapSecret::from_key(Some(Digest::Sha384), &[0xAB; 48]).unwrap();
        let dbg = format!("{s:?}");
        assert_eq!(
            dbg,
            "DhchapSecret { transform: \"sha384\", key_len: 48, .. }"
        );
        let text = s.to_dhhc1();
        let b64 = text.split(':').nth(2).unwrap();
        for e in [
            SecretError::Format,
            SecretError::HashId,
            SecretError::Base64,
            SecretError::Length(1),
            SecretError::Crc,
        ] {
            assert!(!e.to_string().contains(b64));
        }
    }
}
