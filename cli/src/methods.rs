//! The command lines `rtgt rpc`, `rtgt shell` (parsing, `help`, completion) and the bash/zsh
//! completion scripts are built from ([`crate::args`]): every method's spec, as the server
//! declares it ([`rpc::methods::specs::all`]: the rpc crate's methods, the bdev modules'
//! methods, the transports' options and attributes), and rpc.py's client-side configuration
//! commands ([`CLIENT_COMMANDS`]).

use rpc_spec::ValueKind::*;
pub use rpc_spec::{Action, ArgSpec, At, Complete, MethodSpec, ValueKind};
use rpc_spec::{action, l, m, o};

/// The discovery subsystem's NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// rpc.py's client-side configuration commands (they run several calls, or none).
#[rustfmt::skip]
pub const CLIENT_COMMANDS: &[MethodSpec] = &[
    // ----- configuration (client side) -----
    action(m("save_config", "Write the live configuration to stdout", &[
        o('i', "indent", "indent", Int, "Indent level; below 0 means compact (default 2)"),
        o('s', "subsystems", "subsystems", Str, "Comma-separated subsystems (with their dependencies) to save").comp(Complete::FwSubsystem),
        l("with-batches", "with_batches", Toggle(Some(false)), "Keep batch arrays in the output"),
    ]), Action::SaveConfig),
    action(m("load_config", "Configure the target from a saved configuration", &[
        o('i', "include-aliases", "include_aliases", Flag, "Include RPC aliases"),
        o('j', "json-conf", "json_conf", Str, "Configuration file (default stdin) or JSON text").comp(Complete::File),
    ]), Action::LoadConfig),
    action(m("save_subsystem_config", "Write one subsystem's live configuration to stdout", &[
        o('i', "indent", "indent", Int, "Indent level; below 0 means compact (default 2)"),
        o('n', "name", "name", Str, "Name of the subsystem").req().comp(Complete::FwSubsystem),
        l("with-batches", "with_batches", Toggle(Some(false)), "Keep batch arrays in the output"),
    ]), Action::SaveSubsystemConfig),
    action(m("load_subsystem_config", "Configure one subsystem from its saved configuration", &[
        o('j', "json-conf", "json_conf", Str, "Configuration file (default stdin) or JSON text").comp(Complete::File),
    ]), Action::LoadSubsystemConfig),
];

/// Every method's command line: the server's methods, then [`CLIENT_COMMANDS`].
pub fn all() -> impl Iterator<Item = &'static MethodSpec> {
    rpc::methods::specs::all().iter().chain(CLIENT_COMMANDS)
}

/// The spec of `name`.
pub fn find(name: &str) -> Option<&'static MethodSpec> {
    all().find(|m| m.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn the_table_is_consistent() {
        let mut names = HashSet::new();
        for s in all() {
            assert!(names.insert(s.name), "{} twice", s.name);
            let mut keys = HashSet::new();
            let mut shorts = HashSet::new();
            let mut longs = HashSet::new();
            for a in s.args {
                assert!(keys.insert(a.key), "{}: key {} twice", s.name, a.key);
                if let Some(c) = a.short() {
                    assert!(shorts.insert(c), "{}: -{c} twice", s.name);
                    assert!(c != 'h', "{}: -h is help", s.name);
                }
                if let Some(l) = a.long() {
                    assert!(longs.insert(l), "{}: --{l} twice", s.name);
                }
                if let SizeMib { block_size, .. } = a.kind {
                    assert!(s.args.iter().any(|b| b.key == block_size));
                }
                if let Some(c) = a.conflicts {
                    assert!(
                        s.args.iter().any(|b| b.key == c),
                        "{}: conflicts {c}",
                        s.name
                    );
                }
            }
            // Positions are 0..n without gaps; required ones come first.
            let pos = s.positionals();
            for (i, p) in pos.iter().enumerate() {
                assert_eq!(p.at, At::Pos(i), "{}: positions", s.name);
                if i > 0 && p.required {
                    assert!(pos[i - 1].required, "{}: optional before required", s.name);
                }
            }
            if let Some((_, grouped)) = s.group {
                for k in grouped {
                    assert!(keys.contains(k), "{}: grouped {k} missing", s.name);
                }
            }
        }
        assert!(find("nvmf_create_transport").is_some());
        assert!(find("nvmf_frobnicate").is_none());
    }

    /// The Python package builds `rtgt-rpc` from this file; regenerate it with
    /// `RTGT_UPDATE_METHODS_JSON=1 cargo test -p rtgt methods_json`.
    #[test]
    fn methods_json_is_current() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../python/src/rtgt/methods.json"
        );
        let specs: Vec<&MethodSpec> = all().collect();
        let mut text = serde_json::to_string_pretty(&rpc_spec::describe(&specs)).unwrap();
        text.push('\n');
        if std::env::var_os("RTGT_UPDATE_METHODS_JSON").is_some() {
            std::fs::write(path, &text).unwrap();
        }
        let committed = std::fs::read_to_string(path).unwrap_or_default();
        assert!(
            committed == text,
            "python/src/rtgt/methods.json is stale: regenerate it with \
             RTGT_UPDATE_METHODS_JSON=1 cargo test -p rtgt methods_json"
        );
    }

    #[test]
    fn options_are_found_by_short_and_long_name() {
        let s = find("nvmf_subsystem_allow_any_host").unwrap();
        assert_eq!(s.option("--allow-any-host").unwrap().key, "allow_any_host");
        assert_eq!(
            s.option("--no-allow-any-host").unwrap().key,
            "allow_any_host"
        );
        let t = find("nvmf_create_transport").unwrap();
        assert_eq!(t.option("-u").unwrap().key, "io_unit_size");
        assert_eq!(t.option("--io-unit-size=8192").unwrap().key, "io_unit_size");
        assert!(t.option("-Z").is_none());
    }
}
