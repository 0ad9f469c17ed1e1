//! `rtgt serve` as a process for the daemon tests: the binary, a socket path per test, one
//! JSON-RPC call per connection, and a [`Daemon`] that is killed when dropped.
//!
//! The binary is `$RTGT_BIN` if set, else `rtgt` next to the test's `deps/` directory
//! (`cargo test --workspace` builds it; so does `cargo build -p rtgt`).

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The `rtgt` binary under test.
pub fn rtgt_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("RTGT_BIN") {
        return PathBuf::from(p);
    }
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps");
    let bin = dir.join("rtgt");
    assert!(
        bin.exists(),
        "{} does not exist: build it with `cargo build -p rtgt` (cargo test --workspace does) or set RTGT_BIN",
        bin.display()
    );
    bin
}

/// A unique socket path for this test process and `tag`.
pub fn sock_path(tag: &str) -> PathBuf {
    std::env::temp_dir().join(format!("rtgt-daemon-{}-{tag}.sock", std::process::id()))
}

/// An empty scratch directory for this test process and `tag` (emptied if it exists).
pub fn scratch_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rtgt-daemon-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// The lock file that guards `sock`.
pub fn lock_of(sock: &Path) -> PathBuf {
    PathBuf::from(format!("{}.lock", sock.display()))
}

/// One JSON-RPC call on a fresh connection; `Err((code, message))` for an error answer, code
/// 0 when the connection failed or closed without an answer (the daemon died).
pub fn rpc(sock: &Path, method: &str, params: Option<Value>) -> Result<Value, (i64, String)> {
    let mut s = UnixStream::connect(sock).map_err(|e| (0, format!("connect: {e}")))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = json!({"jsonrpc": "2.0", "method": method, "id": 1});
    if let Some(p) = params {
        req["params"] = p;
    }
    s.write_all(req.to_string().as_bytes())
        .map_err(|e| (0, format!("send: {e}")))?;
    let mut line = String::new();
    BufReader::new(s)
        .read_line(&mut line)
        .map_err(|e| (0, format!("receive: {e}")))?;
    if line.is_empty() {
        return Err((0, "closed without an answer".into()));
    }
    let v: Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("bad answer {line:?}: {e}"));
    match v.get("error") {
        Some(e) => Err((
            e["code"].as_i64().unwrap(),
            e["message"].as_str().unwrap().into(),
        )),
        None => Ok(v["result"].clone()),
    }
}

/// [`rpc`] that must succeed.
pub fn ok(sock: &Path, method: &str, params: Value) -> Value {
    let p = (!params.is_null()).then_some(params);
    rpc(sock, method, p.clone()).unwrap_or_else(|e| panic!("{method} {p:?}: {e:?}"))
}

/// rpc.py's save_config: framework_get_subsystems, then framework_get_config per subsystem.
pub fn save_config(sock: &Path) -> Value {
    let subs = ok(sock, "framework_get_subsystems", Value::Null);
    let list: Vec<Value> = subs
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            let name = s["subsystem"].as_str().unwrap();
            json!({"subsystem": name, "config":
                ok(sock, "framework_get_config", json!({"name": name, "with_batches": false}))})
        })
        .collect();
    json!({ "subsystems": list })
}

/// A running `rtgt serve --fabric sim`, killed when dropped.
pub struct Daemon {
    /// The process (stderr piped).
    pub child: Child,
    /// Its RPC socket.
    pub sock: PathBuf,
}

impl Daemon {
    /// Spawns `rtgt serve --fabric sim -r SOCK EXTRA...` without waiting.
    pub fn spawn(sock: &Path, extra: &[&str]) -> Child {
        Self::spawn_env(sock, extra, &[])
    }

    /// [`Daemon::spawn`] with extra environment variables.
    pub fn spawn_env(sock: &Path, extra: &[&str], env: &[(&str, &str)]) -> Child {
        Command::new(rtgt_bin())
            .args(["serve", "--fabric", "sim", "-r"])
            .arg(sock)
            .args(extra)
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn rtgt serve")
    }

    /// Starts a daemon and waits until it answers.
    pub fn start(sock: &Path, extra: &[&str]) -> Self {
        Self::start_env(sock, extra, &[])
    }

    /// [`Daemon::start`] with extra environment variables.
    pub fn start_env(sock: &Path, extra: &[&str], env: &[(&str, &str)]) -> Self {
        let mut child = Self::spawn_env(sock, extra, env);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if sock.exists() && rpc(sock, "rpc_get_methods", None).is_ok() {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                let mut err = String::new();
                let _ = child.stderr.take().map(|mut e| e.read_to_string(&mut err));
                panic!("rtgt serve exited with {status} before answering:\n{err}");
            }
            assert!(Instant::now() < deadline, "rtgt serve did not come up");
            std::thread::sleep(Duration::from_millis(20));
        }
        Self {
            child,
            sock: sock.to_path_buf(),
        }
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends it `kill -SIG`.
    pub fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .expect("kill");
        assert!(st.success());
    }

    /// Waits for the process to exit; returns its status and stderr.
    pub fn wait(mut self, limit: Duration) -> (ExitStatus, String) {
        let deadline = Instant::now() + limit;
        let status = loop {
            if let Some(s) = self.child.try_wait().unwrap() {
                break s;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("rtgt serve did not exit within {limit:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let mut err = String::new();
        let _ = self
            .child
            .stderr
            .take()
            .map(|mut e| e.read_to_string(&mut err));
        (status, err)
    }

    /// SIGTERM, then [`Daemon::wait`] up to 20 s.
    pub fn stop(self) -> (ExitStatus, String) {
        self.signal("TERM");
        self.wait(Duration::from_secs(20))
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
