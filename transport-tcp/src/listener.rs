//! The listener: listening sockets in one epoll instance, and an acceptor poller on reactor 0
//! whose wake-up fd is that epoll fd, so an idle target sleeps until a host connects. An
//! accepted socket goes by message to the poll group with the fewest connections (which queue
//! it carries is known only after its Connect).

use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use socket2::Socket;
use target_core::reactor::{PollStatus, PollerId};
use target_core::registry::TransportError;
use target_core::target::{ListenAddr, with_transport_pg};

use crate::poll_group::{NewConn, TcpPg};
use crate::socket::{self, Epoll};
use crate::transport::{TcpShared, socket_addr};

/// Connections accepted per listener per acceptor poll.
const ACCEPT_BATCH: usize = 32;

struct State {
    listeners: Vec<(ListenAddr, Socket)>,
    epoll: Epoll,
    poller: Option<PollerId>,
    stopped: bool,
}

pub(crate) struct Listener {
    sh: Arc<TcpShared>,
    st: Mutex<State>,
}

impl Listener {
    /// Creates the epoll instance and registers the acceptor poller on reactor 0.
    pub fn start(sh: Arc<TcpShared>) -> Result<Arc<Listener>, TransportError> {
        let epoll = Epoll::new(16)
            .map_err(|e| TransportError::Other(format!("cannot create an epoll instance: {e}")))?;
        let fd = epoll.fd();
        let l = Arc::new(Listener {
            sh: Arc::clone(&sh),
            st: Mutex::new(State {
                listeners: Vec::new(),
                epoll,
                poller: None,
                stopped: false,
            }),
        });
        let a = Arc::clone(&l);
        let period = Duration::from_micros(u64::from(sh.opts.acceptor_poll_rate));
        sh.reactors
            .send_ctrl(0, move |rctx| {
                if a.st.lock().stopped {
                    return;
                }
                let me = Arc::clone(&a);
                let id = rctx
                    .poller("nvmf_tcp_acceptor")
                    .period(period)
                    .wake_fd(fd)
                    .register(move |_| PollStatus::from_count(me.poll()));
                a.st.lock().poller = Some(id);
            })
            .map_err(|e| TransportError::Other(format!("cannot start the TCP acceptor: {e}")))?;
        Ok(l)
    }

    /// Starts listening on `addr`.
    pub fn listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        let sa = socket_addr(addr)?;
        let s = socket::listen(sa)
            .map_err(|e| TransportError::Fabric(format!("cannot listen on {sa}: {e}")))?;
        let mut st = self.st.lock();
        st.epoll
            .add(s.as_raw_fd(), s.as_raw_fd() as u64, false)
            .map_err(|e| TransportError::Other(format!("cannot watch {sa}: {e}")))?;
        if let Some(i) = st.listeners.iter().position(|(a, _)| a == addr) {
            let (_, old) = st.listeners.swap_remove(i);
            st.epoll.remove(old.as_raw_fd());
        }
        st.listeners.push((addr.clone(), s));
        tracing::info!("NVMe/TCP target listening on {sa}");
        Ok(())
    }

    /// Stops listening on `addr` (connections made through it stay).
    pub fn stop_listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        let mut st = self.st.lock();
        let Some(i) = st.listeners.iter().position(|(a, _)| a == addr) else {
            return Err(TransportError::Invalid(format!("not listening on {addr}")));
        };
        let (_, s) = st.listeners.swap_remove(i);
        st.epoll.remove(s.as_raw_fd());
        Ok(())
    }

    /// Stops the acceptor: no more listeners, the poller goes away.
    pub fn stop(&self) {
        let mut st = self.st.lock();
        st.stopped = true;
        let socks: Vec<_> = st.listeners.drain(..).collect();
        for (_, s) in &socks {
            st.epoll.remove(s.as_raw_fd());
        }
        if let Some(id) = st.poller.take() {
            let _ = self.sh.reactors.send_ctrl(0, move |rctx| {
                rctx.unregister_poller(id);
            });
        }
    }

    /// One acceptor poll: accepts what the ready listeners have.
    pub fn poll(&self) -> usize {
        let mut accepted = Vec::new();
        {
            let mut st = self.st.lock();
            let mut ready = [0i32; 16];
            let mut n = 0;
            st.epoll.poll(|r| {
                if n < ready.len() {
                    ready[n] = r.token as i32;
                    n += 1;
                }
            });
            for fd in &ready[..n] {
                let Some((addr, s)) = st.listeners.iter().find(|(_, s)| s.as_raw_fd() == *fd)
                else {
                    continue;
                };
                for _ in 0..ACCEPT_BATCH {
                    match s.accept() {
                        Ok((c, peer)) => accepted.push((addr.clone(), c, peer)),
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                        Err(e) => {
                            tracing::warn!(listener = %addr, "accept: {e}");
                            break;
                        }
                    }
                }
            }
        }
        let n = accepted.len();
        for (listen, sock, peer) in accepted {
            self.hand_off(listen, sock, peer);
        }
        n
    }

    fn hand_off(&self, listen: ListenAddr, sock: Socket, peer: socket2::SockAddr) {
        let (Some(peer), Some(local)) = (
            socket::ip_addr(&peer),
            sock.local_addr().ok().and_then(|a| socket::ip_addr(&a)),
        ) else {
            return;
        };
        if let Err(e) = socket::setup_accepted(&sock, self.sh.opts.sock_priority) {
            tracing::warn!(%peer, "cannot set up an accepted socket: {e}");
            return;
        }
        let pg = self.sh.least_loaded();
        self.sh.conns[pg].fetch_add(1, Ordering::Relaxed);
        let index = self.sh.index;
        let sh = Arc::clone(&self.sh);
        let conn = NewConn {
            sock,
            listen,
            local,
            peer,
            now: Instant::now(),
        };
        let sent = self.sh.reactors.send_ctrl(pg, move |rctx| {
            TcpPg::ensure_timer(rctx, index);
            let mut conn = Some(conn);
            with_transport_pg::<TcpPg, _>(rctx, index, |pg, core| {
                if let Some(c) = conn.take() {
                    pg.add_connection(core, c);
                }
            });
            if conn.is_some() {
                // The poll group is gone (the transport is being destroyed): the socket closes.
                sh.conns[pg].fetch_sub(1, Ordering::Relaxed);
            }
        });
        if sent.is_err() {
            self.sh.conns[pg].fetch_sub(1, Ordering::Relaxed);
        }
        tracing::debug!(%peer, %local, pg, "NVMe/TCP connection accepted");
    }
}
