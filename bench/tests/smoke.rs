//! The benchmark runs and writes JSON with the figures it promises (a smoke test: the figures
//! themselves are not judged).

use std::process::Command;

fn run(args: &[&str]) -> serde_json::Value {
    let tag = args.join("_").replace(['-', '/'], "");
    let dir = std::env::temp_dir().join(format!("rtgt-bench-smoke-{}-{tag}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let file = dir.join("out.json");
    let out = Command::new(env!("CARGO_BIN_EXE_rtgt-bench"))
        .args(args)
        .args(["--duration", "0.5", "--warmup", "0.2", "--quiet", "--json"])
        .arg(&file)
        .output()
        .expect("run rtgt-bench");
    assert!(
        out.status.success(),
        "rtgt-bench {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = std::fs::read_to_string(&file).expect("json written");
    let _ = std::fs::remove_dir_all(&dir);
    serde_json::from_str(&text).expect("valid JSON")
}

fn check(v: &serde_json::Value) {
    assert!(v["ops"].as_u64().expect("ops") > 0, "{v}");
    assert_eq!(v["errors"], 0, "{v}");
    for k in ["iops", "mib_s", "seconds", "process_cpu_ns_per_io"] {
        assert!(v[k].as_f64().is_some(), "{k} in {v}");
    }
    for k in ["mean", "p50", "p99", "p99.9", "max"] {
        assert!(v["latency_us"][k].as_f64().is_some(), "latency {k} in {v}");
    }
    for k in ["cpu_ns_per_io", "allocs_per_io"] {
        assert!(v["target"][k].as_f64().is_some(), "target {k} in {v}");
    }
}

#[test]
fn nvme_rdma_mixed_on_malloc_writes_json() {
    let v = run(&[
        "--transport",
        "rdma",
        "--qd",
        "16",
        "--qpairs",
        "2",
        "--rw",
        "randrw",
        "--bdev",
        "malloc",
        "--size-mib",
        "16",
    ]);
    check(&v);
    assert_eq!(v["config"]["qpairs"], 2);
    let reads = v["reads"].as_u64().expect("reads");
    assert!(reads > 0 && reads < v["ops"].as_u64().expect("ops"), "{v}");
}

#[test]
fn srp_reads_write_json() {
    let v = run(&["--transport", "srp", "--qd", "16", "--size-mib", "16"]);
    check(&v);
    assert_eq!(v["config"]["transport"], "srp");
}

#[test]
fn bare_fabric_writes_json() {
    let v = run(&["--transport", "fabric", "--qd", "16"]);
    check(&v);
}

#[test]
fn qos_limit_caps_the_rate_and_is_reported() {
    let v = run(&["--qd", "32", "--qos-iops", "1000"]);
    check(&v);
    assert_eq!(v["qos"]["rw_ios_per_sec"], 1000, "{v}");
    // 0.5 s at 1000 IOPS: 500 I/Os, plus what the first timeslices admit at once and the queue
    // depth in flight when the window opens. Unlimited, the same run does tens of thousands.
    let ops = v["ops"].as_u64().expect("ops");
    assert!(
        ops <= 800,
        "{ops} I/Os in 0.5 s under a 1000 IOPS limit: {v}"
    );
    let of_limit = v["qos"]["iops_of_limit"].as_f64().expect("iops_of_limit");
    assert!(of_limit > 0.0 && of_limit <= 1.6, "{v}");
}

#[test]
fn a_qos_limit_spdk_would_refuse_is_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_rtgt-bench"))
        .args(["--qos-iops", "1500", "--duration", "0.2"])
        .output()
        .expect("run rtgt-bench");
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a multiple of 1000"), "{err}");
}

#[test]
fn a_sleeping_nvme_host_completes_io_and_cpu_is_split_by_thread() {
    // QD1 and a 1 µs idle threshold: the host sleeps on its completion channel between
    // nearly every command.
    let v = run(&[
        "--transport",
        "rdma",
        "--qd",
        "1",
        "--initiator-idle-us",
        "1",
        "--idle-sleep-us",
        "20",
        "--size-mib",
        "16",
    ]);
    check(&v);
    assert_eq!(v["config"]["initiator_idle_us"], 1, "{v}");
    assert_eq!(v["config"]["idle_sleep_us"], 20, "{v}");
    let t = &v["cpu_ns_per_io_by_thread"];
    for k in ["reactor", "initiator"] {
        assert!(t[k].as_f64().is_some_and(|ns| ns > 0.0), "{k} in {t}");
    }
    // At QD1 with a 20 µs idle threshold the reactor sleeps between commands: voluntary
    // context switches.
    let s = &v["ctx_switches_per_io_by_thread"]["reactor"];
    assert!(
        s["voluntary"].as_f64().is_some_and(|n| n > 0.0) && s["involuntary"].is_number(),
        "{v}"
    );
}

#[test]
fn initiator_idle_us_is_refused_where_it_has_no_effect() {
    for args in [
        &["--transport", "srp", "--initiator-idle-us", "50"][..],
        &["--inline-initiator", "--initiator-idle-us", "50"][..],
        &["--transport", "fabric", "--idle-sleep-us", "50"][..],
        &["--transport", "fabric", "--qos-iops", "1000"][..],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rtgt-bench"))
            .args(args)
            .args(["--duration", "0.2", "--warmup", "0"])
            .output()
            .expect("run rtgt-bench");
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("idle")
                || String::from_utf8_lossy(&out.stderr).contains("qos"),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
