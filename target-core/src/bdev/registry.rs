//! The set of bdevs known to the target, with claims and statistics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use parking_lot::Mutex;

use super::spdk_hist::{HistControl, HistogramConfig};
use super::{
    Bdev, BdevError, ChannelStats, HistKind, Histogram, IoChannel, IoStatSnapshot, Qos, QosLimits,
    ResetMode,
};

/// Who holds a bdev (SPDK's claim): a namespace owns its bdev exclusively for writing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    /// The claiming module, e.g. "nvmf".
    pub module: String,
    /// What holds it, for messages (e.g. "nqn.2016-06.io.spdk:cnode1 nsid 1").
    pub holder: String,
}

#[derive(Default)]
struct Entry {
    bdev: Option<Arc<dyn Bdev>>,
    claim: Option<Claim>,
    channels: Vec<Arc<ChannelStats>>,
    qos: Arc<Qos>,
    retired: IoStatSnapshot,
    /// Histograms of closed channels, by [`HistKind`].
    retired_hist: [Histogram; 3],
    /// The SPDK histogram switch (`bdev_enable_histogram`), shared with the channels.
    hist: Arc<HistControl>,
    /// SPDK histogram counts of closed channels, for the configuration in effect.
    retired_spdk: Vec<u64>,
}

impl Entry {
    /// Folds the channels that were closed into the retired totals.
    fn retire_closed(&mut self) {
        let mut i = 0;
        while i < self.channels.len() {
            if Arc::strong_count(&self.channels[i]) == 1 {
                let c = self.channels.remove(i);
                c.add_to(&mut self.retired);
                for kind in HistKind::ALL {
                    c.add_histogram(kind, &mut self.retired_hist[kind as usize]);
                }
                if let (Some(h), Some(cfg)) = (c.spdk_histogram(), self.hist.config())
                    && *h.config() == cfg
                {
                    self.retired_spdk.resize(cfg.num_buckets(), 0);
                    h.add_into(&mut self.retired_spdk);
                }
            } else {
                i += 1;
            }
        }
    }
}

/// Told a bdev's name after its block count changed (see [`BdevRegistry::change_blockcnt`]).
/// Runs on the thread that changed the size, never on a reactor's I/O path; it must not block.
pub type ResizeHook = Arc<dyn Fn(&str) + Send + Sync>;

/// All bdevs, in creation order (the order save_config replays them).
#[derive(Default)]
pub struct BdevRegistry {
    entries: Mutex<Vec<(String, Entry)>>,
    malloc_seq: AtomicU32,
    resize_hooks: Mutex<Vec<ResizeHook>>,
}

impl std::fmt::Debug for BdevRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl BdevRegistry {
    /// An empty registry.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Adds a bdev; its name must be unique.
    pub fn register(&self, bdev: Arc<dyn Bdev>) -> Result<(), BdevError> {
        let mut entries = self.entries.lock();
        let name = bdev.name().to_string();
        if entries.iter().any(|(n, _)| *n == name) {
            return Err(BdevError::Exists(name));
        }
        tracing::info!(
            "bdev {name}: {} ({} blocks of {} bytes)",
            bdev.product_name(),
            bdev.num_blocks(),
            bdev.block_size()
        );
        entries.push((
            name,
            Entry {
                bdev: Some(bdev),
                ..Entry::default()
            },
        ));
        Ok(())
    }

