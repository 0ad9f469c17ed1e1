//! Throughput of the `sim` provider (a benchmark, not a test):
//!
//! ```text
//! cargo run -p fabric --release --example sim_bench [seconds] [write|nvme1|sendrecv|nvme2]
//! ```
//!
//! 1. RDMA WRITE 4 KiB from one thread (every 16th signaled), batches of 16 linked requests.
//! 2. SEND/RECV 64 B messages between two threads.
//! 3. An NVMe-over-RDMA-like read loop: an initiator thread sends 64-byte commands (queue depth
//!    128); a target thread receives each, answers with a linked RDMA WRITE of 4 KiB plus a
//!    16-byte SEND, and reposts the receive. Reports I/O per second on the target's one thread.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use fabric::mem::DmaRegion;
use fabric::*;

struct Side {
    _id: CmId,
    qp: Qp,
    _pd: Pd,
    scq: Cq,
    rcq: Cq,
    mr: Mr,
}

fn wait(ch: &EventChannel) -> CmEvent {
    loop {
        if let Some(e) = ch.get_event().expect("event") {
            return e;
        }
        wait_readable(ch.fd(), Duration::from_secs(1)).expect("poll");
    }
}

fn side(id: CmId, depth: u32) -> Side {
    let dev = id.device().expect("device");
    let pd = dev.alloc_pd().expect("pd");
    let scq = dev.create_cq(4 * depth, None).expect("cq");
    let rcq = dev.create_cq(4 * depth, None).expect("cq");
    let qp = id
        .create_qp(&QpInit {
            pd: &pd,
            send_cq: &scq,
            recv_cq: &rcq,
            srq: None,
            cap: QpCap {
                max_send_wr: 2 * depth,
                max_recv_wr: depth,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .expect("qp");
    let region = DmaRegion::new(depth as usize * 8192).expect("region");
    let mr = pd.register(&region, Access::ALL).expect("mr");
    Side {
        _id: id,
        qp,
        _pd: pd,
        scq,
        rcq,
        mr,
    }
}

/// Connects an initiator on 10.0.0.2 to a target on 10.0.0.1; returns (target, initiator).
fn pair(depth: u32) -> (Side, Side, SimNetwork) {
    let net = SimNetwork::new();
    let t_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let i_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    net.add_device("tgt", t_ip).expect("dev");
    net.add_device("ini", i_ip).expect("dev");
    let f = Fabric::sim(&net);
    let tch = f.create_event_channel().expect("ch");
    let ich = f.create_event_channel().expect("ch");
    let l = tch.create_id().expect("id");
    let addr = SocketAddr::new(t_ip, 4420);
    l.bind(addr).expect("bind");
    l.listen(8).expect("listen");
    let iid = ich.create_id().expect("id");
    iid.resolve_addr(Some(SocketAddr::new(i_ip, 0)), addr, 1000)
        .expect("resolve");
    wait(&ich);
    let ini = side(iid, depth);
    ini._id.resolve_route(1000).expect("route");
    wait(&ich);
    ini._id.connect(&ConnParam::default()).expect("connect");
    let CmEventKind::ConnectRequest(req) = wait(&tch).kind else {
        panic!("expected a connect request")
    };
    let tgt = side(req.id, depth);
    tgt._id.accept(&ConnParam::default()).expect("accept");
    wait(&ich);
    wait(&tch);
    drop(l);
    (tgt, ini, net)
}

fn report(name: &str, ops: u64, bytes_per_op: u64, el: Duration) {
    let s = el.as_secs_f64();
    println!(
        "{name:<44} {:>12.0} ops/s {:>8.2} GB/s",
        ops as f64 / s,
        (ops * bytes_per_op) as f64 / s / 1e9
    );
}

fn bench_write(secs: f64) {
    let depth = 256;
    let (tgt, ini, _net) = pair(depth);
    let (raddr, rkey) = (ini.mr.addr(), ini.mr.rkey());
    let mut wrs = [SendWr::rdma_write(0, SgeList::new(), 0, 0); 16];
    let mut wc = [WorkCompletion::default(); 32];
    let mut ops = 0u64;
    let mut inflight = 0u32;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut slot = 0u64;
    while Instant::now() < end {
        for _ in 0..64 {
            if inflight + 16 <= depth {
                for (i, w) in wrs.iter_mut().enumerate() {
                    let off = (slot % depth as u64) * 4096;
                    slot += 1;
                    *w = SendWr::rdma_write(
                        slot,
                        SgeList::one(tgt.mr.sge(tgt.mr.addr() + off, 4096)),
                        raddr + off,
                        rkey,
                    )
                    .with_signaled(i == 15);
                }
                tgt.qp.post_send(&wrs).expect("post");
                inflight += 16;
            }
            let n = tgt.scq.poll(&mut wc);
            for w in &wc[..n] {
                assert!(w.status.is_success(), "{w:?}");
                inflight -= 16;
                ops += 16;
            }
        }
    }
    report("RDMA WRITE 4 KiB, 1 thread", ops, 4096, t0.elapsed());
}

fn bench_send_recv(secs: f64) {
    let depth = 256u32;
    let (tgt, ini, _net) = pair(depth);
    let stop = Arc::new(AtomicBool::new(false));
    // Receiver: the target reposts each receive as it completes.
    let rx = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let base = tgt.mr.addr();
            let recv = |i: u64| RecvWr::new(i, SgeList::one(tgt.mr.sge(base + i * 64, 64)));
            let wrs: Vec<RecvWr> = (0..depth as u64).map(recv).collect();
            tgt.qp.post_recv(&wrs).expect("recv");
            let mut wc = [WorkCompletion::default(); 32];
            let mut n_total = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let n = tgt.rcq.poll(&mut wc);
                for w in &wc[..n] {
                    assert!(w.status.is_success(), "{w:?}");
                    tgt.qp.post_recv([&recv(w.wr_id)]).expect("repost");
                }
                n_total += n as u64;
            }
            (n_total, tgt)
        })
    };
    let mut wc = [WorkCompletion::default(); 32];
    let mut inflight = 0u32;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    let mut sent = 0u64;
    let send = SendWr::send(1, SgeList::one(ini.mr.sge(ini.mr.addr(), 64)));
    while Instant::now() < end {
        for _ in 0..256 {
            if inflight < depth / 2 {
                ini.qp.post_send([&send]).expect("send");
                inflight += 1;
            }
            let n = ini.scq.poll(&mut wc);
            inflight -= n as u32;
            sent += n as u64;
        }
    }
    let el = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    let (received, _tgt) = rx.join().expect("receiver");
    report("SEND/RECV 64 B, sender + receiver threads", sent, 64, el);
    let _ = received;
}

