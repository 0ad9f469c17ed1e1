//! The TCP transport's options: SPDK's `nvmf_create_transport -t TCP` option set with SPDK's
//! defaults (`lib/nvmf/tcp.c`), validated, and dumped for `nvmf_get_transports` and
//! save_config.
//!
//! An option this transport does not use is refused ([`TransportError::Unsupported`],
//! `-32602`): other transports' options (accepted only with the values rpc.py sends by
//! default), `dif_insert_or_strip` and `zcopy` set to true, and `abort_timeout_sec` other than
//! SPDK's default 1 (rtgt's Abort never waits for a command in progress).

use serde::Deserialize;
use serde_json::{Value, json};
use target_core::registry::{TransportError, TransportParams, refuse_unused_options};

use crate::conn::Config;

/// The options the TCP transport decodes.
pub const USED_OPTIONS: &[&str] = &[
    "max_queue_depth",
    "max_io_qpairs_per_ctrlr",
    "in_capsule_data_size",
    "max_io_size",
    "io_unit_size",
    "max_aq_depth",
    "num_shared_buffers",
    "buf_cache_size",
    "dif_insert_or_strip",
    "zcopy",
    "c2h_success",
    "sock_priority",
    "abort_timeout_sec",
    "acceptor_poll_rate",
    "kas",
    "min_kato",
];

/// Most data buffers one command may use (the bdev layer's limit).
pub const MAX_BUFS_PER_REQUEST: usize = target_core::bdev::MAX_IO_BUFS;
/// Largest `sock_priority` (SO_PRIORITY without CAP_NET_ADMIN goes to 6; SPDK allows 0–16).
pub const MAX_SOCK_PRIORITY: u32 = 16;

/// The options in effect.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(default)]
pub struct TcpOpts {
    /// Entries per I/O queue.
    pub max_queue_depth: u16,
    /// I/O queues per controller.
    pub max_io_qpairs_per_ctrlr: u16,
    /// In-capsule data bytes an I/O command may carry (the admin queue always takes 8 KiB).
    pub in_capsule_data_size: u32,
    /// Largest data transfer per command (MDTS; also MAXH2CDATA, as SPDK).
    pub max_io_size: u32,
    /// Size of a shared data buffer; a larger command takes several.
    pub io_unit_size: u32,
    /// Entries per admin queue.
    pub max_aq_depth: u32,
    /// Data buffers in the shared pool.
    pub num_shared_buffers: u32,
    /// Data buffers each poll group keeps in its cache.
    pub buf_cache_size: u32,
    /// Only `false` (the bdevs have no protection information).
    pub dif_insert_or_strip: bool,
    /// Only `false` (no zero-copy bdev path).
    pub zcopy: bool,
    /// SUCCESS in the last C2HData PDU instead of a response capsule, when the host disabled
    /// SQ flow control.
    pub c2h_success: bool,
    /// SO_PRIORITY of accepted sockets (0–16).
    pub sock_priority: u32,
    /// Only SPDK's default 1.
    pub abort_timeout_sec: u32,
    /// Acceptor poller period in microseconds (the poller also wakes on a new connection).
    pub acceptor_poll_rate: u32,
    /// Keep-alive granularity in 100 ms units (Identify KAS).
    pub kas: u16,
    /// Shortest keep-alive timeout in ms.
    pub min_kato: u32,
}

impl Default for TcpOpts {
    fn default() -> Self {
        Self {
            max_queue_depth: 128,
            max_io_qpairs_per_ctrlr: 127,
            in_capsule_data_size: 4096,
            max_io_size: 131072,
            io_unit_size: 131072,
            max_aq_depth: 128,
            num_shared_buffers: 511,
            buf_cache_size: 32,
            dif_insert_or_strip: false,
            zcopy: false,
            c2h_success: true,
            sock_priority: 0,
            abort_timeout_sec: 1,
            acceptor_poll_rate: 10000,
            kas: 100,
            min_kato: 10000,
        }
    }
}

fn invalid(msg: String) -> TransportError {
    TransportError::Invalid(msg)
}

fn unsupported(what: String, why: &str) -> TransportError {
    TransportError::Unsupported(format!(
        "{what} is not supported by the TCP transport: {why}"
    ))
}

