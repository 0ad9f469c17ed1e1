//! `rtgt top` on a real terminal: tmux runs it in a detached session of a fixed size against an
//! in-process target on the simulated fabric (its JSON-RPC served on a temporary socket), while
//! the test NVMe host connected to it does verified I/O. The test reads the screen with
//! `tmux capture-pane`: the figures appear, move with the load and drop when it stops; the
//! views switch; the RPC server going away shows an error and its return clears it; `q` exits
//! 0 and leaves the terminal as it found it (no alternate screen, canonical mode back).
//!
//! tmux must be installed (scripts/install-deps.sh installs it); the test fails, not skips,
//! without it.

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use rtgt_tests::nvme_host::{HOSTNQN, HostQueue, Mode, NvmfEnv, Workload, write_read_verify};
use serde_json::json;

const NQN: &str = "nqn.2016-06.io.spdk:top1";
/// The malloc bdev [`NvmfEnv::subsystem`] creates for [`NQN`].
const BDEV: &str = "m_top1";
/// An unexported bdev nobody does I/O to.
const IDLE: &str = "Idle0";

/// A tmux server of its own (`-L`), killed when dropped.
struct Tmux {
    server: String,
}

impl Tmux {
    fn cmd(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.server, "-f", "/dev/null"])
            .args(args)
            .output()
            .expect("tmux is installed (scripts/install-deps.sh)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    fn screen(&self) -> String {
        self.cmd(&["capture-pane", "-p", "-t", "top"])
    }

    fn keys(&self, keys: &str) {
        self.cmd(&["send-keys", "-t", "top", keys]);
    }

    /// Waits until the screen satisfies `f` (doing `between` between looks), or fails showing
    /// the last screen.
    fn wait_for(&self, what: &str, mut between: impl FnMut(), f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let s = self.screen();
            if f(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "no {what} on the screen:\n{s}");
            between();
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.server, "kill-server"])
            .output();
    }
}

/// The whitespace-separated cells of the screen row starting with `first`.
fn row<'a>(screen: &'a str, first: &str) -> Option<Vec<&'a str>> {
    screen
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
}

/// The number in column `i` of the row starting with `first` (`None`: no row, or `-`).
fn cell(screen: &str, first: &str, i: usize) -> Option<f64> {
    row(screen, first)?.get(i)?.parse().ok()
}

