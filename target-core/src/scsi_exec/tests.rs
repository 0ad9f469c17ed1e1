//! The SCSI exec layer driven on a real target: a test transport moves "IUs" (a CDB and its
//! data) through a [`ScsiEngine`] on a reactor, against malloc bdevs wrapped in a probe that
//! records the bdev operations and fails reads of one block.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use iobuf::IoBuf;
use parking_lot::Mutex;
use serde_json::{Value, json};
use slab::Slab;

use super::*;
use crate::bdev::{
    Bdev, BdevChannel, BdevError, BdevIo, BdevOp, BdevRegistry, IoStatus, IoType, MallocBdev,
    MallocParams,
};
use crate::reactor::{ReactorConfig, Reactors};
use crate::registry::{
    self, Transport, TransportContext, TransportEnv, TransportError, TransportOps, TransportParams,
    TransportPollGroup,
};
use crate::reservation::InitiatorPort;
use crate::scsi::{PROTOCOL_ID_SRP, ScsiStatus, Sense, SenseKey, TargetPort};
use crate::target::{ListenAddr, NsParams, PgCore, Subsystem, SubsystemParams, Target};

/// The block whose reads fail with EIO.
const BAD_LBA: u64 = 13;
/// Bytes of one data buffer of the test transport.
const UNIT: u32 = 4096;
/// Data buffers of the test transport's pool: small, so that requests wait for them.
const POOL: usize = 8;
/// Largest transfer: WRITE SAME goes in chunks of this.
const MAX_IO: u32 = 4 * UNIT;

// ---------- a bdev that records its operations and fails one block ----------

struct Probe {
    inner: Arc<dyn Bdev>,
    ops: Arc<Mutex<Vec<BdevOp>>>,
    /// Writes reach the base bdev this long after they are submitted: their data lands late
    /// (a device writing in the background).
    write_hold: Duration,
}

impl Bdev for Probe {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn product_name(&self) -> &'static str {
        "Probe disk"
    }
    fn block_size(&self) -> u32 {
        self.inner.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.inner.num_blocks()
    }
    fn uuid(&self) -> uuid::Uuid {
        self.inner.uuid()
    }
    fn supports(&self, io: IoType) -> bool {
        self.inner.supports(io)
    }
    fn write_cache(&self) -> bool {
        self.inner.write_cache()
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        Ok(Box::new(ProbeChannel {
            inner: self.inner.open_channel()?,
            ops: Arc::clone(&self.ops),
            failed: VecDeque::new(),
            hold: self.write_hold,
            held: VecDeque::new(),
        }))
    }
    fn config(&self) -> Value {
        json!({})
    }
}

struct ProbeChannel {
    inner: Box<dyn BdevChannel>,
    ops: Arc<Mutex<Vec<BdevOp>>>,
    failed: VecDeque<Box<BdevIo>>,
    hold: Duration,
    held: VecDeque<(Instant, Box<BdevIo>)>,
}

impl BdevChannel for ProbeChannel {
    fn submit(&mut self, mut io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        self.ops.lock().push(io.op);
        if let BdevOp::Read {
            offset_blocks,
            num_blocks,
        } = io.op
            && (offset_blocks..offset_blocks + num_blocks).contains(&BAD_LBA)
        {
            io.status = IoStatus::Error(libc::EIO);
            self.failed.push_back(io);
            return Ok(());
        }
        if !self.hold.is_zero() && matches!(io.op, BdevOp::Write { .. }) {
            self.held.push_back((Instant::now() + self.hold, io));
            return Ok(());
        }
        self.inner.submit(io)
    }
    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        while self.held.front().is_some_and(|(t, _)| *t <= Instant::now()) {
            let (_, io) = self.held.pop_front().expect("checked");
            if let Err(mut io) = self.inner.submit(io) {
                io.status = IoStatus::Error(libc::EBUSY);
                self.failed.push_back(io);
            }
        }
        let mut n = self.inner.poll(done);
        while let Some(io) = self.failed.pop_front() {
            done(io);
            n += 1;
        }
        n
    }
    fn outstanding(&self) -> usize {
        self.inner.outstanding() + self.failed.len() + self.held.len()
    }
}

// ---------- the test transport ----------

/// One command: a CDB for a LUN, with data-out, and the initiator's data-in buffer length.
#[derive(Clone, Debug)]
struct Cmd {
    id: u64,
    sub: u32,
    lun: u16,
    cdb: Vec<u8>,
    data_out: Vec<u8>,
    in_len: u32,
}

/// What came back.
#[derive(Clone, Debug)]
struct Done {
    id: u64,
    status: ScsiStatus,
    sense: Option<Sense>,
    data: Vec<u8>,
}

#[derive(Default)]
struct Mailbox {
    inbox: Mutex<VecDeque<Cmd>>,
    done: Mutex<Vec<Done>>,
    queued: AtomicUsize,
    buffer_waits: AtomicUsize,
    busy: AtomicUsize,
}

struct TestTransport {
    shared: Arc<Mailbox>,
    index: usize,
}

