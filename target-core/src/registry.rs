//! The transport registry: a [`Transport`] trait that is the ops table of a transport, and
//! [`register_transport!`](crate::register_transport) with which a transport crate adds itself at link time.
//!
//! ```ignore
//! target_core::register_transport!(RDMA_OPS = TransportOps {
//!     name: "RDMA",
//!     description: "NVMe over Fabrics on RDMA",
//!     defaults: rdma_defaults,
//!     create: rdma_create,
//!     options: &[TransportAttr::plain("no_srq", JsonType::Bool, "no-srq", "Disable the SRQ")],
//!     subsystem_attrs: &[],
//!     listener_attrs: &[],
//! });
//! ```
//!
//! A transport owns its `nvmf_create_transport` options, and the attributes it adds to
//! subsystems and listeners ([`TransportAttr`]): the RPC layer checks, stores, shows and saves
//! them without naming the transport (SRP's `srp_port_id` is one).
//!
//! The binary must reference each transport crate (e.g. `use transport_rdma as _;`) or the
//! linker drops it, entries and all.

use std::any::Any;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::bdev::BdevIo;
use crate::reactor::Reactors;
use crate::target::{ListenAddr, PgCore, Target};

#[doc(hidden)]
pub use linkme;
/// The JSON types of transport options and attributes ([`TransportAttr::kind`]).
pub use rpc_spec::JsonType;

/// Options of `nvmf_create_transport` as the JSON object the RPC received (minus `trtype` and
/// `tgt_name`). Each transport decodes its own options from it and refuses, with
/// [`TransportError::Unsupported`], the options it does not use ([`refuse_unused_options`]):
/// SPDK ignores them, but an option accepted and ignored is a promise rtgt does not keep.
pub type TransportParams = Map<String, Value>;

/// The options `rpc.py nvmf_create_transport` sends on every call whatever the transport,
/// with the value it sends when their flag is not given: a transport that does not use one
/// accepts it with that value (and refuses any other).
pub const RPC_PY_ALWAYS_SENT: &[(&str, bool)] = &[
    ("zcopy", false),
    ("no_srq", false),
    ("c2h_success", true),
    ("dif_insert_or_strip", false),
    ("no_wr_batching", false),
    ("disable_mappable_bar0", false),
    ("disable_adaptive_irq", false),
    ("disable_shadow_doorbells", false),
    ("disable_command_passthru", false),
];

/// Refuses every option of `p` that the `trtype` transport does not use: one not in `used`
/// (nor `trtype` or `tgt_name`), unless it is one of [`RPC_PY_ALWAYS_SENT`] with rpc.py's
/// default value.
pub fn refuse_unused_options(
    trtype: &str,
    p: &TransportParams,
    used: &[&str],
) -> Result<(), TransportError> {
    for (key, value) in p {
        if used.contains(&key.as_str()) || key == "trtype" || key == "tgt_name" {
            continue;
        }
        let sent_by_default = RPC_PY_ALWAYS_SENT
            .iter()
            .any(|(k, d)| k == key && value.as_bool() == Some(*d));
        if !sent_by_default {
            return Err(TransportError::Unsupported(format!(
                "option '{key}' ({value}) is not supported by the {trtype} transport"
            )));
        }
    }
    Ok(())
}

/// Errors a transport reports.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TransportError {
    /// An option is invalid.
    #[error("{0}")]
    Invalid(String),
    /// An option, or an option's value, that the transport does not support (it would have
    /// no effect). The RPC layer answers `-32602`.
    #[error("{0}")]
    Unsupported(String),
    /// The fabric refused (no RDMA device, address in use, ...).
    #[error("{0}")]
    Fabric(String),
    /// Something else.
    #[error("{0}")]
    Other(String),
}

