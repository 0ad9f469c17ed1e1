//! The bare simulated fabric, no target: an initiator thread sends 64-byte commands and a
//! "target" thread answers each with an RDMA WRITE of `bs` bytes (reads) or an RDMA READ
//! (writes) and a 16-byte SEND, reposting its receive: the NVMe/RDMA exchange without any
//! NVMe. Its figures are the floor the real target is compared with.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::time::{Duration, Instant};

use fabric::{
    Access, CmEvent, CmEventKind, CmId, ConnParam, Cq, EventChannel, Fabric, FabricError, Mr, Pd,
    Qp, QpCap, QpInit, RecvWr, SendWr, SgeList, SimNetwork, WcOpcode, WorkCompletion,
    wait_readable,
};
use iobuf::DmaRegion;

use crate::{Args, HostResult, Pattern, WindowResult, cpu, phase};

struct Side {
    id: CmId,
    qp: Qp,
    _pd: Pd,
    cq: Cq,
    mr: Mr,
    _region: std::sync::Arc<DmaRegion>,
}

fn wait(ch: &EventChannel) -> Result<CmEvent, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(e) = ch.get_event().map_err(|e| e.to_string())? {
            return Ok(e);
        }
        if Instant::now() > deadline {
            return Err("no connection event".into());
        }
        let _ = wait_readable(ch.fd(), Duration::from_millis(50));
    }
}

fn side(id: CmId, depth: u32, bytes: usize) -> Result<Side, String> {
    let e = |e: FabricError| e.to_string();
    let dev = id.device().ok_or("no device")?;
    let pd = dev.alloc_pd().map_err(e)?;
    let cq = dev.create_cq(8 * depth + 64, None).map_err(e)?;
    let qp = id
        .create_qp(&QpInit {
            pd: &pd,
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 3 * depth + 4,
                max_recv_wr: depth + 1,
                max_send_sge: 2,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            sq_sig_all: false,
        })
        .map_err(e)?;
    let region = DmaRegion::new(bytes).map_err(|e| e.to_string())?;
    let mr = pd.register(&region, Access::ALL).map_err(e)?;
    Ok(Side {
        id,
        qp,
        _pd: pd,
        cq,
        mr,
        _region: region,
    })
}

// Layout of both regions: commands at 0, responses after, data after that.
fn layout(qd: usize) -> (u64, u64) {
    let rsp = (qd * 64) as u64;
    let data = (rsp + (qd * 16) as u64).next_multiple_of(4096);
    (rsp, data)
}

/// Runs the benchmark.
pub fn run(a: &Args) -> Result<(HostResult, WindowResult), String> {
    let qd = a.qd;
    let depth = qd as u32;
    let (_, data_off) = layout(qd);
    let bytes = data_off as usize + qd * a.bs;
    let net = SimNetwork::new();
    let t_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
    let i_ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
    let e = |e: FabricError| e.to_string();
    net.add_device("tgt", t_ip).map_err(e)?;
    net.add_device("ini", i_ip).map_err(e)?;
    let f = Fabric::sim(&net);
    let tch = f.create_event_channel().map_err(e)?;
    let ich = f.create_event_channel().map_err(e)?;
    let l = tch.create_id().map_err(e)?;
    let addr = SocketAddr::new(t_ip, 4420);
    l.bind(addr).map_err(e)?;
    l.listen(8).map_err(e)?;
    let iid = ich.create_id().map_err(e)?;
    iid.resolve_addr(Some(SocketAddr::new(i_ip, 0)), addr, 1000)
        .map_err(e)?;
    wait(&ich)?;
    let ini = side(iid, depth, bytes)?;
    ini.id.resolve_route(1000).map_err(e)?;
    wait(&ich)?;
    ini.id.connect(&ConnParam::default()).map_err(e)?;
    let CmEventKind::ConnectRequest(req) = wait(&tch)?.kind else {
        return Err("expected a connect request".into());
    };
    let tgt = side(req.id, depth, bytes)?;
    tgt.id.accept(&ConnParam::default()).map_err(e)?;
    wait(&ich)?;
    wait(&tch)?;
    drop(l);

    let stop = AtomicBool::new(false);
    let phase = AtomicU8::new(phase::WARMUP);
    let (host_key, host_base) = (ini.mr.rkey(), ini.mr.addr());
    let (res, window) = std::thread::scope(|s| {
        let target = std::thread::Builder::new()
            .name("reactor_sim".into())
            .spawn_scoped(s, || target_loop(a, &tgt, host_base, host_key, &stop))
            .expect("spawn");
        let host = std::thread::Builder::new()
            .name("initiator_0".into())
            .spawn_scoped(s, || host_loop(a, &ini, &phase))
            .expect("spawn");
        let w = crate::drive_phases(a, &phase, "reactor_", None);
        let r = host
            .join()
            .unwrap_or_else(|_| Err("initiator panicked".into()));
        stop.store(true, Ordering::Relaxed);
        let _ = target.join();
        (r, w)
    });
    Ok((res?, window))
}

