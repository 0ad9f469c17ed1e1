//! The SCSI identity of a listener that is a SCSI target port (an SRP listener): its relative
//! target port identifier and the target port group it alone forms (SPC-4 §5.15; VPD 83h
//! types 4 and 5, REPORT TARGET PORT GROUPS).
//!
//! Both are listener attributes the SRP transport declares ([`RELATIVE_PORT_ATTR`],
//! [`TPG_ATTR`]; `nvmf_subsystem_add_listener` parameters, 1..=65535). Whatever is not given is
//! derived when the listener is added — from the listen address (FNV-1a of `traddr:trsvcid`),
//! then the next free id in the subsystem — and stored in the listener's attributes, so that
//! `nvmf_subsystem_get_listeners` shows the ids in use and `save_config` keeps them across a
//! restart whatever the order listeners are added in. Within a subsystem both ids are
//! distinct among its SCSI ports (a duplicate given explicitly is refused). Across the
//! gateways of a group they must differ too: that is the operator's part (docs/ha.md), which
//! the derivation from distinct addresses helps with.

use serde_json::Value;

use super::error::CoreError;
use super::subsystem::ListenAddr;
use crate::ana::ScsiPort;

/// The transport whose listeners are SCSI target ports.
pub const SCSI_TRANSPORT: &str = "SRP";

/// Listener attribute: RELATIVE TARGET PORT IDENTIFIER.
pub const RELATIVE_PORT_ATTR: &str = "relative_target_port_id";

/// Listener attribute: TARGET PORT GROUP.
pub const TPG_ATTR: &str = "target_port_group_id";

/// Whether a listener is a SCSI target port.
pub fn is_scsi_port(addr: &ListenAddr) -> bool {
    addr.trtype.eq_ignore_ascii_case(SCSI_TRANSPORT)
}

/// Validates a value of [`RELATIVE_PORT_ATTR`] or [`TPG_ATTR`] (JSON type checked before):
/// 1..=65535.
pub fn parse_id(v: &Value) -> Result<Value, String> {
    match v.as_u64() {
        Some(n @ 1..=0xFFFF) => Ok(Value::from(n)),
        _ => Err("an identifier 1-65535 is expected (0 is not a port or group)".into()),
    }
}

fn attr(addr: &ListenAddr, name: &str) -> Option<u16> {
    addr.attrs
        .get(name)
        .and_then(Value::as_u64)
        .and_then(|n| u16::try_from(n).ok())
        .filter(|&n| n != 0)
}

/// The ids of a SCSI port as stored in its attributes (after [`assign`]).
pub fn scsi_port(addr: &ListenAddr) -> Option<ScsiPort> {
    if !is_scsi_port(addr) {
        return None;
    }
    Some(ScsiPort {
        relative_port: attr(addr, RELATIVE_PORT_ATTR)?,
        tpg_id: attr(addr, TPG_ATTR)?,
    })
}

