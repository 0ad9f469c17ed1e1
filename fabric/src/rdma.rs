//! The `rdma` provider: libibverbs and librdmacm through `rdma-sys`.
//!
//! Every raw pointer here is owned by exactly one wrapper whose `Drop` releases it, and every
//! wrapper holds `Arc`s to what must outlive it (a CQ holds its channel, a QP its CQs, SRQ, PD
//! and CM id, a registration its region), so destruction always runs in the order verbs needs.
//! libibverbs and librdmacm are thread-safe for the calls used here; each `unsafe impl Send/Sync`
//! says why.
//!
//! Events (CQ, CM, async) are acknowledged as soon as they are read and copied, so destroying an
//! object never waits for an unacknowledged event.

use std::ffi::CStr;
use std::mem::{MaybeUninit, size_of};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;
use std::os::raw::{c_int, c_void};
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use rdma_sys::*;

use crate::cm::CmIdImpl;
use crate::error::{FabricError, PostError, Result};
use crate::mem::DmaRegion;
use crate::types::*;
use crate::verbs::{CqImpl, PdImpl, Qp, QpImpl, QpInit, SrqImpl};

/// Work requests linked and posted per verbs call (longer lists are posted in chunks).
const POST_CHUNK: usize = 16;
/// Completions read per `ibv_poll_cq` call.
const POLL_CHUNK: usize = 32;

fn set_nonblocking(fd: RawFd, op: &'static str) -> Result<()> {
    // SAFETY: fcntl on an fd we own (or that the library owns for us) with plain integer args.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 {
        return Err(FabricError::last_os(op));
    }
    // SAFETY: as above.
    let r = unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) };
    if r < 0 {
        return Err(FabricError::last_os(op));
    }
    Ok(())
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

// ---------------------------------------------------------------------------------------------
// Devices

/// A verbs context opened by librdmacm. Contexts live for the whole process (librdmacm keeps
/// them open), so wrappers never close them.
pub(crate) struct RDevice {
    ctx: *mut ibv_context,
    name: String,
    is_rxe: bool,
}

// SAFETY: a verbs context is usable from any thread; libibverbs serialises internally.
unsafe impl Send for RDevice {}
// SAFETY: as above; the wrapper exposes no interior mutability of its own.
unsafe impl Sync for RDevice {}

static DEVICES: OnceLock<Mutex<Vec<Arc<RDevice>>>> = OnceLock::new();

/// All devices librdmacm knows, or [`FabricError::NoDevice`].
pub(crate) fn devices() -> Result<Vec<Arc<RDevice>>> {
    let mut n: c_int = 0;
    // SAFETY: rdma_get_devices writes the count and returns a NULL-terminated array or NULL.
    let list = unsafe { rdma_get_devices(&mut n) };
    if list.is_null() {
        let e = errno();
        return Err(FabricError::NoDevice(format!(
            "rdma_get_devices: {}",
            std::io::Error::from_raw_os_error(e)
        )));
    }
    let mut out = Vec::new();
    for i in 0..n.max(0) as usize {
        // SAFETY: the array holds `n` valid entries.
        let ctx = unsafe { *list.add(i) };
        if !ctx.is_null() {
            out.push(RDevice::from_ctx(ctx));
        }
    }
    // SAFETY: the list came from rdma_get_devices and is freed once; contexts stay open.
    unsafe { rdma_free_devices(list) };
    if out.is_empty() {
        return Err(FabricError::NoDevice(
            "rdma_get_devices returned no device (load rdma_rxe/siw or a NIC driver)".into(),
        ));
    }
    Ok(out)
}

