//! The Unix socket endpoint (rpc.py's default, `/var/tmp/spdk.sock`).
//!
//! Start-up follows SPDK: open `<path>.lock` (mode 0600) and take `flock(LOCK_EX|LOCK_NB)`; if
//! another process holds it the socket is in use and we fail cleanly. Holding the lock, a stale
//! socket file left by a crashed instance is unlinked and the socket bound anew. The socket's
//! mode (0600 by default) is set before `listen`, so no client can connect while it is wider.
//! On shutdown both files are removed.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tokio::net::UnixSocket;

use super::{
    DEFAULT_BACKLOG, Limits, ServeAddr, ServeError, ServerHandle, StreamCtx, accept_loop,
    new_server, refuse_stream, serve_stream,
};
use crate::table::MethodTable;

/// Options of the Unix socket endpoint.
#[derive(Debug, Clone)]
pub struct UnixOptions {
    /// Permission bits of the socket file (default 0600: only the owner may connect).
    pub mode: u32,
    /// Listen backlog.
    pub backlog: u32,
    /// Connection and size limits.
    pub limits: Limits,
}

impl Default for UnixOptions {
    fn default() -> Self {
        Self {
            mode: 0o600,
            backlog: DEFAULT_BACKLOG,
            limits: Limits::default(),
        }
    }
}

/// The single-instance lock of a socket path (`<path>.lock`, flock'ed). Holding it before the
/// socket exists lets a daemon refuse a second instance, then configure itself, then bind,
/// without a window in which clients meet a socket that goes away again. Dropping it removes
/// the lock file, and the socket file once [`serve_unix_locked`] has bound it.
#[derive(Debug)]
pub struct SocketLock {
    socket: PathBuf,
    lock_path: PathBuf,
    /// Held open while the lock is held: closing it releases the flock.
    _lock: File,
    bound: bool,
}

impl SocketLock {
    /// Takes the lock of `socket`, failing with [`ServeError::InUse`] if another process holds it.
    pub fn acquire(socket: impl AsRef<Path>) -> Result<Self, ServeError> {
        let socket = socket.as_ref().to_path_buf();
        let (lock_path, lock) = take_lock(&socket)?;
        Ok(Self {
            socket,
            lock_path,
            _lock: lock,
            bound: false,
        })
    }

    /// The socket path this lock guards.
    pub fn socket(&self) -> &Path {
        &self.socket
    }
}

impl Drop for SocketLock {
    fn drop(&mut self) {
        let files = if self.bound {
            vec![&self.socket, &self.lock_path]
        } else {
            vec![&self.lock_path]
        };
        for p in files {
            if let Err(e) = std::fs::remove_file(p) {
                if e.kind() != io::ErrorKind::NotFound {
                    tracing::warn!(path = %p.display(), error = %e, "could not remove RPC socket file");
                }
            }
        }
    }
}

fn lock_path(socket: &Path) -> PathBuf {
    let mut s = socket.as_os_str().to_owned();
    s.push(".lock");
    PathBuf::from(s)
}

/// Take the single-instance lock of `socket`.
fn take_lock(socket: &Path) -> Result<(PathBuf, File), ServeError> {
    let path = lock_path(socket);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        // The socket usually lives in a world-writable directory (/var/tmp): never follow a
        // symbolic link planted at the lock's path.
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .map_err(|e| ServeError::io("opening lock file", path.display(), e))?;
    // SAFETY: `file` is an open descriptor owned by this function for the duration of the
    // call; flock only takes an advisory lock on it and touches no memory. (std's
    // `File::try_lock` needs Rust 1.89, above the workspace MSRV.)
    let rc = unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
            return Err(ServeError::InUse {
                path: socket.to_path_buf(),
            });
        }
        return Err(ServeError::io("locking", path.display(), e));
    }
    Ok((path, file))
}

/// Serve the method table with SPDK framing on a Unix stream socket at `path`.
pub async fn serve_unix(
    table: MethodTable,
    path: impl AsRef<Path>,
    opts: UnixOptions,
) -> Result<ServerHandle, ServeError> {
    serve_unix_locked(table, SocketLock::acquire(path)?, opts).await
}

/// Like [`serve_unix`], on a socket whose lock the caller already holds.
pub async fn serve_unix_locked(
    table: MethodTable,
    mut files: SocketLock,
    opts: UnixOptions,
) -> Result<ServerHandle, ServeError> {
    let path = files.socket.clone();
    // We hold the lock, so a socket file here is a leftover of a dead instance.
    match std::fs::remove_file(&path) {
        Ok(()) => tracing::info!(path = %path.display(), "removed stale RPC socket"),
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(ServeError::io("removing stale socket", path.display(), e)),
    }
    files.bound = true;
    let socket = UnixSocket::new_stream()
        .map_err(|e| ServeError::io("creating socket for", path.display(), e))?;
    socket
        .bind(&path)
        .map_err(|e| ServeError::io("binding", path.display(), e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(opts.mode))
        .map_err(|e| ServeError::io("setting permissions of", path.display(), e))?;
    let listener = socket
        .listen(opts.backlog)
        .map_err(|e| ServeError::io("listening on", path.display(), e))?;

    let (mut handle, run) = new_server(ServeAddr::Unix(path.clone()), opts.limits);
    let ctx = StreamCtx::new(table, &run);
    let (limit, stop) = (run.limits.max_connections, run.stop_rx.clone());
    tracing::info!(path = %path.display(), mode = format_args!("{:o}", opts.mode), "JSON-RPC server listening on Unix socket");
    let task = tokio::spawn(async move {
        accept_loop(
            listener,
            run,
            "JSON-RPC Unix",
            move |stream, conn, stop| serve_stream(stream, ctx.clone(), conn, stop),
            move |stream| refuse_stream(stream, limit, stop.clone()),
        )
        .await;
        drop(files);
        tracing::info!("JSON-RPC Unix socket server stopped");
    });
    handle.set_task(task);
    Ok(handle)
}
