//! A `rtgt serve --fabric sim` daemon on a temporary socket, and a runner for `rtgt` commands.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

pub const NQN: &str = "nqn.2016-06.io.spdk:cnode1";
pub const HOST: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_rtgt")
}

static SEQ: AtomicU32 = AtomicU32::new(0);

/// A temporary directory, removed when dropped.
pub struct TempDir(PathBuf);

impl std::ops::Deref for TempDir {
    type Target = Path;

    fn deref(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A fresh temporary directory for one test.
pub fn temp_dir(tag: &str) -> TempDir {
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    let d = std::env::temp_dir().join(format!("rtgt-cli-{}-{tag}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    TempDir(d)
}

/// A free loopback TCP port (bound and released; good enough for tests).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

pub struct Daemon {
    child: Child,
    pub sock: PathBuf,
    pub dir: TempDir,
    pub tcp_port: Option<u16>,
}

impl Daemon {
    /// Starts `rtgt serve --fabric sim` on a socket in a fresh directory and waits until
    /// `spdk_get_version` answers through `rtgt rpc`.
    pub fn start(tag: &str, extra: &[&str]) -> Daemon {
        Self::start_with(tag, extra, false)
    }

    /// Like [`Daemon::start`], also serving TCP on a free loopback port.
    pub fn start_tcp(tag: &str) -> Daemon {
        Self::start_with(tag, &[], true)
    }

    fn start_with(tag: &str, extra: &[&str], tcp: bool) -> Daemon {
        let dir = temp_dir(tag);
        let sock = dir.join("rtgt.sock");
        let tcp_port = tcp.then(free_port);
        let mut cmd = Command::new(bin());
        cmd.args(["serve", "--fabric", "sim", "--log-level", "warning", "-r"])
            .arg(&sock)
            .args(extra);
        if let Some(p) = tcp_port {
            cmd.arg("--rpc-listen").arg(format!("127.0.0.1:{p}"));
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rtgt serve");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if sock.exists() && rtgt_ok(&["rpc", "-s", sock.to_str().unwrap(), "spdk_get_version"])
            {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
                panic!("rtgt serve exited with {status}:\n{err}");
            }
            assert!(Instant::now() < deadline, "rtgt serve did not come up");
            std::thread::sleep(Duration::from_millis(50));
        }
        Daemon {
            child,
            sock,
            dir,
            tcp_port,
        }
    }

    pub fn sock_str(&self) -> &str {
        self.sock.to_str().expect("utf-8 path")
    }

    /// `rtgt rpc -s SOCK <args>`.
    pub fn rpc(&self, args: &[&str]) -> Run {
        let mut all = vec!["rpc", "-s", self.sock_str()];
        all.extend_from_slice(args);
        run(&all, None)
    }

    /// `rtgt rpc -s SOCK <args>`, which must succeed; its stdout as JSON.
    pub fn ok(&self, args: &[&str]) -> serde_json::Value {
        let r = self.rpc(args);
        assert_eq!(r.code, 0, "rtgt rpc {args:?} failed: {}", r.stderr);
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", r.stdout))
    }

    /// `rtgt shell -s SOCK` with `input` on stdin.
    pub fn shell(&self, input: &str) -> Run {
        run(&["shell", "-s", self.sock_str()], Some(input))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        // A clean shutdown (socket and lock file removed), asked for over RPC.
        let _ = self.rpc(&["spdk_kill_instance", "SIGTERM"]);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The outcome of one `rtgt` run.
#[derive(Debug)]
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `rtgt <args>`, with `input` on stdin (else stdin is empty).
pub fn run(args: &[&str], input: Option<&str>) -> Run {
    let mut child = Command::new(bin())
        .args(args)
        .env("HOME", std::env::temp_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run rtgt");
    let mut stdin = child.stdin.take().expect("stdin");
    if let Some(text) = input {
        stdin.write_all(text.as_bytes()).expect("write stdin");
    }
    drop(stdin);
    let Output {
        status,
        stdout,
        stderr,
    } = child.wait_with_output().expect("wait rtgt");
    Run {
        code: status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
    }
}

fn rtgt_ok(args: &[&str]) -> bool {
    run(args, None).code == 0
}

/// Serves an in-process target's methods on `sock` from a thread of its own until the sender drops.
pub fn serve_target(
    target: &Arc<target_core::target::Target>,
    sock: &Path,
) -> std::sync::mpsc::Sender<()> {
    let (stop_tx, stop_rx) = std::sync::mpsc::channel::<()>();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<()>();
    let target = Arc::clone(target);
    let sock = sock.to_path_buf();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime");
        rt.block_on(async move {
            let state = rpc::StateHandle::new(rpc::RpcState::Runtime);
            let mut m =
                rpc::Methods::from_arc(Arc::new(rpc::methods::TargetContext::new(target)), state);
            m.register_core(rpc::CoreHooks::new()).expect("core");
            rpc::methods::register(&mut m).expect("methods");
            let h = rpc::serve_unix(m.build(), &sock, rpc::UnixOptions::default())
                .await
                .expect("serve");
            ready_tx.send(()).expect("ready");
            // Wait for the test to finish without blocking the runtime's thread for good.
            while let Err(std::sync::mpsc::TryRecvError::Empty) = stop_rx.try_recv() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            h.shutdown().await;
        });
    });
    ready_rx
        .recv_timeout(Duration::from_secs(20))
        .expect("RPC server up");
    stop_tx
}
