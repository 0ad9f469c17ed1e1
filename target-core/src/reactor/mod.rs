//! Reactors: one OS thread per configured core, each with a bounded lock-free message queue,
//! active and timed pollers, and an idle sleep on an epoll set.
//!
//! A reactor loops: run up to [`ReactorConfig::msg_batch`] messages, every active poller once,
//! then the timed pollers that are due. When nothing found work for
//! [`ReactorConfig::idle_sleep_after`], it *arms* the pollers that have a wake-up fd (a
//! completion channel, an io_uring eventfd, a CM event channel) and blocks in `epoll_wait` on
//! those fds, its own message eventfd and the next deadline of a timed poller *without* a
//! wake-up fd. A message or a ready fd wakes it and it goes back to polling. So a busy reactor
//! keeps its polling throughput and an idle one costs next to nothing.
//!
//! A timed poller with a wake-up fd (an acceptor polling its CM channel every
//! `acceptor_poll_rate`) is driven by its fd: a sleeping reactor wakes when the fd is ready,
//! and a polling one looks at the ready fds with a zero-timeout `epoll_wait` every
//! [`FD_CHECK_INTERVAL`] and runs their pollers at once. Its period still applies while the
//! reactor polls (SPDK's meaning of the option, and a fallback), but it never wakes a sleeping
//! reactor: an idle target with listeners sleeps until something happens.
//!
//! State that belongs to one reactor lives in its [`ReactorCtx`] (see [`ReactorCtx::local`]);
//! other threads reach it only by message. [`Reactors::for_each_reactor`] visits every reactor
//! in turn, SPDK's `spdk_for_each_channel`.

mod cpumask;
mod for_each;
pub mod sys;

use std::any::{Any, TypeId};
use std::cell::Cell;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_queue::{ArrayQueue, SegQueue};
use parking_lot::Mutex;

pub use cpumask::{format_cpumask, parse_cpumask};
pub use for_each::Step;

/// Nanoseconds from a process-wide origin to `t` (0 before the origin). Data-path timestamps
/// are kept in this form: subtracting two `u64`s per request is cheaper than subtracting
/// `Instant`s, and a reactor converts its loop time once per iteration ([`ReactorCtx::now_ns`]).
pub fn instant_ns(t: Instant) -> u64 {
    static ORIGIN: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    let origin = *ORIGIN.get_or_init(|| Instant::now() - Duration::from_secs(1));
    t.saturating_duration_since(origin).as_nanos() as u64
}

/// How often a polling reactor checks the wake-up fds of its timed pollers (a zero-timeout
/// `epoll_wait`), so that fd-driven pollers react within this time rather than their period.
pub const FD_CHECK_INTERVAL: Duration = Duration::from_millis(1);

/// A message: a closure run on the target reactor's thread.
pub type Msg = Box<dyn FnOnce(&mut ReactorCtx) + Send + 'static>;

/// What a poller found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PollStatus {
    /// It did work; keep polling.
    Busy,
    /// It found nothing to do.
    Idle,
}

impl PollStatus {
    /// `Busy` when `n > 0`.
    pub fn from_count(n: usize) -> Self {
        if n > 0 { Self::Busy } else { Self::Idle }
    }
}

/// Why a message could not be queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The reactor's bounded queue is full; the sender decides whether to retry.
    #[error("reactor {0} message queue is full")]
    Full(usize),
    /// There is no reactor with this index.
    #[error("no reactor {0}")]
    NoSuchReactor(usize),
    /// The reactors are shutting down.
    #[error("reactors are shutting down")]
    Stopped,
}

/// Configuration of the reactor set.
#[derive(Debug, Clone)]
pub struct ReactorConfig {
    /// One entry per reactor: the CPU to pin it to, or `None` to leave it unpinned.
    pub cores: Vec<Option<usize>>,
    /// Capacity of each reactor's bounded message queue.
    pub queue_capacity: usize,
    /// Messages run per loop iteration before pollers get their turn.
    pub msg_batch: usize,
    /// How long a reactor must find no work before it sleeps. `None` = never sleep (pure
    /// polling, for latency benchmarks).
    pub idle_sleep_after: Option<Duration>,
    /// Thread name prefix (`<prefix>_<index>`).
    pub name_prefix: String,
}

