//! The description of a logical unit (what the device server reports about it) and of the
//! target port a command came through.

/// The NAA logical-unit designator reported in VPD page 0x83 (the WWID udev and dm-multipath
/// build from it must be identical on every path, so derive it from something stable such as
/// the bdev UUID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NaaId {
    /// NAA 3, locally assigned (8 bytes, first nibble 3). Needs no IEEE company id.
    Local([u8; 8]),
    /// NAA 6, IEEE registered extended (16 bytes, first nibble 6, 24-bit OUI).
    RegisteredExtended([u8; 16]),
}

impl NaaId {
    /// NAA 3 from a 16-byte UUID: the nibble 3 followed by 60 bits folded from the UUID.
    pub fn local_from_uuid(uuid: &[u8; 16]) -> Self {
        let hi = u64::from_be_bytes(uuid[..8].try_into().unwrap_or([0; 8]));
        let lo = u64::from_be_bytes(uuid[8..].try_into().unwrap_or([0; 8]));
        let v = (hi ^ lo.rotate_left(17)) & 0x0FFF_FFFF_FFFF_FFFF;
        NaaId::Local((0x3u64 << 60 | v).to_be_bytes())
    }

    /// NAA 6 from an IEEE OUI (24 bits) and a UUID whose first 100 bits become the
    /// vendor-specific identifier and extension.
    pub fn registered_extended(oui: u32, uuid: &[u8; 16]) -> Self {
        let mut b = [0u8; 16];
        let oui = oui & 0x00FF_FFFF;
        b[0] = 0x60 | (oui >> 20) as u8;
        b[1] = (oui >> 12) as u8;
        b[2] = (oui >> 4) as u8;
        b[3] = ((oui & 0xF) as u8) << 4 | (uuid[0] >> 4);
        for i in 4..16 {
            b[i] = uuid[i - 4] << 4 | uuid[i - 3] >> 4;
        }
        NaaId::RegisteredExtended(b)
    }

    /// The designator bytes.
    pub fn as_bytes(&self) -> &[u8] {
        match self {
            NaaId::Local(b) => b,
            NaaId::RegisteredExtended(b) => b,
        }
    }
}

/// A logical unit backed by a block device, as the SCSI device server sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogicalUnit {
    /// Logical block length in bytes (512..=65536, a power of two).
    pub block_size: u32,
    /// Number of logical blocks.
    pub num_blocks: u64,
    /// log2(logical blocks per physical block), READ CAPACITY(16) byte 13.
    pub physical_block_exp: u8,
    /// NAA designator for VPD 0x83.
    pub naa: NaaId,
    /// Unit serial number (VPD 0x80 and the T10 vendor-id designator), printable ASCII.
    pub serial: String,
    /// T10 vendor identification (8 bytes in INQUIRY).
    pub vendor: String,
    /// Product identification (16 bytes).
    pub product: String,
    /// Product revision level (4 bytes).
    pub revision: String,
    /// The LU has a volatile write cache: the default of caching page WCE, and whether WCE
    /// is changeable; SYNCHRONIZE CACHE is meaningful only then.
    pub write_cache: bool,
    /// The current values of the mode parameters MODE SELECT changes (WCE, SWP). The exec
    /// layer keeps them per LU, shared by every nexus, and copies them in per command.
    pub modes: super::mode::ModeParams,
    /// Writes fail with DATA PROTECT / WRITE PROTECTED; MODE SENSE reports WP.
    pub read_only: bool,
    /// Thin provisioning: UNMAP and WRITE SAME with UNMAP are accepted and advertised
    /// (VPD 0xB2 LBPU/LBPWS/LBPWS10, READ CAPACITY(16) LBPME).
    pub unmap: bool,
    /// Unmapped blocks read back as zeros (LBPRZ).
    pub unmap_reads_zero: bool,
    /// Largest UNMAP range in blocks (VPD 0xB0 MAXIMUM UNMAP LBA COUNT).
    pub max_unmap_blocks: u32,
    /// Most descriptors in one UNMAP parameter list.
    pub max_unmap_descriptors: u32,
    /// Optimal unmap granularity in blocks (0 = not reported).
    pub unmap_granularity: u32,
    /// Largest READ/WRITE transfer in blocks (VPD 0xB0 MAXIMUM TRANSFER LENGTH). Capped so
    /// that `max_transfer_blocks * block_size` fits in 32 bits, as SRP lengths do.
    pub max_transfer_blocks: u32,
    /// Optimal transfer length in blocks (0 = not reported).
    pub optimal_transfer_blocks: u32,
    /// Largest WRITE SAME range in blocks (VPD 0xB0 MAXIMUM WRITE SAME LENGTH).
    pub max_write_same_blocks: u32,
    /// VPD 0xB1 MEDIUM ROTATION RATE: 1 = non-rotational, 0 = not reported.
    pub rotation_rate: u16,
    /// VPD 0xB0 MAXIMUM COMPARE AND WRITE LENGTH in blocks (0: COMPARE AND WRITE is not
    /// supported).
    pub max_compare_write_blocks: u8,
}

/// Why a [`LogicalUnit`] description is unusable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LuError {
    /// The block size is not a power of two in 512..=65536.
    #[error("block size {0} is not a power of two between 512 and 65536")]
    BlockSize(u32),
    /// The LU has no blocks.
    #[error("a logical unit needs at least one block")]
    Empty,
}

