//! The RDMA transport's options: SPDK's `nvmf_create_transport` option set for RDMA, with
//! SPDK's defaults, validated, and dumped in SPDK's field order for `nvmf_get_transports` and
//! save_config.
//!
//! An option this transport does not use is refused ([`TransportError::Unsupported`], `-32602`)
//! where SPDK ignores it: other transports' options (accepted only with the values rpc.py
//! sends by default), and the SPDK options that would have no effect here unless they keep
//! their default value (`dif_insert_or_strip`, `zcopy`, `abort_timeout_sec`, `ack_timeout`,
//! `data_wr_pool_size`, `masked_oncs`, `masked_fuses`). `io_unit_size` is accepted with any
//! value and ignored, as SPDK itself does since v26.05 (its v24.09 save_config writes it).

use serde_json::{Value, json};
use target_core::registry::{TransportError, TransportParams, refuse_unused_options};

/// The options the RDMA transport decodes.
pub const USED_OPTIONS: &[&str] = &[
    "max_queue_depth",
    "max_io_qpairs_per_ctrlr",
    "in_capsule_data_size",
    "max_io_size",
    "io_unit_size",
    "max_aq_depth",
    "num_shared_buffers",
    "buf_cache_size",
    "iobuf_small_cache_size",
    "iobuf_large_cache_size",
    "dif_insert_or_strip",
    "zcopy",
    "max_srq_depth",
    "no_srq",
    "num_cqe",
    "acceptor_backlog",
    "no_wr_batching",
    "abort_timeout_sec",
    "acceptor_poll_rate",
    "ack_timeout",
    "data_wr_pool_size",
    "disable_command_passthru",
    "kas",
    "min_kato",
    "masked_oncs",
    "masked_fuses",
];

/// `UINT32_MAX`: "automatic" for the cache sizes.
pub const AUTO: u32 = u32::MAX;

/// Size of a small data buffer (SPDK's iobuf small buffer): covers 4 KiB I/O, Identify, Connect
/// data and Dataset Management ranges.
pub const SMALL_BUF_SIZE: usize = 8192;
/// Size of a large data buffer; a transfer above [`SMALL_BUF_SIZE`] takes
/// `ceil(len / LARGE_BUF_SIZE)` of them.
pub const LARGE_BUF_SIZE: usize = 128 * 1024;
/// Most data buffers one request may use (the bdev layer's limit).
pub const MAX_BUFS_PER_REQUEST: usize = target_core::bdev::MAX_IO_BUFS;
/// Largest `max_io_size` the buffer layout can serve.
pub const MAX_IO_SIZE_LIMIT: u32 = (LARGE_BUF_SIZE * MAX_BUFS_PER_REQUEST) as u32;
/// Smallest in-capsule data size: 16 SGL descriptors of 16 bytes (SPDK raises smaller values).
pub const MIN_IN_CAPSULE_DATA_SIZE: u32 = 256;
/// Smallest admin queue depth (SPDK raises smaller values).
pub const MIN_ADMIN_QUEUE_DEPTH: u32 = 32;

