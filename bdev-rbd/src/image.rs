//! Open RBD images (librbd): open, size, resize, the header update watch, and the asynchronous
//! operations the data path submits. Closing happens on a thread of its own, so dropping the
//! last reference never blocks a reactor or a librbd callback.

use std::ffi::{CString, c_int, c_void};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::error::{RbdError, strerror};
use crate::ffi;
use crate::rados::Cluster;

/// Which image to open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenSpec {
    /// Pool name.
    pub pool: String,
    /// RADOS namespace in the pool (`None` or empty: the default one).
    pub namespace: Option<String>,
    /// Image name.
    pub image: String,
    /// Open read-only (`rbd_open_read_only`).
    pub read_only: bool,
}

impl OpenSpec {
    /// `pool/[namespace/]image`, as the rbd tool names it.
    pub fn spec(&self) -> String {
        match self.namespace.as_deref().filter(|n| !n.is_empty()) {
            Some(ns) => format!("{}/{ns}/{}", self.pool, self.image),
            None => format!("{}/{}", self.pool, self.image),
        }
    }
}

/// A pool context; holds its cluster handle.
struct IoCtx {
    raw: ffi::rados_ioctx_t,
    _cluster: Arc<Cluster>,
}

impl Drop for IoCtx {
    fn drop(&mut self) {
        // SAFETY: `raw` came from rados_ioctx_create and is destroyed once, after the image
        // opened on it is closed (Image's fields close the image first).
        unsafe { ffi::rados_ioctx_destroy(self.raw) };
    }
}

/// What the update watch calls: boxed so that its address, given to librbd, stays put.
struct WatchCtx {
    on_update: Box<dyn Fn() + Send + Sync>,
}

unsafe extern "C" fn update_callback(arg: *mut c_void) {
    // SAFETY: `arg` is the WatchCtx registered with rbd_update_watch; it is freed only after
    // rbd_update_unwatch has returned, after which librbd makes no more calls.
    let ctx = unsafe { &*(arg as *const WatchCtx) };
    (ctx.on_update)();
}

struct Watch {
    handle: u64,
    ctx: *mut WatchCtx,
}

/// The raw handles of an image, closed together.
struct Handles {
    image: ffi::rbd_image_t,
    ioctx: IoCtx,
    watch: Option<Watch>,
    spec: String,
}

// SAFETY: librbd image handles may be used and closed from any thread; the watch context is
// only read by librbd's callback until unwatch, then freed by whoever closes.
unsafe impl Send for Handles {}

impl Handles {
    fn close(self) {
        if let Some(w) = self.watch {
            // SAFETY: the handle is open and `w.handle` is its registered watch.
            let rc = unsafe { ffi::rbd_update_unwatch(self.image, w.handle) };
            if rc < 0 {
                tracing::warn!(
                    "rbd {}: removing the update watch: {}",
                    self.spec,
                    strerror(-rc)
                );
            }
            // SAFETY: unwatch returned, so librbd no longer calls back with this context;
            // it came from Box::into_raw and is freed once.
            drop(unsafe { Box::from_raw(w.ctx) });
        }
        // SAFETY: the image is open, no I/O of rtgt's is in flight (every in-flight I/O holds a
        // reference to the Image), and it is closed exactly once.
        let rc = unsafe { ffi::rbd_close(self.image) };
        if rc < 0 {
            tracing::warn!("rbd {}: close: {}", self.spec, strerror(-rc));
        }
        drop(self.ioctx);
        tracing::debug!("rbd {} closed", self.spec);
    }
}

/// An open image.
pub struct Image {
    handles: Mutex<Option<Handles>>,
    raw: ffi::rbd_image_t,
    spec: OpenSpec,
    cluster: Arc<Cluster>,
}

// SAFETY: librbd serializes operations on an image handle internally; the aio calls are made
// from reactor threads concurrently, as QEMU and SPDK do. `raw` stays valid while the Image
// lives (it is closed in Drop).
unsafe impl Send for Image {}
// SAFETY: as above.
unsafe impl Sync for Image {}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Image({})", self.spec.spec())
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let Some(h) = self.handles.get_mut().take() else {
            return;
        };
        // Closing waits for librbd (a flush, releasing the exclusive lock): never on the thread
        // that dropped the last reference, which may be a reactor or a librbd callback.
        if let Err(e) = std::thread::Builder::new()
            .name("rbd-close".into())
            .spawn(move || h.close())
        {
            tracing::error!(
                "rbd {}: cannot start a thread to close it: {e}",
                self.spec.spec()
            );
        }
    }
}

