//! `rtgt rpc` and `rtgt completions`.
//!
//! `rtgt rpc [-s SOCKET|IP] [-p PORT] [-t SECS] [-r N] [--params JSON] [--dry-run] METHOD
//! [ARGS]`: the options before the method are rpc.py's (so `-t` is the timeout there and the
//! transport type after `nvmf_create_transport`); the method's own arguments are parsed
//! against its table entry ([`crate::methods`]). The result is printed as indented JSON; a
//! failure prints one line naming the method, the code and the server's message, and exits 1
//! (2 for a command line that does not parse).

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Command};

use crate::args::{InvocationError, invocation, method_command};
use crate::client::{DEFAULT_PORT, DEFAULT_SOCKET, Endpoint};
use crate::exec::{self, Conn};
use crate::methods;

/// Where the server is (rpc.py's `-s`, `-p`, `-t`, `-r`).
#[derive(Debug, Clone, Args)]
pub struct ConnArgs {
    /// RPC Unix socket path, or an IP address for TCP.
    #[arg(short = 's', long = "server", value_name = "PATH|IP", default_value = DEFAULT_SOCKET)]
    pub server: String,

    /// TCP port, when the server is an IP address.
    #[arg(short = 'p', long = "port", default_value_t = DEFAULT_PORT)]
    pub port: u16,

    /// Seconds to wait for each response.
    #[arg(
        short = 't',
        long = "timeout",
        value_name = "SECS",
        default_value_t = 60.0
    )]
    pub timeout: f64,

    /// Retry connecting N times, 0.2 s apart.
    #[arg(
        short = 'r',
        long = "conn-retries",
        value_name = "N",
        default_value_t = 0
    )]
    pub conn_retries: u32,
}

impl ConnArgs {
    /// The connection these options describe.
    pub fn conn(&self) -> Result<Conn, String> {
        if !(self.timeout.is_finite() && self.timeout > 0.0 && self.timeout < 1.0e9) {
            return Err(format!("invalid timeout {}", self.timeout));
        }
        Ok(Conn {
            endpoint: Endpoint::parse(&self.server, self.port),
            timeout: Duration::from_secs_f64(self.timeout),
            retries: self.conn_retries,
        })
    }
}

/// The method and its arguments.
#[derive(Debug, Clone, Args)]
pub struct CallArgs {
    /// Raw parameters (a JSON object): sent as they are when no method arguments follow,
    /// else added over the ones the arguments produce. Works with any method name.
    #[arg(long = "params", value_name = "JSON")]
    pub params: Option<String>,

    /// Print the request instead of sending it.
    #[arg(long = "dry-run")]
    pub dry_run: bool,

    /// The method and its arguments (`rtgt rpc METHOD --help`). Everything after the method
    /// belongs to it, so `-t` there is the method's, not the timeout.
    #[arg(
        value_name = "METHOD [ARGS]",
        trailing_var_arg = true,
        allow_hyphen_values = true,
        num_args = 0..
    )]
    pub command: Vec<String>,
}

impl CallArgs {
    /// The method, if one was given.
    pub fn method(&self) -> Option<&str> {
        self.command.first().map(String::as_str)
    }

    /// The words after the method.
    pub fn method_args(&self) -> &[String] {
        self.command.get(1..).unwrap_or_default()
    }
}

/// Options of `rtgt rpc`.
#[derive(Debug, Clone, Args)]
pub struct RpcArgs {
    #[command(flatten)]
    conn: ConnArgs,

    #[command(flatten)]
    call: CallArgs,
}

/// The list of methods shown by `rtgt rpc --help`.
pub fn methods_help() -> String {
    let width = methods::all().map(|m| m.name.len()).max().unwrap_or(0);
    let mut s = String::from("Methods (rtgt rpc METHOD --help shows one):\n");
    for m in methods::all() {
        s.push_str(&format!("  {:width$}  {}\n", m.name, m.about));
    }
    s.push_str("\nAny other method: rtgt rpc [--params JSON] METHOD");
    s
}

/// Runs `rtgt rpc`.
pub fn run_rpc(args: RpcArgs) -> ExitCode {
    let Some(method) = args.call.method() else {
        eprintln!("rtgt rpc: no method given\n\n{}", methods_help());
        return ExitCode::from(2);
    };
    let inv = match invocation(
        method,
        args.call.method_args(),
        args.call.params.as_deref(),
        "rtgt rpc",
    ) {
        Ok(inv) => inv,
        Err(InvocationError::Args(e)) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(2));
        }
        Err(e) => {
            eprintln!("rtgt rpc: {method}: {e}");
            return ExitCode::from(2);
        }
    };
    if args.call.dry_run {
        println!("{}", exec::dry_run(&inv));
        return ExitCode::SUCCESS;
    }
    let conn = match args.conn.conn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rtgt rpc: {e}");
            return ExitCode::from(2);
        }
    };
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    match exec::run(&conn, &inv, &mut out) {
        Ok(()) => {
            let _ = out.flush();
            ExitCode::SUCCESS
        }
        Err(e) => {
            let _ = out.flush();
            eprintln!("rtgt rpc: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The `rpc` command as the completion scripts see it: rpc.py's connection options,
/// `--params`, `--dry-run`, and every method a subcommand with its own arguments.
pub fn rpc_tree(about: &str) -> Command {
    let cmd = ConnArgs::augment_args(Command::new("rpc").about(about.to_string()))
        .arg(
            clap::Arg::new("params")
                .long("params")
                .value_name("JSON")
                .help("Raw parameters (a JSON object)"),
        )
        .arg(
            clap::Arg::new("dry_run")
                .long("dry-run")
                .action(clap::ArgAction::SetTrue)
                .help("Print the request instead of sending it"),
        );
    cmd.subcommands(methods::all().map(method_command))
}

/// Prints the completion script of `shell` for `cmd` (the whole `rtgt` command, with
/// [`rpc_tree`] as its `rpc` subcommand).
pub fn print_completions(shell: clap_complete::Shell, cmd: &mut Command) {
    clap_complete::generate(shell, cmd, "rtgt", &mut std::io::stdout());
}
