//! The media-access commands: READ/WRITE(6/10/12/16), VERIFY(10/16), SYNCHRONIZE CACHE(10/16),
//! WRITE SAME(10/16) and UNMAP, decoded into [`ScsiIo`] for the exec layer. Decoding does not
//! allocate.

use super::cdb::{Cdb, op, read_be};
use super::logical_unit::LogicalUnit;
use super::sense::Sense;
use super::{ScsiIo, Verdict};

/// Decodes READ(6/10/12/16) and WRITE(6/10/12/16).
pub(crate) fn read_write(cdb: &Cdb<'_>, lu: &LogicalUnit, data_out_len: u32) -> Verdict {
    let opc = cdb.opcode();
    let write = matches!(
        opc,
        op::WRITE_6 | op::WRITE_10 | op::WRITE_12 | op::WRITE_16
    );
    let (lba, blocks, len_byte) = match opc {
        op::READ_6 | op::WRITE_6 => {
            let lba = u64::from(cdb.u8(1) & 0x1F) << 16 | u64::from(cdb.be16(2));
            let n = cdb.u8(4);
            (lba, if n == 0 { 256 } else { u32::from(n) }, 4)
        }
        op::READ_10 | op::WRITE_10 => (u64::from(cdb.be32(2)), u32::from(cdb.be16(7)), 7),
        op::READ_12 | op::WRITE_12 => (u64::from(cdb.be32(2)), cdb.be32(6), 6),
        _ => (cdb.be64(2), cdb.be32(10), 10),
    };
    let fua = cdb.len() > 6 && cdb.bit(1, 3);
    // RDPROTECT / WRPROTECT: no protection information on these LUs.
    if cdb.len() > 6 && cdb.u8(1) & 0xE0 != 0 {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(7)));
    }
    if write && lu.write_protected() {
        return Verdict::CheckCondition(Sense::write_protected());
    }
    // Same order as LIO: the transfer length limit, then the LBA range.
    if blocks > lu.max_transfer_blocks {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(len_byte, None));
    }
    if !lu.in_range(lba, u64::from(blocks)) {
        return Verdict::CheckCondition(Sense::lba_out_of_range());
    }
    if write {
        // Like LIO: a WRITE whose data buffer disagrees with its transfer length is refused
        // rather than partially executed.
        if u64::from(data_out_len) != u64::from(blocks) * u64::from(lu.block_size) {
            return Verdict::CheckCondition(Sense::invalid_field_in_command_iu());
        }
        if blocks == 0 {
            return Verdict::Good;
        }
        return Verdict::Io(ScsiIo::Write { lba, blocks, fua });
    }
    if blocks == 0 {
        return Verdict::Good;
    }
    Verdict::Io(ScsiIo::Read { lba, blocks, fua })
}

/// VERIFY(10/16) with BYTCHK = 0: a medium check that the bdev cannot do better than a range
/// check.
pub(crate) fn verify(cdb: &Cdb<'_>, lu: &LogicalUnit) -> Verdict {
    let (lba, blocks) = if cdb.opcode() == op::VERIFY_10 {
        (u64::from(cdb.be32(2)), u64::from(cdb.be16(7)))
    } else {
        (cdb.be64(2), u64::from(cdb.be32(10)))
    };
    if cdb.u8(1) & 0xE0 != 0 {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(7)));
    }
    if cdb.u8(1) & 0x06 != 0 {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(2)));
    }
    if !lu.in_range(lba, blocks) {
        return Verdict::CheckCondition(Sense::lba_out_of_range());
    }
    Verdict::Good
}

/// SYNCHRONIZE CACHE(10/16).
pub(crate) fn sync_cache(cdb: &Cdb<'_>, lu: &LogicalUnit) -> Verdict {
    let (lba, blocks) = if cdb.opcode() == op::SYNCHRONIZE_CACHE_10 {
        (u64::from(cdb.be32(2)), u32::from(cdb.be16(7)))
    } else {
        (cdb.be64(2), cdb.be32(10))
    };
    if !lu.in_range(lba, u64::from(blocks)) {
        return Verdict::CheckCondition(Sense::lba_out_of_range());
    }
    Verdict::Io(ScsiIo::Flush { lba, blocks })
}

