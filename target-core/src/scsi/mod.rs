//! SCSI logical-unit logic (sans-I/O): what Linux sends to bring a disk up and use it.
//!
//! [`execute`] takes a CDB and returns a [`Verdict`]: parameter data written into a
//! caller-supplied buffer ([`Verdict::DataIn`]), a block-device operation for the exec layer
//! ([`Verdict::Io`]), plain success, or CHECK CONDITION with [`Sense`] data. Nothing here
//! performs I/O, takes a lock, or allocates on the READ/WRITE path.
//!
//! One file per concern: [`sense`] (status and sense data), [`lun`] (LUN encoding and REPORT
//! LUNS), [`logical_unit`] (the logical-unit description), `inquiry` (standard INQUIRY and VPD
//! pages), `mode` (MODE SENSE), `capacity` (READ CAPACITY), [`media`] (media access: READ,
//! WRITE, VERIFY, SYNCHRONIZE CACHE, WRITE SAME, UNMAP and its parameter list),
//! `supported_opcodes` (REPORT SUPPORTED OPERATION CODES), `data_in` (the parameter-data
//! writer).
//!
//! Reservations and task semantics (sans-I/O, not yet called from [`execute`]): [`pr_in`] /
//! [`pr_out`] (PERSISTENT RESERVE IN/OUT over the volume's shared
//! [`crate::reservation::Reservation`]), [`reserve`] (RESERVE/RELEASE(6/10)), [`pr_access`]
//! (which commands a reservation can refuse), [`ua`] (the per-nexus unit attention queue),
//! [`caw`] (COMPARE AND WRITE and its MISCOMPARE sense).
//!
//! Implicit ALUA over the shared [`crate::ana::AnaModel`] (sans-I/O, not yet called from
//! [`execute`]): [`alua`] (state mapping, INQUIRY TPGS, VPD 83h port and group designators,
//! REPORT TARGET PORT GROUPS, the commands each state allows and its NOT READY sense, the
//! ASYMMETRIC ACCESS STATE CHANGED unit attention).
//!
//! ## Data-in lengths
//!
//! For commands that return parameter data the device server builds the full data, then
//! stores `min(allocation length, full length, data_in.len())` bytes and reports that count
//! in [`Verdict::DataIn`]. Length fields inside the data always describe the full data (for
//! REPORT LUNS the whole LUN list), as SPC requires, so an initiator can retry with a larger
//! allocation. The transport compares `len` with the initiator's data-in buffer and reports
//! the difference as a residual (underflow if shorter, overflow if the buffer was smaller).
//! Give `data_in` at least `min(allocation length, initiator buffer length)` bytes; 4 KiB
//! covers everything but a long REPORT LUNS list (8 bytes per LUN + 8).

pub mod alua;
mod capacity;
pub mod caw;
pub mod cdb;
mod data_in;
mod inquiry;
pub mod logical_unit;
pub mod lun;
pub mod media;
pub mod mode;
pub mod mode_select;
pub mod pr_access;
pub mod pr_in;
pub mod pr_out;
pub mod reserve;
pub mod sense;
mod supported_opcodes;
pub mod task_order;
#[cfg(test)]
mod tests;
pub mod ua;

pub use inquiry::{PERIPHERAL_NOT_PRESENT, STANDARD_INQUIRY_LEN, SUPPORTED_VPD};
pub use logical_unit::{LogicalUnit, LuError, NaaId, PROTOCOL_ID_SRP, TargetPort};
pub use media::{UnmapDescriptors, UnmapRange, parse_unmap};
pub use mode::ModeParams;
pub use sense::{FIXED_SENSE_LEN, FieldPointer, ScsiStatus, Sense, SenseKey};

use cdb::{Cdb, op};

/// A block-device operation decoded from a CDB, for the exec layer to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScsiIo {
    /// Read `blocks` blocks at `lba` and send them to the initiator (`blocks` > 0). The
    /// transport moves `min(blocks * block_size, data-in buffer)` bytes and reports the
    /// difference as a residual.
    Read {
        /// First block.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
        /// Force unit access: read from the medium, not a volatile cache.
        fua: bool,
    },
    /// Fetch `blocks * block_size` bytes of data-out (exactly what the initiator declared) and
    /// write them at `lba`.
    Write {
        /// First block.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
        /// Force unit access: the data must be durable before GOOD is returned.
        fua: bool,
    },
    /// Make cached writes durable (`blocks` = 0 means through the end of the LU).
    Flush {
        /// First block of the range.
        lba: u64,
        /// Number of blocks.
        blocks: u32,
    },
    /// Fetch `param_len` bytes of data-out (the UNMAP parameter list), check them with
    /// [`parse_unmap`], then deallocate the ranges.
    Unmap {
        /// Bytes of parameter data to fetch (the smaller of the CDB's PARAMETER LIST LENGTH
        /// and the initiator's data-out buffer).
        param_len: u32,
    },
    /// Write one block pattern over `blocks` blocks at `lba`. Unless `ndob`, the pattern is one
    /// block of data-out. With `unmap`, the blocks may instead be deallocated when the pattern
    /// is all zeros (and the LU reads unmapped blocks as zeros); otherwise the pattern is
    /// written.
    WriteSame {
        /// First block.
        lba: u64,
        /// Number of blocks (> 0).
        blocks: u32,
        /// UNMAP bit.
        unmap: bool,
        /// No data-out buffer: the pattern is zeros.
        ndob: bool,
    },
}

