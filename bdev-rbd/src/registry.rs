//! The RBD module: registered clusters (shared handles), and creating, deleting and resizing
//! RBD bdevs, with SPDK's `bdev_rbd_*` semantics. Every method that talks to the cluster blocks
//! the calling thread for a bounded time: call them from a blocking task (tokio's
//! `spawn_blocking`), never from a reactor.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;
use serde_json::{Map, Value, json};
use target_core::bdev::{Bdev, BdevRegistry};

use crate::bdev::{NewBdev, Origin, RbdBdev, ResizeListener};
use crate::error::RbdError;
use crate::image::{Image, OpenSpec};
use crate::params::{ClusterName, Create, Delete, GetClustersInfo, RegisterCluster, Resize};
use crate::rados::{Cluster, ConfigFile, ConnectSpec, Timeouts, run_bounded};

/// Options of the module.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RbdOptions {
    /// Time limits for new cluster handles (`config_param` / `config` / the config file may set
    /// `client_mount_timeout` and `rados_osd_op_timeout` per cluster instead).
    pub timeouts: Timeouts,
}

/// A registered cluster.
pub struct Registered {
    params: RegisterCluster,
    cluster: Arc<Cluster>,
    nonce: String,
    users: Mutex<Vec<String>>,
}

impl std::fmt::Debug for Registered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Registered({})", self.params.name)
    }
}

impl Registered {
    /// The registration's name.
    pub fn name(&self) -> &str {
        &self.params.name
    }

    /// The shared handle.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Names of the bdevs using it.
    pub fn users(&self) -> Vec<String> {
        self.users.lock().clone()
    }

    /// The registration parameters SPDK shows under a bdev's `driver_specific.rbd`.
    pub(crate) fn write_params(&self, m: &mut Map<String, Value>) {
        let p = &self.params;
        if let Some(u) = &p.user_id {
            m.insert("user_id".into(), json!(u));
        }
        if let Some(c) = &p.config_param {
            m.insert("config_param".into(), c.to_json());
        }
        if let Some(f) = &p.config_file {
            m.insert("config_file".into(), json!(f));
        }
        if let Some(k) = &p.key_file {
            m.insert("key_file".into(), json!(k));
        }
    }

    /// One entry of `bdev_rbd_get_clusters_info`: SPDK's fields, and `nonce`, the session's
    /// addresses (what `ceph osd blocklist add` takes), as ceph-nvmeof's SPDK reports it.
    pub fn info(&self) -> Value {
        let mut m = Map::new();
        m.insert("cluster_name".into(), json!(self.params.name));
        self.write_params(&mut m);
        if let Some(c) = &self.params.core_mask {
            m.insert("core_mask".into(), json!(c));
        }
        m.insert("nonce".into(), json!(self.nonce));
        Value::Object(m)
    }

    /// The `bdev_rbd_register_cluster` call that recreates it (save_config).
    pub fn config(&self) -> Value {
        let mut m = Map::new();
        m.insert("name".into(), json!(self.params.name));
        self.write_params(&mut m);
        if let Some(c) = &self.params.core_mask {
            m.insert("core_mask".into(), json!(c));
        }
        json!({"method": "bdev_rbd_register_cluster", "params": Value::Object(m)})
    }
}

/// A bdev's use of a registered cluster; ends when dropped.
pub(crate) struct ClusterLease {
    reg: Arc<Registered>,
    bdev: String,
}

impl Drop for ClusterLease {
    fn drop(&mut self) {
        self.reg.users.lock().retain(|b| *b != self.bdev);
    }
}

/// The RBD bdev module: one per target.
pub struct RbdModule {
    options: RbdOptions,
    clusters: Mutex<Vec<Arc<Registered>>>,
    seq: AtomicU32,
    listener: Mutex<Option<ResizeListener>>,
}

impl std::fmt::Debug for RbdModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RbdModule")
            .field("clusters", &self.cluster_names())
            .finish()
    }
}

