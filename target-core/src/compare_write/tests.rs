//! Range locks: unit behaviour, and a randomized simulation of several reactors writing
//! while compare-and-writes lock ranges, checking atomicity and progress.

use std::collections::VecDeque;

use super::*;

#[test]
fn ranges_overlap() {
    let r = LbaRange::new(10, 5);
    assert!(r.overlaps(LbaRange::new(14, 1)));
    assert!(r.overlaps(LbaRange::new(0, 11)));
    assert!(!r.overlaps(LbaRange::new(15, 1)));
    assert!(!r.overlaps(LbaRange::new(0, 10)));
    assert!(
        !r.overlaps(LbaRange::new(12, 0)),
        "empty ranges overlap nothing"
    );
    assert!(LbaRange::new(u64::MAX - 1, 5).overlaps(LbaRange::new(u64::MAX - 1, 1)));
}

#[test]
fn mismatch_offsets() {
    let a: Vec<u8> = (0..100).collect();
    assert_eq!(first_mismatch(&a, &a), None);
    for i in [0usize, 7, 8, 63, 64, 99] {
        let mut b = a.clone();
        b[i] ^= 0x80;
        assert_eq!(first_mismatch(&a, &b), Some(i), "{i}");
        b[99] ^= 1;
        assert_eq!(first_mismatch(&a, &b), Some(i));
    }
    assert_eq!(first_mismatch(&a[..10], &a[..12]), Some(10));
    assert_eq!(first_mismatch(&[], &[]), None);
}

#[test]
fn gate_idle_admits_and_lock_waits_for_inflight() {
    let mut g = RangeGate::new();
    assert!(g.is_idle());
    assert_eq!(g.admit(LbaRange::new(0, 8), None), Admit::Go);
    // Two overlapping writes were in flight when the lock arrived.
    assert_eq!(
        g.lock(LockId(1), LbaRange::new(4, 4), Owner(9), 2),
        Ok(false)
    );
    assert_eq!(g.admit(LbaRange::new(7, 2), None), Admit::Wait(LockId(1)));
    assert_eq!(
        g.admit(LbaRange::new(8, 2), None),
        Admit::Wait(LockId(1)),
        "while draining, every write waits"
    );
    assert_eq!(
        g.admit(LbaRange::new(4, 1), Some(Owner(9))),
        Admit::Go,
        "owner passes"
    );
    let mut acks = Vec::new();
    g.completed(LbaRange::new(100, 1), |id| acks.push(id));
    g.completed(LbaRange::new(0, 8), |id| acks.push(id));
    assert!(acks.is_empty());
    g.completed(LbaRange::new(5, 1), |id| acks.push(id));
    assert_eq!(acks, vec![LockId(1)]);
    g.completed(LbaRange::new(5, 1), |id| acks.push(id));
    assert_eq!(acks.len(), 1, "acknowledged once");
    assert_eq!(
        g.admit(LbaRange::new(8, 2), None),
        Admit::Go,
        "drained: only overlapping writes wait"
    );
    g.unlock(LockId(1));
    assert!(g.is_idle());
    assert_eq!(g.admit(LbaRange::new(7, 2), None), Admit::Go);
}

#[test]
fn gate_capacity() {
    let mut g = RangeGate::new();
    for i in 0..gate::GATE_CAPACITY as u64 {
        assert_eq!(
            g.lock(LockId(i), LbaRange::new(i, 1), Owner(i), 0),
            Ok(true)
        );
    }
    assert_eq!(
        g.lock(LockId(99), LbaRange::new(99, 1), Owner(0), 0),
        Err(GateFull)
    );
}