impl TcpOpts {
    /// Decodes the options over SPDK's defaults and validates them.
    pub fn decode(p: &TransportParams) -> Result<TcpOpts, TransportError> {
        refuse_unused_options("TCP", p, USED_OPTIONS)?;
        let used: serde_json::Map<String, Value> = p
            .iter()
            .filter(|(k, v)| USED_OPTIONS.contains(&k.as_str()) && !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let mut o: TcpOpts = serde_json::from_value(Value::Object(used))
            .map_err(|e| invalid(format!("invalid TCP transport option: {e}")))?;
        o.refuse_without_effect()?;
        o.validate()?;
        Ok(o)
    }

    fn refuse_without_effect(&self) -> Result<(), TransportError> {
        if self.dif_insert_or_strip {
            return Err(unsupported(
                "dif_insert_or_strip true".into(),
                "rtgt's bdevs have no protection information",
            ));
        }
        if self.zcopy {
            return Err(unsupported(
                "zcopy true".into(),
                "rtgt has no zero-copy bdev path",
            ));
        }
        if self.abort_timeout_sec != 1 {
            return Err(unsupported(
                format!("abort_timeout_sec {}", self.abort_timeout_sec),
                "rtgt's Abort never waits for a command in progress; only SPDK's default 1 is accepted",
            ));
        }
        Ok(())
    }

    /// SPDK's checks and adjustments.
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
        if self.max_aq_depth < 2 || self.max_aq_depth > u32::from(u16::MAX) {
            return Err(invalid(format!(
                "max_aq_depth {} must be 2..65535",
                self.max_aq_depth
            )));
        }
        if self.io_unit_size < 4096 || !self.io_unit_size.is_multiple_of(4096) {
            return Err(invalid(format!(
                "io_unit_size {} must be a multiple of 4096",
                self.io_unit_size
            )));
        }
        if self.max_io_size < 4096 || !self.max_io_size.is_multiple_of(4) {
            return Err(invalid(format!(
                "max_io_size {} must be at least 4096 and a multiple of 4",
                self.max_io_size
            )));
        }
        if self.io_unit_size > self.max_io_size {
            // SPDK lowers io_unit_size to max_io_size.
            self.io_unit_size = self.max_io_size.next_multiple_of(4096);
        }
        let bufs = self.max_io_size.div_ceil(self.io_unit_size) as usize;
        if bufs > MAX_BUFS_PER_REQUEST {
            return Err(invalid(format!(
                "max_io_size {} needs {bufs} buffers of io_unit_size {}; at most {MAX_BUFS_PER_REQUEST}",
                self.max_io_size, self.io_unit_size
            )));
        }
        if self.in_capsule_data_size > self.max_io_size {
            return Err(invalid(format!(
                "in_capsule_data_size {} is larger than max_io_size {}",
                self.in_capsule_data_size, self.max_io_size
            )));
        }
        if self.in_capsule_data_size > 1 << 20 {
            return Err(invalid(format!(
                "in_capsule_data_size {} is too large (at most 1 MiB)",
                self.in_capsule_data_size
            )));
        }
        if (self.num_shared_buffers as usize) < bufs {
            return Err(invalid(format!(
                "num_shared_buffers {} cannot hold one command of max_io_size ({bufs} buffers)",
                self.num_shared_buffers
            )));
        }
        if self.sock_priority > MAX_SOCK_PRIORITY {
            return Err(invalid(format!(
                "sock_priority {} must be 0..{MAX_SOCK_PRIORITY}",
                self.sock_priority
            )));
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
        self.conn_config()
            .validate()
            .map_err(|e| invalid(e.to_string()))?;
        Ok(())
    }

    /// The per-connection settings: slots for the larger of the two depths (which queue a
    /// connection carries is known only after Connect), MAXH2CDATA = `max_io_size` as SPDK,
    /// one R2T and one C2HData PDU per command (the data may span several buffers).
    pub fn conn_config(&self) -> Config {
        Config {
            queue_depth: self.max_queue_depth.max(self.max_aq_depth as u16),
            in_capsule_data_size: self.in_capsule_data_size,
            max_io_size: self.max_io_size,
            maxh2cdata: self.max_io_size.next_multiple_of(4).max(4096),
            r2t_size: self.max_io_size,
            max_r2t_per_command: 1,
            c2h_chunk: self.max_io_size,
            c2h_success: self.c2h_success,
            cpda: 0,
        }
    }

    /// The per-poll-group cache of data buffers: `buf_cache_size`, but never so much that
    /// the caches of `groups` poll groups hold more than half the pool.
    pub fn cache_size(&self, groups: usize) -> usize {
        let fair = self.num_shared_buffers as usize / 2 / groups.max(1);
        (self.buf_cache_size as usize).min(fair)
    }

    /// The options in SPDK's field order (trtype first), as `nvmf_get_transports` shows them.
    pub fn dump(&self) -> TransportParams {
        let v = json!({
            "trtype": "TCP",
            "max_queue_depth": self.max_queue_depth,
            "max_io_qpairs_per_ctrlr": self.max_io_qpairs_per_ctrlr,
            "in_capsule_data_size": self.in_capsule_data_size,
            "max_io_size": self.max_io_size,
            "io_unit_size": self.io_unit_size,
            "max_aq_depth": self.max_aq_depth,
            "num_shared_buffers": self.num_shared_buffers,
            "buf_cache_size": self.buf_cache_size,
            "dif_insert_or_strip": self.dif_insert_or_strip,
            "zcopy": self.zcopy,
            "c2h_success": self.c2h_success,
            "sock_priority": self.sock_priority,
            "abort_timeout_sec": self.abort_timeout_sec,
            "acceptor_poll_rate": self.acceptor_poll_rate,
            "kas": self.kas,
            "min_kato": self.min_kato,
        });
        match v {
            Value::Object(m) => m,
            _ => TransportParams::new(),
        }
    }
}

/// The default option set, for the registry (`TransportOps::defaults`).
pub fn defaults() -> TransportParams {
    TcpOpts::default().dump()
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
    fn spdk_defaults_and_round_trip() {
        let o = TcpOpts::decode(&TransportParams::new()).expect("defaults");
        assert_eq!(o, TcpOpts::default());
        assert_eq!(o.max_io_qpairs_per_ctrlr, 127);
        assert_eq!(o.io_unit_size, 131072);
        assert_eq!(o.num_shared_buffers, 511);
        assert!(o.c2h_success);
        // What save_config writes loads back to the same options.
        assert_eq!(TcpOpts::decode(&o.dump()).expect("dump"), o);
        let c = o.conn_config();
        assert_eq!(c.queue_depth, 128);
        assert_eq!(c.maxh2cdata, 131072);
    }

    #[test]
    fn refusals() {
        let e = TcpOpts::decode(&params(json!({"dif_insert_or_strip": true}))).unwrap_err();
        assert!(matches!(e, TransportError::Unsupported(_)), "{e:?}");
        let e = TcpOpts::decode(&params(json!({"zcopy": true}))).unwrap_err();
        assert!(matches!(e, TransportError::Unsupported(_)), "{e:?}");
        let e = TcpOpts::decode(&params(json!({"no_srq": true}))).unwrap_err();
        assert!(matches!(e, TransportError::Unsupported(_)), "{e:?}");
        let e = TcpOpts::decode(&params(json!({"abort_timeout_sec": 5}))).unwrap_err();
        assert!(matches!(e, TransportError::Unsupported(_)), "{e:?}");
        // rpc.py's always-sent defaults pass.
        TcpOpts::decode(&params(
            json!({"no_srq": false, "dif_insert_or_strip": false}),
        ))
        .expect("rpc.py defaults");
        let e = TcpOpts::decode(&params(json!({"sock_priority": 17}))).unwrap_err();
        assert!(matches!(e, TransportError::Invalid(_)), "{e:?}");
        let e = TcpOpts::decode(&params(json!({"max_queue_depth": "x"}))).unwrap_err();
        assert!(matches!(e, TransportError::Invalid(_)), "{e:?}");
        let e = TcpOpts::decode(&params(
            json!({"max_io_size": 8 << 20, "io_unit_size": 4096}),
        ))
        .unwrap_err();
        assert!(matches!(e, TransportError::Invalid(_)), "{e:?}");
    }

    /// SPDK's TCP-only `control_msg_num` sizes a per-poll-group pool of buffers for admin
    /// and fabrics in-capsule data; rtgt has no such pool (the admin queue always takes 8 KiB
    /// in-capsule), so every value, SPDK's default 32 included, is refused (-32602); so are
    /// SPDK's other options this transport does not use.
    #[test]
    fn control_msg_num_and_other_unused_spdk_options_are_refused() {
        for v in [
            json!({"control_msg_num": 32}),
            json!({"control_msg_num": 0}),
            json!({"ack_timeout": 10}),
            json!({"data_wr_pool_size": 4095}),
            json!({"iobuf_small_cache_size": 8}),
            json!({"masked_oncs": ["reservs"]}),
            json!({"disable_command_passthru": true}),
            json!({"max_srq_depth": 4096}),
        ] {
            let e = TcpOpts::decode(&params(v.clone())).unwrap_err();
            let TransportError::Unsupported(m) = &e else {
                panic!("{v}: {e:?}");
            };
            let key = v
                .as_object()
                .and_then(|o| o.keys().next())
                .expect("one key");
            assert!(m.contains(key.as_str()) && m.contains("TCP"), "{m}");
        }
    }

    #[test]
    fn io_unit_size_follows_a_smaller_max_io_size() {
        let o = TcpOpts::decode(&params(json!({"max_io_size": 65536}))).expect("ok");
        assert_eq!(o.io_unit_size, 65536);
        let o = TcpOpts::decode(&params(json!({"max_io_size": 1048576}))).expect("ok");
        assert_eq!(o.io_unit_size, 131072);
        assert_eq!(o.conn_config().maxh2cdata, 1048576);
    }
}