fn check_block_size(bs: u32) -> Result<(), RbdError> {
    if !(512..=4096).contains(&bs) || !bs.is_power_of_two() {
        return Err(RbdError::invalid(format!(
            "block_size {bs} is not supported (512, 1024, 2048 or 4096)"
        )));
    }
    Ok(())
}

fn not_empty(what: &str, v: &str) -> Result<(), RbdError> {
    if v.is_empty() {
        return Err(RbdError::invalid(format!("{what} must not be empty")));
    }
    Ok(())
}

impl RbdModule {
    /// A module with no clusters.
    pub fn new(options: RbdOptions) -> Arc<Self> {
        crate::bdev::watcher();
        Arc::new(Self {
            options,
            clusters: Mutex::new(Vec::new()),
            seq: AtomicU32::new(0),
            listener: Mutex::new(None),
        })
    }

    /// Who hears about image resizes of bdevs created from now on.
    pub fn set_resize_listener(&self, l: ResizeListener) {
        *self.listener.lock() = Some(l);
    }

    /// Names of the registered clusters, in registration order.
    pub fn cluster_names(&self) -> Vec<String> {
        self.clusters
            .lock()
            .iter()
            .map(|r| r.name().to_string())
            .collect()
    }

    /// A registered cluster.
    pub fn cluster(&self, name: &str) -> Option<Arc<Registered>> {
        self.clusters
            .lock()
            .iter()
            .find(|r| r.name() == name)
            .cloned()
    }

    fn registered(&self, name: &str) -> Result<Arc<Registered>, RbdError> {
        self.cluster(name).ok_or_else(|| {
            RbdError::errno(
                libc::ENOENT,
                format!("Rados cluster '{name}' is not registered"),
            )
        })
    }

    /// `bdev_rbd_register_cluster`: connects a shared handle (blocking, bounded by the connect
    /// timeout); nothing is registered if it fails. Returns the name.
    pub fn register_cluster(&self, p: RegisterCluster) -> Result<String, RbdError> {
        not_empty("name", &p.name)?;
        if self.cluster(&p.name).is_some() {
            return Err(RbdError::errno(
                libc::EEXIST,
                format!("Rados cluster '{}' is already registered", p.name),
            ));
        }
        let params = p.config_param.clone().unwrap_or_default();
        params.validate("config_param")?;
        let cpus = match &p.core_mask {
            None => None,
            Some(mask) => {
                let cpus = target_core::reactor::parse_cpumask(mask)
                    .map_err(|e| RbdError::invalid(format!("core_mask: {e}")))?;
                let allowed = target_core::reactor::sys::allowed_cpus();
                if let Some(bad) = cpus.iter().find(|c| !allowed.contains(c)) {
                    return Err(RbdError::invalid(format!(
                        "core_mask '{mask}': CPU {bad} is not available to this process"
                    )));
                }
                Some(cpus)
            }
        };
        let cluster = Cluster::connect(ConnectSpec {
            what: format!("cluster '{}'", p.name),
            user_id: p.user_id.clone(),
            config_file: match &p.config_file {
                Some(f) => ConfigFile::Path(f.clone()),
                None => ConfigFile::Search,
            },
            params,
            keyring: p.key_file.clone(),
            cpus,
            timeouts: self.options.timeouts,
        })?;
        let nonce = cluster.addrs().unwrap_or_else(|e| {
            tracing::warn!("{e}");
            String::new()
        });
        let name = p.name.clone();
        let reg = Arc::new(Registered {
            params: p,
            cluster,
            nonce,
            users: Mutex::new(Vec::new()),
        });
        let mut clusters = self.clusters.lock();
        if clusters.iter().any(|r| r.name() == name) {
            return Err(RbdError::errno(
                libc::EEXIST,
                format!("Rados cluster '{name}' is already registered"),
            ));
        }
        clusters.push(reg);
        tracing::info!("Rados cluster '{name}' registered");
        Ok(name)
    }

