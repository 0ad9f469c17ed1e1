//! The `sim` provider: an in-process RDMA fabric with verbs semantics.
//!
//! A [`SimNetwork`] is a wire: devices on it have IP addresses, listeners bind IP:port, active
//! identifiers resolve and connect to IP:port, and queue pairs move bytes by copying directly
//! between registered regions at post time. What a real adapter checks, the simulation checks:
//! lkeys, rkeys, protection domains, access rights and bounds (a bad key is an error completion
//! and moves the queue pair to the error state), receiver-not-ready (an RNR retry count of 7
//! waits for a receive, smaller counts fail with [`WcStatus::RnrRetryExcErr`]), receive-buffer
//! length, per-queue-pair ordering, flush errors in the error state, type-2 memory windows and
//! their remote invalidation, and "last WQE reached" for queue pairs on a shared receive queue.
//!
//! Locking: each queue pair has a send-queue lock and a receive-queue lock, each completion
//! queue and event queue one lock, each device one read-mostly key-table lock. No lock is
//! global. Lock order: send queue → receive queue (own or peer's) / shared receive queue →
//! key tables (read, or write for binds and invalidations) → completion queues and event
//! queues. Two send-queue locks are never held together: errors a work request causes on the
//! peer are applied after the poster's lock is released.
//!
//! Tests reach fault hooks through [`SimNetwork::faults`].

mod cm;
mod qp;
mod recv;
mod ring;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::IpAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};
use slab::Slab;

use crate::error::{FabricError, PostError, PostErrorKind, Result};
use crate::mem::DmaRegion;
use crate::types::*;
use crate::verbs::{Device, DeviceImpl};

pub(crate) use cm::{SCmId, SEventChannel};
pub(crate) use qp::{SQp, SQpHandle};
pub(crate) use recv::RecvQ;

// ---------------------------------------------------------------------------------------------
// eventfd-backed queues

/// A non-blocking eventfd.
pub(crate) struct EventFd(OwnedFd);

impl EventFd {
    fn new() -> Result<Self> {
        // SAFETY: plain syscall; the returned fd (if any) is owned by the OwnedFd below.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(FabricError::last_os("eventfd"));
        }
        // SAFETY: fd is a fresh descriptor nobody else owns.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    fn fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Makes the fd readable.
    fn signal(&self) {
        let v: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our eventfd.
        let r = unsafe { libc::write(self.fd(), (&v as *const u64).cast(), 8) };
        if r != 8 {
            tracing::trace!("eventfd write returned {r}");
        }
    }

