//! The streaming PDU reader: bytes in pieces of any size in, headers and data slices out.
//!
//! The reader keeps one PDU header (at most 132 bytes) in a fixed array and hands data out as
//! slices of the caller's input, so it never allocates. It validates the common header as soon
//! as its 8 bytes are in, in the order the fields appear (type, flags, HLEN, PDO, PLEN), so the
//! lowest field in error is the one reported; then the header digest; then the fields of the
//! PDU-specific header that only framing decides (DATAL against PLEN). What a field means for
//! a command (CCCID, TTAG, offsets, SGLs) is the connection's business.

use super::{
    C2hData, CH_LEN, CapsuleCmd, CapsuleResp, CommonHeader, DIGEST_LEN, DataDigest, Fes, Framing,
    H2cData, IcReq, IcResp, MAX_HEADER_LEN, PduType, R2t, TERM_HLEN, TERM_MAX_ERROR_DATA,
    TERM_MAX_PLEN, TermReq, field, flags, header_digest, le,
};

/// Which end of the connection the reader serves: the types it accepts are the other end's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// Receives ICReq, H2CTermReq, CapsuleCmd, H2CData.
    Controller,
    /// Receives ICResp, C2HTermReq, CapsuleResp, C2HData, R2T.
    Host,
}

/// A decoded PDU header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pdu {
    /// ICReq.
    IcReq(IcReq),
    /// ICResp.
    IcResp(IcResp),
    /// H2CTermReq (its error data follows as data).
    H2cTermReq(TermReq),
    /// C2HTermReq (its error data follows as data).
    C2hTermReq(TermReq),
    /// CapsuleCmd (in-capsule data follows as data).
    CapsuleCmd(CapsuleCmd),
    /// CapsuleResp.
    CapsuleResp(CapsuleResp),
    /// H2CData.
    H2cData(H2cData),
    /// C2HData.
    C2hData(C2hData),
    /// R2T.
    R2t(R2t),
}

impl Pdu {
    /// The PDU type.
    pub fn pdu_type(&self) -> PduType {
        match self {
            Pdu::IcReq(_) => PduType::IcReq,
            Pdu::IcResp(_) => PduType::IcResp,
            Pdu::H2cTermReq(_) => PduType::H2cTermReq,
            Pdu::C2hTermReq(_) => PduType::C2hTermReq,
            Pdu::CapsuleCmd(_) => PduType::CapsuleCmd,
            Pdu::CapsuleResp(_) => PduType::CapsuleResp,
            Pdu::H2cData(_) => PduType::H2cData,
            Pdu::C2hData(_) => PduType::C2hData,
            Pdu::R2t(_) => PduType::R2t,
        }
    }
}

/// A fatal error: what the termination request must say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Fatal {
    /// Fatal Error Status.
    pub fes: Fes,
    /// Fatal Error Information (byte offset of the field for FES 1 and 6, else 0).
    pub fei: u32,
}

impl Fatal {
    /// An error at a field offset (FEI is dropped for statuses that carry none).
    pub fn new(fes: Fes, fei: u32) -> Fatal {
        Fatal {
            fes,
            fei: if fes.has_offset() { fei } else { 0 },
        }
    }

    /// An invalid header field at `fei`.
    pub fn field(fei: u32) -> Fatal {
        Fatal::new(Fes::InvalidHeaderField, fei)
    }
}

impl core::fmt::Display for Fatal {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        if self.fes.has_offset() {
            write!(f, "{} at byte {}", self.fes.name(), self.fei)
        } else {
            f.write_str(self.fes.name())
        }
    }
}

/// What one call to [`PduReader::read`] produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadEvent<'a> {
    /// Everything given was consumed; more bytes are needed ([`PduReader::needed`] says how many
    /// complete the current part).
    NeedMore,
    /// A whole, valid header (digest checked). `data_len` bytes of data follow as
    /// [`ReadEvent::Data`], then [`ReadEvent::End`].
    Header {
        /// The header.
        pdu: Pdu,
        /// Bytes of data (in-capsule data, H2C/C2H data, termination error data).
        data_len: u32,
    },
    /// The next piece of the current PDU's data.
    Data(&'a [u8]),
    /// The current PDU is complete.
    End {
        /// With data digests: whether the digest matched (always `true` without).
        data_digest_ok: bool,
    },
    /// The PDU is invalid: send a termination request with this status and close. The reader
    /// stays failed.
    Fatal(Fatal),
    /// A termination request with an impossible length: close at once without answering.
    Abort,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    /// Reading the 8-byte common header.
    Common,
    /// Reading the rest of the header and its digest, up to `header_len`.
    Header,
    /// Skipping the padding between the header and PDO.
    Pad,
    /// Handing out data.
    Data,
    /// Reading the data digest.
    Ddgst,
    /// The PDU is done; [`ReadEvent::End`] comes next.
    End,
    /// A fatal error was reported; nothing more is read.
    Failed(Option<Fatal>),
}

