//! SGL1 decoding: where a command's data lives and how long it is.
//!
//! Fabrics commands always describe their data with SGLs. What the Linux host sends (reference
//! §1.3): keyed data blocks `0x40`/`0x4F` (RDMA), in-capsule data blocks `0x01` (offset from the
//! start of the capsule's data area) and, over TCP, transport data blocks `0x5A`. SPDK hosts may
//! also send a Last Segment descriptor with the offset subtype (`0x31`) pointing at up to MSDBD
//! keyed descriptors inside the capsule.
//!
//! [`parse`] turns SGL1 into a [`DataSgl`] or the NVMe status for the malformed case.

use arrayvec::ArrayVec;

use super::spec::{Status, le};
use super::sqe::{Direction, Sqe};

/// Most keyed descriptors accepted in an in-capsule Last Segment list.
pub const MAX_SGL_DESCRIPTORS: usize = 16;
/// Size of one SGL descriptor.
pub const SGL_DESCRIPTOR_SIZE: usize = 16;
/// Largest length a keyed descriptor can carry (24 bits).
pub const KEYED_MAX_LEN: u32 = 0x00FF_FFFF;

/// SGL descriptor types (SGL identifier bits 7:4).
pub mod sgl_type {
    /// Data Block.
    pub const DATA_BLOCK: u8 = 0x0;
    /// Bit Bucket.
    pub const BIT_BUCKET: u8 = 0x1;
    /// Segment.
    pub const SEGMENT: u8 = 0x2;
    /// Last Segment.
    pub const LAST_SEGMENT: u8 = 0x3;
    /// Keyed Data Block.
    pub const KEYED_DATA_BLOCK: u8 = 0x4;
    /// Transport Data Block.
    pub const TRANSPORT_DATA_BLOCK: u8 = 0x5;
}

/// SGL descriptor subtypes (SGL identifier bits 3:0).
pub mod sgl_subtype {
    /// The address field is an address.
    pub const ADDRESS: u8 = 0x0;
    /// The address field is an offset into the capsule's data area.
    pub const OFFSET: u8 = 0x1;
    /// Transport specific (NVMe/TCP).
    pub const TRANSPORT: u8 = 0xA;
    /// Keyed: the host asks the controller to invalidate the key with the response.
    pub const INVALIDATE_KEY: u8 = 0xF;
}

/// A raw 16-byte SGL descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct SglDescriptor(pub [u8; SGL_DESCRIPTOR_SIZE]);

impl SglDescriptor {
    /// SGL identifier (byte 15).
    pub fn id(&self) -> u8 {
        self.0[15]
    }
    /// Descriptor type (identifier bits 7:4).
    pub fn sgl_type(&self) -> u8 {
        self.0[15] >> 4
    }
    /// Descriptor subtype (identifier bits 3:0).
    pub fn subtype(&self) -> u8 {
        self.0[15] & 0xF
    }
    /// Address or offset (bytes 0-7).
    pub fn address(&self) -> u64 {
        le::u64_at(&self.0, 0)
    }
    /// Length of an unkeyed descriptor (bytes 8-11).
    pub fn length(&self) -> u32 {
        le::u32_at(&self.0, 8)
    }
    /// Length of a keyed descriptor (bytes 8-10, 24 bits).
    pub fn keyed_length(&self) -> u32 {
        u32::from_le_bytes([self.0[8], self.0[9], self.0[10], 0])
    }
    /// Key of a keyed descriptor (bytes 11-14).
    pub fn key(&self) -> u32 {
        le::u32_at(&self.0, 11)
    }

    /// The null descriptor Linux sends for commands without data (`0x40`, all zero).
    pub fn null_keyed() -> SglDescriptor {
        SglDescriptor::keyed(0, 0, 0, false)
    }

    /// A keyed data block (`0x40`, or `0x4F` with `invalidate`). `len` is truncated to 24 bits.
    pub fn keyed(addr: u64, len: u32, key: u32, invalidate: bool) -> SglDescriptor {
        let mut d = [0u8; 16];
        le::put_u64(&mut d, 0, addr);
        d[8..11].copy_from_slice(&len.to_le_bytes()[..3]);
        le::put_u32(&mut d, 11, key);
        d[15] = sgl_type::KEYED_DATA_BLOCK << 4
            | if invalidate {
                sgl_subtype::INVALIDATE_KEY
            } else {
                sgl_subtype::ADDRESS
            };
        SglDescriptor(d)
    }