impl ReactorConfig {
    /// `n` unpinned reactors with default settings.
    pub fn with_count(n: usize) -> Self {
        Self {
            cores: vec![None; n.max(1)],
            queue_capacity: 65536,
            msg_batch: 8,
            idle_sleep_after: Some(Duration::from_micros(200)),
            name_prefix: "reactor".into(),
        }
    }

    /// One reactor per core in an SPDK core mask (`0x3`, `[0-1]`), each pinned to its core.
    /// Cores the process may not run on are an error, as in SPDK.
    pub fn from_cpumask(mask: &str) -> Result<Self, String> {
        let cores = parse_cpumask(mask)?;
        let allowed = sys::allowed_cpus();
        if let Some(bad) = cores.iter().find(|c| !allowed.contains(c)) {
            return Err(format!(
                "core {bad} in mask '{mask}' is not available (allowed: {})",
                format_cpumask(&allowed)
            ));
        }
        let mut cfg = Self::with_count(cores.len());
        cfg.cores = cores.into_iter().map(Some).collect();
        Ok(cfg)
    }
}

/// Counters of one reactor, readable from any thread.
#[derive(Debug, Default)]
pub struct ReactorStats {
    /// Loop iterations.
    pub iterations: AtomicU64,
    /// Iterations in which something did work.
    pub busy_iterations: AtomicU64,
    /// Nanoseconds spent in busy iterations.
    pub busy_ns: AtomicU64,
    /// Nanoseconds spent in idle iterations and asleep.
    pub idle_ns: AtomicU64,
    /// Times the reactor went to sleep.
    pub sleeps: AtomicU64,
    /// Messages run.
    pub messages: AtomicU64,
    /// Whether the reactor is asleep right now.
    pub in_interrupt: AtomicBool,
}

/// A snapshot of one reactor, for `framework_get_reactors`.
#[derive(Debug, Clone)]
pub struct ReactorInfo {
    /// Reactor index (0-based).
    pub index: usize,
    /// The CPU it is pinned to, if any.
    pub core: Option<usize>,
    /// Nanoseconds spent in busy iterations.
    pub busy_ns: u64,
    /// Nanoseconds spent idle or asleep.
    pub idle_ns: u64,
    /// Times it went to sleep.
    pub sleeps: u64,
    /// Messages run.
    pub messages: u64,
    /// Whether it is asleep now.
    pub in_interrupt: bool,
    /// Pollers registered on it, in registration order.
    pub pollers: Vec<PollerInfo>,
}

/// A snapshot of one poller, for `thread_get_pollers` / `thread_get_stats`.
#[derive(Debug, Clone)]
pub struct PollerInfo {
    /// Its id on its reactor.
    pub id: u64,
    /// Its name.
    pub name: String,
    /// `None` for an active poller (every iteration), else its period in nanoseconds.
    pub period_ns: Option<u64>,
    /// Times it ran.
    pub run_count: u64,
    /// Times it ran and found work.
    pub busy_count: u64,
}

/// Run counters of one poller: written by its reactor only (plain stores), read by any thread.
#[derive(Debug, Default)]
struct PollerCounters {
    runs: AtomicU64,
    busy: AtomicU64,
}

/// What a reactor publishes about one of its pollers.
#[derive(Debug)]
struct PollerView {
    id: u64,
    name: String,
    period_ns: Option<u64>,
    counters: Arc<PollerCounters>,
}

struct Slot {
    core: Option<usize>,
    msgs: ArrayQueue<Msg>,
    ctrl: SegQueue<Msg>,
    wake: sys::EventFd,
    sleeping: AtomicBool,
    stats: ReactorStats,
    pollers: Mutex<Vec<PollerView>>,
}

impl Slot {
    fn wake_if_sleeping(&self) {
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::SeqCst) {
            self.wake.notify();
        }
    }

    fn has_messages(&self) -> bool {
        !self.msgs.is_empty() || !self.ctrl.is_empty()
    }
}

/// What the reactors of one set share: their slots, the stop flag, their threads.
struct ReactorSet {
    slots: Vec<Slot>,
    stopping: AtomicBool,
    threads: Mutex<Vec<JoinHandle<()>>>,
    config: ReactorConfig,
}

thread_local! {
    static CURRENT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// A cloneable handle to the set of running reactors.
#[derive(Clone)]
pub struct Reactors(Arc<ReactorSet>);

impl std::fmt::Debug for Reactors {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reactors")
            .field("count", &self.0.slots.len())
            .finish()
    }
}

