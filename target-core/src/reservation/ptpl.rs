//! The `ptpl_file` format: SPDK's persist-through-power-loss JSON, encoded and decoded
//! without I/O (the file itself is written by `ptpl_file`).
//!
//! SPDK (`lib/nvmf/subsystem.c`, `nvmf_ns_reservation_store_json` / `_load_json`) writes one
//! compact JSON object:
//!
//! ```json
//! {"ptpl":true,"rtype":1,"crkey":4660,"bdev_uuid":"…","holder_uuid":"…",
//!  "registrants":[{"rkey":4660,"host_uuid":"…"}]}
//! ```
//!
//! - `ptpl` (bool, optional): persistence is on. When it is off SPDK truncates the file; an
//!   empty file therefore means "nothing persisted".
//! - `rtype` (NVMe RTYPE, 0 = none), `crkey` (the holder's key, 0 = none), both optional.
//! - `bdev_uuid` (required): the bdev the state belongs to; loading against another bdev
//!   fails.
//! - `holder_uuid` (optional): the holder's Host Identifier as a lower-case UUID; `""` for
//!   no reservation and for All Registrants types (where every registrant holds it).
//! - `registrants` (required): `rkey` and `host_uuid` per registrant, in registration order.
//!
//! SPDK rejects unknown keys, and so does this decoder. Numbers are unsigned decimal.
//!
//! rtgt extension (SCSI registrants, which SPDK cannot represent): a registrant is either
//! `{"rkey", "host_uuid"}` (NVMe host) or `{"rkey", "scsi_transport_id", "relative_target_port"}`
//! (an I_T nexus: its 24-byte TransportID in hex, and the target port); a SCSI holder is
//! named by `holder_scsi_transport_id` + `holder_relative_target_port` with
//! `holder_uuid` `""`. A state without SCSI registrants encodes to exactly SPDK's bytes, so
//! SPDK can load it; one with SCSI registrants can only be loaded by rtgt.

use serde::{Deserialize, Serialize};

use super::state::{MAX_REGISTRANTS, Registrant, Reservation, Reserved};
use super::types::{HostId, Initiator, InitiatorPort, Nexus, ResvType};