/// The streaming reader of one direction of a connection.
#[derive(Clone, Debug)]
pub struct PduReader {
    role: Role,
    /// Framing of received PDUs once the IC exchange is done (digests; the alignment we asked
    /// the peer for).
    framing: Option<Framing>,
    state: State,
    buf: [u8; MAX_HEADER_LEN],
    have: usize,
    header_len: usize,
    ch: CommonHeader,
    pad_left: u32,
    data_left: u32,
    data_len: u32,
    ddgst_on: bool,
    digest: DataDigest,
    ddgst: [u8; DIGEST_LEN],
    ddgst_have: usize,
}

impl PduReader {
    /// A reader for a new connection: only the IC PDU (and termination requests) are valid
    /// until [`PduReader::set_framing`].
    pub fn new(role: Role) -> PduReader {
        PduReader {
            role,
            framing: None,
            state: State::Common,
            buf: [0; MAX_HEADER_LEN],
            have: 0,
            header_len: CH_LEN,
            ch: CommonHeader::default(),
            pad_left: 0,
            data_left: 0,
            data_len: 0,
            ddgst_on: false,
            digest: DataDigest::new(),
            ddgst: [0; DIGEST_LEN],
            ddgst_have: 0,
        }
    }

    /// The IC exchange is done: digests apply and data must be aligned to `framing.pda`.
    pub fn set_framing(&mut self, framing: Framing) {
        self.framing = Some(framing);
    }

    /// The role given to [`PduReader::new`].
    pub fn role(&self) -> Role {
        self.role
    }

    /// The framing set by [`PduReader::set_framing`].
    pub fn framing(&self) -> Option<Framing> {
        self.framing
    }

    /// `true` once a fatal error was reported.
    pub fn is_failed(&self) -> bool {
        matches!(self.state, State::Failed(_))
    }

    /// `true` between PDUs (no partial PDU held).
    pub fn is_idle(&self) -> bool {
        self.state == State::Common && self.have == 0
    }

    /// Bytes needed to finish the current part (common header, header, padding, data, data
    /// digest); 0 when an event is ready without input.
    pub fn needed(&self) -> usize {
        match self.state {
            State::Common | State::Header => self.header_len - self.have,
            State::Pad => self.pad_left as usize,
            State::Data => self.data_left as usize,
            State::Ddgst => DIGEST_LEN - self.ddgst_have,
            State::End | State::Failed(_) => 0,
        }
    }

    /// The bytes of the current (or failed) PDU's header received so far, cut to the 128 bytes
    /// a termination request carries.
    pub fn header_bytes(&self) -> &[u8] {
        let mut n = self.have.min(TERM_MAX_ERROR_DATA);
        let hlen = usize::from(self.ch.hlen);
        if self.have > CH_LEN && hlen >= CH_LEN {
            // Without the header digest.
            n = n.min(hlen);
        }
        &self.buf[..n]
    }

    /// Bytes of the current PDU's data not yet handed out.
    pub fn data_left(&self) -> u32 {
        self.data_left
    }

