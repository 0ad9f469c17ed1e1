//! The SCSI exec layer of one transport on one poll group: the LU maps of the subsystems it
//! serves, the device server's parameter-data workspace, and the driver that moves a request
//! through admission, the device server and data-in.

use super::caw;
use super::lu_map::{LuLimits, LuMap, MappedLu};
use super::mode_select;
use super::nexus::ItNexus;
use super::nexus_ua::NexusUnitAttentions;
use super::request::{Phase, ScsiAction, ScsiCommand, ScsiReq};
use super::reservation::{self, ResvStep};
use crate::ana::TpgEntry;
use crate::bdev::{BdevIo, BdevOp};
use crate::reservation::CommandClass;
use crate::scsi::alua::{self, AluaState};
use crate::scsi::ua::UaCheck;
use crate::scsi::{self, ScsiStatus, Sense, Verdict};
use crate::target::{Admission, AdmitKind, PgCore};

/// Bytes of the device server's parameter-data workspace: everything but a REPORT LUNS list of
/// more than 8 K LUNs fits.
const SCRATCH_LEN: usize = 64 << 10;

/// The LU map of `subsystem` in `maps`, built on first use.
pub(super) fn map_of<'m>(
    maps: &'m mut Vec<Option<LuMap>>,
    core: &PgCore,
    subsystem: u32,
    limits: LuLimits,
) -> &'m LuMap {
    let i = subsystem as usize;
    if maps.len() <= i {
        maps.resize_with(i + 1, || None);
    }
    maps[i].get_or_insert_with(|| LuMap::build(core, subsystem, limits))
}

/// Whether a CDB is READ or WRITE (10/16), which [`ScsiEngine::exec_rw`] runs.
fn is_fast_rw(cdb: &[u8]) -> bool {
    use scsi::cdb::op;
    matches!(
        cdb.first(),
        Some(&(op::READ_10 | op::READ_16 | op::WRITE_10 | op::WRITE_16))
    )
}

/// The ALUA state of the nexus's port for ANA group `group` of subsystem `sub`, from the poll
/// group's snapshot (no lock; the nexus keeps its path's index): `None` for a port outside
/// the target port groups or without ANA reporting (every LU active/optimized).
#[inline]
fn port_alua_state(core: &PgCore, sub: u32, nexus: &ItNexus, group: u32) -> Option<AluaState> {
    let (Some(_), Some(listener)) = (nexus.tpg_id, &nexus.listener) else {
        return None;
    };
    let mut cache = nexus.ana_cache.get();
    let state = core.ana_state(sub, listener, &mut cache, group);
    nexus.ana_cache.set(cache);
    state.map(AluaState::from_ana)
}

/// Whether a CDB is REPORT TARGET PORT GROUPS.
fn is_rtpg(cdb: &[u8]) -> bool {
    cdb.first() == Some(&scsi::cdb::op::MAINTENANCE_IN)
        && cdb
            .get(1)
            .is_some_and(|b| b & 0x1F == alua::SA_REPORT_TARGET_PORT_GROUPS)
}

/// Whether a host entry (of `nvmf_ns_add_host`) names the initiator of a nexus. The transport
/// knows how its initiators are spelled (SRP: several forms of the initiator port id).
pub type HostMatcher = fn(host: &str, nexus: &ItNexus) -> bool;

/// The matcher of an engine whose transport gave none: no entry names any initiator, so a
/// namespace added with `no_auto_visible` stays hidden from every nexus (never shown by
/// mistake).
fn no_host_matches(_host: &str, _nexus: &ItNexus) -> bool {
    false
}

/// Whether `nexus` sees the logical unit (masking): every nexus does unless its namespace was
/// added with `no_auto_visible`; then those a host entry names.
fn sees(matcher: HostMatcher, lu: &MappedLu, nexus: &ItNexus) -> bool {
    lu.ns
        .visible_hosts
        .as_ref()
        .is_none_or(|hosts| hosts.iter().any(|h| matcher(h, nexus)))
}

/// The SCSI exec layer of one transport on one poll group.
pub struct ScsiEngine {
    pub(super) transport: usize,
    pub(super) limits: LuLimits,
    pub(super) maps: Vec<Option<LuMap>>,
    host_matcher: HostMatcher,
    /// REPORT LUNS of a nexus that does not see every LU: reused, no allocation per command.
    visible_luns: Vec<u16>,
    /// REPORT TARGET PORT GROUPS of an LU: reused, no allocation per command.
    tpgs: Vec<TpgEntry>,
    scratch: Vec<u8>,
}

