//! I/O command decoding and validation (the data path: no heap, no locks).
//!
//! [`decode`] turns an I/O-queue SQE into an [`IoCmd`] for the exec layer to run on the bdev,
//! or the NVMe status to complete it with. Checks follow reference §5.4, in this order:
//!
//! 1. opcode known (and supported by the namespace): Invalid Opcode;
//! 2. namespace active: Invalid Namespace or Format;
//! 3. SGL1 valid (the caller's [`super::sgl::parse`] result);
//! 4. transfer size ≤ MDTS (Invalid Field), SGL length = NLB × block size (Data SGL Length
//!    Invalid);
//! 5. LBA range inside the namespace: LBA Out of Range;
//! 6. namespace ready (Namespace Not Ready, retryable) and writable (Namespace is Write
//!    Protected).

use super::spec::{Status, fctype, io_opc, le};
use super::sqe::Sqe;
use super::view::NamespaceView;

/// A validated I/O command.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoCmd {
    /// Read `blocks` blocks at `slba` and send them to the host.
    Read {
        /// Starting LBA.
        slba: u64,
        /// Number of blocks (1-based).
        blocks: u32,
        /// Force Unit Access (read from non-volatile media; usually a no-op).
        fua: bool,
    },
    /// Write the host's data to `blocks` blocks at `slba`.
    Write {
        /// Starting LBA.
        slba: u64,
        /// Number of blocks (1-based).
        blocks: u32,
        /// Force Unit Access: durable before completion.
        fua: bool,
    },
    /// Read `blocks` blocks at `slba` and compare with the host's data; on mismatch complete with
    /// [`Status::COMPARE_FAILURE`].
    Compare {
        /// Starting LBA.
        slba: u64,
        /// Number of blocks (1-based).
        blocks: u32,
    },
    /// Write zeroes to `blocks` blocks at `slba` (no data transfer).
    WriteZeroes {
        /// Starting LBA.
        slba: u64,
        /// Number of blocks (1-based).
        blocks: u32,
        /// Force Unit Access.
        fua: bool,
        /// The host allows deallocating instead (DEAC).
        deallocate: bool,
    },
    /// Make every completed write durable.
    Flush,
    /// Dataset Management with the Deallocate attribute: fetch the range buffer, then parse it
    /// with [`dsm_ranges`] and deallocate each range.
    Deallocate {
        /// Number of ranges (1..=256).
        ranges: u16,
    },
    /// Nothing to do; complete with success (Dataset Management hints without deallocation, or
    /// deallocation on a namespace that cannot unmap: deallocation is advisory).
    Nop,
    /// Fabrics Disconnect: complete with success, then delete this I/O queue.
    Disconnect,
}

impl IoCmd {
    /// Bytes the command moves between host and controller (0 for no-data commands; for
    /// Deallocate, the range entries that will be parsed).
    pub fn data_len(&self, block_size: u32) -> u64 {
        match *self {
            IoCmd::Read { blocks, .. }
            | IoCmd::Write { blocks, .. }
            | IoCmd::Compare { blocks, .. } => u64::from(blocks) * u64::from(block_size),
            IoCmd::Deallocate { ranges } => u64::from(ranges) * 16,
            _ => 0,
        }
    }
}