impl Reactors {
    /// Starts one thread per configured reactor.
    pub fn start(config: ReactorConfig) -> std::io::Result<Self> {
        let mut slots = Vec::with_capacity(config.cores.len());
        for &core in &config.cores {
            slots.push(Slot {
                core,
                msgs: ArrayQueue::new(config.queue_capacity.max(1)),
                ctrl: SegQueue::new(),
                wake: sys::EventFd::new()?,
                sleeping: AtomicBool::new(false),
                stats: ReactorStats::default(),
                pollers: Mutex::new(Vec::new()),
            });
        }
        let shared = Arc::new(ReactorSet {
            slots,
            stopping: AtomicBool::new(false),
            threads: Mutex::new(Vec::new()),
            config,
        });
        let reactors = Reactors(shared);
        let (tx, rx) = std::sync::mpsc::channel();
        for index in 0..reactors.len() {
            let handle = reactors.clone();
            let tx = tx.clone();
            let name = format!("{}_{index}", reactors.0.config.name_prefix);
            let t = std::thread::Builder::new().name(name).spawn(move || {
                match Reactor::new(handle, index) {
                    Ok(r) => {
                        let _ = tx.send(Ok(()));
                        r.run();
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            })?;
            reactors.0.threads.lock().push(t);
        }
        drop(tx);
        for _ in 0..reactors.len() {
            match rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    reactors.stop();
                    return Err(e);
                }
                Err(_) => {
                    reactors.stop();
                    return Err(std::io::Error::other("a reactor thread died during start"));
                }
            }
        }
        tracing::info!(
            "started {} reactor(s) on cores {:?}",
            reactors.len(),
            reactors.0.config.cores
        );
        Ok(reactors)
    }

    /// Number of reactors.
    pub fn len(&self) -> usize {
        self.0.slots.len()
    }

    /// Always false: there is at least one reactor.
    pub fn is_empty(&self) -> bool {
        self.0.slots.is_empty()
    }

    /// The index of the reactor running the calling thread, if it is one.
    pub fn current() -> Option<usize> {
        CURRENT.with(|c| c.get())
    }

    /// Queues a message on the bounded queue of reactor `to`. Never blocks: a full queue is an
    /// error the sender handles (the data-path contract).
    pub fn send_msg(
        &self,
        to: usize,
        f: impl FnOnce(&mut ReactorCtx) + Send + 'static,
    ) -> Result<(), SendError> {
        let slot = self.slot(to)?;
        if self.0.stopping.load(Ordering::Acquire) {
            return Err(SendError::Stopped);
        }
        slot.msgs
            .push(Box::new(f))
            .map_err(|_| SendError::Full(to))?;
        slot.wake_if_sleeping();
        Ok(())
    }

    /// Queues a control-plane message on reactor `to`. Control messages (state changes,
    /// configuration, for-each iterations) go through an unbounded queue so that they cannot be
    /// lost to a full data-path queue; they are rare and never sent per I/O.
    pub fn send_ctrl(
        &self,
        to: usize,
        f: impl FnOnce(&mut ReactorCtx) + Send + 'static,
    ) -> Result<(), SendError> {
        self.send_ctrl_boxed(to, Box::new(f))
    }

    fn send_ctrl_boxed(&self, to: usize, f: Msg) -> Result<(), SendError> {
        let slot = self.slot(to)?;
        if self.0.stopping.load(Ordering::Acquire) {
            return Err(SendError::Stopped);
        }
        slot.ctrl.push(f);
        slot.wake_if_sleeping();
        Ok(())
    }