impl std::fmt::Debug for ScsiEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScsiEngine")
            .field("transport", &self.transport)
            .field("limits", &self.limits)
            .finish()
    }
}

impl ScsiEngine {
    /// The engine of the transport with index `transport` (admission tokens and bdev tags
    /// carry it), its logical units sized by `limits`.
    pub fn new(transport: usize, limits: LuLimits) -> Self {
        ScsiEngine {
            transport,
            limits,
            maps: Vec::new(),
            host_matcher: no_host_matches,
            visible_luns: Vec::with_capacity(usize::from(crate::scsi::lun::MAX_LUN) + 1),
            tpgs: Vec::with_capacity(crate::target::MAX_LISTENERS),
            scratch: vec![0; SCRATCH_LEN],
        }
    }

    /// How this transport's initiators are named in host entries, for namespace masking.
    pub fn with_host_matcher(mut self, matcher: HostMatcher) -> Self {
        self.host_matcher = matcher;
        self
    }

    /// The limits the logical units are sized by.
    pub fn limits(&self) -> LuLimits {
        self.limits
    }

    /// The namespaces of `subsystem` changed, or the subsystem is going away: its LU map is
    /// rebuilt when next needed.
    pub fn invalidate(&mut self, subsystem: u32) {
        if let Some(m) = self.maps.get_mut(subsystem as usize) {
            *m = None;
        }
    }

    /// The LU map of `subsystem`, built on first use.
    pub fn map(&mut self, core: &PgCore, subsystem: u32) -> &LuMap {
        map_of(&mut self.maps, core, subsystem, self.limits)
    }

    /// Whether a logical unit is mapped at `lun` of `subsystem`. Inlined: every command
    /// asks; the map is built only when it is not there yet.
    #[inline]
    pub fn lu_exists(&mut self, core: &PgCore, subsystem: u32, lun: u16) -> bool {
        match self.maps.get(subsystem as usize) {
            Some(Some(m)) => m.get(lun).is_some(),
            _ => self.map(core, subsystem).get(lun).is_some(),
        }
    }

    /// Whether a logical unit is mapped at `lun` of `subsystem` and `nexus` sees it: what task
    /// management asks (a LUN a nexus does not see is not there for it).
    pub fn lu_visible(&mut self, core: &PgCore, subsystem: u32, lun: u16, nexus: &ItNexus) -> bool {
        let matcher = self.host_matcher;
        self.map(core, subsystem)
            .get(lun)
            .is_some_and(|m| sees(matcher, m, nexus))
    }

    /// Starts `cmd` in `req` (which forgets its previous command): the next
    /// [`ScsiEngine::drive`] asks for admission.
    pub fn start(&mut self, core: &PgCore, req: &mut ScsiReq, cmd: &ScsiCommand<'_>) {
        req.reset();
        let has_lu = cmd
            .lun
            .is_some_and(|l| self.lu_exists(core, cmd.subsystem, l));
        // The usual CDB (SRP's 16 bytes) is copied as one fixed-size array.
        let n = match cmd.cdb.first_chunk::<16>() {
            Some(c) => {
                req.cdb = *c;
                16
            }
            None => {
                let n = cmd.cdb.len().min(req.cdb.len());
                req.cdb[..n].copy_from_slice(&cmd.cdb[..n]);
                n
            }
        };
        req.cdb_len = n as u8;
        req.token = cmd.token;
        req.sub = cmd.subsystem;
        req.lun = cmd.lun;
        req.in_len = cmd.data_in_len;
        req.out_len = cmd.data_out_len;
        req.admit_kind = match cmd.lun {
            Some(l) if has_lu => AdmitKind::Io(u32::from(l) + 1),
            _ => AdmitKind::Mgmt,
        };
        req.phase = Phase::Admit;
    }

    /// Moves a request on until the transport must act. `ua` holds the unit attention queues
    /// of the nexus the command came through (one per session, shared by its channels): a
    /// condition pending on the command's LU is reported before the device server runs, as
    /// SPC-4 orders.
    pub fn drive(
        &mut self,
        core: &mut PgCore,
        nexus: &ItNexus,
        ua: &NexusUnitAttentions,
        req: &mut ScsiReq,
    ) -> ScsiAction {
        match req.phase {
            Phase::Admit => self.admit(core, nexus, ua, req),
            Phase::Exec => self.exec(core, nexus, ua, req),
            Phase::DataOut => self.fetch(req),
            Phase::Submit if req.pr_out.is_some() => {
                reservation::run_pr_out(core, nexus, self.transport, req)
            }
            Phase::Submit if req.persist.is_some() => reservation::persisted(core, req),
            Phase::Submit if req.mode_select.is_some() => self.run_mode_select(core, nexus, req),
            Phase::Submit if req.caw.is_some() => self.run_caw(core, req),
            Phase::Submit => self.submit(core, req),
            Phase::Bdev => ScsiAction::Submitted,
            Phase::Done => ScsiAction::Respond,
        }
    }

