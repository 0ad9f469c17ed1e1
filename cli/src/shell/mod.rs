//! `rtgt shell`: an interactive JSON-RPC shell.
//!
//! Every line is what follows `rtgt rpc` (`nvmf_get_subsystems`, `bdev_malloc_create 64 512
//! -b M0`, `--params '{...}' any_method`, `--dry-run ...`), plus `help [METHOD]`, `ls [bdevs |
//! transports | subsystems | NQN]` and `exit`. Errors are printed and the shell goes on.
//!
//! On a terminal it uses rustyline: line editing, a history file (`--history`, default
//! `$XDG_STATE_HOME/rtgt/shell_history`, else `~/.rtgt_history`), and Tab completion of
//! methods, options and live object names ([`complete`]). Otherwise it reads commands from
//! stdin line by line, for scripts and tests, and exits 1 if any command failed.

pub mod complete;
pub mod snapshot;
pub mod words;

use std::cell::RefCell;
use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Args, Parser};
use rustyline::completion::{Completer, Pair};
use rustyline::error::ReadlineError;
use rustyline::highlight::Highlighter;
use rustyline::hint::Hinter;
use rustyline::history::DefaultHistory;
use rustyline::validate::Validator;
use rustyline::{CompletionType, Config, Context, Editor, Helper};

use crate::args::{Invocation, InvocationError, invocation, method_command};
use crate::cmd::{CallArgs, ConnArgs};
use crate::exec::{self, Conn};
use crate::methods;
use snapshot::Snapshot;

/// Options of `rtgt shell`.
#[derive(Debug, Args)]
pub struct ShellArgs {
    #[command(flatten)]
    conn: ConnArgs,

    /// History file (default `$XDG_STATE_HOME/rtgt/shell_history`, else `~/.rtgt_history`).
    #[arg(long = "history", value_name = "FILE")]
    history: Option<PathBuf>,
}

/// How long live names are reused for completion before they are read again.
const NAMES_TTL: Duration = Duration::from_secs(2);

/// One line of the shell, parsed like `rtgt rpc`'s arguments after the connection options.
#[derive(Debug, Parser)]
#[command(
    name = "",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
struct Line {
    #[command(flatten)]
    call: CallArgs,
}

/// What a line asks the loop to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// Read the next line; `ok` says whether this one succeeded.
    Continue {
        /// Whether the command succeeded.
        ok: bool,
    },
    /// Leave the shell.
    Exit,
}

/// The shell's state: where the target is, and the live names last read for completion.
pub struct Shell {
    conn: Conn,
    names: RefCell<Option<(Instant, Snapshot)>>,
}

impl std::fmt::Debug for Shell {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shell")
            .field("conn", &self.conn)
            .finish_non_exhaustive()
    }
}

impl Shell {
    /// A shell talking to `conn`.
    pub fn new(conn: Conn) -> Self {
        Shell {
            conn,
            names: RefCell::new(None),
        }
    }

    /// Completes `line` at `pos` with live names read from the target (cached for two
    /// seconds; a target that does not answer completes only what the table knows).
    pub fn complete(&self, line: &str, pos: usize) -> (usize, Vec<String>) {
        let mut cache = self.names.borrow_mut();
        let fresh = cache
            .as_ref()
            .is_some_and(|(at, _)| at.elapsed() < NAMES_TTL);
        if !fresh {
            let snap = self
                .conn
                .connect()
                .ok()
                .and_then(|mut c| Snapshot::fetch(&mut c, false).ok())
                .unwrap_or_default();
            *cache = Some((Instant::now(), snap));
        }
        let snap = cache.as_ref().map(|(_, s)| s);
        complete::complete(line, pos, snap.unwrap_or(&Snapshot::default()))
    }

    /// Forgets the cached names (after a command that may have changed them).
    pub fn invalidate(&self) {
        *self.names.borrow_mut() = None;
    }

