//! `nvmf_*`: transports, subsystems, listeners, namespaces, hosts, introspection, the
//! STARTUP-time target settings, and rtgt's `nvmf_subsystem_pause` / `nvmf_subsystem_resume`.
//!
//! Error codes follow SPDK (HEAD): a missing subsystem or bad parameter is `-32602` (messages
//! such as `Subsystem with NQN '<nqn>' not found`), runtime failures `-32603`, and the few
//! methods SPDK answers with an errno do so here too. Every change that touches the data path
//! goes through the target's state machine (pause → change → resume on every poll group) and
//! is answered when it has completed; a failure leaves the previous configuration in place.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use target_core::ana::AnaState;
use target_core::nvme::auth::{AuthPolicy, DhGroup, DhGroupSet, Digest, DigestSet, HostKeys};
use target_core::reactor::{format_cpumask, parse_cpumask};
use target_core::registry::{
    self, COMMON_TRANSPORT_OPTIONS, TransportAttrs, TransportOps, TransportParams,
};
use target_core::target::{
    AdrFam, CoreError, DISCOVERY_NQN, HostDhchap, ListenAddr, NsParams, Subsystem, SubsystemParams,
    SubsystemType, validate_ascii_field, validate_nqn,
};

use super::{
    DEFAULT_DMRSL, DEFAULT_WZSL, Param, TargetContext, add, check_params, check_tgt, hex_upper,
    internal, invalid, not_supported, nvmf_err, opt, parse_hex, parse_uuid,
};
use crate::params::Decode;
use crate::{Methods, RegisterError, RpcError, RpcResult, StateMask};

/// The JSON types of the `nvmf_create_transport` options of transport `trtype`: the ones
/// every transport shares, the transport's own ([`TransportOps::options`]), then the other
/// keys of the method's spec (rpc.py's options). Other keys go to the transport unchecked, and
/// it refuses those it does not use (`-32602`).
pub fn transport_options(trtype: &str) -> Vec<Param> {
    let mut table = COMMON_TRANSPORT_OPTIONS.to_vec();
    let own = registry::find(trtype).map_or(&[][..], |ops| ops.options);
    let spec = super::specs::find("nvmf_create_transport")
        .map(|s| crate::request_check::request_params(s).0)
        .unwrap_or_default();
    let more = own.iter().map(|a| opt(a.name, a.kind)).chain(spec);
    for p in more {
        if !table.iter().any(|t| t.name == p.name) {
            table.push(opt(p.name, p.kind));
        }
    }
    table
}

/// The admin commands `nvmf_set_config` may pass through (the CLI offers the same names).
pub const PASSTHRU: &[&str] = &[
    "identify_ctrlr",
    "identify_uuid_list",
    "get_log_page",
    "get_set_features",
    "sanitize",
    "security_send_recv",
    "fw_update",
    "nvme_mi",
    "vendor_specific",
];

/// Every DH-HMAC-CHAP digest SPDK knows (its default list).
pub(crate) const DIGESTS: &[&str] = &["sha256", "sha384", "sha512"];
/// Every DH-HMAC-CHAP DH group SPDK knows (its default list).
pub(crate) const DHGROUPS: &[&str] = &[
    "null",
    "ffdhe2048",
    "ffdhe3072",
    "ffdhe4096",
    "ffdhe6144",
    "ffdhe8192",
];

// ----- parameter structs -----

