//! The DH-HMAC-CHAP Diffie-Hellman groups: null and the RFC 7919 groups ffdhe2048…8192.
//!
//! The modular exponentiation is crypto-bigint's (`BoxedMontyForm::pow_bounded_exp`): Montgomery
//! arithmetic in constant time with respect to the exponent's value, for a fixed number of
//! exponent bits per group. Exponents are short (RFC 7919 §5.2 allows it): twice the group's
//! estimated strength or more, as the kernel (`dh_safe_prime`) and OpenSSL do — 256 bits for
//! ffdhe2048 up to 512 for ffdhe8192 — which makes a handshake cost tens of milliseconds rather
//! than seconds.
//!
//! Public values go on the wire big-endian, as long as the prime (the kernel's
//! `crypto_kpp_maxsize`); a shorter peer value (SPDK sends `BN_bn2bin`'s minimal length) is read
//! as left-padded. A peer value must satisfy `1 < y < p - 1` (RFC 7919 §5.1, the kernel's
//! `dh_is_pubkey_valid`). The shared secret is `y^x mod p`, padded to the prime's length (the
//! kernel's output, OpenSSL's `EVP_PKEY_CTX_set_dh_pad` as SPDK uses it).

use core::fmt;
use std::sync::OnceLock;

use crypto_bigint::modular::{BoxedMontyForm, BoxedMontyParams};
use crypto_bigint::{BoxedUint, Odd};
use zeroize::{Zeroize, Zeroizing};

use super::ffdhe;
use super::idset::{AuthId, IdSet};
use super::random::{Random, RandomUnavailable};

/// A Diffie-Hellman group DH-HMAC-CHAP can negotiate (base spec Figure "DH Group Identifiers").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u8)]
pub enum DhGroup {
    /// No Diffie-Hellman exchange (plain HMAC-CHAP), identifier 00h.
    Null = 0,
    /// ffdhe2048, 01h.
    Ffdhe2048 = 1,
    /// ffdhe3072, 02h.
    Ffdhe3072 = 2,
    /// ffdhe4096, 03h.
    Ffdhe4096 = 3,
    /// ffdhe6144, 04h.
    Ffdhe6144 = 4,
    /// ffdhe8192, 05h.
    Ffdhe8192 = 5,
}

impl DhGroup {
    /// Every group, weakest (null) first.
    pub const ALL: [DhGroup; 6] = [
        DhGroup::Null,
        DhGroup::Ffdhe2048,
        DhGroup::Ffdhe3072,
        DhGroup::Ffdhe4096,
        DhGroup::Ffdhe6144,
        DhGroup::Ffdhe8192,
    ];

    /// The group with this identifier (0..=5).
    pub fn from_id(id: u8) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.id() == id)
    }

    /// The group SPDK's RPCs name `name` (`null`, `ffdhe2048`, …).
    pub fn from_name(name: &str) -> Option<DhGroup> {
        DhGroup::ALL.into_iter().find(|g| g.name() == name)
    }

    /// The wire identifier.
    pub fn id(self) -> u8 {
        self as u8
    }

    /// SPDK's name.
    pub fn name(self) -> &'static str {
        match self {
            DhGroup::Null => "null",
            DhGroup::Ffdhe2048 => "ffdhe2048",
            DhGroup::Ffdhe3072 => "ffdhe3072",
            DhGroup::Ffdhe4096 => "ffdhe4096",
            DhGroup::Ffdhe6144 => "ffdhe6144",
            DhGroup::Ffdhe8192 => "ffdhe8192",
        }
    }

    /// Size of the prime in bits (0 for null).
    pub fn bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 2048,
            DhGroup::Ffdhe3072 => 3072,
            DhGroup::Ffdhe4096 => 4096,
            DhGroup::Ffdhe6144 => 6144,
            DhGroup::Ffdhe8192 => 8192,
        }
    }

    /// Length of a public value and of the shared secret in bytes (0 for null).
    pub fn value_len(self) -> usize {
        self.bits() as usize / 8
    }

    /// Bits of the private exponents this side generates.
    pub fn exponent_bits(self) -> u32 {
        match self {
            DhGroup::Null => 0,
            DhGroup::Ffdhe2048 => 256,
            DhGroup::Ffdhe3072 => 320,
            DhGroup::Ffdhe4096 => 384,
            DhGroup::Ffdhe6144 => 448,
            DhGroup::Ffdhe8192 => 512,
        }
    }

    /// The group's prime as hex (`None` for null).
    pub fn prime_hex(self) -> Option<&'static str> {
        match self {
            DhGroup::Null => None,
            DhGroup::Ffdhe2048 => Some(ffdhe::FFDHE2048),
            DhGroup::Ffdhe3072 => Some(ffdhe::FFDHE3072),
            DhGroup::Ffdhe4096 => Some(ffdhe::FFDHE4096),
            DhGroup::Ffdhe6144 => Some(ffdhe::FFDHE6144),
            DhGroup::Ffdhe8192 => Some(ffdhe::FFDHE8192),
        }
    }

    /// The group's Montgomery parameters, computed once per process.
    fn params(self) -> Option<&'static GroupParams> {
        static CELLS: [OnceLock<Option<GroupParams>>; 6] = [const { OnceLock::new() }; 6];
        CELLS[usize::from(self.id())]
            .get_or_init(|| GroupParams::new(self))
            .as_ref()
    }
}

