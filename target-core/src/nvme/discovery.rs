//! The discovery log page (LID 0x70): a 1024-byte header and one 1024-byte record per entry.
//!
//! The caller builds the entry list for one host (subsystems it may access on the port the
//! discovery connection came through, plus referrals and optionally the current discovery
//! subsystem), and owns the generation counter, which it increments whenever the list changes.
//! [`DiscoveryLog::read`] serves any byte range of the log without building it whole.

use super::spec::{NQN_FIELD_LEN, le};

/// Transport types (TRTYPE).
pub mod trtype {
    /// RDMA.
    pub const RDMA: u8 = 1;
    /// Fibre Channel.
    pub const FC: u8 = 2;
    /// TCP.
    pub const TCP: u8 = 3;
    /// Intra-host loopback.
    pub const LOOP: u8 = 0xFE;
}

/// Address families (ADRFAM).
pub mod adrfam {
    /// IPv4.
    pub const IPV4: u8 = 1;
    /// IPv6.
    pub const IPV6: u8 = 2;
    /// InfiniBand.
    pub const IB: u8 = 3;
    /// Fibre Channel.
    pub const FC: u8 = 4;
    /// Intra-host.
    pub const LOOP: u8 = 0xFE;
}

/// Subsystem types (SUBTYPE).
pub mod subtype {
    /// Referral to another discovery service.
    pub const REFERRAL: u8 = 1;
    /// An NVM subsystem.
    pub const NVME: u8 = 2;
    /// The discovery subsystem serving this log.
    pub const CURRENT_DISCOVERY: u8 = 3;
}

/// Transport requirements (TREQ).
pub mod treq {
    /// Secure channel: not specified.
    pub const SECURE_NOT_SPECIFIED: u8 = 0;
    /// Secure channel: required.
    pub const SECURE_REQUIRED: u8 = 1;
    /// Secure channel: not required.
    pub const SECURE_NOT_REQUIRED: u8 = 2;
    /// SQ flow control disable supported.
    pub const SQ_FLOW_CONTROL_DISABLE: u8 = 1 << 2;
}

/// Entry flags (EFLAGS).
pub mod eflags {
    /// Duplicate returned information.
    pub const DUPRETINFO: u16 = 1 << 0;
    /// Explicit persistent connection supported.
    pub const EPCSD: u16 = 1 << 1;
    /// No CDC connectivity.
    pub const NCC: u16 = 1 << 2;
}

/// Size of the log header and of each entry.
pub const DISCOVERY_RECORD_SIZE: usize = 1024;

/// Transport specific address subtype.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tsas {
    /// All zero.
    None,
    /// RDMA: QP type, provider type, connection management service, P_Key.
    Rdma {
        /// QPTYPE: 1 = reliable connected.
        qptype: u8,
        /// PRTYPE: 1 = not specified, 2 IB, 3 RoCE, 4 RoCEv2, 5 iWARP.
        prtype: u8,
        /// CMS: 1 = RDMA_CM.
        cms: u8,
        /// P_Key (IB only).
        pkey: u16,
    },
    /// TCP: security type (0 = none).
    Tcp {
        /// SECTYPE.
        sectype: u8,
    },
}

impl Tsas {
    /// The usual RDMA value: RC QP, provider not specified, RDMA_CM.
    pub const RDMA_CM: Tsas = Tsas::Rdma {
        qptype: 1,
        prtype: 1,
        cms: 1,
        pkey: 0,
    };
}

/// One discovery log entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiscoveryEntry<'a> {
    /// Transport type.
    pub trtype: u8,
    /// Address family.
    pub adrfam: u8,
    /// Subsystem type.
    pub subtype: u8,
    /// Transport requirements.
    pub treq: u8,
    /// Port id.
    pub portid: u16,
    /// Controller id: 0xFFFF for the dynamic model.
    pub cntlid: u16,
    /// Maximum admin SQ size.
    pub asqsz: u16,
    /// Entry flags.
    pub eflags: u16,
    /// Transport service id (e.g. "4420"), space-padded to 32 bytes.
    pub trsvcid: &'a str,
    /// Subsystem NQN.
    pub subnqn: &'a str,
    /// Transport address (never "0.0.0.0": use the address the host connected to),
    /// space-padded to 256 bytes.
    pub traddr: &'a str,
    /// Transport specific address subtype.
    pub tsas: Tsas,
}

