//! Fabrics commands: Connect (command + 1 KiB data), Property Get/Set decoding, and the
//! rejections a Connect can get.
//!
//! Connect handling is split between this module and the exec layer, because only the exec layer
//! knows the subsystems, ports, allow lists and live controllers. The recommended order (reference
//! §3.3) is:
//!
//! 1. [`parse_connect`]: data length, RECFMT, SUBNQN/HOSTNQN format;
//! 2. exec: SUBNQN names a subsystem exported on this port, else [`ConnectReject::unknown_subsystem`];
//! 3. exec: [`host_allowed`], else [`ConnectReject::invalid_host`];
//! 4. admin queue: [`check_admin_connect`], allocate a CNTLID ([`super::CntlidAllocator`], else
//!    [`ConnectReject::controller_busy`]), then [`super::Controller::new`];
//!    I/O queue: find the controller by (SUBNQN, HOSTNQN, CNTLID), else
//!    [`ConnectReject::unknown_controller`], then [`super::Controller::accept_io_queue`].

use super::cqe::{Cqe, SQHD_FLOW_CONTROL_DISABLED};
use super::nqn::Nqn;
use super::sgl::SglDescriptor;
use super::spec::{CNTLID_DYNAMIC, CONNECT_DATA_SIZE, NQN_FIELD_LEN, Status, fctype, le};
use super::sqe::Sqe;
use super::view::TransportLimits;

/// Connect SQE byte offsets (for IPO reporting).
pub mod connect_off {
    /// RECFMT (u16).
    pub const RECFMT: u16 = 40;
    /// QID (u16).
    pub const QID: u16 = 42;
    /// SQSIZE (u16, 0's based).
    pub const SQSIZE: u16 = 44;
    /// CATTR (u8).
    pub const CATTR: u16 = 46;
    /// KATO (u32, ms).
    pub const KATO: u16 = 48;
}

/// Connect data byte offsets (for IPO reporting).
pub mod connect_data_off {
    /// HOSTID (16 bytes).
    pub const HOSTID: u16 = 0;
    /// CNTLID (u16).
    pub const CNTLID: u16 = 16;
    /// SUBNQN (256 bytes).
    pub const SUBNQN: u16 = 256;
    /// HOSTNQN (256 bytes).
    pub const HOSTNQN: u16 = 512;
}

/// CATTR bit 2: the host disabled SQ flow control (report SQHD 0xFFFF).
pub const CATTR_DISABLE_SQ_FLOW_CONTROL: u8 = 1 << 2;
/// CATTR bit 3: the host wants to delete this I/O queue with a Disconnect command.
pub const CATTR_IO_QUEUE_DELETION: u8 = 1 << 3;

/// The fields of a Connect SQE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectCmd {
    /// Record format (must be 0).
    pub recfmt: u16,
    /// Queue id: 0 for the admin queue.
    pub qid: u16,
    /// Submission queue size, 0's based.
    pub sqsize: u16,
    /// Connect attributes.
    pub cattr: u8,
    /// Keep-alive timeout in ms (admin queue only).
    pub kato_ms: u32,
}

impl ConnectCmd {
    /// Reads the Connect fields of a fabrics SQE.
    pub fn from_sqe(sqe: &Sqe) -> ConnectCmd {
        ConnectCmd {
            recfmt: sqe.u16_at(40),
            qid: sqe.u16_at(42),
            sqsize: sqe.u16_at(44),
            cattr: sqe.u8_at(46),
            kato_ms: sqe.u32_at(48),
        }
    }

    /// True when the host disabled SQ flow control.
    pub fn sq_flow_control_disabled(&self) -> bool {
        self.cattr & CATTR_DISABLE_SQ_FLOW_CONTROL != 0
    }

    /// Queue depth in entries (SQSIZE + 1).
    pub fn queue_depth(&self) -> u32 {
        u32::from(self.sqsize) + 1
    }
}

/// The 1024-byte Connect data.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectData {
    /// 128-bit host identifier.
    pub hostid: [u8; 16],
    /// Controller id: 0xFFFF (dynamic) on the admin queue, the admin Connect's answer on I/O queues.
    pub cntlid: u16,
    /// Subsystem NQN.
    pub subnqn: Nqn,
    /// Host NQN.
    pub hostnqn: Nqn,
}

