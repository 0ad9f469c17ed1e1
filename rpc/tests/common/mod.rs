//! A small demo method table and raw clients for the server tests.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rpc::{
    CoreHooks, KillSignal, LogControl, LogLevel, MethodTable, Methods, Params, RpcError, RpcResult,
    RpcState, StateHandle, StateMask, params, params::Decode,
};
use serde::Deserialize;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// The demo target: a few counters and a bdev name list.
#[derive(Default)]
pub struct Demo {
    pub counted: AtomicU64,
    pub bdevs: Mutex<Vec<String>>,
    pub init_calls: AtomicUsize,
    pub killed: Mutex<Vec<KillSignal>>,
}

#[derive(Default)]
pub struct TestLog {
    pub level: Mutex<Option<LogLevel>>,
    pub flags: Mutex<Vec<(String, bool)>>,
}

impl LogControl for TestLog {
    fn set_level(&self, level: LogLevel) -> Result<(), String> {
        *self.level.lock() = Some(level);
        Ok(())
    }
    fn level(&self) -> LogLevel {
        self.level.lock().unwrap_or(LogLevel::Notice)
    }
    fn flags(&self) -> Vec<(String, bool)> {
        self.flags.lock().clone()
    }
    fn set_flag(&self, flag: &str, enabled: bool) -> Result<(), String> {
        let mut flags = self.flags.lock();
        match flags.iter_mut().find(|(f, _)| f == flag) {
            Some(f) => {
                f.1 = enabled;
                Ok(())
            }
            None => Err(format!("no flag {flag}")),
        }
    }
}

#[derive(Deserialize)]
struct Echo {
    value: Value,
}

#[derive(Deserialize)]
struct MallocCreate {
    num_blocks: u64,
    block_size: u32,
    name: Option<String>,
    #[allow(dead_code)]
    md_interleave: Option<bool>,
    #[allow(dead_code)]
    dif_is_head_of_md: Option<bool>,
}

#[derive(Deserialize)]
struct CreateTransport {
    trtype: String,
}

#[derive(Deserialize)]
struct Nqn {
    nqn: String,
}

#[derive(Deserialize)]
struct Sleep {
    ms: u64,
}

#[derive(Deserialize)]
struct Big {
    bytes: usize,
}

pub struct Built {
    pub table: MethodTable,
    pub demo: Arc<Demo>,
    pub log: Arc<TestLog>,
}

/// Build the demo table in `initial` state.
pub fn demo_table(initial: RpcState) -> Built {
    let demo = Arc::new(Demo::default());
    let log = Arc::new(TestLog::default());
    log.flags.lock().push(("nvmf".into(), false));
    let state = StateHandle::new(initial);
    let mut m = Methods::from_arc(demo.clone(), state);
    let d = demo.clone();
    let d2 = demo.clone();
    m.register_core(
        CoreHooks::new()
            .on_start_init(move || {
                let d = d.clone();
                async move {
                    d.init_calls.fetch_add(1, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Ok(())
                }
            })
            .log_control(log.clone())
            .on_kill(move |sig| d2.killed.lock().push(sig)),
    )
    .unwrap();
    m.register("demo_echo", StateMask::ANY, |p: Params<'_>, _: &Demo| {
        let e: Echo = params::strict(&p)?;
        Ok(e.value)
    })
    .unwrap()
    .register("demo_count", StateMask::ANY, |p: Params<'_>, d: &Demo| {
        params::no_params(&p, "demo_count requires no parameters")?;
        Ok(d.counted.fetch_add(1, Ordering::SeqCst) + 1)
    })
    .unwrap()
    .register_typed(
        "bdev_malloc_create",
        StateMask::RUNTIME,
        Decode::Bdev,
        |a: MallocCreate, d: &Demo| {
            if a.num_blocks == 0 || !a.block_size.is_multiple_of(512) {
                return Err(RpcError::einval());
            }
            let mut bdevs = d.bdevs.lock();
            let name = a.name.unwrap_or_else(|| format!("Malloc{}", bdevs.len()));
            if bdevs.contains(&name) {
                return Err(RpcError::exists());
            }
            bdevs.push(name.clone());
            Ok(name)
        },
    )
    .unwrap()
    .register_typed(
        "nvmf_create_transport",
        StateMask::RUNTIME,
        Decode::Relaxed,
        |t: CreateTransport, _: &Demo| {
            if t.trtype != "RDMA" {
                return Err(RpcError::invalid_params(format!(
                    "Transport type '{}' not found",
                    t.trtype
                )));
            }
            Ok(true)
        },
    )
    .unwrap()
    .register(
        "nvmf_set_config",
        StateMask::STARTUP,
        |_p: Params<'_>, _: &Demo| Ok(true),
    )
    .unwrap()
    .register_typed_async(
        "nvmf_delete_subsystem",
        StateMask::RUNTIME,
        Decode::Strict,
        |a: Nqn, _d: Arc<Demo>| async move {
            tokio::task::yield_now().await;
            RpcResult::<bool>::Err(RpcError::invalid_params(format!(
                "Subsystem with NQN '{}' not found",
                a.nqn
            )))
        },
    )
    .unwrap()
    .register_async(
        "demo_sleep",
        StateMask::ANY,
        |p: Params<'static>, _d: Arc<Demo>| async move {
            let a: Sleep = params::strict(&p)?;
            tokio::time::sleep(Duration::from_millis(a.ms)).await;
            Ok(a.ms)
        },
    )
    .unwrap()
    .register("demo_big", StateMask::ANY, |p: Params<'_>, _: &Demo| {
        let a: Big = params::strict(&p)?;
        Ok("x".repeat(a.bytes))
    })
    .unwrap()
    .alias_deprecated("construct_malloc_bdev", "bdev_malloc_create")
    .unwrap();
    Built {
        table: m.build(),
        demo,
        log,
    }
}