impl fmt::Display for DhGroup {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A set of DH groups (what `nvmf_set_config` `dhchap_dhgroups` allows).
pub type DhGroupSet = IdSet<DhGroup>;

impl AuthId for DhGroup {
    const ALL: &'static [DhGroup] = &DhGroup::ALL;

    fn id(self) -> u8 {
        self as u8
    }

    fn name(self) -> &'static str {
        DhGroup::name(self)
    }
}

/// A group's prime in the forms the arithmetic needs.
struct GroupParams {
    bits: u32,
    p_minus_1: BoxedUint,
    monty: BoxedMontyParams,
    generator: BoxedMontyForm,
}

impl GroupParams {
    fn new(group: DhGroup) -> Option<GroupParams> {
        let hex = group.prime_hex()?;
        let bits = group.bits();
        let bytes = hex_bytes(hex)?;
        let p = BoxedUint::from_be_slice(&bytes, bits).ok()?;
        let monty = BoxedMontyParams::new(Option::from(Odd::new(p.clone()))?);
        let p_minus_1 = p.wrapping_sub(BoxedUint::one_with_precision(bits));
        let two = BoxedUint::from_be_slice(&[2], bits).ok()?;
        let generator = BoxedMontyForm::new(two, &monty);
        Some(GroupParams {
            bits,
            p_minus_1,
            monty,
            generator,
        })
    }
}

fn hex_bytes(hex: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| (c as char).to_digit(16).map(|d| d as u8);
    hex.as_bytes()
        .chunks(2)
        .map(|p| Some(digit(*p.first()?)? << 4 | digit(*p.get(1)?)?))
        .collect()
}

/// Why a DH operation failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DhError {
    /// The null group has no exchange.
    NullGroup,
    /// The peer's public value is empty or longer than the prime (its length).
    PeerLength(usize),
    /// The peer's public value is not in `2..=p-2`.
    PeerRange,
    /// A given exponent is zero or longer than the group's exponent size.
    Exponent,
    /// No random bytes for the exponent.
    Random,
}

impl fmt::Display for DhError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DhError::NullGroup => f.write_str("the null DH group has no exchange"),
            DhError::PeerLength(n) => write!(f, "DH public value of {n} bytes"),
            DhError::PeerRange => f.write_str("DH public value out of range"),
            DhError::Exponent => f.write_str("invalid DH exponent"),
            DhError::Random => f.write_str("random source unavailable"),
        }
    }
}

impl std::error::Error for DhError {}

impl From<RandomUnavailable> for DhError {
    fn from(_: RandomUnavailable) -> DhError {
        DhError::Random
    }
}

/// One side's ephemeral DH key: the private exponent (wiped on drop) and the public value.
pub struct DhKey {
    group: DhGroup,
    exponent: BoxedUint,
    public: Vec<u8>,
}

impl DhKey {
    /// A fresh key: an exponent of exactly [`DhGroup::exponent_bits`] bits from `rng`.
    pub fn generate(group: DhGroup, rng: &mut dyn Random) -> Result<DhKey, DhError> {
        let mut bytes = Zeroizing::new(vec![0u8; group.exponent_bits() as usize / 8]);
        if bytes.is_empty() {
            return Err(DhError::NullGroup);
        }
        rng.fill(&mut bytes)?;
        bytes[0] |= 0x80;
        DhKey::from_exponent(group, &bytes)
    }

    /// The key with the exponent `x` (big-endian; nonzero, at most the group's exponent bits).
    /// Tests use it for fixed vectors.
    pub fn from_exponent(group: DhGroup, x: &[u8]) -> Result<DhKey, DhError> {
        let params = group.params().ok_or(DhError::NullGroup)?;
        let ebits = group.exponent_bits();
        let mut exponent =
            BoxedUint::from_be_slice(x, params.bits).map_err(|_| DhError::Exponent)?;
        if bool::from(exponent.is_zero()) || exponent.bit_width() > ebits {
            exponent.zeroize();
            return Err(DhError::Exponent);
        }
        let public = params
            .generator
            .pow_bounded_exp(&exponent, ebits)
            .retrieve()
            .to_be_bytes()
            .into_vec();
        Ok(DhKey {
            group,
            exponent,
            public,
        })
    }

    /// The private exponent, big-endian (test vectors only).
    #[cfg(test)]
    pub(crate) fn exponent_be(&self) -> Vec<u8> {
        self.exponent.to_be_bytes().into_vec()
    }

    /// The group.
    pub fn group(&self) -> DhGroup {
        self.group
    }

    /// `g^x mod p`, big-endian, [`DhGroup::value_len`] bytes.
    pub fn public_value(&self) -> &[u8] {
        &self.public
    }