    /// Makes the fd unreadable.
    fn clear(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our non-blocking eventfd.
        let _ = unsafe { libc::read(self.fd(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// A FIFO whose eventfd is readable exactly when the FIFO is not empty.
pub(crate) struct EventQueue<T> {
    efd: EventFd,
    q: Mutex<VecDeque<T>>,
}

impl<T> EventQueue<T> {
    pub(crate) fn new() -> Result<Self> {
        Ok(EventQueue {
            efd: EventFd::new()?,
            q: Mutex::new(VecDeque::new()),
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.efd.fd()
    }

    pub(crate) fn push(&self, v: T) {
        let mut q = self.q.lock();
        q.push_back(v);
        if q.len() == 1 {
            self.efd.signal();
        }
    }

    pub(crate) fn pop(&self) -> Option<T> {
        let mut q = self.q.lock();
        let v = q.pop_front();
        if q.is_empty() {
            self.efd.clear();
        }
        v
    }
}

// ---------------------------------------------------------------------------------------------
// Timer (RNR retry expiry, delayed completions, DREQ timeouts)

type Task = Box<dyn FnOnce() + Send>;

/// A scheduled task, to [`Timer::cancel`] it: its deadline and a sequence number that makes it
/// unique.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct TimerKey(Instant, u64);

pub(crate) struct Timer {
    st: Mutex<TimerState>,
    cv: Condvar,
}

struct TimerState {
    /// Ordered by deadline; a task leaves the map when it runs or is cancelled, so the map holds
    /// only what is still to come (and whatever the tasks capture lives no longer than that).
    tasks: BTreeMap<TimerKey, Task>,
    next_seq: u64,
    running: bool,
    shutdown: bool,
}

impl Timer {
    fn new() -> Arc<Self> {
        Arc::new(Timer {
            st: Mutex::new(TimerState {
                tasks: BTreeMap::new(),
                next_seq: 0,
                running: false,
                shutdown: false,
            }),
            cv: Condvar::new(),
        })
    }

    /// Runs `f` on the timer thread after `after`.
    pub(crate) fn schedule(self: &Arc<Self>, after: Duration, f: Task) -> TimerKey {
        let mut st = self.st.lock();
        let key = TimerKey(Instant::now() + after, st.next_seq);
        st.next_seq += 1;
        st.tasks.insert(key, f);
        if !st.running {
            st.running = true;
            let me = Arc::clone(self);
            let spawned = std::thread::Builder::new()
                .name("fabric-sim-timer".into())
                .spawn(move || me.run());
            if let Err(e) = spawned {
                st.running = false;
                tracing::error!("sim fabric: cannot start the timer thread: {e}");
            }
        }
        self.cv.notify_one();
        key
    }

    /// Drops the task `key` if it has not run yet; `true` if it was still pending. The task is
    /// dropped after the timer's lock is released (what it captured may have a `Drop` of its
    /// own).
    pub(crate) fn cancel(&self, key: TimerKey) -> bool {
        let task = self.st.lock().tasks.remove(&key);
        task.is_some()
    }

    /// Tasks scheduled and not yet run or cancelled.
    #[cfg(test)]
    pub(crate) fn pending(&self) -> usize {
        self.st.lock().tasks.len()
    }

    fn run(self: Arc<Self>) {
        let mut st = self.st.lock();
        loop {
            if st.shutdown {
                let tasks = std::mem::take(&mut st.tasks);
                drop(st);
                drop(tasks);
                return;
            }
            let now = Instant::now();
            match st.tasks.first_entry() {
                Some(e) if e.key().0 <= now => {
                    let f = e.remove();
                    drop(st);
                    f();
                    st = self.st.lock();
                }
                Some(e) => {
                    let t = e.key().0;
                    self.cv.wait_until(&mut st, t);
                }
                None => {
                    self.cv.wait(&mut st);
                }
            }
        }
    }

    fn shutdown(&self) {
        self.st.lock().shutdown = true;
        self.cv.notify_all();
    }
}

// ---------------------------------------------------------------------------------------------
// Fault hooks

/// Which completions a drop/delay fault applies to (every `Some` field must match).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompletionMatch {
    /// The local queue pair number.
    pub qp_num: Option<u32>,
    /// The work request id.
    pub wr_id: Option<u64>,
    /// Receive completions (`true`) or send-queue completions (`false`).
    pub recv: Option<bool>,
}

impl CompletionMatch {
    /// Matches any completion of queue pair `qp_num`.
    pub fn qp(qp_num: u32) -> Self {
        CompletionMatch {
            qp_num: Some(qp_num),
            ..Default::default()
        }
    }

    /// Also requires the work request id.
    pub fn wr_id(mut self, wr_id: u64) -> Self {
        self.wr_id = Some(wr_id);
        self
    }

    /// Only receive completions.
    pub fn recv(mut self) -> Self {
        self.recv = Some(true);
        self
    }

    /// Only send-queue completions.
    pub fn send(mut self) -> Self {
        self.recv = Some(false);
        self
    }

    fn matches(&self, wc: &WorkCompletion) -> bool {
        self.qp_num.is_none_or(|q| q == wc.qp_num)
            && self.wr_id.is_none_or(|w| w == wc.wr_id)
            && self.recv.is_none_or(|r| r == wc.opcode.is_recv())
    }
}

enum CompletionFault {
    Drop,
    Delay(Duration),
}

/// How many faults a network has actually applied, by kind (an armed fault counts once it
/// fires, not when it is armed). Fault tests compare these before and after each step to
/// prove that the fault they armed happened.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultCounts {
    /// Completions lost ([`SimFaults::drop_completion`]).
    pub completions_dropped: u64,
    /// Completions delivered late ([`SimFaults::delay_completion`]).
    pub completions_delayed: u64,
    /// Memory registrations failed ([`SimFaults::fail_next_registration`],
    /// [`SimFaults::fail_registration_on`]).
    pub registrations_failed: u64,
    /// Connection requests rejected ([`SimFaults::refuse_next_connection`]).
    pub connections_refused: u64,
    /// Queue pairs forced into the error state ([`SimNetwork::force_qp_error`]).
    pub qp_errors_forced: u64,
    /// Devices removed ([`SimNetwork::remove_device`]).
    pub devices_removed: u64,
}

impl FaultCounts {
    /// What was applied since `earlier` (kind by kind).
    pub fn since(&self, earlier: &FaultCounts) -> FaultCounts {
        FaultCounts {
            completions_dropped: self.completions_dropped - earlier.completions_dropped,
            completions_delayed: self.completions_delayed - earlier.completions_delayed,
            registrations_failed: self.registrations_failed - earlier.registrations_failed,
            connections_refused: self.connections_refused - earlier.connections_refused,
            qp_errors_forced: self.qp_errors_forced - earlier.qp_errors_forced,
            devices_removed: self.devices_removed - earlier.devices_removed,
        }
    }
}

#[derive(Default)]
struct FiredCounters {
    dropped: AtomicU64,
    delayed: AtomicU64,
    registrations: AtomicU64,
    refused: AtomicU64,
    qp_errors: AtomicU64,
    devices: AtomicU64,
}

/// Fault hooks of a simulated network, for tests. Each armed fault fires once;
/// [`SimFaults::fired`] counts the faults applied and [`SimFaults::pending`] those armed that
/// have not fired yet.
pub struct SimFaults {
    armed: AtomicBool,
    completions: Mutex<Vec<(CompletionMatch, CompletionFault)>>,
    fail_registration: AtomicU32,
    fail_registration_on: Mutex<Vec<(IpAddr, u32)>>,
    refuse: Mutex<VecDeque<Vec<u8>>>,
    fired: FiredCounters,
}

impl std::fmt::Debug for SimFaults {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SimFaults").finish_non_exhaustive()
    }
}

impl SimFaults {
    fn new() -> Self {
        SimFaults {
            armed: AtomicBool::new(false),
            completions: Mutex::new(Vec::new()),
            fail_registration: AtomicU32::new(0),
            fail_registration_on: Mutex::new(Vec::new()),
            refuse: Mutex::new(VecDeque::new()),
            fired: FiredCounters::default(),
        }
    }

    /// The faults applied so far on this network.
    pub fn fired(&self) -> FaultCounts {
        let f = &self.fired;
        FaultCounts {
            completions_dropped: f.dropped.load(Ordering::Acquire),
            completions_delayed: f.delayed.load(Ordering::Acquire),
            registrations_failed: f.registrations.load(Ordering::Acquire),
            connections_refused: f.refused.load(Ordering::Acquire),
            qp_errors_forced: f.qp_errors.load(Ordering::Acquire),
            devices_removed: f.devices.load(Ordering::Acquire),
        }
    }

    /// How many armed faults have not fired yet.
    pub fn pending(&self) -> usize {
        self.completions.lock().len()
            + self.fail_registration.load(Ordering::Acquire) as usize
            + self.fail_registration_on.lock().len()
            + self.refuse.lock().len()
    }

    /// The next completion matching `m` is lost (never reaches its completion queue).
    pub fn drop_completion(&self, m: CompletionMatch) {
        self.completions.lock().push((m, CompletionFault::Drop));
        self.armed.store(true, Ordering::Release);
    }

    /// The next completion matching `m` reaches its completion queue `delay` late.
    pub fn delay_completion(&self, m: CompletionMatch, delay: Duration) {
        self.completions
            .lock()
            .push((m, CompletionFault::Delay(delay)));
        self.armed.store(true, Ordering::Release);
    }

    /// The next memory registration on this network fails with [`FabricError::InjectedFault`].
    pub fn fail_next_registration(&self) {
        self.fail_registration.fetch_add(1, Ordering::AcqRel);
    }

    /// On the device at `ip`, the registration after the next `skip` successful ones fails
    /// with [`FabricError::InjectedFault`] (once). Unlike
    /// [`SimFaults::fail_next_registration`], registrations of other devices (a test's
    /// initiators) do not consume it, and `skip` picks which of several registrations fails.
    pub fn fail_registration_on(&self, ip: IpAddr, skip: u32) {
        self.fail_registration_on.lock().push((ip, skip));
    }

    /// The next connection request to any listener on this network is rejected by the
    /// "remote consumer" with `private_data` (the listener never sees it).
    pub fn refuse_next_connection(&self, private_data: &[u8]) {
        self.refuse.lock().push_back(private_data.to_vec());
    }

    fn take_registration_failure(&self, ip: IpAddr) -> bool {
        let fail = self.registration_rule(ip);
        if fail {
            self.fired.registrations.fetch_add(1, Ordering::AcqRel);
        }
        fail
    }

    fn registration_rule(&self, ip: IpAddr) -> bool {
        if self
            .fail_registration
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1))
            .is_ok()
        {
            return true;
        }
        let mut rules = self.fail_registration_on.lock();
        let Some(i) = rules.iter().position(|(a, _)| *a == ip) else {
            return false;
        };
        if rules[i].1 == 0 {
            rules.remove(i);
            return true;
        }
        rules[i].1 -= 1;
        false
    }

    pub(crate) fn take_refusal(&self) -> Option<Vec<u8>> {
        let r = self.refuse.lock().pop_front();
        if r.is_some() {
            self.fired.refused.fetch_add(1, Ordering::AcqRel);
        }
        r
    }

    /// The fault a completion meets, if any: one load while no fault is armed (every
    /// completion passes here).
    #[inline(always)]
    fn intercept(&self, wc: &WorkCompletion) -> Option<CompletionFault> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        self.intercept_armed(wc)
    }

    #[cold]
    #[inline(never)]
    fn intercept_armed(&self, wc: &WorkCompletion) -> Option<CompletionFault> {
        let mut rules = self.completions.lock();
        let i = rules.iter().position(|(m, _)| m.matches(wc))?;
        let (_, f) = rules.remove(i);
        if rules.is_empty() {
            self.armed.store(false, Ordering::Release);
        }
        let counter = match f {
            CompletionFault::Drop => &self.fired.dropped,
            CompletionFault::Delay(_) => &self.fired.delayed,
        };
        counter.fetch_add(1, Ordering::AcqRel);
        Some(f)
    }
}

// ---------------------------------------------------------------------------------------------
// Network

/// An in-process RDMA "wire". Devices on it see each other by IP address. Cheap to clone.
#[derive(Clone)]
pub struct SimNetwork {
    pub(crate) inner: Arc<NetInner>,
}

impl std::fmt::Debug for SimNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let devs: Vec<_> = self
            .inner
            .devices
            .lock()
            .iter()
            .map(|d| (d.name.clone(), d.ip))
            .collect();
        f.debug_struct("SimNetwork")
            .field("devices", &devs)
            .finish()
    }
}

