//! rtgt fabric: verbs and RDMA CM behind one safe API, with an `rdma` provider over rdma-sys and
//! an in-process `sim` provider for tests.
//!
//! Pick a provider once ([`Fabric::open`]); everything else — [`Device`], [`Pd`], [`Mr`],
//! [`Cq`], [`Srq`], [`Qp`], [`EventChannel`], [`CmId`] — is the same type for both, so code
//! above this crate cannot tell them apart. Data-path calls ([`Qp::post_send`],
//! [`Qp::post_recv`], [`Srq::post_recv`], [`Cq::poll`]) take plain, preallocated values and do
//! not allocate (the sim allocates only to arm a timer: a finite receiver-not-ready wait or a
//! delayed-completion fault).
//!
//! ```
//! use std::net::{IpAddr, Ipv4Addr, SocketAddr};
//! use fabric::{Fabric, SimNetwork};
//!
//! // An in-process wire with a target device; tests add as many devices as they like.
//! let net = SimNetwork::new();
//! let ip = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
//! net.add_device("sim0", ip)?;
//! let fabric = Fabric::sim(&net); // or Fabric::rdma()?, or Fabric::from_name("sim")?
//! let events = fabric.create_event_channel()?;
//! let listener = events.create_id()?;
//! listener.bind(SocketAddr::new(ip, 4420))?;
//! listener.listen(128)?;
//! assert_eq!(listener.device().map(|d| d.name()), Some("sim0".to_string()));
//! # Ok::<(), fabric::FabricError>(())
//! ```
//!
//! The provider conformance suite is `fabric/tests/conformance.rs`: `cargo test -p fabric`
//! runs it against `sim`; `fabric/tests/guest-conformance.sh` runs the same binary against
//! `rdma` on soft-RoCE in a QEMU guest (`RTGT_FABRIC=rdma RTGT_FABRIC_ADDR=<ip>`).
//!
//! Memory safety rests on [`mem`]: a registration holds its [`mem::DmaRegion`] alive, and work
//! requests carry raw (addr, length, lkey) entries that the adapter — or the simulation —
//! checks against registrations, so a wrong entry is an error completion, never a stray write.
//!
//! # Teardown rules (both providers)
//! - [`Qp::modify_to_error`] or [`CmId::disconnect`] moves a queue pair to the error state;
//!   every outstanding work request, and every send work request posted afterwards, then
//!   completes with [`WcStatus::WrFlushErr`] (error completions are generated even for
//!   unsignaled requests).
//! - After an error *completion* (the adapter moved the queue pair to the error state by
//!   itself), call [`Qp::modify_to_error`] before waiting for receive flushes: rxe (Linux 6.1)
//!   flushes the receive queue only on an explicit transition.
//! - Do not post receives to a queue pair in the error state: the sim and mlx5 flush them,
//!   rxe never completes them.
//! - Posting a zero-length RDMA WRITE (signaled) after that gives a "last completion" marker
//!   on the send queue: when it arrives, every earlier send work request has completed.
//! - Receives of a queue pair's own receive queue flush with it. Receives on a shared receive
//!   queue belong to the queue, not to a queue pair, and stay available to the others. The
//!   portable drain of a queue pair on a shared receive queue is the send-queue marker: once
//!   it has completed, no further completion arrives for that queue pair (tested on both
//!   providers). [`AsyncEventKind::QpLastWqeReached`] is raised by the sim and by adapters that
//!   implement it (rxe in Linux 6.1 does not), so treat it as an early signal, not the only one.
//! - A too-long SEND fails the sender with [`WcStatus::RemOpErr`]; the receiver's completion is
//!   [`WcStatus::LocLenErr`] (sim, mlx5) or [`WcStatus::LocQpOpErr`] (rxe).
//! - Over IB/RoCE, private data arrives zero-padded to the CM message size
//!   ([`CM_REQ_PRIVATE_DATA`], [`CM_REP_PRIVATE_DATA`], [`CM_REJ_PRIVATE_DATA`]); the sim pads
//!   the same way.
//! - The device may not enforce the send-queue depth it reports (rxe does not; the sim does):
//!   count send-queue slots yourself.

pub mod cm;
pub mod error;
/// The buffers a registration covers and work requests name: the `iobuf` leaf crate, re-exported
/// because the verbs API takes its types.
pub use iobuf as mem;
mod rdma;
pub mod sim;
pub mod types;
pub mod verbs;

use std::sync::atomic::{AtomicU64, Ordering};

pub use cm::{CmId, EventChannel};
pub use error::{FabricError, PostError, PostErrorKind, Result};
pub use sim::{CompletionMatch, FaultCounts, SimFaults, SimNetwork};
pub use types::*;
pub use verbs::{CompChannel, Cq, Device, Mr, Mw, Pd, Qp, QpInit, Srq};

