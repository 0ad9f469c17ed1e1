//! `delay`: a virtual bdev over a base bdev that holds each completed I/O for a configured
//! latency before handing it back (SPDK's vbdev_delay), to make a fast backend look slow.
//!
//! Four latencies, in microseconds: reads and compares get the read latency, writes the write
//! latency, and about one I/O in a hundred gets the p99 latency instead of the average. Flush,
//! unmap and write zeroes pass through undelayed. The latency is counted from the moment the
//! base bdev completes the I/O, and it is the one in force at that moment: a change (see
//! [`DelayBdev::set_latency`]) applies to I/O completing afterwards. As in SPDK, held I/O leaves
//! in order per kind (average read, p99 read, average write, p99 write): after a latency is
//! lowered, newer I/O of that kind waits for the older I/O held before it.
//!
//! The base bdev is claimed (module `bdev_delay`, holder the delay bdev's name) from
//! [`DelayBdev::create`] until the delay bdev is unregistered, so it cannot be deleted or
//! exported underneath.
//!
//! There is no timer: a reactor polling a channel that holds I/O keeps polling (it does not
//! sleep) until the last held I/O is released, as SPDK's per-channel delay poller runs on
//! every reactor iteration. With nothing held, the channel sleeps like its base.

use std::collections::VecDeque;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use serde_json::json;

use super::{Bdev, BdevChannel, BdevError, BdevIo, BdevOp, BdevRegistry, Claim, IoType};

/// The claim module a delay bdev holds its base with.
pub const DELAY_CLAIM_MODULE: &str = "bdev_delay";

/// The product name SPDK reports for delay bdevs (`bdev_get_bdevs`).
pub const DELAY_PRODUCT_NAME: &str = "delay";

/// SPDK's namespace for the UUIDs of delay bdevs created without one (a delay bdev's UUID is the
/// SHA-1 name-based UUID of its base bdev's UUID in this namespace).
const UUID_NAMESPACE: uuid::Uuid = uuid::uuid!("4009b574-6430-4f1b-bc40-ace811091027");

/// One of the four latencies of a delay bdev.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DelayLatency {
    /// Most reads (and compares).
    AvgRead,
    /// One read in a hundred.
    P99Read,
    /// Most writes.
    AvgWrite,
    /// One write in a hundred.
    P99Write,
}

impl DelayLatency {
    /// All four, in SPDK's order.
    pub const ALL: [DelayLatency; 4] = [
        DelayLatency::AvgRead,
        DelayLatency::P99Read,
        DelayLatency::AvgWrite,
        DelayLatency::P99Write,
    ];

    /// SPDK's name (`latency_type` of `bdev_delay_update_latency`): `avg_read`, `p99_read`,
    /// `avg_write` or `p99_write`.
    pub fn as_str(self) -> &'static str {
        match self {
            DelayLatency::AvgRead => "avg_read",
            DelayLatency::P99Read => "p99_read",
            DelayLatency::AvgWrite => "avg_write",
            DelayLatency::P99Write => "p99_write",
        }
    }

    /// The latency named `s` (see [`DelayLatency::as_str`]).
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|l| l.as_str() == s)
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl std::fmt::Display for DelayLatency {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Parameters of `bdev_delay_create`. Latencies are in microseconds.
#[derive(Debug, Clone)]
pub struct DelayParams {
    /// Name of the delay bdev.
    pub name: String,
    /// The bdev it is stacked on.
    pub base_bdev_name: String,
    /// UUID (when absent, derived from the base bdev's UUID as SPDK does).
    pub uuid: Option<uuid::Uuid>,
    /// Average read latency.
    pub avg_read_latency: u64,
    /// Latency of one read in a hundred; at least the average.
    pub p99_read_latency: u64,
    /// Average write latency.
    pub avg_write_latency: u64,
    /// Latency of one write in a hundred; at least the average.
    pub p99_write_latency: u64,
}

/// The latencies in force, shared by the bdev and its channels.
#[derive(Debug, Default)]
struct Latencies([AtomicU64; 4]);

impl Latencies {
    fn get(&self, l: DelayLatency) -> u64 {
        self.0[l.index()].load(Ordering::Relaxed)
    }

    fn set(&self, l: DelayLatency, us: u64) {
        self.0[l.index()].store(us, Ordering::Relaxed);
    }
}

/// A delay bdev (see the module documentation).
pub struct DelayBdev {
    name: String,
    base: Arc<dyn Bdev>,
    uuid: uuid::Uuid,
    latencies: Arc<Latencies>,
    registry: Weak<BdevRegistry>,
}

impl std::fmt::Debug for DelayBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DelayBdev")
            .field("name", &self.name)
            .field("base", &self.base.name())
            .finish()
    }
}

