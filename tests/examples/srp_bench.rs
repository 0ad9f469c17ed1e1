//! SRP on the simulated fabric: how fast the target's data path moves commands when the wire
//! costs (almost) nothing. A benchmark, not a test: it prints figures and asserts nothing
//! about them.
//!
//! ```text
//! cargo run --release -p rtgt-tests --example srp_bench -- [--secs 5] [--qd 32] [--bs 4096]
//!     [--rw read|write|mixed] [--initiators 1] [--reactors 1] [--bdev null|malloc]
//!     [--layout direct|indirect|immediate]
//! ```
//!
//! Each initiator runs on its own thread with its own channel and keeps `qd` commands in
//! flight at random block-aligned offsets.

use std::time::{Duration, Instant};

use rtgt_tests::srp_initiator::{Data, Layout, LoginParams, SrpInitiator, rw10, split};
use rtgt_tests::{HOST_IP, TARGET_IP, TestTarget};
use serde_json::json;
use transport_srp::proto::PortId;

struct Args {
    secs: u64,
    qd: usize,
    bs: u32,
    rw: String,
    initiators: usize,
    reactors: usize,
    bdev: String,
    layout: Layout,
}

fn args() -> Args {
    let mut a = Args {
        secs: 5,
        qd: 32,
        bs: 4096,
        rw: "read".into(),
        initiators: 1,
        reactors: 1,
        bdev: "null".into(),
        layout: Layout::Direct,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    for p in v.chunks(2) {
        let val = p.get(1).cloned().unwrap_or_default();
        match p[0].as_str() {
            "--secs" => a.secs = val.parse().expect("--secs"),
            "--qd" => a.qd = val.parse().expect("--qd"),
            "--bs" => a.bs = val.parse().expect("--bs"),
            "--rw" => a.rw = val,
            "--initiators" => a.initiators = val.parse().expect("--initiators"),
            "--reactors" => a.reactors = val.parse().expect("--reactors"),
            "--bdev" => a.bdev = val,
            "--layout" => {
                a.layout = match val.as_str() {
                    "direct" => Layout::Direct,
                    "indirect" => Layout::Indirect,
                    "immediate" => Layout::Immediate,
                    x => panic!("--layout {x}"),
                }
            }
            x => panic!("unknown option {x}"),
        }
    }
    a
}

fn main() {
    let a = args();
    let t = TestTarget::start(a.reactors);
    t.transport("SRP", json!({}));
    let blocks = (256u64 << 20) / 512;
    match a.bdev.as_str() {
        "malloc" => drop(t.malloc("B0", blocks, 512)),
        _ => drop(t.null("B0", blocks, 512)),
    }
    let nqn = "nqn.2016-06.io.rtgt:bench";
    t.subsystem(nqn, true);
    t.add_ns(nqn, "B0");
    let port = 4800;
    t.listen(nqn, "SRP", port);
    let target_port = transport_srp::port_id::derived_target_port_id(nqn);
    let addr = std::net::SocketAddr::new(TARGET_IP.parse().unwrap(), port);
    let start = Instant::now() + Duration::from_millis(500);
    let threads: Vec<_> = (0..a.initiators)
        .map(|n| {
            let fabric = t.fabric.clone();
            let (qd, bs, rw, secs, layout) = (a.qd, a.bs, a.rw.clone(), a.secs, a.layout);
            std::thread::spawn(move || {
                let mut p =
                    LoginParams::linux(PortId::from_halves(0, 0x1000 + n as u64), target_port);
                p.src = Some(std::net::SocketAddr::new(HOST_IP.parse().unwrap(), 0));
                p.multi_channel = n > 0;
                p.data_size = qd * bs as usize;
                let mut i = SrpInitiator::login(&fabric, addr, &p).expect("login");
                let span = (blocks * 512 / u64::from(bs)) as u32;
                let mut x = 0x9E37_79B9u32.wrapping_mul(n as u32 + 1) | 1;
                let mut next = |slot: usize, i: &mut SrpInitiator, k: u64| {
                    x ^= x << 13;
                    x ^= x >> 17;
                    x ^= x << 5;
                    let lba = (x % span) * (bs / 512);
                    let write = match rw.as_str() {
                        "write" => true,
                        "mixed" => k.is_multiple_of(2),
                        _ => false,
                    };
                    let off = slot * bs as usize;
                    let layout = if write || layout != Layout::Immediate {
                        layout
                    } else {
                        Layout::Direct
                    };
                    let segs = split(off, bs, layout);
                    let (op, d) = if write {
                        (0x2a, Data::Out(segs))
                    } else {
                        (0x28, Data::In(segs))
                    };
                    i.command(0, &rw10(op, lba, (bs / 512) as u16), &d, layout, false)
                        .expect("command")
                };
                while Instant::now() < start {
                    std::thread::sleep(Duration::from_millis(1));
                }
                let mut tags = std::collections::HashMap::new();
                let mut k = 0u64;
                for slot in 0..qd {
                    tags.insert(next(slot, &mut i, k), slot);
                    k += 1;
                }
                let end = Instant::now() + Duration::from_secs(secs);
                let mut done = 0u64;
                while Instant::now() < end {
                    let Some(r) = i.next_response(Duration::from_secs(5)).expect("poll") else {
                        panic!("no response within 5 s");
                    };
                    assert_eq!(r.status, 0, "{r:?}");
                    done += 1;
                    let slot = tags.remove(&r.tag).expect("known tag");
                    tags.insert(next(slot, &mut i, k), slot);
                    k += 1;
                }
                while !tags.is_empty() {
                    let r = i
                        .next_response(Duration::from_secs(5))
                        .expect("poll")
                        .expect("drain");
                    tags.remove(&r.tag);
                }
                done
            })
        })
        .collect();
    let total: u64 = threads
        .into_iter()
        .map(|h| h.join().expect("initiator"))
        .sum();
    let secs = a.secs as f64;
    let iops = total as f64 / secs;
    println!(
        "srp sim: {} {} B qd {} x{} initiators, {} reactor(s), {} bdev, {:?}: {:.0} IOPS, {:.1} MiB/s",
        a.rw,
        a.bs,
        a.qd,
        a.initiators,
        a.reactors,
        a.bdev,
        a.layout,
        iops,
        iops * f64::from(a.bs) / (1 << 20) as f64
    );
    let s = t.rt.block_on(t.target.stats());
    for pg in s["poll_groups"].as_array().unwrap() {
        for tr in pg["transports"].as_array().unwrap() {
            if tr["trtype"] == "SRP" {
                println!("  {}: {}", pg["name"], tr);
            }
        }
    }
}