static DIR_SEQ: AtomicUsize = AtomicUsize::new(0);

/// A fresh private directory for a test's socket.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> Self {
        let p = std::env::temp_dir().join(format!(
            "rtgt-rpc-{}-{}",
            std::process::id(),
            DIR_SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
    pub fn sock(&self) -> PathBuf {
        self.0.join("spdk.sock")
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub const TIMEOUT: Duration = Duration::from_secs(5);

/// A raw client that reads back complete JSON values.
pub struct Client<S> {
    pub stream: S,
    buf: Vec<u8>,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub fn new(stream: S) -> Self {
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).await.unwrap();
        self.stream.flush().await.unwrap();
    }

    /// The next response line exactly as sent (without the trailing newline), or `None` at EOF.
    pub async fn line(&mut self) -> Option<String> {
        self.line_within(TIMEOUT)
            .await
            .expect("timed out waiting for a response")
    }

    /// Like `line` but `Err(())` on timeout.
    pub async fn line_within(&mut self, t: Duration) -> Result<Option<String>, ()> {
        let deadline = tokio::time::Instant::now() + t;
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                return Ok(Some(String::from_utf8(line[..i].to_vec()).unwrap()));
            }
            // On the heap: a large array here would sit in every test's future, and debug
            // builds keep one copy per call site on the stack.
            let mut chunk = vec![0u8; 65536];
            let n = match tokio::time::timeout_at(deadline, self.stream.read(&mut chunk)).await {
                Err(_) => return Err(()),
                Ok(Ok(n)) => n,
                Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionReset => 0,
                Ok(Err(e)) => panic!("read failed: {e}"),
            };
            if n == 0 {
                assert!(
                    self.buf.is_empty(),
                    "EOF after a partial response: {:?}",
                    String::from_utf8_lossy(&self.buf)
                );
                return Ok(None);
            }
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    pub async fn value(&mut self) -> Value {
        let line = self.line().await.expect("connection closed");
        serde_json::from_str(&line).unwrap()
    }

    /// Send a request and read one response.
    pub async fn call(&mut self, req: Value) -> Value {
        self.send(req.to_string().as_bytes()).await;
        self.value().await
    }

    /// Read until EOF; returns whatever lines arrived first.
    pub async fn expect_eof(&mut self) {
        match self.line().await {
            None => {}
            Some(l) => panic!("expected EOF, got {l}"),
        }
    }

    /// Assert nothing arrives within `t`.
    pub async fn expect_silence(&mut self, t: Duration) {
        if let Ok(l) = self.line_within(t).await {
            panic!("expected no response, got {l:?}");
        }
    }
}

/// rpc.py's request encoding: `json.dumps(req, indent=2)`.
pub fn pretty(req: &Value) -> String {
    serde_json::to_string_pretty(req).unwrap()
}