impl ScsiIo {
    /// Bytes of data-out to fetch from the initiator before the operation can run.
    pub fn data_out_len(&self, block_size: u32) -> u64 {
        match *self {
            ScsiIo::Write { blocks, .. } => u64::from(blocks) * u64::from(block_size),
            ScsiIo::Unmap { param_len } => u64::from(param_len),
            ScsiIo::WriteSame { ndob: false, .. } => u64::from(block_size),
            _ => 0,
        }
    }

    /// Bytes of data-in the operation produces.
    pub fn data_in_len(&self, block_size: u32) -> u64 {
        match *self {
            ScsiIo::Read { blocks, .. } => u64::from(blocks) * u64::from(block_size),
            _ => 0,
        }
    }
}

/// What the device server decided about one command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// GOOD status, no data.
    Good,
    /// GOOD status with `len` bytes of parameter data stored at the start of `data_in`.
    DataIn {
        /// Bytes to send to the initiator.
        len: u32,
    },
    /// A block-device operation to run; its result gives the status.
    Io(ScsiIo),
    /// CHECK CONDITION with this sense data.
    CheckCondition(Sense),
}

/// One command as the transport received it.
#[derive(Clone, Copy, Debug)]
pub struct Command<'a> {
    /// The CDB (SRP carries 16 bytes; shorter CDBs may be padded).
    pub cdb: &'a [u8],
    /// Bytes of data-out the initiator declared (the SRP data-out descriptor length).
    pub data_out_len: u32,
}

/// What the device server needs from the target side: the port the command came through and
/// the LUNs visible on this I_T nexus.
#[derive(Clone, Copy, Debug)]
pub struct TargetContext<'a> {
    /// The target port (VPD 0x83 target-port designators).
    pub port: &'a TargetPort,
    /// Visible LUNs, sorted ascending, without duplicates (REPORT LUNS).
    pub luns: &'a [u16],
    /// Implicit ALUA, when the subsystem reports asymmetric access: INQUIRY TPGS, the VPD 83h
    /// target port group designator, REPORT TARGET PORT GROUPS.
    pub alua: Option<AluaContext<'a>>,
}

/// The ALUA facts of one command's target port and logical unit.
#[derive(Clone, Copy, Debug)]
pub struct AluaContext<'a> {
    /// The target port group of the port the command came through.
    pub tpg_id: u16,
    /// The LU's target port groups, ascending by id (REPORT TARGET PORT GROUPS; the exec layer
    /// fills it only for that command, empty otherwise).
    pub tpgs: &'a [crate::ana::TpgEntry],
    /// The implicit transition time (ANATT) in seconds.
    pub anatt_secs: u8,
}

