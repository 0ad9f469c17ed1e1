//! Reservation types, requester identities and the access table shared by NVMe and SCSI.
//!
//! # Type mapping (NVMe base spec "Reservation Type" ↔ SPC-4 persistent reservation TYPE)
//!
//! The six reservation types are the same concept in both protocols (the NVMe reservation
//! model was copied from SCSI persistent reservations); only the code points differ. The NVM
//! Express SCSI Translation Reference maps them one to one:
//!
//! | [`ResvType`] | NVMe RTYPE | SCSI TYPE |
//! |---|---|---|
//! | Write Exclusive | 1h | 1h |
//! | Exclusive Access | 2h | 3h |
//! | Write Exclusive – Registrants Only | 3h | 5h |
//! | Exclusive Access – Registrants Only | 4h | 6h |
//! | Write Exclusive – All Registrants | 5h | 7h |
//! | Exclusive Access – All Registrants | 6h | 8h |
//!
//! # Identities
//!
//! An NVMe registrant is a *host* (its Host Identifier: every controller of that host shares
//! the registration); a SCSI registrant is an *I_T nexus* (initiator port × target port).
//! Both live in one registrant list as [`Initiator`]s. They never compare equal to each
//! other, so an NVMe host and an SRP initiator are always two registrants, and two ib_srp
//! logins with different initiator port identifiers are two registrants too.

/// A reservation type, protocol neutral. See the module documentation for the code points.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ResvType {
    /// Only the holder may write; everyone may read.
    WriteExclusive,
    /// Only the holder may read or write.
    ExclusiveAccess,
    /// Registrants may write; everyone may read. One holder.
    WriteExclusiveRegistrantsOnly,
    /// Registrants may read and write. One holder.
    ExclusiveAccessRegistrantsOnly,
    /// Like Registrants Only, but every registrant is a holder.
    WriteExclusiveAllRegistrants,
    /// Like Registrants Only, but every registrant is a holder.
    ExclusiveAccessAllRegistrants,
}

impl ResvType {
    /// Every type, in NVMe code order.
    pub const ALL: [ResvType; 6] = [
        ResvType::WriteExclusive,
        ResvType::ExclusiveAccess,
        ResvType::WriteExclusiveRegistrantsOnly,
        ResvType::ExclusiveAccessRegistrantsOnly,
        ResvType::WriteExclusiveAllRegistrants,
        ResvType::ExclusiveAccessAllRegistrants,
    ];

    /// The NVMe RTYPE code (1..=6).
    pub const fn nvme(self) -> u8 {
        match self {
            ResvType::WriteExclusive => 1,
            ResvType::ExclusiveAccess => 2,
            ResvType::WriteExclusiveRegistrantsOnly => 3,
            ResvType::ExclusiveAccessRegistrantsOnly => 4,
            ResvType::WriteExclusiveAllRegistrants => 5,
            ResvType::ExclusiveAccessAllRegistrants => 6,
        }
    }