pub(crate) struct NetInner {
    devices: Mutex<Vec<Arc<SDevice>>>,
    pub(crate) cm: Mutex<cm::CmRegistry>,
    qps: Mutex<HashMap<u32, Weak<SQp>>>,
    next_qpn: AtomicU32,
    pub(crate) faults: Arc<SimFaults>,
    timer: Arc<Timer>,
}

impl Drop for NetInner {
    fn drop(&mut self) {
        self.timer.shutdown();
    }
}

impl Default for SimNetwork {
    fn default() -> Self {
        Self::new()
    }
}

impl PartialEq for SimNetwork {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl Eq for SimNetwork {}

/// The process-wide default network (`rtgt serve --fabric sim`).
static GLOBAL: OnceLock<SimNetwork> = OnceLock::new();

/// The address of the device the global network starts with.
pub const GLOBAL_SIM_ADDR: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(10, 0, 0, 1));

impl SimNetwork {
    /// A new, empty network.
    pub fn new() -> Self {
        SimNetwork {
            inner: Arc::new(NetInner {
                devices: Mutex::new(Vec::new()),
                cm: Mutex::new(cm::CmRegistry::default()),
                qps: Mutex::new(HashMap::new()),
                next_qpn: AtomicU32::new(0x100),
                faults: Arc::new(SimFaults::new()),
                timer: Timer::new(),
            }),
        }
    }

    /// The process-wide network, created on first use with one device `sim0` at
    /// [`GLOBAL_SIM_ADDR`] (10.0.0.1), for `rtgt serve --fabric sim`; in-process initiators
    /// add their own devices to it. Tests that run in parallel should each use a
    /// [`SimNetwork::new`] of their own instead, so addresses and ports never collide.
    pub fn global() -> SimNetwork {
        GLOBAL
            .get_or_init(|| {
                let n = SimNetwork::new();
                if let Err(e) = n.add_device("sim0", GLOBAL_SIM_ADDR) {
                    tracing::error!("sim fabric: cannot create sim0: {e}");
                }
                n
            })
            .clone()
    }

    /// Adds a device with default limits at `ip`.
    pub fn add_device(&self, name: &str, ip: IpAddr) -> Result<Device> {
        self.add_device_with_attr(name, ip, default_attr())
    }

    /// Adds a device with the given limits at `ip` (to test how callers clamp to them).
    pub fn add_device_with_attr(&self, name: &str, ip: IpAddr, attr: DeviceAttr) -> Result<Device> {
        let mut devs = self.inner.devices.lock();
        if devs.iter().any(|d| d.ip == ip) {
            return Err(FabricError::AddrInUse);
        }
        let id = crate::next_handle();
        let d = Arc::new(SDevice {
            id,
            cache_salt: id.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 60,
            key_gen: AtomicU64::new(0),
            name: name.to_string(),
            ip,
            attr,
            net: Arc::downgrade(&self.inner),
            faults: Arc::clone(&self.inner.faults),
            timer: Arc::clone(&self.inner.timer),
            keys: RwLock::new(Slab::new()),
            key_tag: AtomicU32::new(1),
            async_q: EventQueue::new()?,
            removed: AtomicBool::new(false),
        });
        devs.push(Arc::clone(&d));
        Ok(Device(DeviceImpl::Sim(d)))
    }

    /// The devices on the network, in creation order.
    pub fn devices(&self) -> Vec<Device> {
        self.inner
            .devices
            .lock()
            .iter()
            .map(|d| Device(DeviceImpl::Sim(Arc::clone(d))))
            .collect()
    }

    /// Removes the device at `ip`: identifiers on it get [`CmEventKind::DeviceRemoval`] and its
    /// queue pairs move to the error state. Returns whether such a device existed.
    pub fn remove_device(&self, ip: IpAddr) -> bool {
        let dev = {
            let mut devs = self.inner.devices.lock();
            let Some(i) = devs.iter().position(|d| d.ip == ip) else {
                return false;
            };
            devs.remove(i)
        };
        dev.removed.store(true, Ordering::Release);
        self.inner
            .faults
            .fired
            .devices
            .fetch_add(1, Ordering::AcqRel);
        cm::device_event(&self.inner, &dev, CmEventKind::DeviceRemoval);
        let qps: Vec<Arc<SQp>> = self
            .inner
            .qps
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .filter(|q| Arc::ptr_eq(q.device(), &dev))
            .collect();
        for q in qps {
            q.enter_error();
        }
        dev.push_async(AsyncEvent {
            kind: AsyncEventKind::DeviceFatal,
            element: AsyncElement::Device,
        });
        true
    }

    /// Tells identifiers bound to the device at `ip` that its address changed
    /// ([`CmEventKind::AddrChange`]). Returns how many were told.
    pub fn signal_addr_change(&self, ip: IpAddr) -> usize {
        let Some(dev) = self.device_by_ip(ip) else {
            return 0;
        };
        cm::device_event(&self.inner, &dev, CmEventKind::AddrChange)
    }

    /// Forces a queue pair into the error state, as an adapter would on a fatal error: its
    /// outstanding work requests flush and a [`AsyncEventKind::QpFatal`] event is raised on its
    /// device. Returns whether the queue pair exists.
    pub fn force_qp_error(&self, qp_num: u32) -> bool {
        let qp = self.inner.qps.lock().get(&qp_num).and_then(Weak::upgrade);
        match qp {
            Some(q) => {
                q.enter_error();
                self.inner
                    .faults
                    .fired
                    .qp_errors
                    .fetch_add(1, Ordering::AcqRel);
                q.device().push_async(AsyncEvent {
                    kind: AsyncEventKind::QpFatal,
                    element: AsyncElement::Qp(qp_num),
                });
                true
            }
            None => false,
        }
    }

