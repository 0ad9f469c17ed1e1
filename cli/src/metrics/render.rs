//! What `/metrics` shows, from what the target reports: the same data as
//! `framework_get_reactors`, `nvmf_get_stats`, `nvmf_get_subsystems`,
//! `nvmf_subsystem_get_controllers` and the bdev layer's counters and latency histograms.
//! Gathering happens at scrape time; the data path only keeps its per-reactor counters.

use serde_json::Value;
use target_core::bdev::{HistKind, Histogram, IoStatSnapshot, hist_bound_secs};
use target_core::target::listener_io::ERROR_CLASSES;

use super::exposition::{Exposition, Kind, sanitize};

/// One bdev's numbers.
pub struct BdevMetrics {
    /// Its name.
    pub name: String,
    /// Counters since the last `bdev_reset_iostat`.
    pub stats: IoStatSnapshot,
    /// Latency histograms (never reset), by kind.
    pub hist: Vec<(HistKind, Histogram)>,
}

/// Everything a scrape renders. `None` parts are left out (e.g. before `framework_start_init`).
#[derive(Default)]
pub struct Inputs {
    /// `framework_get_reactors`.
    pub reactors: Option<Value>,
    /// `nvmf_get_stats`.
    pub nvmf_stats: Option<Value>,
    /// `nvmf_get_subsystems`.
    pub subsystems: Option<Value>,
    /// `nvmf_subsystem_get_controllers` per subsystem NQN.
    pub controllers: Vec<(String, Value)>,
    /// The bdevs.
    pub bdevs: Vec<BdevMetrics>,
}

const NS: f64 = 1e-9;

fn num(v: &Value) -> Option<f64> {
    v.as_f64()
        .or_else(|| v.as_bool().map(|b| f64::from(u8::from(b))))
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or("")
}

/// Renders the exposition.
pub fn render(inp: &Inputs) -> String {
    let mut e = Exposition::default();
    e.sample("rtgt_up", Kind::Gauge, "1 while rtgt answers.", &[], 1.0);
    e.sample(
        "rtgt_build_info",
        Kind::Gauge,
        "rtgt's version, as a label.",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1.0,
    );
    if let Some(r) = &inp.reactors {
        reactors(&mut e, r);
    }
    if let Some(s) = &inp.nvmf_stats {
        poll_groups(&mut e, s);
        listeners(&mut e, s);
    }
    if let Some(s) = &inp.subsystems {
        subsystems(&mut e, s);
    }
    for (nqn, c) in &inp.controllers {
        let n = c.as_array().map_or(0, Vec::len);
        e.sample(
            "rtgt_nvmf_subsystem_controllers",
            Kind::Gauge,
            "Controllers connected to a subsystem.",
            &[("subsystem", nqn)],
            n as f64,
        );
    }
    for b in &inp.bdevs {
        bdev(&mut e, b);
    }
    e.finish()
}

fn reactors(e: &mut Exposition, r: &Value) {
    for re in r["reactors"].as_array().into_iter().flatten() {
        let id = re["lw_threads"][0]["id"]
            .as_u64()
            .unwrap_or(0)
            .saturating_sub(1);
        let reactor = id.to_string();
        let lcore = re["lcore"].as_u64().unwrap_or(0).to_string();
        let l = [("reactor", reactor.as_str()), ("lcore", lcore.as_str())];
        let mut put = |name: &str, kind: Kind, help: &str, key: &str, scale: f64| {
            if let Some(v) = num(&re[key]) {
                e.sample(name, kind, help, &l, v * scale);
            }
        };
        put(
            "rtgt_reactor_busy_seconds_total",
            Kind::Counter,
            "Time a reactor spent doing work.",
            "busy",
            NS,
        );
        put(
            "rtgt_reactor_idle_seconds_total",
            Kind::Counter,
            "Time a reactor polled without finding work or slept.",
            "idle",
            NS,
        );
        put(
            "rtgt_reactor_sleeps_total",
            Kind::Counter,
            "Times a reactor went to sleep on its file descriptors (its wake-ups).",
            "sleeps",
            1.0,
        );
        put(
            "rtgt_reactor_messages_total",
            Kind::Counter,
            "Messages a reactor handled.",
            "messages",
            1.0,
        );
        put(
            "rtgt_reactor_pollers",
            Kind::Gauge,
            "Pollers registered on a reactor.",
            "pollers",
            1.0,
        );
    }
}

