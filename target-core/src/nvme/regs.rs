//! The fabrics controller register file (CAP, VS, CC, CSTS) and the enable / disable / shutdown
//! handshakes driven by CC writes.

use super::fabrics::{PropertyCmd, PropertySize};
use super::spec::{Status, prop};
use super::view::{SubsystemKind, TransportLimits};

/// Version reported in VS and Identify VER: NVMe 1.3.0 (the host then uses the active
/// namespace list and the namespace identification descriptors).
pub const NVME_VERSION: u32 = 0x0001_0300;
/// CAP.TO in 500 ms units (7.5 s, as nvmet). Never 0.
pub const CAP_TIMEOUT: u64 = 15;

/// CC fields.
pub mod cc {
    /// Enable.
    pub const EN: u32 = 1 << 0;
    /// I/O command set selected (bits 6:4).
    pub const CSS_SHIFT: u32 = 4;
    /// Memory page size (bits 10:7).
    pub const MPS_SHIFT: u32 = 7;
    /// Arbitration mechanism (bits 13:11).
    pub const AMS_SHIFT: u32 = 11;
    /// Shutdown notification (bits 15:14).
    pub const SHN_SHIFT: u32 = 14;
    /// I/O SQ entry size (bits 19:16).
    pub const IOSQES_SHIFT: u32 = 16;
    /// I/O CQ entry size (bits 23:20).
    pub const IOCQES_SHIFT: u32 = 20;
}

/// CSTS fields.
pub mod csts {
    /// Ready.
    pub const RDY: u32 = 1 << 0;
    /// Controller fatal status.
    pub const CFS: u32 = 1 << 1;
    /// Shutdown status: shutdown processing complete (10b in bits 3:2).
    pub const SHST_COMPLETE: u32 = 2 << 2;
    /// Shutdown status mask.
    pub const SHST_MASK: u32 = 3 << 2;
}

/// What a CC write did, for the exec layer to act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CcChange {
    /// Nothing that needs action.
    None,
    /// EN 0→1 accepted: CSTS.RDY = 1.
    Enabled,
    /// EN 0→1 with unsupported fields: CSTS.CFS = 1, RDY stays 0.
    EnableFailed,
    /// EN 1→0 (controller reset): CSTS cleared. Tear down I/O queues, drop parked AERs.
    Disabled,
    /// SHN set: shutdown reported complete (SHST = 10b). Stop I/O on the association.
    Shutdown,
}

/// CAP, VS, CC and CSTS of one controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Registers {
    cap: u64,
    cc: u32,
    csts: u32,
    kind: SubsystemKind,
}

impl Registers {
    /// Registers for a new controller: CAP from the limits, CC and CSTS zero.
    pub fn new(limits: &TransportLimits, kind: SubsystemKind) -> Registers {
        // MQES (0's based) | CQR | TO | CSS bit 37 (NVM command set). MPSMIN = MPSMAX = 0 (4 KiB).
        let cap = u64::from(limits.mqes()) | 1 << 16 | CAP_TIMEOUT << 24 | 1 << 37;
        Registers {
            cap,
            cc: 0,
            csts: 0,
            kind,
        }
    }

    /// CAP.
    pub fn cap(&self) -> u64 {
        self.cap
    }
    /// VS.
    pub fn vs(&self) -> u32 {
        NVME_VERSION
    }
    /// CC.
    pub fn cc(&self) -> u32 {
        self.cc
    }
    /// CSTS.
    pub fn csts(&self) -> u32 {
        self.csts
    }
    /// CSTS.RDY.
    pub fn is_ready(&self) -> bool {
        self.csts & csts::RDY != 0
    }
    /// CSTS.SHST = complete.
    pub fn is_shut_down(&self) -> bool {
        self.csts & csts::SHST_MASK == csts::SHST_COMPLETE
    }
    /// CSTS.CFS.
    pub fn is_fatal(&self) -> bool {
        self.csts & csts::CFS != 0
    }
    /// Sets CSTS.CFS (keep-alive expiry, fatal transport errors).
    pub fn set_fatal(&mut self) {
        self.csts |= csts::CFS;
    }