    /// The type for an NVMe RTYPE code; `None` for 0 and 7..=255 (reserved).
    pub const fn from_nvme(v: u8) -> Option<ResvType> {
        Some(match v {
            1 => ResvType::WriteExclusive,
            2 => ResvType::ExclusiveAccess,
            3 => ResvType::WriteExclusiveRegistrantsOnly,
            4 => ResvType::ExclusiveAccessRegistrantsOnly,
            5 => ResvType::WriteExclusiveAllRegistrants,
            6 => ResvType::ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }

    /// The SCSI persistent reservation TYPE code (1, 3, 5, 6, 7, 8).
    pub const fn scsi(self) -> u8 {
        match self {
            ResvType::WriteExclusive => 0x1,
            ResvType::ExclusiveAccess => 0x3,
            ResvType::WriteExclusiveRegistrantsOnly => 0x5,
            ResvType::ExclusiveAccessRegistrantsOnly => 0x6,
            ResvType::WriteExclusiveAllRegistrants => 0x7,
            ResvType::ExclusiveAccessAllRegistrants => 0x8,
        }
    }

    /// The type for a SCSI TYPE code; `None` for the obsolete and reserved codes.
    pub const fn from_scsi(v: u8) -> Option<ResvType> {
        Some(match v {
            0x1 => ResvType::WriteExclusive,
            0x3 => ResvType::ExclusiveAccess,
            0x5 => ResvType::WriteExclusiveRegistrantsOnly,
            0x6 => ResvType::ExclusiveAccessRegistrantsOnly,
            0x7 => ResvType::WriteExclusiveAllRegistrants,
            0x8 => ResvType::ExclusiveAccessAllRegistrants,
            _ => return None,
        })
    }

    /// All Registrants types: every registrant is a reservation holder.
    pub const fn all_registrants(self) -> bool {
        matches!(
            self,
            ResvType::WriteExclusiveAllRegistrants | ResvType::ExclusiveAccessAllRegistrants
        )
    }

    /// Registrants Only types.
    pub const fn registrants_only(self) -> bool {
        matches!(
            self,
            ResvType::WriteExclusiveRegistrantsOnly | ResvType::ExclusiveAccessRegistrantsOnly
        )
    }

    /// Exclusive Access flavours (reads are restricted as well as writes).
    pub const fn exclusive_access(self) -> bool {
        matches!(
            self,
            ResvType::ExclusiveAccess
                | ResvType::ExclusiveAccessRegistrantsOnly
                | ResvType::ExclusiveAccessAllRegistrants
        )
    }

    /// A short name for logs.
    pub const fn name(self) -> &'static str {
        match self {
            ResvType::WriteExclusive => "write-exclusive",
            ResvType::ExclusiveAccess => "exclusive-access",
            ResvType::WriteExclusiveRegistrantsOnly => "write-exclusive-registrants-only",
            ResvType::ExclusiveAccessRegistrantsOnly => "exclusive-access-registrants-only",
            ResvType::WriteExclusiveAllRegistrants => "write-exclusive-all-registrants",
            ResvType::ExclusiveAccessAllRegistrants => "exclusive-access-all-registrants",
        }
    }
}

/// An NVMe Host Identifier. NVMe over Fabrics always uses the 128-bit (extended) form from
/// the Connect data; a 64-bit identifier is kept zero-extended ([`HostId::from_u64_bytes`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostId(pub [u8; 16]);

impl HostId {
    /// A 64-bit Host Identifier, zero-extended to 128 bits.
    pub fn from_u64_bytes(b: [u8; 8]) -> HostId {
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&b);
        HostId(v)
    }

    /// The identifier as SPDK formats it in `ptpl_file` (`host_uuid`, lower case).
    pub fn uuid_string(&self) -> String {
        uuid::Uuid::from_bytes(self.0).hyphenated().to_string()
    }
}

/// A SCSI initiator port: the protocol identifier (SPC-4 table 362; 4 for SRP) and the port
/// identifier. Fixed size: SRP (16 bytes), FC and SAS (8 bytes, left-aligned) fit; iSCSI
/// names would need a variable form.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct InitiatorPort {
    /// PROTOCOL IDENTIFIER.
    pub protocol_id: u8,
    /// The port identifier (for SRP the 16-byte initiator port identifier of LOGIN_REQ).
    pub id: [u8; 16],
}

/// Length of the TransportIDs built here (SPC-4 7.6.4: FC, SRP and SAS are 24 bytes).
pub const TRANSPORT_ID_LEN: usize = 24;

/// PROTOCOL IDENTIFIER "no specific protocol", used for NVMe hosts in SCSI reports.
pub const PROTOCOL_ID_NONE: u8 = 0xF;

impl InitiatorPort {
    /// An SRP initiator port (protocol identifier 4).
    pub fn srp(id: [u8; 16]) -> InitiatorPort {
        InitiatorPort { protocol_id: 4, id }
    }

    /// The 24-byte TransportID (FORMAT CODE 00b): byte 0 = protocol identifier; for SRP the
    /// initiator port identifier in bytes 8..24 (SPC-4 7.6.4.5).
    pub fn transport_id(&self) -> [u8; TRANSPORT_ID_LEN] {
        let mut t = [0u8; TRANSPORT_ID_LEN];
        t[0] = self.protocol_id & 0x0F;
        t[8..].copy_from_slice(&self.id);
        t
    }

