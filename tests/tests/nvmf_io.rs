//! Verified I/O through the RDMA transport on the simulated fabric: queue depths 1–128, sizes
//! 512 B–1 MiB, in-capsule and keyed data (with and without remote invalidation), several
//! queues and reactors, Dataset Management, Write Zeroes, Flush, Compare.

use std::time::Duration;

use rtgt_tests::nvme_host::*;
use serde_json::json;
use target_core::nvme::spec::io_opc;
use target_core::nvme::{SglDescriptor, Sqe, Status};

const NQN: &str = "nqn.2016-06.io.rtgt:io";

fn env(opts: serde_json::Value) -> NvmfEnv {
    let e = NvmfEnv::new(2, opts);
    // 64 MiB of 512-byte blocks.
    e.subsystem(NQN, true, 131072, 512);
    e
}

#[test]
fn queue_depths_sizes_and_data_paths() {
    let e = env(json!({"max_io_size": 1048576}));
    let mut o = e.opts(NQN);
    o.io_queues = 2;
    o.io_depth = 128;
    o.max_io = 128 * 1024;
    let mut c = e.connect(o).expect("connect");
    assert_eq!(c.in_capsule, 4096);
    let mut lba = 0u64;
    let mut seed = 1;
    for (qd, sizes) in [
        (1usize, &[512usize, 4096, 8192, 65536, 131072][..]),
        (16, &[512, 4096, 12288, 131072][..]),
        (128, &[512, 4096, 16384, 131072][..]),
    ] {
        for &size in sizes {
            let modes: &[Mode] = if size <= 4096 {
                &[Mode::InCapsule, Mode::Keyed, Mode::KeyedInvalidate]
            } else {
                &[Mode::Keyed, Mode::KeyedInvalidate]
            };
            for &mode in modes {
                let blocks = (size / 512) as u32;
                let count = (qd * 2).max(4);
                if lba + u64::from(blocks) * count as u64 > 131072 {
                    lba = 0;
                }
                let w = Workload {
                    nsid: 1,
                    bs: 512,
                    lba0: lba,
                    blocks,
                    count,
                    qd,
                    seed,
                };
                let q = &mut c.io[seed as usize % 2];
                write_read_verify(q, &w, mode)
                    .unwrap_or_else(|err| panic!("qd {qd} size {size} {mode:?}: {err}"));
                lba += u64::from(blocks) * count as u64;
                seed += 1;
            }
        }
    }
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn one_mebibyte_transfers() {
    let e = env(json!({"max_io_size": 1048576}));
    let mut o = e.opts(NQN);
    o.io_queues = 1;
    o.io_depth = 8;
    o.max_io = 1 << 20;
    let mut c = e.connect(o).expect("connect");
    assert_eq!(c.id_ctrl[77], 8, "MDTS 8 = 1 MiB");
    for (qd, mode) in [(1, Mode::Keyed), (8, Mode::KeyedInvalidate)] {
        let w = Workload {
            nsid: 1,
            bs: 512,
            lba0: 4096,
            blocks: 2048,
            count: 16,
            qd,
            seed: 77 + qd as u32,
        };
        write_read_verify(&mut c.io[0], &w, mode).unwrap();
    }
    // One block beyond MDTS is refused.
    let big = vec![0u8; 512];
    let mut s = write_sqe(1, 0, 2049);
    s.set_cdw(12, 2048);
    let r = c.io[0]
        .cmd(
            s,
            Data::KeyedWrite {
                bytes: &big,
                invalidate: false,
            },
        )
        .unwrap();
    assert_eq!(r.cqe.status, Status::INVALID_FIELD);
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn four_kib_blocks_and_several_controllers() {
    let e = NvmfEnv::new(2, json!({}));
    e.subsystem("nqn.2016-06.io.rtgt:a", true, 4096, 4096);
    e.subsystem("nqn.2016-06.io.rtgt:b", true, 8192, 512);
    let mut ca = e.connect(e.opts("nqn.2016-06.io.rtgt:a")).unwrap();
    let mut o = e.opts("nqn.2016-06.io.rtgt:b");
    o.hostnqn = "nqn.2014-08.org.nvmexpress:uuid:22222222-2222-3333-4444-555555555555".into();
    let mut cb = e.connect(o).unwrap();
    assert_ne!(ca.cntlid, 0);
    assert_eq!(ca.namespace(1).unwrap(), (4096, 4096));
    let wa = Workload {
        nsid: 1,
        bs: 4096,
        lba0: 0,
        blocks: 2,
        count: 64,
        qd: 32,
        seed: 5,
    };
    let wb = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 8,
        count: 64,
        qd: 32,
        seed: 6,
    };
    std::thread::scope(|s| {
        let (qa0, rest) = ca.io.split_at_mut(1);
        let (qb0, _) = cb.io.split_at_mut(1);
        let h1 = s.spawn(|| write_read_verify(&mut qa0[0], &wa, Mode::KeyedInvalidate));
        let h2 = s.spawn(|| write_read_verify(&mut qb0[0], &wb, Mode::InCapsule));
        let h3 = s.spawn(|| {
            let w = Workload {
                lba0: 1000,
                seed: 9,
                ..wa
            };
            write_read_verify(&mut rest[0], &w, Mode::Keyed)
        });
        h1.join().unwrap().unwrap();
        h2.join().unwrap().unwrap();
        h3.join().unwrap().unwrap();
    });
    // The two subsystems never saw each other's data.
    read_verify(&mut ca.io[0], &wa, false).unwrap();
    read_verify(&mut cb.io[0], &wb, false).unwrap();
    ca.shutdown().unwrap();
    cb.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn without_shared_receive_queues() {
    let e = env(json!({"no_srq": true, "max_queue_depth": 64}));
    let mut o = e.opts(NQN);
    o.io_depth = 64;
    let mut c = e.connect(o).unwrap();
    for (i, mode) in [Mode::InCapsule, Mode::Keyed, Mode::KeyedInvalidate]
        .into_iter()
        .enumerate()
    {
        let w = Workload {
            nsid: 1,
            bs: 512,
            lba0: 10_000 * i as u64,
            blocks: 8,
            count: 200,
            qd: 64,
            seed: 40 + i as u32,
        };
        write_read_verify(&mut c.io[i % 2], &w, mode).unwrap();
    }
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

fn dsm(nsid: u32, ranges: &[(u64, u32)]) -> (Sqe, Vec<u8>) {
    let mut s = Sqe::new(io_opc::DATASET_MANAGEMENT, 0);
    s.set_nsid(nsid)
        .set_cdw(10, ranges.len() as u32 - 1)
        .set_cdw(11, 1 << 2);
    let mut buf = vec![0u8; 4096];
    for (i, (slba, n)) in ranges.iter().enumerate() {
        buf[i * 16 + 4..i * 16 + 8].copy_from_slice(&n.to_le_bytes());
        buf[i * 16 + 8..i * 16 + 16].copy_from_slice(&slba.to_le_bytes());
    }
    (s, buf)
}

fn read(q: &mut HostQueue, lba: u64, blocks: u32) -> Vec<u8> {
    q.cmd(
        read_sqe(1, lba, blocks),
        Data::KeyedRead {
            len: blocks * 512,
            invalidate: false,
        },
    )
    .unwrap()
    .ok()
    .unwrap()
    .data
}

/// Issue 13 item 10: ONCS advertised Compare for every namespace, but a bdev without a
/// compare of its own (null) answered Invalid Opcode. Compare is now read + compare in the
/// bdev channel for any bdev that can read: the null bdev compares with what its reads return
/// (zeroes here), a file compares with its data, across several read chunks.
#[test]
fn compare_works_on_bdevs_without_a_compare_of_their_own() {
    let e = NvmfEnv::new(2, json!({}));
    e.t.subsystem(NQN, true);
    e.t.null("cmp_null", 4096, 512);
    assert_eq!(e.t.add_ns(NQN, "cmp_null"), 1);
    let dir = std::env::temp_dir().join(format!("rtgt-cmp-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("disk");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(4 << 20)
        .unwrap();
    let aio = target_core::bdev::AioBdev::create(target_core::bdev::AioParams {
        name: "cmp_file".into(),
        filename: path.to_string_lossy().into_owned(),
        block_size: None,
        readonly: false,
        fallocate: false,
        uuid: None,
        engine: None,
        uring_module: false,
    })
    .unwrap();
    e.t.target.bdevs().register(aio).unwrap();
    assert_eq!(e.t.add_ns(NQN, "cmp_file"), 2);
    e.t.listen(NQN, "RDMA", 4420);
    let mut c = e.connect(e.opts(NQN)).unwrap();
    let oncs = u16::from_le_bytes([c.id_ctrl[520], c.id_ctrl[521]]);
    assert_eq!(oncs & 1, 1, "Compare advertised");
    let q = &mut c.io[0];
    let compare = |q: &mut HostQueue, nsid: u32, lba: u64, data: &[u8]| {
        let r = q
            .cmd(
                rw_sqe(io_opc::COMPARE, nsid, lba, (data.len() / 512) as u32),
                Data::KeyedWrite {
                    bytes: data,
                    invalidate: false,
                },
            )
            .unwrap();
        r.cqe.status
    };
    // Null: equal to zeroes, different from anything else.
    assert_eq!(compare(q, 1, 8, &[0u8; 4096]), Status::SUCCESS);
    assert_eq!(
        compare(q, 1, 8, &pattern(1, 8, 8, 512)),
        Status::COMPARE_FAILURE
    );
    // A file: 128 KiB compares (several chunks), equal, and different in the first and in
    // the last byte.
    let data = pattern(2, 0, 256, 512);
    q.cmd(
        write_sqe(2, 0, 256),
        Data::KeyedWrite {
            bytes: &data,
            invalidate: false,
        },
    )
    .unwrap()
    .ok()
    .unwrap();
    assert_eq!(compare(q, 2, 0, &data), Status::SUCCESS);
    for at in [0, data.len() - 1] {
        let mut diff = data.clone();
        diff[at] ^= 0x40;
        assert_eq!(
            compare(q, 2, 0, &diff),
            Status::COMPARE_FAILURE,
            "byte {at}"
        );
    }
    assert_eq!(compare(q, 2, 1, &data[..4096]), Status::COMPARE_FAILURE);
    // Out of range is still refused before anything is read.
    assert_eq!(compare(q, 1, 4095, &[0u8; 1024]), Status::LBA_OUT_OF_RANGE);
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn deallocate_write_zeroes_flush_compare() {
    let e = env(json!({}));
    let mut c = e.connect(e.opts(NQN)).unwrap();
    let oncs = u16::from_le_bytes([c.id_ctrl[520], c.id_ctrl[521]]);
    assert_eq!(
        oncs & 0b1101,
        0b1101,
        "Compare, DSM and Write Zeroes advertised"
    );
    let q = &mut c.io[0];
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 16,
        count: 16,
        qd: 8,
        seed: 3,
    };
    write_all(q, &w, Mode::Keyed).unwrap();
    // Deallocate [16, 24) and [100, 101) and an empty range; Linux sends 4 KiB, keyed.
    let (s, buf) = dsm(1, &[(16, 8), (200, 0), (100, 1)]);
    q.cmd(
        s,
        Data::KeyedWrite {
            bytes: &buf,
            invalidate: true,
        },
    )
    .unwrap()
    .ok()
    .unwrap();
    let all = read(q, 0, 256);
    let want = pattern(3, 0, 256, 512);
    for lba in 0..256usize {
        let got = &all[lba * 512..(lba + 1) * 512];
        if (16..24).contains(&lba) || lba == 100 {
            assert!(got.iter().all(|&b| b == 0), "LBA {lba} not deallocated");
        } else {
            assert_eq!(
                got,
                &want[lba * 512..(lba + 1) * 512],
                "LBA {lba} disturbed"
            );
        }
    }
    // A range beyond the namespace fails the whole command, nothing deallocated.
    let (s, buf) = dsm(1, &[(0, 1), (131071, 2)]);
    let r = q.cmd(s, Data::InCapsule(&buf)).unwrap();
    assert_eq!(r.cqe.status, Status::LBA_OUT_OF_RANGE);
    assert_eq!(read(q, 0, 1), want[..512]);
    // Write Zeroes (with FUA) of [32, 40).
    let mut s = rw_sqe(io_opc::WRITE_ZEROES, 1, 32, 8);
    s.set_cdw(12, 7 | 1 << 30);
    q.cmd(s, Data::None).unwrap().ok().unwrap();
    assert!(read(q, 32, 8).iter().all(|&b| b == 0));
    assert_eq!(read(q, 40, 1), want[40 * 512..41 * 512]);
    // Flush.
    let mut s = Sqe::new(io_opc::FLUSH, 0);
    s.set_nsid(1);
    q.cmd(s, Data::None).unwrap().ok().unwrap();
    // Compare: equal, then different.
    let same = want[48 * 512..50 * 512].to_vec();
    q.cmd(rw_sqe(io_opc::COMPARE, 1, 48, 2), Data::InCapsule(&same))
        .unwrap()
        .ok()
        .unwrap();
    let mut diff = same.clone();
    diff[700] ^= 1;
    let r = q
        .cmd(
            rw_sqe(io_opc::COMPARE, 1, 48, 2),
            Data::KeyedWrite {
                bytes: &diff,
                invalidate: false,
            },
        )
        .unwrap();
    assert_eq!(r.cqe.status, Status::COMPARE_FAILURE);
    // FUA write.
    let data = pattern(9, 60, 1, 512);
    let mut s = write_sqe(1, 60, 1);
    s.set_cdw(12, 1 << 30);
    q.cmd(s, Data::InCapsule(&data)).unwrap().ok().unwrap();
    assert_eq!(read(q, 60, 1), data);
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn small_buffer_pool_makes_requests_wait() {
    // 32 small and 32 large buffers shared by two reactors: 64 outstanding 8 KiB and 64 KiB
    // writes must wait for buffers and still all complete.
    let e = env(
        json!({"num_shared_buffers": 32, "iobuf_small_cache_size": 2,
                       "iobuf_large_cache_size": 2}),
    );
    let mut o = e.opts(NQN);
    o.io_depth = 64;
    let mut c = e.connect(o).unwrap();
    let (q0, q1) = c.io.split_at_mut(1);
    std::thread::scope(|s| {
        let a = s.spawn(|| {
            let w = Workload {
                nsid: 1,
                bs: 512,
                lba0: 0,
                blocks: 16,
                count: 256,
                qd: 64,
                seed: 1,
            };
            write_read_verify(&mut q0[0], &w, Mode::Keyed)
        });
        let b = s.spawn(|| {
            let w = Workload {
                nsid: 1,
                bs: 512,
                lba0: 8192,
                blocks: 128,
                count: 64,
                qd: 64,
                seed: 2,
            };
            write_read_verify(&mut q1[0], &w, Mode::KeyedInvalidate)
        });
        a.join().unwrap().unwrap();
        b.join().unwrap().unwrap();
    });
    let stats = e.t.rt.block_on(e.t.target.stats());
    let waited: u64 = stats["poll_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["transports"][0]["pending_data_buffer"].as_u64().unwrap())
        .sum();
    assert!(
        waited > 0,
        "requests should have waited for buffers: {stats}"
    );
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}

#[test]
fn keyed_sgl_lists_in_the_capsule() {
    // SPDK hosts describe data with a Last Segment descriptor (offset subtype) pointing at up
    // to MSDBD keyed descriptors in the capsule; Identify advertises MSDBD 16.
    let e = env(json!({"no_wr_batching": true}));
    let mut o = e.opts(NQN);
    o.io_queues = 1;
    o.max_io = 64 * 1024;
    let mut c = e.connect(o).unwrap();
    assert_eq!(c.id_ctrl[1803], 16, "MSDBD");
    let q = &mut c.io[0];
    let (base, rkey) = q.raw_data_region();
    // Three pieces, out of order in host memory: 1 KiB at 40 KiB, 2 KiB at 0, 1 KiB at 20 KiB.
    let pieces = [(40 * 1024u64, 1024u32), (0, 2048), (20 * 1024, 1024)];
    let list = |pieces: &[(u64, u32)]| {
        let mut v = Vec::new();
        for &(off, len) in pieces {
            v.extend_from_slice(&SglDescriptor::keyed(base + off, len, rkey, false).0);
        }
        v
    };
    let data = pattern(11, 300, 8, 512);
    let mut at = 0usize;
    for &(off, len) in &pieces {
        q.set_data_bytes(off as usize, &data[at..at + len as usize]);
        at += len as usize;
    }
    let l = list(&pieces);
    let sgl = SglDescriptor::last_segment_in_capsule(0, l.len() as u32);
    q.cmd(write_sqe(1, 300, 8), Data::Raw { sgl, capsule: &l })
        .unwrap()
        .ok()
        .unwrap();
    assert_eq!(read(q, 300, 8), data, "gathered from three keyed pieces");
    // And scattered on a read: zero the pieces, read into them.
    for &(off, len) in &pieces {
        q.set_data_bytes(off as usize, &vec![0u8; len as usize]);
    }
    q.cmd(read_sqe(1, 300, 8), Data::Raw { sgl, capsule: &l })
        .unwrap()
        .ok()
        .unwrap();
    let mut got = Vec::new();
    for &(off, len) in &pieces {
        got.extend_from_slice(q.data_bytes(off as usize, len as usize));
    }
    assert_eq!(got, data, "scattered into three keyed pieces");
    // 17 descriptors exceed MSDBD; a list length that is not a multiple of 16 is malformed.
    let many: Vec<(u64, u32)> = (0..17).map(|i| (i * 512, 512)).collect();
    let l = list(&many);
    let r = q
        .cmd(
            write_sqe(1, 0, 17),
            Data::Raw {
                sgl: SglDescriptor::last_segment_in_capsule(0, l.len() as u32),
                capsule: &l,
            },
        )
        .unwrap();
    assert_eq!(r.cqe.status, Status::INVALID_SGL_COUNT);
    let r = q
        .cmd(
            write_sqe(1, 0, 1),
            Data::Raw {
                sgl: SglDescriptor::last_segment_in_capsule(0, 20),
                capsule: &l[..32],
            },
        )
        .unwrap();
    assert_eq!(r.cqe.status, Status::INVALID_SGL_SEGMENT);
    c.shutdown().unwrap();
    e.assert_quiescent(Duration::from_secs(10));
}
