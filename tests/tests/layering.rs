//! The crates' arrows point down (docs/architecture.md): binary → rpc → core ← transports →
//! rdma-plumbing → fabric → iobuf. This test reads every workspace member's manifest and fails
//! when a crate depends on a workspace crate its layer may not see — above all, when the core
//! would link a wire (`fabric`, a transport) or the RPC layer.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Which workspace crates each crate may depend on (normal and build dependencies; dev
/// dependencies are free). `None`: any (the binary and the test/bench harnesses sit on top).
fn allowed() -> BTreeMap<&'static str, Option<&'static [&'static str]>> {
    BTreeMap::from([
        ("iobuf", Some(&[][..])),
        ("rpc-spec", Some(&[][..])),
        ("target-core", Some(&["iobuf", "rpc-spec"][..])),
        ("fabric", Some(&["iobuf"][..])),
        (
            "rdma-plumbing",
            Some(&["iobuf", "fabric", "target-core"][..]),
        ),
        (
            "transport-rdma",
            Some(
                &[
                    "iobuf",
                    "target-core",
                    "rpc-spec",
                    "fabric",
                    "rdma-plumbing",
                ][..],
            ),
        ),
        (
            "transport-srp",
            Some(
                &[
                    "iobuf",
                    "target-core",
                    "rpc-spec",
                    "fabric",
                    "rdma-plumbing",
                ][..],
            ),
        ),
        (
            "transport-tcp",
            Some(&["iobuf", "target-core", "rpc-spec"][..]),
        ),
        ("bdev-rbd", Some(&["iobuf", "target-core", "rpc-spec"][..])),
        ("rpc", Some(&["iobuf", "target-core", "rpc-spec"][..])),
        ("rtgt", None),
        ("rtgt-tests", None),
        ("rtgt-bench", None),
    ])
}

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ sits in the workspace")
        .to_path_buf()
}

/// The `members = [...]` list of the workspace manifest.
fn members(root: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(root.join("Cargo.toml")).expect("workspace Cargo.toml");
    let start = text.find("members").expect("members list");
    let list = &text[start..];
    let list = &list[list.find('[').unwrap() + 1..list.find(']').unwrap()];
    list.split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The package name and the dependency names of `[dependencies]` and `[build-dependencies]`.
fn manifest(dir: &Path) -> (String, Vec<String>) {
    let text = std::fs::read_to_string(dir.join("Cargo.toml")).expect("member Cargo.toml");
    let (mut name, mut deps, mut section) = (String::new(), Vec::new(), String::new());
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_string();
            continue;
        }
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let key: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '-' || *c == '_')
            .collect();
        match section.as_str() {
            "[package]" if key == "name" => {
                name = line.split('"').nth(1).unwrap_or_default().to_string();
            }
            "[dependencies]" | "[build-dependencies]" => deps.push(key),
            _ => {}
        }
    }
    (name, deps)
}

#[test]
fn every_crate_depends_only_on_the_layers_below_it() {
    let root = workspace_root();
    let members = members(&root);
    let packages: Vec<(String, Vec<String>)> =
        members.iter().map(|m| manifest(&root.join(m))).collect();
    let names: Vec<&str> = packages.iter().map(|(n, _)| n.as_str()).collect();
    assert!(
        names.contains(&"target-core") && names.contains(&"fabric"),
        "{names:?}"
    );
    let allowed = allowed();
    let mut wrong = Vec::new();
    for (name, deps) in &packages {
        let Some(rule) = allowed.get(name.as_str()) else {
            wrong.push(format!(
                "{name}: not in the layering table; add it with its layer"
            ));
            continue;
        };
        let Some(rule) = rule else { continue };
        for dep in deps.iter().filter(|d| names.contains(&d.as_str())) {
            if !rule.contains(&dep.as_str()) {
                wrong.push(format!("{name} → {dep}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "arrows that point the wrong way: {wrong:?}"
    );
}

#[test]
fn the_parser_sees_the_core_s_dependencies() {
    // The check above is only as good as the manifest reader: it must find target-core's
    // dependency on iobuf, and fabric's on rdma-sys.
    let root = workspace_root();
    let (name, deps) = manifest(&root.join("target-core"));
    assert_eq!(name, "target-core");
    assert!(deps.iter().any(|d| d == "iobuf"), "{deps:?}");
    let (_, deps) = manifest(&root.join("fabric"));
    assert!(deps.iter().any(|d| d == "rdma-sys"), "{deps:?}");
}