    /// Runs one line, writing results to `out` and errors to `err`.
    pub fn execute(&self, line: &str, out: &mut dyn Write, err: &mut dyn Write) -> Next {
        let ok = match self.execute_inner(line, out) {
            Ok(next) => return next,
            Err(msg) => {
                let _ = writeln!(err, "{}", msg.trim_end());
                false
            }
        };
        Next::Continue { ok }
    }

    fn execute_inner(&self, line: &str, out: &mut dyn Write) -> Result<Next, String> {
        let words = words::split(line).map_err(|e| format!("error: {e}"))?;
        let Some(first) = words.first() else {
            return Ok(Next::Continue { ok: true });
        };
        let done = Ok(Next::Continue { ok: true });
        let print = |out: &mut dyn Write, text: &str| {
            let _ = writeln!(out, "{}", text.trim_end());
        };
        match first.as_str() {
            "exit" | "quit" => return Ok(Next::Exit),
            "help" => {
                print(out, &help(words.get(1).map(String::as_str))?);
                return done;
            }
            "ls" => {
                let mut c = self.conn.connect().map_err(|e| format!("error: ls: {e}"))?;
                let snap = Snapshot::fetch(&mut c, true).map_err(|e| format!("error: ls: {e}"))?;
                let title = format!("rtgt at {}", self.conn.endpoint);
                let tree = snapshot::render(&snap, &title, words.get(1).map(String::as_str))
                    .map_err(|e| format!("error: {e}"))?;
                print(out, &tree);
                return done;
            }
            _ => {}
        }
        let parsed = Line::try_parse_from(&words).map_err(|e| e.to_string())?;
        let Some(method) = parsed.call.method() else {
            return Err("error: no method given (help lists them)".into());
        };
        let inv = match invocation(
            method,
            parsed.call.method_args(),
            parsed.call.params.as_deref(),
            "",
        ) {
            Ok(inv) => inv,
            Err(InvocationError::Args(e))
                if matches!(e.kind(), clap::error::ErrorKind::DisplayHelp) =>
            {
                print(out, &e.to_string());
                return done;
            }
            Err(e) => return Err(format!("error: {e}")),
        };
        if parsed.call.dry_run {
            print(out, &exec::dry_run(&inv));
            return done;
        }
        let r = exec::run(&self.conn, &inv, out);
        if !matches!(&inv, Invocation::Call { method, .. } if method.contains("_get_")) {
            self.invalidate();
        }
        r.map_err(|e| format!("error: {e}"))?;
        done
    }
}

/// `help` and `help METHOD`.
pub fn help(topic: Option<&str>) -> Result<String, String> {
    let Some(topic) = topic else {
        let width = methods::all().map(|m| m.name.len()).max().unwrap_or(0);
        let mut s = String::from(
            "Commands:\n  \
             help [METHOD]      this list, or one method's arguments\n  \
             ls [WHAT]          tree of bdevs, transports, subsystems and their connections\n                     \
             (WHAT: bdevs, transports, subsystems, or a subsystem NQN)\n  \
             exit, quit         leave (or Ctrl-D)\n  \
             [--dry-run] [--params JSON] METHOD [ARGS]   call a method (as `rtgt rpc`)\n\nMethods:\n",
        );
        for m in methods::all() {
            s.push_str(&format!("  {:width$}  {}\n", m.name, m.about));
        }
        s.push_str("\nTab completes methods, options and live names.");
        return Ok(s);
    };
    match topic {
        "ls" => Ok(
            "ls [bdevs | transports | subsystems | NQN]: draw the target's objects as a tree, \
                    with each subsystem's namespaces, hosts, listeners and connected controllers \
                    (SRP: sessions) and their queue pairs (SRP: channels) with their state."
                .into(),
        ),
        "exit" | "quit" => Ok("exit, quit: leave the shell (Ctrl-D too).".into()),
        "help" => Ok("help [METHOD]: list the commands, or show one method's arguments.".into()),
        _ => match methods::find(topic) {
            Some(spec) => Ok(method_command(spec)
                .no_binary_name(true)
                .bin_name(spec.name)
                .render_long_help()
                .to_string()),
            None => Err(format!(
                "error: unknown method '{topic}' (any method can still be called with --params)"
            )),
        },
    }
}

