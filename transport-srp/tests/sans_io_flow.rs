//! The sans-I/O pieces composed the way the runtime will use them: a Linux-style initiator
//! logs in over RDMA CM three times (SCST's relogin check), sends INQUIRY, READ and a LUN
//! reset, and every byte that would go on the wire is checked.

use target_core::scsi::{self, LogicalUnit, NaaId, PROTOCOL_ID_SRP, ScsiIo, TargetPort, Verdict};
use transport_srp::channel::{
    Action, Channel, ChannelState, CloseReason, Event, IuDisposition, IuKind,
};
use transport_srp::login::{self, Limits, PortConfig};
use transport_srp::nexus::{NexusKey, NexusTable};
use transport_srp::proto::cmd::{DirectDesc, LINUX_IMM_DATA_OFFSET};
use transport_srp::proto::login::REQ_FLAG_IMMED_REQUESTED;
use transport_srp::proto::{
    BufFormats, DataDesc, InitiatorIu, LoginReq, LoginRsp, MultiChannelResult, PortId, Residual,
    SrpCmd, SrpRsp, Tag, TaskAttr, TaskMgmt, TmResponse, TskMgmt, decode_initiator_iu,
};
use transport_srp::task_management::{self as tm, TmPlan};

const G: u64 = 0x5254_00ff_fe12_3456;

fn login_bytes(action: u8) -> [u8; 56] {
    LoginReq {
        tag: Tag([0; 8]),
        req_it_iu_len: 8260,
        req_buf_fmt: BufFormats::BOTH,
        req_flags: REQ_FLAG_IMMED_REQUESTED | action,
        imm_data_offset: LINUX_IMM_DATA_OFFSET,
        initiator_port_id: PortId::from_halves(0, G),
        target_port_id: PortId::from_halves(G, G),
    }
    .encode_rdma_cm()
}

struct Target {
    port: PortConfig,
    nexus: NexusTable<usize>,
    channels: Vec<Channel>,
}

impl Target {
    /// CONNECT_REQUEST: decide, apply the nexus rules, answer. Returns the new channel's id and
    /// the LOGIN_RSP bytes.
    fn connect(&mut self, private_data: &[u8]) -> (usize, [u8; 52]) {
        let req = LoginReq::decode_rdma_cm(private_data).unwrap();
        let limits = Limits {
            max_qp_wr: 16384,
            srq: false,
        };
        let accept = login::decide(&req, &self.port, None, &limits).unwrap();
        let id = self.channels.len();
        let key = NexusKey {
            initiator: req.initiator_port_id,
            target: req.target_port_id,
        };
        let effects = self.nexus.login(key, id, accept.action);
        for old in effects.terminate {
            let out = self.channels[old].handle(Event::Close(CloseReason::Terminated));
            assert_eq!(
                out.actions.as_slice(),
                [
                    Action::SendTLogout(transport_srp::proto::TLogoutReason::MultiChannelAction),
                    Action::Disconnect
                ]
            );
        }
        assert!(effects.reject.is_empty());
        self.channels.push(Channel::new(accept.credits, false));
        assert!(self.nexus.accepted(id));
        (id, accept.response(req.tag, effects.result).encode())
    }
}

