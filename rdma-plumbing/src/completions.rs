//! A device's completion queues on one poll group, behind one completion channel.
//!
//! Every queue pair a poll group has on a device sends its completions (send and receive) to
//! one of these queues. Room is reserved per queue pair ([`CompletionQueues::reserve`]) so a
//! queue never overflows: a *fixed* set has one queue of a set size and refuses a queue pair
//! that does not fit; a *growing* set adds a queue when the ones it has are full.
//!
//! Polling and sleeping follow the reactor's contract:
//! - [`CompletionQueues::poll`] takes completions in batches (the ones found while arming
//!   come first);
//! - [`CompletionQueues::arm`], called before the reactor sleeps, consumes the channel's
//!   events, asks every queue to signal the channel on its next completion, then looks once
//!   more: a completion that arrived before the request would never signal. What it finds is
//!   kept for the next poll, and `arm` says so (the reactor then polls instead of sleeping).

use std::os::fd::RawFd;

use fabric::{CompChannel, Cq, Device, FabricError, WorkCompletion};

/// Completions kept from [`CompletionQueues::arm`] for the next poll (and a good batch size).
pub const BATCH: usize = 32;

/// Poll counters (SPDK's RDMA device poller statistics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PollCounters {
    /// Calls of [`CompletionQueues::poll`].
    pub polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// Work completions taken.
    pub completions: u64,
}

/// Why room for a queue pair could not be reserved.
#[derive(Debug)]
pub enum ReserveError {
    /// A fixed set's queue has no room for that many more completions.
    Full,
    /// Creating another completion queue failed.
    Fabric(FabricError),
}

impl std::fmt::Display for ReserveError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ReserveError::Full => f.write_str("completion queue full"),
            ReserveError::Fabric(e) => write!(f, "completion queue: {e}"),
        }
    }
}

struct Slot {
    cq: Cq,
    cap: u32,
    reserved: u32,
}

/// The completion channel and completion queues of one device on one poll group.
pub struct CompletionQueues {
    device: Device,
    chan: CompChannel,
    cqs: Vec<Slot>,
    size: u32,
    growing: bool,
    stash: [WorkCompletion; BATCH],
    stash_len: usize,
    next: usize,
    counters: PollCounters,
}

impl std::fmt::Debug for CompletionQueues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CompletionQueues")
            .field("queues", &self.cqs.len())
            .field("size", &self.size)
            .finish()
    }
}

impl CompletionQueues {
    /// One completion queue of `size` entries, created now and armed.
    pub fn fixed(device: &Device, size: u32) -> Result<Self, FabricError> {
        let mut s = Self::empty(device, size, false)?;
        s.add(size)?;
        Ok(s)
    }

    /// Completion queues created when needed, each of `size` entries at least.
    pub fn growing(device: &Device, size: u32) -> Result<Self, FabricError> {
        Self::empty(device, size, true)
    }

    fn empty(device: &Device, size: u32, growing: bool) -> Result<Self, FabricError> {
        Ok(CompletionQueues {
            device: device.clone(),
            chan: device.create_comp_channel()?,
            cqs: Vec::new(),
            size,
            growing,
            stash: [WorkCompletion::default(); BATCH],
            stash_len: 0,
            next: 0,
            counters: PollCounters::default(),
        })
    }

    fn add(&mut self, want: u32) -> Result<usize, FabricError> {
        let cq = self.device.create_cq(want, Some(&self.chan))?;
        // A fixed queue is accounted at the size asked for; a growing set uses all it got.
        let cap = if self.growing {
            cq.cqe().max(want)
        } else {
            want
        };
        cq.req_notify(false)?;
        self.cqs.push(Slot {
            cq,
            cap,
            reserved: 0,
        });
        Ok(self.cqs.len() - 1)
    }

    /// The completion channel's fd, for the reactor to watch.
    pub fn fd(&self) -> RawFd {
        self.chan.fd()
    }

