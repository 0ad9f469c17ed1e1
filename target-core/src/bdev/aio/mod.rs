//! `aio`: a file or block device (SPDK's `bdev_aio_create`), driven through io_uring, with a
//! thread-pool engine where io_uring is unavailable (old kernels, seccomp filters).

mod pool;
mod uring;

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::sync::Arc;

use serde_json::json;

use super::malloc::check_block_size;
use super::{Bdev, BdevChannel, BdevError, IoType};

/// Which engine runs an aio bdev's I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AioEngine {
    /// io_uring, one ring per channel, completions polled by the reactor.
    Uring,
    /// A small pool of threads doing positioned reads and writes.
    Threads,
}

/// Parameters of `bdev_aio_create`.
#[derive(Debug, Clone)]
pub struct AioParams {
    /// Name.
    pub name: String,
    /// Path of a file or block device.
    pub filename: String,
    /// Logical block size; `None` or 0 detects it (the device's logical block size, 512 for a
    /// file). A size smaller than the device's is rejected.
    pub block_size: Option<u32>,
    /// Open read-only.
    pub readonly: bool,
    /// Support unmap and write-zeroes on a regular file through fallocate.
    pub fallocate: bool,
    /// UUID (random when absent).
    pub uuid: Option<uuid::Uuid>,
    /// Force an engine; `None` picks io_uring when it works. The environment variable
    /// `RTGT_AIO_ENGINE=threads` forces the thread pool too.
    pub engine: Option<AioEngine>,
    /// Created as SPDK's uring bdev (`bdev_uring_create`): io_uring or nothing, and it shows
    /// and saves itself as such.
    pub uring_module: bool,
}

/// `bdev_uring_create`'s product name, as SPDK's uring module names its bdevs.
pub const URING_PRODUCT: &str = "URING bdev";
/// `bdev_aio_create`'s product name.
pub const AIO_PRODUCT: &str = "AIO disk";

pub(crate) struct AioFile {
    /// The device, opened O_DIRECT where possible.
    pub file: File,
    /// A buffered descriptor for I/O whose buffers do not meet O_DIRECT alignment.
    pub buffered: File,
    pub direct: bool,
    pub block_size: u32,
}

/// A file or block device.
pub struct AioBdev {
    params: AioParams,
    uuid: uuid::Uuid,
    num_blocks: u64,
    block_device: bool,
    engine: AioEngine,
    file: Arc<AioFile>,
    pool: Option<Arc<pool::ThreadPool>>,
}

impl std::fmt::Debug for AioBdev {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AioBdev")
            .field("name", &self.params.name)
            .field("filename", &self.params.filename)
            .finish()
    }
}

fn io_err(context: String) -> impl FnOnce(std::io::Error) -> BdevError {
    move |source| BdevError::Io { context, source }
}

