//! SCSI status codes and sense data (SPC-4 4.5): fixed format (0x70) built into bytes, with
//! the sense key, ASC/ASCQ, the INFORMATION field and the sense-key-specific field pointer.

/// SAM status codes (the low bit is always zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum ScsiStatus {
    /// The command completed.
    Good = 0x00,
    /// Sense data describes the failure.
    CheckCondition = 0x02,
    /// The target is busy; the initiator retries later.
    Busy = 0x08,
    /// A reservation held by another nexus forbids the command.
    ReservationConflict = 0x18,
    /// The task set is full.
    TaskSetFull = 0x28,
    /// The command was aborted on behalf of another nexus (TAS = 1).
    TaskAborted = 0x40,
}

/// Sense keys (SPC-4 table 54).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum SenseKey {
    /// No specific sense key information.
    NoSense = 0x0,
    /// The command completed after a recovery action.
    RecoveredError = 0x1,
    /// The logical unit is not accessible.
    NotReady = 0x2,
    /// A non-recoverable error caused by the medium or the backing store.
    MediumError = 0x3,
    /// A non-recoverable hardware failure.
    HardwareError = 0x4,
    /// Something in the CDB or the parameter data is not acceptable.
    IllegalRequest = 0x5,
    /// Something changed since the last command (reset, capacity, mode parameters).
    UnitAttention = 0x6,
    /// The medium is write-protected.
    DataProtect = 0x7,
    /// The command was aborted by the device server.
    AbortedCommand = 0xB,
    /// A miscompare during VERIFY or COMPARE AND WRITE.
    Miscompare = 0xE,
}

impl SenseKey {
    /// The key for a 4-bit wire value; `None` for values this crate never produces.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v & 0x0F {
            0x0 => Self::NoSense,
            0x1 => Self::RecoveredError,
            0x2 => Self::NotReady,
            0x3 => Self::MediumError,
            0x4 => Self::HardwareError,
            0x5 => Self::IllegalRequest,
            0x6 => Self::UnitAttention,
            0x7 => Self::DataProtect,
            0xB => Self::AbortedCommand,
            0xE => Self::Miscompare,
            _ => return None,
        })
    }
}

/// Where an ILLEGAL REQUEST points (the sense-key-specific FIELD POINTER, SPC-4 4.5.2.4.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct FieldPointer {
    /// `true` for a byte of the CDB, `false` for a byte of the parameter list.
    pub in_cdb: bool,
    /// The byte in error.
    pub byte: u16,
    /// The most significant bit of the field in error, if it does not start a byte.
    pub bit: Option<u8>,
}

/// Length of fixed-format sense data as built here.
pub const FIXED_SENSE_LEN: usize = 18;

/// One piece of sense data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sense {
    /// Sense key.
    pub key: SenseKey,
    /// Additional sense code.
    pub asc: u8,
    /// Additional sense code qualifier.
    pub ascq: u8,
    /// The INFORMATION field (e.g. the first LBA in error). Fixed format carries 4 bytes: a
    /// value above `u32::MAX` is left out (VALID = 0), as SPC-4 requires.
    pub information: Option<u64>,
    /// The sense-key-specific field pointer (only for ILLEGAL REQUEST).
    pub field: Option<FieldPointer>,
    /// Deferred error (response code 0x71) instead of current (0x70).
    pub deferred: bool,
}

impl Sense {
    /// Sense data with a key and ASC/ASCQ and nothing else.
    pub const fn new(key: SenseKey, asc: u8, ascq: u8) -> Self {
        Sense {
            key,
            asc,
            ascq,
            information: None,
            field: None,
            deferred: false,
        }
    }

    /// NO SENSE, 0x00/0x00 (what REQUEST SENSE returns when nothing is pending).
    pub const fn no_sense() -> Self {
        Self::new(SenseKey::NoSense, 0x00, 0x00)
    }

    /// ILLEGAL REQUEST, INVALID COMMAND OPERATION CODE (0x20/0x00).
    pub const fn invalid_opcode() -> Self {
        Self::new(SenseKey::IllegalRequest, 0x20, 0x00)
    }

    /// ILLEGAL REQUEST, INVALID FIELD IN CDB (0x24/0x00) pointing at `byte` (and `bit`).
    pub const fn invalid_field_in_cdb(byte: u16, bit: Option<u8>) -> Self {
        let mut s = Self::new(SenseKey::IllegalRequest, 0x24, 0x00);
        s.field = Some(FieldPointer {
            in_cdb: true,
            byte,
            bit,
        });
        s
    }

    /// ILLEGAL REQUEST, INVALID FIELD IN PARAMETER LIST (0x26/0x00) pointing at `byte`.
    pub const fn invalid_field_in_param(byte: u16, bit: Option<u8>) -> Self {
        let mut s = Self::new(SenseKey::IllegalRequest, 0x26, 0x00);
        s.field = Some(FieldPointer {
            in_cdb: false,
            byte,
            bit,
        });
        s
    }