    /// Runs `f` on reactor `to` and returns its result to the awaiting caller (an RPC handler).
    pub async fn call<R: Send + 'static>(
        &self,
        to: usize,
        f: impl FnOnce(&mut ReactorCtx) -> R + Send + 'static,
    ) -> Result<R, SendError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.send_ctrl(to, move |ctx| {
            let _ = tx.send(f(ctx));
        })?;
        rx.await.map_err(|_| SendError::Stopped)
    }

    /// Runs `f` on every reactor, one after the other (0, 1, …), then `done` on the reactor that
    /// called this (reactor 0 when called from another thread).
    pub fn for_each_reactor(
        &self,
        f: impl Fn(&mut ReactorCtx) + Send + Sync + 'static,
        done: impl FnOnce(&mut ReactorCtx) + Send + 'static,
    ) -> Result<(), SendError> {
        self.for_each_reactor_async::<()>(
            move |ctx, step| {
                f(ctx);
                step.next(Ok(()));
            },
            move |ctx, _| done(ctx),
        )
    }

    /// Like [`Reactors::for_each_reactor`], but each visit finishes when the reactor calls
    /// [`Step::next`], which it may do later (for instance when outstanding I/O has drained).
    /// An error stops the iteration; `done` receives the first error.
    pub fn for_each_reactor_async<E: Send + 'static>(
        &self,
        f: impl Fn(&mut ReactorCtx, Step<E>) + Send + Sync + 'static,
        done: impl FnOnce(&mut ReactorCtx, Result<(), E>) + Send + 'static,
    ) -> Result<(), SendError> {
        for_each::start(self, Box::new(f), Box::new(done))
    }

    /// Snapshots of every reactor.
    pub fn info(&self) -> Vec<ReactorInfo> {
        self.0
            .slots
            .iter()
            .enumerate()
            .map(|(index, s)| ReactorInfo {
                index,
                core: s.core,
                busy_ns: s.stats.busy_ns.load(Ordering::Relaxed),
                idle_ns: s.stats.idle_ns.load(Ordering::Relaxed),
                sleeps: s.stats.sleeps.load(Ordering::Relaxed),
                messages: s.stats.messages.load(Ordering::Relaxed),
                in_interrupt: s.stats.in_interrupt.load(Ordering::Relaxed),
                pollers: s
                    .pollers
                    .lock()
                    .iter()
                    .map(|p| PollerInfo {
                        id: p.id,
                        name: p.name.clone(),
                        period_ns: p.period_ns,
                        run_count: p.counters.runs.load(Ordering::Relaxed),
                        busy_count: p.counters.busy.load(Ordering::Relaxed),
                    })
                    .collect(),
            })
            .collect()
    }

    /// The counters of reactor `index`.
    pub fn stats(&self, index: usize) -> Option<&ReactorStats> {
        self.0.slots.get(index).map(|s| &s.stats)
    }

    /// Stops every reactor after it has run the messages already queued, and joins the threads.
    /// Per-reactor state ([`ReactorCtx::local`]) is dropped on its own thread. Calling this from
    /// a reactor thread only requests the stop; the threads are joined by a later call from
    /// outside.
    pub fn stop(&self) {
        self.0.stopping.store(true, Ordering::Release);
        for s in &self.0.slots {
            s.wake.notify();
        }
        if Self::current().is_some() {
            return;
        }
        let threads: Vec<_> = self.0.threads.lock().drain(..).collect();
        for t in threads {
            if t.join().is_err() {
                tracing::error!("a reactor thread panicked");
            }
        }
    }

    /// Whether [`Reactors::stop`] was called.
    pub fn is_stopping(&self) -> bool {
        self.0.stopping.load(Ordering::Acquire)
    }

    fn slot(&self, i: usize) -> Result<&Slot, SendError> {
        self.0.slots.get(i).ok_or(SendError::NoSuchReactor(i))
    }
}

