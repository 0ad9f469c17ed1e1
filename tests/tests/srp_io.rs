//! SRP I/O against the in-process target on the simulated fabric: data verification at queue
//! depths 1–64 with direct, indirect and immediate descriptors, residuals and sense data, the
//! SCSI commands Linux uses, misbehaving initiators.

use std::time::Duration;

use rtgt_tests::srp_initiator::{
    BS, Data, Layout, SrpFixture, SrpInitiator, cdb, pattern, rw10, split,
};
use serde_json::json;
use transport_srp::proto::Residual;

const INI: u64 = 0x5254_0012_3456_7890;
const SLOT: usize = 128 << 10;

/// Writes then reads back `qd` commands at a time on two LUNs, with every layout.
fn verify_at(i: &mut SrpInitiator, qd: usize, seed: u64) {
    let blocks_per_lun = 8192u32;
    let mut writes = Vec::new();
    for n in 0..qd {
        let lun = (n % 2) as u16;
        // Sizes from 1 block to 256 blocks (128 KiB); immediate data only up to 8 KiB.
        let blocks = [1u32, 8, 16, 64, 256, 3, 128][n % 7];
        let layout = match n % 3 {
            0 => Layout::Direct,
            1 => Layout::Indirect,
            _ if blocks * BS <= 8192 && i.immediate() => Layout::Immediate,
            _ => Layout::Indirect,
        };
        // Commands in flight together never overlap: 256 blocks per command and LUN.
        let lba = (n as u32 / 2) * 256 + (256 - blocks).min(n as u32 % 5);
        assert!(lba + blocks <= blocks_per_lun);
        let data = pattern(seed * 1000 + n as u64, (blocks * BS) as usize);
        let off = n * SLOT;
        i.mem()[off..off + data.len()].copy_from_slice(&data);
        let tag = i
            .command(
                lun,
                &rw10(0x2a, lba, blocks as u16),
                &Data::Out(split(off, blocks * BS, layout)),
                layout,
                false,
            )
            .unwrap();
        writes.push((tag, lun, lba, blocks, data));
    }
    for (tag, ..) in &writes {
        let r = i.wait(*tag).unwrap();
        assert_eq!(r.status, 0, "write {r:?}");
        assert_eq!(r.data_out, Residual::None);
    }
    let mut reads = Vec::new();
    for (n, (_, lun, lba, blocks, _)) in writes.iter().enumerate() {
        let off = n * SLOT;
        i.mem()[off..off + SLOT].fill(0xEE);
        let layout = if n % 2 == 0 {
            Layout::Indirect
        } else {
            Layout::Direct
        };
        let tag = i
            .command(
                *lun,
                &rw10(0x28, *lba, *blocks as u16),
                &Data::In(split(off, blocks * BS, layout)),
                layout,
                false,
            )
            .unwrap();
        reads.push(tag);
    }
    for (n, tag) in reads.iter().enumerate() {
        let r = i.wait(*tag).unwrap();
        assert_eq!(r.status, 0, "read {r:?}");
        assert_eq!(r.data_in, Residual::None);
        let (_, lun, lba, blocks, data) = &writes[n];
        let off = n * SLOT;
        assert!(
            i.mem()[off..off + data.len()] == data[..],
            "qd {qd}: LUN {lun} LBA {lba} ({blocks} blocks) read back different data"
        );
    }
}