fn poll_groups(e: &mut Exposition, s: &Value) {
    for pg in s["poll_groups"].as_array().into_iter().flatten() {
        let name = str_of(pg, "name");
        for (key, kind) in [("admin_qpairs", "admin"), ("io_qpairs", "io")] {
            if let Some(v) = num(&pg[key]) {
                e.sample(
                    "rtgt_poll_group_qpairs_total",
                    Kind::Counter,
                    "Queue pairs a poll group has accepted.",
                    &[("poll_group", name), ("kind", kind)],
                    v,
                );
            }
        }
        for (key, kind) in [
            ("current_admin_qpairs", "admin"),
            ("current_io_qpairs", "io"),
            ("current_unassociated_qpairs", "unassociated"),
        ] {
            if let Some(v) = num(&pg[key]) {
                e.sample(
                    "rtgt_poll_group_current_qpairs",
                    Kind::Gauge,
                    "Queue pairs a poll group serves now.",
                    &[("poll_group", name), ("kind", kind)],
                    v,
                );
            }
        }
        if let Some(v) = num(&pg["pending_bdev_io"]) {
            e.sample(
                "rtgt_poll_group_pending_bdev_io",
                Kind::Gauge,
                "Commands of a poll group waiting for their bdev.",
                &[("poll_group", name)],
                v,
            );
        }
        if let Some(v) = num(&pg["completed_nvme_io"]) {
            e.sample(
                "rtgt_poll_group_completed_nvme_io_total",
                Kind::Counter,
                "NVMe I/O commands a poll group completed.",
                &[("poll_group", name)],
                v,
            );
        }
        for t in pg["transports"].as_array().into_iter().flatten() {
            let trtype = str_of(t, "trtype");
            let mut labels = vec![
                ("poll_group", name.to_owned()),
                ("trtype", trtype.to_owned()),
            ];
            flatten(e, "rtgt_transport", t, &mut labels);
        }
    }
}

/// Per-listener I/O (`nvmf_get_stats` poll groups' `listeners`), summed over poll groups.
/// Per transport: `sum by (trtype)`.
fn listeners(e: &mut Exposition, s: &Value) {
    let mut sums: std::collections::BTreeMap<(String, String, String), Vec<f64>> =
        Default::default();
    const KEYS: [&str; 5] = [
        "reads",
        "writes",
        "other_ops",
        "bytes_read",
        "bytes_written",
    ];
    for pg in s["poll_groups"].as_array().into_iter().flatten() {
        for l in pg["listeners"].as_array().into_iter().flatten() {
            let key = (
                str_of(l, "trtype").to_owned(),
                str_of(l, "traddr").to_owned(),
                str_of(l, "trsvcid").to_owned(),
            );
            let acc = sums.entry(key).or_insert_with(|| vec![0.0; KEYS.len() + 4]);
            for (i, k) in KEYS.iter().enumerate() {
                acc[i] += num(&l[*k]).unwrap_or(0.0);
            }
            for (i, class) in ERROR_CLASSES.iter().enumerate() {
                acc[KEYS.len() + i] += num(&l["errors"][*class]).unwrap_or(0.0);
            }
        }
    }
    for ((trtype, traddr, trsvcid), v) in &sums {
        let at = [
            ("trtype", trtype.as_str()),
            ("traddr", traddr.as_str()),
            ("trsvcid", trsvcid.as_str()),
        ];
        let with = |k: &'static str, val: &'static str| {
            let mut l = at.to_vec();
            l.push((k, val));
            l
        };
        for (op, i) in [("read", 0), ("write", 1), ("other", 2)] {
            e.sample(
                "rtgt_listener_ops_total",
                Kind::Counter,
                "I/O commands completed through a listener (any status).",
                &with("op", op),
                v[i],
            );
        }
        for (op, i) in [("read", 3), ("write", 4)] {
            e.sample(
                "rtgt_listener_bytes_total",
                Kind::Counter,
                "Bytes of successful reads and writes through a listener.",
                &with("op", op),
                v[i],
            );
        }
        for (i, class) in ERROR_CLASSES.iter().enumerate() {
            e.sample(
                "rtgt_listener_errors_total",
                Kind::Counter,
                "Failed I/O commands through a listener, by status class (NVMe status code type; SCSI sense mapped onto it).",
                &with("class", class),
                v[KEYS.len() + i],
            );
        }
    }
}

