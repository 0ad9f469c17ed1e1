//! Subsystems and what they hold: namespaces (bdevs), allowed hosts, listeners.

use std::any::Any;
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, RwLock};
use serde::{Deserialize, Serialize};

use super::error::CoreError;
use super::state::{ChangeQueue, SubsystemState};
use crate::bdev::Bdev;
use crate::nvme::CntlidAllocator;
use crate::registry::TransportAttrs;
use crate::scsi_exec::NexusUnitAttentions;

/// Lost SCSI I_T nexuses a subsystem remembers for I_T NEXUS LOSS OCCURRED.
pub const MAX_LOST_SCSI_NEXUSES: usize = 1024;

/// The well-known NQN of the discovery subsystem.
pub const DISCOVERY_NQN: &str = "nqn.2014-08.org.nvmexpress.discovery";

/// Default serial number (SPDK: twenty zeroes).
pub const DEFAULT_SERIAL: &str = "00000000000000000000";
/// Default model number.
pub const DEFAULT_MODEL: &str = "rtgt bdev Controller";
/// Namespaces a subsystem may hold when `max_namespaces` is 0.
pub const DEFAULT_MAX_NAMESPACES: u32 = 32;
/// Most listeners per subsystem (SPDK's limit).
pub const MAX_LISTENERS: usize = 16;

/// NVM or discovery subsystem.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SubsystemType {
    /// An NVM subsystem with namespaces.
    #[serde(rename = "NVMe")]
    Nvme,
    /// The discovery subsystem.
    Discovery,
}

/// Address family of a listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum AdrFam {
    /// IPv4.
    #[serde(rename = "IPv4")]
    Ipv4,
    /// IPv6.
    #[serde(rename = "IPv6")]
    Ipv6,
    /// InfiniBand.
    #[serde(rename = "IB")]
    Ib,
    /// Fibre Channel.
    #[serde(rename = "FC")]
    Fc,
}

impl AdrFam {
    /// Parses SPDK's case-insensitive names (`ipv4`, `IPv6`, `ib`, `fc`).
    pub fn parse(s: &str) -> Option<Self> {
        match s.to_ascii_lowercase().as_str() {
            "ipv4" => Some(Self::Ipv4),
            "ipv6" => Some(Self::Ipv6),
            "ib" => Some(Self::Ib),
            "fc" => Some(Self::Fc),
            _ => None,
        }
    }

    /// SPDK's display name.
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Ipv4 => "IPv4",
            Self::Ipv6 => "IPv6",
            Self::Ib => "IB",
            Self::Fc => "FC",
        }
    }
}

/// A transport address a subsystem listens on (SPDK's trid without the subsystem NQN).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListenAddr {
    /// Transport name, upper case (`RDMA`, `SRP`).
    pub trtype: String,
    /// Address family.
    pub adrfam: AdrFam,
    /// Address (IP literal for RDMA CM).
    pub traddr: String,
    /// Service id (port number for RDMA CM).
    pub trsvcid: String,
    /// The attributes the listener's transport declares
    /// ([`TransportOps::listener_attrs`](crate::registry::TransportOps)), as set. They are not
    /// part of the address: equality ignores them.
    #[serde(default, skip_serializing_if = "TransportAttrs::is_empty")]
    pub attrs: TransportAttrs,
}

impl ListenAddr {
    /// Builds an address, upper-casing the transport name.
    pub fn new(trtype: &str, adrfam: AdrFam, traddr: &str, trsvcid: &str) -> Self {
        Self {
            trtype: trtype.to_ascii_uppercase(),
            adrfam,
            traddr: traddr.to_string(),
            trsvcid: trsvcid.to_string(),
            attrs: TransportAttrs::new(),
        }
    }

    /// The TCP/UDP-style port, for transports addressed by RDMA CM.
    pub fn port(&self) -> Result<u16, CoreError> {
        match self.trsvcid.parse::<u16>() {
            Ok(p) if p > 0 => Ok(p),
            _ => Err(CoreError::Invalid(format!(
                "invalid trsvcid '{}' (a port number 1-65535 is required)",
                self.trsvcid
            ))),
        }
    }

