//! Preallocated per-queue resources: receives (a 64-byte command buffer and a separate,
//! aligned in-capsule data buffer each, so that in-capsule write data is block-aligned for the
//! bdev), requests (with their 16-byte response buffer and bdev I/O), and the registrations
//! that cover them. A resource set belongs to a shared receive queue (one per poll group and
//! device) or, with `no_srq`, to one queue pair.

use std::collections::VecDeque;
use std::sync::Arc;

use fabric::{Access, Mr, RecvWr, Sge, SgeList};
use iobuf::{DmaRegion, IoBuf};
use rdma_plumbing::WrId;
use slab::Slab;
use target_core::nvme::Direction;
use target_core::nvme::spec::{CQE_SIZE, SQE_SIZE};
use target_core::nvme_exec::NvmeReq;

use crate::request::lifecycle::Lifecycle;
use crate::transport::DevCtx;

/// "No key".
pub(crate) const NONE: u32 = u32::MAX;

/// Work-request kinds ([`WrId::kind`]). The key is a receive slot (RECV), a request slot
/// (SEND, READ, WRITE; generation: the request's epoch) or a queue pair (MARKER; generation:
/// the queue pair's epoch). Receives of a queue pair's own receive queue carry its epoch.
pub(crate) mod kind {
    /// A receive (shared receive queue or the queue pair's own).
    pub const RECV: u8 = 1;
    /// A response SEND.
    pub const SEND: u8 = 2;
    /// An RDMA READ of host data.
    pub const READ: u8 = 3;
    /// An RDMA WRITE of data to the host (unsignaled: only errors complete).
    pub const WRITE: u8 = 4;
    /// The drain marker of a closing queue pair.
    pub const MARKER: u8 = 5;
}

/// Whose resource set something belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Owner {
    /// The shared receive queue of device poller `n`.
    Dev(usize),
    /// The queue pair with this key (`no_srq`).
    Qp(u32),
}

/// One receive slot.
pub(crate) struct Recv {
    pub owner: Owner,
    pub cmd: IoBuf,
    pub cmd_lkey: u32,
    /// The in-capsule data buffer; lent to a request (and its bdev I/O) while in use.
    pub icd: Option<IoBuf>,
    pub icd_lkey: u32,
    pub posted: bool,
    /// Its slot in the shared receive queue, which keeps its work request for reposting
    /// ([`NONE`] on a queue pair's own receive queue).
    pub srq_slot: u32,
    /// The queue pair the last completed receive came from, and its length.
    pub qp: u32,
    pub len: u32,
}

impl Recv {
    /// The receive work request for this slot (the in-capsule buffer must be home);
    /// `generation`: the owning queue pair's epoch (0 on a shared receive queue).
    pub fn wr(&self, key: u32, generation: u16) -> Option<RecvWr> {
        let icd = self.icd.as_ref()?;
        let mut sges = SgeList::new();
        let _ = sges.push(Sge {
            addr: self.cmd.base_addr(),
            length: SQE_SIZE as u32,
            lkey: self.cmd_lkey,
        });
        let _ = sges.push(Sge {
            addr: icd.base_addr(),
            length: icd.capacity() as u32,
            lkey: self.icd_lkey,
        });
        Some(RecvWr::new(
            WrId::new(kind::RECV, key, generation).pack(),
            sges,
        ))
    }
}

/// Where a request's data buffers came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Data {
    None,
    InCapsule,
    Pool,
}

/// One request slot.
pub(crate) struct Req {
    pub ex: NvmeReq,
    /// Where the request is in its lifecycle (changed only by the poll group's driver).
    pub life: Lifecycle,
    pub owner: Owner,
    pub qp: u32,
    pub recv: u32,
    pub epoch: u16,
    pub dir: Direction,
    pub data: Data,
    /// RDMA WRITEs of the response's data (controller-to-host), posted before its SEND.
    pub writes: u16,
    /// Send-queue slots the response chain took (WRITEs + SEND).
    pub send_slots: u16,
    pub rsp: IoBuf,
    pub rsp_lkey: u32,
    pub started: u64,
}

impl Req {
    /// The 48-bit token (bdev I/O tag, admission token): key and generation.
    pub fn token(key: u32, epoch: u16) -> u64 {
        u64::from(key) | u64::from(epoch) << 32
    }