/// The options in effect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RdmaOpts {
    /// Entries per I/O queue.
    pub max_queue_depth: u16,
    /// I/O queues per controller.
    pub max_io_qpairs_per_ctrlr: u16,
    /// In-capsule data bytes per command capsule.
    pub in_capsule_data_size: u32,
    /// Largest data transfer per command.
    pub max_io_size: u32,
    /// Deprecated (by SPDK too): accepted and ignored (data buffers are 8 KiB and 128 KiB).
    pub io_unit_size: u32,
    /// Entries per admin queue.
    pub max_aq_depth: u32,
    /// Deprecated: sizes the shared data buffer pools (small buffers = this, large = this / 8).
    pub num_shared_buffers: u32,
    /// Per-poll-group cache of small buffers ([`AUTO`] = half the pool over the poll groups).
    pub iobuf_small_cache_size: u32,
    /// Per-poll-group cache of large buffers ([`AUTO`] likewise).
    pub iobuf_large_cache_size: u32,
    /// DIF insert/strip: only `false` (the bdevs have no protection information).
    pub dif_insert_or_strip: bool,
    /// Zero copy through the bdev layer (SPDK: TCP only): only `false`.
    pub zcopy: bool,
    /// Receives per shared receive queue.
    pub max_srq_depth: u32,
    /// Per-queue-pair receive queues instead of a shared one.
    pub no_srq: bool,
    /// Completion queue entries per poll group and device when `no_srq` is set.
    pub num_cqe: i32,
    /// `rdma_listen` backlog.
    pub acceptor_backlog: i32,
    /// Post every work request at once instead of once per poll.
    pub no_wr_batching: bool,
    /// Abort command execution timeout in seconds: only SPDK's default 1 (rtgt's Abort never
    /// waits for a command in progress: it aborts only parked AERs).
    pub abort_timeout_sec: u32,
    /// Acceptor poller period in microseconds.
    pub acceptor_poll_rate: u32,
    /// TCP only: only SPDK's default 0; dumped.
    pub ack_timeout: u32,
    /// SPDK's data work-request pool size: only SPDK's default (work requests are built per
    /// poll here, so there is no pool); dumped.
    pub data_wr_pool_size: u32,
    /// Disable command passthrough: either value; rtgt never passes I/O commands through, so
    /// `true` holds by construction. Dumped.
    pub disable_command_passthru: bool,
    /// Keep-alive granularity in 100 ms units (Identify KAS).
    pub kas: u16,
    /// Shortest keep-alive timeout in ms; longer host values are rounded up to `kas`.
    pub min_kato: u32,
}

impl Default for RdmaOpts {
    fn default() -> Self {
        Self {
            max_queue_depth: 128,
            max_io_qpairs_per_ctrlr: 127,
            in_capsule_data_size: 4096,
            max_io_size: 131072,
            io_unit_size: 8192,
            max_aq_depth: 128,
            num_shared_buffers: 4095,
            iobuf_small_cache_size: AUTO,
            iobuf_large_cache_size: AUTO,
            dif_insert_or_strip: false,
            zcopy: false,
            max_srq_depth: 4096,
            no_srq: false,
            num_cqe: 4096,
            acceptor_backlog: 100,
            no_wr_batching: false,
            abort_timeout_sec: 1,
            acceptor_poll_rate: 10000,
            ack_timeout: 0,
            data_wr_pool_size: 4095,
            disable_command_passthru: false,
            kas: 100,
            min_kato: 10000,
        }
    }
}

fn invalid(msg: String) -> TransportError {
    TransportError::Invalid(msg)
}

fn get_u64(p: &TransportParams, key: &str, max: u64) -> Result<Option<u64>, TransportError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n <= max => Ok(Some(n)),
            _ => Err(invalid(format!(
                "invalid value for '{key}': {v} (an integer from 0 to {max} is required)"
            ))),
        },
    }
}

fn get_u32(p: &TransportParams, key: &str, into: &mut u32) -> Result<(), TransportError> {
    if let Some(n) = get_u64(p, key, u64::from(u32::MAX))? {
        *into = n as u32;
    }
    Ok(())
}

fn get_u16(p: &TransportParams, key: &str, into: &mut u16) -> Result<(), TransportError> {
    if let Some(n) = get_u64(p, key, u64::from(u16::MAX))? {
        *into = n as u16;
    }
    Ok(())
}

fn get_i32(p: &TransportParams, key: &str, into: &mut i32) -> Result<(), TransportError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(v) => match v.as_i64().and_then(|n| i32::try_from(n).ok()) {
            Some(n) => {
                *into = n;
                Ok(())
            }
            None => Err(invalid(format!(
                "invalid value for '{key}': {v} (a 32-bit integer is required)"
            ))),
        },
    }
}

