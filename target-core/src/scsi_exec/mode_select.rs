//! MODE SELECT(6/10) in the SCSI exec layer: the CDB is checked, the parameter list fetched,
//! then checked against the logical unit ([`crate::scsi::mode_select`]) and the new values
//! stored in the namespace's [`crate::target::LuModes`] — one per volume, so every nexus on
//! every poll group sees them with its next command (the LU's description is refreshed per
//! command, [`super::LuMap::refresh_modes`]).
//! A change raises MODE PARAMETERS CHANGED (2Ah/01h) on the LU for every other I_T nexus
//! (SPC-4 5.14: the parameters are shared by all of them).

use super::engine::{ScsiEngine, map_of};
use super::nexus::ItNexus;
use super::request::{Phase, ScsiAction, ScsiReq};
use crate::scsi::cdb::op;
use crate::scsi::mode_select::{decode_mode_select, mode_select};
use crate::scsi::ua::UnitAttention;
use crate::scsi::{ScsiStatus, Sense, Verdict};
use crate::target::PgCore;

/// Whether a CDB is MODE SELECT(6) or (10).
pub(super) fn is_mode_select(cdb: &[u8]) -> bool {
    matches!(cdb.first(), Some(&(op::MODE_SELECT_6 | op::MODE_SELECT_10)))
}

/// Checks the CDB: `Some(verdict)` ends the command (an error, or a zero-length list);
/// `None`: the parameter list is to be fetched (the request is set up for it).
pub(super) fn decode(req: &mut ScsiReq) -> Option<Verdict> {
    let cdb = req.cdb;
    match decode_mode_select(&cdb[..usize::from(req.cdb_len)], req.out_len) {
        Err(s) => Some(Verdict::CheckCondition(s)),
        Ok(None) => Some(Verdict::Good),
        Ok(Some(c)) => {
            req.mode_select = Some(c);
            req.wanted_out = u64::from(c.fetch_len);
            req.phase = Phase::DataOut;
            None
        }
    }
}

impl ScsiEngine {
    /// Runs a MODE SELECT whose parameter list has been fetched, and ends it.
    pub(super) fn run_mode_select(
        &mut self,
        core: &mut PgCore,
        nexus: &ItNexus,
        req: &mut ScsiReq,
    ) -> ScsiAction {
        let (Some(c), Some(lun)) = (req.mode_select.take(), req.lun) else {
            req.check(Sense::internal_target_failure());
            return Self::respond(core, req);
        };
        map_of(&mut self.maps, core, req.sub, self.limits);
        let Some(Some(map)) = self.maps.get_mut(req.sub as usize) else {
            req.check(Sense::lun_not_supported());
            return Self::respond(core, req);
        };
        map.refresh_modes(lun);
        let Some(mapped) = map.get(lun) else {
            req.check(Sense::lun_not_supported());
            return Self::respond(core, req);
        };
        let params = req.param.as_ref().map_or(&[][..], |p| {
            let s = p.as_slice();
            &s[..s.len().min(c.fetch_len as usize)]
        });
        match mode_select(&c, params, &mapped.unit) {
            Ok(new) => {
                if mapped.ns.modes.store(new) {
                    tracing::info!(
                        "MODE SELECT: LUN {lun} of subsystem {}: WCE {}, SWP {}",
                        req.sub,
                        u8::from(new.wce),
                        u8::from(new.swp)
                    );
                    if let Some(s) = core.subsystem(req.sub) {
                        s.scsi_unit_attention(
                            lun,
                            UnitAttention::ModeParametersChanged,
                            Some(nexus.identity()),
                        );
                    }
                }
                req.status = ScsiStatus::Good;
            }
            Err(s) => req.check(s),
        }
        Self::respond(core, req)
    }
}
