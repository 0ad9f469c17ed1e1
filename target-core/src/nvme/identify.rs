//! Identify (admin opcode 0x06): controller, namespace, active namespace list, namespace
//! identification descriptors and the command-set specific/independent structures.

use super::aer::AERL;
use super::controller::Controller;
use super::log_page::ERROR_LOG_ENTRIES;
use super::regs::NVME_VERSION;
use super::spec::{IDENTIFY_DATA_SIZE, NQN_FIELD_LEN, NSID_ALL, Status, aen, cns, le};
use super::sqe::Sqe;
use super::view::{NamespaceView, SubsystemKind, SubsystemView, TransportLimits};

/// The 4096-byte Identify data buffer. The builders below expect it zeroed.
pub type IdentifyData = [u8; IDENTIFY_DATA_SIZE];

/// Identify Controller byte offsets the host validates (for tests and debugging).
pub mod ctrl_off {
    /// Serial number (20 bytes).
    pub const SN: usize = 4;
    /// Model number (40 bytes).
    pub const MN: usize = 24;
    /// Firmware revision (8 bytes).
    pub const FR: usize = 64;
    /// CMIC.
    pub const CMIC: usize = 76;
    /// MDTS.
    pub const MDTS: usize = 77;
    /// CNTLID.
    pub const CNTLID: usize = 78;
    /// VER.
    pub const VER: usize = 80;
    /// OAES.
    pub const OAES: usize = 92;
    /// CTRATT.
    pub const CTRATT: usize = 96;
    /// CNTRLTYPE.
    pub const CNTRLTYPE: usize = 111;
    /// OACS.
    pub const OACS: usize = 256;
    /// AERL.
    pub const AERL: usize = 259;
    /// LPA.
    pub const LPA: usize = 261;
    /// KAS.
    pub const KAS: usize = 320;
    /// MAXCMD.
    pub const MAXCMD: usize = 514;
    /// NN.
    pub const NN: usize = 516;
    /// ONCS.
    pub const ONCS: usize = 520;
    /// Fused Operation Support.
    pub const FUSES: usize = 522;
    /// VWC.
    pub const VWC: usize = 525;
    /// SGLS.
    pub const SGLS: usize = 536;
    /// SUBNQN (256 bytes).
    pub const SUBNQN: usize = 768;
    /// IOCCSZ.
    pub const IOCCSZ: usize = 1792;
    /// IORCSZ.
    pub const IORCSZ: usize = 1796;
    /// ICDOFF.
    pub const ICDOFF: usize = 1800;
    /// MSDBD.
    pub const MSDBD: usize = 1803;
    /// OFCS.
    pub const OFCS: usize = 1804;
}

/// Namespace identification descriptor types.
pub mod nidt {
    /// IEEE EUI-64.
    pub const EUI64: u8 = 1;
    /// NGUID.
    pub const NGUID: u8 = 2;
    /// UUID.
    pub const UUID: u8 = 3;
    /// Command set identifier.
    pub const CSI: u8 = 4;
}

