//! NVMe Asymmetric Namespace Access (NVMe base spec 2.0 §8.1): the Identify fields, the
//! path-related status per state and which commands it applies to, and the ANA change notice.
//! The log page itself is in [`super::ana_log`]. The states come from [`crate::ana`].
//!
//! | state | I/O commands to a namespace of the group | admin commands |
//! |---|---|---|
//! | optimized, non-optimized | processed | processed |
//! | inaccessible | Asymmetric Access Inaccessible (302h) | processed, except Get/Set Features of a namespace-scoped feature for that namespace (302h) |
//! | persistent loss | Asymmetric Access Persistent Loss (301h) | same, with 301h |
//! | change | Asymmetric Access Transition (303h) | same, with 303h |
//!
//! Identify, Get Log Page (the host reads the ANA log through an inaccessible path to learn
//! the states), Keep Alive, Asynchronous Event Request, Abort and the fabrics commands are
//! always processed. The statuses carry no DNR: the Linux host retries a path error on
//! another path (a DNR status would complete the I/O with an error instead). The check runs
//! after the namespace lookup (an unknown NSID is still Invalid Namespace) and before any
//! other per-command check, as nvmet and SPDK do.

use crate::ana::{AnaConfig, AnaState};

use super::identify::IdentifyData;
use super::resv::{FID_RESV_NOTIFICATION_MASK, FID_RESV_PERSISTENCE};
use super::spec::{Sct, Status, admin_opc, aen, fid, le};

/// Byte offsets of the ANA-related Identify fields.
pub mod off {
    /// Identify Controller CMIC.
    pub const CMIC: usize = 76;
    /// Identify Controller OAES (4 bytes).
    pub const OAES: usize = 92;
    /// Identify Controller ANATT.
    pub const ANATT: usize = 342;
    /// Identify Controller ANACAP.
    pub const ANACAP: usize = 343;
    /// Identify Controller ANAGRPMAX (4 bytes).
    pub const ANAGRPMAX: usize = 344;
    /// Identify Controller NANAGRPID (4 bytes).
    pub const NANAGRPID: usize = 348;
    /// Identify Controller MNAN (4 bytes).
    pub const MNAN: usize = 540;
    /// Identify Namespace NUSE (8 bytes).
    pub const NS_NUSE: usize = 16;
    /// Identify Namespace ANAGRPID (4 bytes).
    pub const NS_ANAGRPID: usize = 92;
    /// I/O command set independent Identify Namespace (CNS 08h) ANAGRPID (4 bytes).
    pub const CSI_NS_ANAGRPID: usize = 4;
}

/// CMIC bits.
pub mod cmic {
    /// The subsystem may have two or more ports.
    pub const MULTI_PORT: u8 = 1 << 0;
    /// The subsystem may have two or more controllers.
    pub const MULTI_CTRL: u8 = 1 << 1;
    /// The controller supports Asymmetric Namespace Access Reporting.
    pub const ANA: u8 = 1 << 3;
}

/// ANACAP bits.
pub mod anacap {
    /// Reports the optimized state.
    pub const OPTIMIZED: u8 = 1 << 0;
    /// Reports the non-optimized state.
    pub const NON_OPTIMIZED: u8 = 1 << 1;
    /// Reports the inaccessible state.
    pub const INACCESSIBLE: u8 = 1 << 2;
    /// Reports the persistent loss state.
    pub const PERSISTENT_LOSS: u8 = 1 << 3;
    /// Reports the change state.
    pub const CHANGE: u8 = 1 << 4;
    /// ANAGRPID does not change while the namespace is attached (not set by rtgt:
    /// `nvmf_subsystem_set_ns_ana_group` moves attached namespaces).
    pub const GRPID_STATIC: u8 = 1 << 6;
}

/// ANACAP rtgt reports: every state, ANAGRPID may change while attached.
pub const ANACAP: u8 = anacap::OPTIMIZED
    | anacap::NON_OPTIMIZED
    | anacap::INACCESSIBLE
    | anacap::PERSISTENT_LOSS
    | anacap::CHANGE;