    /// Gives back what a request holds in the poll group (its admission), for a request that
    /// ends without a response (aborted, or its session gone).
    /// Inlined: every command ends through it (twice: at its response and when the
    /// transport frees it), and it seldom has anything to give back.
    #[inline]
    pub fn abandon(core: &mut PgCore, req: &mut ScsiReq) {
        if req.caw_owner.is_some() {
            caw::cancel(core, req);
        }
        if let Some(k) = req.admitted.take() {
            core.release(req.sub, k);
        }
    }

    /// Ends the command with CHECK CONDITION and `sense`, no data-in, and gives back its
    /// admission: for what the transport finds wrong itself (a malformed IU, data descriptors
    /// it cannot use). The transport then responds.
    pub fn fail(core: &mut PgCore, req: &mut ScsiReq, sense: Sense) {
        req.fail(sense);
        Self::abandon(core, req);
    }

    /// Ends the command with TASK ABORTED and gives back its admission: a task of one I_T
    /// nexus that another nexus's task management (LOGICAL UNIT RESET, CLEAR TASK SET) or
    /// PREEMPT AND ABORT aborted is answered so (the control page's TAS = 1), never with its
    /// own outcome.
    pub fn task_aborted(core: &mut PgCore, req: &mut ScsiReq) {
        req.task_aborted();
        Self::abandon(core, req);
    }

    /// A bdev I/O of this request came back. The transport handles an aborted request itself
    /// (put the I/O back in `req.io`, [`ScsiEngine::abandon`]).
    pub fn io_done(&mut self, core: &mut PgCore, req: &mut ScsiReq, io: Box<BdevIo>) -> ScsiAction {
        self.completed(core, req, io)
    }

    /// Ends the command with `status` so far decided (GOOD or CHECK CONDITION), giving back
    /// the admission.
    pub(super) fn respond(core: &mut PgCore, req: &mut ScsiReq) -> ScsiAction {
        req.phase = Phase::Done;
        Self::abandon(core, req);
        ScsiAction::Respond
    }

    fn admit(
        &mut self,
        core: &mut PgCore,
        nexus: &ItNexus,
        ua: &NexusUnitAttentions,
        req: &mut ScsiReq,
    ) -> ScsiAction {
        match core.admit(req.sub, req.admit_kind, self.transport, req.token) {
            Admission::Go => req.admitted = Some(req.admit_kind),
            Admission::Queued => return ScsiAction::Queued,
            Admission::InvalidNamespace => {
                // The LU map is older than the poll group's: the namespace went away.
                req.no_lu = true;
                self.invalidate(req.sub);
            }
            Admission::Inactive => {
                req.fail(Sense::not_ready(0x00));
                return ScsiAction::Respond;
            }
        }
        req.phase = Phase::Exec;
        self.exec(core, nexus, ua, req)
    }

