//! `rtgt top`: a live view of a running target over its RPC socket, like `spdk_top` or
//! `iostat -x`.
//!
//! A sampler thread reads the counters every interval ([`sample`]); the screen thread turns
//! the last two samples into rates ([`rates`]) and tables ([`table`]) and draws them
//! ([`view`]), or, with `--batch`, prints them as text. The sampler never blocks the keys: a
//! daemon that goes away or hangs shows as an error line while the last figures stay, and
//! the sampler keeps reconnecting.

pub mod rates;
pub mod sample;
pub mod table;
pub mod view;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::thread;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{Args, ValueEnum};
use crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};

use crate::cmd::ConnArgs;
use crate::exec::Conn;
use sample::Sample;
use table::View;
use view::Status;

/// Options of `rtgt top`.
#[derive(Debug, Clone, Args)]
pub struct TopArgs {
    #[command(flatten)]
    conn: ConnArgs,

    /// Seconds between samples (0.1 or more; +/- change it while running).
    #[arg(
        short = 'i',
        long = "interval",
        value_name = "SECS",
        default_value_t = 1.0
    )]
    interval: f64,

    /// The column rows are sorted by (e.g. iops, mibs, avg, p99, bdev, busy), in every view
    /// that has it.
    #[arg(long = "sort", value_name = "COLUMN")]
    sort: Option<String>,

    /// The view shown first.
    #[arg(long = "view", value_enum, default_value_t = ViewArg::Namespaces)]
    view: ViewArg,

    /// Print the table as text every interval instead of drawing the screen (also when
    /// standard output is not a terminal).
    #[arg(short = 'b', long = "batch")]
    batch: bool,

    /// Stop after N samples (batch mode; the first sample has no rates yet).
    #[arg(short = 'n', long = "iterations", value_name = "N")]
    iterations: Option<u64>,
}

/// The views, for `--view`.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum ViewArg {
    Namespaces,
    Subsystems,
    Reactors,
}

impl From<ViewArg> for View {
    fn from(v: ViewArg) -> View {
        match v {
            ViewArg::Namespaces => View::Namespaces,
            ViewArg::Subsystems => View::Subsystems,
            ViewArg::Reactors => View::Reactors,
        }
    }
}

/// Shortest interval accepted.
const MIN_INTERVAL: f64 = 0.1;

/// What the sampler sends: a sample, or why none could be read.
type Reading = Result<Sample, String>;

/// What the screen tells the sampler.
enum Control {
    /// Sample every this many seconds from now on.
    Interval(Duration),
}

/// The sampler thread: connects (again after any failure), reads a sample every interval and
/// sends it. Ends when the receiver is gone.
fn sampler(conn: Conn, mut interval: Duration, out: Sender<Reading>, ctl: Receiver<Control>) {
    let mut client = None;
    loop {
        let started = Instant::now();
        let reading = (|| {
            if client.is_none() {
                client = Some(conn.connect().map_err(|e| e.to_string())?);
            }
            let Some(c) = client.as_mut() else {
                return Err("not connected".to_string());
            };
            Sample::fetch(c).map_err(|e| {
                client = None;
                e.to_string()
            })
        })();
        if out.send(reading).is_err() {
            return;
        }
        loop {
            let left = interval.saturating_sub(started.elapsed());
            match ctl.recv_timeout(left) {
                Ok(Control::Interval(d)) => interval = d,
                Err(RecvTimeoutError::Timeout) => break,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        }
    }
}

/// The wall clock as HH:MM:SS UTC.
fn utc_now() -> String {
    let s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!("{:02}:{:02}:{:02}", s / 3600 % 24, s / 60 % 60, s % 60)
}

/// The last two samples and what the screen shows of them.
struct State {
    prev: Option<Sample>,
    cur: Option<Sample>,
    view: View,
    /// The sort column of each view, by [`View::ALL`] index.
    sort: [usize; 3],
    status: Status,
}

impl State {
    fn take(&mut self, r: Reading) {
        match r {
            Ok(s) => {
                self.prev = self.cur.replace(s);
                self.status.samples += 1;
                self.status.at = utc_now();
                self.status.error = None;
            }
            Err(e) => {
                // Rates across an outage would mix a restarted target's counters.
                self.prev = None;
                self.status.error = Some(e);
            }
        }
    }

    fn view_index(&self) -> usize {
        View::ALL.iter().position(|&v| v == self.view).unwrap_or(0)
    }

    fn table(&self) -> table::Table {
        let empty = Sample::default();
        let cur = self.cur.as_ref().unwrap_or(&empty);
        table::build(
            self.view,
            self.prev.as_ref(),
            cur,
            self.sort[self.view_index()],
        )
    }

    fn shift_sort(&mut self, by: isize) {
        let n = self.view.columns().len() as isize;
        let i = self.view_index();
        self.sort[i] = (self.sort[i] as isize + by).rem_euclid(n) as usize;
    }
}

/// Runs `rtgt top`.
pub fn run(args: TopArgs) -> ExitCode {
    let conn = match args.conn.conn() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("rtgt top: {e}");
            return ExitCode::from(2);
        }
    };
    if !(args.interval.is_finite() && (MIN_INTERVAL..=86_400.0).contains(&args.interval)) {
        eprintln!(
            "rtgt top: invalid interval {} (between {MIN_INTERVAL} and 86400 seconds)",
            args.interval
        );
        return ExitCode::from(2);
    }
    let mut sort = View::ALL.map(View::default_sort);
    if let Some(name) = &args.sort {
        let mut found = false;
        for (i, v) in View::ALL.iter().enumerate() {
            if let Some(c) = table::find_column(*v, name) {
                sort[i] = c;
                found = true;
            }
        }
        if !found {
            eprintln!(
                "rtgt top: no column '{name}' to sort by (one of: {})",
                table::sort_keys()
            );
            return ExitCode::from(2);
        }
    }
    let state = State {
        prev: None,
        cur: None,
        view: args.view.into(),
        sort,
        status: Status {
            endpoint: conn.endpoint.to_string(),
            interval: args.interval,
            ..Status::default()
        },
    };
    let (tx, rx) = mpsc::channel();
    let (ctl_tx, ctl_rx) = mpsc::channel();
    let interval = Duration::from_secs_f64(args.interval);
    let spawned = thread::Builder::new()
        .name("top-sampler".into())
        .spawn(move || sampler(conn, interval, tx, ctl_rx));
    if let Err(e) = spawned {
        eprintln!("rtgt top: {e}");
        return ExitCode::FAILURE;
    }
    if args.batch || !std::io::stdout().is_terminal() {
        batch(state, &rx, args.iterations)
    } else {
        interactive(state, &rx, &ctl_tx)
    }
}