/// Logical block size and byte size of a block device.
fn block_device_geometry(file: &File) -> std::io::Result<(u32, u64)> {
    let mut lbs: libc::c_int = 0;
    let mut bytes: u64 = 0;
    // BLKSSZGET = _IO(0x12, 104), BLKGETSIZE64 = _IOR(0x12, 114, size_t).
    const BLKSSZGET: libc::c_ulong = 0x1268;
    const BLKGETSIZE64: libc::c_ulong = 0x8008_1272;
    // SAFETY: the ioctl writes one c_int into a live local.
    if unsafe { libc::ioctl(file.as_raw_fd(), BLKSSZGET, &mut lbs) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the ioctl writes one u64 into a live local.
    if unsafe { libc::ioctl(file.as_raw_fd(), BLKGETSIZE64, &mut bytes) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((lbs as u32, bytes))
}

impl AioBdev {
    /// Opens the file or device.
    pub fn create(params: AioParams) -> Result<Arc<Self>, BdevError> {
        let path = &params.filename;
        let open = |direct: bool| {
            let mut o = OpenOptions::new();
            o.read(true).write(!params.readonly);
            if direct {
                o.custom_flags(libc::O_DIRECT);
            }
            o.open(path)
        };
        let buffered = open(false).map_err(io_err(format!("opening {path}")))?;
        let meta = buffered
            .metadata()
            .map_err(io_err(format!("stat {path}")))?;
        let block_device = meta.file_type().is_block_device();
        if !block_device && !meta.file_type().is_file() {
            return Err(BdevError::Invalid(format!(
                "{path} is neither a regular file nor a block device"
            )));
        }
        let (detected, bytes) = if block_device {
            block_device_geometry(&buffered).map_err(io_err(format!("querying {path}")))?
        } else {
            (512, meta.len())
        };
        let block_size = match params.block_size {
            None | Some(0) => detected,
            Some(bs) if bs < detected => {
                return Err(BdevError::Invalid(format!(
                    "block size {bs} is smaller than the {detected}-byte block size of {path}"
                )));
            }
            Some(bs) => bs,
        };
        check_block_size(block_size)?;
        let num_blocks = bytes / u64::from(block_size);
        if num_blocks == 0 {
            return Err(BdevError::Invalid(format!(
                "{path} holds no complete {block_size}-byte block"
            )));
        }
        // O_DIRECT is refused by some file systems (tmpfs): fall back to buffered I/O there.
        let (file, direct) = match open(true) {
            Ok(f) => (f, true),
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                tracing::info!("{path}: O_DIRECT not supported here; using buffered I/O");
                (
                    open(false).map_err(io_err(format!("opening {path}")))?,
                    false,
                )
            }
            Err(e) => return Err(io_err(format!("opening {path} with O_DIRECT"))(e)),
        };
        let file = Arc::new(AioFile {
            file,
            buffered,
            direct,
            block_size,
        });
        let forced = std::env::var("RTGT_AIO_ENGINE").ok();
        let mut engine = match (params.engine, forced.as_deref()) {
            (Some(e), _) => e,
            _ if params.uring_module => AioEngine::Uring,
            (None, Some("threads")) => AioEngine::Threads,
            _ => AioEngine::Uring,
        };
        if params.uring_module
            && let Err(e) = uring::probe()
        {
            return Err(BdevError::Invalid(format!(
                "bdev {}: io_uring is not available ({e}); bdev_aio_create falls back to threads",
                params.name
            )));
        }
        if engine == AioEngine::Uring
            && let Err(e) = uring::probe()
        {
            tracing::warn!(
                "bdev {}: io_uring unavailable ({e}); using threads",
                params.name
            );
            engine = AioEngine::Threads;
        }
        let pool = (engine == AioEngine::Threads)
            .then(|| pool::ThreadPool::new(&params.name, Arc::clone(&file)))
            .transpose()
            .map_err(io_err(format!("starting I/O threads for {}", params.name)))?;
        let uuid = params.uuid.unwrap_or_else(uuid::Uuid::new_v4);
        Ok(Arc::new(Self {
            params,
            uuid,
            num_blocks,
            block_device,
            engine,
            file,
            pool,
        }))
    }

    /// The engine in use.
    pub fn engine(&self) -> AioEngine {
        self.engine
    }
}

impl Bdev for AioBdev {
    fn name(&self) -> &str {
        &self.params.name
    }
    fn product_name(&self) -> &'static str {
        if self.params.uring_module {
            URING_PRODUCT
        } else {
            AIO_PRODUCT
        }
    }
    fn block_size(&self) -> u32 {
        self.file.block_size
    }
    fn num_blocks(&self) -> u64 {
        self.num_blocks
    }
    fn uuid(&self) -> uuid::Uuid {
        self.uuid
    }
    fn supports(&self, io: IoType) -> bool {
        match io {
            IoType::Write | IoType::WriteZeroes | IoType::Unmap if self.params.readonly => false,
            IoType::WriteZeroes | IoType::Unmap => self.params.fallocate || self.block_device,
            // The channel compares by reading (asynchronously, without allocating).
            IoType::Compare => false,
            _ => true,
        }
    }
    fn write_cache(&self) -> bool {
        true
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        match &self.pool {
            Some(pool) => Ok(Box::new(
                pool::PoolChannel::new(Arc::clone(pool))
                    .map_err(io_err(format!("opening a channel on {}", self.params.name)))?,
            )),
            None => Ok(Box::new(
                uring::UringChannel::new(Arc::clone(&self.file), self.block_device)
                    .map_err(io_err(format!("opening io_uring for {}", self.params.name)))?,
            )),
        }
    }
    fn config(&self) -> serde_json::Value {
        if self.params.uring_module {
            return json!({
                "method": "bdev_uring_create",
                "params": {
                    "name": self.params.name,
                    "filename": self.params.filename,
                    "block_size": self.file.block_size,
                    "uuid": self.uuid.to_string(),
                }
            });
        }
        json!({
            "method": "bdev_aio_create",
            "params": {
                "name": self.params.name,
                "filename": self.params.filename,
                "block_size": self.file.block_size,
                "readonly": self.params.readonly,
                "fallocate": self.params.fallocate,
                "uuid": self.uuid.to_string(),
            }
        })
    }
    fn driver_specific(&self) -> serde_json::Value {
        if self.params.uring_module {
            return json!({ "uring": { "filename": self.params.filename } });
        }
        json!({
            "aio": {
                "filename": self.params.filename,
                "block_size_override": self.params.block_size.unwrap_or(0) != 0,
                "readonly": self.params.readonly,
                "fallocate": self.params.fallocate,
                "engine": match self.engine { AioEngine::Uring => "io_uring", AioEngine::Threads => "threads" },
                "direct": self.file.direct,
            }
        })
    }
    fn destroy(&self) {
        if let Some(pool) = &self.pool {
            pool.shutdown();
        }
    }
}

