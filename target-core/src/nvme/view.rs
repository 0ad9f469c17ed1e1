//! Plain inputs from the target model and the transport.
//!
//! The exec layer fills these from its subsystem/namespace/bdev state and from the transport's
//! options. The controller logic never keeps references into the target model: it borrows a
//! [`SubsystemView`] for the duration of one call.

use super::ana::AnaIdentify;
use super::discovery::DiscoveryLog;
use super::sgl::SglPolicy;
use crate::ana::{AnaLog, AnaState};

/// What kind of subsystem (and therefore controller) this is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SubsystemKind {
    /// An NVM subsystem with namespaces: I/O controllers (CNTRLTYPE 1).
    Nvm,
    /// A discovery subsystem: discovery controllers (CNTRLTYPE 2), no I/O queues.
    Discovery,
}

/// One namespace as the controller needs to see it. `Copy`, no heap: the exec layer can keep an
/// array of these per poll group for the I/O path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NamespaceView {
    /// Namespace id, 1..=max_namespaces.
    pub nsid: u32,
    /// Logical block size in bytes: a power of two, 512..=4096 for the Linux host.
    pub block_size: u32,
    /// Capacity in logical blocks (NSZE = NCAP = NUSE).
    pub num_blocks: u64,
    /// Namespace UUID (all-zero = none). Must be unique and stable.
    pub uuid: [u8; 16],
    /// NGUID (all-zero = none). Must be unique and stable.
    pub nguid: [u8; 16],
    /// IEEE EUI-64 (all-zero = none).
    pub eui64: [u8; 8],
    /// The backend has a volatile write cache: Flush and FUA must reach stable media.
    pub volatile_write_cache: bool,
    /// The backend can deallocate (Dataset Management with AD).
    pub supports_unmap: bool,
    /// The backend can write zeroes (natively or emulated by the bdev layer).
    pub supports_write_zeroes: bool,
    /// Writes are refused with Namespace is Write Protected.
    pub read_only: bool,
    /// The namespace is ready for I/O (CNS 08h NSTAT bit 0; otherwise I/O gets Namespace Not Ready).
    pub ready: bool,
    /// Reservation Capabilities (Identify Namespace RESCAP, `nvme::resv::rescap`).
    pub rescap: u8,
}

impl NamespaceView {
    /// A ready, writable namespace without identifiers or optional capabilities.
    pub fn new(nsid: u32, block_size: u32, num_blocks: u64) -> NamespaceView {
        NamespaceView {
            nsid,
            block_size,
            num_blocks,
            uuid: [0; 16],
            nguid: [0; 16],
            eui64: [0; 8],
            volatile_write_cache: false,
            supports_unmap: false,
            supports_write_zeroes: false,
            read_only: false,
            ready: true,
            rescap: 0,
        }
    }

    /// LBA data size as a power of two (LBADS), e.g. 9 for 512-byte blocks.
    pub fn lbads(&self) -> u8 {
        self.block_size.max(1).trailing_zeros() as u8
    }

    /// Capacity in bytes (saturating).
    pub fn size_bytes(&self) -> u64 {
        self.num_blocks.saturating_mul(u64::from(self.block_size))
    }
}

/// A subsystem as one controller sees it during one call.
#[derive(Clone, Copy, Debug)]
pub struct SubsystemView<'a> {
    /// NVM or discovery.
    pub kind: SubsystemKind,
    /// Serial number (ASCII, up to 20 bytes; space-padded on the wire).
    pub serial: &'a str,
    /// Model number (ASCII, up to 40 bytes).
    pub model: &'a str,
    /// Firmware revision (ASCII, up to 8 bytes).
    pub firmware: &'a str,
    /// Highest NSID the subsystem may use (Identify NN).
    pub max_namespaces: u32,
    /// The active namespaces visible to this controller, in any order.
    pub namespaces: &'a [NamespaceView],
    /// For discovery controllers: the log this host may see (filtered by the caller by host
    /// access and by the port the connection came through).
    pub discovery_log: Option<DiscoveryLog<'a>>,
    /// With ANA reporting: the ANA view of the path this controller came through.
    pub ana: Option<AnaView<'a>>,
}

