//! The discovery log a host sees: every listener of every NVM subsystem the host may access.

use std::sync::Arc;

use super::queue::Queue;
use crate::nvme::discovery::{DISCOVERY_RECORD_SIZE, subtype, trtype};
use crate::nvme::{DiscoveryEntry, Tsas};
use crate::target::{ListenAddr, SubsystemType, Target};

struct Item {
    trtype: u8,
    adrfam: u8,
    treq: u8,
    portid: u16,
    trsvcid: String,
    subnqn: String,
    traddr: String,
    tsas: Tsas,
}

/// A discovery log built for one host, owning its strings.
pub(super) struct OwnedLog {
    /// Changes whenever the entries change (a hash of their encoding), stable otherwise.
    pub genctr: u64,
    items: Vec<Item>,
}

impl OwnedLog {
    /// The entries, borrowing from the log.
    pub fn entries(&self) -> Vec<DiscoveryEntry<'_>> {
        self.items
            .iter()
            .map(|i| DiscoveryEntry {
                trtype: i.trtype,
                adrfam: i.adrfam,
                subtype: subtype::NVME,
                treq: i.treq,
                portid: i.portid,
                cntlid: 0xFFFF,
                asqsz: 32,
                eflags: 0,
                trsvcid: &i.trsvcid,
                subnqn: &i.subnqn,
                traddr: &i.traddr,
                tsas: i.tsas,
            })
            .collect()
    }
}

/// FNV-1a, 64 bits.
fn fnv(h: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(h, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

fn key(l: &ListenAddr) -> (String, String, String) {
    (l.trtype.clone(), l.traddr.clone(), l.trsvcid.clone())
}

/// Builds the log for `hostnqn`, asking each listener's transport for its entry fields; a
/// listener on the unspecified address is reported with the address the host connected to.
pub(super) fn build(target: &Arc<Target>, hostnqn: &str, q: &Queue) -> OwnedLog {
    let subs: Vec<_> = target
        .subsystems()
        .into_iter()
        .filter(|s| s.kind() == SubsystemType::Nvme)
        .collect();
    // Port ids: the position of each listener address among all of them, sorted.
    let mut ports: Vec<(String, String, String)> = subs
        .iter()
        .flat_map(|s| s.with_config(|c| c.listeners.iter().map(key).collect::<Vec<_>>()))
        .collect();
    ports.sort();
    ports.dedup();
    let mut items = Vec::new();
    for s in &subs {
        let (allowed, listeners) =
            s.with_config(|c| (c.host_allowed(hostnqn), c.listeners.clone()));
        if !allowed {
            continue;
        }
        for l in listeners {
            let Some((_, t)) = target.transport(&l.trtype) else {
                continue;
            };
            let Some(info) = t.discovery_entry(&l) else {
                continue;
            };
            let traddr = match l.ip() {
                Ok(ip) if ip.is_unspecified() => q.local.ip().to_string(),
                _ => l.traddr.clone(),
            };
            let tsas = match info.trtype {
                trtype::RDMA => Tsas::Rdma {
                    qptype: info.tsas[0],
                    prtype: info.tsas[1],
                    cms: info.tsas[2],
                    pkey: 0,
                },
                trtype::TCP => Tsas::Tcp {
                    sectype: info.tsas[0],
                },
                _ => Tsas::None,
            };
            let k = key(&l);
            items.push(Item {
                trtype: info.trtype,
                adrfam: info.adrfam,
                treq: info.treq,
                portid: ports.iter().position(|p| *p == k).unwrap_or(0) as u16,
                trsvcid: l.trsvcid.clone(),
                subnqn: s.nqn().to_string(),
                traddr,
                tsas,
            });
        }
    }
    let mut log = OwnedLog { genctr: 0, items };
    let mut h = 0xCBF2_9CE4_8422_2325u64;
    let mut rec = [0u8; DISCOVERY_RECORD_SIZE];
    for e in log.entries() {
        e.encode(&mut rec);
        h = fnv(h, &rec);
    }
    // Never 0, so that a host never mistakes it for "unset".
    log.genctr = h.max(1);
    log
}