    /// ILLEGAL REQUEST, PARAMETER LIST LENGTH ERROR (0x1A/0x00).
    pub const fn param_list_length_error() -> Self {
        Self::new(SenseKey::IllegalRequest, 0x1A, 0x00)
    }

    /// ILLEGAL REQUEST, LOGICAL BLOCK ADDRESS OUT OF RANGE (0x21/0x00).
    pub const fn lba_out_of_range() -> Self {
        Self::new(SenseKey::IllegalRequest, 0x21, 0x00)
    }

    /// ILLEGAL REQUEST, LOGICAL UNIT NOT SUPPORTED (0x25/0x00).
    pub const fn lun_not_supported() -> Self {
        Self::new(SenseKey::IllegalRequest, 0x25, 0x00)
    }

    /// ILLEGAL REQUEST, SAVING PARAMETERS NOT SUPPORTED (0x39/0x00).
    pub const fn saving_params_not_supported() -> Self {
        Self::new(SenseKey::IllegalRequest, 0x39, 0x00)
    }

    /// ILLEGAL REQUEST, INVALID FIELD IN COMMAND INFORMATION UNIT (0x0E/0x03): the data
    /// length the transport declared does not match the CDB (what LIO answers for a WRITE
    /// whose buffer is shorter or longer than its transfer length).
    pub const fn invalid_field_in_command_iu() -> Self {
        Self::new(SenseKey::IllegalRequest, 0x0E, 0x03)
    }

    /// DATA PROTECT, WRITE PROTECTED (0x27/0x00).
    pub const fn write_protected() -> Self {
        Self::new(SenseKey::DataProtect, 0x27, 0x00)
    }

    /// NOT READY with ASC 0x04 (LOGICAL UNIT NOT READY) and the given qualifier.
    pub const fn not_ready(ascq: u8) -> Self {
        Self::new(SenseKey::NotReady, 0x04, ascq)
    }

    /// MEDIUM ERROR, UNRECOVERED READ ERROR (0x11/0x00) at `lba`.
    pub const fn read_error(lba: u64) -> Self {
        let mut s = Self::new(SenseKey::MediumError, 0x11, 0x00);
        s.information = Some(lba);
        s
    }

    /// MEDIUM ERROR, WRITE ERROR (0x0C/0x00) at `lba`.
    pub const fn write_error(lba: u64) -> Self {
        let mut s = Self::new(SenseKey::MediumError, 0x0C, 0x00);
        s.information = Some(lba);
        s
    }

    /// HARDWARE ERROR, INTERNAL TARGET FAILURE (0x44/0x00).
    pub const fn internal_target_failure() -> Self {
        Self::new(SenseKey::HardwareError, 0x44, 0x00)
    }

    /// ABORTED COMMAND, DATA PHASE ERROR (0x4B/0x00): a transfer to or from the initiator
    /// failed.
    pub const fn data_phase_error() -> Self {
        Self::new(SenseKey::AbortedCommand, 0x4B, 0x00)
    }

    /// UNIT ATTENTION, POWER ON, RESET, OR BUS DEVICE RESET OCCURRED (0x29/0x00).
    pub const fn reset_occurred() -> Self {
        Self::new(SenseKey::UnitAttention, 0x29, 0x00)
    }

    /// UNIT ATTENTION, CAPACITY DATA HAS CHANGED (0x2A/0x09).
    pub const fn capacity_changed() -> Self {
        Self::new(SenseKey::UnitAttention, 0x2A, 0x09)
    }

    /// UNIT ATTENTION, REPORTED LUNS DATA HAS CHANGED (0x3F/0x0E).
    pub const fn luns_changed() -> Self {
        Self::new(SenseKey::UnitAttention, 0x3F, 0x0E)
    }

    /// Fixed-format sense data (response code 0x70 or 0x71, 18 bytes).
    pub fn to_fixed(&self) -> [u8; FIXED_SENSE_LEN] {
        let mut b = [0u8; FIXED_SENSE_LEN];
        b[0] = if self.deferred { 0x71 } else { 0x70 };
        if let Some(info) = self.information {
            if let Ok(v) = u32::try_from(info) {
                b[0] |= 0x80;
                b[3..7].copy_from_slice(&v.to_be_bytes());
            }
        }
        b[2] = self.key as u8;
        b[7] = (FIXED_SENSE_LEN - 8) as u8;
        b[12] = self.asc;
        b[13] = self.ascq;
        if let Some(f) = self.field {
            b[15] = 0x80 | if f.in_cdb { 0x40 } else { 0 };
            if let Some(bit) = f.bit {
                b[15] |= 0x08 | (bit & 0x07);
            }
            b[16..18].copy_from_slice(&f.byte.to_be_bytes());
        }
        b
    }