    /// Removes a bdev that nobody claims, destroying its backend.
    ///
    /// [`Bdev::destroy`] runs after the registry's lock is released, so a virtual bdev may call
    /// back into the registry from it (a delay bdev releases its claim on its base there).
    pub fn unregister(&self, name: &str) -> Result<Arc<dyn Bdev>, BdevError> {
        let mut entries = self.entries.lock();
        let pos = entries
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| BdevError::NotFound(name.to_string()))?;
        if let Some(c) = &entries[pos].1.claim {
            return Err(BdevError::Claimed {
                name: name.to_string(),
                by: format!("{} ({})", c.module, c.holder),
            });
        }
        let (_, entry) = entries.remove(pos);
        drop(entries);
        let bdev = entry.bdev.expect("registered entries hold a bdev");
        bdev.destroy();
        tracing::info!("bdev {name} deleted");
        Ok(bdev)
    }

    /// The bdev with this name.
    pub fn get(&self, name: &str) -> Option<Arc<dyn Bdev>> {
        self.entries
            .lock()
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, e)| e.bdev.clone())
    }

    /// Every bdev, in creation order.
    pub fn list(&self) -> Vec<Arc<dyn Bdev>> {
        self.entries
            .lock()
            .iter()
            .filter_map(|(_, e)| e.bdev.clone())
            .collect()
    }

    /// Every bdev name, in creation order.
    pub fn names(&self) -> Vec<String> {
        self.entries.lock().iter().map(|(n, _)| n.clone()).collect()
    }

    /// Claims a bdev for exclusive use.
    pub fn claim(&self, name: &str, claim: Claim) -> Result<Arc<dyn Bdev>, BdevError> {
        let mut entries = self.entries.lock();
        let (_, e) = entries
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| BdevError::NotFound(name.to_string()))?;
        if let Some(c) = &e.claim {
            return Err(BdevError::Claimed {
                name: name.to_string(),
                by: format!("{} ({})", c.module, c.holder),
            });
        }
        e.claim = Some(claim);
        Ok(e.bdev.clone().expect("registered entries hold a bdev"))
    }

    /// Releases a claim. Releasing an unclaimed or missing bdev is a no-op.
    pub fn release(&self, name: &str) {
        if let Some((_, e)) = self.entries.lock().iter_mut().find(|(n, _)| n == name) {
            e.claim = None;
        }
    }

    /// The claim on a bdev, if any.
    pub fn claim_of(&self, name: &str) -> Option<Claim> {
        self.entries
            .lock()
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, e)| e.claim.clone())
    }

    /// Adds a hook told of every bdev resize (the target re-reads its namespaces from it).
    pub fn on_resize(&self, hook: ResizeHook) {
        self.resize_hooks.lock().push(hook);
    }

    /// A bdev's block count changes from `old` to `new` (SPDK's
    /// `spdk_bdev_notify_blockcnt_change`): `apply` stores the new count in the bdev, then the
    /// resize hooks hear of it. As in SPDK, a bdev that is in use (claimed, e.g. by a
    /// namespace, or with an I/O channel open) cannot shrink: `EBUSY`, and `apply` is not
    /// called. A bdev not (or no longer) registered is resized without telling anyone.
    pub fn change_blockcnt(
        &self,
        name: &str,
        old: u64,
        new: u64,
        apply: impl FnOnce(u64),
    ) -> Result<(), BdevError> {
        if old == new {
            return Ok(());
        }
        {
            let mut entries = self.entries.lock();
            let entry = entries.iter_mut().find(|(n, _)| n == name).map(|(_, e)| e);
            if let Some(e) = entry {
                e.retire_closed();
                if new < old && (e.claim.is_some() || !e.channels.is_empty()) {
                    let by = e
                        .claim
                        .as_ref()
                        .map_or_else(|| "open I/O channels".to_string(), |c| c.holder.clone());
                    return Err(BdevError::InUse(format!(
                        "bdev {name} cannot shrink from {old} to {new} blocks while it is in \
                         use ({by})"
                    )));
                }
            }
            // The size changes under the lock, so a claim cannot slip in between.
            apply(new);
        }
        tracing::info!("bdev {name}: resized from {old} to {new} blocks");
        let hooks: Vec<ResizeHook> = self.resize_hooks.lock().clone();
        for h in hooks {
            h(name);
        }
        Ok(())
    }

    /// Opens an I/O channel on the calling reactor, with statistics counted for this bdev.
    pub fn open_channel(&self, bdev: &Arc<dyn Bdev>) -> Result<IoChannel, BdevError> {
        let inner = bdev.open_channel()?;
        let thread_id = crate::reactor::Reactors::current().map_or(0, |i| i as u64 + 1);
        let stats = Arc::new(ChannelStats::new(thread_id));
        let (qos, hist) = match self
            .entries
            .lock()
            .iter_mut()
            .find(|(n, _)| n == bdev.name())
        {
            Some((_, e)) => {
                e.channels.push(Arc::clone(&stats));
                (Arc::clone(&e.qos), Arc::clone(&e.hist))
            }
            None => (Arc::default(), Arc::default()),
        };
        Ok(IoChannel::new(Arc::clone(bdev), inner, stats, qos, hist))
    }

    /// Summed statistics of a bdev over all its channels, past and present, since the last
    /// reset.
    pub fn iostat(&self, name: &str) -> Option<IoStatSnapshot> {
        self.with_stats(name, |e| {
            let mut snap = e.retired.clone();
            for c in &e.channels {
                c.add_to(&mut snap);
            }
            snap
        })
    }

    /// Runs `f` on a bdev's entry once its closed channels are folded into the retired totals.
    fn with_stats<R>(&self, name: &str, f: impl FnOnce(&Entry) -> R) -> Option<R> {
        let mut entries = self.entries.lock();
        let (_, e) = entries.iter_mut().find(|(n, _)| n == name)?;
        e.retire_closed();
        Some(f(e))
    }

    /// Statistics of each open channel of a bdev, by owning thread (`bdev_get_iostat
    /// per_channel`), in the order the channels were opened.
    pub fn iostat_per_channel(&self, name: &str) -> Option<Vec<(u64, IoStatSnapshot)>> {
        self.with_stats(name, |e| {
            e.channels
                .iter()
                .map(|c| (c.thread_id(), c.snapshot()))
                .collect()
        })
    }

    /// A bdev's latency histogram of `kind` over all its channels, past and present (never
    /// reset: metrics are cumulative).
    pub fn histogram(&self, name: &str, kind: HistKind) -> Option<Histogram> {
        self.with_stats(name, |e| {
            let mut h: Histogram = e.retired_hist[kind as usize];
            for c in &e.channels {
                c.add_histogram(kind, &mut h);
            }
            h
        })
    }

    /// Turns a bdev's SPDK latency histogram on with `config` (counts restart) or off
    /// (`bdev_enable_histogram`). Each channel follows at its next poll.
    pub fn set_histogram(
        &self,
        name: &str,
        config: Option<HistogramConfig>,
    ) -> Result<(), BdevError> {
        if let Some(c) = &config {
            c.validate().map_err(BdevError::Invalid)?;
        }
        let mut entries = self.entries.lock();
        let (_, e) = entries
            .iter_mut()
            .find(|(n, _)| n == name)
            .ok_or_else(|| BdevError::NotFound(name.to_owned()))?;
        e.retire_closed();
        e.retired_spdk.clear();
        e.hist.set(config);
        tracing::info!("bdev {name}: latency histogram {config:?}");
        Ok(())
    }

    /// The SPDK histogram configuration of a bdev (`None`: off); `None` outside for no bdev.
    pub fn histogram_config(&self, name: &str) -> Option<Option<HistogramConfig>> {
        self.entries
            .lock()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e.hist.config())
    }

    /// A bdev's SPDK histogram: its configuration and the bucket counts summed over its
    /// channels, past and present, since it was enabled (`bdev_get_histogram`).
    pub fn spdk_histogram(&self, name: &str) -> Result<(HistogramConfig, Vec<u64>), BdevError> {
        self.with_stats(name, |e| {
            let cfg = e.hist.config().ok_or_else(|| {
                BdevError::Invalid(format!(
                    "the latency histogram of bdev '{name}' is not enabled"
                ))
            })?;
            let mut acc = vec![0u64; cfg.num_buckets()];
            for (a, r) in acc.iter_mut().zip(&e.retired_spdk) {
                *a += r;
            }
            for c in &e.channels {
                if let Some(h) = c.spdk_histogram()
                    && *h.config() == cfg
                {
                    h.add_into(&mut acc);
                }
            }
            Ok((cfg, acc))
        })
        .unwrap_or_else(|| Err(BdevError::NotFound(name.to_owned())))
    }

    /// The bdev channels open on each thread (`thread_get_io_channels`): `(thread id, bdev
    /// name)` for every open channel, in bdev order.
    pub fn open_channels(&self) -> Vec<(u64, String)> {
        let mut entries = self.entries.lock();
        let mut out = Vec::new();
        for (n, e) in entries.iter_mut() {
            e.retire_closed();
            out.extend(e.channels.iter().map(|c| (c.thread_id(), n.clone())));
        }
        out
    }

    /// Sets a bdev's rate limits (`bdev_set_qos_limit`); every channel, open or future, applies
    /// them from its next I/O.
    pub fn set_qos(&self, name: &str, limits: QosLimits) -> Result<(), BdevError> {
        limits.validate().map_err(BdevError::Invalid)?;
        let entries = self.entries.lock();
        let (_, e) = entries
            .iter()
            .find(|(n, _)| n == name)
            .ok_or_else(|| BdevError::NotFound(name.to_owned()))?;
        e.qos.set(limits);
        tracing::info!("bdev {name}: QoS limits {limits:?}");
        Ok(())
    }

    /// A bdev's rate limits.
    pub fn qos(&self, name: &str) -> Option<QosLimits> {
        self.entries
            .lock()
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, e)| e.qos.limits())
    }

    /// Resets the statistics of one bdev, or of every bdev (`bdev_reset_iostat`).
    pub fn reset_iostat(&self, name: Option<&str>, mode: ResetMode) -> Result<(), BdevError> {
        let mut entries = self.entries.lock();
        let mut found = false;
        for (n, e) in entries.iter_mut() {
            if name.is_some_and(|want| want != n) {
                continue;
            }
            found = true;
            e.retire_closed();
            e.retired.reset(mode);
            for c in &e.channels {
                c.reset(mode);
            }
        }
        match name {
            Some(n) if !found => Err(BdevError::NotFound(n.to_owned())),
            _ => Ok(()),
        }
    }

    /// The next default malloc name (`Malloc0`, `Malloc1`, …), skipping names in use.
    pub fn next_malloc_name(&self) -> String {
        loop {
            let n = self.malloc_seq.fetch_add(1, Ordering::Relaxed);
            let name = format!("Malloc{n}");
            if self.get(&name).is_none() {
                return name;
            }
        }
    }
}