    /// Consumes bytes from `input` until one event is ready or `input` is used up; returns how
    /// many bytes were consumed and the event.
    pub fn read<'a>(&mut self, input: &'a [u8]) -> (usize, ReadEvent<'a>) {
        let mut used = 0;
        loop {
            let rest = &input[used..];
            match self.state {
                State::Failed(f) => {
                    return (
                        used,
                        match f {
                            Some(f) => ReadEvent::Fatal(f),
                            None => ReadEvent::Abort,
                        },
                    );
                }
                State::Common | State::Header => {
                    let n = (self.header_len - self.have).min(rest.len());
                    self.buf[self.have..self.have + n].copy_from_slice(&rest[..n]);
                    self.have += n;
                    used += n;
                    if self.have < self.header_len {
                        return (used, ReadEvent::NeedMore);
                    }
                    if self.state == State::Common {
                        if let Err(e) = self.common_header_done() {
                            return (used, self.fail(e));
                        }
                        continue;
                    }
                    return match self.header_done() {
                        Ok(pdu) => (
                            used,
                            ReadEvent::Header {
                                pdu,
                                data_len: self.data_len,
                            },
                        ),
                        Err(e) => (used, self.fail(e)),
                    };
                }
                State::Pad => {
                    let n = (self.pad_left as usize).min(rest.len());
                    self.pad_left -= n as u32;
                    used += n;
                    if self.pad_left > 0 {
                        return (used, ReadEvent::NeedMore);
                    }
                    self.state = State::Data;
                }
                State::Data => {
                    if self.data_left == 0 {
                        self.state = if self.ddgst_on {
                            State::Ddgst
                        } else {
                            State::End
                        };
                        continue;
                    }
                    if rest.is_empty() {
                        return (used, ReadEvent::NeedMore);
                    }
                    let n = (self.data_left as usize).min(rest.len());
                    let piece = &rest[..n];
                    self.data_left -= n as u32;
                    if self.ddgst_on {
                        self.digest.update(piece);
                    }
                    used += n;
                    return (used, ReadEvent::Data(piece));
                }
                State::Ddgst => {
                    let n = (DIGEST_LEN - self.ddgst_have).min(rest.len());
                    self.ddgst[self.ddgst_have..self.ddgst_have + n].copy_from_slice(&rest[..n]);
                    self.ddgst_have += n;
                    used += n;
                    if self.ddgst_have < DIGEST_LEN {
                        return (used, ReadEvent::NeedMore);
                    }
                    self.state = State::End;
                }
                State::End => {
                    let ok =
                        !self.ddgst_on || u32::from_le_bytes(self.ddgst) == self.digest.value();
                    self.reset();
                    return (used, ReadEvent::End { data_digest_ok: ok });
                }
            }
        }
    }

    fn reset(&mut self) {
        self.state = State::Common;
        self.have = 0;
        self.header_len = CH_LEN;
        self.pad_left = 0;
        self.data_left = 0;
        self.data_len = 0;
        self.ddgst_on = false;
        self.digest = DataDigest::new();
        self.ddgst_have = 0;
    }

    fn fail(&mut self, e: Option<Fatal>) -> ReadEvent<'static> {
        self.state = State::Failed(e);
        match e {
            Some(f) => ReadEvent::Fatal(f),
            None => ReadEvent::Abort,
        }
    }

    /// Validates the common header and sets up reading the rest of the header.
    /// `Err(None)`: abort without a termination request.
    fn common_header_done(&mut self) -> Result<(), Option<Fatal>> {
        let ch = CommonHeader::parse(&self.buf).unwrap_or_default();
        self.ch = ch;
        let ty = check_common(&ch, self.role, self.framing)?;
        let hd = ch.flags & flags::HDGSTF != 0;
        self.header_len = usize::from(ch.hlen) + if hd { DIGEST_LEN } else { 0 };
        let full = self.header_len as u32;
        let (pad, data_len, dd) = match ty {
            PduType::H2cTermReq | PduType::C2hTermReq => (0, ch.plen - TERM_HLEN as u32, false),
            _ if ch.pdo == 0 || ch.plen == full => (0, 0, false),
            _ => {
                let dd = ch.flags & flags::DDGSTF != 0;
                let pdo = u32::from(ch.pdo);
                let dd_len = if dd { DIGEST_LEN as u32 } else { 0 };
                (pdo - full, ch.plen - pdo - dd_len, dd)
            }
        };
        self.pad_left = pad;
        self.data_len = data_len;
        self.data_left = data_len;
        self.ddgst_on = dd;
        self.state = State::Header;
        Ok(())
    }

    /// Checks the header digest and decodes the header.
    fn header_done(&mut self) -> Result<Pdu, Option<Fatal>> {
        let hlen = usize::from(self.ch.hlen);
        if self.ch.flags & flags::HDGSTF != 0 {
            let got = le::u32_at(&self.buf, hlen);
            if got != header_digest(&self.buf[..hlen]) {
                return Err(Some(Fatal::new(Fes::HeaderDigestError, 0)));
            }
        }
        let b = &self.buf[..hlen];
        let ty = PduType::from_u8(self.ch.pdu_type).ok_or(Some(Fatal::field(field::TYPE)))?;
        let pdu = match ty {
            PduType::IcReq => Pdu::IcReq(IcReq::decode(b)),
            PduType::IcResp => Pdu::IcResp(IcResp::decode(b)),
            PduType::H2cTermReq => Pdu::H2cTermReq(TermReq::decode(b)),
            PduType::C2hTermReq => Pdu::C2hTermReq(TermReq::decode(b)),
            PduType::CapsuleCmd => Pdu::CapsuleCmd(CapsuleCmd::decode(b)),
            PduType::CapsuleResp => Pdu::CapsuleResp(CapsuleResp::decode(b)),
            PduType::H2cData => {
                let d = H2cData::decode(b);
                if d.datal != self.data_len {
                    return Err(Some(Fatal::field(field::H2C_DATAL)));
                }
                Pdu::H2cData(d)
            }
            PduType::C2hData => {
                let d = C2hData::decode(b);
                if d.datal != self.data_len {
                    return Err(Some(Fatal::field(field::H2C_DATAL)));
                }
                Pdu::C2hData(d)
            }
            PduType::R2t => Pdu::R2t(R2t::decode(b)),
        };
        self.state = if self.pad_left > 0 {
            State::Pad
        } else {
            State::Data
        };
        Ok(pdu)
    }
}