#[test]
fn coordinator_serializes_overlaps_in_order() {
    let mut c = LockCoordinator::new(2);
    let a = match c.request(LbaRange::new(0, 4), Owner(1)) {
        Request::Broadcast(id) => id,
        r => panic!("{r:?}"),
    };
    assert!(matches!(
        c.request(LbaRange::new(10, 4), Owner(2)),
        Request::Broadcast(_)
    ));
    assert_eq!(c.request(LbaRange::new(3, 2), Owner(3)), Request::Queued);
    // Does not overlap an active lock, but overlaps the queued one: waits behind it.
    assert_eq!(c.request(LbaRange::new(4, 1), Owner(4)), Request::Queued);
    assert_eq!(c.ack(a), None);
    assert_eq!(c.ack(a), Some(Owner(1)));
    assert_eq!(c.ack(a), None, "extra acks are ignored");
    assert_eq!(c.ack(LockId(999)), None);
    let mut started = Vec::new();
    c.release(a, |id, r, o| started.push((id, r, o)));
    assert_eq!(started.len(), 1);
    assert_eq!(started[0].2, Owner(3));
    let next = started[0].0;
    started.clear();
    c.release(next, |id, r, o| started.push((id, r, o)));
    assert_eq!(
        started.iter().map(|s| s.2).collect::<Vec<_>>(),
        vec![Owner(4)]
    );
    assert_eq!(c.queued(), 0);
}

#[test]
fn coordinator_held_by_and_cancel() {
    let mut c = LockCoordinator::new(2);
    let Request::Broadcast(a) = c.request(LbaRange::new(0, 4), Owner(1)) else {
        panic!("first lock goes at once");
    };
    assert_eq!(c.request(LbaRange::new(2, 1), Owner(2)), Request::Queued);
    assert_eq!(c.held_by(Owner(1)), None, "not acknowledged yet");
    assert_eq!(c.ack(a), None);
    assert_eq!(c.ack(a), Some(Owner(1)));
    assert_eq!(c.held_by(Owner(1)), Some(a));
    // The queued owner goes away: nothing starts for it on release.
    assert_eq!(c.cancel(Owner(2)), None);
    assert_eq!(c.queued(), 0);
    // The holder goes away: its lock is returned for release.
    assert_eq!(c.cancel(Owner(1)), Some(a));
    let mut started = Vec::new();
    c.release(a, |id, _, o| started.push((id, o)));
    assert!(started.is_empty());
    assert_eq!(c.active(), 0);
}

#[test]
fn coordinator_busy_when_the_queue_is_full() {
    let mut c = LockCoordinator::new(1);
    assert!(matches!(
        c.request(LbaRange::new(0, 1), Owner(0)),
        Request::Broadcast(_)
    ));
    for i in 0..coordinator::QUEUE_CAPACITY as u64 {
        assert_eq!(c.request(LbaRange::new(0, 1), Owner(i)), Request::Queued);
    }
    assert_eq!(c.request(LbaRange::new(0, 1), Owner(7)), Request::Busy);
}

// ------------------------------------------------------------------------------ simulation

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

enum ToReactor {
    Lock(LockId, LbaRange, Owner),
    Unlock(LockId),
}

enum ToCoordinator {
    Request(LbaRange, Owner),
    Ack(LockId),
    Release(LockId),
}

#[derive(Clone, Copy)]
struct Write {
    range: LbaRange,
    value: u32,
    owner: Option<Owner>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum CawState {
    Requested,
    Granted,
    Writing,
    Done,
}

struct Caw {
    reactor: usize,
    range: LbaRange,
    state: CawState,
    lock: Option<LockId>,
    expected: Vec<u32>,
}

struct Reactor {
    gate: RangeGate,
    inflight: Vec<Write>,
    parked: Vec<Write>,
    inbox: VecDeque<ToReactor>,
}

struct Sim {
    rng: Rng,
    disk: Vec<u32>,
    reactors: Vec<Reactor>,
    coord: LockCoordinator,
    coord_inbox: VecDeque<ToCoordinator>,
    caws: Vec<Caw>,
    /// Skip counting in-flight writes when a lock arrives (the bug the checker must catch).
    broken: bool,
    violations: usize,
    miscompares: usize,
    busy: usize,
}

const BLOCKS: u64 = 32;

impl Sim {
    fn new(seed: u64, reactors: usize, broken: bool) -> Sim {
        Sim {
            rng: Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1),
            disk: vec![0; BLOCKS as usize],
            reactors: (0..reactors)
                .map(|_| Reactor {
                    gate: RangeGate::new(),
                    inflight: Vec::new(),
                    parked: Vec::new(),
                    inbox: VecDeque::new(),
                })
                .collect(),
            coord: LockCoordinator::new(reactors as u32),
            coord_inbox: VecDeque::new(),
            caws: Vec::new(),
            broken,
            violations: 0,
            miscompares: 0,
            busy: 0,
        }
    }

