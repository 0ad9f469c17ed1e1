//! NVMe and NVMe-oF constants and the [`Status`] type.
//!
//! Values come from the NVMe base and NVMe-oF specifications as summarised in
//! `nvmeof-reference.md` (Appendix A). Everything on the wire is little-endian.

/// The well-known discovery subsystem NQN.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";
/// Longest NQN in bytes, without the terminating NUL.
pub const NQN_MAX_LEN: usize = 223;
/// Size of an NQN field in Connect data and in the discovery log.
pub const NQN_FIELD_LEN: usize = 256;

/// Size of a submission queue entry.
pub const SQE_SIZE: usize = 64;
/// Size of a completion queue entry.
pub const CQE_SIZE: usize = 16;
/// Size of Identify data.
pub const IDENTIFY_DATA_SIZE: usize = 4096;
/// Size of Fabrics Connect data.
pub const CONNECT_DATA_SIZE: usize = 1024;

/// CNTLID a host sends in an admin Connect to ask for a dynamic controller.
pub const CNTLID_DYNAMIC: u16 = 0xFFFF;
/// CNTLID meaning "any controller" in the static model.
pub const CNTLID_STATIC_ANY: u16 = 0xFFFE;
/// Lowest valid controller id.
pub const CNTLID_MIN: u16 = 1;
/// Highest valid controller id (0xFFF0..=0xFFFF are reserved).
pub const CNTLID_MAX: u16 = 0xFFEF;

/// NSID meaning "all namespaces" (broadcast).
pub const NSID_ALL: u32 = 0xFFFF_FFFF;

/// Keep-alive timeout applied to discovery controllers connected with KATO 0 (as nvmet/SPDK).
pub const DISCOVERY_DEFAULT_KATO_MS: u32 = 120_000;

/// Admin command opcodes.
pub mod admin_opc {
    /// Delete I/O Submission Queue (not used on fabrics).
    pub const DELETE_IO_SQ: u8 = 0x00;
    /// Create I/O Submission Queue (not used on fabrics).
    pub const CREATE_IO_SQ: u8 = 0x01;
    /// Get Log Page.
    pub const GET_LOG_PAGE: u8 = 0x02;
    /// Delete I/O Completion Queue (not used on fabrics).
    pub const DELETE_IO_CQ: u8 = 0x04;
    /// Create I/O Completion Queue (not used on fabrics).
    pub const CREATE_IO_CQ: u8 = 0x05;
    /// Identify.
    pub const IDENTIFY: u8 = 0x06;
    /// Abort.
    pub const ABORT: u8 = 0x08;
    /// Set Features.
    pub const SET_FEATURES: u8 = 0x09;
    /// Get Features.
    pub const GET_FEATURES: u8 = 0x0A;
    /// Asynchronous Event Request.
    pub const ASYNC_EVENT_REQUEST: u8 = 0x0C;
    /// Keep Alive.
    pub const KEEP_ALIVE: u8 = 0x18;
    /// Fabrics command (the FCTYPE field selects the command).
    pub const FABRICS: u8 = 0x7F;
}

/// NVM command set I/O opcodes.
pub mod io_opc {
    /// Flush.
    pub const FLUSH: u8 = 0x00;
    /// Write.
    pub const WRITE: u8 = 0x01;
    /// Read.
    pub const READ: u8 = 0x02;
    /// Write Uncorrectable.
    pub const WRITE_UNCORRECTABLE: u8 = 0x04;
    /// Compare.
    pub const COMPARE: u8 = 0x05;
    /// Write Zeroes.
    pub const WRITE_ZEROES: u8 = 0x08;
    /// Dataset Management.
    pub const DATASET_MANAGEMENT: u8 = 0x09;
    /// Fabrics command (Connect / Disconnect / Authentication on an I/O queue).
    pub const FABRICS: u8 = 0x7F;
}