    /// The address as an IP, for transports addressed by RDMA CM.
    pub fn ip(&self) -> Result<IpAddr, CoreError> {
        self.traddr
            .parse()
            .map_err(|_| CoreError::Invalid(format!("invalid traddr '{}'", self.traddr)))
    }
}

impl std::fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} {} {}:{}",
            self.trtype,
            self.adrfam.as_str(),
            self.traddr,
            self.trsvcid
        )
    }
}

/// SPDK's equality: transport and service case-insensitively, IP addresses numerically.
impl PartialEq for ListenAddr {
    fn eq(&self, o: &Self) -> bool {
        let addr_eq = match (self.traddr.parse::<IpAddr>(), o.traddr.parse::<IpAddr>()) {
            (Ok(a), Ok(b)) => a == b,
            _ => self.traddr.eq_ignore_ascii_case(&o.traddr),
        };
        self.trtype.eq_ignore_ascii_case(&o.trtype)
            && self.adrfam == o.adrfam
            && addr_eq
            && self.trsvcid.eq_ignore_ascii_case(&o.trsvcid)
    }
}

impl Eq for ListenAddr {}

/// A namespace: a bdev exported under an NSID.
#[derive(Clone)]
pub struct Namespace {
    /// Namespace id, 1-based.
    pub nsid: u32,
    /// The bdev's name.
    pub bdev_name: String,
    /// The bdev (claimed by this namespace).
    pub bdev: Arc<dyn Bdev>,
    /// Namespace UUID (defaults to the bdev's).
    pub uuid: uuid::Uuid,
    /// NGUID (defaults to the UUID's bytes).
    pub nguid: [u8; 16],
    /// EUI-64, if given.
    pub eui64: Option<[u8; 8]>,
    /// ANA group id.
    pub anagrpid: u32,
    /// Hidden from hosts until added per host (`no_auto_visible`): only the hosts in
    /// [`Namespace::visible_hosts`] see it.
    pub no_auto_visible: bool,
    /// Hosts that see the namespace although it is not auto-visible (`nvmf_ns_add_host`), in
    /// the order they were added.
    pub visible_hosts: Vec<String>,
    /// Persist-through-power-loss file, if given.
    pub ptpl_file: Option<String>,
    /// The volume's reservation state (NVMe reservations and SCSI persistent reservations
    /// share it), loaded from `ptpl_file`.
    pub reservation: Arc<super::VolumeReservation>,
    /// The SCSI logical unit's mode parameters (MODE SELECT), shared by every nexus.
    pub modes: super::SharedModes,
    /// The volume's compare-and-write range lock.
    pub caw: Arc<super::CawLock>,
}

impl Namespace {
    /// Whether `host` sees this namespace: every host does unless it was added with
    /// `no_auto_visible`; then only the hosts added to it.
    pub fn visible_to(&self, host: &str) -> bool {
        !self.no_auto_visible || self.visible_hosts.iter().any(|h| h == host)
    }

    /// The hosts that see it, for the data path: `None` when every host does.
    pub fn visibility(&self) -> Option<Arc<[String]>> {
        self.no_auto_visible
            .then(|| self.visible_hosts.iter().cloned().collect())
    }
}

impl std::fmt::Debug for Namespace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Namespace")
            .field("nsid", &self.nsid)
            .field("bdev", &self.bdev_name)
            .finish()
    }
}