    /// The network's fault hooks.
    pub fn faults(&self) -> &SimFaults {
        &self.inner.faults
    }

    pub(crate) fn device_by_ip(&self, ip: IpAddr) -> Option<Arc<SDevice>> {
        self.inner.device_by_ip(ip)
    }
}

impl NetInner {
    pub(crate) fn device_by_ip(&self, ip: IpAddr) -> Option<Arc<SDevice>> {
        self.devices.lock().iter().find(|d| d.ip == ip).cloned()
    }

    pub(crate) fn first_device(&self) -> Option<Arc<SDevice>> {
        self.devices.lock().first().cloned()
    }

    fn register_qp(&self, qp: &Arc<SQp>) {
        self.qps.lock().insert(qp.qpn, Arc::downgrade(qp));
    }

    fn unregister_qp(&self, qpn: u32) {
        self.qps.lock().remove(&qpn);
    }
}

fn default_attr() -> DeviceAttr {
    DeviceAttr {
        fw_ver: "rtgt-sim".into(),
        node_guid: 0x0002_c903_0000_0001,
        vendor_id: 0,
        vendor_part_id: 0,
        max_mr_size: u64::MAX,
        max_qp: 1 << 16,
        max_qp_wr: 16384,
        max_sge: MAX_SGE as u32,
        max_cq: 1 << 16,
        max_cqe: 1 << 20,
        max_mr: 1 << 20,
        max_pd: 1 << 16,
        max_qp_rd_atom: 128,
        max_qp_init_rd_atom: 128,
        max_srq: 1 << 12,
        max_srq_wr: 16384,
        max_srq_sge: MAX_SGE as u32,
        max_mw: 1 << 16,
    }
}

// ---------------------------------------------------------------------------------------------
// Devices and memory keys

/// A registration or a memory window in a device's key table. Key = index << 8 | tag.
pub(crate) enum KeyEntry {
    Mr {
        pd: u64,
        key: u32,
        region: Arc<DmaRegion>,
        access: Access,
    },
    Mw {
        pd: u64,
        key: u32,
        bound: Option<MwBinding>,
    },
}

pub(crate) struct MwBinding {
    qp_num: u32,
    region: Arc<DmaRegion>,
    addr: u64,
    len: u64,
    access: Access,
}

/// A resolved piece of registered memory.
#[derive(Clone, Copy)]
pub(crate) struct Seg {
    ptr: *mut u8,
    len: usize,
}

impl Seg {
    const EMPTY: Seg = Seg {
        ptr: std::ptr::null_mut(),
        len: 0,
    };
}

/// Up to [`MAX_SGE`] resolved segments, built on the stack without initialising the unused
/// ones (a zeroed `[Seg; MAX_SGE]` is 256 bytes of stores per work request side).
pub(crate) struct Segs {
    n: usize,
    buf: [std::mem::MaybeUninit<Seg>; MAX_SGE],
}

impl Segs {
    #[inline(always)]
    pub(crate) fn new() -> Self {
        Segs {
            n: 0,
            buf: [const { std::mem::MaybeUninit::uninit() }; MAX_SGE],
        }
    }

    /// Appends a segment (at most [`MAX_SGE`]: a work request's list holds no more).
    #[inline(always)]
    fn push(&mut self, s: Seg) {
        self.buf[self.n].write(s);
        self.n += 1;
    }

    #[inline(always)]
    fn clear(&mut self) {
        self.n = 0;
    }

    /// The segments pushed since the last clear.
    #[inline(always)]
    pub(crate) fn as_slice(&self) -> &[Seg] {
        // SAFETY: `push` initialised the first `n` entries (and `n` never exceeds the array:
        // the index in `push` is bounds-checked).
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<Seg>(), self.n) }
    }
}

/// Resolves local scatter/gather entries against a key table.
pub(crate) fn local_segs(
    tab: &Slab<KeyEntry>,
    pd: u64,
    sges: &[Sge],
    write: bool,
    out: &mut Segs,
) -> std::result::Result<usize, ()> {
    out.clear();
    for s in sges {
        if s.length == 0 {
            continue;
        }
        let Some(KeyEntry::Mr {
            pd: mpd,
            key,
            region,
            access,
        }) = tab.get((s.lkey >> 8) as usize)
        else {
            return Err(());
        };
        if *key != s.lkey
            || *mpd != pd
            || (write && !access.contains(Access::LOCAL_WRITE))
            || !region.contains(s.addr, s.length as usize)
        {
            return Err(());
        }
        // SAFETY: `contains` proved [addr, addr + length) lies inside the live region.
        let ptr = unsafe { region.as_ptr().add((s.addr - region.addr()) as usize) };
        out.push(Seg {
            ptr,
            len: s.length as usize,
        });
    }
    Ok(out.n)
}

/// Resolves a remote range against the responder's key table.
pub(crate) fn remote_seg(
    tab: &Slab<KeyEntry>,
    pd: u64,
    qp_num: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    need: Access,
) -> std::result::Result<Seg, ()> {
    if len == 0 {
        return Ok(Seg::EMPTY);
    }
    match tab.get((rkey >> 8) as usize) {
        Some(KeyEntry::Mr {
            pd: mpd,
            key,
            region,
            access,
        }) if *key == rkey && *mpd == pd && access.contains(need) && region.contains(addr, len) => {
            // SAFETY: `contains` proved the range lies inside the live region.
            let ptr = unsafe { region.as_ptr().add((addr - region.addr()) as usize) };
            Ok(Seg { ptr, len })
        }
        Some(KeyEntry::Mw {
            pd: mpd,
            key,
            bound: Some(b),
        }) if *key == rkey
            && *mpd == pd
            && b.qp_num == qp_num
            && b.access.contains(need)
            && addr >= b.addr
            && (addr - b.addr)
                .checked_add(len as u64)
                .is_some_and(|e| e <= b.len)
            && b.region.contains(addr, len) =>
        {
            // SAFETY: `contains` proved the range lies inside the live region.
            let ptr = unsafe { b.region.as_ptr().add((addr - b.region.addr()) as usize) };
            Ok(Seg { ptr, len })
        }
        _ => Err(()),
    }
}

