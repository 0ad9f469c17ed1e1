//! SRP_CMD: task attribute, CDB (16 bytes plus additional CDB), and the DATA-OUT / DATA-IN
//! buffer descriptors: direct, indirect (with a possibly partial descriptor list) and
//! immediate data (SRP-2).

use super::{DecodeError, EncodeError, Tag, arr, be32, be64, expect_opcode, need, opcode, out_buf};

/// Fixed part of SRP_CMD (up to and including the 16-byte CDB).
pub const CMD_LEN: usize = 48;
/// Length of a direct data buffer descriptor.
pub const DIRECT_DESC_LEN: usize = 16;
/// Fixed part of an indirect data buffer descriptor (table descriptor + total length).
pub const INDIRECT_HDR_LEN: usize = 20;
/// Length of the immediate-data descriptor (`srp_imm_buf`).
pub const IMM_DESC_LEN: usize = 4;
/// The immediate-data offset ib_srp asks for: 48 + 16 (room for a 32-byte CDB) + 4.
pub const LINUX_IMM_DATA_OFFSET: u16 = 68;

/// Descriptor format codes (one nibble each in byte 5).
pub mod format {
    /// No data buffer.
    pub const NONE: u8 = 0;
    /// Direct data buffer descriptor.
    pub const DIRECT: u8 = 1;
    /// Indirect data buffer descriptor.
    pub const INDIRECT: u8 = 2;
    /// Immediate data (SRP-2, DATA-OUT only).
    pub const IMMEDIATE: u8 = 3;
}

/// TASK ATTRIBUTE (byte 29 bits 2:0).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskAttr {
    /// SIMPLE.
    Simple,
    /// HEAD OF QUEUE.
    HeadOfQueue,
    /// ORDERED (also what an unknown value is treated as, like ib_srpt).
    Ordered,
    /// ACA.
    Aca,
}

impl TaskAttr {
    /// From byte 29.
    pub fn from_wire(b: u8) -> Self {
        match b & 0x07 {
            0 => Self::Simple,
            1 => Self::HeadOfQueue,
            4 => Self::Aca,
            _ => Self::Ordered,
        }
    }

    /// The wire value.
    pub fn bits(self) -> u8 {
        match self {
            Self::Simple => 0,
            Self::HeadOfQueue => 1,
            Self::Ordered => 2,
            Self::Aca => 4,
        }
    }
}

/// A direct data buffer descriptor: a region of initiator memory.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DirectDesc {
    /// Virtual address.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length in bytes.
    pub len: u32,
}

impl DirectDesc {
    #[inline]
    fn decode(b: &[u8]) -> Self {
        DirectDesc {
            va: be64(b, 0),
            rkey: be32(b, 8),
            len: be32(b, 12),
        }
    }

    /// The 16-byte wire form.
    pub fn encode(&self) -> [u8; DIRECT_DESC_LEN] {
        let mut b = [0u8; DIRECT_DESC_LEN];
        b[..8].copy_from_slice(&self.va.to_be_bytes());
        b[8..12].copy_from_slice(&self.rkey.to_be_bytes());
        b[12..].copy_from_slice(&self.len.to_be_bytes());
        b
    }
}

/// An indirect data buffer descriptor. The IU carries the first `in_iu_count()` entries of
/// the descriptor table; the table descriptor points at the complete table in initiator
/// memory. When the IU does not hold the whole table ([`IndirectDesc::is_partial`]) the
/// target must RDMA READ the table before it can move data (ib_srp only does this with
/// `allow_ext_sg=1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndirectDesc<'a> {
    /// Where the complete descriptor table lives (`len` = 16 × entries).
    pub table: DirectDesc,
    /// TOTAL LENGTH: the sum of the data lengths.
    pub total_len: u32,
    /// The descriptors carried in the IU (16 bytes each).
    list: &'a [u8],
}

impl<'a> IndirectDesc<'a> {
    /// An indirect descriptor over wire-form descriptors (16 bytes each) as carried in the IU.
    pub fn new(table: DirectDesc, total_len: u32, list: &'a [u8]) -> Self {
        IndirectDesc {
            table,
            total_len,
            list,
        }
    }

    /// Number of entries in the complete table.
    pub fn table_count(&self) -> u32 {
        self.table.len / DIRECT_DESC_LEN as u32
    }

    /// Number of entries carried in the IU.
    pub fn in_iu_count(&self) -> u32 {
        (self.list.len() / DIRECT_DESC_LEN) as u32
    }

    /// `true` if part of the table must be fetched from initiator memory.
    pub fn is_partial(&self) -> bool {
        self.in_iu_count() < self.table_count()
    }

    /// The descriptors carried in the IU.
    pub fn descriptors(&self) -> impl Iterator<Item = DirectDesc> + 'a {
        self.list
            .chunks_exact(DIRECT_DESC_LEN)
            .map(DirectDesc::decode)
    }

    /// The raw 16-byte descriptors carried in the IU.
    pub fn raw(&self) -> &'a [u8] {
        self.list
    }

    /// Parses a descriptor table fetched from initiator memory (for partial lists).
    pub fn parse_table(table: &[u8]) -> impl Iterator<Item = DirectDesc> + '_ {
        table.chunks_exact(DIRECT_DESC_LEN).map(DirectDesc::decode)
    }
}

