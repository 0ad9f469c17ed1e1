//! The `rtgt` binary.
//!
//! `rtgt serve` runs the target daemon (see [`serve`]). The command line is a set of clap
//! subcommands so that further tools (a JSON-RPC client, an interactive shell) slot in as
//! siblings of `serve`.

mod log;
mod serve;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

// The daemon links every transport so that `register_transport!` entries reach the registry.
use transport_rdma as _;
use transport_srp as _;

/// rtgt: an NVMe-oF/RDMA and SRP storage target driven by SPDK-compatible JSON-RPC.
#[derive(Debug, Parser)]
#[command(name = "rtgt", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the target: reactors, transports, and the JSON-RPC server (SPDK's nvmf_tgt).
    Serve(serve::ServeArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Serve(args) => serve::run(args),
    }
}