/// Fabrics command types (SQE byte 4 when the opcode is 0x7F).
pub mod fctype {
    /// Property Set.
    pub const PROPERTY_SET: u8 = 0x00;
    /// Connect.
    pub const CONNECT: u8 = 0x01;
    /// Property Get.
    pub const PROPERTY_GET: u8 = 0x04;
    /// Authentication Send.
    pub const AUTH_SEND: u8 = 0x05;
    /// Authentication Receive.
    pub const AUTH_RECV: u8 = 0x06;
    /// Disconnect (individual I/O queue deletion).
    pub const DISCONNECT: u8 = 0x08;
}

/// Identify CNS values.
pub mod cns {
    /// Identify Namespace.
    pub const NAMESPACE: u8 = 0x00;
    /// Identify Controller.
    pub const CONTROLLER: u8 = 0x01;
    /// Active Namespace ID list.
    pub const ACTIVE_NS_LIST: u8 = 0x02;
    /// Namespace Identification Descriptor list.
    pub const NS_DESCRIPTORS: u8 = 0x03;
    /// I/O command set specific Identify Namespace.
    pub const CS_NAMESPACE: u8 = 0x05;
    /// I/O command set specific Identify Controller.
    pub const CS_CONTROLLER: u8 = 0x06;
    /// I/O command set independent Identify Namespace.
    pub const CS_INDEPENDENT_NAMESPACE: u8 = 0x08;
}

/// Log page identifiers.
pub mod lid {
    /// Supported Log Pages.
    pub const SUPPORTED_LOG_PAGES: u8 = 0x00;
    /// Error Information.
    pub const ERROR: u8 = 0x01;
    /// SMART / Health Information.
    pub const SMART: u8 = 0x02;
    /// Firmware Slot Information.
    pub const FW_SLOT: u8 = 0x03;
    /// Changed Namespace List.
    pub const CHANGED_NS_LIST: u8 = 0x04;
    /// Commands Supported and Effects.
    pub const CMD_EFFECTS: u8 = 0x05;
    /// Discovery log page.
    pub const DISCOVERY: u8 = 0x70;
}

/// Feature identifiers.
pub mod fid {
    /// Arbitration.
    pub const ARBITRATION: u8 = 0x01;
    /// Power Management.
    pub const POWER_MANAGEMENT: u8 = 0x02;
    /// Error Recovery.
    pub const ERROR_RECOVERY: u8 = 0x05;
    /// Write Atomicity Normal.
    pub const WRITE_ATOMICITY_NORMAL: u8 = 0x0A;
    /// Temperature Threshold.
    pub const TEMPERATURE_THRESHOLD: u8 = 0x04;
    /// Volatile Write Cache.
    pub const VOLATILE_WRITE_CACHE: u8 = 0x06;
    /// Number of Queues.
    pub const NUMBER_OF_QUEUES: u8 = 0x07;
    /// Asynchronous Event Configuration.
    pub const ASYNC_EVENT_CONFIG: u8 = 0x0B;
    /// Keep Alive Timer.
    pub const KEEP_ALIVE_TIMER: u8 = 0x0F;
    /// Host Identifier.
    pub const HOST_IDENTIFIER: u8 = 0x81;
}

/// Fabrics property offsets.
pub mod prop {
    /// Controller Capabilities (8 bytes).
    pub const CAP: u32 = 0x00;
    /// Version (4 bytes).
    pub const VS: u32 = 0x08;
    /// Interrupt Mask Set (reserved on fabrics).
    pub const INTMS: u32 = 0x0C;
    /// Interrupt Mask Clear (reserved on fabrics).
    pub const INTMC: u32 = 0x10;
    /// Controller Configuration (4 bytes).
    pub const CC: u32 = 0x14;
    /// Controller Status (4 bytes).
    pub const CSTS: u32 = 0x1C;
    /// NVM Subsystem Reset (4 bytes).
    pub const NSSR: u32 = 0x20;
}

