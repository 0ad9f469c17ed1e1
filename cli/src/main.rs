//! The `rtgt` binary.
//!
//! `rtgt serve` runs the target daemon (see [`serve`]). `rtgt rpc` calls one JSON-RPC method
//! with rpc.py's command line, `rtgt shell` is an interactive shell over the same commands,
//! `rtgt top` is a live view of the target's load, and `rtgt completions bash|zsh` prints
//! completion scripts (the client side lives in the `rtgt` library: [`rtgt::cmd`],
//! [`rtgt::shell`], [`rtgt::top`]).

mod config_store;
mod log;
mod metrics;
mod sd_notify;
mod serve;

use std::process::ExitCode;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

// The daemon links every transport and bdev module crate so that their `register_transport!`
// and `register_bdev_module!` entries reach the registries.
use bdev_rbd as _;
use transport_rdma as _;
use transport_srp as _;
use transport_tcp as _;

/// rtgt: an NVMe-oF/RDMA and SRP storage target driven by SPDK-compatible JSON-RPC.
#[derive(Debug, Parser)]
#[command(name = "rtgt", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Shells `rtgt completions` writes scripts for.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum CompletionShell {
    Bash,
    Zsh,
}

const RPC_ABOUT: &str = "Call a JSON-RPC method, with SPDK rpc.py's command line";

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the target: reactors, transports, and the JSON-RPC server (SPDK's nvmf_tgt).
    Serve(Box<serve::ServeArgs>),
    /// Call a JSON-RPC method, with SPDK rpc.py's command line.
    Rpc(rtgt::cmd::RpcArgs),
    /// Interactive shell: methods with completion of names, `ls` tree, history.
    Shell(rtgt::shell::ShellArgs),
    /// Live view of IOPS, MiB/s, latency and hosts per namespace and subsystem, and reactor load.
    Top(rtgt::top::TopArgs),
    /// Print a completion script (e.g. `rtgt completions bash > /etc/bash_completion.d/rtgt`).
    Completions {
        /// The shell.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
}

fn main() -> ExitCode {
    let cmd = Cli::command().mut_subcommand("rpc", |c| c.after_help(rtgt::cmd::methods_help()));
    let cli = match Cli::from_arg_matches(&cmd.get_matches()) {
        Ok(c) => c,
        Err(e) => e.exit(),
    };
    match cli.command {
        Command::Serve(args) => serve::run(*args),
        Command::Rpc(args) => rtgt::cmd::run_rpc(args),
        Command::Shell(args) => rtgt::shell::run(args),
        Command::Top(args) => rtgt::top::run(args),
        Command::Completions { shell } => {
            let mut cmd = Cli::command().mut_subcommand("rpc", |_| rtgt::cmd::rpc_tree(RPC_ABOUT));
            let shell = match shell {
                CompletionShell::Bash => clap_complete::Shell::Bash,
                CompletionShell::Zsh => clap_complete::Shell::Zsh,
            };
            rtgt::cmd::print_completions(shell, &mut cmd);
            ExitCode::SUCCESS
        }
    }
}
