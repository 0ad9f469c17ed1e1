//! The live objects of a target, read over JSON-RPC: what `ls` draws and what completion
//! offers.
//!
//! A [`Snapshot`] is the answers of `bdev_get_bdevs`, `nvmf_get_transports`,
//! `nvmf_get_subsystems`, `keyring_get_keys` and, for `ls`, `nvmf_subsystem_get_controllers`
//! and `nvmf_subsystem_get_qpairs` of every subsystem. [`render`] draws it as a tree; it is a
//! pure function of the snapshot, so its output is tested without a target.

use std::fmt::Write as _;

use serde_json::Value;

use crate::client::Client;
use crate::exec::ExecError;

/// The connections of one subsystem.
#[derive(Debug, Clone, Default)]
pub struct Connections {
    /// `nvmf_subsystem_get_controllers` (for SRP: one per session).
    pub controllers: Vec<Value>,
    /// `nvmf_subsystem_get_qpairs` (for SRP: one per channel).
    pub qpairs: Vec<Value>,
}

/// What the target holds, as its RPCs report it.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// `bdev_get_bdevs`.
    pub bdevs: Vec<Value>,
    /// `nvmf_get_transports`.
    pub transports: Vec<Value>,
    /// `nvmf_get_subsystems`.
    pub subsystems: Vec<Value>,
    /// `keyring_get_keys`.
    pub keys: Vec<Value>,
    /// Per subsystem NQN, when fetched with connections.
    pub connections: Vec<(String, Connections)>,
}

fn list(v: Value) -> Vec<Value> {
    match v {
        Value::Array(a) => a,
        _ => Vec::new(),
    }
}

fn s(v: &Value) -> &str {
    v.as_str().unwrap_or_default()
}

impl Snapshot {
    /// Reads the objects; with `connections`, also every subsystem's controllers and queue
    /// pairs. The first failing call fails the whole snapshot, except `keyring_get_keys`.
    pub fn fetch(c: &mut Client, connections: bool) -> Result<Snapshot, ExecError> {
        let mut get = |m: &str| {
            c.call(m, None).map(list).map_err(|error| ExecError::Call {
                method: m.to_string(),
                error,
            })
        };
        let mut snap = Snapshot {
            bdevs: get("bdev_get_bdevs")?,
            transports: get("nvmf_get_transports")?,
            subsystems: get("nvmf_get_subsystems")?,
            keys: get("keyring_get_keys").unwrap_or_default(),
            connections: Vec::new(),
        };
        if connections {
            for nqn in snap.nqns() {
                let p = serde_json::json!({ "nqn": nqn });
                let mut one = |m: &str| {
                    c.call(m, Some(&p))
                        .map(list)
                        .map_err(|error| ExecError::Call {
                            method: m.to_string(),
                            error,
                        })
                };
                let conns = Connections {
                    controllers: one("nvmf_subsystem_get_controllers")?,
                    qpairs: one("nvmf_subsystem_get_qpairs")?,
                };
                snap.connections.push((nqn, conns));
            }
        }
        Ok(snap)
    }

    /// Every subsystem NQN.
    pub fn nqns(&self) -> Vec<String> {
        self.subsystems
            .iter()
            .map(|x| s(&x["nqn"]).to_string())
            .collect()
    }

    /// The subsystem `nqn`.
    pub fn subsystem(&self, nqn: &str) -> Option<&Value> {
        self.subsystems.iter().find(|x| x["nqn"] == nqn)
    }

    /// Bdev names, optionally only of one product and only those no namespace claims.
    pub fn bdev_names(&self, product: Option<&str>, free_only: bool) -> Vec<String> {
        self.bdevs
            .iter()
            .filter(|b| product.is_none_or(|p| b["product_name"] == p))
            .filter(|b| !free_only || b["claimed"] != true)
            .map(|b| s(&b["name"]).to_string())
            .collect()
    }

    /// Transport types that exist.
    pub fn trtypes(&self) -> Vec<String> {
        self.transports
            .iter()
            .map(|t| s(&t["trtype"]).to_string())
            .collect()
    }

