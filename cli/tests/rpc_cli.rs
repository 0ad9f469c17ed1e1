//! `rtgt rpc` against a live `rtgt serve --fabric sim`: rpc.py's command lines build a target,
//! errors exit 1 with one line naming the method, code and message, `--params`, TCP, and the
//! client-side `save_config` / `load_config` round trip.

mod common;

use common::{Daemon, HOST, NQN, run};
use serde_json::{Value, json};

#[test]
fn rpc_py_command_lines_build_a_target() {
    let d = Daemon::start("build", &[]);
    assert_eq!(
        d.ok(&["nvmf_create_transport", "-t", "RDMA", "-u", "8192"]),
        json!(true)
    );
    assert_eq!(
        d.ok(&["nvmf_create_transport", "-t", "SRP", "-q", "64"]),
        json!(true)
    );
    assert_eq!(
        d.ok(&["bdev_malloc_create", "64", "512", "-b", "Malloc0"]),
        json!("Malloc0")
    );
    assert_eq!(
        d.ok(&["bdev_null_create", "Null0", "16", "4096"]),
        json!("Null0")
    );
    assert_eq!(
        d.ok(&[
            "nvmf_create_subsystem",
            NQN,
            "-a",
            "-s",
            "SPDK00000000000001",
            "-d",
            "SPDK_Controller1"
        ]),
        json!(true)
    );
    assert_eq!(d.ok(&["nvmf_subsystem_add_ns", NQN, "Malloc0"]), json!(1));
    assert_eq!(
        d.ok(&["nvmf_subsystem_add_ns", NQN, "Null0", "-n", "5"]),
        json!(5)
    );
    assert_eq!(
        d.ok(&[
            "nvmf_subsystem_add_listener",
            NQN,
            "-t",
            "rdma",
            "-a",
            "10.0.0.1",
            "-s",
            "4420",
            "-f",
            "ipv4"
        ]),
        json!(true)
    );
    assert_eq!(d.ok(&["nvmf_subsystem_add_host", NQN, HOST]), json!(true));
    assert_eq!(
        d.ok(&["nvmf_subsystem_allow_any_host", NQN, "--no-allow-any-host"]),
        json!(true)
    );

    let subs = d.ok(&["nvmf_get_subsystems", NQN]);
    let s = &subs[0];
    assert_eq!(s["serial_number"], "SPDK00000000000001");
    assert_eq!(s["model_number"], "SPDK_Controller1");
    assert_eq!(s["allow_any_host"], false);
    assert_eq!(s["hosts"], json!([{"nqn": HOST}]));
    assert_eq!(
        s["listen_addresses"],
        json!([{"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1", "trsvcid": "4420"}])
    );
    let nsids: Vec<&Value> = s["namespaces"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| &n["nsid"])
        .collect();
    assert_eq!(nsids, vec![&json!(1), &json!(5)]);

    let t = d.ok(&["nvmf_get_transports", "--trtype", "SRP"]);
    assert_eq!(t[0]["max_queue_depth"], 64);
    let b = d.ok(&["bdev_get_bdevs", "-b", "Malloc0"]);
    assert_eq!(b[0]["num_blocks"], 131072);
    assert_eq!(b[0]["claimed"], true);

    // rtgt's pause/resume, through the subsystem state.
    assert_eq!(d.ok(&["nvmf_subsystem_pause", NQN, "-n", "1"]), json!(true));
    assert_eq!(d.ok(&["nvmf_get_subsystems", NQN])[0]["state"], "paused");
    assert_eq!(d.ok(&["nvmf_subsystem_resume", NQN]), json!(true));
    assert_eq!(d.ok(&["nvmf_get_subsystems", NQN])[0]["state"], "active");

    // And take it down again.
    assert_eq!(
        d.ok(&[
            "nvmf_subsystem_remove_listener",
            NQN,
            "-t",
            "rdma",
            "-a",
            "10.0.0.1",
            "-s",
            "4420"
        ]),
        json!(true)
    );
    assert_eq!(d.ok(&["nvmf_subsystem_remove_ns", NQN, "5"]), json!(true));
    assert_eq!(
        d.ok(&["nvmf_subsystem_remove_host", NQN, HOST]),
        json!(true)
    );
    assert_eq!(d.ok(&["nvmf_delete_subsystem", NQN]), json!(true));
    assert_eq!(d.ok(&["bdev_malloc_delete", "Malloc0"]), json!(true));
    assert_eq!(d.ok(&["nvmf_get_subsystems"]).as_array().unwrap().len(), 1);
}