impl RDevice {
    /// The one wrapper for `ctx` (created on first sight; the async fd is made non-blocking).
    pub(crate) fn from_ctx(ctx: *mut ibv_context) -> Arc<RDevice> {
        let reg = DEVICES.get_or_init(|| Mutex::new(Vec::new()));
        let mut reg = reg.lock();
        if let Some(d) = reg.iter().find(|d| d.ctx == ctx) {
            return Arc::clone(d);
        }
        // SAFETY: ctx is a live context; its device pointer and name are valid C data.
        let name = unsafe {
            let dev = (*ctx).device;
            let p = ibv_get_device_name(dev);
            if p.is_null() {
                String::from("?")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        };
        // SAFETY: reading the async fd of a live context.
        let afd = unsafe { (*ctx).async_fd };
        if let Err(e) = set_nonblocking(afd, "fcntl(async_fd)") {
            tracing::warn!("rdma device {name}: {e}");
        }
        let mut d = RDevice {
            ctx,
            name,
            is_rxe: false,
        };
        d.is_rxe = d.query().is_ok_and(|a| a.vendor_id == RXE_VENDOR_ID);
        let d = Arc::new(d);
        reg.push(Arc::clone(&d));
        d
    }

    pub(crate) fn is_rxe(&self) -> bool {
        self.is_rxe
    }

    pub(crate) fn ctx_addr(&self) -> usize {
        self.ctx as usize
    }

    pub(crate) fn name(&self) -> String {
        self.name.clone()
    }

    pub(crate) fn query(&self) -> Result<DeviceAttr> {
        let mut a = MaybeUninit::<ibv_device_attr>::zeroed();
        // SAFETY: ctx is live; `a` is a writable ibv_device_attr.
        let r = unsafe { ibv_query_device(self.ctx, a.as_mut_ptr()) };
        if r != 0 {
            return Err(FabricError::from_ret("ibv_query_device", r));
        }
        // SAFETY: ibv_query_device filled the structure.
        let a = unsafe { a.assume_init() };
        // SAFETY: fw_ver is a NUL-terminated string inside the struct (zeroed beforehand).
        let fw = unsafe { CStr::from_ptr(a.fw_ver.as_ptr()) }
            .to_string_lossy()
            .into_owned();
        let u = |v: c_int| v.max(0) as u32;
        Ok(DeviceAttr {
            fw_ver: fw,
            node_guid: u64::from_be(a.node_guid),
            vendor_id: a.vendor_id,
            vendor_part_id: a.vendor_part_id,
            max_mr_size: a.max_mr_size,
            max_qp: u(a.max_qp),
            max_qp_wr: u(a.max_qp_wr),
            max_sge: u(a.max_sge),
            max_cq: u(a.max_cq),
            max_cqe: u(a.max_cqe),
            max_mr: u(a.max_mr),
            max_pd: u(a.max_pd),
            max_qp_rd_atom: u(a.max_qp_rd_atom),
            max_qp_init_rd_atom: u(a.max_qp_init_rd_atom),
            max_srq: u(a.max_srq),
            max_srq_wr: u(a.max_srq_wr),
            max_srq_sge: u(a.max_srq_sge),
            max_mw: u(a.max_mw),
        })
    }

    pub(crate) fn async_fd(&self) -> RawFd {
        // SAFETY: reading a field of a live context.
        unsafe { (*self.ctx).async_fd }
    }

    pub(crate) fn get_async_event(&self) -> Result<Option<AsyncEvent>> {
        /// `struct ibv_async_event` read with a raw event number (the bindings' Rust enum
        /// cannot hold values a newer kernel may report).
        #[repr(C)]
        struct RawAsyncEvent {
            element: *mut c_void,
            event_type: u32,
        }
        let mut ev = MaybeUninit::<RawAsyncEvent>::zeroed();
        // SAFETY: the layout matches struct ibv_async_event (a pointer-sized union then an
        // enum); the fd is non-blocking so the call returns at once.
        let r = unsafe { ibv_get_async_event(self.ctx, ev.as_mut_ptr().cast::<ibv_async_event>()) };
        if r != 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                return Ok(None);
            }
            return Err(FabricError::Os {
                op: "ibv_get_async_event",
                errno: e,
            });
        }
        // SAFETY: the call succeeded and filled the event.
        let raw = unsafe { ev.assume_init_ref() };
        let t = raw.event_type;
        let kind = match t {
            0 => AsyncEventKind::CqErr,
            1 => AsyncEventKind::QpFatal,
            2 => AsyncEventKind::QpReqErr,
            3 => AsyncEventKind::QpAccessErr,
            4 => AsyncEventKind::CommEstablished,
            5 => AsyncEventKind::SqDrained,
            8 => AsyncEventKind::DeviceFatal,
            9 => AsyncEventKind::PortActive,
            10 => AsyncEventKind::PortErr,
            14 => AsyncEventKind::SrqErr,
            15 => AsyncEventKind::SrqLimitReached,
            16 => AsyncEventKind::QpLastWqeReached,
            v => AsyncEventKind::Other(v),
        };
        // SAFETY: which union member is valid follows from the event type (verbs.h); the
        // object stays alive until we acknowledge the event below.
        let element = unsafe {
            match t {
                1..=7 | 16 => {
                    let qp = raw.element as *mut ibv_qp;
                    AsyncElement::Qp(if qp.is_null() { 0 } else { (*qp).qp_num })
                }
                0 => {
                    let cq = raw.element as *mut ibv_cq;
                    AsyncElement::Cq(if cq.is_null() {
                        0
                    } else {
                        (*cq).cq_context as u64
                    })
                }
                14 | 15 => {
                    let srq = raw.element as *mut ibv_srq;
                    AsyncElement::Srq(if srq.is_null() {
                        0
                    } else {
                        (*srq).srq_context as u64
                    })
                }
                9..=13 | 17 | 18 => AsyncElement::Port(raw.element as usize as u8),
                _ => AsyncElement::Device,
            }
        };
        // SAFETY: acknowledging the event we just read, once.
        unsafe { ibv_ack_async_event(ev.as_mut_ptr().cast::<ibv_async_event>()) };
        Ok(Some(AsyncEvent { kind, element }))
    }
}

// ---------------------------------------------------------------------------------------------
// Protection domains, registrations, windows

pub(crate) struct RPd {
    dev: Arc<RDevice>,
    pd: *mut ibv_pd,
}

// SAFETY: a PD is an opaque handle usable from any thread.
unsafe impl Send for RPd {}
// SAFETY: as above.
unsafe impl Sync for RPd {}

impl RPd {
    pub(crate) fn new(dev: &Arc<RDevice>) -> Result<Self> {
        // SAFETY: the context is live.
        let pd = unsafe { ibv_alloc_pd(dev.ctx) };
        if pd.is_null() {
            return Err(FabricError::last_os("ibv_alloc_pd"));
        }
        Ok(RPd {
            dev: Arc::clone(dev),
            pd,
        })
    }

    pub(crate) fn device(&self) -> &Arc<RDevice> {
        &self.dev
    }
}

impl Drop for RPd {
    fn drop(&mut self) {
        // SAFETY: every object made from this PD holds an Arc to it, so none is left.
        let r = unsafe { ibv_dealloc_pd(self.pd) };
        if r != 0 {
            tracing::error!("ibv_dealloc_pd failed: {r}");
        }
    }
}

pub(crate) struct RMr {
    _pd: Arc<RPd>,
    mr: *mut ibv_mr,
    _region: Arc<DmaRegion>,
}

// SAFETY: an MR handle is usable from any thread; the region it covers is kept alive.
unsafe impl Send for RMr {}
// SAFETY: as above.
unsafe impl Sync for RMr {}

impl RMr {
    pub(crate) fn new(pd: &Arc<RPd>, region: &Arc<DmaRegion>, access: Access) -> Result<Self> {
        // SAFETY: the region is live and stays so (we keep its Arc) for the life of the MR.
        let mr = unsafe {
            ibv_reg_mr(
                pd.pd,
                region.as_ptr().cast::<c_void>(),
                region.len(),
                access.bits() as c_int,
            )
        };
        if mr.is_null() {
            return Err(FabricError::last_os("ibv_reg_mr"));
        }
        Ok(RMr {
            _pd: Arc::clone(pd),
            mr,
            _region: Arc::clone(region),
        })
    }

    pub(crate) fn lkey(&self) -> u32 {
        // SAFETY: the MR is live.
        unsafe { (*self.mr).lkey }
    }

    pub(crate) fn rkey(&self) -> u32 {
        // SAFETY: the MR is live.
        unsafe { (*self.mr).rkey }
    }
}

impl Drop for RMr {
    fn drop(&mut self) {
        // SAFETY: the MR was registered by us and is deregistered once.
        let r = unsafe { ibv_dereg_mr(self.mr) };
        if r != 0 {
            tracing::error!("ibv_dereg_mr failed: {r}");
        }
    }
}

