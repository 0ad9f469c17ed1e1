//! rtgt SRP (SCSI RDMA Protocol) target transport.
//!
//! The protocol logic is sans-I/O and lives in small modules that the runtime drives:
//!
//! - [`proto`]: byte-exact codecs for every SRP information unit.
//! - [`login`]: the login decision (accept parameters or a reject reason).
//! - [`nexus`]: channel grouping per (initiator port, target port) and the multi-channel rules.
//! - [`channel`]: the per-channel state machine (CONNECTING → LIVE → DISCONNECTING → DRAINING →
//!   DISCONNECTED) and credit accounting.
//! - [`task_management`]: task management planning.
//!
//! The runtime drives them on the target's reactors:
//!
//! - [`transport`]: registration as `SRP`, options ([`opts`]), RDMA CM listeners, and the
//!   acceptor that decides logins and hands channels to poll groups.
//! - `runtime`: the per-poll-group data path (channels, requests, buffers, completions).
//! - [`sessions`]: the transport-wide nexus table and the sessions shown as controllers.
//! - [`port_id`]: target port ids of subsystems and the initiator names allowed hosts take.
//!
//! # Operating it
//!
//! A subsystem is an SRP target port; namespace *n* is LUN *n* − 1; allowed hosts are
//! initiator port ids (`0x` + 32 hex digits, the GUID form `xxxx:xxxx:xxxx:xxxx`, or the
//! initiator's IP; `allow_any_host` admits everyone). With `rpc.py` (or the rtgt CLI):
//!
//! ```text
//! nvmf_create_transport -t SRP [--max-queue-depth 128 ...]      # options: opts::SrpOpts
//! bdev_malloc_create -b Malloc0 64 512
//! nvmf_create_subsystem nqn.2016-06.io.rtgt:srp1 -a
//! nvmf_subsystem_add_ns nqn.2016-06.io.rtgt:srp1 Malloc0
//! nvmf_subsystem_add_listener nqn.2016-06.io.rtgt:srp1 -t srp -a 10.77.0.1 -s 5556
//! ```
//!
//! The target port id is derived from the NQN unless the subsystem sets `srp_port_id`
//! ([`port_id`] documents both). On the initiator, ib_srp logs in with
//! [`port_id::login_string`]: `id_ext=<G>,ioc_guid=<G>,dest=10.77.0.1:5556` written to
//! `/sys/class/infiniband_srp/srp-<hca>-<port>/add_target`. Sessions appear in
//! `nvmf_subsystem_get_controllers` (host = the initiator port id, one entry per I_T nexus,
//! `num_io_qpairs` = its channels), channels in `nvmf_subsystem_get_qpairs` with their state,
//! ids, credits and counters, and the transport's and poll groups' counters in
//! `nvmf_get_stats`.
//!
//! What follows ib_srpt and what does not:
//! - login checks, reject reasons, LOGIN_RSP values (credits 128, max_it_iu_len =
//!   `max_req_size`, immediate data at the initiator's offset) and multi-channel semantics
//!   are ib_srpt's; the max_ti_iu_len advertised is `max_rsp_size` (ib_srpt echoes the
//!   initiator's IT length there); credits shrink so that the channel's receive queue
//!   (credits + 2) fits the device's `max_qp_wr` (ib_srpt: min(128, max_qp_wr), which can
//!   fail to create the queue pair), and a device too small for a channel is refused with
//!   0x10001;
//! - a login is rejected while the subsystem is not active (ib_srpt: port not enabled);
//! - SRP_I_LOGOUT closes the channel (ib_srpt only logs it); a single-channel login sends
//!   SRP_T_LOGOUT (reason 4) to the channels it terminates before disconnecting them;
//! - credits owed for tasks that ended without a response travel back on the next response,
//!   or in an SRP_CRED_REQ when nothing else is outstanding on the channel;
//! - descriptor errors answer CHECK CONDITION, INVALID FIELD IN COMMAND INFORMATION UNIT
//!   (SCST's choice; ib_srpt answers BUSY); indirect descriptors whose table is not in the IU
//!   (ib_srp's `allow_ext_sg=1`) are refused that way too;
//! - a transfer needing more RDMA work requests than the send queue holds (a small `sq_size`,
//!   many descriptors) goes in rounds of what the queue has room for; ib_srpt drops such a
//!   response ("IB send queue full") and the initiator recovers only by its timeout;
//! - aborted tasks (ABORT TASK, ABORT TASK SET, CLEAR TASK SET, LOGICAL UNIT RESET across
//!   every channel and poll group) get no response; the TM response waits until they are
//!   gone from the bdev and the wire.

pub mod channel;
pub mod login;
pub mod nexus;
pub mod opts;
pub mod port_id;
pub mod proto;
mod runtime;
pub mod sessions;
pub mod task_management;
pub mod transport;

pub use opts::SrpOpts;
pub use runtime::SrpPg;
pub use transport::SrpTransport;
