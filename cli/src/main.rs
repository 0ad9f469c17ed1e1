//! The `rtgt` binary: daemon, JSON-RPC client and interactive shell.

fn main() {}
