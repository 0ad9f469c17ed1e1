//! The storage methods of the `rpc` crate over an in-process target on the simulated fabric,
//! called as the daemon's RPC server would call them (no socket in between).

use std::sync::Arc;

use rpc::methods::TargetContext;
use rpc::{CoreHooks, MethodTable, Methods, RpcError, RpcState, StateHandle};
use serde_json::{Value, json};

use crate::TestTarget;

/// A target with the daemon's method table.
pub struct Rig {
    /// The target.
    pub tt: TestTarget,
    /// Every method the daemon registers (core methods without hooks).
    pub table: MethodTable,
    /// The RPC state (STARTUP / RUNTIME).
    pub state: StateHandle,
}

impl Rig {
    /// A rig in the `initial` RPC state, with two reactors.
    pub fn new(initial: RpcState) -> Self {
        Self::on(TestTarget::start(2), initial)
    }

    /// A rig over a target already started (one with its own reactor configuration or network).
    pub fn on(tt: TestTarget, initial: RpcState) -> Self {
        let state = StateHandle::new(initial);
        let ctx = Arc::new(TargetContext::new(Arc::clone(&tt.target)));
        let mut m = Methods::from_arc(ctx, state.clone());
        m.register_core(CoreHooks::new()).expect("core methods");
        rpc::methods::register(&mut m).expect("storage methods");
        Self {
            tt,
            table: m.build(),
            state,
        }
    }

    /// A rig in the RUNTIME state.
    pub fn runtime() -> Self {
        Self::new(RpcState::Runtime)
    }

    /// Calls `method` (`Value::Null`: no params).
    pub fn call(&self, method: &str, params: Value) -> Result<Value, RpcError> {
        let text = (!params.is_null()).then(|| params.to_string());
        let raw = self
            .tt
            .rt
            .block_on(self.table.call(method, text.as_deref()))?;
        Ok(serde_json::from_str(raw.get()).expect("result is JSON"))
    }

    /// Calls `method`, which must succeed.
    pub fn ok(&self, method: &str, params: Value) -> Value {
        self.call(method, params.clone())
            .unwrap_or_else(|e| panic!("{method} {params}: {e}"))
    }

    /// Calls `method`, which must fail.
    pub fn err(&self, method: &str, params: Value) -> RpcError {
        match self.call(method, params.clone()) {
            Ok(v) => panic!("{method} {params} succeeded: {v}"),
            Err(e) => e,
        }
    }

    /// rpc.py's save_config: framework_get_subsystems, then framework_get_config of each.
    pub fn save(&self) -> Value {
        let subs = self.ok("framework_get_subsystems", Value::Null);
        let list: Vec<Value> = subs
            .as_array()
            .unwrap()
            .iter()
            .map(|s| {
                let name = s["subsystem"].as_str().unwrap();
                json!({"subsystem": name, "config":
                    self.ok("framework_get_config", json!({"name": name, "with_batches": false}))})
            })
            .collect();
        json!({ "subsystems": list })
    }

    /// A 1 MiB malloc bdev.
    pub fn malloc(&self, name: &str) {
        self.ok(
            "bdev_malloc_create",
            json!({"num_blocks": 2048, "block_size": 512, "name": name}),
        );
    }

    /// A subsystem that allows any host.
    pub fn subsystem(&self, nqn: &str) {
        self.ok(
            "nvmf_create_subsystem",
            json!({"nqn": nqn, "allow_any_host": true, "serial_number": "SPDK00000000000001",
                   "model_number": "SPDK_Controller1"}),
        );
    }
}

/// Asserts an error's code and that its message contains `needle`.
pub fn assert_code(e: &RpcError, code: i32, needle: &str) {
    assert_eq!(e.code, code, "{e}");
    assert!(
        e.message.contains(needle),
        "message '{}' lacks '{needle}'",
        e.message
    );
}

/// The `config` array of subsystem `name` in a saved configuration ([`Rig::save`]'s shape).
pub fn saved_section(saved: &Value, name: &str) -> Vec<Value> {
    saved["subsystems"]
        .as_array()
        .expect("a saved configuration has a subsystems array")
        .iter()
        .find(|s| s["subsystem"] == name)
        .unwrap_or_else(|| panic!("no {name} section in {saved}"))["config"]
        .as_array()
        .unwrap_or_else(|| panic!("the {name} section has no config array"))
        .clone()
}