impl Transport for TestTransport {
    fn name(&self) -> &'static str {
        "SCSITEST"
    }
    fn dump_opts(&self) -> TransportParams {
        TransportParams::new()
    }
    fn listen(&self, _addr: &ListenAddr) -> Result<(), TransportError> {
        Ok(())
    }
    fn stop_listen(&self, _addr: &ListenAddr) -> Result<(), TransportError> {
        Ok(())
    }
    fn poll_group_create(
        &self,
        _core: &mut PgCore,
    ) -> Result<Box<dyn TransportPollGroup>, TransportError> {
        Ok(Box::new(TestPg {
            shared: Arc::clone(&self.shared),
            engine: ScsiEngine::new(
                self.index,
                LuLimits {
                    max_io_size: MAX_IO,
                    io_unit_size: UNIT,
                },
            ),
            nexus: nexus(),
            ua: super::NexusUnitAttentions::settled(nexus().identity()),
            reqs: Slab::new(),
            pool: (0..POOL)
                .map(|_| IoBuf::alloc(UNIT as usize).unwrap())
                .collect(),
            buf_wait: VecDeque::new(),
            retry: VecDeque::new(),
            associated: HashMap::new(),
        }))
    }
    fn destroy(&self) {}
}

fn nexus() -> ItNexus {
    ItNexus {
        initiator: InitiatorPort::srp([0x11; 16]),
        port: TargetPort {
            protocol_id: PROTOCOL_ID_SRP,
            relative_port: 1,
            port_id: Some([0x22; 16]),
        },
        listener: None,
        tpg_id: None,
        ana_cache: std::cell::Cell::new(None),
    }
}

fn create_test(ctx: TransportContext, _params: &TransportParams) -> registry::CreateResult {
    Ok(Arc::new(TestTransport {
        shared: Arc::new(Mailbox::default()),
        index: ctx.index,
    }))
}

crate::register_transport!(
    SCSI_TEST_TRANSPORT = TransportOps {
        name: "SCSITEST",
        description: "in-process SCSI exec test transport",
        defaults: TransportParams::new,
        create: create_test,
        options: &[],
        subsystem_attrs: &[],
        listener_attrs: &[],
    }
);

struct Req {
    cmd: Cmd,
    exec: ScsiReq,
}

struct TestPg {
    shared: Arc<Mailbox>,
    engine: ScsiEngine,
    nexus: ItNexus,
    ua: super::NexusUnitAttentions,
    reqs: Slab<Req>,
    pool: Vec<IoBuf>,
    buf_wait: VecDeque<(usize, usize)>,
    retry: VecDeque<usize>,
    associated: HashMap<u32, ()>,
}

impl TestPg {
    fn start(&mut self, core: &mut PgCore, cmd: Cmd) {
        if self.associated.insert(cmd.sub, ()).is_none() {
            core.qpair_associate(cmd.sub, false);
        }
        let key = self.reqs.insert(Req {
            cmd,
            exec: ScsiReq::new(),
        });
        let r = &mut self.reqs[key];
        let c = ScsiCommand {
            token: key as u64,
            subsystem: r.cmd.sub,
            lun: Some(r.cmd.lun),
            cdb: &r.cmd.cdb,
            data_in_len: r.cmd.in_len,
            data_out_len: r.cmd.data_out.len() as u32,
        };
        self.engine.start(core, &mut r.exec, &c);
        self.drive(core, key);
    }

    fn drive(&mut self, core: &mut PgCore, key: usize) {
        let r = &mut self.reqs[key];
        let a = self.engine.drive(core, &self.nexus, &self.ua, &mut r.exec);
        self.act(core, key, a);
    }

    /// Does what the engine asked, until the request waits.
    fn act(&mut self, core: &mut PgCore, key: usize, mut a: ScsiAction) {
        loop {
            match a {
                ScsiAction::Queued => {
                    self.shared.queued.fetch_add(1, Ordering::SeqCst);
                    return;
                }
                ScsiAction::NeedBuffers(n) => {
                    if !self.fill(key, n) {
                        return;
                    }
                }
                ScsiAction::FetchDataOut { len, param } => {
                    let n = if param {
                        1
                    } else {
                        self.engine.limits().units(len)
                    };
                    if !self.fill(key, n) {
                        return;
                    }
                    let r = &mut self.reqs[key];
                    let io = r.exec.io.as_mut().unwrap();
                    let mut src = &r.cmd.data_out[..len as usize];
                    for b in io.bufs.iter_mut() {
                        let k = src.len().min(b.capacity());
                        b.reset();
                        b.as_mut_slice()[..k].copy_from_slice(&src[..k]);
                        src = &src[k..];
                    }
                    r.exec.data_out_received();
                }
                ScsiAction::Submitted => return,
                ScsiAction::Busy => {
                    self.shared.busy.fetch_add(1, Ordering::SeqCst);
                    self.retry.push_back(key);
                    return;
                }
                // One nexus here: nothing of another nexus to abort.
                ScsiAction::Respond | ScsiAction::AbortPreempted => return self.respond(key),
            }
            let r = &mut self.reqs[key];
            a = self.engine.drive(core, &self.nexus, &self.ua, &mut r.exec);
        }
    }

