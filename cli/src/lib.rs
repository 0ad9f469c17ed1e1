//! The `rtgt` command's client side: `rtgt rpc`, `rtgt shell` and `rtgt completions`.
//!
//! * [`client`]: a blocking JSON-RPC client with SPDK's framing (Unix socket or TCP).
//! * [`methods`]: the command line of every method rtgt implements, as rpc.py spells it — one
//!   table that `rtgt rpc`, the shell and the completion scripts are built from.
//! * [`args`]: clap commands from the table, and the request a command line produces.
//! * [`exec`]: running a call or a client-side command (`save_config`, `load_config`), output
//!   and one-line errors.
//! * [`cmd`]: `rtgt rpc` and `rtgt completions`.
//! * [`shell`]: `rtgt shell` (rustyline, completion with live names, `ls`).
//!
//! The daemon (`rtgt serve`) lives in the binary.

pub mod args;
pub mod client;
pub mod cmd;
pub mod exec;
pub mod methods;
pub mod shell;
