//! Wire dumps for interop debugging: the decoders of what hosts send (NVMe capsules, Connect
//! data, NVMe/RDMA and SRP connection private data, SRP IUs) log the raw bytes at `trace`
//! level under the [`WIRE_TARGET`] tracing target, rendered with [`Hex`]. `log_set_flag wire`
//! (or `rtgt serve --log-flag wire`) turns them on in any build; off, each call site costs one
//! comparison with the subscriber's maximum level. A session recorded that way is how the fuzz
//! seed captures of `fuzz/seeds/captures/wire` were made.

use std::fmt;

/// The tracing target of wire dumps.
pub const WIRE_TARGET: &str = "rtgt_wire";

/// Renders bytes as lowercase hex without separators.
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn renders_lowercase_hex() {
        assert_eq!(super::Hex(&[0x00, 0x7f, 0xab]).to_string(), "007fab");
        assert_eq!(super::Hex(&[]).to_string(), "");
    }
}
