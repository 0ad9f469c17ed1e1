//! NVMe in-band authentication (DH-HMAC-CHAP) on the sim fabric: keys from the keyring through
//! `nvmf_subsystem_add_host` / `nvmf_subsystem_set_keys`, the offer from `nvmf_set_config`, and
//! the test host's DH-HMAC-CHAP side against the target's, on the admin queue and every I/O
//! queue. Every test also checks that no secret reached the logs or the RPC output.

use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use rpc::RpcState;
use rpc::methods::load;
use rtgt_tests::HOST_IP;
use rtgt_tests::dhchap_env::{AuthEnv as Env, SUB, log_text, secret};
use rtgt_tests::nvme_host::*;
use rtgt_tests::rpc_rig::{Rig, assert_code, saved_section};
use serde_json::json;
use target_core::nvme::auth::{DhGroup, Digest, FailureReason};
use target_core::nvme::fabrics::build;
use target_core::nvme::spec::{CNTLID_DYNAMIC, admin_opc, prop};
use target_core::nvme::{Sqe, Status};

const AUTH_REQUIRED: Status = target_core::nvme::auth::AUTH_REQUIRED;

/// What the NVMe/RDMA host does in the shared setting.
trait RdmaAuth {
    fn opts(&self, key: Option<u8>, ctrl_key: Option<u8>) -> ConnectOpts;
    fn connect(&self, o: ConnectOpts) -> Result<HostCtrl, HostError>;
    /// A bare admin queue with its Connect done; returns it and the Connect's DW0.
    fn admin_queue(&self) -> (HostQueue, u32) {
        self.admin_queue_kato(0)
    }
    /// [`RdmaAuth::admin_queue`] with a keep-alive timeout.
    fn admin_queue_kato(&self, kato_ms: u32) -> (HostQueue, u32);
}

impl RdmaAuth for Env {
    fn opts(&self, key: Option<u8>, ctrl_key: Option<u8>) -> ConnectOpts {
        let mut o = ConnectOpts::new(SUB, HOSTNQN);
        o.src = Some(HOST_IP.parse().unwrap());
        o.dhchap = key.map(|k| DhchapOpts::new(&secret(k), ctrl_key.map(secret).as_deref()));
        o
    }

    fn connect(&self, o: ConnectOpts) -> Result<HostCtrl, HostError> {
        HostCtrl::connect(&self.r.tt.fabric, self.to, o)
    }

    fn admin_queue_kato(&self, kato_ms: u32) -> (HostQueue, u32) {
        let mut q = HostQueue::connect(
            &self.r.tt.fabric,
            Some(SocketAddr::new(HOST_IP.parse().unwrap(), 0)),
            self.to,
            QueueOpts {
                qid: 0,
                depth: 32,
                max_io: 128 * 1024,
                max_in_capsule: 8192,
                cntlid: 0,
            },
            &CmOverride::default(),
        )
        .unwrap();
        let c = fabrics_connect(
            &mut q,
            &self.opts(None, None),
            CNTLID_DYNAMIC,
            kato_ms,
            false,
        )
        .unwrap()
        .ok()
        .unwrap();
        (q, c.cqe.dw0)
    }
}

fn io_works(c: &mut HostCtrl) {
    for (i, q) in c.io.iter_mut().enumerate() {
        let w = Workload {
            nsid: 1,
            bs: 512,
            lba0: 64 * i as u64,
            blocks: 8,
            count: 8,
            qd: 4,
            seed: 7 + i as u32,
        };
        write_read_verify(q, &w, Mode::Keyed).expect("I/O on an authenticated queue");
    }
}

fn status(c: Result<Completion, HostError>) -> Status {
    c.expect("a completion").cqe.status
}