/// A DATA-OUT or DATA-IN buffer description.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DataDesc<'a> {
    /// No data in this direction.
    None,
    /// One region.
    Direct(DirectDesc),
    /// A list of regions.
    Indirect(IndirectDesc<'a>),
    /// Data carried in the IU itself, at the negotiated offset (DATA-OUT only).
    Immediate(&'a [u8]),
}

impl DataDesc<'_> {
    /// Bytes this buffer holds: direct length, indirect TOTAL LENGTH, or immediate length.
    pub fn len(&self) -> u32 {
        match self {
            Self::None => 0,
            Self::Direct(d) => d.len,
            Self::Indirect(i) => i.total_len,
            Self::Immediate(d) => d.len() as u32,
        }
    }

    /// `true` for [`DataDesc::None`].
    pub fn is_none(&self) -> bool {
        matches!(self, Self::None)
    }

    /// `true` if the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn format(&self) -> u8 {
        match self {
            Self::None => format::NONE,
            Self::Direct(_) => format::DIRECT,
            Self::Indirect(_) => format::INDIRECT,
            Self::Immediate(_) => format::IMMEDIATE,
        }
    }

    fn wire_len(&self) -> usize {
        match self {
            Self::None => 0,
            Self::Direct(_) => DIRECT_DESC_LEN,
            Self::Indirect(i) => INDIRECT_HDR_LEN + i.list.len(),
            Self::Immediate(_) => IMM_DESC_LEN,
        }
    }

    fn count(&self) -> u8 {
        match self {
            Self::Indirect(i) => i.in_iu_count().min(255) as u8,
            _ => 0,
        }
    }
}

/// Data direction of a command.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// No data.
    None,
    /// Target to initiator (DATA-IN).
    Read,
    /// Initiator to target (DATA-OUT).
    Write,
    /// Both (not supported by Linux targets).
    Bidirectional,
}

/// A decoded SRP_CMD, borrowing the receive buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SrpCmd<'a> {
    /// SOL_NOT byte (bit 1 SCSOLNT, bit 2 UCSOLNT).
    pub sol_not: u8,
    /// Tag, echoed in the SRP_RSP.
    pub tag: Tag,
    /// LUN (8-byte SAM form).
    pub lun: [u8; 8],
    /// Task attribute.
    pub task_attr: TaskAttr,
    /// The CDB: 16 bytes plus any additional CDB bytes.
    pub cdb: &'a [u8],
    /// DATA-OUT buffer.
    pub data_out: DataDesc<'a>,
    /// DATA-IN buffer.
    pub data_in: DataDesc<'a>,
}

impl<'a> SrpCmd<'a> {
    /// Decodes an SRP_CMD of `iu.len()` received bytes. `imm_data_offset` is the offset
    /// negotiated at login, or `None` if immediate data was not negotiated.
    ///
    /// Unlike ib_srpt, every descriptor must lie inside the received bytes, and the immediate
    /// data bounds are computed without overflow.
    ///
    /// Inlined (with the descriptors' decoding) into the data path's one caller: the decoded
    /// command is then built in place rather than returned and copied.
    #[inline(always)]
    pub fn decode(iu: &'a [u8], imm_data_offset: Option<u16>) -> Result<Self, DecodeError> {
        need(iu, CMD_LEN)?;
        expect_opcode(iu, opcode::CMD)?;
        let add_cdb = usize::from(iu[31] & !0x03);
        let cdb_end = CMD_LEN + add_cdb;
        need(iu, cdb_end)?;
        let cdb = iu.get(32..cdb_end).unwrap_or(&[]);
        let out_fmt = iu[5] >> 4;
        let in_fmt = iu[5] & 0x0F;
        let mut pos = cdb_end;
        let data_out = decode_desc(iu, &mut pos, out_fmt, iu[6], true, imm_data_offset)?;
        let data_in = decode_desc(iu, &mut pos, in_fmt, iu[7], false, imm_data_offset)?;
        Ok(SrpCmd {
            sol_not: iu[1],
            tag: Tag(arr(iu, 8)),
            lun: arr(iu, 20),
            task_attr: TaskAttr::from_wire(iu[29]),
            cdb,
            data_out,
            data_in,
        })
    }

    /// The data direction (from which descriptors are present).
    pub fn direction(&self) -> Direction {
        match (self.data_out.is_none(), self.data_in.is_none()) {
            (true, true) => Direction::None,
            (true, false) => Direction::Read,
            (false, true) => Direction::Write,
            (false, false) => Direction::Bidirectional,
        }
    }

