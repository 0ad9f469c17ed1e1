//! The transport object: options, the fabric's devices with their protection domains and the
//! registered shared buffer pools, the listener, and the [`Transport`] implementation.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use fabric::{Access, Device, DeviceAttr, Fabric, Mr, Pd};
use iobuf::BufPool;
use parking_lot::Mutex;
use serde_json::{Value, json};
use target_core::nvme::TransportLimits;
use target_core::nvme::discovery::{adrfam, treq, trtype};
use target_core::nvme_exec::TransportInfo;
use target_core::reactor::{ReactorCtx, Reactors};
use target_core::registry::{
    CreateResult, DiscoveryInfo, PollGroupLoad, Transport, TransportContext, TransportError,
    TransportParams, TransportPollGroup,
};
use target_core::target::{AdrFam, ListenAddr, PgCore, Target, with_transport_pg};

use crate::listener::Listener;
use crate::opts::{LARGE_BUF_SIZE, RdmaOpts, SMALL_BUF_SIZE};
use crate::poll_group::RdmaPg;

/// Largest region a buffer pool is carved from (fewer, larger registrations).
const POOL_REGION_MAX: usize = 64 << 20;

/// One RDMA device: its protection domain and the pool registrations on it.
pub(crate) struct DevCtx {
    pub device: Device,
    pub name: String,
    pub pd: Pd,
    pub attr: DeviceAttr,
    /// `(start, end, lkey)` of every pool region registered on this device.
    pub lkeys: Vec<(u64, u64, u32)>,
    _mrs: Vec<Mr>,
}

impl DevCtx {
    /// The lkey of the pool region holding `addr`.
    #[inline]
    pub fn pool_lkey(&self, addr: u64) -> Option<u32> {
        self.lkeys
            .iter()
            .find(|(s, e, _)| addr >= *s && addr < *e)
            .map(|(_, _, k)| *k)
    }
}

/// State shared by the transport object, its listener and its poll groups.
pub(crate) struct RdmaShared {
    pub opts: RdmaOpts,
    pub index: usize,
    pub info: TransportInfo,
    pub fabric: Fabric,
    pub devices: Vec<DevCtx>,
    pub small: Arc<BufPool>,
    pub large: Arc<BufPool>,
    pub reactors: Reactors,
    pub target: Weak<Target>,
    /// Which poll group owns a connection, by CM identifier handle (the listener routes
    /// connection events with it; poll groups remove their entries).
    pub routes: Mutex<HashMap<u64, usize>>,
    /// Which poll group owns a queue pair, by (device index, queue pair number), for the
    /// device's asynchronous events.
    pub qp_routes: Mutex<HashMap<(usize, u32), usize>>,
}

impl RdmaShared {
    /// The index of `device` among the transport's devices.
    pub fn device_index(&self, device: &Device) -> Option<usize> {
        self.devices.iter().position(|d| d.device == *device)
    }
}

/// The NVMe-oF RDMA transport.
pub struct RdmaTransport {
    shared: Arc<RdmaShared>,
    listener: Arc<Listener>,
}

impl std::fmt::Debug for RdmaTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RdmaTransport")
            .field("index", &self.shared.index)
            .field("devices", &self.shared.devices.len())
            .finish()
    }
}

/// Buffer pool accounting, for leak checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolCounts {
    /// Small buffers in the shared pool now.
    pub small_free: usize,
    /// Small buffers the pool was created with.
    pub small_total: usize,
    /// Large buffers in the shared pool now.
    pub large_free: usize,
    /// Large buffers the pool was created with.
    pub large_total: usize,
}

/// Disconnects one queue pair of the RDMA transport on its reactor (the exec layer's
/// [`target_core::nvme_exec::DisconnectFn`]).
fn disconnect_queue(ctx: &mut ReactorCtx, transport: usize, key: u64) {
    with_transport_pg::<RdmaPg, _>(ctx, transport, |pg, core| pg.disconnect_key(core, key));
}

