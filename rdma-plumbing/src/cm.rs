//! Connection-manager events on the transport's event channel, and the way they reach the
//! poll group that owns the connection.
//!
//! RDMA CM reports everything about a passive connection on its listener's event channel, so
//! one poller (on reactor 0) reads them all: a connect request is the transport's to decide;
//! every later event of a connection is a [`CmNotice`] forwarded by message to the poll group
//! that owns it ([`to_poll_group`]).

use fabric::{CmEvent, CmEventKind, ConnectRequest, EventChannel};
use target_core::reactor::Reactors;
use target_core::registry::TransportPollGroup;
use target_core::target::{PgCore, with_transport_pg};

/// An event about an established or establishing connection, for its poll group.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CmNotice {
    /// The connection is established (RTU received).
    Established,
    /// A DREQ arrived, or our DREQ was answered or timed out.
    Disconnected,
    /// The connection manager is done with the connection (TimeWait over).
    TimewaitExit,
    /// The peer rejected our accept.
    Rejected,
    /// The connection never completed (connect error, unreachable).
    ConnectError,
    /// The device is going away.
    DeviceRemoval,
    /// The local address changed.
    AddrChange,
}

/// What one connection-manager event asks for.
#[derive(Debug)]
pub enum CmInput {
    /// A connection request on the listener with handle `listener`.
    Connect {
        /// The listener's handle.
        listener: u64,
        /// The request (its identifier, private data, addresses, RDMA READ depths).
        req: Box<ConnectRequest>,
    },
    /// An event for the connection whose identifier has handle `id`.
    Notice {
        /// The connection identifier's handle.
        id: u64,
        /// What happened.
        notice: CmNotice,
    },
}

/// What `ev` asks for; `None` for events a target has no use for (address and route
/// resolution, which only an active side does).
pub fn classify(ev: CmEvent) -> Option<CmInput> {
    let notice = match ev.kind {
        CmEventKind::ConnectRequest(req) => {
            return Some(CmInput::Connect {
                listener: ev.id,
                req,
            });
        }
        CmEventKind::Established { .. } => CmNotice::Established,
        CmEventKind::Disconnected => CmNotice::Disconnected,
        CmEventKind::TimewaitExit => CmNotice::TimewaitExit,
        CmEventKind::Rejected { .. } => CmNotice::Rejected,
        CmEventKind::ConnectError | CmEventKind::Unreachable => CmNotice::ConnectError,
        CmEventKind::DeviceRemoval => CmNotice::DeviceRemoval,
        CmEventKind::AddrChange => CmNotice::AddrChange,
        other => {
            tracing::debug!(id = ev.id, "RDMA CM event ignored: {other:?}");
            return None;
        }
    };
    Some(CmInput::Notice { id: ev.id, notice })
}

/// Reads up to `batch` events from `channel`, handing what each asks for to `f`. Returns how
/// many events were read.
pub fn poll_events(channel: &EventChannel, batch: usize, mut f: impl FnMut(CmInput)) -> usize {
    let mut n = 0;
    while n < batch {
        match channel.get_event() {
            Ok(Some(ev)) => {
                n += 1;
                if let Some(input) = classify(ev) {
                    f(input);
                }
            }
            Ok(None) => break,
            Err(e) => {
                tracing::error!("RDMA CM event channel: {e}");
                break;
            }
        }
    }
    n
}

