use super::*;
use std::time::{Duration, Instant};

fn run(ch: &mut IoChannel, io: BdevIo) -> Box<BdevIo> {
    let mut io = Some(Box::new(io));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut out = None;
    while out.is_none() {
        if let Some(x) = io.take()
            && let Err(back) = ch.submit(x)
        {
            io = Some(back);
        }
        ch.poll(&mut |done| out = Some(done));
        assert!(Instant::now() < deadline, "I/O did not complete");
    }
    out.unwrap()
}

fn bufs(sizes: &[usize]) -> IoBufs {
    sizes.iter().map(|&s| IoBuf::alloc(s).unwrap()).collect()
}

fn pattern(seed: u8, bufs: &mut IoBufs) {
    let mut x = u32::from(seed);
    for b in bufs.iter_mut() {
        for byte in b.as_mut_slice() {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            *byte = (x >> 16) as u8;
        }
    }
}

fn concat(bufs: &IoBufs) -> Vec<u8> {
    bufs.iter().flat_map(|b| b.as_slice().to_vec()).collect()
}

fn write(ch: &mut IoChannel, off: u64, n: u64, data: IoBufs, fua: bool) -> Box<BdevIo> {
    let mut io = BdevIo::new(
        BdevOp::Write {
            offset_blocks: off,
            num_blocks: n,
            fua,
        },
        1,
    );
    io.bufs = data;
    run(ch, io)
}

fn read(ch: &mut IoChannel, off: u64, n: u64, sizes: &[usize]) -> Box<BdevIo> {
    let mut io = BdevIo::new(
        BdevOp::Read {
            offset_blocks: off,
            num_blocks: n,
        },
        2,
    );
    io.bufs = bufs(sizes);
    run(ch, io)
}

/// The data checks every backend must pass: multi-buffer writes read back through a different
/// split, compare, write zeroes, unmap, range and size errors.
fn exercise(reg: &BdevRegistry, bdev: Arc<dyn Bdev>) {
    let bs = bdev.block_size() as usize;
    let mut ch = reg.open_channel(&bdev).unwrap();

    let mut data = bufs(&[bs, 2 * bs, bs]);
    pattern(7, &mut data);
    let expect = concat(&data);
    let w = write(&mut ch, 3, 4, data, false);
    assert_eq!(w.status, IoStatus::Success);
    assert_eq!(w.tag, 1);

    let r = read(&mut ch, 3, 4, &[3 * bs, bs]);
    assert_eq!(r.status, IoStatus::Success);
    assert_eq!(concat(&r.bufs), expect, "data read back differs");

    if bdev.can_compare() {
        let mut io = BdevIo::new(
            BdevOp::Compare {
                offset_blocks: 3,
                num_blocks: 4,
            },
            3,
        );
        io.bufs = r.bufs;
        let c = run(&mut ch, io);
        assert_eq!(c.status, IoStatus::Success);
        let mut bad = c.bufs;
        bad[1].as_mut_slice()[5] ^= 0xff;
        let mut io = BdevIo::new(
            BdevOp::Compare {
                offset_blocks: 3,
                num_blocks: 4,
            },
            3,
        );
        io.bufs = bad;
        assert_eq!(run(&mut ch, io).status, IoStatus::Miscompare);
    }

    let f = run(&mut ch, BdevIo::new(BdevOp::Flush, 4));
    assert_eq!(f.status, IoStatus::Success);

    if bdev.supports(IoType::WriteZeroes) {
        let z = run(
            &mut ch,
            BdevIo::new(
                BdevOp::WriteZeroes {
                    offset_blocks: 4,
                    num_blocks: 1,
                },
                5,
            ),
        );
        assert_eq!(z.status, IoStatus::Success);
        let r = read(&mut ch, 3, 4, &[4 * bs]);
        let got = concat(&r.bufs);
        assert_eq!(&got[..bs], &expect[..bs]);
        assert!(got[bs..2 * bs].iter().all(|&b| b == 0), "write zeroes");
        assert_eq!(&got[2 * bs..], &expect[2 * bs..]);
    }
    if bdev.supports(IoType::Unmap) {
        let u = run(
            &mut ch,
            BdevIo::new(
                BdevOp::Unmap {
                    offset_blocks: 3,
                    num_blocks: 4,
                },
                6,
            ),
        );
        assert_eq!(u.status, IoStatus::Success);
        let r = read(&mut ch, 3, 4, &[4 * bs]);
        assert!(
            concat(&r.bufs).iter().all(|&b| b == 0),
            "unmapped blocks read zero"
        );
    }

    let nb = bdev.num_blocks();
    assert_eq!(
        read(&mut ch, nb - 1, 2, &[2 * bs]).status,
        IoStatus::OutOfRange
    );
    assert_eq!(
        read(&mut ch, u64::MAX, 2, &[2 * bs]).status,
        IoStatus::OutOfRange
    );
    assert_eq!(read(&mut ch, 0, 2, &[bs]).status, IoStatus::BufferTooSmall);
    assert_eq!(read(&mut ch, nb - 1, 1, &[bs]).status, IoStatus::Success);
    assert_eq!(ch.outstanding(), 0);
}

