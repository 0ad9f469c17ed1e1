//! The syslog output: SPDK logs to syslog at its *log level* and prints to standard error at its
//! *print level*; rtgt does the same. Each event is one datagram on the local syslog socket
//! (`/dev/log`: journald or rsyslog), facility daemon, `rtgt[PID]: target: message fields`.
//! Each line is addressed to the socket's path, so a syslog daemon that starts or restarts later
//! gets the lines from then on (until it exists, they are dropped, as with SPDK's `syslog(3)`).
//! Sends never block a reactor: a full socket drops the line.

use std::fmt::Write as _;
use std::io;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer};

/// Facility `daemon` (3), as RFC 5424 numbers it.
const FACILITY_DAEMON: u8 = 3;

/// A layer that sends every event it sees to a syslog socket.
pub struct SyslogLayer {
    sock: UnixDatagram,
    path: PathBuf,
    pid: u32,
}

impl SyslogLayer {
    /// A layer sending to the socket at `path`, whether it exists yet or not.
    pub fn new(path: &Path) -> io::Result<SyslogLayer> {
        let sock = UnixDatagram::unbound()?;
        sock.set_nonblocking(true)?;
        Ok(SyslogLayer {
            sock,
            path: path.to_owned(),
            pid: std::process::id(),
        })
    }

    /// [`SyslogLayer::new`] for a socket that must exist now (an explicit `--syslog-socket`).
    pub fn connect(path: &Path) -> io::Result<SyslogLayer> {
        let probe = UnixDatagram::unbound()?;
        probe.connect(path)?;
        Self::new(path)
    }

    /// Where it sends.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether the socket is there now.
    pub fn reachable(&self) -> bool {
        UnixDatagram::unbound().is_ok_and(|s| s.connect(&self.path).is_ok())
    }

    fn send(&self, line: &str) {
        // No syslog (yet), a full queue: the line is dropped.
        let _ = self.sock.send_to(line.as_bytes(), &self.path);
    }
}

/// Syslog severity of a `tracing` level (INFO is SPDK's NOTICE, rtgt's default).
fn severity(level: &Level) -> u8 {
    match *level {
        Level::ERROR => 3,
        Level::WARN => 4,
        Level::INFO => 5,
        Level::DEBUG | Level::TRACE => 7,
    }
}

/// Formats one event's line: `<PRI>rtgt[PID]: LEVEL target: message k=v ...`.
pub fn format_line(pid: u32, level: &Level, target: &str, event: &Event<'_>) -> String {
    let mut v = LineVisitor {
        line: format!(
            "<{}>rtgt[{pid}]: {level} {target}: ",
            FACILITY_DAEMON * 8 + severity(level)
        ),
        fields: String::new(),
    };
    event.record(&mut v);
    v.line.push_str(&v.fields);
    v.line
}

/// The message goes first, the other fields after it as ` name=value`.
struct LineVisitor {
    line: String,
    fields: String,
}

impl Visit for LineVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.line.push_str(value);
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.line, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={value:?}", field.name());
        }
    }
}

impl<S: Subscriber> Layer<S> for SyslogLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let meta = event.metadata();
        self.send(&format_line(self.pid, meta.level(), meta.target(), event));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::prelude::*;

    #[test]
    fn events_arrive_as_syslog_lines_and_a_missing_socket_is_an_error() {
        let dir = std::env::temp_dir().join(format!("rtgt-syslog-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("log");
        let _ = std::fs::remove_file(&path);
        assert!(SyslogLayer::connect(&path).is_err());
        // A layer made before syslog exists delivers once it does.
        let layer = SyslogLayer::new(&path).unwrap();
        assert!(!layer.reachable());
        let server = UnixDatagram::bind(&path).unwrap();
        assert!(layer.reachable());
        assert_eq!(layer.path(), path);
        let sub = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(sub, || {
            tracing::warn!(target: "transport_rdma::cm", port = 4420, "listener gone");
        });
        let mut buf = [0u8; 512];
        let n = server.recv(&mut buf).unwrap();
        let line = std::str::from_utf8(&buf[..n]).unwrap();
        let want = format!(
            "<28>rtgt[{}]: WARN transport_rdma::cm: listener gone port=4420",
            std::process::id()
        );
        assert_eq!(line, want);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