/// What a controller of a subsystem with ANA reporting sees of its path.
#[derive(Clone, Copy, Debug)]
pub struct AnaView<'a> {
    /// The Identify Controller values.
    pub identify: AnaIdentify,
    /// The ANA log page content for this controller (its listener, its visible namespaces).
    pub log: &'a AnaLog,
    /// The listener's log generation (moves whenever the log changed).
    pub generation: u64,
}

impl AnaView<'_> {
    /// The group of namespace `nsid` and the state this path reports for it.
    pub fn namespace(&self, nsid: u32) -> Option<(u32, AnaState)> {
        self.log
            .groups
            .iter()
            .find(|g| g.nsids.contains(&nsid))
            .map(|g| (g.grpid, g.state))
    }
}

impl SubsystemView<'static> {
    /// A view with no namespaces, strings or discovery log, for commands that read none of
    /// them (Keep Alive): the exec layer need not build the whole view for those.
    pub fn bare(kind: SubsystemKind) -> Self {
        SubsystemView {
            kind,
            serial: "",
            model: "",
            firmware: "",
            max_namespaces: 0,
            namespaces: &[],
            discovery_log: None,
            ana: None,
        }
    }
}

impl<'a> SubsystemView<'a> {
    /// The active namespace with this id.
    pub fn namespace(&self, nsid: u32) -> Option<&'a NamespaceView> {
        self.namespaces.iter().find(|n| n.nsid == nsid)
    }
}

/// Limits from the transport and target configuration, fixed for a controller's lifetime.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransportLimits {
    /// Largest data transfer per command in bytes (drives MDTS; rounded down to 4 KiB·2^n).
    pub max_io_size: u32,
    /// In-capsule data bytes per I/O command capsule (IOCCSZ = 4 + this/16). 0 disables it.
    pub in_capsule_data_size: u32,
    /// Maximum SGL data block descriptors per command (MSDBD).
    pub msdbd: u8,
    /// Maximum I/O queue depth in entries (CAP.MQES = this − 1, MAXCMD = this).
    pub max_queue_depth: u16,
    /// Maximum admin queue depth in entries (at least 32 for Linux).
    pub max_admin_queue_depth: u16,
    /// Maximum I/O queues per controller (Number of Queues feature ceiling).
    pub max_io_queues: u16,
    /// Keep-alive granularity in 100 ms units (Identify KAS; must be non-zero).
    pub kas: u16,
    /// Keyed SGL data blocks are supported (RDMA): Identify SGLS bit 2.
    pub keyed_sgl: bool,
    /// Transport SGL data blocks are supported (TCP): Identify SGLS bit 21.
    pub transport_sgl: bool,
}

impl Default for TransportLimits {
    /// RDMA defaults matching SPDK's transport defaults (128 KiB I/O, 4 KiB in-capsule, depth
    /// 128, 127 I/O queues) with KAS 10 (1 s) and one SGL descriptor.
    fn default() -> Self {
        TransportLimits {
            max_io_size: 128 * 1024,
            in_capsule_data_size: 4096,
            msdbd: 1,
            max_queue_depth: 128,
            max_admin_queue_depth: 32,
            max_io_queues: 127,
            kas: 10,
            keyed_sgl: true,
            transport_sgl: false,
        }
    }
}

impl TransportLimits {
    /// CAP.MQES (0's based).
    pub fn mqes(&self) -> u16 {
        self.max_queue_depth.max(2) - 1
    }

    /// The SGL policy for I/O queues.
    pub fn io_sgl_policy(&self) -> SglPolicy {
        SglPolicy {
            keyed: self.keyed_sgl,
            transport_data_block: self.transport_sgl,
            in_capsule_capacity: self.in_capsule_data_size,
            msdbd: self.msdbd.max(1),
            max_len: self.max_io_size,
        }
    }

    /// The SGL policy for the admin queue, given how many in-capsule bytes its receive buffers
    /// hold (0 for 64-byte RDMA admin buffers). Admin transfers are bounded by `max_len`.
    pub fn admin_sgl_policy(&self, in_capsule_capacity: u32, max_len: u32) -> SglPolicy {
        SglPolicy {
            keyed: self.keyed_sgl,
            transport_data_block: self.transport_sgl,
            in_capsule_capacity,
            msdbd: self.msdbd.max(1),
            max_len,
        }
    }
}