/// The default history file.
fn history_path() -> Option<PathBuf> {
    if let Some(state) = std::env::var_os("XDG_STATE_HOME").filter(|s| !s.is_empty()) {
        return Some(PathBuf::from(state).join("rtgt").join("shell_history"));
    }
    std::env::var_os("HOME")
        .filter(|s| !s.is_empty())
        .map(|h| PathBuf::from(h).join(".rtgt_history"))
}

struct LineHelper<'a> {
    shell: &'a Shell,
}

impl Completer for LineHelper<'_> {
    type Candidate = Pair;

    fn complete(
        &self,
        line: &str,
        pos: usize,
        _ctx: &Context<'_>,
    ) -> rustyline::Result<(usize, Vec<Pair>)> {
        let (start, cands) = self.shell.complete(line, pos);
        let pairs = cands
            .into_iter()
            .map(|c| {
                let replacement = if c.ends_with('/') {
                    c.clone()
                } else {
                    format!("{} ", words::quote(&c))
                };
                Pair {
                    display: c,
                    replacement,
                }
            })
            .collect();
        Ok((start, pairs))
    }
}

impl Hinter for LineHelper<'_> {
    type Hint = String;
}
impl Highlighter for LineHelper<'_> {}
impl Validator for LineHelper<'_> {}
impl Helper for LineHelper<'_> {}

/// Runs the shell until `exit`, Ctrl-D or the end of stdin.
pub fn run(args: ShellArgs) -> ExitCode {
    let conn = match args.conn.conn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rtgt shell: {e}");
            return ExitCode::from(2);
        }
    };
    let shell = Shell::new(conn);
    if std::io::stdin().is_terminal() {
        interactive(&shell, args.history.or_else(history_path))
    } else {
        let mut failed = false;
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { break };
            match shell.execute(&line, &mut std::io::stdout(), &mut std::io::stderr()) {
                Next::Exit => break,
                Next::Continue { ok } => failed |= !ok,
            }
        }
        if failed {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    }
}

fn interactive(shell: &Shell, history: Option<PathBuf>) -> ExitCode {
    let config = Config::builder()
        .completion_type(CompletionType::List)
        .history_ignore_space(true)
        .auto_add_history(true)
        .max_history_size(5000)
        .map(|b| b.build())
        .unwrap_or_default();
    let mut rl: Editor<LineHelper<'_>, DefaultHistory> = match Editor::with_config(config) {
        Ok(rl) => rl,
        Err(e) => {
            eprintln!("rtgt shell: cannot start the line editor: {e}");
            return ExitCode::FAILURE;
        }
    };
    rl.set_helper(Some(LineHelper { shell }));
    if let Some(h) = &history {
        if let Some(dir) = h.parent() {
            let _ = std::fs::create_dir_all(dir);
        }
        let _ = rl.load_history(h);
    }
    println!(
        "rtgt shell on {}: `help` lists commands, Tab completes, Ctrl-D leaves.",
        shell.conn.endpoint
    );
    if let Err(e) = shell.conn.connect() {
        eprintln!("warning: {e}");
    }
    loop {
        match rl.readline("rtgt> ") {
            Ok(line) => {
                let next = shell.execute(&line, &mut std::io::stdout(), &mut std::io::stderr());
                if next == Next::Exit {
                    break;
                }
            }
            Err(ReadlineError::Interrupted) => continue,
            Err(ReadlineError::Eof) => break,
            Err(e) => {
                eprintln!("rtgt shell: {e}");
                break;
            }
        }
    }
    if let Some(h) = &history
        && let Err(e) = rl.save_history(h)
    {
        eprintln!(
            "rtgt shell: cannot save the history to {}: {e}",
            h.display()
        );
    }
    ExitCode::SUCCESS
}