/// Asynchronous event information.
pub mod aen {
    /// Event type: notice.
    pub const TYPE_NOTICE: u8 = 2;
    /// Notice: namespace attribute changed.
    pub const NOTICE_NS_ATTR_CHANGED: u8 = 0x00;
    /// Notice: discovery log page changed.
    pub const NOTICE_DISCOVERY_CHANGED: u8 = 0xF0;
    /// Async Event Configuration / OAES bit: namespace attribute notices.
    pub const CFG_NS_ATTR: u32 = 1 << 8;
    /// Async Event Configuration / OAES bit: discovery log page change notices.
    pub const CFG_DISCOVERY_CHANGE: u32 = 1 << 31;
}

/// Status code type.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Sct {
    /// Generic command status.
    Generic = 0,
    /// Command specific status.
    CommandSpecific = 1,
    /// Media and data integrity errors.
    Media = 2,
    /// Path related status.
    Path = 3,
    /// Vendor specific.
    Vendor = 7,
}

/// An NVMe completion status: SCT, SC, CRD, More and DNR.
///
/// Stored in the form the Linux host prints (`DNR<<14 | M<<13 | CRD<<11 | SCT<<8 | SC`), which is
/// the CQE status field without the phase bit. The named constants carry DNR exactly where the
/// reference says a target should set it (permanent errors).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Status(u16);

impl Status {
    /// Success.
    pub const SUCCESS: Status = Status(0);

    // Generic command status (SCT 0).
    /// Invalid Command Opcode (+DNR).
    pub const INVALID_OPCODE: Status = Status::generic(0x01).dnr();
    /// Invalid Field in Command (+DNR).
    pub const INVALID_FIELD: Status = Status::generic(0x02).dnr();
    /// Command ID Conflict (+DNR).
    pub const CID_CONFLICT: Status = Status::generic(0x03).dnr();
    /// Data Transfer Error (retryable).
    pub const DATA_TRANSFER_ERROR: Status = Status::generic(0x04);
    /// Internal Error (+DNR).
    pub const INTERNAL_ERROR: Status = Status::generic(0x06).dnr();
    /// Command Abort Requested.
    pub const ABORTED_BY_REQUEST: Status = Status::generic(0x07);
    /// Command Aborted due to SQ Deletion.
    pub const ABORTED_SQ_DELETION: Status = Status::generic(0x08);
    /// Command Aborted due to Failed Fused Command: the other half of a fused operation
    /// failed (the Write of a Compare + Write whose compare did not match).
    pub const ABORTED_FAILED_FUSED: Status = Status::generic(0x09);
    /// Command Aborted due to Missing Fused Command: the companion half of a fused
    /// operation is not next to it in the submission queue.
    pub const ABORTED_MISSING_FUSED: Status = Status::generic(0x0A);
    /// Command Aborted due to Preempt and Abort (generic 1Bh; Linux
    /// `NVME_SC_ABORTED_PREEMPT_ABORT`).
    pub const ABORTED_PREEMPT_ABORT: Status = Status::generic(0x1B);
    /// Invalid Namespace or Format (+DNR).
    pub const INVALID_NAMESPACE: Status = Status::generic(0x0B).dnr();
    /// Command Sequence Error (+DNR).
    pub const COMMAND_SEQUENCE_ERROR: Status = Status::generic(0x0C).dnr();
    /// Invalid SGL Segment Descriptor (+DNR).
    pub const INVALID_SGL_SEGMENT: Status = Status::generic(0x0D).dnr();
    /// Invalid Number of SGL Descriptors (+DNR).
    pub const INVALID_SGL_COUNT: Status = Status::generic(0x0E).dnr();
    /// Data SGL Length Invalid (+DNR).
    pub const DATA_SGL_LENGTH_INVALID: Status = Status::generic(0x0F).dnr();
    /// SGL Descriptor Type Invalid (+DNR).
    pub const SGL_TYPE_INVALID: Status = Status::generic(0x11).dnr();
    /// SGL Offset Invalid (+DNR).
    pub const SGL_OFFSET_INVALID: Status = Status::generic(0x16).dnr();
    /// Host Identifier Inconsistent Format (+DNR).
    pub const HOST_ID_INCONSISTENT: Status = Status::generic(0x18).dnr();
    /// Keep Alive Timer Expired.
    pub const KEEP_ALIVE_EXPIRED: Status = Status::generic(0x19);
    /// Keep Alive Timeout Invalid (no DNR, as nvmet).
    pub const KEEP_ALIVE_TIMEOUT_INVALID: Status = Status::generic(0x1A);
    /// Namespace is Write Protected (+DNR).
    pub const NAMESPACE_WRITE_PROTECTED: Status = Status::generic(0x20).dnr();
    /// Command Interrupted (retryable): a resource was short for now.
    pub const COMMAND_INTERRUPTED: Status = Status::generic(0x21);
    /// Transient Transport Error (retryable).
    pub const TRANSIENT_TRANSPORT_ERROR: Status = Status::generic(0x22);
    /// LBA Out of Range (+DNR).
    pub const LBA_OUT_OF_RANGE: Status = Status::generic(0x80).dnr();
    /// Capacity Exceeded (+DNR).
    pub const CAPACITY_EXCEEDED: Status = Status::generic(0x81).dnr();
    /// Namespace Not Ready (retryable).
    pub const NAMESPACE_NOT_READY: Status = Status::generic(0x82);

