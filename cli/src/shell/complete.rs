//! Tab completion for `rtgt shell`: builtins and method names, each method's options, and the
//! values of arguments: choices from the method table, and live names (NQNs, bdevs,
//! transports, hosts and namespaces of the subsystem on the line, keys, listener addresses)
//! from a [`Snapshot`] of the target.
//!
//! [`complete`] is a pure function of the line and the snapshot; the shell refreshes the
//! snapshot (at most every two seconds) before calling it.

use crate::methods::{self, ArgSpec, Complete, DISCOVERY_NQN, MethodSpec, ValueKind};
use crate::shell::snapshot::Snapshot;
use crate::shell::words::split_partial;

/// The shell's own commands.
pub const BUILTINS: &[&str] = &["exit", "help", "ls", "quit"];

/// Options that go before the method, as in `rtgt rpc`.
pub const CALL_OPTIONS: &[&str] = &["--dry-run", "--params"];

/// What `ls` takes besides an NQN.
pub const LS_PARTS: &[&str] = &["bdevs", "subsystems", "transports"];

/// Transport types rtgt can create: the names of the transports the binary links (each
/// registers itself with `register_transport!`), so a new transport crate completes without
/// a change here.
pub fn transport_kinds() -> Vec<String> {
    target_core::registry::list()
        .iter()
        .map(|t| t.name.to_string())
        .collect()
}

/// The word being completed starts at the returned offset; the candidates replace it.
pub fn complete(line: &str, pos: usize, snap: &Snapshot) -> (usize, Vec<String>) {
    let head = line.get(..pos).unwrap_or(line);
    let (mut words, open) = split_partial(head);
    let ends_in_blank = open.is_none() && head.ends_with(|c: char| c.is_whitespace());
    let (start, current) = if ends_in_blank || words.is_empty() {
        (pos, String::new())
    } else {
        let w = words.pop().unwrap_or_default();
        (w.start, w.text)
    };
    let prev: Vec<String> = words.into_iter().map(|w| w.text).collect();
    let mut cands = candidates(&prev, &current, snap);
    cands.retain(|c| c.starts_with(current.as_str()));
    cands.sort();
    cands.dedup();
    (start, cands)
}

fn first_word(current: &str) -> Vec<String> {
    let mut v: Vec<String> = BUILTINS.iter().map(|s| s.to_string()).collect();
    v.extend(methods::all().map(|m| m.name.to_string()));
    if current.starts_with('-') {
        v.extend(CALL_OPTIONS.iter().map(|s| s.to_string()));
    }
    v
}

fn candidates(prev: &[String], current: &str, snap: &Snapshot) -> Vec<String> {
    // Skip `--params JSON` and `--dry-run` before the method.
    let mut k = 0;
    while let Some(w) = prev.get(k) {
        match w.as_str() {
            "--params" => {
                if k + 1 == prev.len() {
                    return Vec::new(); // completing the JSON
                }
                k += 2;
            }
            w if w.starts_with("--params=") || w == "--dry-run" => k += 1,
            _ => break,
        }
    }
    let Some(method) = prev.get(k) else {
        return first_word(current);
    };
    let rest = &prev[k + 1..];
    match method.as_str() {
        "help" if rest.is_empty() => {
            return methods::all().map(|m| m.name.to_string()).collect();
        }
        "ls" if rest.is_empty() => {
            let mut v: Vec<String> = LS_PARTS.iter().map(|s| s.to_string()).collect();
            v.extend(snap.nqns());
            return v;
        }
        _ => {}
    }
    match methods::find(method) {
        Some(spec) => method_candidates(spec, rest, current, snap),
        None => Vec::new(),
    }
}

/// What the words after the method say: positional values, options used, and the option
/// waiting for its value.
struct Parsed {
    positionals: Vec<String>,
    used: Vec<&'static str>,
    pending: Option<&'static ArgSpec>,
}

