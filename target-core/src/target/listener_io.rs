//! I/O counters per listener, per poll group: what the metrics endpoint reports for each
//! listener (and, summed, for each transport), and `nvmf_get_stats` lists per poll group.
//!
//! A poll group keeps one [`ListenerIo`] per listen address its queues came through. A queue
//! takes its listener's counters when it is created and bumps them as it builds each I/O
//! completion (single writer: plain stores, no lock, no read-modify-write). Admin and fabrics
//! commands are not counted.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

use crate::nvme::spec::io_opc;
use crate::nvme::{Sqe, Status};
use crate::scsi::ScsiIo;
use crate::scsi::sense::{ScsiStatus, Sense, SenseKey};
use crate::target::ListenAddr;

/// Error classes, by NVMe Status Code Type (the SCSI side maps its sense keys onto them).
pub const ERROR_CLASSES: [&str; 4] = ["generic", "command_specific", "media", "path"];

/// The counters of one listener on one poll group.
#[derive(Debug, Default)]
pub struct ListenerIo {
    reads: AtomicU64,
    writes: AtomicU64,
    other: AtomicU64,
    bytes_read: AtomicU64,
    bytes_written: AtomicU64,
    /// By [`ERROR_CLASSES`] (vendor-specific codes count as generic).
    errors: [AtomicU64; 4],
}

fn bump(a: &AtomicU64, v: u64) {
    a.store(a.load(Ordering::Relaxed).wrapping_add(v), Ordering::Relaxed);
}

/// What [`ListenerIo`] counted, summable.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ListenerIoSnapshot {
    /// Reads completed (successful or not).
    pub reads: u64,
    /// Writes completed.
    pub writes: u64,
    /// Other I/O commands completed (flush, write zeroes, DSM, compare, reservations, ...).
    pub other: u64,
    /// Bytes of successful reads.
    pub bytes_read: u64,
    /// Bytes of successful writes.
    pub bytes_written: u64,
    /// Failed commands by [`ERROR_CLASSES`].
    pub errors: [u64; 4],
}

impl ListenerIoSnapshot {
    /// Adds `o` in.
    pub fn add(&mut self, o: &ListenerIoSnapshot) {
        self.reads += o.reads;
        self.writes += o.writes;
        self.other += o.other;
        self.bytes_read += o.bytes_read;
        self.bytes_written += o.bytes_written;
        for (a, b) in self.errors.iter_mut().zip(o.errors) {
            *a += b;
        }
    }

    /// The JSON of `nvmf_get_stats` (`listeners` of a poll group).
    pub fn to_json(&self) -> Value {
        let errors: serde_json::Map<String, Value> = ERROR_CLASSES
            .iter()
            .zip(self.errors)
            .map(|(k, v)| ((*k).to_string(), json!(v)))
            .collect();
        json!({
            "reads": self.reads,
            "writes": self.writes,
            "other_ops": self.other,
            "bytes_read": self.bytes_read,
            "bytes_written": self.bytes_written,
            "errors": errors,
        })
    }
}

/// What an I/O command was, for [`ListenerIo::count`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IoKind {
    /// A read.
    Read,
    /// A write.
    Write,
    /// Anything else (flush, write zeroes, unmap, compare, reservations, ...).
    Other,
}

impl ListenerIo {
    /// Counts an I/O command of `kind` moving `bytes` that failed with error class `error`
    /// (an index into [`ERROR_CLASSES`]) or succeeded (`None`; only then are bytes counted).
    #[inline]
    pub fn count(&self, kind: IoKind, bytes: u64, error: Option<usize>) {
        let ok = error.is_none();
        match kind {
            IoKind::Read => {
                bump(&self.reads, 1);
                if ok {
                    bump(&self.bytes_read, bytes);
                }
            }
            IoKind::Write => {
                bump(&self.writes, 1);
                if ok {
                    bump(&self.bytes_written, bytes);
                }
            }
            IoKind::Other => bump(&self.other, 1),
        }
        if let Some(class) = error {
            bump(&self.errors[class.min(3)], 1);
        }
    }

    /// Counts an NVMe I/O command from its SQE (data length from its first SGL descriptor)
    /// and status (error class = Status Code Type; vendor-specific counts as generic).
    #[inline]
    pub fn count_nvme(&self, sqe: &Sqe, status: Status) {
        let d = sqe.sgl1();
        let bytes = match d.sgl_type() {
            // Data block (in-capsule) / keyed data block (RDMA).
            0 => u64::from(d.length()),
            4 => u64::from(d.keyed_length()),
            _ => 0,
        };
        let kind = match sqe.opcode() {
            io_opc::READ => IoKind::Read,
            io_opc::WRITE => IoKind::Write,
            _ => IoKind::Other,
        };
        let error = (status != Status::SUCCESS).then(|| match status.sct() {
            s @ 1..=3 => s as usize,
            _ => 0,
        });
        self.count(kind, bytes, error);
    }

