//! A bdev channel's wake fd (RBD's completion eventfd) and the reactor's idle sleep: a
//! completion may write the fd after the reactor last armed the channel, while it was busy.
//! When the reactor next goes to sleep with nothing in flight, it must still arm (clear) the
//! channel, or `epoll_wait` returns at once on every sleep and the idle reactor spins through
//! system calls (on an RBD namespace between the host's bursts: 5-30 wake-ups per I/O).

use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use rtgt_tests::nvme_host::*;
use serde_json::json;
use target_core::bdev::{Bdev, BdevChannel, BdevError, BdevIo, IoType};
use target_core::reactor::sys::EventFd;

const NQN: &str = "nqn.2016-06.io.rtgt:wakefd";

/// Malloc behind a channel that has a wake fd the test writes, cleared by `arm` as RBD's is.
struct WakeBdev {
    inner: Arc<dyn Bdev>,
    wake: Arc<EventFd>,
}

impl Bdev for WakeBdev {
    fn name(&self) -> &str {
        "wake0"
    }
    fn product_name(&self) -> &'static str {
        "Wake fd disk"
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
        Ok(Box::new(WakeChannel {
            inner: self.inner.open_channel()?,
            wake: Arc::clone(&self.wake),
        }))
    }
    fn config(&self) -> serde_json::Value {
        json!({"method": "test_wake", "params": {"name": "wake0"}})
    }
}

struct WakeChannel {
    inner: Box<dyn BdevChannel>,
    wake: Arc<EventFd>,
}

impl BdevChannel for WakeChannel {
    fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        self.inner.submit(io)
    }
    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        self.inner.poll(done)
    }
    fn outstanding(&self) -> usize {
        self.inner.outstanding()
    }
    fn wake_fd(&self) -> Option<RawFd> {
        Some(self.wake.as_raw_fd())
    }
    fn arm(&mut self) -> bool {
        self.wake.drain();
        false
    }
}

#[test]
fn a_wake_fd_written_after_the_last_arming_does_not_keep_an_idle_reactor_awake() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(NQN, true, 0, 512);
    let wake = Arc::new(EventFd::new().expect("eventfd"));
    let inner = e.t.malloc("wake0_inner", 8192, 512);
    let b: Arc<dyn Bdev> = Arc::new(WakeBdev {
        inner,
        wake: Arc::clone(&wake),
    });
    e.t.target.bdevs().register(b).expect("register");
    assert_eq!(e.t.add_ns(NQN, "wake0"), 1);
    let mut c = e.connect(e.opts(NQN)).expect("connect");
    let q = &mut c.io[0];
    q.cmd(
        read_sqe(1, 0, 8),
        Data::KeyedRead {
            len: 4096,
            invalidate: false,
        },
    )
    .expect("read")
    .ok()
    .expect("read status");

    let reactors = e.t.target.reactors().clone();
    let sleeps = || {
        reactors
            .stats(0)
            .expect("reactor 0")
            .sleeps
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // Nothing in flight; the completion's notification lands after the reactor last armed.
    std::thread::sleep(Duration::from_millis(100));
    wake.notify();
    let s0 = sleeps();
    std::thread::sleep(Duration::from_millis(500));
    let n = sleeps() - s0;
    // Idle, a reactor wakes a few times a second (the poll group's timer, the host's
    // keep-alive); a readable fd nobody clears wakes it on every sleep (hundreds of thousands).
    assert!(
        n < 200,
        "the idle reactor went to sleep {n} times in 500 ms: its wake fd stayed readable"
    );
    c.shutdown().expect("shutdown");
}