/// Validates a common header received by `role`, field by field in wire order. `framing` is
/// `None` until the IC exchange is done. `Err(None)`: a termination request with an invalid
/// length, to be dropped with the connection without an answer.
pub(crate) fn check_common(
    ch: &CommonHeader,
    role: Role,
    framing: Option<Framing>,
) -> Result<PduType, Option<Fatal>> {
    let bad = |fei| Err(Some(Fatal::field(fei)));
    // PDU-type.
    let Some(ty) = PduType::from_u8(ch.pdu_type) else {
        return bad(field::TYPE);
    };
    if ty.is_host_to_controller() != (role == Role::Controller) {
        return bad(field::TYPE);
    }
    let is_ic = matches!(ty, PduType::IcReq | PduType::IcResp);
    let is_term = matches!(ty, PduType::H2cTermReq | PduType::C2hTermReq);
    if !is_term && is_ic == framing.is_some() {
        // An IC PDU after the exchange, or anything else before it.
        return Err(Some(Fatal::new(Fes::PduSequenceError, 0)));
    }
    let hlen = usize::from(ch.hlen);
    let hd = ch.flags & flags::HDGSTF != 0;
    let full_hlen = hlen + if hd { DIGEST_LEN } else { 0 };
    let plen = ch.plen as usize;
    // FLAGS.
    if ch.flags & !ty.valid_flags() != 0 {
        return bad(field::FLAGS);
    }
    if ty.takes_digests() {
        let digests = framing.map(|f| f.digests).unwrap_or_default();
        let has_data = ty.may_carry_data() && plen > full_hlen;
        if hd != digests.header || (ch.flags & flags::DDGSTF != 0) != (digests.data && has_data) {
            return bad(field::FLAGS);
        }
    }
    if ty == PduType::C2hData && ch.flags & (flags::SUCCESS | flags::LAST_PDU) == flags::SUCCESS {
        return bad(field::FLAGS);
    }
    // HLEN.
    if hlen != ty.hlen() {
        return bad(field::HLEN);
    }
    if is_term {
        // A termination request with an impossible length ends the connection unanswered.
        if !(TERM_HLEN..=TERM_MAX_PLEN).contains(&plen) {
            return Err(None);
        }
        if ch.pdo != 0 && usize::from(ch.pdo) != TERM_HLEN {
            return bad(field::PDO);
        }
        return Ok(ty);
    }
    // PDO.
    let pdo = usize::from(ch.pdo);
    if !ty.may_carry_data() {
        if pdo != 0 {
            return bad(field::PDO);
        }
    } else if pdo != 0 || plen > full_hlen {
        let align = framing.map(|f| f.alignment()).unwrap_or(4);
        if pdo < full_hlen || pdo > plen || pdo % align != 0 {
            return bad(field::PDO);
        }
    }
    // PLEN.
    if plen < full_hlen {
        return bad(field::PLEN);
    }
    if !ty.may_carry_data() {
        if plen != full_hlen {
            return bad(field::PLEN);
        }
    } else if ch.flags & flags::DDGSTF != 0 && plen - pdo <= DIGEST_LEN {
        return bad(field::PLEN);
    }
    Ok(ty)
}
