//! RBD-backed volumes exported over both fabrics, against a real cluster (scripts/ceph-cluster.sh
//! through `rtgt_tests::ceph`; a missing Ceph installation is a failure, not a skip): the
//! cluster and two bdevs are made through the `bdev_rbd_*` methods, one image becomes an
//! NVMe/RDMA namespace (4096-byte blocks), the other an SRP LUN (512-byte blocks), and rtgt's
//! own test initiators on the simulated fabric write, read back and compare data on them, with
//! each subsystem paused and resumed while the host has I/O outstanding: commands sent while
//! paused wait until the resume and then complete with the right data. Images resized by
//! another client (`rbd resize`) or by `bdev_rbd_resize` reach both hosts: a Namespace Attribute
//! Changed notice and the new Identify size, CAPACITY DATA HAS CHANGED and the new READ
//! CAPACITY; an image shrunk under its export keeps the exported size.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use rpc::RpcState;
use rtgt_tests::ceph::CephCluster;
use rtgt_tests::nvme_host::{
    ConnectOpts, Data as NvmeData, HOSTNQN, HostCtrl, Mode, Workload, nsid_list, pattern, read_sqe,
    read_verify, write_read_verify, write_sqe,
};
use rtgt_tests::rpc_rig::Rig;
use rtgt_tests::srp_initiator::{
    Data as SrpData, Layout, LoginParams, SrpInitiator, cdb, rw10, split,
};
use rtgt_tests::{HOST_IP, TARGET_IP, TestTarget};
use serde_json::{Value, json};
use transport_srp::proto::PortId;

// Linking the crate is what registers its bdev module.
use bdev_rbd as _;

const NVME_NQN: &str = "nqn.2016-06.io.rtgt:rbd-nvme";
const SRP_NQN: &str = "nqn.2016-06.io.rtgt:rbd-srp";
const NVME_PORT: u16 = 4420;
const SRP_PORT: u16 = 5556;
/// Image size (MiB).
const MIB: u64 = 16;

/// A target with both transports, the cluster registered as `ceph0`, and the two exports.
fn gateway(c: &CephCluster) -> Rig {
    c.rbd(&["create", "rbd/nvme0", "--size", &format!("{MIB}M")]);
    c.rbd(&["create", "rbd/srp0", "--size", &format!("{MIB}M")]);
    let r = Rig::on(TestTarget::start(2), RpcState::Runtime);
    r.ok("nvmf_create_transport", json!({"trtype": "RDMA"}));
    r.ok("nvmf_create_transport", json!({"trtype": "SRP"}));
    assert_eq!(
        r.ok(
            "bdev_rbd_register_cluster",
            json!({"name": "ceph0", "config_file": c.conf})
        ),
        "ceph0"
    );
    for (name, image, bs) in [("Rbd0", "nvme0", 4096), ("Rbd1", "srp0", 512)] {
        assert_eq!(
            r.ok(
                "bdev_rbd_create",
                json!({"name": name, "pool_name": "rbd", "rbd_name": image, "block_size": bs,
                       "cluster_name": "ceph0"})
            ),
            name
        );
        let b = &r.ok("bdev_get_bdevs", json!({"name": name}))[0];
        assert_eq!(b["driver_specific"]["rbd"]["rbd_name"], image, "{b}");
        assert_eq!(b["num_blocks"], (MIB << 20) / bs, "{b}");
    }
    for (nqn, bdev, trtype, port) in [
        (NVME_NQN, "Rbd0", "RDMA", NVME_PORT),
        (SRP_NQN, "Rbd1", "SRP", SRP_PORT),
    ] {
        r.ok(
            "nvmf_create_subsystem",
            json!({"nqn": nqn, "allow_any_host": true}),
        );
        assert_eq!(
            r.ok(
                "nvmf_subsystem_add_ns",
                json!({"nqn": nqn, "namespace": {"bdev_name": bdev}})
            ),
            1
        );
        r.ok(
            "nvmf_subsystem_add_listener",
            json!({"nqn": nqn, "listen_address":
                   {"trtype": trtype, "traddr": TARGET_IP, "trsvcid": port.to_string()}}),
        );
    }
    r
}

