//! Device-server tests: the commands Linux sends at disk bring-up (reference §3.1) with exact
//! responses, the error cases with their sense data, and a no-panic test on random CDBs.

use super::cdb::op;
use super::*;

const BS: u32 = 512;
const BLOCKS: u64 = 2 * 1024 * 1024; // 1 GiB

fn lu() -> LogicalUnit {
    let uuid = [0x11u8; 16];
    let mut lu = LogicalUnit::new(BS, BLOCKS, NaaId::local_from_uuid(&uuid), "SN0001");
    lu.product = "bdev Malloc0".into();
    lu.validate().unwrap();
    lu
}

fn thin_lu() -> LogicalUnit {
    let mut lu = lu().with_unmap(0x10000, 16, true);
    lu.validate().unwrap();
    lu
}

fn port() -> TargetPort {
    TargetPort {
        protocol_id: PROTOCOL_ID_SRP,
        relative_port: 1,
        port_id: Some([0xAB; 16]),
    }
}

/// Runs one CDB (padded to 16 bytes as SRP carries it) and returns the outcome and the data.
fn run_with(
    lu: Option<&LogicalUnit>,
    luns: &[u16],
    cdb: &[u8],
    data_out: u32,
) -> (Verdict, Vec<u8>) {
    let port = port();
    let ctx = TargetContext {
        port: &port,
        luns,
        alua: None,
    };
    let mut padded = [0u8; 16];
    padded[..cdb.len()].copy_from_slice(cdb);
    let mut buf = vec![0u8; 4096];
    let out = execute(
        lu,
        &ctx,
        &Command {
            cdb: &padded,
            data_out_len: data_out,
        },
        &mut buf,
    );
    let data = match out {
        Verdict::DataIn { len } => buf[..len as usize].to_vec(),
        _ => Vec::new(),
    };
    (out, data)
}

fn run(lu: &LogicalUnit, cdb: &[u8]) -> (Verdict, Vec<u8>) {
    run_with(Some(lu), &[0], cdb, 0)
}

fn check(out: Verdict) -> Sense {
    match out {
        Verdict::CheckCondition(s) => s,
        other => panic!("expected CHECK CONDITION, got {other:?}"),
    }
}

fn key_asc(out: Verdict) -> (SenseKey, u8, u8) {
    let s = check(out);
    (s.key, s.asc, s.ascq)
}

// ---- INQUIRY ----

#[test]
fn inquiry_standard_36() {
    let lu = lu();
    let (out, d) = run(&lu, &[op::INQUIRY, 0, 0, 0, 36, 0]);
    assert_eq!(out, Verdict::DataIn { len: 36 });
    assert_eq!(&d[..8], &[0x00, 0x00, 0x06, 0x12, 91, 0x00, 0x00, 0x02]);
    assert_eq!(&d[8..16], b"RTGT    ");
    assert_eq!(&d[16..32], b"bdev Malloc0    ");
    assert_eq!(&d[32..36], b"0001");
}

#[test]
fn inquiry_standard_full_and_truncated() {
    let lu = lu();
    // Linux re-issues with additional length + 5 when byte 4 says there is more.
    let (out, d) = run(&lu, &[op::INQUIRY, 0, 0, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 96 });
    assert_eq!(d[4] as usize + 5, d.len());
    assert_eq!(
        &d[58..66],
        &[0x00, 0xA0, 0x09, 0x40, 0x04, 0x60, 0x04, 0xC0]
    );
    assert!(d[66..].iter().all(|&b| b == 0));
    // An allocation length below the data: only that much, length field unchanged.
    let (out, d) = run(&lu, &[op::INQUIRY, 0, 0, 0, 5, 0]);
    assert_eq!(out, Verdict::DataIn { len: 5 });
    assert_eq!(d[4], 91);
    // 16-bit allocation length (bytes 3-4).
    let (out, _) = run(&lu, &[op::INQUIRY, 0, 0, 0x01, 0x00, 0]);
    assert_eq!(out, Verdict::DataIn { len: 96 });
    // Zero allocation length: no data, GOOD.
    let (out, _) = run(&lu, &[op::INQUIRY, 0, 0, 0, 0, 0]);
    assert_eq!(out, Verdict::DataIn { len: 0 });
}

#[test]
fn inquiry_without_lu_is_qualifier_3() {
    let (out, d) = run_with(None, &[1], &[op::INQUIRY, 0, 0, 0, 36, 0], 0);
    assert_eq!(out, Verdict::DataIn { len: 36 });
    assert_eq!(d[0], 0x7F);
    assert_eq!(d[2], 0x06);
    let (out, d) = run_with(None, &[1], &[op::INQUIRY, 1, 0, 0, 255, 0], 0);
    assert_eq!(out, Verdict::DataIn { len: 5 });
    assert_eq!(d, [0x7F, 0x00, 0x00, 0x01, 0x00]);
    let (out, _) = run_with(None, &[1], &[op::INQUIRY, 1, 0x83, 0, 255, 0], 0);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(2, None));
}

