//! The SRP transport's options (`nvmf_create_transport -t SRP ...`), with ib_srpt's defaults.
//!
//! An option the SRP transport does not use is refused (`-32602`), except the ones `rpc.py`
//! sends on every call with their default values
//! ([`target_core::registry::RPC_PY_ALWAYS_SENT`]), which are
//! accepted without effect. Where an SPDK option means the same thing it keeps its SPDK name
//! (`max_queue_depth`, `max_io_size`, `io_unit_size`, `num_shared_buffers`, `no_srq`,
//! `acceptor_poll_rate`), so stock `rpc.py` flags work; the SRP-only ones are named after the
//! ib_srpt parameters they mirror.

use serde_json::{Map, Value, json};

use crate::login::{DEFAULT_MAX_REQ_SIZE, DEFAULT_MAX_RSP_SIZE, DEFAULT_QUEUE_DEPTH};
use target_core::registry::{TransportError, TransportParams, refuse_unused_options};

/// The options the SRP transport uses.
pub const USED_OPTIONS: &[&str] = &[
    "max_queue_depth",
    "max_req_size",
    "max_rsp_size",
    "immediate_data",
    "use_srq",
    "srq_size",
    "sq_size",
    "max_io_size",
    "io_unit_size",
    "num_shared_buffers",
    "acceptor_poll_rate",
    "disconnect_timeout_ms",
    "no_srq",
];

/// The options of one SRP transport.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SrpOpts {
    /// Credits granted per channel (LOGIN_RSP REQUEST LIMIT DELTA) and requests the target
    /// keeps per channel; ib_srpt's `rq_size` (128). Range 2..=4096. A channel gets fewer
    /// when its receive queue (credits + 2 receives, without SRQ) would not fit the RDMA
    /// device's `max_qp_wr`.
    pub max_queue_depth: u32,
    /// Largest initiator-to-target IU accepted, advertised as MAXIMUM INITIATOR TO TARGET IU
    /// LENGTH and used as the receive buffer size: ib_srpt's `srp_max_req_size` (8276). Linux
    /// initiators ask for 8260 by default, so smaller values reject them (0x10002).
    /// Range 996..=65536.
    pub max_req_size: u32,
    /// Largest target-to-initiator IU (SRP_RSP with sense data), advertised as MAXIMUM TARGET
    /// TO INITIATOR IU LENGTH: ib_srpt's `srp_max_rsp_size` (256). Range 64..=1024.
    pub max_rsp_size: u32,
    /// Accept SRP-2 immediate data when an initiator asks for it (ib_srpt: only without SRQ).
    pub immediate_data: bool,
    /// Receive through one shared receive queue per poll group and device instead of one
    /// receive queue per channel (ib_srpt `use_srq`, default off). Immediate data is declined
    /// on SRQ channels, as in ib_srpt.
    pub use_srq: bool,
    /// Receive buffers of each shared receive queue (ib_srpt `srpt_srq_size`, 4095).
    pub srq_size: u32,
    /// Send-queue depth requested per channel (ib_srpt `srp_sq_size`, 4096), clamped to the
    /// device. The transport counts its own send slots against it.
    pub sq_size: u32,
    /// Largest data transfer of one command in bytes (reported to the initiator as the block
    /// limits page's MAXIMUM TRANSFER LENGTH). Default 1 MiB; a multiple of `io_unit_size`, at
    /// most 32 units.
    pub max_io_size: u32,
    /// Size of one data buffer (a power of two, at least 4 KiB). Default 64 KiB.
    pub io_unit_size: u32,
    /// Data buffers per poll group and device, allocated and registered when the first
    /// channel arrives there. Default 512 (32 MiB with 64 KiB units).
    pub num_shared_buffers: u32,
    /// How often the acceptor looks at the connection manager when nothing woke it, in
    /// microseconds (it also wakes on the event channel's fd). Default 10000.
    pub acceptor_poll_rate: u32,
    /// How long a closing channel waits for the connection manager (DREP, TimeWait exit)
    /// before it drains anyway, and then how long it waits for the drain (the flush
    /// completions of its send-queue marker and receives) before it destroys the queue pair
    /// anyway, with a warning, in milliseconds. Default 3000.
    pub disconnect_timeout_ms: u32,
}

