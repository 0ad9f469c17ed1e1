//! One sample of the target's counters, as `rtgt top` reads them over the RPC socket:
//! `bdev_get_iostat`, `bdev_get_latency_histogram`, `framework_get_reactors`,
//! `nvmf_get_subsystems` and `nvmf_subsystem_get_controllers`. Parsing is apart from the
//! client so that it can be tested with JSON literals.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use crate::client::{Client, ClientError};

/// The counters of one bdev that `top` turns into rates (`bdev_get_iostat`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BdevCounters {
    /// Bytes read.
    pub bytes_read: u64,
    /// Read commands.
    pub num_read_ops: u64,
    /// Bytes written.
    pub bytes_written: u64,
    /// Write commands.
    pub num_write_ops: u64,
    /// Sum of the read latencies, ticks.
    pub read_latency_ticks: u64,
    /// Sum of the write latencies, ticks.
    pub write_latency_ticks: u64,
}

/// One bdev: its counters and, when the server has `bdev_get_latency_histogram`, its read and
/// write latency histogram (non-cumulative bucket counts, never reset).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BdevSample {
    /// The `bdev_get_iostat` counters.
    pub counters: BdevCounters,
    /// Read plus write latency histogram.
    pub hist: Option<Vec<u64>>,
}

/// One NVMe-oF subsystem: its namespaces and connected hosts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubsystemSample {
    /// The subsystem's NQN.
    pub nqn: String,
    /// `(nsid, bdev name)` of each namespace.
    pub namespaces: Vec<(u32, String)>,
    /// The host NQN of each connected controller.
    pub hosts: Vec<String>,
}

/// One reactor's time counters (`framework_get_reactors`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReactorSample {
    /// The core (or index) the reactor runs on.
    pub lcore: u64,
    /// Its threads' names.
    pub threads: Vec<String>,
    /// Time spent doing work, ticks.
    pub busy: u64,
    /// Time spent idle, ticks.
    pub idle: u64,
}

/// Everything one refresh reads.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    /// `bdev_get_iostat`'s `ticks` (the server's monotonic clock).
    pub ticks: u64,
    /// Ticks per second of `ticks` and the latency sums.
    pub tick_rate: u64,
    /// Bdevs by name.
    pub bdevs: BTreeMap<String, BdevSample>,
    /// Upper bounds of the histogram buckets, µs (the last bucket has none).
    pub bounds_us: Vec<u64>,
    /// NVMe-oF subsystems (the discovery subsystem left out).
    pub subsystems: Vec<SubsystemSample>,
    /// Reactors.
    pub reactors: Vec<ReactorSample>,
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn array_of<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

impl Sample {
    /// Parses a `bdev_get_iostat` answer into `bdevs` (histograms left as they are).
    pub fn set_iostat(&mut self, v: &Value) {
        self.ticks = u64_of(v, "ticks");
        self.tick_rate = u64_of(v, "tick_rate").max(1);
        for b in array_of(v, "bdevs") {
            let counters = BdevCounters {
                bytes_read: u64_of(b, "bytes_read"),
                num_read_ops: u64_of(b, "num_read_ops"),
                bytes_written: u64_of(b, "bytes_written"),
                num_write_ops: u64_of(b, "num_write_ops"),
                read_latency_ticks: u64_of(b, "read_latency_ticks"),
                write_latency_ticks: u64_of(b, "write_latency_ticks"),
            };
            self.bdevs
                .entry(str_of(b, "name").to_string())
                .or_default()
                .counters = counters;
        }
    }

    /// Parses a `bdev_get_latency_histogram` answer: each bdev's read and write buckets added.
    pub fn set_histograms(&mut self, v: &Value) {
        self.bounds_us = array_of(v, "bucket_upper_bounds_us")
            .iter()
            .filter_map(Value::as_u64)
            .collect();
        for b in array_of(v, "bdevs") {
            let Some(entry) = self.bdevs.get_mut(str_of(b, "name")) else {
                continue;
            };
            let mut sum = vec![0u64; self.bounds_us.len() + 1];
            for kind in ["read", "write"] {
                let buckets = b.get(kind).map(|k| array_of(k, "buckets")).unwrap_or(&[]);
                for (acc, c) in sum.iter_mut().zip(buckets) {
                    *acc += c.as_u64().unwrap_or(0);
                }
            }
            entry.hist = Some(sum);
        }
    }

    /// Parses a `framework_get_reactors` answer.
    pub fn set_reactors(&mut self, v: &Value) {
        self.reactors = array_of(v, "reactors")
            .iter()
            .map(|r| ReactorSample {
                lcore: u64_of(r, "lcore"),
                threads: array_of(r, "lw_threads")
                    .iter()
                    .map(|t| str_of(t, "name").to_string())
                    .collect(),
                busy: u64_of(r, "busy"),
                idle: u64_of(r, "idle"),
            })
            .collect();
    }