#[test]
fn inquiry_invalid_fields() {
    let lu = lu();
    let (out, _) = run(&lu, &[op::INQUIRY, 0x02, 0, 0, 36, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(1, Some(1)));
    let (out, _) = run(&lu, &[op::INQUIRY, 0, 0x80, 0, 36, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(2, None));
    let (out, _) = run(&lu, &[op::INQUIRY, 1, 0x89, 0, 255, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(2, None));
}

#[test]
fn vpd_supported_pages() {
    let (out, d) = run(&lu(), &[op::INQUIRY, 1, 0x00, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 10 });
    assert_eq!(d, [0, 0, 0, 6, 0x00, 0x80, 0x83, 0xB0, 0xB1, 0xB2]);
}

#[test]
fn vpd_serial() {
    let (_, d) = run(&lu(), &[op::INQUIRY, 1, 0x80, 0, 255, 0]);
    assert_eq!(d, [0, 0x80, 0, 6, b'S', b'N', b'0', b'0', b'0', b'1']);
}

/// Splits a VPD 0x83 page into (byte0, byte1, designator) triples.
fn designators(d: &[u8]) -> Vec<(u8, u8, Vec<u8>)> {
    let len = u16::from_be_bytes([d[2], d[3]]) as usize;
    assert_eq!(len + 4, d.len());
    let mut out = Vec::new();
    let mut p = 4;
    while p < d.len() {
        let n = d[p + 3] as usize;
        out.push((d[p], d[p + 1], d[p + 4..p + 4 + n].to_vec()));
        p += 4 + n;
    }
    assert_eq!(p, d.len());
    out
}

#[test]
fn vpd_device_identification() {
    let lu = lu();
    let (_, d) = run(&lu, &[op::INQUIRY, 1, 0x83, 0, 255, 0]);
    assert_eq!(&d[..2], &[0, 0x83]);
    let ds = designators(&d);
    assert_eq!(ds.len(), 4);
    // NAA, LU association, binary.
    assert_eq!((ds[0].0, ds[0].1), (0x01, 0x03));
    assert_eq!(ds[0].2, lu.naa.as_bytes());
    assert_eq!(ds[0].2[0] >> 4, 3);
    // T10 vendor id: vendor padded to 8, then the serial.
    assert_eq!((ds[1].0, ds[1].1), (0x02, 0x01));
    assert_eq!(ds[1].2, b"RTGT    SN0001");
    // EUI-64 16-byte target port id: protocol SRP, PIV, target port association.
    assert_eq!((ds[2].0, ds[2].1), (0x41, 0x92));
    assert_eq!(ds[2].2, [0xAB; 16]);
    // Relative target port 1.
    assert_eq!((ds[3].0, ds[3].1), (0x41, 0x94));
    assert_eq!(ds[3].2, [0, 0, 0, 1]);
    // Truncated to 8 bytes: the page length still covers everything.
    let (out, d8) = run(&lu, &[op::INQUIRY, 1, 0x83, 0, 8, 0]);
    assert_eq!(out, Verdict::DataIn { len: 8 });
    assert_eq!(&d8[..], &d[..8]);
}

#[test]
fn vpd_lu_designators_do_not_depend_on_the_port() {
    // dm-multipath needs the same WWID on every path.
    let lu = lu();
    let mut pages = Vec::new();
    for rel in [1u16, 2] {
        let p = TargetPort {
            protocol_id: PROTOCOL_ID_SRP,
            relative_port: rel,
            port_id: None,
        };
        let ctx = TargetContext {
            port: &p,
            luns: &[0],
            alua: None,
        };
        let mut buf = [0u8; 255];
        let cdb = [op::INQUIRY, 1, 0x83, 0, 255, 0];
        let Verdict::DataIn { len } = execute(
            Some(&lu),
            &ctx,
            &Command {
                cdb: &cdb,
                data_out_len: 0,
            },
            &mut buf,
        ) else {
            panic!()
        };
        let ds = designators(&buf[..len as usize]);
        assert_eq!(ds.len(), 3);
        assert_eq!(ds[2].2, [0, 0, 0, rel as u8]);
        pages.push(ds[..2].to_vec());
    }
    assert_eq!(pages[0], pages[1]);
}

#[test]
fn vpd_block_limits() {
    let lu = thin_lu();
    let (out, d) = run(&lu, &[op::INQUIRY, 1, 0xB0, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 64 });
    assert_eq!(&d[..4], &[0, 0xB0, 0, 0x3C]);
    assert_eq!(d[4], 0x01); // WSNZ
    assert_eq!(d[5], 1, "MAXIMUM COMPARE AND WRITE LENGTH");
    assert_eq!(u16::from_be_bytes([d[6], d[7]]), 1);
    assert_eq!(
        u32::from_be_bytes(d[8..12].try_into().unwrap()),
        (8 << 20) / BS
    );
    assert_eq!(u32::from_be_bytes(d[20..24].try_into().unwrap()), 0x10000);
    assert_eq!(u32::from_be_bytes(d[24..28].try_into().unwrap()), 16);
    assert_eq!(
        u64::from_be_bytes(d[36..44].try_into().unwrap()),
        u64::from((8 << 20) / BS)
    );
    // Without unmap the unmap limits are zero.
    let (_, d) = run(&lu_plain(), &[op::INQUIRY, 1, 0xB0, 0, 255, 0]);
    assert!(d[20..36].iter().all(|&b| b == 0));
}

fn lu_plain() -> LogicalUnit {
    lu()
}

#[test]
fn vpd_characteristics_and_provisioning() {
    let (_, d) = run(&lu(), &[op::INQUIRY, 1, 0xB1, 0, 255, 0]);
    assert_eq!(d.len(), 64);
    assert_eq!(&d[..6], &[0, 0xB1, 0, 0x3C, 0, 1]);
    let (_, d) = run(&lu(), &[op::INQUIRY, 1, 0xB2, 0, 255, 0]);
    assert_eq!(d, [0, 0xB2, 0, 4, 0, 0, 0, 0]);
    let (_, d) = run(&thin_lu(), &[op::INQUIRY, 1, 0xB2, 0, 255, 0]);
    assert_eq!(d, [0, 0xB2, 0, 4, 0, 0xE4, 0x02, 0]);
}

// ---- REPORT LUNS ----

#[test]
fn report_luns_full_and_truncated() {
    let lu = lu();
    let luns = [0u16, 1, 300];
    let (out, d) = run_with(
        Some(&lu),
        &luns,
        &[op::REPORT_LUNS, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0],
        0,
    );
    assert_eq!(out, Verdict::DataIn { len: 32 });
    assert_eq!(&d[..8], &[0, 0, 0, 24, 0, 0, 0, 0]);
    assert_eq!(&d[8..16], &[0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&d[16..24], &[0, 1, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&d[24..32], &[0x41, 0x2C, 0, 0, 0, 0, 0, 0]);
    // Allocation 16: header and first LUN; the list length still says 24.
    let (out, d) = run_with(
        Some(&lu),
        &luns,
        &[op::REPORT_LUNS, 0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0],
        0,
    );
    assert_eq!(out, Verdict::DataIn { len: 16 });
    assert_eq!(&d[..4], &[0, 0, 0, 24]);
    // Allocation below 16 is an invalid field.
    let (out, _) = run_with(
        Some(&lu),
        &luns,
        &[op::REPORT_LUNS, 0, 0, 0, 0, 0, 0, 0, 0, 15, 0, 0],
        0,
    );
    assert_eq!(check(out), Sense::invalid_field_in_cdb(6, None));
    // Well-known LUs only: none.
    let (out, d) = run_with(
        Some(&lu),
        &luns,
        &[op::REPORT_LUNS, 0, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0],
        0,
    );
    assert_eq!(out, Verdict::DataIn { len: 8 });
    assert_eq!(d, [0; 8]);
    let (out, _) = run_with(
        Some(&lu),
        &luns,
        &[op::REPORT_LUNS, 0, 7, 0, 0, 0, 0, 0, 1, 0, 0, 0],
        0,
    );
    assert_eq!(check(out), Sense::invalid_field_in_cdb(2, None));
}

#[test]
fn report_luns_works_on_an_unmapped_lun_0() {
    let (out, d) = run_with(
        None,
        &[3],
        &[op::REPORT_LUNS, 0, 0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0],
        0,
    );
    assert_eq!(out, Verdict::DataIn { len: 16 });
    assert_eq!(&d[8..10], &[0, 3]);
}

// ---- TEST UNIT READY / START STOP / REQUEST SENSE ----

#[test]
fn tur_start_stop() {
    let lu = lu();
    assert_eq!(
        run(&lu, &[op::TEST_UNIT_READY, 0, 0, 0, 0, 0]).0,
        Verdict::Good
    );
    assert_eq!(
        run(&lu, &[op::START_STOP_UNIT, 0, 0, 0, 1, 0]).0,
        Verdict::Good
    );
    let (out, _) = run_with(None, &[], &[op::TEST_UNIT_READY, 0, 0, 0, 0, 0], 0);
    assert_eq!(key_asc(out), (SenseKey::IllegalRequest, 0x25, 0x00));
}

#[test]
fn request_sense() {
    let (out, d) = run(&lu(), &[op::REQUEST_SENSE, 0, 0, 0, 252, 0]);
    assert_eq!(out, Verdict::DataIn { len: 18 });
    assert_eq!(d, Sense::no_sense().to_fixed());
    let (out, d) = run(&lu(), &[op::REQUEST_SENSE, 1, 0, 0, 252, 0]);
    assert_eq!(out, Verdict::DataIn { len: 8 });
    assert_eq!(d, [0x72, 0, 0, 0, 0, 0, 0, 0]);
    let (out, d) = run_with(None, &[], &[op::REQUEST_SENSE, 0, 0, 0, 252, 0], 0);
    assert_eq!(out, Verdict::DataIn { len: 18 });
    assert_eq!((d[2], d[12], d[13]), (0x05, 0x25, 0x00));
    let (out, _) = run(&lu(), &[op::REQUEST_SENSE, 0, 0, 0, 0, 0]);
    assert_eq!(out, Verdict::DataIn { len: 0 });
}

// ---- READ CAPACITY ----

#[test]
fn read_capacity_10() {
    let (out, d) = run(&lu(), &[op::READ_CAPACITY_10, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(out, Verdict::DataIn { len: 8 });
    assert_eq!(d, [0x00, 0x1F, 0xFF, 0xFF, 0, 0, 0x02, 0x00]);
    let mut big = lu();
    big.num_blocks = 1 << 33;
    let (_, d) = run(&big, &[op::READ_CAPACITY_10, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(&d[..4], &[0xFF; 4]);
    let (out, _) = run(&lu(), &[op::READ_CAPACITY_10, 0, 0, 0, 0, 1, 0, 0, 0, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(2, None));
}

#[test]
fn read_capacity_16() {
    let cdb = [
        op::SERVICE_ACTION_IN_16,
        0x10,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        32,
        0,
        0,
    ];
    let (out, d) = run(&lu(), &cdb);
    assert_eq!(out, Verdict::DataIn { len: 32 });
    assert_eq!(&d[..12], &[0, 0, 0, 0, 0, 0x1F, 0xFF, 0xFF, 0, 0, 2, 0]);
    assert_eq!(&d[12..16], &[0, 0, 0, 0]);
    let (_, d) = run(&thin_lu(), &cdb);
    assert_eq!(d[14], 0xC0); // LBPME, LBPRZ
    // Linux asks for 32 (RC16_LEN); a 12-byte allocation gets 12.
    let mut c12 = cdb;
    c12[13] = 12;
    assert_eq!(run(&lu(), &c12).0, Verdict::DataIn { len: 12 });
    // Other service actions of 0x9E are invalid fields (GET LBA STATUS is not implemented).
    let mut sa = cdb;
    sa[1] = 0x12;
    assert_eq!(
        check(run(&lu(), &sa).0),
        Sense::invalid_field_in_cdb(1, Some(4))
    );
}

// ---- MODE SENSE ----

#[test]
fn mode_sense_6_linux_probe_sequence() {
    let lu = lu();
    // sd_read_write_protect_flag: page 0x3F with a 4-byte allocation first.
    let (out, d) = run(&lu, &[op::MODE_SENSE_6, 0, 0x3F, 0, 4, 0]);
    assert_eq!(out, Verdict::DataIn { len: 4 });
    // Header (4) + block descriptor (8) + pages 0x01 (12) + 0x08 (20) + 0x0A (12) = 56.
    assert_eq!(d, [55, 0, 0x10, 8]);
    let (out, d) = run(&lu, &[op::MODE_SENSE_6, 0, 0x3F, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 56 });
    assert_eq!(&d[4..12], &[0x00, 0x20, 0x00, 0x00, 0, 0, 0x02, 0x00]);
    assert_eq!(&d[12..14], &[0x01, 0x0A]);
    assert_eq!(&d[24..27], &[0x08, 0x12, 0x04]);
    assert_eq!(&d[44..48], &[0x0A, 0x0A, 0x00, 0x10]);
    // sd_read_cache_type: caching page with DBD.
    let (out, d) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x08, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 24 });
    assert_eq!(&d[..4], &[23, 0, 0x10, 0]);
    assert_eq!(&d[4..7], &[0x08, 0x12, 0x04]);
    // Control page.
    let (out, d) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x0A, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 16 });
    assert_eq!(&d[4..8], &[0x0A, 0x0A, 0x00, 0x10]);
}

#[test]
fn mode_sense_write_protect_and_cache_off() {
    let mut lu = lu();
    lu.read_only = true;
    lu.write_cache = false;
    let (_, d) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x08, 0, 255, 0]);
    assert_eq!(d[2], 0x90);
    assert_eq!(d[6], 0x00);
}

#[test]
fn mode_sense_reports_mode_select_values() {
    let mut lu = lu();
    lu.modes = crate::scsi::ModeParams {
        wce: false,
        swp: true,
    };
    let (_, d) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x3F, 0, 255, 0]);
    assert_eq!(d[2], 0x90, "WP from SWP");
    assert_eq!(&d[16..19], &[0x08, 0x12, 0x00], "WCE off");
    assert_eq!(&d[36..41], &[0x0A, 0x0A, 0x00, 0x10, 0x08], "SWP");
    // Defaults stay the power-on values.
    let (_, d) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0xBF, 0, 255, 0]);
    assert_eq!((d[18], d[40]), (0x04, 0x00));
    // SWP refuses writes like a read-only LU.
    let (out, _) = run(&lu, &[op::WRITE_10, 0, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert_eq!(check(out), Sense::write_protected());
}

#[test]
fn mode_sense_10_long_lba() {
    let lu = lu();
    let (out, d) = run(&lu, &[op::MODE_SENSE_10, 0x10, 0x08, 0, 0, 0, 0, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 8 + 16 + 20 });
    assert_eq!(&d[..8], &[0, 42, 0, 0x10, 0x01, 0, 0, 16]);
    assert_eq!(
        &d[8..24],
        &[0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0]
    );
    // Without LLBAA: short descriptor.
    let (out, d) = run(&lu, &[op::MODE_SENSE_10, 0, 0x08, 0, 0, 0, 0, 0, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 8 + 8 + 20 });
    assert_eq!(&d[..8], &[0, 34, 0, 0x10, 0, 0, 0, 8]);
}

#[test]
fn mode_sense_page_control_and_errors() {
    let lu = lu();
    // Changeable values: exactly what MODE SELECT accepts, WCE (with a volatile cache) and
    // SWP.
    let (_, d) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x48, 0, 255, 0]);
    assert_eq!(&d[4..7], &[0x08, 0x12, 0x04]);
    assert!(d[7..].iter().all(|&b| b == 0));
    let (_, d) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x4A, 0, 255, 0]);
    assert_eq!(&d[4..16], &[0x0A, 0x0A, 0, 0, 0x08, 0, 0, 0, 0, 0, 0, 0]);
    let mut nocache = lu.clone();
    nocache.write_cache = false;
    let (_, d) = run(&nocache, &[op::MODE_SENSE_6, 0x08, 0x48, 0, 255, 0]);
    assert_eq!(d[6], 0, "no volatile cache: WCE not changeable");
    // Default values equal current ones.
    let (_, dflt) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x88, 0, 255, 0]);
    let (_, cur) = run(&lu, &[op::MODE_SENSE_6, 0x08, 0x08, 0, 255, 0]);
    assert_eq!(dflt, cur);
    // Saved values are not supported.
    let (out, _) = run(&lu, &[op::MODE_SENSE_6, 0, 0xC8, 0, 255, 0]);
    assert_eq!(key_asc(out), (SenseKey::IllegalRequest, 0x39, 0x00));
    // Unsupported page.
    let (out, _) = run(&lu, &[op::MODE_SENSE_6, 0, 0x1C, 0, 255, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(2, Some(5)));
    // All subpages of all pages: same as page 0x3F.
    let (out, _) = run(&lu, &[op::MODE_SENSE_6, 0, 0x3F, 0xFF, 255, 0]);
    assert_eq!(out, Verdict::DataIn { len: 56 });
    let (out, _) = run(&lu, &[op::MODE_SENSE_6, 0, 0x08, 0x01, 255, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(3, None));
}

// ---- READ / WRITE ----

#[test]
fn read_write_decode() {
    let lu = lu();
    let (out, _) = run(&lu, &[op::READ_10, 0, 0, 0, 0x10, 0, 0, 0, 8, 0]);
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::Read {
            lba: 0x1000,
            blocks: 8,
            fua: false
        })
    );
    let (out, _) = run(&lu, &[op::READ_10, 0x08, 0, 0, 0, 1, 0, 0, 1, 0]);
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::Read {
            lba: 1,
            blocks: 1,
            fua: true
        })
    );
    let (out, _) = run_with(
        Some(&lu),
        &[0],
        &[op::WRITE_10, 0x08, 0, 0, 0, 2, 0, 0, 4, 0],
        4 * BS,
    );
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::Write {
            lba: 2,
            blocks: 4,
            fua: true
        })
    );
    let (out, _) = run(&lu, &[op::READ_6, 0x01, 0x02, 0x03, 0, 0]);
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::Read {
            lba: 0x10203,
            blocks: 256,
            fua: false
        })
    );
    let (out, _) = run(&lu, &[op::READ_12, 0, 0, 0, 0, 9, 0, 0, 0, 3, 0, 0]);
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::Read {
            lba: 9,
            blocks: 3,
            fua: false
        })
    );
    let cdb16 = [
        op::WRITE_16,
        0,
        0,
        0,
        0,
        0,
        0,
        0x1F,
        0xFF,
        0xF0,
        0,
        0,
        0,
        0x10,
        0,
        0,
    ];
    let (out, _) = run_with(Some(&lu), &[0], &cdb16, 16 * BS);
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::Write {
            lba: BLOCKS - 16,
            blocks: 16,
            fua: false
        })
    );
    assert_eq!(
        ScsiIo::Write {
            lba: 0,
            blocks: 16,
            fua: false
        }
        .data_out_len(BS),
        8192
    );
    // Zero transfer length: no data, GOOD.
    assert_eq!(
        run(&lu, &[op::READ_10, 0, 0, 0, 0, 0, 0, 0, 0, 0]).0,
        Verdict::Good
    );
}