fn get_bool(p: &TransportParams, key: &str, into: &mut bool) -> Result<(), TransportError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Bool(b)) => {
            *into = *b;
            Ok(())
        }
        Some(v) => Err(invalid(format!(
            "invalid value for '{key}': {v} (true or false is required)"
        ))),
    }
}

/// `masked_oncs` / `masked_fuses`: a list of names; only the shape is checked.
fn check_name_list(p: &TransportParams, key: &str) -> Result<(), TransportError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(a)) if a.iter().all(Value::is_string) => Ok(()),
        Some(Value::String(_)) => Ok(()),
        Some(v) => Err(invalid(format!(
            "invalid value for '{key}': {v} (a list of names is required)"
        ))),
    }
}

impl RdmaOpts {
    /// Decodes the options over SPDK's defaults and validates them. Options the transport
    /// does not use are refused (see the module documentation).
    pub fn decode(p: &TransportParams) -> Result<RdmaOpts, TransportError> {
        refuse_unused_options("RDMA", p, USED_OPTIONS)?;
        let mut o = RdmaOpts::default();
        get_u16(p, "max_queue_depth", &mut o.max_queue_depth)?;
        get_u16(p, "max_io_qpairs_per_ctrlr", &mut o.max_io_qpairs_per_ctrlr)?;
        get_u32(p, "in_capsule_data_size", &mut o.in_capsule_data_size)?;
        get_u32(p, "max_io_size", &mut o.max_io_size)?;
        get_u32(p, "io_unit_size", &mut o.io_unit_size)?;
        get_u32(p, "max_aq_depth", &mut o.max_aq_depth)?;
        get_u32(p, "num_shared_buffers", &mut o.num_shared_buffers)?;
        // The deprecated name first, so that the new one wins when both are given.
        get_u32(p, "buf_cache_size", &mut o.iobuf_small_cache_size)?;
        get_u32(p, "iobuf_small_cache_size", &mut o.iobuf_small_cache_size)?;
        get_u32(p, "iobuf_large_cache_size", &mut o.iobuf_large_cache_size)?;
        get_bool(p, "dif_insert_or_strip", &mut o.dif_insert_or_strip)?;
        get_bool(p, "zcopy", &mut o.zcopy)?;
        get_u32(p, "max_srq_depth", &mut o.max_srq_depth)?;
        get_bool(p, "no_srq", &mut o.no_srq)?;
        get_i32(p, "num_cqe", &mut o.num_cqe)?;
        get_i32(p, "acceptor_backlog", &mut o.acceptor_backlog)?;
        get_bool(p, "no_wr_batching", &mut o.no_wr_batching)?;
        get_u32(p, "abort_timeout_sec", &mut o.abort_timeout_sec)?;
        get_u32(p, "acceptor_poll_rate", &mut o.acceptor_poll_rate)?;
        get_u32(p, "ack_timeout", &mut o.ack_timeout)?;
        get_u32(p, "data_wr_pool_size", &mut o.data_wr_pool_size)?;
        get_bool(
            p,
            "disable_command_passthru",
            &mut o.disable_command_passthru,
        )?;
        get_u16(p, "kas", &mut o.kas)?;
        get_u32(p, "min_kato", &mut o.min_kato)?;
        check_name_list(p, "masked_oncs")?;
        check_name_list(p, "masked_fuses")?;
        o.refuse_without_effect(p)?;
        o.validate()?;
        Ok(o)
    }

