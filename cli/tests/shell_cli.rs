//! `rtgt shell` driven without a terminal (commands from stdin) against a live
//! `rtgt serve --fabric sim`, and the shell's completer with live names from that target.

mod common;

use std::time::Duration;

use common::{Daemon, HOST, NQN};
use rtgt::client::Endpoint;
use rtgt::exec::Conn;
use rtgt::shell::{Next, Shell};

#[test]
fn commands_from_stdin_build_and_draw_a_target() {
    let d = Daemon::start("shell", &[]);
    let script = format!(
        "\
# comments and blank lines are skipped

nvmf_create_transport -t RDMA -u 8192
bdev_malloc_create 64 512 -b M0
bdev_null_create N0 16 4096
nvmf_create_subsystem {NQN} -s SN7 -d 'My Model'
nvmf_subsystem_add_ns {NQN} M0
nvmf_subsystem_add_host {NQN} {HOST}
nvmf_subsystem_add_listener {NQN} -t rdma -a 10.0.0.1 -s 4420 -f ipv4
nvmf_subsystem_add_listener discovery -t rdma -a 10.0.0.1 -s 4420
--params '{{\"name\": \"M0\"}}' bdev_get_bdevs
ls
"
    );
    let r = d.shell(&script);
    assert_eq!(r.code, 0, "stderr: {}", r.stderr);
    assert!(r.stderr.is_empty(), "{}", r.stderr);
    assert!(r.stdout.contains("\"M0\"\n"));
    assert!(r.stdout.contains("\"product_name\": \"Malloc disk\""));
    let tree = &r.stdout[r.stdout.find("rtgt at ").expect("the ls tree")..];
    for line in [
        "├── bdevs  (2)",
        "│   ├── M0  Malloc disk  64 MiB (131072 × 512 B)  [nqn.2016-06.io.spdk:cnode1]",
        "│   └── N0  Null disk  16 MiB (4096 × 4096 B)",
        "├── transports  (1)",
        "└── subsystems  (2)",
        "    ├── nqn.2014-08.org.nvmexpress.discovery  [Discovery, active]",
        "    │   ├── listeners  (1)",
        "    │   │   └── RDMA  IPv4  10.0.0.1:4420",
        "    └── nqn.2016-06.io.spdk:cnode1  [NVMe, active]  SN SN7  MN My Model",
        "        ├── namespaces  (1)",
        "        ├── hosts  (1)",
        "        │   └── nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
        "        ├── listeners  (1)",
        "        └── connections  (none)",
    ] {
        assert!(
            tree.lines().any(|l| l == line),
            "no line {line:?} in\n{tree}"
        );
    }
    assert!(tree.contains("RDMA  max_queue_depth=128"));

    // Parts of the tree.
    let r = d.shell(&format!("ls {NQN}\nls bdevs\nls nothing\n"));
    assert_eq!(r.code, 1, "`ls nothing` fails");
    assert!(r.stdout.starts_with(&format!("{NQN}  [NVMe, active]")));
    assert!(r.stdout.contains("bdevs  (2)\n├── M0"));
    assert!(r.stderr.contains("'nothing'"));
}

#[test]
fn errors_print_and_the_shell_goes_on() {
    let d = Daemon::start("shell-errors", &[]);
    let r = d.shell(&format!(
        "\
nvmf_create_subsystem {NQN}
nvmf_create_subsystem {NQN}
not_a_method
nvmf_subsystem_add_ns
bdev_malloc_create 1 512 --frobnicate
'unterminated
bdev_malloc_create 1 512 -b After
help nvmf_subsystem_add_ns
help
exit
bdev_malloc_create 1 512 -b NeverRun
"
    ));
    assert_eq!(r.code, 1, "failed commands make the exit status 1");
    let errs: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("error"))
        .collect();
    assert!(
        errs.iter()
            .any(|l| l.starts_with("error: nvmf_create_subsystem failed with code -32603")),
        "{}",
        r.stderr
    );
    assert!(errs.contains(&"error: not_a_method failed with code -32601: Method not found"));
    assert!(
        r.stderr.contains("<NQN>"),
        "usage error of add_ns: {}",
        r.stderr
    );
    assert!(r.stderr.contains("--frobnicate"));
    assert!(r.stderr.contains("unterminated ' quote"));
    // Later commands still ran; nothing after `exit` did.
    assert!(r.stdout.contains("\"After\""));
    assert!(!r.stdout.contains("NeverRun"));
    let bdevs = d.ok(&["bdev_get_bdevs"]);
    assert_eq!(bdevs.as_array().unwrap().len(), 1);
    // help: one method's arguments, and the list.
    assert!(
        r.stdout
            .contains("Usage: nvmf_subsystem_add_ns [OPTIONS] <NQN> <BDEV_NAME>")
    );
    assert!(r.stdout.contains("  -n, --nsid <NSID>"));
    assert!(r.stdout.contains("ls [WHAT]"));
    assert!(r.stdout.contains("  nvmf_subsystem_resume"));
}