    /// Splits a token.
    pub fn split(token: u64) -> (u32, u16) {
        (token as u32, (token >> 32) as u16)
    }

    /// The id of a work request of this request (SEND, READ, WRITE).
    pub fn wr_id(key: u32, epoch: u16, kind: u8) -> u64 {
        WrId::new(kind, key, epoch).pack()
    }
}

/// A resource set: receives, requests, and the free and waiting lists that pair them.
pub(crate) struct ResSet {
    pub free_reqs: Vec<u32>,
    /// Completed receives waiting for a free request.
    pub incoming: VecDeque<u32>,
    pub reqs: Vec<u32>,
    pub recvs: Vec<u32>,
    _mrs: [Mr; 3],
}

impl ResSet {
    /// Allocates and registers `n` receives and `n` requests on `dev`.
    pub fn new(
        dev: &DevCtx,
        n: usize,
        icd_size: usize,
        owner: Owner,
        reqs: &mut Slab<Req>,
        recvs: &mut Slab<Recv>,
        epoch: &mut u16,
    ) -> Result<ResSet, String> {
        let alloc = |len: usize| DmaRegion::new(len).map_err(|e| e.to_string());
        let cmd_region = alloc(n * SQE_SIZE)?;
        let icd_region = alloc(n * icd_size)?;
        let rsp_region = alloc(n * CQE_SIZE)?;
        let reg = |r: &Arc<DmaRegion>, a: Access| {
            dev.pd
                .register(r, a)
                .map_err(|e| format!("cannot register queue buffers on {}: {e}", dev.name))
        };
        let cmd_mr = reg(&cmd_region, Access::LOCAL_WRITE)?;
        let icd_mr = reg(&icd_region, Access::LOCAL_WRITE)?;
        let rsp_mr = reg(&rsp_region, Access::NONE)?;
        let cmds = cmd_region.split(SQE_SIZE).map_err(|e| e.to_string())?;
        let icds = icd_region.split(icd_size).map_err(|e| e.to_string())?;
        let rsps = rsp_region.split(CQE_SIZE).map_err(|e| e.to_string())?;
        let mut set = ResSet {
            free_reqs: Vec::with_capacity(n),
            incoming: VecDeque::with_capacity(n),
            reqs: Vec::with_capacity(n),
            recvs: Vec::with_capacity(n),
            _mrs: [cmd_mr, icd_mr, rsp_mr],
        };
        let (cmd_lkey, icd_lkey, rsp_lkey) =
            (set._mrs[0].lkey(), set._mrs[1].lkey(), set._mrs[2].lkey());
        for (cmd, icd) in cmds.into_iter().zip(icds) {
            let k = recvs.insert(Recv {
                owner,
                cmd,
                cmd_lkey,
                icd: Some(icd),
                icd_lkey,
                posted: false,
                srq_slot: NONE,
                qp: NONE,
                len: 0,
            });
            set.recvs.push(k as u32);
        }
        for rsp in rsps {
            *epoch = epoch.wrapping_add(1);
            let key = reqs.vacant_key() as u32;
            let k = reqs.insert(Req {
                ex: NvmeReq::new(Req::token(key, *epoch)),
                life: Lifecycle::default(),
                owner,
                qp: NONE,
                recv: NONE,
                epoch: *epoch,
                dir: Direction::None,
                data: Data::None,
                writes: 0,
                send_slots: 0,
                rsp,
                rsp_lkey,
                started: 0,
            });
            set.reqs.push(k as u32);
            set.free_reqs.push(k as u32);
        }
        // Pop from the end: hand out low keys first (cache-friendlier).
        set.free_reqs.reverse();
        Ok(set)
    }

    /// Removes the set's slots from the arenas (all requests must be free).
    pub fn release(self, reqs: &mut Slab<Req>, recvs: &mut Slab<Recv>) {
        for k in &self.reqs {
            if reqs.contains(*k as usize) {
                reqs.remove(*k as usize);
            }
        }
        for k in &self.recvs {
            if recvs.contains(*k as usize) {
                recvs.remove(*k as usize);
            }
        }
    }
}
