//! Log control of a running `rtgt serve`: the print level (standard error) and the log level
//! (syslog) are separate as in SPDK, log flags let one component's debug events through at run
//! time, `--log-format json` writes one JSON object per line, and with `--no-syslog`
//! `log_set_level` is refused rather than silently doing nothing.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use rtgt_tests::daemon::{Daemon, ok, rpc, scratch_dir, sock_path};
use serde_json::{Value, json};

/// Every datagram waiting on `sock`, in order.
fn drain(sock: &UnixDatagram) -> Vec<String> {
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut lines = Vec::new();
    let mut buf = vec![0u8; 65536];
    while let Ok(n) = sock.recv(&mut buf) {
        lines.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    lines
}

/// Index of the first line containing `needle`, or a panic listing the lines.
fn position(lines: &[String], needle: &str) -> usize {
    lines
        .iter()
        .position(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in:\n{}", lines.join("\n")))
}

#[test]
fn levels_flags_syslog_and_json_lines_change_at_run_time() {
    let dir = scratch_dir("logging");
    let syslog_path = dir.join("log");
    let syslog = UnixDatagram::bind(&syslog_path).unwrap();
    let sock = sock_path("logging");
    let d = Daemon::start(
        &sock,
        &[
            "--log-format",
            "json",
            "--syslog-socket",
            syslog_path.to_str().unwrap(),
        ],
    );

    let flags = ok(&sock, "log_get_flags", Value::Null);
    for name in ["nvmf", "nvmf_rdma", "srp", "bdev", "rpc", "wire", "trace"] {
        assert_eq!(flags[name], json!(false), "{name} in {flags}");
    }
    assert_eq!(
        rpc(&sock, "log_set_flag", Some(json!({"flag": "nvmf_fc"})))
            .unwrap_err()
            .0,
        -32602
    );
    assert_eq!(ok(&sock, "log_get_level", Value::Null), "NOTICE");
    let started = drain(&syslog);
    position(&started, "logging to standard error and syslog");

    // syslog at ERROR, standard error still at NOTICE.
    ok(&sock, "log_set_level", json!({"level": "ERROR"}));
    assert_eq!(ok(&sock, "log_get_level", Value::Null), "ERROR");
    assert_eq!(ok(&sock, "log_get_print_level", Value::Null), "NOTICE");
    ok(&sock, "log_set_print_level", json!({"level": "WARNING"}));
    ok(&sock, "log_set_print_level", json!({"level": "NOTICE"}));

    // The rpc flag: the server's debug events (a connection accepted) appear in both outputs
    // while it is set, whatever their levels, and stop when it is cleared.
    ok(&sock, "log_set_flag", json!({"flag": "rpc"}));
    assert_eq!(ok(&sock, "log_get_flags", Value::Null)["rpc"], json!(true));
    ok(&sock, "spdk_get_version", Value::Null);
    ok(&sock, "log_clear_flag", json!({"flag": "rpc"}));
    for _ in 0..3 {
        ok(&sock, "spdk_get_version", Value::Null);
    }
    let sys = drain(&syslog);
    assert!(
        !sys.iter().any(|l| l.contains("set to")),
        "INFO lines reached syslog at ERROR:\n{}",
        sys.join("\n")
    );
    let accepted = sys
        .iter()
        .filter(|l| l.contains("connection accepted"))
        .count();
    assert!(
        accepted >= 2,
        "rpc debug lines in syslog: {accepted}\n{}",
        sys.join("\n")
    );
    assert!(
        sys.iter()
            .all(|l| l.starts_with('<') && l.contains("rtgt[")),
        "{sys:?}"
    );
    ok(&sock, "log_set_level", json!({"level": "NOTICE"}));
    position(&drain(&syslog), "log level (syslog) set to NOTICE");

    let (status, err) = d.stop();
    assert!(status.success(), "{status}: {err}");
    let lines: Vec<Value> = err
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON: {l:?}: {e}")))
        .collect();
    let text: Vec<String> = lines
        .iter()
        .map(|v| {
            assert!(v["level"].is_string() && v["target"].is_string(), "{v}");
            v["fields"]["message"].as_str().unwrap_or("").to_owned()
        })
        .collect();
    let set = position(&text, "log flag rpc set");
    let cleared = position(&text, "log flag rpc cleared");
    let accepted: Vec<usize> = (0..text.len())
        .filter(|&i| text[i].ends_with("connection accepted"))
        .collect();
    assert!(!accepted.is_empty(), "no rpc debug line on standard error");
    assert!(
        accepted.iter().all(|&i| set < i && i < cleared),
        "debug lines outside the flag's window: set {set}, cleared {cleared}, at {accepted:?}"
    );
    // Announced after the change: not printed at WARNING, printed at NOTICE again.
    assert!(
        !text
            .iter()
            .any(|m| m.contains("print level (standard error) set to WARNING"))
    );
    position(&text, "print level (standard error) set to NOTICE");
    position(&text, "log level (syslog) set to ERROR");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn without_syslog_the_log_level_is_refused_and_the_print_level_works() {
    let sock = sock_path("nosyslog");
    let d = Daemon::start(&sock, &["--no-syslog", "-L", "nvmf"]);
    assert_eq!(ok(&sock, "log_get_flags", Value::Null)["nvmf"], json!(true));
    let (code, msg) = rpc(&sock, "log_set_level", Some(json!({"level": "DEBUG"}))).unwrap_err();
    assert_eq!(code, -32603, "{msg}");
    assert!(msg.contains("--no-syslog"), "{msg}");
    ok(&sock, "log_set_print_level", json!({"level": "DEBUG"}));
    assert_eq!(ok(&sock, "log_get_print_level", Value::Null), "DEBUG");
    let (status, err) = d.stop();
    assert!(status.success(), "{status}: {err}");
    assert!(
        err.contains("logging to standard error (no syslog)"),
        "{err}"
    );
}

#[test]
fn an_unknown_flag_or_an_unreachable_syslog_stops_the_start() {
    for (args, want) in [
        (vec!["-L", "nvmf_fc"], "unknown log flag 'nvmf_fc'"),
        (
            vec!["--syslog-socket", "/nonexistent/log"],
            "--syslog-socket /nonexistent/log",
        ),
    ] {
        let sock = sock_path("badlog");
        let d = Daemon {
            child: Daemon::spawn(&sock, &args),
            sock: sock.clone(),
        };
        let (status, err) = d.wait(Duration::from_secs(20));
        assert_eq!(status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!sock.exists());
    }
}