/// Why a `ptpl_file` could not be loaded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PtplError {
    /// Not JSON, or not SPDK's object.
    #[error("invalid ptpl_file: {0}")]
    Format(String),
    /// The file belongs to another bdev.
    #[error("ptpl_file belongs to bdev {found}, not {expected}")]
    BdevMismatch {
        /// The bdev's UUID.
        expected: String,
        /// The file's `bdev_uuid`.
        found: String,
    },
    /// The contents contradict each other (unknown type, holder not registered, …).
    #[error("inconsistent ptpl_file: {0}")]
    Inconsistent(String),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    #[serde(default)]
    ptpl: bool,
    #[serde(default)]
    rtype: u32,
    #[serde(default)]
    crkey: u64,
    bdev_uuid: String,
    #[serde(default)]
    holder_uuid: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holder_scsi_transport_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holder_relative_target_port: Option<u16>,
    registrants: Vec<Reg>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Reg {
    rkey: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    host_uuid: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    scsi_transport_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    relative_target_port: Option<u16>,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

/// The file contents for `state` on the bdev `bdev_uuid`: SPDK's JSON, or the empty string
/// when persistence is off (SPDK truncates the file then).
pub fn encode(state: &Reservation, bdev_uuid: &uuid::Uuid) -> String {
    if !state.ptpl() {
        return String::new();
    }
    let reserved = state.reserved();
    let mut f = File {
        ptpl: true,
        rtype: reserved.map_or(0, |r| u32::from(r.rtype.nvme())),
        crkey: state.reservation_key().unwrap_or(0),
        bdev_uuid: bdev_uuid.hyphenated().to_string(),
        holder_uuid: String::new(),
        holder_scsi_transport_id: None,
        holder_relative_target_port: None,
        registrants: state.registrants().iter().map(reg_of).collect(),
    };
    // SPDK's crkey is the key the reservation was acquired with; for All Registrants types
    // it is some registrant's key. Keep the first registrant's, so that SPDK's own check
    // (crkey must be a registrant's key) passes.
    if let Some(Reserved { holder: None, .. }) = reserved {
        f.crkey = state.registrants().first().map_or(0, |r| r.key);
    }
    match reserved.and_then(|r| r.holder) {
        Some(Initiator::Nvme(h)) => f.holder_uuid = h.uuid_string(),
        Some(Initiator::Scsi(n)) => {
            f.holder_scsi_transport_id = Some(hex(&n.initiator.transport_id()));
            f.holder_relative_target_port = Some(n.relative_target_port);
        }
        None => {}
    }
    serde_json::to_string(&f).unwrap_or_default()
}

fn reg_of(r: &Registrant) -> Reg {
    match r.who {
        Initiator::Nvme(h) => Reg {
            rkey: r.key,
            host_uuid: Some(h.uuid_string()),
            scsi_transport_id: None,
            relative_target_port: None,
        },
        Initiator::Scsi(n) => Reg {
            rkey: r.key,
            host_uuid: None,
            scsi_transport_id: Some(hex(&n.initiator.transport_id())),
            relative_target_port: Some(n.relative_target_port),
        },
    }
}

fn host(s: &str) -> Result<HostId, PtplError> {
    uuid::Uuid::parse_str(s)
        .map(|u| HostId(*u.as_bytes()))
        .map_err(|_| PtplError::Format(format!("host_uuid {s:?} is not a UUID")))
}

fn nexus(tid: &str, port: Option<u16>) -> Result<Nexus, PtplError> {
    let initiator = unhex(tid)
        .as_deref()
        .and_then(InitiatorPort::from_transport_id)
        .ok_or_else(|| PtplError::Format(format!("scsi_transport_id {tid:?} is not valid")))?;
    let relative_target_port = port.ok_or_else(|| {
        PtplError::Format("scsi_transport_id without relative_target_port".into())
    })?;
    Ok(Nexus {
        initiator,
        relative_target_port,
    })
}

/// Loads file contents written by [`encode`] or by SPDK into a state for the bdev
/// `bdev_uuid`. Empty (or blank) contents, or `ptpl` false, give an empty state; SPDK
/// restores registrations only when `ptpl` is true, and so does this.
pub fn decode(
    text: &str,
    bdev_uuid: &uuid::Uuid,
    ptpl_capable: bool,
) -> Result<Reservation, PtplError> {
    if text.trim().is_empty() {
        return Ok(Reservation::new(ptpl_capable));
    }
    let f: File = serde_json::from_str(text).map_err(|e| PtplError::Format(e.to_string()))?;
    let found = uuid::Uuid::parse_str(&f.bdev_uuid)
        .map_err(|_| PtplError::Format(format!("bdev_uuid {:?} is not a UUID", f.bdev_uuid)))?;
    if found != *bdev_uuid {
        return Err(PtplError::BdevMismatch {
            expected: bdev_uuid.hyphenated().to_string(),
            found: f.bdev_uuid,
        });
    }
    if !f.ptpl {
        return Ok(Reservation::new(ptpl_capable));
    }
    if !ptpl_capable {
        return Err(PtplError::Inconsistent(
            "persistence is on but the volume has no ptpl_file".into(),
        ));
    }
    if f.registrants.len() > MAX_REGISTRANTS {
        return Err(PtplError::Inconsistent(format!(
            "{} registrants (at most {MAX_REGISTRANTS})",
            f.registrants.len()
        )));
    }
    let mut regs: Vec<Registrant> = Vec::with_capacity(f.registrants.len());
    for r in &f.registrants {
        let who = match (&r.host_uuid, &r.scsi_transport_id) {
            (Some(h), None) if r.relative_target_port.is_none() => Initiator::Nvme(host(h)?),
            (None, Some(t)) => Initiator::Scsi(nexus(t, r.relative_target_port)?),
            _ => {
                return Err(PtplError::Format(
                    "a registrant needs host_uuid or scsi_transport_id".into(),
                ));
            }
        };
        if r.rkey == 0 {
            return Err(PtplError::Inconsistent("a registrant with key 0".into()));
        }
        if regs.iter().any(|x| x.who == who) {
            return Err(PtplError::Inconsistent(format!("{who:?} registered twice")));
        }
        regs.push(Registrant { who, key: r.rkey });
    }
    let reserved = match f.rtype {
        0 => None,
        t => {
            let rtype = u8::try_from(t)
                .ok()
                .and_then(ResvType::from_nvme)
                .ok_or_else(|| PtplError::Inconsistent(format!("rtype {t}")))?;
            let holder = if rtype.all_registrants() {
                None
            } else {
                let who = match (&f.holder_scsi_transport_id, f.holder_uuid.as_str()) {
                    (Some(t), "") => Initiator::Scsi(nexus(t, f.holder_relative_target_port)?),
                    (None, h) if !h.is_empty() => Initiator::Nvme(host(h)?),
                    _ => {
                        return Err(PtplError::Inconsistent(
                            "a reservation without a holder".into(),
                        ));
                    }
                };
                let Some(reg) = regs.iter().find(|r| r.who == who) else {
                    return Err(PtplError::Inconsistent(
                        "the holder is not registered".into(),
                    ));
                };
                if reg.key != f.crkey {
                    return Err(PtplError::Inconsistent(format!(
                        "crkey {} is not the holder's key {}",
                        f.crkey, reg.key
                    )));
                }
                Some(who)
            };
            if regs.is_empty() {
                return Err(PtplError::Inconsistent(
                    "a reservation without registrants".into(),
                ));
            }
            Some(Reserved { rtype, holder })
        }
    };
    Ok(Reservation::restored(ptpl_capable, true, regs, reserved))
}
