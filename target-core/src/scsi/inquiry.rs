//! INQUIRY: standard data and the VPD pages Linux reads at bring-up (SPC-4 6.6, 7.8; SBC-3 6.6).

use super::Verdict;
use super::cdb::Cdb;
use super::data_in::DataIn;
use super::logical_unit::{LogicalUnit, TargetPort};
use super::sense::Sense;

/// Length of the standard INQUIRY data produced here.
pub const STANDARD_INQUIRY_LEN: usize = 96;

/// VPD pages supported for a mapped LU, in ascending order.
pub const SUPPORTED_VPD: [u8; 6] = [0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2];

/// Peripheral byte for "no logical unit here": qualifier 3, device type 0x1F.
pub const PERIPHERAL_NOT_PRESENT: u8 = 0x7F;

/// Version descriptors: SAM-5, SRP (no version claimed), SPC-4, SBC-3.
const VERSION_DESCRIPTORS: [u16; 4] = [0x00A0, 0x0940, 0x0460, 0x04C0];

pub(crate) fn inquiry(
    cdb: &Cdb<'_>,
    lu: Option<&LogicalUnit>,
    port: &TargetPort,
    tpg: Option<u16>,
    data_in: &mut [u8],
) -> Verdict {
    let evpd = cdb.bit(1, 0);
    if cdb.bit(1, 1) {
        // CMDDT is obsolete since SPC-3.
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(1, Some(1)));
    }
    let page = cdb.u8(2);
    let alloc = u32::from(cdb.be16(3));
    if !evpd {
        if page != 0 {
            return Verdict::CheckCondition(Sense::invalid_field_in_cdb(2, None));
        }
        let mut w = DataIn::new(data_in, alloc);
        standard(&mut w, lu, tpg.is_some());
        return Verdict::DataIn { len: w.finish() };
    }
    let mut w = DataIn::new(data_in, alloc);
    let ok = match lu {
        Some(lu) => match page {
            0x00 => {
                vpd_header(&mut w, 0x00, 0x00, SUPPORTED_VPD.len());
                w.put(&SUPPORTED_VPD);
                true
            }
            0x80 => {
                let serial = serial_bytes(lu);
                vpd_header(&mut w, 0x00, 0x80, serial.len());
                w.ascii(&lu.serial, serial.len());
                true
            }
            0x83 => {
                device_identification(&mut w, lu, port, tpg);
                true
            }
            0xB0 => {
                block_limits(&mut w, lu);
                true
            }
            0xB1 => {
                vpd_header(&mut w, 0x00, 0xB1, 0x3C);
                w.be16(lu.rotation_rate);
                w.zeros(0x3C - 2);
                true
            }
            0xB2 => {
                provisioning(&mut w, lu);
                true
            }
            _ => false,
        },
        // No LU: the supported-pages page is all there is, with qualifier 3.
        None if page == 0x00 => {
            vpd_header(&mut w, PERIPHERAL_NOT_PRESENT, 0x00, 1);
            w.u8(0x00);
            true
        }
        None => false,
    };
    if !ok {
        return Verdict::CheckCondition(Sense::invalid_field_in_cdb(2, None));
    }
    Verdict::DataIn { len: w.finish() }
}

/// Standard INQUIRY data; `alua`: TPGS = 01b (implicit asymmetric access).
fn standard(w: &mut DataIn<'_>, lu: Option<&LogicalUnit>, alua: bool) {
    w.u8(if lu.is_some() {
        0x00
    } else {
        PERIPHERAL_NOT_PRESENT
    });
    w.u8(0x00); // RMB = 0
    w.u8(0x06); // SPC-4
    w.u8(0x12); // HISUP, response data format 2
    w.u8((STANDARD_INQUIRY_LEN - 5) as u8);
    // SCCS, ACC, TPGS (01b with implicit ALUA), 3PC, PROTECT.
    w.u8(if alua {
        super::alua::inquiry_byte5(0)
    } else {
        0
    });
    w.u8(0x00); // ENCSERV, MULTIP
    w.u8(0x02); // CMDQUE
    match lu {
        Some(lu) => {
            w.ascii(&lu.vendor, 8);
            w.ascii(&lu.product, 16);
            w.ascii(&lu.revision, 4);
        }
        None => {
            w.ascii("RTGT", 8);
            w.ascii("", 16);
            w.ascii("", 4);
        }
    }
    w.zeros(58 - 36); // vendor specific, clocking, reserved
    for d in VERSION_DESCRIPTORS {
        w.be16(d);
    }
    w.zeros(STANDARD_INQUIRY_LEN - 58 - 2 * VERSION_DESCRIPTORS.len());
}