pub(crate) struct RMw {
    _pd: Arc<RPd>,
    mw: *mut ibv_mw,
    rkey: AtomicU32,
}

// SAFETY: an MW handle is usable from any thread; the key is an atomic.
unsafe impl Send for RMw {}
// SAFETY: as above.
unsafe impl Sync for RMw {}

impl RMw {
    pub(crate) fn new(pd: &Arc<RPd>) -> Result<Self> {
        // SAFETY: the PD is live; the helper checks the provider implements alloc_mw.
        let mw = unsafe { ibv_alloc_mw(pd.pd, ibv_mw_type::IBV_MW_TYPE_2) };
        let mw = match mw {
            None => return Err(FabricError::NotSupported("memory windows")),
            Some(p) if p.is_null() => return Err(FabricError::last_os("ibv_alloc_mw")),
            Some(p) => p,
        };
        // SAFETY: the MW is live.
        let rkey = unsafe { (*mw).rkey };
        Ok(RMw {
            _pd: Arc::clone(pd),
            mw,
            rkey: AtomicU32::new(rkey),
        })
    }

    pub(crate) fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }
}

impl Drop for RMw {
    fn drop(&mut self) {
        // SAFETY: allocated by us, deallocated once.
        let r = unsafe { ibv_dealloc_mw(self.mw) };
        if r != 0 {
            tracing::error!("ibv_dealloc_mw failed: {r}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Completion channels and queues

pub(crate) struct RChannel {
    _dev: Arc<RDevice>,
    ch: *mut ibv_comp_channel,
}

// SAFETY: the channel is an fd plus library state guarded by libibverbs.
unsafe impl Send for RChannel {}
// SAFETY: as above.
unsafe impl Sync for RChannel {}

impl RChannel {
    pub(crate) fn new(dev: &Arc<RDevice>) -> Result<Self> {
        // SAFETY: the context is live.
        let ch = unsafe { ibv_create_comp_channel(dev.ctx) };
        if ch.is_null() {
            return Err(FabricError::last_os("ibv_create_comp_channel"));
        }
        let c = RChannel {
            _dev: Arc::clone(dev),
            ch,
        };
        set_nonblocking(c.fd(), "fcntl(comp_channel)")?;
        Ok(c)
    }

    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the channel is live.
        unsafe { (*self.ch).fd }
    }

    pub(crate) fn get_event(&self) -> Result<Option<u64>> {
        let mut cq: *mut ibv_cq = ptr::null_mut();
        let mut ctx: *mut c_void = ptr::null_mut();
        // SAFETY: the channel is live and non-blocking; out-pointers are valid.
        let r = unsafe { ibv_get_cq_event(self.ch, &mut cq, &mut ctx) };
        if r != 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                return Ok(None);
            }
            return Err(FabricError::Os {
                op: "ibv_get_cq_event",
                errno: e,
            });
        }
        // SAFETY: acknowledging the one event just received on this live CQ.
        unsafe { ibv_ack_cq_events(cq, 1) };
        Ok(Some(ctx as u64))
    }
}

impl Drop for RChannel {
    fn drop(&mut self) {
        // SAFETY: every CQ using the channel holds an Arc to it, so none is left.
        let r = unsafe { ibv_destroy_comp_channel(self.ch) };
        if r != 0 {
            tracing::error!("ibv_destroy_comp_channel failed: {r}");
        }
    }
}

/// rdma_rxe copies the kernel's `IB_WC_WITH_INVALIDATE` (bit 2) into user-space completions,
/// where bit 2 means `IBV_WC_IP_CSUM_OK` and `IBV_WC_WITH_INV` is bit 3. On rxe devices, a
/// reliable-connected receive completion with bit 2 set (checksum offload flags never apply to
/// RC receives) reports an invalidation.
const RXE_KERNEL_WC_WITH_INVALIDATE: u32 = 1 << 2;
/// The vendor id soft-RoCE reports.
const RXE_VENDOR_ID: u32 = 0x00ff_ffff;

pub(crate) struct RCq {
    _dev: Arc<RDevice>,
    cq: *mut ibv_cq,
    rxe_inv_quirk: bool,
    handle: u64,
    cqe: u32,
    _channel: Option<Arc<RChannel>>,
}

// SAFETY: verbs CQ calls (poll, notify) are thread-safe in libibverbs providers.
unsafe impl Send for RCq {}
// SAFETY: as above.
unsafe impl Sync for RCq {}

impl RCq {
    pub(crate) fn new(dev: &Arc<RDevice>, cqe: u32, ch: Option<Arc<RChannel>>) -> Result<Self> {
        let handle = crate::next_handle();
        let chp = ch.as_ref().map_or(ptr::null_mut(), |c| c.ch);
        let want = cqe.min(i32::MAX as u32) as c_int;
        // SAFETY: the context and channel are live; the CQ context is an opaque number.
        let cq = unsafe { ibv_create_cq(dev.ctx, want, handle as *mut c_void, chp, 0) };
        if cq.is_null() {
            return Err(FabricError::last_os("ibv_create_cq"));
        }
        // SAFETY: the CQ is live.
        let actual = unsafe { (*cq).cqe }.max(0) as u32;
        Ok(RCq {
            _dev: Arc::clone(dev),
            cq,
            rxe_inv_quirk: dev.is_rxe(),
            handle,
            cqe: actual,
            _channel: ch,
        })
    }

    pub(crate) fn handle(&self) -> u64 {
        self.handle
    }

    pub(crate) fn cqe(&self) -> u32 {
        self.cqe
    }

