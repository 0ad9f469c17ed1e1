//! SRP port identifiers as operators see them: the target port id of a subsystem, and the
//! initiator port id forms accepted in a subsystem's allowed hosts.
//!
//! # Target port ids
//!
//! A subsystem is an SRP target port. Its 16-byte target port identifier is `id_ext` (bytes
//! 0..8) followed by `ioc_guid` (bytes 8..16), the two values an initiator passes to ib_srp's
//! `add_target` (`id_ext=…,ioc_guid=…,dest=IP:PORT`).
//!
//! - **Set explicitly** with the subsystem's `srp_port_id` (one of its
//!   `SubsystemConfig::transport_attrs`, which this crate declares as [`SRP_PORT_ID`]), given
//!   at creation: `nvmf_create_subsystem` takes an optional `srp_port_id`, either
//!   `"0x<32 hex digits>"` or `"<id_ext>:<ioc_guid>"` (16 hex digits each;
//!   [`parse_target_port_id`] reads the accepted forms).
//! - **Derived** otherwise, from the NQN alone, so it is stable across restarts and identical
//!   on every target that exports the same NQN: `G = 0x02 << 56 | (FNV-1a-64(NQN) & (2^56 - 1))`
//!   and `id_ext = ioc_guid = G` (ib_srpt also uses one GUID for both halves). The first byte
//!   0x02 marks a locally administered EUI-64, so the value never carries the Topspin/Cisco
//!   OUIs for which ib_srp changes its initiator id.
//!
//! # Initiator port ids in allowed hosts
//!
//! `nvmf_subsystem_add_host` takes, for SRP, any of the names LIO accepts for an ACL:
//! - the full initiator port id, `0x` + 32 hex digits (or the 32 digits alone), e.g.
//!   `0x00000000000000005254001234567890` — ib_srp's default is 8 zero bytes followed by the
//!   port GUID (with RDMA CM on RoCE: the low 64 bits of the port's GID);
//! - the port GUID alone, `xxxx:xxxx:xxxx:xxxx` (bytes 8..16 of the id);
//! - the initiator's IP address as RDMA CM reports the peer.
//!
//! Comparisons ignore case. Sessions are listed with the canonical `0x…` form.
//!
//! `nvmf_get_subsystems` shows every NVM subsystem's effective `srp_port_id` (explicit or
//! derived), and `save_config` keeps an explicit one.

use std::net::IpAddr;

use serde_json::Value;
use target_core::registry::{JsonType, TransportAttr, TransportAttrs};

use crate::proto::PortId;

/// The subsystem attribute SRP declares: `srp_port_id` of `nvmf_create_subsystem`, stored in
/// canonical form (`0x` + 32 hex digits), shown by `nvmf_get_subsystems` (the derived id when
/// none is set) and saved when set.
pub const SRP_PORT_ID: TransportAttr = TransportAttr {
    name: ATTR,
    kind: JsonType::Str,
    help: "SRP target port id: 0x + 32 hex digits, or id_ext:ioc_guid (default: derived from the NQN)",
    long: Some("srp-port-id"),
    parse: parse_attr,
    shown_unset: Some(shown_unset),
};

/// The name of the attribute.
pub const ATTR: &str = "srp_port_id";

fn parse_attr(v: &Value) -> Result<Value, String> {
    let text = v.as_str().unwrap_or_default();
    parse_target_port_id(text)
        .map(|id| Value::String(format_target_port_id(id)))
        .ok_or_else(|| "0x + 32 hex digits, or id_ext:ioc_guid, is expected".to_string())
}

fn shown_unset(nqn: &str) -> Value {
    let g = derived_guid(nqn);
    Value::String(format_target_port_id((g, g)))
}

/// The explicit target port id `(id_ext, ioc_guid)` among a subsystem's transport attributes.
pub fn explicit_target_port_id(attrs: &TransportAttrs) -> Option<(u64, u64)> {
    attrs
        .get(ATTR)
        .and_then(Value::as_str)
        .and_then(parse_target_port_id)
}

/// Sets the explicit target port id among a subsystem's transport attributes (what
/// `nvmf_create_subsystem` with `srp_port_id` stores).
pub fn set_target_port_id(attrs: &mut TransportAttrs, id: (u64, u64)) {
    attrs.insert(ATTR.into(), Value::String(format_target_port_id(id)));
}

/// The target port id derived from an NQN (see the module documentation).
pub fn derived_target_port_id(nqn: &str) -> PortId {
    let g = derived_guid(nqn);
    PortId::from_halves(g, g)
}