#[test]
fn the_right_key_authenticates_every_queue_uni_and_bidirectionally() {
    let e = Env::new("RDMA");
    e.r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0"}),
    );
    // The Linux host's offer: the strongest of each (SHA-512, ffdhe8192), with the DH steps on
    // the authentication threads.
    let t0 = Instant::now();
    let mut c = e.connect(e.opts(Some(0), None)).expect("authenticated");
    let took = t0.elapsed();
    assert_eq!(c.io.len(), 2);
    io_works(&mut c);
    let qp = e.qpairs();
    assert_eq!(qp.len(), 3, "{qp:?}");
    for q in &qp {
        assert_eq!(q["state"], "active", "{q}");
        assert_eq!(q["auth"]["state"], "completed", "{q}");
        assert_eq!(q["auth"]["digest"], "sha512", "{q}");
        assert_eq!(q["auth"]["dhgroup"], "ffdhe8192", "{q}");
    }
    eprintln!("three queues authenticated with SHA-512/ffdhe8192 in {took:?}");
    drop(c);

    // Bidirectional: the controller proves it knows key2.
    e.r.ok(
        "nvmf_subsystem_set_keys",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0", "dhchap_ctrlr_key": "key2"}),
    );
    let mut o = e.opts(Some(0), Some(2));
    o.dhchap = o
        .dhchap
        .map(|d| d.offer(&[Digest::Sha256], &[DhGroup::Ffdhe2048]));
    let mut c = e.connect(o).expect("bidirectional authentication");
    io_works(&mut c);
    for q in e.qpairs() {
        assert_eq!(q["auth"]["digest"], "sha256", "{q}");
        assert_eq!(q["auth"]["dhgroup"], "ffdhe2048", "{q}");
    }
    drop(c);

    // The host expects another controller key: it refuses the controller (AUTH_Failure2).
    let err = e.connect(e.opts(Some(0), Some(1))).err().expect("refused");
    assert_eq!(refused_reason(&err), Some(FailureReason::Failed), "{err:?}");
    assert!(
        log_text().contains("AUTH_Failure2"),
        "the target logs the host's refusal"
    );
    e.assert_no_secret_anywhere();
}

#[test]
fn a_wrong_key_is_refused_with_the_failure_delivered_then_the_queue_closes() {
    let e = Env::new("RDMA");
    e.r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0"}),
    );
    for group in [DhGroup::Null, DhGroup::Ffdhe3072] {
        let (mut q, dw0) = e.admin_queue();
        assert_ne!(dw0 & target_core::nvme::auth::CONNECT_AUTHREQ_ATR, 0, "ATR");
        let o = DhchapOpts::new(&secret(1), None).offer(&[Digest::Sha384], &[group]);
        let t0 = Instant::now();
        let err = authenticate(&mut q, SUB, HOSTNQN, &o, 1).expect_err("wrong key");
        // The AUTH_Failure1 arrived (its reason is what the host reports) ...
        assert_eq!(
            refused_reason(&err),
            Some(FailureReason::Failed),
            "{group:?}: {err:?}"
        );
        // ... and then the target closed the queue, without waiting for a timeout.
        assert!(
            q.wait_disconnected(Duration::from_secs(5)),
            "{group:?}: the queue closes after the failure"
        );
        eprintln!("{group:?}: refused and closed in {:?}", t0.elapsed());
    }
    let log = log_text();
    assert!(
        log.lines()
            .any(|l| l.contains("authentication failed") && l.contains(HOSTNQN)),
        "a failure is logged with the host NQN"
    );
    // No key: the host cannot answer ATR (the Linux host gives up with EKEYREJECTED).
    let err = e.connect(e.opts(None, None)).err().expect("refused");
    assert!(matches!(err, HostError::NoKey), "{err:?}");
    // A host without a key on the subsystem is not asked to authenticate.
    e.r.ok(
        "nvmf_subsystem_set_keys",
        json!({"nqn": SUB, "host": HOSTNQN}),
    );
    let (_q, dw0) = e.admin_queue();
    assert_eq!(dw0 & target_core::nvme::auth::CONNECT_AUTHREQ_ATR, 0);
    e.assert_no_secret_anywhere();
}