    // Command specific status (SCT 1).
    /// Invalid Queue Identifier (+DNR).
    pub const INVALID_QUEUE_ID: Status = Status::command_specific(0x01).dnr();
    /// Asynchronous Event Request Limit Exceeded (+DNR).
    pub const AER_LIMIT_EXCEEDED: Status = Status::command_specific(0x05).dnr();
    /// Invalid Log Page (+DNR).
    pub const INVALID_LOG_PAGE: Status = Status::command_specific(0x09).dnr();
    /// Feature Identifier Not Saveable (+DNR).
    pub const FEATURE_NOT_SAVEABLE: Status = Status::command_specific(0x0D).dnr();
    /// Feature Not Changeable (+DNR).
    pub const FEATURE_NOT_CHANGEABLE: Status = Status::command_specific(0x0E).dnr();
    /// Connect: Incompatible Format (+DNR).
    pub const CONNECT_INCOMPATIBLE_FORMAT: Status = Status::command_specific(0x80).dnr();
    /// Connect: Controller Busy (retryable).
    pub const CONNECT_CONTROLLER_BUSY: Status = Status::command_specific(0x81);
    /// Connect: Invalid Parameters (+DNR). DW0 carries IATTR/IPO.
    pub const CONNECT_INVALID_PARAMETERS: Status = Status::command_specific(0x82).dnr();
    /// Connect: Restart Discovery.
    pub const CONNECT_RESTART_DISCOVERY: Status = Status::command_specific(0x83);
    /// Connect: Invalid Host (+DNR).
    pub const CONNECT_INVALID_HOST: Status = Status::command_specific(0x84).dnr();

    // Media and data integrity errors (SCT 2).
    /// Write Fault (+DNR).
    pub const WRITE_FAULT: Status = Status::media(0x80).dnr();
    /// Unrecovered Read Error (+DNR).
    pub const UNRECOVERED_READ_ERROR: Status = Status::media(0x81).dnr();
    /// Compare Failure (+DNR).
    pub const COMPARE_FAILURE: Status = Status::media(0x85).dnr();
    /// Access Denied (+DNR).
    pub const ACCESS_DENIED: Status = Status::media(0x86).dnr();

    /// A status with the given type and code, no DNR, no More, CRD 0.
    pub const fn new(sct: Sct, sc: u8) -> Status {
        Status(((sct as u16) << 8) | sc as u16)
    }

    /// A generic (SCT 0) status without DNR.
    pub const fn generic(sc: u8) -> Status {
        Status::new(Sct::Generic, sc)
    }

    /// A command-specific (SCT 1) status without DNR.
    pub const fn command_specific(sc: u8) -> Status {
        Status::new(Sct::CommandSpecific, sc)
    }