/// The 64-bit GUID derived from an NQN, used as both `id_ext` and `ioc_guid` when a subsystem
/// sets no `srp_port_id`: FNV-1a-64 of the NQN's bytes with the top byte replaced by 0x02 (a
/// locally administered EUI-64, never one of the OUIs for which Linux's ib_srp changes its
/// initiator id). Stable across restarts and targets.
pub fn derived_guid(nqn: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in nqn.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (0x02u64 << 56) | (h & 0x00ff_ffff_ffff_ffff)
}

/// The target port id of a subsystem: its explicit `srp_port_id`, or the one derived from its
/// NQN.
pub fn target_port_id(nqn: &str, explicit: Option<(u64, u64)>) -> PortId {
    match explicit {
        Some((id_ext, ioc_guid)) => PortId::from_halves(id_ext, ioc_guid),
        None => derived_target_port_id(nqn),
    }
}

/// The `add_target` string ib_srp needs to log in to `port` at `dest` (`IP:PORT`, IPv6 in
/// brackets).
pub fn login_string(port: &PortId, dest: &str) -> String {
    format!(
        "id_ext={:016x},ioc_guid={:016x},dest={dest}",
        port.hi(),
        port.lo()
    )
}

/// Parses a 16-byte port id written as `0x` + up to 32 hex digits (left-padded with zeros, as
/// LIO does), or the digits alone.
pub fn parse_port_id(s: &str) -> Option<PortId> {
    let t = s.trim();
    let t = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if t.is_empty() || t.len() > 32 || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let v = u128::from_str_radix(t, 16).ok()?;
    Some(PortId(v.to_be_bytes()))
}

fn parse_hex_u64(s: &str) -> Option<u64> {
    let s = s.trim();
    let s = s
        .strip_prefix("0x")
        .or_else(|| s.strip_prefix("0X"))
        .unwrap_or(s);
    if s.is_empty() || s.len() > 16 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    u64::from_str_radix(s, 16).ok()
}

/// Parses a target port id as an operator writes it: `0x` + up to 32 hex digits (the 16-byte
/// id, left-padded), or `id_ext:ioc_guid` / `id_ext,ioc_guid` with up to 16 hex digits each
/// (optionally `0x`-prefixed). Returns `(id_ext, ioc_guid)`.
pub fn parse_target_port_id(s: &str) -> Option<(u64, u64)> {
    let t = s.trim();
    if let Some((a, b)) = t.split_once([':', ',']) {
        return Some((parse_hex_u64(a)?, parse_hex_u64(b)?));
    }
    let d = t
        .strip_prefix("0x")
        .or_else(|| t.strip_prefix("0X"))
        .unwrap_or(t);
    if d.is_empty() || d.len() > 32 || !d.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let v = u128::from_str_radix(d, 16).ok()?;
    Some(((v >> 64) as u64, v as u64))
}

/// Formats a target port id as LIO and targetcli do: `0x` and 32 hex digits.
pub fn format_target_port_id((hi, lo): (u64, u64)) -> String {
    format!("0x{hi:016x}{lo:016x}")
}

/// The GUID form of an initiator port id's low half: `xxxx:xxxx:xxxx:xxxx`.
pub fn guid_form(port: &PortId) -> String {
    let g = port.lo();
    format!(
        "{:04x}:{:04x}:{:04x}:{:04x}",
        g >> 48,
        (g >> 32) & 0xffff,
        (g >> 16) & 0xffff,
        g & 0xffff
    )
}

/// Every name under which an initiator may appear in a subsystem's allowed hosts, canonical
/// form first.
pub fn host_forms(initiator: &PortId, peer: Option<IpAddr>) -> [Option<String>; 4] {
    let canonical = initiator.to_string();
    let bare = canonical.trim_start_matches("0x").to_string();
    [
        Some(canonical),
        Some(bare),
        Some(guid_form(initiator)),
        peer.map(|p| p.to_string()),
    ]
}

/// Whether `host` (an allowed-hosts entry) names this initiator.
pub fn host_matches(host: &str, initiator: &PortId, peer: Option<IpAddr>) -> bool {
    if let Some(p) = parse_port_id(host)
        && &p == initiator
    {
        return true;
    }
    host_forms(initiator, peer)
        .iter()
        .flatten()
        .any(|f| f.eq_ignore_ascii_case(host.trim()))
        || peer.is_some_and(|p| host.trim().parse::<IpAddr>().is_ok_and(|h| h == p))
}