/// What a transport gets when it is created.
#[derive(Clone)]
pub struct TransportContext {
    /// The target it serves (subsystem lookup, host checks, poll-group hand-off).
    pub target: std::sync::Weak<Target>,
    /// The reactors (for the acceptor poller and messages to poll groups).
    pub reactors: Reactors,
    /// What the binary set up for transports to open their wire (for the RDMA transports, the
    /// `fabric::Provider` chosen by `rtgt serve --fabric rdma|sim`).
    pub env: TransportEnv,
    /// This transport's index: poll groups keep its per-reactor state at this index, and
    /// [`PgCore`] tags its bdev I/O with it.
    pub index: usize,
}

impl std::fmt::Debug for TransportContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportContext")
            .field("index", &self.index)
            .finish()
    }
}

/// The environment the binary hands to transports: whatever they need to open their wire, held
/// type-erased so that the core names no wire. The RDMA transports look up a
/// `fabric::Provider` (real RDMA or the in-process simulation); a transport that needs nothing
/// ignores it. One value per type.
#[derive(Clone, Default)]
pub struct TransportEnv {
    items: Vec<Arc<dyn Any + Send + Sync>>,
}

impl TransportEnv {
    /// An empty environment.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds `value`, replacing a value of the same type.
    pub fn with<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.items.retain(|v| !v.is::<T>());
        self.items.push(Arc::new(value));
        self
    }

    /// The value of type `T`, if the binary set one.
    pub fn get<T: Any + Send + Sync>(&self) -> Option<&T> {
        self.items.iter().find_map(|v| v.downcast_ref::<T>())
    }
}

impl std::fmt::Debug for TransportEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransportEnv")
            .field("items", &self.items.len())
            .finish()
    }
}

/// A created transport, or why not.
pub type CreateResult = Result<Arc<dyn Transport>, TransportError>;

/// Creates a transport from its options.
pub type CreateFn = fn(TransportContext, &TransportParams) -> CreateResult;

/// The static entry a transport registers.
#[derive(Debug)]
pub struct TransportOps {
    /// Canonical, upper-case name (`RDMA`, `SRP`); lookups ignore case.
    pub name: &'static str,
    /// One line for humans.
    pub description: &'static str,
    /// The full option set with its defaults, as `nvmf_get_transports` would show it.
    pub defaults: fn() -> TransportParams,
    /// Validates the options and creates the transport.
    pub create: CreateFn,
    /// The `nvmf_create_transport` options of this transport beyond the ones every transport
    /// shares ([`COMMON_TRANSPORT_OPTIONS`]): the RPC layer checks their JSON type, the
    /// command lines offer them (`--long-name`), and `create` decodes them.
    pub options: &'static [TransportAttr],
    /// Attributes this transport adds to every subsystem (`nvmf_create_subsystem` parameters):
    /// the RPC layer validates them with [`TransportAttr::parse`], stores the canonical value
    /// in [`SubsystemConfig::transport_attrs`](crate::target::SubsystemConfig), shows them in
    /// `nvmf_get_subsystems` and saves them.
    pub subsystem_attrs: &'static [TransportAttr],
    /// Attributes of this transport's listeners (top-level `nvmf_subsystem_add_listener`
    /// parameters), stored in [`ListenAddr::attrs`], shown by
    /// `nvmf_subsystem_get_listeners` and saved.
    pub listener_attrs: &'static [TransportAttr],
}

/// An option or attribute a transport declares, so that RPC handles it without naming the
/// transport: an `nvmf_create_transport` option, or a subsystem or listener attribute.
#[derive(Debug, Clone, Copy)]
pub struct TransportAttr {
    /// The JSON key (`srp_port_id`).
    pub name: &'static str,
    /// Its JSON type, checked before [`TransportAttr::parse`].
    pub kind: rpc_spec::JsonType,
    /// One line of help for the command lines.
    pub help: &'static str,
    /// The long option of the command lines (`srp-port-id` for `--srp-port-id`); `None` when it
    /// has none.
    pub long: Option<&'static str>,
    /// Validates a value and returns its canonical form (what is stored, shown and saved), or
    /// why it is refused.
    pub parse: fn(&Value) -> Result<Value, String>,
    /// The value `nvmf_get_subsystems` shows while none is set, computed from the subsystem's
    /// NQN (SRP: the target port id derived from it); `None` shows nothing.
    pub shown_unset: Option<fn(&str) -> Value>,
}

