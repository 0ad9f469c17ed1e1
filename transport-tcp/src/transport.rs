//! The transport object: options, the shared data buffer pool, the listener, and the
//! [`Transport`] implementation.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use iobuf::BufPool;
use serde_json::{Value, json};
use target_core::nvme::TransportLimits;
use target_core::nvme::discovery::{adrfam, treq, trtype};
use target_core::nvme_exec::TransportInfo;
use target_core::reactor::{ReactorCtx, Reactors};
use target_core::registry::{
    CreateResult, DiscoveryInfo, PollGroupLoad, Transport, TransportContext, TransportError,
    TransportParams, TransportPollGroup,
};
use target_core::target::{AdrFam, ListenAddr, PgCore, with_transport_pg};

use crate::listener::Listener;
use crate::opts::TcpOpts;
use crate::poll_group::TcpPg;

/// Largest region the buffer pool is carved from.
const POOL_REGION_MAX: usize = 64 << 20;

/// State shared by the transport object, its listener and its poll groups.
pub(crate) struct TcpShared {
    pub opts: TcpOpts,
    pub index: usize,
    pub info: TransportInfo,
    pub pool: Arc<BufPool>,
    pub reactors: Reactors,
    /// Connections per poll group (the listener places a new one on the least loaded).
    pub conns: Box<[AtomicUsize]>,
}

/// The NVMe/TCP transport.
pub struct TcpTransport {
    shared: Arc<TcpShared>,
    listener: Arc<Listener>,
}

impl std::fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpTransport")
            .field("index", &self.shared.index)
            .finish()
    }
}

/// Disconnects one queue of the TCP transport on its reactor (the exec layer's
/// [`target_core::nvme_exec::DisconnectFn`]).
fn disconnect_queue(ctx: &mut ReactorCtx, transport: usize, key: u64) {
    with_transport_pg::<TcpPg, _>(ctx, transport, |pg, core| pg.disconnect_key(core, key));
}

/// Creates the transport (`TransportOps::create`).
pub(crate) fn create(ctx: TransportContext, params: &TransportParams) -> CreateResult {
    let opts = TcpOpts::decode(params)?;
    let pool = BufPool::new(
        opts.num_shared_buffers as usize,
        opts.io_unit_size as usize,
        POOL_REGION_MAX,
    )
    .map_err(|e| TransportError::Other(format!("cannot allocate data buffers: {e}")))?;
    let limits = TransportLimits {
        max_io_size: opts.max_io_size,
        in_capsule_data_size: opts.in_capsule_data_size,
        msdbd: 1,
        max_queue_depth: opts.max_queue_depth,
        max_admin_queue_depth: opts.max_aq_depth.min(u32::from(u16::MAX)) as u16,
        max_io_queues: opts.max_io_qpairs_per_ctrlr,
        kas: opts.kas,
        keyed_sgl: false,
        transport_sgl: true,
    };
    let info = TransportInfo {
        name: "TCP",
        index: ctx.index,
        limits,
        min_kato_ms: opts.min_kato,
        admin_max_len: opts.io_unit_size,
        disconnect: disconnect_queue,
    };
    let n = ctx.reactors.len();
    let shared = Arc::new(TcpShared {
        opts,
        index: ctx.index,
        info,
        pool,
        reactors: ctx.reactors.clone(),
        conns: (0..n).map(|_| AtomicUsize::new(0)).collect(),
    });
    let listener = Listener::start(Arc::clone(&shared))?;
    tracing::info!("TCP transport created");
    Ok(Arc::new(TcpTransport { shared, listener }))
}

impl TcpShared {
    /// The poll group with the fewest connections.
    pub fn least_loaded(&self) -> usize {
        (0..self.conns.len())
            .min_by_key(|&i| self.conns[i].load(Ordering::Relaxed))
            .unwrap_or(0)
    }
}

impl TcpTransport {
    /// The options in effect.
    pub fn opts(&self) -> &TcpOpts {
        &self.shared.opts
    }

    /// `(free, total)` buffers of the shared pool (buffers cached by poll groups are not free).
    pub fn pool_counts(&self) -> (usize, usize) {
        (self.shared.pool.free(), self.shared.pool.total())
    }

    /// The transport's index in the target.
    pub fn index(&self) -> usize {
        self.shared.index
    }
}

/// The socket address of a TCP listener (IPv4 or IPv6).
pub(crate) fn socket_addr(addr: &ListenAddr) -> Result<SocketAddr, TransportError> {
    let ip = addr
        .ip()
        .map_err(|e| TransportError::Invalid(e.to_string()))?;
    let port = addr
        .port()
        .map_err(|e| TransportError::Invalid(e.to_string()))?;
    match (addr.adrfam, ip) {
        (AdrFam::Ipv4, std::net::IpAddr::V4(_)) | (AdrFam::Ipv6, std::net::IpAddr::V6(_)) => {
            Ok(SocketAddr::new(ip, port))
        }
        (AdrFam::Ipv4 | AdrFam::Ipv6, _) => Err(TransportError::Invalid(format!(
            "address {} does not match address family {}",
            addr.traddr,
            addr.adrfam.as_str()
        ))),
        _ => Err(TransportError::Invalid(format!(
            "address family {} is not supported by the TCP transport (IPv4 or IPv6)",
            addr.adrfam.as_str()
        ))),
    }
}

impl Transport for TcpTransport {
    fn name(&self) -> &'static str {
        "TCP"
    }

    fn dump_opts(&self) -> TransportParams {
        self.shared.opts.dump()
    }

    fn listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        self.listener.listen(addr)
    }

    fn stop_listen(&self, addr: &ListenAddr) -> Result<(), TransportError> {
        self.listener.stop_listen(addr)
    }

    fn poll_group_create(
        &self,
        core: &mut PgCore,
    ) -> Result<Box<dyn TransportPollGroup>, TransportError> {
        Ok(Box::new(TcpPg::new(Arc::clone(&self.shared), core)?))
    }

    fn choose_poll_group(&self, _admin: bool, loads: &[PollGroupLoad]) -> usize {
        // Which queue a TCP connection carries is known only after Connect: the listener
        // places connections by their count (this is not called for TCP).
        loads
            .iter()
            .min_by_key(|l| l.admin_qpairs + l.io_qpairs)
            .map_or(0, |l| l.index)
    }

    fn destroy(&self) {
        self.listener.stop();
        tracing::info!("TCP transport destroyed");
    }

    fn stats(&self) -> Value {
        json!({
            "trtype": "TCP",
            "buffers_free": self.shared.pool.free(),
            "buffers_total": self.shared.pool.total(),
        })
    }

    fn discovery_entry(&self, addr: &ListenAddr) -> Option<DiscoveryInfo> {
        let fam = match addr.adrfam {
            AdrFam::Ipv4 => adrfam::IPV4,
            AdrFam::Ipv6 => adrfam::IPV6,
            _ => return None,
        };
        Some(DiscoveryInfo {
            trtype: trtype::TCP,
            adrfam: fam,
            treq: treq::SECURE_NOT_REQUIRED,
            // SECTYPE 0: no security (no TLS).
            tsas: [0, 0, 0],
        })
    }
}
