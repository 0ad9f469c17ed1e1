//! The `rtgt serve` daemon as a process: socket and lock handling, clean SIGTERM, a second
//! instance, idle CPU use, `--json` round trips, and the TCP and HTTP endpoints.
//!
//! The binary: `rtgt_tests::daemon::rtgt_bin`.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rtgt_tests::daemon::{Daemon, lock_of, ok, rpc, rtgt_bin, save_config, sock_path};
use serde_json::{Value, json};

#[test]
fn starts_answers_and_exits_cleanly_on_sigterm() {
    let sock = sock_path("term");
    let d = Daemon::start(&sock, &[]);
    assert!(sock.exists());
    assert!(lock_of(&sock).exists());
    let v = ok(&sock, "spdk_get_version", Value::Null);
    assert!(v["version"].as_str().unwrap().starts_with("SPDK v"));
    // An open, idle client connection does not hold the shutdown up.
    let _idle = UnixStream::connect(&sock).unwrap();
    let (status, err) = d.stop();
    assert!(status.success(), "exit {status}\n{err}");
    assert!(!sock.exists(), "socket left behind");
    assert!(!lock_of(&sock).exists(), "lock file left behind");
    assert!(err.contains("SIGTERM: shutting down"), "{err}");
}

#[test]
fn sigint_and_spdk_kill_instance_exit_cleanly_too() {
    let sock = sock_path("int");
    let d = Daemon::start(&sock, &[]);
    d.signal("INT");
    let (status, _) = d.wait(Duration::from_secs(20));
    assert!(status.success());
    assert!(!sock.exists());

    let d = Daemon::start(&sock, &[]);
    ok(&sock, "spdk_kill_instance", json!({"sig_name": "SIGTERM"}));
    let (status, _) = d.wait(Duration::from_secs(20));
    assert!(status.success());
    assert!(!sock.exists() && !lock_of(&sock).exists());
}

#[test]
fn a_second_instance_on_the_same_socket_fails_cleanly() {
    let sock = sock_path("second");
    let first = Daemon::start(&sock, &[]);
    ok(
        &first.sock,
        "bdev_malloc_create",
        json!({"num_blocks": 64, "block_size": 512, "name": "M"}),
    );
    let second = Daemon {
        child: Daemon::spawn(&sock, &[]),
        sock: sock.clone(),
    };
    let (status, err) = second.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(1), "{err}");
    assert!(err.contains("in use"), "{err}");
    // The first instance is untouched: same socket, same state.
    assert!(sock.exists() && lock_of(&sock).exists());
    assert_eq!(
        ok(&sock, "bdev_get_bdevs", json!({"name": "M"}))[0]["name"],
        "M"
    );
    let (status, _) = first.stop();
    assert!(status.success());
}

/// utime + stime of a process, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("proc stat");
    // Fields after the command name (which may contain spaces) start after the last ')'.
    let rest = &stat[stat.rfind(')').expect("comm") + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest[0] is field 3 (state); utime and stime are fields 14 and 15.
    f[11].parse::<u64>().unwrap() + f[12].parse::<u64>().unwrap()
}