    /// Descriptor-format sense data (0x72/0x73): the 8-byte header, plus an information
    /// descriptor when INFORMATION is set. Returns the bytes and the length used.
    pub fn to_descriptor(&self) -> ([u8; 20], usize) {
        let mut b = [0u8; 20];
        b[0] = if self.deferred { 0x73 } else { 0x72 };
        b[1] = self.key as u8;
        b[2] = self.asc;
        b[3] = self.ascq;
        let mut len = 8;
        if let Some(info) = self.information {
            b[8] = 0x00; // information descriptor
            b[9] = 0x0A;
            b[10] = 0x80; // VALID
            b[12..20].copy_from_slice(&info.to_be_bytes());
            len = 20;
        }
        b[7] = (len - 8) as u8;
        (b, len)
    }

    /// Parses fixed- or descriptor-format sense data (for tests and test initiators).
    pub fn parse(b: &[u8]) -> Option<Sense> {
        let code = b.first()? & 0x7F;
        match code {
            0x70 | 0x71 => {
                let key = SenseKey::from_u8(*b.get(2)?)?;
                let asc = *b.get(12)?;
                let ascq = *b.get(13)?;
                let information = if b[0] & 0x80 != 0 {
                    Some(u64::from(u32::from_be_bytes(b.get(3..7)?.try_into().ok()?)))
                } else {
                    None
                };
                let field = match b.get(15..18) {
                    Some(sk) if sk[0] & 0x80 != 0 => Some(FieldPointer {
                        in_cdb: sk[0] & 0x40 != 0,
                        byte: u16::from_be_bytes([sk[1], sk[2]]),
                        bit: (sk[0] & 0x08 != 0).then_some(sk[0] & 0x07),
                    }),
                    _ => None,
                };
                Some(Sense {
                    key,
                    asc,
                    ascq,
                    information,
                    field,
                    deferred: code == 0x71,
                })
            }
            0x72 | 0x73 => {
                let key = SenseKey::from_u8(*b.get(1)?)?;
                let mut s = Sense::new(key, *b.get(2)?, *b.get(3)?);
                s.deferred = code == 0x73;
                if b.get(8) == Some(&0x00) {
                    if let Some(v) = b.get(12..20) {
                        s.information = Some(u64::from_be_bytes(v.try_into().ok()?));
                    }
                }
                Some(s)
            }
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_opcode_fixed_bytes() {
        let b = Sense::invalid_opcode().to_fixed();
        assert_eq!(
            b,
            [
                0x70, 0, 0x05, 0, 0, 0, 0, 10, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0
            ]
        );
    }

    #[test]
    fn invalid_field_pointer() {
        let b = Sense::invalid_field_in_cdb(2, None).to_fixed();
        assert_eq!(&b[12..18], &[0x24, 0x00, 0, 0xC0, 0x00, 0x02]);
        let b = Sense::invalid_field_in_cdb(1, Some(1)).to_fixed();
        assert_eq!(&b[15..18], &[0xC9, 0x00, 0x01]);
        let b = Sense::invalid_field_in_param(8, None).to_fixed();
        assert_eq!(&b[15..18], &[0x80, 0x00, 0x08]);
    }

    #[test]
    fn information_field_valid_only_when_it_fits() {
        let b = Sense::read_error(0x1234_5678).to_fixed();
        assert_eq!(b[0], 0xF0);
        assert_eq!(&b[3..7], &[0x12, 0x34, 0x56, 0x78]);
        assert_eq!(b[2], 0x03);
        assert_eq!((b[12], b[13]), (0x11, 0x00));
        let b = Sense::write_error(1 << 40).to_fixed();
        assert_eq!(b[0], 0x70);
        assert_eq!(&b[3..7], &[0; 4]);
    }

    #[test]
    fn lba_out_of_range_and_lun_not_supported() {
        let b = Sense::lba_out_of_range().to_fixed();
        assert_eq!((b[2], b[12], b[13]), (0x05, 0x21, 0x00));
        let b = Sense::lun_not_supported().to_fixed();
        assert_eq!((b[2], b[12], b[13]), (0x05, 0x25, 0x00));
    }

    #[test]
    fn parse_round_trip() {
        for s in [
            Sense::invalid_field_in_cdb(4, Some(7)),
            Sense::read_error(77),
            Sense::reset_occurred(),
            Sense::invalid_field_in_param(2, None),
        ] {
            assert_eq!(Sense::parse(&s.to_fixed()), Some(s));
        }
        let mut s = Sense::read_error(1 << 40);
        let (d, n) = s.to_descriptor();
        assert_eq!(n, 20);
        assert_eq!(&d[..4], &[0x72, 0x03, 0x11, 0x00]);
        s.field = None;
        assert_eq!(Sense::parse(&d[..n]), Some(s));
        assert_eq!(Sense::parse(&[]), None);
        assert_eq!(Sense::parse(&[0x70, 0]), None);
    }
}