    /// Allowed hosts of `nqn`.
    pub fn hosts(&self, nqn: &str) -> Vec<String> {
        self.subsystem(nqn)
            .and_then(|x| x["hosts"].as_array())
            .into_iter()
            .flatten()
            .map(|h| s(&h["nqn"]).to_string())
            .collect()
    }

    /// Namespace ids of `nqn`.
    pub fn nsids(&self, nqn: &str) -> Vec<String> {
        self.subsystem(nqn)
            .and_then(|x| x["namespaces"].as_array())
            .into_iter()
            .flatten()
            .map(|n| n["nsid"].to_string())
            .collect()
    }

    /// Listener addresses of `nqn` (of every subsystem when `nqn` is `None`).
    pub fn listeners(&self, nqn: Option<&str>) -> Vec<&Value> {
        self.subsystems
            .iter()
            .filter(|x| nqn.is_none_or(|n| x["nqn"] == n))
            .flat_map(|x| x["listen_addresses"].as_array().into_iter().flatten())
            .collect()
    }

    /// Keyring key names.
    pub fn key_names(&self) -> Vec<String> {
        self.keys
            .iter()
            .map(|k| s(&k["name"]).to_string())
            .collect()
    }

    fn connections_of(&self, nqn: &str) -> Option<&Connections> {
        self.connections
            .iter()
            .find(|(n, _)| n == nqn)
            .map(|(_, c)| c)
    }
}

/// A tree node: a label and its children.
#[derive(Debug, Clone, Default)]
struct Node {
    label: String,
    children: Vec<Node>,
}

impl Node {
    fn new(label: impl Into<String>) -> Self {
        Node {
            label: label.into(),
            children: Vec::new(),
        }
    }

    fn with(mut self, children: Vec<Node>) -> Self {
        self.children = children;
        self
    }

    fn draw(&self, out: &mut String, prefix: &str, last: bool, root: bool) {
        if root {
            let _ = writeln!(out, "{}", self.label);
        } else {
            let branch = if last { "└── " } else { "├── " };
            let _ = writeln!(out, "{prefix}{branch}{}", self.label);
        }
        let child_prefix = if root {
            String::new()
        } else {
            format!("{prefix}{}", if last { "    " } else { "│   " })
        };
        let n = self.children.len();
        for (i, c) in self.children.iter().enumerate() {
            c.draw(out, &child_prefix, i + 1 == n, false);
        }
    }
}

