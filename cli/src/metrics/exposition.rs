//! The Prometheus text exposition format (version 0.0.4): metric families with `# HELP` and
//! `# TYPE`, each family's samples together, label values escaped.

use std::collections::BTreeMap;
use std::fmt::Write as _;

/// A family's type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up (name ends in `_total`).
    Counter,
    /// Goes up and down.
    Gauge,
    /// `_bucket{le=…}`, `_sum`, `_count`.
    Histogram,
    /// A value whose kind rtgt does not know (a transport's own statistics).
    Untyped,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Untyped => "untyped",
        }
    }
}

struct Family {
    kind: Kind,
    help: String,
    samples: String,
}

/// An exposition being built; families are written in name order.
#[derive(Default)]
pub struct Exposition {
    families: BTreeMap<String, Family>,
}

/// Escapes a label value: backslash, double quote and newline.
pub fn escape(v: &str) -> String {
    let mut s = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => s.push_str("\\\\"),
            '"' => s.push_str("\\\""),
            '\n' => s.push_str("\\n"),
            c => s.push(c),
        }
    }
    s
}

/// A metric or label name from arbitrary text: `[a-zA-Z0-9_]`, everything else `_`, no
/// leading digit.
pub fn sanitize(name: &str) -> String {
    let mut s: String = name
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if s.starts_with(|c: char| c.is_ascii_digit()) {
        s.insert(0, '_');
    }
    s
}

fn labels_text(labels: &[(&str, &str)], extra: Option<(&str, &str)>) -> String {
    let all: Vec<String> = labels
        .iter()
        .copied()
        .chain(extra)
        .map(|(k, v)| format!("{k}=\"{}\"", escape(v)))
        .collect();
    if all.is_empty() {
        String::new()
    } else {
        format!("{{{}}}", all.join(","))
    }
}

fn value_text(v: f64) -> String {
    if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.to_owned()
    } else {
        format!("{v}")
    }
}

impl Exposition {
    fn family(&mut self, name: &str, kind: Kind, help: &str) -> &mut Family {
        self.families
            .entry(name.to_owned())
            .or_insert_with(|| Family {
                kind,
                help: help.to_owned(),
                samples: String::new(),
            })
    }

    /// One sample of a counter, gauge or untyped family.
    pub fn sample(&mut self, name: &str, kind: Kind, help: &str, labels: &[(&str, &str)], v: f64) {
        let f = self.family(name, kind, help);
        let _ = writeln!(
            f.samples,
            "{name}{} {}",
            labels_text(labels, None),
            value_text(v)
        );
    }

    /// One histogram: non-cumulative `buckets` with their upper bounds (`None`: +Inf), and the
    /// sum of the observations.
    pub fn histogram(
        &mut self,
        name: &str,
        help: &str,
        labels: &[(&str, &str)],
        buckets: &[(Option<f64>, u64)],
        sum: f64,
    ) {
        let f = self.family(name, Kind::Histogram, help);
        let mut cumulative = 0u64;
        let mut wrote_inf = false;
        for (bound, n) in buckets {
            cumulative += n;
            let le = match bound {
                Some(b) => value_text(*b),
                None => {
                    wrote_inf = true;
                    "+Inf".to_owned()
                }
            };
            let _ = writeln!(
                f.samples,
                "{name}_bucket{} {cumulative}",
                labels_text(labels, Some(("le", &le)))
            );
        }
        if !wrote_inf {
            let _ = writeln!(
                f.samples,
                "{name}_bucket{} {cumulative}",
                labels_text(labels, Some(("le", "+Inf")))
            );
        }
        let l = labels_text(labels, None);
        let _ = writeln!(f.samples, "{name}_sum{l} {}", value_text(sum));
        let _ = writeln!(f.samples, "{name}_count{l} {cumulative}");
    }

    /// The text.
    pub fn finish(self) -> String {
        let mut out = String::new();
        for (name, f) in self.families {
            let _ = writeln!(out, "# HELP {name} {}", f.help.replace('\n', " "));
            let _ = writeln!(out, "# TYPE {name} {}", f.kind.as_str());
            out.push_str(&f.samples);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn families_are_grouped_typed_and_escaped() {
        let mut e = Exposition::default();
        e.sample("b_total", Kind::Counter, "B.", &[("x", "a\"b\\c\nd")], 3.0);
        e.sample("a", Kind::Gauge, "A.", &[], 1.5);
        e.sample("b_total", Kind::Counter, "B.", &[("x", "y")], 4.0);
        let t = e.finish();
        assert_eq!(
            t,
            "# HELP a A.\n# TYPE a gauge\na 1.5\n\
             # HELP b_total B.\n# TYPE b_total counter\n\
             b_total{x=\"a\\\"b\\\\c\\nd\"} 3\nb_total{x=\"y\"} 4\n"
        );
    }

    #[test]
    fn histograms_are_cumulative_with_an_inf_bucket() {
        let mut e = Exposition::default();
        e.histogram(
            "lat_seconds",
            "L.",
            &[("bdev", "M0")],
            &[(Some(0.001), 2), (Some(0.002), 0), (None, 1)],
            0.5,
        );
        let t = e.finish();
        assert!(
            t.contains("lat_seconds_bucket{bdev=\"M0\",le=\"0.001\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("lat_seconds_bucket{bdev=\"M0\",le=\"0.002\"} 2\n"),
            "{t}"
        );
        assert!(
            t.contains("lat_seconds_bucket{bdev=\"M0\",le=\"+Inf\"} 3\n"),
            "{t}"
        );
        assert!(t.contains("lat_seconds_sum{bdev=\"M0\"} 0.5\nlat_seconds_count{bdev=\"M0\"} 3\n"));
        assert_eq!(sanitize("9a-b.c"), "_9a_b_c");
    }
}
