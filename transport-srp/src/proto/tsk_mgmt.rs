//! SRP_TSK_MGMT (48 bytes): task management requests, their decoded action, and the response
//! codes carried in an SRP_RSP.

use super::{DecodeError, Tag, arr, expect_opcode, need, opcode};

/// Length of SRP_TSK_MGMT.
pub const TSK_MGMT_LEN: usize = 48;

/// Function codes (byte 30).
pub mod function {
    /// ABORT TASK.
    pub const ABORT_TASK: u8 = 0x01;
    /// ABORT TASK SET.
    pub const ABORT_TASK_SET: u8 = 0x02;
    /// CLEAR TASK SET.
    pub const CLEAR_TASK_SET: u8 = 0x04;
    /// LOGICAL UNIT RESET.
    pub const LUN_RESET: u8 = 0x08;
    /// CLEAR ACA.
    pub const CLEAR_ACA: u8 = 0x40;
}

/// What a task management request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskMgmt {
    /// Abort the task with this tag from this I_T nexus on the LUN (ib_srp sends it on the
    /// channel that carried the command).
    AbortTask {
        /// Tag of the task to abort.
        task_tag: Tag,
    },
    /// Abort every task from this I_T nexus on the LUN.
    AbortTaskSet,
    /// Abort every task on the LUN, from all initiators.
    ClearTaskSet,
    /// Abort every task on the LUN and reset it (ib_srp's `eh_device_reset`; success only if
    /// the response code is 0).
    LunReset,
    /// Clear an ACA condition. ACA is not supported: answer [`TmResponse::NotSupported`].
    ClearAca,
    /// A function code SRP does not define: answer [`TmResponse::NotSupported`].
    Unsupported(u8),
}

impl TaskMgmt {
    /// The action for a function code and the TAG OF TASK TO BE MANAGED field.
    pub fn from_function(function: u8, task_tag: Tag) -> Self {
        match function {
            function::ABORT_TASK => Self::AbortTask { task_tag },
            function::ABORT_TASK_SET => Self::AbortTaskSet,
            function::CLEAR_TASK_SET => Self::ClearTaskSet,
            function::LUN_RESET => Self::LunReset,
            function::CLEAR_ACA => Self::ClearAca,
            f => Self::Unsupported(f),
        }
    }

    /// The function code.
    pub fn function(&self) -> u8 {
        match self {
            Self::AbortTask { .. } => function::ABORT_TASK,
            Self::AbortTaskSet => function::ABORT_TASK_SET,
            Self::ClearTaskSet => function::CLEAR_TASK_SET,
            Self::LunReset => function::LUN_RESET,
            Self::ClearAca => function::CLEAR_ACA,
            Self::Unsupported(f) => *f,
        }
    }

    /// `true` for the functions this target carries out (everything but CLEAR ACA and unknown
    /// codes).
    pub fn is_supported(&self) -> bool {
        !matches!(self, Self::ClearAca | Self::Unsupported(_))
    }
}

/// RSP_CODE of a task management response (SRP_RSP response data byte 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TmResponse {
    /// 0x00: function complete. Also the answer to ABORT TASK for a task that no longer
    /// exists (SAM: the function completes; the command's own response already went out).
    Complete,
    /// 0x02: request fields invalid.
    InvalidFields,
    /// 0x04: function not supported (ib_srpt's mapping of "rejected").
    NotSupported,
    /// 0x05: function failed (e.g. the LUN does not exist).
    Failed,
}

impl TmResponse {
    /// The RSP_CODE byte.
    pub fn code(self) -> u8 {
        match self {
            Self::Complete => 0x00,
            Self::InvalidFields => 0x02,
            Self::NotSupported => 0x04,
            Self::Failed => 0x05,
        }
    }

    /// From the RSP_CODE byte (unknown values read as `Failed`).
    pub fn from_code(c: u8) -> Self {
        match c {
            0x00 => Self::Complete,
            0x02 => Self::InvalidFields,
            0x04 => Self::NotSupported,
            _ => Self::Failed,
        }
    }
}

/// A decoded SRP_TSK_MGMT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TskMgmt {
    /// SOL_NOT byte (bit 1 SCSOLNT, bit 2 UCSOLNT).
    pub sol_not: u8,
    /// Tag of this request (echoed in the SRP_RSP).
    pub tag: Tag,
    /// LUN (8-byte SAM form).
    pub lun: [u8; 8],
    /// The requested function.
    pub action: TaskMgmt,
}

impl TskMgmt {
    /// Decodes the wire form.
    pub fn decode(b: &[u8]) -> Result<Self, DecodeError> {
        need(b, TSK_MGMT_LEN)?;
        expect_opcode(b, opcode::TSK_MGMT)?;
        Ok(TskMgmt {
            sol_not: b[1],
            tag: Tag(arr(b, 8)),
            lun: arr(b, 20),
            action: TaskMgmt::from_function(b[30], Tag(arr(b, 32))),
        })
    }

    /// The wire form (test initiators).
    pub fn encode(&self) -> [u8; TSK_MGMT_LEN] {
        let mut b = [0u8; TSK_MGMT_LEN];
        b[0] = opcode::TSK_MGMT;
        b[1] = self.sol_not;
        b[8..16].copy_from_slice(&self.tag.0);
        b[20..28].copy_from_slice(&self.lun);
        b[30] = self.action.function();
        if let TaskMgmt::AbortTask { task_tag } = self.action {
            b[32..40].copy_from_slice(&task_tag.0);
        }
        b
    }
}