/// Everything about a subsystem that management changes. Read under a lock on the control
/// path only; poll groups copy what the data path needs when they (re)activate.
#[derive(Debug, Clone)]
pub struct SubsystemConfig {
    /// Serial number.
    pub serial: String,
    /// Model number.
    pub model: String,
    /// Highest NSID allowed (0 = the default of 32).
    pub max_namespaces: u32,
    /// Accept any host.
    pub allow_any_host: bool,
    /// Allowed hosts: host NQNs for NVMe, initiator port ids for SRP.
    pub hosts: Vec<String>,
    /// DH-HMAC-CHAP keys of NVMe hosts that must authenticate, by host NQN
    /// (`nvmf_subsystem_add_host` / `nvmf_subsystem_set_keys` `dhchap_key`).
    pub host_keys: BTreeMap<String, HostDhchap>,
    /// Listeners, in the order they were added.
    pub listeners: Vec<ListenAddr>,
    /// Namespaces by NSID.
    pub namespaces: BTreeMap<u32, Namespace>,
    /// Lowest controller id to hand out.
    pub min_cntlid: u16,
    /// Highest controller id to hand out.
    pub max_cntlid: u16,
    /// ANA reporting.
    pub ana_reporting: bool,
    /// The ANA groups and listener states, when `ana_reporting` is on.
    pub ana: Option<super::ana::SubsystemAna>,
    /// Administrative label (informational, as in SPDK).
    pub admin_label: Option<String>,
    /// The attributes transports declare for subsystems
    /// ([`TransportOps::subsystem_attrs`](crate::registry::TransportOps), e.g. SRP's
    /// `srp_port_id`), as set: canonical values by name.
    pub transport_attrs: TransportAttrs,
}

impl SubsystemConfig {
    /// The effective NSID limit.
    pub fn ns_limit(&self) -> u32 {
        if self.max_namespaces == 0 {
            DEFAULT_MAX_NAMESPACES
        } else {
            self.max_namespaces
        }
    }

    /// Whether a host may connect: `allow_any_host`, or `host` is on the allow list, compared
    /// byte for byte (host NQNs are case-sensitive, as in SPDK and the Linux target; an
    /// allow list must not admit a host whose NQN merely differs in case). SRP matches an
    /// initiator against the list's entries itself (`transport_srp::port_id::host_matches`:
    /// several spellings name one initiator).
    pub fn host_allowed(&self, host: &str) -> bool {
        self.allow_any_host || self.hosts.iter().any(|h| h == host)
    }
}

/// The DH-HMAC-CHAP keys of one host: the keyring names (for save_config) and the secrets read
/// from their files. Its `Debug` shows names and key lengths only, never key material.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostDhchap {
    /// Keyring name of the host's key (`dhchap_key`).
    pub key_name: String,
    /// Keyring name of the controller's key (`dhchap_ctrlr_key`), for bidirectional
    /// authentication.
    pub ctrlr_key_name: Option<String>,
    /// The secrets.
    pub keys: crate::nvme::auth::HostKeys,
}

/// A controller (NVMe association) or session (SRP nexus) as management shows it
/// (`nvmf_subsystem_get_controllers`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControllerInfo {
    /// Controller id (NVMe CNTLID; for SRP a session id from the same range).
    pub cntlid: u16,
    /// `io`, `discovery` or `administrative`.
    pub cntrltype: &'static str,
    /// Host NQN (NVMe) or initiator port id (SRP).
    pub hostnqn: String,
    /// Host identifier (NVMe host id as a UUID string; SRP: empty).
    pub hostid: String,
    /// I/O queues (NVMe) or channels (SRP) connected.
    pub num_io_qpairs: u32,
    /// Transport name.
    pub transport: &'static str,
}

struct ControllerEntry {
    info: ControllerInfo,
    handle: Arc<dyn Any + Send + Sync>,
}

/// The controllers of a subsystem, with controller-id allocation over its cntlid range.
pub(crate) struct Controllers {
    alloc: Option<CntlidAllocator>,
    entries: BTreeMap<u16, ControllerEntry>,
}

