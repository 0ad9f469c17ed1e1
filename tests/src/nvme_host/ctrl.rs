//! A host controller: the admin queue plus I/O queues, brought up the way Linux does it
//! (reference §8.2), with helpers for the commands tests need.

use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use fabric::Fabric;
use target_core::nvme::fabrics::build;
use target_core::nvme::identify::ctrl_off;
use target_core::nvme::spec::{CNTLID_DYNAMIC, admin_opc, io_opc, prop};
use target_core::nvme::{Cqe, Sqe};

use super::auth::{DhchapOpts, authenticate_if_asked_on};
use super::queue::{CmOverride, Completion, Data, HostError, HostQueue, QueueOpts};

/// Everything a controller connect needs.
#[derive(Debug, Clone)]
pub struct ConnectOpts {
    /// Subsystem NQN.
    pub subnqn: String,
    /// Host NQN.
    pub hostnqn: String,
    /// Host identifier.
    pub hostid: [u8; 16],
    /// Keep-alive timeout in ms (0: none).
    pub kato_ms: u32,
    /// I/O queues to request and connect.
    pub io_queues: u16,
    /// Entries per I/O queue.
    pub io_depth: u16,
    /// Largest transfer per I/O command the host prepares for.
    pub max_io: usize,
    /// Send I/O queue Connect data in the capsule (if the target allows in-capsule data).
    pub in_capsule_connect: bool,
    /// The host's own address (source of the connections).
    pub src: Option<IpAddr>,
    /// DH-HMAC-CHAP keys, used when a Connect asks for authentication.
    pub dhchap: Option<DhchapOpts>,
}

impl ConnectOpts {
    /// Defaults for a subsystem: KATO 0, two I/O queues of 32 entries, 128 KiB transfers.
    pub fn new(subnqn: &str, hostnqn: &str) -> Self {
        Self {
            subnqn: subnqn.to_string(),
            hostnqn: hostnqn.to_string(),
            hostid: uuid_of(hostnqn),
            kato_ms: 0,
            io_queues: 2,
            io_depth: 32,
            max_io: 128 * 1024,
            in_capsule_connect: true,
            src: None,
            dhchap: None,
        }
    }
}

/// A stable host id derived from the host NQN.
fn uuid_of(hostnqn: &str) -> [u8; 16] {
    let mut h = [0u8; 16];
    for (i, b) in hostnqn.bytes().enumerate() {
        h[i % 16] = h[i % 16].wrapping_mul(31).wrapping_add(b);
    }
    h
}

/// A connected controller.
pub struct HostCtrl {
    /// The admin queue.
    pub admin: HostQueue,
    /// I/O queues (qid = index + 1).
    pub io: Vec<HostQueue>,
    /// Controller id from the admin Connect.
    pub cntlid: u16,
    /// Identify Controller data.
    pub id_ctrl: Vec<u8>,
    /// In-capsule bytes the target accepts on I/O queues (IOCCSZ·16 − 64).
    pub in_capsule: usize,
    /// The options it was connected with.
    pub opts: ConnectOpts,
    fabric: Fabric,
    to: SocketAddr,
}

fn le32(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes(b[off..off + 4].try_into().expect("4 bytes"))
}

/// Fabrics Connect on a freshly connected queue. Returns the completion (success or not).
pub fn fabrics_connect(
    q: &mut HostQueue,
    opts: &ConnectOpts,
    cntlid: u16,
    kato_ms: u32,
    in_capsule: bool,
) -> Result<Completion, HostError> {
    let data = build::connect_data(opts.hostid, cntlid, &opts.subnqn, &opts.hostnqn);
    let sqe = build::connect_sqe(
        0,
        q.qid(),
        q.depth() - 1,
        kato_ms,
        target_core::nvme::SglDescriptor::null_keyed(),
    );
    let d = if in_capsule {
        Data::InCapsule(&data)
    } else {
        Data::KeyedWrite {
            bytes: &data,
            invalidate: true,
        }
    };
    q.cmd(sqe, d)
}

/// Authenticates on `q` if the Connect response (`dw0`) set AUTHREQ.ATR, as the Linux host
/// does; without keys that is [`HostError::NoKey`].
pub fn authenticate_if_asked(
    q: &mut HostQueue,
    opts: &ConnectOpts,
    dw0: u32,
) -> Result<(), HostError> {
    let qid = q.qid();
    authenticate_if_asked_on(
        q,
        qid,
        &opts.subnqn,
        &opts.hostnqn,
        opts.dhchap.as_ref(),
        dw0,
    )
}

