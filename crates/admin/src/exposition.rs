//! The Prometheus text format (version 0.0.4), written straight into one `String`.
//!
//! A writer, not a registry: every number `/metrics` shows is already kept by the data plane
//! (atomics and snapshots the request path updates whatever the admin listener does), and is
//! read once per scrape by the section that renders it. A registry of its own (the
//! `prometheus` or `prometheus-client` crates) would either keep a second copy of each
//! counter, updated on the request path, or need a collector per section that copies our
//! snapshots into its types at scrape time only to print them again; either way more work
//! for the same lines. What such a library would bring, the format's escaping and the shape
//! of a family (`# HELP`, `# TYPE`, then its samples) and of a histogram, is here once.

use std::fmt::{Display, Write as _};

/// A family's type, as `# TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
    Summary,
}

impl Kind {
    fn as_str(self) -> &'static str {
        match self {
            Kind::Counter => "counter",
            Kind::Gauge => "gauge",
            Kind::Histogram => "histogram",
            Kind::Summary => "summary",
        }
    }
}

/// Label pairs of one sample, in the order written.
pub(crate) type Labels<'a> = &'a [(&'a str, &'a str)];

/// The exposition being written: families in the order the sections declare them.
#[derive(Debug)]
pub(crate) struct Exposition {
    out: String,
}

impl Exposition {
    pub(crate) fn new() -> Exposition {
        Exposition {
            out: String::with_capacity(4096),
        }
    }

    /// The text written so far.
    pub(crate) fn finish(self) -> String {
        self.out
    }

    /// For families another crate renders into text itself (the fleet store's).
    pub(crate) fn text(&mut self) -> &mut String {
        &mut self.out
    }

    /// Declares a family: its `# HELP` and `# TYPE` lines. Its samples follow.
    pub(crate) fn family(&mut self, name: &str, kind: Kind, help: &str) {
        let _ = writeln!(
            self.out,
            "# HELP {name} {help}\n# TYPE {name} {}",
            kind.as_str()
        );
    }

    /// A family of one sample without labels.
    pub(crate) fn single(&mut self, name: &str, kind: Kind, help: &str, value: impl Display) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// A family with one label: a sample per `(label value, value)`, in that order.
    pub(crate) fn family_by<'a, V: Display>(
        &mut self,
        name: &str,
        kind: Kind,
        help: &str,
        key: &str,
        values: impl IntoIterator<Item = (&'a str, V)>,
    ) {
        self.family(name, kind, help);
        for (label, value) in values {
            self.sample(name, &[(key, label)], value);
        }
    }

    /// One sample: `name{labels} value`, each label value escaped.
    pub(crate) fn sample(&mut self, name: &str, labels: Labels<'_>, value: impl Display) {
        self.out.push_str(name);
        self.labels(labels.iter().copied());
        let _ = writeln!(self.out, " {value}");
    }

    /// A histogram's series: a `_bucket` per upper bound with the counts so far (`buckets`
    /// gives each bucket's own count), `+Inf` and `_count` at `count`, and `_sum`.
    pub(crate) fn histogram(
        &mut self,
        name: &str,
        labels: Labels<'_>,
        buckets: impl IntoIterator<Item = (f64, u64)>,
        sum: f64,
        count: u64,
    ) {
        let mut cumulative = 0u64;
        for (bound, n) in buckets {
            cumulative += n;
            self.bucket(name, labels, bound, cumulative);
        }
        self.bucket(name, labels, "+Inf", count);
        self.sample(&format!("{name}_sum"), labels, sum);
        self.sample(&format!("{name}_count"), labels, count);
    }

    fn bucket(&mut self, name: &str, labels: Labels<'_>, le: impl Display, n: u64) {
        let le = le.to_string();
        self.out.push_str(name);
        self.out.push_str("_bucket");
        self.labels(labels.iter().copied().chain([("le", le.as_str())]));
        let _ = writeln!(self.out, " {n}");
    }

    /// `{k="v",…}`, nothing when there are none.
    fn labels<'a>(&mut self, labels: impl IntoIterator<Item = (&'a str, &'a str)>) {
        let mut first = true;
        for (key, value) in labels {
            self.out.push(if first { '{' } else { ',' });
            first = false;
            self.out.push_str(key);
            self.out.push_str("=\"");
            escape(&mut self.out, value);
            self.out.push('"');
        }
        if !first {
            self.out.push('}');
        }
    }
}

/// A label value as the format wants it: backslash, double quote and newline escaped.
fn escape(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Exposition, Kind};

    #[test]
    fn a_family_its_samples_and_escaped_labels() {
        let mut e = Exposition::new();
        e.family("x_total", Kind::Counter, "Things.");
        e.sample("x_total", &[("a", "p\"q\\r\ns")], 3);
        e.sample("x_total", &[("a", "1"), ("b", "2")], 0.5);
        e.single("y", Kind::Gauge, "One.", 7u8);
        assert_eq!(
            e.finish(),
            "# HELP x_total Things.\n# TYPE x_total counter\n\
             x_total{a=\"p\\\"q\\\\r\\ns\"} 3\n\
             x_total{a=\"1\",b=\"2\"} 0.5\n\
             # HELP y One.\n# TYPE y gauge\ny 7\n"
        );
    }

    #[test]
    fn a_histogram_is_cumulative_with_inf_sum_and_count() {
        let mut e = Exposition::new();
        e.histogram("h", &[], [(0.5, 1), (1.0, 2)], 1.75, 4);
        e.histogram("h", &[("r", "a")], [(0.5, 0)], 0.0, 0);
        assert_eq!(
            e.finish(),
            "h_bucket{le=\"0.5\"} 1\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 4\n\
             h_sum 1.75\nh_count 4\n\
             h_bucket{r=\"a\",le=\"0.5\"} 0\nh_bucket{r=\"a\",le=\"+Inf\"} 0\n\
             h_sum{r=\"a\"} 0\nh_count{r=\"a\"} 0\n"
        );
    }
}
