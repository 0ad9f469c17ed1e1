//! Cluster handles (librados): configured from a file, RPC parameters and a keyring, connected
//! off the reactors within a time limit, shared by every image opened through them.

use std::ffi::{CStr, CString, c_char};
use std::sync::Arc;
use std::sync::mpsc::{RecvTimeoutError, sync_channel};
use std::time::{Duration, Instant};

use crate::conf::ConfMap;
use crate::error::{RbdError, strerror};
use crate::ffi;

/// How long rtgt waits for the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting to the monitors (librados `client_mount_timeout`), and the bound on opening an
    /// image or waiting for an OSD map beyond the OSD operation timeout.
    pub connect: Duration,
    /// How long an I/O may wait for an OSD before it fails with `ETIMEDOUT` (librados
    /// `rados_osd_op_timeout`; also `rados_mon_op_timeout`). Zero: wait forever.
    pub osd_op: Duration,
}

impl Default for Timeouts {
    /// 10 s to connect; I/O fails after 20 s without an answer from its OSD, before the usual
    /// 30 s command timeout of Linux hosts makes them abort and reset.
    fn default() -> Self {
        Self {
            connect: Duration::from_secs(10),
            osd_op: Duration::from_secs(20),
        }
    }
}

/// Extra time the caller waits beyond librados' own limits before giving up on a thread.
const BACKSTOP: Duration = Duration::from_secs(5);

/// Which configuration file a handle reads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigFile {
    /// librados' default search ($CEPH_CONF, /etc/ceph/ceph.conf, …); none found is not an
    /// error.
    Search,
    /// This file, which must exist.
    Path(String),
    /// None: everything comes from the parameters.
    Skip,
}

/// Everything needed to connect a handle.
#[derive(Debug, Clone)]
pub struct ConnectSpec {
    /// What the handle is for, in messages ("cluster 'ceph1'", "bdev Ceph0").
    pub what: String,
    /// Ceph user id without `client.` (`None`: admin).
    pub user_id: Option<String>,
    /// The configuration file.
    pub config_file: ConfigFile,
    /// Options set after the file, in order.
    pub params: ConfMap,
    /// A keyring file (`key_file`).
    pub keyring: Option<String>,
    /// CPUs for librados' and librbd's threads (`core_mask`).
    pub cpus: Option<Vec<usize>>,
    /// Time limits.
    pub timeouts: Timeouts,
}

/// A connected cluster handle. Dropping it disconnects (which blocks briefly: drop it off the
/// reactors; images hold it through an `Arc` and close on a thread of their own).
pub struct Cluster {
    raw: ffi::rados_t,
    what: String,
    user: String,
    mon_host: String,
    cpus: Option<Vec<usize>>,
    timeouts: Timeouts,
    /// Shut down already ([`Cluster::close_at_exit`]).
    closed: std::sync::atomic::AtomicBool,
}

// SAFETY: a librados cluster handle may be used from several threads at once (librados'
// RadosClient serializes internally); rtgt never frees it while a reference is alive.
unsafe impl Send for Cluster {}
// SAFETY: as above.
unsafe impl Sync for Cluster {}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("what", &self.what)
            .field("user", &self.user)
            .field("mon_host", &self.mon_host)
            .finish()
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if !self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            // SAFETY: `raw` came from rados_create and is shut down exactly once (`closed`);
            // every ioctx and image made from it holds an Arc to this handle, so none is left.
            unsafe { ffi::rados_shutdown(self.raw) };
        }
    }
}

fn cstring(what: &str, s: &str) -> Result<CString, RbdError> {
    CString::new(s).map_err(|_| RbdError::invalid(format!("{what} contains a NUL byte")))
}

/// Runs `f` on a thread of its own and waits for it at most `limit`. A result that comes later
/// is dropped on that thread (so a late cluster handle or image is closed there).
pub(crate) fn run_bounded<T: Send + 'static>(
    name: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, RbdError> {
    let (tx, rx) = sync_channel(1);
    std::thread::Builder::new()
        .name(name.chars().take(15).collect())
        .spawn(move || {
            let _ = tx.send(f());
        })
        .map_err(|e| RbdError::errno(libc::EAGAIN, format!("cannot start a thread: {e}")))?;
    match rx.recv_timeout(limit) {
        Ok(v) => Ok(v),
        Err(RecvTimeoutError::Timeout) => Err(RbdError::errno(
            libc::ETIMEDOUT,
            format!("no answer within {:.1} s", limit.as_secs_f64()),
        )),
        Err(RecvTimeoutError::Disconnected) => Err(RbdError::errno(
            libc::EIO,
            "the worker thread ended without an answer",
        )),
    }
}

