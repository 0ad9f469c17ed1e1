//! The tables `rtgt top` shows, built from two samples: namespaces (one row per bdev, with
//! the subsystem and namespace exporting it), subsystems (their namespaces summed) and
//! reactors; and their sorting. No drawing here.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::rates::{
    IoRates, add_counters, add_hist, busy_pct, counter_delta, hist_delta, io_rates,
};
use super::sample::{BdevCounters, Sample};

/// The views, in the order Tab cycles through them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// One row per bdev.
    Namespaces,
    /// One row per subsystem.
    Subsystems,
    /// One row per reactor.
    Reactors,
}

impl View {
    /// Every view, in Tab order.
    pub const ALL: [View; 3] = [View::Namespaces, View::Subsystems, View::Reactors];

    /// The view's title.
    pub fn title(self) -> &'static str {
        match self {
            View::Namespaces => "Namespaces",
            View::Subsystems => "Subsystems",
            View::Reactors => "Reactors",
        }
    }

    /// The next view (Tab).
    pub fn next(self) -> View {
        let i = View::ALL.iter().position(|&v| v == self).unwrap_or(0);
        View::ALL[(i + 1) % View::ALL.len()]
    }

    /// The view's columns.
    pub fn columns(self) -> &'static [Column] {
        match self {
            View::Namespaces => NAMESPACE_COLUMNS,
            View::Subsystems => SUBSYSTEM_COLUMNS,
            View::Reactors => REACTOR_COLUMNS,
        }
    }

    /// The column rows are sorted by until the user picks one.
    pub fn default_sort(self) -> usize {
        match self {
            View::Namespaces | View::Subsystems => IOPS_COLUMN,
            View::Reactors => 0,
        }
    }
}

/// A column: `key` is what `--sort` takes, `title` what the header shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Column {
    /// The `--sort` name.
    pub key: &'static str,
    /// The header.
    pub title: &'static str,
    /// Numbers are right-aligned.
    pub numeric: bool,
    /// Sorts largest first (measurements), else smallest / A→Z first (names, ids).
    pub desc: bool,
}

const fn text(key: &'static str, title: &'static str) -> Column {
    Column {
        key,
        title,
        numeric: false,
        desc: false,
    }
}

const fn num(key: &'static str, title: &'static str) -> Column {
    Column {
        key,
        title,
        numeric: true,
        desc: true,
    }
}

const fn id(key: &'static str, title: &'static str) -> Column {
    Column {
        key,
        title,
        numeric: true,
        desc: false,
    }
}

/// The I/O columns both the namespace and the subsystem views end with (IOPS first).
const IO_COLUMNS: [Column; 6] = [
    num("iops", "IOPS"),
    num("reads", "Read/s"),
    num("writes", "Write/s"),
    num("mibs", "MiB/s"),
    num("avg", "Avg us"),
    num("p99", "P99 us"),
];

/// Where IOPS is in the namespace and subsystem views: after their three leading columns.
const IOPS_COLUMN: usize = 3;

/// A view of three leading columns, the I/O columns, and a last one.
const fn io_view(lead: [Column; IOPS_COLUMN], last: Column) -> [Column; IOPS_COLUMN + 7] {
    let mut out = [last; IOPS_COLUMN + 7];
    let mut i = 0;
    while i < IOPS_COLUMN {
        out[i] = lead[i];
        i += 1;
    }
    let mut j = 0;
    while j < IO_COLUMNS.len() {
        out[IOPS_COLUMN + j] = IO_COLUMNS[j];
        j += 1;
    }
    out
}

const NAMESPACE_COLUMNS: &[Column] = &io_view(
    [
        text("bdev", "Bdev"),
        text("subsystem", "Subsystem"),
        id("nsid", "NSID"),
    ],
    num("hosts", "Hosts"),
);

const SUBSYSTEM_COLUMNS: &[Column] = &io_view(
    [
        text("subsystem", "Subsystem"),
        num("namespaces", "NS"),
        num("hosts", "Hosts"),
    ],
    text("hostnqns", "Connected hosts"),
);

