//! The Rust NVMe host in benchmark mode (what `rtgt-bench` drives): commands complete out of
//! order, as they do on an RBD namespace where one read can wait on the OSD while a hundred
//! others come back. The host signals only some of its sends; whatever it signals, its send
//! queue must not fill up while a few commands stay outstanding for long.

use std::time::{Duration, Instant};

use rtgt_tests::nvme_host::*;
use serde_json::json;

const NQN: &str = "nqn.2016-06.io.rtgt:benchmode";

fn read(q: &mut HostQueue, nsid: u32, lba: u64) -> u16 {
    q.submit(
        read_sqe(nsid, lba % 1024 * 8, 8),
        Data::KeyedRead {
            len: 4096,
            invalidate: false,
        },
    )
    .expect("submit")
}

#[test]
fn long_outstanding_commands_do_not_fill_the_send_queue() {
    let e = NvmfEnv::new(1, json!({}));
    e.subsystem(NQN, true, 8192, 512);
    let gate = e.t.gated("slow", 8192, 512);
    assert_eq!(e.t.add_ns(NQN, "slow"), 2);
    let mut o = e.opts(NQN);
    o.io_queues = 1;
    o.io_depth = 32;
    let mut c = e.connect(o).expect("connect");
    let q = &mut c.io[0];
    q.set_bench_mode(true);

    // Half the queue waits on the gated namespace (the slow OSD) ...
    gate.close();
    // Opens the gate however the test ends (the target cannot stop with I/O parked).
    struct Open<'a>(&'a rtgt_tests::gate::Gate);
    impl Drop for Open<'_> {
        fn drop(&mut self) {
            self.0.open();
        }
    }
    let _open = Open(&gate);
    let held = usize::from(q.depth()) / 2 + 1;
    for i in 0..held {
        read(q, 2, i as u64);
    }
    q.flush().expect("flush");
    let deadline = Instant::now() + Duration::from_secs(5);
    while gate.held() < held {
        assert!(Instant::now() < deadline, "{} of {held} held", gate.held());
        q.poll().expect("poll");
        std::thread::sleep(Duration::from_millis(1));
    }

    // ... while many times the send queue's size completes on the other, one at a time.
    let n = 20 * usize::from(q.depth());
    let mut done = 0;
    read(q, 1, 0);
    q.flush().expect("flush");
    let deadline = Instant::now() + Duration::from_secs(20);
    while done < n {
        assert!(Instant::now() < deadline, "{done} of {n} reads completed");
        q.poll().expect("poll");
        while let Some((_, cqe)) = q.pop_done() {
            assert!(cqe.status.is_success(), "{cqe:?}");
            done += 1;
            if done < n {
                read(q, 1, done as u64);
            }
        }
        q.flush()
            .unwrap_or_else(|e| panic!("flush after {done} completions: {e}"));
    }

    // The held ones complete when the gate opens.
    gate.open();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut late = 0;
    while late < held {
        assert!(
            Instant::now() < deadline,
            "{late} of {held} held reads completed"
        );
        q.poll().expect("poll");
        while let Some((_, cqe)) = q.pop_done() {
            assert!(cqe.status.is_success(), "{cqe:?}");
            late += 1;
        }
    }
    assert_eq!(q.outstanding(), 0);
    q.set_bench_mode(false);
}
