//! NVMe/TCP: the target with the TCP transport listening on 127.0.0.1, and the Rust NVMe/TCP
//! host (`rtgt_tests::tcp_host`) over loopback sockets, one initiator thread per queue.
//!
//! The host is a test tool (it allocates per command); its cost is in the initiator threads'
//! CPU, apart from the reactors' (`reactor_*` threads) that the window measures.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Instant;

use rtgt_tests::nvme_host::{read_sqe, write_sqe};
use rtgt_tests::tcp_host::{TcpConnectOpts, TcpCtrl, TcpQueue, free_port};
use target_core::target::{AdrFam, ListenAddr};

use crate::{Args, HostResult, Pattern, WindowResult, cpu, phase};

/// Runs the benchmark.
pub fn run(a: &Args) -> Result<(HostResult, WindowResult), String> {
    let max_io = (a.bs as u64).max(131072).next_power_of_two();
    let (t, dev_blocks) =
        crate::nvme::target(a, "TCP", serde_json::json!({ "max_io_size": max_io }))?;
    let port = free_port();
    let addr = ListenAddr::new("TCP", AdrFam::Ipv4, "127.0.0.1", &port.to_string());
    t.rt.block_on(t.target.add_listener(crate::nvme::NQN, addr))
        .map_err(|e| format!("listener: {e}"))?;
    let mut o = TcpConnectOpts::new(crate::nvme::NQN);
    o.io_queues = a.qpairs as u16;
    o.io_depth = a.qd.clamp(2, 128) as u16;
    let to = SocketAddr::from(([127, 0, 0, 1], port));
    let mut ctrl = TcpCtrl::connect(to, &o).map_err(|e| format!("connect: {e}"))?;
    let queues = std::mem::take(&mut ctrl.io);
    let phase = AtomicU8::new(phase::WARMUP);
    let reactors = t.target.reactors().clone();
    let (results, window) = std::thread::scope(|s| {
        let handles: Vec<_> = queues
            .into_iter()
            .enumerate()
            .map(|(i, q)| {
                let phase = &phase;
                std::thread::Builder::new()
                    .name(format!("initiator_{i}"))
                    .spawn_scoped(s, move || drive(a, q, dev_blocks, i, phase))
                    .expect("spawn")
            })
            .collect();
        let w = crate::drive_phases(a, &phase, "reactor_", Some(reactors));
        let r: Vec<Result<HostResult, String>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("initiator panicked".into()))
            })
            .collect();
        (r, w)
    });
    let mut total = HostResult::default();
    for r in results {
        total.merge(&r?);
    }
    drop(ctrl);
    drop(t);
    Ok((total, window))
}

/// One queue's initiator: keeps `qd` commands in flight until the phase says stop.
fn drive(
    a: &Args,
    mut q: TcpQueue,
    dev_blocks: u64,
    i: usize,
    phase: &AtomicU8,
) -> Result<HostResult, String> {
    let mut pat = Pattern::new(a, dev_blocks, (i + 1) as u64);
    let nlb = pat.blocks as u32;
    let qd = a.qd.min(usize::from(q.depth()));
    let wdata = vec![0x5Au8; a.bs];
    let mut inflight: HashMap<u16, (Instant, bool)> = HashMap::with_capacity(qd);
    let mut res = HostResult::default();
    let mut measuring = false;
    let mut cpu0 = 0;
    loop {
        let ph = phase.load(Ordering::Acquire);
        if ph == phase::MEASURE && !measuring {
            measuring = true;
            cpu0 = cpu::this_thread_ns();
        }
        if ph == phase::STOP {
            if measuring {
                res.cpu_ns = cpu::this_thread_ns() - cpu0;
                measuring = false;
            }
            if inflight.is_empty() {
                return Ok(res);
            }
        } else {
            while inflight.len() < qd {
                let (read, lba) = pat.next_io();
                let cid = if read {
                    q.submit(read_sqe(1, lba, nlb), None, a.bs as u32)?
                } else {
                    q.submit(write_sqe(1, lba, nlb), Some(wdata.clone()), 0)?
                };
                inflight.insert(cid, (Instant::now(), read));
            }
        }
        let c = q.wait_any()?;
        let Some((t0, read)) = inflight.remove(&c.cqe.cid) else {
            return Err(format!("completion of unknown cid {}", c.cqe.cid));
        };
        if !c.cqe.status.is_success() {
            res.errors += 1;
        }
        if measuring {
            res.ops += 1;
            res.reads += u64::from(read);
            res.hist.record(t0.elapsed().as_nanos() as u64);
        }
    }
}