fn malloc(name: &str, blocks: u64, bs: u32) -> Arc<dyn Bdev> {
    MallocBdev::create(MallocParams {
        name: name.into(),
        num_blocks: blocks,
        block_size: bs,
        physical_block_size: 0,
        uuid: None,
        optimal_io_boundary: 0,
    })
    .unwrap()
}

#[test]
fn malloc_verifies_data_at_512_and_4096() {
    let reg = BdevRegistry::new();
    for bs in [512, 4096] {
        let b = malloc(&format!("m{bs}"), 64, bs);
        reg.register(Arc::clone(&b)).unwrap();
        exercise(&reg, b);
    }
    let st = reg.iostat("m512").unwrap();
    assert!(st.num_write_ops >= 1 && st.num_read_ops >= 4);
    assert_eq!(st.bytes_written, 4 * 512);
    assert!(st.num_errors >= 3, "range errors are counted");
}

#[test]
fn malloc_rejects_bad_parameters() {
    for bs in [0, 256, 520, 8192] {
        assert!(
            MallocBdev::create(MallocParams {
                name: "x".into(),
                num_blocks: 8,
                block_size: bs,
                physical_block_size: 0,
                uuid: None,
                optimal_io_boundary: 0,
            })
            .is_err()
        );
    }
    assert!(
        MallocBdev::create(MallocParams {
            name: "x".into(),
            num_blocks: 0,
            block_size: 512,
            physical_block_size: 0,
            uuid: None,
            optimal_io_boundary: 0,
        })
        .is_err()
    );
}

/// Malloc without its own compare, and with a backend that is busy every other submit: the
/// channel's read + compare path with data, several chunks, a queue, and retries.
struct NoCompare(Arc<dyn Bdev>);

struct BusyEveryOther {
    inner: Box<dyn BdevChannel>,
    refuse: bool,
    refused: usize,
}

impl BdevChannel for BusyEveryOther {
    fn submit(&mut self, io: Box<BdevIo>) -> Result<(), Box<BdevIo>> {
        self.refuse = !self.refuse;
        if self.refuse {
            self.refused += 1;
            return Err(io);
        }
        assert!(
            !matches!(io.op, BdevOp::Compare { .. }),
            "a compare reached a backend without one"
        );
        self.inner.submit(io)
    }
    fn poll(&mut self, done: &mut dyn FnMut(Box<BdevIo>)) -> usize {
        self.inner.poll(done)
    }
    fn outstanding(&self) -> usize {
        self.inner.outstanding()
    }
}

