//! Metrics for Prometheus: serves `/metrics` (metrics-exporter-prometheus's
//! HTTP listener) while a small workload takes locks: workers that lock,
//! try once, wait a little or give up halfway over a few contended names,
//! and one long job that the watchdog keeps renewed. Point Prometheus at it
//! and import `docs/grafana-quorumlock.json` into Grafana.
//!
//! ```sh
//! cargo run --example metrics --features metrics           # starts 5 local masters itself
//! QUORUMLOCK_NODES=redis://127.0.0.1:7001,... cargo run --example metrics --features metrics
//! curl -s http://127.0.0.1:9898/metrics | grep quorumlock_
//! ```
//!
//! `QUORUMLOCK_METRICS_ADDR` sets the listen address (default
//! `127.0.0.1:9898`), `QUORUMLOCK_METRICS_SECS` how long the workload runs
//! (default 60; the listener stays up until then).
//!
//! The recorder is installed before the manager is built: the manager
//! registers its metrics with the recorder installed then.

// `tests/metrics.rs` includes this file as a module and runs `install` and
// `workload` itself.
#![allow(dead_code)]

#[path = "../tests/support/local.rs"]
mod local;

use std::net::SocketAddr;
use std::time::Duration;

use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder};
use quorumlock::{LockManager, Quorum};

/// Histogram buckets of the `_seconds` metrics: 100 µs to 10 s.
const SECONDS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0,
];

/// Histogram buckets of `quorumlock_acquire_attempts`.
const ATTEMPTS: &[f64] = &[0.0, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0];

/// Installs the Prometheus recorder as the global one, serving `/metrics`
/// on `addr` (with histograms as Prometheus histograms, so that Grafana's
/// `histogram_quantile` works). Call it inside a tokio runtime and before
/// building a manager.
///
/// # Errors
///
/// When the listener cannot be set up or a recorder is installed already.
pub fn install(addr: SocketAddr) -> Result<(), BuildError> {
    with_buckets(PrometheusBuilder::new().with_http_listener(addr))?.install()
}

/// `builder` with the buckets of every histogram the dashboard reads
/// (without them the exporter renders summaries, which
/// `histogram_quantile` cannot read).
///
/// # Errors
///
/// Never with these buckets (the builder refuses an empty list).
pub fn with_buckets(builder: PrometheusBuilder) -> Result<PrometheusBuilder, BuildError> {
    builder
        .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)?
        .set_buckets_for_metric(
            Matcher::Full("quorumlock_acquire_attempts".into()),
            ATTEMPTS,
        )
}

/// What the workload did.
#[derive(Debug, Default)]
pub struct Tally {
    /// Locks taken and released.
    pub acquired: u64,
    /// Tries and waits that found the lock taken to the end.
    pub busy: u64,
    /// Waits dropped after 5 ms.
    pub given_up: u64,
    /// Any other error (nodes too slow or down), counted and carried on.
    pub errors: u64,
    /// The manager's watchdog counters at the end of the run. Repairs may
    /// be non-zero: a worker's lock granted by a quorum while another
    /// worker's attempt held a node is re-created there by the next tick.
    pub watchdog: quorumlock::WatchdogStats,
}

/// Names the workers contend for.
const NAMES: [&str; 3] = ["demo:orders", "demo:invoices", "demo:reports"];

/// Runs the workload against the masters at `urls` for `run`: 6 workers
/// over 3 names, each loop one of a blocking lock, one try, a 20 ms wait,
/// or a wait dropped after 5 ms, holding for a few milliseconds; workers 0
/// and 4 ask for their turn (fair). Meanwhile a long job holds
/// `demo:nightly` for the whole run, renewed by the watchdog every second.
///
/// # Errors
///
/// When the manager cannot be built, or the long job cannot take its lock.
pub async fn workload(urls: &[String], run: Duration) -> Result<Tally, quorumlock::Error> {
    let manager = LockManager::builder()
        .nodes(urls.iter().cloned())
        .quorum(Quorum::Majority)
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .build()
        .await?;
    let end = tokio::time::Instant::now() + run;
    let nightly = manager.lock("demo:nightly").await?;
    let mut workers = Vec::new();
    for w in 0..6u64 {
        let m = manager.clone();
        workers.push(tokio::spawn(async move {
            let mut tally = Tally::default();
            let mut step = w;
            while tokio::time::Instant::now() < end {
                step = step
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                let name = NAMES[(step >> 33) as usize % NAMES.len()];
                let request = m.request(name);
                let request = if w % 4 == 0 { request.fair() } else { request };
                let got = match (step >> 40) % 4 {
                    0 => request.acquire().await,
                    1 => request.wait(Duration::ZERO).acquire().await,
                    2 => request.wait(Duration::from_millis(20)).acquire().await,
                    _ => {
                        // Dropped halfway: counted as cancelled.
                        match tokio::time::timeout(Duration::from_millis(5), request.acquire())
                            .await
                        {
                            Ok(got) => got,
                            Err(_) => {
                                tally.given_up += 1;
                                continue;
                            }
                        }
                    }
                };
                match got {
                    Ok(guard) => {
                        tally.acquired += 1;
                        tokio::time::sleep(Duration::from_millis(1 + (step >> 50) % 4)).await;
                        if guard.release().await.is_err() {
                            tally.errors += 1;
                        }
                    }
                    Err(e) if e.is_contended() => tally.busy += 1,
                    Err(_) => tally.errors += 1,
                }
            }
            tally
        }));
    }
    let mut total = Tally::default();
    for w in workers {
        // A worker that panicked (it does not) counts as an error.
        let t = w.await.unwrap_or(Tally {
            errors: 1,
            ..Tally::default()
        });
        total.acquired += t.acquired;
        total.busy += t.busy;
        total.given_up += t.given_up;
        total.errors += t.errors;
    }
    if nightly.release().await.is_err() {
        total.errors += 1;
    }
    manager.flush().await;
    total.watchdog = manager.watchdog_stats();
    Ok(total)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let addr: SocketAddr = std::env::var("QUORUMLOCK_METRICS_ADDR")
        .unwrap_or_else(|_| "127.0.0.1:9898".to_owned())
        .parse()?;
    let secs: u64 = std::env::var("QUORUMLOCK_METRICS_SECS")
        .unwrap_or_else(|_| "60".to_owned())
        .parse()?;
    let (_local, urls) = local::env_or_local(5)?;
    install(addr)?;
    println!("nodes: {}", urls.join(", "));
    println!("serving http://{addr}/metrics for {secs} s");
    let tally = workload(&urls, Duration::from_secs(secs)).await?;
    println!(
        "acquired {}, found busy {}, given up {}, other errors {}",
        tally.acquired, tally.busy, tally.given_up, tally.errors
    );
    Ok(())
}