    fn range(&mut self) -> LbaRange {
        let lba = self.rng.below(BLOCKS - 4);
        LbaRange::new(lba, 1 + self.rng.below(4))
    }

    fn submit(&mut self, r: usize, w: Write) {
        match self.reactors[r].gate.admit(w.range, w.owner) {
            Admit::Go => self.reactors[r].inflight.push(w),
            Admit::Wait(_) => self.reactors[r].parked.push(w),
        }
    }

    fn complete(&mut self, r: usize, i: usize) {
        let w = self.reactors[r].inflight.swap_remove(i);
        // Atomicity: a write that is not the owner's must never land in a range whose
        // compare-and-write has read (granted) and not yet written.
        for c in &self.caws {
            if matches!(c.state, CawState::Granted | CawState::Writing)
                && c.range.overlaps(w.range)
                && w.owner != Some(Owner(c.lock.map_or(0, |l| l.0) + 1_000_000))
            {
                self.violations += 1;
            }
        }
        for b in w.range.lba..w.range.end() {
            self.disk[b as usize] = w.value;
        }
        let coord = &mut self.coord_inbox;
        self.reactors[r]
            .gate
            .completed(w.range, |id| coord.push_back(ToCoordinator::Ack(id)));
        if let Some(o) = w.owner {
            let c = self
                .caws
                .iter_mut()
                .find(|c| c.lock.map(|l| l.0 + 1_000_000) == Some(o.0))
                .expect("owner");
            c.state = CawState::Done;
            self.coord_inbox
                .push_back(ToCoordinator::Release(c.lock.expect("lock")));
        }
    }

    fn owner_of(id: LockId) -> Owner {
        Owner(id.0 + 1_000_000)
    }

    fn deliver_reactor(&mut self, r: usize) {
        let Some(m) = self.reactors[r].inbox.pop_front() else {
            return;
        };
        match m {
            ToReactor::Lock(id, range, owner) => {
                let n = if self.broken {
                    0
                } else {
                    self.reactors[r]
                        .inflight
                        .iter()
                        .filter(|w| w.range.overlaps(range))
                        .count() as u32
                };
                if self.reactors[r]
                    .gate
                    .lock(id, range, owner, n)
                    .expect("room")
                {
                    self.coord_inbox.push_back(ToCoordinator::Ack(id));
                }
            }
            ToReactor::Unlock(id) => {
                self.reactors[r].gate.unlock(id);
                let parked = std::mem::take(&mut self.reactors[r].parked);
                for w in parked {
                    self.submit(r, w);
                }
            }
        }
    }

    fn broadcast_lock(&mut self, id: LockId, range: LbaRange) {
        for re in &mut self.reactors {
            re.inbox
                .push_back(ToReactor::Lock(id, range, Self::owner_of(id)));
        }
    }

    fn deliver_coordinator(&mut self) {
        let Some(m) = self.coord_inbox.pop_front() else {
            return;
        };
        match m {
            ToCoordinator::Request(range, tag) => {
                // The simulation names owners after their lock ids; bind the request now.
                match self.coord.request(range, tag) {
                    Request::Broadcast(id) => self.bind(tag, id, range),
                    Request::Queued => {}
                    Request::Busy => {
                        // Refused as busy: the host would retry.
                        self.busy += 1;
                        self.caws[tag.0 as usize].state = CawState::Done;
                    }
                }
            }
            ToCoordinator::Ack(id) => {
                if self.coord.ack(id).is_some() {
                    let c = self
                        .caws
                        .iter_mut()
                        .find(|c| c.lock == Some(id))
                        .expect("granted caw");
                    c.state = CawState::Granted;
                    // Held: nothing else overlapping may be in flight anywhere.
                    let range = c.range;
                    self.violations += self
                        .reactors
                        .iter()
                        .flat_map(|r| &r.inflight)
                        .filter(|w| w.range.overlaps(range))
                        .count();
                    // Read and compare now (the read is atomic in the simulation).
                    let read: Vec<u32> = (c.range.lba..c.range.end())
                        .map(|b| self.disk[b as usize])
                        .collect();
                    if read != c.expected {
                        self.miscompares += 1;
                        c.state = CawState::Done;
                        self.coord_inbox.push_back(ToCoordinator::Release(id));
                    }
                }
            }
            ToCoordinator::Release(id) => {
                for re in &mut self.reactors {
                    re.inbox.push_back(ToReactor::Unlock(id));
                }
                let mut started = Vec::new();
                self.coord
                    .release(id, |nid, r, tag| started.push((nid, r, tag)));
                for (nid, r, tag) in started {
                    self.bind(tag, nid, r);
                }
            }
        }
    }

