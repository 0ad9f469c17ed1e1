//! systemd's readiness protocol (`Type=notify`): one datagram per state change on the socket
//! named by `$NOTIFY_SOCKET` (a path, or `@name` in the abstract namespace). Without the
//! variable nothing is sent.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (e.g. `READY=1`, `STOPPING=1`) to systemd if it asked for notifications;
/// `Ok(false)` when it did not.
pub fn notify(state: &str) -> io::Result<bool> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(false);
    };
    let path = path.to_string_lossy().into_owned();
    let addr = match path.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(&path)?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(true)
}

/// [`notify`], logging a failure instead of returning it: readiness is best effort.
pub fn notify_or_log(state: &str) {
    if let Err(e) = notify(state) {
        tracing::warn!("cannot notify systemd ({state}): {e}");
    }
}