    /// Tops the request up to `n` buffers, or queues it.
    fn fill(&mut self, key: usize, n: usize) -> bool {
        let io = self.reqs[key].exec.io.as_mut().unwrap();
        let want = n.saturating_sub(io.bufs.len());
        if self.pool.len() < want {
            self.shared.buffer_waits.fetch_add(1, Ordering::SeqCst);
            self.buf_wait.push_back((key, n));
            return false;
        }
        for _ in 0..want {
            io.bufs.push(self.pool.pop().unwrap());
        }
        true
    }

    fn respond(&mut self, key: usize) {
        let mut r = self.reqs.remove(key);
        let mut data = Vec::new();
        let mut left = r.exec.data_in_len() as usize;
        if let Some(io) = r.exec.io.as_mut() {
            for b in io.bufs.iter() {
                let k = left.min(b.capacity());
                data.extend_from_slice(&b.as_slice()[..k]);
                left -= k;
            }
            for mut b in io.bufs.drain(..) {
                b.reset();
                self.pool.push(b);
            }
        }
        if let Some(mut b) = r.exec.take_param() {
            b.reset();
            self.pool.push(b);
        }
        assert!(!r.exec.is_admitted(), "a response gives the admission back");
        self.shared.done.lock().push(Done {
            id: r.cmd.id,
            status: r.exec.status(),
            sense: r.exec.sense().copied(),
            data,
        });
    }
}

impl TransportPollGroup for TestPg {
    fn poll(&mut self, core: &mut PgCore, completions: &mut Vec<Box<BdevIo>>) -> usize {
        let mut n = 0;
        for io in completions.drain(..) {
            let key = io.tag as usize;
            let r = &mut self.reqs[key];
            let a = self.engine.io_done(core, &mut r.exec, io);
            self.act(core, key, a);
            n += 1;
        }
        for _ in 0..self.buf_wait.len() {
            let Some((key, need)) = self.buf_wait.pop_front() else {
                break;
            };
            if self.fill(key, need) {
                self.drive(core, key);
                n += 1;
            }
        }
        for _ in 0..self.retry.len() {
            if let Some(key) = self.retry.pop_front() {
                self.drive(core, key);
            }
        }
        let cmds: Vec<Cmd> = self.shared.inbox.lock().drain(..).collect();
        for cmd in cmds {
            self.start(core, cmd);
            n += 1;
        }
        n
    }

    fn arm(&mut self, _core: &mut PgCore) -> bool {
        !self.buf_wait.is_empty() || !self.retry.is_empty()
    }

    fn resume_request(&mut self, core: &mut PgCore, token: u64) {
        if self.reqs.contains(token as usize) {
            self.drive(core, token as usize);
        }
    }

    fn disconnect_subsystem(&mut self, core: &mut PgCore, subsystem: u32) {
        self.engine.invalidate(subsystem);
        if self.associated.remove(&subsystem).is_some() {
            core.qpair_removed(Some(subsystem), false);
        }
    }

    fn qpairs(&self, _subsystem: Option<u32>) -> Vec<Value> {
        Vec::new()
    }
}

// ---------- harness ----------

/// A malloc bdev of 1024 blocks of 512 bytes, not registered.
fn malloc(name: &str) -> Arc<dyn Bdev> {
    MallocBdev::create(MallocParams {
        name: name.to_string(),
        num_blocks: 1024,
        block_size: 512,
        physical_block_size: 0,
        uuid: None,
        optimal_io_boundary: 0,
    })
    .unwrap()
}

struct Harness {
    rt: tokio::runtime::Runtime,
    target: Arc<Target>,
    shared: Arc<Mailbox>,
    ops: Arc<Mutex<Vec<BdevOp>>>,
    next_id: u64,
}

