//! `examples/metrics.rs` against five local masters: its workload runs with
//! its Prometheus exporter installed, `/metrics` is scraped over HTTP, the
//! text is parsed, and every metric of the table in `docs/OBSERVABILITY.md`
//! is there with a sane value. One test: the exporter is this binary's
//! global recorder.

mod support;

// The example's own copy of `tests/support/local.rs` (its `main` starts
// masters with it) is unused here: the shared harness starts them.
#[allow(clippy::duplicate_mod)]
#[path = "../examples/metrics.rs"]
mod example;

use std::collections::HashMap;
use std::net::{SocketAddr, TcpListener};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One sample: its labels, sorted, and its value.
type Samples = HashMap<String, Vec<(String, f64)>>;

/// The metric names of the metrics table in `docs/OBSERVABILITY.md`, with
/// their type.
fn documented_metrics() -> Vec<(String, String)> {
    include_str!("../docs/OBSERVABILITY.md")
        .lines()
        .filter_map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            let name = cells
                .get(1)?
                .strip_prefix("`quorumlock_")?
                .strip_suffix('`')?;
            Some((format!("quorumlock_{name}"), (*cells.get(2)?).to_owned()))
        })
        .collect()
}

/// A port nobody listens on now.
fn free_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("local addr")
}

/// `GET /metrics` over a plain HTTP/1.1 connection; the body.
async fn scrape(addr: SocketAddr) -> String {
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .expect("connect to the exporter");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .await
        .expect("send the request");
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut raw))
        .await
        .expect("the exporter answers within 10 s")
        .expect("read the answer");
    let text = String::from_utf8(raw).expect("UTF-8");
    let (head, body) = text.split_once("\r\n\r\n").expect("headers, then a body");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    body.to_owned()
}

/// Parses the Prometheus text format: `name{labels} value` lines.
fn parse(text: &str) -> Samples {
    let mut samples = Samples::new();
    for line in text.lines() {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (series, value) = line.rsplit_once(' ').expect("a value after the series");
        let value: f64 = value.parse().expect("a number");
        let (name, labels) = match series.split_once('{') {
            Some((n, l)) => (n, l.trim_end_matches('}').to_owned()),
            None => (series, String::new()),
        };
        samples
            .entry(name.to_owned())
            .or_default()
            .push((labels, value));
    }
    samples
}

/// The sum of `name`'s samples whose labels contain `with`; there must be
/// at least one.
fn sum(s: &Samples, name: &str, with: &str) -> f64 {
    assert!(s.contains_key(name), "{name} is missing");
    let matching: Vec<f64> = s[name]
        .iter()
        .filter(|(l, _)| l.contains(with))
        .map(|(_, x)| *x)
        .collect();
    assert!(!matching.is_empty(), "no {name} sample with {with}");
    matching.iter().sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_serves_every_metric_over_http() {
    let addr = free_addr();
    example::install(addr).expect("install the Prometheus exporter");
    let urls = support::nodes().urls();
    let tally = example::workload(&urls, Duration::from_millis(2_500))
        .await
        .expect("the workload runs");
    assert!(tally.acquired > 0, "{tally:?}");
    let text = scrape(addr).await;
    if std::env::var_os("QUORUMLOCK_SHOW_METRICS").is_some() {
        println!("{tally:?}\n{text}");
    }
    let s = parse(&text);

    let table = documented_metrics();
    assert_eq!(table.len(), 19, "the table lists every metric once");
    for (name, kind) in &table {
        let present = match kind.as_str() {
            "histogram" => ["_bucket", "_sum", "_count"]
                .iter()
                .all(|suffix| s.contains_key(&format!("{name}{suffix}"))),
            _ => s.contains_key(name),
        };
        assert!(present, "{name} ({kind}) is not served");
        assert!(
            text.contains(&format!("# HELP {name} ")),
            "{name} is not described"
        );
    }

    // Sane values. Acquisitions add up to the attempts histogram's count
    // and the latency histogram's, and at least those the workload saw.
    let acquired = sum(&s, "quorumlock_acquisitions_total", "outcome=\"acquired\"");
    assert!(
        acquired >= tally.acquired as f64 + 1.0,
        "the workers' and the long job's"
    );
    let all = sum(&s, "quorumlock_acquisitions_total", "");
    assert_eq!(sum(&s, "quorumlock_acquire_attempts_count", ""), all);
    assert_eq!(
        sum(&s, "quorumlock_acquire_duration_seconds_count", ""),
        all
    );
    assert!(sum(&s, "quorumlock_acquire_attempts_sum", "") >= all - 0.5);
    let cancelled = sum(&s, "quorumlock_acquisitions_total", "outcome=\"cancelled\"");
    assert_eq!(cancelled, tally.given_up as f64, "each dropped wait is one");
    // Every hold ended; nothing waits.
    assert_eq!(sum(&s, "quorumlock_locks_held", ""), 0.0);
    assert_eq!(sum(&s, "quorumlock_waiters", ""), 0.0);
    assert_eq!(
        sum(&s, "quorumlock_hold_duration_seconds_count", ""),
        acquired
    );
    // The long job was renewed: ticks at 1 s and 2 s.
    assert!(sum(&s, "quorumlock_watchdog_waves_total", "") >= 2.0);
    assert!(sum(&s, "quorumlock_renewals_total", "") >= 2.0);
    assert!(sum(&s, "quorumlock_renewal_lag_seconds_count", "") >= 2.0);
    assert_eq!(sum(&s, "quorumlock_losses_total", ""), 0.0);
    // Repairs happen under contention (a worker's lock granted by a quorum
    // while another worker's attempt held a node is re-created there): the
    // metric counts what the watchdog counted.
    assert_eq!(
        sum(&s, "quorumlock_repairs_total", ""),
        tally.watchdog.repairs as f64
    );
    assert_eq!(tally.watchdog.losses, 0);
    // Per node, labelled by its address: up, called, answered quickly.
    for url in &urls {
        // The address as `LockManager::nodes` gives it: host and port.
        let addr = url.trim_start_matches("redis://");
        let node = format!("node=\"{addr}\"");
        assert_eq!(sum(&s, "quorumlock_node_up", &node), 1.0, "{node}");
        let calls = sum(&s, "quorumlock_node_call_duration_seconds_count", &node);
        assert!(calls > acquired, "{node}: {calls} calls");
        let secs = sum(&s, "quorumlock_node_call_duration_seconds_sum", &node);
        assert!(
            secs >= 0.0 && secs / calls < 0.1,
            "{node}: {secs} s over {calls}"
        );
        assert_eq!(sum(&s, "quorumlock_pubsub_reconnects_total", &node), 0.0);
    }
    // No lock name among the labels.
    for series in s.values().flatten() {
        assert!(!series.0.contains("demo:"), "{series:?}");
    }
}
