//! The syslog output: SPDK logs to syslog at its *log level* and prints to standard error at its
//! *print level*; rtgt does the same. Each event is one datagram on the local syslog socket
//! (`/dev/log`: journald or rsyslog), facility daemon, `rtgt[PID]: target: message fields`.
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
    /// Connects to the syslog socket at `path`.
    pub fn connect(path: &Path) -> io::Result<SyslogLayer> {
        let sock = UnixDatagram::unbound()?;
        sock.connect(path)?;
        sock.set_nonblocking(true)?;
        Ok(SyslogLayer {
            sock,
            path: path.to_owned(),
            pid: std::process::id(),
        })
    }

    /// Where it sends.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn send(&self, line: &str) {
        match self.sock.send(line.as_bytes()) {
            Ok(_) => {}
            // The daemon restarted: one reconnect, then give up on this line.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ECONNREFUSED | libc::ENOTCONN)) => {
                if self.sock.connect(&self.path).is_ok() {
                    let _ = self.sock.send(line.as_bytes());
                }
            }
            Err(_) => {}
        }
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
        let server = UnixDatagram::bind(&path).unwrap();
        let layer = SyslogLayer::connect(&path).unwrap();
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
