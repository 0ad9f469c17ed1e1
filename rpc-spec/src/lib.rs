//! The spec of rtgt's RPC methods: what each method's parameters are (their JSON types) and
//! how the command lines spell them (rpc.py's positional order, short and long options, value
//! conversions). It is declared once, here or next to the code that implements the method (a
//! transport's options and attributes, a bdev module's methods), and everything else is
//! derived from it:
//!
//! * the rpc crate checks every request's parameters against it before decoding them;
//! * `rtgt rpc` and `rtgt shell` build their parsers, help and completion from it;
//! * the Python package's `rtgt-rpc` reads `methods.json`, generated from it (a test fails
//!   when the committed file is stale).
//!
//! This crate is a leaf (it depends on `serde_json` only), so that target-core, the transports
//! and the bdev modules can declare their parts without depending on the rpc crate.

mod describe;
mod fields;
mod method;
mod param;

pub use describe::describe;
pub use fields::struct_fields;

pub use method::{
    Action, ArgSpec, At, Complete, MethodSpec, Prints, ValueKind, action, aliased, discovery,
    grouped, key, l, m, o, pos, pos_opt, prints,
};
pub use param::{JsonType, Param, check_params, kind_ok, opt, req};
