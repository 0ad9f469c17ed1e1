//! The RBD block device: an open image behind target-core's [`Bdev`] interface, its size kept
//! current by the image's update watch.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::Mutex;
use serde_json::{Value, json};
use target_core::bdev::{Bdev, BdevChannel, BdevError, BdevRegistry, IoType};

use crate::channel::RbdChannel;
use crate::conf::ConfMap;
use crate::image::Image;
use crate::registry::{ClusterLease, Registered};

/// The product name SPDK gives RBD bdevs (`bdev_get_bdevs`).
pub const RBD_PRODUCT_NAME: &str = "Ceph Rbd Disk";

/// Called with a bdev's name and its new block count when its image changed size (resized by
/// `bdev_rbd_resize` or by another client). Runs on a control thread, never on a reactor.
pub type ResizeListener = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// How a bdev reaches its cluster.
#[derive(Debug, Clone)]
pub(crate) enum Origin {
    /// Through a registered cluster (`cluster_name`).
    Shared(Arc<Registered>),
    /// Through a handle of its own (`user_id`, `config`).
    Private {
        user_id: Option<String>,
        config: Option<ConfMap>,
    },
}

/// The size of a bdev, refreshed after image updates.
pub(crate) struct SizeState {
    name: String,
    block_size: u32,
    num_blocks: AtomicU64,
    image: Weak<Image>,
    /// Where a size change is announced (and a shrink of a bdev in use refused).
    registry: Weak<BdevRegistry>,
    listener: Option<ResizeListener>,
}

impl SizeState {
    /// Reads the image size and, if the block count changed, stores it and tells the listener.
    /// Blocking (librbd refreshes the image header).
    pub(crate) fn refresh(&self) {
        let Some(image) = self.image.upgrade() else {
            return;
        };
        match image.size() {
            Ok(bytes) => {
                if let Err(e) = self.set_bytes(bytes) {
                    // As SPDK's update callback: the image shrank under an exported bdev, which
                    // keeps its size; I/O past the image's new end fails in librbd.
                    tracing::error!(
                        "bdev {}: image {} is now {bytes} bytes: {e}",
                        self.name,
                        image.spec().spec()
                    );
                }
            }
            Err(e) => tracing::warn!("bdev {}: cannot refresh the size: {e}", self.name),
        }
    }

    /// The image is `bytes` long now: the bdev takes its size in whole blocks, through the
    /// registry's [`BdevRegistry::change_blockcnt`] (which tells the target, and refuses to
    /// shrink a bdev in use).
    fn set_bytes(&self, bytes: u64) -> Result<(), BdevError> {
        let blocks = bytes / u64::from(self.block_size);
        let old = self.num_blocks.load(Ordering::Acquire);
        if old == blocks {
            return Ok(());
        }
        let store = |n| self.num_blocks.store(n, Ordering::Release);
        match self.registry.upgrade() {
            Some(r) => r.change_blockcnt(&self.name, old, blocks, store)?,
            None => store(blocks),
        }
        if let Some(l) = &self.listener {
            l(&self.name, blocks);
        }
        Ok(())
    }
}

/// The one thread that refreshes sizes after update notifications (librbd's callback must
/// not call librbd itself). Started by [`crate::RbdModule::new`], on the caller's thread's CPUs
/// (not on a thread pinned for a cluster's `core_mask`).
pub(crate) fn watcher() -> &'static Sender<Weak<SizeState>> {
    static TX: OnceLock<Sender<Weak<SizeState>>> = OnceLock::new();
    TX.get_or_init(|| {
        let (tx, rx) = channel::<Weak<SizeState>>();
        let spawned = std::thread::Builder::new()
            .name("rbd-watch".into())
            .spawn(move || {
                while let Ok(w) = rx.recv() {
                    if let Some(s) = w.upgrade() {
                        s.refresh();
                    }
                }
            });
        if let Err(e) = spawned {
            tracing::error!("cannot start the RBD size watcher thread: {e}");
        }
        tx
    })
}