/// A subsystem: an NVMe subsystem to NVMe transports, an SRP target port to SRP.
pub struct Subsystem {
    pub(crate) id: u32,
    nqn: String,
    kind: SubsystemType,
    pub(crate) config: RwLock<SubsystemConfig>,
    pub(crate) state: Mutex<SubsystemState>,
    pub(crate) changes: Mutex<ChangeQueue>,
    pub(crate) destroying: AtomicBool,
    pub(crate) user_paused: AtomicBool,
    /// Bumped whenever the namespace set changes, so poll groups notice on resume.
    pub(crate) ns_generation: AtomicU64,
    controllers: Mutex<Controllers>,
    /// The unit attention queues of the SCSI I_T nexuses logged in (one per nexus, shared by
    /// its channels).
    scsi_nexuses: Mutex<Vec<Arc<NexusUnitAttentions>>>,
    /// SCSI I_T nexuses lost and not back yet, oldest first (at most
    /// [`MAX_LOST_SCSI_NEXUSES`]).
    scsi_lost: Mutex<std::collections::VecDeque<crate::reservation::Nexus>>,
}

impl std::fmt::Debug for Subsystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subsystem")
            .field("id", &self.id)
            .field("nqn", &self.nqn)
            .finish()
    }
}

impl Subsystem {
    pub(crate) fn new(id: u32, nqn: String, kind: SubsystemType, config: SubsystemConfig) -> Self {
        Self {
            id,
            nqn,
            kind,
            config: RwLock::new(config),
            state: Mutex::new(SubsystemState::Inactive),
            changes: Mutex::new(ChangeQueue::default()),
            destroying: AtomicBool::new(false),
            user_paused: AtomicBool::new(false),
            ns_generation: AtomicU64::new(0),
            controllers: Mutex::new(Controllers {
                alloc: None,
                entries: BTreeMap::new(),
            }),
            scsi_nexuses: Mutex::new(Vec::new()),
            scsi_lost: Mutex::new(std::collections::VecDeque::new()),
        }
    }

    /// Small integer id, unique among live subsystems (index into per-poll-group tables).
    pub fn id(&self) -> u32 {
        self.id
    }

    /// The NQN.
    pub fn nqn(&self) -> &str {
        &self.nqn
    }

    /// NVM or discovery.
    pub fn kind(&self) -> SubsystemType {
        self.kind
    }

    /// The current state.
    pub fn state(&self) -> SubsystemState {
        *self.state.lock()
    }

    /// Whether an operator paused it with `nvmf_subsystem_pause`.
    pub fn user_paused(&self) -> bool {
        self.user_paused.load(Ordering::Acquire)
    }

    /// A copy of the configuration.
    pub fn config(&self) -> SubsystemConfig {
        self.config.read().clone()
    }

    /// Runs `f` on the configuration under the read lock.
    pub fn with_config<R>(&self, f: impl FnOnce(&SubsystemConfig) -> R) -> R {
        f(&self.config.read())
    }

    /// A SCSI I_T nexus to this subsystem is gone (its last channel closed): its SPC-2
    /// reservations (RESERVE(6/10)) on every logical unit are dropped, as SPC-4 says;
    /// persistent reservations stay.
    pub fn scsi_nexus_lost(&self, nexus: crate::reservation::Nexus) {
        self.scsi_nexuses.lock().retain(|n| n.identity() != nexus);
        {
            // Remembered for I_T NEXUS LOSS OCCURRED when it comes back (bounded: the
            // oldest are forgotten, and then hear POWER ON instead).
            let mut lost = self.scsi_lost.lock();
            if !lost.contains(&nexus) {
                if lost.len() == MAX_LOST_SCSI_NEXUSES {
                    lost.pop_front();
                }
                lost.push_back(nexus);
            }
        }
        for ns in self.config.read().namespaces.values() {
            ns.reservation.nexus_lost(nexus);
        }
    }

    /// A SCSI I_T nexus logged in: its unit attention queues, which
    /// [`Subsystem::scsi_unit_attention`] reaches until [`Subsystem::scsi_nexus_lost`].
    /// A nexus whose earlier nexus was lost ([`Subsystem::scsi_nexus_lost`]) hears I_T
    /// NEXUS LOSS OCCURRED on its first command to each LU ([`NexusUnitAttentions::returned`]).
    pub fn scsi_nexus_attach(&self, ua: Arc<NexusUnitAttentions>) {
        {
            let mut lost = self.scsi_lost.lock();
            if let Some(i) = lost.iter().position(|n| *n == ua.identity()) {
                lost.remove(i);
                ua.returned();
            }
        }
        let mut g = self.scsi_nexuses.lock();
        g.retain(|n| n.identity() != ua.identity());
        g.push(ua);
    }