/// A parsed Connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Connect {
    /// SQE fields.
    pub cmd: ConnectCmd,
    /// Data fields.
    pub data: ConnectData,
}

impl Connect {
    /// True for the admin queue (QID 0).
    pub fn is_admin(&self) -> bool {
        self.cmd.qid == 0
    }

    /// The success completion for this Connect: SQID = QID, SQHD = 1 (the Connect consumed one
    /// entry) or 0xFFFF when SQ flow control is disabled, DW0 as given.
    pub fn success_cqe(&self, sqe: &Sqe, dw0: u32) -> Cqe {
        let sqhd = if self.cmd.sq_flow_control_disabled() {
            SQHD_FLOW_CONTROL_DISABLED
        } else {
            1
        };
        let mut c = Cqe::for_command(sqe, self.cmd.qid, sqhd, Status::SUCCESS);
        c.dw0 = dw0;
        c
    }
}

/// A refused Connect: the status and DW0 (IATTR/IPO for Invalid Parameters).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectReject {
    /// Completion status.
    pub status: Status,
    /// Completion DW0.
    pub dw0: u32,
}

impl ConnectReject {
    fn new(status: Status) -> ConnectReject {
        ConnectReject { status, dw0: 0 }
    }

    /// Connect Invalid Parameters pointing at byte `ipo` of the SQE (IATTR 0).
    pub fn invalid_sqe_field(ipo: u16) -> ConnectReject {
        ConnectReject {
            status: Status::CONNECT_INVALID_PARAMETERS,
            dw0: u32::from(ipo),
        }
    }

    /// Connect Invalid Parameters pointing at byte `ipo` of the Connect data (IATTR 1).
    pub fn invalid_data_field(ipo: u16) -> ConnectReject {
        ConnectReject {
            status: Status::CONNECT_INVALID_PARAMETERS,
            dw0: 1 << 16 | u32::from(ipo),
        }
    }

    /// The subsystem does not exist or is not exported on this port (IATTR 1, IPO 256).
    pub fn unknown_subsystem() -> ConnectReject {
        ConnectReject::invalid_data_field(connect_data_off::SUBNQN)
    }

    /// No live controller matches (SUBNQN, HOSTNQN, CNTLID) for an I/O Connect (IATTR 1, IPO 16).
    pub fn unknown_controller() -> ConnectReject {
        ConnectReject::invalid_data_field(connect_data_off::CNTLID)
    }

    /// The host NQN is not on the subsystem's allow list (0x4184).
    pub fn invalid_host() -> ConnectReject {
        ConnectReject::new(Status::CONNECT_INVALID_HOST)
    }

    /// Temporary refusal, e.g. no CNTLID left or the subsystem is being changed (0x0181, no DNR:
    /// the host retries).
    pub fn controller_busy() -> ConnectReject {
        ConnectReject::new(Status::CONNECT_CONTROLLER_BUSY)
    }

    /// Any other status (e.g. Command Sequence Error for a second Connect on a queue).
    pub fn status(status: Status) -> ConnectReject {
        ConnectReject::new(status)
    }

    /// IATTR: 0 = IPO is an SQE offset, 1 = a Connect data offset.
    pub fn iattr(&self) -> u8 {
        (self.dw0 >> 16) as u8
    }

    /// IPO: the offset of the bad field.
    pub fn ipo(&self) -> u16 {
        self.dw0 as u16
    }

    /// The completion to send for the rejected Connect `sqe` on queue `sqid`.
    pub fn cqe(&self, sqe: &Sqe, sqid: u16, sqhd: u16) -> Cqe {
        let mut c = Cqe::for_command(sqe, sqid, sqhd, self.status);
        c.dw0 = self.dw0;
        c
    }
}