fn bench_nvme_like(secs: f64) {
    let qd = 128u32;
    let (tgt, ini, _net) = pair(qd);
    let stop = Arc::new(AtomicBool::new(false));
    // Layout of both regions: commands at 0, responses at 8 KiB, data at 16 KiB.
    let (host_data, host_key) = (ini.mr.addr() + 16384, ini.mr.rkey());
    // Target reactor: one thread.
    let target = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let base = tgt.mr.addr();
            let recv = |i: u64| RecvWr::new(i, SgeList::one(tgt.mr.sge(base + i * 64, 64)));
            let wrs: Vec<RecvWr> = (0..qd as u64).map(recv).collect();
            tgt.qp.post_recv(&wrs).expect("recv");
            let mut wc = [WorkCompletion::default(); 32];
            let mut ios = 0u64;
            let mut resp_inflight = 0u32;
            let t0 = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                let n = tgt.rcq.poll(&mut wc);
                for w in &wc[..n] {
                    assert!(w.status.is_success(), "{w:?}");
                    let slot = w.wr_id;
                    // (A real command would carry the host buffer's address and key.)
                    let data = base + 16384 + slot * 4096;
                    let rsp = base + 8192 + slot * 16;
                    let (haddr, hkey) = (host_data + slot * 4096, host_key);
                    let pair = [
                        SendWr::rdma_write(slot, SgeList::one(tgt.mr.sge(data, 4096)), haddr, hkey)
                            .with_signaled(false),
                        SendWr::send(slot, SgeList::one(tgt.mr.sge(rsp, 16)))
                            .with_signaled(resp_inflight % 16 == 15),
                    ];
                    tgt.qp.post_send(&pair).expect("respond");
                    resp_inflight += 1;
                    tgt.qp.post_recv([&recv(slot)]).expect("repost");
                }
                ios += n as u64;
                let m = tgt.scq.poll(&mut wc);
                for w in &wc[..m] {
                    assert!(w.status.is_success(), "{w:?}");
                }
            }
            (ios, t0.elapsed(), tgt)
        })
    };
    // Initiator: keeps qd commands outstanding.
    let base = ini.mr.addr();
    let recv = |i: u64| RecvWr::new(i, SgeList::one(ini.mr.sge(base + 8192 + i * 16, 16)));
    let wrs: Vec<RecvWr> = (0..qd as u64).map(recv).collect();
    ini.qp.post_recv(&wrs).expect("recv");
    let mut wc = [WorkCompletion::default(); 32];
    let cmd = |i: u64| {
        SendWr::send(i, SgeList::one(ini.mr.sge(base + i * 64, 64))).with_signaled(i % 16 == 15)
    };
    for i in 0..qd as u64 {
        ini.qp.post_send([&cmd(i)]).expect("cmd");
    }
    let end = Instant::now() + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        for _ in 0..256 {
            let n = ini.rcq.poll(&mut wc);
            for w in &wc[..n] {
                assert!(w.status.is_success(), "{w:?}");
                ini.qp.post_recv([&recv(w.wr_id)]).expect("repost");
                ini.qp.post_send([&cmd(w.wr_id)]).expect("cmd");
            }
            let _ = ini.scq.poll(&mut wc);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let (ios, el, _tgt) = target.join().expect("target");
    report(
        "NVMe-like 4 KiB reads, target on 1 thread (QD 128)",
        ios,
        4096,
        el,
    );
}

