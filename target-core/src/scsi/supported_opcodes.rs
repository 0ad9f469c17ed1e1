//! REPORT SUPPORTED OPERATION CODES (SPC-4 6.35). Linux probes it (through
//! `scsi_report_opcode`) to decide whether WRITE SAME may be used.

use super::Verdict;
use super::cdb::{Cdb, op};
use super::data_in::DataIn;
use super::logical_unit::LogicalUnit;
use super::sense::Sense;

/// A supported command: opcode, service action, and the CDB usage bitmap (whose length is the
/// CDB length and whose first byte is the opcode).
struct Supported {
    opcode: u8,
    sa: Option<u8>,
    usage: &'static [u8],
    unmap_only: bool,
    /// Only with implicit ALUA (REPORT TARGET PORT GROUPS).
    alua_only: bool,
}

const C: u8 = 0x04; // control byte: NACA is examined

const fn cmd(opcode: u8, usage: &'static [u8]) -> Supported {
    Supported {
        opcode,
        sa: None,
        usage,
        unmap_only: false,
        alua_only: false,
    }
}

const fn sa_cmd(opcode: u8, sa: u8, usage: &'static [u8]) -> Supported {
    Supported {
        opcode,
        sa: Some(sa),
        usage,
        unmap_only: false,
        alua_only: false,
    }
}

/// PERSISTENT RESERVE IN: SERVICE ACTION, ALLOCATION LENGTH.
const PR_IN: &[u8] = &[0x5E, 0x1F, 0, 0, 0, 0, 0, 0xFF, 0xFF, C];
/// PERSISTENT RESERVE OUT: SERVICE ACTION, SCOPE and TYPE, PARAMETER LIST LENGTH.
const PR_OUT: &[u8] = &[0x5F, 0x1F, 0xFF, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, C];