    #[inline]
    pub(crate) fn poll(&self, out: &mut [WorkCompletion]) -> usize {
        let mut done = 0;
        while done < out.len() {
            let want = (out.len() - done).min(POLL_CHUNK);
            let mut raw: [MaybeUninit<ibv_wc>; POLL_CHUNK] =
                [const { MaybeUninit::uninit() }; POLL_CHUNK];
            // SAFETY: the CQ is live; `raw` has room for `want` entries.
            let n = unsafe { ibv_poll_cq(self.cq, want as c_int, raw.as_mut_ptr().cast()) };
            if n < 0 {
                tracing::error!("ibv_poll_cq failed: {n}");
                break;
            }
            let n = n as usize;
            for (slot, r) in out[done..done + n].iter_mut().zip(raw.iter()) {
                // SAFETY: the first `n` entries were written by ibv_poll_cq.
                let wc = unsafe { r.assume_init_ref() };
                let with_inv = wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_INV.0 != 0
                    || (self.rxe_inv_quirk
                        && wc.opcode == ibv_wc_opcode::IBV_WC_RECV
                        && wc.wc_flags & RXE_KERNEL_WC_WITH_INVALIDATE != 0
                        && wc.wc_flags & ibv_wc_flags::IBV_WC_WITH_IMM.0 == 0);
                let invalidated_rkey = if with_inv {
                    // SAFETY: with an invalidation flag the union holds the invalidated rkey
                    // (a plain u32; any bit pattern is valid).
                    Some(unsafe { wc.imm_data_invalidated_rkey_union.invalidated_rkey })
                } else {
                    None
                };
                *slot = WorkCompletion {
                    wr_id: wc.wr_id,
                    status: WcStatus::from_raw(wc.status),
                    opcode: WcOpcode::from_raw(wc.opcode),
                    byte_len: wc.byte_len,
                    qp_num: wc.qp_num,
                    invalidated_rkey,
                    vendor_err: wc.vendor_err,
                };
            }
            done += n;
            if n < want {
                break;
            }
        }
        done
    }