    /// An in-capsule data block (`0x01`) at `offset` into the capsule data area.
    pub fn in_capsule(offset: u64, len: u32) -> SglDescriptor {
        SglDescriptor::unkeyed(sgl_type::DATA_BLOCK, sgl_subtype::OFFSET, offset, len)
    }

    /// A Last Segment descriptor (`0x31`) locating a list of `len / 16` descriptors in the capsule.
    pub fn last_segment_in_capsule(offset: u64, len: u32) -> SglDescriptor {
        SglDescriptor::unkeyed(sgl_type::LAST_SEGMENT, sgl_subtype::OFFSET, offset, len)
    }

    /// An NVMe/TCP transport data block (`0x5A`).
    pub fn transport(len: u32) -> SglDescriptor {
        SglDescriptor::unkeyed(
            sgl_type::TRANSPORT_DATA_BLOCK,
            sgl_subtype::TRANSPORT,
            0,
            len,
        )
    }

    /// Any unkeyed descriptor.
    pub fn unkeyed(ty: u8, subtype: u8, addr: u64, len: u32) -> SglDescriptor {
        let mut d = [0u8; 16];
        le::put_u64(&mut d, 0, addr);
        le::put_u32(&mut d, 8, len);
        d[15] = (ty << 4) | (subtype & 0xF);
        SglDescriptor(d)
    }
}

/// A keyed data block: host memory reachable by RDMA READ/WRITE.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyedSgl {
    /// Remote address (host iova).
    pub addr: u64,
    /// Length in bytes (at most 2^24 - 1).
    pub len: u32,
    /// Remote key.
    pub key: u32,
    /// Subtype 0xF: the host asked for remote invalidation of `key`.
    pub invalidate: bool,
}

/// Where a command's data is, after validation.
///
/// The keyed list is held inline (at most 16 descriptors, ~400 bytes) so that parsing never
/// allocates; transports keep one per request in preallocated request slots.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DataSgl {
    /// No data (length 0).
    None,
    /// One keyed data block.
    Keyed(KeyedSgl),
    /// In-capsule data: `in_capsule[offset..offset + len]`, already checked to be present.
    InCapsule {
        /// Offset into the capsule's data area (after the 64-byte SQE).
        offset: u32,
        /// Length in bytes.
        len: u32,
    },
    /// Several keyed data blocks, from an in-capsule Last Segment list (in order).
    KeyedList(ArrayVec<KeyedSgl, MAX_SGL_DESCRIPTORS>),
    /// NVMe/TCP transport data block: data moves by R2T/H2CData or C2HData.
    Transport {
        /// Length in bytes.
        len: u32,
    },
}

impl DataSgl {
    /// Total data length in bytes.
    #[inline]
    pub fn len(&self) -> u32 {
        match self {
            DataSgl::None => 0,
            DataSgl::Keyed(k) => k.len,
            DataSgl::InCapsule { len, .. } | DataSgl::Transport { len } => *len,
            // The sum was checked against `max_len` (a u32) during parsing.
            DataSgl::KeyedList(l) => l.iter().fold(0u32, |a, k| a.saturating_add(k.len)),
        }
    }

    /// True when there is no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The rkey to invalidate with the response (SEND_WITH_INVALIDATE), if the host asked for it.
    ///
    /// Only a single keyed descriptor with subtype 0xF and a non-zero length qualifies: the host
    /// checks that the invalidated key is the one of this request's memory region.
    #[inline]
    pub fn invalidate_key(&self) -> Option<u32> {
        match self {
            DataSgl::Keyed(k) if k.invalidate && k.len > 0 => Some(k.key),
            _ => None,
        }
    }
}

/// What a queue accepts, from the transport and the controller configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SglPolicy {
    /// Keyed data blocks are accepted (RDMA).
    pub keyed: bool,
    /// Transport data blocks are accepted (TCP).
    pub transport_data_block: bool,
    /// Bytes of in-capsule data this queue can receive after the SQE (IOCCSZ·16 − 64 on I/O
    /// queues; what the RECV buffers hold on the admin queue). 0 disables in-capsule data.
    pub in_capsule_capacity: u32,
    /// Maximum SGL descriptors per command (MSDBD, at least 1).
    pub msdbd: u8,
    /// Largest total data length accepted (the transfer limit MDTS advertises); longer SGLs
    /// get Invalid Field in Command, the status the base specification gives a transfer above
    /// MDTS.
    pub max_len: u32,
}