    /// Raises the unit attention `ua` on logical unit `lun` for every SCSI I_T nexus of the
    /// subsystem but `except` (the one whose command caused it): LU reset, capacity change,
    /// commands cleared. Control path (one lock per nexus); the condition is reported by each
    /// nexus's next command to the LU.
    pub fn scsi_unit_attention(
        &self,
        lun: u16,
        ua: crate::scsi::ua::UnitAttention,
        except: Option<crate::reservation::Nexus>,
    ) {
        for n in self.scsi_nexuses.lock().iter() {
            if Some(n.identity()) != except {
                n.establish(lun, ua);
            }
        }
    }

    /// The unit attention queues of the SCSI nexus `nexus`, if it is logged in.
    pub fn scsi_nexus(&self, nexus: crate::reservation::Nexus) -> Option<Arc<NexusUnitAttentions>> {
        self.scsi_nexuses
            .lock()
            .iter()
            .find(|n| n.identity() == nexus)
            .cloned()
    }

    /// Registers a controller under a freshly allocated controller id. `make` receives the id
    /// and returns the management view and the transport's own controller object. `None` when
    /// every id of the subsystem's cntlid range is in use (NVMe: Controller Busy).
    pub fn add_controller(
        &self,
        make: impl FnOnce(u16) -> (ControllerInfo, Arc<dyn Any + Send + Sync>),
    ) -> Option<u16> {
        let (min, max) = self.with_config(|c| (c.min_cntlid, c.max_cntlid));
        let mut ctrls = self.controllers.lock();
        let cntlid = ctrls
            .alloc
            .get_or_insert_with(|| CntlidAllocator::new(min, max))
            .alloc()?;
        let (info, handle) = make(cntlid);
        ctrls
            .entries
            .insert(cntlid, ControllerEntry { info, handle });
        Some(cntlid)
    }

    /// The transport's controller object for `cntlid`, if it is of type `T`.
    pub fn controller<T: Any + Send + Sync>(&self, cntlid: u16) -> Option<Arc<T>> {
        let h = Arc::clone(&self.controllers.lock().entries.get(&cntlid)?.handle);
        h.downcast().ok()
    }

    /// Updates the management view of a controller.
    pub fn update_controller(&self, cntlid: u16, f: impl FnOnce(&mut ControllerInfo)) {
        if let Some(e) = self.controllers.lock().entries.get_mut(&cntlid) {
            f(&mut e.info);
        }
    }

    /// Forgets a controller and frees its id.
    pub fn remove_controller(&self, cntlid: u16) {
        let mut ctrls = self.controllers.lock();
        if ctrls.entries.remove(&cntlid).is_some()
            && let Some(a) = ctrls.alloc.as_mut()
        {
            a.free(cntlid);
        }
    }

    /// The controllers, by controller id.
    pub fn controllers(&self) -> Vec<ControllerInfo> {
        self.controllers
            .lock()
            .entries
            .values()
            .map(|e| e.info.clone())
            .collect()
    }

    /// The DH-HMAC-CHAP keys `host` must authenticate with, if any.
    pub fn host_keys(&self, host: &str) -> Option<crate::nvme::auth::HostKeys> {
        self.config
            .read()
            .host_keys
            .get(host)
            .map(|k| k.keys.clone())
    }

    /// Whether `host` may connect through `addr`. The discovery subsystem accepts every host on
    /// every listener of the target.
    pub fn access_allowed(&self, host: &str, addr: &ListenAddr) -> bool {
        if self.kind == SubsystemType::Discovery {
            return true;
        }
        let c = self.config.read();
        c.host_allowed(host) && c.listeners.iter().any(|l| l == addr)
    }
}

