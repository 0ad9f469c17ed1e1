//! Target tests: a test transport drives real bdev I/O through admission while subsystems are
//! reconfigured, paused and resumed.

use std::collections::{HashMap, VecDeque};
use std::time::Instant;

use iobuf::IoBuf;
use slab::Slab;

use super::*;
use crate::bdev::{
    Bdev, BdevChannel, BdevError, BdevIo, BdevOp, IoStatus, IoType, MallocBdev, MallocParams,
};
use crate::reactor::ReactorConfig;
use crate::registry::{TransportError, TransportOps, TransportPollGroup};

// ---------- a bdev whose completions arrive late, and one that cannot open channels ----------

/// Holds completions while its gate is closed, so a test controls exactly when in-flight I/O
/// finishes, whatever the machine's load.
struct SlowBdev {
    inner: Arc<dyn Bdev>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    fail_open: std::sync::atomic::AtomicBool,
}

impl Bdev for SlowBdev {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn product_name(&self) -> &'static str {
        "Slow disk"
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
        false
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        if self.fail_open.load(Ordering::SeqCst) {
            return Err(BdevError::Invalid("channel refused by the test".into()));
        }
        Ok(Box::new(SlowChannel {
            inner: self.inner.open_channel()?,
            closed: Arc::clone(&self.closed),
            held: VecDeque::new(),
        }))
    }
    fn config(&self) -> Value {
        json!({})
    }
}

struct SlowChannel {
    inner: Box<dyn BdevChannel>,
    closed: Arc<std::sync::atomic::AtomicBool>,
    held: VecDeque<Box<BdevIo>>,
}

impl BdevChannel for SlowChannel {
    fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        self.inner.submit(io)
    }
    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        let held = &mut self.held;
        self.inner.poll(&mut |io| held.push_back(io));
        if self.closed.load(Ordering::SeqCst) {
            return 0;
        }
        let n = self.held.len();
        for io in self.held.drain(..) {
            done(io);
        }
        n
    }
    fn outstanding(&self) -> usize {
        self.inner.outstanding() + self.held.len()
    }
}

// ---------- the test transport ----------

#[derive(Debug, Clone, Copy)]
enum Op {
    Write { lba: u64, seed: u8 },
    Read { lba: u64 },
    Mgmt,
}

#[derive(Debug, Clone, Copy)]
struct Cmd {
    id: u64,
    sub: u32,
    nsid: u32,
    op: Op,
}

#[derive(Debug, Clone)]
struct Done {
    id: u64,
    ok: bool,
    data: Option<Vec<u8>>,
}

#[derive(Default)]
struct Shared {
    inbox: Mutex<HashMap<usize, VecDeque<Cmd>>>,
    done: Mutex<Vec<Done>>,
    queued: AtomicUsize,
    ns_changes: Mutex<Vec<(u32, Vec<u32>)>>,
    listens: Mutex<Vec<ListenAddr>>,
}

struct TestTransport {
    shared: Arc<Shared>,
    fail_pg: bool,
}

impl Transport for TestTransport {
    fn name(&self) -> &'static str {
        "TEST"
    }
    fn dump_opts(&self) -> TransportParams {
        let mut m = TransportParams::new();
        m.insert("trtype".into(), json!("TEST"));
        m
    }
    fn listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        if addr.traddr == "203.0.113.99" {
            return Err(TransportError::Fabric("address refused by the test".into()));
        }
        self.shared.listens.lock().push(addr.clone());
        Ok(())
    }
    fn stop_listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        self.shared.listens.lock().retain(|a| a != addr);
        Ok(())
    }
    fn poll_group_create(
        &self,
        core: &mut PgCore,
    ) -> Result<Box<dyn TransportPollGroup>, TransportError> {
        if self.fail_pg && core.index() == 1 {
            return Err(TransportError::Other(
                "poll group refused by the test".into(),
            ));
        }
        Ok(Box::new(TestPg {
            shared: Arc::clone(&self.shared),
            index: core.index(),
            tidx: 0,
            reqs: Slab::new(),
            conns: HashMap::new(),
        }))
    }
    fn destroy(&self) {}
}

fn create_test(ctx: TransportContext, params: &TransportParams) -> registry::CreateResult {
    if params.get("refuse").is_some() {
        return Err(TransportError::Invalid("refused by the test".into()));
    }
    let _ = ctx.index;
    Ok(Arc::new(TestTransport {
        shared: Arc::new(Shared::default()),
        fail_pg: params.get("fail_pg").is_some(),
    }))
}