fn state(r: &Rig, nqn: &str) -> String {
    r.ok("nvmf_get_subsystems", json!({"nqn": nqn}))[0]["state"]
        .as_str()
        .expect("state")
        .to_string()
}

/// Runs an RPC on a thread of its own (the test keeps polling its host meanwhile).
fn call_in_background(
    r: &Rig,
    method: &'static str,
    params: Value,
) -> std::thread::JoinHandle<Result<Value, rpc::RpcError>> {
    let table = r.table.clone();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let text = params.to_string();
        rt.block_on(table.call(method, Some(&text)))
            .map(|raw| serde_json::from_str(raw.get()).expect("JSON"))
    })
}

fn nvme_connect(r: &Rig) -> HostCtrl {
    let mut o = ConnectOpts::new(NVME_NQN, HOSTNQN);
    o.src = Some(HOST_IP.parse().expect("ip"));
    o.io_queues = 1;
    let to: SocketAddr = format!("{TARGET_IP}:{NVME_PORT}").parse().expect("addr");
    HostCtrl::connect(&r.tt.fabric, to, o).expect("connect")
}

fn srp_login(r: &Rig) -> SrpInitiator {
    let to = SocketAddr::new(TARGET_IP.parse().expect("ip"), SRP_PORT);
    let mut p = LoginParams::linux(
        PortId::from_halves(0, 1),
        transport_srp::port_id::derived_target_port_id(SRP_NQN),
    );
    p.src = Some(SocketAddr::new(HOST_IP.parse().expect("ip"), 0));
    SrpInitiator::login(&r.tt.fabric, to, &p).expect("login")
}

