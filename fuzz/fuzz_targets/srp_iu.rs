//! SRP information units from the initiator, as a channel receives them: decoding with and
//! without negotiated immediate data (and at any offset), re-encoding what decoded, the SCSI
//! device server on the command's CDB, and the channel state machine with its credit
//! accounting driven by the decoded IUs interleaved with connection events.
//!
//! Input: `[selector][imm offset u16]` then records `[len u16][IU bytes]`; selector bits pick
//! the event interleaving, and bit 0 of an IU's second byte makes the target-initiated send it
//! triggers (an SRP_CRED_REQ, or the BUSY answer to an overrun) fail: never posted, or its
//! SEND completing in error. Properties: nothing panics; an SRP_CMD that decodes re-encodes to
//! one that decodes identically; descriptors lie inside the IU; the state machine frees a
//! channel and releases its session at most once, never before its commands finished, and
//! never hands the initiator more credits than it took nor loses any (credits held by the
//! initiator plus credits the target still holds always equal the login grant, failed sends
//! included); and a CRED_REQ that failed does not keep the next one from going.
#![no_main]
use libfuzzer_sys::fuzz_target;
use rtgt_fuzz::Bytes;
use target_core::scsi::{self, LogicalUnit, NaaId, PROTOCOL_ID_SRP, TargetPort};
use transport_srp::channel::{
    Action, Channel, ChannelState, CloseReason, Event, IuDisposition, IuKind,
};
use transport_srp::proto::{DataDesc, InitiatorIu, SrpCmd, decode_initiator_iu};

fn event(b: u8) -> Event {
    match b % 17 {
        0 => Event::Established,
        1 => Event::Disconnected,
        2 => Event::TimewaitExit,
        3 => Event::Rejected,
        4 => Event::ConnectError,
        5 => Event::DeviceRemoval,
        6 => Event::DisconnectFailed,
        7 => Event::DisconnectTimeout,
        8 => Event::Close(CloseReason::Logout),
        9 => Event::Close(CloseReason::Terminated),
        10 => Event::Close(CloseReason::SubsystemDeleted),
        11 => Event::Close(CloseReason::QpError),
        12 => Event::SqMarkerDone { ok: b & 0x10 != 0 },
        13 => Event::RecvsDrained,
        14 => Event::MarkerPostFailed,
        15 => Event::DrainTimeout,
        _ => Event::CompletionError,
    }
}

struct Model {
    ch: Channel,
    limit: u32,
    /// Credits the initiator holds (it never sends beyond them in this model; overruns are
    /// injected separately and take nothing).
    held: i64,
    commands: u32,
    freed: u32,
    released: u32,
    /// A CRED_REQ reached the initiator and its CRED_RSP has not come back.
    cred_req_out: bool,
}

impl Model {
    fn apply(&mut self, actions: &[Action]) {
        for a in actions {
            match a {
                Action::FreeChannel => self.freed += 1,
                Action::ReleaseSession => {
                    self.released += 1;
                    assert_eq!(self.commands, 0, "session released with commands running");
                }
                _ => {}
            }
        }
        assert!(self.freed <= 1 && self.released <= 1);
        let c = self.ch.credits();
        assert!(c.outstanding() <= c.limit() && c.owed() <= c.outstanding());
        assert_eq!(
            self.held + i64::from(c.outstanding()),
            i64::from(self.limit),
            "credits lost or invented"
        );
        // With credits owed and no CRED_REQ at the initiator, one may go.
        let mut probe = *c;
        assert!(
            c.owed() == 0 || self.cred_req_out || probe.take_cred_req().is_some(),
            "CRED_REQ disabled: {c:?}"
        );
    }
}

fn check_cmd(iu: &[u8], cmd: &SrpCmd<'_>, imm: Option<u16>) {
    for d in [&cmd.data_out, &cmd.data_in] {
        if let DataDesc::Immediate(data) = d {
            let start = data.as_ptr() as usize - iu.as_ptr() as usize;
            assert!(start + data.len() <= iu.len());
            assert!(start >= usize::from(imm.expect("immediate data needs an offset")));
        }
        if let DataDesc::Indirect(i) = d {
            assert!(i.in_iu_count() <= i.table_count());
            if !i.is_partial() {
                let sum: u64 = i.descriptors().map(|x| u64::from(x.len)).sum();
                assert_eq!(sum, u64::from(i.total_len));
            }
        }
    }
    // Re-encoding gives an IU that decodes to the same command.
    let mut buf = vec![0u8; iu.len().max(64) + 512];
    if let Ok(n) = cmd.encode(&mut buf, imm.unwrap_or(68)) {
        let again =
            SrpCmd::decode(&buf[..n], imm.or(Some(68))).expect("re-encoded SRP_CMD decodes");
        assert_eq!(&again, cmd);
    }
}

