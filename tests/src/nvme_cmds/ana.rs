//! Asymmetric Namespace Access as a host reads it: the ANA log page (0Ch) decoded.

use target_core::nvme::ana::{LID_ANA, LSP_RGO};

use super::{NvmeQueue, get_log_lsp};

/// ANA state Optimized in the log page.
pub const OPTIMIZED: u8 = 0x01;
/// ANA state Inaccessible in the log page.
pub const INACCESSIBLE: u8 = 0x03;
/// ANA state Persistent Loss in the log page.
pub const PERSISTENT_LOSS: u8 = 0x04;

/// One ANA group descriptor: (group, NSIDs, state).
pub type AnaGroup = (u32, Vec<u32>, u8);

/// The ANA log page through `admin` (`rgo`: groups only, no NSIDs): the change count and the
/// group descriptors.
pub fn ana_log(admin: &mut impl NvmeQueue, rgo: bool) -> (u64, Vec<AnaGroup>) {
    let d = get_log_lsp(
        admin,
        LID_ANA,
        if rgo { LSP_RGO } else { 0 },
        0,
        0,
        4096,
        false,
    )
    .expect("ANA log");
    let le32 = |o: usize| u32::from_le_bytes(d[o..o + 4].try_into().expect("4 bytes"));
    let chg = u64::from_le_bytes(d[0..8].try_into().expect("8 bytes"));
    let n = u16::from_le_bytes([d[8], d[9]]);
    let mut off = 16;
    let mut groups = Vec::new();
    for _ in 0..n {
        let g = le32(off);
        let nn = le32(off + 4) as usize;
        let state = d[off + 16] & 0xF;
        let nsids = (0..nn).map(|i| le32(off + 32 + 4 * i)).collect();
        groups.push((g, nsids, state));
        off += 32 + 4 * nn;
    }
    (chg, groups)
}

/// Creates subsystem `nqn` with ANA reporting and 4 groups, namespaces 1 and 2 (malloc bdevs
/// `n1` and `n2` of 1024 blocks: groups 1 and 2), listening on `a` (optimized) and `b`
/// (inaccessible): two paths to the same namespaces.
pub fn two_path_subsystem(
    t: &crate::TestTarget,
    nqn: &str,
    a: &target_core::target::ListenAddr,
    b: &target_core::target::ListenAddr,
) {
    let mut p = target_core::target::SubsystemParams::new(nqn);
    p.allow_any_host = true;
    p.ana_reporting = true;
    p.max_namespaces = 4;
    t.rt.block_on(t.target.create_subsystem(p))
        .expect("subsystem");
    for name in ["n1", "n2"] {
        t.malloc(name, 1024, 512);
        t.add_ns(nqn, name);
    }
    t.rt.block_on(t.target.add_listener(nqn, a.clone()))
        .expect("listener A");
    t.rt.block_on(t.target.add_listener_ana(
        nqn,
        b.clone(),
        Some(target_core::ana::AnaState::Inaccessible),
    ))
    .expect("listener B");
}