    /// Parses a TransportID built by [`InitiatorPort::transport_id`] (format code 00b, 24
    /// bytes); `None` for anything else.
    pub fn from_transport_id(t: &[u8]) -> Option<InitiatorPort> {
        let t: &[u8; TRANSPORT_ID_LEN] = t.try_into().ok()?;
        if t[0] & 0xC0 != 0 || t[1..8].iter().any(|&b| b != 0) {
            return None;
        }
        let mut id = [0u8; 16];
        id.copy_from_slice(&t[8..]);
        Some(InitiatorPort {
            protocol_id: t[0] & 0x0F,
            id,
        })
    }
}

/// A SCSI I_T nexus: an initiator port seen through one target port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Nexus {
    /// The initiator port.
    pub initiator: InitiatorPort,
    /// RELATIVE TARGET PORT IDENTIFIER of the target port.
    pub relative_target_port: u16,
}

/// Whoever sends a command to the volume: an NVMe host or a SCSI I_T nexus.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Initiator {
    /// An NVMe host, by Host Identifier.
    Nvme(HostId),
    /// A SCSI I_T nexus.
    Scsi(Nexus),
}

/// A requester's relation to the current reservation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Role {
    /// The reservation holder (for All Registrants types: any registrant).
    Holder,
    /// Registered, but not a holder.
    Registrant,
    /// Not registered.
    NonRegistrant,
}

/// What a command does to the volume, for the conflict check. The translations classify
/// commands (`nvme::resv::command_class`, `scsi::pr_access::command_class`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommandClass {
    /// Reads the medium (or reports something a Write Exclusive reservation lets everyone
    /// see but an Exclusive Access one does not: MODE SENSE, REPORT SUPPORTED OPERATION
    /// CODES). NVMe Read, Compare, Verify; SCSI READ, VERIFY, MODE SENSE.
    Read,
    /// Modifies the medium or its cache. NVMe Write, Write Zeroes, Write Uncorrectable,
    /// Dataset Management, Flush; SCSI WRITE, WRITE SAME, UNMAP, SYNCHRONIZE CACHE,
    /// COMPARE AND WRITE, MODE SELECT.
    Write,
    /// Allowed through every persistent reservation type, but not through another
    /// nexus's SPC-2 reservation: TEST UNIT READY, READ CAPACITY, PERSISTENT RESERVE IN,
    /// NVMe Reservation Report.
    Query,
    /// Never conflicts: INQUIRY, REPORT LUNS, REQUEST SENSE, RELEASE(6/10); NVMe admin
    /// commands.
    Always,
    /// A reservation-changing command (PERSISTENT RESERVE OUT, RESERVE(6/10), NVMe
    /// Reservation Register/Acquire/Release): the operation checks keys itself; only
    /// another nexus's SPC-2 reservation refuses it up front.
    Reservation,
}

/// The access table of the NVMe base specification ("Command Behavior in the Presence of a
/// Reservation") and SPC-4 ("SPC commands that are allowed in the presence of various
/// reservations", SBC-3 likewise) for a requester that is *not* the holder:
///
/// | type | registrant read | registrant write | non-registrant read | non-registrant write |
/// |---|---|---|---|---|
/// | Write Exclusive | allowed | conflict | allowed | conflict |
/// | Exclusive Access | conflict | conflict | conflict | conflict |
/// | WE Registrants Only / All Registrants | allowed | allowed | allowed | conflict |
/// | EA Registrants Only / All Registrants | allowed | allowed | conflict | conflict |
///
/// The holder may do everything; [`CommandClass::Query`], [`CommandClass::Always`] and
/// [`CommandClass::Reservation`] never conflict with a persistent reservation.
pub const fn pr_permits(rtype: ResvType, role: Role, class: CommandClass) -> bool {
    if matches!(role, Role::Holder) {
        return true;
    }
    let registrant = matches!(role, Role::Registrant);
    match class {
        CommandClass::Query | CommandClass::Always | CommandClass::Reservation => true,
        CommandClass::Read => {
            match rtype {
                ResvType::WriteExclusive => true,
                ResvType::ExclusiveAccess => false,
                ResvType::WriteExclusiveRegistrantsOnly
                | ResvType::WriteExclusiveAllRegistrants => true,
                ResvType::ExclusiveAccessRegistrantsOnly
                | ResvType::ExclusiveAccessAllRegistrants => registrant,
            }
        }
        CommandClass::Write => match rtype {
            ResvType::WriteExclusive | ResvType::ExclusiveAccess => false,
            _ => registrant,
        },
    }
}