#[test]
fn verified_io_at_queue_depths_1_to_64() {
    let fx = SrpFixture::new(2, json!({}), 2, 8192);
    let mut p = fx.params(INI);
    p.data_size = 64 * SLOT;
    let mut i = fx.login_with(&p).unwrap();
    for (k, qd) in [1usize, 2, 4, 8, 16, 32, 64].into_iter().enumerate() {
        verify_at(&mut i, qd, k as u64);
    }
    // Every credit came back. The target releases a request when its response's SEND
    // completes, which may be after the initiator has the response: wait for that.
    assert_eq!(i.req_lim, 128);
    fx.wait_until("every request released", |fx| {
        fx.qpairs()[0]["outstanding"] == 0
    });
    assert_eq!(fx.qpairs()[0]["req_lim"], 128);

    // The listener counted every read and write, with the same bytes each way (every block
    // written was read back); the only failures are the initiator's first TEST UNIT READY to
    // each of the two LUs, which reports POWER ON (a CHECK CONDITION).
    let stats = fx.t.rt.block_on(fx.t.target.stats());
    let sum = |k: &str| -> u64 {
        stats["poll_groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|pg| pg["listeners"].as_array().unwrap())
            .map(|l| l[k].as_u64().unwrap())
            .sum()
    };
    let ios: u64 = [1u64, 2, 4, 8, 16, 32, 64].iter().sum();
    assert_eq!((sum("reads"), sum("writes")), (ios, ios), "{stats}");
    assert!(
        sum("bytes_read") > 0 && sum("bytes_read") == sum("bytes_written"),
        "{stats}"
    );
    let errors: u64 = stats["poll_groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|pg| pg["listeners"].as_array().unwrap())
        .flat_map(|l| {
            l["errors"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
        })
        .sum();
    assert_eq!((sum("other_ops"), errors), (2, 2), "{stats}");
}

#[test]
fn verified_io_with_a_shared_receive_queue() {
    let fx = SrpFixture::new(2, json!({"use_srq": true, "srq_size": 64}), 2, 8192);
    let mut chans: Vec<SrpInitiator> = (0..2)
        .map(|n| {
            let mut p = fx.params(INI + n);
            p.data_size = 32 * SLOT;
            fx.login_with(&p).unwrap()
        })
        .collect();
    for (n, i) in chans.iter_mut().enumerate() {
        assert!(!i.immediate());
        verify_at(i, 32, 100 + n as u64);
    }
    let q = fx.qpairs();
    assert!(q.iter().all(|c| c["srq"] == true), "{q:?}");
}

#[test]
fn large_transfers_and_the_transfer_limit() {
    let fx = SrpFixture::new(1, json!({}), 1, 16384);
    let mut i = fx.login(INI);
    // 1 MiB (max_io_size) in four pieces, four at a time.
    let mb = 1usize << 20;
    let mut tags = Vec::new();
    for n in 0..4u32 {
        let data = pattern(77 + u64::from(n), mb);
        let off = n as usize * mb;
        i.mem()[off..off + mb].copy_from_slice(&data);
        tags.push(
            i.command(
                0,
                &rw10(0x2a, n * 2048, 2048),
                &Data::Out(split(off, mb as u32, Layout::Indirect)),
                Layout::Indirect,
                false,
            )
            .unwrap(),
        );
    }
    for t in tags {
        assert_eq!(i.wait(t).unwrap().status, 0);
    }
    for n in 0..4u32 {
        let (r, d) = i
            .read(0, n * 2048, BS, 2048, 4 * mb, Layout::Direct)
            .unwrap();
        assert_eq!(r.status, 0);
        assert!(d == pattern(77 + u64::from(n), mb), "1 MiB #{n}");
    }
    // Twice the limit is refused (the block limits page reports 2048 blocks).
    let r = i
        .run(
            0,
            &rw10(0x28, 0, 4096),
            &Data::In(vec![(0, 2 * mb as u32)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 2);
    assert_eq!(r.sense_key(), Some((0x5, 0x24, 0x00)));
    let r = i
        .run(
            0,
            &cdb::inquiry(Some(0xb0), 64),
            &Data::In(vec![(0, 64)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 0);
    assert_eq!(
        &i.mem()[8..12],
        &2048u32.to_be_bytes(),
        "MAXIMUM TRANSFER LENGTH"
    );
}

#[test]
fn residuals_follow_the_initiator_buffers() {
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    let mut i = fx.login(INI);
    let data = pattern(5, 8192);
    assert_eq!(
        i.write(0, 0, BS, 0, &data, Layout::Direct).unwrap().status,
        0
    );
    // Buffer larger than the transfer: underflow.
    let r = i
        .run(
            0,
            &rw10(0x28, 0, 8),
            &Data::In(vec![(0, 8192)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!((r.status, r.data_in), (0, Residual::Under(4096)));
    // Buffer smaller than the transfer: overflow, and only the buffer is written.
    i.mem()[..8192].fill(0);
    let r = i
        .run(
            0,
            &rw10(0x28, 0, 16),
            &Data::In(vec![(0, 4096)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!((r.status, r.data_in), (0, Residual::Over(4096)));
    assert_eq!(&i.mem()[..4096], &data[..4096]);
    assert!(i.mem()[4096..8192].iter().all(|&b| b == 0));
    // Parameter data shorter than the buffer.
    let r = i
        .run(
            0,
            &cdb::inquiry(None, 96),
            &Data::In(vec![(0, 255)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!((r.status, r.data_in), (0, Residual::Under(255 - 96)));
    // A command without data whose initiator gave a buffer anyway.
    let r = i
        .run(0, &cdb::tur(), &Data::In(vec![(0, 512)]), Layout::Direct)
        .unwrap();
    assert_eq!((r.status, r.data_in), (0, Residual::Under(512)));
    // A failed read moved nothing.
    let r = i
        .run(
            0,
            &rw10(0x28, 5000, 8),
            &Data::In(vec![(0, 4096)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!((r.status, r.data_in), (2, Residual::Under(4096)));
}

#[test]
fn scsi_commands_linux_sends() {
    let fx = SrpFixture::new(1, json!({}), 2, 2048);
    let mut i = fx.login(INI);
    let din = |n| Data::In(vec![(0, n)]);
    // Standard INQUIRY: a disk, command queuing.
    let r = i
        .run(0, &cdb::inquiry(None, 96), &din(96), Layout::Direct)
        .unwrap();
    assert_eq!(r.status, 0);
    assert_eq!(i.mem()[0], 0x00);
    assert_eq!(i.mem()[7] & 0x02, 0x02);
    assert_eq!(&i.mem()[8..12], b"RTGT");
    // VPD 0x83 carries an SRP target port designator (protocol identifier 4).
    let r = i
        .run(0, &cdb::inquiry(Some(0x83), 255), &din(255), Layout::Direct)
        .unwrap();
    assert_eq!(r.status, 0);
    let page = i.mem()[..255].to_vec();
    let len = u16::from_be_bytes([page[2], page[3]]) as usize + 4;
    let mut off = 4;
    let mut srp_port = false;
    while off + 4 <= len {
        let (proto, piv, dlen) = (
            page[off] >> 4,
            page[off + 1] & 0x80 != 0,
            page[off + 3] as usize,
        );
        srp_port |= proto == 4 && piv;
        off += 4 + dlen;
    }
    assert!(srp_port, "no SRP target port designator in {page:?}");
    // REPORT LUNS: two LUNs.
    let r = i
        .run(0, &cdb::report_luns(256), &din(256), Layout::Direct)
        .unwrap();
    assert_eq!(r.status, 0);
    assert_eq!(&i.mem()[..4], &16u32.to_be_bytes());
    assert_eq!(&i.mem()[8..10], &[0, 0]);
    assert_eq!(&i.mem()[16..18], &[0, 1]);
    // READ CAPACITY(16): the last LBA and the block size; thin provisioning on (malloc unmaps).
    let r = i
        .run(1, &cdb::read_capacity16(), &din(32), Layout::Direct)
        .unwrap();
    assert_eq!(r.status, 0);
    assert_eq!(&i.mem()[..8], &2047u64.to_be_bytes());
    assert_eq!(&i.mem()[8..12], &512u32.to_be_bytes());
    assert_eq!(i.mem()[14] & 0x80, 0x80, "LBPME");
    // A LUN without a logical unit: INQUIRY says so, everything else fails with 0x25.
    let r = i
        .run(7, &cdb::inquiry(None, 36), &din(36), Layout::Direct)
        .unwrap();
    assert_eq!((r.status, i.mem()[0]), (0, 0x7f));
    let r = i.run(7, &cdb::tur(), &Data::None, Layout::Direct).unwrap();
    assert_eq!(r.sense_key(), Some((0x5, 0x25, 0x00)));
    // Out of range, invalid opcode.
    let r = i
        .run(0, &rw10(0x28, 2047, 2), &din(1024), Layout::Direct)
        .unwrap();
    assert_eq!(r.sense_key(), Some((0x5, 0x21, 0x00)));
    let r = i
        .run(0, &[0xc7, 0, 0, 0, 0, 0], &Data::None, Layout::Direct)
        .unwrap();
    assert_eq!(r.sense_key(), Some((0x5, 0x20, 0x00)));
    // SYNCHRONIZE CACHE, WRITE(16) with FUA, READ(16).
    assert_eq!(
        i.run(0, &cdb::sync_cache(), &Data::None, Layout::Direct)
            .unwrap()
            .status,
        0
    );
    let data = pattern(9, 4096);
    i.mem()[..4096].copy_from_slice(&data);
    let r = i
        .run(
            0,
            &cdb::write16_fua(100, 8),
            &Data::Out(vec![(0, 4096)]),
            Layout::Immediate,
        )
        .unwrap();
    assert_eq!(r.status, 0);
    i.mem()[..4096].fill(0);
    let r = i
        .run(0, &cdb::read16(100, 8), &din(4096), Layout::Direct)
        .unwrap();
    assert_eq!(r.status, 0);
    assert_eq!(&i.mem()[..4096], &data[..]);
}

#[test]
fn unmap_and_write_same() {
    let fx = SrpFixture::new(1, json!({}), 1, 8192);
    let mut i = fx.login(INI);
    let fill = pattern(11, 8192 * BS as usize);
    for chunk in 0..4u32 {
        let b = 2048 * BS as usize;
        let d = fill[chunk as usize * b..(chunk as usize + 1) * b].to_vec();
        assert_eq!(
            i.write(0, chunk * 2048, BS, 0, &d, Layout::Direct)
                .unwrap()
                .status,
            0
        );
    }
    let read = |i: &mut SrpInitiator, lba: u32, blocks: u16| {
        let (r, d) = i.read(0, lba, BS, blocks, 1 << 21, Layout::Direct).unwrap();
        assert_eq!(r.status, 0);
        d
    };
    // UNMAP two ranges, the list as immediate data and then fetched by RDMA READ.
    for (layout, ranges) in [
        (Layout::Immediate, [(10u64, 6u32), (100, 28)]),
        (Layout::Direct, [(1000, 24), (2000, 1)]),
    ] {
        let list = cdb::unmap_list(&ranges);
        i.mem()[..list.len()].copy_from_slice(&list);
        let r = i
            .run(
                0,
                &cdb::unmap(list.len() as u16),
                &Data::Out(vec![(0, list.len() as u32)]),
                layout,
            )
            .unwrap();
        assert_eq!(r.status, 0, "{r:?}");
        for (lba, n) in ranges {
            assert!(read(&mut i, lba as u32, n as u16).iter().all(|&b| b == 0));
            let before = read(&mut i, lba as u32 - 1, 1);
            let o = (lba as usize - 1) * BS as usize;
            assert_eq!(
                before,
                fill[o..o + BS as usize],
                "block before the range kept"
            );
        }
    }
    // An UNMAP range past the end fails, nothing unmapped.
    let list = cdb::unmap_list(&[(300, 4), (8190, 4)]);
    i.mem()[..list.len()].copy_from_slice(&list);
    let r = i
        .run(
            0,
            &cdb::unmap(list.len() as u16),
            &Data::Out(vec![(0, list.len() as u32)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.sense_key(), Some((0x5, 0x21, 0x00)));
    assert_eq!(read(&mut i, 300, 4), fill[300 * 512..304 * 512]);
    // WRITE SAME with UNMAP and a zero block: deallocated.
    i.mem()[..512].fill(0);
    let r = i
        .run(
            0,
            &cdb::write_same16(3000, 64, true, false),
            &Data::Out(vec![(0, 512)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 0);
    assert!(read(&mut i, 3000, 64).iter().all(|&b| b == 0));
    // WRITE SAME of a pattern over 3000 blocks (more than one max_io_size chunk).
    let pat = pattern(12, 512);
    i.mem()[..512].copy_from_slice(&pat);
    let r = i
        .run(
            0,
            &cdb::write_same16(4096, 3000, false, false),
            &Data::Out(vec![(0, 512)]),
            Layout::Immediate,
        )
        .unwrap();
    assert_eq!(r.status, 0);
    for lba in [4096u32, 5000, 7095] {
        assert_eq!(read(&mut i, lba, 1), pat, "LBA {lba}");
    }
    assert_eq!(read(&mut i, 7096, 1), fill[7096 * 512..7097 * 512]);
    // NDOB: zeros without a data buffer.
    let r = i
        .run(
            0,
            &cdb::write_same16(4096, 16, false, true),
            &Data::None,
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 0);
    assert!(read(&mut i, 4096, 16).iter().all(|&b| b == 0));
    assert_eq!(read(&mut i, 4112, 1), pat);
}

#[test]
fn bad_descriptors_and_malformed_ius_do_not_hurt_the_channel() {
    let fx = SrpFixture::new(1, json!({}), 1, 1024);
    let mut i = fx.login(INI);
    // An external descriptor table (ib_srp's allow_ext_sg=1) is refused per command.
    let r = i
        .run(
            0,
            &rw10(0x28, 0, 8),
            &Data::In(split(0, 4096, Layout::IndirectPartial)),
            Layout::IndirectPartial,
        )
        .unwrap();
    assert_eq!(r.sense_key(), Some((0x5, 0x0e, 0x03)), "{r:?}");
    // Descriptors shorter than the CDB's transfer: the write is refused, not truncated.
    let r = i
        .run(
            0,
            &rw10(0x2a, 0, 8),
            &Data::Out(vec![(0, 2048)]),
            Layout::Direct,
        )
        .unwrap();
    assert_eq!(r.status, 2);
    // A runt SRP_CMD (no tag to answer), an unknown opcode, an SRP_RSP from the initiator.
    i.send_raw(&[0x02, 0, 0, 0, 0, 0, 0, 0, 1, 2]).unwrap();
    i.req_lim -= 1; // it took a credit on the target's books
    i.send_raw(&[0x77; 64]).unwrap();
    i.send_raw(&[0xc1; 36]).unwrap();
    // Immediate data whose length runs past the IU (the 2026 overflow fix).
    let mut iu = vec![0u8; 68];
    iu[0] = 0x02;
    iu[5] = 0x30;
    iu[8] = 0x55;
    iu[32..42].copy_from_slice(&rw10(0x2a, 0, 1));
    iu[48..52].copy_from_slice(&0xffff_ffffu32.to_be_bytes());
    i.send_raw(&iu).unwrap();
    i.req_lim -= 1;
    let r = i
        .next_response(Duration::from_secs(5))
        .unwrap()
        .expect("answer");
    assert_eq!(r.tag, 0x55);
    assert_eq!(r.sense_key(), Some((0x5, 0x0e, 0x03)));
    // The runt's credit comes back by SRP_CRED_REQ (nothing else was outstanding).
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while i.cred_reqs == 0 && std::time::Instant::now() < deadline {
        i.poll_once().unwrap();
    }
    assert_eq!(i.cred_reqs, 1);
    assert_eq!(i.req_lim, 128);
    // Still serving.
    let d = pattern(2, 512);
    assert_eq!(i.write(0, 1, BS, 0, &d, Layout::Direct).unwrap().status, 0);
    assert_eq!(i.read(0, 1, BS, 1, 4096, Layout::Direct).unwrap().1, d);
    assert_eq!(fx.qpairs()[0]["state"], "live");
}

#[test]
fn an_initiator_overrunning_its_credits_is_answered_busy_and_others_are_served() {
    let fx = SrpFixture::new(2, json!({"max_queue_depth": 16}), 1, 1024);
    let (nsid, gate) = fx.gated("Gate0", 1024);
    assert_eq!(nsid, 2);
    let mut bad = fx.login(INI);
    assert_eq!(bad.login.req_lim_delta, 16);
    let mut good = fx.login(INI + 1);
    gate.close();
    // 16 writes fill the credits and park in the bdev; 10 more overrun.
    let mut tags = Vec::new();
    for n in 0..26u32 {
        bad.mem()[n as usize * 512..(n as usize + 1) * 512].fill(n as u8);
        tags.push(
            bad.command(
                1,
                &rw10(0x2a, n, 1),
                &Data::Out(vec![(n as usize * 512, 512)]),
                Layout::Direct,
                true,
            )
            .unwrap(),
        );
    }
    fx.wait_until("16 writes parked", |_| gate.held() == 16);
    // The other initiator is served meanwhile (LUN 0 is not gated).
    let d = pattern(4, 4096);
    assert_eq!(
        good.write(0, 0, BS, 0, &d, Layout::Direct).unwrap().status,
        0
    );
    assert_eq!(good.read(0, 0, BS, 8, 8192, Layout::Direct).unwrap().1, d);
    gate.open();
    let mut busy = 0;
    for t in tags {
        let r = bad.wait(t).unwrap();
        match r.status {
            0 => {}
            8 => busy += 1,
            s => panic!("status {s:#x}"),
        }
    }
    assert!(busy >= 2, "only {busy} BUSY answers");
    let q = fx.qpairs();
    let c = q
        .iter()
        .find(|c| c["initiator_port_id"].as_str().unwrap().ends_with("7890"))
        .unwrap();
    assert_eq!(c["req_lim"], 16, "{c}");
    assert_eq!(c["credit_overruns"], busy, "{c}");
    assert_eq!(bad.req_lim, 16 - busy);
    assert_eq!(c["state"], "live");
}

#[test]
fn verified_io_under_send_queue_and_buffer_pressure() {
    // 12 send slots for requests and 20 data buffers of 64 KiB: most commands wait for one or
    // the other, in order, and all of them complete with the right data.
    let fx = SrpFixture::new(1, json!({"sq_size": 16, "num_shared_buffers": 20}), 2, 8192);
    let mut p = fx.params(INI);
    p.data_size = 64 * SLOT;
    let mut i = fx.login_with(&p).unwrap();
    assert_eq!(fx.qpairs()[0]["credits"], 128);
    for (k, qd) in [8usize, 32, 64].into_iter().enumerate() {
        verify_at(&mut i, qd, 50 + k as u64);
    }
    // Buffers go home when the responses' SENDs complete, possibly after the initiator has
    // the responses.
    fx.wait_until("every data buffer home", |fx| {
        fx.srp_stats(0)["devices"][0]["free_data_buffers"] == 20
    });
    let srp = fx.srp_stats(0);
    assert_eq!(srp["waiting_for_buffers"], 0, "{srp}");
}

#[test]
fn immediate_data_ring_buffer_returns_to_ring_on_early_answer() {
    // Immediate-data writes keep their data in the receive-ring buffer it arrived in. With the
    // backend refusing submissions they wait in the target to be submitted, holding those
    // buffers; ABORT TASK SET then ends them without a response. Each ring buffer must go back
    // to its ring and be reposted: not into the data pool (another size, another
    // registration), and not parked unposted.
    let fx = SrpFixture::new(1, json!({"max_queue_depth": 16}), 2, 8192);
    let (nsid, gate) = fx.gated("Gate0", 1024);
    let lun = (nsid - 1) as u16;
    let mut i = fx.login(INI);
    assert!(i.immediate());
    let total = fx.srp_stats(0)["devices"][0]["total_data_buffers"].clone();
    gate.refuse(true);
    let n = 12usize;
    for k in 0..n {
        let off = k * 4096;
        i.mem()[off..off + 4096].copy_from_slice(&pattern(k as u64, 4096));
        i.command(
            lun,
            &rw10(0x2a, (k * 8) as u32, 8),
            &Data::Out(vec![(off, 4096)]),
            Layout::Immediate,
            false,
        )
        .unwrap();
    }
    fx.wait_until("every write waiting to be submitted", |f| {
        f.qpairs()[0]["outstanding"] == n && gate.refused() >= n
    });
    let tm = i
        .task_mgmt(lun, transport_srp::proto::TaskMgmt::AbortTaskSet)
        .unwrap();
    let r = i.wait(tm).unwrap();
    assert_eq!(r.tm, Some(transport_srp::proto::TmResponse::Complete));
    gate.refuse(false);
    assert!(
        i.next_response(Duration::from_millis(100))
            .unwrap()
            .is_none(),
        "an aborted write was answered"
    );
    // Nothing outstanding: the ring is whole and posted, the pool holds its own buffers.
    fx.wait_until("the aborted writes gone", |f| {
        f.qpairs()[0]["outstanding"] == 0
    });
    let d = &fx.srp_stats(0)["devices"][0];
    assert_eq!(
        d["free_data_buffers"], total,
        "data pool after {n} aborted immediate-data writes: {d}"
    );
    let c = &fx.qpairs()[0];
    assert_eq!(
        c["receives_posted"], c["receive_slots"],
        "receive ring after {n} aborted immediate-data writes: {c}"
    );
    // A full window of immediate-data writes and reads with every buffer still works.
    verify_at(&mut i, 14, 77);
    fx.wait_until("every data buffer home", |f| {
        f.srp_stats(0)["devices"][0]["free_data_buffers"] == total
    });
    let c = &fx.qpairs()[0];
    assert_eq!(c["receives_posted"], c["receive_slots"], "{c}");
}

/// `n` descriptor segments of `seg` bytes each, one `gap` apart, from `off`.
fn scattered(off: usize, n: usize, seg: u32, gap: usize) -> Vec<(usize, u32)> {
    (0..n).map(|k| (off + k * gap, seg)).collect()
}

#[test]
fn transfer_needing_more_work_requests_than_the_send_queue_budget_is_split_not_hung() {
    // sq_size 16 leaves 12 send slots for requests. One RDMA READ or WRITE per descriptor
    // segment: 20, 100 and 255 (the most an SRP_CMD can carry) segments need more work requests than the budget will ever
    // hold, in one command. They must complete (in several rounds), never wait forever.
    let fx = SrpFixture::new(1, json!({"sq_size": 16}), 1, 8192);
    let mut i = fx.login(INI);
    let budget = 12;
    let mut seed = 0;
    for (n, seg, qd) in [(20usize, 512u32, 1usize), (100, 512, 4), (255, 512, 2)] {
        assert!(n + 1 > budget);
        let len = n as u32 * seg;
        let gap = seg as usize + 512;
        let span = n * gap;
        let mut cmds = Vec::new();
        for q in 0..qd {
            seed += 1;
            let lba = q as u32 * (len / BS);
            let data = pattern(seed, len as usize);
            let segs = scattered(q * span, n, seg, gap);
            for (k, &(o, l)) in segs.iter().enumerate() {
                let at = k * seg as usize;
                i.mem()[o..o + l as usize].copy_from_slice(&data[at..at + l as usize]);
            }
            let tag = i
                .command(
                    0,
                    &rw10(0x2a, lba, (len / BS) as u16),
                    &Data::Out(segs),
                    Layout::Indirect,
                    false,
                )
                .unwrap();
            cmds.push((tag, lba, data));
        }
        for (tag, lba, _) in &cmds {
            let r = i
                .next_response(Duration::from_secs(3))
                .unwrap()
                .unwrap_or_else(|| {
                    panic!("write of {n} segments at LBA {lba}: no response (tag {tag})")
                });
            assert_eq!(r.status, 0, "write of {n} segments: {r:?}");
        }
        let mut reads = Vec::new();
        for (q, (_, lba, _)) in cmds.iter().enumerate() {
            let segs = scattered(q * span, n, seg, gap);
            for &(o, l) in &segs {
                i.mem()[o..o + l as usize].fill(0xEE);
            }
            let tag = i
                .command(
                    0,
                    &rw10(0x28, *lba, (len / BS) as u16),
                    &Data::In(segs),
                    Layout::Indirect,
                    false,
                )
                .unwrap();
            reads.push(tag);
        }
        for tag in &reads {
            let r = i
                .next_response(Duration::from_secs(3))
                .unwrap()
                .unwrap_or_else(|| panic!("read of {n} segments: no response (tag {tag})"));
            assert_eq!(r.status, 0, "read of {n} segments: {r:?}");
            assert_eq!(r.data_in, Residual::None);
            let q = reads.iter().position(|t| *t == r.tag).unwrap();
            let data = &cmds[q].2;
            for (k, (o, l)) in scattered(q * span, n, seg, gap).into_iter().enumerate() {
                let at = k * seg as usize;
                assert!(
                    i.mem()[o..o + l as usize] == data[at..at + l as usize],
                    "read of {n} segments: segment {k} differs"
                );
            }
        }
    }
    assert_eq!(fx.qpairs()[0]["state"], "live");
}