    /// `bdev_rbd_unregister_cluster`: refused while a bdev uses the cluster.
    pub fn unregister_cluster(&self, p: ClusterName) -> Result<bool, RbdError> {
        let reg = {
            let mut clusters = self.clusters.lock();
            let pos = clusters
                .iter()
                .position(|r| r.name() == p.name)
                .ok_or_else(|| {
                    RbdError::errno(
                        libc::ENOENT,
                        format!("Rados cluster '{}' is not registered", p.name),
                    )
                })?;
            let users = clusters[pos].users();
            if !users.is_empty() {
                return Err(RbdError::errno(
                    libc::EBUSY,
                    format!(
                        "Rados cluster '{}' is used by bdev(s) {}",
                        p.name,
                        users.join(", ")
                    ),
                ));
            }
            clusters.remove(pos)
        };
        // Disconnects here (off the lock) unless an image is still closing.
        drop(reg);
        tracing::info!("Rados cluster '{}' unregistered", p.name);
        Ok(true)
    }

    /// `bdev_rbd_get_clusters_info`: one object for a name, an array of all otherwise.
    pub fn clusters_info(&self, p: GetClustersInfo) -> Result<Value, RbdError> {
        match p.name {
            Some(n) => Ok(self.registered(&n)?.info()),
            None => Ok(Value::Array(
                self.clusters.lock().iter().map(|r| r.info()).collect(),
            )),
        }
    }

    /// `bdev_rbd_wait_for_latest_osdmap` (blocking, bounded).
    pub fn wait_for_latest_osdmap(&self, p: ClusterName) -> Result<bool, RbdError> {
        let reg = self.registered(&p.name)?;
        reg.cluster.wait_for_latest_osdmap()?;
        Ok(true)
    }

    /// The `bdev_rbd_register_cluster` calls that recreate the registrations, in order. They
    /// go into the `bdev` subsystem's save_config before the bdevs.
    pub fn config_entries(&self) -> Vec<Value> {
        self.clusters.lock().iter().map(|r| r.config()).collect()
    }

    fn next_name(&self, bdevs: &BdevRegistry) -> String {
        loop {
            let n = self.seq.fetch_add(1, Ordering::Relaxed);
            let name = format!("Ceph{n}");
            if bdevs.get(&name).is_none() {
                return name;
            }
        }
    }