impl Harness {
    fn new() -> Self {
        let r = Reactors::start(ReactorConfig::with_count(1)).unwrap();
        let target = Target::start(r, BdevRegistry::new(), TransportEnv::new()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(target.create_transport("scsitest", &TransportParams::new()))
            .unwrap();
        let (_, t) = target.transport("SCSITEST").unwrap();
        let any: Arc<dyn std::any::Any + Send + Sync> = t;
        let shared = Arc::clone(&any.downcast::<TestTransport>().ok().unwrap().shared);
        Self {
            rt,
            target,
            shared,
            ops: Arc::new(Mutex::new(Vec::new())),
            next_id: 0,
        }
    }

    /// A subsystem with a probed malloc bdev of 512-byte blocks at each NSID in `nsids`.
    fn subsystem(&self, nqn: &str, nsids: &[u32]) -> Arc<Subsystem> {
        self.subsystem_holding_writes(nqn, nsids, Duration::ZERO)
    }

    /// As [`Harness::subsystem`], the probes holding writes for `hold` before they land.
    fn subsystem_holding_writes(&self, nqn: &str, nsids: &[u32], hold: Duration) -> Arc<Subsystem> {
        let sub = self
            .rt
            .block_on(self.target.create_subsystem(SubsystemParams::new(nqn)))
            .unwrap();
        for &nsid in nsids {
            let name = format!("{}-{nsid}", sub.id());
            let inner = malloc(&name);
            let probe: Arc<dyn Bdev> = Arc::new(Probe {
                inner,
                ops: Arc::clone(&self.ops),
                write_hold: hold,
            });
            self.target.bdevs().register(probe).unwrap();
            self.rt
                .block_on(self.target.add_namespace(
                    nqn,
                    NsParams {
                        bdev_name: name,
                        nsid,
                        ..NsParams::default()
                    },
                ))
                .unwrap();
        }
        sub
    }

    fn send(&mut self, sub: &Subsystem, lun: u16, cdb: &[u8], data_out: &[u8], in_len: u32) -> u64 {
        let id = self.queue(sub, lun, cdb, data_out, in_len);
        self.kick();
        id
    }

    /// Queues a command without waking the reactor.
    fn queue(
        &mut self,
        sub: &Subsystem,
        lun: u16,
        cdb: &[u8],
        data_out: &[u8],
        in_len: u32,
    ) -> u64 {
        self.next_id += 1;
        self.shared.inbox.lock().push_back(Cmd {
            id: self.next_id,
            sub: sub.id(),
            lun,
            cdb: cdb.to_vec(),
            data_out: data_out.to_vec(),
            in_len,
        });
        self.next_id
    }

    /// Queues READ(16)s of `blocks` at each of `lbas` at once (one hold of the inbox: a
    /// reactor still polling takes them in one poll), without waking the reactor.
    fn queue_reads(&mut self, sub: &Subsystem, lun: u16, lbas: &[u64], blocks: u32) -> Vec<u64> {
        let mut inbox = self.shared.inbox.lock();
        lbas.iter()
            .map(|&lba| {
                self.next_id += 1;
                inbox.push_back(Cmd {
                    id: self.next_id,
                    sub: sub.id(),
                    lun,
                    cdb: rw16(READ_16, lba, blocks).to_vec(),
                    data_out: Vec::new(),
                    in_len: blocks * 512,
                });
                self.next_id
            })
            .collect()
    }

    /// Wakes the reactor: the inbox is not an fd it sleeps on.
    fn kick(&self) {
        let _ = self.target.reactors().send_msg(0, |_| {});
    }

    fn wait(&self, id: u64) -> Done {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(d) = self.shared.done.lock().iter().find(|d| d.id == id) {
                return d.clone();
            }
            assert!(Instant::now() < deadline, "command {id} never completed");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn run(&mut self, sub: &Subsystem, lun: u16, cdb: &[u8], data_out: &[u8], in_len: u32) -> Done {
        let id = self.send(sub, lun, cdb, data_out, in_len);
        self.wait(id)
    }

    fn ops(&self) -> Vec<BdevOp> {
        std::mem::take(&mut *self.ops.lock())
    }

    fn stop(self) {
        self.rt.block_on(self.target.shutdown());
        self.target.reactors().stop();
    }
}

fn rw16(op: u8, lba: u64, blocks: u32) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = op;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[10..14].copy_from_slice(&blocks.to_be_bytes());
    c
}

const READ_16: u8 = 0x88;
const WRITE_16: u8 = 0x8A;

fn write_same16(lba: u64, blocks: u32, unmap: bool) -> [u8; 16] {
    let mut c = rw16(0x93, lba, blocks);
    if unmap {
        c[1] |= 0x08;
    }
    c
}

fn unmap_cmd(ranges: &[(u64, u32)]) -> ([u8; 10], Vec<u8>) {
    let mut list = vec![0u8; 8 + 16 * ranges.len()];
    list[0..2].copy_from_slice(&((6 + 16 * ranges.len()) as u16).to_be_bytes());
    list[2..4].copy_from_slice(&((16 * ranges.len()) as u16).to_be_bytes());
    for (i, (lba, n)) in ranges.iter().enumerate() {
        list[8 + i * 16..16 + i * 16].copy_from_slice(&lba.to_be_bytes());
        list[16 + i * 16..20 + i * 16].copy_from_slice(&n.to_be_bytes());
    }
    let mut c = [0u8; 10];
    c[0] = 0x42;
    c[7..9].copy_from_slice(&(list.len() as u16).to_be_bytes());
    (c, list)
}

fn sense_of(d: &Done) -> (SenseKey, u8, u8) {
    assert_eq!(d.status, ScsiStatus::CheckCondition, "{d:?}");
    let s = d.sense.expect("sense");
    (s.key, s.asc, s.ascq)
}

// ---------- tests ----------

#[test]
fn parameter_data_comes_from_the_lu_map_and_the_nexus() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-1", &[1, 5]);
    // REPORT LUNS: NSIDs 1 and 5 are LUNs 0 and 4.
    let d = h.run(&sub, 0, &[0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[], 256);
    assert_eq!(d.status, ScsiStatus::Good);
    assert_eq!(&d.data[..4], &16u32.to_be_bytes(), "two LUNs, 8 bytes each");
    assert_eq!(&d.data[8..10], &[0, 0]);
    assert_eq!(&d.data[16..18], &[0, 4]);
    // READ CAPACITY(16) of LUN 4: 1024 blocks of 512 bytes.
    let mut rc = [0u8; 16];
    rc[0] = 0x9E;
    rc[1] = 0x10;
    rc[13] = 32;
    let d = h.run(&sub, 4, &rc, &[], 32);
    assert_eq!(d.status, ScsiStatus::Good);
    assert_eq!(&d.data[..8], &1023u64.to_be_bytes());
    assert_eq!(&d.data[8..12], &512u32.to_be_bytes());
    // VPD 83h carries the nexus's target port: its relative port id designator.
    let d = h.run(&sub, 0, &[0x12, 1, 0x83, 1, 0, 0], &[], 256);
    assert_eq!(d.status, ScsiStatus::Good);
    assert!(
        d.data.windows(16).any(|w| w == [0x22; 16]),
        "target port id in VPD 83h: {:02x?}",
        d.data
    );
    // A LUN without an LU: INQUIRY says so, anything else fails.
    let d = h.run(&sub, 2, &[0x12, 0, 0, 0, 36, 0], &[], 36);
    assert_eq!(d.status, ScsiStatus::Good);
    assert_eq!(d.data[0], crate::scsi::PERIPHERAL_NOT_PRESENT);
    let d = h.run(&sub, 2, &[0, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x25, 0x00));
    // Data-in is cut to the initiator's buffer.
    let d = h.run(&sub, 0, &[0x12, 0, 0, 0, 96, 0], &[], 10);
    assert_eq!(d.data.len(), 10);
    assert!(h.ops().is_empty(), "no bdev operation for any of these");
    h.stop();
}

#[test]
fn writes_and_reads_move_data_through_several_buffers() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-2", &[1]);
    let data: Vec<u8> = (0..3 * UNIT).map(|i| (i % 251) as u8).collect();
    let blocks = 3 * UNIT / 512;
    let d = h.run(&sub, 0, &rw16(WRITE_16, 100, blocks), &data, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &rw16(READ_16, 100, blocks), &[], 3 * UNIT);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    assert_eq!(d.data, data);
    // A smaller data-in buffer gets what fits (the residual is the transport's).
    let d = h.run(&sub, 0, &rw16(READ_16, 100, blocks), &[], 1000);
    assert_eq!(d.data, data[..1000]);
    assert_eq!(
        h.ops(),
        [
            BdevOp::Write {
                offset_blocks: 100,
                num_blocks: u64::from(blocks),
                fua: false
            },
            BdevOp::Read {
                offset_blocks: 100,
                num_blocks: u64::from(blocks)
            },
            BdevOp::Read {
                offset_blocks: 100,
                num_blocks: u64::from(blocks)
            },
        ]
    );
    // A failed read is a MEDIUM ERROR at its LBA.
    let d = h.run(&sub, 0, &rw16(READ_16, BAD_LBA, 1), &[], 512);
    assert_eq!(sense_of(&d), (SenseKey::MediumError, 0x11, 0x00));
    assert_eq!(d.sense.unwrap().information, Some(BAD_LBA));
    assert!(d.data.is_empty());
    h.stop();
}