/// Executes Identify into `out`; returns the number of bytes to send (4096).
pub(super) fn execute(
    ctrl: &Controller,
    view: &SubsystemView<'_>,
    sqe: &Sqe,
    out: &mut [u8],
) -> Result<usize, Status> {
    let cdw10 = sqe.cdw10();
    let cns = cdw10 as u8;
    let csi = (sqe.cdw11() >> 24) as u8;
    let nsid = sqe.nsid();
    let buf: &mut IdentifyData = out
        .get_mut(..IDENTIFY_DATA_SIZE)
        .and_then(|b| b.try_into().ok())
        .ok_or(Status::DATA_SGL_LENGTH_INVALID)?;
    if ctrl.kind == SubsystemKind::Discovery && cns != cns::CONTROLLER {
        return Err(Status::INVALID_FIELD);
    }
    // Validate before touching the host's buffer.
    match cns {
        cns::CONTROLLER => {
            buf.fill(0);
            controller(ctrl, view, buf);
        }
        cns::NAMESPACE | cns::CS_INDEPENDENT_NAMESPACE | cns::CS_NAMESPACE => {
            if cns == cns::CS_NAMESPACE && csi != 0 {
                return Err(Status::INVALID_FIELD);
            }
            let ns = lookup_for_identify(view, nsid)?;
            buf.fill(0);
            if let Some(ns) = ns {
                let ana = view.ana.as_ref().and_then(|a| a.namespace(ns.nsid));
                match cns {
                    cns::NAMESPACE => {
                        namespace(ns, buf);
                        if let Some((grp, state)) = ana {
                            super::ana::identify_namespace(buf, grp, state);
                        }
                    }
                    cns::CS_INDEPENDENT_NAMESPACE => {
                        cs_independent_namespace(ns, buf);
                        if let Some((grp, _)) = ana {
                            super::ana::identify_cs_independent_namespace(buf, grp);
                        }
                    }
                    // NVM command set specific namespace data: nothing beyond CNS 00h.
                    _ => {}
                }
            }
        }
        cns::ACTIVE_NS_LIST => {
            if nsid >= 0xFFFF_FFFE {
                return Err(Status::INVALID_NAMESPACE);
            }
            buf.fill(0);
            active_ns_list(view, nsid, buf);
        }
        cns::NS_DESCRIPTORS => {
            let ns = view.namespace(nsid).ok_or(Status::INVALID_NAMESPACE)?;
            buf.fill(0);
            ns_descriptors(ns, buf);
        }
        cns::CS_CONTROLLER => {
            if csi != 0 {
                return Err(Status::INVALID_FIELD);
            }
            // NVM command set specific controller data: all optional fields zero.
            buf.fill(0);
        }
        _ => return Err(Status::INVALID_FIELD),
    }
    Ok(IDENTIFY_DATA_SIZE)
}

/// Identify Namespace rules: NSID 0, broadcast or above NN → Invalid Namespace; a valid but
/// inactive NSID → `Ok(None)` (all-zero data, success).
fn lookup_for_identify<'a>(
    view: &SubsystemView<'a>,
    nsid: u32,
) -> Result<Option<&'a NamespaceView>, Status> {
    if nsid == 0 || nsid == NSID_ALL {
        return Err(Status::INVALID_NAMESPACE);
    }
    match view.namespace(nsid) {
        Some(ns) => Ok(Some(ns)),
        None if nsid <= nn(view) => Ok(None),
        None => Err(Status::INVALID_NAMESPACE),
    }
}

/// NN: the subsystem's namespace limit, never below an active NSID.
fn nn(view: &SubsystemView<'_>) -> u32 {
    view.namespaces
        .iter()
        .map(|n| n.nsid)
        .fold(view.max_namespaces, u32::max)
}

/// MDTS from the transfer limit: 2^MDTS × 4 KiB ≤ max_io_size (at least 1, 0 = no limit).
pub fn mdts(limits: &TransportLimits) -> u8 {
    let pages = limits.max_io_size / 4096;
    if limits.max_io_size == 0 {
        0
    } else if pages <= 1 {
        1
    } else {
        pages.ilog2() as u8
    }
}

