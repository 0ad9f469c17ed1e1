//! The RBD bdev when its cluster goes away, against a real cluster of this test binary's own:
//! the OSD stopped while I/O is in flight, then the whole cluster (monitor and OSD). I/Os must
//! fail within the OSD operation timeout (never hang), another bdev on the same thread keeps
//! serving, and I/O resumes with the data intact once the cluster is back.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use target_core::bdev::{BdevRegistry, IoChannel, IoStatus, NullBdev, NullParams};

const OSD_OP_TIMEOUT: Duration = Duration::from_secs(3);
/// Scheduling slack on a loaded two-core machine.
const SLACK: Duration = Duration::from_secs(4);
const QD: usize = 8;

/// Keeps `QD` reads and writes in flight on `ch` until `until` returns true, and returns the
/// statuses of I/Os that completed, with the longest time one took. Also checks that `other`
/// (a null bdev on the same thread) answers at once throughout.
/// When each tag was submitted (I/Os outlive one call of [`load`]), and the next tag.
struct Clock {
    started: Vec<Option<Instant>>,
    next: u64,
}

fn load(
    clock: &mut Clock,
    ch: &mut IoChannel,
    other: &mut IoChannel,
    mut until: impl FnMut(&BTreeMap<String, usize>) -> bool,
) -> (BTreeMap<String, usize>, Duration) {
    let mut statuses: BTreeMap<String, usize> = BTreeMap::new();
    let mut longest = Duration::ZERO;
    let Clock { started, next } = clock;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        while ch.outstanding() < QD {
            let tag = *next % 1024;
            let off = 64 + (*next % 512);
            let mut io = if *next % 2 == 0 {
                read_io(off, 1, &[4096])
            } else {
                write_io(off, 1, bufs(&[4096]), false)
            };
            io.tag = tag;
            started[tag as usize] = Some(Instant::now());
            ch.submit(Box::new(io)).unwrap();
            *next += 1;
        }
        ch.poll(&mut |io| {
            let t = started[io.tag as usize].take().expect("started").elapsed();
            longest = longest.max(t);
            let key = match io.status {
                IoStatus::Success => "ok".to_string(),
                IoStatus::Error(e) => format!("errno {e}"),
                s => format!("{s:?}"),
            };
            if t > Duration::from_secs(5) {
                eprintln!("slow {:?} {:?} {:.1} s", io.op, io.status, t.as_secs_f64());
            }
            *statuses.entry(key).or_default() += 1;
        });
        let t = Instant::now();
        let n = run_within(other, read_io(0, 1, &[4096]), Duration::from_secs(1));
        assert_eq!(n.status, IoStatus::Success);
        assert!(
            t.elapsed() < Duration::from_millis(200),
            "the other bdev stalled"
        );
        if until(&statuses) {
            return (statuses, longest);
        }
        assert!(Instant::now() < deadline, "load never ended: {statuses:?}");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Waits until every I/O in flight on `ch` has completed; returns their statuses.
fn drain(clock: &mut Clock, ch: &mut IoChannel, limit: Duration) -> Vec<IoStatus> {
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    while ch.outstanding() > 0 {
        ch.poll(&mut |io| {
            clock.started[io.tag as usize] = None;
            out.push(io.status)
        });
        assert!(
            Instant::now() < deadline,
            "{} I/Os still outstanding after {limit:?}: the channel hangs",
            ch.outstanding()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    out
}

fn errors(s: &BTreeMap<String, usize>) -> usize {
    s.iter()
        .filter(|(k, _)| k.starts_with("errno"))
        .map(|(_, v)| v)
        .sum()
}

#[test]
fn io_fails_within_the_timeout_while_the_cluster_is_away_and_resumes_after() {
    let c = cluster("faults");
    c.create_image("f", 16);
    let m = module_with_osd_timeout(c, "c", OSD_OP_TIMEOUT);
    let bdevs = BdevRegistry::new();
    m.create_bdev(&bdevs, create_params("f", "f", "c", 4096))
        .unwrap();
    bdevs
        .register(
            NullBdev::create(NullParams {
                name: "other".into(),
                num_blocks: 1024,
                block_size: 4096,
                physical_block_size: 0,
                uuid: None,
            })
            .unwrap(),
        )
        .unwrap();
    let mut ch = channel(&bdevs, "f");
    let mut other = channel(&bdevs, "other");
    let kept = write_pattern(&mut ch, 4096, 0, 8, 42);
    let clock = &mut Clock {
        started: vec![None; 1024],
        next: 0,
    };

    for (what, stop, start) in [
        ("the OSD", &["osd-stop"][..], &["osd-start"][..]),
        (
            "the whole cluster",
            &["osd-stop", "mon-stop"][..],
            &["mon-start", "osd-start"][..],
        ),
    ] {
        // Healthy first: I/O flows.
        let (s, _) = load(clock, &mut ch, &mut other, |s| {
            s.get("ok").copied().unwrap_or(0) >= 50
        });
        assert_eq!(errors(&s), 0, "errors before stopping {what}: {s:?}");

        // Stop it while I/O is in flight.
        let stopper = std::thread::spawn(move || {
            for cmd in stop {
                c.ctl(cmd);
            }
        });
        let (s, _) = load(clock, &mut ch, &mut other, |_| stopper.is_finished());
        eprintln!("{what} stopping: {s:?}");
        // From now on nothing can succeed: every I/O must fail, and within the timeout.
        let stopped_at = Instant::now();
        let (s, longest) = load(clock, &mut ch, &mut other, |s| errors(s) >= 2 * QD);
        eprintln!(
            "{what} away: {s:?}, longest I/O {:.1} s, {:.1} s to {} failures",
            longest.as_secs_f64(),
            stopped_at.elapsed().as_secs_f64(),
            2 * QD
        );
        assert_eq!(s.get("ok"), None, "I/O succeeded with {what} away: {s:?}");
        assert!(
            longest <= OSD_OP_TIMEOUT + SLACK,
            "an I/O took {longest:?} to fail (OSD timeout {OSD_OP_TIMEOUT:?})"
        );
        assert!(
            s.contains_key(&format!("errno {}", libc::ETIMEDOUT)),
            "expected ETIMEDOUT failures: {s:?}"
        );
        let rest = drain(clock, &mut ch, OSD_OP_TIMEOUT + SLACK);
        assert!(rest.iter().all(|st| *st != IoStatus::Success), "{rest:?}");

        // Bring it back: I/O resumes, and the data written before is intact.
        for cmd in start {
            c.ctl(cmd);
        }
        let back = Instant::now();
        let (s, _) = load(clock, &mut ch, &mut other, |s| {
            s.get("ok").copied().unwrap_or(0) >= 50
        });
        eprintln!(
            "{what} back: {s:?} ({:.1} s to 50 successes)",
            back.elapsed().as_secs_f64()
        );
        drain(clock, &mut ch, OSD_OP_TIMEOUT + SLACK);
        assert_eq!(
            read_bytes(&mut ch, 4096, 0, 8),
            kept,
            "data lost across the outage"
        );
    }
}