impl DelayBdev {
    /// Claims the base bdev and registers a delay bdev over it in `registry`.
    ///
    /// Fails with [`BdevError::Invalid`] if a p99 latency is below its average (SPDK's check),
    /// [`BdevError::Exists`] if the name is taken, [`BdevError::NotFound`] without the base
    /// bdev (SPDK would defer the creation until the base appears; rtgt has no examine step),
    /// and [`BdevError::Claimed`] if something else holds the base.
    pub fn create(registry: &Arc<BdevRegistry>, p: DelayParams) -> Result<Arc<Self>, BdevError> {
        for (kind, avg, p99) in [
            ("read", p.avg_read_latency, p.p99_read_latency),
            ("write", p.avg_write_latency, p.p99_write_latency),
        ] {
            if p99 < avg {
                return Err(BdevError::Invalid(format!(
                    "delay bdev {}: the p99 {kind} latency ({p99} us) is less than the average \
                     {kind} latency ({avg} us)",
                    p.name
                )));
            }
        }
        if registry.get(&p.name).is_some() {
            return Err(BdevError::Exists(p.name));
        }
        let base = registry.claim(
            &p.base_bdev_name,
            Claim {
                module: DELAY_CLAIM_MODULE.into(),
                holder: p.name.clone(),
            },
        )?;
        let uuid = p
            .uuid
            .unwrap_or_else(|| uuid::Uuid::new_v5(&UUID_NAMESPACE, base.uuid().as_bytes()));
        let latencies = Arc::new(Latencies::default());
        for (l, us) in DelayLatency::ALL.into_iter().zip([
            p.avg_read_latency,
            p.p99_read_latency,
            p.avg_write_latency,
            p.p99_write_latency,
        ]) {
            latencies.set(l, us);
        }
        let bdev = Arc::new(Self {
            name: p.name,
            base,
            uuid,
            latencies,
            registry: Arc::downgrade(registry),
        });
        if let Err(e) = registry.register(Arc::clone(&bdev) as Arc<dyn Bdev>) {
            registry.release(&p.base_bdev_name);
            return Err(e);
        }
        tracing::info!(
            "delay bdev {} over {}: read {}/{} us, write {}/{} us (avg/p99)",
            bdev.name,
            bdev.base.name(),
            p.avg_read_latency,
            p.p99_read_latency,
            p.avg_write_latency,
            p.p99_write_latency
        );
        Ok(bdev)
    }

    /// The delay bdev registered as `name`, if that bdev is one.
    pub fn lookup(registry: &BdevRegistry, name: &str) -> Option<Arc<Self>> {
        let bdev: Arc<dyn std::any::Any + Send + Sync> = registry.get(name)?;
        bdev.downcast::<Self>().ok()
    }

    /// The base bdev.
    pub fn base(&self) -> &Arc<dyn Bdev> {
        &self.base
    }

    /// A latency in force, in microseconds.
    pub fn latency(&self, which: DelayLatency) -> u64 {
        self.latencies.get(which)
    }