/// Parses a Connect: `sqe` must be a fabrics Connect, `data` the bytes its SGL1 described.
///
/// Checks, in order: data length ≥ 1024 (else Invalid Field), RECFMT = 0 (else Incompatible
/// Format), SUBNQN and HOSTNQN NUL-terminated, non-empty UTF-8 of at most 223 bytes (else
/// Invalid Parameters with IATTR 1 and IPO 256 / 512). Queue id, size and CNTLID are checked
/// later, once the subsystem is known.
pub fn parse_connect(sqe: &Sqe, data: &[u8]) -> Result<Connect, ConnectReject> {
    tracing::trace!(target: crate::hex::WIRE_TARGET, kind = "nvme_connect",
                    sqe = %crate::hex::Hex(&sqe.0), data = %crate::hex::Hex(data));
    if !sqe.is_fabrics() || sqe.fctype() != fctype::CONNECT {
        return Err(ConnectReject::status(Status::INVALID_OPCODE));
    }
    let cmd = ConnectCmd::from_sqe(sqe);
    let Some(data) = data.get(..CONNECT_DATA_SIZE) else {
        return Err(ConnectReject::status(Status::INVALID_FIELD));
    };
    if cmd.recfmt != 0 {
        return Err(ConnectReject::status(Status::CONNECT_INCOMPATIBLE_FORMAT));
    }
    let sub = usize::from(connect_data_off::SUBNQN);
    let host = usize::from(connect_data_off::HOSTNQN);
    let subnqn = Nqn::from_field(&data[sub..sub + NQN_FIELD_LEN])
        .map_err(|_| ConnectReject::invalid_data_field(connect_data_off::SUBNQN))?;
    let hostnqn = Nqn::from_field(&data[host..host + NQN_FIELD_LEN])
        .map_err(|_| ConnectReject::invalid_data_field(connect_data_off::HOSTNQN))?;
    let mut hostid = [0u8; 16];
    hostid.copy_from_slice(&data[..16]);
    Ok(Connect {
        cmd,
        data: ConnectData {
            hostid,
            cntlid: le::u16_at(data, 16),
            subnqn,
            hostnqn,
        },
    })
}

/// Allow-list check: byte-exact, case-sensitive comparison of the host NQN.
pub fn host_allowed<'a>(
    allow_any_host: bool,
    allowed_hosts: impl IntoIterator<Item = &'a str>,
    hostnqn: &Nqn,
) -> bool {
    allow_any_host || allowed_hosts.into_iter().any(|h| *hostnqn == *h)
}

/// Checks an admin-queue Connect once the subsystem is known and the host admitted.
///
/// QID must be 0; SQSIZE must be non-zero and SQSIZE+1 ≤ the admin queue limit (IPO 44; the admin
/// queue is *not* checked against MQES); CNTLID must be 0xFFFF (dynamic model; IATTR 1, IPO 16).
pub fn check_admin_connect(c: &Connect, limits: &TransportLimits) -> Result<(), ConnectReject> {
    if c.cmd.qid != 0 {
        return Err(ConnectReject::invalid_sqe_field(connect_off::QID));
    }
    if c.cmd.sqsize == 0 || c.cmd.queue_depth() > u32::from(limits.max_admin_queue_depth.max(2)) {
        return Err(ConnectReject::invalid_sqe_field(connect_off::SQSIZE));
    }
    if c.data.cntlid != CNTLID_DYNAMIC {
        return Err(ConnectReject::invalid_data_field(connect_data_off::CNTLID));
    }
    Ok(())
}

/// Property access size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PropertySize {
    /// 4 bytes.
    Four,
    /// 8 bytes.
    Eight,
}

/// A decoded Property Get or Set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PropertyCmd {
    /// Access size, or `None` for a reserved ATTRIB.SIZE value.
    pub size: Option<PropertySize>,
    /// Property offset.
    pub offset: u32,
    /// Value to set (Property Set only; the low 4 bytes for a 4-byte set).
    pub value: u64,
}

impl PropertyCmd {
    /// Reads ATTRIB (byte 40), OFST (44-47) and VALUE (48-55).
    pub fn from_sqe(sqe: &Sqe) -> PropertyCmd {
        let size = match sqe.u8_at(40) & 7 {
            0 => Some(PropertySize::Four),
            1 => Some(PropertySize::Eight),
            _ => None,
        };
        PropertyCmd {
            size,
            offset: sqe.u32_at(44),
            value: sqe.u64_at(48),
        }
    }
}

/// Builders for host-side capsules: test initiators and unit tests use these.
pub mod build {
    use super::*;

    /// A Connect SQE with the given queue parameters; SGL1 describes the data.
    pub fn connect_sqe(cid: u16, qid: u16, sqsize: u16, kato_ms: u32, sgl: SglDescriptor) -> Sqe {
        let mut s = Sqe::fabrics(fctype::CONNECT, cid);
        s.set_u16_at(42, qid)
            .set_u16_at(44, sqsize)
            .set_u32_at(48, kato_ms)
            .set_sgl1(sgl);
        s
    }