const REACTOR_COLUMNS: &[Column] = &[
    id("lcore", "Lcore"),
    text("threads", "Threads"),
    num("busy", "Busy %"),
];

/// One cell: text, or a number (`None`: nothing to show, e.g. no latency without I/O).
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    /// Text.
    Text(String),
    /// A number.
    Num(Option<f64>),
}

impl Cell {
    /// How the cell is drawn.
    pub fn render(&self) -> String {
        match self {
            Cell::Text(s) => s.clone(),
            Cell::Num(None) => "-".into(),
            Cell::Num(Some(v)) if v.fract() == 0.0 && v.abs() < 1e15 => format!("{v:.0}"),
            Cell::Num(Some(v)) if v.abs() >= 100.0 => format!("{v:.0}"),
            Cell::Num(Some(v)) => format!("{v:.1}"),
        }
    }
}

/// A table of one view.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// The view.
    pub view: View,
    /// Rows of cells, one per column.
    pub rows: Vec<Vec<Cell>>,
}

/// Finds a column of `view` by its `--sort` key or title (case-insensitive).
pub fn find_column(view: View, name: &str) -> Option<usize> {
    view.columns()
        .iter()
        .position(|c| c.key.eq_ignore_ascii_case(name) || c.title.eq_ignore_ascii_case(name))
}

/// Every `--sort` key of every view, for help and error messages.
pub fn sort_keys() -> String {
    let mut keys: Vec<&str> = View::ALL
        .iter()
        .flat_map(|v| v.columns().iter().map(|c| c.key))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.join(", ")
}

fn io_cells(r: Option<&IoRates>) -> [Cell; 6] {
    let n = |f: fn(&IoRates) -> Option<f64>| Cell::Num(r.and_then(f));
    [
        n(|r| Some(r.iops())),
        n(|r| Some(r.read_iops)),
        n(|r| Some(r.write_iops)),
        n(|r| Some(r.mib_s)),
        n(|r| r.avg_us),
        n(|r| r.p99_us),
    ]
}

/// The deltas of one bdev between the samples (`None`: new, or reset, in this interval).
fn bdev_delta(prev: &Sample, cur: &Sample, name: &str) -> Option<(BdevCounters, Option<Vec<u64>>)> {
    let (p, c) = (prev.bdevs.get(name)?, cur.bdevs.get(name)?);
    let d = counter_delta(&p.counters, &c.counters)?;
    let h = match (&p.hist, &c.hist) {
        (Some(ph), Some(ch)) => hist_delta(ph, ch),
        _ => None,
    };
    Some((d, h))
}

/// Seconds between the samples, by the server's clock.
fn interval_secs(prev: &Sample, cur: &Sample) -> f64 {
    cur.ticks.saturating_sub(prev.ticks) as f64 / cur.tick_rate.max(1) as f64
}

