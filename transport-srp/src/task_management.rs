//! Task management: what an SRP_TSK_MGMT asks the runtime to do, and what to answer.
//!
//! The task set is shared by all initiators (control page TST = 0), so CLEAR TASK SET and
//! LOGICAL UNIT RESET reach every nexus's tasks on the LUN, while ABORT TASK SET stays within
//! the requesting I_T nexus. Aborted tasks send no SRP_RSP; their credits are returned
//! through [`crate::channel::Credits::finished_without_response`].

use crate::proto::{Tag, TaskMgmt, TmResponse};

/// Which tasks to abort.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AbortScope {
    /// The task with this tag, from the requesting nexus, on the LUN.
    Task(Tag),
    /// Every task of the requesting nexus on the LUN.
    NexusOnLun,
    /// Every task on the LUN, from every nexus.
    AllOnLun,
}

/// The plan for one task management request.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmPlan {
    /// Answer at once with this code; nothing to abort.
    Respond(TmResponse),
    /// Abort the tasks in scope (and reset the LU's state for a LUN reset), wait until they
    /// are gone, then answer [`TmResponse::Complete`].
    Abort {
        /// Tasks to abort.
        scope: AbortScope,
        /// LOGICAL UNIT RESET: also clear the LU's state (reservations, pending sense).
        reset_lun: bool,
    },
}

/// Plans a task management request for a LUN; `lun_exists` is false when the LUN does not
/// decode or no LU is mapped there (ib_srpt then answers FAILED).
pub fn plan(action: TaskMgmt, lun_exists: bool) -> TmPlan {
    if !action.is_supported() {
        return TmPlan::Respond(TmResponse::NotSupported);
    }
    if !lun_exists {
        return TmPlan::Respond(TmResponse::Failed);
    }
    match action {
        TaskMgmt::AbortTask { task_tag } => TmPlan::Abort {
            scope: AbortScope::Task(task_tag),
            reset_lun: false,
        },
        TaskMgmt::AbortTaskSet => TmPlan::Abort {
            scope: AbortScope::NexusOnLun,
            reset_lun: false,
        },
        TaskMgmt::ClearTaskSet => TmPlan::Abort {
            scope: AbortScope::AllOnLun,
            reset_lun: false,
        },
        TaskMgmt::LunReset => TmPlan::Abort {
            scope: AbortScope::AllOnLun,
            reset_lun: true,
        },
        TaskMgmt::ClearAca | TaskMgmt::Unsupported(_) => TmPlan::Respond(TmResponse::NotSupported),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans() {
        let t = Tag([1; 8]);
        assert_eq!(
            plan(TaskMgmt::AbortTask { task_tag: t }, true),
            TmPlan::Abort {
                scope: AbortScope::Task(t),
                reset_lun: false
            }
        );
        assert_eq!(
            plan(TaskMgmt::AbortTaskSet, true),
            TmPlan::Abort {
                scope: AbortScope::NexusOnLun,
                reset_lun: false
            }
        );
        assert_eq!(
            plan(TaskMgmt::ClearTaskSet, true),
            TmPlan::Abort {
                scope: AbortScope::AllOnLun,
                reset_lun: false
            }
        );
        assert_eq!(
            plan(TaskMgmt::LunReset, true),
            TmPlan::Abort {
                scope: AbortScope::AllOnLun,
                reset_lun: true
            }
        );
        assert_eq!(
            plan(TaskMgmt::ClearAca, true),
            TmPlan::Respond(TmResponse::NotSupported)
        );
        assert_eq!(
            plan(TaskMgmt::Unsupported(0x80), true),
            TmPlan::Respond(TmResponse::NotSupported)
        );
        assert_eq!(
            plan(TaskMgmt::LunReset, false),
            TmPlan::Respond(TmResponse::Failed)
        );
        assert_eq!(
            plan(TaskMgmt::ClearAca, false),
            TmPlan::Respond(TmResponse::NotSupported)
        );
    }
}