fn size_text(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if v.fract() == 0.0 {
        format!("{v} {}", UNITS[u])
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn bdev_node(b: &Value) -> Node {
    let bs = b["block_size"].as_u64().unwrap_or(0);
    let nb = b["num_blocks"].as_u64().unwrap_or(0);
    let mut label = format!(
        "{}  {}  {} ({nb} × {bs} B)",
        s(&b["name"]),
        s(&b["product_name"]),
        size_text(bs.saturating_mul(nb))
    );
    if b["claimed"] == true {
        let holder = b["claimed_by"]["holder"].as_str().unwrap_or("claimed");
        let _ = write!(label, "  [{holder}]");
    }
    if let Some(f) = b["driver_specific"]["aio"]["filename"].as_str() {
        let _ = write!(label, "  {f}");
    }
    Node::new(label)
}

/// The transport options worth a glance, in this order, when present.
const TRANSPORT_KEYS: &[&str] = &[
    "max_queue_depth",
    "max_io_qpairs_per_ctrlr",
    "in_capsule_data_size",
    "max_io_size",
    "io_unit_size",
    "num_shared_buffers",
    "max_req_size",
    "max_rsp_size",
    "no_srq",
    "use_srq",
];

fn transport_node(t: &Value) -> Node {
    let mut label = s(&t["trtype"]).to_string();
    for k in TRANSPORT_KEYS {
        if let Some(v) = t.get(*k) {
            let _ = write!(label, "  {k}={v}");
        }
    }
    Node::new(label)
}

fn address_text(a: &Value) -> String {
    let svc = s(&a["trsvcid"]);
    let addr = s(&a["traddr"]);
    let host = if addr.contains(':') {
        format!("[{addr}]")
    } else {
        addr.to_string()
    };
    if svc.is_empty() {
        format!("{}  {}  {host}", s(&a["trtype"]), s(&a["adrfam"]))
    } else {
        format!("{}  {}  {host}:{svc}", s(&a["trtype"]), s(&a["adrfam"]))
    }
}

fn group(label: &str, children: Vec<Node>, empty: &str) -> Node {
    if children.is_empty() {
        Node::new(format!("{label}  ({empty})"))
    } else {
        Node::new(format!("{label}  ({})", children.len())).with(children)
    }
}

fn qpair_node(q: &Value) -> Node {
    let srp = q["listen_address"]["trtype"] == "SRP";
    let what = if srp { "channel" } else { "qpair" };
    let mut label = format!("{what} {}  {}", q["qid"], s(&q["state"]));
    let peer = &q["peer_address"];
    if peer.is_object() {
        let _ = write!(
            label,
            "  from {}",
            address_text(peer).split("  ").last().unwrap_or("")
        );
    }
    if let Some(t) = q["thread"].as_str() {
        let _ = write!(label, "  on {t}");
    }
    // A channel's initiator is its session's; what it has in flight is its own.
    if srp && let Some(n) = q["outstanding"].as_u64() {
        let _ = write!(label, "  outstanding {n}");
    }
    Node::new(label)
}

fn subsystem_node(snap: &Snapshot, sub: &Value) -> Node {
    let nqn = s(&sub["nqn"]);
    let mut label = format!("{nqn}  [{}", s(&sub["subtype"]));
    if let Some(st) = sub["state"].as_str() {
        let _ = write!(label, ", {st}");
    }
    label.push(']');
    if let (Some(sn), Some(mn)) = (sub["serial_number"].as_str(), sub["model_number"].as_str()) {
        let _ = write!(label, "  SN {sn}  MN {mn}");
    }
    let mut children = Vec::new();
    if sub["subtype"] != "Discovery" {
        let ns: Vec<Node> = sub["namespaces"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|n| {
                let mut l = format!("{}  {}", n["nsid"], s(&n["bdev_name"]));
                if let Some(u) = n["uuid"].as_str() {
                    let _ = write!(l, "  uuid {u}");
                }
                Node::new(l)
            })
            .collect();
        children.push(group("namespaces", ns, "none"));
        let hosts: Vec<Node> = sub["hosts"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|h| Node::new(s(&h["nqn"])))
            .collect();
        let any = sub["allow_any_host"] == true;
        let mut h = group(
            "hosts",
            hosts,
            if any { "any host" } else { "none allowed" },
        );
        if any && !h.children.is_empty() {
            h.label.push_str("  any host allowed");
        }
        children.push(h);
    }
    let listeners: Vec<Node> = sub["listen_addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|a| Node::new(address_text(a)))
        .collect();
    children.push(group("listeners", listeners, "none"));
    if let Some(conns) = snap.connections_of(nqn) {
        let mut ctrls: Vec<Node> = conns
            .controllers
            .iter()
            .map(|c| {
                let srp = c["trtype"] == "SRP";
                let id = &c["cntlid"];
                let mut l = if srp {
                    format!("session {id}  initiator {}", s(&c["hostnqn"]))
                } else {
                    format!(
                        "controller {id}  {}  host {}",
                        s(&c["cntrltype"]),
                        s(&c["hostnqn"])
                    )
                };
                if !srp {
                    let _ = write!(l, "  {} I/O qpairs", c["num_io_qpairs"]);
                }
                let qs: Vec<Node> = conns
                    .qpairs
                    .iter()
                    .filter(|q| q["cntlid"] == *id)
                    .map(qpair_node)
                    .collect();
                Node::new(l).with(qs)
            })
            .collect();
        let loose: Vec<Node> = conns
            .qpairs
            .iter()
            .filter(|q| !conns.controllers.iter().any(|c| c["cntlid"] == q["cntlid"]))
            .map(qpair_node)
            .collect();
        if !loose.is_empty() {
            ctrls.push(Node::new("not associated with a controller yet").with(loose));
        }
        children.push(group("connections", ctrls, "none"));
    }
    Node::new(label).with(children)
}

/// Draws the snapshot as a tree. `what` picks a part: `bdevs`, `transports`, `subsystems`, or
/// one subsystem's NQN; `None` draws everything under `title`.
pub fn render(snap: &Snapshot, title: &str, what: Option<&str>) -> Result<String, String> {
    let bdevs = || group("bdevs", snap.bdevs.iter().map(bdev_node).collect(), "none");
    let transports = || {
        group(
            "transports",
            snap.transports.iter().map(transport_node).collect(),
            "none",
        )
    };
    let subsystems = || {
        group(
            "subsystems",
            snap.subsystems
                .iter()
                .map(|x| subsystem_node(snap, x))
                .collect(),
            "none",
        )
    };
    let root = match what {
        None => Node::new(title).with(vec![bdevs(), transports(), subsystems()]),
        Some("bdevs") => bdevs(),
        Some("transports") => transports(),
        Some("subsystems") => subsystems(),
        Some(nqn) => match snap.subsystem(nqn) {
            Some(sub) => subsystem_node(snap, sub),
            None => {
                return Err(format!(
                    "ls: '{nqn}' is neither bdevs, transports, subsystems nor a subsystem NQN"
                ));
            }
        },
    };
    let mut out = String::new();
    root.draw(&mut out, "", true, true);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn snap() -> Snapshot {
        Snapshot {
            bdevs: vec![
                json!({"name": "Malloc0", "product_name": "Malloc disk", "block_size": 512,
                       "num_blocks": 131072, "claimed": true,
                       "claimed_by": {"module": "nvmf", "holder": "nqn.2016-06.io.spdk:cnode1"}}),
                json!({"name": "Null0", "product_name": "Null disk", "block_size": 4096,
                       "num_blocks": 25600, "claimed": false}),
            ],
            transports: vec![json!({"trtype": "RDMA", "max_queue_depth": 128,
                                    "max_io_size": 131072, "no_srq": false})],
            subsystems: vec![
                json!({"nqn": "nqn.2014-08.org.nvmexpress.discovery", "subtype": "Discovery",
                       "state": "active", "listen_addresses": [], "allow_any_host": true,
                       "hosts": []}),
                json!({"nqn": "nqn.2016-06.io.spdk:cnode1", "subtype": "NVMe", "state": "active",
                       "serial_number": "SN1", "model_number": "MN1",
                       "listen_addresses": [{"trtype": "RDMA", "adrfam": "IPv4",
                                             "traddr": "10.0.0.1", "trsvcid": "4420"}],
                       "allow_any_host": false,
                       "hosts": [{"nqn": "nqn.2014-08.org.nvmexpress:uuid:h1"}],
                       "namespaces": [{"nsid": 1, "bdev_name": "Malloc0",
                                       "uuid": "11111111-2222-3333-4444-555555555555"}]}),
                json!({"nqn": "nqn.2016-06.io.spdk:srp1", "subtype": "NVMe", "state": "paused",
                       "listen_addresses": [], "allow_any_host": true, "hosts": [],
                       "namespaces": []}),
            ],
            keys: vec![json!({"name": "key0"})],
            connections: vec![
                (
                    "nqn.2016-06.io.spdk:cnode1".into(),
                    Connections {
                        controllers: vec![json!({"cntlid": 1, "cntrltype": "io",
                        "hostnqn": "nqn.2014-08.org.nvmexpress:uuid:h1", "num_io_qpairs": 1,
                        "trtype": "RDMA"})],
                        qpairs: vec![
                            json!({"cntlid": 1, "qid": 0, "state": "active",
                               "thread": "nvmf_tgt_poll_group_000",
                               "listen_address": {"trtype": "RDMA"},
                               "peer_address": {"trtype": "RDMA", "adrfam": "IPv4",
                                                "traddr": "10.0.0.2", "trsvcid": "50000"}}),
                            json!({"cntlid": null, "qid": 1, "state": "connecting",
                               "listen_address": {"trtype": "RDMA"}}),
                        ],
                    },
                ),
                (
                    "nqn.2016-06.io.spdk:srp1".into(),
                    Connections {
                        controllers: vec![json!({"cntlid": 7, "cntrltype": "io",
                        "hostnqn": "0x00000000000000005254001234567890", "num_io_qpairs": 1,
                        "trtype": "SRP"})],
                        qpairs: vec![json!({"cntlid": 7, "qid": 3, "state": "live",
                        "listen_address": {"trtype": "SRP"},
                        "initiator_port_id": "0x00000000000000005254001234567890",
                        "outstanding": 2})],
                    },
                ),
            ],
        }
    }

    #[test]
    fn the_tree_shows_everything_with_state() {
        let out = render(&snap(), "rtgt", None).unwrap();
        let expect = "\
rtgt
├── bdevs  (2)
│   ├── Malloc0  Malloc disk  64 MiB (131072 × 512 B)  [nqn.2016-06.io.spdk:cnode1]
│   └── Null0  Null disk  100 MiB (25600 × 4096 B)
├── transports  (1)
│   └── RDMA  max_queue_depth=128  max_io_size=131072  no_srq=false
└── subsystems  (3)
    ├── nqn.2014-08.org.nvmexpress.discovery  [Discovery, active]
    │   └── listeners  (none)
    ├── nqn.2016-06.io.spdk:cnode1  [NVMe, active]  SN SN1  MN MN1
    │   ├── namespaces  (1)
    │   │   └── 1  Malloc0  uuid 11111111-2222-3333-4444-555555555555
    │   ├── hosts  (1)
    │   │   └── nqn.2014-08.org.nvmexpress:uuid:h1
    │   ├── listeners  (1)
    │   │   └── RDMA  IPv4  10.0.0.1:4420
    │   └── connections  (2)
    │       ├── controller 1  io  host nqn.2014-08.org.nvmexpress:uuid:h1  1 I/O qpairs
    │       │   └── qpair 0  active  from 10.0.0.2:50000  on nvmf_tgt_poll_group_000
    │       └── not associated with a controller yet
    │           └── qpair 1  connecting
    └── nqn.2016-06.io.spdk:srp1  [NVMe, paused]
        ├── namespaces  (none)
        ├── hosts  (any host)
        ├── listeners  (none)
        └── connections  (1)
            └── session 7  initiator 0x00000000000000005254001234567890
                └── channel 3  live  outstanding 2
";
        assert_eq!(out, expect, "\n{out}");
    }

    #[test]
    fn parts_can_be_drawn_alone() {
        let s = snap();
        let b = render(&s, "x", Some("bdevs")).unwrap();
        assert!(b.starts_with("bdevs  (2)\n├── Malloc0"));
        let one = render(&s, "x", Some("nqn.2016-06.io.spdk:cnode1")).unwrap();
        assert!(one.starts_with("nqn.2016-06.io.spdk:cnode1  [NVMe, active]"));
        assert!(render(&s, "x", Some("nqn.nope")).is_err());
    }

    #[test]
    fn names_for_completion() {
        let s = snap();
        assert_eq!(s.nqns().len(), 3);
        assert_eq!(s.bdev_names(None, true), vec!["Null0"]);
        assert_eq!(s.bdev_names(Some("Malloc disk"), false), vec!["Malloc0"]);
        assert_eq!(s.trtypes(), vec!["RDMA"]);
        assert_eq!(
            s.hosts("nqn.2016-06.io.spdk:cnode1"),
            vec!["nqn.2014-08.org.nvmexpress:uuid:h1"]
        );
        assert_eq!(s.nsids("nqn.2016-06.io.spdk:cnode1"), vec!["1"]);
        assert_eq!(s.key_names(), vec!["key0"]);
        assert_eq!(s.listeners(None).len(), 1);
    }
}