fn parse_rest(spec: &MethodSpec, rest: &[String]) -> Parsed {
    let mut p = Parsed {
        positionals: Vec::new(),
        used: Vec::new(),
        pending: None,
    };
    for w in rest {
        if let Some(a) = p.pending.take() {
            let _ = a; // `w` is its value
            continue;
        }
        let flag = spec
            .aliases
            .iter()
            .find(|(from, _)| from == w)
            .map(|(_, to)| *to)
            .unwrap_or(w.as_str());
        if flag.starts_with('-') && flag.len() > 1 && flag.parse::<f64>().is_err() {
            if let Some(a) = spec.option(flag) {
                p.used.push(a.key);
                let inline = flag.starts_with("--") && flag.contains('=')
                    || (!flag.starts_with("--") && flag.len() > 2);
                if a.kind.takes_value() && !inline {
                    p.pending = Some(a);
                }
            }
            continue;
        }
        p.positionals.push(w.clone());
    }
    p
}

fn option_names(spec: &MethodSpec, used: &[&str]) -> Vec<String> {
    let mut v = vec!["--help".to_string()];
    for a in spec.args.iter().filter(|a| !a.is_positional()) {
        if used.contains(&a.key) {
            continue;
        }
        if let Some(l) = a.long() {
            v.push(format!("--{l}"));
            if matches!(a.kind, ValueKind::Toggle(_)) {
                v.push(format!("--no-{l}"));
            }
        }
        if let Some(c) = a.short() {
            v.push(format!("-{c}"));
        }
    }
    v
}

fn method_candidates(
    spec: &MethodSpec,
    rest: &[String],
    current: &str,
    snap: &Snapshot,
) -> Vec<String> {
    let p = parse_rest(spec, rest);
    // The subsystem the line is about, for hosts, namespaces and listeners.
    let nqn = spec
        .positionals()
        .first()
        .filter(|a| a.key == "nqn")
        .and_then(|_| p.positionals.first())
        .map(|n| {
            if spec.discovery_alias && n == "discovery" {
                DISCOVERY_NQN.to_string()
            } else {
                n.clone()
            }
        });
    if let Some(a) = p.pending {
        return values(a, nqn.as_deref(), current, snap);
    }
    if current.starts_with('-') {
        return option_names(spec, &p.used);
    }
    match spec.positionals().get(p.positionals.len()) {
        Some(a) => values(a, nqn.as_deref(), current, snap),
        None if current.is_empty() => option_names(spec, &p.used),
        None => Vec::new(),
    }
}

/// The values that complete argument `a`.
fn values(a: &ArgSpec, nqn: Option<&str>, current: &str, snap: &Snapshot) -> Vec<String> {
    let live = match a.complete {
        Complete::None => Vec::new(),
        Complete::Nqn => snap.nqns(),
        Complete::Bdev => snap.bdev_names(None, false),
        Complete::FreeBdev => snap.bdev_names(None, true),
        Complete::BdevOf(p) => snap.bdev_names(Some(p), false),
        Complete::Transport => snap.trtypes(),
        Complete::TransportKind => transport_kinds(),
        Complete::Host => nqn.map(|n| snap.hosts(n)).unwrap_or_default(),
        Complete::Nsid => nqn.map(|n| snap.nsids(n)).unwrap_or_default(),
        Complete::Traddr | Complete::Trsvcid => {
            let key = if a.complete == Complete::Traddr {
                "traddr"
            } else {
                "trsvcid"
            };
            snap.listeners(nqn)
                .iter()
                .filter_map(|l| l[key].as_str().map(str::to_string))
                .collect()
        }
        Complete::Key => snap.key_names(),
        Complete::FwSubsystem => rpc::methods::framework::SUBSYSTEMS
            .iter()
            .map(|(n, _)| n.to_string())
            .collect(),
        Complete::File => files(current),
    };
    if !live.is_empty() || a.complete != Complete::None {
        return live;
    }
    match a.kind {
        ValueKind::Choice(c) => c.iter().map(|s| s.to_string()).collect(),
        ValueKind::IntIn(lo, hi) => (lo..=hi).map(|n| n.to_string()).collect(),
        ValueKind::ListOf(names) | ValueKind::FlagSet(names) => {
            // Complete the last element of a comma list.
            let (done, _) = current.rsplit_once(',').unwrap_or(("", current));
            let prefix = if done.is_empty() {
                String::new()
            } else {
                format!("{done},")
            };
            let have: Vec<&str> = done.split(',').collect();
            let mut v: Vec<String> = names
                .iter()
                .filter(|n| !have.contains(n))
                .map(|n| format!("{prefix}{n}"))
                .collect();
            if done.is_empty() {
                v.push("all".into());
            }
            v
        }
        _ => Vec::new(),
    }
}