/// An RBD image as a block device.
pub struct RbdBdev {
    name: String,
    uuid: uuid::Uuid,
    block_size: u32,
    read_only: bool,
    write_cache: bool,
    size: Arc<SizeState>,
    image: Arc<Image>,
    origin: Origin,
    lease: Mutex<Option<ClusterLease>>,
}

impl std::fmt::Debug for RbdBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbdBdev")
            .field("name", &self.name)
            .field("image", &self.image.spec().spec())
            .finish()
    }
}

/// What [`RbdBdev::new`] needs.
pub(crate) struct NewBdev {
    pub name: String,
    pub uuid: uuid::Uuid,
    pub block_size: u32,
    pub origin: Origin,
    pub lease: Option<ClusterLease>,
    pub listener: Option<ResizeListener>,
    pub registry: Weak<BdevRegistry>,
}

impl RbdBdev {
    /// Watches the image, reads its size, and builds the bdev (blocking).
    pub(crate) fn new(image: Arc<Image>, p: NewBdev) -> Result<Arc<Self>, crate::RbdError> {
        let size = Arc::new(SizeState {
            name: p.name.clone(),
            block_size: p.block_size,
            num_blocks: AtomicU64::new(0),
            image: Arc::downgrade(&image),
            registry: p.registry,
            listener: p.listener,
        });
        let weak = Arc::downgrade(&size);
        let tx = watcher().clone();
        // Watch first, then read the size: a resize in between is not missed.
        image.watch(Box::new(move || {
            let _ = tx.send(weak.clone());
        }))?;
        let bytes = image.size()?;
        let blocks = bytes / u64::from(p.block_size);
        if blocks == 0 {
            return Err(crate::RbdError::invalid(format!(
                "RBD image {} ({bytes} bytes) holds no complete {}-byte block",
                image.spec().spec(),
                p.block_size
            )));
        }
        size.num_blocks.store(blocks, Ordering::Release);
        // librbd caches writes until a flush only when configured to (rbd_cache on, and not
        // write-through until the first flush): only then is there a volatile cache to report.
        let conf = |o: &str| image.cluster().conf_get(o).unwrap_or_default();
        let write_cache =
            conf("rbd_cache") == "true" && conf("rbd_cache_writethrough_until_flush") == "false";
        Ok(Arc::new(Self {
            name: p.name,
            uuid: p.uuid,
            block_size: p.block_size,
            read_only: image.spec().read_only,
            write_cache,
            size,
            image,
            origin: p.origin,
            lease: Mutex::new(p.lease),
        }))
    }

    /// Finds the RBD bdev `name` among `bdevs`.
    pub fn lookup(bdevs: &target_core::bdev::BdevRegistry, name: &str) -> Option<Arc<RbdBdev>> {
        let b = bdevs.get(name)?;
        let any: Arc<dyn std::any::Any + Send + Sync> = b;
        any.downcast::<RbdBdev>().ok()
    }

    /// The open image.
    pub fn image(&self) -> &Arc<Image> {
        &self.image
    }

    /// The registered cluster it uses, if any.
    pub fn cluster_name(&self) -> Option<&str> {
        match &self.origin {
            Origin::Shared(r) => Some(r.name()),
            Origin::Private { .. } => None,
        }
    }

    /// Resizes the image to `bytes` and updates the block count (blocking).
    pub(crate) fn resize(&self, bytes: u64) -> Result<(), crate::RbdError> {
        self.image.resize(bytes)?;
        self.size.set_bytes(bytes)?;
        Ok(())
    }