impl Bdev for NoCompare {
    fn name(&self) -> &str {
        "nocmp"
    }
    fn product_name(&self) -> &'static str {
        "test"
    }
    fn block_size(&self) -> u32 {
        self.0.block_size()
    }
    fn num_blocks(&self) -> u64 {
        self.0.num_blocks()
    }
    fn uuid(&self) -> uuid::Uuid {
        self.0.uuid()
    }
    fn supports(&self, io: IoType) -> bool {
        io != IoType::Compare
    }
    fn write_cache(&self) -> bool {
        false
    }
    fn open_channel(&self) -> Result<Box<dyn BdevChannel>, BdevError> {
        Ok(Box::new(BusyEveryOther {
            inner: self.0.open_channel()?,
            refuse: false,
            refused: 0,
        }))
    }
    fn config(&self) -> serde_json::Value {
        serde_json::json!({})
    }
}

fn compare_io(off: u64, n: u64, data: &[u8], tag: u64) -> Box<BdevIo> {
    let mut io = BdevIo::new(
        BdevOp::Compare {
            offset_blocks: off,
            num_blocks: n,
        },
        tag,
    );
    // Split unevenly, so that chunks and buffers never line up.
    let mut b = IoBufs::new();
    for part in data.chunks(7000) {
        let mut x = IoBuf::alloc(part.len()).unwrap();
        x.as_mut_slice().copy_from_slice(part);
        b.push(x);
    }
    io.bufs = b;
    Box::new(io)
}

#[test]
fn compare_by_reading_covers_chunks_queues_and_a_busy_backend() {
    let reg = BdevRegistry::new();
    let m = malloc("m_nocmp", 1024, 512);
    let b: Arc<dyn Bdev> = Arc::new(NoCompare(m));
    assert!(!b.supports(IoType::Compare) && b.can_compare());
    reg.register(Arc::clone(&b)).unwrap();
    let mut ch = reg.open_channel(&b).unwrap();
    // 200 KiB of data at block 100: more than three chunks.
    let blocks = 400u64;
    let mut data = bufs(&[blocks as usize * 512]);
    pattern(5, &mut data);
    let expect = concat(&data);
    assert_eq!(
        write(&mut ch, 100, blocks, data, false).status,
        IoStatus::Success
    );
    let mut last = expect.clone();
    *last.last_mut().unwrap() ^= 1;
    let mut first_of_second_chunk = expect.clone();
    first_of_second_chunk[compare::CHUNK_BYTES] ^= 0x80;
    let cases: [(&[u8], IoStatus); 4] = [
        (&expect, IoStatus::Success),
        (&last, IoStatus::Miscompare),
        (&first_of_second_chunk, IoStatus::Miscompare),
        (&expect, IoStatus::Success),
    ];
    // All queued at once: they complete in order, each with its own result.
    for (tag, (d, _)) in cases.iter().enumerate() {
        let mut io = compare_io(100, blocks, d, tag as u64);
        loop {
            match ch.submit(io) {
                Ok(()) => break,
                Err(back) => io = back,
            }
        }
    }
    assert_eq!(ch.outstanding(), cases.len());
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while got.len() < cases.len() {
        ch.poll(&mut |io| got.push((io.tag, io.status)));
        assert!(Instant::now() < deadline, "compares did not complete");
    }
    let want: Vec<(u64, IoStatus)> = cases
        .iter()
        .enumerate()
        .map(|(i, (_, st))| (i as u64, *st))
        .collect();
    assert_eq!(got, want);
    assert_eq!(ch.outstanding(), 0);
    // Range and size errors never reach the backend.
    let c = run(&mut ch, *compare_io(1000, 30, &expect[..30 * 512], 9));
    assert_eq!(c.status, IoStatus::OutOfRange);
    let c = run(&mut ch, *compare_io(0, 4, &expect[..1024], 9));
    assert_eq!(c.status, IoStatus::BufferTooSmall);
    // Statistics count compares (the successful ones), not the reads behind them.
    let st = reg.iostat("nocmp").unwrap();
    assert_eq!(st.num_compare_ops, 2);
    assert_eq!(st.num_read_ops, 0);
}