    /// Encodes into `buf` (test initiators). Immediate data goes to `imm_data_offset`,
    /// which must leave room for the descriptors.
    pub fn encode(&self, buf: &mut [u8], imm_data_offset: u16) -> Result<usize, EncodeError> {
        if self.cdb.len() < 16
            || !(self.cdb.len() - 16).is_multiple_of(4)
            || self.cdb.len() - 16 > 252
        {
            return Err(EncodeError::Field("cdb length"));
        }
        if matches!(self.data_in, DataDesc::Immediate(_)) {
            return Err(EncodeError::Field("immediate data-in"));
        }
        let desc_start = 32 + self.cdb.len();
        let desc_end = desc_start + self.data_out.wire_len() + self.data_in.wire_len();
        let n = match self.data_out {
            DataDesc::Immediate(d) => {
                let off = usize::from(imm_data_offset);
                if off < desc_end {
                    return Err(EncodeError::Field("imm_data_offset"));
                }
                off + d.len()
            }
            _ => desc_end,
        };
        let b = out_buf(buf, n)?;
        b[0] = opcode::CMD;
        b[1] = self.sol_not;
        b[5] = self.data_out.format() << 4 | self.data_in.format();
        b[6] = self.data_out.count();
        b[7] = self.data_in.count();
        b[8..16].copy_from_slice(&self.tag.0);
        b[20..28].copy_from_slice(&self.lun);
        b[29] = self.task_attr.bits();
        b[31] = (self.cdb.len() - 16) as u8;
        b[32..desc_start].copy_from_slice(self.cdb);
        let mut pos = desc_start;
        for d in [&self.data_out, &self.data_in] {
            match d {
                DataDesc::None => {}
                DataDesc::Direct(x) => b[pos..pos + 16].copy_from_slice(&x.encode()),
                DataDesc::Indirect(i) => {
                    b[pos..pos + 16].copy_from_slice(&i.table.encode());
                    b[pos + 16..pos + 20].copy_from_slice(&i.total_len.to_be_bytes());
                    b[pos + 20..pos + 20 + i.list.len()].copy_from_slice(i.list);
                }
                DataDesc::Immediate(data) => {
                    b[pos..pos + 4].copy_from_slice(&(data.len() as u32).to_be_bytes());
                    let off = usize::from(imm_data_offset);
                    b[off..off + data.len()].copy_from_slice(data);
                }
            }
            pos += d.wire_len();
        }
        Ok(n)
    }
}

#[inline(always)]
fn decode_desc<'a>(
    iu: &'a [u8],
    pos: &mut usize,
    fmt: u8,
    count: u8,
    data_out: bool,
    imm_data_offset: Option<u16>,
) -> Result<DataDesc<'a>, DecodeError> {
    let start = *pos;
    match fmt {
        format::NONE => Ok(DataDesc::None),
        format::DIRECT => {
            let end = start + DIRECT_DESC_LEN;
            let d = iu.get(start..end).ok_or(DecodeError::Truncated {
                need: end,
                got: iu.len(),
            })?;
            *pos = end;
            Ok(DataDesc::Direct(DirectDesc::decode(d)))
        }
        format::INDIRECT => {
            let hdr_end = start + INDIRECT_HDR_LEN;
            let hdr = iu.get(start..hdr_end).ok_or(DecodeError::Truncated {
                need: hdr_end,
                got: iu.len(),
            })?;
            let table = DirectDesc::decode(hdr);
            let total_len = be32(hdr, 16);
            let end = hdr_end + usize::from(count) * DIRECT_DESC_LEN;
            let list = iu.get(hdr_end..end).ok_or(DecodeError::Truncated {
                need: end,
                got: iu.len(),
            })?;
            let ind = IndirectDesc {
                table,
                total_len,
                list,
            };
            if ind.in_iu_count() > ind.table_count() {
                return Err(DecodeError::IndirectCount {
                    in_iu: ind.in_iu_count(),
                    in_table: ind.table_count(),
                });
            }
            if !ind.is_partial() {
                let sum: u64 = ind.descriptors().map(|d| u64::from(d.len)).sum();
                if sum != u64::from(total_len) {
                    return Err(DecodeError::IndirectLength {
                        total: total_len,
                        sum,
                    });
                }
            }
            *pos = end;
            Ok(DataDesc::Indirect(ind))
        }
        format::IMMEDIATE if data_out => {
            let offset = imm_data_offset.ok_or(DecodeError::ImmediateNotNegotiated)?;
            let end = start + IMM_DESC_LEN;
            let d = iu.get(start..end).ok_or(DecodeError::Truncated {
                need: end,
                got: iu.len(),
            })?;
            let len = be32(d, 0);
            *pos = end;
            let off = usize::from(offset);
            // 64-bit arithmetic: len = 0xFFFFFFFF must not wrap past the bound (reference
            // §6.1).
            let data_end = offset as u64 + u64::from(len);
            let oob = DecodeError::ImmediateOutOfBounds {
                offset,
                len,
                iu_len: iu.len(),
            };
            if off < end || data_end > iu.len() as u64 {
                return Err(oob);
            }
            let data = iu.get(off..data_end as usize).ok_or(oob)?;
            Ok(DataDesc::Immediate(data))
        }
        f => Err(DecodeError::DescriptorFormat(f)),
    }
}