/// Whether a buffer can go to an O_DIRECT descriptor: address and length block aligned.
pub(crate) fn direct_ok(file: &AioFile, bufs: &super::IoBufs, len: usize) -> bool {
    if !file.direct {
        return true;
    }
    let a = u64::from(file.block_size.min(512));
    let mut left = len;
    for b in bufs {
        if left == 0 {
            break;
        }
        let n = b.len().min(left);
        if !b.addr().is_multiple_of(a) || !(n as u64).is_multiple_of(a) {
            return false;
        }
        left -= n;
    }
    true
}

/// Runs one I/O synchronously on the buffered descriptor. Used by the thread pool, and by the
/// io_uring engine for buffers O_DIRECT cannot take.
pub(crate) fn execute_sync(file: &AioFile, io: &mut super::BdevIo) -> super::IoStatus {
    use super::{BdevOp, IoStatus};
    use std::os::unix::fs::FileExt;
    let bs = u64::from(file.block_size);
    let fd = &file.buffered;
    let status = |r: std::io::Result<()>| match r {
        Ok(()) => IoStatus::Success,
        Err(e) => IoStatus::Error(e.raw_os_error().unwrap_or(libc::EIO)),
    };
    match io.op {
        BdevOp::Read {
            offset_blocks,
            num_blocks,
        } => {
            let mut pos = offset_blocks * bs;
            let mut left = (num_blocks * bs) as usize;
            for b in io.bufs.iter_mut() {
                if left == 0 {
                    break;
                }
                let n = b.len().min(left);
                if let Err(e) = fd.read_exact_at(&mut b.as_mut_slice()[..n], pos) {
                    return status(Err(e));
                }
                pos += n as u64;
                left -= n;
            }
            IoStatus::Success
        }
        BdevOp::Write {
            offset_blocks,
            num_blocks,
            fua,
        } => {
            let mut pos = offset_blocks * bs;
            let mut left = (num_blocks * bs) as usize;
            for b in io.bufs.iter() {
                if left == 0 {
                    break;
                }
                let n = b.len().min(left);
                if let Err(e) = fd.write_all_at(&b.as_slice()[..n], pos) {
                    return status(Err(e));
                }
                pos += n as u64;
                left -= n;
            }
            if fua {
                return status(fd.sync_data());
            }
            IoStatus::Success
        }
        // Not supported: the channel compares by reading.
        BdevOp::Compare { .. } => IoStatus::Unsupported,
        BdevOp::Flush => status(fd.sync_data()),
        BdevOp::WriteZeroes {
            offset_blocks,
            num_blocks,
        } => status(fallocate(
            fd,
            libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            offset_blocks * bs,
            num_blocks * bs,
        )),
        BdevOp::Unmap {
            offset_blocks,
            num_blocks,
        } => status(fallocate(
            fd,
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset_blocks * bs,
            num_blocks * bs,
        )),
    }
}

fn fallocate(f: &File, mode: i32, off: u64, len: u64) -> std::io::Result<()> {
    // SAFETY: fallocate takes no pointers; the fd is live for the call.
    let rc =
        unsafe { libc::fallocate(f.as_raw_fd(), mode, off as libc::off_t, len as libc::off_t) };
    if rc < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}