/// Builds `view`'s table from two successive samples (`prev` `None`: the first sample, no
/// rates yet), rows sorted by `sort` (a column index of the view).
pub fn build(view: View, prev: Option<&Sample>, cur: &Sample, sort: usize) -> Table {
    let secs = prev.map_or(0.0, |p| interval_secs(p, cur));
    let rates = |d: &BdevCounters, h: Option<&[u64]>| {
        prev.map(|_| io_rates(d, secs, cur.tick_rate, h, &cur.bounds_us))
    };
    let mut rows = match view {
        View::Namespaces => {
            let mut exported: BTreeMap<&str, (&str, u32, usize)> = BTreeMap::new();
            for s in &cur.subsystems {
                for (nsid, bdev) in &s.namespaces {
                    exported.insert(bdev, (&s.nqn, *nsid, s.hosts.len()));
                }
            }
            cur.bdevs
                .keys()
                .map(|name| {
                    let delta = prev.and_then(|p| bdev_delta(p, cur, name));
                    let r = delta.and_then(|(d, h)| rates(&d, h.as_deref()));
                    let ex = exported.get(name.as_str());
                    let mut row = vec![
                        Cell::Text(name.clone()),
                        Cell::Text(ex.map_or("-", |e| e.0).to_string()),
                        Cell::Num(ex.map(|e| f64::from(e.1))),
                    ];
                    row.extend(io_cells(r.as_ref()));
                    row.push(Cell::Num(ex.map(|e| e.2 as f64)));
                    row
                })
                .collect::<Vec<_>>()
        }
        View::Subsystems => cur
            .subsystems
            .iter()
            .map(|s| {
                let r = prev.and_then(|p| {
                    let mut sum = BdevCounters::default();
                    let mut hist: Option<Vec<u64>> = Some(Vec::new());
                    for (_, bdev) in &s.namespaces {
                        let (d, h) = bdev_delta(p, cur, bdev)?;
                        add_counters(&mut sum, &d);
                        hist = match (hist, h) {
                            (Some(mut acc), Some(h)) => {
                                add_hist(&mut acc, &h);
                                Some(acc)
                            }
                            _ => None,
                        };
                    }
                    rates(&sum, hist.as_deref())
                });
                let mut row = vec![
                    Cell::Text(s.nqn.clone()),
                    Cell::Num(Some(s.namespaces.len() as f64)),
                    Cell::Num(Some(s.hosts.len() as f64)),
                ];
                row.extend(io_cells(r.as_ref()));
                let mut hosts: Vec<&str> = s.hosts.iter().map(String::as_str).collect();
                hosts.sort_unstable();
                hosts.dedup();
                row.push(Cell::Text(hosts.join(" ")));
                row
            })
            .collect(),
        View::Reactors => cur
            .reactors
            .iter()
            .map(|r| {
                let before = prev.and_then(|p| p.reactors.iter().find(|x| x.lcore == r.lcore));
                let mut threads = String::new();
                for (i, t) in r.threads.iter().enumerate() {
                    let _ = write!(threads, "{}{t}", if i > 0 { " " } else { "" });
                }
                vec![
                    Cell::Num(Some(r.lcore as f64)),
                    Cell::Text(threads),
                    Cell::Num(before.and_then(|b| busy_pct(b, r))),
                ]
            })
            .collect(),
    };
    sort_rows(&mut rows, view.columns(), sort);
    Table { view, rows }
}