/// Decodes an I/O-queue command.
///
/// `ns` is the active namespace named by `sqe.nsid()` (`None` if there is none, including NSID 0
/// and 0xFFFFFFFF); `sgl_len` is the total SGL1 length from [`super::sgl::parse`] or its error;
/// `max_io_size` is the transfer limit advertised through MDTS.
#[inline]
pub fn decode(
    sqe: &Sqe,
    ns: Option<&NamespaceView>,
    sgl_len: Result<u32, Status>,
    max_io_size: u32,
) -> Result<IoCmd, Status> {
    let opc = sqe.opcode();
    // 1. Opcode.
    match opc {
        io_opc::READ
        | io_opc::WRITE
        | io_opc::COMPARE
        | io_opc::WRITE_ZEROES
        | io_opc::FLUSH
        | io_opc::DATASET_MANAGEMENT => {}
        io_opc::FABRICS => {
            return match sqe.fctype() {
                fctype::CONNECT => Err(Status::COMMAND_SEQUENCE_ERROR),
                fctype::DISCONNECT => Ok(IoCmd::Disconnect),
                _ => Err(Status::INVALID_OPCODE),
            };
        }
        _ => return Err(Status::INVALID_OPCODE),
    }
    if sqe.fuse() != 0 {
        return Err(Status::INVALID_FIELD);
    }
    // 2. Namespace.
    let ns = ns.ok_or(Status::INVALID_NAMESPACE)?;
    if opc == io_opc::WRITE_ZEROES && !ns.supports_write_zeroes {
        return Err(Status::INVALID_OPCODE);
    }
    // 3. SGL.
    let sgl_len = u64::from(sgl_len?);

    let cdw12 = sqe.cdw12();
    let slba = u64::from(sqe.cdw10()) | u64::from(sqe.cdw11()) << 32;
    let blocks = (cdw12 & 0xFFFF) + 1;
    let fua = cdw12 & 1 << 30 != 0;
    let bytes = u64::from(blocks) * u64::from(ns.block_size);

    let cmd = match opc {
        io_opc::READ | io_opc::WRITE | io_opc::COMPARE => {
            // 4. Sizes.
            if bytes > u64::from(max_io_size) && max_io_size != 0 {
                return Err(Status::INVALID_FIELD);
            }
            if sgl_len != bytes {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            check_range(ns, slba, blocks)?;
            match opc {
                io_opc::READ => IoCmd::Read { slba, blocks, fua },
                io_opc::WRITE => IoCmd::Write { slba, blocks, fua },
                _ => IoCmd::Compare { slba, blocks },
            }
        }
        io_opc::WRITE_ZEROES => {
            if sgl_len != 0 {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            check_range(ns, slba, blocks)?;
            IoCmd::WriteZeroes {
                slba,
                blocks,
                fua,
                deallocate: cdw12 & 1 << 25 != 0,
            }
        }
        io_opc::FLUSH => {
            if sgl_len != 0 {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            IoCmd::Flush
        }
        _ => {
            // Dataset Management.
            let ranges = (sqe.cdw10() & 0xFF) as u16 + 1;
            if sgl_len < u64::from(ranges) * 16 {
                return Err(Status::DATA_SGL_LENGTH_INVALID);
            }
            let deallocate = sqe.cdw11() & 1 << 2 != 0;
            if deallocate && ns.supports_unmap {
                IoCmd::Deallocate { ranges }
            } else {
                IoCmd::Nop
            }
        }
    };
    // 6. Namespace state.
    if !ns.ready {
        return Err(Status::NAMESPACE_NOT_READY);
    }
    let writes = matches!(
        cmd,
        IoCmd::Write { .. } | IoCmd::WriteZeroes { .. } | IoCmd::Deallocate { .. }
    );
    if writes && ns.read_only {
        return Err(Status::NAMESPACE_WRITE_PROTECTED);
    }
    Ok(cmd)
}

/// 5. `slba + blocks ≤ NSZE`, without overflow.
fn check_range(ns: &NamespaceView, slba: u64, blocks: u32) -> Result<(), Status> {
    match slba.checked_add(u64::from(blocks)) {
        Some(end) if end <= ns.num_blocks => Ok(()),
        _ => Err(Status::LBA_OUT_OF_RANGE),
    }
}

/// One Dataset Management range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DsmRange {
    /// Context attributes.
    pub attributes: u32,
    /// Length in blocks (1-based; 0 ranges are skipped).
    pub blocks: u32,
    /// Starting LBA.
    pub slba: u64,
}

/// Parses and validates the first `ranges` Dataset Management ranges of `data` (Linux always
/// sends 4096 bytes; only NR+1 entries count). Every range must lie inside the namespace (LBA
/// Out of Range otherwise); zero-length ranges are skipped. No allocation: the iterator reads
/// `data` in place.
pub fn dsm_ranges<'a>(
    data: &'a [u8],
    ranges: u16,
    ns: &NamespaceView,
) -> Result<impl Iterator<Item = DsmRange> + 'a, Status> {
    let bytes = usize::from(ranges) * 16;
    let data = data.get(..bytes).ok_or(Status::DATA_SGL_LENGTH_INVALID)?;
    let iter = data.chunks_exact(16).map(|r| DsmRange {
        attributes: le::u32_at(r, 0),
        blocks: le::u32_at(r, 4),
        slba: le::u64_at(r, 8),
    });
    for r in iter.clone() {
        match r.slba.checked_add(u64::from(r.blocks)) {
            Some(end) if end <= ns.num_blocks => {}
            _ if r.blocks == 0 => {}
            _ => return Err(Status::LBA_OUT_OF_RANGE),
        }
    }
    Ok(iter.filter(|r| r.blocks != 0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::sgl::{self, SglDescriptor, SglPolicy};
    use crate::nvme::spec::admin_opc;

    const MAX_IO: u32 = 128 * 1024;

    fn ns() -> NamespaceView {
        NamespaceView {
            supports_unmap: true,
            supports_write_zeroes: true,
            ..NamespaceView::new(1, 512, 1000)
        }
    }

    fn rw(opc: u8, slba: u64, nlb0: u16, len: u32) -> Sqe {
        let mut s = Sqe::new(opc, 0x1234);
        s.set_nsid(1)
            .set_cdw(10, slba as u32)
            .set_cdw(11, (slba >> 32) as u32)
            .set_cdw(12, u32::from(nlb0))
            .set_sgl1(SglDescriptor::keyed(0x1000, len, 5, true));
        s
    }

    fn run(s: &Sqe, ns: Option<&NamespaceView>) -> Result<IoCmd, Status> {
        let policy = SglPolicy::rdma(4096, 1, MAX_IO);
        let len = sgl::parse(s, &[], &policy).map(|d| d.len());
        decode(s, ns, len, MAX_IO)
    }

    #[test]
    fn read_write_compare() {
        let n = ns();
        assert_eq!(
            run(&rw(io_opc::READ, 0, 7, 4096), Some(&n)),
            Ok(IoCmd::Read {
                slba: 0,
                blocks: 8,
                fua: false
            })
        );
        let mut w = rw(io_opc::WRITE, 992, 7, 4096);
        w.set_cdw(12, 7 | 1 << 30 | 1 << 31);
        assert_eq!(
            run(&w, Some(&n)),
            Ok(IoCmd::Write {
                slba: 992,
                blocks: 8,
                fua: true
            })
        );
        assert_eq!(
            run(&rw(io_opc::COMPARE, 5, 0, 512), Some(&n)),
            Ok(IoCmd::Compare { slba: 5, blocks: 1 })
        );
        assert_eq!(
            IoCmd::Read {
                slba: 0,
                blocks: 8,
                fua: false
            }
            .data_len(512),
            4096
        );
    }

    #[test]
    fn in_capsule_write() {
        let n = ns();
        let mut s = rw(io_opc::WRITE, 0, 0, 0);
        s.set_sgl1(SglDescriptor::in_capsule(0, 512));
        let policy = SglPolicy::rdma(4096, 1, MAX_IO);
        let len = sgl::parse(&s, &[0u8; 512], &policy).map(|d| d.len());
        assert_eq!(
            decode(&s, Some(&n), len, MAX_IO),
            Ok(IoCmd::Write {
                slba: 0,
                blocks: 1,
                fua: false
            })
        );
    }

    #[test]
    fn check_order() {
        let n = ns();
        // Unknown opcode wins over everything.
        let mut s = rw(0x04, 0, 0, 0);
        s.set_sgl1(SglDescriptor::unkeyed(1, 0, 0, 0));
        assert_eq!(run(&s, None), Err(Status::INVALID_OPCODE));
        assert_eq!(
            run(&rw(admin_opc::IDENTIFY, 0, 0, 4096), Some(&n)),
            Err(Status::INVALID_OPCODE)
        );
        // Namespace before SGL.
        let mut s = rw(io_opc::READ, 0, 0, 512);
        s.set_sgl1(SglDescriptor::unkeyed(1, 0, 0, 0));
        assert_eq!(run(&s, None), Err(Status::INVALID_NAMESPACE));
        assert_eq!(run(&s, Some(&n)), Err(Status::SGL_TYPE_INVALID));
        // Length before range.
        assert_eq!(
            run(&rw(io_opc::READ, 2000, 0, 1024), Some(&n)),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        // Range before read-only.
        let ro = NamespaceView {
            read_only: true,
            ..ns()
        };
        assert_eq!(
            run(&rw(io_opc::WRITE, 2000, 0, 512), Some(&ro)),
            Err(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(
            run(&rw(io_opc::WRITE, 0, 0, 512), Some(&ro)),
            Err(Status::NAMESPACE_WRITE_PROTECTED)
        );
        assert!(run(&rw(io_opc::READ, 0, 0, 512), Some(&ro)).is_ok());
        let not_ready = NamespaceView {
            ready: false,
            ..ns()
        };
        let e = run(&rw(io_opc::READ, 0, 0, 512), Some(&not_ready)).unwrap_err();
        assert_eq!(e, Status::NAMESPACE_NOT_READY);
        assert!(!e.is_dnr());
    }

    #[test]
    fn lba_range_edges() {
        let n = ns();
        assert!(run(&rw(io_opc::READ, 999, 0, 512), Some(&n)).is_ok());
        assert_eq!(
            run(&rw(io_opc::READ, 999, 1, 1024), Some(&n)),
            Err(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(
            run(&rw(io_opc::READ, 1000, 0, 512), Some(&n)),
            Err(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(
            run(&rw(io_opc::READ, u64::MAX, 0, 512), Some(&n)),
            Err(Status::LBA_OUT_OF_RANGE)
        );
    }

    #[test]
    fn transfer_limits() {
        let n = ns();
        // 65536 blocks of 512 = 32 MiB > MDTS.
        let s = rw(io_opc::READ, 0, 0xFFFF, 0xFF_FFFF);
        assert_eq!(
            decode(&s, Some(&n), Ok(0xFF_FFFF), MAX_IO),
            Err(Status::INVALID_FIELD)
        );
        assert_eq!(
            run(&rw(io_opc::WRITE, 0, 1, 512), Some(&n)),
            Err(Status::DATA_SGL_LENGTH_INVALID),
            "SGL shorter than NLB"
        );
        assert_eq!(
            run(&rw(io_opc::WRITE, 0, 0, 1024), Some(&n)),
            Err(Status::DATA_SGL_LENGTH_INVALID),
            "SGL longer than NLB"
        );
    }

    #[test]
    fn write_zeroes_flush() {
        let n = ns();
        let mut s = rw(io_opc::WRITE_ZEROES, 10, 9, 0);
        s.set_cdw(12, 9 | 1 << 25 | 1 << 30);
        assert_eq!(
            run(&s, Some(&n)),
            Ok(IoCmd::WriteZeroes {
                slba: 10,
                blocks: 10,
                fua: true,
                deallocate: true
            })
        );
        let plain = NamespaceView {
            supports_write_zeroes: false,
            ..ns()
        };
        assert_eq!(run(&s, Some(&plain)), Err(Status::INVALID_OPCODE));
        assert_eq!(
            run(&rw(io_opc::WRITE_ZEROES, 995, 9, 0), Some(&n)),
            Err(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(
            run(&rw(io_opc::WRITE_ZEROES, 0, 0, 512), Some(&n)),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        assert_eq!(run(&rw(io_opc::FLUSH, 0, 0, 0), Some(&n)), Ok(IoCmd::Flush));
        assert_eq!(
            run(&rw(io_opc::FLUSH, 0, 0, 0), None),
            Err(Status::INVALID_NAMESPACE),
            "broadcast flush is not supported (VWC bits 2:1 = 10b)"
        );
    }

    fn dsm(nr0: u8, attrs: u32, len: u32) -> Sqe {
        let mut s = Sqe::new(io_opc::DATASET_MANAGEMENT, 9);
        s.set_nsid(1)
            .set_cdw(10, u32::from(nr0))
            .set_cdw(11, attrs)
            .set_sgl1(SglDescriptor::keyed(0x1000, len, 1, false));
        s
    }

    #[test]
    fn dataset_management() {
        let n = ns();
        assert_eq!(
            run(&dsm(1, 4, 4096), Some(&n)),
            Ok(IoCmd::Deallocate { ranges: 2 })
        );
        assert_eq!(
            run(&dsm(255, 4, 4096), Some(&n)),
            Ok(IoCmd::Deallocate { ranges: 256 })
        );
        assert_eq!(
            run(&dsm(1, 4, 16), Some(&n)),
            Err(Status::DATA_SGL_LENGTH_INVALID)
        );
        assert_eq!(run(&dsm(0, 3, 4096), Some(&n)), Ok(IoCmd::Nop));
        let no_unmap = NamespaceView {
            supports_unmap: false,
            ..ns()
        };
        assert_eq!(run(&dsm(0, 4, 4096), Some(&no_unmap)), Ok(IoCmd::Nop));
        let ro = NamespaceView {
            read_only: true,
            ..ns()
        };
        assert_eq!(
            run(&dsm(0, 4, 4096), Some(&ro)),
            Err(Status::NAMESPACE_WRITE_PROTECTED)
        );
    }

    fn range(buf: &mut [u8], i: usize, blocks: u32, slba: u64) {
        le::put_u32(buf, i * 16 + 4, blocks);
        le::put_u64(buf, i * 16 + 8, slba);
    }

    #[test]
    fn dsm_range_parsing() {
        let n = ns();
        let mut buf = [0u8; 4096];
        range(&mut buf, 0, 8, 0);
        range(&mut buf, 1, 0, 5000); // zero length: skipped, not checked
        range(&mut buf, 2, 1000, 0);
        range(&mut buf, 3, 1, 999999); // beyond NR+1: ignored
        let v: Vec<_> = dsm_ranges(&buf, 3, &n).unwrap().collect();
        assert_eq!(
            v,
            [
                DsmRange {
                    attributes: 0,
                    blocks: 8,
                    slba: 0
                },
                DsmRange {
                    attributes: 0,
                    blocks: 1000,
                    slba: 0
                }
            ]
        );
        assert_eq!(
            dsm_ranges(&buf, 4, &n).err(),
            Some(Status::LBA_OUT_OF_RANGE)
        );
        range(&mut buf, 0, 2, u64::MAX);
        assert_eq!(
            dsm_ranges(&buf, 1, &n).err(),
            Some(Status::LBA_OUT_OF_RANGE)
        );
        assert_eq!(
            dsm_ranges(&buf[..16], 2, &n).err(),
            Some(Status::DATA_SGL_LENGTH_INVALID)
        );
    }

    #[test]
    fn fabrics_on_io_queue() {
        let c = Sqe::fabrics(fctype::CONNECT, 1);
        assert_eq!(
            decode(&c, None, Ok(1024), MAX_IO),
            Err(Status::COMMAND_SEQUENCE_ERROR)
        );
        let d = Sqe::fabrics(fctype::DISCONNECT, 1);
        assert_eq!(decode(&d, None, Ok(0), MAX_IO), Ok(IoCmd::Disconnect));
        let p = Sqe::fabrics(fctype::PROPERTY_GET, 1);
        assert_eq!(decode(&p, None, Ok(0), MAX_IO), Err(Status::INVALID_OPCODE));
    }

    #[test]
    fn fused_rejected() {
        let n = ns();
        let mut s = rw(io_opc::COMPARE, 0, 0, 512);
        s.set_flags(0x41);
        assert_eq!(run(&s, Some(&n)), Err(Status::INVALID_FIELD));
    }
}