/// A transport's own statistics, whatever their shape: every number becomes an untyped
/// sample named by its path; arrays of named objects (devices) become a `device` label.
fn flatten(e: &mut Exposition, prefix: &str, v: &Value, labels: &mut Vec<(&'static str, String)>) {
    let Some(obj) = v.as_object() else {
        return;
    };
    for (k, val) in obj {
        if k == "trtype" || k == "name" {
            continue;
        }
        let name = format!("{prefix}_{}", sanitize(k));
        match val {
            Value::Object(_) => flatten(e, &name, val, labels),
            Value::Array(items) => {
                for item in items {
                    let dev = item
                        .get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .to_owned();
                    labels.push(("device", dev));
                    flatten(e, &name, item, labels);
                    labels.pop();
                }
            }
            other => {
                if let Some(n) = num(other) {
                    let l: Vec<(&str, &str)> =
                        labels.iter().map(|(k, v)| (*k, v.as_str())).collect();
                    e.sample(
                        &name,
                        Kind::Untyped,
                        "A transport statistic (nvmf_get_stats).",
                        &l,
                        n,
                    );
                }
            }
        }
    }
}

fn subsystems(e: &mut Exposition, s: &Value) {
    for sub in s.as_array().into_iter().flatten() {
        let nqn = str_of(sub, "nqn");
        for ns in sub["namespaces"].as_array().into_iter().flatten() {
            let nsid = ns["nsid"].as_u64().unwrap_or(0).to_string();
            e.sample(
                "rtgt_nvmf_namespace_info",
                Kind::Gauge,
                "A namespace and its bdev (join with rtgt_bdev_* on bdev).",
                &[
                    ("subsystem", nqn),
                    ("nsid", &nsid),
                    ("bdev", str_of(ns, "bdev_name")),
                ],
                1.0,
            );
        }
        for l in sub["listen_addresses"].as_array().into_iter().flatten() {
            e.sample(
                "rtgt_nvmf_listener_info",
                Kind::Gauge,
                "A listener of a subsystem.",
                &[
                    ("subsystem", nqn),
                    ("trtype", str_of(l, "trtype")),
                    ("traddr", str_of(l, "traddr")),
                    ("trsvcid", str_of(l, "trsvcid")),
                ],
                1.0,
            );
        }
    }
}

fn bdev(e: &mut Exposition, b: &BdevMetrics) {
    let s = &b.stats;
    let name = b.name.as_str();
    for (op, v) in [
        ("read", s.num_read_ops),
        ("write", s.num_write_ops),
        ("unmap", s.num_unmap_ops),
        ("flush", s.num_flush_ops),
        ("write_zeroes", s.num_write_zeroes_ops),
        ("compare", s.num_compare_ops),
    ] {
        e.sample(
            "rtgt_bdev_ops_total",
            Kind::Counter,
            "Completed I/O operations of a bdev (bdev_reset_iostat resets it).",
            &[("bdev", name), ("op", op)],
            v as f64,
        );
    }
    for (op, v) in [
        ("read", s.bytes_read),
        ("write", s.bytes_written),
        ("unmap", s.bytes_unmapped),
    ] {
        e.sample(
            "rtgt_bdev_bytes_total",
            Kind::Counter,
            "Bytes a bdev read, wrote or deallocated (bdev_reset_iostat resets it).",
            &[("bdev", name), ("op", op)],
            v as f64,
        );
    }
    e.sample(
        "rtgt_bdev_errors_total",
        Kind::Counter,
        "I/O operations of a bdev that failed (bdev_reset_iostat resets it).",
        &[("bdev", name)],
        s.num_errors as f64,
    );
    for (kind, h) in &b.hist {
        let op = kind.name();
        let buckets: Vec<(Option<f64>, u64)> = h
            .buckets
            .iter()
            .enumerate()
            .map(|(i, n)| (hist_bound_secs(i), *n))
            .collect();
        e.histogram(
            "rtgt_bdev_latency_seconds",
            "Latency of a bdev's I/O from submission to completion (never reset).",
            &[("bdev", name), ("op", op)],
            &buckets,
            h.sum_ns as f64 * NS,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_target_renders_as_prometheus_families() {
        let mut h = Histogram::default();
        h.buckets[3] = 2;
        h.buckets[23] = 1;
        h.sum_ns = 5_000_000_000;
        let inp = Inputs {
            reactors: Some(
                json!({"reactors": [{"lcore": 0, "busy": 2_000_000_000u64, "idle": 1_000_000_000u64,
                "sleeps": 7, "messages": 9, "pollers": 3, "lw_threads": [{"id": 1}]}]}),
            ),
            nvmf_stats: Some(json!({"poll_groups": [{"name": "nvmf_tgt_poll_group_000",
                "admin_qpairs": 1, "io_qpairs": 4, "current_admin_qpairs": 1, "current_io_qpairs": 2,
                "current_unassociated_qpairs": 0, "pending_bdev_io": 0, "completed_nvme_io": 100,
                "transports": [{"trtype": "RDMA", "pending_data_buffer": 0,
                    "devices": [{"name": "rxe0", "polls": 10, "completions": 4}]}],
                "listeners": [{"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1",
                    "trsvcid": "4420", "reads": 5, "writes": 1, "other_ops": 0,
                    "bytes_read": 20480, "bytes_written": 4096,
                    "errors": {"generic": 0, "command_specific": 0, "media": 0, "path": 2}}]},
                {"name": "nvmf_tgt_poll_group_001", "transports": [],
                "listeners": [{"trtype": "RDMA", "adrfam": "IPv4", "traddr": "10.0.0.1",
                    "trsvcid": "4420", "reads": 2, "writes": 0, "other_ops": 1,
                    "bytes_read": 8192, "bytes_written": 0,
                    "errors": {"generic": 1, "command_specific": 0, "media": 0, "path": 0}}]}]})),
            subsystems: Some(
                json!([{"nqn": "nqn.x", "namespaces": [{"nsid": 1, "bdev_name": "M0"}],
                "listen_addresses": [{"trtype": "RDMA", "traddr": "10.0.0.1", "trsvcid": "4420"}]}]),
            ),
            controllers: vec![("nqn.x".into(), json!([{"cntlid": 1}, {"cntlid": 2}]))],
            bdevs: vec![BdevMetrics {
                name: "M0".into(),
                stats: IoStatSnapshot {
                    num_read_ops: 3,
                    bytes_read: 1536,
                    ..Default::default()
                },
                hist: vec![(HistKind::Read, h)],
            }],
        };
        let t = render(&inp);
        for want in [
            "# TYPE rtgt_reactor_busy_seconds_total counter\n",
            "rtgt_reactor_busy_seconds_total{reactor=\"0\",lcore=\"0\"} 2\n",
            "rtgt_reactor_sleeps_total{reactor=\"0\",lcore=\"0\"} 7\n",
            "rtgt_poll_group_current_qpairs{poll_group=\"nvmf_tgt_poll_group_000\",kind=\"io\"} 2\n",
            "rtgt_transport_devices_completions{poll_group=\"nvmf_tgt_poll_group_000\",trtype=\"RDMA\",device=\"rxe0\"} 4\n",
            "rtgt_nvmf_subsystem_controllers{subsystem=\"nqn.x\"} 2\n",
            "rtgt_listener_ops_total{trtype=\"RDMA\",traddr=\"10.0.0.1\",trsvcid=\"4420\",op=\"read\"} 7\n",
            "rtgt_listener_bytes_total{trtype=\"RDMA\",traddr=\"10.0.0.1\",trsvcid=\"4420\",op=\"read\"} 28672\n",
            "rtgt_listener_errors_total{trtype=\"RDMA\",traddr=\"10.0.0.1\",trsvcid=\"4420\",class=\"path\"} 2\n",
            "rtgt_listener_errors_total{trtype=\"RDMA\",traddr=\"10.0.0.1\",trsvcid=\"4420\",class=\"generic\"} 1\n",
            "rtgt_nvmf_namespace_info{subsystem=\"nqn.x\",nsid=\"1\",bdev=\"M0\"} 1\n",
            "rtgt_bdev_ops_total{bdev=\"M0\",op=\"read\"} 3\n",
            "rtgt_bdev_bytes_total{bdev=\"M0\",op=\"read\"} 1536\n",
            "rtgt_bdev_latency_seconds_bucket{bdev=\"M0\",op=\"read\",le=\"0.000008\"} 2\n",
            "rtgt_bdev_latency_seconds_bucket{bdev=\"M0\",op=\"read\",le=\"+Inf\"} 3\n",
            "rtgt_bdev_latency_seconds_sum{bdev=\"M0\",op=\"read\"} 5\n",
            "rtgt_up 1\n",
        ] {
            assert!(t.contains(want), "missing {want:?} in\n{t}");
        }
    }
}