fn vpd_header(w: &mut DataIn<'_>, peripheral: u8, page: u8, len: usize) {
    w.u8(peripheral);
    w.u8(page);
    w.be16(u16::try_from(len).unwrap_or(u16::MAX));
}

/// The unit serial number as reported: printable ASCII, at most 252 bytes, at least one.
fn serial_bytes(lu: &LogicalUnit) -> &[u8] {
    let s = lu.serial.as_bytes();
    let s = s.get(..s.len().min(252)).unwrap_or(s);
    if s.is_empty() { b" " } else { s }
}

fn designator(w: &mut DataIn<'_>, proto_codeset: u8, piv_assoc_type: u8, body: &[u8]) {
    w.u8(proto_codeset);
    w.u8(piv_assoc_type);
    w.u8(0);
    w.u8(u8::try_from(body.len()).unwrap_or(u8::MAX));
    w.put(body);
}

/// VPD 83h; with `tpg` (implicit ALUA) also the target port group designator.
fn device_identification(
    w: &mut DataIn<'_>,
    lu: &LogicalUnit,
    port: &TargetPort,
    tpg: Option<u16>,
) {
    let start = w.total();
    vpd_header(w, 0x00, 0x83, 0);
    // NAA, logical unit, binary.
    designator(w, 0x01, 0x03, lu.naa.as_bytes());
    // T10 vendor id, logical unit, ASCII: vendor (8, padded) + serial.
    let serial = serial_bytes(lu);
    let t10_len = 8 + serial.len().min(255 - 8);
    w.u8(0x02);
    w.u8(0x01);
    w.u8(0);
    w.u8(t10_len as u8);
    w.ascii(&lu.vendor, 8);
    w.ascii(&lu.serial, t10_len - 8);
    let proto = (port.protocol_id & 0x0F) << 4;
    // Target port designators: PIV = 1, association = target port (1).
    if let Some(id) = port.port_id {
        designator(w, proto | 0x01, 0x80 | 0x10 | 0x02, &id);
    }
    w.put(&super::alua::relative_port_designator(
        port.protocol_id,
        port.relative_port,
    ));
    if let Some(tpg) = tpg {
        w.put(&super::alua::target_port_group_designator(
            port.protocol_id,
            tpg,
        ));
    }
    let page_len = w.total() - start - 4;
    w.patch(
        start + 2,
        &u16::try_from(page_len).unwrap_or(u16::MAX).to_be_bytes(),
    );
}

fn block_limits(w: &mut DataIn<'_>, lu: &LogicalUnit) {
    vpd_header(w, 0x00, 0xB0, 0x3C);
    w.u8(0x01); // WSNZ: a WRITE SAME of zero blocks is rejected
    w.u8(lu.max_compare_write_blocks); // MAXIMUM COMPARE AND WRITE LENGTH
    w.be16(1u16 << lu.physical_block_exp.min(15)); // OPTIMAL TRANSFER LENGTH GRANULARITY
    w.be32(lu.max_transfer_blocks);
    w.be32(lu.optimal_transfer_blocks);
    w.be32(0); // MAXIMUM PREFETCH LENGTH
    if lu.unmap {
        w.be32(lu.max_unmap_blocks);
        w.be32(lu.max_unmap_descriptors);
        w.be32(lu.unmap_granularity);
        w.be32(0); // UGAVALID = 0
    } else {
        w.zeros(16);
    }
    w.be64(u64::from(lu.max_write_same_blocks));
    w.zeros(0x40 - 44);
}

fn provisioning(w: &mut DataIn<'_>, lu: &LogicalUnit) {
    vpd_header(w, 0x00, 0xB2, 4);
    w.u8(0); // THRESHOLD EXPONENT
    let mut flags = 0u8;
    if lu.unmap {
        flags |= 0x80 | 0x40 | 0x20; // LBPU, LBPWS, LBPWS10
        if lu.unmap_reads_zero {
            flags |= 0x04; // LBPRZ
        }
    }
    w.u8(flags);
    w.u8(if lu.unmap { 0x02 } else { 0x00 }); // PROVISIONING TYPE: thin
    w.u8(0);
}