/// Copies the bytes of `src` segments, in order, into `dst` segments, in order. The caller
/// checked that `dst` is at least as long as `src`.
pub(crate) fn copy_segs(src: &[Seg], dst: &[Seg]) {
    let mut di = 0;
    let mut doff = 0;
    for s in src {
        let mut soff = 0;
        while soff < s.len {
            let Some(d) = dst.get(di) else { return };
            let n = (s.len - soff).min(d.len - doff);
            // SAFETY: both ranges lie inside live registered regions (resolved under the key
            // table locks the caller still holds); `copy` tolerates overlap (loopback).
            unsafe { std::ptr::copy(s.ptr.add(soff), d.ptr.add(doff), n) };
            soff += n;
            doff += n;
            if doff == d.len {
                di += 1;
                doff = 0;
            }
        }
    }
}

/// Slots of a per-queue key cache (direct-mapped).
const KEY_CACHE: usize = 16;

/// A key resolved once and reused while the device's key generation is unchanged. It holds
/// the region alive, so pointers derived from it stay valid while the entry sits in its slot.
#[derive(Clone)]
struct CachedKey {
    dev: u64,
    key: u32,
    generation: u64,
    pd: u64,
    /// `pd` for a registration (a local key), `u64::MAX` for a window (never a local key).
    local_pd: u64,
    /// A registration with local write access.
    local_write: bool,
    region: Arc<DmaRegion>,
    /// The range the key covers (the registration, or the window) within the region:
    /// `lo ..= lo + span` less the length, and `lo`'s offset in the region.
    lo: u64,
    span: u64,
    offset: usize,
    access: Access,
    /// For a memory window: the queue pair it is bound to.
    mw_qp: Option<u32>,
}

impl CachedKey {
    /// An entry for the range `start .. start + len` of `region` (clipped to the region).
    #[allow(clippy::too_many_arguments)]
    fn new(
        dev: u64,
        key: u32,
        generation: u64,
        pd: u64,
        region: &Arc<DmaRegion>,
        start: u64,
        len: u64,
        access: Access,
        mw_qp: Option<u32>,
    ) -> Self {
        let (r0, r1) = (region.addr(), region.addr() + region.len() as u64);
        let lo = start.clamp(r0, r1);
        let hi = start.saturating_add(len).clamp(lo, r1);
        CachedKey {
            dev,
            key,
            generation,
            pd,
            local_pd: if mw_qp.is_none() { pd } else { u64::MAX },
            local_write: mw_qp.is_none() && access.contains(Access::LOCAL_WRITE),
            region: Arc::clone(region),
            lo,
            span: hi - lo,
            offset: (lo - r0) as usize,
            access,
            mw_qp,
        }
    }

    /// Whether a local entry of protection domain `pd` may use this key (`write`: the adapter
    /// writes into it).
    #[inline(always)]
    fn allows_local(&self, pd: u64, write: bool) -> bool {
        self.local_pd == pd && (!write || self.local_write)
    }

    /// Whether the responder of queue pair `qp_num` in `pd` may give a remote peer `need`
    /// through this key (a bound window only to its own queue pair).
    #[inline(always)]
    fn allows_remote(&self, pd: u64, qp_num: u32, need: Access) -> bool {
        self.pd == pd && self.access.contains(need) && self.mw_qp.is_none_or(|q| q == qp_num)
    }

    #[inline]
    fn ptr(&self, addr: u64, len: usize) -> Option<*mut u8> {
        // Below `lo` wraps to above `span`.
        let off = addr.wrapping_sub(self.lo);
        let inside = off <= self.span && len as u64 <= self.span - off;
        // SAFETY: [addr, addr + len) lies inside [lo, lo + span), which `new` clipped to the
        // live region (kept by `region`).
        inside.then(|| unsafe { self.region.as_ptr().add(self.offset + off as usize) })
    }
}

/// The outcome of resolving scatter/gather entries through a [`KeyCache`].
pub(crate) enum Resolve {
    /// Resolved (into the caller's [`Segs`]).
    Ok,
    /// A key, right or range is bad.
    Bad,
    /// The cache cannot serve this operation (two keys of it collide): use the locked path.
    Fallback,
}

/// A small per-queue cache of resolved keys, protected by the queue's lock, so that the data
/// path does not touch the (shared) key-table lock. `touched` masks track the slots one
/// operation relies on: they are never evicted during that operation.
#[derive(Default)]
pub(crate) struct KeyCache {
    slots: [Option<CachedKey>; KEY_CACHE],
}

impl KeyCache {
    /// The slot `key` of `dev` lives in: the table index spreads a registration pool's keys
    /// over the slots; the device's salt keeps our keys and the peer's apart.
    #[inline(always)]
    fn index(dev: &SDevice, key: u32) -> usize {
        ((key >> 8) as u64).wrapping_add(dev.cache_salt) as usize % KEY_CACHE
    }

    /// The cached resolution of `key` if it is cached and current; never fills.
    #[inline(always)]
    fn hit(&self, dev: &SDevice, key: u32) -> Option<&CachedKey> {
        let generation = dev.key_gen.load(Ordering::Acquire);
        self.slots[Self::index(dev, key)]
            .as_ref()
            .filter(|c| c.dev == dev.id && c.key == key && c.generation == generation)
    }

    /// The address of one local entry (`length` > 0) when its key is cached, current, a
    /// registration of `pd` (with local write if `write`) covering the range; `None` in
    /// every other case, which [`KeyCache::local`] then decides (fill, or a bad key). The
    /// single-entry work requests of the data path take this, not `local`'s loop.
    #[inline(always)]
    pub(crate) fn local_one(
        &self,
        dev: &SDevice,
        pd: u64,
        s: &Sge,
        write: bool,
    ) -> Option<*mut u8> {
        let c = self.hit(dev, s.lkey)?;
        if s.length == 0 || !c.allows_local(pd, write) {
            return None;
        }
        c.ptr(s.addr, s.length as usize)
    }

