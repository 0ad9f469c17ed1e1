//! Pipelined I/O with verification.

use std::collections::HashMap;

use super::ctrl::{pattern, read_sqe, write_sqe};
use super::queue::{Data, HostError, HostQueue};

/// How write data travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// In the command capsule.
    InCapsule,
    /// Keyed SGL on the data registration (subtype 0x0).
    Keyed,
    /// Keyed SGL through a memory window the target invalidates (subtype 0xF).
    KeyedInvalidate,
}

/// An I/O workload on one queue: `count` commands of `blocks` blocks from `lba0` (command `i`
/// at `lba0 + i·blocks`), at most `qd` outstanding.
#[derive(Debug, Clone, Copy)]
pub struct Workload {
    /// Namespace.
    pub nsid: u32,
    /// Block size.
    pub bs: usize,
    /// First LBA.
    pub lba0: u64,
    /// Blocks per command.
    pub blocks: u32,
    /// Commands.
    pub count: usize,
    /// Queue depth.
    pub qd: usize,
    /// Pattern seed.
    pub seed: u32,
}

impl Workload {
    fn lba(&self, i: usize) -> u64 {
        self.lba0 + (i as u64) * u64::from(self.blocks)
    }
}

fn run(q: &mut HostQueue, w: &Workload, write: bool, mode: Mode) -> Result<(), HostError> {
    let len = w.blocks as usize * w.bs;
    let mut next = 0usize;
    let mut inflight: HashMap<u16, usize> = HashMap::new();
    let mut progress = std::time::Instant::now();
    while next < w.count || !inflight.is_empty() {
        while next < w.count && inflight.len() < w.qd {
            let lba = w.lba(next);
            let cid = if write {
                let data = pattern(w.seed, lba, w.blocks, w.bs);
                let d = match mode {
                    Mode::InCapsule => Data::InCapsule(&data),
                    Mode::Keyed => Data::KeyedWrite {
                        bytes: &data,
                        invalidate: false,
                    },
                    Mode::KeyedInvalidate => Data::KeyedWrite {
                        bytes: &data,
                        invalidate: true,
                    },
                };
                q.submit(write_sqe(w.nsid, lba, w.blocks), d)?
            } else {
                q.submit(
                    read_sqe(w.nsid, lba, w.blocks),
                    Data::KeyedRead {
                        len: len as u32,
                        invalidate: mode == Mode::KeyedInvalidate,
                    },
                )?
            };
            inflight.insert(cid, next);
            next += 1;
        }
        let done: Vec<u16> = inflight.keys().copied().filter(|&c| q.is_done(c)).collect();
        if done.is_empty() {
            q.poll()?;
            if q.is_disconnected() {
                return Err(HostError::Disconnected);
            }
            if progress.elapsed() > super::TIMEOUT {
                return Err(HostError::Timeout(format!(
                    "{} command(s) without a completion",
                    inflight.len()
                )));
            }
            continue;
        }
        progress = std::time::Instant::now();
        for cid in done {
            let i = inflight.remove(&cid).expect("known");
            let c = q.take(cid).expect("done").ok()?;
            let keyed_inv = mode == Mode::KeyedInvalidate && (write || len > 0);
            if keyed_inv && mode != Mode::InCapsule && c.invalidated.is_none() {
                return Err(HostError::Protocol(
                    "the target did not invalidate the memory window".into(),
                ));
            }
            if !write {
                let want = pattern(w.seed, w.lba(i), w.blocks, w.bs);
                if c.data != want {
                    let first = c
                        .data
                        .iter()
                        .zip(&want)
                        .position(|(a, b)| a != b)
                        .unwrap_or(0);
                    return Err(HostError::Protocol(format!(
                        "data mismatch at LBA {} byte {first} (cmd {i})",
                        w.lba(i)
                    )));
                }
            }
        }
    }
    Ok(())
}

/// Writes the workload's pattern.
pub fn write_all(q: &mut HostQueue, w: &Workload, mode: Mode) -> Result<(), HostError> {
    run(q, w, true, mode)
}

/// Reads the workload's range back and checks every byte against the pattern.
pub fn read_verify(q: &mut HostQueue, w: &Workload, invalidate: bool) -> Result<(), HostError> {
    run(
        q,
        w,
        false,
        if invalidate {
            Mode::KeyedInvalidate
        } else {
            Mode::Keyed
        },
    )
}

/// Writes then reads back and verifies.
pub fn write_read_verify(q: &mut HostQueue, w: &Workload, mode: Mode) -> Result<(), HostError> {
    write_all(q, w, mode)?;
    read_verify(q, w, mode == Mode::KeyedInvalidate)
}