crate::register_transport!(
    TEST_TRANSPORT = TransportOps {
        name: "TEST",
        description: "in-process test transport",
        defaults: TransportParams::new,
        create: create_test,
        options: &[],
        subsystem_attrs: &[],
        listener_attrs: &[],
    }
);

struct Req {
    cmd: Cmd,
}

#[derive(Default)]
struct Conn {
    running: usize,
    closing: bool,
}

struct TestPg {
    shared: Arc<Shared>,
    index: usize,
    tidx: usize,
    reqs: Slab<Req>,
    conns: HashMap<u32, Conn>,
}

impl TestPg {
    fn kind(c: &Cmd) -> AdmitKind {
        match c.op {
            Op::Mgmt => AdmitKind::Mgmt,
            _ => AdmitKind::Io(c.nsid),
        }
    }

    fn finish(
        &mut self,
        core: &mut PgCore,
        key: usize,
        ok: bool,
        data: Option<Vec<u8>>,
        admitted: bool,
    ) {
        let req = self.reqs.remove(key);
        // Complete to the "host" before giving the admission back, as a real transport sends
        // its response first: the release may be what lets a waiting pause finish.
        self.shared.done.lock().push(Done {
            id: req.cmd.id,
            ok,
            data,
        });
        if admitted {
            core.release(req.cmd.sub, Self::kind(&req.cmd));
        }
        let sub = req.cmd.sub;
        let close = match self.conns.get_mut(&sub) {
            Some(c) => {
                c.running = c.running.saturating_sub(1);
                c.closing && c.running == 0
            }
            None => false,
        };
        if close {
            self.conns.remove(&sub);
            core.qpair_removed(Some(sub), false);
        }
    }

    fn start(&mut self, core: &mut PgCore, key: usize) {
        let cmd = self.reqs[key].cmd;
        match core.admit(cmd.sub, Self::kind(&cmd), self.tidx, key as u64) {
            Admission::Go => {}
            Admission::Queued => {
                self.shared.queued.fetch_add(1, Ordering::SeqCst);
                return;
            }
            Admission::InvalidNamespace | Admission::Inactive => {
                return self.finish(core, key, false, None, false);
            }
        }
        let (op, len) = match cmd.op {
            Op::Mgmt => return self.finish(core, key, true, None, true),
            Op::Write { lba, .. } => (
                BdevOp::Write {
                    offset_blocks: lba,
                    num_blocks: 1,
                    fua: false,
                },
                512,
            ),
            Op::Read { lba } => (
                BdevOp::Read {
                    offset_blocks: lba,
                    num_blocks: 1,
                },
                512,
            ),
        };
        let mut io = Box::new(BdevIo::new(op, key as u64));
        let mut buf = IoBuf::alloc(len).unwrap();
        if let Op::Write { seed, .. } = cmd.op {
            buf.as_mut_slice().fill(seed);
        }
        io.bufs.push(buf);
        if core.submit_io(cmd.sub, cmd.nsid, self.tidx, io).is_err() {
            self.finish(core, key, false, None, true);
        }
    }
}

impl TransportPollGroup for TestPg {
    fn poll(&mut self, core: &mut PgCore, completions: &mut Vec<Box<BdevIo>>) -> usize {
        let mut n = 0;
        for io in completions.drain(..) {
            let key = io.tag as usize;
            let ok = io.status == IoStatus::Success;
            let data = matches!(io.op, BdevOp::Read { .. }).then(|| io.bufs[0].as_slice().to_vec());
            self.finish(core, key, ok, data, true);
            n += 1;
        }
        let cmds: Vec<Cmd> = self
            .shared
            .inbox
            .lock()
            .get_mut(&self.index)
            .map(|q| q.drain(..).collect())
            .unwrap_or_default();
        for cmd in cmds {
            let conn = self.conns.entry(cmd.sub).or_insert_with(|| {
                core.qpair_associate(cmd.sub, false);
                Conn::default()
            });
            conn.running += 1;
            let key = self.reqs.insert(Req { cmd });
            self.start(core, key);
            n += 1;
        }
        n
    }

    fn resume_request(&mut self, core: &mut PgCore, token: u64) {
        if self.reqs.contains(token as usize) {
            self.start(core, token as usize);
        }
    }

