//! Sockets and epoll: listening and accepted sockets set up as NVMe/TCP wants them, and the
//! epoll instance a poll group (or the acceptor) owns and hands to its reactor as wake-up fd.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};

use socket2::{Domain, Protocol, SockAddr, Socket, Type};

/// Backlog of a listening socket.
const BACKLOG: i32 = 128;

/// A non-blocking listening socket on `addr` (SO_REUSEADDR; IPV6_V6ONLY for IPv6, so that an
/// IPv4 listener on the same port can exist beside it).
pub(crate) fn listen(addr: SocketAddr) -> io::Result<Socket> {
    let s = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    s.set_reuse_address(true)?;
    if addr.is_ipv6() {
        s.set_only_v6(true)?;
    }
    s.set_nonblocking(true)?;
    s.bind(&SockAddr::from(addr))?;
    s.listen(BACKLOG)?;
    Ok(s)
}

/// An accepted connection's socket, set up: non-blocking, TCP_NODELAY (PDUs go out as they
/// are batched, not when Nagle allows), SO_PRIORITY when asked.
pub(crate) fn setup_accepted(s: &Socket, priority: u32) -> io::Result<()> {
    s.set_nonblocking(true)?;
    s.set_tcp_nodelay(true)?;
    if priority > 0 {
        s.set_priority(priority)?;
    }
    Ok(())
}

/// The socket address of a [`SockAddr`], if it is an IP one.
pub(crate) fn ip_addr(a: &SockAddr) -> Option<SocketAddr> {
    a.as_socket()
}

/// Readiness reported by [`Epoll::wait`].
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Ready {
    /// The token the fd was added with.
    pub token: u64,
    /// Data (or EOF, or an error) to read.
    pub readable: bool,
    /// Room to write.
    pub writable: bool,
    /// Hang-up or error.
    pub hup: bool,
}

/// An epoll instance, level-triggered.
pub(crate) struct Epoll {
    fd: OwnedFd,
    events: Box<[libc::epoll_event]>,
}

impl Epoll {
    /// A new instance reporting at most `batch` fds per [`Epoll::wait`].
    pub fn new(batch: usize) -> io::Result<Epoll> {
        // SAFETY: epoll_create1 takes no pointers; the result is checked.
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Epoll {
            fd,
            events: vec![libc::epoll_event { events: 0, u64: 0 }; batch.max(1)].into_boxed_slice(),
        })
    }

    /// The epoll fd (readable while any watched fd is ready).
    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn ctl(&self, op: i32, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: (libc::EPOLLIN | libc::EPOLLRDHUP) as u32
                | if write { libc::EPOLLOUT as u32 } else { 0 },
            u64: token,
        };
        // SAFETY: `ev` is a valid epoll_event for the duration of the call; both fds are open.
        let r = unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), op, fd, &mut ev) };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Watches `fd` for input (and output when `write`), reporting `token`.
    pub fn add(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_ADD, fd, token, write)
    }

    /// Changes whether `fd` is watched for output.
    pub fn modify(&self, fd: RawFd, token: u64, write: bool) -> io::Result<()> {
        self.ctl(libc::EPOLL_CTL_MOD, fd, token, write)
    }

    /// Stops watching `fd`.
    pub fn remove(&self, fd: RawFd) {
        // SAFETY: a null event is allowed for EPOLL_CTL_DEL since Linux 2.6.9.
        let r = unsafe {
            libc::epoll_ctl(
                self.fd.as_raw_fd(),
                libc::EPOLL_CTL_DEL,
                fd,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            tracing::debug!(fd, "epoll remove: {}", io::Error::last_os_error());
        }
    }

    /// Ready fds, without waiting; calls `f` for each.
    pub fn poll(&mut self, mut f: impl FnMut(Ready)) -> usize {
        // SAFETY: `events` is a valid, writable array of `events.len()` entries.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                self.events.as_mut_ptr(),
                self.events.len() as i32,
                0,
            )
        };
        if n <= 0 {
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() != io::ErrorKind::Interrupted {
                    tracing::warn!("epoll_wait: {e}");
                }
            }
            return 0;
        }
        let n = n as usize;
        for ev in &self.events[..n] {
            let bits = ev.events;
            f(Ready {
                token: ev.u64,
                readable: bits & (libc::EPOLLIN | libc::EPOLLRDHUP | libc::EPOLLERR) as u32 != 0,
                writable: bits & libc::EPOLLOUT as u32 != 0,
                hup: bits & (libc::EPOLLHUP | libc::EPOLLERR) as u32 != 0,
            });
        }
        n
    }
}