/// Adds to a counter that only the calling reactor writes.
#[inline]
fn bump(c: &AtomicU64, v: u64) {
    c.store(c.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

/// Identifies a registered poller on its reactor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PollerId(u64);

type PollFn = Box<dyn FnMut(&mut ReactorCtx) -> PollStatus>;
type ArmFn = Box<dyn FnMut(&mut ReactorCtx) -> bool>;

struct Poller {
    id: PollerId,
    name: String,
    period: Option<Duration>,
    next_due: Instant,
    fd: Option<RawFd>,
    arm: Option<ArmFn>,
    f: PollFn,
    counters: Arc<PollerCounters>,
}

impl Poller {
    /// Runs the poller once and counts the run.
    #[inline]
    fn run(&mut self, ctx: &mut ReactorCtx) -> bool {
        let busy = (self.f)(ctx) == PollStatus::Busy;
        bump(&self.counters.runs, 1);
        if busy {
            bump(&self.counters.busy, 1);
        }
        busy
    }
}

enum PollerOp {
    Add(Poller),
    Remove(PollerId),
    Watch(RawFd),
    Unwatch(RawFd),
}

/// The per-reactor context handed to messages and pollers.
pub struct ReactorCtx {
    index: usize,
    reactors: Reactors,
    locals: Vec<(TypeId, Box<dyn Any>)>,
    ops: Vec<PollerOp>,
    next_poller: u64,
    now: Instant,
}

impl ReactorCtx {
    /// This reactor's index.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The handle to all reactors (to send messages on).
    pub fn reactors(&self) -> &Reactors {
        &self.reactors
    }

    /// The time at the start of this loop iteration.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// Stores per-reactor state of type `T`, replacing any previous value.
    pub fn set_local<T: 'static>(&mut self, value: T) {
        let id = TypeId::of::<T>();
        match self.locals.iter_mut().find(|(t, _)| *t == id) {
            Some(slot) => slot.1 = Box::new(value),
            None => self.locals.push((id, Box::new(value))),
        }
    }

    /// The per-reactor state of type `T`, if set.
    pub fn local<T: 'static>(&mut self) -> Option<&mut T> {
        let id = TypeId::of::<T>();
        self.locals
            .iter_mut()
            .find(|(t, _)| *t == id)
            .and_then(|(_, v)| v.downcast_mut())
    }

    /// Removes and returns the per-reactor state of type `T`.
    pub fn take_local<T: 'static>(&mut self) -> Option<T> {
        let id = TypeId::of::<T>();
        let pos = self.locals.iter().position(|(t, _)| *t == id)?;
        self.locals.swap_remove(pos).1.downcast().ok().map(|b| *b)
    }

    /// Starts building a poller; finish with [`PollerBuilder::register`].
    pub fn poller(&mut self, name: impl Into<String>) -> PollerBuilder<'_> {
        PollerBuilder {
            ctx: self,
            name: name.into(),
            period: None,
            fd: None,
            arm: None,
        }
    }

    /// Removes a poller (takes effect after the current poller returns).
    pub fn unregister_poller(&mut self, id: PollerId) {
        self.ops.push(PollerOp::Remove(id));
    }

    /// Adds an fd to the set a sleeping reactor wakes on, without a poller of its own (for
    /// example a block device's completion eventfd, which the poll group's poller drains). The
    /// caller keeps the fd open until [`ReactorCtx::unwatch_fd`].
    pub fn watch_fd(&mut self, fd: RawFd) {
        self.ops.push(PollerOp::Watch(fd));
    }

    /// Removes an fd added by [`ReactorCtx::watch_fd`].
    pub fn unwatch_fd(&mut self, fd: RawFd) {
        self.ops.push(PollerOp::Unwatch(fd));
    }
}

/// Builder for a poller: active (every iteration) or timed (`period`), optionally with a wake-up
/// fd that lets the reactor sleep while the poller has nothing to do.
pub struct PollerBuilder<'a> {
    ctx: &'a mut ReactorCtx,
    name: String,
    period: Option<Duration>,
    fd: Option<RawFd>,
    arm: Option<ArmFn>,
}

impl PollerBuilder<'_> {
    /// Runs the poller every `period` instead of every iteration.
    pub fn period(mut self, period: Duration) -> Self {
        self.period = Some(period);
        self
    }

    /// An fd that becomes readable when the poller has work. The reactor sleeps on it. For a
    /// timed poller the fd drives it: it runs as soon as the fd is ready (within
    /// [`FD_CHECK_INTERVAL`] while the reactor polls) and its period never wakes a sleeping
    /// reactor.
    pub fn wake_fd(mut self, fd: RawFd) -> Self {
        self.fd = Some(fd);
        self
    }

    /// Called before the reactor sleeps: re-arm notifications (e.g. `ibv_req_notify_cq`) and
    /// return `true` if work arrived meanwhile, which cancels the sleep.
    pub fn arm(mut self, arm: impl FnMut(&mut ReactorCtx) -> bool + 'static) -> Self {
        self.arm = Some(Box::new(arm));
        self
    }

    /// Registers the poller; it runs from the next loop iteration on.
    pub fn register(self, f: impl FnMut(&mut ReactorCtx) -> PollStatus + 'static) -> PollerId {
        let id = PollerId(self.ctx.next_poller);
        self.ctx.next_poller += 1;
        let now = self.ctx.now;
        self.ctx.ops.push(PollerOp::Add(Poller {
            id,
            name: self.name,
            period: self.period,
            next_due: now + self.period.unwrap_or_default(),
            fd: self.fd,
            arm: self.arm,
            f: Box::new(f),
            counters: Arc::default(),
        }));
        id
    }
}