/// The ANA log page identifier.
pub const LID_ANA: u8 = 0x0C;
/// LSP bit 0 of Get Log Page 0Ch: Return Groups Only.
pub const LSP_RGO: u8 = 1 << 0;
/// OAES / Asynchronous Event Configuration bit of the ANA change notice.
pub const OAES_ANA_CHANGE: u32 = 1 << 11;
/// Asynchronous event information of the ANA change notice.
pub const NOTICE_ANA_CHANGE: u8 = 0x03;
/// Completion DW0 of the ANA change notice: notice, ANA change, log page 0Ch.
pub const ANA_CHANGE_DW0: u32 =
    aen::TYPE_NOTICE as u32 | (NOTICE_ANA_CHANGE as u32) << 8 | (LID_ANA as u32) << 16;

/// Asymmetric Access Persistent Loss (path related, 301h).
pub const ANA_PERSISTENT_LOSS: Status = Status::new(Sct::Path, 0x01);
/// Asymmetric Access Inaccessible (path related, 302h).
pub const ANA_INACCESSIBLE: Status = Status::new(Sct::Path, 0x02);
/// Asymmetric Access Transition (path related, 303h).
pub const ANA_TRANSITION: Status = Status::new(Sct::Path, 0x03);

/// The Identify Controller values of a subsystem with ANA reporting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnaIdentify {
    /// ANATT, seconds.
    pub anatt: u8,
    /// ANAGRPMAX.
    pub anagrpmax: u32,
    /// NANAGRPID (the number of group ids the subsystem supports: ANAGRPMAX, as SPDK and
    /// nvmet). The Linux host sizes its ANA log buffer from it.
    pub nanagrpid: u32,
    /// MNAN: the Linux host refuses ANA unless 1 ≤ MNAN ≤ NN, and sizes its log buffer with it.
    pub mnan: u32,
}

impl AnaIdentify {
    /// The values for a subsystem with this configuration and NN (`max_namespaces`).
    pub fn new(cfg: &AnaConfig, nn: u32) -> AnaIdentify {
        AnaIdentify {
            anatt: cfg.anatt_secs,
            anagrpmax: cfg.anagrpmax,
            nanagrpid: cfg.anagrpmax,
            mnan: nn,
        }
    }

    /// The largest ANA log page the Linux host may ask for: header, NANAGRPID descriptors,
    /// MNAN NSIDs. The host disables ANA when this exceeds the controller's MDTS, so the
    /// configuration must keep it within the transport's maximum transfer size.
    pub fn max_log_size(&self) -> u64 {
        super::ana_log::HEADER_LEN as u64
            + u64::from(self.nanagrpid) * super::ana_log::DESCRIPTOR_LEN as u64
            + u64::from(self.mnan) * 4
    }
}

/// Adds ANA reporting to Identify Controller data built by `identify::controller`: CMIC
/// multi-port, multi-controller and ANA; OAES ANA change notices; ANATT, ANACAP, ANAGRPMAX,
/// NANAGRPID, MNAN.
pub fn identify_controller(b: &mut IdentifyData, id: &AnaIdentify) {
    b[off::CMIC] |= cmic::MULTI_PORT | cmic::MULTI_CTRL | cmic::ANA;
    let oaes = le::u32_at(b, off::OAES) | OAES_ANA_CHANGE;
    le::put_u32(b, off::OAES, oaes);
    b[off::ANATT] = id.anatt;
    b[off::ANACAP] = ANACAP;
    le::put_u32(b, off::ANAGRPMAX, id.anagrpmax);
    le::put_u32(b, off::NANAGRPID, id.nanagrpid);
    le::put_u32(b, off::MNAN, id.mnan);
}