    /// `bdev_rbd_create`: opens the image (and, without `cluster_name`, a handle of its own)
    /// off the calling thread within the time limits, and registers the bdev. Nothing is left
    /// behind when it fails. Returns the bdev's name.
    pub fn create_bdev(&self, bdevs: &Arc<BdevRegistry>, p: Create) -> Result<String, RbdError> {
        check_block_size(p.block_size)?;
        not_empty("pool_name", &p.pool_name)?;
        not_empty("rbd_name", &p.rbd_name)?;
        let uuid = match &p.uuid {
            None => uuid::Uuid::new_v4(),
            Some(s) => uuid::Uuid::parse_str(s)
                .map_err(|e| RbdError::Decode(format!("uuid '{s}': {e}")))?,
        };
        if let Some(c) = &p.config {
            c.validate("config")?;
        }
        if p.cluster_name.is_some() && (p.user_id.is_some() || p.config.is_some()) {
            return Err(RbdError::invalid(
                "user_id and config cannot be combined with cluster_name: the registered \
                 cluster's settings apply (bdev_rbd_register_cluster)",
            ));
        }
        let name = match &p.name {
            Some(n) => {
                not_empty("name", n)?;
                n.clone()
            }
            None => self.next_name(bdevs),
        };
        if bdevs.get(&name).is_some() {
            return Err(RbdError::errno(
                libc::EEXIST,
                format!("bdev '{name}' already exists"),
            ));
        }
        let (cluster, origin, lease) = match &p.cluster_name {
            Some(cn) => {
                let reg = self.registered(cn)?;
                reg.users.lock().push(name.clone());
                let lease = crate::registry::ClusterLease {
                    reg: Arc::clone(&reg),
                    bdev: name.clone(),
                };
                (Arc::clone(&reg.cluster), Origin::Shared(reg), Some(lease))
            }
            None => {
                let cluster = Cluster::connect(ConnectSpec {
                    what: format!("bdev {name}"),
                    user_id: p.user_id.clone(),
                    config_file: if p.config.is_some() {
                        ConfigFile::Skip
                    } else {
                        ConfigFile::Search
                    },
                    params: p.config.clone().unwrap_or_default(),
                    keyring: None,
                    cpus: None,
                    timeouts: self.options.timeouts,
                })?;
                let origin = Origin::Private {
                    user_id: p.user_id.clone(),
                    config: p.config.clone(),
                };
                (cluster, origin, None)
            }
        };
        let spec = OpenSpec {
            pool: p.pool_name.clone(),
            namespace: p.namespace_name.clone().filter(|n| !n.is_empty()),
            image: p.rbd_name.clone(),
            read_only: p.read_only,
        };
        let t = cluster.timeouts();
        let limit = t.connect + t.osd_op + std::time::Duration::from_secs(5);
        let listener = self.listener.lock().clone();
        let what = format!("bdev {name}: RBD image {}", spec.spec());
        let nb = NewBdev {
            name: name.clone(),
            uuid,
            block_size: p.block_size,
            origin,
            lease,
            listener,
            registry: Arc::downgrade(bdevs),
        };
        let bdev = run_bounded("rbd-open", limit, move || {
            RbdBdev::new(Arc::new(Image::open(cluster, spec)?), nb)
        })
        .map_err(|e| RbdError::errno(e.code().unwrap_or(libc::EIO), format!("{what}: {e}")))??;
        bdevs.register(bdev)?;
        Ok(name)
    }

    /// `bdev_rbd_delete`: unregisters an RBD bdev. Its namespaces must be gone (the rpc layer
    /// removes them first, as for the other bdev types); a claimed bdev is refused.
    pub fn delete_bdev(&self, bdevs: &BdevRegistry, p: Delete) -> Result<bool, RbdError> {
        if RbdBdev::lookup(bdevs, &p.name).is_none() {
            return Err(RbdError::errno(
                libc::ENODEV,
                format!("rbd bdev '{}' does not exist", p.name),
            ));
        }
        bdevs.unregister(&p.name)?;
        Ok(true)
    }

    /// At exit (the module's `fini`), after the target stopped: closes every RBD bdev's image
    /// once its I/O in flight has ended (within the largest OSD timeout plus 5 s), then
    /// disconnects every cluster handle whose images all closed. Blocking.
    pub fn close_all(&self, bdevs: &BdevRegistry) {
        let rbds: Vec<Arc<RbdBdev>> = bdevs
            .names()
            .iter()
            .filter_map(|n| RbdBdev::lookup(bdevs, n))
            .collect();
        let limit = rbds
            .iter()
            .map(|b| b.image().cluster().timeouts().osd_op)
            .max()
            .unwrap_or_default()
            + std::time::Duration::from_secs(5);
        let deadline = std::time::Instant::now() + limit;
        // Each cluster handle, and whether every image on it closed.
        let mut handles: Vec<(Arc<crate::rados::Cluster>, bool)> = self
            .clusters
            .lock()
            .iter()
            .map(|r| (Arc::clone(&r.cluster), true))
            .collect();
        for b in &rbds {
            let closed = b.close_when_idle(deadline);
            let c = b.image().cluster();
            match handles.iter_mut().find(|(h, _)| Arc::ptr_eq(h, c)) {
                Some((_, ok)) => *ok &= closed,
                None => handles.push((Arc::clone(c), closed)),
            }
        }
        for (c, ok) in handles {
            if ok {
                c.close_at_exit();
            } else {
                tracing::error!(
                    "{}: images still busy; the connection is left open",
                    c.what()
                );
            }
        }
    }

