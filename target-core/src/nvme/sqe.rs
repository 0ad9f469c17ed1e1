//! The 64-byte submission queue entry (the first 64 bytes of a command capsule).

use super::sgl::SglDescriptor;
use super::spec::{SQE_SIZE, admin_opc, fctype, le};

/// Data transfer direction of a command, derived from the opcode (or FCTYPE for fabrics).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// No data.
    None,
    /// Host to controller (write-like: data is fetched from the host).
    HostToController,
    /// Controller to host (read-like: data is sent to the host).
    ControllerToHost,
    /// Both directions (bits 1:0 = 11b); not used by any supported command.
    Bidirectional,
}

/// A submission queue entry: a copy of the 64 command bytes with field accessors.
///
/// Copying 64 bytes is cheaper than any lifetime juggling on the data path; the type is `Copy`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Sqe(pub [u8; SQE_SIZE]);

impl Default for Sqe {
    fn default() -> Self {
        Sqe([0; SQE_SIZE])
    }
}

impl core::fmt::Debug for Sqe {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("Sqe")
            .field("opc", &format_args!("{:#04x}", self.opcode()))
            .field("cid", &format_args!("{:#06x}", self.cid()))
            .field("nsid", &self.nsid())
            .field("cdw10", &format_args!("{:#010x}", self.cdw10()))
            .field("cdw11", &format_args!("{:#010x}", self.cdw11()))
            .field("cdw12", &format_args!("{:#010x}", self.cdw12()))
            .finish()
    }
}

impl Sqe {
    /// Copies the first 64 bytes of `buf`; `None` if `buf` is shorter.
    pub fn from_bytes(buf: &[u8]) -> Option<Sqe> {
        let b: &[u8; SQE_SIZE] = buf.get(..SQE_SIZE)?.try_into().ok()?;
        Some(Sqe(*b))
    }

    /// A zeroed command with the opcode, CID and Linux's flags byte (PSDT=01b, SGL).
    pub fn new(opcode: u8, cid: u16) -> Sqe {
        let mut s = Sqe::default();
        s.0[0] = opcode;
        s.0[1] = 0x40;
        s.set_cid(cid);
        s
    }

    /// A fabrics command (opcode 0x7F) with the given FCTYPE.
    pub fn fabrics(fctype: u8, cid: u16) -> Sqe {
        let mut s = Sqe::new(admin_opc::FABRICS, cid);
        s.0[4] = fctype;
        s
    }

    /// The raw bytes.
    pub fn as_bytes(&self) -> &[u8; SQE_SIZE] {
        &self.0
    }

    /// Opcode (byte 0).
    pub fn opcode(&self) -> u8 {
        self.0[0]
    }

    /// Flags byte (byte 1).
    pub fn flags(&self) -> u8 {
        self.0[1]
    }

    /// Fused operation (FLAGS bits 1:0).
    pub fn fuse(&self) -> u8 {
        self.0[1] & 3
    }

    /// PRP or SGL for data transfer (FLAGS bits 7:6).
    pub fn psdt(&self) -> u8 {
        self.0[1] >> 6
    }

    /// Command identifier (bytes 2-3), to be echoed verbatim.
    pub fn cid(&self) -> u16 {
        le::u16_at(&self.0, 2)
    }

    /// Namespace identifier (bytes 4-7).
    pub fn nsid(&self) -> u32 {
        le::u32_at(&self.0, 4)
    }

    /// True for a fabrics command (opcode 0x7F).
    pub fn is_fabrics(&self) -> bool {
        self.opcode() == admin_opc::FABRICS
    }

    /// FCTYPE (byte 4) of a fabrics command.
    pub fn fctype(&self) -> u8 {
        self.0[4]
    }

    /// Command dword `n` (0..=15); dwords outside the entry read as 0.
    pub fn cdw(&self, n: usize) -> u32 {
        if n < 16 {
            le::u32_at(&self.0, n * 4)
        } else {
            0
        }
    }

    /// CDW10 (bytes 40-43).
    pub fn cdw10(&self) -> u32 {
        self.cdw(10)
    }
    /// CDW11 (bytes 44-47).
    pub fn cdw11(&self) -> u32 {
        self.cdw(11)
    }
    /// CDW12 (bytes 48-51).
    pub fn cdw12(&self) -> u32 {
        self.cdw(12)
    }
    /// CDW13 (bytes 52-55).
    pub fn cdw13(&self) -> u32 {
        self.cdw(13)
    }
    /// CDW14 (bytes 56-59).
    pub fn cdw14(&self) -> u32 {
        self.cdw(14)
    }
    /// CDW15 (bytes 60-63).
    pub fn cdw15(&self) -> u32 {
        self.cdw(15)
    }

    /// SGL1, the data pointer (bytes 24-39).
    pub fn sgl1(&self) -> SglDescriptor {
        let mut d = [0u8; 16];
        d.copy_from_slice(&self.0[24..40]);
        SglDescriptor(d)
    }

    /// Data direction: opcode bits 1:0, or FCTYPE for fabrics commands.
    pub fn direction(&self) -> Direction {
        if self.is_fabrics() {
            return match self.fctype() {
                fctype::CONNECT | fctype::AUTH_SEND => Direction::HostToController,
                fctype::AUTH_RECV => Direction::ControllerToHost,
                _ => Direction::None,
            };
        }
        match self.opcode() & 3 {
            0 => Direction::None,
            1 => Direction::HostToController,
            2 => Direction::ControllerToHost,
            _ => Direction::Bidirectional,
        }
    }

