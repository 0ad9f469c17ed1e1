//! The SCSI view of a subsystem on one poll group: a logical unit per namespace (LUN n−1 for
//! NSID n) and the LUN list. Built from the poll group's namespace table when first needed and
//! dropped when the namespaces change, so the data path never allocates.

use crate::scsi::{LogicalUnit, NaaId};
use crate::target::{NsInfo, PgCore};

/// Largest UNMAP range reported (VPD 0xB0 MAXIMUM UNMAP LBA COUNT) and WRITE SAME length.
const MAX_UNMAP_BLOCKS: u32 = 1 << 22;

/// How a transport's logical units are sized, from its options.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LuLimits {
    /// Largest transfer in bytes.
    pub max_io_size: u32,
    /// One data buffer of the transport in bytes: bounds the UNMAP parameter list (it is
    /// fetched into one buffer) and sizes [`crate::scsi_exec::ScsiAction::NeedBuffers`].
    pub io_unit_size: u32,
}

impl LuLimits {
    /// Data buffers needed to hold `bytes`.
    #[inline]
    pub fn units(&self, bytes: u64) -> usize {
        bytes.div_ceil(u64::from(self.io_unit_size.max(1))) as usize
    }
}

/// One logical unit: what the device server reports about it and the namespace it is.
#[derive(Clone, Debug)]
pub struct MappedLu {
    /// The SCSI description (INQUIRY, READ CAPACITY, limits).
    pub unit: LogicalUnit,
    /// The namespace behind it: the bdev, its facts, and (through its NSID) the poll group's
    /// admission counters and I/O channel that the NVMe exec layer uses for the same volume.
    pub ns: NsInfo,
}

