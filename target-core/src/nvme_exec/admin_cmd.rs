//! Admin commands of a connected admin queue (nvmet's `admin-cmd.c`): the views the
//! controller logic needs (namespaces, the subsystem, the discovery log), admission, Keep
//! Alive, and the side effects of the controller's answer (controller reset, AER abort).

use std::sync::Arc;

use super::FIRMWARE_REVISION;
use super::association::Association;
use super::discovery_log;
use super::queue::Queue;
use super::request::{AerDone, NvmeAction, NvmeCtx, NvmeReq, admit, complete, data_slice, release};
use crate::nvme::ana::{self, AnaIdentify};
use crate::nvme::spec::admin_opc;
use crate::nvme::{
    AdminOutcome, AnaView, Completion, NamespaceView, Sqe, Status, SubsystemKind, SubsystemView,
};
use crate::target::{Admission, AdmitKind, NsInfo, SubsystemType};

/// A namespace as the controller logic sees it.
pub fn namespace_view(n: &NsInfo) -> NamespaceView {
    NamespaceView {
        nsid: n.nsid,
        block_size: n.block_size,
        num_blocks: n.num_blocks,
        uuid: *n.uuid.as_bytes(),
        nguid: n.nguid,
        eui64: n.eui64.unwrap_or([0; 8]),
        volatile_write_cache: n.write_cache,
        supports_unmap: n.unmap,
        supports_write_zeroes: n.write_zeroes,
        read_only: !n.writable,
        ready: true,
        rescap: crate::nvme::resv::rescap(n.ptpl_capable),
    }
}

/// Runs an admin command on the admin queue of `ctrl`.
pub(super) fn execute(
    cx: &mut NvmeCtx<'_>,
    q: &mut Queue,
    req: &mut NvmeReq,
    ctrl: &Arc<Association>,
) -> NvmeAction {
    let Some(sub_id) = q.subsystem else {
        return complete(q, req, Status::INTERNAL_ERROR);
    };
    if is_keep_alive(&req.sqe) {
        return keep_alive(cx, q, req, ctrl);
    }
    match admit(cx, req, sub_id, AdmitKind::Mgmt) {
        Admission::Go => {}
        Admission::Queued => return NvmeAction::Queued,
        Admission::InvalidNamespace | Admission::Inactive => {
            return complete(q, req, Status::ABORTED_SQ_DELETION);
        }
    }
    let sub = Arc::clone(ctrl.subsystem());
    // Only the namespaces this controller's host sees are active for it (masking): the
    // others are absent from the active list and Identify answers zeroes for them.
    let host = ctrl.hostnqn();
    let namespaces: Vec<NamespaceView> = cx
        .core
        .namespaces(sub_id)
        .filter(|n| n.visible_to(host))
        .map(namespace_view)
        .collect();
    let (serial, model, max_namespaces, ana) = sub.with_config(|c| {
        let ana = c.ana.as_ref().and_then(|a| {
            let id = a.id_of(q.listen_addr())?;
            let visible = |n: u32| c.namespaces.get(&n).is_some_and(|ns| ns.visible_to(host));
            Some((
                AnaIdentify::new(&a.model.config(), c.ns_limit()),
                a.model.log_for(id, visible)?,
                a.generation(id),
            ))
        });
        (c.serial.clone(), c.model.clone(), c.ns_limit(), ana)
    });
    let disc = sub.kind() == SubsystemType::Discovery;
    let log = if disc {
        Some(discovery_log::build(cx.core.target(), ctrl.hostnqn(), q))
    } else {
        None
    };
    let entries = log.as_ref().map(|l| l.entries());
    let view = SubsystemView {
        kind: if disc {
            SubsystemKind::Discovery
        } else {
            SubsystemKind::Nvm
        },
        serial: &serial,
        model: &model,
        firmware: FIRMWARE_REVISION,
        max_namespaces,
        namespaces: &namespaces,
        discovery_log: match (&log, &entries) {
            (Some(l), Some(e)) => Some(crate::nvme::DiscoveryLog {
                genctr: l.genctr,
                entries: e,
            }),
            _ => None,
        },
        ana: ana.as_ref().map(|(identify, log, generation)| AnaView {
            identify: *identify,
            log,
            generation: *generation,
        }),
    };
    let sqe = req.sqe;
    let now = cx.now;
    // A namespace-scoped feature of a namespace this path cannot access gets the path's
    // status (as SPDK); every other admin command is processed.
    let path = view
        .ana
        .as_ref()
        .and_then(|a| a.namespace(sqe.nsid()))
        .map_or(Ok(()), |(_, state)| {
            ana::check_admin(sqe.opcode(), sqe.cdw10(), state)
        });
    let persistence = match path {
        Ok(()) if !disc => {
            super::resv_cmd::persistence_feature(cx.core, sub_id, &sqe, view.namespaces)
        }
        _ => None,
    };
    let out = match (persistence, path, data_slice(req)) {
        (Some(c), _, _) => AdminOutcome::Complete(c),
        (None, Err(s), _) | (None, Ok(()), Err(s)) => AdminOutcome::Complete(Completion::err(s)),
        (None, Ok(()), Ok(data)) => ctrl.with(|c| c.admin(&view, &sqe, data, now)),
    };
    release(cx.core, req);
    match out {
        AdminOutcome::Complete(c) => {
            if c.effect == crate::nvme::CcChange::Disabled {
                ctrl.disconnect_io_queues(cx.core.target().reactors());
            }
            req.cqe = c.cqe(&sqe, q.sqhd());
            req.data_len = if c.status.is_success() {
                (c.data_len as u32).min(req.sgl.len())
            } else {
                0
            };
            NvmeAction::Complete
        }
        AdminOutcome::Parked => NvmeAction::Parked,
        AdminOutcome::Abort { sqid, cid } => {
            let aborted = sqid == 0 && ctrl.with(|c| c.cancel_aer(cid));
            if aborted {
                let mut aer = sqe;
                aer.set_cid(cid);
                let _ = cx.aer_done.try_push(AerDone {
                    cid,
                    cqe: q.cqe(&aer, Status::ABORTED_BY_REQUEST),
                });
            }
            req.cqe = Completion::abort_result(aborted).cqe(&sqe, q.sqhd());
            req.data_len = 0;
            NvmeAction::Complete
        }
    }
}