/// Sorted by opcode, then service action.
static COMMANDS: &[Supported] = &[
    cmd(op::TEST_UNIT_READY, &[0x00, 0, 0, 0, 0, C]),
    cmd(op::REQUEST_SENSE, &[0x03, 0x01, 0, 0, 0xFF, C]),
    cmd(op::READ_6, &[0x08, 0x1F, 0xFF, 0xFF, 0xFF, C]),
    cmd(op::WRITE_6, &[0x0A, 0x1F, 0xFF, 0xFF, 0xFF, C]),
    cmd(op::INQUIRY, &[0x12, 0x01, 0xFF, 0xFF, 0xFF, C]),
    cmd(op::MODE_SELECT_6, &[0x15, 0x10, 0, 0, 0xFF, C]),
    cmd(crate::scsi::reserve::RESERVE_6, &[0x16, 0, 0, 0, 0, C]),
    cmd(crate::scsi::reserve::RELEASE_6, &[0x17, 0, 0, 0, 0, C]),
    cmd(op::MODE_SENSE_6, &[0x1A, 0x08, 0xFF, 0xFF, 0xFF, C]),
    cmd(op::START_STOP_UNIT, &[0x1B, 0x01, 0, 0x0F, 0xF7, C]),
    cmd(
        op::READ_CAPACITY_10,
        &[0x25, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0x01, C],
    ),
    cmd(
        op::READ_10,
        &[0x28, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
    ),
    cmd(
        op::WRITE_10,
        &[0x2A, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
    ),
    cmd(
        op::VERIFY_10,
        &[0x2F, 0xE6, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
    ),
    cmd(
        op::SYNCHRONIZE_CACHE_10,
        &[0x35, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
    ),
    cmd(
        op::WRITE_SAME_10,
        &[0x41, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, 0xFF, 0xFF, C],
    ),
    Supported {
        opcode: op::UNMAP,
        sa: None,
        usage: &[0x42, 0x01, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, C],
        unmap_only: true,
        alua_only: false,
    },
    cmd(
        op::MODE_SELECT_10,
        &[0x55, 0x10, 0, 0, 0, 0, 0, 0xFF, 0xFF, C],
    ),
    cmd(
        crate::scsi::reserve::RESERVE_10,
        &[0x56, 0, 0, 0, 0, 0, 0, 0, 0, C],
    ),
    cmd(
        crate::scsi::reserve::RELEASE_10,
        &[0x57, 0, 0, 0, 0, 0, 0, 0, 0, C],
    ),
    cmd(
        op::MODE_SENSE_10,
        &[0x5A, 0x18, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0xFF, C],
    ),
    // READ KEYS, READ RESERVATION, REPORT CAPABILITIES, READ FULL STATUS.
    sa_cmd(0x5E, 0x00, PR_IN),
    sa_cmd(0x5E, 0x01, PR_IN),
    sa_cmd(0x5E, 0x02, PR_IN),
    sa_cmd(0x5E, 0x03, PR_IN),
    // REGISTER, RESERVE, RELEASE, CLEAR, PREEMPT, PREEMPT AND ABORT, REGISTER AND IGNORE
    // EXISTING KEY (REGISTER AND MOVE and REPLACE LOST RESERVATION are refused).
    sa_cmd(0x5F, 0x00, PR_OUT),
    sa_cmd(0x5F, 0x01, PR_OUT),
    sa_cmd(0x5F, 0x02, PR_OUT),
    sa_cmd(0x5F, 0x03, PR_OUT),
    sa_cmd(0x5F, 0x04, PR_OUT),
    sa_cmd(0x5F, 0x05, PR_OUT),
    sa_cmd(0x5F, 0x06, PR_OUT),
    cmd(
        op::READ_16,
        &[
            0x88, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
    ),
    cmd(
        op::WRITE_16,
        &[
            0x8A, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
    ),
    Supported {
        opcode: crate::scsi::caw::COMPARE_AND_WRITE,
        sa: None,
        // FUA; LOGICAL BLOCK ADDRESS; NUMBER OF LOGICAL BLOCKS.
        usage: &[
            0x89, 0x08, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0, 0, 0xFF, 0, C,
        ],
        unmap_only: false,
        alua_only: false,
    },
    cmd(
        op::VERIFY_16,
        &[
            0x8F, 0xE6, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
    ),
    cmd(
        op::SYNCHRONIZE_CACHE_16,
        &[
            0x91, 0x02, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
    ),
    cmd(
        op::WRITE_SAME_16,
        &[
            0x93, 0xF9, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x1F, C,
        ],
    ),
    Supported {
        opcode: op::SERVICE_ACTION_IN_16,
        sa: Some(op::SA_READ_CAPACITY_16),
        usage: &[
            0x9E, 0x10, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF,
            0x01, C,
        ],
        unmap_only: false,
        alua_only: false,
    },
    cmd(
        op::REPORT_LUNS,
        &[0xA0, 0, 0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C],
    ),
    Supported {
        opcode: op::MAINTENANCE_IN,
        sa: Some(super::alua::SA_REPORT_TARGET_PORT_GROUPS),
        usage: &[0xA3, 0xEA, 0, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 0, C],
        unmap_only: false,
        alua_only: true,
    },
    Supported {
        opcode: op::MAINTENANCE_IN,
        sa: Some(op::SA_REPORT_SUPPORTED_OPCODES),
        usage: &[
            0xA3, 0x0C, 0x87, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0, C,
        ],
        unmap_only: false,
        alua_only: false,
    },
    cmd(
        op::READ_12,
        &[
            0xA8, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C,
        ],
    ),
    cmd(
        op::WRITE_12,
        &[
            0xAA, 0xF8, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x1F, C,
        ],
    ),
];

/// Opcodes whose meaning depends on a service action field.
fn has_service_actions(opcode: u8) -> bool {
    matches!(opcode, op::SERVICE_ACTION_IN_16 | op::MAINTENANCE_IN)
}

fn timeouts(w: &mut DataIn<'_>) {
    w.be16(0x0A);
    w.u8(0);
    w.u8(0);
    w.be32(0); // nominal command processing timeout: not specified
    w.be32(0); // recommended command timeout: not specified
}

pub(crate) fn report_supported_opcodes(
    cdb: &Cdb<'_>,
    lu: &LogicalUnit,
    alua: bool,
    data_in: &mut [u8],
) -> Verdict {
    let rctd = cdb.bit(2, 7);
    let options = cdb.u8(2) & 0x07;
    let req_op = cdb.u8(3);
    let req_sa = cdb.be16(4);
    let alloc = cdb.be32(6);
    let mut w = DataIn::new(data_in, alloc);
    let available = COMMANDS
        .iter()
        .filter(|c| (!c.unmap_only || lu.unmap) && (!c.alua_only || alua));
    if options == 0 {
        w.be32(0); // COMMAND DATA LENGTH, patched below
        for c in available {
            w.u8(c.opcode);
            w.u8(0);
            w.be16(c.sa.map_or(0, u16::from));
            w.u8(0);
            w.u8(if rctd { 0x02 } else { 0 } | if c.sa.is_some() { 0x01 } else { 0 });
            w.be16(c.usage.len() as u16);
            if rctd {
                timeouts(&mut w);
            }
        }
        let len = u32::try_from(w.total() - 4).unwrap_or(u32::MAX);
        w.patch(0, &len.to_be_bytes());
        return Verdict::DataIn { len: w.finish() };
    }
    let sa_match = match options {
        1 if has_service_actions(req_op) => {
            return Verdict::CheckCondition(Sense::invalid_field_in_cdb(3, None));
        }
        1 => None,
        2 if !has_service_actions(req_op) => {
            return Verdict::CheckCondition(Sense::invalid_field_in_cdb(3, None));
        }
        2 => Some(req_sa),
        3 => has_service_actions(req_op).then_some(req_sa),
        _ => return Verdict::CheckCondition(Sense::invalid_field_in_cdb(2, Some(2))),
    };
    let found = available
        .filter(|c| c.opcode == req_op)
        .find(|c| sa_match.is_none() || c.sa.map(u16::from) == sa_match);
    match found {
        Some(c) => {
            w.u8(0);
            w.u8(if rctd { 0x80 } else { 0 } | 0x03); // CTDP, SUPPORT = supported
            w.be16(c.usage.len() as u16);
            w.put(c.usage);
            if rctd {
                timeouts(&mut w);
            }
        }
        None => {
            w.u8(0);
            w.u8(0x01); // SUPPORT = not supported
            w.be16(0);
        }
    }
    Verdict::DataIn { len: w.finish() }
}

/// `true` if the table lists `opcode` (with `sa`) for `lu` (used by tests to keep the table
/// and the dispatcher in step).
#[cfg(test)]
pub(crate) fn listed(lu: &LogicalUnit, opcode: u8, sa: Option<u8>) -> bool {
    COMMANDS
        .iter()
        .any(|c| c.opcode == opcode && c.sa == sa && (!c.unmap_only || lu.unmap))
}

#[cfg(test)]
pub(crate) fn all_listed() -> impl Iterator<Item = (u8, Option<u8>, &'static [u8])> {
    COMMANDS.iter().map(|c| (c.opcode, c.sa, c.usage))
}