/// Adds ANA to Identify Namespace data built by `identify::namespace`: ANAGRPID, and NUSE 0
/// while the namespace is inaccessible or lost through this controller (as nvmet).
pub fn identify_namespace(b: &mut IdentifyData, anagrpid: u32, state: AnaState) {
    le::put_u32(b, off::NS_ANAGRPID, anagrpid);
    if matches!(state, AnaState::Inaccessible | AnaState::PersistentLoss) {
        le::put_u64(b, off::NS_NUSE, 0);
    }
}

/// Adds ANAGRPID to I/O command set independent Identify Namespace data (CNS 08h).
pub fn identify_cs_independent_namespace(b: &mut IdentifyData, anagrpid: u32) {
    le::put_u32(b, off::CSI_NS_ANAGRPID, anagrpid);
}

/// The path-related status for a state in which the namespace cannot be accessed; `None` for
/// optimized and non-optimized.
pub const fn path_status(state: AnaState) -> Option<Status> {
    match state {
        AnaState::Optimized | AnaState::NonOptimized => None,
        AnaState::Inaccessible => Some(ANA_INACCESSIBLE),
        AnaState::PersistentLoss => Some(ANA_PERSISTENT_LOSS),
        AnaState::Change => Some(ANA_TRANSITION),
    }
}

/// Admission of an I/O command to a namespace whose group is in `state` on this path.
pub const fn check_io(state: AnaState) -> Result<(), Status> {
    match path_status(state) {
        None => Ok(()),
        Some(s) => Err(s),
    }
}