/// WRITE SAME(10/16).
pub(crate) fn write_same(cdb: &Cdb<'_>, lu: &LogicalUnit, data_out_len: u32) -> Verdict {
    let sixteen = cdb.opcode() == op::WRITE_SAME_16;
    let (lba, blocks, len_byte) = if sixteen {
        (cdb.be64(2), cdb.be32(10), 10)
    } else {
        (u64::from(cdb.be32(2)), u32::from(cdb.be16(7)), 7)
    };
    let flags = cdb.u8(1);
    if flags & 0xE0 != 0 {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(7)));
    }
    if flags & 0x10 != 0 {
        // ANCHOR: anchored LBAs are not supported (ANC_SUP = 0).
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(4)));
    }
    let unmap = flags & 0x08 != 0;
    let ndob = sixteen && flags & 0x01 != 0;
    if unmap && !lu.unmap {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(3)));
    }
    if lu.write_protected() {
        return Verdict::CheckCondition(Sense::write_protected());
    }
    if blocks == 0 {
        // WSNZ = 1 in the block limits page.
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(len_byte, None));
    }
    if !lu.in_range(lba, u64::from(blocks)) {
        return Verdict::CheckCondition(Sense::lba_out_of_range());
    }
    if blocks > lu.max_write_same_blocks {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(len_byte, None));
    }
    let expected = if ndob { 0 } else { lu.block_size };
    if data_out_len != expected {
        return Verdict::CheckCondition(Sense::invalid_field_in_command_iu());
    }
    Verdict::Io(ScsiIo::WriteSame {
        lba,
        blocks,
        unmap,
        ndob,
    })
}

/// UNMAP: checks the CDB; the parameter list is parsed by [`parse_unmap`] once the transport
/// has fetched it.
pub(crate) fn unmap(cdb: &Cdb<'_>, lu: &LogicalUnit, data_out_len: u32) -> Verdict {
    if !lu.unmap {
        return Verdict::CheckCondition(Sense::invalid_opcode());
    }
    if cdb.bit(1, 0) {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(0)));
    }
    if lu.write_protected() {
        return Verdict::CheckCondition(Sense::write_protected());
    }
    let param_len = u32::from(cdb.be16(7));
    if param_len == 0 {
        return Verdict::Good;
    }
    if param_len < 8 {
        return Verdict::CheckCondition(Sense::param_list_length_error());
    }
    Verdict::Io(ScsiIo::Unmap {
        param_len: param_len.min(data_out_len),
    })
}

/// One range of an UNMAP parameter list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnmapRange {
    /// First block.
    pub lba: u64,
    /// Number of blocks (never zero: empty descriptors are skipped).
    pub blocks: u32,
}

/// The validated descriptors of an UNMAP parameter list; iterating yields the non-empty
/// ranges without allocating.
#[derive(Clone, Debug)]
pub struct UnmapDescriptors<'a> {
    descs: &'a [u8],
}

impl UnmapDescriptors<'_> {
    /// Number of descriptors (including empty ones).
    pub fn len(&self) -> usize {
        self.descs.len() / 16
    }

    /// `true` if the list holds no descriptor.
    pub fn is_empty(&self) -> bool {
        self.descs.len() < 16
    }
}

impl Iterator for UnmapDescriptors<'_> {
    type Item = UnmapRange;

    fn next(&mut self) -> Option<UnmapRange> {
        loop {
            let d = self.descs.get(..16)?;
            self.descs = self.descs.get(16..).unwrap_or(&[]);
            let lba = read_be::<8>(d, 0)?;
            let blocks = read_be::<4>(d, 8)? as u32;
            if blocks != 0 {
                return Some(UnmapRange { lba, blocks });
            }
        }
    }
}

/// Parses and checks an UNMAP parameter list (SBC-3 5.28.2) against `lu`: every descriptor is
/// checked before anything is returned, so the exec layer never unmaps part of a list it
/// then rejects.
pub fn parse_unmap<'a>(lu: &LogicalUnit, params: &'a [u8]) -> Result<UnmapDescriptors<'a>, Sense> {
    if params.is_empty() {
        return Ok(UnmapDescriptors { descs: &[] });
    }
    if params.len() < 8 {
        return Err(Sense::param_list_length_error());
    }
    let bd_len = read_be::<2>(params, 2).unwrap_or(0) as usize;
    // A trailing partial descriptor is ignored.
    let bd_len = bd_len - bd_len % 16;
    let descs = params
        .get(8..8 + bd_len)
        .ok_or(Sense::param_list_length_error())?;
    if descs.len() / 16 > lu.max_unmap_descriptors as usize {
        return Err(Sense::invalid_field_in_param(2, None));
    }
    for (i, d) in descs.chunks_exact(16).enumerate() {
        let lba = read_be::<8>(d, 0).unwrap_or(0);
        let blocks = read_be::<4>(d, 8).unwrap_or(0);
        if !lu.in_range(lba, blocks) {
            return Err(Sense::lba_out_of_range());
        }
        if blocks > u64::from(lu.max_unmap_blocks) {
            let byte = u16::try_from(8 + i * 16 + 8).unwrap_or(u16::MAX);
            return Err(Sense::invalid_field_in_param(byte, None));
        }
    }
    Ok(UnmapDescriptors { descs })
}