/// Identify Controller data (CNS 01h) into a 4096-byte zeroed buffer.
pub fn controller(ctrl: &Controller, view: &SubsystemView<'_>, b: &mut IdentifyData) {
    let l = &ctrl.limits;
    let disc = ctrl.kind == SubsystemKind::Discovery;
    // VID/SSVID 0.
    le::put_padded(b, ctrl_off::SN, 20, ascii(view.serial), b' ');
    le::put_padded(b, ctrl_off::MN, 40, ascii(view.model), b' ');
    le::put_padded(b, ctrl_off::FR, 8, ascii(view.firmware), b' ');
    b[72] = 6; // RAB
    b[ctrl_off::CMIC] = if disc { 0 } else { 0x02 }; // may have several controllers
    b[ctrl_off::MDTS] = if disc { 0 } else { mdts(l) };
    le::put_u16(b, ctrl_off::CNTLID, ctrl.cntlid);
    le::put_u32(b, ctrl_off::VER, NVME_VERSION);
    le::put_u32(
        b,
        ctrl_off::OAES,
        if disc {
            aen::CFG_DISCOVERY_CHANGE
        } else {
            aen::CFG_NS_ATTR
        },
    );
    le::put_u32(b, ctrl_off::CTRATT, 1); // 128-bit host identifier
    b[ctrl_off::CNTRLTYPE] = if disc { 2 } else { 1 };
    // OACS 0: no security send/receive, namespace management, directives...
    b[258] = 3; // ACL
    b[ctrl_off::AERL] = AERL;
    b[260] = 0x03; // FRMW: slot 1 read-only, one slot
    // Extended data for Get Log Page; the Commands Supported and Effects log (I/O controllers
    // serve it). No per-namespace SMART (bit 0).
    b[ctrl_off::LPA] = if disc { 1 << 2 } else { 1 << 1 | 1 << 2 };
    b[262] = (ERROR_LOG_ENTRIES - 1) as u8; // ELPE
    if !disc {
        le::put_u16(b, 266, 0x0157); // WCTEMP 343 K
        le::put_u16(b, 268, 0x0175); // CCTEMP 373 K
    }
    le::put_u16(b, ctrl_off::KAS, l.kas);
    b[512] = 0x66; // SQES
    b[513] = 0x44; // CQES
    // Linux clamps every queue's size (the discovery admin queue included) to MAXCMD and warns
    // when it does: advertise the queue depth, never less than the admin queue's.
    let maxcmd = l.max_queue_depth.max(l.max_admin_queue_depth).max(1);
    le::put_u16(b, ctrl_off::MAXCMD, maxcmd);
    if !disc {
        le::put_u32(b, ctrl_off::NN, nn(view));
        le::put_u16(b, ctrl_off::ONCS, oncs(view));
        // FUSES bit 0: fused Compare + Write (`nvme_exec` runs the pair under the volume's
        // compare-and-write range lock).
        le::put_u16(b, ctrl_off::FUSES, 1);
        let vwc = view.namespaces.iter().any(|n| n.volatile_write_cache);
        // VWC present; Flush with NSID FFFFFFFFh not supported (bits 2:1 = 10b).
        b[ctrl_off::VWC] = if vwc { 0x01 | 0x04 } else { 0 };
    }
    let mut sgls: u32 = 1; // SGLs supported, no alignment requirement
    if l.keyed_sgl {
        sgls |= 1 << 2;
    }
    if l.in_capsule_data_size > 0 && !disc {
        sgls |= 1 << 20; // address field as offset (in-capsule data)
    }
    if l.transport_sgl {
        sgls |= 1 << 21;
    }
    le::put_u32(b, ctrl_off::SGLS, sgls);
    le::put_padded(
        b,
        ctrl_off::SUBNQN,
        NQN_FIELD_LEN,
        ctrl.subnqn.as_bytes(),
        0,
    );
    let icd = if disc { 0 } else { l.in_capsule_data_size };
    le::put_u32(b, ctrl_off::IOCCSZ, (64 + icd) / 16);
    le::put_u32(b, ctrl_off::IORCSZ, 1);
    if !disc {
        le::put_u16(b, ctrl_off::OFCS, 1); // Disconnect command supported
    }
    // ICDOFF 0, FCATT 0 (dynamic model).
    b[ctrl_off::MSDBD] = l.msdbd.max(1);
    b[1806] = if disc { 1 } else { 0 }; // DCTYPE: direct discovery controller
    // Power state 0: the values nvmet (and QEMU) report.
    le::put_u16(b, 2048, 0x09C4);
    le::put_u32(b, 2052, 0x10);
    le::put_u32(b, 2056, 0x4);
    if let Some(a) = &view.ana
        && !disc
    {
        super::ana::identify_controller(b, &a.identify);
    }
}