impl Default for SrpOpts {
    fn default() -> Self {
        SrpOpts {
            max_queue_depth: DEFAULT_QUEUE_DEPTH,
            max_req_size: DEFAULT_MAX_REQ_SIZE,
            max_rsp_size: DEFAULT_MAX_RSP_SIZE,
            immediate_data: true,
            use_srq: false,
            srq_size: 4095,
            sq_size: 4096,
            max_io_size: 1 << 20,
            io_unit_size: 64 << 10,
            num_shared_buffers: 512,
            acceptor_poll_rate: 10_000,
            disconnect_timeout_ms: 3000,
        }
    }
}

fn get_u32(
    p: &TransportParams,
    key: &str,
    default: u32,
    range: std::ops::RangeInclusive<u32>,
) -> Result<u32, TransportError> {
    let Some(v) = p.get(key) else {
        return Ok(default);
    };
    let n = v
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .ok_or_else(|| TransportError::Invalid(format!("{key} must be an unsigned integer")))?;
    if !range.contains(&n) {
        return Err(TransportError::Invalid(format!(
            "{key} {n} out of range ({}..={})",
            range.start(),
            range.end()
        )));
    }
    Ok(n)
}

fn get_bool(p: &TransportParams, key: &str, default: bool) -> Result<bool, TransportError> {
    match p.get(key) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(TransportError::Invalid(format!("{key} must be a boolean"))),
    }
}

impl SrpOpts {
    /// Decodes the options (refusing those the SRP transport does not use) and checks them.
    pub fn decode(p: &TransportParams) -> Result<Self, TransportError> {
        refuse_unused_options("SRP", p, USED_OPTIONS)?;
        let d = SrpOpts::default();
        let mut o = SrpOpts {
            max_queue_depth: get_u32(p, "max_queue_depth", d.max_queue_depth, 2..=4096)?,
            max_req_size: get_u32(p, "max_req_size", d.max_req_size, 996..=65536)?,
            max_rsp_size: get_u32(p, "max_rsp_size", d.max_rsp_size, 64..=1024)?,
            immediate_data: get_bool(p, "immediate_data", d.immediate_data)?,
            use_srq: get_bool(p, "use_srq", d.use_srq)?,
            srq_size: get_u32(p, "srq_size", d.srq_size, 4..=65535)?,
            sq_size: get_u32(p, "sq_size", d.sq_size, 16..=65535)?,
            max_io_size: get_u32(p, "max_io_size", d.max_io_size, 4096..=(32 << 20))?,
            io_unit_size: get_u32(p, "io_unit_size", d.io_unit_size, 4096..=(16 << 20))?,
            num_shared_buffers: get_u32(
                p,
                "num_shared_buffers",
                d.num_shared_buffers,
                2..=1 << 20,
            )?,
            acceptor_poll_rate: get_u32(
                p,
                "acceptor_poll_rate",
                d.acceptor_poll_rate,
                0..=10_000_000,
            )?,
            disconnect_timeout_ms: get_u32(
                p,
                "disconnect_timeout_ms",
                d.disconnect_timeout_ms,
                10..=600_000,
            )?,
        };
        // rpc.py's `--no-srq` (an SPDK RDMA flag) turns the shared receive queue off.
        if get_bool(p, "no_srq", false)? {
            o.use_srq = false;
        }
        o.validate()?;
        Ok(o)
    }

    /// Checks the relations between options.
    pub fn validate(&self) -> Result<(), TransportError> {
        let bad = |m: String| Err(TransportError::Invalid(m));
        if !self.io_unit_size.is_power_of_two() {
            return bad(format!(
                "io_unit_size {} is not a power of two",
                self.io_unit_size
            ));
        }
        if !self.max_io_size.is_multiple_of(self.io_unit_size) {
            return bad(format!(
                "max_io_size {} is not a multiple of io_unit_size {}",
                self.max_io_size, self.io_unit_size
            ));
        }
        let units = self.max_io_size / self.io_unit_size;
        if units as usize > target_core::bdev::MAX_IO_BUFS {
            return bad(format!(
                "max_io_size {} needs {units} buffers of io_unit_size {}; at most {} allowed",
                self.max_io_size,
                self.io_unit_size,
                target_core::bdev::MAX_IO_BUFS
            ));
        }
        if self.num_shared_buffers < units {
            return bad(format!(
                "num_shared_buffers {} cannot hold one transfer of max_io_size {}",
                self.num_shared_buffers, self.max_io_size
            ));
        }
        Ok(())
    }

    /// How long a draining channel waits for its last completions.
    pub fn drain_timeout(&self) -> std::time::Duration {
        std::time::Duration::from_millis(u64::from(self.disconnect_timeout_ms))
    }

