//! `null`: a device that discards writes and leaves read buffers untouched, for benchmarks.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::json;

use super::malloc::check_block_size;
use super::{Bdev, BdevChannel, BdevError, BdevIo, BdevRegistry, Completed, IoStatus, IoType};

/// Parameters of `bdev_null_create`.
#[derive(Debug, Clone)]
pub struct NullParams {
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
}

/// The null device.
#[derive(Debug)]
pub struct NullBdev {
    params: NullParams,
    uuid: uuid::Uuid,
    /// The size now (`params.num_blocks` is the size it was created with).
    num_blocks: AtomicU64,
}

impl NullBdev {
    /// Creates the device (nothing is allocated).
    pub fn create(params: NullParams) -> Result<Arc<Self>, BdevError> {
        check_block_size(params.block_size)?;
        if params.num_blocks == 0 {
            return Err(BdevError::Invalid(
                "num_blocks must be greater than 0".into(),
            ));
        }
        let uuid = params.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        Ok(Arc::new(Self {
            num_blocks: AtomicU64::new(params.num_blocks),
            params,
            uuid,
        }))
    }

    /// Finds the null bdev `name` among `bdevs`.
    pub fn lookup(bdevs: &BdevRegistry, name: &str) -> Option<Arc<NullBdev>> {
        let any: Arc<dyn std::any::Any + Send + Sync> = bdevs.get(name)?;
        any.downcast::<NullBdev>().ok()
    }

    /// `bdev_null_resize`: grows the device to `new_size_mib` MiB and tells `bdevs`' resize
    /// hooks. As SPDK, it never shrinks (`EINVAL`), and the new size is rounded down to whole
    /// blocks.
    pub fn resize(&self, bdevs: &BdevRegistry, new_size_mib: u64) -> Result<(), BdevError> {
        let bs = u64::from(self.params.block_size);
        let old = self.num_blocks();
        let new_bytes = new_size_mib.checked_mul(1024 * 1024).ok_or_else(|| {
            BdevError::Invalid(format!("new_size {new_size_mib} MiB is too large"))
        })?;
        if new_bytes < old * bs {
            return Err(BdevError::Invalid(format!(
                "The new bdev size must not be smaller than current bdev size ({} MiB < {} \
                 bytes)",
                new_size_mib,
                old * bs
            )));
        }
        bdevs.change_blockcnt(self.name(), old, new_bytes / bs, |n| {
            self.num_blocks.store(n, Ordering::Release);
        })
    }
}

impl Bdev for NullBdev {
    fn name(&self) -> &str {
        &self.params.name
    }
    fn product_name(&self) -> &'static str {
        "Null disk"
    }
    fn block_size(&self) -> u32 {
        self.params.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.num_blocks.load(Ordering::Acquire)
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
    fn supports(&self, io: IoType) -> bool {
        // No compare of its own: the channel compares with what reads return.
        io != IoType::Compare
    }
    fn write_cache(&self) -> bool {
        false
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        Ok(Box::new(NullChannel {
            done: Completed::with_capacity(256),
        }))
    }
    fn config(&self) -> serde_json::Value {
        json!({
            "method": "bdev_null_create",
            "params": {
                "name": self.params.name,
                "num_blocks": self.num_blocks(),
                "block_size": self.params.block_size,
                "physical_block_size": self.physical_block_size(),
                "uuid": self.uuid.to_string(),
                "md_size": 0,
                "dif_type": 0,
                "dif_is_head_of_md": false,
                "dif_pi_format": 0,
            }
        })
    }
}

struct NullChannel {
    done: Completed,
}

impl BdevChannel for NullChannel {
    fn submit(&mut self, mut io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        io.status = IoStatus::Success;
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