impl LogicalUnit {
    /// A LU with the given geometry and identity and defaults for everything else:
    /// vendor "RTGT", write cache on, no unmap, 8 MiB max transfer, non-rotational.
    pub fn new(block_size: u32, num_blocks: u64, naa: NaaId, serial: impl Into<String>) -> Self {
        let mut lu = LogicalUnit {
            block_size,
            num_blocks,
            physical_block_exp: 0,
            naa,
            serial: serial.into(),
            vendor: "RTGT".into(),
            product: "rtgt bdev".into(),
            revision: "0001".into(),
            write_cache: true,
            modes: super::mode::ModeParams::defaults(true),
            read_only: false,
            unmap: false,
            unmap_reads_zero: false,
            max_unmap_blocks: 0,
            max_unmap_descriptors: 0,
            unmap_granularity: 0,
            max_transfer_blocks: 0,
            optimal_transfer_blocks: 0,
            max_write_same_blocks: 0,
            rotation_rate: 1,
            max_compare_write_blocks: 1,
        };
        lu.max_transfer_blocks = (8 << 20) / block_size.max(1);
        lu.max_write_same_blocks = lu.max_transfer_blocks;
        lu
    }

    /// Writes to the medium are refused: a read-only bdev, or software write protect (control
    /// page SWP).
    pub fn write_protected(&self) -> bool {
        self.read_only || self.modes.swp
    }

    /// Turns on thin provisioning with the given limits (UNMAP and WRITE SAME with UNMAP).
    pub fn with_unmap(mut self, max_blocks: u32, max_descriptors: u32, reads_zero: bool) -> Self {
        self.unmap = true;
        self.max_unmap_blocks = max_blocks.max(1);
        self.max_unmap_descriptors = max_descriptors.max(1);
        self.unmap_reads_zero = reads_zero;
        self
    }

    /// Checks the description and clamps the transfer limits to what fits in 32-bit byte
    /// counts.
    pub fn validate(&mut self) -> Result<(), LuError> {
        if !self.block_size.is_power_of_two() || !(512..=65536).contains(&self.block_size) {
            return Err(LuError::BlockSize(self.block_size));
        }
        if self.num_blocks == 0 {
            return Err(LuError::Empty);
        }
        let cap = u32::MAX / self.block_size;
        self.max_transfer_blocks = self.max_transfer_blocks.clamp(1, cap);
        self.max_write_same_blocks = self.max_write_same_blocks.max(1);
        self.physical_block_exp = self.physical_block_exp.min(15);
        Ok(())
    }

    /// The LBA of the last block.
    pub fn last_lba(&self) -> u64 {
        self.num_blocks.saturating_sub(1)
    }

    /// `true` if `blocks` blocks starting at `lba` lie inside the LU (a zero-length range may
    /// sit right after the last block, as LIO allows).
    pub fn in_range(&self, lba: u64, blocks: u64) -> bool {
        lba.checked_add(blocks)
            .is_some_and(|end| end <= self.num_blocks)
    }
}

/// The SCSI target port a command arrived through, for VPD 0x83 target-port designators.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub struct TargetPort {
    /// PROTOCOL IDENTIFIER (SPC-4 table 362): 4 for SRP.
    pub protocol_id: u8,
    /// RELATIVE TARGET PORT IDENTIFIER (1-based).
    pub relative_port: u16,
    /// The 16-byte SRP target port identifier (id_ext + ioc_guid), reported as an EUI-64
    /// based 16-byte designator.
    pub port_id: Option<[u8; 16]>,
}

/// SCSI protocol identifier of SRP.
pub const PROTOCOL_ID_SRP: u8 = 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn naa_forms() {
        let uuid = [
            0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, 0xDE, 0xF0, 1, 2, 3, 4, 5, 6, 7, 8,
        ];
        let NaaId::Local(l) = NaaId::local_from_uuid(&uuid) else {
            panic!()
        };
        assert_eq!(l[0] >> 4, 3);
        let NaaId::RegisteredExtended(r) = NaaId::registered_extended(0x001405, &uuid) else {
            panic!()
        };
        assert_eq!(&r[..4], &[0x60, 0x01, 0x40, 0x51]);
        assert_eq!(r[4], 0x23);
        assert_eq!(NaaId::local_from_uuid(&uuid), NaaId::local_from_uuid(&uuid));
    }

    #[test]
    fn validate_and_range() {
        let mut lu = LogicalUnit::new(4096, 100, NaaId::Local([0x30; 8]), "s");
        lu.max_transfer_blocks = u32::MAX;
        lu.validate().unwrap();
        assert_eq!(lu.max_transfer_blocks, u32::MAX / 4096);
        assert!(lu.in_range(99, 1));
        assert!(lu.in_range(100, 0));
        assert!(!lu.in_range(100, 1));
        assert!(!lu.in_range(u64::MAX, 2));
        let mut bad = LogicalUnit::new(1000, 1, NaaId::Local([0; 8]), "");
        assert_eq!(bad.validate(), Err(LuError::BlockSize(1000)));
        let mut empty = LogicalUnit::new(512, 0, NaaId::Local([0; 8]), "");
        assert_eq!(empty.validate(), Err(LuError::Empty));
    }
}