/// Runs `f` on the poll group of type `P` of transport `transport` on reactor `pg`, by message.
/// `false` if the reactor is gone (the message, and what it carries, is dropped); a poll group
/// that is gone by the time the message runs is logged and skipped.
pub fn to_poll_group<P: TransportPollGroup>(
    reactors: &Reactors,
    transport: usize,
    pg: usize,
    f: impl FnOnce(&mut P, &mut PgCore) + Send + 'static,
) -> bool {
    reactors
        .send_ctrl(pg, move |rctx| {
            if with_transport_pg::<P, _>(rctx, transport, f).is_none() {
                tracing::debug!(
                    "poll group {pg} of transport {transport} is gone; message dropped"
                );
            }
        })
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabric::{Fabric, SimNetwork};
    use std::net::{IpAddr, Ipv4Addr, SocketAddr};
    use std::time::Duration;

    fn ev(kind: CmEventKind) -> CmEvent {
        CmEvent {
            id: 9,
            kind,
            status: 0,
        }
    }

    #[test]
    fn every_connection_event_becomes_its_notice() {
        let cases = [
            (
                CmEventKind::Established {
                    private_data: vec![],
                    responder_resources: 0,
                    initiator_depth: 0,
                },
                CmNotice::Established,
            ),
            (CmEventKind::Disconnected, CmNotice::Disconnected),
            (CmEventKind::TimewaitExit, CmNotice::TimewaitExit),
            (
                CmEventKind::Rejected {
                    private_data: vec![],
                },
                CmNotice::Rejected,
            ),
            (CmEventKind::ConnectError, CmNotice::ConnectError),
            (CmEventKind::Unreachable, CmNotice::ConnectError),
            (CmEventKind::DeviceRemoval, CmNotice::DeviceRemoval),
            (CmEventKind::AddrChange, CmNotice::AddrChange),
        ];
        for (kind, want) in cases {
            match classify(ev(kind)) {
                Some(CmInput::Notice { id: 9, notice }) => assert_eq!(notice, want),
                other => panic!("{want:?}: {other:?}"),
            }
        }
        for kind in [
            CmEventKind::AddrResolved,
            CmEventKind::AddrError,
            CmEventKind::RouteResolved,
            CmEventKind::RouteError,
            CmEventKind::Other(77),
        ] {
            assert!(classify(ev(kind)).is_none());
        }
    }

    #[test]
    fn a_connect_request_reaches_the_poller_with_its_listener() {
        let net = SimNetwork::new();
        let ip = IpAddr::V4(Ipv4Addr::new(10, 9, 2, 1));
        net.add_device("cm0", ip).unwrap();
        let fabric = Fabric::sim(&net);
        let target = fabric.create_event_channel().unwrap();
        let listener = target.create_id().unwrap();
        let addr = SocketAddr::new(ip, 4999);
        listener.bind(addr).unwrap();
        listener.listen(8).unwrap();
        let host = fabric.create_event_channel().unwrap();
        let id = host.create_id().unwrap();
        id.resolve_addr(None, addr, 1000).unwrap();
        let mut keep = Vec::new();
        let mut seen = Vec::new();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while seen.is_empty() && std::time::Instant::now() < deadline {
            // The host's side: resolve the route, then connect.
            while let Ok(Some(e)) = host.get_event() {
                match e.kind {
                    CmEventKind::AddrResolved => id.resolve_route(1000).unwrap(),
                    CmEventKind::RouteResolved => {
                        let pd = id.device().unwrap().alloc_pd().unwrap();
                        let cq = id.device().unwrap().create_cq(16, None).unwrap();
                        let qp = id
                            .create_qp(&fabric::QpInit {
                                pd: &pd,
                                send_cq: &cq,
                                recv_cq: &cq,
                                srq: None,
                                cap: fabric::QpCap {
                                    max_send_wr: 4,
                                    max_recv_wr: 4,
                                    max_send_sge: 1,
                                    max_recv_sge: 1,
                                    max_inline_data: 0,
                                },
                                sq_sig_all: false,
                            })
                            .unwrap();
                        id.connect(&fabric::ConnParam {
                            private_data: b"hello",
                            responder_resources: 1,
                            initiator_depth: 1,
                            retry_count: 7,
                            rnr_retry_count: 7,
                        })
                        .unwrap();
                        keep.push((qp, cq, pd));
                    }
                    _ => {}
                }
            }
            poll_events(&target, 4, |i| seen.push(i));
            std::thread::sleep(Duration::from_millis(1));
        }
        match seen.as_slice() {
            [CmInput::Connect { listener: l, req }] => {
                assert_eq!(*l, listener.handle());
                assert_eq!(&req.private_data[..5], b"hello");
            }
            other => panic!("{other:?}"),
        }
    }
}
