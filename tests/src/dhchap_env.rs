//! The DH-HMAC-CHAP test setting shared by the transports' authentication tests: a target
//! driven through JSON-RPC with keyring keys of known secrets, subsystem [`SUB`] admitting only
//! listed hosts, a listener of the transport under test, and a capture of everything the
//! target logs so that a test can prove no secret reached the logs or the RPC output.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rpc::RpcState;
use serde_json::{Value, json};
use target_core::nvme::auth::{DhchapSecret, Digest};

use crate::TARGET_IP;
use crate::rpc_rig::Rig;

/// The subsystem of the authentication tests.
pub const SUB: &str = "nqn.2016-06.io.rtgt:auth";

/// The secrets of the tests: three distinct 32-byte keys (one with the SHA-256 transform).
pub fn secret(n: u8) -> String {
    let bytes: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(7).wrapping_add(n * 31))
        .collect();
    let t = (n == 2).then_some(Digest::Sha256);
    DhchapSecret::from_key(t, &bytes)
        .expect("a key")
        .to_dhhc1()
        .to_string()
}

/// Every string that would reveal a secret: the DHHC-1 text, its base64 part, the key in hex.
pub fn secret_forms() -> Vec<String> {
    let mut out = Vec::new();
    for n in 0..3 {
        let s = secret(n);
        let b64 = s.split(':').nth(2).expect("DHHC-1:xx:b64:").to_string();
        let key = DhchapSecret::parse(&s).expect("a DHHC-1 secret");
        let hex: String = key.key_bytes().iter().map(|b| format!("{b:02x}")).collect();
        out.extend([s, b64, hex]);
    }
    out
}

/// Everything the target logged in this test binary (a global subscriber at DEBUG level, so
/// that the reactors' and the authentication threads' lines are captured too).
pub fn logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let w = Arc::clone(&buf);
        let sub = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || Capture(Arc::clone(&w)))
            .finish();
        tracing::subscriber::set_global_default(sub).expect("one global subscriber");
        buf
    })
    .clone()
}

struct Capture(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Capture {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// What [`logs`] captured so far.
pub fn log_text() -> String {
    String::from_utf8_lossy(&logs().lock()).into_owned()
}

/// Panics if `text` contains any form of a test secret.
pub fn assert_no_secret(what: &str, text: &str) {
    for s in secret_forms() {
        assert!(!text.contains(&s), "{what} contains a secret ({s})");
    }
}

/// A target with a listener of `trtype` (RDMA: on the simulated fabric at
/// [`TARGET_IP`]:4420; TCP: 127.0.0.1 on a free port), subsystem [`SUB`] (only listed hosts)
/// with one namespace, and keyring keys `key0`, `key1`, `key2` holding [`secret`] 0, 1, 2.
pub struct AuthEnv {
    /// The target and its RPC state.
    pub r: Rig,
    /// The listener's address.
    pub to: SocketAddr,
    /// Where the key files are.
    pub dir: std::path::PathBuf,
}

impl AuthEnv {
    /// The setting on `trtype` ("RDMA" or "TCP").
    pub fn new(trtype: &str) -> Self {
        Self::with(trtype, |_| {})
    }

    /// `startup` runs in the STARTUP state (target settings).
    pub fn with(trtype: &str, startup: impl FnOnce(&Rig)) -> Self {
        logs();
        let r = Rig::new(RpcState::Startup);
        startup(&r);
        r.ok("framework_start_init", Value::Null);
        r.tt.transport(trtype, json!({"kas": 10, "min_kato": 1000}));
        r.malloc("m0");
        r.ok(
            "nvmf_create_subsystem",
            json!({"nqn": SUB, "allow_any_host": false}),
        );
        r.ok(
            "nvmf_subsystem_add_ns",
            json!({"nqn": SUB, "namespace": {"bdev_name": "m0"}}),
        );
        let to: SocketAddr = if trtype == "TCP" {
            SocketAddr::from(([127, 0, 0, 1], crate::tcp_host::free_port()))
        } else {
            format!("{TARGET_IP}:4420").parse().expect("an address")
        };
        r.ok(
            "nvmf_subsystem_add_listener",
            json!({"nqn": SUB, "listen_address": {"trtype": trtype, "adrfam": "IPv4",
                   "traddr": to.ip().to_string(), "trsvcid": to.port().to_string()}}),
        );
        let dir = std::env::temp_dir().join(format!(
            "rtgt-auth-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        std::fs::create_dir_all(&dir).expect("key directory");
        for n in 0..3u8 {
            let p = dir.join(format!("key{n}"));
            std::fs::write(&p, format!("{}\n", secret(n))).expect("key file");
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600))
                .expect("key file mode");
            r.ok(
                "keyring_file_add_key",
                json!({"name": format!("key{n}"), "path": p.to_str().expect("utf-8")}),
            );
        }
        Self { r, to, dir }
    }

    /// `nvmf_subsystem_get_qpairs` of [`SUB`].
    pub fn qpairs(&self) -> Vec<Value> {
        self.r
            .ok("nvmf_subsystem_get_qpairs", json!({"nqn": SUB}))
            .as_array()
            .cloned()
            .unwrap_or_default()
    }

    /// No secret in the logs so far nor in what the RPC methods show.
    pub fn assert_no_secret_anywhere(&self) {
        assert_no_secret("the log", &log_text());
        for (m, p) in [
            ("nvmf_get_subsystems", Value::Null),
            ("keyring_get_keys", Value::Null),
            ("nvmf_subsystem_get_qpairs", json!({"nqn": SUB})),
            ("nvmf_subsystem_get_controllers", json!({"nqn": SUB})),
        ] {
            assert_no_secret(m, &self.r.ok(m, p).to_string());
        }
        assert_no_secret("save_config", &self.r.save().to_string());
    }
}

impl Drop for AuthEnv {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