/// Whether a host entry of a namespace (`nvmf_ns_add_host`) names the initiator of a SCSI
/// nexus, for masking: by the initiator port id in any of its spellings. An IP address entry
/// names none (masking follows the initiator, not the address it connects from).
pub fn host_names_nexus(host: &str, nexus: &target_core::scsi_exec::ItNexus) -> bool {
    host_matches(host, &PortId(nexus.initiator.id), None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn derivation_is_stable_and_avoids_special_ouis() {
        let a = derived_target_port_id("nqn.2016-06.io.spdk:cnode1");
        let b = derived_target_port_id("nqn.2016-06.io.spdk:cnode1");
        let c = derived_target_port_id("nqn.2016-06.io.spdk:cnode2");
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_eq!(a.hi(), a.lo(), "id_ext = ioc_guid");
        assert_eq!(a.0[0], 0x02);
        // FNV-1a-64 of "a" is 0xaf63dc4c8601ec8c.
        assert_eq!(derived_guid("a"), 0x0263_dc4c_8601_ec8c);
        assert_eq!(target_port_id("x", Some((1, 2))), PortId::from_halves(1, 2));
        assert_eq!(
            login_string(&PortId::from_halves(1, 0xab), "10.0.0.1:5555"),
            "id_ext=0000000000000001,ioc_guid=00000000000000ab,dest=10.0.0.1:5555"
        );
    }

    #[test]
    fn parsing() {
        let id = PortId::from_halves(0, 0x5254_0012_3456_7890);
        assert_eq!(
            parse_port_id("0x00000000000000005254001234567890"),
            Some(id)
        );
        assert_eq!(parse_port_id("5254001234567890"), Some(id), "left-padded");
        assert_eq!(parse_port_id("0X5254001234567890"), Some(id));
        assert_eq!(parse_port_id(""), None);
        assert_eq!(parse_port_id("0x"), None);
        assert_eq!(parse_port_id("xyz"), None);
        assert_eq!(parse_port_id(&"1".repeat(33)), None);
        assert_eq!(
            parse_target_port_id("0x000000000000000100000000000000ab"),
            Some((1, 0xab))
        );
        assert_eq!(parse_target_port_id("1:ab"), Some((1, 0xab)));
        assert_eq!(parse_target_port_id("0x1, 0xAB"), Some((1, 0xab)));
        assert_eq!(parse_target_port_id("1:"), None);
        assert_eq!(parse_target_port_id("g:1"), None);
        // Moved from target-core with the parsing: every malformed form is refused.
        assert_eq!(parse_target_port_id("ab"), Some((0, 0xab)), "left-padded");
        for bad in ["", "0x", "1:", "g:1", "xyz", &"1".repeat(33)] {
            assert_eq!(parse_target_port_id(bad), None, "{bad}");
        }
        assert_eq!(
            format_target_port_id((1, 0xab)),
            "0x000000000000000100000000000000ab"
        );
    }

    #[test]
    fn the_port_id_attribute_is_validated_canonical_and_derived_when_unset() {
        use serde_json::json;
        assert_eq!(
            SRP_PORT_ID.validate(&json!("0002c903000e8acd:0002c903000e8acd")),
            Ok(json!("0x0002c903000e8acd0002c903000e8acd"))
        );
        let e = SRP_PORT_ID.validate(&json!("not-hex")).unwrap_err();
        assert!(e.starts_with("Invalid srp_port_id \"not-hex\""), "{e}");
        let e = SRP_PORT_ID.validate(&json!(7)).unwrap_err();
        assert!(e.contains("string"), "{e}");
        let g = derived_guid("nqn.x");
        assert_eq!(
            (SRP_PORT_ID.shown_unset.unwrap())("nqn.x"),
            json!(format!("0x{g:016x}{g:016x}"))
        );
        let mut attrs = TransportAttrs::new();
        assert_eq!(explicit_target_port_id(&attrs), None);
        set_target_port_id(&mut attrs, (1, 2));
        assert_eq!(explicit_target_port_id(&attrs), Some((1, 2)));
    }

    #[test]
    fn host_names() {
        let id = PortId::from_halves(0, 0x5254_0012_3456_7890);
        let peer: IpAddr = "10.77.0.2".parse().unwrap();
        assert_eq!(guid_form(&id), "5254:0012:3456:7890");
        for h in [
            "0x00000000000000005254001234567890",
            "0X00000000000000005254001234567890",
            "00000000000000005254001234567890",
            "0x5254001234567890",
            "5254:0012:3456:7890",
            "5254:0012:3456:7890 ",
            "10.77.0.2",
        ] {
            assert!(host_matches(h, &id, Some(peer)), "{h}");
        }
        for h in [
            "0x01",
            "5254:0012:3456:7891",
            "10.77.0.3",
            "nqn.2014-08.org:x",
        ] {
            assert!(!host_matches(h, &id, Some(peer)), "{h}");
        }
        assert!(!host_matches("10.77.0.2", &id, None));
        assert_eq!(
            host_forms(&id, None)[0].as_deref(),
            Some("0x00000000000000005254001234567890")
        );
    }
}