impl SglPolicy {
    /// An RDMA queue policy.
    pub fn rdma(in_capsule_capacity: u32, msdbd: u8, max_len: u32) -> SglPolicy {
        SglPolicy {
            keyed: true,
            transport_data_block: false,
            in_capsule_capacity,
            msdbd,
            max_len,
        }
    }
}

/// The status of a transfer above `max_len` (MDTS): Invalid Field in Command.
const TOO_LONG: Status = Status::INVALID_FIELD;

/// Decodes SGL1 of `sqe`.
///
/// `in_capsule` is whatever followed the 64-byte SQE in the received capsule (empty if nothing).
/// Errors, all with DNR:
/// - PSDT = 11b (reserved): Invalid Field;
/// - unknown or unsupported descriptor type: SGL Descriptor Type Invalid (0x11);
/// - unsupported subtype of a known type: Invalid Field (0x02), as nvmet;
/// - in-capsule data on a command that does not transfer host→controller: Invalid Field;
/// - in-capsule offset beyond the capsule capacity: SGL Offset Invalid (0x16);
/// - in-capsule data running past the capacity or past the bytes received: Data SGL Length
///   Invalid (0x0F);
/// - a total length above `max_len` (a transfer above MDTS): Invalid Field (0x02) — SPDK
///   answers Data SGL Length Invalid, the specification Invalid Field;
/// - Last Segment list not a non-zero multiple of 16 bytes: Invalid SGL Segment Descriptor (0x0D);
///   more entries than MSDBD: Invalid Number of SGL Descriptors (0x0E); list outside the
///   received capsule: SGL Offset Invalid; non-keyed entries: SGL Descriptor Type Invalid.
pub fn parse(sqe: &Sqe, in_capsule: &[u8], policy: &SglPolicy) -> Result<DataSgl, Status> {
    let mut out = DataSgl::None;
    parse_into(sqe, in_capsule, policy, &mut out)?;
    Ok(out)
}

/// [`parse`] into `out` (left as it was on error): a transport parses into its preallocated
/// request without moving the (large) list variant around per command. Inlined: one keyed
/// data block (every RDMA read or write without in-capsule data) is decoded here, the other
/// descriptors by a call.
#[inline]
pub fn parse_into(
    sqe: &Sqe,
    in_capsule: &[u8],
    policy: &SglPolicy,
    out: &mut DataSgl,
) -> Result<(), Status> {
    tracing::trace!(target: crate::hex::WIRE_TARGET, kind = "nvme_capsule",
                    sqe = %crate::hex::Hex(&sqe.0), data = %crate::hex::Hex(in_capsule));
    let d = sqe.sgl1();
    if sqe.psdt() != 3 && d.sgl_type() == sgl_type::KEYED_DATA_BLOCK && policy.keyed {
        // What the match below does for it.
        let k = keyed(&d, d.subtype())?;
        if k.len > policy.max_len {
            return Err(TOO_LONG);
        }
        *out = if k.len == 0 {
            DataSgl::None
        } else {
            DataSgl::Keyed(k)
        };
        return Ok(());
    }
    parse_other(sqe, in_capsule, policy, out)
}