/// ONCS: Compare always (every bdev that can read compares: natively, or by reading in the bdev
/// channel); Dataset Management always (deallocation is advisory and becomes a no-op on a
/// namespace that cannot unmap); Write Zeroes when every namespace supports it; Reservations
/// always (every namespace has the volume's reservation state).
pub fn oncs(view: &SubsystemView<'_>) -> u16 {
    let mut v = 1 << 0 | 1 << 2 | super::resv::ONCS_RESERVATIONS;
    if view.namespaces.iter().all(|n| n.supports_write_zeroes) {
        v |= 1 << 3;
    }
    v
}

fn ascii(s: &str) -> &[u8] {
    let b = s.as_bytes();
    let n = b
        .iter()
        .position(|c| !(0x20..0x7F).contains(c))
        .unwrap_or(b.len());
    &b[..n]
}

/// Identify Namespace data (CNS 00h) into a 4096-byte zeroed buffer.
pub fn namespace(ns: &NamespaceView, b: &mut IdentifyData) {
    le::put_u64(b, 0, ns.num_blocks); // NSZE
    le::put_u64(b, 8, ns.num_blocks); // NCAP
    le::put_u64(b, 16, ns.num_blocks); // NUSE
    // NSFEAT 0, NLBAF 0 (one format), FLBAS 0, no metadata or protection.
    b[30] = 1; // NMIC: may be shared
    b[31] = ns.rescap; // RESCAP
    b[99] = u8::from(ns.read_only); // NSATTR: write protected
    b[104..120].copy_from_slice(&ns.nguid);
    b[120..128].copy_from_slice(&ns.eui64);
    b[130] = ns.lbads(); // LBAF0.LBADS
}

/// I/O command set independent Identify Namespace data (CNS 08h).
pub fn cs_independent_namespace(ns: &NamespaceView, b: &mut IdentifyData) {
    b[1] = 1; // NMIC
    b[8] = u8::from(ns.read_only); // NSATTR
    b[14] = u8::from(ns.ready); // NSTAT: namespace ready
}

/// Active namespace list (CNS 02h): ascending NSIDs greater than `after`, at most 1024.
pub fn active_ns_list(view: &SubsystemView<'_>, after: u32, b: &mut IdentifyData) {
    let mut prev = after;
    for slot in 0..IDENTIFY_DATA_SIZE / 4 {
        // Smallest NSID greater than `prev`: the views are small and unsorted, and this is
        // the admin path.
        let Some(next) = view
            .namespaces
            .iter()
            .map(|n| n.nsid)
            .filter(|&n| n > prev)
            .min()
        else {
            break;
        };
        le::put_u32(b, slot * 4, next);
        prev = next;
    }
}

/// Namespace identification descriptor list (CNS 03h): EUI-64, NGUID and UUID when non-zero,
/// then CSI = NVM.
pub fn ns_descriptors(ns: &NamespaceView, b: &mut IdentifyData) {
    let mut off = 0;
    let mut put = |ty: u8, val: &[u8]| {
        b[off] = ty;
        b[off + 1] = val.len() as u8;
        b[off + 4..off + 4 + val.len()].copy_from_slice(val);
        off += 4 + val.len();
    };
    if ns.eui64 != [0; 8] {
        put(nidt::EUI64, &ns.eui64);
    }
    if ns.nguid != [0; 16] {
        put(nidt::NGUID, &ns.nguid);
    }
    if ns.uuid != [0; 16] {
        put(nidt::UUID, &ns.uuid);
    }
    put(nidt::CSI, &[0]);
}