fn cstring(what: &str, s: &str) -> Result<CString, RbdError> {
    CString::new(s).map_err(|_| RbdError::invalid(format!("{what} contains a NUL byte")))
}

/// One asynchronous operation. Offsets and lengths are in bytes.
#[derive(Debug, Clone, Copy)]
pub(crate) enum AioOp {
    /// Read into the iovecs.
    Read {
        off: u64,
        iov: *const libc::iovec,
        iovcnt: c_int,
    },
    /// Write from the iovecs.
    Write {
        off: u64,
        iov: *const libc::iovec,
        iovcnt: c_int,
    },
    /// Flush.
    Flush,
    /// Discard.
    Discard { off: u64, len: u64 },
    /// Write zeroes.
    WriteZeroes { off: u64, len: u64 },
}

impl Image {
    /// Opens `spec` on `cluster` (blocking: call it on a thread bounded by
    /// [`crate::rados::run_bounded`]).
    pub(crate) fn open(cluster: Arc<Cluster>, spec: OpenSpec) -> Result<Image, RbdError> {
        let name = spec.spec();
        if let Some(cpus) = cluster.cpus() {
            // librbd starts its thread pool at the first open: keep it on the cluster's CPUs.
            let _ = crate::rados::pin_current_thread(cpus);
        }
        let pool = cstring("pool_name", &spec.pool)?;
        let img = cstring("rbd_name", &spec.image)?;
        let ns = spec
            .namespace
            .as_deref()
            .map(|n| cstring("namespace_name", n))
            .transpose()?;
        let mut io: ffi::rados_ioctx_t = std::ptr::null_mut();
        // SAFETY: the cluster is connected; `pool` is NUL-terminated; `io` is an out-pointer.
        let rc = unsafe { ffi::rados_ioctx_create(cluster.raw(), pool.as_ptr(), &mut io) };
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!("opening pool '{}': {}", spec.pool, strerror(-rc)),
            ));
        }
        let ioctx = IoCtx {
            raw: io,
            _cluster: Arc::clone(&cluster),
        };
        if let Some(ns) = &ns {
            // SAFETY: the ioctx is live; librados copies the namespace string.
            unsafe { ffi::rados_ioctx_set_namespace(ioctx.raw, ns.as_ptr()) };
        }
        let mut image: ffi::rbd_image_t = std::ptr::null_mut();
        // SAFETY: the ioctx is live, `img` NUL-terminated, `image` an out-pointer, no snapshot.
        let rc = unsafe {
            if spec.read_only {
                ffi::rbd_open_read_only(ioctx.raw, img.as_ptr(), &mut image, std::ptr::null())
            } else {
                ffi::rbd_open(ioctx.raw, img.as_ptr(), &mut image, std::ptr::null())
            }
        };
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!("opening RBD image {name}: {}", strerror(-rc)),
            ));
        }
        Ok(Image {
            handles: Mutex::new(Some(Handles {
                image,
                ioctx,
                watch: None,
                spec: name,
            })),
            raw: image,
            spec,
            cluster,
        })
    }

    /// What was opened.
    pub fn spec(&self) -> &OpenSpec {
        &self.spec
    }

    /// The cluster handle.
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.cluster
    }

    /// Whether the image is still open (not closed by [`Image::close`]).
    pub fn is_open(&self) -> bool {
        self.handles.lock().is_some()
    }

    /// Closes the image now, on the calling thread (blocking, bounded by librados' timeouts):
    /// the update watch and librbd's own header watch go at once instead of timing out on the
    /// cluster. Returns false if it was closed already. The caller makes sure that no I/O is in
    /// flight (every in-flight I/O holds a reference to the image through its ring: see
    /// [`crate::RbdBdev::close_when_idle`]); afterwards size, resize and watch fail with
    /// `EBADF` and no channel opens.
    pub(crate) fn close(&self) -> bool {
        // Held while closing, so that a size refresh never runs on a handle being closed.
        let mut guard = self.handles.lock();
        match guard.take() {
            Some(h) => {
                h.close();
                true
            }
            None => false,
        }
    }

    fn closed(&self) -> RbdError {
        RbdError::errno(
            libc::EBADF,
            format!("RBD image {} is closed", self.spec.spec()),
        )
    }

    /// The image size in bytes (blocking: librbd refreshes the header if another client
    /// changed it).
    pub fn size(&self) -> Result<u64, RbdError> {
        let guard = self.handles.lock();
        if guard.is_none() {
            return Err(self.closed());
        }
        let mut size = 0u64;
        // SAFETY: the image is open (checked, and it stays open while `guard` is held); `size`
        // is an out-pointer.
        let rc = unsafe { ffi::rbd_get_size(self.raw, &mut size) };
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!("size of RBD image {}: {}", self.spec.spec(), strerror(-rc)),
            ));
        }
        Ok(size)
    }

    /// Resizes the image (blocking).
    pub fn resize(&self, bytes: u64) -> Result<(), RbdError> {
        let guard = self.handles.lock();
        if guard.is_none() {
            return Err(self.closed());
        }
        // SAFETY: the image is open (checked, and it stays open while `guard` is held).
        let rc = unsafe { ffi::rbd_resize(self.raw, bytes) };
        if rc < 0 {
            return Err(RbdError::errno(
                -rc,
                format!(
                    "resizing RBD image {} to {bytes} bytes: {}",
                    self.spec.spec(),
                    strerror(-rc)
                ),
            ));
        }
        Ok(())
    }

    /// Calls `on_update` (on a librbd thread: it must not call librbd) after each header
    /// update of the image, by this client or another (`rbd resize`). One watch per image.
    pub fn watch(&self, on_update: Box<dyn Fn() + Send + Sync>) -> Result<(), RbdError> {
        let mut guard = self.handles.lock();
        let Some(h) = guard.as_mut() else {
            return Err(self.closed());
        };
        if h.watch.is_some() {
            return Err(RbdError::errno(
                libc::EEXIST,
                "the image is already watched",
            ));
        }
        let ctx = Box::into_raw(Box::new(WatchCtx { on_update }));
        let mut handle = 0u64;
        // SAFETY: the image is open; `ctx` stays valid until Handles::close unwatches and
        // frees it; `on_update` matches rbd_update_callback_t.
        let rc = unsafe {
            ffi::rbd_update_watch(h.image, &mut handle, Some(update_callback), ctx.cast())
        };
        if rc < 0 {
            // SAFETY: the watch was not registered, so librbd never saw `ctx`.
            drop(unsafe { Box::from_raw(ctx) });
            return Err(RbdError::errno(
                -rc,
                format!("watching RBD image {}: {}", self.spec.spec(), strerror(-rc)),
            ));
        }
        h.watch = Some(Watch { handle, ctx });
        Ok(())
    }

    /// Starts `op`; librbd calls `cb(completion, arg)` on one of its threads when it ends
    /// (the callback must release the completion). On an immediate failure nothing is called
    /// and the errno is returned.
    ///
    /// # Safety
    ///
    /// The iovecs of a read or write, and the memory they describe, must stay valid (and, for
    /// a read, not be accessed) until `cb` runs; `arg` must stay valid until then.
    pub(crate) unsafe fn submit(
        &self,
        op: AioOp,
        cb: ffi::rbd_callback_t,
        arg: *mut c_void,
    ) -> Result<(), i32> {
        let mut c: ffi::rbd_completion_t = std::ptr::null_mut();
        // SAFETY: `c` is an out-pointer; `cb`/`arg` are the caller's, valid per the contract.
        let rc = unsafe { ffi::rbd_aio_create_completion(arg, cb, &mut c) };
        if rc < 0 {
            return Err(-rc);
        }
        // SAFETY: the image is open; buffers and iovecs are valid until the completion (the
        // caller's contract); `c` is a fresh completion owned by this operation.
        let rc = unsafe {
            match op {
                AioOp::Read {
                    off,
                    iov,
                    iovcnt: 1,
                } => ffi::rbd_aio_read(self.raw, off, (*iov).iov_len, (*iov).iov_base.cast(), c),
                AioOp::Read { off, iov, iovcnt } => {
                    ffi::rbd_aio_readv(self.raw, iov, iovcnt, off, c)
                }
                AioOp::Write {
                    off,
                    iov,
                    iovcnt: 1,
                } => ffi::rbd_aio_write(self.raw, off, (*iov).iov_len, (*iov).iov_base.cast(), c),
                AioOp::Write { off, iov, iovcnt } => {
                    ffi::rbd_aio_writev(self.raw, iov, iovcnt, off, c)
                }
                AioOp::Flush => ffi::rbd_aio_flush(self.raw, c),
                AioOp::Discard { off, len } => ffi::rbd_aio_discard(self.raw, off, len, c),
                AioOp::WriteZeroes { off, len } => {
                    ffi::rbd_aio_write_zeroes(self.raw, off, len as usize, c, 0, 0)
                }
            }
        };
        if rc < 0 {
            // SAFETY: the operation was not started, so librbd holds no reference to `c`.
            unsafe { ffi::rbd_aio_release(c) };
            return Err(-rc);
        }
        Ok(())
    }
}
