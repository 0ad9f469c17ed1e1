//! SRP port identifiers as operators see them: the target port id of a subsystem, and the
//! initiator port id forms accepted in a subsystem's allowed hosts.
//!
//! # Target port ids
//!
//! A subsystem is an SRP target port. Its 16-byte target port identifier is `id_ext` (bytes
//! 0..8) followed by `ioc_guid` (bytes 8..16), the two values an initiator passes to ib_srp's
//! `add_target` (`id_ext=…,ioc_guid=…,dest=IP:PORT`).
//!
//! - **Set explicitly** with the subsystem's `srp_port_id` (`SubsystemConfig::srp_port_id`),
//!   given at creation: `nvmf_create_subsystem` takes an optional `srp_port_id`, either
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

use crate::proto::PortId;

/// The target port id derived from an NQN (see the module documentation).
pub fn derived_target_port_id(nqn: &str) -> PortId {
    let g = derived_guid(nqn);
    PortId::from_halves(g, g)
}

/// The 64-bit GUID derived from an NQN: `id_ext` and `ioc_guid` of the derived port id
/// ([`target_core::target::derived_srp_guid`], which management shows too).
pub fn derived_guid(nqn: &str) -> u64 {
    target_core::target::derived_srp_guid(nqn)
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

/// Parses a target port id as an operator writes it: `0x` + 32 hex digits, or
/// `id_ext:ioc_guid` / `id_ext,ioc_guid` with two values of up to 16 hex digits each
/// (optionally `0x`-prefixed). Returns `(id_ext, ioc_guid)`
/// ([`target_core::target::parse_srp_port_id`]).
pub fn parse_target_port_id(s: &str) -> Option<(u64, u64)> {
    target_core::target::parse_srp_port_id(s)
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