    /// Sets the CID.
    pub fn set_cid(&mut self, cid: u16) -> &mut Self {
        le::put_u16(&mut self.0, 2, cid);
        self
    }

    /// Sets the NSID.
    pub fn set_nsid(&mut self, nsid: u32) -> &mut Self {
        le::put_u32(&mut self.0, 4, nsid);
        self
    }

    /// Sets command dword `n` (0..=15; others are ignored).
    pub fn set_cdw(&mut self, n: usize, v: u32) -> &mut Self {
        if n < 16 {
            le::put_u32(&mut self.0, n * 4, v);
        }
        self
    }

    /// Sets the flags byte.
    pub fn set_flags(&mut self, flags: u8) -> &mut Self {
        self.0[1] = flags;
        self
    }

    /// Sets SGL1.
    pub fn set_sgl1(&mut self, d: SglDescriptor) -> &mut Self {
        self.0[24..40].copy_from_slice(&d.0);
        self
    }

    /// Writes a little-endian u16 at a byte offset (for fabrics-specific fields); out of range is ignored.
    pub fn set_u16_at(&mut self, off: usize, v: u16) -> &mut Self {
        le::put_u16(&mut self.0, off, v);
        self
    }

    /// Writes a byte at an offset; out of range is ignored.
    pub fn set_u8_at(&mut self, off: usize, v: u8) -> &mut Self {
        if let Some(b) = self.0.get_mut(off) {
            *b = v;
        }
        self
    }

    /// Writes a little-endian u32 at a byte offset; out of range is ignored.
    pub fn set_u32_at(&mut self, off: usize, v: u32) -> &mut Self {
        le::put_u32(&mut self.0, off, v);
        self
    }

    /// Writes a little-endian u64 at a byte offset; out of range is ignored.
    pub fn set_u64_at(&mut self, off: usize, v: u64) -> &mut Self {
        le::put_u64(&mut self.0, off, v);
        self
    }

    /// Reads a byte at an offset (0 when out of range).
    pub fn u8_at(&self, off: usize) -> u8 {
        self.0.get(off).copied().unwrap_or(0)
    }

    /// Reads a little-endian u16 at a byte offset (0 when out of range).
    pub fn u16_at(&self, off: usize) -> u16 {
        le::u16_at(&self.0, off)
    }

    /// Reads a little-endian u32 at a byte offset (0 when out of range).
    pub fn u32_at(&self, off: usize) -> u32 {
        le::u32_at(&self.0, off)
    }

    /// Reads a little-endian u64 at a byte offset (0 when out of range).
    pub fn u64_at(&self, off: usize) -> u64 {
        le::u64_at(&self.0, off)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::spec::io_opc;

    #[test]
    fn field_offsets() {
        let mut raw = [0u8; 64];
        raw[0] = 0x02;
        raw[1] = 0x40;
        raw[2] = 0x1F;
        raw[3] = 0xA0;
        raw[4..8].copy_from_slice(&7u32.to_le_bytes());
        raw[40..44].copy_from_slice(&0x1122_3344u32.to_le_bytes());
        raw[60..64].copy_from_slice(&0xDEAD_BEEFu32.to_le_bytes());
        raw[39] = 0x4F;
        let s = Sqe::from_bytes(&raw).unwrap();
        assert_eq!(s.opcode(), io_opc::READ);
        assert_eq!(s.psdt(), 1);
        assert_eq!(s.fuse(), 0);
        assert_eq!(s.cid(), 0xA01F);
        assert_eq!(s.nsid(), 7);
        assert_eq!(s.cdw10(), 0x1122_3344);
        assert_eq!(s.cdw15(), 0xDEAD_BEEF);
        assert_eq!(s.cdw(16), 0);
        assert_eq!(s.sgl1().0[15], 0x4F);
        assert_eq!(s.direction(), Direction::ControllerToHost);
        assert!(Sqe::from_bytes(&raw[..63]).is_none());
    }

    #[test]
    fn directions() {
        assert_eq!(
            Sqe::new(io_opc::WRITE, 0).direction(),
            Direction::HostToController
        );
        assert_eq!(Sqe::new(io_opc::FLUSH, 0).direction(), Direction::None);
        assert_eq!(Sqe::new(0x03, 0).direction(), Direction::Bidirectional);
        assert_eq!(
            Sqe::fabrics(fctype::CONNECT, 0).direction(),
            Direction::HostToController
        );
        assert_eq!(
            Sqe::fabrics(fctype::PROPERTY_GET, 0).direction(),
            Direction::None
        );
        assert_eq!(
            Sqe::fabrics(fctype::PROPERTY_SET, 0).direction(),
            Direction::None
        );
        assert_eq!(
            Sqe::fabrics(fctype::AUTH_RECV, 0).direction(),
            Direction::ControllerToHost
        );
    }

    #[test]
    fn setters_round_trip() {
        let mut s = Sqe::new(0x06, 0xFFFF);
        s.set_nsid(0xFFFF_FFFF).set_cdw(10, 1).set_cdw(99, 5);
        assert_eq!(s.cid(), 0xFFFF);
        assert_eq!(s.nsid(), 0xFFFF_FFFF);
        assert_eq!(s.cdw10(), 1);
        assert_eq!(s.flags(), 0x40);
        s.set_u64_at(48, 0x0102_0304_0506_0708);
        assert_eq!(s.u64_at(48), 0x0102_0304_0506_0708);
        assert_eq!(s.u64_at(60), 0, "out of range read is 0");
    }
}