fn nvme_over_rbd(r: &Rig) {
    const BS: usize = 4096;
    const BLOCKS: u32 = 8;
    let mut ctrl = nvme_connect(r);
    assert_eq!(
        ctrl.namespace(1).expect("identify namespace"),
        ((MIB << 20) / BS as u64, BS as u32)
    );
    let q = &mut ctrl.io[0];

    // 16 MiB written and read back at QD16, in 32 KiB commands, keyed and in-capsule.
    let w = Workload {
        nsid: 1,
        bs: BS,
        lba0: 0,
        blocks: BLOCKS,
        count: 256,
        qd: 16,
        seed: 11,
    };
    write_read_verify(q, &w, Mode::Keyed).expect("verified I/O");
    let small = Workload {
        blocks: 1,
        count: 64,
        seed: 12,
        ..w
    };
    write_read_verify(q, &small, Mode::InCapsule).expect("verified in-capsule I/O");

    // Pause with writes outstanding. The pause answers once the writes the target had taken
    // completed; a write that reached it after the pause began waits for the resume (as SPDK
    // queues it). Reads sent while paused of what completed before wait for the resume too, and
    // then return that data; afterwards every write of the batch reads back.
    let lba = |i: u64| 1024 + i * u64::from(BLOCKS);
    let writes: Vec<u16> = (0..16u64)
        .map(|i| {
            let data = pattern(13, lba(i), BLOCKS, BS);
            q.submit(
                write_sqe(1, lba(i), BLOCKS),
                NvmeData::KeyedWrite {
                    bytes: &data,
                    invalidate: false,
                },
            )
            .expect("submit write")
        })
        .collect();
    let pause = call_in_background(r, "nvmf_subsystem_pause", json!({"nqn": NVME_NQN}));
    let deadline = Instant::now() + Duration::from_secs(20);
    while !pause.is_finished() {
        q.poll().expect("host poll");
        assert!(Instant::now() < deadline, "the pause did not answer");
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(pause.join().expect("thread").expect("pause"), json!(true));
    assert_eq!(state(r, NVME_NQN), "paused");
    q.poll().expect("host poll");
    let (before, held): (Vec<u64>, Vec<u64>) =
        (0..16u64).partition(|&i| q.is_done(writes[i as usize]));
    eprintln!(
        "pause: {} write(s) completed before it answered, {} held until the resume",
        before.len(),
        held.len()
    );
    for &i in &before {
        let c = q.take(writes[i as usize]).expect("done");
        c.ok().expect("write status");
    }
    let reads: Vec<(u16, u64)> = before
        .iter()
        .map(|&i| {
            let cid = q
                .submit(
                    read_sqe(1, lba(i), BLOCKS),
                    NvmeData::KeyedRead {
                        len: BLOCKS * BS as u32,
                        invalidate: false,
                    },
                )
                .expect("submit read");
            (cid, lba(i))
        })
        .collect();
    let mut waiting: Vec<u16> = reads.iter().map(|&(c, _)| c).collect();
    waiting.extend(held.iter().map(|&i| writes[i as usize]));
    q.assert_none_complete_for(&waiting, Duration::from_millis(300));
    assert_eq!(
        r.ok("nvmf_subsystem_resume", json!({"nqn": NVME_NQN})),
        true
    );
    for &i in &held {
        q.wait(writes[i as usize])
            .expect("write held across the pause")
            .ok()
            .expect("write status");
    }
    for (cid, lba) in reads {
        let c = q.wait(cid).expect("read").ok().expect("read status");
        assert!(
            c.data == pattern(13, lba, BLOCKS, BS),
            "data read after the resume differs at LBA {lba}"
        );
    }
    let batch = Workload {
        lba0: lba(0),
        count: 16,
        seed: 13,
        ..w
    };
    read_verify(q, &batch, false).expect("the batch written across the pause reads back");
    assert_eq!(state(r, NVME_NQN), "active");
    ctrl.shutdown().expect("shutdown");
}

fn srp_over_rbd(r: &Rig) {
    const BS: u32 = 512;
    const CHUNK: usize = 64 << 10;
    let mut s = srp_login(r);

    // 4 MiB in 64 KiB writes (direct, indirect and immediate descriptors), read back.
    let chunks = 64u32;
    for i in 0..chunks {
        let layout = [Layout::Direct, Layout::Indirect][i as usize % 2];
        let lba = i * (CHUNK as u32 / BS);
        let rsp = s
            .write(0, lba, BS, 0, &srp_pattern(lba, CHUNK), layout)
            .expect("write");
        assert_eq!(rsp.status, 0, "WRITE(10) at {lba}: {:?}", rsp.sense_key());
    }
    let imm = s
        .write(
            0,
            20_000,
            BS,
            0,
            &srp_pattern(20_000, 4096),
            Layout::Immediate,
        )
        .expect("immediate write");
    assert_eq!(imm.status, 0, "immediate WRITE(10): {:?}", imm.sense_key());
    let (rsp, data) = s
        .read(0, 20_000, BS, 8, 0, Layout::Indirect)
        .expect("read of the immediate write");
    assert_eq!(rsp.status, 0);
    assert!(data == srp_pattern(20_000, 4096), "immediate data differs");
    for i in 0..chunks {
        let lba = i * (CHUNK as u32 / BS);
        let (rsp, data) = s
            .read(0, lba, BS, (CHUNK as u32 / BS) as u16, 0, Layout::Direct)
            .expect("read");
        assert_eq!(rsp.status, 0, "READ(10) at {lba}: {:?}", rsp.sense_key());
        assert!(data == srp_pattern(lba, CHUNK), "data differs at LBA {lba}");
    }

    // Paused: a read of old data and a write of new data wait until the resume.
    assert_eq!(r.ok("nvmf_subsystem_pause", json!({"nqn": SRP_NQN})), true);
    assert_eq!(state(r, SRP_NQN), "paused");
    let blocks = (CHUNK as u32 / BS) as u16;
    let read_tag = s
        .command(
            0,
            &rw10(0x28, 0, blocks),
            &SrpData::In(split(0, CHUNK as u32, Layout::Direct)),
            Layout::Direct,
            false,
        )
        .expect("read while paused");
    let new_lba = 30_000u32;
    s.mem()[CHUNK..2 * CHUNK].copy_from_slice(&srp_pattern(new_lba, CHUNK));
    let write_tag = s
        .command(
            0,
            &rw10(0x2a, new_lba, blocks),
            &SrpData::Out(split(CHUNK, CHUNK as u32, Layout::Direct)),
            Layout::Direct,
            false,
        )
        .expect("write while paused");
    let early = s
        .next_response(Duration::from_millis(300))
        .expect("poll while paused");
    assert!(early.is_none(), "a response while paused: {early:?}");
    assert_eq!(r.ok("nvmf_subsystem_resume", json!({"nqn": SRP_NQN})), true);
    let mut got = [false, false];
    while !(got[0] && got[1]) {
        let rsp = s
            .next_response(Duration::from_secs(20))
            .expect("poll")
            .expect("a response after the resume");
        assert_eq!(rsp.status, 0, "tag {}: {:?}", rsp.tag, rsp.sense_key());
        let i = [read_tag, write_tag]
            .iter()
            .position(|&t| t == rsp.tag)
            .unwrap_or_else(|| panic!("unexpected tag {}", rsp.tag));
        got[i] = true;
    }
    assert!(
        s.mem()[..CHUNK] == srp_pattern(0, CHUNK)[..],
        "the read held across the pause returned other data"
    );
    let (rsp, data) = s
        .read(0, new_lba, BS, blocks, 0, Layout::Indirect)
        .expect("read back");
    assert_eq!(rsp.status, 0);
    assert!(
        data == srp_pattern(new_lba, CHUNK),
        "the write held across the pause did not land"
    );
    s.logout().expect("logout");
}

fn tur(s: &mut SrpInitiator) -> Option<(u8, u8, u8)> {
    s.run(0, &cdb::tur(), &SrpData::None, Layout::Direct)
        .expect("TEST UNIT READY")
        .sense_key()
}

/// READ CAPACITY(16)'s last LBA.
fn last_lba(s: &mut SrpInitiator) -> u64 {
    let r = s
        .run(
            0,
            &cdb::read_capacity16(),
            &SrpData::In(vec![(0, 32)]),
            Layout::Direct,
        )
        .expect("READ CAPACITY(16)");
    assert_eq!(r.status, 0, "READ CAPACITY(16): {:?}", r.sense_key());
    u64::from_be_bytes(s.mem()[0..8].try_into().expect("8 bytes"))
}

/// The next unit attention of LUN 0, waiting up to 20 s for one.
fn next_ua(s: &mut SrpInitiator) -> Option<(u8, u8, u8)> {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match tur(s) {
            None if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            k => return k,
        }
    }
}