#[test]
fn read_write_errors() {
    let lu = lu();
    // Past the end.
    let (out, _) = run(&lu, &[op::READ_10, 0, 0, 0x20, 0, 0, 0, 0, 1, 0]);
    assert_eq!(check(out), Sense::lba_out_of_range());
    let (out, _) = run(&lu, &[op::READ_10, 0, 0, 0x1F, 0xFF, 0xFF, 0, 0, 2, 0]);
    assert_eq!(check(out), Sense::lba_out_of_range());
    let mut big = [0u8; 16];
    big[0] = op::READ_16;
    big[2..10].copy_from_slice(&u64::MAX.to_be_bytes());
    big[13] = 1;
    assert_eq!(check(run(&lu, &big).0), Sense::lba_out_of_range());
    // Beyond the maximum transfer length.
    let cdb = [
        op::READ_16,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0x40,
        0x01,
        0,
        0,
    ];
    assert_eq!(
        check(run(&lu, &cdb).0),
        Sense::invalid_field_in_cdb(10, None)
    );
    // Protection information requested.
    let (out, _) = run(&lu, &[op::READ_10, 0x20, 0, 0, 0, 0, 0, 0, 1, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(1, Some(7)));
    // A WRITE whose data buffer disagrees with the transfer length.
    let (out, _) = run_with(
        Some(&lu),
        &[0],
        &[op::WRITE_10, 0, 0, 0, 0, 0, 0, 0, 2, 0],
        BS,
    );
    assert_eq!(key_asc(out), (SenseKey::IllegalRequest, 0x0E, 0x03));
    // Read-only LU.
    let mut ro = lu.clone();
    ro.read_only = true;
    let (out, _) = run_with(
        Some(&ro),
        &[0],
        &[op::WRITE_10, 0, 0, 0, 0, 0, 0, 0, 1, 0],
        BS,
    );
    assert_eq!(key_asc(out), (SenseKey::DataProtect, 0x27, 0x00));
    assert!(matches!(
        run(&ro, &[op::READ_10, 0, 0, 0, 0, 0, 0, 0, 1, 0]).0,
        Verdict::Io(_)
    ));
}

#[test]
fn verify_and_sync_cache() {
    let lu = lu();
    assert_eq!(
        run(&lu, &[op::VERIFY_10, 0, 0, 0, 0, 0, 0, 0, 8, 0]).0,
        Verdict::Good
    );
    let (out, _) = run(&lu, &[op::VERIFY_10, 0x02, 0, 0, 0, 0, 0, 0, 8, 0]);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(1, Some(2)));
    assert_eq!(
        run(&lu, &[op::SYNCHRONIZE_CACHE_10, 0, 0, 0, 0, 0, 0, 0, 0, 0]).0,
        Verdict::Io(ScsiIo::Flush { lba: 0, blocks: 0 })
    );
    let cdb = [
        op::SYNCHRONIZE_CACHE_16,
        2,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        8,
        0,
        0,
        0,
        8,
        0,
        0,
    ];
    assert_eq!(
        run(&lu, &cdb).0,
        Verdict::Io(ScsiIo::Flush { lba: 8, blocks: 8 })
    );
    let (out, _) = run(
        &lu,
        &[op::SYNCHRONIZE_CACHE_10, 0, 0xFF, 0, 0, 0, 0, 0, 0, 0],
    );
    assert_eq!(check(out), Sense::lba_out_of_range());
}