    fn disconnect_subsystem(&mut self, core: &mut PgCore, subsystem: u32) {
        // Requests still queued in the core are dropped with the connection.
        let queued: Vec<usize> = self
            .reqs
            .iter()
            .filter(|(_, r)| r.cmd.sub == subsystem)
            .map(|(k, _)| k)
            .collect();
        let _ = queued;
        if let Some(c) = self.conns.get_mut(&subsystem) {
            c.closing = true;
            if c.running == 0 {
                self.conns.remove(&subsystem);
                core.qpair_removed(Some(subsystem), false);
            }
        }
    }

    fn namespaces_changed(&mut self, _core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        self.shared
            .ns_changes
            .lock()
            .push((subsystem, nsids.to_vec()));
    }

    fn qpairs(&self, subsystem: Option<u32>) -> Vec<Value> {
        self.conns
            .keys()
            .filter(|s| subsystem.is_none_or(|x| x == **s))
            .map(|s| json!({"poll_group": self.index, "subsystem": s}))
            .collect()
    }

    fn stats(&self) -> Value {
        json!({"trtype": "TEST", "requests": self.reqs.len()})
    }
}

// ---------- harness ----------

struct Harness {
    rt: tokio::runtime::Runtime,
    target: Arc<Target>,
    shared: Arc<Shared>,
    next_id: u64,
}