impl TransportAttr {
    /// An attribute of type `kind` kept as given (once its type is checked).
    pub const fn plain(
        name: &'static str,
        kind: rpc_spec::JsonType,
        long: &'static str,
        help: &'static str,
    ) -> Self {
        Self {
            name,
            kind,
            help,
            long: Some(long),
            parse: keep_value,
            shown_unset: None,
        }
    }

    /// Checks the JSON type, then [`TransportAttr::parse`]s: the canonical value, or the
    /// message of the refusal (`Invalid <name> <value>: <why>`).
    pub fn validate(&self, value: &Value) -> Result<Value, String> {
        let why = if rpc_spec::kind_ok(self.kind, value) {
            match (self.parse)(value) {
                Ok(v) => return Ok(v),
                Err(why) => why,
            }
        } else {
            format!("a {} is expected", self.kind.name())
        };
        Err(format!("Invalid {} {value}: {why}", self.name))
    }
}

/// A [`TransportAttr::parse`] that keeps the value as given.
pub fn keep_value(v: &Value) -> Result<Value, String> {
    Ok(v.clone())
}

/// Transport attributes by name, as stored: only the ones set explicitly, in canonical form.
pub type TransportAttrs = Map<String, Value>;

/// The options of `nvmf_create_transport` that every transport shares (SPDK's
/// `spdk_nvmf_transport_opts`), with their JSON types. A transport's own options are in its
/// [`TransportOps::options`]; the RPC layer checks the types of both, and the transport
/// refuses what it does not use.
pub const COMMON_TRANSPORT_OPTIONS: &[rpc_spec::Param] = {
    use rpc_spec::{JsonType, opt, req};
    const U16: JsonType = JsonType::Uint(16);
    const U32: JsonType = JsonType::Uint(32);
    &[
        req("trtype", JsonType::Str),
        opt("tgt_name", JsonType::Str),
        opt("max_queue_depth", U16),
        opt("max_io_qpairs_per_ctrlr", U16),
        opt("in_capsule_data_size", U32),
        opt("max_io_size", U32),
        opt("io_unit_size", U32),
        opt("max_aq_depth", U32),
        opt("num_shared_buffers", U32),
        opt("buf_cache_size", U32),
        opt("iobuf_small_cache_size", U32),
        opt("iobuf_large_cache_size", U32),
        opt("zcopy", JsonType::Bool),
        opt("dif_insert_or_strip", JsonType::Bool),
        opt("abort_timeout_sec", U32),
        opt("acceptor_poll_rate", U32),
        opt("disable_command_passthru", JsonType::Bool),
        opt("kas", U16),
        opt("min_kato", U32),
        opt("masked_oncs", JsonType::StrList),
        opt("masked_fuses", JsonType::StrList),
    ]
};

/// The transport, among the registered ones, that declares subsystem attribute `name`.
pub fn subsystem_attr(name: &str) -> Option<&'static TransportAttr> {
    TRANSPORTS
        .iter()
        .flat_map(|t| t.subsystem_attrs)
        .find(|a| a.name == name)
}

/// Every subsystem attribute of every registered transport, in the order of [`list`].
pub fn subsystem_attrs() -> Vec<&'static TransportAttr> {
    list().into_iter().flat_map(|t| t.subsystem_attrs).collect()
}

/// Whether any registered transport declares listener attribute `name`.
pub fn is_listener_attr(name: &str) -> bool {
    TRANSPORTS
        .iter()
        .flat_map(|t| t.listener_attrs)
        .any(|a| a.name == name)
}

/// Every registered transport (filled at link time).
#[linkme::distributed_slice]
pub static TRANSPORTS: [TransportOps];

/// Registers a transport: `register_transport!(STATIC_NAME = TransportOps { .. });`
#[macro_export]
macro_rules! register_transport {
    ($ident:ident = $ops:expr) => {
        #[$crate::registry::linkme::distributed_slice($crate::registry::TRANSPORTS)]
        #[linkme(crate = $crate::registry::linkme)]
        static $ident: $crate::registry::TransportOps = $ops;
    };
}