// ---- WRITE SAME / UNMAP ----

#[test]
fn write_same() {
    let thin = thin_lu();
    let cdb = [
        op::WRITE_SAME_16,
        0x08,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0x01,
        0,
        0,
        0,
    ];
    let (out, _) = run_with(Some(&thin), &[0], &cdb, BS);
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::WriteSame {
            lba: 0,
            blocks: 256,
            unmap: true,
            ndob: false
        })
    );
    let mut ndob = cdb;
    ndob[1] = 0x09;
    let (out, _) = run_with(Some(&thin), &[0], &ndob, 0);
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::WriteSame {
            lba: 0,
            blocks: 256,
            unmap: true,
            ndob: true
        })
    );
    // WRITE SAME(10) without unmap on a plain LU writes the pattern.
    let lu = lu();
    let (out, _) = run_with(
        Some(&lu),
        &[0],
        &[op::WRITE_SAME_10, 0, 0, 0, 0, 4, 0, 0, 8, 0],
        BS,
    );
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::WriteSame {
            lba: 4,
            blocks: 8,
            unmap: false,
            ndob: false
        })
    );
    // UNMAP bit on a LU without provisioning.
    let (out, _) = run_with(Some(&lu), &[0], &cdb, BS);
    assert_eq!(check(out), Sense::invalid_field_in_cdb(1, Some(3)));
    // Zero blocks (WSNZ), anchor, wrong data-out length.
    let zero = [
        op::WRITE_SAME_16,
        0x08,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
        0,
    ];
    assert_eq!(
        check(run_with(Some(&thin), &[0], &zero, BS).0),
        Sense::invalid_field_in_cdb(10, None)
    );
    let mut anchor = cdb;
    anchor[1] = 0x18;
    assert_eq!(
        check(run_with(Some(&thin), &[0], &anchor, BS).0),
        Sense::invalid_field_in_cdb(1, Some(4))
    );
    assert_eq!(
        key_asc(run_with(Some(&thin), &[0], &cdb, 0).0),
        (SenseKey::IllegalRequest, 0x0E, 0x03)
    );
    // Beyond the maximum WRITE SAME length.
    let mut long = cdb;
    long[10..14].copy_from_slice(&0x0010_0000u32.to_be_bytes());
    assert_eq!(
        check(run_with(Some(&thin), &[0], &long, BS).0),
        Sense::invalid_field_in_cdb(10, None)
    );
}