static HANDLES: AtomicU64 = AtomicU64::new(1);

/// A process-unique, non-zero handle for CQs, SRQs, PDs and CM ids.
pub(crate) fn next_handle() -> u64 {
    HANDLES.fetch_add(1, Ordering::Relaxed)
}

/// Which provider a process uses.
#[derive(Debug, Clone)]
pub enum Provider {
    /// Real RDMA devices through libibverbs and librdmacm (NICs, soft-RoCE, soft-iWARP).
    Rdma,
    /// The in-process simulation, on the given network.
    Sim(SimNetwork),
}

/// The fabric a process works on: the provider handle that devices and event channels come
/// from. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Fabric(Provider);

impl Fabric {
    /// Opens a provider. For [`Provider::Rdma`] this checks that at least one RDMA device
    /// exists and fails with [`FabricError::NoDevice`] otherwise (never panics).
    pub fn open(provider: Provider) -> Result<Fabric> {
        if let Provider::Rdma = provider {
            rdma::devices()?;
        }
        Ok(Fabric(provider))
    }

    /// The `rdma` provider ([`Fabric::open`] with [`Provider::Rdma`]).
    pub fn rdma() -> Result<Fabric> {
        Self::open(Provider::Rdma)
    }

    /// The `sim` provider on `net`.
    pub fn sim(net: &SimNetwork) -> Fabric {
        Fabric(Provider::Sim(net.clone()))
    }

    /// Opens a provider by name, as `rtgt serve --fabric <name>` does: `rdma`, or `sim` (the
    /// process-wide [`SimNetwork::global`] network).
    pub fn from_name(name: &str) -> Result<Fabric> {
        match name {
            "rdma" => Self::rdma(),
            "sim" => Ok(Self::sim(&SimNetwork::global())),
            _ => Err(FabricError::InvalidArgument(
                "unknown fabric provider (expected rdma or sim)",
            )),
        }
    }

    /// `"rdma"` or `"sim"`.
    pub fn name(&self) -> &'static str {
        match &self.0 {
            Provider::Rdma => "rdma",
            Provider::Sim(_) => "sim",
        }
    }

    /// The simulated network, for the `sim` provider.
    pub fn sim_network(&self) -> Option<&SimNetwork> {
        match &self.0 {
            Provider::Rdma => None,
            Provider::Sim(n) => Some(n),
        }
    }

    /// The devices of this fabric.
    pub fn devices(&self) -> Result<Vec<Device>> {
        match &self.0 {
            Provider::Rdma => Ok(rdma::devices()?
                .into_iter()
                .map(|d| Device(verbs::DeviceImpl::Rdma(d)))
                .collect()),
            Provider::Sim(n) => Ok(n.devices()),
        }
    }

    /// Creates a connection-manager event channel.
    pub fn create_event_channel(&self) -> Result<EventChannel> {
        match &self.0 {
            Provider::Rdma => Ok(EventChannel(cm::EcImpl::Rdma(std::sync::Arc::new(
                rdma::REventChannel::new()?,
            )))),
            Provider::Sim(n) => Ok(EventChannel(cm::EcImpl::Sim(sim::SEventChannel::new(n)?))),
        }
    }
}

/// Waits until `fd` is readable or `timeout` passes (poll(2)); returns whether it is readable.
/// For tools and tests that wait on one fabric fd ([`CompChannel::fd`], [`EventChannel::fd`],
/// [`Device::async_fd`]) without a reactor; reactors put the fds in their epoll set instead.
pub fn wait_readable(fd: std::os::fd::RawFd, timeout: std::time::Duration) -> Result<bool> {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
    loop {
        // SAFETY: one valid pollfd for the duration of the call.
        let r = unsafe { libc::poll(&mut pfd, 1, ms) };
        if r < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(FabricError::last_os("poll"));
        }
        return Ok(r == 1 && pfd.revents & libc::POLLIN != 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send_sync<T: Send + Sync>() {}

    #[test]
    fn handles_can_move_between_reactors() {
        send_sync::<Fabric>();
        send_sync::<Device>();
        send_sync::<Pd>();
        send_sync::<Mr>();
        send_sync::<Mw>();
        send_sync::<CompChannel>();
        send_sync::<Cq>();
        send_sync::<Srq>();
        send_sync::<Qp>();
        send_sync::<EventChannel>();
        send_sync::<CmId>();
        send_sync::<CmEvent>();
        send_sync::<SimNetwork>();
    }

    #[test]
    fn wait_readable_times_out_on_a_quiet_fd() {
        let net = SimNetwork::new();
        let ch = Fabric::sim(&net).create_event_channel().unwrap();
        let t0 = std::time::Instant::now();
        assert!(!wait_readable(ch.fd(), std::time::Duration::from_millis(20)).unwrap());
        assert!(t0.elapsed() >= std::time::Duration::from_millis(15));
    }
}