    /// Refuses the SPDK options that would have no effect in this transport unless they keep
    /// SPDK's default.
    fn refuse_without_effect(&self, p: &TransportParams) -> Result<(), TransportError> {
        let d = RdmaOpts::default();
        let unsupported = |what: String, why: &str| {
            Err(TransportError::Unsupported(format!(
                "{what} is not supported: {why}"
            )))
        };
        if self.dif_insert_or_strip {
            return unsupported(
                "dif_insert_or_strip true".into(),
                "rtgt's bdevs have no protection information (and SPDK applies it to TCP only)",
            );
        }
        if self.zcopy {
            return unsupported(
                "zcopy true".into(),
                "SPDK's zero-copy is a TCP option; rtgt's RDMA transport has no zcopy mode",
            );
        }
        if self.abort_timeout_sec != d.abort_timeout_sec {
            return unsupported(
                format!("abort_timeout_sec {}", self.abort_timeout_sec),
                "rtgt's Abort never waits for a command in progress; only SPDK's default 1 is accepted",
            );
        }
        if self.ack_timeout != d.ack_timeout {
            return unsupported(
                format!("ack_timeout {}", self.ack_timeout),
                "it is a TCP option; only SPDK's default 0 is accepted",
            );
        }
        if self.data_wr_pool_size != d.data_wr_pool_size {
            return unsupported(
                format!("data_wr_pool_size {}", self.data_wr_pool_size),
                "rtgt builds its work requests per poll and keeps no pool of them; only SPDK's default 4095 is accepted",
            );
        }
        for key in ["masked_oncs", "masked_fuses"] {
            let given = match p.get(key) {
                Some(Value::Array(a)) => !a.is_empty(),
                Some(Value::String(s)) => !s.is_empty(),
                _ => false,
            };
            if given {
                return unsupported(
                    format!("{key} {}", p[key]),
                    "rtgt does not mask ONCS or FUSES bits",
                );
            }
        }
        Ok(())
    }

    /// Applies SPDK's adjustments and rejects what cannot work.
    fn validate(&mut self) -> Result<(), TransportError> {
        if self.max_queue_depth < 2 {
            return Err(invalid(format!(
                "max_queue_depth {} is too small (at least 2)",
                self.max_queue_depth
            )));
        }
        if self.max_io_qpairs_per_ctrlr == 0 {
            return Err(invalid("max_io_qpairs_per_ctrlr must be at least 1".into()));
        }
        if self.max_io_size < 8192 || !self.max_io_size.is_power_of_two() {
            return Err(invalid(format!(
                "max_io_size {} must be a power of 2 and be greater than or equal 8KB",
                self.max_io_size
            )));
        }
        if self.max_io_size > MAX_IO_SIZE_LIMIT {
            return Err(invalid(format!(
                "max_io_size {} is above the supported maximum of {MAX_IO_SIZE_LIMIT}",
                self.max_io_size
            )));
        }
        if self.in_capsule_data_size < MIN_IN_CAPSULE_DATA_SIZE {
            tracing::warn!(
                "in_capsule_data_size {} raised to {MIN_IN_CAPSULE_DATA_SIZE} (16 SGL descriptors)",
                self.in_capsule_data_size
            );
            self.in_capsule_data_size = MIN_IN_CAPSULE_DATA_SIZE;
        }
        if !self.in_capsule_data_size.is_multiple_of(16) {
            self.in_capsule_data_size = self.in_capsule_data_size.next_multiple_of(16);
        }
        if self.in_capsule_data_size > self.max_io_size {
            return Err(invalid(format!(
                "in_capsule_data_size {} is larger than max_io_size {}",
                self.in_capsule_data_size, self.max_io_size
            )));
        }
        if self.max_aq_depth < MIN_ADMIN_QUEUE_DEPTH {
            self.max_aq_depth = MIN_ADMIN_QUEUE_DEPTH;
        }
        if self.max_aq_depth > u32::from(u16::MAX) {
            return Err(invalid(format!(
                "max_aq_depth {} is too large (at most 65535)",
                self.max_aq_depth
            )));
        }
        if self.num_shared_buffers < 32 {
            return Err(invalid(format!(
                "num_shared_buffers {} is too small (at least 32)",
                self.num_shared_buffers
            )));
        }
        if self.max_srq_depth < 2 {
            return Err(invalid(format!(
                "max_srq_depth {} is too small (at least 2)",
                self.max_srq_depth
            )));
        }
        if self.num_cqe <= 0 {
            self.num_cqe = 4096;
        }
        if self.acceptor_backlog <= 0 {
            self.acceptor_backlog = 100;
        }
        if self.acceptor_poll_rate == 0 {
            self.acceptor_poll_rate = 10000;
        }
        if self.kas == 0 {
            return Err(invalid("kas must be greater than 0".into()));
        }
        if self.min_kato == 0 {
            return Err(invalid("min_kato must be greater than 0".into()));
        }
        let gran = u32::from(self.kas) * 100;
        self.min_kato = self.min_kato.div_ceil(gran).saturating_mul(gran);
        Ok(())
    }