#[test]
fn requests_wait_for_buffers_and_go_on_when_they_come_back() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-3", &[1]);
    // Four reads of 4 buffers each with 8 in the pool, started in one poll: two wait.
    let blocks = MAX_IO / 512;
    let ids = h.queue_reads(&sub, 0, &[100, 164, 228, 292], blocks);
    h.kick();
    for id in ids {
        let d = h.wait(id);
        assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
        assert_eq!(d.data.len(), MAX_IO as usize);
    }
    assert_eq!(
        h.shared.buffer_waits.load(Ordering::SeqCst),
        2,
        "the last two reads wait for buffers"
    );
    h.stop();
}

#[test]
fn unmap_runs_each_range_and_checks_the_whole_list_first() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-4", &[1]);
    let (cdb, list) = unmap_cmd(&[(8, 4), (100, 0), (200, 16)]);
    let d = h.run(&sub, 0, &cdb, &list, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    assert_eq!(
        h.ops(),
        [
            BdevOp::Unmap {
                offset_blocks: 8,
                num_blocks: 4
            },
            BdevOp::Unmap {
                offset_blocks: 200,
                num_blocks: 16
            },
        ],
        "the empty descriptor is skipped"
    );
    // A range past the end fails the command before anything is unmapped.
    let (cdb, list) = unmap_cmd(&[(8, 4), (1020, 8)]);
    let d = h.run(&sub, 0, &cdb, &list, 0);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x21, 0x00));
    assert!(h.ops().is_empty());
    h.stop();
}