    /// Request tags are indexes into `caws`; once a lock id exists the caw is bound to it.
    fn bind(&mut self, tag: Owner, id: LockId, range: LbaRange) {
        let c = &mut self.caws[tag.0 as usize];
        c.lock = Some(id);
        self.broadcast_lock(id, range);
    }

    fn start_caw(&mut self) {
        let range = self.range();
        let r = self.rng.below(self.reactors.len() as u64) as usize;
        // Mostly expect what is there now (so the write happens), sometimes not.
        let mut expected: Vec<u32> = (range.lba..range.end())
            .map(|b| self.disk[b as usize])
            .collect();
        if self.rng.below(4) == 0 {
            expected[0] ^= 1;
        }
        let tag = Owner(self.caws.len() as u64);
        self.caws.push(Caw {
            reactor: r,
            range,
            state: CawState::Requested,
            lock: None,
            expected,
        });
        self.coord_inbox
            .push_back(ToCoordinator::Request(range, tag));
    }

    fn step(&mut self, new_work: bool) -> bool {
        let nr = self.reactors.len();
        let mut choices = Vec::new();
        if new_work {
            choices.push(0u8);
            choices.push(0);
            choices.push(5);
        }
        if self.reactors.iter().any(|r| !r.inflight.is_empty()) {
            choices.push(1);
            choices.push(1);
        }
        if self.reactors.iter().any(|r| !r.inbox.is_empty()) {
            choices.push(2);
        }
        if !self.coord_inbox.is_empty() {
            choices.push(3);
        }
        if self.caws.iter().any(|c| c.state == CawState::Granted) {
            choices.push(4);
        }
        if choices.is_empty() {
            return false;
        }
        match choices[self.rng.below(choices.len() as u64) as usize] {
            0 => {
                let r = self.rng.below(nr as u64) as usize;
                let range = self.range();
                let value = self.rng.next() as u32 | 1;
                self.submit(
                    r,
                    Write {
                        range,
                        value,
                        owner: None,
                    },
                );
            }
            1 => {
                let busy: Vec<usize> = (0..nr)
                    .filter(|&r| !self.reactors[r].inflight.is_empty())
                    .collect();
                let r = busy[self.rng.below(busy.len() as u64) as usize];
                let i = self.rng.below(self.reactors[r].inflight.len() as u64) as usize;
                self.complete(r, i);
            }
            2 => {
                let busy: Vec<usize> = (0..nr)
                    .filter(|&r| !self.reactors[r].inbox.is_empty())
                    .collect();
                let r = busy[self.rng.below(busy.len() as u64) as usize];
                self.deliver_reactor(r);
            }
            3 => self.deliver_coordinator(),
            4 => {
                // A granted compare-and-write submits its write on its own reactor.
                let i = self
                    .caws
                    .iter()
                    .position(|c| c.state == CawState::Granted)
                    .expect("granted");
                let c = &mut self.caws[i];
                c.state = CawState::Writing;
                let w = Write {
                    range: c.range,
                    value: 0xCA00_0000 | i as u32,
                    owner: Some(Self::owner_of(c.lock.expect("lock"))),
                };
                let r = c.reactor;
                // It passes its own lock, but waits like any write while another lock on
                // its reactor is still draining.
                if let Admit::Wait(id) = self.reactors[r].gate.admit(w.range, w.owner) {
                    assert_ne!(Some(id), c.lock, "the owner's write waited on its own lock");
                }
                self.submit(r, w);
            }
            _ => self.start_caw(),
        }
        true
    }