    /// Data buffers one transfer of `max_io_size` needs.
    pub fn units_per_io(&self) -> u32 {
        self.max_io_size / self.io_unit_size
    }

    /// Whether channels use immediate data when asked (never with an SRQ, as ib_srpt).
    pub fn immediate_effective(&self) -> bool {
        self.immediate_data && !self.use_srq
    }

    /// The options as `nvmf_get_transports` and save_config show them.
    pub fn dump(&self) -> TransportParams {
        let mut m = Map::new();
        m.insert("trtype".into(), json!("SRP"));
        self.dump_into(&mut m);
        m
    }

    fn dump_into(&self, m: &mut Map<String, Value>) {
        m.insert("max_queue_depth".into(), json!(self.max_queue_depth));
        m.insert("max_req_size".into(), json!(self.max_req_size));
        m.insert("max_rsp_size".into(), json!(self.max_rsp_size));
        m.insert("immediate_data".into(), json!(self.immediate_data));
        m.insert("use_srq".into(), json!(self.use_srq));
        m.insert("srq_size".into(), json!(self.srq_size));
        m.insert("sq_size".into(), json!(self.sq_size));
        m.insert("max_io_size".into(), json!(self.max_io_size));
        m.insert("io_unit_size".into(), json!(self.io_unit_size));
        m.insert("num_shared_buffers".into(), json!(self.num_shared_buffers));
        m.insert("acceptor_poll_rate".into(), json!(self.acceptor_poll_rate));
        m.insert(
            "disconnect_timeout_ms".into(),
            json!(self.disconnect_timeout_ms),
        );
    }
}

/// The registered defaults (`TransportOps::defaults`).
pub fn defaults() -> TransportParams {
    let mut m = Map::new();
    SrpOpts::default().dump_into(&mut m);
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(v: Value) -> TransportParams {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn defaults_match_ib_srpt_and_round_trip() {
        let o = SrpOpts::decode(&Map::new()).unwrap();
        assert_eq!(o, SrpOpts::default());
        assert_eq!(o.max_queue_depth, 128);
        assert_eq!(o.max_req_size, 8276);
        assert_eq!(o.max_rsp_size, 256);
        assert!(!o.use_srq);
        assert!(o.immediate_effective());
        let dumped = o.dump();
        assert_eq!(dumped["trtype"], "SRP");
        assert_eq!(SrpOpts::decode(&dumped).unwrap(), o);
        assert_eq!(defaults().len() + 1, dumped.len());
    }

    #[test]
    fn decoded_and_checked() {
        // What rpc.py sends with every call is accepted with its default values...
        let o = SrpOpts::decode(&params(json!({
            "trtype": "SRP", "max_queue_depth": 32, "use_srq": true, "zcopy": false,
            "c2h_success": true, "dif_insert_or_strip": false, "no_wr_batching": false,
            "disable_mappable_bar0": false, "disable_adaptive_irq": false,
            "disable_shadow_doorbells": false, "disable_command_passthru": false
        })))
        .unwrap();
        assert_eq!(o.max_queue_depth, 32);
        assert!(o.use_srq && !o.immediate_effective());
        assert!(
            !SrpOpts::decode(&params(json!({"use_srq": true, "no_srq": true})))
                .unwrap()
                .use_srq
        );
        for bad in [
            json!({"max_queue_depth": 1}),
            json!({"max_queue_depth": "x"}),
            json!({"max_req_size": 100}),
            json!({"immediate_data": 1}),
            json!({"io_unit_size": 12288}),
            json!({"max_io_size": 100_000}),
            json!({"max_io_size": 4 << 20, "io_unit_size": 4096}),
            json!({"num_shared_buffers": 4}),
        ] {
            assert!(SrpOpts::decode(&params(bad.clone())).is_err(), "{bad}");
        }
    }

    /// Issue 13: other transports' options used to be accepted and ignored.
    #[test]
    fn options_of_other_transports_are_refused() {
        for v in [
            json!({"in_capsule_data_size": 4096}),
            json!({"max_io_qpairs_per_ctrlr": 4}),
            json!({"c2h_success": false}),
            json!({"zcopy": true}),
            json!({"kas": 100}),
        ] {
            match SrpOpts::decode(&params(v.clone())) {
                Err(TransportError::Unsupported(m)) => {
                    assert!(m.contains("not supported by the SRP transport"), "{m}")
                }
                other => panic!("{v} gave {other:?}"),
            }
        }
    }
}