/// Admission of an admin command whose NSID names one namespace, whose group is in `state` on
/// this path. Only Get/Set Features of a namespace-scoped feature (Error Recovery, Reservation
/// Notification Mask, Reservation Persistence) is refused; everything else is processed.
pub fn check_admin(opc: u8, cdw10: u32, state: AnaState) -> Result<(), Status> {
    let Some(status) = path_status(state) else {
        return Ok(());
    };
    match opc {
        admin_opc::GET_FEATURES | admin_opc::SET_FEATURES => match cdw10 as u8 {
            fid::ERROR_RECOVERY | FID_RESV_NOTIFICATION_MASK | FID_RESV_PERSISTENCE => Err(status),
            _ => Ok(()),
        },
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ana::ALL_STATES;
    use crate::nvme::spec::IDENTIFY_DATA_SIZE;

    fn ident() -> AnaIdentify {
        AnaIdentify::new(&AnaConfig::new(32), 32)
    }

    #[test]
    fn identify_controller_fields_at_the_spec_offsets() {
        let mut b = [0u8; IDENTIFY_DATA_SIZE];
        // What identify::controller leaves for an I/O controller.
        b[76] = 0x02;
        le::put_u32(&mut b, 92, aen::CFG_NS_ATTR);
        identify_controller(&mut b, &ident());
        assert_eq!(b[76], 0x0B, "CMIC: multi-port, multi-controller, ANA");
        assert_eq!(
            le::u32_at(&b, 92),
            0x0000_0900,
            "OAES: NS attribute + ANA change"
        );
        assert_eq!(b[342], 10, "ANATT");
        assert_eq!(b[343], 0x1F, "ANACAP: all five states, ANAGRPID may change");
        assert_eq!(&b[344..348], &[32, 0, 0, 0], "ANAGRPMAX");
        assert_eq!(&b[348..352], &[32, 0, 0, 0], "NANAGRPID");
        assert_eq!(&b[540..544], &[32, 0, 0, 0], "MNAN");
        // Nothing else was touched.
        let touched = [76, 92, 93, 94, 95, 342, 343];
        for (i, &v) in b.iter().enumerate() {
            if !touched.contains(&i) && !(344..352).contains(&i) && !(540..544).contains(&i) {
                assert_eq!(v, 0, "byte {i}");
            }
        }
    }

    #[test]
    fn anacap_bits() {
        assert_eq!(ANACAP, 0x1F);
        assert_eq!(ANACAP & anacap::GRPID_STATIC, 0);
    }

    #[test]
    fn log_size_as_the_linux_host_computes_it() {
        // 16 + 32 * 32 + 32 * 4.
        assert_eq!(ident().max_log_size(), 1168);
        let big = AnaIdentify::new(&AnaConfig::new(1024), 1024);
        assert_eq!(big.max_log_size(), 16 + 1024 * 32 + 1024 * 4);
    }

    #[test]
    fn identify_namespace_anagrpid_and_nuse() {
        for s in ALL_STATES {
            let mut b = [0u8; IDENTIFY_DATA_SIZE];
            le::put_u64(&mut b, 16, 1000);
            identify_namespace(&mut b, 0x0102_0304, s);
            assert_eq!(&b[92..96], &[4, 3, 2, 1]);
            let nuse = le::u64_at(&b, 16);
            match s {
                AnaState::Inaccessible | AnaState::PersistentLoss => assert_eq!(nuse, 0, "{s}"),
                _ => assert_eq!(nuse, 1000, "{s}"),
            }
        }
        let mut b = [0u8; IDENTIFY_DATA_SIZE];
        identify_cs_independent_namespace(&mut b, 7);
        assert_eq!(&b[4..8], &[7, 0, 0, 0]);
    }

    #[test]
    fn path_status_per_state() {
        assert_eq!(check_io(AnaState::Optimized), Ok(()));
        assert_eq!(check_io(AnaState::NonOptimized), Ok(()));
        assert_eq!(check_io(AnaState::Inaccessible), Err(ANA_INACCESSIBLE));
        assert_eq!(check_io(AnaState::PersistentLoss), Err(ANA_PERSISTENT_LOSS));
        assert_eq!(check_io(AnaState::Change), Err(ANA_TRANSITION));
        // The forms the Linux host prints; no DNR so that it fails over.
        assert_eq!(ANA_PERSISTENT_LOSS.linux(), 0x0301);
        assert_eq!(ANA_INACCESSIBLE.linux(), 0x0302);
        assert_eq!(ANA_TRANSITION.linux(), 0x0303);
        for s in [ANA_PERSISTENT_LOSS, ANA_INACCESSIBLE, ANA_TRANSITION] {
            assert!(!s.is_dnr());
            assert_eq!(s.sct(), 3);
            assert_eq!(s.to_cqe_field() >> 1 & 0x7FF, s.linux());
        }
    }

    #[test]
    fn admin_commands_pass_except_namespace_features() {
        for s in [
            AnaState::Inaccessible,
            AnaState::PersistentLoss,
            AnaState::Change,
        ] {
            let st = path_status(s).unwrap();
            for opc in [
                admin_opc::IDENTIFY,
                admin_opc::GET_LOG_PAGE,
                admin_opc::KEEP_ALIVE,
                admin_opc::ASYNC_EVENT_REQUEST,
                admin_opc::ABORT,
            ] {
                assert_eq!(check_admin(opc, 0x05, s), Ok(()), "opc {opc:#x} in {s}");
            }
            for f in [
                fid::ERROR_RECOVERY,
                FID_RESV_NOTIFICATION_MASK,
                FID_RESV_PERSISTENCE,
            ] {
                assert_eq!(
                    check_admin(admin_opc::GET_FEATURES, u32::from(f), s),
                    Err(st)
                );
                assert_eq!(
                    check_admin(admin_opc::SET_FEATURES, u32::from(f) | 1 << 31, s),
                    Err(st)
                );
            }
            for f in [
                fid::NUMBER_OF_QUEUES,
                fid::ASYNC_EVENT_CONFIG,
                fid::KEEP_ALIVE_TIMER,
            ] {
                assert_eq!(
                    check_admin(admin_opc::GET_FEATURES, u32::from(f), s),
                    Ok(())
                );
            }
        }
        assert_eq!(
            check_admin(admin_opc::GET_FEATURES, 0x05, AnaState::NonOptimized),
            Ok(())
        );
    }

    #[test]
    fn ana_change_notice_dw0() {
        // Reference: ANA change AEN DW0 000C0302h.
        assert_eq!(ANA_CHANGE_DW0, 0x000C_0302);
        assert_eq!(OAES_ANA_CHANGE, 0x800);
    }
}