/// Finds a registered transport by name, ignoring case.
pub fn find(name: &str) -> Option<&'static TransportOps> {
    TRANSPORTS
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(name))
}

/// Every registered transport, sorted by name.
pub fn list() -> Vec<&'static TransportOps> {
    let mut v: Vec<_> = TRANSPORTS.iter().collect();
    v.sort_by_key(|t| t.name);
    v
}

/// Load of one poll group, to choose where a new connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PollGroupLoad {
    /// Poll group (= reactor) index.
    pub index: usize,
    /// Admin queues / management channels on it.
    pub admin_qpairs: usize,
    /// I/O queues / data channels on it.
    pub io_qpairs: usize,
}

/// A created transport: SPDK's `spdk_nvmf_transport_ops` as a trait. Called on the control
/// path (any thread); per-reactor work goes through [`TransportPollGroup`].
pub trait Transport: Any + Send + Sync + 'static {
    /// The registered name (`RDMA`).
    fn name(&self) -> &'static str;
    /// The options in effect, including `trtype`, in the order `nvmf_get_transports` and
    /// save_config print them.
    fn dump_opts(&self) -> TransportParams;
    /// Starts accepting connections on an address. The target reference-counts listeners, so
    /// this is called once per address.
    fn listen(&self, addr: &ListenAddr) -> Result<(), TransportError>;
    /// Stops accepting on an address.
    fn stop_listen(&self, addr: &ListenAddr) -> Result<(), TransportError>;
    /// Creates this transport's state for one poll group, on that poll group's reactor.
    fn poll_group_create(
        &self,
        core: &mut PgCore,
    ) -> Result<Box<dyn TransportPollGroup>, TransportError>;
    /// Picks the poll group for a new connection. The default picks the least loaded one.
    fn choose_poll_group(&self, admin: bool, loads: &[PollGroupLoad]) -> usize {
        loads
            .iter()
            .min_by_key(|l| if admin { l.admin_qpairs } else { l.io_qpairs })
            .map_or(0, |l| l.index)
    }
    /// Stops everything the transport runs outside poll groups (acceptors, listeners).
    fn destroy(&self);
    /// Transport-level statistics (merged into `nvmf_get_stats`).
    fn stats(&self) -> Value {
        Value::Null
    }
    /// For NVMe transports: the discovery log entry fields for a listener (TRTYPE, ADRFAM,
    /// TREQ, TSAS) as `(trtype, adrfam, treq, tsas)`; `None` hides the listener from discovery.
    fn discovery_entry(&self, _addr: &ListenAddr) -> Option<DiscoveryInfo> {
        None
    }
}

/// What a listener contributes to a discovery log entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscoveryInfo {
    /// TRTYPE (1 = RDMA).
    pub trtype: u8,
    /// ADRFAM (1 = IPv4, 2 = IPv6, 3 = IB, 4 = FC).
    pub adrfam: u8,
    /// TREQ.
    pub treq: u8,
    /// Transport-specific address subtype (RDMA: QPTYPE, PRTYPE, CMS).
    pub tsas: [u8; 3],
}

