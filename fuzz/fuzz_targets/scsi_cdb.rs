//! SCSI CDBs through the device server (`target_core::scsi::execute`) as the SRP transport
//! calls it, against logical units of several shapes (thin, read-only, 4 KiB blocks, huge),
//! a missing LU, short and long data-in buffers, and UNMAP parameter lists.
//!
//! Input: `[selector][data-in length u16][data-out length u32][CDB length][CDB][parameter data]`.
//! Properties: nothing panics; parameter data never exceeds the buffer; a media operation
//! stays inside the LU (blocks > 0 where required, the transfer limit for reads and
//! writes, writes refused on a read-only LU); sense data encodes in both formats and parses
//! back; UNMAP parameter lists that pass only name ranges inside the LU within its limits.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use target_core::scsi::{
    self, Command, LogicalUnit, NaaId, PROTOCOL_ID_SRP, ScsiIo, Sense, TargetContext, TargetPort,
    Verdict, parse_unmap,
};

fn lu(sel: u8) -> LogicalUnit {
    let (bs, blocks) = match sel & 3 {
        0 => (512, 2048),
        1 => (4096, 1 << 30),
        2 => (512, u64::MAX / 512),
        _ => (65536, 1),
    };
    let mut l = LogicalUnit::new(bs, blocks, NaaId::local_from_uuid(&[sel; 16]), "SN0001");
    if sel & 4 != 0 {
        l = l.with_unmap(1 << 16, 64, sel & 8 != 0);
    }
    l.read_only = sel & 0x10 != 0;
    l.write_cache = sel & 0x20 != 0;
    l
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let sel = b.u8();
    let data_in_len = usize::from(b.u16() % 9000);
    let data_out_len = b.u32();
    let cdb_len = usize::from(b.u8() % 33);
    let cdb = b.take(cdb_len);
    let params = b.rest();
    let mut l = lu(sel);
    if l.validate().is_err() {
        return;
    }
    let port = TargetPort {
        protocol_id: PROTOCOL_ID_SRP,
        relative_port: 1,
        port_id: (sel & 0x40 != 0).then_some([0x11; 16]),
    };
    let luns: Vec<u16> = (0..u16::from(sel >> 5)).map(|i| i * 3).collect();
    let ctx = TargetContext {
        port: &port,
        luns: &luns,
        alua: None,
    };
    let mut data_in = vec![0u8; data_in_len];
    let cmd = Command { cdb, data_out_len };
    let which = (sel & 0x80 == 0).then_some(&l);
    match scsi::execute(which, &ctx, &cmd, &mut data_in) {
        Verdict::Good => {}
        Verdict::DataIn { len } => assert!(len as usize <= data_in.len()),
        Verdict::CheckCondition(s) => check_sense(&s),
        Verdict::Io(io) => {
            let l = which.expect("media access needs an LU");
            match io {
                ScsiIo::Read { lba, blocks, .. } | ScsiIo::Write { lba, blocks, .. } => {
                    assert!(blocks > 0 && l.in_range(lba, u64::from(blocks)));
                    assert!(blocks <= l.max_transfer_blocks);
                    if matches!(io, ScsiIo::Write { .. }) {
                        assert!(!l.read_only, "write to a read-only LU");
                        assert_eq!(
                            io.data_out_len(l.block_size),
                            u64::from(blocks) * u64::from(l.block_size)
                        );
                    }
                }
                ScsiIo::Flush { lba, blocks } => {
                    assert!(blocks == 0 || l.in_range(lba, u64::from(blocks)));
                }
                ScsiIo::Unmap { param_len } => {
                    assert!(l.unmap && !l.read_only);
                    assert!(param_len <= data_out_len);
                    let p = &params[..params.len().min(param_len as usize)];
                    match parse_unmap(l, p) {
                        Ok(list) => {
                            assert!(list.len() <= l.max_unmap_descriptors as usize);
                            for r in list {
                                assert!(r.blocks > 0 && l.in_range(r.lba, u64::from(r.blocks)));
                                assert!(r.blocks <= l.max_unmap_blocks);
                            }
                        }
                        Err(s) => check_sense(&s),
                    }
                }
                ScsiIo::WriteSame { lba, blocks, .. } => {
                    assert!(blocks > 0 && l.in_range(lba, u64::from(blocks)));
                    assert!(!l.read_only);
                }
            }
        }
    }
    // UNMAP parameter parsing on its own, whatever the CDB was.
    if let Ok(list) = parse_unmap(&l, params) {
        for r in list {
            assert!(l.in_range(r.lba, u64::from(r.blocks)));
        }
    }
});

/// Sense data survives both encodings, within what each carries: fixed format holds a 32-bit
/// INFORMATION field and the sense-key specific field pointer; descriptor format (as built
/// here) the header and a 64-bit information descriptor.
fn check_sense(s: &Sense) {
    let mut want = *s;
    want.information = s.information.filter(|&i| i <= u64::from(u32::MAX));
    assert_eq!(Sense::parse(&s.to_fixed()), Some(want));
    let (d, n) = s.to_descriptor();
    assert!(n <= d.len());
    let back = Sense::parse(&d[..n]).expect("descriptor sense parses");
    assert_eq!(
        (
            back.key,
            back.asc,
            back.ascq,
            back.information,
            back.deferred
        ),
        (s.key, s.asc, s.ascq, s.information, s.deferred)
    );
}