#[test]
fn null_completes_everything_and_compares_with_what_reads_return() {
    let reg = BdevRegistry::new();
    let b: Arc<dyn Bdev> = NullBdev::create(NullParams {
        name: "n0".into(),
        num_blocks: 1 << 20,
        block_size: 4096,
        physical_block_size: 0,
        uuid: None,
    })
    .unwrap();
    reg.register(Arc::clone(&b)).unwrap();
    let mut ch = reg.open_channel(&b).unwrap();
    let mut data = bufs(&[4096]);
    pattern(1, &mut data);
    assert_eq!(write(&mut ch, 0, 1, data, true).status, IoStatus::Success);
    assert_eq!(read(&mut ch, 5, 1, &[4096]).status, IoStatus::Success);
    let mut io = BdevIo::new(
        BdevOp::Compare {
            offset_blocks: 0,
            num_blocks: 1,
        },
        0,
    );
    io.bufs = bufs(&[4096]);
    assert_eq!(run(&mut ch, io).status, IoStatus::Success, "zeroes");
    let mut io = BdevIo::new(
        BdevOp::Compare {
            offset_blocks: 0,
            num_blocks: 1,
        },
        0,
    );
    let mut data = bufs(&[4096]);
    pattern(2, &mut data);
    io.bufs = data;
    assert_eq!(run(&mut ch, io).status, IoStatus::Miscompare);
}

fn temp_file(name: &str, bytes: u64) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("rtgt-bdev-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let f = std::fs::File::create(&p).unwrap();
    f.set_len(bytes).unwrap();
    p
}

fn aio(name: &str, path: &std::path::Path, engine: AioEngine, bs: Option<u32>) -> Arc<AioBdev> {
    AioBdev::create(AioParams {
        name: name.into(),
        filename: path.to_string_lossy().into(),
        block_size: bs,
        readonly: false,
        fallocate: true,
        uuid: None,
        engine: Some(engine),
        uring_module: false,
    })
    .unwrap()
}

#[test]
fn aio_verifies_data_with_io_uring_and_threads() {
    for (engine, bs) in [
        (AioEngine::Uring, None),
        (AioEngine::Uring, Some(4096)),
        (AioEngine::Threads, None),
        (AioEngine::Threads, Some(4096)),
    ] {
        let path = temp_file(&format!("{engine:?}-{bs:?}"), 1 << 20);
        let reg = BdevRegistry::new();
        let b = aio("a0", &path, engine, bs);
        assert_eq!(b.engine(), engine);
        assert_eq!(b.block_size(), bs.unwrap_or(512));
        assert_eq!(b.num_blocks(), (1 << 20) / u64::from(bs.unwrap_or(512)));
        let b: Arc<dyn Bdev> = b;
        reg.register(Arc::clone(&b)).unwrap();
        exercise(&reg, Arc::clone(&b));

        // The data is really in the file.
        let bsz = b.block_size() as usize;
        let mut ch = reg.open_channel(&b).unwrap();
        let mut data = bufs(&[bsz]);
        pattern(9, &mut data);
        let expect = concat(&data);
        assert_eq!(write(&mut ch, 10, 1, data, true).status, IoStatus::Success);
        let file = std::fs::read(&path).unwrap();
        assert_eq!(&file[10 * bsz..11 * bsz], &expect[..]);
        drop(ch);
        reg.unregister("a0").unwrap();
        std::fs::remove_file(&path).unwrap();
    }
}

#[test]
fn aio_handles_buffers_o_direct_cannot_take() {
    let path = temp_file("misaligned", 1 << 16);
    let reg = BdevRegistry::new();
    let b: Arc<dyn Bdev> = aio("a1", &path, AioEngine::Uring, None);
    reg.register(Arc::clone(&b)).unwrap();
    let mut ch = reg.open_channel(&b).unwrap();
    let mut buf = IoBuf::alloc(4096).unwrap();
    buf.set_window(64, 512);
    buf.as_mut_slice().fill(0x5a);
    let mut data = IoBufs::new();
    data.push(buf);
    assert_eq!(write(&mut ch, 2, 1, data, false).status, IoStatus::Success);
    let r = read(&mut ch, 2, 1, &[512]);
    assert!(r.bufs[0].as_slice().iter().all(|&x| x == 0x5a));
}