fn unmap_params(descs: &[(u64, u32)]) -> Vec<u8> {
    let mut p = vec![0u8; 8];
    p[0..2].copy_from_slice(&((6 + 16 * descs.len()) as u16).to_be_bytes());
    p[2..4].copy_from_slice(&((16 * descs.len()) as u16).to_be_bytes());
    for &(lba, n) in descs {
        p.extend_from_slice(&lba.to_be_bytes());
        p.extend_from_slice(&n.to_be_bytes());
        p.extend_from_slice(&[0; 4]);
    }
    p
}

#[test]
fn unmap_cdb_and_parameter_list() {
    let thin = thin_lu();
    let cdb = [op::UNMAP, 0, 0, 0, 0, 0, 0, 0, 40, 0];
    assert_eq!(
        run_with(Some(&thin), &[0], &cdb, 40).0,
        Verdict::Io(ScsiIo::Unmap { param_len: 40 })
    );
    // The initiator's buffer is shorter than the parameter list length: fetch what it has.
    assert_eq!(
        run_with(Some(&thin), &[0], &cdb, 24).0,
        Verdict::Io(ScsiIo::Unmap { param_len: 24 })
    );
    assert_eq!(
        run_with(
            Some(&thin),
            &[0],
            &[op::UNMAP, 0, 0, 0, 0, 0, 0, 0, 0, 0],
            0
        )
        .0,
        Verdict::Good
    );
    assert_eq!(
        check(
            run_with(
                Some(&thin),
                &[0],
                &[op::UNMAP, 0, 0, 0, 0, 0, 0, 0, 4, 0],
                4
            )
            .0
        ),
        Sense::param_list_length_error()
    );
    assert_eq!(
        check(run_with(Some(&lu()), &[0], &cdb, 40).0),
        Sense::invalid_opcode()
    );
    assert_eq!(
        check(
            run_with(
                Some(&thin),
                &[0],
                &[op::UNMAP, 1, 0, 0, 0, 0, 0, 0, 40, 0],
                40
            )
            .0
        ),
        Sense::invalid_field_in_cdb(1, Some(0))
    );

    let p = unmap_params(&[(0, 8), (100, 0), (BLOCKS - 1, 1)]);
    let ranges: Vec<_> = parse_unmap(&thin, &p).unwrap().collect();
    assert_eq!(
        ranges,
        [
            UnmapRange { lba: 0, blocks: 8 },
            UnmapRange {
                lba: BLOCKS - 1,
                blocks: 1
            }
        ]
    );
    assert_eq!(parse_unmap(&thin, &p).unwrap().len(), 3);
    // A trailing partial descriptor is ignored.
    let mut partial = unmap_params(&[(0, 8)]);
    partial[2..4].copy_from_slice(&20u16.to_be_bytes());
    partial.extend_from_slice(&[0; 4]);
    assert_eq!(parse_unmap(&thin, &partial).unwrap().count(), 1);
    // Errors.
    assert_eq!(
        parse_unmap(&thin, &p[..5]).unwrap_err(),
        Sense::param_list_length_error()
    );
    assert_eq!(
        parse_unmap(&thin, &p[..30]).unwrap_err(),
        Sense::param_list_length_error()
    );
    let oob = unmap_params(&[(BLOCKS - 1, 2)]);
    assert_eq!(
        parse_unmap(&thin, &oob).unwrap_err(),
        Sense::lba_out_of_range()
    );
    let wrap = unmap_params(&[(u64::MAX, 2)]);
    assert_eq!(
        parse_unmap(&thin, &wrap).unwrap_err(),
        Sense::lba_out_of_range()
    );
    let too_long = unmap_params(&[(0, 8), (0, 0x10001)]);
    assert_eq!(
        parse_unmap(&thin, &too_long).unwrap_err(),
        Sense::invalid_field_in_param(32, None)
    );
    let many = unmap_params(&[(0, 1); 17]);
    assert_eq!(
        parse_unmap(&thin, &many).unwrap_err(),
        Sense::invalid_field_in_param(2, None)
    );
    assert_eq!(parse_unmap(&thin, &[]).unwrap().count(), 0);
}