#[test]
fn commands_before_authentication_get_authentication_required() {
    let e = Env::new("RDMA");
    e.r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0"}),
    );
    let (mut q, _) = e.admin_queue();
    // Property Get of CAP is allowed; everything else is not.
    assert_eq!(
        status(q.cmd(build::property_get(0, prop::CAP, true), Data::None)),
        Status::SUCCESS
    );
    assert_eq!(
        status(q.cmd(build::property_get(0, prop::CSTS, false), Data::None)),
        AUTH_REQUIRED
    );
    assert_eq!(
        status(q.cmd(build::property_set(0, prop::CC, 0x0046_0001), Data::None)),
        AUTH_REQUIRED
    );
    let mut id = Sqe::new(admin_opc::IDENTIFY, 0);
    id.set_cdw(10, 1);
    assert_eq!(
        status(q.cmd(
            id,
            Data::KeyedRead {
                len: 4096,
                invalidate: false
            }
        )),
        AUTH_REQUIRED
    );
    assert_eq!(
        status(q.cmd(Sqe::new(admin_opc::KEEP_ALIVE, 0), Data::None)),
        AUTH_REQUIRED
    );
    // Authenticated, the same queue works.
    let o = DhchapOpts::new(&secret(0), None).offer(&[Digest::Sha256], &[DhGroup::Null]);
    assert_eq!(
        authenticate(&mut q, SUB, HOSTNQN, &o, 1).unwrap(),
        (Digest::Sha256, DhGroup::Null)
    );
    assert_eq!(
        status(q.cmd(build::property_get(0, prop::CSTS, false), Data::None)),
        Status::SUCCESS
    );
    drop(q);

    // An I/O queue authenticates on its own: a controller with an authenticated admin queue
    // gets an I/O queue whose reads are refused until it authenticated too.
    let mut o = e.opts(Some(0), None);
    o.io_queues = 0;
    o.dhchap = o
        .dhchap
        .map(|d| d.offer(&[Digest::Sha256], &[DhGroup::Ffdhe2048]));
    let c = e.connect(o.clone()).expect("admin queue authenticated");
    let mut io = HostQueue::connect(
        &e.r.tt.fabric,
        Some(SocketAddr::new(HOST_IP.parse().unwrap(), 0)),
        e.to,
        QueueOpts {
            qid: 1,
            depth: 16,
            max_io: 128 * 1024,
            max_in_capsule: 8192,
            cntlid: c.cntlid,
        },
        &CmOverride::default(),
    )
    .unwrap();
    let dw0 = fabrics_connect(&mut io, &o, c.cntlid, 0, false)
        .unwrap()
        .ok()
        .unwrap()
        .cqe
        .dw0;
    assert_ne!(dw0 & target_core::nvme::auth::CONNECT_AUTHREQ_ATR, 0);
    let read = |io: &mut HostQueue| {
        status(io.cmd(
            read_sqe(1, 0, 1),
            Data::KeyedRead {
                len: 512,
                invalidate: false,
            },
        ))
    };
    assert_eq!(read(&mut io), AUTH_REQUIRED);
    let qp = e.qpairs();
    assert!(
        qp.iter()
            .any(|q| q["qid"] == 1 && q["state"] == "authenticating"),
        "{qp:?}"
    );
    authenticate(&mut io, SUB, HOSTNQN, o.dhchap.as_ref().unwrap(), 2).unwrap();
    assert_eq!(read(&mut io), Status::SUCCESS);
    e.assert_no_secret_anywhere();
}