    /// Parses a `nvmf_get_subsystems` answer (hosts are filled in by
    /// [`Sample::set_controllers`]).
    pub fn set_subsystems(&mut self, v: &Value) {
        self.subsystems = v
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter(|s| str_of(s, "subtype") != "Discovery")
            .map(|s| SubsystemSample {
                nqn: str_of(s, "nqn").to_string(),
                namespaces: array_of(s, "namespaces")
                    .iter()
                    .map(|n| {
                        let nsid = u32::try_from(u64_of(n, "nsid")).unwrap_or(0);
                        (nsid, str_of(n, "bdev_name").to_string())
                    })
                    .collect(),
                hosts: Vec::new(),
            })
            .collect();
    }

    /// Parses a `nvmf_subsystem_get_controllers` answer for subsystem `i`.
    pub fn set_controllers(&mut self, i: usize, v: &Value) {
        if let Some(s) = self.subsystems.get_mut(i) {
            s.hosts = v
                .as_array()
                .map(Vec::as_slice)
                .unwrap_or_default()
                .iter()
                .map(|c| str_of(c, "hostnqn").to_string())
                .collect();
        }
    }

    /// Reads one sample. A server without `bdev_get_latency_histogram` (an older rtgt, SPDK)
    /// gives a sample without histograms; any other failure is returned.
    pub fn fetch(client: &mut Client) -> Result<Sample, ClientError> {
        let mut s = Sample::default();
        s.set_iostat(&client.call("bdev_get_iostat", None)?);
        match client.call("bdev_get_latency_histogram", None) {
            Ok(v) => s.set_histograms(&v),
            Err(ClientError::Rpc { .. }) => {}
            Err(e) => return Err(e),
        }
        s.set_reactors(&client.call("framework_get_reactors", None)?);
        s.set_subsystems(&client.call("nvmf_get_subsystems", None)?);
        for i in 0..s.subsystems.len() {
            let nqn = s.subsystems[i].nqn.clone();
            match client.call("nvmf_subsystem_get_controllers", Some(&json!({"nqn": nqn}))) {
                Ok(v) => s.set_controllers(i, &v),
                // Deleted between the two calls.
                Err(ClientError::Rpc { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_parse_into_a_sample() {
        let mut s = Sample::default();
        s.set_iostat(
            &json!({"tick_rate": 1_000_000_000u64, "ticks": 5, "bdevs": [
            {"name": "Null0", "bytes_read": 4096, "num_read_ops": 1, "bytes_written": 0,
             "num_write_ops": 0, "read_latency_ticks": 900, "write_latency_ticks": 0}]}),
        );
        s.set_histograms(&json!({"bucket_upper_bounds_us": [1, 2], "bdevs": [
            {"name": "Null0", "read": {"buckets": [1, 0, 2], "sum_ns": 9},
             "write": {"buckets": [0, 3, 0], "sum_ns": 9}, "flush": {"buckets": [5, 5, 5]}},
            {"name": "Gone", "read": {"buckets": [1, 1, 1]}}]}));
        s.set_reactors(&json!({"tick_rate": 1_000_000_000u64, "reactors": [
            {"lcore": 2, "busy": 10, "idle": 30, "lw_threads": [{"name": "pg0"}]}]}));
        s.set_subsystems(&json!([
            {"nqn": "nqn.2014-08.org.nvmexpress.discovery", "subtype": "Discovery"},
            {"nqn": "nqn.a", "subtype": "NVMe", "namespaces": [{"nsid": 1, "bdev_name": "Null0"}]}]));
        s.set_controllers(0, &json!([{"cntlid": 1, "hostnqn": "nqn.h1"}]));
        s.set_controllers(7, &json!([{"hostnqn": "ignored"}]));

        assert_eq!((s.ticks, s.tick_rate), (5, 1_000_000_000));
        let b = &s.bdevs["Null0"];
        assert_eq!(b.counters.bytes_read, 4096);
        assert_eq!(b.counters.read_latency_ticks, 900);
        assert_eq!(
            b.hist.as_deref(),
            Some(&[1, 3, 2][..]),
            "read + write, no flush"
        );
        assert!(!s.bdevs.contains_key("Gone"));
        assert_eq!(s.bounds_us, [1, 2]);
        assert_eq!(s.reactors[0].lcore, 2);
        assert_eq!(s.reactors[0].threads, ["pg0"]);
        assert_eq!((s.reactors[0].busy, s.reactors[0].idle), (10, 30));
        assert_eq!(s.subsystems.len(), 1, "the discovery subsystem is left out");
        assert_eq!(s.subsystems[0].namespaces, [(1, "Null0".to_string())]);
        assert_eq!(s.subsystems[0].hosts, ["nqn.h1"]);
    }

    #[test]
    fn malformed_answers_give_empty_parts_not_panics() {
        let mut s = Sample::default();
        s.set_iostat(&json!("nonsense"));
        s.set_histograms(&json!({"bdevs": 3}));
        s.set_reactors(&json!(null));
        s.set_subsystems(&json!({"not": "an array"}));
        s.set_controllers(0, &json!(1));
        assert!(s.bdevs.is_empty() && s.reactors.is_empty() && s.subsystems.is_empty());
        assert_eq!(s.tick_rate, 1, "never zero: it divides");
    }
}