    pub(crate) fn req_notify(&self, solicited_only: bool) -> Result<()> {
        // SAFETY: the CQ is live.
        let r = unsafe { ibv_req_notify_cq(self.cq, solicited_only as c_int) };
        if r != 0 {
            return Err(FabricError::from_ret("ibv_req_notify_cq", r));
        }
        Ok(())
    }
}

impl Drop for RCq {
    fn drop(&mut self) {
        // SAFETY: QPs using the CQ hold an Arc to it; events were acknowledged when read.
        let r = unsafe { ibv_destroy_cq(self.cq) };
        if r != 0 {
            tracing::error!("ibv_destroy_cq failed: {r}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Receive posting (shared by QPs and SRQs)

/// Links up to [`POST_CHUNK`] receive work requests at a time and hands each chain to `post`.
#[inline]
fn post_recv_chunks<'a, I, F>(wrs: I, mut post: F) -> std::result::Result<(), PostError>
where
    I: IntoIterator<Item = &'a RecvWr>,
    F: FnMut(*mut ibv_recv_wr, *mut *mut ibv_recv_wr) -> c_int,
{
    let mut it = wrs.into_iter().peekable();
    let mut posted = 0usize;
    while it.peek().is_some() {
        // SAFETY: ibv_recv_wr is plain data for which all-zero is a valid value.
        let mut chain: [ibv_recv_wr; POST_CHUNK] = unsafe { std::mem::zeroed() };
        let mut n = 0;
        while n < POST_CHUNK {
            let Some(wr) = it.next() else { break };
            chain[n].wr_id = wr.wr_id;
            chain[n].sg_list = wr.sges.as_ptr() as *mut ibv_sge;
            chain[n].num_sge = wr.sges.len() as c_int;
            n += 1;
        }
        let base = chain.as_mut_ptr();
        for i in 0..n {
            // SAFETY: indices are within the array; the last entry keeps next = NULL.
            unsafe {
                (*base.add(i)).next = if i + 1 < n {
                    base.add(i + 1)
                } else {
                    ptr::null_mut()
                };
            }
        }
        let mut bad: *mut ibv_recv_wr = ptr::null_mut();
        let r = post(base, &mut bad);
        if r != 0 {
            let idx = if bad.is_null() {
                0
            } else {
                // SAFETY: bad points into `chain` as the verbs contract says.
                unsafe { bad.offset_from(base) }.max(0) as usize
            };
            return Err(PostError::from_errno(posted + idx, r.abs()));
        }
        posted += n;
    }
    Ok(())
}

pub(crate) struct RSrq {
    _pd: Arc<RPd>,
    srq: *mut ibv_srq,
    handle: u64,
}

// SAFETY: SRQ posting is thread-safe in libibverbs providers.
unsafe impl Send for RSrq {}
// SAFETY: as above.
unsafe impl Sync for RSrq {}

impl RSrq {
    pub(crate) fn new(pd: &Arc<RPd>, max_wr: u32, max_sge: u32) -> Result<Self> {
        let handle = crate::next_handle();
        let mut init = ibv_srq_init_attr {
            srq_context: handle as *mut c_void,
            attr: ibv_srq_attr {
                max_wr,
                max_sge,
                srq_limit: 0,
            },
        };
        // SAFETY: the PD is live; `init` is a valid attribute block.
        let srq = unsafe { ibv_create_srq(pd.pd, &mut init) };
        if srq.is_null() {
            return Err(FabricError::last_os("ibv_create_srq"));
        }
        Ok(RSrq {
            _pd: Arc::clone(pd),
            srq,
            handle,
        })
    }

    pub(crate) fn handle(&self) -> u64 {
        self.handle
    }

    #[inline]
    pub(crate) fn post_recv<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a RecvWr>,
    {
        let srq = self.srq;
        post_recv_chunks(wrs, |wr, bad| {
            // SAFETY: the SRQ is live; the chain and its SGE lists live for this call.
            unsafe { ibv_post_srq_recv(srq, wr, bad) }
        })
    }
}

impl Drop for RSrq {
    fn drop(&mut self) {
        // SAFETY: QPs attached to the SRQ hold an Arc to it, so none is left.
        let r = unsafe { ibv_destroy_srq(self.srq) };
        if r != 0 {
            tracing::error!("ibv_destroy_srq failed: {r}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Queue pairs

pub(crate) struct RQp {
    id: Arc<RCmId>,
    qp: *mut ibv_qp,
    qp_num: u32,
    cap: QpCap,
    _send_cq: Arc<RCq>,
    _recv_cq: Arc<RCq>,
    _srq: Option<Arc<RSrq>>,
    _pd: Arc<RPd>,
}

// SAFETY: QP posting and modification are thread-safe in libibverbs providers.
unsafe impl Send for RQp {}
// SAFETY: as above.
unsafe impl Sync for RQp {}

impl RQp {
    pub(crate) fn create(id: &Arc<RCmId>, init: &QpInit<'_>) -> Result<Qp> {
        let PdImpl::Rdma(pd) = &init.pd.0 else {
            return Err(FabricError::Mismatch("protection domain"));
        };
        let CqImpl::Rdma(scq) = &init.send_cq.0 else {
            return Err(FabricError::Mismatch("send completion queue"));
        };
        let CqImpl::Rdma(rcq) = &init.recv_cq.0 else {
            return Err(FabricError::Mismatch("receive completion queue"));
        };
        let srq = match init.srq {
            None => None,
            Some(s) => match &s.0 {
                SrqImpl::Rdma(s) => Some(Arc::clone(s)),
                SrqImpl::Sim(_) => return Err(FabricError::Mismatch("shared receive queue")),
            },
        };
        // SAFETY: reading the id's device pointer.
        let verbs = unsafe { (*id.id).verbs };
        if verbs.is_null() {
            return Err(FabricError::InvalidState(
                "cm id is not bound to a device (resolve or accept first)",
            ));
        }
        if verbs != pd.dev.ctx {
            return Err(FabricError::Mismatch(
                "protection domain is on another device",
            ));
        }
        if id.qp_alive.swap(true, Ordering::AcqRel) {
            return Err(FabricError::InvalidState("cm id already has a queue pair"));
        }
        let mut attr = ibv_qp_init_attr {
            qp_context: ptr::null_mut(),
            send_cq: scq.cq,
            recv_cq: rcq.cq,
            srq: srq.as_ref().map_or(ptr::null_mut(), |s| s.srq),
            cap: ibv_qp_cap {
                max_send_wr: init.cap.max_send_wr,
                max_recv_wr: if srq.is_some() {
                    0
                } else {
                    init.cap.max_recv_wr
                },
                max_send_sge: init.cap.max_send_sge,
                max_recv_sge: if srq.is_some() {
                    0
                } else {
                    init.cap.max_recv_sge
                },
                max_inline_data: init.cap.max_inline_data,
            },
            qp_type: ibv_qp_type::IBV_QPT_RC,
            sq_sig_all: init.sq_sig_all as c_int,
        };
        // SAFETY: the id, PD, CQs and SRQ are live; attr is fully initialised.
        let r = unsafe { rdma_create_qp(id.id, pd.pd, &mut attr) };
        if r != 0 {
            id.qp_alive.store(false, Ordering::Release);
            return Err(FabricError::last_os("rdma_create_qp"));
        }
        // SAFETY: on success librdmacm stored the new QP in the id.
        let qp = unsafe { (*id.id).qp };
        // SAFETY: the QP is live.
        let qp_num = unsafe { (*qp).qp_num };
        let cap = QpCap {
            max_send_wr: attr.cap.max_send_wr,
            max_recv_wr: attr.cap.max_recv_wr,
            max_send_sge: attr.cap.max_send_sge,
            max_recv_sge: attr.cap.max_recv_sge,
            max_inline_data: attr.cap.max_inline_data,
        };
        Ok(Qp(QpImpl::Rdma(RQp {
            id: Arc::clone(id),
            qp,
            qp_num,
            cap,
            _send_cq: Arc::clone(scq),
            _recv_cq: Arc::clone(rcq),
            _srq: srq,
            _pd: Arc::clone(pd),
        })))
    }

    pub(crate) fn qp_num(&self) -> u32 {
        self.qp_num
    }

    pub(crate) fn cap(&self) -> QpCap {
        self.cap
    }

    #[inline]
    pub(crate) fn post_send<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a SendWr>,
    {
        let mut it = wrs.into_iter().peekable();
        let mut posted = 0usize;
        while it.peek().is_some() {
            // SAFETY: ibv_send_wr is plain data for which all-zero is a valid value.
            let mut chain: [ibv_send_wr; POST_CHUNK] = unsafe { std::mem::zeroed() };
            let mut n = 0;
            while n < POST_CHUNK {
                let Some(wr) = it.next() else { break };
                let w = &mut chain[n];
                w.wr_id = wr.wr_id;
                w.sg_list = wr.sges.as_ptr() as *mut ibv_sge;
                w.num_sge = wr.sges.len() as c_int;
                let mut flags = 0;
                if wr.signaled {
                    flags |= ibv_send_flags::IBV_SEND_SIGNALED.0;
                }
                if wr.fence {
                    flags |= ibv_send_flags::IBV_SEND_FENCE.0;
                }
                if wr.solicited {
                    flags |= ibv_send_flags::IBV_SEND_SOLICITED.0;
                }
                w.send_flags = flags;
                match wr.op {
                    WrOp::Send => w.opcode = ibv_wr_opcode::IBV_WR_SEND,
                    WrOp::SendWithInv { invalidate_rkey } => {
                        w.opcode = ibv_wr_opcode::IBV_WR_SEND_WITH_INV;
                        w.imm_data_invalidated_rkey_union.invalidated_rkey = invalidate_rkey;
                    }
                    WrOp::RdmaWrite { remote_addr, rkey } => {
                        w.opcode = ibv_wr_opcode::IBV_WR_RDMA_WRITE;
                        w.wr.rdma = rdma_t { remote_addr, rkey };
                    }
                    WrOp::RdmaRead { remote_addr, rkey } => {
                        w.opcode = ibv_wr_opcode::IBV_WR_RDMA_READ;
                        w.wr.rdma = rdma_t { remote_addr, rkey };
                    }
                }
                n += 1;
            }
            let base = chain.as_mut_ptr();
            for i in 0..n {
                // SAFETY: indices are within the array; the last entry keeps next = NULL.
                unsafe {
                    (*base.add(i)).next = if i + 1 < n {
                        base.add(i + 1)
                    } else {
                        ptr::null_mut()
                    };
                }
            }
            let mut bad: *mut ibv_send_wr = ptr::null_mut();
            // SAFETY: the QP is live; the chain and the SGE lists it points to (borrowed from
            // the caller's work requests) live for the duration of the call, which copies them.
            // Bad keys or ranges in SGEs make error completions, not memory accesses.
            let r = unsafe { ibv_post_send(self.qp, base, &mut bad) };
            if r != 0 {
                let idx = if bad.is_null() {
                    0
                } else {
                    // SAFETY: bad points into `chain` as the verbs contract says.
                    unsafe { bad.offset_from(base) }.max(0) as usize
                };
                return Err(PostError::from_errno(posted + idx, r.abs()));
            }
            posted += n;
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn post_recv<'a, I>(&self, wrs: I) -> std::result::Result<(), PostError>
    where
        I: IntoIterator<Item = &'a RecvWr>,
    {
        let qp = self.qp;
        post_recv_chunks(wrs, |wr, bad| {
            // SAFETY: the QP is live; the chain and its SGE lists live for this call.
            unsafe { ibv_post_recv(qp, wr, bad) }
        })
    }

    pub(crate) fn post_bind_mw(
        &self,
        bind: &BindMw<'_>,
        mw: &RMw,
        mr: &RMr,
    ) -> std::result::Result<u32, PostError> {
        let old = mw.rkey();
        // SAFETY: pure arithmetic on the key (ibv_inc_rkey is marked unsafe by the bindings).
        let new = unsafe { ibv_inc_rkey(old) };
        // SAFETY: ibv_send_wr is plain data for which all-zero is a valid value.
        let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
        wr.wr_id = bind.wr_id;
        wr.opcode = ibv_wr_opcode::IBV_WR_BIND_MW;
        wr.send_flags = if bind.signaled {
            ibv_send_flags::IBV_SEND_SIGNALED.0
        } else {
            0
        };
        wr.bind_mw_tso_union.bind_mw = bind_mw_t {
            mw: mw.mw,
            rkey: new,
            bind_info: ibv_mw_bind_info {
                mr: mr.mr,
                addr: bind.addr,
                length: bind.length,
                mw_access_flags: bind.access.bits(),
            },
        };
        let mut bad: *mut ibv_send_wr = ptr::null_mut();
        // SAFETY: the QP, MW and MR are live for the call; the bind is validated by the adapter.
        let r = unsafe { ibv_post_send(self.qp, &mut wr, &mut bad) };
        if r != 0 {
            return Err(PostError::from_errno(0, r.abs()));
        }
        mw.rkey.store(new, Ordering::Release);
        Ok(new)
    }

    pub(crate) fn modify_to_error(&self) -> Result<()> {
        // SAFETY: ibv_qp_attr is plain data for which all-zero is a valid value.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
        // SAFETY: the QP is live; only the state is modified.
        let r = unsafe {
            ibv_modify_qp(
                self.qp,
                &mut attr,
                ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int,
            )
        };
        if r != 0 {
            return Err(FabricError::from_ret("ibv_modify_qp(ERR)", r));
        }
        Ok(())
    }

    pub(crate) fn state(&self) -> Result<QpState> {
        // SAFETY: plain data, all-zero valid.
        let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
        // SAFETY: plain data, all-zero valid.
        let mut init: ibv_qp_init_attr = unsafe { std::mem::zeroed() };
        // SAFETY: the QP is live; out-structures are valid.
        let r = unsafe {
            ibv_query_qp(
                self.qp,
                &mut attr,
                ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int,
                &mut init,
            )
        };
        if r != 0 {
            return Err(FabricError::from_ret("ibv_query_qp", r));
        }
        Ok(QpState::from_u8(attr.qp_state as u8))
    }
}

impl Drop for RQp {
    fn drop(&mut self) {
        // SAFETY: the id is alive (we hold its Arc) and owns this QP; destroyed once.
        unsafe { rdma_destroy_qp(self.id.id) };
        self.id.qp_alive.store(false, Ordering::Release);
    }
}

// ---------------------------------------------------------------------------------------------
// Connection manager

pub(crate) struct REventChannel {
    ch: *mut rdma_event_channel,
}

// SAFETY: the channel is an fd plus library state guarded by librdmacm.
unsafe impl Send for REventChannel {}
// SAFETY: as above.
unsafe impl Sync for REventChannel {}

impl REventChannel {
    pub(crate) fn new() -> Result<Self> {
        // SAFETY: plain constructor call.
        let ch = unsafe { rdma_create_event_channel() };
        if ch.is_null() {
            let e = errno();
            if e == libc::ENODEV || e == libc::ENOENT || e == libc::ENOSYS {
                return Err(FabricError::NoDevice(format!(
                    "rdma_create_event_channel: {} (no rdma_cm support: load rdma_ucm)",
                    std::io::Error::from_raw_os_error(e)
                )));
            }
            return Err(FabricError::Os {
                op: "rdma_create_event_channel",
                errno: e,
            });
        }
        let c = REventChannel { ch };
        set_nonblocking(c.fd(), "fcntl(cm event channel)")?;
        Ok(c)
    }

    pub(crate) fn fd(&self) -> RawFd {
        // SAFETY: the channel is live.
        unsafe { (*self.ch).fd }
    }

    pub(crate) fn get_event(self: &Arc<Self>) -> Result<Option<CmEvent>> {
        let mut ev: *mut rdma_cm_event = ptr::null_mut();
        // SAFETY: the channel is live and non-blocking.
        let r = unsafe { rdma_get_cm_event(self.ch, &mut ev) };
        if r != 0 {
            let e = errno();
            if e == libc::EAGAIN || e == libc::EWOULDBLOCK {
                return Ok(None);
            }
            return Err(FabricError::Os {
                op: "rdma_get_cm_event",
                errno: e,
            });
        }
        // SAFETY: the event is valid until acknowledged below; everything is copied out first.
        let out = unsafe { self.convert(ev) };
        // SAFETY: acknowledging the event we got, once.
        unsafe { rdma_ack_cm_event(ev) };
        Ok(Some(out))
    }

    /// Copies an event out.
    ///
    /// # Safety
    /// `ev` must be a live, unacknowledged event from this channel.
    unsafe fn convert(self: &Arc<Self>, ev: *mut rdma_cm_event) -> CmEvent {
        // SAFETY: guaranteed by the caller.
        let e = unsafe { &*ev };
        let id = e.id;
        // SAFETY: event ids are live until the event is acknowledged.
        let handle = unsafe { (*id).context } as u64;
        // SAFETY: param.conn is the valid member for connected (RC) identifiers.
        let conn = unsafe { e.param.conn };
        let pdata = || -> Vec<u8> {
            if conn.private_data.is_null() || conn.private_data_len == 0 {
                Vec::new()
            } else {
                // SAFETY: librdmacm provides private_data_len readable bytes.
                unsafe {
                    std::slice::from_raw_parts(
                        conn.private_data.cast::<u8>(),
                        conn.private_data_len as usize,
                    )
                }
                .to_vec()
            }
        };
        let t = e.event;
        use rdma_cm_event_type::*;
        let (id_handle, kind) = match t {
            RDMA_CM_EVENT_ADDR_RESOLVED => (handle, CmEventKind::AddrResolved),
            RDMA_CM_EVENT_ADDR_ERROR => (handle, CmEventKind::AddrError),
            RDMA_CM_EVENT_ROUTE_RESOLVED => (handle, CmEventKind::RouteResolved),
            RDMA_CM_EVENT_ROUTE_ERROR => (handle, CmEventKind::RouteError),
            RDMA_CM_EVENT_CONNECT_REQUEST => {
                // SAFETY: for a connect request listen_id is the live listener.
                let listen = unsafe { (*e.listen_id).context } as u64;
                // SAFETY: the new id is live and now ours.
                let (local, peer) = unsafe { (sockaddr_of(id, true), sockaddr_of(id, false)) };
                let new = RCmId::adopt(id, self);
                let unspec = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), 0);
                (
                    listen,
                    CmEventKind::ConnectRequest(Box::new(ConnectRequest {
                        id: crate::cm::CmId(CmIdImpl::Rdma(new)),
                        private_data: pdata(),
                        responder_resources: conn.responder_resources,
                        initiator_depth: conn.initiator_depth,
                        local_addr: local.unwrap_or(unspec),
                        peer_addr: peer.unwrap_or(unspec),
                    })),
                )
            }
            RDMA_CM_EVENT_CONNECT_ERROR => (handle, CmEventKind::ConnectError),
            RDMA_CM_EVENT_UNREACHABLE => (handle, CmEventKind::Unreachable),
            RDMA_CM_EVENT_REJECTED => (
                handle,
                CmEventKind::Rejected {
                    private_data: pdata(),
                },
            ),
            RDMA_CM_EVENT_ESTABLISHED => (
                handle,
                CmEventKind::Established {
                    private_data: pdata(),
                    responder_resources: conn.responder_resources,
                    initiator_depth: conn.initiator_depth,
                },
            ),
            RDMA_CM_EVENT_DISCONNECTED => (handle, CmEventKind::Disconnected),
            RDMA_CM_EVENT_DEVICE_REMOVAL => (handle, CmEventKind::DeviceRemoval),
            RDMA_CM_EVENT_ADDR_CHANGE => (handle, CmEventKind::AddrChange),
            RDMA_CM_EVENT_TIMEWAIT_EXIT => (handle, CmEventKind::TimewaitExit),
            other => (handle, CmEventKind::Other(other)),
        };
        CmEvent {
            id: id_handle,
            kind,
            status: e.status,
        }
    }
}

impl Drop for REventChannel {
    fn drop(&mut self) {
        // SAFETY: every id on the channel holds an Arc to it, so none is left.
        unsafe { rdma_destroy_event_channel(self.ch) };
    }
}

/// Reads the source (`local`) or destination address of an id.
///
/// # Safety
/// `id` must be live.
unsafe fn sockaddr_of(id: *mut rdma_cm_id, local: bool) -> Option<SocketAddr> {
    // SAFETY: guaranteed by the caller; the route's address unions hold sockaddr storage.
    let ss: libc::sockaddr_storage = unsafe {
        if local {
            (*id).route.addr.src_addr_union.src_storage
        } else {
            (*id).route.addr.dst_addr_union.dst_storage
        }
    };
    from_storage(&ss)
}

fn from_storage(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match ss.ss_family as c_int {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
            Some(SocketAddr::V4(SocketAddrV4::new(
                ip,
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6 =
                unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn to_storage(addr: &SocketAddr) -> libc::sockaddr_storage {
    // SAFETY: sockaddr_storage is plain data; all-zero is valid.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in.
            let sin = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>()
            };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr.s_addr = u32::from(*a.ip()).to_be();
        }
        SocketAddr::V6(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for a sockaddr_in6.
            let sin6 = unsafe {
                &mut *(&mut ss as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_addr.s6_addr = a.ip().octets();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_scope_id = a.scope_id();
        }
    }
    let _ = size_of::<libc::sockaddr_storage>();
    ss
}

pub(crate) struct RCmId {
    id: *mut rdma_cm_id,
    handle: u64,
    _channel: Arc<REventChannel>,
    qp_alive: AtomicBool,
}

// SAFETY: librdmacm calls on an id may come from any thread (they are commands on the
// channel's fd, serialised by the kernel); the wrapper keeps no unsynchronised state.
unsafe impl Send for RCmId {}
// SAFETY: as above.
unsafe impl Sync for RCmId {}

fn cm_ret(op: &'static str, r: c_int) -> Result<()> {
    if r == 0 {
        Ok(())
    } else {
        let e = errno();
        Err(match e {
            libc::EADDRINUSE => FabricError::AddrInUse,
            libc::EADDRNOTAVAIL => FabricError::AddrNotAvailable,
            _ => FabricError::Os { op, errno: e },
        })
    }
}

impl RCmId {
    pub(crate) fn create(ch: &Arc<REventChannel>) -> Result<Arc<Self>> {
        let handle = crate::next_handle();
        let mut id: *mut rdma_cm_id = ptr::null_mut();
        // SAFETY: the channel is live; the context is an opaque number.
        let r = unsafe {
            rdma_create_id(
                ch.ch,
                &mut id,
                handle as *mut c_void,
                rdma_port_space::RDMA_PS_TCP,
            )
        };
        cm_ret("rdma_create_id", r)?;
        Ok(Arc::new(RCmId {
            id,
            handle,
            _channel: Arc::clone(ch),
            qp_alive: AtomicBool::new(false),
        }))
    }

    /// Wraps an id that arrived in a connect request and gives it its own handle.
    fn adopt(id: *mut rdma_cm_id, ch: &Arc<REventChannel>) -> Arc<Self> {
        let handle = crate::next_handle();
        // SAFETY: the id is live and ours; the context is an opaque number read by events.
        unsafe { (*id).context = handle as *mut c_void };
        Arc::new(RCmId {
            id,
            handle,
            _channel: Arc::clone(ch),
            qp_alive: AtomicBool::new(false),
        })
    }

    pub(crate) fn handle(&self) -> u64 {
        self.handle
    }

    pub(crate) fn bind(&self, addr: SocketAddr) -> Result<()> {
        let mut ss = to_storage(&addr);
        // SAFETY: the id is live; the address is a valid sockaddr.
        let r = unsafe { rdma_bind_addr(self.id, (&mut ss as *mut libc::sockaddr_storage).cast()) };
        cm_ret("rdma_bind_addr", r)
    }

    pub(crate) fn listen(&self, backlog: i32) -> Result<()> {
        // SAFETY: the id is live.
        let r = unsafe { rdma_listen(self.id, backlog) };
        cm_ret("rdma_listen", r)
    }

    pub(crate) fn resolve_addr(
        &self,
        src: Option<SocketAddr>,
        dst: SocketAddr,
        timeout_ms: i32,
    ) -> Result<()> {
        let mut s = src.map(|a| to_storage(&a));
        let mut d = to_storage(&dst);
        let sp = s.as_mut().map_or(ptr::null_mut(), |s| {
            (s as *mut libc::sockaddr_storage).cast()
        });
        // SAFETY: the id is live; addresses are valid sockaddrs for the call.
        let r = unsafe {
            rdma_resolve_addr(
                self.id,
                sp,
                (&mut d as *mut libc::sockaddr_storage).cast(),
                timeout_ms,
            )
        };
        cm_ret("rdma_resolve_addr", r)
    }

    pub(crate) fn resolve_route(&self, timeout_ms: i32) -> Result<()> {
        // SAFETY: the id is live.
        let r = unsafe { rdma_resolve_route(self.id, timeout_ms) };
        cm_ret("rdma_resolve_route", r)
    }

    fn conn_param(p: &ConnParam<'_>) -> rdma_conn_param {
        rdma_conn_param {
            private_data: if p.private_data.is_empty() {
                ptr::null()
            } else {
                p.private_data.as_ptr().cast()
            },
            private_data_len: p.private_data.len().min(255) as u8,
            responder_resources: p.responder_resources,
            initiator_depth: p.initiator_depth,
            flow_control: 1,
            retry_count: p.retry_count.min(7),
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: 0,
            qp_num: 0,
        }
    }

    pub(crate) fn connect(&self, p: &ConnParam<'_>) -> Result<()> {
        if !self.qp_alive.load(Ordering::Acquire) {
            return Err(FabricError::InvalidState(
                "create the queue pair before connect",
            ));
        }
        let mut cp = Self::conn_param(p);
        // SAFETY: the id is live; the private data outlives the call.
        let r = unsafe { rdma_connect(self.id, &mut cp) };
        cm_ret("rdma_connect", r)
    }

    pub(crate) fn accept(&self, p: &ConnParam<'_>) -> Result<()> {
        if !self.qp_alive.load(Ordering::Acquire) {
            return Err(FabricError::InvalidState(
                "create the queue pair before accept",
            ));
        }
        let mut cp = Self::conn_param(p);
        // SAFETY: the id is live; the private data outlives the call.
        let r = unsafe { rdma_accept(self.id, &mut cp) };
        cm_ret("rdma_accept", r)
    }

    pub(crate) fn reject(&self, pdata: &[u8]) -> Result<()> {
        let p = if pdata.is_empty() {
            ptr::null()
        } else {
            pdata.as_ptr().cast()
        };
        // SAFETY: the id is live; the private data outlives the call.
        let r = unsafe { rdma_reject(self.id, p, pdata.len().min(255) as u8) };
        cm_ret("rdma_reject", r)
    }

    pub(crate) fn disconnect(&self) -> Result<()> {
        if self.qp_alive.load(Ordering::Acquire) {
            // SAFETY: the QP belongs to the id and is live while qp_alive is set.
            let qp = unsafe { (*self.id).qp };
            if !qp.is_null() {
                // SAFETY: plain data, all-zero valid.
                let mut attr: ibv_qp_attr = unsafe { std::mem::zeroed() };
                attr.qp_state = ibv_qp_state::IBV_QPS_ERR;
                // SAFETY: the QP is live; only the state is modified.
                let r = unsafe {
                    ibv_modify_qp(qp, &mut attr, ibv_qp_attr_mask::IBV_QP_STATE.0 as c_int)
                };
                if r != 0 {
                    tracing::debug!("disconnect: ibv_modify_qp(ERR) failed: {r}");
                }
            }
        }
        // SAFETY: the id is live.
        let r = unsafe { rdma_disconnect(self.id) };
        match cm_ret("rdma_disconnect", r) {
            // Already disconnected (the peer went first, or a second call): nothing to do.
            Err(FabricError::Os { errno, .. }) if errno == libc::EINVAL => Ok(()),
            other => other,
        }
    }

    pub(crate) fn device(&self) -> Option<Arc<RDevice>> {
        // SAFETY: the id is live.
        let v = unsafe { (*self.id).verbs };
        (!v.is_null()).then(|| RDevice::from_ctx(v))
    }

    pub(crate) fn local_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live.
        unsafe { sockaddr_of(self.id, true) }
    }

    pub(crate) fn peer_addr(&self) -> Option<SocketAddr> {
        // SAFETY: the id is live.
        unsafe { sockaddr_of(self.id, false) }.filter(|a| !a.ip().is_unspecified())
    }
}

impl Drop for RCmId {
    fn drop(&mut self) {
        // SAFETY: the QP (if any) was destroyed first (it holds an Arc to us); all events were
        // acknowledged when read; destroyed once.
        let r = unsafe { rdma_destroy_id(self.id) };
        if r != 0 {
            tracing::error!("rdma_destroy_id failed: {}", errno());
        }
    }
}