    /// Runs the device server.
    fn exec(
        &mut self,
        core: &mut PgCore,
        nexus: &ItNexus,
        ua: &NexusUnitAttentions,
        req: &mut ScsiReq,
    ) -> ScsiAction {
        if is_fast_rw(&req.cdb[..usize::from(req.cdb_len)])
            && !req.no_lu
            && req.delivering.is_none()
            && let Some(action) = self.exec_rw(core, nexus, ua, req)
        {
            return action;
        }
        if let Some(lun) = req.lun {
            map_of(&mut self.maps, core, req.sub, self.limits);
            if let Some(Some(m)) = self.maps.get_mut(req.sub as usize) {
                m.refresh_modes(lun);
            }
        }
        let map = map_of(&mut self.maps, core, req.sub, self.limits);
        let matcher = self.host_matcher;
        // A logical unit the nexus does not see is not there for it: LOGICAL UNIT NOT
        // SUPPORTED, and absent from its REPORT LUNS.
        let mapped = if req.no_lu {
            None
        } else {
            req.lun
                .and_then(|l| map.get(l))
                .filter(|m| sees(matcher, m, nexus))
        };
        let lu = mapped.map(|m| &m.unit);
        let luns = if map.masked() {
            self.visible_luns.clear();
            self.visible_luns.extend(
                map.luns()
                    .iter()
                    .copied()
                    .filter(|&l| map.get(l).is_some_and(|m| sees(matcher, m, nexus))),
            );
            &self.visible_luns[..]
        } else {
            map.luns()
        };
        let cdb = req.cdb;
        let cmd = scsi::Command {
            cdb: &cdb[..usize::from(req.cdb_len)],
            data_out_len: req.out_len,
        };
        // Implicit ALUA: the port's state for the LU's ANA group, from the poll group's
        // snapshot (no lock); the target port groups only for REPORT TARGET PORT GROUPS.
        let group = mapped.map(|m| m.ns.anagrpid);
        let mut alua_state = None;
        self.tpgs.clear();
        let mut anatt_secs = crate::ana::DEFAULT_ANATT_SECS;
        if let Some(group) = group {
            alua_state = port_alua_state(core, req.sub, nexus, group);
            if nexus.tpg_id.is_some()
                && nexus.listener.is_some()
                && is_rtpg(cmd.cdb)
                && let Some(t) = core.alua_tpgs(req.sub, group, &mut self.tpgs)
            {
                anatt_secs = t;
            }
        }
        let ctx = scsi::TargetContext {
            port: &nexus.port,
            luns,
            alua: nexus.tpg_id.map(|tpg_id| scsi::AluaContext {
                tpg_id,
                tpgs: &self.tpgs,
                anatt_secs,
            }),
        };
        // The namespace of the logical unit, for its reservation.
        let lun = lu.and(req.lun);
        let nsid = lun.map(|l| u32::from(l) + 1);
        if let (Some(nsid), Some(lun)) = (nsid, lun) {
            reservation::take_notices(core, req.sub, nsid, lun, nexus, ua);
        }
        // A device server run again (it waited for buffers) delivers what it took before.
        let check = match req.delivering.take() {
            Some(sense) => UaCheck::Deliver(sense),
            None => ua.check(lun, cmd.cdb),
        };
        let verdict = match check {
            UaCheck::Proceed => match alua_state.map(|st| alua::check(st, cmd.cdb)) {
                // A port that is not active for the LU: NOT READY with the state's ASCQ.
                Some(Err(sense)) => Verdict::CheckCondition(sense),
                _ => match nsid.map(|n| reservation::check(core, n, nexus, req, &mut self.scratch))
                {
                    None | Some(ResvStep::Proceed) => match lu {
                        Some(l) if caw::is_caw(cmd.cdb) => match caw::decode(req, l) {
                            Some(v) => v,
                            None => return self.fetch(req),
                        },
                        Some(_) if mode_select::is_mode_select(cmd.cdb) => {
                            match mode_select::decode(req) {
                                Some(v) => v,
                                None => return self.fetch(req),
                            }
                        }
                        _ => scsi::execute(lu, &ctx, &cmd, &mut self.scratch),
                    },
                    Some(ResvStep::Verdict(v)) => v,
                    Some(ResvStep::Conflict) => {
                        req.status = ScsiStatus::ReservationConflict;
                        return Self::respond(core, req);
                    }
                    Some(ResvStep::FetchParams) => {
                        req.phase = Phase::DataOut;
                        return self.fetch(req);
                    }
                },
            },
            UaCheck::Report(sense) => Verdict::CheckCondition(sense),
            UaCheck::Deliver(sense) => {
                req.delivering = Some(sense);
                scsi::request_sense_delivering(cmd.cdb, sense, &mut self.scratch)
            }
        };
        let bs = lu.map_or(512, |l| l.block_size);
        self.conclude(core, req, verdict, bs)
    }