#[test]
fn dry_run_and_a_missing_target() {
    let dir = common::temp_dir("shell-missing");
    let sock = dir.join("none.sock");
    let r = common::run(
        &["shell", "-s", sock.to_str().unwrap()],
        Some("--dry-run nvmf_subsystem_pause nqn.2016-06.io.spdk:x -n 2\nspdk_get_version\n"),
    );
    assert_eq!(r.code, 1);
    assert!(r.stdout.contains("\"method\": \"nvmf_subsystem_pause\""));
    assert!(r.stdout.contains("\"nsid\": 2"));
    assert!(r.stderr.contains("cannot connect to"), "{}", r.stderr);
}

fn shell_for(d: &Daemon) -> Shell {
    Shell::new(Conn {
        endpoint: Endpoint::Unix(d.sock.clone()),
        timeout: Duration::from_secs(30),
        retries: 0,
    })
}

fn comp(sh: &Shell, line: &str) -> Vec<String> {
    sh.complete(line, line.len()).1
}

#[test]
fn completion_offers_live_names() {
    let d = Daemon::start("complete", &[]);
    d.ok(&["nvmf_create_transport", "-t", "RDMA"]);
    d.ok(&["bdev_malloc_create", "8", "512", "-b", "Malloc0"]);
    d.ok(&["bdev_malloc_create", "8", "512", "-b", "Malloc1"]);
    d.ok(&["nvmf_create_subsystem", NQN]);
    d.ok(&["nvmf_subsystem_add_ns", NQN, "Malloc0"]);
    d.ok(&["nvmf_subsystem_add_host", NQN, HOST]);
    d.ok(&[
        "nvmf_subsystem_add_listener",
        NQN,
        "-t",
        "rdma",
        "-a",
        "10.0.0.1",
        "-s",
        "4420",
    ]);

    let sh = shell_for(&d);
    assert_eq!(comp(&sh, "nvmf_subsystem_add_ns nqn.2016"), vec![NQN]);
    assert_eq!(
        comp(&sh, &format!("nvmf_subsystem_add_ns {NQN} ")),
        vec!["Malloc1"],
        "only bdevs no namespace holds"
    );
    assert_eq!(
        comp(&sh, "bdev_malloc_delete Mall"),
        vec!["Malloc0", "Malloc1"]
    );
    assert_eq!(
        comp(&sh, &format!("nvmf_subsystem_remove_host {NQN} ")),
        vec![HOST]
    );
    assert_eq!(
        comp(&sh, &format!("nvmf_subsystem_remove_ns {NQN} ")),
        vec!["1"]
    );
    assert_eq!(comp(&sh, "nvmf_get_transports --trtype "), vec!["RDMA"]);
    assert_eq!(
        comp(
            &sh,
            &format!("nvmf_subsystem_remove_listener {NQN} -t rdma -a ")
        ),
        vec!["10.0.0.1"]
    );
    assert_eq!(
        comp(
            &sh,
            &format!("nvmf_subsystem_remove_listener {NQN} -t rdma -a 10.0.0.1 -s ")
        ),
        vec!["4420"]
    );
    assert!(comp(&sh, "ls ").contains(&NQN.to_string()));
    assert_eq!(
        comp(&sh, "nvmf_create_subsystem x --allow-a"),
        vec!["--allow-any-host"]
    );

    // A command run in the shell drops the cached names, so new objects complete at once.
    let mut out = Vec::new();
    let mut err = Vec::new();
    assert_eq!(
        sh.execute("bdev_null_create Null9 8 512", &mut out, &mut err),
        Next::Continue { ok: true }
    );
    assert_eq!(comp(&sh, "bdev_null_delete "), vec!["Null9"]);

    // A target that is gone leaves table completion working.
    drop(d);
    let sh2 = Shell::new(Conn {
        endpoint: Endpoint::Unix("/nonexistent/rtgt.sock".into()),
        timeout: Duration::from_secs(1),
        retries: 0,
    });
    assert_eq!(
        comp(&sh2, "nvmf_subsystem_res"),
        vec!["nvmf_subsystem_resume"]
    );
    assert!(comp(&sh2, "nvmf_subsystem_add_ns ").is_empty());
}