    /// [`KeyCache::remote`] of a cached, current key that allows the access (`len` > 0),
    /// without filling: `None` in every other case (the caller takes the general path).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remote_one(
        &self,
        dev: &SDevice,
        pd: u64,
        qp_num: u32,
        rkey: u32,
        addr: u64,
        len: usize,
        need: Access,
    ) -> Option<*mut u8> {
        let c = self.hit(dev, rkey)?;
        if len == 0 || !c.allows_remote(pd, qp_num, need) {
            return None;
        }
        c.ptr(addr, len)
    }

    /// The cached resolution of `key`: a hit (every SGE of the data path, several per I/O)
    /// is inlined; filling a slot is not.
    #[inline(always)]
    fn slot(
        &mut self,
        dev: &SDevice,
        key: u32,
        touched: &mut u32,
    ) -> std::result::Result<&CachedKey, Resolve> {
        let i = Self::index(dev, key);
        let generation = dev.key_gen.load(Ordering::Acquire);
        let hit = self.slots[i]
            .as_ref()
            .is_some_and(|c| c.dev == dev.id && c.key == key && c.generation == generation);
        if !hit {
            if *touched & (1 << i) != 0 {
                return Err(Resolve::Fallback);
            }
            self.fill(dev, key, i)?;
        }
        *touched |= 1 << i;
        self.slots[i].as_ref().ok_or(Resolve::Bad)
    }

    /// Resolves `key` through the device's key table into slot `i`.
    #[cold]
    #[inline(never)]
    fn fill(&mut self, dev: &SDevice, key: u32, i: usize) -> std::result::Result<(), Resolve> {
        let tab = dev.keys.read_recursive();
        let generation = dev.key_gen.load(Ordering::Acquire);
        let c = match tab.get((key >> 8) as usize) {
            Some(KeyEntry::Mr {
                pd,
                key: k,
                region,
                access,
            }) if *k == key => CachedKey::new(
                dev.id,
                key,
                generation,
                *pd,
                region,
                region.addr(),
                region.len() as u64,
                *access,
                None,
            ),
            Some(KeyEntry::Mw {
                pd,
                key: k,
                bound: Some(b),
            }) if *k == key => CachedKey::new(
                dev.id,
                key,
                generation,
                *pd,
                &b.region,
                b.addr,
                b.len,
                b.access,
                Some(b.qp_num),
            ),
            _ => return Err(Resolve::Bad),
        };
        drop(tab);
        self.slots[i] = Some(c);
        Ok(())
    }

    /// Resolves local entries (registrations of `pd` on `dev`; `write`: local write needed).
    /// Inlined into its four callers: as a call, saving and restoring registers was a fifth
    /// of its cost (≈ 5 calls per I/O).
    #[inline(always)]
    pub(crate) fn local(
        &mut self,
        touched: &mut u32,
        dev: &SDevice,
        pd: u64,
        sges: &[Sge],
        write: bool,
        out: &mut Segs,
    ) -> Resolve {
        out.clear();
        for s in sges {
            if s.length == 0 {
                continue;
            }
            let c = match self.slot(dev, s.lkey, touched) {
                Ok(c) => c,
                Err(r) => return r,
            };
            if !c.allows_local(pd, write) {
                return Resolve::Bad;
            }
            let Some(ptr) = c.ptr(s.addr, s.length as usize) else {
                return Resolve::Bad;
            };
            out.push(Seg {
                ptr,
                len: s.length as usize,
            });
        }
        Resolve::Ok
    }

    /// Resolves a remote range on the responder (`pd`, queue pair `qp_num`, device `dev`).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn remote(
        &mut self,
        touched: &mut u32,
        dev: &SDevice,
        pd: u64,
        qp_num: u32,
        rkey: u32,
        addr: u64,
        len: usize,
        need: Access,
    ) -> std::result::Result<Seg, Resolve> {
        if len == 0 {
            return Ok(Seg::EMPTY);
        }
        let c = self.slot(dev, rkey, touched)?;
        if !c.allows_remote(pd, qp_num, need) {
            return Err(Resolve::Bad);
        }
        c.ptr(addr, len)
            .map(|ptr| Seg { ptr, len })
            .ok_or(Resolve::Bad)
    }
}

pub(crate) struct SDevice {
    /// Process-unique identity (for key caches).
    id: u64,
    /// Where this device's keys start in a key cache (spreads two devices' keys apart).
    cache_salt: u64,
    /// Bumped, under the key table's write lock, whenever a key stops meaning what it meant
    /// (deregistration, window bind or invalidation); key caches revalidate against it.
    pub(crate) key_gen: AtomicU64,
    name: String,
    ip: IpAddr,
    attr: DeviceAttr,
    net: Weak<NetInner>,
    faults: Arc<SimFaults>,
    timer: Arc<Timer>,
    pub(crate) keys: RwLock<Slab<KeyEntry>>,
    key_tag: AtomicU32,
    async_q: EventQueue<AsyncEvent>,
    removed: AtomicBool,
}

impl SDevice {
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn ip(&self) -> IpAddr {
        self.ip
    }

    pub(crate) fn attr(&self) -> &DeviceAttr {
        &self.attr
    }

    pub(crate) fn async_fd(&self) -> RawFd {
        self.async_q.fd()
    }

    pub(crate) fn get_async_event(&self) -> Option<AsyncEvent> {
        self.async_q.pop()
    }

    pub(crate) fn push_async(&self, ev: AsyncEvent) {
        self.async_q.push(ev);
    }

    pub(crate) fn timer(&self) -> &Arc<Timer> {
        &self.timer
    }

    pub(crate) fn net(&self) -> Option<Arc<NetInner>> {
        self.net.upgrade()
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    fn next_tag(&self) -> u32 {
        self.key_tag.fetch_add(1, Ordering::Relaxed) & 0xff
    }

    fn insert_key(&self, make: impl FnOnce(u32) -> KeyEntry) -> Result<(usize, u32)> {
        let mut tab = self.keys.write();
        let entry = tab.vacant_entry();
        let idx = entry.key();
        if idx >= (1 << 24) {
            return Err(FabricError::Exhausted("memory keys"));
        }
        let key = ((idx as u32) << 8) | self.next_tag();
        entry.insert(make(key));
        Ok((idx, key))
    }
}

pub(crate) struct SPd {
    id: u64,
    dev: Arc<SDevice>,
}

impl SPd {
    pub(crate) fn new(dev: &Arc<SDevice>) -> Self {
        SPd {
            id: crate::next_handle(),
            dev: Arc::clone(dev),
        }
    }

    pub(crate) fn device(&self) -> &Arc<SDevice> {
        &self.dev
    }

    pub(crate) fn id(&self) -> u64 {
        self.id
    }
}

pub(crate) struct SMr {
    _pd: Arc<SPd>,
    dev: Arc<SDevice>,
    idx: usize,
    key: u32,
}

impl SMr {
    pub(crate) fn new(pd: &Arc<SPd>, region: &Arc<DmaRegion>, access: Access) -> Result<Self> {
        if pd.dev.faults.take_registration_failure(pd.dev.ip) {
            return Err(FabricError::InjectedFault("memory registration"));
        }
        if (access.contains(Access::REMOTE_WRITE) || access.contains(Access::REMOTE_ATOMIC))
            && !access.contains(Access::LOCAL_WRITE)
        {
            // verbs: remote write or atomic access requires local write.
            return Err(FabricError::InvalidArgument(
                "REMOTE_WRITE requires LOCAL_WRITE",
            ));
        }
        let (idx, key) = pd.dev.insert_key(|key| KeyEntry::Mr {
            pd: pd.id,
            key,
            region: Arc::clone(region),
            access,
        })?;
        Ok(SMr {
            _pd: Arc::clone(pd),
            dev: Arc::clone(&pd.dev),
            idx,
            key,
        })
    }

