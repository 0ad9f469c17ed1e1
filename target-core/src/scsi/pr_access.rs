//! Which SCSI commands a reservation can refuse: the conflict-check class of a CDB, after
//! SPC-4 table "SPC commands that are allowed in the presence of various reservations" and
//! SBC-3's table for block commands.
//!
//! The exec layer checks, per command and before running it (after the unit attention
//! check, as LIO): `standing.permits(command_class(cdb))`; `false` completes the command
//! with RESERVATION CONFLICT.

use crate::reservation::CommandClass;

use super::cdb::op;
use super::pr_in::PERSISTENT_RESERVE_IN;
use super::pr_out::PERSISTENT_RESERVE_OUT;
use super::reserve::{RELEASE_6, RELEASE_10, RESERVE_6, RESERVE_10};

/// Operation codes classified here beyond those the device server already knows.
#[allow(missing_docs)]
pub mod more_op {
    pub const FORMAT_UNIT: u8 = 0x04;
    pub const RECEIVE_DIAGNOSTIC_RESULTS: u8 = 0x1C;
    pub const SEND_DIAGNOSTIC: u8 = 0x1D;
    pub const WRITE_AND_VERIFY_10: u8 = 0x2E;
    pub const PRE_FETCH_10: u8 = 0x34;
    pub const READ_DEFECT_DATA_10: u8 = 0x37;
    pub const WRITE_BUFFER: u8 = 0x3B;
    pub const READ_BUFFER: u8 = 0x3C;
    pub const LOG_SELECT: u8 = 0x4C;
    pub const LOG_SENSE: u8 = 0x4D;
    pub const EXTENDED_COPY: u8 = 0x83;
    pub const COMPARE_AND_WRITE: u8 = 0x89;
    pub const WRITE_AND_VERIFY_16: u8 = 0x8E;
    pub const PRE_FETCH_16: u8 = 0x90;
    pub const WRITE_AND_VERIFY_12: u8 = 0xAE;
    pub const VERIFY_12: u8 = 0xAF;
    pub const READ_DEFECT_DATA_12: u8 = 0xB7;
    /// SERVICE ACTION IN(16) / GET LBA STATUS.
    pub const SA_GET_LBA_STATUS: u8 = 0x12;
    /// MAINTENANCE IN / REPORT TARGET PORT GROUPS.
    pub const SA_REPORT_TARGET_PORT_GROUPS: u8 = 0x0A;
    /// MAINTENANCE IN / REPORT SUPPORTED TASK MANAGEMENT FUNCTIONS.
    pub const SA_REPORT_SUPPORTED_TMFS: u8 = 0x0D;
}

use more_op::*;