impl HostCtrl {
    /// Connects the admin queue, enables the controller, identifies it, negotiates and
    /// connects the I/O queues.
    pub fn connect(fabric: &Fabric, to: SocketAddr, opts: ConnectOpts) -> Result<Self, HostError> {
        let src = opts.src.map(|ip| SocketAddr::new(ip, 0));
        let mut admin = HostQueue::connect(
            fabric,
            src,
            to,
            QueueOpts {
                qid: 0,
                depth: 32,
                max_io: 128 * 1024,
                max_in_capsule: 8192,
                cntlid: 0,
            },
            &CmOverride::default(),
        )?;
        // The admin Connect data always goes keyed on RDMA (Linux's admin capsule is 64 B).
        let c = fabrics_connect(&mut admin, &opts, CNTLID_DYNAMIC, opts.kato_ms, false)?.ok()?;
        let cntlid = c.cqe.dw0 as u16;
        authenticate_if_asked(&mut admin, &opts, c.cqe.dw0)?;
        let mut ctrl = HostCtrl {
            admin,
            io: Vec::new(),
            cntlid,
            id_ctrl: Vec::new(),
            in_capsule: 0,
            opts: opts.clone(),
            fabric: fabric.clone(),
            to,
        };
        let cap = ctrl.prop_get(prop::CAP, true)?;
        ctrl.prop_set(prop::CC, 0x0046_0000)?;
        ctrl.prop_set(prop::CC, 0x0046_0001)?;
        let deadline = Instant::now() + Duration::from_secs(((cap >> 24) & 0xFF) / 2 + 1);
        while ctrl.prop_get(prop::CSTS, false)? & 1 == 0 {
            if Instant::now() >= deadline {
                return Err(HostError::Timeout("CSTS.RDY".into()));
            }
        }
        let id = ctrl.identify(1, 0)?;
        let got = u16::from_le_bytes([id[ctrl_off::CNTLID], id[ctrl_off::CNTLID + 1]]);
        if got != cntlid {
            return Err(HostError::Protocol(format!(
                "Mismatching cntlid: Connect {cntlid} vs Identify {got}"
            )));
        }
        let sgls = le32(&id, ctrl_off::SGLS);
        let ioccsz = le32(&id, ctrl_off::IOCCSZ) as usize;
        ctrl.in_capsule = if sgls & 1 << 20 != 0 {
            (ioccsz * 16).saturating_sub(64)
        } else {
            0
        };
        ctrl.id_ctrl = id;
        if opts.io_queues > 0 {
            let n = opts.io_queues - 1;
            let c = ctrl
                .admin_cmd(
                    {
                        let mut s = Sqe::new(admin_opc::SET_FEATURES, 0);
                        s.set_cdw(10, 0x07)
                            .set_cdw(11, u32::from(n) | u32::from(n) << 16);
                        s
                    },
                    Data::None,
                )?
                .ok()?;
            let granted = (c.cqe.dw0 & 0xFFFF).min(c.cqe.dw0 >> 16) as u16 + 1;
            let mqes = (cap & 0xFFFF) as u16;
            let depth = opts.io_depth.min(mqes + 1);
            for qid in 1..=opts.io_queues.min(granted) {
                ctrl.add_io_queue(qid, depth)?;
            }
        }
        Ok(ctrl)
    }

    /// Connects I/O queue `qid` with `depth` entries.
    pub fn add_io_queue(&mut self, qid: u16, depth: u16) -> Result<(), HostError> {
        let src = self.opts.src.map(|ip| SocketAddr::new(ip, 0));
        let mut q = HostQueue::connect(
            &self.fabric,
            src,
            self.to,
            QueueOpts {
                qid,
                depth,
                max_io: self.opts.max_io,
                max_in_capsule: self.in_capsule.max(1024).max(8192),
                cntlid: self.cntlid,
            },
            &CmOverride::default(),
        )?;
        let inc = self.opts.in_capsule_connect && self.in_capsule >= 1024;
        let c = fabrics_connect(&mut q, &self.opts, self.cntlid, 0, inc)?.ok()?;
        authenticate_if_asked(&mut q, &self.opts, c.cqe.dw0)?;
        self.io.push(q);
        Ok(())
    }

    /// The status of a one-block read of `nsid` on the first I/O queue (what a path or a
    /// namespace's visibility answers).
    pub fn read_status(&mut self, nsid: u32) -> target_core::nvme::Status {
        self.io[0]
            .cmd(
                read_sqe(nsid, 0, 1),
                Data::KeyedRead {
                    len: 512,
                    invalidate: true,
                },
            )
            .expect("the read completes")
            .cqe
            .status
    }

    /// Enables the notices of Asynchronous Event Configuration bits `aen_bits` (Set Features
    /// 0Bh) and parks an Asynchronous Event Request; returns its CID.
    pub fn park_aer(&mut self, aen_bits: u32) -> u16 {
        let mut s = Sqe::new(admin_opc::SET_FEATURES, 0);
        s.set_cdw(10, 0x0B).set_cdw(11, aen_bits);
        self.admin_cmd(s, Data::None).unwrap().ok().unwrap();
        self.admin
            .submit(Sqe::new(admin_opc::ASYNC_EVENT_REQUEST, 0), Data::None)
            .unwrap()
    }