    /// Small data buffers in the shared pool.
    pub fn small_pool_count(&self) -> usize {
        self.num_shared_buffers as usize
    }

    /// Large data buffers in the shared pool.
    pub fn large_pool_count(&self) -> usize {
        (self.num_shared_buffers as usize / 8).max(MAX_BUFS_PER_REQUEST)
    }

    /// The per-poll-group cache target for a pool of `pool` buffers shared by `groups` poll
    /// groups: `requested`, or half the pool spread over the groups for [`AUTO`], and never so
    /// much that the caches could hold the whole pool.
    pub fn cache_size(requested: u32, pool: usize, groups: usize) -> usize {
        let groups = groups.max(1);
        let fair = pool / 2 / groups;
        let want = if requested == AUTO {
            fair
        } else {
            requested as usize
        };
        want.min(fair).max(1)
    }

    /// The options in SPDK's field order (trtype first), as `nvmf_get_transports` shows them.
    pub fn dump(&self) -> TransportParams {
        let mut m = TransportParams::new();
        let mut put = |k: &str, v: Value| {
            m.insert(k.to_string(), v);
        };
        put("trtype", json!("RDMA"));
        put("max_queue_depth", json!(self.max_queue_depth));
        put(
            "max_io_qpairs_per_ctrlr",
            json!(self.max_io_qpairs_per_ctrlr),
        );
        put("in_capsule_data_size", json!(self.in_capsule_data_size));
        put("max_io_size", json!(self.max_io_size));
        put("max_aq_depth", json!(self.max_aq_depth));
        put("iobuf_small_cache_size", json!(self.iobuf_small_cache_size));
        put("iobuf_large_cache_size", json!(self.iobuf_large_cache_size));
        put("dif_insert_or_strip", json!(self.dif_insert_or_strip));
        put("zcopy", json!(self.zcopy));
        put("max_srq_depth", json!(self.max_srq_depth));
        put("no_srq", json!(self.no_srq));
        if self.no_srq {
            put("num_cqe", json!(self.num_cqe));
        }
        put("acceptor_backlog", json!(self.acceptor_backlog));
        put("no_wr_batching", json!(self.no_wr_batching));
        put("abort_timeout_sec", json!(self.abort_timeout_sec));
        put("ack_timeout", json!(self.ack_timeout));
        put("data_wr_pool_size", json!(self.data_wr_pool_size));
        put(
            "disable_command_passthru",
            json!(self.disable_command_passthru),
        );
        put("kas", json!(self.kas));
        put("min_kato", json!(self.min_kato));
        m
    }
}