// ---- REPORT SUPPORTED OPERATION CODES ----

fn rsoc(lu: &LogicalUnit, options: u8, opcode: u8, sa: u16) -> (Verdict, Vec<u8>) {
    let s = sa.to_be_bytes();
    run(
        lu,
        &[
            op::MAINTENANCE_IN,
            0x0C,
            options,
            opcode,
            s[0],
            s[1],
            0,
            0,
            0x10,
            0,
            0,
            0,
        ],
    )
}

#[test]
fn report_supported_opcodes_as_linux_probes() {
    let lu = thin_lu();
    // scsi_report_opcode(INQUIRY), then WRITE SAME(16) and (10).
    for opc in [op::INQUIRY, op::WRITE_SAME_16, op::WRITE_SAME_10, op::UNMAP] {
        let (out, d) = rsoc(&lu, 1, opc, 0);
        assert!(matches!(out, Verdict::DataIn { .. }));
        assert_eq!(d[1] & 0x03, 0x03, "opcode {opc:#x}");
        let n = u16::from_be_bytes([d[2], d[3]]) as usize;
        assert_eq!(d.len(), 4 + n);
        assert_eq!(d[4], opc);
    }
    // UNMAP is not supported on a fully provisioned LU.
    let (_, d) = rsoc(&lu_plain(), 1, op::UNMAP, 0);
    assert_eq!(d, [0, 1, 0, 0]);
    // Unknown opcode.
    let (_, d) = rsoc(&lu, 1, 0x04, 0);
    assert_eq!(d, [0, 1, 0, 0]);
    // Opcodes with service actions need option 2 or 3.
    assert_eq!(
        check(rsoc(&lu, 1, op::SERVICE_ACTION_IN_16, 0x10).0),
        Sense::invalid_field_in_cdb(3, None)
    );
    let (_, d) = rsoc(&lu, 2, op::SERVICE_ACTION_IN_16, 0x10);
    assert_eq!(&d[..5], &[0, 3, 0, 16, 0x9E]);
    let (_, d) = rsoc(&lu, 3, op::SERVICE_ACTION_IN_16, 0x11);
    assert_eq!(d, [0, 1, 0, 0]);
    assert_eq!(
        check(rsoc(&lu, 2, op::INQUIRY, 0).0),
        Sense::invalid_field_in_cdb(3, None)
    );
    let (_, d) = rsoc(&lu, 3, op::INQUIRY, 0x55);
    assert_eq!(d[1], 3);
    assert_eq!(
        check(rsoc(&lu, 5, 0, 0).0),
        Sense::invalid_field_in_cdb(2, Some(2))
    );
    // With RCTD: CTDP and a 12-byte timeouts descriptor.
    let (_, d) = rsoc(&lu, 0x81, op::READ_10, 0);
    assert_eq!(d[1], 0x83);
    assert_eq!(d.len(), 4 + 10 + 12);
    assert_eq!(&d[14..16], &[0, 0x0A]);
}