/// The id derived from an address: FNV-1a-32 of `traddr:trsvcid` folded into 1..=65535.
fn derived(addr: &ListenAddr) -> u16 {
    let mut h: u32 = 0x811c_9dc5;
    for b in addr
        .traddr
        .bytes()
        .chain(std::iter::once(b':'))
        .chain(addr.trsvcid.bytes())
    {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    let folded = (h >> 16) ^ (h & 0xFFFF);
    (folded % 0xFFFF) as u16 + 1
}

/// The first id from `start` on (wrapping, skipping 0) not in `used`.
fn free_from(start: u16, used: &[u16]) -> u16 {
    let mut id = start;
    while used.contains(&id) {
        id = if id == u16::MAX { 1 } else { id + 1 };
    }
    id
}

/// Fills in the ids a new SCSI port `addr` was not given, and refuses ids another SCSI port of
/// the subsystem (`existing`) already has. Other listeners are left alone.
pub fn assign(addr: &mut ListenAddr, existing: &[ListenAddr]) -> Result<(), CoreError> {
    if !is_scsi_port(addr) {
        return Ok(());
    }
    let others: Vec<ScsiPort> = existing.iter().filter_map(scsi_port).collect();
    let rel_used: Vec<u16> = others.iter().map(|p| p.relative_port).collect();
    let tpg_used: Vec<u16> = others.iter().map(|p| p.tpg_id).collect();
    let rel = match attr(addr, RELATIVE_PORT_ATTR) {
        Some(r) if rel_used.contains(&r) => {
            return Err(CoreError::Invalid(format!(
                "{RELATIVE_PORT_ATTR} {r} is already used by another SRP listener of the subsystem"
            )));
        }
        Some(r) => r,
        None => free_from(derived(addr), &rel_used),
    };
    let tpg = match attr(addr, TPG_ATTR) {
        Some(t) if tpg_used.contains(&t) => {
            return Err(CoreError::Invalid(format!(
                "{TPG_ATTR} {t} is already used by another SRP listener of the subsystem"
            )));
        }
        Some(t) => t,
        // Each port is a group of its own: numbered like the port when that is free.
        None => free_from(rel, &tpg_used),
    };
    addr.attrs
        .insert(RELATIVE_PORT_ATTR.into(), Value::from(u64::from(rel)));
    addr.attrs
        .insert(TPG_ATTR.into(), Value::from(u64::from(tpg)));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::target::AdrFam;

    fn srp(ip: &str, port: &str) -> ListenAddr {
        ListenAddr::new("SRP", AdrFam::Ipv4, ip, port)
    }

    #[test]
    fn defaults_are_derived_from_the_address_and_distinct() {
        let mut a = srp("10.0.0.1", "5555");
        assign(&mut a, &[]).unwrap();
        let pa = scsi_port(&a).unwrap();
        assert_eq!(pa.relative_port, derived(&a));
        assert_eq!(pa.tpg_id, pa.relative_port);
        // Deterministic: the same address gets the same ids.
        let mut again = srp("10.0.0.1", "5555");
        assign(&mut again, &[]).unwrap();
        assert_eq!(scsi_port(&again), Some(pa));
        // Another address elsewhere in the subsystem: distinct ids even if the hash collides.
        let mut b = srp("10.0.0.1", "5555");
        b.trsvcid = "5556".into();
        assign(&mut b, std::slice::from_ref(&a)).unwrap();
        let pb = scsi_port(&b).unwrap();
        assert_ne!(pb.relative_port, pa.relative_port);
        assert_ne!(pb.tpg_id, pa.tpg_id);
        // A forced collision moves to the next free id.
        let mut c = srp("10.0.0.1", "5555");
        assign(&mut c, std::slice::from_ref(&a)).unwrap();
        let pc = scsi_port(&c).unwrap();
        assert_eq!(
            pc.relative_port,
            free_from(pa.relative_port, &[pa.relative_port])
        );
        assert_ne!(pc.relative_port, 0);
    }

    #[test]
    fn explicit_ids_are_kept_and_duplicates_refused() {
        let mut a = srp("10.0.0.1", "5555");
        a.attrs.insert(RELATIVE_PORT_ATTR.into(), Value::from(7));
        a.attrs.insert(TPG_ATTR.into(), Value::from(9));
        assign(&mut a, &[]).unwrap();
        assert_eq!(
            scsi_port(&a),
            Some(ScsiPort {
                relative_port: 7,
                tpg_id: 9
            })
        );
        let mut b = srp("10.0.0.2", "5555");
        b.attrs.insert(RELATIVE_PORT_ATTR.into(), Value::from(7));
        let e = assign(&mut b, std::slice::from_ref(&a)).unwrap_err();
        assert!(e.to_string().contains("relative_target_port_id 7"), "{e}");
        let mut b = srp("10.0.0.2", "5555");
        b.attrs.insert(TPG_ATTR.into(), Value::from(9));
        let e = assign(&mut b, std::slice::from_ref(&a)).unwrap_err();
        assert!(e.to_string().contains("target_port_group_id 9"), "{e}");
        // Not SRP: untouched.
        let mut r = ListenAddr::new("RDMA", AdrFam::Ipv4, "10.0.0.1", "4420");
        assign(&mut r, &[]).unwrap();
        assert!(r.attrs.is_empty());
        assert_eq!(scsi_port(&r), None);
    }

    #[test]
    fn ids_are_1_to_65535() {
        assert!(parse_id(&Value::from(0)).is_err());
        assert!(parse_id(&Value::from(65536)).is_err());
        assert_eq!(parse_id(&Value::from(65535)).unwrap(), Value::from(65535));
        assert_eq!(free_from(u16::MAX, &[u16::MAX]), 1);
    }
}