/// A transport's state on one reactor: its connections, completion queues and requests.
pub trait TransportPollGroup: Any {
    /// Does the transport's I/O work: completions, new commands, completed bdev I/O (handed in
    /// `completions`, which the transport drains). Returns the amount of work done.
    fn poll(&mut self, core: &mut PgCore, completions: &mut Vec<Box<BdevIo>>) -> usize;
    /// Called before the reactor sleeps: re-arm completion notifications and return `true` if
    /// work arrived meanwhile.
    fn arm(&mut self, _core: &mut PgCore) -> bool {
        false
    }
    /// Replays a request that [`PgCore::admit`] queued while its subsystem was paused.
    fn resume_request(&mut self, core: &mut PgCore, token: u64);
    /// Disconnects every connection bound to a subsystem (it is being stopped). Each reports
    /// [`PgCore::qpair_removed`] when it is gone.
    fn disconnect_subsystem(&mut self, core: &mut PgCore, subsystem: u32);
    /// The namespaces of a subsystem changed (added, removed, replaced; `nsids`, possibly
    /// empty) or an ANA log of one of its listeners changed, and the subsystem resumed on this
    /// poll group: NVMe transports hand the change to each admin queue that lives here
    /// (`nvme_exec::Queue::namespaces_changed`), which answers the parked AERs to complete.
    fn namespaces_changed(&mut self, _core: &mut PgCore, _subsystem: u32, _nsids: &[u32]) {}
    /// The bdevs of namespaces `nsids` of a subsystem changed size, and the subsystem resumed
    /// on this poll group. NVMe transports need nothing more than a namespace change (the
    /// default: a Namespace Attribute Changed notice listing them); SCSI transports establish
    /// CAPACITY DATA HAS CHANGED on every nexus here that sees one of those LUs.
    fn namespaces_resized(&mut self, core: &mut PgCore, subsystem: u32, nsids: &[u32]) {
        self.namespaces_changed(core, subsystem, nsids);
    }
    /// The SCSI target port group states of the LUs of namespaces `nsids` of a subsystem
    /// changed, and the subsystem resumed on this poll group: SCSI transports establish
    /// ASYMMETRIC ACCESS STATE CHANGED on every nexus of those LUs that lives here.
    fn alua_changed(&mut self, _core: &mut PgCore, _subsystem: u32, _nsids: &[u32]) {}
    /// Subsystems, listeners or allowed hosts changed: NVMe transports tell the discovery
    /// controllers whose admin queue lives here when the log their host sees changed.
    fn discovery_changed(&mut self, _core: &mut PgCore) {}
    /// Reservation notices for NVMe hosts on namespace `nsid` of a subsystem: NVMe transports
    /// hand them to the admin queues here whose host is a recipient
    /// (`nvme_exec::Queue::reservation_notices`) and complete the parked AERs it returns.
    fn reservation_notices(
        &mut self,
        _core: &mut PgCore,
        _subsystem: u32,
        _nsid: u32,
        _notices: &[(crate::reservation::HostId, crate::reservation::NoticeKind)],
    ) {
    }
    /// A reservation preempt-and-abort ([`crate::target::Target::preempt_abort`]): abort the
    /// commands of the preempted initiators to the namespace (LU) that this transport has on
    /// this poll group, [`AbortFence::hold`](crate::target::AbortFence::hold) `fence` once per
    /// one still in flight and release it when that one is gone. NVMe transports call
    /// `nvme_exec::preempt_abort_mark` on each request; SCSI transports abort the preempted
    /// nexuses' tasks (TASK ABORTED). Returns how many it holds.
    fn preempt_abort(
        &mut self,
        _core: &mut PgCore,
        _pa: &crate::target::PreemptAbort,
        _fence: &std::sync::Arc<crate::target::AbortFence>,
    ) -> u32 {
        0
    }
    /// Completes a command that the exec layer parked ([`crate::nvme_exec::NvmeAction::Parked`])
    /// on connection `queue` (its `QueueRef::key`) with `done`'s completion: NVMe transports
    /// find the parked request with that CID, as for an AER. A key that no longer names a
    /// live connection is ignored.
    fn parked_done(&mut self, _core: &mut PgCore, _queue: u64, _done: crate::nvme_exec::AerDone) {}
    /// Disconnects the connections of one host of a subsystem (the host was removed).
    fn disconnect_host(&mut self, _core: &mut PgCore, _subsystem: u32, _host: &str) {}
    /// Describes the connections on this poll group (all, or those of one subsystem), for
    /// `nvmf_subsystem_get_qpairs`.
    fn qpairs(&self, _subsystem: Option<u32>) -> Vec<Value> {
        Vec::new()
    }
    /// Statistics for `nvmf_get_stats` (`{"trtype": .., ...}`).
    fn stats(&self) -> Value {
        Value::Null
    }
    /// Disconnects everything and releases fabric resources (transport destroy, shutdown).
    fn shutdown(&mut self, _core: &mut PgCore) {}
}