/// Whether `sqe` is a Keep Alive.
fn is_keep_alive(sqe: &Sqe) -> bool {
    !sqe.is_fabrics() && sqe.opcode() == admin_opc::KEEP_ALIVE
}

/// Keep Alive reads nothing of the subsystem and only refreshes the controller's timer, so it
/// runs without admission: it is never queued behind a pause. The keep-alive timer runs while a
/// subsystem is paused, and a queued Keep Alive would let a pause longer than KATO end every
/// healthy association of the subsystem.
fn keep_alive(
    cx: &mut NvmeCtx<'_>,
    q: &mut Queue,
    req: &mut NvmeReq,
    ctrl: &Arc<Association>,
) -> NvmeAction {
    let view = SubsystemView::bare(match ctrl.subsystem().kind() {
        SubsystemType::Discovery => SubsystemKind::Discovery,
        SubsystemType::Nvme => SubsystemKind::Nvm,
    });
    let (sqe, now) = (req.sqe, cx.now);
    let c = match ctrl.with(|c| c.admin(&view, &sqe, &mut [], now)) {
        AdminOutcome::Complete(c) => c,
        // Keep Alive never parks nor aborts.
        _ => Completion::err(Status::INTERNAL_ERROR),
    };
    req.cqe = c.cqe(&sqe, q.sqhd());
    req.data_len = 0;
    NvmeAction::Complete
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_views_follow_the_bdev() {
        let n = NsInfo {
            nsid: 3,
            bdev_name: "m".into(),
            block_size: 4096,
            num_blocks: 10,
            uuid: uuid::Uuid::from_bytes([1; 16]),
            nguid: [2; 16],
            eui64: None,
            write_cache: true,
            unmap: true,
            write_zeroes: false,
            compare: true,
            writable: false,
            visible_hosts: None,
            anagrpid: 3,
            ptpl_capable: false,
            modes: crate::target::SharedModes(std::sync::Arc::new(crate::target::LuModes::new(
                crate::scsi::ModeParams::defaults(true),
            ))),
        };
        let v = namespace_view(&n);
        assert_eq!((v.nsid, v.block_size, v.num_blocks), (3, 4096, 10));
        assert_eq!(v.uuid, [1; 16]);
        assert_eq!(v.eui64, [0; 8]);
        assert!(v.volatile_write_cache && v.supports_unmap && !v.supports_write_zeroes);
        assert!(v.read_only && v.ready);
    }
}