/// Runs the device server for one command.
///
/// `lu` is the logical unit the LUN designates, or `None` if no LU is mapped there: INQUIRY
/// then answers with peripheral qualifier 3 / type 0x1F, REPORT LUNS and REQUEST SENSE work,
/// and everything else fails with ILLEGAL REQUEST / LOGICAL UNIT NOT SUPPORTED.
/// Parameter data goes into `data_in` (see the module documentation for lengths).
pub fn execute(
    lu: Option<&LogicalUnit>,
    ctx: &TargetContext<'_>,
    cmd: &Command<'_>,
    data_in: &mut [u8],
) -> Verdict {
    let Some(&opcode) = cmd.cdb.first() else {
        return Verdict::CheckCondition(Sense::invalid_opcode());
    };
    let Some((cdb, _)) = Cdb::new(cmd.cdb) else {
        // Unknown group (variable-length, vendor specific) or a truncated CDB.
        return match cdb::cdb_len(opcode) {
            Some(_) => Verdict::CheckCondition(Sense::invalid_field_in_cdb(0, None)),
            None if lu.is_none() => Verdict::CheckCondition(Sense::lun_not_supported()),
            None => Verdict::CheckCondition(Sense::invalid_opcode()),
        };
    };
    // Commands that work without a logical unit.
    match opcode {
        op::INQUIRY => {
            let tpg = ctx.alua.map(|a| a.tpg_id);
            return checked(&cdb, |c| inquiry::inquiry(c, lu, ctx.port, tpg, data_in));
        }
        op::REPORT_LUNS => return checked(&cdb, |c| lun::report_luns(c, ctx.luns, data_in)),
        op::REQUEST_SENSE => return checked(&cdb, |c| request_sense(c, lu, data_in)),
        _ => {}
    }
    let Some(lu) = lu else {
        return Verdict::CheckCondition(Sense::lun_not_supported());
    };
    checked(&cdb, |c| match opcode {
        op::TEST_UNIT_READY => Verdict::Good,
        op::START_STOP_UNIT => Verdict::Good,
        op::READ_6 | op::READ_10 | op::READ_12 | op::READ_16 => {
            media::read_write(c, lu, cmd.data_out_len)
        }
        op::WRITE_6 | op::WRITE_10 | op::WRITE_12 | op::WRITE_16 => {
            media::read_write(c, lu, cmd.data_out_len)
        }
        op::VERIFY_10 | op::VERIFY_16 => media::verify(c, lu),
        op::SYNCHRONIZE_CACHE_10 | op::SYNCHRONIZE_CACHE_16 => media::sync_cache(c, lu),
        op::WRITE_SAME_10 | op::WRITE_SAME_16 => media::write_same(c, lu, cmd.data_out_len),
        op::UNMAP => media::unmap(c, lu, cmd.data_out_len),
        op::READ_CAPACITY_10 => capacity::read_capacity_10(c, lu, data_in),
        op::SERVICE_ACTION_IN_16 => match c.u8(1) & 0x1F {
            op::SA_READ_CAPACITY_16 => capacity::read_capacity_16(c, lu, data_in),
            _ => Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(4))),
        },
        op::MAINTENANCE_IN => match c.u8(1) & 0x1F {
            op::SA_REPORT_SUPPORTED_OPCODES => {
                supported_opcodes::report_supported_opcodes(c, lu, ctx.alua.is_some(), data_in)
            }
            alua::SA_REPORT_TARGET_PORT_GROUPS => match ctx.alua {
                Some(a) => alua::report_target_port_groups(cmd.cdb, a.tpgs, a.anatt_secs, data_in),
                None => Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(4))),
            },
            _ => Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(4))),
        },
        op::MODE_SENSE_6 | op::MODE_SENSE_10 => mode::mode_sense(c, lu, data_in),
        _ => Verdict::CheckCondition(Sense::invalid_opcode()),
    })
}

/// Runs a READ or WRITE (6/10/12/16) CDB on `lu` as [`execute`] does (the CDB's length and
/// CONTROL byte checked, then the fields, transfer length and LBA range), for the exec layer's
/// fast path of media access.
pub fn read_write(lu: &LogicalUnit, cdb: &[u8], data_out_len: u32) -> Verdict {
    match Cdb::new(cdb) {
        Some((c, _)) => checked(&c, |c| media::read_write(c, lu, data_out_len)),
        None => Verdict::CheckCondition(Sense::invalid_field_in_cdb(0, None)),
    }
}

/// Rejects CONTROL bytes asking for NACA (ACA is not supported), then runs `f`.
fn checked(cdb: &Cdb<'_>, f: impl FnOnce(&Cdb<'_>) -> Verdict) -> Verdict {
    if cdb.control() & 0x04 != 0 {
        let byte = u16::try_from(cdb.len() - 1).unwrap_or(0);
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(byte, Some(2)));
    }
    f(cdb)
}

/// REQUEST SENSE (SPC-4 6.39). Sense is delivered with each SRP_RSP (autosense), so only a unit
/// attention can be pending, and the exec layer delivers that itself
/// ([`request_sense_delivering`]); here: NO SENSE, or LOGICAL UNIT NOT SUPPORTED for a LUN
/// without an LU (with GOOD status, as SPC-4 requires for REQUEST SENSE).
fn request_sense(cdb: &Cdb<'_>, lu: Option<&LogicalUnit>, data_in: &mut [u8]) -> Verdict {
    let sense = if lu.is_some() {
        Sense::no_sense()
    } else {
        Sense::lun_not_supported()
    };
    sense_parameter_data(cdb, sense, data_in)
}

/// REQUEST SENSE delivering `sense`, a pending unit attention the command clears (SPC-4: the
/// condition is returned as parameter data with GOOD status), for the exec layer that keeps the
/// unit attention queues. The CDB is checked as for any REQUEST SENSE.
pub fn request_sense_delivering(cdb: &[u8], sense: Sense, data_in: &mut [u8]) -> Verdict {
    match Cdb::new(cdb) {
        Some((c, _)) => checked(&c, |c| sense_parameter_data(c, sense, data_in)),
        None => Verdict::CheckCondition(Sense::invalid_field_in_cdb(0, None)),
    }
}

fn sense_parameter_data(cdb: &Cdb<'_>, sense: Sense, data_in: &mut [u8]) -> Verdict {
    let desc = cdb.bit(1, 0);
    let mut w = data_in::DataIn::new(data_in, u32::from(cdb.u8(4)));
    if desc {
        let (b, n) = sense.to_descriptor();
        w.put(b.get(..n).unwrap_or(&b));
    } else {
        w.put(&sense.to_fixed());
    }
    Verdict::DataIn { len: w.finish() }
}