    pub(crate) fn key(&self) -> u32 {
        self.key
    }
}

impl Drop for SMr {
    fn drop(&mut self) {
        let mut tab = self.dev.keys.write();
        if tab.contains(self.idx) {
            tab.remove(self.idx);
        }
        self.dev.key_gen.fetch_add(1, Ordering::AcqRel);
    }
}

pub(crate) struct SMw {
    pd: Arc<SPd>,
    idx: usize,
    rkey: AtomicU32,
}

impl SMw {
    pub(crate) fn new(pd: &Arc<SPd>) -> Result<Self> {
        let (idx, key) = pd.dev.insert_key(|key| KeyEntry::Mw {
            pd: pd.id,
            key,
            bound: None,
        })?;
        Ok(SMw {
            pd: Arc::clone(pd),
            idx,
            rkey: AtomicU32::new(key),
        })
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }

    pub(crate) fn set_rkey(&self, k: u32) {
        self.rkey.store(k, Ordering::Release);
    }

    pub(crate) fn index(&self) -> usize {
        self.idx
    }

    pub(crate) fn device(&self) -> &Arc<SDevice> {
        &self.pd.dev
    }
}

impl Drop for SMw {
    fn drop(&mut self) {
        let mut tab = self.pd.dev.keys.write();
        if tab.contains(self.idx) {
            tab.remove(self.idx);
        }
        self.pd.dev.key_gen.fetch_add(1, Ordering::AcqRel);
    }
}

// ---------------------------------------------------------------------------------------------
// Completion channels and queues

pub(crate) struct SChannel {
    _dev: Arc<SDevice>,
    q: EventQueue<u64>,
}

impl SChannel {
    pub(crate) fn new(dev: &Arc<SDevice>) -> Result<Self> {
        Ok(SChannel {
            _dev: Arc::clone(dev),
            q: EventQueue::new()?,
        })
    }

    pub(crate) fn fd(&self) -> RawFd {
        self.q.fd()
    }

    pub(crate) fn get_event(&self) -> Option<u64> {
        self.q.pop()
    }
}

/// A simulated completion queue: a bounded lock-free FIFO ([`ring::WcRing`]; producers are
/// whichever threads execute work requests; pollers never take a lock, so a reactor spinning
/// on an empty queue costs nothing to the producers).
pub(crate) struct SCq {
    handle: u64,
    dev: Arc<SDevice>,
    q: ring::WcRing,
    /// 0: not armed; [`ARMED_ANY`]; [`ARMED_SOLICITED`].
    armed: AtomicU8,
    channel: Option<Arc<SChannel>>,
}

const ARMED_ANY: u8 = 1;
const ARMED_SOLICITED: u8 = 2;

impl SCq {
    pub(crate) fn new(
        dev: &Arc<SDevice>,
        cqe: u32,
        ch: Option<Arc<SChannel>>,
    ) -> Result<Arc<Self>> {
        if cqe > dev.attr.max_cqe {
            return Err(FabricError::InvalidArgument("cqe above the device limit"));
        }
        Ok(Arc::new(SCq {
            handle: crate::next_handle(),
            dev: Arc::clone(dev),
            q: ring::WcRing::new(cqe as usize),
            armed: AtomicU8::new(0),
            channel: ch,
        }))
    }

    pub(crate) fn handle(&self) -> u64 {
        self.handle
    }

    pub(crate) fn cqe(&self) -> u32 {
        self.q.capacity() as u32
    }

    pub(crate) fn device(&self) -> &Arc<SDevice> {
        &self.dev
    }

    #[inline]
    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        self.q.pop_into(out)
    }

    pub(crate) fn req_notify(&self, solicited_only: bool) {
        let mode = if solicited_only {
            ARMED_SOLICITED
        } else {
            ARMED_ANY
        };
        self.armed.store(mode, Ordering::SeqCst);
    }

    /// Delivers a completion (through the fault hooks). Inlined into the work requests'
    /// execution: while no fault is armed it is the ring's push and one load of the armed
    /// flag, without a call.
    #[inline(always)]
    pub(crate) fn push(self: &Arc<Self>, wc: WorkCompletion, solicited: bool) {
        if self.dev.faults.armed.load(Ordering::Acquire) {
            return self.push_faults_armed(wc, solicited);
        }
        self.push_now(wc, solicited)
    }

    /// [`SCq::push`] while a fault is armed: the completion meets it or not.
    #[cold]
    #[inline(never)]
    fn push_faults_armed(self: &Arc<Self>, wc: WorkCompletion, solicited: bool) {
        match self.dev.faults.intercept(&wc) {
            None => self.push_now(wc, solicited),
            Some(CompletionFault::Drop) => {
                tracing::debug!(
                    qp = wc.qp_num,
                    wr_id = wc.wr_id,
                    "sim fault: completion dropped"
                );
            }
            Some(CompletionFault::Delay(d)) => {
                let me = Arc::clone(self);
                self.dev
                    .timer
                    .schedule(d, Box::new(move || me.push_now(wc, solicited)));
            }
        }
    }

    #[inline(always)]
    fn push_now(&self, wc: WorkCompletion, solicited: bool) {
        if self.q.push(wc).is_err() {
            return self.overrun();
        }
        // Arming happens-before this load or it does not: a completion pushed before arming
        // raises no event (verbs semantics: poll again after arming).
        let armed = self.armed.load(Ordering::SeqCst);
        if armed != 0 {
            self.notify(armed, &wc, solicited);
        }
    }

    /// The ring was full: the completion is lost and the queue reports an error.
    #[cold]
    #[inline(never)]
    fn overrun(&self) {
        tracing::error!(cq = self.handle, "sim fabric: completion queue overrun");
        self.dev.push_async(AsyncEvent {
            kind: AsyncEventKind::CqErr,
            element: AsyncElement::Cq(self.handle),
        });
    }

