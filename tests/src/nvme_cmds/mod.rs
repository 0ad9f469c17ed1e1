//! NVMe commands the same on every transport: a [`NvmeQueue`] is one queue of a test host
//! (the NVMe/RDMA host's [`HostQueue`], the NVMe/TCP host's [`TcpQueue`]), and the helpers
//! here build, send and decode the commands that core features answer — Get Log Page, Get/Set
//! Features, Asynchronous Event Requests, ANA ([`ana`]) and reservations ([`resv`]) — so that
//! one test body shows a feature working over each transport.
//!
//! [`TcpQueue`]: crate::tcp_host::TcpQueue

pub mod ana;
pub mod resv;

use target_core::nvme::spec::admin_opc;
use target_core::nvme::{Sqe, Status};

use crate::nvme_host::{Completion, Data, HostError, HostQueue};
use crate::tcp_host::TcpQueue;

/// One queue of a test host, whatever its transport.
pub trait NvmeQueue {
    /// Submits `sqe` with host-to-controller `write` data, or reading `read` bytes (0: no
    /// data); returns its CID.
    fn submit_cmd(&mut self, sqe: Sqe, write: Option<&[u8]>, read: u32) -> Result<u16, HostError>;

    /// Waits for the completion of `cid`.
    fn wait_cmd(&mut self, cid: u16) -> Result<Completion, HostError>;

    /// Moves what is pending on the wire once (sends, receives), without waiting long.
    fn poll_once(&mut self) -> Result<(), HostError>;

    /// Polls for `d`; panics if any of `cids` completes meanwhile (a command that must wait).
    fn assert_none_complete_for(&mut self, cids: &[u16], d: std::time::Duration);

    /// Submits and waits.
    fn exec(&mut self, sqe: Sqe, write: Option<&[u8]>, read: u32) -> Result<Completion, HostError> {
        let cid = self.submit_cmd(sqe, write, read)?;
        self.wait_cmd(cid)
    }
}

/// Data of at most this many bytes goes in the capsule on RDMA (reservation keys, as the Linux
/// host sends them); more is fetched by the target with RDMA READ.
const RDMA_IN_CAPSULE_MAX: usize = 16;

impl NvmeQueue for HostQueue {
    fn submit_cmd(&mut self, sqe: Sqe, write: Option<&[u8]>, read: u32) -> Result<u16, HostError> {
        let data = match (write, read) {
            (Some(b), _) if b.len() <= RDMA_IN_CAPSULE_MAX => Data::InCapsule(b),
            (Some(b), _) => Data::KeyedWrite {
                bytes: b,
                invalidate: false,
            },
            (None, 0) => Data::None,
            (None, len) => Data::KeyedRead {
                len,
                invalidate: false,
            },
        };
        self.submit(sqe, data)
    }

    fn wait_cmd(&mut self, cid: u16) -> Result<Completion, HostError> {
        self.wait(cid)
    }

    fn poll_once(&mut self) -> Result<(), HostError> {
        self.poll().map(|_| ())
    }

    fn assert_none_complete_for(&mut self, cids: &[u16], d: std::time::Duration) {
        HostQueue::assert_none_complete_for(self, cids, d)
    }
}

impl NvmeQueue for TcpQueue {
    fn submit_cmd(&mut self, sqe: Sqe, write: Option<&[u8]>, read: u32) -> Result<u16, HostError> {
        self.submit(sqe, write.map(<[u8]>::to_vec), read)
            .map_err(HostError::Protocol)
    }

    fn wait_cmd(&mut self, cid: u16) -> Result<Completion, HostError> {
        let c = self.wait(cid).map_err(|e| {
            if self.eof {
                HostError::Disconnected
            } else {
                HostError::Protocol(e)
            }
        })?;
        Ok(Completion {
            cqe: c.cqe,
            data: c.data,
            invalidated: None,
        })
    }

    fn poll_once(&mut self) -> Result<(), HostError> {
        self.pump(std::time::Instant::now() + crate::tcp_host::TIMEOUT)
            .map_err(HostError::Protocol)
    }

    fn assert_none_complete_for(&mut self, cids: &[u16], d: std::time::Duration) {
        TcpQueue::assert_none_complete_for(self, cids, d)
    }
}

/// The status of a one-block (512 B) read of `nsid` at LBA 0 (what a path or a reservation
/// answers).
pub fn read_status(q: &mut impl NvmeQueue, nsid: u32) -> Status {
    q.exec(crate::nvme_host::read_sqe(nsid, 0, 1), None, 512)
        .expect("the read completes")
        .cqe
        .status
}

/// The status of a one-block write of `nsid` at LBA 0.
pub fn write_status(q: &mut impl NvmeQueue, nsid: u32) -> Status {
    q.exec(
        crate::nvme_host::write_sqe(nsid, 0, 1),
        Some(&[0x5A; 512]),
        0,
    )
    .expect("the write completes")
    .cqe
    .status
}

/// Get Log Page `lid` of `len` bytes at `offset` (RAE: `rae`).
pub fn get_log(
    admin: &mut impl NvmeQueue,
    lid: u8,
    nsid: u32,
    offset: u64,
    len: u32,
    rae: bool,
) -> Result<Vec<u8>, HostError> {
    get_log_lsp(admin, lid, 0, nsid, offset, len, rae)
}

/// Get Log Page `lid` with Log Specific Field `lsp` (e.g. the ANA log's RGO).
pub fn get_log_lsp(
    admin: &mut impl NvmeQueue,
    lid: u8,
    lsp: u8,
    nsid: u32,
    offset: u64,
    len: u32,
    rae: bool,
) -> Result<Vec<u8>, HostError> {
    let numd = len / 4 - 1;
    let mut s = Sqe::new(admin_opc::GET_LOG_PAGE, 0);
    s.set_nsid(nsid)
        .set_cdw(
            10,
            u32::from(lid)
                | u32::from(lsp & 0xF) << 8
                | (u32::from(rae) << 15)
                | (numd & 0xFFFF) << 16,
        )
        .set_cdw(11, numd >> 16)
        .set_cdw(12, offset as u32)
        .set_cdw(13, (offset >> 32) as u32);
    Ok(admin.exec(s, None, len)?.ok()?.data)
}

/// Get Features (`set`: Set Features) `fid` of `nsid` with CDW11 `cdw11`: (status, DW0).
pub fn features(
    admin: &mut impl NvmeQueue,
    set: bool,
    fid: u8,
    nsid: u32,
    cdw11: u32,
) -> (Status, u32) {
    let op = if set {
        admin_opc::SET_FEATURES
    } else {
        admin_opc::GET_FEATURES
    };
    let mut s = Sqe::new(op, 0);
    s.set_nsid(nsid)
        .set_cdw(10, u32::from(fid))
        .set_cdw(11, cdw11);
    let cqe = admin.exec(s, None, 0).expect("features").cqe;
    (cqe.status, cqe.dw0)
}

/// Enables the notices of Asynchronous Event Configuration bits `aen_bits` (Set Features
/// 0Bh) and parks an Asynchronous Event Request; returns its CID.
pub fn park_aer(admin: &mut impl NvmeQueue, aen_bits: u32) -> u16 {
    assert_eq!(
        features(admin, true, 0x0B, 0, aen_bits).0,
        Status::SUCCESS,
        "Asynchronous Event Configuration"
    );
    admin
        .submit_cmd(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), None, 0)
        .expect("AER")
}