#[test]
fn a_host_that_does_not_authenticate_in_time_is_disconnected() {
    let e = Env::new("RDMA");
    e.r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0"}),
    );
    // Each step may wait for the host as long as the keep-alive timeout.
    let t0 = Instant::now();
    let (mut q, dw0) = e.admin_queue_kato(1000);
    assert_ne!(dw0 & target_core::nvme::auth::CONNECT_AUTHREQ_ATR, 0);
    assert!(
        q.wait_disconnected(Duration::from_secs(10)),
        "closed: {}",
        log_text()
            .lines()
            .filter(|l| l.contains("timeout") || l.contains("in time") || l.contains("DH-HMAC"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(900),
        "not before the timeout: {took:?}"
    );
    assert!(log_text().contains("did not go on in time"));
    e.assert_no_secret_anywhere();
}

#[test]
fn set_keys_rotates_for_reauthentication_and_new_connections() {
    let e = Env::new("RDMA");
    e.r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0"}),
    );
    let offer =
        |k: u8| DhchapOpts::new(&secret(k), None).offer(&[Digest::Sha384], &[DhGroup::Ffdhe2048]);
    let mut o = e.opts(Some(0), None);
    o.dhchap = Some(offer(0));
    let mut live = e.connect(o).expect("old key");
    e.r.ok(
        "nvmf_subsystem_set_keys",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key1"}),
    );
    let hosts = &e.r.ok("nvmf_get_subsystems", json!({"nqn": SUB}))[0]["hosts"];
    assert_eq!(hosts, &json!([{"nqn": HOSTNQN, "dhchap_key": "key1"}]));
    // The live controller keeps working, and re-authenticates with the new key.
    io_works(&mut live);
    authenticate(&mut live.admin, SUB, HOSTNQN, &offer(1), 9).expect("re-authentication");
    io_works(&mut live);
    // A new connection with the old key fails, with the new one works.
    let mut o = e.opts(Some(0), None);
    o.dhchap = Some(offer(0));
    let err = e.connect(o).err().expect("old key refused");
    assert_eq!(refused_reason(&err), Some(FailureReason::Failed), "{err:?}");
    let mut o = e.opts(Some(1), None);
    o.dhchap = Some(offer(1));
    let mut c = e.connect(o).expect("new key");
    io_works(&mut c);
    // Re-authentication with the old key fails and closes that queue only after the answer.
    let err = authenticate(&mut live.admin, SUB, HOSTNQN, &offer(0), 10).expect_err("old key");
    assert_eq!(refused_reason(&err), Some(FailureReason::Failed));
    assert!(live.admin.wait_disconnected(Duration::from_secs(5)));
    e.assert_no_secret_anywhere();
}

#[test]
fn nvmf_set_config_restricts_the_digests_and_groups_offered() {
    let e = Env::with("RDMA", |r| {
        r.ok(
            "nvmf_set_config",
            json!({"dhchap_digests": ["sha384"], "dhchap_dhgroups": ["null", "ffdhe3072"]}),
        );
    });
    e.r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0"}),
    );
    // The Linux host offers everything: the target picks within its own list.
    let c = e.connect(e.opts(Some(0), None)).expect("authenticated");
    for q in e.qpairs() {
        assert_eq!(q["auth"]["digest"], "sha384", "{q}");
        assert_eq!(q["auth"]["dhgroup"], "ffdhe3072", "{q}");
    }
    drop(c);
    // A host that offers only what the target does not allow is refused.
    for (d, g, why) in [
        (Digest::Sha256, DhGroup::Null, FailureReason::HashUnusable),
        (
            Digest::Sha384,
            DhGroup::Ffdhe2048,
            FailureReason::DhGroupUnusable,
        ),
    ] {
        let (mut q, _) = e.admin_queue();
        let o = DhchapOpts::new(&secret(0), None).offer(&[d], &[g]);
        let err = authenticate(&mut q, SUB, HOSTNQN, &o, 1).expect_err("outside the offer");
        assert_eq!(refused_reason(&err), Some(why), "{d:?}/{g:?}");
        assert!(q.wait_disconnected(Duration::from_secs(5)));
    }
    let cfg = saved_section(&e.r.save(), "nvmf");
    assert_eq!(cfg[0]["method"], "nvmf_set_config");
    assert_eq!(cfg[0]["params"]["dhchap_digests"], json!(["sha384"]));
    assert_eq!(
        cfg[0]["params"]["dhchap_dhgroups"],
        json!(["null", "ffdhe3072"])
    );
    e.assert_no_secret_anywhere();
}