    /// Changes a latency (microseconds). I/O the base completes from now on is held for the new
    /// value; I/O already held keeps its release time. No check against the other latencies
    /// (SPDK makes none either: a p99 latency may be left below its average, which
    /// [`Bdev::config`] saves as the average, see there).
    pub fn set_latency(&self, which: DelayLatency, us: u64) {
        self.latencies.set(which, us);
        tracing::info!("delay bdev {}: {which} latency {us} us", self.name);
    }

    /// `{name, base_bdev_name, uuid, avg_read_latency, ...}` with the latencies in force: the
    /// `delay` object of `driver_specific`, and, with `creatable`, the parameters of the
    /// `bdev_delay_create` that recreates the bdev (a p99 latency below its average then
    /// becomes the average, as `bdev_delay_create` refuses p99 < average).
    fn params_json(&self, creatable: bool) -> serde_json::Value {
        let l = |x| self.latencies.get(x);
        let p99 = |p99, avg| {
            let (p99, avg) = (l(p99), l(avg));
            if creatable { p99.max(avg) } else { p99 }
        };
        json!({
            "name": self.name,
            "base_bdev_name": self.base.name(),
            "uuid": self.uuid.to_string(),
            "avg_read_latency": l(DelayLatency::AvgRead),
            "p99_read_latency": p99(DelayLatency::P99Read, DelayLatency::AvgRead),
            "avg_write_latency": l(DelayLatency::AvgWrite),
            "p99_write_latency": p99(DelayLatency::P99Write, DelayLatency::AvgWrite),
        })
    }
}

impl Bdev for DelayBdev {
    fn name(&self) -> &str {
        &self.name
    }
    fn product_name(&self) -> &'static str {
        DELAY_PRODUCT_NAME
    }
    fn block_size(&self) -> u32 {
        self.base.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.base.num_blocks()
    }
    fn physical_block_size(&self) -> u32 {
        self.base.physical_block_size()
    }
    fn uuid(&self) -> uuid::Uuid {
        self.uuid
    }
    fn supports(&self, io: IoType) -> bool {
        self.base.supports(io)
    }
    fn write_cache(&self) -> bool {
        self.base.write_cache()
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        Ok(Box::new(DelayChannel::new(
            self.base.open_channel()?,
            Arc::clone(&self.latencies),
            seed(),
        )))
    }
    /// `bdev_delay_create` with the latencies in force. SPDK saves a p99 latency left below its
    /// average by `bdev_delay_update_latency` as it is, and then cannot load its own
    /// configuration; rtgt saves the average instead, so that save_config always loads.
    fn config(&self) -> serde_json::Value {
        json!({"method": "bdev_delay_create", "params": self.params_json(true)})
    }
    fn driver_specific(&self) -> serde_json::Value {
        json!({ "delay": self.params_json(false) })
    }
    fn destroy(&self) {
        if let Some(reg) = self.registry.upgrade() {
            reg.release(self.base.name());
        }
    }
}