#[test]
fn write_same_unmaps_zeroes_or_writes_the_pattern_in_chunks() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-5", &[1]);
    let zero = [0u8; 512];
    let d = h.run(&sub, 0, &write_same16(0, 64, true), &zero, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &write_same16(0, 64, false), &zero, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    assert_eq!(
        h.ops(),
        [
            BdevOp::Unmap {
                offset_blocks: 0,
                num_blocks: 64
            },
            BdevOp::WriteZeroes {
                offset_blocks: 0,
                num_blocks: 64
            },
        ]
    );
    // A pattern over 80 blocks: chunks of MAX_IO (32 blocks), the last one shorter.
    let pattern: Vec<u8> = (0..512).map(|i| (i * 7 + 3) as u8).collect();
    let d = h.run(&sub, 0, &write_same16(300, 80, false), &pattern, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let chunk = u64::from(MAX_IO / 512);
    assert_eq!(
        h.ops(),
        [
            BdevOp::Write {
                offset_blocks: 300,
                num_blocks: chunk,
                fua: false
            },
            BdevOp::Write {
                offset_blocks: 300 + chunk,
                num_blocks: chunk,
                fua: false
            },
            BdevOp::Write {
                offset_blocks: 300 + 2 * chunk,
                num_blocks: 80 - 2 * chunk,
                fua: false
            },
        ]
    );
    for lba in [300, 332, 364] {
        let d = h.run(&sub, 0, &rw16(READ_16, lba, 16), &[], 16 * 512);
        assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
        for (i, blk) in d.data.chunks(512).enumerate() {
            assert_eq!(
                blk,
                &pattern[..],
                "block {} of the WRITE SAME",
                lba + i as u64
            );
        }
    }
    let d = h.run(&sub, 0, &rw16(READ_16, 380, 1), &[], 512);
    assert_eq!(d.data, [0; 512], "nothing written past the range");
    h.stop();
}

#[test]
fn a_paused_namespace_queues_commands_and_resume_replays_them() {
    let mut h = Harness::new();
    let nqn = "nqn.2016-06.io.rtgt:scsi-exec-6";
    let sub = h.subsystem(nqn, &[1]);
    h.rt.block_on(h.target.pause(nqn, None)).unwrap();
    let id = h.send(&sub, 0, &rw16(READ_16, 0, 1), &[], 512);
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.shared.queued.load(Ordering::SeqCst) == 0 {
        assert!(Instant::now() < deadline, "the read was never queued");
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(h.shared.done.lock().is_empty(), "nothing runs while paused");
    h.rt.block_on(h.target.resume(nqn)).unwrap();
    let d = h.wait(id);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    assert_eq!(d.data.len(), 512);
    h.stop();
}

#[test]
fn a_namespace_gone_under_the_lu_map_answers_lun_not_supported() {
    let mut h = Harness::new();
    let nqn = "nqn.2016-06.io.rtgt:scsi-exec-7";
    let sub = h.subsystem(nqn, &[1, 2]);
    // The map is built with both LUNs ...
    let d = h.run(&sub, 1, &rw16(READ_16, 0, 1), &[], 512);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    // ... and the test transport does not drop it when NSID 2 goes (a transport that
    // missed the change): admission finds the namespace gone.
    h.rt.block_on(h.target.remove_namespace(nqn, 2)).unwrap();
    let d = h.run(&sub, 1, &rw16(READ_16, 0, 1), &[], 512);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x25, 0x00));
    // The map was rebuilt: REPORT LUNS shows LUN 0 only.
    let d = h.run(&sub, 0, &[0xA0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0], &[], 256);
    assert_eq!(&d.data[..4], &8u32.to_be_bytes());
    h.stop();
}

/// A MODE SELECT(6) parameter list: header, then `pages`.
fn mode_list(pages: &[&[u8]]) -> Vec<u8> {
    let mut v = vec![0u8; 4];
    for p in pages {
        v.extend_from_slice(p);
    }
    v
}

fn caching_page(wce: bool) -> [u8; 20] {
    let mut p = [0u8; 20];
    p[0] = 0x08;
    p[1] = 0x12;
    p[2] = if wce { 0x04 } else { 0 };
    p
}

fn mode_select6(list: &[u8]) -> [u8; 6] {
    [0x15, 0x10, 0, 0, list.len() as u8, 0]
}