/// Batch mode: each sample's table as text, until `iterations` samples (or forever).
fn batch(mut state: State, rx: &Receiver<Reading>, iterations: Option<u64>) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let mut seen = 0u64;
    while iterations.is_none_or(|n| seen < n) {
        let Ok(r) = rx.recv() else {
            return ExitCode::FAILURE;
        };
        seen += 1;
        state.take(r);
        let text = match &state.status.error {
            Some(e) => format!("rtgt top: {e}\n"),
            None => format!(
                "sample {} at {}\n{}\n",
                state.status.samples,
                state.status.at,
                table::to_text(&state.table(), state.sort[state.view_index()])
            ),
        };
        if out
            .write_all(text.as_bytes())
            .and_then(|()| out.flush())
            .is_err()
        {
            // A closed pipe (`rtgt top -b | head`).
            return ExitCode::SUCCESS;
        }
    }
    if state.status.error.is_some() {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// The full-screen view: redraws on every sample and key until q.
fn interactive(mut state: State, rx: &Receiver<Reading>, ctl: &Sender<Control>) -> ExitCode {
    let mut terminal = match ratatui::try_init() {
        Ok(t) => t,
        Err(e) => {
            ratatui::restore();
            eprintln!("rtgt top: cannot set up the terminal: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = (|| -> std::io::Result<()> {
        loop {
            while let Ok(r) = rx.try_recv() {
                state.take(r);
            }
            let t = state.table();
            let sort = state.sort[state.view_index()];
            terminal.draw(|f| view::draw(f, &t, sort, &state.status))?;
            if !event::poll(Duration::from_millis(100))? {
                continue;
            }
            let Event::Key(k) = event::read()? else {
                continue;
            };
            if k.kind != KeyEventKind::Press {
                continue;
            }
            match k.code {
                KeyCode::Char('q') | KeyCode::Esc => return Ok(()),
                KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => {
                    return Ok(());
                }
                KeyCode::Tab => state.view = state.view.next(),
                KeyCode::BackTab => {
                    state.view = state.view.next().next();
                }
                KeyCode::Char(c @ '1'..='3') => {
                    state.view = View::ALL[usize::from(c as u8 - b'1')];
                }
                KeyCode::Char('s') | KeyCode::Right => state.shift_sort(1),
                KeyCode::Char('S') | KeyCode::Left => state.shift_sort(-1),
                KeyCode::Char(c @ ('+' | '-')) => {
                    let i = state.status.interval;
                    let next = if c == '+' { i * 2.0 } else { i / 2.0 };
                    let next = next.clamp(MIN_INTERVAL, 3600.0);
                    state.status.interval = (next * 10.0).round() / 10.0;
                    let _ = ctl.send(Control::Interval(Duration::from_secs_f64(
                        state.status.interval,
                    )));
                }
                _ => {}
            }
        }
    })();
    ratatui::restore();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rtgt top: {e}");
            ExitCode::FAILURE
        }
    }
}