    /// Property Get: CAP needs an 8-byte access, the others a 4-byte one; anything else,
    /// including the interrupt and admin-queue registers that have no meaning on fabrics, is
    /// Invalid Field.
    pub fn get(&self, p: &PropertyCmd) -> Result<u64, Status> {
        match (p.offset, p.size) {
            (prop::CAP, Some(PropertySize::Eight)) => Ok(self.cap),
            (prop::VS, Some(PropertySize::Four)) => Ok(u64::from(NVME_VERSION)),
            (prop::CC, Some(PropertySize::Four)) => Ok(u64::from(self.cc)),
            (prop::CSTS, Some(PropertySize::Four)) => Ok(u64::from(self.csts)),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Property Set: only CC (4 bytes) is writable.
    pub fn set(&mut self, p: &PropertyCmd) -> Result<CcChange, Status> {
        match (p.offset, p.size) {
            (prop::CC, Some(PropertySize::Four)) => Ok(self.write_cc(p.value as u32)),
            _ => Err(Status::INVALID_FIELD),
        }
    }

    /// Applies a CC write and returns what changed.
    pub fn write_cc(&mut self, new: u32) -> CcChange {
        let old = self.cc;
        self.cc = new;
        let en_old = old & cc::EN != 0;
        let en_new = new & cc::EN != 0;
        let shn_old = (old >> cc::SHN_SHIFT) & 3 != 0;
        let shn_new = (new >> cc::SHN_SHIFT) & 3 != 0;

        let mut change = CcChange::None;
        if en_new && !en_old {
            if self.cc_valid(new) {
                self.csts = (self.csts & !csts::CFS) | csts::RDY;
                change = CcChange::Enabled;
            } else {
                self.csts |= csts::CFS;
                change = CcChange::EnableFailed;
            }
        } else if !en_new && en_old {
            self.csts = 0;
            change = CcChange::Disabled;
        }
        if shn_new && !shn_old {
            // Nothing is cached here: shutdown processing completes at once. RDY stays as it is
            // (EN is normally still 1); only a reset clears it.
            self.csts = (self.csts & !csts::SHST_MASK) | csts::SHST_COMPLETE;
            if change == CcChange::None {
                change = CcChange::Shutdown;
            }
        } else if !shn_new && shn_old {
            self.csts &= !csts::SHST_MASK;
        }
        change
    }

    fn cc_valid(&self, v: u32) -> bool {
        let css = (v >> cc::CSS_SHIFT) & 7;
        let mps = (v >> cc::MPS_SHIFT) & 0xF;
        let ams = (v >> cc::AMS_SHIFT) & 7;
        let iosqes = (v >> cc::IOSQES_SHIFT) & 0xF;
        let iocqes = (v >> cc::IOCQES_SHIFT) & 0xF;
        let queues_ok = match self.kind {
            SubsystemKind::Nvm => iosqes == 6 && iocqes == 4,
            // A discovery controller has no I/O queues: accept the fields unset as well.
            SubsystemKind::Discovery => {
                (iosqes == 6 && iocqes == 4) || (iosqes == 0 && iocqes == 0)
            }
        };
        css == 0 && mps == 0 && ams == 0 && queues_ok
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::fabrics::build;
    use crate::nvme::sqe::Sqe;

    fn regs() -> Registers {
        Registers::new(&TransportLimits::default(), SubsystemKind::Nvm)
    }

    fn get(r: &Registers, s: Sqe) -> Result<u64, Status> {
        r.get(&PropertyCmd::from_sqe(&s))
    }

    #[test]
    fn cap_matches_recommended_value() {
        let r = regs();
        assert_eq!(r.cap(), 0x0000_0020_0F01_007F);
        assert_eq!(get(&r, build::property_get(0, 0, true)), Ok(r.cap()));
        // MPSMIN (bits 51:48) is 0, TO is non-zero, CSS NVM set, no CSI bit 43, no CRMS.
        assert_eq!((r.cap() >> 48) & 0xF, 0);
        assert_eq!((r.cap() >> 24) & 0xFF, 15);
        assert_eq!(r.cap() & (1 << 43 | 1 << 59 | 1 << 36), 0);
        let small = Registers::new(
            &TransportLimits {
                max_queue_depth: 16,
                ..TransportLimits::default()
            },
            SubsystemKind::Nvm,
        );
        assert_eq!(small.cap() & 0xFFFF, 15);
    }

    #[test]
    fn property_sizes_and_offsets() {
        let r = regs();
        assert_eq!(get(&r, build::property_get(0, 8, false)), Ok(0x0001_0300));
        assert_eq!(
            get(&r, build::property_get(0, 0, false)),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            get(&r, build::property_get(0, 8, true)),
            Err(Status::INVALID_FIELD)
        );
        for off in [0x04, 0x0C, 0x10, 0x20, 0x24, 0x28, 0x30, 0x68, 0xFFFF_FFFC] {
            assert_eq!(
                get(&r, build::property_get(0, off, false)),
                Err(Status::INVALID_FIELD),
                "{off:#x}"
            );
        }
        let mut r = regs();
        for off in [0x00, 0x08, 0x1C, 0x20] {
            let s = build::property_set(0, off, 1);
            assert_eq!(
                r.set(&PropertyCmd::from_sqe(&s)),
                Err(Status::INVALID_FIELD)
            );
        }
        let mut eight = build::property_set(0, 0x14, 1);
        eight.set_u8_at(40, 1);
        assert_eq!(
            r.set(&PropertyCmd::from_sqe(&eight)),
            Err(Status::INVALID_FIELD)
        );
    }

    #[test]
    fn linux_enable_disable_shutdown() {
        let mut r = regs();
        assert_eq!(r.write_cc(0x0046_0000), CcChange::None);
        assert_eq!(r.csts(), 0);
        assert_eq!(r.write_cc(0x0046_0001), CcChange::Enabled);
        assert_eq!(r.csts(), csts::RDY);
        assert_eq!(
            r.write_cc(0x0046_0001),
            CcChange::None,
            "rewrite is idempotent"
        );
        // Shutdown: EN stays 1, SHST complete, RDY kept.
        assert_eq!(r.write_cc(0x0046_4001), CcChange::Shutdown);
        assert_eq!(r.csts(), csts::RDY | csts::SHST_COMPLETE);
        assert!(r.is_shut_down());
        // SHN back to 0 clears SHST.
        assert_eq!(r.write_cc(0x0046_0001), CcChange::None);
        assert_eq!(r.csts(), csts::RDY);
        // Reset.
        assert_eq!(r.write_cc(0x0046_0000), CcChange::Disabled);
        assert_eq!(r.csts(), 0);
        // Re-enable works.
        assert_eq!(r.write_cc(0x0046_0001), CcChange::Enabled);
    }

    #[test]
    fn abrupt_shutdown_and_disable_together() {
        let mut r = regs();
        r.write_cc(0x0046_0001);
        assert_eq!(r.write_cc(0x0046_8000), CcChange::Disabled);
        assert_eq!(r.csts(), csts::SHST_COMPLETE);
    }

    #[test]
    fn bad_cc_sets_cfs() {
        for bad in [
            0x0045_0001u32, // IOSQES 5
            0x0036_0001,    // IOCQES 3
            0x0046_0081,    // MPS 1
            0x0046_0061,    // CSS 110b (no CSI support)
            0x0046_0801,    // AMS 1
            0x0000_0001,    // I/O controller without queue entry sizes
        ] {
            let mut r = regs();
            assert_eq!(r.write_cc(bad), CcChange::EnableFailed, "{bad:#x}");
            assert!(!r.is_ready());
            assert!(r.is_fatal());
            // A correct enable after disable clears CFS.
            r.write_cc(0);
            assert_eq!(r.write_cc(0x0046_0001), CcChange::Enabled);
            assert!(!r.is_fatal());
        }
        let mut d = Registers::new(&TransportLimits::default(), SubsystemKind::Discovery);
        assert_eq!(d.write_cc(0x0000_0001), CcChange::Enabled);
    }
}
