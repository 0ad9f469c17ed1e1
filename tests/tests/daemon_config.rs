//! `rtgt serve --config FILE`: the configuration survives restarts. Every acknowledged change
//! is in FILE (written before the answer), FILE.bak holds the version before it, a restart
//! rebuilds the same target, and a SIGKILL in the middle of a stream of changes leaves a file
//! that loads with every acknowledged change in it.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use rtgt_tests::daemon::{Daemon, ok, rpc, save_config, scratch_dir, sock_path};
use serde_json::{Value, json};

fn read(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

/// Names of the malloc bdevs a saved configuration creates, in order.
fn mallocs(cfg: &Value) -> Vec<String> {
    cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["subsystem"] == "bdev")
        .flat_map(|s| s["config"].as_array().unwrap().iter())
        .filter(|c| c["method"] == "bdev_malloc_create")
        .map(|c| c["params"]["name"].as_str().unwrap().to_owned())
        .collect()
}

fn malloc(sock: &Path, name: &str) -> Result<Value, (i64, String)> {
    rpc(
        sock,
        "bdev_malloc_create",
        Some(json!({"name": name, "num_blocks": 2048, "block_size": 512})),
    )
}

#[test]
fn every_acknowledged_change_is_on_disk_and_a_restart_rebuilds_the_target() {
    let d = scratch_dir("restart");
    let file = d.join("rtgt.json");
    let bak = d.join("rtgt.json.bak");
    let sock = sock_path("config");
    let arg = file.to_str().unwrap();
    let daemon = Daemon::start(&sock, &["--config", arg]);
    assert!(mallocs(&read(&file)).is_empty(), "written at start, empty");

    malloc(&sock, "Malloc0").unwrap();
    assert_eq!(
        mallocs(&read(&file)),
        ["Malloc0"],
        "written before the answer"
    );
    assert!(mallocs(&read(&bak)).is_empty(), "the previous version");
    ok(&sock, "nvmf_create_transport", json!({"trtype": "RDMA"}));
    ok(
        &sock,
        "nvmf_create_subsystem",
        json!({"nqn": "nqn.2016-06.io.spdk:cfg", "allow_any_host": true, "serial_number": "RTGTCFG1"}),
    );
    ok(
        &sock,
        "nvmf_subsystem_add_ns",
        json!({"nqn": "nqn.2016-06.io.spdk:cfg", "namespace": {"bdev_name": "Malloc0"}}),
    );
    // A refused call and a query change nothing on disk.
    let before = std::fs::metadata(&file).unwrap().modified().unwrap();
    malloc(&sock, "Malloc0").unwrap_err();
    ok(&sock, "bdev_get_bdevs", Value::Null);
    assert_eq!(
        std::fs::metadata(&file).unwrap().modified().unwrap(),
        before
    );
    let saved = save_config(&sock);
    assert_eq!(read(&file), saved);
    let (status, err) = daemon.stop();
    assert!(status.success(), "{err}");

    let daemon = Daemon::start(&sock, &["--config", arg]);
    assert_eq!(
        save_config(&sock),
        saved,
        "the restart rebuilt the same target"
    );
    drop(daemon);

    // An unreadable file stops the start, naming the backup.
    std::fs::write(&file, "{\"subsystems\": [").unwrap();
    let d2 = Daemon {
        child: Daemon::spawn(&sock, &["--config", arg]),
        sock: sock.clone(),
    };
    let (status, err) = d2.wait(Duration::from_secs(20));
    assert!(!status.success());
    assert!(err.contains("rtgt.json.bak"), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn a_sigkill_in_a_stream_of_changes_leaves_a_loadable_file_with_every_acknowledged_one() {
    let d = scratch_dir("kill");
    let file = d.join("rtgt.json");
    let sock = sock_path("config-kill");
    let arg = file.to_str().unwrap();
    let daemon = Daemon::start(&sock, &["--config", arg]);

    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (sock, stop) = (sock.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut acked = 0usize;
            while !stop.load(Ordering::Relaxed) {
                match malloc(&sock, &format!("M{acked}")) {
                    Ok(_) => acked += 1,
                    Err(_) => break,
                }
            }
            acked
        })
    };
    // Let it write a few dozen versions, then kill without warning.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while mallocs(&read_loose(&file)).len() < 30 {
        assert!(
            std::time::Instant::now() < deadline,
            "the writer made no progress"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    daemon.signal("KILL");
    let (status, _) = daemon.wait(Duration::from_secs(20));
    assert_eq!(status.code(), None, "killed by a signal");
    let acked = writer.join().unwrap();
    stop.store(true, Ordering::Relaxed);

    let _ = std::fs::remove_file(&sock);
    let daemon = Daemon::start(&sock, &["--config", arg]);
    let names: Vec<String> = ok(&sock, "bdev_get_bdevs", Value::Null)
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["name"].as_str().unwrap().to_owned())
        .collect();
    // Every acknowledged create is there; at most the one in flight at the kill is extra.
    assert!(
        names.len() == acked || names.len() == acked + 1,
        "{acked} acknowledged, {} restored",
        names.len()
    );
    for i in 0..names.len() {
        assert!(
            names.contains(&format!("M{i}")),
            "M{i} missing from {names:?}"
        );
    }
    drop(daemon);
    std::fs::remove_dir_all(&d).unwrap();
}

/// The file's content, or an empty configuration while it does not exist yet or is being
/// replaced (the rename is atomic, so a read sees a whole version).
fn read_loose(path: &Path) -> Value {
    std::fs::read_to_string(path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or_else(|| json!({"subsystems": []}))
}

#[test]
fn systemd_hears_ready_once_the_socket_answers_and_stopping_at_sigterm() {
    let d = scratch_dir("notify");
    let notify_path = d.join("notify");
    let notify = std::os::unix::net::UnixDatagram::bind(&notify_path).unwrap();
    notify
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let sock = sock_path("notify");
    let daemon = Daemon::start_env(
        &sock,
        &[],
        &[("NOTIFY_SOCKET", notify_path.to_str().unwrap())],
    );
    let mut buf = [0u8; 512];
    let n = notify.recv(&mut buf).unwrap();
    let ready = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(ready.starts_with("READY=1\n"), "{ready}");
    assert!(
        ready.contains(&format!("MAINPID={}", daemon.pid())),
        "{ready}"
    );
    daemon.signal("TERM");
    let n = notify.recv(&mut buf).unwrap();
    assert_eq!(&buf[..n], b"STOPPING=1");
    let (status, err) = daemon.wait(Duration::from_secs(20));
    assert!(status.success(), "{err}");
    std::fs::remove_dir_all(&d).unwrap();
}