/// Creates the transport (`TransportOps::create`).
pub(crate) fn create(ctx: TransportContext, params: &TransportParams) -> CreateResult {
    let opts = RdmaOpts::decode(params)?;
    let fabric = rdma_plumbing::env::open_fabric(&ctx.env)?;
    let devices = fabric
        .devices()
        .map_err(|e| TransportError::Fabric(format!("cannot list RDMA devices: {e}")))?;
    if devices.is_empty() {
        return Err(TransportError::Fabric(
            "no RDMA device found (load a driver or add a soft-RoCE link)".into(),
        ));
    }
    let small = BufPool::new(opts.small_pool_count(), SMALL_BUF_SIZE, POOL_REGION_MAX)
        .map_err(|e| TransportError::Other(format!("cannot allocate data buffers: {e}")))?;
    let large = BufPool::new(opts.large_pool_count(), LARGE_BUF_SIZE, POOL_REGION_MAX)
        .map_err(|e| TransportError::Other(format!("cannot allocate data buffers: {e}")))?;
    let mut devs = Vec::new();
    for device in devices {
        let name = device.name();
        let attr = device
            .query()
            .map_err(|e| TransportError::Fabric(format!("cannot query device {name}: {e}")))?;
        let pd = device.alloc_pd().map_err(|e| {
            TransportError::Fabric(format!(
                "cannot allocate a protection domain on {name}: {e}"
            ))
        })?;
        let mut mrs = Vec::new();
        let mut lkeys = Vec::new();
        for region in small.regions().iter().chain(large.regions()) {
            let mr = pd.register(region, Access::LOCAL_WRITE).map_err(|e| {
                TransportError::Fabric(format!("cannot register data buffers on {name}: {e}"))
            })?;
            lkeys.push((
                region.addr(),
                region.addr() + region.len() as u64,
                mr.lkey(),
            ));
            mrs.push(mr);
        }
        devs.push(DevCtx {
            device,
            name,
            pd,
            attr,
            lkeys,
            _mrs: mrs,
        });
    }
    let limits = TransportLimits {
        max_io_size: opts.max_io_size,
        in_capsule_data_size: opts.in_capsule_data_size,
        msdbd: target_core::nvme::sgl::MAX_SGL_DESCRIPTORS as u8,
        max_queue_depth: opts.max_queue_depth,
        max_admin_queue_depth: opts.max_aq_depth.min(u32::from(u16::MAX)) as u16,
        max_io_queues: opts.max_io_qpairs_per_ctrlr,
        kas: opts.kas,
        keyed_sgl: true,
        transport_sgl: false,
    };
    let info = TransportInfo {
        name: "RDMA",
        index: ctx.index,
        limits,
        min_kato_ms: opts.min_kato,
        admin_max_len: LARGE_BUF_SIZE as u32,
        disconnect: disconnect_queue,
    };
    let shared = Arc::new(RdmaShared {
        opts,
        index: ctx.index,
        info,
        fabric,
        devices: devs,
        small,
        large,
        reactors: ctx.reactors.clone(),
        target: ctx.target.clone(),
        routes: Mutex::new(HashMap::new()),
        qp_routes: Mutex::new(HashMap::new()),
    });
    let listener = Listener::start(Arc::clone(&shared))?;
    tracing::info!(
        devices = ?shared.devices.iter().map(|d| d.name.as_str()).collect::<Vec<_>>(),
        fabric = shared.fabric.name(),
        "RDMA transport created"
    );
    Ok(Arc::new(RdmaTransport { shared, listener }))
}

impl RdmaTransport {
    /// The options in effect.
    pub fn opts(&self) -> &RdmaOpts {
        &self.shared.opts
    }

    /// The shared buffer pools' accounting (buffers cached by poll groups are not "free").
    pub fn pool_counts(&self) -> PoolCounts {
        PoolCounts {
            small_free: self.shared.small.free(),
            small_total: self.shared.small.total(),
            large_free: self.shared.large.free(),
            large_total: self.shared.large.total(),
        }
    }

    /// The transport's index in the target.
    pub fn index(&self) -> usize {
        self.shared.index
    }
}

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
            "address family {} is not supported by the RDMA transport (IPv4 or IPv6)",
            addr.adrfam.as_str()
        ))),
    }
}

impl Transport for RdmaTransport {
    fn name(&self) -> &'static str {
        "RDMA"
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
        Ok(Box::new(RdmaPg::new(Arc::clone(&self.shared), core)))
    }

    fn choose_poll_group(&self, admin: bool, loads: &[PollGroupLoad]) -> usize {
        self.listener.choose(admin, loads)
    }

    fn destroy(&self) {
        self.listener.stop();
        tracing::info!("RDMA transport destroyed");
    }

    fn stats(&self) -> Value {
        json!({
            "trtype": "RDMA",
            "small_buffers_free": self.shared.small.free(),
            "large_buffers_free": self.shared.large.free(),
        })
    }

    fn discovery_entry(&self, addr: &ListenAddr) -> Option<DiscoveryInfo> {
        let fam = match addr.adrfam {
            AdrFam::Ipv4 => adrfam::IPV4,
            AdrFam::Ipv6 => adrfam::IPV6,
            AdrFam::Ib => adrfam::IB,
            AdrFam::Fc => return None,
        };
        Some(DiscoveryInfo {
            trtype: trtype::RDMA,
            adrfam: fam,
            treq: treq::SECURE_NOT_REQUIRED,
            // Reliable connected, provider type not specified, RDMA_CM.
            tsas: [1, 1, 1],
        })
    }
}