    /// Counts a SCSI command: ALUA NOT READY (04h/0Ah-0Ch) is a path error, MEDIUM ERROR,
    /// HARDWARE ERROR and MISCOMPARE media errors, anything else generic.
    #[inline]
    pub fn count_scsi(
        &self,
        op: Option<ScsiIo>,
        bytes: u64,
        status: ScsiStatus,
        sense: Option<&Sense>,
    ) {
        let kind = match op {
            Some(ScsiIo::Read { .. }) => IoKind::Read,
            Some(ScsiIo::Write { .. }) => IoKind::Write,
            _ => IoKind::Other,
        };
        let error = (status != ScsiStatus::Good).then(|| match sense {
            Some(s)
                if s.key == SenseKey::NotReady
                    && s.asc == 0x04
                    && (0x0A..=0x0C).contains(&s.ascq) =>
            {
                3
            }
            Some(s)
                if matches!(
                    s.key,
                    SenseKey::MediumError | SenseKey::HardwareError | SenseKey::Miscompare
                ) =>
            {
                2
            }
            _ => 0,
        });
        self.count(kind, bytes, error);
    }

    /// The current values.
    pub fn snapshot(&self) -> ListenerIoSnapshot {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ListenerIoSnapshot {
            reads: l(&self.reads),
            writes: l(&self.writes),
            other: l(&self.other),
            bytes_read: l(&self.bytes_read),
            bytes_written: l(&self.bytes_written),
            errors: std::array::from_fn(|i| l(&self.errors[i])),
        }
    }
}

/// A poll group's listeners and their counters, in first-use order. Counters stay after the
/// listener goes (they are cumulative, like every Prometheus counter).
#[derive(Debug, Default)]
pub struct ListenerIoTable {
    entries: Vec<(ListenAddr, Arc<ListenerIo>)>,
}

impl ListenerIoTable {
    /// The counters of `addr` (made at its first queue).
    pub fn get(&mut self, addr: &ListenAddr) -> Arc<ListenerIo> {
        if let Some((_, c)) = self.entries.iter().find(|(a, _)| a == addr) {
            return Arc::clone(c);
        }
        let c = Arc::new(ListenerIo::default());
        self.entries.push((addr.clone(), Arc::clone(&c)));
        c
    }

    /// Every listener's address and counters.
    pub fn snapshot(&self) -> Vec<(ListenAddr, ListenerIoSnapshot)> {
        self.entries
            .iter()
            .map(|(a, c)| (a.clone(), c.snapshot()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::SglDescriptor;
    use crate::target::AdrFam;

    #[test]
    fn reads_writes_bytes_and_errors_by_class() {
        let c = ListenerIo::default();
        let sqe = |opc, len: u32| {
            let mut q = Sqe::new(opc, 1);
            let mut d = [0u8; 16];
            d[8..12].copy_from_slice(&len.to_le_bytes());
            q.set_sgl1(SglDescriptor(d));
            q
        };
        c.count_nvme(&sqe(io_opc::READ, 4096), Status::SUCCESS);
        c.count_nvme(&sqe(io_opc::READ, 4096), Status::LBA_OUT_OF_RANGE);
        c.count_nvme(&sqe(io_opc::WRITE, 512), Status::SUCCESS);
        c.count_nvme(&sqe(io_opc::FLUSH, 0), crate::nvme::ana::ANA_INACCESSIBLE);
        c.count_nvme(&sqe(io_opc::COMPARE, 512), Status::COMPARE_FAILURE);
        let s = c.snapshot();
        assert_eq!((s.reads, s.writes, s.other), (2, 1, 2));
        assert_eq!((s.bytes_read, s.bytes_written), (4096, 512));
        // LBA out of range is generic, compare failure media, ANA inaccessible path.
        assert_eq!(s.errors, [1, 0, 1, 1]);
        assert_eq!(s.to_json()["errors"]["path"], 1);

        let scsi = ListenerIo::default();
        let read = Some(ScsiIo::Read {
            lba: 0,
            blocks: 8,
            fua: false,
        });
        scsi.count_scsi(read, 4096, ScsiStatus::Good, None);
        let transitioning = Sense::new(SenseKey::NotReady, 0x04, 0x0A);
        scsi.count_scsi(read, 0, ScsiStatus::CheckCondition, Some(&transitioning));
        let medium = Sense::new(SenseKey::MediumError, 0x11, 0x00);
        scsi.count_scsi(None, 0, ScsiStatus::CheckCondition, Some(&medium));
        scsi.count_scsi(None, 0, ScsiStatus::ReservationConflict, None);
        let s = scsi.snapshot();
        assert_eq!((s.reads, s.other, s.bytes_read), (2, 2, 4096));
        assert_eq!(s.errors, [1, 0, 1, 1]);
    }

    #[test]
    fn keyed_sgl_length_is_the_byte_count_and_the_table_reuses_entries() {
        let mut sqe = Sqe::new(io_opc::READ, 1);
        let mut d = [0u8; 16];
        d[8..11].copy_from_slice(&[0x00, 0x20, 0x00]); // 8 KiB
        d[15] = 0x40;
        sqe.set_sgl1(SglDescriptor(d));
        let mut t = ListenerIoTable::default();
        let a = ListenAddr::new("RDMA", AdrFam::Ipv4, "10.0.0.1", "4420");
        t.get(&a).count_nvme(&sqe, Status::SUCCESS);
        t.get(&a).count_nvme(&sqe, Status::SUCCESS);
        let snap = t.snapshot();
        assert_eq!(snap.len(), 1);
        assert_eq!((snap[0].1.reads, snap[0].1.bytes_read), (2, 16384));
    }
}