/// Initiator and target interleaved on one thread: the CPU cost of both sides of an I/O.
fn bench_nvme_like_one_thread(secs: f64) {
    let qd = 128u32;
    let (tgt, ini, _net) = pair(qd);
    let (host_data, host_key) = (ini.mr.addr() + 16384, ini.mr.rkey());
    let tbase = tgt.mr.addr();
    let trecv = |i: u64| RecvWr::new(i, SgeList::one(tgt.mr.sge(tbase + i * 64, 64)));
    let wrs: Vec<RecvWr> = (0..qd as u64).map(trecv).collect();
    tgt.qp.post_recv(&wrs).expect("recv");
    let ibase = ini.mr.addr();
    let irecv = |i: u64| RecvWr::new(i, SgeList::one(ini.mr.sge(ibase + 8192 + i * 16, 16)));
    let wrs: Vec<RecvWr> = (0..qd as u64).map(irecv).collect();
    ini.qp.post_recv(&wrs).expect("recv");
    let cmd = |i: u64| {
        SendWr::send(i, SgeList::one(ini.mr.sge(ibase + i * 64, 64))).with_signaled(i % 16 == 15)
    };
    for i in 0..qd as u64 {
        ini.qp.post_send([&cmd(i)]).expect("cmd");
    }
    let mut wc = [WorkCompletion::default(); 32];
    let mut ios = 0u64;
    let mut nresp = 0u64;
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(secs);
    while Instant::now() < end {
        for _ in 0..16 {
            // Target side.
            let n = tgt.rcq.poll(&mut wc);
            for w in &wc[..n] {
                let slot = w.wr_id;
                let pair = [
                    SendWr::rdma_write(
                        slot,
                        SgeList::one(tgt.mr.sge(tbase + 16384 + slot * 4096, 4096)),
                        host_data + slot * 4096,
                        host_key,
                    )
                    .with_signaled(false),
                    SendWr::send(slot, SgeList::one(tgt.mr.sge(tbase + 8192 + slot * 16, 16)))
                        .with_signaled(nresp % 16 == 15),
                ];
                nresp += 1;
                tgt.qp.post_send(&pair).expect("respond");
                tgt.qp.post_recv([&trecv(slot)]).expect("repost");
            }
            let _ = tgt.scq.poll(&mut wc);
            // Initiator side.
            let n = ini.rcq.poll(&mut wc);
            for w in &wc[..n] {
                ini.qp.post_recv([&irecv(w.wr_id)]).expect("repost");
                ini.qp.post_send([&cmd(w.wr_id)]).expect("cmd");
            }
            ios += n as u64;
            let _ = ini.scq.poll(&mut wc);
        }
    }
    report(
        "NVMe-like 4 KiB reads, both sides on 1 thread",
        ios,
        4096,
        t0.elapsed(),
    );
}

fn main() {
    let secs: f64 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let which = std::env::args().nth(2).unwrap_or_else(|| "all".into());
    let run = |name: &str| which == "all" || which == name;
    if run("write") {
        bench_write(secs);
    }
    if run("nvme1") {
        bench_nvme_like_one_thread(secs);
    }
    // The two-thread runs need two free cores; on a busy machine they measure the scheduler.
    if run("sendrecv") {
        bench_send_recv(secs);
    }
    if run("nvme2") {
        bench_nvme_like(secs);
    }
}