    /// How it reaches its cluster (with the registration's parameters when `registration`),
    /// its namespace and read-only flag: what save_config and `driver_specific` share.
    fn describe(&self, m: &mut serde_json::Map<String, Value>, registration: bool) {
        match &self.origin {
            Origin::Shared(r) => {
                if registration {
                    r.write_params(m);
                }
                m.insert("cluster_name".into(), json!(r.name()));
            }
            Origin::Private { user_id, config } => {
                if let Some(u) = user_id {
                    m.insert("user_id".into(), json!(u));
                }
                if let Some(c) = config {
                    m.insert("config".into(), c.to_json());
                }
            }
        }
        let spec = self.image.spec();
        if let Some(ns) = spec.namespace.as_deref().filter(|n| !n.is_empty()) {
            m.insert("namespace_name".into(), json!(ns));
        }
        if spec.read_only {
            m.insert("read_only".into(), json!(true));
        }
    }

    /// At exit: waits until no I/O is in flight on the image (each holds a reference to it
    /// through its channel's ring; I/O to an unreachable OSD fails after the OSD timeout) or
    /// until `deadline`, then closes the image on this thread. Returns whether it is closed; an
    /// image with I/O still in flight at the deadline stays open (closing it under librbd's
    /// completions is what crashed before), with an error logged.
    pub fn close_when_idle(&self, deadline: std::time::Instant) -> bool {
        let mut logged = false;
        while Arc::strong_count(&self.image) > 1 {
            if std::time::Instant::now() >= deadline {
                tracing::error!(
                    "bdev {}: I/O still in flight on RBD image {}; left open",
                    self.name,
                    self.image.spec().spec()
                );
                return false;
            }
            if !logged {
                tracing::info!("bdev {}: waiting for its I/O in flight to end", self.name);
                logged = true;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        self.image.close();
        tracing::info!(
            "bdev {}: RBD image {} closed",
            self.name,
            self.image.spec().spec()
        );
        true
    }

    /// Re-reads the image size now (blocking); the update watch does this by itself.
    pub fn refresh_size(&self) {
        self.size.refresh();
    }
}

impl Bdev for RbdBdev {
    fn name(&self) -> &str {
        &self.name
    }
    fn product_name(&self) -> &'static str {
        RBD_PRODUCT_NAME
    }
    fn block_size(&self) -> u32 {
        self.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.size.num_blocks.load(Ordering::Acquire)
    }
    fn uuid(&self) -> uuid::Uuid {
        self.uuid
    }
    fn supports(&self, io: IoType) -> bool {
        match io {
            IoType::Read | IoType::Flush => true,
            IoType::Write | IoType::WriteZeroes | IoType::Unmap => !self.read_only,
            IoType::Compare => false,
        }
    }
    fn write_cache(&self) -> bool {
        // SPDK always says no. By default librbd's cache stays write-through until the first
        // flush, and a host that sees no volatile cache never sends one; a handle configured
        // for write-back needs the host's flushes, so it is reported.
        self.write_cache
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        if !self.image.is_open() {
            return Err(BdevError::Io {
                context: format!("opening a channel on {}", self.name),
                source: std::io::Error::from_raw_os_error(libc::EBADF),
            });
        }
        let ch = RbdChannel::new(Arc::clone(&self.image), self.block_size).map_err(|source| {
            BdevError::Io {
                context: format!("opening a channel on {}", self.name),
                source,
            }
        })?;
        Ok(Box::new(ch))
    }
    fn config(&self) -> Value {
        let spec = self.image.spec();
        let mut p = json!({
            "name": self.name,
            "pool_name": spec.pool,
            "rbd_name": spec.image,
            "block_size": self.block_size,
        });
        let m = p.as_object_mut().expect("object");
        self.describe(m, false);
        m.insert("uuid".into(), json!(self.uuid.to_string()));
        json!({"method": "bdev_rbd_create", "params": p})
    }
    fn driver_specific(&self) -> Value {
        let spec = self.image.spec();
        let mut o = json!({"pool_name": spec.pool, "rbd_name": spec.image});
        self.describe(o.as_object_mut().expect("object"), true);
        json!({ "rbd": o })
    }
    fn destroy(&self) {
        // The cluster may be unregistered from now on; the handle itself lives until the image
        // (held by any channel still open) is closed.
        self.lease.lock().take();
    }
}