/// A per-channel seed for the p99 draw: distinct per channel, no global random source needed.
fn seed() -> u64 {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    t ^ COUNTER
        .fetch_add(1, Ordering::Relaxed)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// An I/O the base has completed, waiting for its release time (`None`: the latency did not
/// fit in an `Instant`, so never).
struct Held {
    io: Box<BdevIo>,
    due: Option<Instant>,
}

/// A channel of a delay bdev: the base's channel, and the I/O it completed that are held.
struct DelayChannel {
    base: Box<dyn BdevChannel>,
    latencies: Arc<Latencies>,
    /// Held I/O per latency kind, in [`DelayLatency`] order, each in completion order.
    held: [VecDeque<Held>; 4],
    rng: u64,
}

impl DelayChannel {
    fn new(base: Box<dyn BdevChannel>, latencies: Arc<Latencies>, seed: u64) -> Self {
        Self {
            base,
            latencies,
            held: Default::default(),
            // xorshift must not start at 0.
            rng: seed | 1,
        }
    }

    /// I/O the base has completed and this channel still holds.
    fn held(&self) -> usize {
        self.held.iter().map(VecDeque::len).sum()
    }
}

/// Whether an I/O gets the p99 latency: one draw in a hundred (xorshift64*).
fn draw_p99(rng: &mut u64) -> bool {
    let mut x = *rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    (x.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 32).is_multiple_of(100)
}

/// The latency kind of an I/O, or `None` for the types that pass through undelayed.
fn kind(op: &BdevOp, rng: &mut u64) -> Option<DelayLatency> {
    let read = match op {
        BdevOp::Read { .. } | BdevOp::Compare { .. } => true,
        BdevOp::Write { .. } => false,
        BdevOp::Flush | BdevOp::Unmap { .. } | BdevOp::WriteZeroes { .. } => return None,
    };
    Some(match (read, draw_p99(rng)) {
        (true, false) => DelayLatency::AvgRead,
        (true, true) => DelayLatency::P99Read,
        (false, false) => DelayLatency::AvgWrite,
        (false, true) => DelayLatency::P99Write,
    })
}

impl BdevChannel for DelayChannel {
    fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        self.base.submit(io)
    }

    /// Takes what the base completed (holding reads and writes, handing the rest straight on),
    /// then hands on the held I/O whose time has come.
    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        let now = Instant::now();
        let mut n = 0;
        let Self {
            base,
            latencies,
            held,
            rng,
        } = self;
        base.poll(&mut |io| match kind(&io.op, rng) {
            None => {
                done(io);
                n += 1;
            }
            Some(k) => {
                let due = now.checked_add(Duration::from_micros(latencies.get(k)));
                held[k.index()].push_back(Held { io, due });
            }
        });
        for q in held.iter_mut() {
            while q.front().is_some_and(|h| h.due.is_some_and(|d| d <= now)) {
                if let Some(h) = q.pop_front() {
                    done(h.io);
                    n += 1;
                }
            }
        }
        n
    }

    fn wake_fd(&self) -> Option<RawFd> {
        self.base.wake_fd()
    }

    /// Held I/O keeps the reactor polling (there is no timer to wake it); otherwise the base
    /// decides.
    fn arm(&mut self) -> bool {
        self.held() > 0 || self.base.arm()
    }

    fn outstanding(&self) -> usize {
        self.base.outstanding() + self.held()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bdev::{IoChannel, IoStatus, MallocBdev, MallocParams};
    use iobuf::IoBuf;

    const HOUR_US: u64 = 3_600_000_000;

    fn setup(lat: [u64; 4]) -> (Arc<BdevRegistry>, Arc<DelayBdev>) {
        let reg = BdevRegistry::new();
        let base = MallocBdev::create(MallocParams {
            name: "Malloc0".into(),
            num_blocks: 64,
            block_size: 512,
            physical_block_size: 0,
            uuid: Some(uuid::uuid!("11111111-2222-3333-4444-555555555555")),
            optimal_io_boundary: 0,
        })
        .unwrap();
        reg.register(base).unwrap();
        let d = DelayBdev::create(&reg, params("Delay0", "Malloc0", lat)).unwrap();
        (reg, d)
    }

    fn params(name: &str, base: &str, lat: [u64; 4]) -> DelayParams {
        DelayParams {
            name: name.into(),
            base_bdev_name: base.into(),
            uuid: None,
            avg_read_latency: lat[0],
            p99_read_latency: lat[1],
            avg_write_latency: lat[2],
            p99_write_latency: lat[3],
        }
    }

    fn channel(reg: &BdevRegistry, d: &Arc<DelayBdev>) -> IoChannel {
        reg.open_channel(&(Arc::clone(d) as Arc<dyn Bdev>)).unwrap()
    }

    fn io(op: BdevOp, tag: u64) -> Box<BdevIo> {
        let mut io = Box::new(BdevIo::new(op, tag));
        if op.has_data() {
            io.bufs.push(IoBuf::alloc(512).unwrap());
        }
        io
    }

    fn read(tag: u64) -> Box<BdevIo> {
        io(
            BdevOp::Read {
                offset_blocks: 1,
                num_blocks: 1,
            },
            tag,
        )
    }

    fn write(tag: u64) -> Box<BdevIo> {
        io(
            BdevOp::Write {
                offset_blocks: 2,
                num_blocks: 1,
                fua: false,
            },
            tag,
        )
    }

    /// One poll: the tags it returned, in order (each must have succeeded).
    fn poll(ch: &mut IoChannel) -> Vec<u64> {
        let mut tags = Vec::new();
        ch.poll(&mut |io| {
            assert_eq!(io.status, IoStatus::Success, "tag {}", io.tag);
            tags.push(io.tag);
        });
        tags
    }

    #[test]
    fn latency_zero_returns_on_the_next_poll() {
        let (reg, d) = setup([0; 4]);
        let mut ch = channel(&reg, &d);
        ch.submit(read(1)).unwrap();
        ch.submit(write(2)).unwrap();
        assert_eq!(ch.outstanding(), 2, "completed by the base, not yet polled");
        assert_eq!(poll(&mut ch), [1, 2]);
        assert_eq!(ch.outstanding(), 0);
        assert!(!ch.arm(), "nothing held: the reactor may sleep");
    }

    #[test]
    fn a_held_io_is_not_returned_before_its_latency() {
        let (reg, d) = setup([50_000, 50_000, HOUR_US, HOUR_US]);
        let mut ch = channel(&reg, &d);
        ch.submit(read(1)).unwrap();
        ch.submit(write(2)).unwrap();
        let start = Instant::now();
        // The first poll takes both from the base and holds them: their time starts now.
        assert!(poll(&mut ch).is_empty());
        assert_eq!(ch.outstanding(), 2, "held I/O counts as outstanding");
        assert!(ch.arm(), "held I/O keeps the reactor polling");
        let mut got = Vec::new();
        while got.is_empty() {
            got = poll(&mut ch);
            assert!(start.elapsed() < Duration::from_secs(10), "never released");
        }
        assert_eq!(got, [1]);
        assert!(
            start.elapsed() >= Duration::from_millis(50),
            "released after {:?}",
            start.elapsed()
        );
        // The write (an hour) stays held across polls.
        for _ in 0..100 {
            assert!(poll(&mut ch).is_empty());
        }
        assert_eq!(ch.outstanding(), 1);
        assert!(ch.arm());
    }

    #[test]
    fn a_latency_change_applies_to_io_completing_afterwards() {
        let (reg, d) = setup([HOUR_US; 4]);
        let mut ch = channel(&reg, &d);
        ch.submit(write(1)).unwrap();
        assert!(poll(&mut ch).is_empty());
        d.set_latency(DelayLatency::AvgRead, 0);
        d.set_latency(DelayLatency::P99Read, 0);
        assert_eq!(d.latency(DelayLatency::AvgRead), 0);
        assert_eq!(d.latency(DelayLatency::AvgWrite), HOUR_US);
        ch.submit(read(2)).unwrap();
        assert_eq!(poll(&mut ch), [2], "the read completed after the change");
        assert_eq!(ch.outstanding(), 1, "the write keeps its hour");
        d.set_latency(DelayLatency::AvgWrite, 0);
        d.set_latency(DelayLatency::P99Write, 0);
        assert!(poll(&mut ch).is_empty(), "held I/O keeps its release time");
        assert_eq!(
            d.driver_specific()["delay"]["avg_write_latency"],
            json!(0),
            "the latencies in force are shown"
        );
        // A p99 left below its average is shown as it is, and saved as the average.
        d.set_latency(DelayLatency::AvgWrite, 7);
        assert_eq!(d.driver_specific()["delay"]["p99_write_latency"], json!(0));
        assert_eq!(d.config()["params"]["p99_write_latency"], json!(7));
        assert_eq!(d.config()["params"]["p99_read_latency"], json!(0));
    }

    #[test]
    fn lowering_a_latency_queues_new_io_behind_older_held_io() {
        let (reg, d) = setup([30_000, 30_000, 0, 0]);
        let mut ch = channel(&reg, &d);
        ch.submit(read(1)).unwrap();
        assert!(poll(&mut ch).is_empty());
        d.set_latency(DelayLatency::AvgRead, 0);
        d.set_latency(DelayLatency::P99Read, 0);
        ch.submit(read(2)).unwrap();
        ch.submit(write(3)).unwrap();
        assert_eq!(poll(&mut ch), [3], "other kinds are not held up");
        let start = Instant::now();
        let mut got = Vec::new();
        while got.len() < 2 {
            got.extend(poll(&mut ch));
            assert!(start.elapsed() < Duration::from_secs(10), "never released");
        }
        assert_eq!(got, [1, 2], "read 2 waited for read 1 (SPDK's order)");
    }

    #[test]
    fn flush_unmap_and_write_zeroes_pass_through() {
        let (reg, d) = setup([HOUR_US; 4]);
        let mut ch = channel(&reg, &d);
        ch.submit(read(1)).unwrap();
        ch.submit(io(BdevOp::Flush, 2)).unwrap();
        ch.submit(io(
            BdevOp::Unmap {
                offset_blocks: 0,
                num_blocks: 4,
            },
            3,
        ))
        .unwrap();
        ch.submit(io(
            BdevOp::WriteZeroes {
                offset_blocks: 4,
                num_blocks: 4,
            },
            4,
        ))
        .unwrap();
        assert_eq!(poll(&mut ch), [2, 3, 4]);
        assert_eq!(ch.outstanding(), 1, "the read is held");
    }

    #[test]
    fn compare_gets_the_read_latency() {
        let (reg, d) = setup([HOUR_US, HOUR_US, 0, 0]);
        let mut ch = channel(&reg, &d);
        let mut c = io(
            BdevOp::Compare {
                offset_blocks: 9,
                num_blocks: 1,
            },
            1,
        );
        c.bufs[0].as_mut_slice().fill(0);
        ch.submit(c).unwrap();
        ch.submit(write(2)).unwrap();
        assert_eq!(poll(&mut ch), [2]);
        assert_eq!(ch.outstanding(), 1);
    }

    #[test]
    fn about_one_io_in_a_hundred_gets_the_p99_latency() {
        let mut rng = 0x1234_5678_9abc_def1;
        let p99 = (0..100_000).filter(|_| draw_p99(&mut rng)).count();
        assert!((800..1200).contains(&p99), "{p99} in 100000");

        // Through a channel with a fixed seed: average 0, p99 an hour.
        let (_reg, d) = setup([0, HOUR_US, 0, HOUR_US]);
        let base = d.base().open_channel().unwrap();
        let mut ch = DelayChannel::new(base, Arc::clone(&d.latencies), 42);
        let mut returned = 0;
        for i in 0..1000 {
            ch.submit(if i % 2 == 0 { read(i) } else { write(i) })
                .unwrap();
            returned += ch.poll(&mut |_| {});
        }
        let held = ch.outstanding();
        assert_eq!(returned + held, 1000);
        assert!((1..=30).contains(&held), "{held} of 1000 held");
    }

    #[test]
    fn the_base_is_claimed_while_the_delay_bdev_exists() {
        let (reg, d) = setup([0; 4]);
        assert_eq!(
            reg.claim_of("Malloc0"),
            Some(Claim {
                module: "bdev_delay".into(),
                holder: "Delay0".into()
            })
        );
        let err = reg.unregister("Malloc0").unwrap_err();
        assert!(matches!(err, BdevError::Claimed { .. }), "{err}");
        assert!(err.to_string().contains("bdev_delay (Delay0)"), "{err}");
        // A second delay bdev over the same base.
        let err = DelayBdev::create(&reg, params("Delay1", "Malloc0", [0; 4])).unwrap_err();
        assert_eq!(err.errno(), -libc::EPERM, "{err}");
        assert!(reg.get("Delay1").is_none());

        // Lookup finds delay bdevs only.
        assert!(DelayBdev::lookup(&reg, "Delay0").is_some());
        assert!(DelayBdev::lookup(&reg, "Malloc0").is_none());
        assert!(DelayBdev::lookup(&reg, "nope").is_none());

        // Deleting the delay bdev releases the base.
        drop(d);
        reg.unregister("Delay0").unwrap();
        assert_eq!(reg.claim_of("Malloc0"), None);
        reg.unregister("Malloc0").unwrap();
    }

    #[test]
    fn creation_errors_leave_nothing_claimed() {
        let (reg, _d) = setup([0; 4]);
        reg.register(
            MallocBdev::create(MallocParams {
                name: "Malloc1".into(),
                num_blocks: 8,
                block_size: 4096,
                physical_block_size: 0,
                uuid: None,
                optimal_io_boundary: 0,
            })
            .unwrap(),
        )
        .unwrap();
        let err = DelayBdev::create(&reg, params("D", "Malloc1", [10, 5, 0, 0])).unwrap_err();
        assert_eq!(err.errno(), -libc::EINVAL);
        assert!(err.to_string().contains("p99 read latency (5 us)"), "{err}");
        let err = DelayBdev::create(&reg, params("D", "Malloc1", [0, 0, 10, 9])).unwrap_err();
        assert!(err.to_string().contains("p99 write latency"), "{err}");
        let err = DelayBdev::create(&reg, params("Delay0", "Malloc1", [0; 4])).unwrap_err();
        assert!(matches!(err, BdevError::Exists(_)), "{err}");
        let err = DelayBdev::create(&reg, params("D", "nope", [0; 4])).unwrap_err();
        assert!(
            matches!(err, BdevError::NotFound(ref n) if n == "nope"),
            "{err}"
        );
        assert_eq!(reg.claim_of("Malloc1"), None);
        // A bdev exported by a namespace cannot be delayed.
        reg.claim(
            "Malloc1",
            Claim {
                module: "nvmf".into(),
                holder: "nqn.x".into(),
            },
        )
        .unwrap();
        let err = DelayBdev::create(&reg, params("D", "Malloc1", [0; 4])).unwrap_err();
        assert!(err.to_string().contains("claimed by nvmf"), "{err}");
        assert!(reg.get("D").is_none());
    }

    #[test]
    fn geometry_follows_the_base_and_the_uuid_is_spdks() {
        let (reg, d) = setup([1, 2, 3, 4]);
        let base = reg.get("Malloc0").unwrap();
        assert_eq!(d.product_name(), "delay");
        assert_eq!(d.block_size(), base.block_size());
        assert_eq!(d.num_blocks(), base.num_blocks());
        assert_eq!(d.write_cache(), base.write_cache());
        assert!(d.supports(IoType::Compare) && d.supports(IoType::Unmap));
        // SHA-1 name-based UUID of the base's UUID in SPDK's delay namespace.
        assert_eq!(
            d.uuid(),
            uuid::uuid!("c2258f63-c588-585e-b2ea-ca0ac77ee1fd")
        );
        let params = json!({
            "name": "Delay0",
            "base_bdev_name": "Malloc0",
            "uuid": "c2258f63-c588-585e-b2ea-ca0ac77ee1fd",
            "avg_read_latency": 1,
            "p99_read_latency": 2,
            "avg_write_latency": 3,
            "p99_write_latency": 4,
        });
        assert_eq!(
            d.config(),
            json!({"method": "bdev_delay_create", "params": params})
        );
        assert_eq!(d.driver_specific(), json!({ "delay": params }));

        let u = uuid::uuid!("3f9c4a9b-1f0e-4a63-9d7e-2a4c5e6f7a8b");
        reg.unregister("Delay0").unwrap();
        let mut p = super::tests::params("Delay0", "Malloc0", [0; 4]);
        p.uuid = Some(u);
        assert_eq!(DelayBdev::create(&reg, p).unwrap().uuid(), u);
    }
}