    /// A media (SCT 2) status without DNR.
    pub const fn media(sc: u8) -> Status {
        Status::new(Sct::Media, sc)
    }

    /// The same status with DNR (Do Not Retry) set.
    pub const fn dnr(self) -> Status {
        Status(self.0 | 1 << 14)
    }

    /// The same status with DNR cleared.
    pub const fn retryable(self) -> Status {
        Status(self.0 & !(1 << 14))
    }

    /// The same status with More set (more detail in the Error log).
    pub const fn more(self) -> Status {
        Status(self.0 | 1 << 13)
    }

    /// The same status with the Command Retry Delay index (0..=3) set.
    pub const fn with_crd(self, crd: u8) -> Status {
        Status((self.0 & !(3 << 11)) | ((crd as u16 & 3) << 11))
    }

    /// Status code.
    pub const fn sc(self) -> u8 {
        self.0 as u8
    }

    /// Status code type (raw 3-bit value).
    pub const fn sct(self) -> u8 {
        ((self.0 >> 8) & 7) as u8
    }

    /// Command Retry Delay index.
    pub const fn crd(self) -> u8 {
        ((self.0 >> 11) & 3) as u8
    }

    /// More bit.
    pub const fn is_more(self) -> bool {
        self.0 & 1 << 13 != 0
    }

    /// Do Not Retry bit.
    pub const fn is_dnr(self) -> bool {
        self.0 & 1 << 14 != 0
    }

    /// True for success (SCT 0, SC 0).
    pub const fn is_success(self) -> bool {
        self.0 & 0x7FF == 0
    }

    /// The 16-bit value the Linux host prints and compares (`DNR<<14|M<<13|CRD<<11|SCT<<8|SC`).
    pub const fn linux(self) -> u16 {
        self.0
    }

    /// From the Linux form (bit 15 is ignored).
    pub const fn from_linux(v: u16) -> Status {
        Status(v & 0x7FFF)
    }

    /// The CQE status field (bytes 14-15): this value shifted left by one, phase bit 0.
    pub const fn to_cqe_field(self) -> u16 {
        self.0 << 1
    }

    /// From a CQE status field (the phase bit is dropped).
    pub const fn from_cqe_field(v: u16) -> Status {
        Status(v >> 1)
    }
}

impl core::fmt::Debug for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "Status({:#06x}: sct {} sc {:#04x}{}{})",
            self.0,
            self.sct(),
            self.sc(),
            if self.is_dnr() { " dnr" } else { "" },
            if self.is_more() { " more" } else { "" }
        )
    }
}

impl core::fmt::Display for Status {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(f, "{:#06x}", self.0)
    }
}