    /// Reserves room for `n` completions on one queue; returns its index.
    pub fn reserve(&mut self, n: u32) -> Result<usize, ReserveError> {
        let i = match self
            .cqs
            .iter()
            .position(|c| c.cap.saturating_sub(c.reserved) >= n)
        {
            Some(i) => i,
            None if self.growing => self.add(self.size.max(n)).map_err(ReserveError::Fabric)?,
            None => return Err(ReserveError::Full),
        };
        self.cqs[i].reserved += n;
        Ok(i)
    }

    /// Gives back room reserved with [`CompletionQueues::reserve`].
    pub fn release(&mut self, cq: usize, n: u32) {
        if let Some(s) = self.cqs.get_mut(cq) {
            s.reserved = s.reserved.saturating_sub(n);
        }
    }

    /// Completion queue `i` (to create a queue pair on).
    pub fn cq(&self, i: usize) -> &Cq {
        &self.cqs[i].cq
    }

    /// How many completion queues there are.
    pub fn queues(&self) -> usize {
        self.cqs.len()
    }

    /// Room reserved on queue `i`, and its capacity.
    pub fn usage(&self, i: usize) -> Option<(u32, u32)> {
        self.cqs.get(i).map(|s| (s.reserved, s.cap))
    }

    /// The counters.
    pub fn counters(&self) -> PollCounters {
        self.counters
    }

    /// Whether completions are kept from arming.
    pub fn has_stashed(&self) -> bool {
        self.stash_len > 0
    }

    /// Takes up to `out.len()` completions: those kept from [`CompletionQueues::arm`] first,
    /// then from the queues in turn. Fewer than `out.len()` means the queues were empty.
    pub fn poll(&mut self, out: &mut [WorkCompletion]) -> usize {
        self.counters.polls += 1;
        let mut n = self.stash_len.min(out.len());
        out[..n].copy_from_slice(&self.stash[..n]);
        self.stash.copy_within(n..self.stash_len, 0);
        self.stash_len -= n;
        let stashed = n;
        let queues = self.cqs.len();
        for k in 0..queues {
            if n == out.len() {
                break;
            }
            let i = (self.next + k) % queues;
            let got = self.cqs[i].cq.poll(&mut out[n..]);
            n += got;
            if n == out.len() {
                // This queue may have more: start with it next time.
                self.next = i;
            }
        }
        if n < out.len() && queues > 0 {
            self.next = (self.next + 1) % queues;
        }
        self.counters.completions += (n - stashed) as u64;
        if n == 0 {
            self.counters.idle_polls += 1;
        }
        n
    }