/// Checks an NQN against the NVMe naming rules (as SPDK does at subsystem creation).
pub fn validate_nqn(nqn: &str) -> Result<(), CoreError> {
    let bad = |why: &str| Err(CoreError::Invalid(format!("invalid NQN '{nqn}': {why}")));
    if nqn.len() > 223 {
        return bad("longer than 223 bytes");
    }
    if nqn.len() < 11 {
        return bad("shorter than 11 bytes");
    }
    if nqn == DISCOVERY_NQN {
        return Ok(());
    }
    if let Some(u) = nqn.strip_prefix("nqn.2014-08.org.nvmexpress:uuid:") {
        if u.len() != 36 || uuid::Uuid::parse_str(u).is_err() {
            return bad("the uuid form needs a 36-character UUID");
        }
        return Ok(());
    }
    let Some(rest) = nqn.strip_prefix("nqn.") else {
        return bad("it must start with 'nqn.'");
    };
    let date = rest.as_bytes();
    let date_ok = date.len() > 8
        && date[..4].iter().all(u8::is_ascii_digit)
        && date[4] == b'-'
        && date[5..7].iter().all(u8::is_ascii_digit)
        && date[7] == b'.';
    if !date_ok {
        return bad("expected a date 'yyyy-mm.' after 'nqn.'");
    }
    let rest = &rest[8..];
    let domain = rest.split_once(':').map_or(rest, |(d, _)| d);
    if domain.is_empty() {
        return bad("the reverse domain name is empty");
    }
    for label in domain.split('.') {
        let ok = label.len() <= 63
            && label
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic())
            && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            && !label.ends_with('-');
        if !ok {
            return bad(&format!("domain label '{label}' is invalid"));
        }
    }
    Ok(())
}

