//! One method spec: the server's methods, their parameter structs and their specs
//! (`rpc::methods::specs`, from which the rpc decoder checks requests and the command lines are
//! built) must agree. Each assertion here fails when a method, a parameter or a type is
//! declared in one place and not the other.

use std::collections::BTreeSet;

use rpc::methods::specs;
use rpc_spec::JsonType;
use rtgt_tests::rpc_rig::Rig;
use target_core::registry;

// The bdev modules and transports the binary links.
use bdev_rbd as _;

fn top_level_keys(name: &str) -> BTreeSet<&'static str> {
    let spec = specs::find(name).unwrap_or_else(|| panic!("{name} has no spec"));
    rpc::request_check::request_params(spec)
        .0
        .iter()
        .map(|p| p.name)
        .collect()
}

#[test]
fn every_served_method_has_a_spec_and_every_spec_is_served() {
    let r = Rig::runtime();
    let served: BTreeSet<&str> = r
        .table
        .methods()
        .iter()
        .filter(|m| m.alias_of.is_none())
        .map(|m| m.name)
        .collect();
    let declared: BTreeSet<&str> = specs::all().iter().map(|s| s.name).collect();
    let unspecified: Vec<_> = served.difference(&declared).collect();
    assert!(
        unspecified.is_empty(),
        "served without a spec: {unspecified:?}"
    );
    // The other direction needs the daemon's hooks (log_*, spdk_kill_instance): the CLI's
    // test against a running daemon checks it (cli/tests/rpc_cli.rs).
    assert!(declared.len() >= served.len(), "{declared:?}");
}

#[test]
fn parameter_structs_and_specs_declare_the_same_keys() {
    let _r = Rig::runtime();
    let mut recorded = rpc::request_check::recorded_fields();
    recorded.extend(target_core::bdev::module::methods().map(|(_, f)| (f.spec.name, (f.fields)())));
    assert!(recorded.len() > 20, "{recorded:?}");
    let mut mismatches = Vec::new();
    for (name, fields) in recorded {
        let Some(fields) = fields else { continue };
        let fields: BTreeSet<&str> = fields.into_iter().collect();
        let keys = top_level_keys(name);
        // A transport attribute is a key of the spec (added from the transports'
        // declarations) that the parameter struct leaves to the transport.
        let attrs: BTreeSet<&str> = registry::list()
            .iter()
            .flat_map(|t| t.subsystem_attrs.iter().chain(t.listener_attrs))
            .map(|a| a.name)
            .chain(rpc::methods::nvmf::SPDK_LISTENER_ATTRS.iter().copied())
            .collect();
        let keys: BTreeSet<&str> = keys.difference(&attrs).copied().collect();
        if fields != keys {
            mismatches.push(format!(
                "{name}: struct only {:?}, spec only {:?}",
                fields.difference(&keys).collect::<Vec<_>>(),
                keys.difference(&fields).collect::<Vec<_>>()
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// Whether a spec type and a table type can describe the same values.
fn compatible(spec: JsonType, table: JsonType) -> bool {
    spec == table
        || (spec == JsonType::Int && matches!(table, JsonType::Uint(_) | JsonType::I32))
        || matches!((spec, table), (JsonType::Flags(_), JsonType::Object))
}

#[test]
fn transport_option_types_agree_with_the_spec() {
    let spec = rpc::request_check::request_params(specs::find("nvmf_create_transport").unwrap()).0;
    let transports = registry::list();
    let declared = registry::COMMON_TRANSPORT_OPTIONS
        .iter()
        .map(|p| (p.name, p.kind))
        .chain(
            transports
                .iter()
                .flat_map(|t| t.options)
                .map(|a| (a.name, a.kind)),
        );
    for (name, kind) in declared {
        let p = spec
            .iter()
            .find(|p| p.name == name)
            .unwrap_or_else(|| panic!("nvmf_create_transport's spec lacks {name}"));
        assert!(
            compatible(p.kind, kind),
            "{name}: spec {:?}, declared {kind:?}",
            p.kind
        );
    }
}