#[derive(Deserialize)]
struct TgtOnly {
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct GetTransports {
    tgt_name: Option<String>,
    trtype: Option<String>,
}

#[derive(Deserialize)]
struct CreateSubsystem {
    nqn: String,
    tgt_name: Option<String>,
    serial_number: Option<String>,
    model_number: Option<String>,
    admin_label: Option<String>,
    #[serde(default)]
    max_namespaces: u32,
    #[serde(default)]
    allow_any_host: bool,
    #[serde(default)]
    ana_reporting: bool,
    min_cntlid: Option<u16>,
    max_cntlid: Option<u16>,
    dmrsl: Option<u32>,
    wzsl: Option<u8>,
    #[serde(default)]
    passthrough: bool,
    #[serde(default)]
    enable_nssr: bool,
}

#[derive(Deserialize)]
struct Nqn {
    nqn: String,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct GetSubsystems {
    nqn: Option<String>,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct Address {
    trtype: String,
    adrfam: Option<String>,
    traddr: String,
    trsvcid: Option<String>,
}

impl Address {
    fn to_listen_addr(&self) -> RpcResult<ListenAddr> {
        let adrfam = match &self.adrfam {
            None => AdrFam::Ipv4,
            Some(a) => AdrFam::parse(a).ok_or_else(|| {
                RpcError::invalid_params(format!("Invalid adrfam '{a}' (ipv4, ipv6, ib or fc)"))
            })?,
        };
        if self.traddr.len() > 256 || self.trsvcid.as_ref().is_some_and(|s| s.len() > 32) {
            return Err(RpcError::invalid_params(
                "Invalid parameters: address too long",
            ));
        }
        Ok(ListenAddr::new(
            &self.trtype,
            adrfam,
            &self.traddr,
            self.trsvcid.as_deref().unwrap_or(""),
        ))
    }
}

#[derive(Deserialize)]
struct AddListener {
    nqn: String,
    listen_address: Address,
    tgt_name: Option<String>,
    #[serde(default)]
    secure_channel: bool,
    ana_state: Option<String>,
    numa_id: Option<i32>,
}

/// SPDK's listener parameter that belongs to a transport (TCP's socket implementation): it is
/// stored as a listener attribute when the listener's transport declares it, refused otherwise.
pub const SPDK_LISTENER_ATTRS: &[&str] = &["sock_impl"];

#[derive(Deserialize)]
struct SetAnaState {
    nqn: String,
    listen_address: Address,
    ana_state: String,
    anagrpid: Option<u32>,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct SetNsAnaGroup {
    nqn: String,
    nsid: u32,
    anagrpid: u32,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct RemoveListener {
    nqn: String,
    listen_address: Address,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct NsArg {
    bdev_name: String,
    #[serde(default)]
    nsid: u32,
    nguid: Option<String>,
    eui64: Option<String>,
    uuid: Option<String>,
    ptpl_file: Option<String>,
    #[serde(default)]
    anagrpid: u32,
    #[serde(default)]
    no_auto_visible: bool,
    #[serde(default)]
    hide_metadata: bool,
}

#[derive(Deserialize)]
struct AddNs {
    nqn: String,
    namespace: NsArg,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct RemoveNs {
    nqn: String,
    nsid: u32,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct AddHost {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    psk: Option<String>,
    dhchap_key: Option<String>,
    dhchap_ctrlr_key: Option<String>,
}

#[derive(Deserialize)]
struct SetKeys {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    dhchap_key: Option<String>,
    dhchap_ctrlr_key: Option<String>,
}

#[derive(Deserialize)]
struct RemoveHost {
    nqn: String,
    host: String,
    tgt_name: Option<String>,
    timeout_ms: Option<u64>,
}

#[derive(Deserialize)]
struct NsHost {
    nqn: String,
    nsid: u32,
    host: String,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct AllowAnyHost {
    nqn: String,
    allow_any_host: bool,
    tgt_name: Option<String>,
}

#[derive(Deserialize)]
struct MaxSubsystems {
    max_subsystems: u32,
}

#[derive(Deserialize)]
struct Crdt {
    #[serde(default)]
    crdt1: u16,
    #[serde(default)]
    crdt2: u16,
    #[serde(default)]
    crdt3: u16,
}

#[derive(Deserialize)]
struct Pause {
    nqn: String,
    nsid: Option<u32>,
    tgt_name: Option<String>,
}

// ----- registration -----

pub(crate) fn register(m: &mut Methods<TargetContext>) -> Result<(), RegisterError> {
    use Decode::{Relaxed, Strict};
    const R: StateMask = StateMask::RUNTIME;
    const S: StateMask = StateMask::STARTUP;

    m.register_async("nvmf_create_transport", R, create_transport)?;
    add(m, "nvmf_get_transports", R, Strict, get_transports)?;
    crate::request_check::record_fields::<CreateSubsystem>("nvmf_create_subsystem");
    m.register_async("nvmf_create_subsystem", R, |p, ctx| async move {
        let r = super::check_spec("nvmf_create_subsystem", Strict, &p)
            .and_then(|()| create_subsystem_params(&p));
        let r = match r {
            Ok((a, attrs)) => create_subsystem(a, attrs, ctx).await,
            Err(e) => Err(e),
        };
        r.inspect_err(|e| super::log_failure("nvmf_create_subsystem", e))
    })?;
    add(m, "nvmf_delete_subsystem", R, Strict, delete_subsystem)?;
    add(m, "nvmf_get_subsystems", R, Strict, get_subsystems)?;
    crate::request_check::record_fields::<AddListener>("nvmf_subsystem_add_listener");
    m.register_async("nvmf_subsystem_add_listener", R, |p, ctx| async move {
        let checked = super::check_spec("nvmf_subsystem_add_listener", Relaxed, &p);
        let r = match checked.and_then(|()| add_listener_params(&p)) {
            Ok((a, attrs)) => add_listener(a, attrs, ctx).await,
            Err(e) => Err(e),
        };
        r.inspect_err(|e| super::log_failure("nvmf_subsystem_add_listener", e))
    })?;
    add(
        m,
        "nvmf_subsystem_remove_listener",
        R,
        Strict,
        remove_listener,
    )?;
    add(m, "nvmf_subsystem_get_listeners", R, Strict, get_listeners)?;
    add(
        m,
        "nvmf_subsystem_listener_set_ana_state",
        R,
        Strict,
        set_ana_state,
    )?;
    add(
        m,
        "nvmf_subsystem_set_ns_ana_group",
        R,
        Strict,
        set_ns_ana_group,
    )?;
    add(m, "nvmf_subsystem_add_ns", R, Relaxed, add_ns)?;
    add(m, "nvmf_subsystem_remove_ns", R, Strict, remove_ns)?;
    add(m, "nvmf_subsystem_add_host", R, Relaxed, add_host)?;
    add(m, "nvmf_subsystem_set_keys", R, Strict, set_keys)?;
    add(m, "nvmf_subsystem_remove_host", R, Strict, remove_host)?;
    add(m, "nvmf_ns_add_host", R, Strict, ns_add_host)?;
    add(m, "nvmf_ns_remove_host", R, Strict, ns_remove_host)?;
    add(
        m,
        "nvmf_subsystem_allow_any_host",
        R,
        Strict,
        allow_any_host,
    )?;
    add(
        m,
        "nvmf_subsystem_get_controllers",
        R,
        Strict,
        get_controllers,
    )?;
    add(m, "nvmf_subsystem_get_qpairs", R, Strict, get_qpairs)?;
    add(m, "nvmf_get_stats", R, Strict, get_stats)?;
    add(m, "nvmf_subsystem_pause", R, Strict, pause)?;
    add(m, "nvmf_subsystem_resume", R, Strict, resume)?;
    m.register("nvmf_set_config", S, set_config)?;
    add(m, "nvmf_set_max_subsystems", S, Strict, set_max_subsystems)?;
    add(m, "nvmf_set_crdt", S, Strict, set_crdt)?;
    Ok(())
}

fn subsystem(ctx: &TargetContext, nqn: &str) -> RpcResult<Arc<Subsystem>> {
    ctx.target()
        .subsystem(nqn)
        .ok_or_else(|| RpcError::invalid_params(format!("Subsystem with NQN '{nqn}' not found")))
}

// ----- transports -----

async fn create_transport(p: crate::Params<'static>, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    let r = create_transport_inner(p, ctx).await;
    r.inspect_err(|e| super::log_failure("nvmf_create_transport", e))
}

async fn create_transport_inner(
    p: crate::Params<'static>,
    ctx: Arc<TargetContext>,
) -> RpcResult<bool> {
    let mut opts = super::params_object(&p, crate::params::DecodeFlavor::InvalidParams)?;
    let trtype = opts
        .get("trtype")
        .and_then(Value::as_str)
        .unwrap_or_default();
    check_params(&opts, &transport_options(trtype), true).map_err(|why| {
        tracing::warn!("nvmf_create_transport: {why}");
        RpcError::invalid_params(format!("Invalid parameters: {why}"))
    })?;
    let trtype = opts
        .remove("trtype")
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    let tgt_name = opts
        .remove("tgt_name")
        .and_then(|v| v.as_str().map(str::to_string));
    if tgt_name
        .as_deref()
        .is_some_and(|n| n != super::DEFAULT_TGT_NAME)
    {
        return Err(RpcError::internal("Unable to find a target."));
    }
    let params: TransportParams = opts;
    ctx.target()
        .create_transport(&trtype, &params)
        .await
        .map_err(nvmf_err)?;
    Ok(true)
}

async fn get_transports(a: GetTransports, ctx: Arc<TargetContext>) -> RpcResult<Vec<Value>> {
    check_tgt(&a.tgt_name)?;
    let t = ctx.target();
    match a.trtype {
        Some(name) => match t.transport(&name) {
            Some((_, tr)) => Ok(vec![Value::Object(tr.dump_opts())]),
            None => Err(RpcError::errno(
                libc::ENODEV,
                format!("Transport type '{name}' does not exist"),
            )),
        },
        None => Ok(t
            .transports()
            .iter()
            .map(|tr| Value::Object(tr.dump_opts()))
            .collect()),
    }
}

// ----- subsystems -----

/// Splits `nvmf_create_subsystem`'s parameters: the subsystem attributes transports declare
/// ([`TransportOps::subsystem_attrs`]), validated into their canonical form, and SPDK's
/// parameters, decoded strictly.
fn create_subsystem_params(p: &crate::Params<'_>) -> RpcResult<(CreateSubsystem, TransportAttrs)> {
    let mut given = super::params_object(p, crate::params::DecodeFlavor::InvalidParams)?;
    let mut attrs = TransportAttrs::new();
    for attr in registry::subsystem_attrs() {
        if let Some(v) = given.remove(attr.name) {
            let canonical = attr.validate(&v).map_err(RpcError::invalid_params)?;
            attrs.insert(attr.name.into(), canonical);
        }
    }
    let rest = Value::Object(given).to_string();
    let a = crate::params::strict(&crate::Params::new(Some(&rest)))?;
    Ok((a, attrs))
}

async fn create_subsystem(
    a: CreateSubsystem,
    transport_attrs: TransportAttrs,
    ctx: Arc<TargetContext>,
) -> RpcResult<bool> {
    if let Some(n) = &a.tgt_name
        && n != super::DEFAULT_TGT_NAME
    {
        return Err(RpcError::internal(format!("Unable to find target {n}")));
    }
    let unable =
        |why: String| RpcError::internal(format!("Unable to create subsystem {}: {why}", a.nqn));
    validate_nqn(&a.nqn).map_err(|e| unable(e.to_string()))?;
    if let Some(s) = &a.serial_number {
        validate_ascii_field("SN", s, 20).map_err(invalid)?;
    }
    if let Some(m) = &a.model_number {
        validate_ascii_field("MN", m, 40).map_err(invalid)?;
    }
    if let Some(l) = &a.admin_label
        && (l.len() < 4 || l.len() > 256 || !l.bytes().all(|b| (0x20..=0x7e).contains(&b)))
    {
        return Err(RpcError::invalid_params(format!(
            "Invalid admin_label '{}'",
            l.escape_default()
        )));
    }
    if a.passthrough {
        return Err(RpcError::invalid_params(format!(
            "Subsystem {}: passthrough subsystems need NVMe bdevs, which rtgt does not have",
            a.nqn
        )));
    }
    if let Some(d) = a.dmrsl.filter(|d| *d != DEFAULT_DMRSL) {
        return Err(not_supported(
            format_args!("dmrsl {d}"),
            "rtgt does not report a Dataset Management range size limit; only SPDK's default 2097152 is accepted",
        ));
    }
    if let Some(w) = a.wzsl.filter(|w| *w != DEFAULT_WZSL) {
        return Err(not_supported(
            format_args!("wzsl {w}"),
            "rtgt does not report a Write Zeroes size limit; only SPDK's default 12 is accepted",
        ));
    }
    if a.enable_nssr {
        return Err(not_supported(
            "enable_nssr true",
            "rtgt has no NVM subsystem reset",
        ));
    }
    let (min, max) = (a.min_cntlid.unwrap_or(1), a.max_cntlid.unwrap_or(0xffef));
    if min == 0 || min > max || max > 0xffef {
        return Err(RpcError::invalid_params(format!(
            "Invalid cntlid range [{min}-{max}]"
        )));
    }
    let mut p = SubsystemParams::new(&a.nqn);
    p.transport_attrs = transport_attrs;
    p.admin_label = a.admin_label;
    p.serial = a.serial_number;
    p.model = a.model_number;
    p.max_namespaces = a.max_namespaces;
    p.allow_any_host = a.allow_any_host;
    p.ana_reporting = a.ana_reporting;
    p.min_cntlid = min;
    p.max_cntlid = max;
    match ctx.target().create_subsystem(p).await {
        Ok(_) => Ok(true),
        Err(CoreError::Exists(m) | CoreError::NoResources(m) | CoreError::Invalid(m)) => {
            Err(RpcError::internal(m))
        }
        Err(e) => Err(RpcError::internal(e.to_string())),
    }
}

async fn delete_subsystem(a: Nqn, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    if a.nqn == DISCOVERY_NQN {
        return Err(RpcError::invalid_params(
            "The discovery subsystem cannot be deleted",
        ));
    }
    ctx.target()
        .delete_subsystem(&a.nqn)
        .await
        .map_err(nvmf_err)?;
    Ok(true)
}

/// SPDK's address object: `{trtype, adrfam, traddr, trsvcid}`.
pub(crate) fn address_json(a: &ListenAddr) -> Value {
    json!({
        "trtype": a.trtype,
        "adrfam": a.adrfam.as_str(),
        "traddr": a.traddr,
        "trsvcid": a.trsvcid,
    })
}

/// One `nvmf_get_subsystems` entry in SPDK's shape, plus the subsystem's `state`.
pub(crate) fn subsystem_json(sub: &Subsystem) -> Value {
    let c = sub.config();
    let mut o = Map::new();
    o.insert("nqn".into(), json!(sub.nqn()));
    o.insert(
        "subtype".into(),
        json!(match sub.kind() {
            SubsystemType::Nvme => "NVMe",
            SubsystemType::Discovery => "Discovery",
        }),
    );
    o.insert("state".into(), json!(sub.state().as_str()));
    o.insert(
        "listen_addresses".into(),
        Value::Array(c.listeners.iter().map(address_json).collect()),
    );
    o.insert("allow_any_host".into(), json!(c.allow_any_host));
    o.insert(
        "hosts".into(),
        Value::Array(
            c.hosts
                .iter()
                .map(|h| {
                    let mut v = json!({"nqn": h});
                    if let Some(k) = c.host_keys.get(h) {
                        v["dhchap_key"] = json!(k.key_name);
                        if let Some(n) = &k.ctrlr_key_name {
                            v["dhchap_ctrlr_key"] = json!(n);
                        }
                    }
                    v
                })
                .collect(),
        ),
    );
    if sub.kind() == SubsystemType::Nvme {
        o.insert("serial_number".into(), json!(c.serial));
        o.insert("model_number".into(), json!(c.model));
        for attr in registry::subsystem_attrs() {
            let shown = match c.transport_attrs.get(attr.name) {
                Some(v) => Some(v.clone()),
                None => attr.shown_unset.map(|f| f(sub.nqn())),
            };
            if let Some(v) = shown {
                o.insert(attr.name.into(), v);
            }
        }
        if let Some(l) = &c.admin_label {
            o.insert("admin_label".into(), json!(l));
        }
        if c.max_namespaces != 0 {
            o.insert("max_namespaces".into(), json!(c.max_namespaces));
        }
        o.insert("passthrough".into(), json!(false));
        o.insert("min_cntlid".into(), json!(c.min_cntlid));
        o.insert("max_cntlid".into(), json!(c.max_cntlid));
        o.insert("dmrsl".into(), json!(DEFAULT_DMRSL));
        o.insert("wzsl".into(), json!(DEFAULT_WZSL));
        let ns: Vec<Value> = c
            .namespaces
            .values()
            .map(|n| {
                let mut v = json!({
                    "nsid": n.nsid,
                    "bdev_name": n.bdev_name,
                    "name": n.bdev_name,
                    "nguid": hex_upper(&n.nguid),
                });
                if let Some(obj) = v.as_object_mut() {
                    if let Some(e) = n.eui64 {
                        obj.insert("eui64".into(), json!(hex_upper(&e)));
                    }
                    obj.insert("uuid".into(), json!(n.uuid.to_string()));
                    if c.ana_reporting {
                        obj.insert("anagrpid".into(), json!(n.anagrpid));
                    }
                }
                v
            })
            .collect();
        o.insert("namespaces".into(), Value::Array(ns));
    }
    Value::Object(o)
}

async fn get_subsystems(a: GetSubsystems, ctx: Arc<TargetContext>) -> RpcResult<Vec<Value>> {
    check_tgt(&a.tgt_name)?;
    match a.nqn {
        Some(nqn) => {
            let sub = subsystem(&ctx, &nqn)?;
            Ok(vec![subsystem_json(&sub)])
        }
        None => Ok(ctx
            .target()
            .subsystems()
            .iter()
            .map(|s| subsystem_json(s))
            .collect()),
    }
}

// ----- listeners -----

/// Splits `nvmf_subsystem_add_listener`'s parameters: SPDK's, decoded relaxed (unknown
/// top-level keys are ignored, as SPDK does), and the listener attributes transports declare
/// ([`TransportOps::listener_attrs`]), kept raw until the transport is known.
fn add_listener_params(p: &crate::Params<'_>) -> RpcResult<(AddListener, TransportAttrs)> {
    let given = super::params_object(p, crate::params::DecodeFlavor::InvalidParams)?;
    let attrs = given
        .into_iter()
        .filter(|(k, _)| SPDK_LISTENER_ATTRS.contains(&k.as_str()) || registry::is_listener_attr(k))
        .collect();
    let a = crate::params::relaxed(p)?;
    Ok((a, attrs))
}

/// Validates the listener attributes given for a listener of transport `trtype`: each must be
/// one the transport declares.
fn listener_attrs(trtype: &str, given: TransportAttrs) -> RpcResult<TransportAttrs> {
    let declared: &[_] = registry::find(trtype).map_or(&[], |t: &TransportOps| t.listener_attrs);
    let mut attrs = TransportAttrs::new();
    for (k, v) in given {
        let Some(attr) = declared.iter().find(|a| a.name == k) else {
            return Err(not_supported(
                format_args!("{k} {v}"),
                &format!("{trtype} listeners have no attribute '{k}'"),
            ));
        };
        attrs.insert(k, attr.validate(&v).map_err(RpcError::invalid_params)?);
    }
    Ok(attrs)
}

async fn add_listener(
    a: AddListener,
    attrs: TransportAttrs,
    ctx: Arc<TargetContext>,
) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    let sub = subsystem(&ctx, &a.nqn)?;
    let mut addr = a.listen_address.to_listen_addr()?;
    addr.attrs = listener_attrs(&addr.trtype, attrs)?;
    if let Some(n) = a.numa_id.filter(|n| *n != -1) {
        return Err(not_supported(
            format_args!("numa_id {n}"),
            "rtgt does not place listeners on NUMA nodes (SPDK uses it for vfio-user); only -1 (any) is accepted",
        ));
    }
    if a.secure_channel {
        if sub.with_config(|c| c.allow_any_host) {
            return Err(RpcError::internal(
                "Cannot establish secure channel, when 'allow_any_host' is set",
            ));
        }
        return Err(not_supported(
            "secure_channel true",
            &format!("{} listeners have no TLS", addr.trtype),
        ));
    }
    let ana_state = a.ana_state.as_deref().map(parse_ana_state).transpose()?;
    ctx.target()
        .add_listener_ana(&a.nqn, addr, ana_state)
        .await
        .map_err(invalid)?;
    Ok(true)
}

/// SPDK's settable ANA states (`change` and `persistent_loss` are not settable over RPC).
fn parse_ana_state(s: &str) -> RpcResult<AnaState> {
    match s {
        "optimized" => Ok(AnaState::Optimized),
        "non_optimized" => Ok(AnaState::NonOptimized),
        "inaccessible" => Ok(AnaState::Inaccessible),
        _ => Err(RpcError::invalid_params(format!(
            "Invalid ana_state '{}' (optimized, non_optimized or inaccessible)",
            s.escape_default()
        ))),
    }
}

async fn set_ana_state(a: SetAnaState, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    let addr = a.listen_address.to_listen_addr()?;
    let state = parse_ana_state(&a.ana_state)?;
    ctx.target()
        .set_listener_ana_state(&a.nqn, &addr, state, a.anagrpid)
        .await
        .map_err(invalid)?;
    Ok(true)
}

async fn set_ns_ana_group(a: SetNsAnaGroup, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    ctx.target()
        .set_ns_ana_group(&a.nqn, a.nsid, a.anagrpid)
        .await
        .map_err(invalid)?;
    Ok(true)
}

async fn remove_listener(a: RemoveListener, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    let addr = a.listen_address.to_listen_addr()?;
    ctx.target()
        .remove_listener(&a.nqn, addr)
        .await
        .map_err(nvmf_err)?;
    Ok(true)
}

async fn get_listeners(a: Nqn, ctx: Arc<TargetContext>) -> RpcResult<Vec<Value>> {
    check_tgt(&a.tgt_name)?;
    let sub = subsystem(&ctx, &a.nqn)?;
    let c = sub.config();
    Ok(c.listeners
        .iter()
        .map(|l| {
            let mut v = json!({"address": address_json(l)});
            if let Some(o) = v.as_object_mut() {
                o.extend(l.attrs.clone());
            }
            if let Some(ana) = &c.ana
                && let Some(o) = v.as_object_mut()
            {
                // Every listener is in the model (SRP ones as SCSI target ports).
                let states: Vec<(u32, AnaState)> = ana
                    .id_of(l)
                    .and_then(|id| ana.model.ana_states(id))
                    .unwrap_or_else(|| {
                        (1..=c.ns_limit())
                            .map(|g| (g, AnaState::Optimized))
                            .collect()
                    });
                let states: Vec<Value> = states
                    .into_iter()
                    .map(|(g, s)| json!({"ana_group": g, "ana_state": s.name()}))
                    .collect();
                o.insert("ana_states".into(), Value::Array(states));
            }
            v
        })
        .collect())
}

// ----- namespaces -----

async fn add_ns(a: AddNs, ctx: Arc<TargetContext>) -> RpcResult<u32> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    let n = a.namespace;
    // hide_metadata holds by construction: rtgt's bdevs have no metadata to expose.
    let _ = n.hide_metadata;
    let nguid = match &n.nguid {
        None => None,
        Some(s) => {
            Some(parse_hex::<16>(s).ok_or_else(|| RpcError::invalid_params("Invalid nguid"))?)
        }
    };
    let eui64 = match &n.eui64 {
        None => None,
        Some(s) => {
            Some(parse_hex::<8>(s).ok_or_else(|| RpcError::invalid_params("Invalid eui64"))?)
        }
    };
    let uuid = match &n.uuid {
        None => None,
        Some(s) => Some(parse_uuid(s).ok_or_else(|| RpcError::invalid_params("Invalid uuid"))?),
    };
    let nsid = ctx
        .target()
        .add_namespace(
            &a.nqn,
            NsParams {
                bdev_name: n.bdev_name,
                nsid: n.nsid,
                nguid,
                eui64,
                uuid,
                anagrpid: n.anagrpid,
                no_auto_visible: n.no_auto_visible,
                ptpl_file: n.ptpl_file,
            },
        )
        .await
        .map_err(|e| match e {
            CoreError::Internal(m) => RpcError::internal(m),
            other => invalid(other),
        })?;
    Ok(nsid)
}

async fn remove_ns(a: RemoveNs, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    ctx.target()
        .remove_namespace(&a.nqn, a.nsid)
        .await
        .map_err(nvmf_err)?;
    Ok(true)
}

/// `nvmf_ns_add_host` / `nvmf_ns_remove_host`: per-host visibility of a namespace added with
/// `no_auto_visible` (docs/security.md). Errors are SPDK's -32602.
async fn ns_visibility(a: NsHost, ctx: Arc<TargetContext>, visible: bool) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    ctx.target()
        .set_ns_host_visible(&a.nqn, a.nsid, &a.host, visible)
        .await
        .map_err(|e| match e {
            CoreError::Internal(m) => RpcError::internal(m),
            other => RpcError::invalid_params(other.to_string()),
        })?;
    Ok(true)
}

async fn ns_add_host(a: NsHost, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    ns_visibility(a, ctx, true).await
}

async fn ns_remove_host(a: NsHost, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    ns_visibility(a, ctx, false).await
}

// ----- hosts -----

async fn add_host(a: AddHost, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    if let Some(psk) = &a.psk {
        return Err(RpcError::invalid_params(format!(
            "Host {}: TLS PSK '{psk}' cannot be used: rtgt has no TLS transport",
            a.host
        )));
    }
    let keys = dhchap_keys(&ctx, &a.host, &a.dhchap_key, &a.dhchap_ctrlr_key)?;
    ctx.target()
        .add_host_keyed(&a.nqn, &a.host, keys)
        .map_err(internal)?;
    Ok(true)
}

/// The DH-HMAC-CHAP keys named by `dhchap_key` / `dhchap_ctrlr_key`, read from their keyring
/// files. Errors name the key, never its content.
fn dhchap_keys(
    ctx: &TargetContext,
    host: &str,
    key: &Option<String>,
    ctrlr_key: &Option<String>,
) -> RpcResult<Option<HostDhchap>> {
    for name in [key, ctrlr_key].into_iter().flatten() {
        if !super::keyring::key_exists(ctx, name) {
            return Err(RpcError::invalid_params(format!(
                "Key '{name}' does not exist"
            )));
        }
    }
    if ctrlr_key.is_some() && key.is_none() {
        return Err(RpcError::invalid_params(
            "dhchap_ctrlr_key requires dhchap_key",
        ));
    }
    let Some(key_name) = key else {
        return Ok(None);
    };
    let read = |name: &str| {
        super::keyring::read_dhchap_secret(ctx, name).map_err(|why| {
            tracing::warn!("host {host}: DH-HMAC-CHAP key '{name}' unusable: {why}");
            RpcError::invalid_params(format!(
                "Key '{name}' is not a usable DH-HMAC-CHAP secret: {why}"
            ))
        })
    };
    let host_key = read(key_name)?;
    let ctrl = match ctrlr_key {
        Some(n) => Some(read(n)?),
        None => None,
    };
    Ok(Some(HostDhchap {
        key_name: key_name.clone(),
        ctrlr_key_name: ctrlr_key.clone(),
        keys: HostKeys {
            host: host_key,
            ctrl,
        },
    }))
}

/// `nvmf_subsystem_set_keys`: replaces the DH-HMAC-CHAP keys of an allowed host (both; an
/// absent `dhchap_key` means the host no longer authenticates, as in SPDK). Connected queues
/// stay; the keys apply to the next (re-)authentication.
async fn set_keys(a: SetKeys, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    let keys = dhchap_keys(&ctx, &a.host, &a.dhchap_key, &a.dhchap_ctrlr_key)?;
    ctx.target()
        .set_host_keys(&a.nqn, &a.host, keys)
        .map_err(internal)?;
    Ok(true)
}

async fn remove_host(a: RemoveHost, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    let fut = ctx.target().remove_host(&a.nqn, &a.host);
    match a.timeout_ms {
        Some(ms) => tokio::time::timeout(std::time::Duration::from_millis(ms), fut)
            .await
            .map_err(|_| RpcError::internal("Timeout reached during host removal"))?,
        None => fut.await,
    }
    .map_err(internal)?;
    Ok(true)
}

async fn allow_any_host(a: AllowAnyHost, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    ctx.target()
        .allow_any_host(&a.nqn, a.allow_any_host)
        .await
        .map_err(internal)?;
    Ok(true)
}

// ----- introspection -----

async fn get_controllers(a: Nqn, ctx: Arc<TargetContext>) -> RpcResult<Vec<Value>> {
    check_tgt(&a.tgt_name)?;
    let sub = subsystem(&ctx, &a.nqn)?;
    Ok(sub
        .controllers()
        .iter()
        .map(|c| {
            json!({
                "cntlid": c.cntlid,
                "cntrltype": c.cntrltype,
                "hostnqn": c.hostnqn,
                "hostid": c.hostid,
                "num_io_qpairs": c.num_io_qpairs,
                "trtype": c.transport,
            })
        })
        .collect())
}

async fn get_qpairs(a: Nqn, ctx: Arc<TargetContext>) -> RpcResult<Vec<Value>> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    ctx.target().qpairs(&a.nqn).await.map_err(nvmf_err)
}

async fn get_stats(a: TgtOnly, ctx: Arc<TargetContext>) -> RpcResult<Value> {
    if a.tgt_name
        .as_deref()
        .is_some_and(|n| n != super::DEFAULT_TGT_NAME)
    {
        return Err(RpcError::internal("Unable to find a target."));
    }
    Ok(ctx.target().stats().await)
}

// ----- pause / resume (rtgt extensions) -----

async fn pause(a: Pause, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    if a.nsid == Some(0) {
        return Err(RpcError::invalid_params(
            "nsid 0 is not a namespace; omit nsid to pause every namespace",
        ));
    }
    ctx.target().pause(&a.nqn, a.nsid).await.map_err(nvmf_err)?;
    Ok(true)
}

async fn resume(a: Nqn, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    check_tgt(&a.tgt_name)?;
    subsystem(&ctx, &a.nqn)?;
    ctx.target().resume(&a.nqn).await.map_err(nvmf_err)?;
    Ok(true)
}

// ----- target settings (STARTUP) -----

/// The `nvmf_set_config` values in effect when nothing was set (SPDK's defaults).
pub(crate) fn default_nvmf_config() -> Map<String, Value> {
    let passthru: Map<String, Value> = PASSTHRU
        .iter()
        .map(|k| ((*k).to_string(), Value::Bool(false)))
        .collect();
    let mut m = Map::new();
    m.insert("discovery_filters".into(), json!([]));
    m.insert("admin_cmd_passthru".into(), Value::Object(passthru));
    m.insert("dhchap_digests".into(), json!(DIGESTS));
    m.insert("dhchap_dhgroups".into(), json!(DHGROUPS));
    m.insert("dup_host_policy".into(), json!("allow"));
    m
}

/// The effective `nvmf_set_config` parameters, in the order save_config prints them.
pub(crate) fn effective_nvmf_config(ctx: &TargetContext) -> Map<String, Value> {
    let set = ctx.target().settings().nvmf_config;
    let mut out = Map::new();
    let defaults = default_nvmf_config();
    for key in [
        "discovery_filters",
        "admin_cmd_passthru",
        "poll_groups_mask",
        "dhchap_digests",
        "dhchap_dhgroups",
        "dup_host_policy",
    ] {
        if let Some(v) = set.get(key).or_else(|| defaults.get(key)) {
            out.insert(key.into(), v.clone());
        }
    }
    out
}

const DISCOVERY_FILTERS_WHY: &str = "rtgt's discovery log lists every listener of every subsystem the host may use; only 'match_any' (SPDK's default) is accepted";

fn list_within(v: &Value, allowed: &[&str], what: &str) -> Result<(), String> {
    for s in v.as_array().into_iter().flatten() {
        let s = s.as_str().unwrap_or_default();
        if !allowed.contains(&s) {
            return Err(format!("invalid {what} '{s}'"));
        }
    }
    Ok(())
}

fn set_config(p: crate::Params<'_>, ctx: &TargetContext) -> RpcResult<bool> {
    set_config_inner(&p, ctx).inspect_err(|e| super::log_failure("nvmf_set_config", e))
}

fn set_config_inner(p: &crate::Params<'_>, ctx: &TargetContext) -> RpcResult<bool> {
    let given = super::params_object(p, crate::params::DecodeFlavor::InvalidParams)?;
    let bad = |why: String| {
        tracing::warn!("nvmf_set_config: {why}");
        RpcError::invalid_params(format!("Invalid parameters: {why}"))
    };
    let spec = super::specs::find("nvmf_set_config").ok_or_else(RpcError::internal_default)?;
    check_params(&given, &crate::request_check::request_params(spec).0, false).map_err(bad)?;
    if given.contains_key("discovery_filter") && given.contains_key("discovery_filters") {
        return Err(bad(
            "discovery_filter and discovery_filters are exclusive".into()
        ));
    }
    let mut cfg = effective_nvmf_config(ctx);
    for (k, v) in given {
        match k.as_str() {
            "admin_cmd_passthru" => {
                if let Some((cmd, _)) = v
                    .as_object()
                    .into_iter()
                    .flatten()
                    .find(|(_, on)| on.as_bool() == Some(true))
                {
                    return Err(not_supported(
                        format_args!("admin_cmd_passthru.{cmd} true"),
                        "rtgt passes no admin command through (it has no NVMe bdevs)",
                    ));
                }
            }
            "discovery_filter" => {
                // Deprecated form: "match_any" or a comma list of transport/address/svcid.
                let text = v.as_str().unwrap_or_default();
                for f in text.split(',').map(str::trim) {
                    match f {
                        "match_any" => {}
                        "transport" | "address" | "svcid" => {
                            return Err(not_supported(
                                format_args!("discovery filter '{f}'"),
                                DISCOVERY_FILTERS_WHY,
                            ));
                        }
                        other => return Err(bad(format!("invalid discovery filter '{other}'"))),
                    }
                }
            }
            "discovery_filters" => {
                list_within(
                    &v,
                    &["match_any", "transport", "address", "svcid"],
                    "discovery filter",
                )
                .map_err(bad)?;
                if let Some(f) = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .find(|f| f.as_str() != Some("match_any"))
                {
                    return Err(not_supported(
                        format_args!("discovery filter {f}"),
                        DISCOVERY_FILTERS_WHY,
                    ));
                }
            }
            "dhchap_digests" | "dhchap_dhgroups" => {
                let all = if k == "dhchap_digests" {
                    DIGESTS
                } else {
                    DHGROUPS
                };
                list_within(&v, all, "DH-HMAC-CHAP digest or DH group").map_err(bad)?;
                let names: Vec<&str> = v
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                if names.is_empty() {
                    return Err(bad(format!("{k} must name at least one")));
                }
                cfg.insert(k, v.clone());
            }
            "dup_host_policy" => match v.as_str() {
                Some("allow") => {}
                Some("restrict_per_listener") => {
                    return Err(not_supported(
                        "dup_host_policy 'restrict_per_listener'",
                        "rtgt lets a host NQN connect through any number of listeners; only 'allow' (SPDK's default) is accepted",
                    ));
                }
                _ => return Err(bad(format!("invalid dup_host_policy {v}"))),
            },
            "poll_groups_mask" => {
                let text = v.as_str().unwrap_or_default();
                let cores = parse_cpumask(text).map_err(bad)?;
                let mut ours: Vec<usize> = ctx
                    .target()
                    .reactors()
                    .info()
                    .iter()
                    .map(|r| r.core.unwrap_or(r.index))
                    .collect();
                ours.sort_unstable();
                if let Some(c) = cores.iter().find(|c| !ours.contains(c)) {
                    return Err(bad(format!(
                        "poll_groups_mask '{text}' names core {c}, outside the reactor mask"
                    )));
                }
                if cores.len() != ours.len() {
                    return Err(not_supported(
                        format_args!("poll_groups_mask '{text}'"),
                        &format!(
                            "rtgt runs a poll group on every reactor; the mask must name all of them ({})",
                            format_cpumask(&ours)
                        ),
                    ));
                }
                cfg.insert(k, v);
            }
            _ => {
                cfg.insert(k, v);
            }
        }
    }
    let policy = auth_policy(&cfg).map_err(bad)?;
    ctx.target().update_settings(|s| {
        s.nvmf_config = cfg;
        s.auth_policy = policy;
    });
    Ok(true)
}

/// The DH-HMAC-CHAP offer of an effective `nvmf_set_config`.
fn auth_policy(cfg: &Map<String, Value>) -> Result<AuthPolicy, String> {
    let names = |k: &str| -> Vec<String> {
        cfg.get(k)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect()
    };
    let mut digests = Vec::new();
    for n in names("dhchap_digests") {
        digests.push(Digest::from_name(&n).ok_or_else(|| format!("invalid digest '{n}'"))?);
    }
    let mut groups = Vec::new();
    for n in names("dhchap_dhgroups") {
        groups.push(DhGroup::from_name(&n).ok_or_else(|| format!("invalid DH group '{n}'"))?);
    }
    Ok(AuthPolicy {
        digests: DigestSet::of(&digests),
        dhgroups: DhGroupSet::of(&groups),
    })
}

async fn set_max_subsystems(a: MaxSubsystems, ctx: Arc<TargetContext>) -> RpcResult<bool> {
    let existing = ctx.target().subsystems().len() as u32;
    ctx.target().update_settings(|s| {
        if s.max_subsystems_set {
            return Err(RpcError::internal("Must not call more than once"));
        }
        if a.max_subsystems == 0 || a.max_subsystems < existing {
            return Err(RpcError::invalid_params(format!(
                "max_subsystems {} is below the {existing} subsystem(s) that exist",
                a.max_subsystems
            )));
        }
        s.max_subsystems = a.max_subsystems;
        s.max_subsystems_set = true;
        Ok(true)
    })
}

/// SPDK's command retry delay times tell hosts how long to wait before retrying a command
/// completed with a Command Retry Delay; rtgt never asks for a delay, so only zeros (SPDK's
/// default, which save_config writes) are accepted.
async fn set_crdt(a: Crdt, _ctx: Arc<TargetContext>) -> RpcResult<bool> {
    if let Some((k, v)) = [("crdt1", a.crdt1), ("crdt2", a.crdt2), ("crdt3", a.crdt3)]
        .into_iter()
        .find(|(_, v)| *v != 0)
    {
        return Err(not_supported(
            format_args!("{k} {v}"),
            "rtgt never completes a command with a retry delay; only SPDK's default 0 is accepted",
        ));
    }
    Ok(true)
}

/// The `nvmf_subsystem_add_listener` call that recreates listener `l` of subsystem `nqn`, with
/// its transport's attributes.
fn add_listener_call(nqn: &str, l: &ListenAddr) -> Value {
    let mut p = Map::new();
    p.insert("nqn".into(), json!(nqn));
    p.insert("listen_address".into(), address_json(l));
    p.insert("secure_channel".into(), json!(false));
    p.extend(l.attrs.clone());
    json!({"method": "nvmf_subsystem_add_listener", "params": p})
}

/// The `nvmf` subsystem's configuration in SPDK HEAD's order: target settings, transports,
/// then all subsystems, all hosts, all namespaces, and the listeners last (so that no host can
/// connect to a half-built subsystem). With `with_batches`, each of the last four groups is
/// one array (a JSON-RPC batch).
pub(crate) fn nvmf_config(ctx: &TargetContext, with_batches: bool) -> Vec<Value> {
    let t = ctx.target();
    let settings = t.settings();
    let mut out = vec![
        json!({"method": "nvmf_set_config", "params": effective_nvmf_config(ctx)}),
        json!({"method": "nvmf_set_max_subsystems",
               "params": {"max_subsystems": settings.max_subsystems}}),
        json!({"method": "nvmf_set_crdt", "params": {"crdt1": 0, "crdt2": 0, "crdt3": 0}}),
    ];
    for tr in t.transports() {
        out.push(json!({"method": "nvmf_create_transport", "params": tr.dump_opts()}));
    }
    let subs: Vec<Arc<Subsystem>> = t
        .subsystems()
        .into_iter()
        .filter(|s| s.kind() == SubsystemType::Nvme)
        .collect();
    let (mut creates, mut hosts, mut nss, mut listeners) = (vec![], vec![], vec![], vec![]);
    let mut ns_hosts = vec![];
    for s in &subs {
        let c = s.config();
        let mut p = Map::new();
        p.insert("nqn".into(), json!(s.nqn()));
        p.insert("allow_any_host".into(), json!(c.allow_any_host));
        p.insert("serial_number".into(), json!(c.serial));
        p.insert("model_number".into(), json!(c.model));
        if c.max_namespaces != 0 {
            p.insert("max_namespaces".into(), json!(c.max_namespaces));
        }
        p.insert("min_cntlid".into(), json!(c.min_cntlid));
        p.insert("max_cntlid".into(), json!(c.max_cntlid));
        p.insert("ana_reporting".into(), json!(c.ana_reporting));
        p.insert("dmrsl".into(), json!(DEFAULT_DMRSL));
        p.insert("wzsl".into(), json!(DEFAULT_WZSL));
        p.insert("passthrough".into(), json!(false));
        p.insert("enable_nssr".into(), json!(false));
        if let Some(l) = &c.admin_label {
            p.insert("admin_label".into(), json!(l));
        }
        p.extend(c.transport_attrs.clone());
        creates.push(json!({"method": "nvmf_create_subsystem", "params": p}));
        for h in &c.hosts {
            let mut p = Map::new();
            p.insert("nqn".into(), json!(s.nqn()));
            p.insert("host".into(), json!(h));
            if let Some(k) = c.host_keys.get(h) {
                p.insert("dhchap_key".into(), json!(k.key_name));
                if let Some(n) = &k.ctrlr_key_name {
                    p.insert("dhchap_ctrlr_key".into(), json!(n));
                }
            }
            hosts.push(json!({"method": "nvmf_subsystem_add_host", "params": p}));
        }
        for n in c.namespaces.values() {
            let mut ns = Map::new();
            ns.insert("nsid".into(), json!(n.nsid));
            ns.insert("bdev_name".into(), json!(n.bdev_name));
            if let Some(f) = &n.ptpl_file {
                ns.insert("ptpl_file".into(), json!(f));
            }
            ns.insert("nguid".into(), json!(hex_upper(&n.nguid)));
            if let Some(e) = n.eui64 {
                ns.insert("eui64".into(), json!(hex_upper(&e)));
            }
            ns.insert("uuid".into(), json!(n.uuid.to_string()));
            if c.ana_reporting {
                ns.insert("anagrpid".into(), json!(n.anagrpid));
            }
            ns.insert("no_auto_visible".into(), json!(n.no_auto_visible));
            nss.push(json!({"method": "nvmf_subsystem_add_ns",
                            "params": {"nqn": s.nqn(), "namespace": ns}}));
            for h in &n.visible_hosts {
                ns_hosts.push(json!({"method": "nvmf_ns_add_host",
                                     "params": {"nqn": s.nqn(), "nsid": n.nsid, "host": h}}));
            }
        }
        for l in &c.listeners {
            let mut call = add_listener_call(s.nqn(), l);
            let saved = c.ana.as_ref().and_then(|a| a.model.saved(a.id_of(l)?));
            if let Some(saved) = saved {
                // The state most groups have comes up with the listener, atomically; one
                // set_ana_state per group that differs follows it.
                call["params"]["ana_state"] = json!(saved.base.name());
                listeners.push(call);
                for (g, st) in saved.exceptions {
                    listeners.push(json!({"method": "nvmf_subsystem_listener_set_ana_state",
                        "params": {"nqn": s.nqn(), "listen_address": address_json(l),
                                   "ana_state": st.name(), "anagrpid": g}}));
                }
            } else {
                listeners.push(call);
            }
        }
    }
    // Listeners of the discovery subsystem, too, come last.
    if let Some(d) = t.subsystem(DISCOVERY_NQN) {
        for l in &d.config().listeners {
            listeners.push(add_listener_call(DISCOVERY_NQN, l));
        }
    }
    // SPDK's order: namespaces, then who sees them, then listeners (no host connects to a
    // namespace before it is hidden from it).
    for group in [creates, hosts, nss, ns_hosts, listeners] {
        if with_batches {
            out.push(Value::Array(group));
        } else {
            out.extend(group);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_default_to_ipv4_and_upper_case_trtype() {
        let a = Address {
            trtype: "rdma".into(),
            adrfam: None,
            traddr: "10.0.0.1".into(),
            trsvcid: Some("4420".into()),
        };
        let l = a.to_listen_addr().unwrap();
        assert_eq!(
            address_json(&l),
            json!({"trtype":"RDMA","adrfam":"IPv4","traddr":"10.0.0.1","trsvcid":"4420"})
        );
        let bad = Address {
            adrfam: Some("ipx".into()),
            ..a
        };
        assert_eq!(bad.to_listen_addr().unwrap_err().code, -32602);
    }

    #[test]
    fn transport_options_are_type_checked_but_relaxed() {
        let m = |v: Value| v.as_object().unwrap().clone();
        let t = transport_options("RDMA");
        let ok = m(json!({"trtype":"RDMA","io_unit_size":8192,"c2h_success":true,"srp_only":1}));
        assert!(check_params(&ok, &t, true).is_ok());
        let bad = m(json!({"trtype":"RDMA","max_queue_depth":70000}));
        assert!(check_params(&bad, &t, true).is_err());
        let missing = m(json!({"max_queue_depth":128}));
        assert!(check_params(&missing, &t, true).is_err());
    }

    #[test]
    fn default_set_config_matches_spdk_shape() {
        let d = default_nvmf_config();
        assert_eq!(d["admin_cmd_passthru"].as_object().unwrap().len(), 9);
        assert_eq!(d["dup_host_policy"], "allow");
        assert_eq!(d["discovery_filters"], json!([]));
    }
}