#[test]
fn host_key_parameters_are_checked_and_saved_after_the_keyring() {
    let e = Env::new("RDMA");
    let r = &e.r;
    assert_code(
        &r.err(
            "nvmf_subsystem_add_host",
            json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "nokey"}),
        ),
        -32602,
        "Key 'nokey' does not exist",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_add_host",
            json!({"nqn": SUB, "host": HOSTNQN, "dhchap_ctrlr_key": "key1"}),
        ),
        -32602,
        "dhchap_ctrlr_key requires dhchap_key",
    );
    // A key file that is not a DHHC-1 secret (e.g. a TLS PSK): refused, its content unsaid.
    let bad = e.dir.join("psk");
    std::fs::write(&bad, "NVMeTLSkey-1:01:c2VjcmV0c2VjcmV0c2VjcmV0c2VjcmV0:\n").unwrap();
    std::fs::set_permissions(&bad, std::fs::Permissions::from_mode(0o600)).unwrap();
    r.ok(
        "keyring_file_add_key",
        json!({"name": "psk0", "path": bad.to_str().unwrap()}),
    );
    let err = r.err(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "psk0"}),
    );
    assert_code(&err, -32602, "not a usable DH-HMAC-CHAP secret");
    assert!(!err.message.contains("c2VjcmV0"), "{err}");
    assert!(
        r.ok("nvmf_get_subsystems", json!({"nqn": SUB}))[0]["hosts"]
            .as_array()
            .unwrap()
            .is_empty(),
        "a refused add_host adds nothing"
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_set_keys",
            json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0"}),
        ),
        -32603,
        "not allowed",
    );
    assert_code(
        &r.err(
            "nvmf_subsystem_set_keys",
            json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0", "bogus": 1}),
        ),
        -32602,
        "",
    );
    r.ok(
        "nvmf_subsystem_add_host",
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0", "dhchap_ctrlr_key": "key1"}),
    );
    r.ok("keyring_file_remove_key", json!({"name": "psk0"}));
    assert_code(
        &r.err("keyring_file_remove_key", json!({"name": "key1"})),
        -libc::EBUSY,
        "in use by host",
    );
    let saved = r.save();
    let order: Vec<&str> = saved["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subsystem"].as_str().unwrap())
        .collect();
    let pos = |n: &str| order.iter().position(|s| *s == n).unwrap();
    assert!(pos("keyring") < pos("nvmf"), "{order:?}");
    let add = saved_section(&saved, "nvmf")
        .into_iter()
        .find(|c| c["method"] == "nvmf_subsystem_add_host")
        .unwrap();
    assert_eq!(
        add["params"],
        json!({"nqn": SUB, "host": HOSTNQN, "dhchap_key": "key0", "dhchap_ctrlr_key": "key1"})
    );
    // Load it into a fresh target: the same configuration, and the host must authenticate.
    let text = serde_json::to_string_pretty(&saved).unwrap();
    let cfg = load::parse(&text).unwrap();
    let b = Rig::new(RpcState::Startup);
    b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
    b.state.set(RpcState::Runtime);
    b.tt.rt.block_on(load::apply(&b.table, &cfg)).unwrap();
    assert_eq!(b.save(), saved);
    assert!(
        b.tt.target
            .subsystem(SUB)
            .unwrap()
            .host_keys(HOSTNQN)
            .is_some_and(|k| k.ctrl.is_some())
    );
    e.assert_no_secret_anywhere();
}