    /// An admin command.
    pub fn admin_cmd(&mut self, sqe: Sqe, data: Data<'_>) -> Result<Completion, HostError> {
        self.admin.cmd(sqe, data)
    }

    /// Property Get.
    pub fn prop_get(&mut self, off: u32, eight: bool) -> Result<u64, HostError> {
        let c = self
            .admin
            .cmd(build::property_get(0, off, eight), Data::None)?
            .ok()?;
        Ok(u64::from(c.cqe.dw0) | u64::from(c.cqe.dw1) << 32)
    }

    /// Property Set (4 bytes).
    pub fn prop_set(&mut self, off: u32, v: u32) -> Result<(), HostError> {
        self.admin
            .cmd(build::property_set(0, off, v), Data::None)?
            .ok()
            .map(|_| ())
    }

    /// Identify (4 KiB).
    pub fn identify(&mut self, cns: u8, nsid: u32) -> Result<Vec<u8>, HostError> {
        let mut s = Sqe::new(admin_opc::IDENTIFY, 0);
        s.set_nsid(nsid).set_cdw(10, u32::from(cns));
        let c = self
            .admin
            .cmd(
                s,
                Data::KeyedRead {
                    len: 4096,
                    invalidate: true,
                },
            )?
            .ok()?;
        Ok(c.data)
    }

    /// Get Log Page of `len` bytes at `offset`.
    pub fn get_log(
        &mut self,
        lid: u8,
        nsid: u32,
        offset: u64,
        len: u32,
        rae: bool,
    ) -> Result<Vec<u8>, HostError> {
        crate::nvme_cmds::get_log(&mut self.admin, lid, nsid, offset, len, rae)
    }

    /// Keep Alive.
    pub fn keep_alive(&mut self) -> Result<Cqe, HostError> {
        Ok(self
            .admin
            .cmd(Sqe::new(admin_opc::KEEP_ALIVE, 0), Data::None)?
            .cqe)
    }

    /// Identify Namespace: (NSZE, LBA size).
    pub fn namespace(&mut self, nsid: u32) -> Result<(u64, u32), HostError> {
        let d = self.identify(0, nsid)?;
        let nsze = u64::from_le_bytes(d[0..8].try_into().expect("8 bytes"));
        let lbads = d[130];
        Ok((nsze, 1 << lbads))
    }

    /// Shuts the controller down (CC.SHN) and disconnects every queue, I/O queues first.
    pub fn shutdown(mut self) -> Result<(), HostError> {
        for q in &mut self.io {
            q.disconnect();
        }
        self.prop_set(prop::CC, 0x0046_4001)?;
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.prop_get(prop::CSTS, false)? & 0xC != 0x8 {
            if Instant::now() >= deadline {
                return Err(HostError::Timeout("CSTS.SHST".into()));
            }
        }
        self.admin.disconnect();
        Ok(())
    }
}

/// An I/O command SQE: `opc` at `slba` for `blocks` blocks of namespace `nsid`.
pub fn rw_sqe(opc: u8, nsid: u32, slba: u64, blocks: u32) -> Sqe {
    let mut s = Sqe::new(opc, 0);
    s.set_nsid(nsid)
        .set_cdw(10, slba as u32)
        .set_cdw(11, (slba >> 32) as u32)
        .set_cdw(12, blocks.saturating_sub(1) & 0xFFFF);
    s
}

/// A Write SQE.
pub fn write_sqe(nsid: u32, slba: u64, blocks: u32) -> Sqe {
    rw_sqe(io_opc::WRITE, nsid, slba, blocks)
}

/// The NSIDs of a namespace list (Identify CNS 02h, the Changed Namespace List log page), up
/// to the first zero.
pub fn nsid_list(list: &[u8]) -> Vec<u32> {
    list.chunks_exact(4)
        .map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
        .take_while(|&n| n != 0)
        .collect()
}

/// A Read SQE.
pub fn read_sqe(nsid: u32, slba: u64, blocks: u32) -> Sqe {
    rw_sqe(io_opc::READ, nsid, slba, blocks)
}

/// A Fabrics command SQE of `fctype` (for malformed-command tests).
pub fn fabrics_sqe(ft: u8) -> Sqe {
    Sqe::fabrics(ft, 0)
}

/// The bytes of block `lba` for pattern `seed` (every block differs, every seed differs).
pub fn pattern_block(seed: u32, lba: u64, bs: usize, out: &mut [u8]) {
    let mut x = (lba ^ u64::from(seed) << 40).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    for chunk in out[..bs].chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let b = x.to_le_bytes();
        chunk.copy_from_slice(&b[..chunk.len()]);
    }
}

/// The pattern for `blocks` blocks starting at `lba`.
pub fn pattern(seed: u32, lba: u64, blocks: u32, bs: usize) -> Vec<u8> {
    let mut v = vec![0u8; blocks as usize * bs];
    for (i, c) in v.chunks_mut(bs).enumerate() {
        pattern_block(seed, lba + i as u64, bs, c);
    }
    v
}
