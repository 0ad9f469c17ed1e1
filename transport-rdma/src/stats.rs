//! What a poll group reports: SPDK's RDMA `nvmf_get_stats` counters per device, and resource
//! counts for leak checks in tests.

use serde_json::{Value, json};

use crate::poll_group::RdmaPg;
use crate::transport::DevCtx;

/// Counters of one device poller (SPDK's RDMA `nvmf_get_stats` fields).
#[derive(Debug, Default, Clone)]
pub struct DevStats {
    /// Completion-queue polls.
    pub polls: u64,
    /// Polls that found nothing.
    pub idle_polls: u64,
    /// Work completions handled.
    pub completions: u64,
    /// Commands received.
    pub requests: u64,
    /// Sum of command latencies (receive to response completion), in ns.
    pub request_latency: u64,
    /// Times a received command waited for a free request.
    pub pending_free_request: u64,
    /// Times an RDMA READ waited for slots or credits.
    pub pending_rdma_read: u64,
    /// Times an RDMA WRITE waited for slots.
    pub pending_rdma_write: u64,
    /// Times a response waited for a slot.
    pub pending_rdma_send: u64,
    /// Send work requests posted.
    pub total_send_wrs: u64,
    /// Send-queue doorbells.
    pub send_doorbell_updates: u64,
    /// Receive work requests posted.
    pub total_recv_wrs: u64,
    /// Receive-queue doorbells.
    pub recv_doorbell_updates: u64,
}

/// Resource counts of a poll group, for leak checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PgResources {
    /// Queue pairs alive (including closing ones).
    pub qpairs: usize,
    /// Request slots.
    pub requests: usize,
    /// Request slots in use.
    pub requests_busy: usize,
    /// Receive slots.
    pub receives: usize,
    /// Receive slots posted to the adapter.
    pub receives_posted: usize,
    /// Small data buffers cached by the poll group.
    pub cached_small: usize,
    /// Large data buffers cached by the poll group.
    pub cached_large: usize,
}

impl RdmaPg {
    /// Resource counts, for leak checks in tests.
    pub fn resources(&self) -> PgResources {
        PgResources {
            qpairs: self.qpairs.len(),
            requests: self.reqs.len(),
            requests_busy: self.reqs.iter().filter(|(_, r)| !r.life.is_free()).count(),
            receives: self.recvs.len(),
            receives_posted: self.recvs.iter().filter(|(_, r)| r.posted).count(),
            cached_small: self.small.cached(),
            cached_large: self.large.cached(),
        }
    }

    pub(crate) fn stats_json(&self) -> Value {
        let devices: Vec<Value> = self
            .sh
            .devices
            .iter()
            .enumerate()
            .map(|(i, dev)| {
                let s = self.devs[i]
                    .as_ref()
                    .map(|d| {
                        let c = d.cqs.counters();
                        DevStats {
                            polls: c.polls,
                            idle_polls: c.idle_polls,
                            completions: c.completions,
                            ..d.stats.clone()
                        }
                    })
                    .unwrap_or_default();
                dev_stats_json(dev, &s)
            })
            .collect();
        json!({
            "trtype": "RDMA",
            "pending_data_buffer": self.pending_data_buffer,
            "drain_timeouts": self.drain_timeouts,
            "devices": devices,
        })
    }
}

fn dev_stats_json(dev: &DevCtx, s: &DevStats) -> Value {
    json!({
        "name": dev.name,
        "polls": s.polls,
        "idle_polls": s.idle_polls,
        "completions": s.completions,
        "requests": s.requests,
        "request_latency": s.request_latency,
        "pending_free_request": s.pending_free_request,
        "pending_rdma_read": s.pending_rdma_read,
        "pending_rdma_write": s.pending_rdma_write,
        "pending_rdma_send": s.pending_rdma_send,
        "total_send_wrs": s.total_send_wrs,
        "send_doorbell_updates": s.send_doorbell_updates,
        "total_recv_wrs": s.total_recv_wrs,
        "recv_doorbell_updates": s.recv_doorbell_updates,
    })
}