/// [`parse_into`] for every descriptor but an allowed keyed data block.
fn parse_other(
    sqe: &Sqe,
    in_capsule: &[u8],
    policy: &SglPolicy,
    out: &mut DataSgl,
) -> Result<(), Status> {
    if sqe.psdt() == 3 {
        return Err(Status::INVALID_FIELD);
    }
    let d = sqe.sgl1();
    match (d.sgl_type(), d.subtype()) {
        (sgl_type::KEYED_DATA_BLOCK, st) => {
            if !policy.keyed {
                return Err(Status::SGL_TYPE_INVALID);
            }
            let k = keyed(&d, st)?;
            if k.len > policy.max_len {
                return Err(TOO_LONG);
            }
            *out = if k.len == 0 {
                DataSgl::None
            } else {
                DataSgl::Keyed(k)
            };
            Ok(())
        }
        (sgl_type::DATA_BLOCK, sgl_subtype::OFFSET) => {
            let len = d.length();
            if len == 0 {
                *out = DataSgl::None;
                return Ok(());
            }
            if sqe.direction() != Direction::HostToController {
                return Err(Status::INVALID_FIELD);
            }
            let (offset, end) = in_capsule_range(&d, policy, in_capsule.len())?;
            if end - offset > u64::from(policy.max_len) {
                return Err(TOO_LONG);
            }
            *out = DataSgl::InCapsule {
                // Both fit in u32: end <= in_capsule_capacity.
                offset: offset as u32,
                len,
            };
            Ok(())
        }
        (sgl_type::DATA_BLOCK, _) => Err(Status::INVALID_FIELD),
        (sgl_type::LAST_SEGMENT, sgl_subtype::OFFSET) => {
            if !policy.keyed {
                return Err(Status::SGL_TYPE_INVALID);
            }
            *out = keyed_list(&d, in_capsule, policy)?;
            Ok(())
        }
        (sgl_type::LAST_SEGMENT, _) => Err(Status::INVALID_FIELD),
        (sgl_type::TRANSPORT_DATA_BLOCK, st) => {
            if !policy.transport_data_block {
                return Err(Status::SGL_TYPE_INVALID);
            }
            if st != sgl_subtype::TRANSPORT {
                return Err(Status::INVALID_FIELD);
            }
            let len = d.length();
            if len > policy.max_len {
                return Err(TOO_LONG);
            }
            *out = if len == 0 {
                DataSgl::None
            } else {
                DataSgl::Transport { len }
            };
            Ok(())
        }
        _ => Err(Status::SGL_TYPE_INVALID),
    }
}

#[inline]
fn keyed(d: &SglDescriptor, subtype: u8) -> Result<KeyedSgl, Status> {
    let invalidate = match subtype {
        sgl_subtype::ADDRESS => false,
        sgl_subtype::INVALIDATE_KEY => true,
        _ => return Err(Status::INVALID_FIELD),
    };
    Ok(KeyedSgl {
        addr: d.address(),
        len: d.keyed_length(),
        key: d.key(),
        invalidate,
    })
}

/// Checks an offset-subtype descriptor against the capsule; returns `(offset, end)`.
fn in_capsule_range(
    d: &SglDescriptor,
    policy: &SglPolicy,
    received: usize,
) -> Result<(u64, u64), Status> {
    let offset = d.address();
    let cap = u64::from(policy.in_capsule_capacity);
    if offset > cap {
        return Err(Status::SGL_OFFSET_INVALID);
    }
    let end = offset + u64::from(d.length()); // offset <= u32::MAX, no overflow
    if end > cap || end > received as u64 {
        return Err(Status::DATA_SGL_LENGTH_INVALID);
    }
    Ok((offset, end))
}