#[test]
fn output_is_indented_json() {
    let d = Daemon::start("output", &[]);
    let r = d.rpc(&["spdk_get_version"]);
    assert_eq!(r.code, 0);
    assert!(
        r.stdout.starts_with("{\n  \"version\": \"SPDK v"),
        "{}",
        r.stdout
    );
    assert!(r.stderr.is_empty());
}

#[test]
fn failures_exit_1_with_one_line_naming_method_code_and_message() {
    let d = Daemon::start("errors", &[]);
    d.ok(&["nvmf_create_subsystem", NQN]);
    let r = d.rpc(&["nvmf_create_subsystem", NQN]);
    assert_eq!(r.code, 1);
    assert!(r.stdout.is_empty());
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(
        r.stderr
            .starts_with("rtgt rpc: nvmf_create_subsystem failed with code -32603: ")
            && r.stderr.contains(NQN),
        "{}",
        r.stderr
    );

    let r = d.rpc(&["bdev_malloc_delete", "Nope"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("bdev_malloc_delete failed with code -19"),
        "{}",
        r.stderr
    );

    let r = d.rpc(&[
        "nvmf_subsystem_add_ns",
        "nqn.2016-06.io.spdk:none",
        "Malloc9",
    ]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("code -32602") && r.stderr.contains("not found"),
        "{}",
        r.stderr
    );

    // A method the server does not have.
    let r = d.rpc(&["no_such_method"]);
    assert_eq!(r.code, 1);
    assert_eq!(
        r.stderr.trim_end(),
        "rtgt rpc: no_such_method failed with code -32601: Method not found"
    );

    // No server there.
    let gone = d.dir.join("gone.sock");
    let r = run(
        &["rpc", "-s", gone.to_str().unwrap(), "spdk_get_version"],
        None,
    );
    assert_eq!(r.code, 1);
    assert_eq!(r.stderr.lines().count(), 1, "{}", r.stderr);
    assert!(r.stderr.contains("cannot connect to") && r.stderr.contains("gone.sock"));

    // Command lines that do not parse never reach the server: exit 2.
    let r = d.rpc(&["nvmf_create_subsystem"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("<NQN>"), "{}", r.stderr);
    let r = d.rpc(&["bdev_malloc_create", "64", "512", "--bogus"]);
    assert_eq!(r.code, 2);
    let r = d.rpc(&["--params", "{not json", "bdev_get_bdevs"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("--params"), "{}", r.stderr);
    let r = d.rpc(&[]);
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains("nvmf_create_transport"),
        "the method list: {}",
        r.stderr
    );
}

#[test]
fn raw_params_on_any_method() {
    let d = Daemon::start("params", &[]);
    d.ok(&["bdev_malloc_create", "8", "4096", "-b", "M0"]);
    // Raw parameters alone, for a method with a dedicated subcommand.
    let b = d.ok(&["--params", r#"{"name": "M0"}"#, "bdev_get_bdevs"]);
    assert_eq!(b.as_array().unwrap().len(), 1);
    // Required positionals may be left out when --params carries them.
    assert_eq!(
        d.ok(&[
            "--params",
            &format!(r#"{{"nqn": "{NQN}", "max_namespaces": 4}}"#),
            "nvmf_create_subsystem"
        ]),
        json!(true)
    );
    assert_eq!(d.ok(&["nvmf_get_subsystems", NQN])[0]["max_namespaces"], 4);
    // Merged over the arguments' parameters (nested objects key by key).
    assert_eq!(
        d.ok(&[
            "--params",
            r#"{"namespace": {"nsid": 3}}"#,
            "nvmf_subsystem_add_ns",
            NQN,
            "M0"
        ]),
        json!(3)
    );
    // Any method name at all: sent as given.
    let r = d.rpc(&["--params", r#"{"x": 1}"#, "rtgt_future_method"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("rtgt_future_method failed with code -32601")
    );
    // The server's own checks still apply to raw parameters.
    let r = d.rpc(&["--params", r#"{"nqn": 5}"#, "nvmf_delete_subsystem"]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr
            .contains("nvmf_delete_subsystem failed with code -32602"),
        "{}",
        r.stderr
    );
}

#[test]
fn dry_run_prints_the_request_without_a_server() {
    let r = run(
        &[
            "rpc",
            "-s",
            "/nonexistent/spdk.sock",
            "--dry-run",
            "nvmf_create_transport",
            "-t",
            "RDMA",
            "-u",
            "8192",
            "-n",
            "4096",
            "-b",
            "32",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    let req: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(req["jsonrpc"], "2.0");
    assert_eq!(req["method"], "nvmf_create_transport");
    assert_eq!(req["id"], 1);
    // spdk-reference §2.15, key order included.
    assert_eq!(
        req["params"].to_string(),
        r#"{"no_srq":false,"c2h_success":true,"trtype":"RDMA","io_unit_size":8192,"num_shared_buffers":4096,"buf_cache_size":32,"zcopy":false,"dif_insert_or_strip":false,"no_wr_batching":false,"disable_mappable_bar0":false,"disable_adaptive_irq":false,"disable_shadow_doorbells":false,"disable_command_passthru":false}"#
    );
    let r = run(&["rpc", "--dry-run", "nvmf_get_subsystems"], None);
    let req: Value = serde_json::from_str(&r.stdout).unwrap();
    assert!(
        req.get("params").is_none(),
        "empty params are omitted: {req}"
    );
}

#[test]
fn tcp_with_rpc_listen() {
    let d = Daemon::start_tcp("tcp");
    let port = d.tcp_port.unwrap().to_string();
    let r = run(
        &[
            "rpc",
            "-s",
            "127.0.0.1",
            "-p",
            &port,
            "bdev_malloc_create",
            "4",
            "512",
            "-b",
            "T0",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(r.stdout.trim(), "\"T0\"");
    let r = run(
        &[
            "rpc",
            "-s",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "5",
            "bdev_get_bdevs",
        ],
        None,
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v[0]["name"], "T0");
    // The method's -t is the method's, not the timeout.
    let r = run(
        &[
            "rpc",
            "-s",
            "127.0.0.1",
            "-p",
            &port,
            "nvmf_create_transport",
            "-t",
            "RDMA",
        ],
        None,
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    // Errors over TCP look the same.
    let r = run(
        &[
            "rpc",
            "-s",
            "127.0.0.1",
            "-p",
            &port,
            "bdev_malloc_delete",
            "X",
        ],
        None,
    );
    assert_eq!(r.code, 1);
    assert!(r.stderr.contains("bdev_malloc_delete failed with code -19"));
}

#[test]
fn save_config_and_load_config_round_trip() {
    let a = Daemon::start("save", &[]);
    a.ok(&["nvmf_create_transport", "-t", "RDMA"]);
    a.ok(&["bdev_malloc_create", "32", "512", "-b", "Malloc0"]);
    a.ok(&["nvmf_create_subsystem", NQN, "-a", "-s", "SN1"]);
    a.ok(&["nvmf_subsystem_add_ns", NQN, "Malloc0"]);
    a.ok(&[
        "nvmf_subsystem_add_listener",
        NQN,
        "-t",
        "rdma",
        "-a",
        "10.0.0.1",
        "-s",
        "4420",
    ]);
    let saved = a.rpc(&["save_config"]);
    assert_eq!(saved.code, 0, "{}", saved.stderr);
    let cfg: Value = serde_json::from_str(&saved.stdout).unwrap();
    let names: Vec<&str> = cfg["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subsystem"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "keyring",
            "iobuf",
            "sock",
            "vmd",
            "accel",
            "bdev",
            "scheduler",
            "nvmf"
        ]
    );
    let file = a.dir.join("saved.json");
    std::fs::write(&file, &saved.stdout).unwrap();

    // A fresh target waiting in STARTUP: load_config applies STARTUP calls, starts the
    // framework, then applies the rest.
    let b = Daemon::start("load", &["--wait-for-rpc"]);
    let r = b.rpc(&["load_config", "-j", file.to_str().unwrap()]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let again = b.rpc(&["save_config"]);
    assert_eq!(
        again.stdout, saved.stdout,
        "save_config → load_config → save_config"
    );
    // Loading twice fails on the first duplicate, naming it (rpc.py's behaviour).
    let r = b.rpc(&["load_config", "-j", file.to_str().unwrap()]);
    assert_eq!(r.code, 1);
    assert!(
        r.stderr.contains("bdev_malloc_create failed with code -17"),
        "{}",
        r.stderr
    );

    // One subsystem, compact; stdin as the source of load_subsystem_config.
    let one = a.rpc(&["save_subsystem_config", "-n", "bdev", "-i", "-1"]);
    assert_eq!(one.stdout.lines().count(), 1);
    let v: Value = serde_json::from_str(&one.stdout).unwrap();
    assert_eq!(v["subsystem"], "bdev");
    let c = Daemon::start("load-one", &[]);
    let r = run(
        &["rpc", "-s", c.sock_str(), "load_subsystem_config"],
        Some(&one.stdout),
    );
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(c.ok(&["bdev_get_bdevs"])[0]["name"], "Malloc0");
    // Selected subsystems come with their dependencies.
    let part: Value = serde_json::from_str(&a.rpc(&["save_config", "-s", "bdev"]).stdout).unwrap();
    let names: Vec<&str> = part["subsystems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["subsystem"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["keyring", "iobuf", "sock", "vmd", "accel", "bdev"]);
}

#[test]
fn every_served_method_has_a_dedicated_subcommand() {
    let d = Daemon::start("coverage", &[]);
    let served: Vec<String> = d
        .ok(&["rpc_get_methods"])
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap().to_string())
        .collect();
    assert!(served.len() >= 60, "{served:?}");
    for m in &served {
        let spec = rtgt::methods::find(m).unwrap_or_else(|| panic!("{m} has no subcommand"));
        assert_eq!(spec.action, rtgt::methods::Action::Call);
    }
    // And the table names no method the server lacks.
    for spec in rtgt::methods::all() {
        if spec.action == rtgt::methods::Action::Call {
            assert!(
                served.iter().any(|m| m == spec.name),
                "{} is not served",
                spec.name
            );
        }
    }
}

#[test]
fn completion_scripts() {
    let r = run(&["completions", "bash"], None);
    assert_eq!(r.code, 0);
    for needle in [
        "_rtgt",
        "nvmf_create_transport",
        "--max-queue-depth",
        "nvmf_subsystem_pause",
    ] {
        assert!(r.stdout.contains(needle), "bash script lacks {needle}");
    }
    let dir = common::temp_dir("bash");
    let file = dir.join("rtgt.bash");
    std::fs::write(&file, &r.stdout).unwrap();
    let syntax = std::process::Command::new("bash")
        .arg("-n")
        .arg(&file)
        .status()
        .unwrap();
    assert!(syntax.success(), "bash -n rejects the script");
    let r = run(&["completions", "zsh"], None);
    assert_eq!(r.code, 0);
    assert!(r.stdout.starts_with("#compdef rtgt"));
    assert!(r.stdout.contains("nvmf_subsystem_add_listener"));
    assert_eq!(run(&["completions", "fish"], None).code, 2);
}