    fn run(&mut self, steps: usize) {
        for _ in 0..steps {
            self.step(true);
        }
        // Drain: no new work; everything must finish.
        let mut guard = 0;
        while self.step(false) {
            guard += 1;
            assert!(guard < 1_000_000, "no progress");
        }
    }
}

#[test]
fn interleaved_writes_never_land_inside_a_compare_and_write() {
    let mut caws = 0;
    let mut miscompares = 0;
    let mut busy = 0;
    for seed in 0..300 {
        let mut s = Sim::new(seed, 1 + (seed % 4) as usize, false);
        s.run(400);
        assert_eq!(s.violations, 0, "seed {seed}");
        // Everything finished: no parked write, no lock left, every caw done.
        for (i, r) in s.reactors.iter().enumerate() {
            assert!(r.parked.is_empty(), "seed {seed}: parked writes on {i}");
            assert!(r.gate.is_idle(), "seed {seed}: lock left on {i}");
        }
        assert!(
            s.caws.iter().all(|c| c.state == CawState::Done),
            "seed {seed}"
        );
        assert_eq!(s.coord.active() + s.coord.queued(), 0);
        // A successful compare-and-write leaves its value unless a later write replaced it.
        caws += s.caws.len();
        miscompares += s.miscompares;
        busy += s.busy;
    }
    assert!(busy < caws / 10, "mostly granted ({busy} busy of {caws})");
    assert!(
        caws > 1000,
        "the simulation exercised compare-and-writes ({caws})"
    );
    assert!(miscompares > 0 && miscompares < caws, "both outcomes seen");
}

#[test]
fn the_checker_catches_a_gate_that_ignores_inflight_writes() {
    // Proof that the simulation can fail: with in-flight writes not waited for, some write
    // lands between a compare-and-write's read and its write.
    let caught = (0..300).any(|seed| {
        let mut s = Sim::new(seed, 2 + (seed % 3) as usize, true);
        s.run(400);
        s.violations > 0
    });
    assert!(caught);
}

/// A reactor that starts serving the bdev while locks are out (it acknowledged them when it
/// had no gate) builds its new gate from the coordinator's locks: overlapping writes wait
/// there from the start, and the lock message that may still reach it finds the lock
/// installed.
#[test]
fn a_new_gate_starts_with_the_locks_out() {
    let mut c = LockCoordinator::new(2);
    let Request::Broadcast(held) = c.request(LbaRange::new(10, 2), Owner(1)) else {
        panic!("granted");
    };
    assert_eq!(c.ack(held), None);
    assert_eq!(c.ack(held), Some(Owner(1)), "held");
    let Request::Broadcast(acquiring) = c.request(LbaRange::new(40, 1), Owner(2)) else {
        panic!("granted");
    };
    assert_eq!(c.request(LbaRange::new(11, 1), Owner(3)), Request::Queued);
    let locks: Vec<_> = c.locks().collect();
    assert_eq!(
        locks,
        [
            (held, LbaRange::new(10, 2), Owner(1)),
            (acquiring, LbaRange::new(40, 1), Owner(2))
        ],
        "held and acquiring locks, not queued requests"
    );
    let mut g = RangeGate::new();
    for (id, range, owner) in c.locks() {
        assert_eq!(g.lock(id, range, owner, 0), Ok(true));
    }
    assert!(g.has(held) && g.has(acquiring));
    assert_eq!(g.admit(LbaRange::new(11, 1), None), Admit::Wait(held));
    assert_eq!(g.admit(LbaRange::new(40, 1), None), Admit::Wait(acquiring));
    assert_eq!(g.admit(LbaRange::new(11, 1), Some(Owner(1))), Admit::Go);
    assert_eq!(
        g.admit(LbaRange::new(20, 1), None),
        Admit::Go,
        "nothing drains"
    );
    c.release(held, |_, _, _| {});
    g.unlock(held);
    assert!(!g.has(held));
    assert_eq!(g.admit(LbaRange::new(12, 1), None), Admit::Go);
}