/// The default option set, for the registry (`TransportOps::defaults`).
pub fn defaults() -> TransportParams {
    RdmaOpts::default().dump()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: Value) -> TransportParams {
        match v {
            Value::Object(m) => m,
            _ => TransportParams::new(),
        }
    }

    #[test]
    fn defaults_are_spdks() {
        let o = RdmaOpts::decode(&TransportParams::new()).unwrap();
        assert_eq!(o, RdmaOpts::default());
        let d = o.dump();
        let keys: Vec<&str> = d.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            [
                "trtype",
                "max_queue_depth",
                "max_io_qpairs_per_ctrlr",
                "in_capsule_data_size",
                "max_io_size",
                "max_aq_depth",
                "iobuf_small_cache_size",
                "iobuf_large_cache_size",
                "dif_insert_or_strip",
                "zcopy",
                "max_srq_depth",
                "no_srq",
                "acceptor_backlog",
                "no_wr_batching",
                "abort_timeout_sec",
                "ack_timeout",
                "data_wr_pool_size",
                "disable_command_passthru",
                "kas",
                "min_kato",
            ]
        );
        assert_eq!(d["iobuf_small_cache_size"], json!(4294967295u32));
        assert_eq!(d["max_queue_depth"], 128);
        assert_eq!(d["max_io_qpairs_per_ctrlr"], 127);
        assert_eq!(d["in_capsule_data_size"], 4096);
        assert_eq!(d["max_io_size"], 131072);
        assert_eq!(d["max_aq_depth"], 128);
        assert_eq!(d["max_srq_depth"], 4096);
        assert_eq!(d["acceptor_backlog"], 100);
        assert_eq!(d["kas"], 100);
        assert_eq!(d["min_kato"], 10000);
        assert_eq!(defaults(), d);
    }

    #[test]
    fn rpc_py_defaults_and_deprecated_names() {
        // What rpc.py sends for `nvmf_create_transport -t RDMA -q 64 -u 16384 -n 8191 -b 33 -r -d 1024`.
        let o = RdmaOpts::decode(&params(json!({
            "trtype": "RDMA",
            "max_queue_depth": 64,
            "io_unit_size": 16384,
            "num_shared_buffers": 8191,
            "buf_cache_size": 33,
            "zcopy": false,
            "c2h_success": true,
            "dif_insert_or_strip": false,
            "no_wr_batching": false,
            "disable_mappable_bar0": false,
            "disable_adaptive_irq": false,
            "disable_shadow_doorbells": false,
            "disable_command_passthru": false,
            "no_srq": true,
            "num_cqe": 1024,
        })))
        .unwrap();
        assert_eq!(o.max_queue_depth, 64);
        assert_eq!(o.io_unit_size, 16384);
        assert_eq!(o.num_shared_buffers, 8191);
        assert_eq!(o.iobuf_small_cache_size, 33);
        assert!(o.no_srq);
        let d = o.dump();
        assert_eq!(d["num_cqe"], 1024, "num_cqe is dumped with no_srq");
        let pos = |k: &str| d.keys().position(|x| x == k).unwrap();
        assert_eq!(pos("num_cqe"), pos("no_srq") + 1);
        // The new name wins over the deprecated one.
        let o = RdmaOpts::decode(&params(json!({
            "buf_cache_size": 5, "iobuf_small_cache_size": 7
        })))
        .unwrap();
        assert_eq!(o.iobuf_small_cache_size, 7);
    }

    /// Issue 13: options that would have no effect used to be accepted (and some dumped).
    #[test]
    fn options_without_effect_are_refused() {
        let refused = |v: Value| match RdmaOpts::decode(&params(v.clone())) {
            Err(TransportError::Unsupported(m)) => m,
            other => panic!("{v} gave {other:?}"),
        };
        for (v, words) in [
            (json!({"c2h_success": false}), "'c2h_success' (false)"),
            (json!({"sock_priority": 3}), "'sock_priority'"),
            (
                json!({"some_future_option": {"x": 1}}),
                "some_future_option",
            ),
            (
                json!({"disable_mappable_bar0": true}),
                "disable_mappable_bar0",
            ),
            (
                json!({"dif_insert_or_strip": true}),
                "dif_insert_or_strip true",
            ),
            (json!({"zcopy": true}), "zcopy true"),
            (json!({"abort_timeout_sec": 5}), "abort_timeout_sec 5"),
            (json!({"ack_timeout": 100}), "ack_timeout 100"),
            (json!({"data_wr_pool_size": 8191}), "data_wr_pool_size 8191"),
            (json!({"masked_oncs": ["nvmdsmsv"]}), "masked_oncs"),
            (json!({"masked_fuses": "fcws"}), "masked_fuses"),
        ] {
            let m = refused(v);
            assert!(m.contains(words) && m.contains("not supported"), "{m}");
        }
        // SPDK's own dump of a default RDMA transport loads.
        let spdk = json!({"trtype": "RDMA", "max_queue_depth": 128, "max_io_qpairs_per_ctrlr": 127,
            "in_capsule_data_size": 4096, "max_io_size": 131072, "io_unit_size": 8192,
            "max_aq_depth": 128, "num_shared_buffers": 4095, "buf_cache_size": 4294967295u32,
            "dif_insert_or_strip": false, "zcopy": false, "max_srq_depth": 4096, "no_srq": false,
            "acceptor_backlog": 100, "no_wr_batching": false, "abort_timeout_sec": 1,
            "ack_timeout": 0, "data_wr_pool_size": 4095, "disable_command_passthru": false,
            "masked_oncs": [], "kas": 100, "min_kato": 10000});
        assert!(RdmaOpts::decode(&params(spdk)).is_ok());
        assert!(RdmaOpts::decode(&params(json!({"disable_command_passthru": true}))).is_ok());
    }

    #[test]
    fn spdk_adjustments() {
        let o = RdmaOpts::decode(&params(json!({
            "in_capsule_data_size": 0,
            "max_aq_depth": 4,
            "acceptor_backlog": -1,
            "num_cqe": 0,
            "kas": 10,
            "min_kato": 1500,
        })))
        .unwrap();
        assert_eq!(o.in_capsule_data_size, 256);
        assert_eq!(o.max_aq_depth, 32);
        assert_eq!(o.acceptor_backlog, 100);
        assert_eq!(o.num_cqe, 4096);
        assert_eq!(o.min_kato, 2000, "rounded up to kas x 100 ms");
        let o = RdmaOpts::decode(&params(json!({"in_capsule_data_size": 1000}))).unwrap();
        assert_eq!(o.in_capsule_data_size, 1008);
    }

    #[test]
    fn invalid_values() {
        for bad in [
            json!({"max_io_size": 12288}),
            json!({"max_io_size": 4096}),
            json!({"max_io_size": 0}),
            json!({"max_io_size": 8388608}),
            json!({"max_queue_depth": 1}),
            json!({"max_queue_depth": 65536}),
            json!({"max_queue_depth": "128"}),
            json!({"max_io_qpairs_per_ctrlr": 0}),
            json!({"no_srq": 1}),
            json!({"kas": 0}),
            json!({"min_kato": 0}),
            json!({"num_shared_buffers": 8}),
            json!({"max_srq_depth": 1}),
            json!({"num_cqe": 1.5}),
            json!({"in_capsule_data_size": 262144}),
            json!({"masked_oncs": 3}),
            json!({"max_aq_depth": 70000}),
        ] {
            assert!(
                RdmaOpts::decode(&params(bad.clone())).is_err(),
                "{bad} accepted"
            );
        }
        let e = RdmaOpts::decode(&params(json!({"max_io_size": 12288}))).unwrap_err();
        assert!(e.to_string().contains("power of 2"), "{e}");
    }

    #[test]
    fn cache_sizes() {
        assert_eq!(RdmaOpts::cache_size(AUTO, 4095, 2), 1023);
        assert_eq!(RdmaOpts::cache_size(10, 4095, 2), 10);
        assert_eq!(RdmaOpts::cache_size(100_000, 4095, 4), 511, "clamped");
        assert_eq!(RdmaOpts::cache_size(AUTO, 2, 8), 1);
    }
}
