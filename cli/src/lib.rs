//! The `rtgt` command's client side: `rtgt rpc`, `rtgt shell` and `rtgt completions`.
//!
//! * [`client`]: a blocking JSON-RPC client with SPDK's framing (Unix socket or TCP).
//! * [`methods`]: the command line of every method rtgt implements, as rpc.py spells it: the
//!   server's method specs (`rpc::methods::specs`) and rpc.py's client-side commands, which
//!   `rtgt rpc`, the shell and the completion scripts are built from.
//! * [`args`]: clap commands from the table, and the request a command line produces.
//! * [`exec`]: running a call or a client-side command (`save_config`, `load_config`), output
//!   and one-line errors.
//! * [`cmd`]: `rtgt rpc` and `rtgt completions`.
//! * [`shell`]: `rtgt shell` (rustyline, completion with live names, `ls`).
//! * [`top`]: `rtgt top`, a live view of IOPS, latency, hosts and reactor load.
//!
//! The daemon (`rtgt serve`) lives in the binary.

// The command lines offer what the binary links: the bdev modules' methods and the transports'
// options and attributes come from these crates' registrations.
use bdev_rbd as _;
use transport_rdma as _;
use transport_srp as _;
use transport_tcp as _;

pub mod args;
pub mod client;
pub mod cmd;
pub mod exec;
pub mod methods;
pub mod shell;
pub mod top;