#[test]
fn aio_rejects_what_it_cannot_be() {
    let path = temp_file("small", 100);
    let err = AioBdev::create(AioParams {
        name: "s".into(),
        filename: path.to_string_lossy().into(),
        block_size: None,
        readonly: false,
        fallocate: false,
        uuid: None,
        engine: None,
        uring_module: false,
    })
    .unwrap_err();
    assert!(err.to_string().contains("no complete"), "{err}");
    let err = AioBdev::create(AioParams {
        name: "s".into(),
        filename: "/nonexistent/rtgt".into(),
        block_size: None,
        readonly: false,
        fallocate: false,
        uuid: None,
        engine: None,
        uring_module: false,
    })
    .unwrap_err();
    assert_eq!(err.errno(), -libc::ENOENT);

    // Read-only: writes are refused before reaching the file.
    let path = temp_file("ro", 1 << 16);
    let b: Arc<dyn Bdev> = AioBdev::create(AioParams {
        name: "ro".into(),
        filename: path.to_string_lossy().into(),
        block_size: None,
        readonly: true,
        fallocate: true,
        uuid: None,
        engine: None,
        uring_module: false,
    })
    .unwrap();
    assert!(!b.supports(IoType::Write) && !b.supports(IoType::Unmap));
    let reg = BdevRegistry::new();
    reg.register(Arc::clone(&b)).unwrap();
    let mut ch = reg.open_channel(&b).unwrap();
    assert_eq!(
        write(&mut ch, 0, 1, bufs(&[512]), false).status,
        IoStatus::Unsupported
    );
}

#[test]
fn registry_names_claims_and_deletes() {
    let reg = BdevRegistry::new();
    reg.register(malloc("a", 8, 512)).unwrap();
    assert!(matches!(
        reg.register(malloc("a", 8, 512)),
        Err(BdevError::Exists(_))
    ));
    let claim = Claim {
        module: "nvmf".into(),
        holder: "nqn.x nsid 1".into(),
    };
    reg.claim("a", claim.clone()).unwrap();
    let err = reg.claim("a", claim.clone()).unwrap_err();
    assert!(err.to_string().contains("already claimed by nvmf"), "{err}");
    assert!(matches!(
        reg.unregister("a"),
        Err(BdevError::Claimed { .. })
    ));
    assert_eq!(reg.claim_of("a"), Some(claim));
    reg.release("a");
    reg.unregister("a").unwrap();
    assert!(matches!(reg.unregister("a"), Err(BdevError::NotFound(_))));
    assert_eq!(BdevError::NotFound("x".into()).errno(), -19);
    assert_eq!(BdevError::Exists("x".into()).errno(), -17);

    reg.register(malloc("Malloc0", 8, 512)).unwrap();
    assert_eq!(reg.next_malloc_name(), "Malloc1");
    reg.register(malloc("b", 8, 512)).unwrap();
    assert_eq!(reg.names(), vec!["Malloc0", "b"]);
}

#[test]
fn iostat_survives_closed_channels() {
    let reg = BdevRegistry::new();
    let b = malloc("s", 16, 512);
    reg.register(Arc::clone(&b)).unwrap();
    for _ in 0..3 {
        let mut ch = reg.open_channel(&b).unwrap();
        read(&mut ch, 0, 1, &[512]);
    }
    assert_eq!(reg.iostat("s").unwrap().num_read_ops, 3);
    assert_eq!(reg.iostat("s").unwrap().bytes_read, 3 * 512);
    assert!(reg.iostat("nope").is_none());
}