fn num_blocks(r: &Rig, bdev: &str) -> u64 {
    r.ok("bdev_get_bdevs", json!({"name": bdev}))[0]["num_blocks"]
        .as_u64()
        .expect("num_blocks")
}

/// Both images grow outside rtgt (`rbd resize`, noticed through the image watch) and through
/// `bdev_rbd_resize`; the hosts hear of it. An image shrunk under its export is refused as SPDK
/// does (the bdev keeps its size; nothing reaches the hosts).
fn resized_images(c: &CephCluster, r: &Rig) {
    let mut ctrl = nvme_connect(r);
    let mut s = srp_login(r);
    while tur(&mut s).is_some() {}
    assert_eq!(last_lba(&mut s), (MIB << 20) / 512 - 1);
    for (how, mib) in [("rbd resize", 24u64), ("bdev_rbd_resize", 32)] {
        let aer = ctrl.park_aer(1 << 8);
        if how == "rbd resize" {
            for image in ["rbd/nvme0", "rbd/srp0"] {
                c.rbd(&["resize", image, "--size", &format!("{mib}M")]);
            }
        } else {
            for bdev in ["Rbd0", "Rbd1"] {
                let p = json!({"name": bdev, "new_size": mib});
                assert_eq!(r.ok("bdev_rbd_resize", p), true);
            }
        }
        let done = ctrl.admin.wait(aer).expect("AER").ok().expect("AER status");
        assert_eq!(
            done.cqe.dw0, 0x0004_0002,
            "{how}: Namespace Attribute Changed"
        );
        let log = ctrl
            .get_log(0x04, 0xFFFF_FFFF, 0, 4096, false)
            .expect("log 04h");
        assert_eq!(nsid_list(&log), [1], "{how}: Changed Namespace List");
        assert_eq!(
            ctrl.namespace(1).expect("identify namespace"),
            ((mib << 20) / 4096, 4096),
            "{how}: NSZE"
        );
        assert_eq!(
            next_ua(&mut s),
            Some((0x6, 0x2a, 0x09)),
            "{how}: CAPACITY DATA HAS CHANGED"
        );
        assert_eq!(
            last_lba(&mut s),
            (mib << 20) / 512 - 1,
            "{how}: READ CAPACITY"
        );
        // The new blocks take I/O.
        let lba = u32::try_from((mib << 20) / 512 - 8).expect("lba");
        let rsp = s
            .write(0, lba, 512, 0, &srp_pattern(lba, 4096), Layout::Direct)
            .expect("write");
        assert_eq!(
            rsp.status,
            0,
            "{how}: WRITE at the new end: {:?}",
            rsp.sense_key()
        );
    }
    // Shrunk by another client: the exported bdev keeps its size (SPDK's bdev layer refuses a
    // block count below the current one while the bdev is open) and the hosts hear nothing.
    let aer = ctrl.park_aer(1 << 8);
    c.rbd(&["resize", "rbd/nvme0", "--size", "16M", "--allow-shrink"]);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        num_blocks(r, "Rbd0"),
        (32 << 20) / 4096,
        "the export keeps its size"
    );
    ctrl.admin
        .assert_none_complete_for(&[aer], Duration::from_millis(500));
    assert_eq!(ctrl.namespace(1).expect("identify").0, (32 << 20) / 4096);
    // The shrink really happened: librbd refuses a read past the image's new end.
    let past = ctrl.io[0]
        .cmd(
            read_sqe(1, (20 << 20) / 4096, 1),
            NvmeData::KeyedRead {
                len: 4096,
                invalidate: true,
            },
        )
        .expect("read past the shrunk image");
    assert!(
        !past.cqe.status.is_success(),
        "a read past the image's end succeeded"
    );
    // Grown again past the export: the watch (which handled the shrink before, in order) makes
    // the namespace follow.
    c.rbd(&["resize", "rbd/nvme0", "--size", "40M"]);
    let done = ctrl.admin.wait(aer).expect("AER").ok().expect("AER status");
    assert_eq!(done.cqe.dw0, 0x0004_0002);
    assert_eq!(ctrl.namespace(1).expect("identify").0, (40 << 20) / 4096);
    ctrl.shutdown().expect("shutdown");
    s.logout().expect("logout");
}

/// The bytes written at `lba` (differs per LBA, so misplaced data shows).
fn srp_pattern(lba: u32, len: usize) -> Vec<u8> {
    rtgt_tests::srp_initiator::pattern(u64::from(lba) + 1, len)
}

#[test]
fn nvme_and_srp_initiators_verify_io_on_rbd_bdevs_across_pause_and_resume() {
    let c = CephCluster::start("initiators");
    let r = gateway(&c);
    nvme_over_rbd(&r);
    srp_over_rbd(&r);
    resized_images(&c, &r);
    // The volumes are still there and the cluster can be detached cleanly.
    assert_eq!(r.ok("bdev_rbd_delete", json!({"name": "Rbd0"})), true);
    assert_eq!(r.ok("bdev_rbd_delete", json!({"name": "Rbd1"})), true);
    assert_eq!(
        r.ok("bdev_rbd_unregister_cluster", json!({"name": "ceph0"})),
        true
    );
}