fuzz_target!(|data: &[u8]| {
    let mut b = Bytes::new(data);
    let sel = b.u8();
    let imm_raw = b.u16();
    let lu = LogicalUnit::new(512, 4096, NaaId::local_from_uuid(&[3; 16]), "SER1");
    let port = TargetPort {
        protocol_id: PROTOCOL_ID_SRP,
        relative_port: 1,
        port_id: Some([9; 16]),
    };
    let ctx = scsi::TargetContext {
        port: &port,
        luns: &[0, 1, 7],
        alua: None,
    };
    let limit = u32::from(sel >> 4) + 1;
    let mut m = Model {
        ch: Channel::new(limit, sel & 1 != 0),
        limit,
        held: i64::from(limit),
        commands: 0,
        freed: 0,
        released: 0,
        cred_req_out: false,
    };
    if sel & 2 != 0 {
        let out = m.ch.handle(Event::Established);
        m.apply(&out.actions);
    }
    let mut data_in = vec![0u8; 4096];
    let mut steps = 0;
    while !b.is_empty() && steps < 64 {
        steps += 1;
        let len = usize::from(b.u16() % 8300);
        let iu = b.take(len);
        // Decoding under each negotiation the channel could have.
        for imm in [None, Some(68u16), Some(imm_raw)] {
            if let Ok(InitiatorIu::Cmd(cmd)) = decode_initiator_iu(iu, imm) {
                check_cmd(iu, &cmd, imm);
            }
        }
        let imm = (sel & 8 != 0).then_some(68u16);
        let decoded = decode_initiator_iu(iu, imm);
        let kind = match &decoded {
            Ok(InitiatorIu::Cmd(_)) => IuKind::Cmd,
            Ok(InitiatorIu::TskMgmt(_)) => IuKind::TskMgmt,
            Ok(InitiatorIu::ILogout(_)) => IuKind::ILogout,
            Ok(InitiatorIu::CredRsp(_)) => IuKind::CredRsp,
            Ok(InitiatorIu::AerRsp(_)) => IuKind::AerRsp,
            Err(_) => IuKind::Other,
        };
        if let Ok(InitiatorIu::Cmd(cmd)) = &decoded {
            let c = scsi::Command {
                cdb: cmd.cdb,
                data_out_len: cmd.data_out.len(),
            };
            let lu_ref = (cmd.lun[1] & 1 == 0).then_some(&lu);
            match scsi::execute(lu_ref, &ctx, &c, &mut data_in) {
                scsi::Verdict::DataIn { len } => assert!(len as usize <= data_in.len()),
                scsi::Verdict::Io(op) => {
                    let _ = (op.data_in_len(512), op.data_out_len(512));
                }
                _ => {}
            }
        }
        // The initiator only spends credits it has, unless the selector says to overrun.
        let credit_iu = matches!(kind, IuKind::Cmd | IuKind::TskMgmt);
        if credit_iu && m.held <= 0 && sel & 4 == 0 {
            continue;
        }
        let live = m.ch.state() == ChannelState::Live;
        let had = m.ch.credits().available();
        // Whether a target-initiated send this IU triggers fails.
        let spare_fails = iu.get(1).is_some_and(|b| b & 1 != 0);
        match m.ch.on_iu(kind) {
            IuDisposition::Process if credit_iu => {
                assert!(live && had > 0);
                m.held -= 1;
                m.commands += 1;
                m.ch.command_started();
            }
            IuDisposition::Overrun => {
                assert!(live && credit_iu && had == 0);
                let d = m.ch.credits_mut().overrun_delta();
                if spare_fails {
                    m.ch.credits_mut().spare_not_sent(d, false);
                } else {
                    m.held += i64::from(d);
                }
            }
            _ => {
                if kind == IuKind::CredRsp && live {
                    m.cred_req_out = false;
                }
            }
        }
        m.apply(&[]);
        // Events and command completions, as the selector and the IU's first byte say.
        let op = iu.first().copied().unwrap_or(0);
        if op & 0x80 != 0 {
            let out = m.ch.handle(event(op));
            m.apply(&out.actions);
        }
        if m.commands > 0 && op & 0x40 != 0 {
            m.commands -= 1;
            let responded = op & 0x20 != 0 && m.ch.state() == ChannelState::Live;
            if responded {
                m.held += i64::from(m.ch.credits_mut().response_delta());
            }
            let out = m.ch.command_finished(responded);
            m.apply(&out.actions);
        }
        if op & 0x08 != 0
            && let Some(d) = m.ch.credits_mut().take_cred_req()
        {
            if spare_fails {
                m.ch.credits_mut().spare_not_sent(d, true);
            } else {
                m.held += i64::from(d);
                m.cred_req_out = true;
            }
            m.apply(&[]);
        }
    }
    // Tear down: everything finishes, the queues drain, the channel is freed exactly once.
    while m.commands > 0 {
        m.commands -= 1;
        let out = m.ch.command_finished(false);
        m.apply(&out.actions);
    }
    for ev in [
        Event::Close(CloseReason::SubsystemDeleted),
        Event::SqMarkerDone { ok: false },
        Event::RecvsDrained,
    ] {
        let out = m.ch.handle(ev);
        m.apply(&out.actions);
    }
    assert_eq!(m.ch.state(), ChannelState::Disconnected);
    assert_eq!(
        (m.freed, m.released),
        (1, 1),
        "channel not released exactly once"
    );
});