/// The sample counter on the status line.
fn sample_no(screen: &str) -> u64 {
    let s = screen.split("sample ").nth(1).unwrap_or("");
    s.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Namespace view columns: Bdev Subsystem NSID IOPS Read/s Write/s MiB/s Avg P99 Hosts.
const IOPS: usize = 3;
const MIBS: usize = 6;
const AVG: usize = 7;
const P99: usize = 8;
const HOSTS: usize = 9;

/// A burst of verified 4 KiB writes and reads on the first I/O queue.
fn io_burst(q: &mut HostQueue) {
    let w = Workload {
        nsid: 1,
        bs: 512,
        lba0: 0,
        blocks: 8,
        count: 64,
        qd: 8,
        seed: 3,
    };
    write_read_verify(q, &w, Mode::InCapsule).expect("verified I/O");
}

#[test]
fn top_draws_live_figures_in_tmux_and_quits_cleanly() {
    let env = NvmfEnv::new(2, json!({}));
    env.subsystem(NQN, true, 4096, 512);
    env.t.malloc(IDLE, 1024, 512);
    let mut ctrl = env.connect(env.opts(NQN)).expect("connect");
    let dir = common::temp_dir("top");
    let sock = dir.join("rpc.sock");
    let stop = common::serve_target(&env.t.target, &sock);

    let tmux = Tmux {
        server: format!("rtgt-top-{}", std::process::id()),
    };
    let rc = dir.join("rc");
    // After top exits, the shell prints its status and the terminal mode top left behind.
    let script = format!(
        "{} top -s {} -i 0.5; echo rc=$? > {}; stty -a; sleep 600",
        common::bin(),
        sock.display(),
        rc.display()
    );
    tmux.cmd(&[
        "new-session",
        "-d",
        "-s",
        "top",
        "-x",
        "200",
        "-y",
        "40",
        "sh",
        "-c",
        &script,
    ]);

    // Headers and both bdevs; the first sample has no rates yet, the second has.
    let s = tmux.wait_for("second sample", || {}, |s| sample_no(s) >= 2);
    for h in [
        "IOPS", "MiB/s", "Avg us", "P99 us", "Hosts", BDEV, IDLE, NQN,
    ] {
        assert!(s.contains(h), "no {h} on the screen:\n{s}");
    }
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "top", "#{alternate_on}"])
            .trim(),
        "1"
    );

    // Under load the loaded namespace shows IOPS, MiB/s, latencies and its one host, and
    // sorts above the idle bdev; the figures keep coming (the sample counter moves).
    let q = &mut ctrl.io[0];
    let loaded = |s: &str| {
        [IOPS, MIBS, AVG, P99]
            .iter()
            .all(|&i| cell(s, BDEV, i).is_some_and(|v| v > 0.0))
    };
    let s1 = tmux.wait_for("I/O figures", || io_burst(q), loaded);
    assert_eq!(cell(&s1, BDEV, HOSTS), Some(1.0), "{s1}");
    assert_eq!(cell(&s1, IDLE, IOPS), Some(0.0), "{s1}");
    let pos = |s: &str, name: &str| s.find(&format!("\n{name} ")).expect(name);
    assert!(pos(&s1, BDEV) < pos(&s1, IDLE), "sorted by IOPS:\n{s1}");
    let n1 = sample_no(&s1);
    let s2 = tmux.wait_for(
        "a later sample under load",
        || io_burst(q),
        |s| sample_no(s) >= n1 + 2 && loaded(s),
    );
    assert!(
        cell(&s1, BDEV, IOPS) != cell(&s2, BDEV, IOPS) || s1 != s2,
        "nothing moved:\n{s1}\n{s2}"
    );
    // Without load the rates fall to 0 and the latencies to '-'.
    let s = tmux.wait_for("idle figures", || {}, |s| cell(s, BDEV, IOPS) == Some(0.0));
    assert_eq!(row(&s, BDEV).unwrap()[AVG], "-", "{s}");

    // S moves the sort column left: IOPS, NSID, Subsystem, Bdev (names sort A to Z).
    tmux.keys("S");
    tmux.keys("S");
    tmux.keys("S");
    let s = tmux.wait_for("sort by bdev name", || {}, |s| s.contains("Bdev*"));
    assert!(
        pos(&s, IDLE) < pos(&s, BDEV),
        "Idle0 before m_top1 by name:\n{s}"
    );

    // The subsystem view: the connected host's NQN.
    tmux.keys("2");
    let s = tmux.wait_for(
        "the subsystem view",
        || {},
        |s| s.contains("Connected hosts"),
    );
    assert!(s.contains(HOSTNQN), "{s}");
    assert_eq!(cell(&s, NQN, 2), Some(1.0), "one host:\n{s}");

    // The reactor view: both reactors with a busy percentage, one of them busy under load.
    tmux.keys("3");
    let s = tmux.wait_for(
        "a busy reactor",
        || io_burst(q),
        |s| {
            let busy: Vec<Option<f64>> = (0..2).map(|c| cell(s, &c.to_string(), 2)).collect();
            s.contains("Busy %")
                && busy.iter().all(Option::is_some)
                && busy.iter().any(|b| b.is_some_and(|b| b > 0.0))
        },
    );
    assert!(s.contains("nvmf_tgt_poll_group_000"), "{s}");
    tmux.keys("Tab");
    tmux.wait_for("the namespace view again", || {}, |s| s.contains("NSID"));

    // The RPC server goes away: an error line, the last figures stay, top keeps trying; it
    // comes back and the samples resume.
    drop(stop);
    let s = tmux.wait_for("the error line", || {}, |s| s.contains("error:"));
    assert!(s.contains(BDEV), "the last figures stay:\n{s}");
    let _ = std::fs::remove_file(&sock);
    let stop = common::serve_target(&env.t.target, &sock);
    let n = sample_no(&s);
    tmux.wait_for(
        "samples again",
        || {},
        |s| !s.contains("error:") && sample_no(s) > n,
    );

    // q: exit status 0, the alternate screen left, the terminal back in canonical mode.
    tmux.keys("q");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !rc.exists() {
        assert!(
            Instant::now() < deadline,
            "top did not exit:\n{}",
            tmux.screen()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(std::fs::read_to_string(&rc).unwrap().trim(), "rc=0");
    let s = tmux.screen();
    assert_eq!(
        tmux.cmd(&["display", "-p", "-t", "top", "#{alternate_on}"])
            .trim(),
        "0"
    );
    let modes: Vec<&str> = s.split_whitespace().collect();
    for m in ["icanon", "echo", "icrnl"] {
        assert!(modes.contains(&m), "{m} not restored:\n{s}");
    }
    drop(stop);
    ctrl.shutdown().expect("shutdown");
}

#[test]
fn batch_mode_prints_text_tables() {
    let env = NvmfEnv::new(1, json!({}));
    env.subsystem(NQN, true, 1024, 512);
    let dir = common::temp_dir("top-batch");
    let sock = dir.join("rpc.sock");
    let _stop = common::serve_target(&env.t.target, &sock);
    let s = sock.to_str().unwrap();
    let out = common::run(
        &[
            "top", "-s", s, "-b", "-n", "2", "-i", "0.2", "--sort", "bdev",
        ],
        None,
    );
    assert_eq!(out.code, 0, "{}", out.stderr);
    assert_eq!(out.stdout.matches("Bdev*").count(), 2, "{}", out.stdout);
    assert!(out.stdout.contains("sample 2 at "), "{}", out.stdout);
    let last = out.stdout.rsplit("sample 2").next().unwrap();
    assert_eq!(
        cell(last, BDEV, IOPS),
        Some(0.0),
        "rates from the second sample:\n{last}"
    );

    let bad = common::run(&["top", "-s", s, "-b", "--sort", "nonsense"], None);
    assert_eq!(bad.code, 2);
    assert!(bad.stderr.contains("iops"), "{}", bad.stderr);
    let bad = common::run(&["top", "-s", s, "-b", "-i", "0"], None);
    assert_eq!(bad.code, 2, "{}", bad.stderr);
    let missing = common::run(&["top", "-s", &format!("{s}.nope"), "-b", "-n", "1"], None);
    assert_eq!(missing.code, 1);
    assert!(missing.stdout.contains(".nope"), "{}", missing.stdout);
}