#[test]
fn mode_select_wce_off_writes_every_write_through() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-modes", &[1]);
    let caching = [0x1A, 0x08, 0x08, 0, 255, 0];
    let d = h.run(&sub, 0, &caching, &[], 255);
    assert_eq!(
        d.data[6], 0x04,
        "WCE on by default (malloc has a volatile cache)"
    );
    // WCE = 0.
    let list = mode_list(&[&caching_page(false)]);
    let d = h.run(&sub, 0, &mode_select6(&list), &list, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &caching, &[], 255);
    assert_eq!(d.data[6], 0x00, "MODE SENSE reports the new value");
    h.ops();
    // A WRITE without FUA is written through; WRITE SAME by write zeroes is flushed; a
    // pattern WRITE SAME writes with FUA; SYNCHRONIZE CACHE still flushes (writes made
    // before WCE went off may be cached).
    let d = h.run(&sub, 0, &rw16(WRITE_16, 8, 1), &[0xA5; 512], 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &write_same16(16, 4, false), &[0; 512], 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &write_same16(32, 2, false), &[7; 512], 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &[0x35, 0, 0, 0, 0, 0, 0, 0, 0, 0], &[], 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    assert_eq!(
        h.ops(),
        [
            BdevOp::Write {
                offset_blocks: 8,
                num_blocks: 1,
                fua: true
            },
            BdevOp::WriteZeroes {
                offset_blocks: 16,
                num_blocks: 4
            },
            BdevOp::Flush,
            BdevOp::Write {
                offset_blocks: 32,
                num_blocks: 2,
                fua: true
            },
            BdevOp::Flush,
        ]
    );
    // A list with a field that is not changeable (RCD) changes nothing.
    let mut rcd = caching_page(true);
    rcd[2] |= 0x01;
    let list = mode_list(&[&rcd]);
    let d = h.run(&sub, 0, &mode_select6(&list), &list, 0);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x26, 0x00));
    assert_eq!(d.sense.unwrap().field.map(|f| f.byte), Some(6));
    let d = h.run(&sub, 0, &caching, &[], 255);
    assert_eq!(d.data[6], 0x00, "still off");
    // WCE back on: writes from the cache again.
    let list = mode_list(&[&caching_page(true)]);
    let d = h.run(&sub, 0, &mode_select6(&list), &list, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    h.ops();
    let d = h.run(&sub, 0, &rw16(WRITE_16, 8, 1), &[0xA5; 512], 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    assert_eq!(
        h.ops(),
        [BdevOp::Write {
            offset_blocks: 8,
            num_blocks: 1,
            fua: false
        }]
    );
    h.stop();
}

#[test]
fn mode_select_swp_write_protects_the_lu() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-swp", &[1]);
    let mut control = [0u8; 12];
    control[0] = 0x0A;
    control[1] = 0x0A;
    control[3] = 0x10;
    control[8..10].copy_from_slice(&[0xFF, 0xFF]);
    control[4] = 0x08;
    control[5] = 0x40; // TAS, as MODE SENSE reports it (not changeable)
    let list = mode_list(&[&control]);
    let d = h.run(&sub, 0, &mode_select6(&list), &list, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &[0x1A, 0x08, 0x0A, 0, 255, 0], &[], 255);
    assert_eq!((d.data[2] & 0x80, d.data[8]), (0x80, 0x08), "WP and SWP");
    h.ops();
    let d = h.run(&sub, 0, &rw16(WRITE_16, 0, 1), &[1; 512], 0);
    assert_eq!(sense_of(&d), (SenseKey::DataProtect, 0x27, 0x00));
    let d = h.run(&sub, 0, &rw16(READ_16, 0, 1), &[], 512);
    assert_eq!(d.status, ScsiStatus::Good, "reads are allowed");
    assert_eq!(h.ops().len(), 1, "only the read reached the bdev");
    // A zero-length list is GOOD and changes nothing; PF = 0 is refused.
    let d = h.run(&sub, 0, &[0x15, 0x10, 0, 0, 0, 0], &[], 0);
    assert_eq!(d.status, ScsiStatus::Good);
    let d = h.run(&sub, 0, &[0x15, 0, 0, 0, 16, 0], &list, 0);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x24, 0x00));
    control[4] = 0;
    let list = mode_list(&[&control]);
    let d = h.run(&sub, 0, &mode_select6(&list), &list, 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &rw16(WRITE_16, 0, 1), &[1; 512], 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    h.stop();
}

// ---------- COMPARE AND WRITE ----------

/// COMPARE AND WRITE of `blocks` blocks at `lba`.
fn caw16(lba: u64, blocks: u8) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[0] = 0x89;
    c[2..10].copy_from_slice(&lba.to_be_bytes());
    c[13] = blocks;
    c
}

/// Verify data then write data, one 512-byte block each.
fn caw_data(verify: u8, write: u8) -> Vec<u8> {
    let mut v = vec![verify; 512];
    v.extend_from_slice(&[write; 512]);
    v
}

impl Harness {
    /// A subsystem whose namespace 1 is a delay bdev (latencies in µs) over a malloc bdev.
    fn delayed_subsystem(&self, nqn: &str, read_us: u64, write_us: u64) -> Arc<Subsystem> {
        let sub = self
            .rt
            .block_on(self.target.create_subsystem(SubsystemParams::new(nqn)))
            .unwrap();
        let base = format!("{}-base", sub.id());
        let m = malloc(&base);
        self.target.bdevs().register(m).unwrap();
        let name = format!("{}-delay", sub.id());
        crate::bdev::DelayBdev::create(
            self.target.bdevs(),
            crate::bdev::DelayParams {
                name: name.clone(),
                base_bdev_name: base,
                uuid: None,
                avg_read_latency: read_us,
                p99_read_latency: read_us,
                avg_write_latency: write_us,
                p99_write_latency: write_us,
            },
        )
        .unwrap();
        self.rt
            .block_on(self.target.add_namespace(
                nqn,
                NsParams {
                    bdev_name: name,
                    nsid: 1,
                    ..NsParams::default()
                },
            ))
            .unwrap();
        sub
    }

    fn completion_order(&self, ids: &[u64]) -> Vec<u64> {
        self.shared
            .done
            .lock()
            .iter()
            .map(|d| d.id)
            .filter(|id| ids.contains(id))
            .collect()
    }
}