/// The table as plain text (batch mode): a header, then one line per row, columns two spaces
/// apart, numbers right-aligned; the sort column's header marked `*`.
pub fn to_text(table: &Table, sort: usize) -> String {
    let columns = table.view.columns();
    let cells: Vec<Vec<String>> = std::iter::once(
        columns
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{}{}", c.title, if i == sort { "*" } else { "" }))
            .collect(),
    )
    .chain(
        table
            .rows
            .iter()
            .map(|r| r.iter().map(Cell::render).collect()),
    )
    .collect();
    let widths: Vec<usize> = (0..columns.len())
        .map(|i| {
            cells
                .iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in &cells {
        let mut line = String::new();
        for ((cell, c), w) in row.iter().zip(columns).zip(&widths) {
            if !line.is_empty() {
                line.push_str("  ");
            }
            if c.numeric {
                let _ = write!(line, "{cell:>w$}");
            } else {
                let _ = write!(line, "{cell:<w$}");
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// Sorts by column `sort` in its direction ([`Column::desc`]; empty cells last); ties by the
/// first column, so that rows keep their places between refreshes.
pub fn sort_rows(rows: &mut [Vec<Cell>], columns: &[Column], sort: usize) {
    use std::cmp::Ordering;
    let cmp = |a: &Cell, b: &Cell| match (a, b) {
        (Cell::Num(x), Cell::Num(y)) => match (x, y) {
            (Some(x), Some(y)) => x.total_cmp(y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => Ordering::Equal,
        },
        (Cell::Text(x), Cell::Text(y)) => x.cmp(y),
        _ => Ordering::Equal,
    };
    let sort = sort.min(columns.len().saturating_sub(1));
    let desc = columns.get(sort).is_some_and(|c| c.desc);
    let empty = |c: Option<&Cell>| matches!(c, Some(Cell::Num(None)) | None);
    rows.sort_by(|a, b| {
        let (x, y) = (a.get(sort), b.get(sort));
        let key = match (empty(x), empty(y), x, y) {
            (false, true, ..) => Ordering::Less,
            (true, false, ..) => Ordering::Greater,
            (false, false, Some(x), Some(y)) if desc => cmp(y, x),
            (false, false, Some(x), Some(y)) => cmp(x, y),
            _ => Ordering::Equal,
        };
        key.then_with(|| match (a.first(), b.first()) {
            (Some(x), Some(y)) => cmp(x, y),
            _ => Ordering::Equal,
        })
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::top::sample::{BdevSample, ReactorSample, SubsystemSample};

    fn bdev(reads: u64, lat_ns: u64, hist: &[u64]) -> BdevSample {
        BdevSample {
            counters: BdevCounters {
                bytes_read: reads * 4096,
                num_read_ops: reads,
                read_latency_ticks: reads * lat_ns,
                ..BdevCounters::default()
            },
            hist: Some(hist.to_vec()),
        }
    }

    /// Two samples one second apart: Fast0 did 1,000 reads at 10 µs (all under 16 µs), Slow0
    /// 10 reads at 1 ms, Idle0 nothing; Fast0 and Slow0 are namespaces of one subsystem with
    /// two hosts connected.
    fn samples() -> (Sample, Sample) {
        let bounds: Vec<u64> = (0..5).map(|i| 1u64 << (i * 4)).collect(); // 1 16 256 4096 65536
        let mut a = Sample {
            ticks: 1_000_000_000,
            tick_rate: 1_000_000_000,
            bounds_us: bounds.clone(),
            ..Sample::default()
        };
        a.bdevs.insert("Fast0".into(), bdev(0, 0, &[0; 6]));
        a.bdevs.insert("Slow0".into(), bdev(0, 0, &[0; 6]));
        a.bdevs.insert("Idle0".into(), bdev(5, 7, &[0; 6]));
        a.subsystems.push(SubsystemSample {
            nqn: "nqn.s1".into(),
            namespaces: vec![(1, "Fast0".into()), (2, "Slow0".into())],
            hosts: vec!["nqn.h2".into(), "nqn.h1".into()],
        });
        a.reactors = (0..2)
            .map(|lcore| ReactorSample {
                lcore,
                threads: vec![format!("pg{lcore}")],
                busy: 0,
                idle: 0,
            })
            .collect();
        let mut b = a.clone();
        b.ticks = 2_000_000_000;
        b.bdevs
            .insert("Fast0".into(), bdev(1_000, 10_000, &[0, 1_000, 0, 0, 0, 0]));
        b.bdevs
            .insert("Slow0".into(), bdev(10, 1_000_000, &[0, 0, 0, 10, 0, 0]));
        b.reactors[0].busy = 250;
        b.reactors[0].idle = 750;
        b.reactors[1].busy = 900;
        b.reactors[1].idle = 100;
        (a, b)
    }

    fn num(c: &Cell) -> Option<f64> {
        match c {
            Cell::Num(v) => *v,
            Cell::Text(t) => panic!("text {t}"),
        }
    }

    fn col(view: View, key: &str) -> usize {
        find_column(view, key).unwrap()
    }

    #[test]
    fn namespaces_sorted_by_iops_with_latencies() {
        let (a, b) = samples();
        let v = View::Namespaces;
        let t = build(v, Some(&a), &b, v.default_sort());
        let names: Vec<String> = t.rows.iter().map(|r| r[0].render()).collect();
        assert_eq!(names, ["Fast0", "Slow0", "Idle0"], "by IOPS, largest first");
        let fast = &t.rows[0];
        assert_eq!(num(&fast[col(v, "iops")]), Some(1_000.0));
        assert_eq!(num(&fast[col(v, "avg")]), Some(10.0));
        let p99 = num(&fast[col(v, "p99")]).unwrap();
        assert!((1.0..=16.0).contains(&p99), "p99 {p99} inside its bucket");
        assert_eq!(fast[col(v, "subsystem")].render(), "nqn.s1");
        assert_eq!(num(&fast[col(v, "nsid")]), Some(1.0));
        assert_eq!(num(&fast[col(v, "hosts")]), Some(2.0));
        let slow = &t.rows[1];
        assert_eq!(num(&slow[col(v, "avg")]), Some(1_000.0));
        assert!(num(&slow[col(v, "p99")]).unwrap() > 256.0);
        let idle = &t.rows[2];
        assert_eq!(num(&idle[col(v, "iops")]), Some(0.0));
        assert_eq!(idle[col(v, "avg")].render(), "-", "no I/O, no latency");
        assert_eq!(idle[col(v, "subsystem")].render(), "-", "not exported");

        let by_avg = build(v, Some(&a), &b, col(v, "avg"));
        assert_eq!(by_avg.rows[0][0].render(), "Slow0");
        let by_name = build(v, Some(&a), &b, col(v, "bdev"));
        assert_eq!(by_name.rows[0][0].render(), "Fast0");
        assert_eq!(by_name.rows[1][0].render(), "Idle0", "text sorts A to Z");

        let first = build(v, None, &b, v.default_sort());
        assert_eq!(first.rows.len(), 3);
        assert_eq!(
            first.rows[0][col(v, "iops")].render(),
            "-",
            "no rate from one sample"
        );
    }

    #[test]
    fn subsystems_sum_their_namespaces() {
        let (a, b) = samples();
        let v = View::Subsystems;
        let t = build(v, Some(&a), &b, v.default_sort());
        assert_eq!(t.rows.len(), 1);
        let s = &t.rows[0];
        assert_eq!(num(&s[col(v, "iops")]), Some(1_010.0));
        let avg = num(&s[col(v, "avg")]).unwrap();
        assert!((avg - (1_000.0 * 10.0 + 10.0 * 1_000.0) / 1_010.0).abs() < 1e-9);
        // 1,010 I/Os, the 99th percentile rank 999.9 is in Fast0's bucket [1, 16).
        assert!(num(&s[col(v, "p99")]).unwrap() < 16.0);
        assert_eq!(num(&s[col(v, "namespaces")]), Some(2.0));
        assert_eq!(s[col(v, "hostnqns")].render(), "nqn.h1 nqn.h2");
    }

    #[test]
    fn reactors_show_busy_percent() {
        let (a, b) = samples();
        let v = View::Reactors;
        let t = build(v, Some(&a), &b, col(v, "busy"));
        assert_eq!(num(&t.rows[0][0]), Some(1.0), "the busiest first");
        assert_eq!(num(&t.rows[0][2]), Some(90.0));
        assert_eq!(num(&t.rows[1][2]), Some(25.0));
        let by_core = build(v, Some(&a), &b, 0);
        assert_eq!(t.rows[1][1].render(), "pg0");
        assert_eq!(by_core.rows[0][0].render(), "0", "ids sort smallest first");
    }

    #[test]
    fn text_tables_align_their_columns() {
        let (a, b) = samples();
        let v = View::Reactors;
        let text = to_text(&build(v, Some(&a), &b, 2), 2);
        assert_eq!(
            text,
            "Lcore  Threads  Busy %*\n    1  pg1           90\n    0  pg0           25\n",
        );
    }

    #[test]
    fn columns_are_found_by_key_or_title() {
        assert_eq!(find_column(View::Namespaces, "P99"), Some(8));
        assert_eq!(find_column(View::Namespaces, "p99 us"), Some(8));
        assert_eq!(find_column(View::Reactors, "busy"), Some(2));
        assert_eq!(find_column(View::Reactors, "iops"), None);
        assert!(sort_keys().contains("mibs"));
        assert_eq!(View::Reactors.next(), View::Namespaces);
        assert_eq!(Cell::Num(Some(12.345)).render(), "12.3");
        assert_eq!(Cell::Num(Some(1234.4)).render(), "1234");
    }
}