/// File names that extend `current` (directories end in `/`).
fn files(current: &str) -> Vec<String> {
    let (dir, base) = match current.rfind('/') {
        Some(i) => (&current[..=i], &current[i + 1..]),
        None => ("", current),
    };
    let read = if dir.is_empty() { "." } else { dir };
    let Ok(entries) = std::fs::read_dir(read) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with(base) || (name.starts_with('.') && !base.starts_with('.')) {
                return None;
            }
            let slash = if e.path().is_dir() { "/" } else { "" };
            Some(format!("{dir}{name}{slash}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap() -> Snapshot {
        Snapshot {
            bdevs: vec![
                json!({"name": "Malloc0", "product_name": "Malloc disk", "claimed": true}),
                json!({"name": "Malloc1", "product_name": "Malloc disk", "claimed": false}),
                json!({"name": "Null0", "product_name": "Null disk", "claimed": false}),
            ],
            transports: vec![json!({"trtype": "RDMA"})],
            subsystems: vec![
                json!({"nqn": DISCOVERY_NQN, "listen_addresses": []}),
                json!({"nqn": "nqn.2016-06.io.spdk:cnode1",
                       "listen_addresses": [{"traddr": "10.0.0.1", "trsvcid": "4420"}],
                       "hosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:h1"}],
                       "namespaces": [{"nsid": 1}, {"nsid": 3}]}),
            ],
            keys: vec![json!({"name": "k1"})],
            connections: Vec::new(),
        }
    }

    fn c(line: &str) -> Vec<String> {
        complete(line, line.len(), &snap()).1
    }

    #[test]
    fn first_words_are_builtins_and_methods() {
        assert_eq!(
            c("nvmf_subsystem_add_l"),
            vec!["nvmf_subsystem_add_listener"]
        );
        assert_eq!(
            c("l"),
            vec![
                "load_config",
                "load_subsystem_config",
                "log_clear_flag",
                "log_get_flags",
                "log_get_level",
                "log_get_print_level",
                "log_set_flag",
                "log_set_level",
                "log_set_print_level",
                "ls"
            ]
        );
        assert_eq!(c("--d"), vec!["--dry-run"]);
        assert_eq!(c("--dry-run bdev_malloc_d"), vec!["bdev_malloc_delete"]);
        assert!(c("--params ").is_empty());
        assert_eq!(c("help nvmf_subsystem_p"), vec!["nvmf_subsystem_pause"]);
        assert_eq!(complete("bdev_g", 6, &snap()).0, 0);
    }

    #[test]
    fn delay_bdevs_complete_their_methods() {
        let mut s = snap();
        s.bdevs
            .push(json!({"name": "Delay0", "product_name": "delay", "claimed": false}));
        let c = |line: &str| complete(line, line.len(), &s).1;
        assert_eq!(c("bdev_delay_delete "), vec!["Delay0"]);
        assert_eq!(c("bdev_delay_update_latency "), vec!["Delay0"]);
        assert_eq!(
            c("bdev_delay_update_latency Delay0 p99"),
            vec!["p99_read", "p99_write"]
        );
        // The base: any bdev nothing claims.
        assert_eq!(
            c("bdev_delay_create -b "),
            vec!["Delay0", "Malloc1", "Null0"]
        );
    }

    #[test]
    fn live_names_complete_arguments() {
        assert_eq!(
            c("nvmf_subsystem_add_ns nqn.2016"),
            vec!["nqn.2016-06.io.spdk:cnode1"]
        );
        // Only bdevs no namespace claims.
        assert_eq!(
            c("nvmf_subsystem_add_ns nqn.2016-06.io.spdk:cnode1 "),
            vec!["Malloc1", "Null0"]
        );
        assert_eq!(c("bdev_malloc_delete "), vec!["Malloc0", "Malloc1"]);
        assert_eq!(c("bdev_null_delete "), vec!["Null0"]);
        assert_eq!(c("bdev_get_bdevs -b N"), vec!["Null0"]);
        // Hosts and namespaces of the subsystem on the line.
        assert_eq!(
            c("nvmf_subsystem_remove_host nqn.2016-06.io.spdk:cnode1 "),
            vec!["nqn.2014-08.org.nvmexpress:uuid:h1"]
        );
        assert_eq!(
            c("nvmf_subsystem_remove_ns nqn.2016-06.io.spdk:cnode1 "),
            vec!["1", "3"]
        );
        assert_eq!(
            c("nvmf_subsystem_pause nqn.2016-06.io.spdk:cnode1 -n "),
            vec!["1", "3"]
        );
        assert_eq!(
            c("nvmf_subsystem_remove_listener nqn.2016-06.io.spdk:cnode1 -t rdma -a "),
            vec!["10.0.0.1"]
        );
        assert_eq!(c("nvmf_subsystem_add_listener nqn.x -t "), vec!["RDMA"]);
        // Every transport the binary links (the registry), whatever they are.
        let linked: Vec<&str> = target_core::registry::list()
            .iter()
            .map(|t| t.name)
            .collect();
        assert_eq!(c("nvmf_create_transport -t "), linked);
        assert!(linked.contains(&"RDMA") && linked.contains(&"SRP"));
        assert_eq!(c("keyring_file_remove_key "), vec!["k1"]);
        assert_eq!(c("framework_get_config nv"), vec!["nvmf"]);
        assert_eq!(
            c("ls "),
            vec![
                "bdevs",
                DISCOVERY_NQN,
                "nqn.2016-06.io.spdk:cnode1",
                "subsystems",
                "transports"
            ]
        );
    }

    #[test]
    fn options_and_choices_complete() {
        assert_eq!(
            c("nvmf_create_subsystem nqn.x --allow"),
            vec!["--allow-any-host"]
        );
        let opts = c("nvmf_subsystem_allow_any_host nqn.x --");
        assert!(opts.contains(&"--allow-any-host".to_string()));
        assert!(opts.contains(&"--no-allow-any-host".to_string()));
        // Options already given are not offered again.
        let opts = c("nvmf_create_transport -t RDMA -u 8192 -");
        assert!(!opts.contains(&"-u".to_string()) && !opts.contains(&"-t".to_string()));
        assert!(opts.contains(&"-q".to_string()));
        // With every positional given, a blank offers the options.
        assert!(c("bdev_malloc_create 64 512 ").contains(&"--name".to_string()));
        assert_eq!(c("log_set_level D"), vec!["DEBUG"]);
        assert_eq!(
            c("nvmf_subsystem_add_listener nqn.x -n in"),
            vec!["inaccessible"]
        );
        assert_eq!(c("bdev_malloc_create 1 512 -t "), vec!["0", "1", "2", "3"]);
        assert_eq!(
            c("nvmf_set_config -p identify_ctrlr,get_l"),
            vec!["identify_ctrlr,get_log_page"]
        );
        assert_eq!(c("nvmf_set_crdt -t1 5 --crdt"), vec!["--crdt2", "--crdt3"]);
        // An option's value is not mistaken for a positional.
        assert_eq!(
            c("nvmf_subsystem_add_ns -t nvmf_tgt nqn.2016-06.io.spdk:cnode1 M"),
            vec!["Malloc1"]
        );
    }

    #[test]
    fn files_complete() {
        let dir = std::env::temp_dir().join(format!("rtgt-complete-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::write(dir.join("config.json"), "{}").unwrap();
        let base = format!("{}/", dir.display());
        let got = c(&format!("load_config -j {base}"));
        assert_eq!(
            got,
            vec![format!("{base}config.json"), format!("{base}sub/")]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
