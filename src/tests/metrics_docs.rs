//! The metrics' documentation against the code's list (`telemetry::METRICS`):
//! the table of `docs/OBSERVABILITY.md` row by row, and every name the
//! Grafana dashboard queries. Runs with and without the `metrics` feature.

use crate::telemetry::{Kind, Unit, METRICS};

/// The metrics table of `docs/OBSERVABILITY.md`: name, type, unit, labels
/// per row.
fn documented_rows() -> Vec<[String; 4]> {
    include_str!("../../docs/OBSERVABILITY.md")
        .lines()
        .filter(|l| l.starts_with("| `quorumlock_"))
        .map(|l| {
            let cells: Vec<String> = l.split('|').map(|c| c.trim().to_owned()).collect();
            [1, 2, 3, 4].map(|i| cells.get(i).cloned().unwrap_or_default())
        })
        .collect()
}

#[test]
fn the_documented_table_lists_every_metric_as_the_code_describes_it() {
    let want: Vec<[String; 4]> = METRICS
        .iter()
        .map(|m| {
            let kind = match m.kind {
                Kind::Counter => "counter",
                Kind::Gauge => "gauge",
                Kind::Histogram => "histogram",
            };
            let unit = match m.unit {
                Unit::Count => "count",
                Unit::Seconds => "seconds",
            };
            let labels = if m.labels.is_empty() {
                "—".to_owned()
            } else {
                m.labels
                    .iter()
                    .map(|l| format!("`{l}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            [
                format!("`{}`", m.name),
                kind.to_owned(),
                unit.to_owned(),
                labels,
            ]
        })
        .collect();
    assert_eq!(documented_rows(), want);
}

#[test]
fn the_names_follow_the_conventions() {
    for m in METRICS {
        assert!(m.name.starts_with("quorumlock_"), "{}", m.name);
        assert_eq!(
            m.kind == Kind::Counter,
            m.name.ends_with("_total"),
            "{}",
            m.name
        );
        assert_eq!(
            m.unit == Unit::Seconds,
            m.name.ends_with("_seconds"),
            "{}",
            m.name
        );
        assert!(!m.labels.contains(&"name") && !m.labels.contains(&"lock"));
    }
}

/// Every `quorumlock_...` name in `expr`.
fn names_in(expr: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("quorumlock_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        names.push(&tail[..end]);
        rest = &tail[end..];
    }
    names
}

/// The metric a series name of the exposition belongs to (a histogram's
/// `_bucket`, `_sum` and `_count`).
fn metric_of(series: &str) -> Option<&'static str> {
    METRICS.iter().map(|m| m.name).find(|name| {
        series == *name
            || ["_bucket", "_sum", "_count"].iter().any(|s| {
                series.strip_suffix(s) == Some(name)
                    && METRICS
                        .iter()
                        .any(|m| m.name == *name && m.kind == Kind::Histogram)
            })
    })
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("expr", serde_json::Value::String(e)) => out.push(e.clone()),
                    _ => exprs(x, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|x| exprs(x, out)),
        _ => {}
    }
}

#[test]
fn the_grafana_dashboard_queries_only_metrics_the_code_records_and_all_of_them() {
    let dashboard: serde_json::Value =
        serde_json::from_str(include_str!("../../docs/grafana-quorumlock.json"))
            .expect("the dashboard is JSON");
    let mut all = Vec::new();
    exprs(&dashboard, &mut all);
    assert!(!all.is_empty(), "no queries");
    let mut used = std::collections::BTreeSet::new();
    for expr in &all {
        for series in names_in(expr) {
            let metric = metric_of(series)
                .unwrap_or_else(|| panic!("{series} (in `{expr}`) is not a metric of the code"));
            used.insert(metric);
        }
    }
    let missing: Vec<&str> = METRICS
        .iter()
        .map(|m| m.name)
        .filter(|n| !used.contains(n))
        .collect();
    assert!(missing.is_empty(), "no panel shows {missing:?}");
}