    /// `bdev_rbd_resize`: grows the image to `new_size` MiB (blocking, bounded); shrinking is
    /// refused, as in SPDK.
    pub fn resize_bdev(&self, bdevs: &BdevRegistry, p: Resize) -> Result<bool, RbdError> {
        let bdev = RbdBdev::lookup(bdevs, &p.name).ok_or_else(|| {
            RbdError::errno(
                libc::ENODEV,
                format!("rbd bdev '{}' does not exist", p.name),
            )
        })?;
        let current_mib = u64::from(bdev.block_size()) * bdev.num_blocks() / (1 << 20);
        if p.new_size < current_mib {
            return Err(RbdError::invalid(format!(
                "bdev {}: the new size ({} MiB) must not be smaller than the current size \
                 ({current_mib} MiB)",
                p.name, p.new_size
            )));
        }
        let bytes = p.new_size.checked_mul(1 << 20).ok_or_else(|| {
            RbdError::invalid(format!("new_size {} MiB is too large", p.new_size))
        })?;
        let t = bdev.image().cluster().timeouts();
        let limit = t.osd_op + t.connect + std::time::Duration::from_secs(5);
        let name = p.name.clone();
        run_bounded("rbd-resize", limit, move || bdev.resize(bytes)).map_err(|e| {
            RbdError::errno(
                e.code().unwrap_or(libc::EIO),
                format!("bdev {name}: resize: {e}"),
            )
        })??;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::conf::ConfMap;

    #[test]
    fn parameters_refused_before_any_connection() {
        let m = RbdModule::new(RbdOptions::default());
        let bdevs = BdevRegistry::new();
        let base = Create {
            pool_name: "rbd".into(),
            rbd_name: "img".into(),
            block_size: 4096,
            cluster_name: Some("c".into()),
            ..Create::default()
        };
        let e = m
            .create_bdev(
                &bdevs,
                Create {
                    block_size: 520,
                    ..base.clone()
                },
            )
            .unwrap_err();
        assert_eq!(e.code(), Some(libc::EINVAL), "{e}");
        let e = m
            .create_bdev(
                &bdevs,
                Create {
                    uuid: Some("not-a-uuid".into()),
                    ..base.clone()
                },
            )
            .unwrap_err();
        assert!(matches!(e, RbdError::Decode(_)), "{e}");
        let e = m
            .create_bdev(
                &bdevs,
                Create {
                    user_id: Some("x".into()),
                    ..base.clone()
                },
            )
            .unwrap_err();
        assert!(e.to_string().contains("cluster_name"), "{e}");
        let e = m.create_bdev(&bdevs, base.clone()).unwrap_err();
        assert_eq!(e.code(), Some(libc::ENOENT), "{e}");
        assert!(e.to_string().contains("'c' is not registered"), "{e}");
        let e = m
            .register_cluster(RegisterCluster {
                name: "c".into(),
                core_mask: Some("0x0".into()),
                ..RegisterCluster::default()
            })
            .unwrap_err();
        assert_eq!(e.code(), Some(libc::EINVAL), "{e}");
        let e = m
            .register_cluster(RegisterCluster {
                name: "c".into(),
                config_param: Some(ConfMap(vec![("key".into(), "AQ==".into())])),
                ..RegisterCluster::default()
            })
            .unwrap_err();
        assert!(e.to_string().contains("key_file"), "{e}");
        assert!(m.cluster_names().is_empty());
        assert!(bdevs.names().is_empty());
        assert_eq!(
            m.clusters_info(GetClustersInfo::default()).unwrap(),
            json!([])
        );
        let e = m
            .unregister_cluster(ClusterName { name: "c".into() })
            .unwrap_err();
        assert_eq!(e.code(), Some(libc::ENOENT));
        let e = m
            .delete_bdev(&bdevs, Delete { name: "x".into() })
            .unwrap_err();
        assert_eq!(e.code(), Some(libc::ENODEV));
    }
}