    /// READ/WRITE(10/16) to a logical unit the nexus sees, while nothing is pending for the
    /// nexus on it: the checks of the generic path in its order (reservation notices, unit
    /// attentions, the port's ALUA state, reservation conflicts, the CDB's fields, transfer
    /// length and LBA range), without building the device server's context or going through
    /// its dispatch. `None` when the generic path must decide (a unit attention may be
    /// pending, the port is not active for the LU, a reservation refuses the command, the
    /// nexus does not see the LU): everything done here before that is idempotent, so the
    /// generic path then runs the command from the start.
    fn exec_rw(
        &mut self,
        core: &mut PgCore,
        nexus: &ItNexus,
        ua: &NexusUnitAttentions,
        req: &mut ScsiReq,
    ) -> Option<ScsiAction> {
        let lun = req.lun?;
        let sub = req.sub;
        // One lookup of the LU: its mode parameters refreshed through the same reference.
        let m = self
            .maps
            .get_mut(sub as usize)?
            .as_mut()?
            .get_refreshed(lun)?;
        if !sees(self.host_matcher, m, nexus) {
            return None;
        }
        let nsid = u32::from(lun) + 1;
        reservation::take_notices(core, sub, nsid, lun, nexus, ua);
        let cdb = req.cdb;
        let cdb = &cdb[..usize::from(req.cdb_len)];
        if ua.may_be_pending(lun) {
            return None;
        }
        if port_alua_state(core, sub, nexus, m.ns.anagrpid)
            .is_some_and(|st| alua::check(st, cdb).is_err())
        {
            return None;
        }
        let class = if matches!(cdb[0], scsi::cdb::op::READ_10 | scsi::cdb::op::READ_16) {
            CommandClass::Read
        } else {
            CommandClass::Write
        };
        if !reservation::permits_class(core, sub, nsid, nexus, class) {
            return None;
        }
        let lu = &m.unit;
        let bs = lu.block_size;
        match scsi::read_write(lu, cdb, req.out_len) {
            // A read whose buffers are there (the transport took them as the command
            // arrived) goes to the bdev at once, without looking the LU up again.
            Verdict::Io(op @ scsi::ScsiIo::Read { lba, blocks, .. })
                if req.io.as_ref().is_some_and(|io| {
                    io.bufs.len() >= self.limits.units(u64::from(blocks) * u64::from(bs))
                }) =>
            {
                req.op = Some(op);
                req.wanted_in = op.data_in_len(bs);
                req.wanted_out = 0;
                req.phase = Phase::Submit;
                let read = BdevOp::Read {
                    offset_blocks: lba,
                    num_blocks: u64::from(blocks),
                };
                Some(self.submit_op(core, req, lun, read))
            }
            verdict => Some(self.conclude(core, req, verdict, bs)),
        }
    }

    /// Ends the device server's run with its verdict: the response, data-in from the
    /// workspace, or the bdev operation (`bs`: the LU's block size).
    fn conclude(
        &mut self,
        core: &mut PgCore,
        req: &mut ScsiReq,
        verdict: Verdict,
        bs: u32,
    ) -> ScsiAction {
        match verdict {
            Verdict::Good => req.status = ScsiStatus::Good,
            Verdict::CheckCondition(s) => req.check(s),
            Verdict::DataIn { len } => {
                let n = len.min(req.in_len);
                req.wanted_in = u64::from(len);
                req.status = ScsiStatus::Good;
                if n > 0 {
                    let need = self.limits.units(u64::from(n));
                    let Some(io) = req.io.as_mut() else {
                        req.check(Sense::internal_target_failure());
                        return Self::respond(core, req);
                    };
                    if io.bufs.len() < need {
                        // The device server runs again once the buffers are there.
                        return ScsiAction::NeedBuffers(need);
                    }
                    let mut done = 0usize;
                    for b in io.bufs.iter_mut() {
                        let k = (n as usize - done).min(b.capacity());
                        b.reset();
                        b.as_mut_slice()[..k].copy_from_slice(&self.scratch[done..done + k]);
                        done += k;
                    }
                    req.data_in = n;
                }
            }
            Verdict::Io(op) => {
                req.op = Some(op);
                req.wanted_in = op.data_in_len(bs);
                req.wanted_out = op.data_out_len(bs);
                if req.wanted_out > 0 {
                    req.phase = Phase::DataOut;
                    return self.fetch(req);
                }
                req.phase = Phase::Submit;
                if let scsi::ScsiIo::Read { blocks, .. } = op {
                    // The data buffers first (a read's usual wait), before building the bdev
                    // operation.
                    let need = self.limits.units(u64::from(blocks) * u64::from(bs));
                    if req.io.as_ref().is_some_and(|io| io.bufs.len() < need) {
                        return ScsiAction::NeedBuffers(need);
                    }
                }
                return self.submit(core, req);
            }
        }
        Self::respond(core, req)
    }

    /// What data-out to move.
    pub(super) fn fetch(&self, req: &ScsiReq) -> ScsiAction {
        let write = matches!(req.op, Some(scsi::ScsiIo::Write { .. }));
        // Parameter data (UNMAP list, WRITE SAME pattern) goes to one buffer.
        let len = if write {
            req.wanted_out
        } else {
            req.wanted_out.min(u64::from(self.limits.io_unit_size))
        };
        ScsiAction::FetchDataOut { len, param: !write }
    }
}
