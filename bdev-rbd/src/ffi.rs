//! Hand-written declarations of the librados and librbd functions rtgt uses (librados 3.0 /
//! librbd 1.16, Ceph 16 "Pacific" as Debian bookworm ships it; the C API has been stable in
//! these calls since Ceph 14). Signatures follow `<rados/librados.h>` and `<rbd/librbd.h>`.
//!
//! Nothing here is safe to call directly: [`crate::rados`] and [`crate::image`] wrap these
//! calls and state why each use is sound.

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// A cluster handle (`rados_t`).
pub type rados_t = *mut c_void;
/// A pool I/O context (`rados_ioctx_t`).
pub type rados_ioctx_t = *mut c_void;
/// An open image (`rbd_image_t`).
pub type rbd_image_t = *mut c_void;
/// An asynchronous completion (`rbd_completion_t`).
pub type rbd_completion_t = *mut c_void;
/// Completion callback: runs on a librbd thread when the operation ends.
pub type rbd_callback_t = Option<unsafe extern "C" fn(cb: rbd_completion_t, arg: *mut c_void)>;
/// Image update callback (`rbd_update_watch`): runs on a librbd thread after a header change.
pub type rbd_update_callback_t = Option<unsafe extern "C" fn(arg: *mut c_void)>;

#[link(name = "rados")]
unsafe extern "C" {
    /// Creates a cluster handle for `client.<id>` (`id` NULL = admin).
    pub fn rados_create(cluster: *mut rados_t, id: *const c_char) -> c_int;
    /// Reads a configuration file (`path` NULL = the default search list).
    pub fn rados_conf_read_file(cluster: rados_t, path: *const c_char) -> c_int;
    /// Sets one configuration option.
    pub fn rados_conf_set(cluster: rados_t, option: *const c_char, value: *const c_char) -> c_int;
    /// Reads one configuration option into `buf`.
    pub fn rados_conf_get(
        cluster: rados_t,
        option: *const c_char,
        buf: *mut c_char,
        len: usize,
    ) -> c_int;
    /// Connects to the monitors (blocks up to `client_mount_timeout`).
    pub fn rados_connect(cluster: rados_t) -> c_int;
    /// Disconnects and frees the handle.
    pub fn rados_shutdown(cluster: rados_t);
    /// The client's global id in the cluster.
    pub fn rados_get_instance_id(cluster: rados_t) -> u64;
    /// The session's addresses (for `ceph osd blocklist add`); `*addrs` is malloc'd.
    pub fn rados_getaddrs(cluster: rados_t, addrs: *mut *mut c_char) -> c_int;
    /// Waits until the client has the newest OSD map the monitors know.
    pub fn rados_wait_for_latest_osdmap(cluster: rados_t) -> c_int;
    /// Opens a pool.
    pub fn rados_ioctx_create(
        cluster: rados_t,
        pool_name: *const c_char,
        ioctx: *mut rados_ioctx_t,
    ) -> c_int;
    /// Closes a pool context.
    pub fn rados_ioctx_destroy(io: rados_ioctx_t);
    /// Selects a RADOS namespace for the objects of this context.
    pub fn rados_ioctx_set_namespace(io: rados_ioctx_t, nspace: *const c_char);
}

#[link(name = "rbd")]
unsafe extern "C" {
    /// Opens an image for reading and writing (`snap_name` NULL = the head).
    pub fn rbd_open(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut rbd_image_t,
        snap_name: *const c_char,
    ) -> c_int;
    /// Opens an image read-only.
    pub fn rbd_open_read_only(
        io: rados_ioctx_t,
        name: *const c_char,
        image: *mut rbd_image_t,
        snap_name: *const c_char,
    ) -> c_int;
    /// Closes an image (waits for its in-flight I/O).
    pub fn rbd_close(image: rbd_image_t) -> c_int;
    /// The image size in bytes.
    pub fn rbd_get_size(image: rbd_image_t, size: *mut u64) -> c_int;
    /// Grows or shrinks the image.
    pub fn rbd_resize(image: rbd_image_t, size: u64) -> c_int;
    /// Calls `watch_cb` after each header update (resize by another client, snapshots…).
    pub fn rbd_update_watch(
        image: rbd_image_t,
        handle: *mut u64,
        watch_cb: rbd_update_callback_t,
        arg: *mut c_void,
    ) -> c_int;
    /// Removes an update watch; no callback runs after it returns.
    pub fn rbd_update_unwatch(image: rbd_image_t, handle: u64) -> c_int;

    /// Allocates a completion that calls `complete_cb(c, cb_arg)` when its operation ends.
    pub fn rbd_aio_create_completion(
        cb_arg: *mut c_void,
        complete_cb: rbd_callback_t,
        c: *mut rbd_completion_t,
    ) -> c_int;
    /// The operation's result: bytes for reads, 0 for others, or a negative errno.
    pub fn rbd_aio_get_return_value(c: rbd_completion_t) -> isize;
    /// Frees a completion.
    pub fn rbd_aio_release(c: rbd_completion_t);
    /// Reads `len` bytes at `off` into `buf`.
    pub fn rbd_aio_read(
        image: rbd_image_t,
        off: u64,
        len: usize,
        buf: *mut c_char,
        c: rbd_completion_t,
    ) -> c_int;
    /// Reads into an iovec array (which must stay valid until the completion).
    pub fn rbd_aio_readv(
        image: rbd_image_t,
        iov: *const libc::iovec,
        iovcnt: c_int,
        off: u64,
        c: rbd_completion_t,
    ) -> c_int;
    /// Writes `len` bytes from `buf` at `off`.
    pub fn rbd_aio_write(
        image: rbd_image_t,
        off: u64,
        len: usize,
        buf: *const c_char,
        c: rbd_completion_t,
    ) -> c_int;
    /// Writes from an iovec array.
    pub fn rbd_aio_writev(
        image: rbd_image_t,
        iov: *const libc::iovec,
        iovcnt: c_int,
        off: u64,
        c: rbd_completion_t,
    ) -> c_int;
    /// Deallocates `len` bytes at `off`.
    pub fn rbd_aio_discard(image: rbd_image_t, off: u64, len: u64, c: rbd_completion_t) -> c_int;
    /// Writes zeroes over `len` bytes at `off`.
    pub fn rbd_aio_write_zeroes(
        image: rbd_image_t,
        off: u64,
        len: usize,
        c: rbd_completion_t,
        zero_flags: c_int,
        op_flags: c_int,
    ) -> c_int;
    /// Makes every completed write durable (flushes the librbd cache).
    pub fn rbd_aio_flush(image: rbd_image_t, c: rbd_completion_t) -> c_int;
}