fn target_loop(a: &Args, tgt: &Side, host_base: u64, host_key: u32, stop: &AtomicBool) {
    let qd = a.qd as u64;
    let bs = a.bs as u32;
    let (rsp_off, data_off) = layout(a.qd);
    let base = tgt.mr.addr();
    let recv = |i: u64| RecvWr::new(i, SgeList::one(tgt.mr.sge(base + i * 64, 64)));
    let wrs: Vec<RecvWr> = (0..qd).map(recv).collect();
    if tgt.qp.post_recv(&wrs).is_err() {
        return;
    }
    let mut wc = [WorkCompletion::default(); 32];
    let mut sends = Vec::with_capacity(64);
    let mut recvs = Vec::with_capacity(32);
    let mut n_resp = 0u64;
    // Commands arrive in the order they were sent: the same pattern tells read from write.
    let mut pat = Pattern::new(a, 1 << 20, 1);
    while !stop.load(Ordering::Relaxed) {
        let n = tgt.cq.poll(&mut wc);
        for w in &wc[..n] {
            if w.opcode != WcOpcode::Recv {
                continue;
            }
            let slot = w.wr_id;
            // A real command would carry the host buffer's address and key.
            let (read, _) = pat.next_io();
            let local = tgt.mr.sge(base + data_off + slot * u64::from(bs), bs);
            let remote = host_base + data_off + slot * u64::from(bs);
            if read {
                sends.push(
                    SendWr::rdma_write(slot, SgeList::one(local), remote, host_key)
                        .with_signaled(false),
                );
            } else {
                sends.push(
                    SendWr::rdma_read(slot, SgeList::one(local), remote, host_key)
                        .with_signaled(false),
                );
            }
            n_resp += 1;
            sends.push(
                SendWr::send(
                    slot,
                    SgeList::one(tgt.mr.sge(base + rsp_off + slot * 16, 16)),
                )
                .with_signaled(n_resp.is_multiple_of(16)),
            );
            recvs.push(recv(slot));
        }
        if !recvs.is_empty() {
            let _ = tgt.qp.post_recv(&recvs);
            recvs.clear();
        }
        if !sends.is_empty() {
            let _ = tgt.qp.post_send(&sends);
            sends.clear();
        }
    }
}

fn host_loop(a: &Args, ini: &Side, phase: &AtomicU8) -> Result<HostResult, String> {
    let qd = a.qd as u64;
    let (rsp_off, _) = layout(a.qd);
    let base = ini.mr.addr();
    let recv = |i: u64| RecvWr::new(i, SgeList::one(ini.mr.sge(base + rsp_off + i * 16, 16)));
    let wrs: Vec<RecvWr> = (0..qd).map(recv).collect();
    ini.qp.post_recv(&wrs).map_err(|e| e.to_string())?;
    let mut pat = Pattern::new(a, 1 << 20, 1);
    let mut start = vec![Instant::now(); a.qd];
    let mut read = vec![false; a.qd];
    let cmd =
        |i: u64, now: Instant, pat: &mut Pattern, start: &mut [Instant], read: &mut [bool]| {
            let (r, _) = pat.next_io();
            start[i as usize] = now;
            read[i as usize] = r;
            SendWr::send(i, SgeList::one(ini.mr.sge(base + i * 64, 64))).with_signaled(i % 16 == 15)
        };
    let now = Instant::now();
    let first: Vec<SendWr> = (0..qd)
        .map(|i| cmd(i, now, &mut pat, &mut start, &mut read))
        .collect();
    ini.qp.post_send(&first).map_err(|e| e.to_string())?;
    let mut wc = [WorkCompletion::default(); 32];
    let mut sends = Vec::with_capacity(32);
    let mut recvs = Vec::with_capacity(32);
    let mut res = HostResult::default();
    let mut measuring = false;
    let mut cpu0 = 0;
    let mut outstanding = qd;
    let mut stopping = false;
    loop {
        let ph = phase.load(Ordering::Acquire);
        let now = Instant::now();
        if ph == phase::MEASURE && !measuring {
            measuring = true;
            cpu0 = cpu::this_thread_ns();
        }
        if ph == phase::STOP && !stopping {
            stopping = true;
            if measuring {
                res.cpu_ns = cpu::this_thread_ns() - cpu0;
            }
            measuring = false;
        }
        let n = ini.cq.poll(&mut wc);
        for w in &wc[..n] {
            if w.opcode != WcOpcode::Recv {
                continue;
            }
            if !w.status.is_success() {
                return Err(format!("{w:?}"));
            }
            let i = w.wr_id;
            outstanding -= 1;
            if measuring {
                res.ops += 1;
                res.reads += u64::from(read[i as usize]);
                res.hist
                    .record(now.saturating_duration_since(start[i as usize]).as_nanos() as u64);
            }
            recvs.push(recv(i));
            if !stopping {
                sends.push(cmd(i, now, &mut pat, &mut start, &mut read));
                outstanding += 1;
            }
        }
        if !recvs.is_empty() {
            ini.qp.post_recv(&recvs).map_err(|e| e.to_string())?;
            recvs.clear();
        }
        if !sends.is_empty() {
            ini.qp.post_send(&sends).map_err(|e| e.to_string())?;
            sends.clear();
        }
        if stopping && outstanding == 0 {
            return Ok(res);
        }
    }
}
