//! Set Features / Get Features (admin opcodes 0x09 / 0x0A).
//!
//! I/O controllers: Number of Queues, Async Event Configuration, Keep Alive Timer, Volatile Write
//! Cache, Temperature Threshold, Host Identifier (get only), and the mandatory features whose
//! values are fixed (get only; Set is Feature Not Changeable): Arbitration, Power Management,
//! Error Recovery, Write Atomicity Normal. Discovery controllers: Keep Alive Timer and Async
//! Event Configuration (discovery log change only). Nothing is saveable.
//!
//! nvmet answers the four fixed ones with Invalid Field on fabrics (its Arbitration is for the
//! PCI target only); SPDK stores whatever the host sets. Here they report what the controller
//! does, and cannot be changed.

use std::time::Instant;

use super::controller::{Completion, Controller};
use super::resv::{self, NotifyMask};
use super::spec::{NSID_ALL, Status, aen, fid};
use super::sqe::Sqe;
use super::view::{SubsystemKind, SubsystemView, TransportLimits};

/// Default over-temperature threshold in Kelvin (= Identify WCTEMP).
const DEFAULT_TEMP_OVER: u16 = 0x0157;

/// The value of a feature that never changes, or `None`.
///
/// - Arbitration: burst 111b (no limit: every received command is started), weights 0 (CAP.AMS
///   is round robin only, where weights do not apply).
/// - Power Management: power state 0, the only one (NPSS 0); no workload hint.
/// - Error Recovery: no time limit on error recovery (errors are never retried), deallocated
///   blocks read without error (DULBE 0).
/// - Write Atomicity Normal: DN 0, atomicity as AWUN/NAWUN report (one block).
fn fixed_value(f: u8) -> Option<u32> {
    match f {
        fid::ARBITRATION => Some(0b111),
        fid::POWER_MANAGEMENT | fid::ERROR_RECOVERY | fid::WRITE_ATOMICITY_NORMAL => Some(0),
        _ => None,
    }
}

/// Get Features SEL values.
mod sel {
    pub const CURRENT: u32 = 0;
    pub const DEFAULT: u32 = 1;
    pub const SAVED: u32 = 2;
    pub const SUPPORTED: u32 = 3;
}

/// Feature values of one controller.
#[derive(Clone, Debug)]
pub(crate) struct Features {
    /// Granted (NSQA, NCQA), 0's based, fixed after the first Set.
    num_queues: Option<(u16, u16)>,
    temp_over: u16,
    temp_under: u16,
}

impl Default for Features {
    fn default() -> Self {
        Features {
            num_queues: None,
            temp_over: DEFAULT_TEMP_OVER,
            temp_under: 0,
        }
    }
}

impl Features {
    /// I/O queues the host may connect.
    pub fn granted_io_queues(&self, limits: &TransportLimits) -> u16 {
        match self.num_queues {
            Some((sq, cq)) => sq.min(cq).saturating_add(1),
            None => limits.max_io_queues,
        }
    }

    fn num_queues_dw0(&self, limits: &TransportLimits) -> u32 {
        let (sq, cq) = self.num_queues.unwrap_or_else(|| {
            let m = limits.max_io_queues.max(1) - 1;
            (m, m)
        });
        u32::from(sq) | u32::from(cq) << 16
    }
}

/// The async event configuration bits a controller accepts: SMART critical warnings (bits 7:0)
/// and the notices it advertises in OAES.
fn aen_supported(kind: SubsystemKind, view: &SubsystemView<'_>) -> u32 {
    match kind {
        SubsystemKind::Nvm if view.ana.is_some() => {
            0xFF | aen::CFG_NS_ATTR | super::ana::OAES_ANA_CHANGE
        }
        SubsystemKind::Nvm => 0xFF | aen::CFG_NS_ATTR,
        SubsystemKind::Discovery => aen::CFG_DISCOVERY_CHANGE,
    }
}

fn vwc_present(view: &SubsystemView<'_>) -> bool {
    view.namespaces.iter().any(|n| n.volatile_write_cache)
}

/// Set Features.
pub(super) fn set(
    ctrl: &mut Controller,
    view: &SubsystemView<'_>,
    sqe: &Sqe,
    now: Instant,
) -> Result<Completion, Status> {
    let cdw10 = sqe.cdw10();
    let cdw11 = sqe.cdw11();
    let f = cdw10 as u8;
    if cdw10 & 1 << 31 != 0 {
        return Err(Status::FEATURE_NOT_SAVEABLE);
    }
    let disc = ctrl.kind == SubsystemKind::Discovery;
    match f {
        fid::KEEP_ALIVE_TIMER => {
            ctrl.set_kato(cdw11, now);
            Ok(Completion::ok(0))
        }
        fid::ASYNC_EVENT_CONFIG => {
            if cdw11 & !aen_supported(ctrl.kind, view) != 0 {
                return Err(Status::INVALID_FIELD);
            }
            ctrl.aer.set_enabled(cdw11);
            Ok(Completion::ok(cdw11))
        }
        _ if disc => Err(Status::INVALID_FIELD),
        fid::NUMBER_OF_QUEUES => {
            let (nsqr, ncqr) = (cdw11 as u16, (cdw11 >> 16) as u16);
            if nsqr == 0xFFFF || ncqr == 0xFFFF {
                return Err(Status::INVALID_FIELD);
            }
            let limits = ctrl.limits;
            // The allocation never changes once made: later requests get the same answer.
            if ctrl.features.num_queues.is_none() {
                let max = limits.max_io_queues.max(1) - 1;
                ctrl.features.num_queues = Some((nsqr.min(max), ncqr.min(max)));
            }
            Ok(Completion::ok(ctrl.features.num_queues_dw0(&limits)))
        }
        fid::VOLATILE_WRITE_CACHE => {
            // The cache belongs to the backends; only the current setting can be "set".
            if (cdw11 & 1 != 0) == vwc_present(view) {
                Ok(Completion::ok(0))
            } else {
                Err(Status::INVALID_FIELD)
            }
        }
        fid::TEMPERATURE_THRESHOLD => {
            let th = cdw11 as u16;
            match temp_select(cdw11)? {
                Threshold::Over => ctrl.features.temp_over = th,
                Threshold::Under => ctrl.features.temp_under = th,
            }
            Ok(Completion::ok(0))
        }
        fid::HOST_IDENTIFIER => Err(Status::COMMAND_SEQUENCE_ERROR),
        resv::FID_RESV_NOTIFICATION_MASK => {
            let mask = NotifyMask::from_cdw11(cdw11)?;
            match sqe.nsid() {
                NSID_ALL => {
                    ctrl.resv_mask_all = mask;
                    ctrl.resv_masks.clear();
                }
                n if view.namespaces.iter().any(|v| v.nsid == n) => {
                    ctrl.resv_masks.retain(|(m, _)| *m != n);
                    ctrl.resv_masks.push((n, mask));
                }
                _ => return Err(Status::INVALID_FIELD),
            }
            Ok(Completion::ok(0))
        }
        f if fixed_value(f).is_some() => Err(Status::FEATURE_NOT_CHANGEABLE),
        _ => Err(Status::INVALID_FIELD),
    }
}