#[test]
fn report_all_opcodes() {
    let lu = thin_lu();
    let (out, d) = rsoc(&lu, 0, 0, 0);
    let Verdict::DataIn { len } = out else {
        panic!()
    };
    let n = u32::from_be_bytes(d[..4].try_into().unwrap()) as usize;
    assert_eq!(n + 4, len as usize);
    assert_eq!(n % 8, 0);
    let entries: Vec<_> = d[4..].chunks(8).collect();
    assert!(
        entries
            .iter()
            .any(|e| e[0] == 0x9E && e[3] == 0x10 && e[5] == 0x01)
    );
    assert!(entries.iter().any(|e| e[0] == op::UNMAP));
    let (_, plain) = rsoc(&lu_plain(), 0, 0, 0);
    assert_eq!(plain.len(), d.len() - 8);
    let (_, with_to) = rsoc(&lu, 0x80, 0, 0);
    assert_eq!(with_to.len() - 4, (d.len() - 4) / 8 * 20);
}

#[test]
fn every_reported_opcode_is_implemented() {
    let lu = thin_lu();
    for (opcode, sa, usage) in supported_opcodes::all_listed() {
        assert!(supported_opcodes::listed(&lu, opcode, sa));
        assert_eq!(usage[0], opcode);
        assert_eq!(Some(usage.len()), cdb::cdb_len(opcode));
        // The reservation commands run on the volume's reservation state in the exec layer
        // (scsi_exec::reservation; tests/tests/srp_reservations.rs), not in `execute`; so
        // does MODE SELECT, on the LU's shared mode parameters (scsi_exec::mode_select), and
        // COMPARE AND WRITE, under the volume's range lock (scsi_exec::caw).
        if matches!(
            opcode,
            0x15 | 0x55 | 0x16 | 0x17 | 0x56 | 0x57 | 0x5E | 0x5F | 0x89
        ) {
            continue;
        }
        let mut c = [0u8; 16];
        c[0] = opcode;
        if let Some(sa) = sa {
            c[1] = sa;
        }
        let (out, _) = run(&lu, &c);
        if let Verdict::CheckCondition(s) = out {
            assert_ne!(
                (s.asc, s.ascq),
                (0x20, 0x00),
                "opcode {opcode:#x} reported but rejected"
            );
        }
    }
}

// ---- generic errors ----

#[test]
fn invalid_opcode_and_control_byte() {
    let lu = lu();
    assert_eq!(
        check(run(&lu, &[0x04, 0, 0, 0, 0, 0]).0),
        Sense::invalid_opcode()
    ); // FORMAT UNIT
    assert_eq!(check(run(&lu, &[0xC5]).0), Sense::invalid_opcode()); // vendor specific
    assert_eq!(check(run(&lu, &[0x7F]).0), Sense::invalid_opcode()); // variable length
    assert_eq!(
        check(run(&lu, &[op::MODE_SELECT_6, 0x10, 0, 0, 12, 0]).0),
        Sense::invalid_opcode()
    );
    // NACA set in the control byte.
    assert_eq!(
        check(run(&lu, &[op::TEST_UNIT_READY, 0, 0, 0, 0, 0x04]).0),
        Sense::invalid_field_in_cdb(5, Some(2))
    );
    // Unsupported LUN wins over everything but INQUIRY, REPORT LUNS and REQUEST SENSE.
    assert_eq!(
        check(run_with(None, &[], &[0x04, 0, 0, 0, 0, 0], 0).0),
        Sense::lun_not_supported()
    );
    assert_eq!(
        check(run_with(None, &[], &[0xC5], 0).0),
        Sense::lun_not_supported()
    );
    // Empty or truncated CDB.
    let port = port();
    let ctx = TargetContext {
        port: &port,
        luns: &[],
        alua: None,
    };
    let mut b = [0u8; 64];
    assert_eq!(
        execute(
            Some(&lu),
            &ctx,
            &Command {
                cdb: &[],
                data_out_len: 0
            },
            &mut b
        ),
        Verdict::CheckCondition(Sense::invalid_opcode())
    );
    assert_eq!(
        execute(
            Some(&lu),
            &ctx,
            &Command {
                cdb: &[op::READ_10, 0, 0],
                data_out_len: 0
            },
            &mut b
        ),
        Verdict::CheckCondition(Sense::invalid_field_in_cdb(0, None))
    );
}