#[test]
fn relogin_inquiry_read_and_lun_reset() {
    let mut port = PortConfig::new(G, G);
    port.enabled = true;
    let mut t = Target {
        port,
        nexus: NexusTable::new(),
        channels: Vec::new(),
    };

    // First login: nothing to terminate.
    let (c0, rsp) = t.connect(&login_bytes(0));
    let rsp = LoginRsp::decode(&rsp).unwrap();
    assert_eq!(rsp.multi_channel, MultiChannelResult::NoneExisting);
    assert_eq!(rsp.req_lim_delta, 128);
    assert!(rsp.immediate);
    // A second channel of the same initiator (ch_count = 2).
    let (c1, rsp) = t.connect(&login_bytes(1));
    assert_eq!(
        LoginRsp::decode(&rsp).unwrap().multi_channel,
        MultiChannelResult::Maintained
    );
    for c in [c0, c1] {
        assert_eq!(
            t.channels[c].handle(Event::Established).entered.as_slice(),
            [ChannelState::Live]
        );
    }

    // INQUIRY on channel 0, LUN 0, into a 96-byte buffer.
    let lu = {
        let mut lu = LogicalUnit::new(512, 1 << 21, NaaId::local_from_uuid(&[7; 16]), "S1");
        lu.validate().unwrap();
        lu
    };
    let tport = TargetPort {
        protocol_id: PROTOCOL_ID_SRP,
        relative_port: 1,
        port_id: Some(PortId::from_halves(G, G).0),
    };
    let luns = [0u16];
    let ctx = scsi::TargetContext {
        port: &tport,
        luns: &luns,
        alua: None,
    };
    let mut cdb = [0u8; 16];
    cdb[..6].copy_from_slice(&[0x12, 0, 0, 0, 96, 0]);
    let cmd = SrpCmd {
        sol_not: 0,
        tag: Tag(0x1_0005u64.to_le_bytes()),
        lun: scsi::lun::encode(0),
        task_attr: TaskAttr::Simple,
        cdb: &cdb,
        data_out: DataDesc::None,
        data_in: DataDesc::Direct(DirectDesc {
            va: 0x1000,
            rkey: 5,
            len: 96,
        }),
    };
    let mut iu = [0u8; 8260];
    let n = cmd.encode(&mut iu, LINUX_IMM_DATA_OFFSET).unwrap();
    let ch = &mut t.channels[c0];
    let InitiatorIu::Cmd(rx) = decode_initiator_iu(&iu[..n], Some(LINUX_IMM_DATA_OFFSET)).unwrap()
    else {
        panic!()
    };
    assert_eq!(ch.on_iu(IuKind::Cmd), IuDisposition::Process);
    ch.command_started();
    let lun = scsi::lun::decode(rx.lun).unwrap();
    assert_eq!(lun, 0);
    let mut data = [0u8; 4096];
    let out = scsi::execute(
        Some(&lu),
        &ctx,
        &scsi::Command {
            cdb: rx.cdb,
            data_out_len: rx.data_out.len(),
        },
        &mut data,
    );
    let Verdict::DataIn { len } = out else {
        panic!("{out:?}")
    };
    assert_eq!(len, 96);
    let rsp = SrpRsp {
        data_in: Residual::compute(rx.data_in.len(), u64::from(len)),
        ..SrpRsp::scsi(rx.tag, ch.credits_mut().response_delta(), 0, &[])
    };
    let mut buf = [0u8; 256];
    let n = rsp.encode(&mut buf, 256).unwrap();
    ch.command_finished(true);
    let back = SrpRsp::decode(&buf[..n]).unwrap();
    assert_eq!(back.tag, rx.tag);
    assert_eq!(back.req_lim_delta, 1);
    assert_eq!(back.data_in, Residual::None);

    // READ(10) past the end: CHECK CONDITION with sense in the SRP_RSP.
    cdb = [0; 16];
    cdb[..10].copy_from_slice(&[0x28, 0, 0xFF, 0, 0, 0, 0, 0, 8, 0]);
    let out = scsi::execute(
        Some(&lu),
        &ctx,
        &scsi::Command {
            cdb: &cdb,
            data_out_len: 0,
        },
        &mut data,
    );
    let Verdict::CheckCondition(sense) = out else {
        panic!()
    };
    let sense = sense.to_fixed();
    let rsp = SrpRsp {
        data_in: Residual::compute(4096, 0),
        ..SrpRsp::scsi(Tag([1; 8]), 1, 0x02, &sense)
    };
    let n = rsp.encode(&mut buf, 256).unwrap();
    let back = SrpRsp::decode(&buf[..n]).unwrap();
    assert_eq!(back.sense, sense);
    assert_eq!(back.data_in, Residual::Under(4096));
    // A good READ decodes to bdev work.
    cdb[2] = 0;
    let out = scsi::execute(
        Some(&lu),
        &ctx,
        &scsi::Command {
            cdb: &cdb,
            data_out_len: 0,
        },
        &mut data,
    );
    assert_eq!(
        out,
        Verdict::Io(ScsiIo::Read {
            lba: 0,
            blocks: 8,
            fua: false
        })
    );

    // LUN reset on channel 0 (ib_srp: task tag 0xFFFFFFFF, ignored).
    let tmf = TskMgmt {
        sol_not: 0,
        tag: Tag([0x80, 0, 0, 0, 0, 0, 0, 0]),
        lun: [0; 8],
        action: TaskMgmt::LunReset,
    };
    let InitiatorIu::TskMgmt(rx) = decode_initiator_iu(&tmf.encode(), None).unwrap() else {
        panic!()
    };
    assert!(matches!(
        tm::plan(rx.action, true),
        TmPlan::Abort {
            reset_lun: true,
            ..
        }
    ));
    let ch = &mut t.channels[c0];
    assert_eq!(ch.on_iu(IuKind::TskMgmt), IuDisposition::Process);
    let code = SrpRsp::tm_response_data(TmResponse::Complete);
    let rsp = SrpRsp::task_mgmt(rx.tag, ch.credits_mut().response_delta(), &code);
    let n = rsp.encode(&mut buf, 256).unwrap();
    assert_eq!(
        SrpRsp::decode(&buf[..n]).unwrap().tm_response(),
        Some(TmResponse::Complete)
    );
    assert_eq!(ch.credits().outstanding(), 0);

    // Reconnect: the first channel logs in again with action 0; both old channels go.
    let (c2, rsp) = t.connect(&login_bytes(0));
    assert_eq!(
        LoginRsp::decode(&rsp).unwrap().multi_channel,
        MultiChannelResult::Terminated
    );
    for c in [c0, c1] {
        assert_eq!(t.channels[c].state(), ChannelState::Disconnecting);
    }
    // And once more (SCST checklist: three logins, each tears the previous down).
    for c in [c0, c1] {
        t.channels[c].handle(Event::Disconnected);
        t.channels[c].handle(Event::SqMarkerDone { ok: false });
        let out = t.channels[c].handle(Event::RecvsDrained);
        assert_eq!(
            out.actions.as_slice(),
            [Action::ReleaseSession, Action::FreeChannel]
        );
        assert!(t.nexus.remove(c));
    }
    t.channels[c2].handle(Event::Established);
    let (_c3, rsp) = t.connect(&login_bytes(0));
    assert_eq!(
        LoginRsp::decode(&rsp).unwrap().multi_channel,
        MultiChannelResult::Terminated
    );
    assert_eq!(t.channels[c2].state(), ChannelState::Disconnecting);
    assert_eq!(t.nexus.len(), 2);
}