/// One requester's standing towards the volume: computed when the reservation state changes
/// (a few comparisons over the registrant list), then consulted per command in constant time
/// with [`Standing::permits`]. It is `Copy`, so a session keeps it by value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Standing {
    /// The current persistent reservation type, if any.
    pub rtype: Option<ResvType>,
    /// The requester's role.
    pub role: Role,
    /// Another I_T nexus holds an SPC-2 (RESERVE(6/10)) reservation.
    pub legacy_conflict: bool,
}

impl Standing {
    /// No reservation of either kind: everything is allowed.
    pub const UNRESERVED: Standing = Standing {
        rtype: None,
        role: Role::NonRegistrant,
        legacy_conflict: false,
    };

    /// May a command of `class` run? `false` means Reservation Conflict (NVMe status 83h,
    /// SCSI status 18h).
    pub const fn permits(&self, class: CommandClass) -> bool {
        if self.legacy_conflict {
            // SPC-2: everything but the few commands that never conflict (and RELEASE,
            // which is then a no-op) conflicts with another nexus's reservation.
            return matches!(class, CommandClass::Always);
        }
        match self.rtype {
            None => true,
            Some(t) => pr_permits(t, self.role, class),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_and_reject_reserved_values() {
        for t in ResvType::ALL {
            assert_eq!(ResvType::from_nvme(t.nvme()), Some(t));
            assert_eq!(ResvType::from_scsi(t.scsi()), Some(t));
        }
        // NVMe 0 and 7+ are reserved; SCSI 0, 2, 4 (obsolete) and 9+ are not types.
        for v in [0u8, 7, 8, 0xFF] {
            assert_eq!(ResvType::from_nvme(v), None);
        }
        for v in [0u8, 2, 4, 9, 0xF] {
            assert_eq!(ResvType::from_scsi(v), None);
        }
        // The translation reference's table, literally.
        let pairs = [(1, 1), (2, 3), (3, 5), (4, 6), (5, 7), (6, 8)];
        for (n, s) in pairs {
            assert_eq!(
                ResvType::from_nvme(n).map(ResvType::scsi),
                Some(s),
                "NVMe {n}"
            );
        }
    }

    #[test]
    fn transport_id_round_trip() {
        let p = InitiatorPort::srp([0x5A; 16]);
        let t = p.transport_id();
        assert_eq!(t[0], 4);
        assert_eq!(&t[1..8], &[0; 7]);
        assert_eq!(&t[8..], &[0x5A; 16]);
        assert_eq!(InitiatorPort::from_transport_id(&t), Some(p));
        assert_eq!(InitiatorPort::from_transport_id(&t[..23]), None);
        let mut bad = t;
        bad[0] |= 0x40; // format code 01b
        assert_eq!(InitiatorPort::from_transport_id(&bad), None);
    }

    #[test]
    fn host_id_uuid_format_matches_spdk() {
        let h = HostId([
            0x4c, 0x4c, 0x45, 0x44, 0x00, 0x35, 0x4b, 0x10, 0x80, 0x44, 0xb3, 0xc0, 0x4f, 0x4e,
            0x44, 0x33,
        ]);
        assert_eq!(h.uuid_string(), "4c4c4544-0035-4b10-8044-b3c04f4e4433");
        assert_eq!(
            HostId::from_u64_bytes([1, 2, 3, 4, 5, 6, 7, 8]).0,
            [1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0]
        );
    }

    #[test]
    fn legacy_conflict_leaves_only_always() {
        let s = Standing {
            rtype: None,
            role: Role::NonRegistrant,
            legacy_conflict: true,
        };
        assert!(s.permits(CommandClass::Always));
        for c in [
            CommandClass::Read,
            CommandClass::Write,
            CommandClass::Query,
            CommandClass::Reservation,
        ] {
            assert!(!s.permits(c), "{c:?}");
        }
        for c in [
            CommandClass::Read,
            CommandClass::Write,
            CommandClass::Query,
            CommandClass::Always,
            CommandClass::Reservation,
        ] {
            assert!(Standing::UNRESERVED.permits(c));
        }
    }
}