#[test]
fn spdk_histogram_follows_enable_counts_every_channel_and_filters_by_type() {
    use spdk_hist::HistogramConfig;
    let reg = BdevRegistry::new();
    let b = malloc("h", 16, 512);
    reg.register(Arc::clone(&b)).unwrap();
    let mut open = reg.open_channel(&b).unwrap();
    read(&mut open, 0, 1, &[512]);
    assert!(
        reg.spdk_histogram("h").is_err(),
        "off: an error, as in SPDK"
    );
    assert!(matches!(
        reg.spdk_histogram("nope"),
        Err(BdevError::NotFound(_))
    ));

    // An open channel follows the switch at its next poll; its earlier I/O is not counted.
    reg.set_histogram("h", Some(HistogramConfig::default()))
        .unwrap();
    read(&mut open, 0, 1, &[512]);
    write(&mut open, 0, 1, bufs(&[512]), false);
    {
        // A channel opened (and closed) later counts too.
        let mut later = reg.open_channel(&b).unwrap();
        read(&mut later, 1, 1, &[512]);
    }
    let (cfg, buckets) = reg.spdk_histogram("h").unwrap();
    assert_eq!(cfg, HistogramConfig::default());
    assert_eq!(buckets.len(), cfg.num_buckets());
    assert_eq!(buckets.iter().sum::<u64>(), 3);

    // Reads only, coarser: counts restart.
    let reads = HistogramConfig {
        granularity: 3,
        io_type: Some(IoType::Read),
        ..Default::default()
    };
    reg.set_histogram("h", Some(reads)).unwrap();
    write(&mut open, 0, 1, bufs(&[512]), false);
    read(&mut open, 0, 1, &[512]);
    let (cfg, buckets) = reg.spdk_histogram("h").unwrap();
    assert_eq!(cfg, reads);
    assert_eq!(
        buckets.len(),
        8 * (cfg.max_range() - cfg.min_range() + 1) as usize
    );
    assert_eq!(buckets.iter().sum::<u64>(), 1, "the write is not tallied");
    assert_eq!(reg.histogram_config("h"), Some(Some(reads)));

    let bad = HistogramConfig {
        granularity: 0,
        ..Default::default()
    };
    assert!(matches!(
        reg.set_histogram("h", Some(bad)),
        Err(BdevError::Invalid(_))
    ));
    reg.set_histogram("h", None).unwrap();
    read(&mut open, 0, 1, &[512]);
    assert!(reg.spdk_histogram("h").is_err());
    assert_eq!(reg.histogram_config("h"), Some(None));
}

#[test]
fn open_channels_name_their_thread_and_bdev() {
    let reg = BdevRegistry::new();
    let b = malloc("c", 16, 512);
    reg.register(Arc::clone(&b)).unwrap();
    let one = reg.open_channel(&b).unwrap();
    let two = reg.open_channel(&b).unwrap();
    // Outside a reactor the thread id is 0.
    assert_eq!(
        reg.open_channels(),
        vec![(0, "c".to_string()), (0, "c".to_string())]
    );
    drop(one);
    assert_eq!(reg.open_channels().len(), 1);
    drop(two);
    assert!(reg.open_channels().is_empty());
}

fn delay_params(name: &str, base: &str, us: u64) -> DelayParams {
    DelayParams {
        name: name.into(),
        base_bdev_name: base.into(),
        uuid: None,
        avg_read_latency: us,
        p99_read_latency: us,
        avg_write_latency: us,
        p99_write_latency: us,
    }
}