    /// The shared secret with the peer's public value: `y^x mod p`, padded to the prime's length.
    pub fn shared_secret(&self, peer: &[u8]) -> Result<SharedSecret, DhError> {
        let params = self.group.params().ok_or(DhError::NullGroup)?;
        if peer.is_empty() || peer.len() > self.group.value_len() {
            return Err(DhError::PeerLength(peer.len()));
        }
        let y = BoxedUint::from_be_slice(peer, params.bits).map_err(|_| DhError::PeerRange)?;
        let one = BoxedUint::one_with_precision(params.bits);
        if y <= one || y >= params.p_minus_1 {
            return Err(DhError::PeerRange);
        }
        let mut z = BoxedMontyForm::new(y, &params.monty)
            .pow_bounded_exp(&self.exponent, self.group.exponent_bits())
            .retrieve();
        let out = SharedSecret(Zeroizing::new(z.to_be_bytes().into_vec()));
        z.zeroize();
        Ok(out)
    }
}

impl Drop for DhKey {
    fn drop(&mut self) {
        self.exponent.zeroize();
    }
}

impl fmt::Debug for DhKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DhKey")
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

/// A DH shared secret (session key), wiped on drop; `Debug` shows its length only.
pub struct SharedSecret(Zeroizing<Vec<u8>>);

impl SharedSecret {
    /// The secret's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }
}

impl fmt::Debug for SharedSecret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SharedSecret({} bytes)", self.0.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::auth::random::SeededRandom;

    #[test]
    fn ids_names_sizes() {
        for (i, g) in DhGroup::ALL.into_iter().enumerate() {
            assert_eq!(g.id() as usize, i);
            assert_eq!(DhGroup::from_id(g.id()), Some(g));
            assert_eq!(DhGroup::from_name(g.name()), Some(g));
            assert_eq!(g.prime_hex().map_or(0, str::len) * 4, g.bits() as usize);
        }
        assert_eq!(DhGroup::from_id(6), None);
        assert_eq!(DhGroup::Ffdhe4096.value_len(), 512);
        let s = DhGroupSet::of(&[DhGroup::Ffdhe8192, DhGroup::Null]);
        assert_eq!(format!("{s:?}"), r#"{"null", "ffdhe8192"}"#);
        assert_eq!(DhGroupSet::all().iter().count(), 6);
    }

    #[test]
    fn both_sides_agree_in_every_group() {
        let mut rng = SeededRandom::new(1);
        for g in DhGroup::ALL.into_iter().skip(1) {
            let a = DhKey::generate(g, &mut rng).unwrap();
            let b = DhKey::generate(g, &mut rng).unwrap();
            assert_eq!(a.public_value().len(), g.value_len());
            assert_ne!(a.public_value(), b.public_value());
            let s1 = a.shared_secret(b.public_value()).unwrap();
            let s2 = b.shared_secret(a.public_value()).unwrap();
            assert_eq!(s1.as_bytes(), s2.as_bytes(), "{g}");
            assert_eq!(s1.as_bytes().len(), g.value_len());
        }
        assert_eq!(
            DhKey::generate(DhGroup::Null, &mut rng).err(),
            Some(DhError::NullGroup)
        );
    }

    #[test]
    fn small_exponents_give_known_values() {
        // 2^1 = 2 and 2^10 = 1024, padded to the prime's length; (2^10)^3 = 2^30.
        let k = DhKey::from_exponent(DhGroup::Ffdhe2048, &[1]).unwrap();
        assert_eq!(k.public_value()[255], 2);
        assert!(k.public_value()[..255].iter().all(|&b| b == 0));
        let k = DhKey::from_exponent(DhGroup::Ffdhe3072, &[3]).unwrap();
        let s = k.shared_secret(&[4, 0]).unwrap();
        assert_eq!(&s.as_bytes()[380..], &[0x40, 0, 0, 0]);
        assert!(s.as_bytes()[..380].iter().all(|&b| b == 0));
    }

    #[test]
    fn refuses_bad_peer_values_and_exponents() {
        let g = DhGroup::Ffdhe2048;
        let k = DhKey::from_exponent(g, &[5]).unwrap();
        let p = hex_bytes(g.prime_hex().unwrap()).unwrap();
        let mut p_minus_1 = p.clone();
        *p_minus_1.last_mut().unwrap() -= 1;
        assert_eq!(k.shared_secret(&[]).err(), Some(DhError::PeerLength(0)));
        assert_eq!(
            k.shared_secret(&[1; 257]).err(),
            Some(DhError::PeerLength(257))
        );
        for bad in [&[0u8][..], &[1], &[0, 0, 1], &p_minus_1, &p, &[0xFF; 256]] {
            assert_eq!(k.shared_secret(bad).err(), Some(DhError::PeerRange));
        }
        assert!(k.shared_secret(&[2]).is_ok());
        assert_eq!(
            DhKey::from_exponent(g, &[0; 8]).err(),
            Some(DhError::Exponent)
        );
        assert_eq!(
            DhKey::from_exponent(g, &[1; 33]).err(),
            Some(DhError::Exponent)
        );
        assert_eq!(
            DhKey::from_exponent(DhGroup::Null, &[1]).err(),
            Some(DhError::NullGroup)
        );
        assert_eq!(format!("{k:?}"), "DhKey { group: Ffdhe2048, .. }");
    }
}
