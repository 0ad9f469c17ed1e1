//! Fabrics commands on a queue that is not connected yet: Connect creates the association
//! (admin queue) or attaches an I/O queue to it (nvmet's `fabrics-cmd.c`). Disconnect on an
//! I/O queue is decoded with the I/O commands (`io_cmd_bdev`).

use std::sync::Arc;

use super::association::Association;
use super::queue::{Queue, QueueRole};
use super::request::{NvmeAction, NvmeCtx, NvmeReq, admit, complete, data_slice, release};
use crate::nvme::fabrics::check_admin_connect;
use crate::nvme::spec::fctype;
use crate::nvme::{ConnectReject, Controller, Status, SubsystemKind, parse_connect};
use crate::target::{Admission, AdmitKind, SubsystemType};

/// Runs a Connect (the only command an unconnected queue accepts).
pub(super) fn connect(cx: &mut NvmeCtx<'_>, q: &mut Queue, req: &mut NvmeReq) -> NvmeAction {
    let sqe = req.sqe;
    if !sqe.is_fabrics() || sqe.fctype() != fctype::CONNECT {
        return complete(q, req, Status::INVALID_OPCODE);
    }
    let mut c = match data_slice(req).map(|d| parse_connect(&sqe, d)) {
        Err(s) => return complete(q, req, s),
        Ok(Err(r)) => return reject(q, req, r),
        Ok(Ok(c)) => c,
    };
    if c.cmd.qid != q.qid {
        return reject(
            q,
            req,
            ConnectReject::invalid_sqe_field(crate::nvme::fabrics::connect_off::QID),
        );
    }
    let target = Arc::clone(cx.core.target());
    let Some(sub) = target.subsystem(c.data.subnqn.as_str()) else {
        tracing::warn!(subnqn = %c.data.subnqn, "Connect to an unknown subsystem");
        return reject(q, req, ConnectReject::unknown_subsystem());
    };
    let exported = sub.kind() == SubsystemType::Discovery
        || sub.with_config(|cfg| cfg.listeners.contains(&q.listen));
    if !exported {
        tracing::warn!(subnqn = %c.data.subnqn, listener = %q.listen,
                       "Connect to a subsystem not exported on this listener");
        return reject(q, req, ConnectReject::unknown_subsystem());
    }
    if !sub.access_allowed(c.data.hostnqn.as_str(), &q.listen) {
        tracing::warn!(subnqn = %c.data.subnqn, hostnqn = %c.data.hostnqn,
                       "Connect from a host that is not allowed");
        return reject(q, req, ConnectReject::invalid_host());
    }
    match admit(cx, req, sub.id(), AdmitKind::Mgmt) {
        Admission::Go => {}
        Admission::Queued => return NvmeAction::Queued,
        Admission::InvalidNamespace | Admission::Inactive => {
            return reject(q, req, ConnectReject::controller_busy());
        }
    }
    let limits = cx.transport.limits;
    let out = if c.is_admin() {
        if let Err(r) = check_admin_connect(&c, &limits) {
            release(cx.core, req);
            return reject(q, req, r);
        }
        if c.cmd.kato_ms != 0 && c.cmd.kato_ms < cx.transport.min_kato_ms {
            c.cmd.kato_ms = cx.transport.min_kato_ms;
        }
        let kind = match sub.kind() {
            SubsystemType::Discovery => SubsystemKind::Discovery,
            SubsystemType::Nvme => SubsystemKind::Nvm,
        };
        let now = cx.now;
        let me = q.me;
        let disconnect = cx.transport.disconnect;
        let tname = cx.transport.name;
        let mut made: Option<Arc<Association>> = None;
        let sub2 = Arc::clone(&sub);
        let cntlid = sub.add_controller(|cntlid| {
            let ctrl = Controller::new(cntlid, &c, kind, limits, now);
            let info = crate::target::ControllerInfo {
                cntlid,
                cntrltype: match kind {
                    SubsystemKind::Nvm => "io",
                    SubsystemKind::Discovery => "discovery",
                },
                hostnqn: c.data.hostnqn.as_str().to_string(),
                hostid: uuid::Uuid::from_bytes(c.data.hostid).to_string(),
                num_io_qpairs: 0,
                transport: tname,
            };
            let n = Arc::new(Association::new(ctrl, sub2, me, disconnect));
            made = Some(Arc::clone(&n));
            (info, n)
        });
        match (cntlid, made) {
            (Some(_), Some(ctrl)) => {
                let dw0 = ctrl.with(|c| c.connect_dw0());
                tracing::debug!(
                    cntlid = ctrl.cntlid(),
                    subnqn = sub.nqn(),
                    hostnqn = ctrl.hostnqn(),
                    "admin queue connected"
                );
                q.role = QueueRole::Admin(ctrl);
                Ok(c.success_cqe(&sqe, dw0))
            }
            _ => {
                tracing::warn!(subnqn = sub.nqn(), "no controller id left");
                Err(ConnectReject::controller_busy())
            }
        }
    } else {
        match sub.controller::<Association>(c.data.cntlid) {
            None => Err(ConnectReject::unknown_controller()),
            Some(ctrl) => match ctrl.attach_io_queue(&c, q.me) {
                Ok(dw0) => {
                    tracing::debug!(
                        cntlid = ctrl.cntlid(),
                        qid = c.cmd.qid,
                        "I/O queue connected"
                    );
                    q.role = QueueRole::Io(ctrl);
                    Ok(c.success_cqe(&sqe, dw0))
                }
                Err(r) => Err(r),
            },
        }
    };
    release(cx.core, req);
    match out {
        Ok(mut cqe) => {
            let kato_ms = q.association().map_or(0, |a| a.with(|c| c.kato_ms()));
            q.auth =
                super::auth_cmd::for_connect(cx, &sub, c.data.hostnqn.as_str(), c.cmd.qid, kato_ms);
            if q.auth.is_some() {
                cqe.dw0 |= crate::nvme::auth::CONNECT_AUTHREQ_ATR;
            }
            q.subsystem = Some(sub.id());
            q.sqsize = c.cmd.sqsize;
            q.sqhd = 1;
            q.sq_flow_control_disabled = c.cmd.sq_flow_control_disabled();
            cx.core.qpair_associate(sub.id(), c.is_admin());
            req.cqe = cqe;
            req.data_len = 0;
            NvmeAction::Complete
        }
        Err(r) => reject(q, req, r),
    }
}

fn reject(q: &Queue, req: &mut NvmeReq, r: ConnectReject) -> NvmeAction {
    tracing::debug!(status = %r.status, dw0 = r.dw0, "Connect refused");
    req.cqe = r.cqe(&req.sqe, q.qid, q.sqhd());
    req.data_len = 0;
    NvmeAction::Complete
}