/// The logical unit for a namespace, or `None` when its geometry cannot be one.
pub fn logical_unit(ns: &NsInfo, limits: LuLimits) -> Option<LogicalUnit> {
    let ident = ns.nguid;
    let mut lu = LogicalUnit::new(
        ns.block_size,
        ns.num_blocks,
        NaaId::local_from_uuid(&ident),
        ns.uuid.simple().to_string(),
    );
    lu.write_cache = ns.write_cache;
    lu.modes = ns.modes.load();
    // COMPARE AND WRITE fetches its verify and write data into one buffer.
    lu.max_compare_write_blocks = u8::from(limits.io_unit_size / ns.block_size.max(1) >= 2);
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

/// The logical units of one subsystem.
#[derive(Clone, Debug, Default)]
pub struct LuMap {
    /// Logical units by LUN (index = NSID − 1).
    lus: Vec<Option<MappedLu>>,
    /// The LUNs, ascending (REPORT LUNS).
    luns: Vec<u16>,
    /// Some logical unit is hidden from some hosts (`no_auto_visible`).
    masked: bool,
}

impl LuMap {
    /// Builds the view of subsystem `sub` from the poll group's namespaces.
    pub fn build(core: &PgCore, sub: u32, limits: LuLimits) -> LuMap {
        let mut map = LuMap::default();
        for ns in core.namespaces(sub) {
            let Some(lun) = ns.nsid.checked_sub(1) else {
                continue;
            };
            let Ok(lun16) = u16::try_from(lun) else {
                continue;
            };
            if lun16 > crate::scsi::lun::MAX_LUN {
                continue;
            }
            let i = lun as usize;
            if map.lus.len() <= i {
                map.lus.resize_with(i + 1, || None);
            }
            match logical_unit(ns, limits) {
                Some(unit) => {
                    map.masked |= ns.visible_hosts.is_some();
                    map.lus[i] = Some(MappedLu {
                        unit,
                        ns: ns.clone(),
                    });
                    map.luns.push(lun16);
                }
                None => tracing::warn!(
                    "namespace {} (bdev {}) cannot be a SCSI logical unit (block size {})",
                    ns.nsid,
                    ns.bdev_name,
                    ns.block_size
                ),
            }
        }
        map.luns.sort_unstable();
        map
    }

    /// The logical unit at `lun`.
    #[inline]
    pub fn get(&self, lun: u16) -> Option<&MappedLu> {
        self.lus.get(lun as usize).and_then(Option::as_ref)
    }

    /// Copies the LU's current mode parameters (MODE SELECT, shared by every nexus) into its
    /// description: one atomic load, per command.
    pub fn refresh_modes(&mut self, lun: u16) {
        if let Some(m) = self.lus.get_mut(lun as usize).and_then(Option::as_mut) {
            m.unit.modes = m.ns.modes.load();
        }
    }

    /// The logical unit at `lun`, its mode parameters refreshed first
    /// ([`LuMap::refresh_modes`]): one lookup for both.
    #[inline]
    pub fn get_refreshed(&mut self, lun: u16) -> Option<&MappedLu> {
        let m = self.lus.get_mut(lun as usize)?.as_mut()?;
        m.unit.modes = m.ns.modes.load();
        Some(m)
    }

    /// The logical unit's description at `lun`.
    pub fn lu(&self, lun: u16) -> Option<&LogicalUnit> {
        self.get(lun).map(|m| &m.unit)
    }

    /// The LUNs, ascending.
    pub fn luns(&self) -> &[u16] {
        &self.luns
    }

    /// Whether some logical unit is hidden from some hosts: REPORT LUNS then depends on the
    /// nexus.
    pub fn masked(&self) -> bool {
        self.masked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(nsid: u32, block_size: u32, unmap: bool) -> NsInfo {
        NsInfo {
            nsid,
            bdev_name: format!("b{nsid}"),
            block_size,
            num_blocks: 1000,
            uuid: uuid::Uuid::from_bytes([nsid as u8; 16]),
            nguid: [nsid as u8; 16],
            eui64: None,
            write_cache: true,
            unmap,
            write_zeroes: false,
            compare: true,
            writable: nsid != 3,
            visible_hosts: None,
            anagrpid: nsid,
            ptpl_capable: false,
            modes: crate::target::SharedModes(std::sync::Arc::new(crate::target::LuModes::new(
                crate::scsi::ModeParams::defaults(true),
            ))),
        }
    }

    const LIMITS: LuLimits = LuLimits {
        max_io_size: 128 * 1024,
        io_unit_size: 8192,
    };

    #[test]
    fn a_namespace_becomes_a_logical_unit_sized_by_the_transport() {
        let lu = logical_unit(&ns(1, 4096, true), LIMITS).unwrap();
        assert_eq!((lu.block_size, lu.num_blocks), (4096, 1000));
        assert_eq!(lu.max_transfer_blocks, 32, "128 KiB of 4 KiB blocks");
        assert!(lu.unmap && lu.unmap_reads_zero);
        assert_eq!(
            lu.max_unmap_descriptors, 256,
            "(8192 - 8) / 16 = 511, at most 256"
        );
        let small = LuLimits {
            io_unit_size: 1024,
            ..LIMITS
        };
        let lu = logical_unit(&ns(1, 4096, true), small).unwrap();
        assert_eq!(
            lu.max_unmap_descriptors,
            (1024 - 8) / 16,
            "the list fits one buffer"
        );
        assert_eq!(lu.max_unmap_blocks, MAX_UNMAP_BLOCKS);
        assert_eq!(
            lu.serial,
            uuid::Uuid::from_bytes([1; 16]).simple().to_string()
        );
        assert!(lu.write_cache && !lu.read_only);
        assert!(logical_unit(&ns(3, 512, false), LIMITS).unwrap().read_only);
        assert!(!logical_unit(&ns(2, 512, false), LIMITS).unwrap().unmap);
        assert!(
            logical_unit(&ns(1, 520, false), LIMITS).is_none(),
            "not a power of two"
        );
    }

    #[test]
    fn units_round_up() {
        assert_eq!(LIMITS.units(0), 0);
        assert_eq!(LIMITS.units(1), 1);
        assert_eq!(LIMITS.units(8192), 1);
        assert_eq!(LIMITS.units(8193), 2);
    }
}