/// Little-endian field access helpers over byte slices with in-range constant offsets.
///
/// These index with constant offsets into fixed-size buffers the module owns; callers never pass
/// wire-controlled offsets.
pub(crate) mod le {
    #[inline]
    pub fn u16_at(b: &[u8], off: usize) -> u16 {
        let mut a = [0u8; 2];
        if let Some(s) = b.get(off..off + 2) {
            a.copy_from_slice(s);
        }
        u16::from_le_bytes(a)
    }
    #[inline]
    pub fn u32_at(b: &[u8], off: usize) -> u32 {
        let mut a = [0u8; 4];
        if let Some(s) = b.get(off..off + 4) {
            a.copy_from_slice(s);
        }
        u32::from_le_bytes(a)
    }
    #[inline]
    pub fn u64_at(b: &[u8], off: usize) -> u64 {
        let mut a = [0u8; 8];
        if let Some(s) = b.get(off..off + 8) {
            a.copy_from_slice(s);
        }
        u64::from_le_bytes(a)
    }
    #[inline]
    pub fn put_u16(b: &mut [u8], off: usize, v: u16) {
        if let Some(s) = b.get_mut(off..off + 2) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
    #[inline]
    pub fn put_u32(b: &mut [u8], off: usize, v: u32) {
        if let Some(s) = b.get_mut(off..off + 4) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
    #[inline]
    pub fn put_u64(b: &mut [u8], off: usize, v: u64) {
        if let Some(s) = b.get_mut(off..off + 8) {
            s.copy_from_slice(&v.to_le_bytes());
        }
    }
    /// Copies `src` into `b[off..off+len]`, padding with `pad`; `src` is truncated to `len`.
    pub fn put_padded(b: &mut [u8], off: usize, len: usize, src: &[u8], pad: u8) {
        if let Some(dst) = b.get_mut(off..off + len) {
            let n = src.len().min(len);
            dst[..n].copy_from_slice(&src[..n]);
            dst[n..].fill(pad);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_linux_forms_match_reference() {
        assert_eq!(Status::INVALID_OPCODE.linux(), 0x4001);
        assert_eq!(Status::INVALID_FIELD.linux(), 0x4002);
        assert_eq!(Status::INVALID_NAMESPACE.linux(), 0x400B);
        assert_eq!(Status::COMMAND_SEQUENCE_ERROR.linux(), 0x400C);
        assert_eq!(Status::DATA_SGL_LENGTH_INVALID.linux(), 0x400F);
        assert_eq!(Status::SGL_TYPE_INVALID.linux(), 0x4011);
        assert_eq!(Status::SGL_OFFSET_INVALID.linux(), 0x4016);
        assert_eq!(Status::KEEP_ALIVE_TIMEOUT_INVALID.linux(), 0x001A);
        assert_eq!(Status::NAMESPACE_WRITE_PROTECTED.linux(), 0x4020);
        assert_eq!(Status::LBA_OUT_OF_RANGE.linux(), 0x4080);
        assert_eq!(Status::NAMESPACE_NOT_READY.linux(), 0x0082);
        assert_eq!(Status::AER_LIMIT_EXCEEDED.linux(), 0x4105);
        assert_eq!(Status::CONNECT_INCOMPATIBLE_FORMAT.linux(), 0x4180);
        assert_eq!(Status::CONNECT_CONTROLLER_BUSY.linux(), 0x0181);
        assert_eq!(Status::CONNECT_INVALID_PARAMETERS.linux(), 0x4182);
        assert_eq!(Status::CONNECT_INVALID_HOST.linux(), 0x4184);
        assert_eq!(Status::COMPARE_FAILURE.linux(), 0x4285);
        assert_eq!(Status::INTERNAL_ERROR.linux(), 0x4006);
    }

    #[test]
    fn status_cqe_field_round_trip() {
        let s = Status::CONNECT_INVALID_PARAMETERS;
        assert_eq!(s.to_cqe_field(), 0x8304);
        assert_eq!(Status::from_cqe_field(0x8304), s);
        assert_eq!(Status::from_cqe_field(0x8305), s, "phase bit ignored");
        assert_eq!(s.sct(), 1);
        assert_eq!(s.sc(), 0x82);
        assert!(s.is_dnr());
        assert!(!s.is_more());
        let m = Status::INTERNAL_ERROR.more().with_crd(2);
        assert!(m.is_more());
        assert_eq!(m.crd(), 2);
        assert_eq!(m.sc(), 0x06);
        assert!(!Status::INVALID_FIELD.retryable().is_dnr());
        assert!(Status::SUCCESS.is_success());
        assert!(!Status::INVALID_FIELD.is_success());
        assert!(Status::SUCCESS.more().is_success());
    }

    #[test]
    fn le_helpers_ignore_out_of_range() {
        let mut b = [0u8; 4];
        le::put_u32(&mut b, 2, 0xAABBCCDD);
        assert_eq!(b, [0; 4]);
        le::put_u16(&mut b, 2, 0x1234);
        assert_eq!(le::u16_at(&b, 2), 0x1234);
        assert_eq!(le::u32_at(&b, 2), 0);
        le::put_padded(&mut b, 0, 4, b"ab", b' ');
        assert_eq!(&b, b"ab  ");
    }
}