/// The command sequence of a Linux disk bring-up (reference §3.1), end to end.
#[test]
fn linux_bring_up_sequence() {
    let lu = thin_lu();
    let luns = [0u16];
    let port = port();
    let ctx = TargetContext {
        port: &port,
        luns: &luns,
        alua: None,
    };
    let mut buf = vec![0u8; 4096];
    let mut go = |cdb: &[u8], alloc_buf: usize| {
        let mut c = [0u8; 16];
        c[..cdb.len()].copy_from_slice(cdb);
        let o = execute(
            Some(&lu),
            &ctx,
            &Command {
                cdb: &c,
                data_out_len: 0,
            },
            &mut buf[..alloc_buf],
        );
        (o, buf[..alloc_buf].to_vec())
    };
    // 1. INQUIRY 36, then 96.
    let (o, d) = go(&[op::INQUIRY, 0, 0, 0, 36, 0], 36);
    assert_eq!(o, Verdict::DataIn { len: 36 });
    let want = d[4] as usize + 5;
    assert_eq!(want, 96);
    assert_eq!(
        go(&[op::INQUIRY, 0, 0, 0, want as u8, 0], want).0,
        Verdict::DataIn { len: 96 }
    );
    // 2. REPORT LUNS with a 4 KiB-ish allocation.
    let (o, d) = go(
        &[op::REPORT_LUNS, 0, 0, 0, 0, 0, 0, 0, 0x0F, 0xF8, 0, 0],
        4088,
    );
    assert_eq!(o, Verdict::DataIn { len: 16 });
    assert_eq!(&d[..4], &[0, 0, 0, 8]);
    // 3. VPD pages.
    for page in SUPPORTED_VPD {
        let (o, d) = go(&[op::INQUIRY, 1, page, 0, 255, 0], 255);
        let Verdict::DataIn { len } = o else {
            panic!("page {page:#x}: {o:?}")
        };
        assert_eq!(d[1], page);
        assert_eq!(u16::from_be_bytes([d[2], d[3]]) as u32 + 4, len);
    }
    // 4. TEST UNIT READY.
    assert_eq!(
        go(&[op::TEST_UNIT_READY, 0, 0, 0, 0, 0], 0).0,
        Verdict::Good
    );
    // 5. READ CAPACITY(16).
    let (o, _) = go(
        &[
            op::SERVICE_ACTION_IN_16,
            0x10,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            0,
            32,
            0,
            0,
        ],
        32,
    );
    assert_eq!(o, Verdict::DataIn { len: 32 });
    // 6. MODE SENSE.
    assert_eq!(
        go(&[op::MODE_SENSE_6, 0, 0x3F, 0, 4, 0], 4).0,
        Verdict::DataIn { len: 4 }
    );
    assert_eq!(
        go(&[op::MODE_SENSE_6, 0, 0x3F, 0, 0xC0, 0], 192).0,
        Verdict::DataIn { len: 56 }
    );
    assert_eq!(
        go(&[op::MODE_SENSE_6, 0x08, 0x08, 0, 0x40, 0], 64).0,
        Verdict::DataIn { len: 24 }
    );
    assert_eq!(
        go(&[op::MODE_SENSE_6, 0x08, 0x0A, 0, 0x40, 0], 64).0,
        Verdict::DataIn { len: 16 }
    );
    // 8. REPORT SUPPORTED OPERATION CODES for WRITE SAME(16).
    let (o, d) = go(
        &[
            op::MAINTENANCE_IN,
            0x0C,
            1,
            op::WRITE_SAME_16,
            0,
            0,
            0,
            0,
            2,
            0,
            0,
            0,
        ],
        512,
    );
    assert!(matches!(o, Verdict::DataIn { len: 20 }));
    assert_eq!(d[1] & 3, 3);
    // 10. I/O.
    assert!(matches!(
        go(&[op::READ_10, 0, 0, 0, 0, 0, 0, 0, 8, 0], 0).0,
        Verdict::Io(ScsiIo::Read { .. })
    ));
    assert_eq!(
        go(&[op::SYNCHRONIZE_CACHE_10, 0, 0, 0, 0, 0, 0, 0, 0, 0], 0).0,
        Verdict::Io(ScsiIo::Flush { lba: 0, blocks: 0 })
    );
}

// ---- no panics on random input ----

/// xorshift64*: deterministic and dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

#[test]
fn random_cdbs_never_panic() {
    let lus = [lu(), thin_lu(), {
        let mut l = thin_lu();
        l.read_only = true;
        l.num_blocks = 1;
        l
    }];
    let port = port();
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut data = vec![0u8; 8192];
    let known = [
        op::TEST_UNIT_READY,
        op::REQUEST_SENSE,
        op::READ_6,
        op::WRITE_6,
        op::INQUIRY,
        op::MODE_SENSE_6,
        op::START_STOP_UNIT,
        op::READ_CAPACITY_10,
        op::READ_10,
        op::WRITE_10,
        op::VERIFY_10,
        op::SYNCHRONIZE_CACHE_10,
        op::WRITE_SAME_10,
        op::UNMAP,
        op::MODE_SENSE_10,
        op::READ_16,
        op::WRITE_16,
        op::VERIFY_16,
        op::SYNCHRONIZE_CACHE_16,
        op::WRITE_SAME_16,
        op::SERVICE_ACTION_IN_16,
        op::REPORT_LUNS,
        op::MAINTENANCE_IN,
        op::READ_12,
        op::WRITE_12,
    ];
    for i in 0..200_000u32 {
        let r = rng.next();
        let len = (r % 20) as usize;
        let mut cdb = [0u8; 20];
        for b in cdb.iter_mut() {
            *b = rng.next() as u8;
        }
        if i % 2 == 0 {
            cdb[0] = known[(r >> 8) as usize % known.len()];
        }
        let luns: Vec<u16> = (0..(r >> 16) % 4).map(|x| x as u16 * 300).collect();
        let ctx = TargetContext {
            port: &port,
            luns: &luns,
            alua: None,
        };
        let lu = match (r >> 20) % 4 {
            3 => None,
            k => Some(&lus[k as usize]),
        };
        let buf_len = (rng.next() % 8193) as usize;
        let data_out = match (r >> 24) % 3 {
            0 => 0,
            1 => BS,
            _ => rng.next() as u32,
        };
        let out = execute(
            lu,
            &ctx,
            &Command {
                cdb: &cdb[..len],
                data_out_len: data_out,
            },
            &mut data[..buf_len],
        );
        match out {
            Verdict::DataIn { len } => assert!(len as usize <= buf_len),
            Verdict::Io(io) => {
                let lu = lu.expect("I/O without a logical unit");
                match io {
                    ScsiIo::Read { lba, blocks, .. } | ScsiIo::Write { lba, blocks, .. } => {
                        assert!(blocks > 0 && blocks <= lu.max_transfer_blocks);
                        assert!(lu.in_range(lba, u64::from(blocks)));
                    }
                    ScsiIo::WriteSame { lba, blocks, .. } => {
                        assert!(blocks > 0 && lu.in_range(lba, u64::from(blocks)));
                    }
                    ScsiIo::Flush { lba, blocks } => assert!(lu.in_range(lba, u64::from(blocks))),
                    ScsiIo::Unmap { param_len } => assert!(param_len >= 8 || param_len <= data_out),
                }
            }
            Verdict::Good | Verdict::CheckCondition(_) => {}
        }
    }
}

#[test]
fn random_parameter_lists_never_panic() {
    let lu = thin_lu();
    let mut rng = Rng(42);
    for _ in 0..100_000 {
        let len = (rng.next() % 80) as usize;
        let mut p: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        if len >= 4 && rng.next().is_multiple_of(2) {
            let bd = (rng.next() % 80) as u16;
            p[2..4].copy_from_slice(&bd.to_be_bytes());
        }
        if let Ok(d) = parse_unmap(&lu, &p) {
            for r in d {
                assert!(r.blocks > 0 && lu.in_range(r.lba, u64::from(r.blocks)));
            }
        }
        let _ = Sense::parse(&p);
        if let Some(b) = p.get(..8) {
            let _ = lun::decode(b.try_into().unwrap());
        }
    }
}
