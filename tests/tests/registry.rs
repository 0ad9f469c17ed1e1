//! A transport registered from a crate other than target-core is found by the registry.

use std::sync::Arc;

use serde_json::json;
use target_core::register_transport;
use target_core::registry::{
    self, CreateResult, Transport, TransportContext, TransportError, TransportOps, TransportParams,
    TransportPollGroup,
};
use target_core::target::{ListenAddr, PgCore};

struct Loopback;

impl Transport for Loopback {
    fn name(&self) -> &'static str {
        "LOOPBACK"
    }
    fn dump_opts(&self) -> TransportParams {
        let mut m = TransportParams::new();
        m.insert("trtype".into(), json!("LOOPBACK"));
        m
    }
    fn listen(&self, _addr: &ListenAddr) -> Result<(), TransportError> {
        Ok(())
    }
    fn stop_listen(&self, _addr: &ListenAddr) -> Result<(), TransportError> {
        Ok(())
    }
    fn poll_group_create(
        &self,
        _core: &mut PgCore,
    ) -> Result<Box<dyn TransportPollGroup>, TransportError> {
        Err(TransportError::Other("not needed by this test".into()))
    }
    fn destroy(&self) {}
}

fn defaults() -> TransportParams {
    let mut m = TransportParams::new();
    m.insert("max_queue_depth".into(), json!(64));
    m
}

fn create(_ctx: TransportContext, _p: &TransportParams) -> CreateResult {
    Ok(Arc::new(Loopback))
}

register_transport!(
    LOOPBACK = TransportOps {
        name: "LOOPBACK",
        description: "a transport defined outside target-core",
        defaults,
        create,
    }
);

#[test]
fn a_transport_from_another_crate_is_registered_and_found() {
    let ops = registry::find("loopback").expect("found case-insensitively");
    assert_eq!(ops.name, "LOOPBACK");
    assert_eq!((ops.defaults)()["max_queue_depth"], 64);
    assert!(registry::find("LoopBack").is_some());
    assert!(registry::find("nonexistent").is_none());
    let names: Vec<&str> = registry::list().iter().map(|o| o.name).collect();
    assert!(names.contains(&"LOOPBACK"), "{names:?}");
    let mut sorted = names.clone();
    sorted.sort_unstable();
    assert_eq!(names, sorted, "the listing is sorted by name");
}
