//! A bdev that holds I/O until a test lets it through: wraps another bdev (usually malloc) and
//! parks every submitted I/O while its [`Gate`] is closed. Used to keep commands in flight
//! inside the target while a test disconnects, aborts or pauses. The gate can also refuse
//! submissions, as a backend with no room does, so that commands wait in the target to be
//! submitted rather than in the bdev.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use target_core::bdev::{Bdev, BdevChannel, BdevError, BdevIo, IoType};

/// The switch shared by a [`GateBdev`] and the test.
#[derive(Debug, Default)]
pub struct Gate {
    closed: AtomicBool,
    held: AtomicUsize,
    refusing: AtomicBool,
    refused: AtomicUsize,
    passes: AtomicUsize,
}

impl Gate {
    /// Parks I/O submitted from now on.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
    }

    /// Lets parked and new I/O through.
    pub fn open(&self) {
        self.closed.store(false, Ordering::Release);
    }

    /// Lets the `n` oldest parked I/Os (of a channel) through while the gate stays closed.
    pub fn pass(&self, n: usize) {
        self.passes.fetch_add(n, Ordering::AcqRel);
    }

    /// I/Os parked right now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// While `on`, submissions are handed back (the backend is busy: the caller retries).
    pub fn refuse(&self, on: bool) {
        self.refusing.store(on, Ordering::Release);
    }

    /// Submissions refused so far.
    pub fn refused(&self) -> usize {
        self.refused.load(Ordering::Acquire)
    }
}

/// The gated bdev.
pub struct GateBdev {
    inner: Arc<dyn Bdev>,
    name: String,
    gate: Arc<Gate>,
}

impl GateBdev {
    /// Gates `inner` under the name `name`.
    pub fn new(name: &str, inner: Arc<dyn Bdev>) -> (Arc<Self>, Arc<Gate>) {
        let gate = Arc::new(Gate::default());
        (
            Arc::new(GateBdev {
                inner,
                name: name.to_string(),
                gate: Arc::clone(&gate),
            }),
            gate,
        )
    }
}

impl Bdev for GateBdev {
    fn name(&self) -> &str {
        &self.name
    }
    fn product_name(&self) -> &'static str {
        "Gate disk"
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
        Ok(Box::new(GateChannel {
            inner: self.inner.open_channel()?,
            held: VecDeque::new(),
            gate: Arc::clone(&self.gate),
        }))
    }
    fn config(&self) -> serde_json::Value {
        serde_json::json!({"method": "test_gate", "params": {"name": self.name}})
    }
}

struct GateChannel {
    inner: Box<dyn BdevChannel>,
    held: VecDeque<Box<BdevIo>>,
    gate: Arc<Gate>,
}

impl BdevChannel for GateChannel {
    fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        if self.gate.refusing.load(Ordering::Acquire) {
            self.gate.refused.fetch_add(1, Ordering::AcqRel);
            return Err(io);
        }
        if self.gate.closed.load(Ordering::Acquire) {
            self.held.push_back(io);
            self.gate.held.fetch_add(1, Ordering::AcqRel);
            return Ok(());
        }
        self.inner.submit(io)
    }

    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        while !self.held.is_empty()
            && self
                .gate
                .passes
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |p| p.checked_sub(1))
                .is_ok()
        {
            if let Some(io) = self.held.pop_front() {
                self.gate.held.fetch_sub(1, Ordering::AcqRel);
                if let Err(io) = self.inner.submit(io) {
                    self.gate.held.fetch_add(1, Ordering::AcqRel);
                    self.gate.passes.fetch_add(1, Ordering::AcqRel);
                    self.held.push_front(io);
                    break;
                }
            }
        }
        if !self.gate.closed.load(Ordering::Acquire) {
            while let Some(io) = self.held.pop_front() {
                self.gate.held.fetch_sub(1, Ordering::AcqRel);
                if let Err(io) = self.inner.submit(io) {
                    self.gate.held.fetch_add(1, Ordering::AcqRel);
                    self.held.push_front(io);
                    break;
                }
            }
        }
        self.inner.poll(done)
    }

    fn outstanding(&self) -> usize {
        self.inner.outstanding() + self.held.len()
    }
}