impl<'a> DiscoveryEntry<'a> {
    /// An NVM subsystem reachable over RDMA with the usual values (dynamic CNTLID, ASQSZ 32,
    /// secure channel not required, RDMA_CM).
    pub fn nvme_rdma(
        subnqn: &'a str,
        adrfam: u8,
        traddr: &'a str,
        trsvcid: &'a str,
        portid: u16,
    ) -> DiscoveryEntry<'a> {
        DiscoveryEntry {
            trtype: trtype::RDMA,
            adrfam,
            subtype: subtype::NVME,
            treq: treq::SECURE_NOT_REQUIRED,
            portid,
            cntlid: 0xFFFF,
            asqsz: 32,
            eflags: 0,
            trsvcid,
            subnqn,
            traddr,
            tsas: Tsas::RDMA_CM,
        }
    }

    /// Encodes the 1024-byte record.
    pub fn encode(&self, out: &mut [u8; DISCOVERY_RECORD_SIZE]) {
        out.fill(0);
        out[0] = self.trtype;
        out[1] = self.adrfam;
        out[2] = self.subtype;
        out[3] = self.treq;
        le::put_u16(out, 4, self.portid);
        le::put_u16(out, 6, self.cntlid);
        le::put_u16(out, 8, self.asqsz);
        le::put_u16(out, 10, self.eflags);
        // TRSVCID and TRADDR are ASCII string fields: space-padded (as SPDK; libnvme strips
        // the spaces). SUBNQN is an NQN: NUL-terminated inside its field.
        le::put_padded(out, 32, 32, self.trsvcid.as_bytes(), b' ');
        le::put_padded(out, 256, NQN_FIELD_LEN - 1, self.subnqn.as_bytes(), 0);
        le::put_padded(out, 512, 256, self.traddr.as_bytes(), b' ');
        match self.tsas {
            Tsas::None => {}
            Tsas::Rdma {
                qptype,
                prtype,
                cms,
                pkey,
            } => {
                out[768] = qptype;
                out[769] = prtype;
                out[770] = cms;
                le::put_u16(out, 776, pkey);
            }
            Tsas::Tcp { sectype } => out[768] = sectype,
        }
    }
}

/// A discovery log for one host: generation counter and entries.
#[derive(Clone, Copy, Debug)]
pub struct DiscoveryLog<'a> {
    /// Generation counter; changes whenever the entries change.
    pub genctr: u64,
    /// The entries, in a stable order.
    pub entries: &'a [DiscoveryEntry<'a>],
}

