//! NVMe Qualified Names in a fixed-size buffer (no heap).

use super::spec::{NQN_FIELD_LEN, NQN_MAX_LEN};

/// Why an NQN field was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NqnError {
    /// Empty string.
    Empty,
    /// Longer than 223 bytes, or no NUL inside the 256-byte field.
    TooLong,
    /// Not UTF-8, or contains a control character.
    Malformed,
}

/// An NQN of 1..=223 bytes of UTF-8, stored inline. Compared byte-exact (case-sensitive).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Nqn {
    buf: [u8; NQN_MAX_LEN],
    len: u8,
}

impl Nqn {
    /// Validates and copies `s`.
    pub fn new(s: &str) -> Result<Nqn, NqnError> {
        Nqn::from_bytes(s.as_bytes())
    }

    fn from_bytes(b: &[u8]) -> Result<Nqn, NqnError> {
        if b.is_empty() {
            return Err(NqnError::Empty);
        }
        if b.len() > NQN_MAX_LEN {
            return Err(NqnError::TooLong);
        }
        if core::str::from_utf8(b).is_err() || b.iter().any(|&c| c < 0x20 || c == 0x7F) {
            return Err(NqnError::Malformed);
        }
        let mut buf = [0u8; NQN_MAX_LEN];
        buf[..b.len()].copy_from_slice(b);
        Ok(Nqn {
            buf,
            len: b.len() as u8,
        })
    }

    /// Parses a NUL-terminated NQN field (Connect data SUBNQN/HOSTNQN, 256 bytes).
    ///
    /// The string ends at the first NUL, which must lie within the field.
    pub fn from_field(field: &[u8]) -> Result<Nqn, NqnError> {
        let field = &field[..field.len().min(NQN_FIELD_LEN)];
        let end = field
            .iter()
            .position(|&c| c == 0)
            .ok_or(NqnError::TooLong)?;
        Nqn::from_bytes(&field[..end])
    }

    /// The NQN as a string.
    pub fn as_str(&self) -> &str {
        // Validated as UTF-8 on construction; the fallback is unreachable.
        core::str::from_utf8(self.as_bytes()).unwrap_or("")
    }

    /// The NQN bytes, without a terminator.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf[..usize::from(self.len)]
    }
}

impl core::fmt::Debug for Nqn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:?}", self.as_str())
    }
}

impl core::fmt::Display for Nqn {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl PartialEq<str> for Nqn {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for Nqn {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_parsing() {
        let mut f = [0u8; 256];
        f[..9].copy_from_slice(b"nqn.a:b:c");
        assert_eq!(Nqn::from_field(&f).unwrap(), "nqn.a:b:c");
        assert_eq!(Nqn::from_field(&[0u8; 256]), Err(NqnError::Empty));
        assert_eq!(Nqn::from_field(&[b'a'; 256]), Err(NqnError::TooLong));
        let mut long = [b'a'; 256];
        long[224] = 0;
        assert_eq!(Nqn::from_field(&long), Err(NqnError::TooLong));
        long[223] = 0;
        assert_eq!(Nqn::from_field(&long).unwrap().as_bytes().len(), 223);
        let mut bad = [0u8; 256];
        bad[..3].copy_from_slice(&[b'a', 0xFF, b'b']);
        assert_eq!(Nqn::from_field(&bad), Err(NqnError::Malformed));
        bad[..3].copy_from_slice(b"a\nb");
        assert_eq!(Nqn::from_field(&bad), Err(NqnError::Malformed));
    }

    #[test]
    fn case_sensitive_compare() {
        let a = Nqn::new("nqn.2014-08.org.example:Host").unwrap();
        assert_eq!(a, "nqn.2014-08.org.example:Host");
        assert_ne!(a, *"nqn.2014-08.org.example:host");
        assert_ne!(a, Nqn::new("nqn.2014-08.org.example:Host ").unwrap());
    }
}