/// The class of a CDB. Unknown operation codes are [`CommandClass::Query`]: they are refused
/// as INVALID COMMAND OPERATION CODE anyway, and that error is the one to report.
pub fn command_class(cdb: &[u8]) -> CommandClass {
    let Some(&opcode) = cdb.first() else {
        return CommandClass::Query;
    };
    let sa = cdb.get(1).map_or(0, |b| b & 0x1F);
    match opcode {
        op::INQUIRY | op::REPORT_LUNS | op::REQUEST_SENSE | RELEASE_6 | RELEASE_10 => {
            CommandClass::Always
        }
        PERSISTENT_RESERVE_OUT | RESERVE_6 | RESERVE_10 => CommandClass::Reservation,
        op::TEST_UNIT_READY | op::READ_CAPACITY_10 | PERSISTENT_RESERVE_IN | LOG_SENSE => {
            CommandClass::Query
        }
        op::SERVICE_ACTION_IN_16 => match sa {
            SA_GET_LBA_STATUS => CommandClass::Read,
            _ => CommandClass::Query,
        },
        op::MAINTENANCE_IN => match sa {
            op::SA_REPORT_SUPPORTED_OPCODES | SA_REPORT_SUPPORTED_TMFS => CommandClass::Read,
            _ => CommandClass::Query,
        },
        op::START_STOP_UNIT => {
            // SBC-3: allowed through every reservation only to start the unit (START = 1,
            // POWER CONDITION 0); stopping it is a write-class command.
            let start = cdb.get(4).copied().unwrap_or(0);
            if start & 0x01 != 0 && start >> 4 == 0 {
                CommandClass::Query
            } else {
                CommandClass::Write
            }
        }
        op::READ_6
        | op::READ_10
        | op::READ_12
        | op::READ_16
        | op::VERIFY_10
        | VERIFY_12
        | op::VERIFY_16
        | op::MODE_SENSE_6
        | op::MODE_SENSE_10
        | READ_BUFFER
        | RECEIVE_DIAGNOSTIC_RESULTS
        | READ_DEFECT_DATA_10
        | READ_DEFECT_DATA_12
        | PRE_FETCH_10
        | PRE_FETCH_16 => CommandClass::Read,
        op::WRITE_6
        | op::WRITE_10
        | op::WRITE_12
        | op::WRITE_16
        | WRITE_AND_VERIFY_10
        | WRITE_AND_VERIFY_12
        | WRITE_AND_VERIFY_16
        | op::WRITE_SAME_10
        | op::WRITE_SAME_16
        | op::UNMAP
        | op::SYNCHRONIZE_CACHE_10
        | op::SYNCHRONIZE_CACHE_16
        | COMPARE_AND_WRITE
        | op::MODE_SELECT_6
        | op::MODE_SELECT_10
        | FORMAT_UNIT
        | WRITE_BUFFER
        | SEND_DIAGNOSTIC
        | LOG_SELECT
        | EXTENDED_COPY => CommandClass::Write,
        _ => CommandClass::Query,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_the_device_server_runs_has_its_class() {
        use CommandClass::*;
        let table: &[(&[u8], CommandClass)] = &[
            (&[op::TEST_UNIT_READY], Query),
            (&[op::REQUEST_SENSE], Always),
            (&[op::READ_6], Read),
            (&[op::WRITE_6], Write),
            (&[op::INQUIRY], Always),
            (&[op::MODE_SELECT_6], Write),
            (&[op::MODE_SENSE_6], Read),
            (&[op::START_STOP_UNIT, 0, 0, 0, 0x01], Query),
            (&[op::START_STOP_UNIT, 0, 0, 0, 0x00], Write),
            (&[op::START_STOP_UNIT, 0, 0, 0, 0x11], Write),
            (&[op::READ_CAPACITY_10], Query),
            (&[op::READ_10], Read),
            (&[op::WRITE_10], Write),
            (&[op::VERIFY_10], Read),
            (&[op::SYNCHRONIZE_CACHE_10], Write),
            (&[op::WRITE_SAME_10], Write),
            (&[op::UNMAP], Write),
            (&[op::MODE_SELECT_10], Write),
            (&[op::MODE_SENSE_10], Read),
            (&[op::READ_16], Read),
            (&[op::WRITE_16], Write),
            (&[op::VERIFY_16], Read),
            (&[op::SYNCHRONIZE_CACHE_16], Write),
            (&[op::WRITE_SAME_16], Write),
            (&[op::SERVICE_ACTION_IN_16, op::SA_READ_CAPACITY_16], Query),
            (&[op::SERVICE_ACTION_IN_16, SA_GET_LBA_STATUS], Read),
            (&[op::REPORT_LUNS], Always),
            (&[op::MAINTENANCE_IN, op::SA_REPORT_SUPPORTED_OPCODES], Read),
            (&[op::MAINTENANCE_IN, SA_REPORT_TARGET_PORT_GROUPS], Query),
            (&[op::READ_12], Read),
            (&[op::WRITE_12], Write),
            (&[PERSISTENT_RESERVE_IN], Query),
            (&[PERSISTENT_RESERVE_OUT], Reservation),
            (&[RESERVE_6], Reservation),
            (&[RESERVE_10], Reservation),
            (&[RELEASE_6], Always),
            (&[RELEASE_10], Always),
            (&[COMPARE_AND_WRITE], Write),
            (&[0xC5], Query),
            (&[], Query),
        ];
        for (cdb, want) in table {
            assert_eq!(command_class(cdb), *want, "{cdb:02x?}");
        }
    }
}