#[test]
fn compare_and_write_compares_writes_and_reports_the_miscompare_offset() {
    let mut h = Harness::new();
    let sub = h.subsystem("nqn.2016-06.io.rtgt:scsi-exec-caw", &[1]);
    // VPD B0h: one block at most.
    let d = h.run(&sub, 0, &[0x12, 1, 0xB0, 0, 64, 0], &[], 64);
    assert_eq!(d.data[5], 1, "MAXIMUM COMPARE AND WRITE LENGTH");
    let d = h.run(&sub, 0, &rw16(WRITE_16, 7, 1), &[0x11; 512], 0);
    assert_eq!(d.status, ScsiStatus::Good);
    h.ops();
    let d = h.run(&sub, 0, &caw16(7, 1), &caw_data(0x11, 0x22), 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    assert_eq!(
        h.ops(),
        [
            BdevOp::Read {
                offset_blocks: 7,
                num_blocks: 1
            },
            BdevOp::Write {
                offset_blocks: 7,
                num_blocks: 1,
                fua: false
            }
        ]
    );
    let d = h.run(&sub, 0, &rw16(READ_16, 7, 1), &[], 512);
    assert_eq!(d.data, [0x22; 512]);
    // A miscompare at byte 100: INFORMATION = 100, nothing written.
    let mut data = caw_data(0x22, 0x33);
    data[100] = 0x99;
    h.ops();
    let d = h.run(&sub, 0, &caw16(7, 1), &data, 0);
    assert_eq!(sense_of(&d), (SenseKey::Miscompare, 0x1D, 0x00));
    assert_eq!(d.sense.unwrap().information, Some(100));
    assert_eq!(h.ops().len(), 1, "only the read");
    let d = h.run(&sub, 0, &rw16(READ_16, 7, 1), &[], 512);
    assert_eq!(d.data, [0x22; 512]);
    // The lock was released both times: plain writes and another CAW go on.
    let d = h.run(&sub, 0, &rw16(WRITE_16, 7, 1), &[0x44; 512], 0);
    assert_eq!(d.status, ScsiStatus::Good);
    let d = h.run(&sub, 0, &caw16(7, 1), &caw_data(0x44, 0x55), 0);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    // Errors: too long, out of range, data-out of the wrong size, zero blocks (GOOD).
    let d = h.run(&sub, 0, &caw16(7, 2), &[0; 2048], 0);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x24, 0x00));
    let d = h.run(&sub, 0, &caw16(1024, 1), &caw_data(0, 0), 0);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x21, 0x00));
    let d = h.run(&sub, 0, &caw16(7, 1), &[0; 512], 0);
    assert_eq!(sense_of(&d), (SenseKey::IllegalRequest, 0x0E, 0x03));
    let d = h.run(&sub, 0, &caw16(7, 0), &[], 0);
    assert_eq!(d.status, ScsiStatus::Good);
    h.stop();
}

#[test]
fn compare_and_write_waits_for_writes_in_flight() {
    let mut h = Harness::new();
    // Writes land 100 ms after they are submitted.
    let sub = h.subsystem_holding_writes(
        "nqn.2016-06.io.rtgt:scsi-exec-caw-drain",
        &[1],
        Duration::from_millis(100),
    );
    // A write of 0xAA is in flight when the COMPARE AND WRITE arrives: the compare must see
    // it (without the lock the immediate read would see zeros: MISCOMPARE).
    let w = h.queue(&sub, 0, &rw16(WRITE_16, 5, 1), &[0xAA; 512], 0);
    let c = h.queue(&sub, 0, &caw16(5, 1), &caw_data(0xAA, 0xBB), 0);
    h.kick();
    assert_eq!(h.wait(w).status, ScsiStatus::Good);
    let d = h.wait(c);
    assert_eq!(d.status, ScsiStatus::Good, "{d:?}");
    let d = h.run(&sub, 0, &rw16(READ_16, 5, 1), &[], 512);
    assert_eq!(d.data, [0xBB; 512]);
    h.stop();
}

#[test]
fn writes_wait_while_a_compare_and_write_holds_the_range() {
    let mut h = Harness::new();
    // Reads take 100 ms, writes are immediate.
    let sub = h.delayed_subsystem("nqn.2016-06.io.rtgt:scsi-exec-caw-hold", 100_000, 0);
    let c = h.send(&sub, 0, &caw16(9, 1), &caw_data(0, 0xCC), 0);
    std::thread::sleep(Duration::from_millis(30));
    // The COMPARE AND WRITE is reading; a write to its block, one next to it and one
    // overlapping from the other side arrive. The overlapping ones wait for it; without
    // the lock the write would land before the COMPARE AND WRITE's, which would overwrite
    // it.
    let w = h.send(&sub, 0, &rw16(WRITE_16, 9, 1), &[0xDD; 512], 0);
    let other = h.send(&sub, 0, &rw16(WRITE_16, 10, 1), &[0xEE; 512], 0);
    let d = h.wait(other);
    assert_eq!(d.status, ScsiStatus::Good);
    assert_eq!(h.wait(c).status, ScsiStatus::Good);
    assert_eq!(h.wait(w).status, ScsiStatus::Good);
    assert_eq!(
        h.completion_order(&[c, w, other]),
        [other, c, w],
        "a write next to the range is not held up; one on it waits"
    );
    let d = h.run(&sub, 0, &rw16(READ_16, 9, 2), &[], 1024);
    assert_eq!(
        &d.data[..512],
        &[0xDD; 512][..],
        "the later write is the last"
    );
    assert_eq!(&d.data[512..], &[0xEE; 512][..]);
    h.stop();
}