    /// Before the reactor sleeps: consumes the channel's events, arms every queue, and keeps
    /// what arrived meanwhile for the next poll. Returns whether there is something to poll
    /// (the reactor must not sleep then).
    pub fn arm(&mut self) -> Result<bool, FabricError> {
        while let Ok(Some(_)) = self.chan.get_event() {}
        let mut failed = None;
        for s in &self.cqs {
            if let Err(e) = s.cq.req_notify(false) {
                failed = Some(e);
            }
        }
        for s in &self.cqs {
            if self.stash_len == BATCH {
                break;
            }
            let got = s.cq.poll(&mut self.stash[self.stash_len..]);
            self.stash_len += got;
            self.counters.completions += got as u64;
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(self.stash_len > 0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{Fabric, QpCap, QpInit, SendWr, SgeList, SimNetwork};
    use std::net::{IpAddr, Ipv4Addr};

    const IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 9, 0, 1));

    fn device() -> (SimNetwork, Device) {
        let net = SimNetwork::new();
        net.add_device("cq0", IP).unwrap();
        let dev = Fabric::sim(&net).devices().unwrap().remove(0);
        (net, dev)
    }

    #[test]
    fn a_fixed_set_refuses_what_does_not_fit_and_takes_it_back_when_released() {
        let (_net, dev) = device();
        let mut c = CompletionQueues::fixed(&dev, 100).unwrap();
        assert_eq!(c.queues(), 1);
        assert_eq!(c.reserve(60).unwrap(), 0);
        assert!(matches!(c.reserve(41), Err(ReserveError::Full)));
        assert_eq!(c.reserve(40).unwrap(), 0);
        assert_eq!(c.usage(0), Some((100, 100)));
        c.release(0, 60);
        assert_eq!(c.reserve(41).unwrap(), 0);
        assert_eq!(c.queues(), 1);
    }

    #[test]
    fn a_growing_set_adds_queues_and_reuses_freed_room() {
        let (_net, dev) = device();
        let mut c = CompletionQueues::growing(&dev, 64).unwrap();
        assert_eq!(c.queues(), 0);
        assert_eq!(c.reserve(40).unwrap(), 0);
        let (_, cap0) = c.usage(0).unwrap();
        assert!(cap0 >= 64);
        let big = c.reserve(cap0).unwrap();
        assert_eq!(big, 1, "no room left on the first: a second queue");
        c.release(0, 40);
        assert_eq!(c.reserve(cap0).unwrap(), 0, "freed room is reused");
        // A reservation larger than the default size gets a queue of its own size.
        let i = c.reserve(1000).unwrap();
        assert!(c.usage(i).unwrap().1 >= 1000);
    }

    /// A queue pair on completion queue `cq`, in the error state, with `n` signaled
    /// zero-length RDMA WRITEs posted: each completes at once with a flush error.
    fn flushes(net: &SimNetwork, c: &CompletionQueues, cq: usize, n: usize) -> fabric::Qp {
        let fabric = Fabric::sim(net);
        let dev = &fabric.devices().unwrap()[0];
        let pd = dev.alloc_pd().unwrap();
        let events = fabric.create_event_channel().unwrap();
        let id = events.create_id().unwrap();
        id.bind(std::net::SocketAddr::new(IP, 0)).unwrap();
        let qp = id
            .create_qp(&QpInit {
                pd: &pd,
                send_cq: c.cq(cq),
                recv_cq: c.cq(cq),
                srq: None,
                cap: QpCap {
                    max_send_wr: 128,
                    max_recv_wr: 1,
                    max_send_sge: 1,
                    max_recv_sge: 1,
                    max_inline_data: 0,
                },
                sq_sig_all: false,
            })
            .unwrap();
        qp.modify_to_error().unwrap();
        let wrs: Vec<SendWr> = (0..n)
            .map(|i| SendWr::rdma_write(i as u64, SgeList::new(), 0, 0))
            .collect();
        qp.post_send(wrs.iter()).unwrap();
        qp
    }

    #[test]
    fn poll_takes_batches_from_every_queue_and_counts() {
        let (net, dev) = device();
        let mut c = CompletionQueues::growing(&dev, 64).unwrap();
        let a = c.reserve(64).unwrap();
        let b = c.reserve(64).unwrap();
        assert_ne!(a, b);
        let _qa = flushes(&net, &c, a, 40);
        let _qb = flushes(&net, &c, b, 10);
        let mut out = [WorkCompletion::default(); BATCH];
        let mut ids = Vec::new();
        loop {
            let n = c.poll(&mut out);
            ids.extend(out[..n].iter().map(|w| w.wr_id));
            if n < BATCH {
                break;
            }
        }
        assert_eq!(ids.len(), 50, "every completion of both queues");
        assert_eq!(c.poll(&mut out), 0);
        let k = c.counters();
        assert_eq!(k.completions, 50);
        assert_eq!(k.polls, 3);
        assert_eq!(k.idle_polls, 1);
    }

    #[test]
    fn arming_keeps_what_arrived_for_the_next_poll() {
        let (net, dev) = device();
        let mut c = CompletionQueues::fixed(&dev, 256).unwrap();
        assert!(!c.arm().unwrap(), "nothing yet: the reactor may sleep");
        let _q = flushes(&net, &c, 0, 40);
        assert!(
            fabric::wait_readable(c.fd(), std::time::Duration::from_secs(5)).unwrap(),
            "an armed queue signals its channel"
        );
        assert!(
            c.arm().unwrap(),
            "completions found while arming: do not sleep"
        );
        assert!(c.has_stashed());
        let mut out = [WorkCompletion::default(); 8];
        let mut ids = Vec::new();
        loop {
            let n = c.poll(&mut out);
            ids.extend(out[..n].iter().map(|w| w.wr_id));
            if n < out.len() {
                break;
            }
        }
        assert_eq!(ids, (0..40).collect::<Vec<u64>>(), "stash first, in order");
        assert_eq!(c.counters().completions, 40);
    }
}
