//! The `rtgt` command line. (Having an integration test here also makes `cargo test` build
//! the `rtgt` binary, which the daemon tests in `tests/` and the Python suite run.)

use std::process::Command;

fn rtgt(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_rtgt"))
        .args(args)
        .output()
        .expect("run rtgt")
}

#[test]
fn help_lists_serve_and_its_options() {
    let out = rtgt(&["--help"]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("serve"));
    let out = rtgt(&["serve", "--help"]);
    let text = String::from_utf8_lossy(&out.stdout);
    for opt in [
        "--rpc-socket",
        "--json",
        "--wait-for-rpc",
        "--cpumask",
        "--cores",
        "--log-level",
        "--fabric",
        "--rpc-listen",
        "--http-listen",
        "--http-token",
        "--http-token-file",
        "--rpc-socket-mode",
    ] {
        assert!(text.contains(opt), "serve --help lacks {opt}");
    }
}

#[test]
fn bad_arguments_fail_without_starting() {
    let out = rtgt(&["serve", "--fabric", "carrier-pigeon"]);
    assert_eq!(out.status.code(), Some(2));
    let out = rtgt(&["serve", "--cores", "2", "-m", "0x3"]);
    assert_eq!(out.status.code(), Some(2), "--cores and -m conflict");
    let out = rtgt(&["serve", "--log-level", "loud", "-r", "/tmp/rtgt-never.sock"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown log level"));
    let out = rtgt(&["serve", "--cpumask", "0x0", "-r", "/tmp/rtgt-never.sock"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("selects no core"));
    assert!(!std::path::Path::new("/tmp/rtgt-never.sock").exists());
}
