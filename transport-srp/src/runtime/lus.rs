//! The SCSI view of a subsystem on one poll group: a logical unit per namespace (LUN n−1 for
//! NSID n), the LUN list and the target port. Built from the poll group's namespace table when
//! first needed and dropped when the namespaces change, so the data path never allocates.

use target_core::scsi::{LogicalUnit, NaaId, PROTOCOL_ID_SRP, TargetPort};
use target_core::target::{NsInfo, PgCore};

use crate::proto::PortId;

/// Largest UNMAP range reported (VPD 0xB0 MAXIMUM UNMAP LBA COUNT) and WRITE SAME length.
const MAX_UNMAP_BLOCKS: u32 = 1 << 22;

/// The SCSI view of one subsystem.
pub(crate) struct SubLus {
    /// Logical units by LUN (index = NSID − 1).
    pub lus: Vec<Option<LogicalUnit>>,
    /// Namespace facts by LUN (what the exec layer needs beyond the SCSI description).
    pub info: Vec<Option<NsInfo>>,
    /// The LUNs, ascending (REPORT LUNS).
    pub luns: Vec<u16>,
    /// The target port (VPD 0x83).
    pub port: TargetPort,
}

/// How the logical units are sized.
#[derive(Clone, Copy, Debug)]
pub(crate) struct LuLimits {
    /// Largest transfer in bytes.
    pub max_io_size: u32,
    /// One data buffer in bytes (bounds the UNMAP parameter list).
    pub io_unit_size: u32,
}

/// The logical unit for a namespace.
pub(crate) fn logical_unit(ns: &NsInfo, limits: LuLimits) -> Option<LogicalUnit> {
    let ident = ns.nguid;
    let mut lu = LogicalUnit::new(
        ns.block_size,
        ns.num_blocks,
        NaaId::local_from_uuid(&ident),
        ns.uuid.simple().to_string(),
    );
    lu.write_cache = ns.write_cache;
    lu.read_only = !ns.writable;
    lu.max_transfer_blocks = limits.max_io_size / ns.block_size.max(1);
    lu.max_write_same_blocks = MAX_UNMAP_BLOCKS;
    if ns.unmap {
        let descs = ((limits.io_unit_size.saturating_sub(8)) / 16).clamp(1, 256);
        lu = lu.with_unmap(MAX_UNMAP_BLOCKS, descs, true);
    }
    lu.validate().ok()?;
    Some(lu)
}

impl SubLus {
    /// Builds the view of subsystem `sub` from the poll group's namespaces.
    pub fn build(core: &PgCore, sub: u32, port_id: PortId, limits: LuLimits) -> SubLus {
        let mut lus = Vec::new();
        let mut info = Vec::new();
        let mut luns = Vec::new();
        for ns in core.namespaces(sub) {
            let Some(lun) = ns.nsid.checked_sub(1) else {
                continue;
            };
            let Ok(lun16) = u16::try_from(lun) else {
                continue;
            };
            if lun16 > target_core::scsi::lun::MAX_LUN {
                continue;
            }
            let i = lun as usize;
            if lus.len() <= i {
                lus.resize_with(i + 1, || None);
                info.resize_with(i + 1, || None);
            }
            match logical_unit(ns, limits) {
                Some(lu) => {
                    lus[i] = Some(lu);
                    info[i] = Some(ns.clone());
                    luns.push(lun16);
                }
                None => tracing::warn!(
                    "namespace {} (bdev {}) cannot be a SCSI logical unit (block size {})",
                    ns.nsid,
                    ns.bdev_name,
                    ns.block_size
                ),
            }
        }
        luns.sort_unstable();
        SubLus {
            lus,
            info,
            luns,
            port: TargetPort {
                protocol_id: PROTOCOL_ID_SRP,
                relative_port: 1,
                port_id: Some(port_id.0),
            },
        }
    }

    /// The logical unit at `lun`.
    pub fn lu(&self, lun: u16) -> Option<&LogicalUnit> {
        self.lus.get(lun as usize).and_then(Option::as_ref)
    }

    /// The namespace facts at `lun`.
    pub fn info(&self, lun: u16) -> Option<&NsInfo> {
        self.info.get(lun as usize).and_then(Option::as_ref)
    }
}