enum Threshold {
    Over,
    Under,
}

/// TMPSEL (bits 19:16) must be 0 (composite temperature); THSEL (bits 21:20) 0 or 1.
fn temp_select(cdw11: u32) -> Result<Threshold, Status> {
    if (cdw11 >> 16) & 0xF != 0 {
        return Err(Status::INVALID_FIELD);
    }
    match (cdw11 >> 20) & 3 {
        0 => Ok(Threshold::Over),
        1 => Ok(Threshold::Under),
        _ => Err(Status::INVALID_FIELD),
    }
}

/// Get Features.
pub(super) fn get(
    ctrl: &Controller,
    view: &SubsystemView<'_>,
    sqe: &Sqe,
    data_out: &mut [u8],
) -> Result<Completion, Status> {
    let cdw10 = sqe.cdw10();
    let cdw11 = sqe.cdw11();
    let f = cdw10 as u8;
    let select = (cdw10 >> 8) & 7;
    let disc = ctrl.kind == SubsystemKind::Discovery;
    let supported = match f {
        fid::KEEP_ALIVE_TIMER | fid::ASYNC_EVENT_CONFIG => true,
        fid::NUMBER_OF_QUEUES
        | fid::VOLATILE_WRITE_CACHE
        | fid::TEMPERATURE_THRESHOLD
        | fid::HOST_IDENTIFIER
        | resv::FID_RESV_NOTIFICATION_MASK => !disc,
        f => fixed_value(f).is_some() && !disc,
    };
    if !supported {
        return Err(Status::INVALID_FIELD);
    }
    let current = match select {
        sel::CURRENT => true,
        sel::DEFAULT | sel::SAVED => false,
        sel::SUPPORTED => {
            // Capabilities: bit 0 saveable (never), bit 1 namespace specific (the
            // reservation notification mask only), bit 2 changeable.
            if f == resv::FID_RESV_NOTIFICATION_MASK {
                return Ok(Completion::ok(1 << 1 | 1 << 2));
            }
            let changeable = matches!(
                f,
                fid::KEEP_ALIVE_TIMER
                    | fid::ASYNC_EVENT_CONFIG
                    | fid::NUMBER_OF_QUEUES
                    | fid::TEMPERATURE_THRESHOLD
            );
            return Ok(Completion::ok(if changeable { 1 << 2 } else { 0 }));
        }
        _ => return Err(Status::INVALID_FIELD),
    };
    let dw0 = match f {
        fid::KEEP_ALIVE_TIMER => {
            if current {
                ctrl.kato_ms()
            } else {
                0
            }
        }
        fid::ASYNC_EVENT_CONFIG => {
            if current {
                ctrl.aer.enabled()
            } else {
                0
            }
        }
        fid::NUMBER_OF_QUEUES => {
            if current {
                ctrl.features.num_queues_dw0(&ctrl.limits)
            } else {
                Features::default().num_queues_dw0(&ctrl.limits)
            }
        }
        fid::VOLATILE_WRITE_CACHE => u32::from(vwc_present(view)),
        fid::TEMPERATURE_THRESHOLD => {
            let (over, under) = if current {
                (ctrl.features.temp_over, ctrl.features.temp_under)
            } else {
                (DEFAULT_TEMP_OVER, 0)
            };
            match temp_select(cdw11)? {
                Threshold::Over => u32::from(over),
                Threshold::Under => u32::from(under),
            }
        }
        fid::HOST_IDENTIFIER => {
            // Only the 128-bit identifier (EXHID) exists on fabrics.
            if cdw11 & 1 == 0 {
                return Err(Status::INVALID_FIELD);
            }
            let dst = data_out
                .get_mut(..16)
                .ok_or(Status::DATA_SGL_LENGTH_INVALID)?;
            dst.copy_from_slice(&ctrl.hostid);
            return Ok(Completion::data(16));
        }
        resv::FID_RESV_NOTIFICATION_MASK => match sqe.nsid() {
            _ if !current => 0,
            NSID_ALL => ctrl.resv_mask_all.dw0(),
            n if view.namespaces.iter().any(|v| v.nsid == n) => ctrl.resv_mask(n).dw0(),
            _ => return Err(Status::INVALID_FIELD),
        },
        f => fixed_value(f).ok_or(Status::INVALID_FIELD)?,
    };
    Ok(Completion::ok(dw0))
}