/// Pins the calling thread (and so the threads it creates) to `cpus`.
pub(crate) fn pin_current_thread(cpus: &[usize]) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; all-zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET writes one bit of the live local set; c is below CPU_SETSIZE (the
        // mask parser accepts no larger core).
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: passes a live cpu_set_t of the right size for the calling thread (pid 0).
    let rc = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

impl Cluster {
    /// Creates, configures and connects a handle on a thread of its own; fails within
    /// `timeouts.connect` (plus a few seconds) with a message naming the monitors and the
    /// cause.
    pub fn connect(spec: ConnectSpec) -> Result<Arc<Cluster>, RbdError> {
        let what = spec.what.clone();
        let limit = spec.timeouts.connect + BACKSTOP;
        run_bounded("rbd-connect", limit, move || Self::connect_blocking(spec))
            .map_err(|e| {
                RbdError::errno(
                    e.code().unwrap_or(libc::EIO),
                    format!("{what}: connecting to the Ceph cluster: {e}"),
                )
            })?
            .map(Arc::new)
    }

    fn connect_blocking(spec: ConnectSpec) -> Result<Cluster, RbdError> {
        let what = &spec.what;
        if let Some(cpus) = &spec.cpus {
            pin_current_thread(cpus).map_err(|e| {
                RbdError::errno(
                    e.raw_os_error().unwrap_or(libc::EINVAL),
                    format!("{what}: cannot run librados threads on CPUs {cpus:?}: {e}"),
                )
            })?;
        }
        let id = spec
            .user_id
            .as_deref()
            .map(|u| cstring("user_id", u))
            .transpose()?;
        let mut raw: ffi::rados_t = std::ptr::null_mut();
        // SAFETY: `raw` is a live out-pointer; `id` is NUL-terminated or null (admin).
        let rc = unsafe {
            ffi::rados_create(
                &mut raw,
                id.as_ref().map_or(std::ptr::null(), |c| c.as_ptr()),
            )
        };
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!("{what}: rados_create failed: {}", strerror(-rc)),
            ));
        }
        let mut c = Cluster {
            raw,
            what: what.clone(),
            user: format!("client.{}", spec.user_id.as_deref().unwrap_or("admin")),
            mon_host: String::new(),
            cpus: spec.cpus.clone(),
            timeouts: spec.timeouts,
            closed: std::sync::atomic::AtomicBool::new(false),
        };
        match &spec.config_file {
            ConfigFile::Search => {
                // Like SPDK: the default files are optional.
                // SAFETY: a null path asks librados to search its default locations.
                let _ = unsafe { ffi::rados_conf_read_file(c.raw, std::ptr::null()) };
            }
            ConfigFile::Path(p) => {
                let cp = cstring("config_file", p)?;
                // SAFETY: `cp` is a NUL-terminated path that outlives the call.
                let rc = unsafe { ffi::rados_conf_read_file(c.raw, cp.as_ptr()) };
                if rc < 0 {
                    return Err(RbdError::errno(
                        -rc,
                        format!("{what}: cannot read config_file '{p}': {}", strerror(-rc)),
                    ));
                }
            }
            ConfigFile::Skip => {}
        }
        // rtgt's defaults where the file left Ceph's: time limits; no librbd cache (a
        // gateway's hosts cache themselves, and two gateways of one image must not serve reads
        // from caches of their own); no librbd write scheduler (it holds a write to an object
        // until the previous one to that object ends, so with an OSD gone writes failed only
        // after two or more OSD timeouts).
        let t = spec.timeouts;
        for (opt, builtin, ours) in [
            (
                "client_mount_timeout",
                "300",
                t.connect.as_secs().to_string(),
            ),
            ("rados_osd_op_timeout", "0", t.osd_op.as_secs().to_string()),
            ("rados_mon_op_timeout", "0", t.osd_op.as_secs().to_string()),
            ("rbd_cache", "true", "false".to_string()),
            ("rbd_io_scheduler", "simple", "none".to_string()),
        ] {
            if c.conf_get(opt).is_ok_and(|v| v.trim() == builtin) {
                c.conf_set(opt, &ours)?;
            }
        }
        // Unmapped blocks must read back as zeroes (NVMe deallocate, SCSI LBPRZ): librbd's
        // default skips the parts of a discard that do not cover whole objects.
        c.conf_set("rbd_skip_partial_discard", "false")?;
        for (k, v) in &spec.params.0 {
            c.conf_set(k, v)?;
        }
        if let Some(k) = &spec.keyring {
            std::fs::metadata(k).map_err(|e| {
                RbdError::errno(
                    e.raw_os_error().unwrap_or(libc::ENOENT),
                    format!("{what}: key_file '{k}': {e}"),
                )
            })?;
            c.conf_set("keyring", k)?;
        }
        c.mon_host = c.conf_get("mon_host").unwrap_or_default();
        if c.mon_host.trim().is_empty() {
            return Err(RbdError::errno(
                libc::ENOENT,
                format!(
                    "{what}: no monitor address: mon_host is not set (give a config_file that \
                     sets it, or mon_host in the configuration parameters)"
                ),
            ));
        }
        let start = Instant::now();
        // SAFETY: `c.raw` is a configured, not yet connected handle.
        let rc = unsafe { ffi::rados_connect(c.raw) };
        if rc < 0 {
            let hint = match -rc {
                libc::ENOENT => format!(" (no key for {}? give key_file)", c.user),
                libc::EACCES | libc::EPERM => format!(" (wrong key for {}?)", c.user),
                _ => String::new(),
            };
            return Err(RbdError::errno(
                -rc,
                format!(
                    "{what}: cannot connect to the Ceph monitors at {} as {}: {}{hint} \
                     (after {:.1} s)",
                    c.mon_host,
                    c.user,
                    strerror(-rc),
                    start.elapsed().as_secs_f64()
                ),
            ));
        }
        tracing::info!(
            "{what}: connected to the Ceph cluster at {} as {} in {:.1} s",
            c.mon_host,
            c.user,
            start.elapsed().as_secs_f64()
        );
        Ok(c)
    }

    fn conf_set(&self, opt: &str, val: &str) -> Result<(), RbdError> {
        let k = cstring("a configuration option name", opt)?;
        let v = cstring("a configuration value", val)?;
        // SAFETY: both strings are NUL-terminated and outlive the call; the handle is live.
        let rc = unsafe { ffi::rados_conf_set(self.raw, k.as_ptr(), v.as_ptr()) };
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!(
                    "{}: cannot set Ceph option '{opt}': {}",
                    self.what,
                    strerror(-rc)
                ),
            ));
        }
        Ok(())
    }

    /// The value of a configuration option.
    pub fn conf_get(&self, opt: &str) -> Result<String, RbdError> {
        let k = cstring("a configuration option name", opt)?;
        let mut buf = vec![0u8; 4096];
        // SAFETY: `buf` is writable for its length; librados NUL-terminates within it.
        let rc = unsafe {
            ffi::rados_conf_get(
                self.raw,
                k.as_ptr(),
                buf.as_mut_ptr().cast::<c_char>(),
                buf.len(),
            )
        };
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!("cannot read Ceph option '{opt}': {}", strerror(-rc)),
            ));
        }
        let s = CStr::from_bytes_until_nul(&buf)
            .map(|c| c.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(s)
    }

    /// The monitor addresses the handle connected to.
    pub fn mon_host(&self) -> &str {
        &self.mon_host
    }

    /// `client.<id>`.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The CPUs librados and librbd threads of this handle run on, if restricted.
    pub fn cpus(&self) -> Option<&[usize]> {
        self.cpus.as_deref()
    }

    /// The time limits the handle was made with.
    pub fn timeouts(&self) -> Timeouts {
        self.timeouts
    }

    /// At exit, once every image opened on it is closed: disconnects from the cluster now
    /// rather than when the last reference goes (the bdevs that hold it live until the process
    /// ends). Nothing may use the handle afterwards; the process is stopping.
    pub(crate) fn close_at_exit(&self) {
        if !self.closed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            // SAFETY: not shut down before (`closed`); the caller closed every image made from
            // it, and nothing uses the handle from now on.
            unsafe { ffi::rados_shutdown(self.raw) };
            tracing::info!("{}: disconnected from the cluster", self.what);
        }
    }

    /// The client's global id (`client.<id>` in `ceph osd blocklist ls` is its address).
    pub fn instance_id(&self) -> u64 {
        // SAFETY: the handle is connected and live.
        unsafe { ffi::rados_get_instance_id(self.raw) }
    }

    /// The session's addresses, as `ceph osd blocklist add` takes them (SPDK's `nonce` in
    /// ceph-nvmeof's builds).
    pub fn addrs(&self) -> Result<String, RbdError> {
        let mut p: *mut c_char = std::ptr::null_mut();
        // SAFETY: `p` is a live out-pointer; on success librados stores a malloc'd string.
        let rc = unsafe { ffi::rados_getaddrs(self.raw, &mut p) };
        if rc < 0 || p.is_null() {
            return Err(RbdError::errno(
                -rc.min(-libc::EIO),
                format!("{}: rados_getaddrs failed: {}", self.what, strerror(-rc)),
            ));
        }
        // SAFETY: `p` is a NUL-terminated string malloc'd by librados (strdup).
        let s = unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned();
        // SAFETY: freeing librados' strdup'd buffer exactly once.
        unsafe { libc::free(p.cast()) };
        Ok(s)
    }

    /// Waits until the handle has the newest OSD map (after `ceph osd blocklist add`, the
    /// map that fences the other gateway), within the connect timeout plus the OSD timeout.
    pub fn wait_for_latest_osdmap(self: &Arc<Self>) -> Result<(), RbdError> {
        let me = Arc::clone(self);
        let limit = self.timeouts.connect + self.timeouts.osd_op + BACKSTOP;
        let what = self.what.clone();
        let rc = run_bounded("rbd-osdmap", limit, move || {
            // SAFETY: the handle is connected; `me` keeps it alive for the call.
            unsafe { ffi::rados_wait_for_latest_osdmap(me.raw) }
        })
        .map_err(|e| {
            RbdError::errno(
                e.code().unwrap_or(libc::EIO),
                format!("{what}: waiting for the latest OSD map: {e}"),
            )
        })?;
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!("{what}: waiting for the latest OSD map: {}", strerror(-rc)),
            ));
        }
        Ok(())
    }

    /// The raw handle, for opening pools.
    pub(crate) fn raw(&self) -> ffi::rados_t {
        self.raw
    }

    /// What the handle is for (messages).
    pub fn what(&self) -> &str {
        &self.what
    }
}