#[test]
fn an_idle_daemon_with_two_reactors_uses_at_most_two_percent_of_a_core() {
    let sock = sock_path("idle");
    let cpus = target_core::reactor::sys::allowed_cpus();
    let args: &[&str] = if cpus.contains(&0) && cpus.contains(&1) {
        &["-m", "0x3"]
    } else {
        &["--cores", "2"]
    };
    let d = Daemon::start(&sock, args);
    assert_eq!(
        ok(&sock, "framework_get_reactors", Value::Null)["reactors"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    std::thread::sleep(Duration::from_secs(1));
    let hz = 100.0; // USER_HZ on Linux
    let (t0, c0) = (Instant::now(), cpu_ticks(d.pid()));
    std::thread::sleep(Duration::from_secs(10));
    let (elapsed, c1) = (t0.elapsed().as_secs_f64(), cpu_ticks(d.pid()));
    let percent = (c1 - c0) as f64 / hz / elapsed * 100.0;
    println!(
        "idle rtgt serve {}: {} ticks in {elapsed:.1} s = {percent:.2}% of one core",
        args.join(" "),
        c1 - c0
    );
    assert!(percent <= 2.0, "idle daemon used {percent:.2}% of a core");
    let (status, _) = d.stop();
    assert!(status.success());
}

fn build_config(sock: &Path) {
    ok(
        sock,
        "bdev_malloc_create",
        json!({"num_blocks": 2048, "block_size": 512, "name": "Malloc0"}),
    );
    ok(
        sock,
        "bdev_null_create",
        json!({"num_blocks": 64, "block_size": 4096, "name": "Null0"}),
    );
    ok(
        sock,
        "nvmf_create_subsystem",
        json!({"nqn": "nqn.2016-06.io.spdk:cnode1", "allow_any_host": true,
               "serial_number": "SPDK00000000000001", "model_number": "SPDK_Controller1"}),
    );
    ok(
        sock,
        "nvmf_create_subsystem",
        json!({"nqn": "nqn.2016-06.io.spdk:cnode2", "max_namespaces": 4}),
    );
    ok(
        sock,
        "nvmf_subsystem_add_ns",
        json!({"nqn": "nqn.2016-06.io.spdk:cnode1", "namespace": {"bdev_name": "Malloc0"}}),
    );
    ok(
        sock,
        "nvmf_subsystem_add_ns",
        json!({"nqn": "nqn.2016-06.io.spdk:cnode2", "namespace": {"bdev_name": "Null0", "nsid": 3}}),
    );
    ok(
        sock,
        "nvmf_subsystem_add_host",
        json!({"nqn": "nqn.2016-06.io.spdk:cnode2",
               "host": "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"}),
    );
}

#[test]
fn json_config_round_trips_through_a_restart() {
    let sock = sock_path("json");
    let file = std::env::temp_dir().join(format!("rtgt-daemon-{}-saved.json", std::process::id()));
    let d = Daemon::start(&sock, &[]);
    build_config(&sock);
    let saved = save_config(&sock);
    // As rpc.py writes it (indent 2, trailing newline), with a comment and an extra top-level
    // key that the loader must accept and ignore.
    let text = serde_json::to_string_pretty(&saved).unwrap();
    let annotated = format!(
        "// saved by the daemon test\n{{ \"comment\": \"ignored\", {}",
        &text[1..]
    );
    std::fs::write(&file, &annotated).unwrap();
    assert!(d.stop().0.success());

    let d = Daemon::start(&sock, &["--json", file.to_str().unwrap()]);
    let again = save_config(&sock);
    assert_eq!(serde_json::to_string_pretty(&again).unwrap(), text);
    assert!(d.stop().0.success());

    // With --wait-for-rpc only the STARTUP part is applied until framework_start_init.
    let d = Daemon::start(&sock, &["--json", file.to_str().unwrap(), "--wait-for-rpc"]);
    assert_eq!(
        rpc(&sock, "bdev_get_bdevs", None).unwrap_err().0,
        -1,
        "RUNTIME methods wait for framework_start_init"
    );
    ok(&sock, "framework_start_init", Value::Null);
    ok(&sock, "framework_wait_init", Value::Null);
    let deadline = Instant::now() + Duration::from_secs(10);
    while save_config(&sock) != saved {
        assert!(
            Instant::now() < deadline,
            "the RUNTIME part was not applied"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(d.stop().0.success());
    let _ = std::fs::remove_file(&file);
}

#[test]
fn a_failing_json_config_stops_the_daemon_with_a_clear_message() {
    let sock = sock_path("badjson");
    let file = std::env::temp_dir().join(format!("rtgt-daemon-{}-bad.json", std::process::id()));
    std::fs::write(
        &file,
        r#"{"subsystems": [{"subsystem": "nvmf", "config": [
            {"method": "nvmf_subsystem_add_ns",
             "params": {"nqn": "nqn.2016-06.io.spdk:none", "namespace": {"bdev_name": "X"}}}]}]}"#,
    )
    .unwrap();
    let d = Daemon {
        child: Daemon::spawn(&sock, &["--json", file.to_str().unwrap()]),
        sock: sock.clone(),
    };
    let (status, err) = d.wait(Duration::from_secs(20));
    assert_eq!(status.code(), Some(1));
    assert!(
        err.contains("nvmf_subsystem_add_ns failed") && err.contains("nqn.2016-06.io.spdk:none"),
        "{err}"
    );
    assert!(!sock.exists() && !lock_of(&sock).exists());
    let _ = std::fs::remove_file(&file);
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

#[test]
fn tcp_and_http_endpoints_serve_the_same_methods() {
    let sock = sock_path("tcp");
    let (tcp, http) = (free_port(), free_port());
    let tcp_addr = format!("127.0.0.1:{tcp}");
    let http_addr = format!("127.0.0.1:{http}");
    let token_file = std::env::temp_dir().join(format!("rtgt-daemon-{}-token", std::process::id()));
    std::fs::write(&token_file, "s3cret\n").unwrap();
    let d = Daemon::start(
        &sock,
        &[
            "--rpc-listen",
            &tcp_addr,
            "--http-listen",
            &http_addr,
            "--http-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    ok(
        &sock,
        "bdev_malloc_create",
        json!({"num_blocks": 64, "block_size": 512, "name": "M"}),
    );

    // TCP: SPDK framing.
    let mut s = std::net::TcpStream::connect(&tcp_addr).unwrap();
    s.write_all(br#"{"jsonrpc":"2.0","method":"bdev_get_bdevs","params":{"name":"M"},"id":7}"#)
        .unwrap();
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).unwrap();
    let v: Value = serde_json::from_str(&line).unwrap();
    assert_eq!(v["id"], 7);
    assert_eq!(v["result"][0]["name"], "M");

    // HTTP with and without the token.
    let post = |auth: Option<&str>| {
        let body = r#"{"jsonrpc":"2.0","method":"spdk_get_version","id":1}"#;
        let mut s = std::net::TcpStream::connect(&http_addr).unwrap();
        let auth = auth
            .map(|t| format!("Authorization: Bearer {t}\r\n"))
            .unwrap_or_default();
        write!(
            s,
            "POST / HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{auth}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp
    };
    assert!(post(None).starts_with("HTTP/1.1 401"));
    let resp = post(Some("s3cret"));
    assert!(resp.starts_with("HTTP/1.1 200"), "{resp}");
    assert!(resp.contains("SPDK v"), "{resp}");
    assert!(d.stop().0.success());
    let _ = std::fs::remove_file(&token_file);
}

/// Issue 13: 64 connections that send nothing (a script that opens connections and forgets
/// them) used to hang every later client, `rtgt rpc` included, in connect. Now the operator's
/// client gets an error at once, and once the idle timeout (`--rpc-idle-timeout`) has closed
/// the idle connections it is served again.
#[test]
fn idle_connections_neither_hang_the_operator_nor_stay_for_ever() {
    let sock = sock_path("idle-conns");
    let d = Daemon::start(&sock, &["--rpc-idle-timeout", "4"]);
    // Let the start-up probe's connection go before taking every slot, and give the server
    // a moment to accept all 64.
    std::thread::sleep(Duration::from_millis(200));
    let idle: Vec<UnixStream> = (0..64)
        .map(|_| UnixStream::connect(&sock).unwrap())
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // All 64 are being served (none of them was refused).
    for c in &idle {
        c.set_nonblocking(true).unwrap();
        let e = (&*c).read(&mut [0u8; 64]).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
        c.set_nonblocking(false).unwrap();
    }
    let rtgt_rpc = || {
        let started = Instant::now();
        let out = Command::new(rtgt_bin())
            .args(["rpc", "-t", "10", "-s"])
            .arg(&sock)
            .arg("spdk_get_version")
            .output()
            .unwrap();
        (out, started.elapsed())
    };
    let (out, took) = rtgt_rpc();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "served although 64 connections are open"
    );
    assert!(
        err.contains("-32000") && err.contains("Too many connections"),
        "{err}"
    );
    assert!(took < Duration::from_secs(3), "the refusal took {took:?}");
    // The idle connections are closed after 4 s; then the operator is served.
    for mut c in idle {
        c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut rest = Vec::new();
        assert_eq!(
            c.read_to_end(&mut rest).unwrap(),
            0,
            "idle connection not closed"
        );
    }
    let (out, _) = rtgt_rpc();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("SPDK v"));
    assert!(d.stop().0.success());
}

#[test]
fn without_an_rdma_device_the_rdma_fabric_still_starts() {
    // The host has no RDMA; the daemon must run anyway (creating an RDMA transport fails
    // with a clear error instead).
    let sock = sock_path("rdma");
    let mut child = Command::new(rtgt_bin())
        .args(["serve", "--fabric", "rdma", "-r"])
        .arg(&sock)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while !(sock.exists() && rpc(&sock, "rpc_get_methods", None).is_ok()) {
        assert!(child.try_wait().unwrap().is_none(), "rtgt exited");
        assert!(
            Instant::now() < deadline,
            "rtgt serve --fabric rdma did not come up"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let d = Daemon { child, sock };
    assert!(
        ok(&d.sock, "nvmf_get_transports", Value::Null)
            .as_array()
            .unwrap()
            .is_empty()
    );
    let no_devices = std::fs::read_dir("/sys/class/infiniband")
        .map(|mut d| d.next().is_none())
        .unwrap_or(true);
    if no_devices {
        let (code, message) = rpc(
            &d.sock,
            "nvmf_create_transport",
            Some(json!({"trtype": "RDMA"})),
        )
        .unwrap_err();
        assert_eq!(code, -32603);
        assert!(message.contains("no RDMA device"), "{message}");
    }
    assert!(d.stop().0.success());
}
