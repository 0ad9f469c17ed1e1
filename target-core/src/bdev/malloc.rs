//! `malloc`: a RAM disk.

use std::sync::Arc;

use iobuf::DmaRegion;
use serde_json::json;

use super::{Bdev, BdevChannel, BdevError, BdevIo, BdevOp, Completed, IoStatus, IoType};

/// Parameters of `bdev_malloc_create`.
#[derive(Debug, Clone)]
pub struct MallocParams {
    /// Name.
    pub name: String,
    /// Number of blocks.
    pub num_blocks: u64,
    /// Logical block size: a power of two from 512 to 4096.
    pub block_size: u32,
    /// Physical block size (0 = the block size).
    pub physical_block_size: u32,
    /// UUID (random when absent).
    pub uuid: Option<uuid::Uuid>,
    /// Optimal I/O boundary in blocks (0 = none), reported only.
    pub optimal_io_boundary: u32,
}

/// Checks a logical block size: a power of two from 512 to 4096.
pub(crate) fn check_block_size(bs: u32) -> Result<(), BdevError> {
    if !(512..=4096).contains(&bs) || !bs.is_power_of_two() {
        return Err(BdevError::Invalid(format!(
            "block size {bs} is not supported (512, 1024, 2048 or 4096)"
        )));
    }
    Ok(())
}

/// A RAM disk. Its memory is one page-aligned region, zero at creation.
pub struct MallocBdev {
    params: MallocParams,
    uuid: uuid::Uuid,
    mem: Arc<DmaRegion>,
}

impl std::fmt::Debug for MallocBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MallocBdev")
            .field("name", &self.params.name)
            .finish()
    }
}

impl MallocBdev {
    /// Allocates the disk.
    pub fn create(params: MallocParams) -> Result<Arc<Self>, BdevError> {
        check_block_size(params.block_size)?;
        if params.num_blocks == 0 {
            return Err(BdevError::Invalid(
                "num_blocks must be greater than 0".into(),
            ));
        }
        let pbs = params.physical_block_size;
        if pbs != 0 && (!pbs.is_multiple_of(512) || pbs < params.block_size) {
            return Err(BdevError::Invalid(format!(
                "physical block size {pbs} must be a multiple of 512 and at least the block size"
            )));
        }
        let bytes = params
            .num_blocks
            .checked_mul(u64::from(params.block_size))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| BdevError::Invalid("malloc bdev size overflows".into()))?;
        let mem = DmaRegion::new(bytes).map_err(|e| BdevError::Io {
            context: format!("allocating {bytes} bytes for malloc bdev {}", params.name),
            source: std::io::Error::new(std::io::ErrorKind::OutOfMemory, e),
        })?;
        let uuid = params.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        Ok(Arc::new(Self { params, uuid, mem }))
    }
}

impl Bdev for MallocBdev {
    fn name(&self) -> &str {
        &self.params.name
    }
    fn product_name(&self) -> &'static str {
        "Malloc disk"
    }
    fn block_size(&self) -> u32 {
        self.params.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.params.num_blocks
    }
    fn physical_block_size(&self) -> u32 {
        if self.params.physical_block_size == 0 {
            self.params.block_size
        } else {
            self.params.physical_block_size
        }
    }
    fn uuid(&self) -> uuid::Uuid {
        self.uuid
    }
    fn supports(&self, _io: IoType) -> bool {
        true
    }
    fn write_cache(&self) -> bool {
        true
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        Ok(Box::new(MallocChannel {
            mem: Arc::clone(&self.mem),
            block_size: self.params.block_size as usize,
            done: Completed::with_capacity(256),
        }))
    }
    fn config(&self) -> serde_json::Value {
        json!({
            "method": "bdev_malloc_create",
            "params": {
                "name": self.params.name,
                "num_blocks": self.params.num_blocks,
                "block_size": self.params.block_size,
                "physical_block_size": self.physical_block_size(),
                "uuid": self.uuid.to_string(),
                "optimal_io_boundary": self.params.optimal_io_boundary,
                "md_size": 0,
                "dif_type": 0,
                "dif_is_head_of_md": false,
                "dif_pi_format": 0,
            }
        })
    }
}

/// A malloc channel completes every I/O during `submit`; `poll` hands the results back.
struct MallocChannel {
    mem: Arc<DmaRegion>,
    block_size: usize,
    done: Completed,
}

impl MallocChannel {
    /// Raw pointer to byte `off` of the disk, after checking that `len` bytes fit.
    fn span(&self, off: usize, len: usize) -> Option<*mut u8> {
        if off.checked_add(len)? > self.mem.len() {
            return None;
        }
        // SAFETY: off + len <= region length, checked above.
        Some(unsafe { self.mem.as_ptr().add(off) })
    }

    fn execute(&mut self, io: &mut BdevIo) -> IoStatus {
        let bs = self.block_size;
        let Some((off, n)) = io.op.range() else {
            return IoStatus::Success; // Flush: RAM has nothing to make durable.
        };
        let (off, len) = (off as usize * bs, n as usize * bs);
        let Some(disk) = self.span(off, len) else {
            return IoStatus::OutOfRange;
        };
        // The disk is shared by every reactor's channel. Concurrent I/O to overlapping blocks has
        // no defined result order on any block device; we never form Rust references into the
        // shared bytes, only raw copies, and every access stays inside the region.
        match io.op {
            BdevOp::Read { .. } | BdevOp::Write { .. } | BdevOp::Compare { .. } => {
                let mut done = 0;
                for b in io.bufs.iter_mut() {
                    if done == len {
                        break;
                    }
                    let k = b.len().min(len - done);
                    // SAFETY: `disk + done .. + k` is inside the span checked above; the buffer
                    // slice is exclusively ours through `&mut IoBuf`.
                    let d = unsafe { disk.add(done) };
                    match io.op {
                        BdevOp::Read { .. } => {
                            // SAFETY: source and destination are valid for k bytes and do not
                            // overlap (the buffer is not part of the disk region).
                            unsafe {
                                std::ptr::copy_nonoverlapping(d, b.as_mut_slice().as_mut_ptr(), k)
                            }
                        }
                        BdevOp::Write { .. } => {
                            // SAFETY: as above, in the other direction.
                            unsafe { std::ptr::copy_nonoverlapping(b.as_slice().as_ptr(), d, k) }
                        }
                        _ => {
                            let mut media = [0u8; 512];
                            let mut pos = 0;
                            while pos < k {
                                let m = (k - pos).min(media.len());
                                // SAFETY: reads m bytes inside the checked span into a local.
                                unsafe {
                                    std::ptr::copy_nonoverlapping(d.add(pos), media.as_mut_ptr(), m)
                                };
                                if media[..m] != b.as_slice()[pos..pos + m] {
                                    return IoStatus::Miscompare;
                                }
                                pos += m;
                            }
                        }
                    }
                    done += k;
                }
                if done < len {
                    return IoStatus::BufferTooSmall;
                }
            }
            BdevOp::WriteZeroes { .. } | BdevOp::Unmap { .. } => {
                // SAFETY: writes `len` bytes inside the checked span.
                unsafe { std::ptr::write_bytes(disk, 0, len) };
            }
            BdevOp::Flush => {}
        }
        IoStatus::Success
    }
}

impl BdevChannel for MallocChannel {
    fn submit(&mut self, mut io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        io.status = self.execute(&mut io);
        self.done.push(io);
        Ok(())
    }

    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        self.done.drain(done)
    }

    fn outstanding(&self) -> usize {
        self.done.len()
    }
}