    /// 1024 bytes of Connect data. Strings longer than the field are truncated (and then not
    /// NUL-terminated, which a target must reject).
    pub fn connect_data(
        hostid: [u8; 16],
        cntlid: u16,
        subnqn: &str,
        hostnqn: &str,
    ) -> [u8; CONNECT_DATA_SIZE] {
        let mut d = [0u8; CONNECT_DATA_SIZE];
        d[..16].copy_from_slice(&hostid);
        le::put_u16(&mut d, 16, cntlid);
        le::put_padded(&mut d, 256, NQN_FIELD_LEN, subnqn.as_bytes(), 0);
        le::put_padded(&mut d, 512, NQN_FIELD_LEN, hostnqn.as_bytes(), 0);
        d
    }

    /// Property Get of `offset` with 8-byte (`eight`) or 4-byte size.
    pub fn property_get(cid: u16, offset: u32, eight: bool) -> Sqe {
        let mut s = Sqe::fabrics(fctype::PROPERTY_GET, cid);
        s.set_u8_at(40, u8::from(eight))
            .set_u32_at(44, offset)
            .set_sgl1(SglDescriptor::null_keyed());
        s
    }

    /// 4-byte Property Set of `offset` to `value`.
    pub fn property_set(cid: u16, offset: u32, value: u32) -> Sqe {
        let mut s = Sqe::fabrics(fctype::PROPERTY_SET, cid);
        s.set_u32_at(44, offset)
            .set_u64_at(48, u64::from(value))
            .set_sgl1(SglDescriptor::null_keyed());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::spec::DISCOVERY_NQN;

    const HOSTNQN: &str = "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555";
    const SUBNQN: &str = "nqn.2016-06.io.rtgt:cnode1";

    fn admin_connect() -> (Sqe, [u8; 1024]) {
        (
            build::connect_sqe(0, 0, 31, 5000, SglDescriptor::keyed(0x1000, 1024, 9, true)),
            build::connect_data([7; 16], CNTLID_DYNAMIC, SUBNQN, HOSTNQN),
        )
    }

    #[test]
    fn parses_linux_admin_connect() {
        let (s, d) = admin_connect();
        let c = parse_connect(&s, &d).unwrap();
        assert!(c.is_admin());
        assert_eq!(c.cmd.sqsize, 31);
        assert_eq!(c.cmd.queue_depth(), 32);
        assert_eq!(c.cmd.kato_ms, 5000);
        assert_eq!(c.data.hostid, [7; 16]);
        assert_eq!(c.data.cntlid, 0xFFFF);
        assert_eq!(c.data.subnqn, SUBNQN);
        assert_eq!(c.data.hostnqn, HOSTNQN);
        assert_eq!(check_admin_connect(&c, &TransportLimits::default()), Ok(()));
    }

    #[test]
    fn raw_connect_bytes() {
        // Hand-built capsule: the field offsets of reference §3.2.
        let mut raw = [0u8; 64];
        raw[0] = 0x7F;
        raw[1] = 0x40;
        raw[2] = 0x05;
        raw[4] = 0x01;
        raw[42] = 3; // qid
        raw[44] = 127; // sqsize
        raw[46] = 0x04; // cattr: disable SQ flow control
        let s = Sqe::from_bytes(&raw).unwrap();
        let mut d = [0u8; 1024];
        d[16] = 0x34;
        d[17] = 0x12;
        d[256..256 + SUBNQN.len()].copy_from_slice(SUBNQN.as_bytes());
        d[512..512 + HOSTNQN.len()].copy_from_slice(HOSTNQN.as_bytes());
        let c = parse_connect(&s, &d).unwrap();
        assert_eq!(c.cmd.qid, 3);
        assert_eq!(c.cmd.sqsize, 127);
        assert!(c.cmd.sq_flow_control_disabled());
        assert_eq!(c.data.cntlid, 0x1234);
        let cqe = c.success_cqe(&s, 0x1234);
        assert_eq!(cqe.sqhd, 0xFFFF);
        assert_eq!(cqe.sqid, 3);
        assert_eq!(cqe.cid, 5);
        assert_eq!(cqe.dw0, 0x1234);
    }

    #[test]
    fn connect_rejections_in_order() {
        let (s, d) = admin_connect();
        // Short data.
        assert_eq!(
            parse_connect(&s, &d[..1023]).unwrap_err().status,
            Status::INVALID_FIELD
        );
        // RECFMT.
        let mut bad = s;
        bad.set_u16_at(40, 1);
        assert_eq!(
            parse_connect(&bad, &d).unwrap_err().status,
            Status::CONNECT_INCOMPATIBLE_FORMAT
        );
        // Unterminated SUBNQN.
        let mut dd = d;
        dd[256..512].fill(b'a');
        let r = parse_connect(&s, &dd).unwrap_err();
        assert_eq!(r.status, Status::CONNECT_INVALID_PARAMETERS);
        assert_eq!((r.iattr(), r.ipo()), (1, 256));
        assert_eq!(r.dw0, 0x0001_0100);
        // Empty HOSTNQN.
        let mut dd = d;
        dd[512..768].fill(0);
        let r = parse_connect(&s, &dd).unwrap_err();
        assert_eq!((r.iattr(), r.ipo()), (1, 512));
        // Not a Connect.
        let p = build::property_get(1, 0, true);
        assert_eq!(
            parse_connect(&p, &d).unwrap_err().status,
            Status::INVALID_OPCODE
        );
    }

    #[test]
    fn admin_connect_checks() {
        let l = TransportLimits::default();
        let (s, d) = admin_connect();
        let c = parse_connect(&s, &d).unwrap();
        let mut z = c.clone();
        z.cmd.sqsize = 0;
        let r = check_admin_connect(&z, &l).unwrap_err();
        assert_eq!(
            (r.status, r.iattr(), r.ipo()),
            (Status::CONNECT_INVALID_PARAMETERS, 0, 44)
        );
        let mut big = c.clone();
        big.cmd.sqsize = 32;
        assert_eq!(check_admin_connect(&big, &l).unwrap_err().ipo(), 44);
        // The admin queue is not bound by MQES.
        let small = TransportLimits {
            max_queue_depth: 16,
            ..l
        };
        assert!(check_admin_connect(&c, &small).is_ok());
        let mut static_id = c.clone();
        static_id.data.cntlid = 0xFFFE;
        let r = check_admin_connect(&static_id, &l).unwrap_err();
        assert_eq!((r.iattr(), r.ipo()), (1, 16));
        let mut io = c;
        io.cmd.qid = 1;
        assert_eq!(check_admin_connect(&io, &l).unwrap_err().ipo(), 42);
    }

    #[test]
    fn reject_cqe_layout() {
        let (s, _) = admin_connect();
        let c = ConnectReject::unknown_subsystem().cqe(&s, 0, 1).encode();
        assert_eq!(&c[0..4], &[0x00, 0x01, 0x01, 0x00]);
        assert_eq!(u16::from_le_bytes([c[14], c[15]]) >> 1, 0x4182);
        let h = ConnectReject::invalid_host();
        assert_eq!(h.status.linux(), 0x4184);
        assert_eq!(h.dw0, 0);
        assert!(!ConnectReject::controller_busy().status.is_dnr());
        assert_eq!(ConnectReject::unknown_controller().dw0, 0x0001_0010);
    }

    #[test]
    fn allow_list_is_exact() {
        let h = Nqn::new(HOSTNQN).unwrap();
        assert!(host_allowed(true, [], &h));
        assert!(host_allowed(false, ["nqn.x", HOSTNQN], &h));
        let upper = HOSTNQN.to_uppercase();
        assert!(!host_allowed(false, [upper.as_str()], &h));
        let suffixed = format!("{HOSTNQN}x");
        assert!(!host_allowed(false, [suffixed.as_str()], &h));
        assert!(!host_allowed(false, [DISCOVERY_NQN], &h));
    }

    #[test]
    fn property_decoding() {
        let g = PropertyCmd::from_sqe(&build::property_get(1, 0x1C, false));
        assert_eq!(g.size, Some(PropertySize::Four));
        assert_eq!(g.offset, 0x1C);
        let s = PropertyCmd::from_sqe(&build::property_set(1, 0x14, 0x0046_0001));
        assert_eq!(s.value, 0x0046_0001);
        let mut bad = build::property_get(1, 0, true);
        bad.set_u8_at(40, 2);
        assert_eq!(PropertyCmd::from_sqe(&bad).size, None);
    }
}