    /// A completion arrived on a queue armed in mode `armed`: raise the channel's event if
    /// the completion is one the arming asked for.
    #[inline(never)]
    fn notify(&self, armed: u8, wc: &WorkCompletion, solicited: bool) {
        let wanted = armed == ARMED_ANY || solicited || !wc.status.is_success();
        if wanted
            && self
                .armed
                .compare_exchange(armed, 0, Ordering::SeqCst, Ordering::SeqCst)
                .is_ok()
            && let Some(ch) = &self.channel
        {
            ch.q.push(self.handle);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Shared receive queues

pub(crate) struct SSrq {
    handle: u64,
    pd: Arc<SPd>,
    max_sge: usize,
    pub(crate) q: Mutex<RecvQ>,
    attached: Mutex<Vec<Weak<SQp>>>,
    /// Set (under `q`'s lock) when a sender found the queue empty.
    pub(crate) waiters: AtomicBool,
}

impl SSrq {
    pub(crate) fn new(pd: &Arc<SPd>, max_wr: u32, max_sge: u32) -> Result<Arc<Self>> {
        if max_wr > pd.dev.attr.max_srq_wr || max_sge > pd.dev.attr.max_srq_sge {
            return Err(FabricError::InvalidArgument(
                "srq size above the device limit",
            ));
        }
        Ok(Arc::new(SSrq {
            handle: crate::next_handle(),
            pd: Arc::clone(pd),
            max_sge: max_sge as usize,
            q: Mutex::new(RecvQ::new(max_wr as usize, max_sge as usize)),
            attached: Mutex::new(Vec::new()),
            waiters: AtomicBool::new(false),
        }))
    }

    pub(crate) fn handle(&self) -> u64 {
        self.handle
    }

    pub(crate) fn pd(&self) -> &Arc<SPd> {
        &self.pd
    }

    pub(crate) fn attach(&self, qp: &Arc<SQp>) {
        let mut a = self.attached.lock();
        a.retain(|w| w.strong_count() > 0);
        a.push(Arc::downgrade(qp));
    }

    #[inline]
    pub(crate) fn post_recv<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a RecvWr>,
    {
        let mut res = Ok(());
        {
            let mut q = self.q.lock();
            for (i, wr) in wrs.into_iter().enumerate() {
                if wr.sges.len() > self.max_sge {
                    res = Err(PostError {
                        posted: i,
                        kind: PostErrorKind::InvalidWr,
                    });
                    break;
                }
                if q.q.push_back(wr).is_err() {
                    res = Err(PostError {
                        posted: i,
                        kind: PostErrorKind::QueueFull,
                    });
                    break;
                }
            }
        }
        if self.waiters.swap(false, Ordering::AcqRel) {
            let qps: Vec<Arc<SQp>> = self
                .attached
                .lock()
                .iter()
                .filter_map(Weak::upgrade)
                .collect();
            for q in qps {
                q.wake_peer();
            }
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn event_queue_fd_is_readable_exactly_while_not_empty() {
        let q = EventQueue::<u32>::new().unwrap();
        let readable = |fd| crate::wait_readable(fd, Duration::ZERO).unwrap();
        assert!(!readable(q.fd()));
        q.push(1);
        q.push(2);
        assert!(readable(q.fd()));
        assert_eq!(q.pop(), Some(1));
        assert!(readable(q.fd()));
        assert_eq!(q.pop(), Some(2));
        assert!(!readable(q.fd()));
        assert_eq!(q.pop(), None);
    }

    #[test]
    fn timer_runs_in_deadline_order_and_cancelled_tasks_never() {
        let t = Timer::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let task = |n: u32| {
            let tx = tx.clone();
            Box::new(move || tx.send(n).unwrap()) as Task
        };
        t.schedule(Duration::from_millis(30), task(3));
        let k = t.schedule(Duration::from_millis(20), task(2));
        t.schedule(Duration::from_millis(10), task(1));
        assert_eq!(t.pending(), 3);
        assert!(t.cancel(k));
        assert!(!t.cancel(k), "cancelled once");
        assert_eq!(t.pending(), 2);
        let got: Vec<u32> = (0..2)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        assert_eq!(got, vec![1, 3]);
        assert_eq!(t.pending(), 0);
        assert!(rx.recv_timeout(Duration::from_millis(50)).is_err());
        t.shutdown();
    }

    #[test]
    fn copy_segs_gathers_and_scatters() {
        let mut src_a = *b"abc";
        let mut src_b = *b"defgh";
        let mut dst_a = [0u8; 4];
        let mut dst_b = [0u8; 10];
        let seg = |b: &mut [u8]| Seg {
            ptr: b.as_mut_ptr(),
            len: b.len(),
        };
        let src = [seg(&mut src_a), seg(&mut src_b)];
        let dst = [seg(&mut dst_a), seg(&mut dst_b)];
        copy_segs(&src, &dst);
        assert_eq!(&dst_a, b"abcd");
        assert_eq!(&dst_b[..4], b"efgh");
        assert_eq!(dst_b[4..], [0; 6]);
    }

    #[test]
    fn key_cache_follows_deregistration() {
        let net = SimNetwork::new();
        let dev = match net
            .add_device("t", IpAddr::V4(std::net::Ipv4Addr::LOCALHOST))
            .unwrap()
            .0
        {
            DeviceImpl::Sim(d) => d,
            DeviceImpl::Rdma(_) => unreachable!(),
        };
        let pd = Arc::new(SPd::new(&dev));
        let region = DmaRegion::new(4096).unwrap();
        let mr = SMr::new(&pd, &region, Access::LOCAL_WRITE).unwrap();
        let key = mr.key();
        let mut cache = KeyCache::default();
        let mut out = Segs::new();
        let sge = Sge {
            addr: region.addr() + 100,
            length: 200,
            lkey: key,
        };
        let mut t = 0;
        assert!(matches!(
            cache.local(&mut t, &dev, pd.id(), &[sge], true, &mut out),
            Resolve::Ok
        ));
        assert_eq!(out.as_slice().len(), 1);
        assert_eq!(out.as_slice()[0].len, 200);
        // Out of bounds, wrong PD, missing right.
        let oob = Sge {
            length: 4000,
            ..sge
        };
        assert!(matches!(
            cache.local(&mut 0, &dev, pd.id(), &[oob], false, &mut out),
            Resolve::Bad
        ));
        assert!(matches!(
            cache.local(&mut 0, &dev, pd.id() + 1, &[sge], false, &mut out),
            Resolve::Bad
        ));
        assert!(matches!(
            cache.remote(
                &mut 0,
                &dev,
                pd.id(),
                1,
                key,
                sge.addr,
                8,
                Access::REMOTE_READ
            ),
            Err(Resolve::Bad)
        ));
        drop(mr);
        assert!(
            matches!(
                cache.local(&mut 0, &dev, pd.id(), &[sge], false, &mut out),
                Resolve::Bad
            ),
            "a deregistered key stops resolving even though it was cached"
        );
    }

    #[test]
    fn fault_rules_fire_once() {
        let f = SimFaults::new();
        let wc = WorkCompletion {
            qp_num: 7,
            wr_id: 3,
            opcode: WcOpcode::Recv,
            ..Default::default()
        };
        assert!(f.intercept(&wc).is_none());
        f.drop_completion(CompletionMatch::qp(7).send());
        assert!(f.intercept(&wc).is_none(), "a receive is not a send");
        f.drop_completion(CompletionMatch::qp(7).recv().wr_id(3));
        assert!(matches!(f.intercept(&wc), Some(CompletionFault::Drop)));
        assert!(f.intercept(&wc).is_none());
        f.fail_next_registration();
        assert!(f.take_registration_failure(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)));
        assert!(!f.take_registration_failure(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)));
        // Counted when applied, not when armed; the unmatched send rule is still pending.
        let fired = f.fired();
        assert_eq!(
            (fired.completions_dropped, fired.registrations_failed),
            (1, 1)
        );
        assert_eq!(f.pending(), 1);
        f.fail_registration_on(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 1);
        assert!(!f.take_registration_failure(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)));
        assert_eq!(
            f.fired().registrations_failed,
            1,
            "a skipped registration is not a fault"
        );
        assert!(f.take_registration_failure(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)));
        assert_eq!(f.fired().registrations_failed, 2);
    }
}