impl DiscoveryLog<'_> {
    /// Total log size in bytes (header + entries).
    pub fn size(&self) -> u64 {
        (self.entries.len() as u64 + 1) * DISCOVERY_RECORD_SIZE as u64
    }

    /// Copies the log bytes starting at `offset` into `out`, zero-filling past the end.
    /// Returns `out.len()`.
    pub fn read(&self, offset: u64, out: &mut [u8]) -> usize {
        out.fill(0);
        let rec = DISCOVERY_RECORD_SIZE as u64;
        let end = offset.saturating_add(out.len() as u64);
        let mut buf = [0u8; DISCOVERY_RECORD_SIZE];
        // Record 0 is the header, record i+1 the entry i.
        let first = offset / rec;
        let last = end.div_ceil(rec).min(self.entries.len() as u64 + 1);
        for r in first..last {
            if r == 0 {
                self.encode_header(&mut buf);
            } else {
                match self.entries.get((r - 1) as usize) {
                    Some(e) => e.encode(&mut buf),
                    None => break,
                }
            }
            let rstart = r * rec;
            let from = offset.max(rstart);
            let to = end.min(rstart + rec);
            if from >= to {
                continue;
            }
            let src = &buf[(from - rstart) as usize..(to - rstart) as usize];
            if let Some(dst) = out.get_mut((from - offset) as usize..(to - offset) as usize) {
                dst.copy_from_slice(src);
            }
        }
        out.len()
    }

    fn encode_header(&self, out: &mut [u8; DISCOVERY_RECORD_SIZE]) {
        out.fill(0);
        le::put_u64(out, 0, self.genctr);
        le::put_u64(out, 8, self.entries.len() as u64);
        le::put_u16(out, 16, 0); // RECFMT
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvme::spec::DISCOVERY_NQN;

    fn entries() -> [DiscoveryEntry<'static>; 3] {
        let mut cur = DiscoveryEntry::nvme_rdma(DISCOVERY_NQN, adrfam::IPV4, "10.0.0.1", "4420", 1);
        cur.subtype = subtype::CURRENT_DISCOVERY;
        cur.eflags = eflags::DUPRETINFO | eflags::EPCSD;
        [
            DiscoveryEntry::nvme_rdma("nqn.2016-06.io.rtgt:a", adrfam::IPV4, "10.0.0.1", "4420", 1),
            DiscoveryEntry::nvme_rdma("nqn.2016-06.io.rtgt:b", adrfam::IPV6, "fe80::1", "4421", 2),
            cur,
        ]
    }

    #[test]
    fn entry_layout() {
        let e = entries()[1];
        let mut b = [0u8; 1024];
        e.encode(&mut b);
        assert_eq!(&b[0..12], &[1, 2, 2, 2, 2, 0, 0xFF, 0xFF, 32, 0, 0, 0]);
        assert_eq!(&b[32..37], b"4421 ");
        assert_eq!(&b[256..278], b"nqn.2016-06.io.rtgt:b\0");
        assert_eq!(&b[512..520], b"fe80::1 ");
        assert_eq!(&b[768..771], &[1, 1, 1]);
        assert!(b[771..].iter().all(|&x| x == 0));
        let t = DiscoveryEntry {
            tsas: Tsas::Tcp { sectype: 0 },
            trtype: trtype::TCP,
            ..e
        };
        t.encode(&mut b);
        assert_eq!(b[0], 3);
        assert_eq!(b[768..772], [0, 0, 0, 0]);
    }

    /// Issue 13 item 12: TRSVCID and TRADDR were NUL-padded; they are ASCII string fields,
    /// space-padded (as SPDK writes them; libnvme strips trailing spaces).
    #[test]
    fn trsvcid_and_traddr_are_space_padded() {
        let mut b = [0u8; 1024];
        entries()[1].encode(&mut b);
        let mut want_svc = [b' '; 32];
        want_svc[..4].copy_from_slice(b"4421");
        assert_eq!(&b[32..64], &want_svc[..], "TRSVCID");
        let mut want_addr = [b' '; 256];
        want_addr[..7].copy_from_slice(b"fe80::1");
        assert_eq!(&b[512..768], &want_addr[..], "TRADDR");
        // SUBNQN stays NUL-terminated (an NQN, not an ASCII string field).
        assert_eq!(b[256 + 21], 0);
    }

    #[test]
    fn header_and_entries() {
        let es = entries();
        let log = DiscoveryLog {
            genctr: 42,
            entries: &es,
        };
        assert_eq!(log.size(), 4096);
        let mut hdr = [0xAAu8; 20];
        log.read(0, &mut hdr);
        assert_eq!(u64::from_le_bytes(hdr[0..8].try_into().unwrap()), 42);
        assert_eq!(u64::from_le_bytes(hdr[8..16].try_into().unwrap()), 3);
        assert_eq!(&hdr[16..20], &[0; 4]);

        let mut all = vec![0xAAu8; 4096];
        log.read(0, &mut all);
        let mut e = [0u8; 1024];
        es[2].encode(&mut e);
        assert_eq!(&all[3072..4096], &e[..]);
        assert_eq!(all[2048 + 2], subtype::NVME);
        assert!(all[24..1024].iter().all(|&x| x == 0));
    }

    #[test]
    fn unaligned_and_past_end_reads() {
        let es = entries();
        let log = DiscoveryLog {
            genctr: 1,
            entries: &es,
        };
        let mut whole = vec![0u8; 4096];
        log.read(0, &mut whole);
        for (off, len) in [
            (4u64, 8usize),
            (1020, 10),
            (1024, 4096),
            (3000, 2000),
            (8192, 64),
        ] {
            let mut part = vec![0xAAu8; len];
            log.read(off, &mut part);
            for (i, b) in part.iter().enumerate() {
                let pos = off as usize + i;
                let want = whole.get(pos).copied().unwrap_or(0);
                assert_eq!(*b, want, "offset {off} len {len} byte {i}");
            }
        }
        // Huge offsets don't overflow.
        let mut part = [0xAAu8; 16];
        log.read(u64::MAX - 4, &mut part);
        assert_eq!(part, [0; 16]);
    }

    #[test]
    fn empty_log() {
        let log = DiscoveryLog {
            genctr: 7,
            entries: &[],
        };
        let mut b = [0xFFu8; 2048];
        log.read(0, &mut b);
        assert_eq!(b[0], 7);
        assert_eq!(&b[8..16], &[0; 8]);
        assert!(b[1024..].iter().all(|&x| x == 0));
    }

    #[test]
    fn long_strings_stay_terminated() {
        let long = "x".repeat(300);
        let mut e = entries()[0];
        e.subnqn = &long;
        e.traddr = &long;
        e.trsvcid = &long;
        let mut b = [0u8; 1024];
        e.encode(&mut b);
        assert_eq!(b[511], 0, "the NQN keeps its NUL");
        assert_eq!(b[767], b'x', "TRADDR fills its 256 bytes");
        assert_eq!(b[63], b'x');
        assert_eq!(b[64], 0, "trsvcid is 32 bytes");
    }
}