/// Checks a serial (≤ 20) or model (≤ 40) number: printable ASCII only.
pub fn validate_ascii_field(what: &str, value: &str, max: usize) -> Result<(), CoreError> {
    if value.len() > max || !value.bytes().all(|b| (0x20..=0x7e).contains(&b)) {
        return Err(CoreError::Invalid(format!(
            "Invalid {what} '{}' (at most {max} printable ASCII characters)",
            value.escape_default()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_allow_list_compares_host_nqns_byte_for_byte() {
        let h = "nqn.2014-08.org.nvmexpress:uuid:4c4c4544-0035-4b10-8044-b3c04f4e4433";
        let mut c = SubsystemConfig {
            serial: String::new(),
            model: String::new(),
            max_namespaces: 0,
            allow_any_host: false,
            hosts: vec![h.to_string()],
            host_keys: BTreeMap::new(),
            listeners: Vec::new(),
            namespaces: BTreeMap::new(),
            min_cntlid: 1,
            max_cntlid: 0xFFEF,
            ana_reporting: false,
            ana: None,
            admin_label: None,
            transport_attrs: TransportAttrs::new(),
        };
        assert!(c.host_allowed(h));
        for other in [
            h.to_uppercase(),
            h.replace("4c4c4544", "4C4C4544"),
            format!("{h} "),
            format!("{h}x"),
            h[..h.len() - 1].to_string(),
        ] {
            assert!(!c.host_allowed(&other), "{other} passes for {h}");
        }
        c.allow_any_host = true;
        assert!(c.host_allowed("nqn.2014-08.org.nvmexpress:uuid:anyone"));
    }

    #[test]
    fn nqn_rules() {
        for ok in [
            "nqn.2016-06.io.spdk:cnode1",
            DISCOVERY_NQN,
            "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555",
            "nqn.2016-06.io.spdk",
            "nqn.2016-06.io.spdk:ünïcode user string",
        ] {
            validate_nqn(ok).unwrap_or_else(|e| panic!("{ok}: {e}"));
        }
        for bad in [
            "",
            "nqn.short",
            "iqn.2016-06.io.spdk:x",
            "nqn.16-06.io.spdk:cnode1",
            "nqn.2016-6.io.spdk:cnode1",
            "nqn.2016-06.1io.spdk:cnode1",
            "nqn.2016-06.io-.spdk:cnode1",
            "nqn.2016-06.i_o.spdk:cnode1",
            "nqn.2016-06.:cnode1",
            "nqn.2014-08.org.nvmexpress:uuid:not-a-uuid",
        ] {
            assert!(validate_nqn(bad).is_err(), "{bad} accepted");
        }
        let long = format!("nqn.2016-06.io.spdk:{}", "x".repeat(210));
        assert!(validate_nqn(&long).is_err());
    }

    #[test]
    fn listen_addr_equality_follows_spdk() {
        let a = ListenAddr::new("rdma", AdrFam::Ipv4, "10.0.0.1", "4420");
        assert_eq!(a.trtype, "RDMA");
        assert_eq!(a, ListenAddr::new("RDMA", AdrFam::Ipv4, "10.0.0.1", "4420"));
        assert_ne!(a, ListenAddr::new("RDMA", AdrFam::Ipv4, "10.0.0.2", "4420"));
        assert_ne!(a, ListenAddr::new("SRP", AdrFam::Ipv4, "10.0.0.1", "4420"));
        let v6a = ListenAddr::new("rdma", AdrFam::Ipv6, "fe80::1", "4420");
        let v6b = ListenAddr::new("rdma", AdrFam::Ipv6, "FE80:0::0001", "4420");
        assert_eq!(v6a, v6b);
        assert_eq!(a.port().unwrap(), 4420);
        assert!(
            ListenAddr::new("rdma", AdrFam::Ipv4, "x", "0")
                .port()
                .is_err()
        );
        assert!(
            ListenAddr::new("rdma", AdrFam::Ipv4, "x", "")
                .port()
                .is_err()
        );
        assert!(
            ListenAddr::new("rdma", AdrFam::Ipv4, "x", "1")
                .ip()
                .is_err()
        );
        assert_eq!(AdrFam::parse("IPV4"), Some(AdrFam::Ipv4));
        assert_eq!(AdrFam::parse("x"), None);
    }

    #[test]
    fn controllers_get_ids_from_the_range() {
        let mut c = SubsystemConfig {
            serial: DEFAULT_SERIAL.into(),
            model: DEFAULT_MODEL.into(),
            max_namespaces: 0,
            allow_any_host: true,
            hosts: Vec::new(),
            host_keys: BTreeMap::new(),
            listeners: Vec::new(),
            namespaces: BTreeMap::new(),
            min_cntlid: 5,
            max_cntlid: 6,
            ana_reporting: false,
            ana: None,
            admin_label: None,
            transport_attrs: TransportAttrs::new(),
        };
        c.max_namespaces = 4;
        let s = Subsystem::new(0, "nqn.2016-06.io.spdk:c".into(), SubsystemType::Nvme, c);
        let info = |cntlid| ControllerInfo {
            cntlid,
            cntrltype: "io",
            hostnqn: "h".into(),
            hostid: String::new(),
            num_io_qpairs: 0,
            transport: "TEST",
        };
        let a = s.add_controller(|id| (info(id), Arc::new(id))).unwrap();
        let b = s.add_controller(|id| (info(id), Arc::new(id))).unwrap();
        assert_eq!((a, b), (5, 6));
        assert!(
            s.add_controller(|id| (info(id), Arc::new(id))).is_none(),
            "range exhausted"
        );
        assert_eq!(*s.controller::<u16>(6).unwrap(), 6);
        assert!(s.controller::<String>(6).is_none(), "wrong type");
        s.update_controller(5, |i| i.num_io_qpairs = 3);
        assert_eq!(s.controllers()[0].num_io_qpairs, 3);
        s.remove_controller(5);
        assert_eq!(s.controllers().len(), 1);
        assert_eq!(s.add_controller(|id| (info(id), Arc::new(id))), Some(5));
    }

    #[test]
    fn ascii_fields() {
        validate_ascii_field("serial", "SPDK00000000000001", 20).unwrap();
        assert!(validate_ascii_field("serial", "123456789012345678901", 20).is_err());
        assert!(validate_ascii_field("model", "a\u{1f}b", 40).is_err());
    }
}