#[test]
fn delay_over_malloc_and_aio_verifies_data() {
    let reg = BdevRegistry::new();
    reg.register(malloc("m", 64, 4096)).unwrap();
    let d: Arc<dyn Bdev> = DelayBdev::create(&reg, delay_params("d0", "m", 0)).unwrap();
    exercise(&reg, d);

    // An aio base completes asynchronously: the delay channel sleeps on its wake fd.
    let path = temp_file("delay-base", 1 << 20);
    reg.register(aio("a", &path, AioEngine::Uring, None))
        .unwrap();
    let d: Arc<dyn Bdev> = DelayBdev::create(&reg, delay_params("d1", "a", 200)).unwrap();
    let ch = reg.open_channel(&d).unwrap();
    assert!(ch.wake_fd().is_some(), "the base channel's wake fd");
    drop(ch);
    exercise(&reg, Arc::clone(&d));
    assert!(reg.iostat("d1").unwrap().num_read_ops >= 4);
    reg.unregister("d1").unwrap();
    reg.unregister("a").unwrap();
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn iostat_resets_and_per_channel_views_cover_open_and_closed_channels() {
    let reg = BdevRegistry::new();
    let b = malloc("r", 16, 512);
    reg.register(Arc::clone(&b)).unwrap();
    let mut open = reg.open_channel(&b).unwrap();
    read(&mut open, 0, 1, &[512]);
    {
        let mut closed = reg.open_channel(&b).unwrap();
        read(&mut closed, 0, 2, &[1024]);
    }
    let per = reg.iostat_per_channel("r").unwrap();
    assert_eq!(per.len(), 1, "only open channels are listed");
    assert_eq!(per[0].0, 0, "opened outside a reactor");
    assert_eq!(per[0].1.num_read_ops, 1);
    assert_eq!(reg.iostat("r").unwrap().bytes_read, 3 * 512);

    reg.reset_iostat(Some("r"), ResetMode::All).unwrap();
    assert_eq!(reg.iostat("r").unwrap(), IoStatSnapshot::default());
    read(&mut open, 0, 1, &[512]);
    assert_eq!(reg.iostat("r").unwrap().num_read_ops, 1);
    reg.reset_iostat(None, ResetMode::MaxMin).unwrap();
    let s = reg.iostat("r").unwrap();
    assert_eq!((s.num_read_ops, s.max_read_latency_ns), (1, 0));
    assert!(matches!(
        reg.reset_iostat(Some("nope"), ResetMode::All),
        Err(BdevError::NotFound(_))
    ));
}

#[test]
fn null_resize_grows_tells_the_hooks_and_never_shrinks_a_bdev_in_use() {
    let reg = BdevRegistry::new();
    let b = NullBdev::create(NullParams {
        name: "n".into(),
        num_blocks: 2048,
        block_size: 512,
        physical_block_size: 0,
        uuid: None,
    })
    .unwrap();
    reg.register(Arc::clone(&b) as Arc<dyn Bdev>).unwrap();
    let heard = Arc::new(parking_lot::Mutex::new(Vec::<String>::new()));
    let h = Arc::clone(&heard);
    reg.on_resize(Arc::new(move |name| h.lock().push(name.to_string())));

    b.resize(&reg, 2).unwrap();
    assert_eq!(b.num_blocks(), 4096);
    assert_eq!(
        b.config()["params"]["num_blocks"],
        4096,
        "save_config writes the new size"
    );
    assert_eq!(*heard.lock(), ["n"]);
    // The same size: nothing to tell. Smaller: EINVAL, as SPDK's bdev_null_resize.
    b.resize(&reg, 2).unwrap();
    let e = b.resize(&reg, 1).unwrap_err();
    assert_eq!(e.errno(), -libc::EINVAL, "{e}");
    assert_eq!((b.num_blocks(), heard.lock().len()), (4096, 1));

    // The registry's own rule (SPDK's notify_blockcnt_change): a claimed bdev, or one with an
    // open channel, cannot shrink; an unused one can.
    let set = |n: u64| assert_eq!(n, 1024, "applied only when allowed");
    reg.claim(
        "n",
        Claim {
            module: "nvmf".into(),
            holder: "nqn.x nsid 1".into(),
        },
    )
    .unwrap();
    let e = reg.change_blockcnt("n", 4096, 1024, set).unwrap_err();
    assert_eq!(e.errno(), -libc::EBUSY);
    assert!(e.to_string().contains("nqn.x nsid 1"), "{e}");
    reg.release("n");
    let ch = reg
        .open_channel(&(Arc::clone(&b) as Arc<dyn Bdev>))
        .unwrap();
    let e = reg.change_blockcnt("n", 4096, 1024, set).unwrap_err();
    assert!(e.to_string().contains("open I/O channels"), "{e}");
    drop(ch);
    reg.change_blockcnt("n", 4096, 1024, set).unwrap();
    assert_eq!(heard.lock().len(), 2);
}