struct Reactor {
    /// The shared state, held apart from `ctx` so that the loop borrows it without reference
    /// counting per iteration.
    shared: Arc<ReactorSet>,
    ctx: ReactorCtx,
    pollers: Vec<Poller>,
    epoll: sys::Epoll,
    events: Vec<libc::epoll_event>,
}

const WAKE_TOKEN: u64 = u64::MAX;
const WATCH_TOKEN: u64 = u64::MAX - 1;

impl Reactor {
    fn new(reactors: Reactors, index: usize) -> std::io::Result<Self> {
        let slot = &reactors.0.slots[index];
        if let Some(cpu) = slot.core {
            sys::pin_current_thread(cpu)?;
        }
        let epoll = sys::Epoll::new()?;
        epoll.add(slot.wake.as_raw_fd(), WAKE_TOKEN)?;
        CURRENT.with(|c| c.set(Some(index)));
        Ok(Self {
            shared: Arc::clone(&reactors.0),
            ctx: ReactorCtx {
                index,
                reactors,
                locals: Vec::new(),
                ops: Vec::new(),
                next_poller: 0,
                now: Instant::now(),
            },
            pollers: Vec::new(),
            epoll,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; 64],
        })
    }

    fn slot(&self) -> &Slot {
        &self.ctx.reactors.0.slots[self.ctx.index]
    }

    // Never inlined: it runs once per thread, and bench/scripts/callgrind-per-io.sh counts
    // the instructions inside it by name.
    #[inline(never)]
    fn run(mut self) {
        let shared = Arc::clone(&self.shared);
        let idle_after = shared.config.idle_sleep_after;
        let batch = shared.config.msg_batch.max(1);
        let mut last_busy = Instant::now();
        let mut iter_start = last_busy;
        let mut next_fd_check = last_busy + FD_CHECK_INTERVAL;
        // Whether the previous iteration did work; it is accounted at the start of the next
        // one, so that an iteration reads the clock once (on a guest whose clocksource is not
        // the TSC, every read is a system call).
        let mut prev_work: Option<bool> = None;
        loop {
            let now = Instant::now();
            if let Some(w) = prev_work {
                let stats = &shared.slots[self.ctx.index].stats;
                // Includes the sleep that followed an idle iteration.
                let spent = now.saturating_duration_since(iter_start).as_nanos() as u64;
                // This thread is the only writer: plain stores, no locked read-modify-writes.
                bump(&stats.iterations, 1);
                if w {
                    bump(&stats.busy_iterations, 1);
                    bump(&stats.busy_ns, spent);
                } else {
                    bump(&stats.idle_ns, spent);
                }
            }
            iter_start = now;
            self.ctx.now = now;
            let mut work = self.run_messages(batch);
            self.apply_ops();
            for p in self.pollers.iter_mut() {
                if p.period.is_none() && p.run(&mut self.ctx) {
                    work += 1;
                }
            }
            self.apply_ops();
            if now >= next_fd_check {
                next_fd_check = now + FD_CHECK_INTERVAL;
                self.check_timed_fds(now);
            }
            for p in self.pollers.iter_mut() {
                if let Some(period) = p.period
                    && now >= p.next_due
                {
                    p.next_due = now + period;
                    if p.run(&mut self.ctx) {
                        work += 1;
                    }
                }
            }
            self.apply_ops();
            prev_work = Some(work > 0);
            if work > 0 {
                last_busy = now;
            }

            if shared.stopping.load(Ordering::Acquire) {
                if self.slot().has_messages() {
                    continue;
                }
                break;
            }
            if work == 0
                && let Some(after) = idle_after
                && now.saturating_duration_since(last_busy) >= after
            {
                self.sleep();
            }
        }
        // Drop per-reactor state (poll groups, channels) on this thread.
        self.pollers.clear();
        self.ctx.locals.clear();
        CURRENT.with(|c| c.set(None));
    }

    fn run_messages(&mut self, batch: usize) -> usize {
        let slot = &self.shared.slots[self.ctx.index];
        let mut n = 0;
        // Control messages first: they are rare and often unblock data-path work.
        while n < batch {
            let Some(m) = slot.ctrl.pop().or_else(|| slot.msgs.pop()) else {
                break;
            };
            m(&mut self.ctx);
            n += 1;
        }
        if n > 0 {
            bump(&slot.stats.messages, n as u64);
        }
        n
    }

    fn apply_ops(&mut self) {
        if self.ctx.ops.is_empty() {
            return;
        }
        let mut changed = false;
        for op in std::mem::take(&mut self.ctx.ops) {
            match op {
                PollerOp::Add(p) => {
                    if let Some(fd) = p.fd
                        && let Err(e) = self.epoll.add(fd, p.id.0)
                    {
                        tracing::error!("poller '{}': cannot watch fd {fd}: {e}", p.name);
                    }
                    self.pollers.push(p);
                    changed = true;
                }
                PollerOp::Remove(id) => {
                    if let Some(pos) = self.pollers.iter().position(|p| p.id == id) {
                        let p = self.pollers.remove(pos);
                        if let Some(fd) = p.fd {
                            let _ = self.epoll.remove(fd);
                        }
                        changed = true;
                    }
                }
                PollerOp::Watch(fd) => {
                    if let Err(e) = self.epoll.add(fd, WATCH_TOKEN) {
                        tracing::error!("reactor {}: cannot watch fd {fd}: {e}", self.ctx.index);
                    }
                }
                PollerOp::Unwatch(fd) => {
                    let _ = self.epoll.remove(fd);
                }
            }
        }
        if changed {
            *self.slot().pollers.lock() = self
                .pollers
                .iter()
                .map(|p| PollerView {
                    id: p.id.0,
                    name: p.name.clone(),
                    period_ns: p.period.map(|d| d.as_nanos() as u64),
                    counters: Arc::clone(&p.counters),
                })
                .collect();
        }
    }

    /// Makes the timed pollers whose wake-up fd is ready due now (a zero-timeout wait).
    fn check_timed_fds(&mut self, now: Instant) {
        if !self
            .pollers
            .iter()
            .any(|p| p.period.is_some() && p.fd.is_some())
        {
            return;
        }
        let ready = match self.epoll.wait(&mut self.events, Some(Duration::ZERO)) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("reactor {}: epoll_wait failed: {e}", self.ctx.index);
                return;
            }
        };
        for ev in &self.events[..ready] {
            let token = ev.u64;
            if let Some(p) = self
                .pollers
                .iter_mut()
                .find(|p| p.id.0 == token && p.period.is_some())
            {
                p.next_due = now;
            }
        }
    }

    /// Arms every poller with a wake-up fd and blocks until a message, a ready fd or the next
    /// deadline of a timed poller without a wake-up fd.
    fn sleep(&mut self) {
        for p in self.pollers.iter_mut() {
            if let Some(arm) = p.arm.as_mut()
                && arm(&mut self.ctx)
            {
                return;
            }
        }
        self.apply_ops();
        let shared = Arc::clone(&self.shared);
        let slot = &shared.slots[self.ctx.index];
        slot.sleeping.store(true, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        if slot.has_messages() || shared.stopping.load(Ordering::SeqCst) {
            slot.sleeping.store(false, Ordering::SeqCst);
            return;
        }
        // Timed pollers with a wake-up fd wake us through it, not through their period. The
        // clock is read only when some timed poller has no fd.
        let mut now: Option<Instant> = None;
        let timeout = self
            .pollers
            .iter()
            .filter(|p| p.period.is_some() && p.fd.is_none())
            .map(|p| {
                p.next_due
                    .saturating_duration_since(*now.get_or_insert_with(Instant::now))
            })
            .min();
        slot.stats.in_interrupt.store(true, Ordering::Relaxed);
        bump(&slot.stats.sleeps, 1);
        let ready = match self.epoll.wait(&mut self.events, timeout) {
            Ok(n) => n,
            Err(e) => {
                tracing::error!("reactor {}: epoll_wait failed: {e}", self.ctx.index);
                0
            }
        };
        // A timed poller whose fd is ready runs in the next iteration rather than at its next
        // period (the loop time of the iteration before the sleep is in the past).
        let mut woken = false;
        for ev in &self.events[..ready] {
            let token = ev.u64;
            if token == WAKE_TOKEN {
                woken = true;
            } else if let Some(p) = self.pollers.iter_mut().find(|p| p.id.0 == token) {
                p.next_due = self.ctx.now;
            }
        }
        slot.sleeping.store(false, Ordering::SeqCst);
        slot.stats.in_interrupt.store(false, Ordering::Relaxed);
        // The sleep's time is accounted as idle by the loop. The message eventfd is reset only
        // when it woke us: one system call less per wake-up by a completion.
        if woken {
            slot.wake.drain();
        }
    }
}

#[cfg(test)]
mod tests;