impl Harness {
    fn new(reactors: usize) -> Self {
        let r = Reactors::start(ReactorConfig::with_count(reactors)).unwrap();
        let target =
            Target::start(r, BdevRegistry::new(), crate::registry::TransportEnv::new()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(target.create_transport("test", &TransportParams::new()))
            .unwrap();
        let (_, t) = target.transport("TEST").unwrap();
        let any: Arc<dyn std::any::Any + Send + Sync> = t;
        let shared = Arc::clone(&any.downcast::<TestTransport>().ok().unwrap().shared);
        Self {
            rt,
            target,
            shared,
            next_id: 0,
        }
    }

    fn malloc(&self, name: &str) -> Arc<dyn Bdev> {
        let b: Arc<dyn Bdev> = MallocBdev::create(MallocParams {
            name: name.into(),
            num_blocks: 1024,
            block_size: 512,
            physical_block_size: 0,
            uuid: None,
            optimal_io_boundary: 0,
        })
        .unwrap();
        self.target.bdevs().register(Arc::clone(&b)).unwrap();
        b
    }

    /// A bdev whose completions wait while its gate (`closed`) is set.
    fn slow(&self, name: &str, closed: bool) -> Arc<SlowBdev> {
        let inner: Arc<dyn Bdev> = MallocBdev::create(MallocParams {
            name: name.into(),
            num_blocks: 1024,
            block_size: 512,
            physical_block_size: 0,
            uuid: None,
            optimal_io_boundary: 0,
        })
        .unwrap();
        let b = Arc::new(SlowBdev {
            inner,
            closed: Arc::new(std::sync::atomic::AtomicBool::new(closed)),
            fail_open: std::sync::atomic::AtomicBool::new(false),
        });
        self.target.bdevs().register(b.clone()).unwrap();
        b
    }

    fn subsystem(&self, nqn: &str) -> Arc<Subsystem> {
        self.rt
            .block_on(self.target.create_subsystem(SubsystemParams::new(nqn)))
            .unwrap()
    }

    fn add_ns(&self, nqn: &str, bdev: &str, nsid: u32) -> Result<u32, CoreError> {
        self.rt.block_on(self.target.add_namespace(
            nqn,
            NsParams {
                bdev_name: bdev.into(),
                nsid,
                ..NsParams::default()
            },
        ))
    }

    /// Queues a command on poll group `pg`; returns its id.
    fn send(&mut self, pg: usize, sub: &Subsystem, nsid: u32, op: Op) -> u64 {
        self.next_id += 1;
        let cmd = Cmd {
            id: self.next_id,
            sub: sub.id(),
            nsid,
            op,
        };
        self.shared
            .inbox
            .lock()
            .entry(pg)
            .or_default()
            .push_back(cmd);
        // Wake the reactor: the inbox is not an fd it sleeps on.
        let _ = self.target.reactors().send_msg(pg, |_| {});
        self.next_id
    }

    fn done_ids(&self) -> Vec<u64> {
        let mut v: Vec<u64> = self.shared.done.lock().iter().map(|d| d.id).collect();
        v.sort_unstable();
        v
    }

    fn wait_done(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.shared.done.lock().len() < n {
            assert!(
                Instant::now() < deadline,
                "only {} of {n} commands completed",
                self.shared.done.lock().len()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    fn stop(self) {
        self.rt.block_on(self.target.shutdown());
        self.target.reactors().stop();
    }
}

// ---------- tests ----------

#[test]
fn subsystem_lifecycle_and_errors() {
    let h = Harness::new(2);
    let t = &h.target;
    assert_eq!(
        t.subsystems().len(),
        1,
        "the discovery subsystem is always there"
    );
    assert_eq!(t.subsystems()[0].kind(), SubsystemType::Discovery);
    h.malloc("m0");
    h.malloc("m1");
    let nqn = "nqn.2016-06.io.spdk:cnode1";
    let sub = h.subsystem(nqn);
    assert_eq!(sub.state(), SubsystemState::Active);
    let dup = h.rt.block_on(t.create_subsystem(SubsystemParams::new(nqn)));
    assert!(matches!(dup, Err(CoreError::Exists(_))), "{dup:?}");
    let bad =
        h.rt.block_on(t.create_subsystem(SubsystemParams::new("nqn.bad")));
    assert!(matches!(bad, Err(CoreError::Invalid(_))));
    let mut p = SubsystemParams::new("nqn.2016-06.io.spdk:cnode2");
    p.min_cntlid = 0;
    let err = h.rt.block_on(t.create_subsystem(p)).unwrap_err();
    assert_eq!(err.to_string(), "Invalid cntlid range [0-65519]");
    let mut p = SubsystemParams::new("nqn.2016-06.io.spdk:cnode2");
    p.serial = Some("x".repeat(21));
    assert!(h.rt.block_on(t.create_subsystem(p)).is_err());
    assert!(
        t.subsystem("nqn.2016-06.io.spdk:cnode2").is_none(),
        "failed creates leave no residue"
    );

    assert_eq!(h.add_ns(nqn, "m0", 0).unwrap(), 1);
    assert_eq!(h.add_ns(nqn, "m1", 5).unwrap(), 5);
    h.malloc("m2");
    let e = h.add_ns(nqn, "m2", 5).unwrap_err();
    assert!(e.to_string().contains("NSID 5 already in use"), "{e}");
    assert!(
        t.bdevs().claim_of("m2").is_none(),
        "a failed add releases the claim"
    );
    let e = h.add_ns(nqn, "nope", 0).unwrap_err();
    assert!(e.to_string().contains("'nope' not found"), "{e}");
    let other = "nqn.2016-06.io.spdk:cnode3";
    h.subsystem(other);
    let e = h.add_ns(other, "m0", 0).unwrap_err();
    assert!(e.to_string().contains("already claimed"), "{e}");
    assert!(
        h.add_ns(nqn, "m2", 33).is_err(),
        "NSID above max_namespaces"
    );

    let addr = ListenAddr::new("test", AdrFam::Ipv4, "10.0.0.1", "4420");
    h.rt.block_on(t.add_listener(nqn, addr.clone())).unwrap();
    h.rt.block_on(t.add_listener(other, addr.clone())).unwrap();
    assert_eq!(
        h.shared.listens.lock().len(),
        1,
        "one transport listener per address"
    );
    let e =
        h.rt.block_on(t.add_listener(nqn, addr.clone()))
            .unwrap_err();
    assert!(matches!(e, CoreError::Exists(_)));
    let e =
        h.rt.block_on(t.add_listener(
            nqn,
            ListenAddr::new("rdma", AdrFam::Ipv4, "10.0.0.1", "4420"),
        ))
        .unwrap_err();
    assert!(
        e.to_string().contains("Unable to find RDMA transport"),
        "{e}"
    );
    let refused = ListenAddr::new("test", AdrFam::Ipv4, "203.0.113.99", "1");
    assert!(h.rt.block_on(t.add_listener(nqn, refused)).is_err());
    assert_eq!(
        sub.config().listeners,
        vec![addr.clone()],
        "a refused listen leaves no residue"
    );

    t.add_host(
        nqn,
        "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
    )
    .unwrap();
    assert!(
        t.add_host(
            nqn,
            "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
        )
        .is_err()
    );
    assert!(sub.access_allowed(
        "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
        &addr
    ));
    assert!(!sub.access_allowed("nqn.x:other", &addr));
    h.rt.block_on(t.allow_any_host(nqn, true)).unwrap();
    assert!(sub.access_allowed("nqn.x:other", &addr));

    h.rt.block_on(t.remove_namespace(nqn, 5)).unwrap();
    assert!(t.bdevs().claim_of("m1").is_none());
    assert!(h.rt.block_on(t.remove_namespace(nqn, 5)).is_err());

    h.rt.block_on(t.delete_subsystem(nqn)).unwrap();
    assert!(t.subsystem(nqn).is_none());
    assert!(
        t.bdevs().claim_of("m0").is_none(),
        "delete releases the bdevs"
    );
    assert_eq!(
        h.shared.listens.lock().len(),
        1,
        "the other subsystem still listens"
    );
    h.rt.block_on(t.delete_subsystem(other)).unwrap();
    assert!(
        h.shared.listens.lock().is_empty(),
        "the last user stops the listener"
    );
    assert!(matches!(
        h.rt.block_on(t.delete_subsystem(other)),
        Err(CoreError::NotFound(_))
    ));
    h.stop();
}

#[test]
fn pause_drains_in_flight_io_queues_new_io_and_resume_replays_it() {
    let mut h = Harness::new(2);
    let nqn = "nqn.2016-06.io.spdk:pause";
    let sub = h.subsystem(nqn);
    let slow = h.slow("slow0", true);
    h.add_ns(nqn, "slow0", 1).unwrap();

    // 32 writes in flight on both poll groups, held at the bdev.
    let mut writes = Vec::new();
    for i in 0..32u64 {
        let id = h.send(
            (i % 2) as usize,
            &sub,
            1,
            Op::Write {
                lba: i,
                seed: i as u8 + 1,
            },
        );
        writes.push(id);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while h
        .rt
        .block_on(h.target.gather(|pg| pg.core().stats().pending_bdev_io))
        .iter()
        .sum::<u64>()
        < 32
    {
        assert!(Instant::now() < deadline, "writes never reached the bdev");
        std::thread::sleep(Duration::from_millis(1));
    }
    // The pause cannot finish while they are held.
    let t = Arc::clone(&h.target);
    let pause = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(t.pause(nqn, None))
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(!pause.is_finished(), "pause returned with I/O outstanding");
    assert_eq!(sub.state(), SubsystemState::Pausing);
    assert!(h.shared.done.lock().is_empty());
    slow.closed.store(false, Ordering::SeqCst);
    pause.join().unwrap().unwrap();
    assert_eq!(
        h.done_ids(),
        writes,
        "pause returned before in-flight I/O finished"
    );
    assert_eq!(sub.state(), SubsystemState::Paused);
    assert!(sub.user_paused());

    // New I/O (reads of what was written, and more writes) queues while paused.
    let mut reads = Vec::new();
    for i in 0..32u64 {
        reads.push(h.send((i % 2) as usize, &sub, 1, Op::Read { lba: i }));
    }
    let mgmt = h.send(0, &sub, 0, Op::Mgmt);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(h.done_ids().len(), 32, "nothing completes while paused");
    assert_eq!(h.shared.queued.load(Ordering::SeqCst), 33);

    h.rt.block_on(h.target.resume(nqn)).unwrap();
    assert_eq!(sub.state(), SubsystemState::Active);
    h.wait_done(65);
    let done = h.shared.done.lock().clone();
    let mut ids: Vec<u64> = done.iter().map(|d| d.id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 65, "every command completed exactly once");
    assert!(done.iter().all(|d| d.ok), "all succeeded");
    for (i, id) in reads.iter().enumerate() {
        let d = done.iter().find(|d| d.id == *id).unwrap();
        let data = d.data.as_ref().unwrap();
        assert!(
            data.iter().all(|&b| b == i as u8 + 1),
            "read {i} returned wrong data"
        );
    }
    assert!(ids.contains(&mgmt));
    h.stop();
}

#[test]
fn pausing_one_namespace_leaves_the_others_flowing() {
    let mut h = Harness::new(2);
    let nqn = "nqn.2016-06.io.spdk:nspause";
    let sub = h.subsystem(nqn);
    h.malloc("a");
    h.malloc("b");
    h.add_ns(nqn, "a", 1).unwrap();
    h.add_ns(nqn, "b", 2).unwrap();
    h.rt.block_on(h.target.pause(nqn, Some(1))).unwrap();
    let q = h.send(0, &sub, 1, Op::Write { lba: 0, seed: 9 });
    let f = h.send(1, &sub, 2, Op::Write { lba: 0, seed: 9 });
    h.wait_done(1);
    std::thread::sleep(Duration::from_millis(50));
    assert_eq!(
        h.done_ids(),
        vec![f],
        "namespace 2 flows, namespace 1 waits"
    );
    let e = h.rt.block_on(h.target.pause(nqn, Some(7))).unwrap_err();
    assert!(matches!(e, CoreError::NotFound(_)));
    h.rt.block_on(h.target.resume(nqn)).unwrap();
    h.wait_done(2);
    assert_eq!(h.done_ids(), vec![q, f]);
    // I/O to a namespace that does not exist fails at once.
    let bad = h.send(0, &sub, 9, Op::Read { lba: 0 });
    h.wait_done(3);
    assert!(
        !h.shared
            .done
            .lock()
            .iter()
            .find(|d| d.id == bad)
            .unwrap()
            .ok
    );
    h.stop();
}

#[test]
fn changes_to_one_subsystem_serialize_instead_of_failing() {
    let h = Harness::new(2);
    let nqn = "nqn.2016-06.io.spdk:serial";
    h.subsystem(nqn);
    for i in 0..12 {
        h.malloc(&format!("s{i}"));
    }
    let t = Arc::clone(&h.target);
    let results: Vec<Result<u32, CoreError>> = h.rt.block_on(async move {
        let mut tasks = Vec::new();
        for i in 0..12 {
            let t = Arc::clone(&t);
            tasks.push(tokio::spawn(async move {
                if i % 4 == 3 {
                    t.pause(nqn, None).await?;
                    t.resume(nqn).await.map(|()| 0)
                } else {
                    t.add_namespace(
                        nqn,
                        NsParams {
                            bdev_name: format!("s{i}"),
                            ..NsParams::default()
                        },
                    )
                    .await
                }
            }));
        }
        let mut out = Vec::new();
        for task in tasks {
            out.push(task.await.unwrap());
        }
        out
    });
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    let mut nsids: Vec<u32> = results
        .iter()
        .enumerate()
        .filter(|(i, _)| i % 4 != 3)
        .map(|(_, r)| *r.as_ref().unwrap())
        .collect();
    nsids.sort_unstable();
    assert_eq!(nsids, (1..=9).collect::<Vec<_>>());
    let sub = h.target.subsystem(nqn).unwrap();
    assert_eq!(sub.state(), SubsystemState::Active);
    assert_eq!(sub.config().namespaces.len(), 9);
    h.stop();
}

#[test]
fn a_failed_resume_rolls_the_change_back() {
    let mut h = Harness::new(2);
    let nqn = "nqn.2016-06.io.spdk:rollback";
    let sub = h.subsystem(nqn);
    h.malloc("good");
    h.add_ns(nqn, "good", 1).unwrap();
    let bad = h.slow("bad", false);
    bad.fail_open.store(true, Ordering::SeqCst);
    let e = h.add_ns(nqn, "bad", 2).unwrap_err();
    assert!(e.to_string().contains("channel refused"), "{e}");
    assert_eq!(sub.state(), SubsystemState::Active);
    assert_eq!(
        sub.config().namespaces.keys().copied().collect::<Vec<_>>(),
        vec![1]
    );
    assert!(h.target.bdevs().claim_of("bad").is_none());
    // The subsystem still serves I/O after the rollback.
    h.send(1, &sub, 1, Op::Write { lba: 3, seed: 3 });
    h.wait_done(1);
    assert!(h.shared.done.lock()[0].ok);
    h.stop();
}

#[test]
fn a_change_while_an_operator_paused_keeps_it_paused() {
    let mut h = Harness::new(1);
    let nqn = "nqn.2016-06.io.spdk:userpause";
    let sub = h.subsystem(nqn);
    h.malloc("x");
    h.malloc("y");
    h.add_ns(nqn, "y", 1).unwrap();
    h.rt.block_on(h.target.pause(nqn, None)).unwrap();
    assert_eq!(h.add_ns(nqn, "x", 0).unwrap(), 2);
    assert_eq!(
        sub.state(),
        SubsystemState::Paused,
        "adding a namespace did not resume"
    );
    let id = h.send(0, &sub, 1, Op::Write { lba: 0, seed: 1 });
    std::thread::sleep(Duration::from_millis(50));
    assert!(
        h.done_ids().is_empty(),
        "I/O waits for the operator's resume"
    );
    h.rt.block_on(h.target.resume(nqn)).unwrap();
    h.wait_done(1);
    assert_eq!(h.done_ids(), vec![id]);
    let changes = h.shared.ns_changes.lock().clone();
    assert!(
        changes.iter().any(|(s, n)| *s == sub.id() && n == &[2]),
        "{changes:?}"
    );
    // The new namespace serves I/O after the resume.
    let id2 = h.send(0, &sub, 2, Op::Write { lba: 0, seed: 2 });
    h.wait_done(2);
    assert!(
        h.shared
            .done
            .lock()
            .iter()
            .find(|d| d.id == id2)
            .unwrap()
            .ok
    );
    h.stop();
}

#[test]
fn deleting_a_subsystem_waits_for_its_connections() {
    let mut h = Harness::new(2);
    let nqn = "nqn.2016-06.io.spdk:del";
    let sub = h.subsystem(nqn);
    let slow = h.slow("sd", true);
    h.add_ns(nqn, "sd", 1).unwrap();
    h.send(0, &sub, 1, Op::Write { lba: 0, seed: 1 });
    h.send(1, &sub, 1, Op::Write { lba: 1, seed: 1 });
    let deadline = Instant::now() + Duration::from_secs(10);
    while h.rt.block_on(h.target.qpairs(nqn)).unwrap().len() < 2 {
        assert!(Instant::now() < deadline, "connections never appeared");
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Arc::clone(&h.target);
    let delete = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(t.delete_subsystem(nqn))
    });
    std::thread::sleep(Duration::from_millis(100));
    assert!(
        !delete.is_finished(),
        "delete returned with I/O outstanding"
    );
    assert_eq!(sub.state(), SubsystemState::Deactivating);
    slow.closed.store(false, Ordering::SeqCst);
    delete.join().unwrap().unwrap();
    assert_eq!(
        h.done_ids().len(),
        2,
        "in-flight I/O finished before the delete returned"
    );
    let stats = h.rt.block_on(h.target.stats());
    let current: u64 = stats["poll_groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["current_io_qpairs"].as_u64().unwrap())
        .sum();
    assert_eq!(current, 0);
    assert!(h.target.bdevs().claim_of("sd").is_none());
    h.stop();
}

#[test]
fn transports_are_created_once_and_failures_leave_no_residue() {
    let h = Harness::new(2);
    let e =
        h.rt.block_on(h.target.create_transport("TEST", &TransportParams::new()))
            .unwrap_err();
    assert_eq!(e.to_string(), "Transport type 'TEST' already exists");
    let e =
        h.rt.block_on(h.target.create_transport("bogus", &TransportParams::new()))
            .unwrap_err();
    assert_eq!(e.to_string(), "Invalid transport type 'bogus'");
    assert_eq!(h.target.transports().len(), 1);
    let stats = h.rt.block_on(h.target.stats());
    assert_eq!(stats["poll_groups"].as_array().unwrap().len(), 2);
    assert_eq!(stats["poll_groups"][1]["name"], "nvmf_tgt_poll_group_001");
    assert_eq!(stats["poll_groups"][0]["transports"][0]["trtype"], "TEST");
    h.stop();

    // A transport whose poll group cannot be created on reactor 1.
    let r = Reactors::start(ReactorConfig::with_count(2)).unwrap();
    let target =
        Target::start(r, BdevRegistry::new(), crate::registry::TransportEnv::new()).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let mut p = TransportParams::new();
    p.insert("fail_pg".into(), json!(true));
    let e = rt
        .block_on(target.create_transport("test", &p))
        .unwrap_err();
    assert!(
        e.to_string().starts_with("Failed to add transport to tgt."),
        "{e}"
    );
    assert!(target.transports().is_empty());
    let stats = rt.block_on(target.stats());
    assert!(
        stats["poll_groups"][0]["transports"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let mut p = TransportParams::new();
    p.insert("refuse".into(), json!(true));
    let e = rt
        .block_on(target.create_transport("test", &p))
        .unwrap_err();
    assert!(e.to_string().contains("create failed"), "{e}");
    rt.block_on(target.create_transport("test", &TransportParams::new()))
        .unwrap();
    assert_eq!(target.transports().len(), 1);
    rt.block_on(target.shutdown());
    target.reactors().stop();
}