fn keyed_list(d: &SglDescriptor, in_capsule: &[u8], policy: &SglPolicy) -> Result<DataSgl, Status> {
    let list_len = d.length() as usize;
    if list_len == 0 || !list_len.is_multiple_of(SGL_DESCRIPTOR_SIZE) {
        return Err(Status::INVALID_SGL_SEGMENT);
    }
    let count = list_len / SGL_DESCRIPTOR_SIZE;
    if count > usize::from(policy.msdbd.max(1)) || count > MAX_SGL_DESCRIPTORS {
        return Err(Status::INVALID_SGL_COUNT);
    }
    let offset = d.address();
    let end = offset.checked_add(list_len as u64);
    let list = match end {
        Some(end) if end <= u64::from(policy.in_capsule_capacity) => in_capsule
            .get(offset as usize..end as usize)
            .ok_or(Status::SGL_OFFSET_INVALID)?,
        _ => return Err(Status::SGL_OFFSET_INVALID),
    };
    let mut out = ArrayVec::new();
    let mut total: u64 = 0;
    for chunk in list.chunks_exact(SGL_DESCRIPTOR_SIZE) {
        let mut raw = [0u8; SGL_DESCRIPTOR_SIZE];
        raw.copy_from_slice(chunk);
        let e = SglDescriptor(raw);
        if e.sgl_type() != sgl_type::KEYED_DATA_BLOCK {
            return Err(Status::SGL_TYPE_INVALID);
        }
        let k = keyed(&e, e.subtype())?;
        total += u64::from(k.len);
        if k.len > 0 {
            // Capacity is MAX_SGL_DESCRIPTORS and count was checked above.
            let _ = out.try_push(k);
        }
    }
    if total > u64::from(policy.max_len) {
        return Err(TOO_LONG);
    }
    Ok(match out.len() {
        0 => DataSgl::None,
        1 => DataSgl::Keyed(out[0]),
        _ => DataSgl::KeyedList(out),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::spec::io_opc;

    const MIB: u32 = 1 << 20;

    fn policy() -> SglPolicy {
        SglPolicy::rdma(4096, 16, MIB)
    }

    fn cmd(opc: u8, d: SglDescriptor) -> Sqe {
        let mut s = Sqe::new(opc, 1);
        s.set_sgl1(d);
        s
    }

    #[test]
    fn descriptor_encodings() {
        assert_eq!(SglDescriptor::null_keyed().id(), 0x40);
        assert_eq!(SglDescriptor::keyed(1, 2, 3, true).id(), 0x4F);
        assert_eq!(SglDescriptor::in_capsule(0, 8).id(), 0x01);
        assert_eq!(SglDescriptor::last_segment_in_capsule(0, 32).id(), 0x31);
        assert_eq!(SglDescriptor::transport(8).id(), 0x5A);
        let k = SglDescriptor::keyed(0x1122_3344_5566_7788, 0x00AB_CDEF, 0xCAFE_F00D, true);
        assert_eq!(
            k.0,
            [
                0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11, 0xEF, 0xCD, 0xAB, 0x0D, 0xF0, 0xFE,
                0xCA, 0x4F
            ]
        );
        assert_eq!(k.keyed_length(), 0x00AB_CDEF);
        assert_eq!(k.key(), 0xCAFE_F00D);
    }

    #[test]
    fn keyed_and_invalidate() {
        let s = cmd(io_opc::READ, SglDescriptor::keyed(0x1000, 4096, 0x77, true));
        let d = parse(&s, &[], &policy()).unwrap();
        assert_eq!(
            d,
            DataSgl::Keyed(KeyedSgl {
                addr: 0x1000,
                len: 4096,
                key: 0x77,
                invalidate: true
            })
        );
        assert_eq!(d.len(), 4096);
        assert_eq!(d.invalidate_key(), Some(0x77));
        let s = cmd(
            io_opc::READ,
            SglDescriptor::keyed(0x1000, 4096, 0x77, false),
        );
        assert_eq!(parse(&s, &[], &policy()).unwrap().invalidate_key(), None);
    }

    #[test]
    fn null_descriptor_is_no_data() {
        let s = cmd(io_opc::FLUSH, SglDescriptor::null_keyed());
        assert_eq!(parse(&s, &[], &policy()), Ok(DataSgl::None));
        // 0x4F with length 0: still no data and nothing to invalidate.
        let s = cmd(io_opc::FLUSH, SglDescriptor::keyed(0, 0, 5, true));
        let d = parse(&s, &[], &policy()).unwrap();
        assert!(d.is_empty());
        assert_eq!(d.invalidate_key(), None);
    }

    #[test]
    fn keyed_rejections() {
        let mut d = SglDescriptor::keyed(0, 512, 1, false);
        d.0[15] = 0x45;
        assert_eq!(
            parse(&cmd(io_opc::READ, d), &[], &policy()),
            Err(Status::INVALID_FIELD)
        );
        // Above MDTS: Invalid Field.
        let s = cmd(io_opc::READ, SglDescriptor::keyed(0, MIB + 512, 1, false));
        assert_eq!(parse(&s, &[], &policy()), Err(Status::INVALID_FIELD));
        let mut tcp = policy();
        tcp.keyed = false;
        tcp.transport_data_block = true;
        let s = cmd(io_opc::READ, SglDescriptor::keyed(0, 512, 1, false));
        assert_eq!(parse(&s, &[], &tcp), Err(Status::SGL_TYPE_INVALID));
    }

    #[test]
    fn in_capsule_accepted_and_bounded() {
        let data = [0u8; 4096];
        let s = cmd(io_opc::WRITE, SglDescriptor::in_capsule(0, 4096));
        assert_eq!(
            parse(&s, &data, &policy()),
            Ok(DataSgl::InCapsule {
                offset: 0,
                len: 4096
            })
        );
        let s = cmd(io_opc::WRITE, SglDescriptor::in_capsule(512, 512));
        assert_eq!(
            parse(&s, &data[..1024], &policy()),
            Ok(DataSgl::InCapsule {
                offset: 512,
                len: 512
            })
        );
        // Offset past the capacity.
        let s = cmd(io_opc::WRITE, SglDescriptor::in_capsule(4097, 1));
        assert_eq!(parse(&s, &data, &policy()), Err(Status::SGL_OFFSET_INVALID));
        let s = cmd(io_opc::WRITE, SglDescriptor::in_capsule(u64::MAX, 1));
        assert_eq!(parse(&s, &data, &policy()), Err(Status::SGL_OFFSET_INVALID));
        // Length past the capacity.
        let s = cmd(io_opc::WRITE, SglDescriptor::in_capsule(4000, 512));
        assert_eq!(
            parse(&s, &data, &policy()),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        // Host described more than it sent.
        let s = cmd(io_opc::WRITE, SglDescriptor::in_capsule(0, 4096));
        assert_eq!(
            parse(&s, &data[..100], &policy()),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        // No in-capsule capacity (e.g. RDMA admin queue with 64-byte buffers).
        let mut p = policy();
        p.in_capsule_capacity = 0;
        let s = cmd(io_opc::WRITE, SglDescriptor::in_capsule(0, 16));
        assert_eq!(parse(&s, &data, &p), Err(Status::DATA_SGL_LENGTH_INVALID));
        // Read direction with in-capsule data.
        let s = cmd(io_opc::READ, SglDescriptor::in_capsule(0, 512));
        assert_eq!(parse(&s, &data, &policy()), Err(Status::INVALID_FIELD));
        // Zero length in-capsule is simply no data.
        let s = cmd(io_opc::FLUSH, SglDescriptor::in_capsule(0, 0));
        assert_eq!(parse(&s, &[], &policy()), Ok(DataSgl::None));
    }

    #[test]
    fn data_block_address_subtype_rejected() {
        let s = cmd(
            io_opc::WRITE,
            SglDescriptor::unkeyed(sgl_type::DATA_BLOCK, sgl_subtype::ADDRESS, 0x1000, 512),
        );
        assert_eq!(parse(&s, &[], &policy()), Err(Status::INVALID_FIELD));
    }

    #[test]
    fn unsupported_types() {
        for ty in [
            sgl_type::BIT_BUCKET,
            sgl_type::SEGMENT,
            0x6,
            0x7,
            0x8,
            0xE,
            0xF,
        ] {
            let s = cmd(io_opc::WRITE, SglDescriptor::unkeyed(ty, 0, 0, 16));
            assert_eq!(
                parse(&s, &[0; 64], &policy()),
                Err(Status::SGL_TYPE_INVALID),
                "{ty:#x}"
            );
        }
        let s = cmd(io_opc::WRITE, SglDescriptor::transport(16));
        assert_eq!(parse(&s, &[], &policy()), Err(Status::SGL_TYPE_INVALID));
    }

    #[test]
    fn reserved_psdt_rejected() {
        let mut s = cmd(io_opc::READ, SglDescriptor::keyed(0, 512, 1, false));
        s.set_flags(0xC0);
        assert_eq!(parse(&s, &[], &policy()), Err(Status::INVALID_FIELD));
        s.set_flags(0x00); // PRP: tolerated
        assert!(parse(&s, &[], &policy()).is_ok());
    }

    #[test]
    fn transport_data_block() {
        let mut tcp = policy();
        tcp.keyed = false;
        tcp.transport_data_block = true;
        let s = cmd(io_opc::READ, SglDescriptor::transport(8192));
        assert_eq!(parse(&s, &[], &tcp), Ok(DataSgl::Transport { len: 8192 }));
        let s = cmd(io_opc::FLUSH, SglDescriptor::transport(0));
        assert_eq!(parse(&s, &[], &tcp), Ok(DataSgl::None));
        let s = cmd(
            io_opc::READ,
            SglDescriptor::unkeyed(sgl_type::TRANSPORT_DATA_BLOCK, 0, 0, 8),
        );
        assert_eq!(parse(&s, &[], &tcp), Err(Status::INVALID_FIELD));
    }

    fn list(descs: &[SglDescriptor]) -> Vec<u8> {
        descs.iter().flat_map(|d| d.0).collect()
    }

    #[test]
    fn keyed_list_in_capsule() {
        let l = list(&[
            SglDescriptor::keyed(0x1000, 4096, 1, false),
            SglDescriptor::keyed(0x9000, 512, 2, true),
        ]);
        let s = cmd(
            io_opc::READ,
            SglDescriptor::last_segment_in_capsule(0, l.len() as u32),
        );
        let d = parse(&s, &l, &policy()).unwrap();
        match &d {
            DataSgl::KeyedList(v) => {
                assert_eq!(v.len(), 2);
                assert_eq!(v[1].key, 2);
                assert!(v[1].invalidate);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(d.len(), 4608);
        assert_eq!(d.invalidate_key(), None);

        // A single entry collapses to Keyed.
        let l1 = list(&[SglDescriptor::keyed(0x1000, 4096, 1, false)]);
        let s = cmd(io_opc::READ, SglDescriptor::last_segment_in_capsule(0, 16));
        assert!(matches!(parse(&s, &l1, &policy()), Ok(DataSgl::Keyed(_))));
    }

    #[test]
    fn keyed_list_rejections() {
        let l = list(&[SglDescriptor::keyed(0x1000, 4096, 1, false); 17]);
        // Too many entries for MSDBD.
        let mut p = policy();
        p.msdbd = 2;
        let s = cmd(io_opc::READ, SglDescriptor::last_segment_in_capsule(0, 48));
        assert_eq!(parse(&s, &l, &p), Err(Status::INVALID_SGL_COUNT));
        let s = cmd(
            io_opc::READ,
            SglDescriptor::last_segment_in_capsule(0, 17 * 16),
        );
        assert_eq!(parse(&s, &l, &policy()), Err(Status::INVALID_SGL_COUNT));
        // Not a multiple of 16, or empty.
        let s = cmd(io_opc::READ, SglDescriptor::last_segment_in_capsule(0, 20));
        assert_eq!(parse(&s, &l, &policy()), Err(Status::INVALID_SGL_SEGMENT));
        let s = cmd(io_opc::READ, SglDescriptor::last_segment_in_capsule(0, 0));
        assert_eq!(parse(&s, &l, &policy()), Err(Status::INVALID_SGL_SEGMENT));
        // List outside what was received.
        let s = cmd(io_opc::READ, SglDescriptor::last_segment_in_capsule(16, 32));
        assert_eq!(
            parse(&s, &l[..32], &policy()),
            Err(Status::SGL_OFFSET_INVALID)
        );
        let s = cmd(
            io_opc::READ,
            SglDescriptor::last_segment_in_capsule(u64::MAX - 8, 32),
        );
        assert_eq!(parse(&s, &l, &policy()), Err(Status::SGL_OFFSET_INVALID));
        // Non-keyed entry.
        let bad = list(&[
            SglDescriptor::keyed(0x1000, 4096, 1, false),
            SglDescriptor::in_capsule(0, 4),
        ]);
        let s = cmd(io_opc::READ, SglDescriptor::last_segment_in_capsule(0, 32));
        assert_eq!(parse(&s, &bad, &policy()), Err(Status::SGL_TYPE_INVALID));
        // Total above MDTS.
        let big = list(&[SglDescriptor::keyed(0, KEYED_MAX_LEN, 1, false); 2]);
        let s = cmd(io_opc::READ, SglDescriptor::last_segment_in_capsule(0, 32));
        assert_eq!(parse(&s, &big, &policy()), Err(Status::INVALID_FIELD));
        // Wrong subtype of Last Segment.
        let s = cmd(
            io_opc::READ,
            SglDescriptor::unkeyed(sgl_type::LAST_SEGMENT, 0, 0, 16),
        );
        assert_eq!(parse(&s, &l, &policy()), Err(Status::INVALID_FIELD));
    }
}
