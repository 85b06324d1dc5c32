//! A fixed number of lock+unlock cycles, for instruction counts under
//! `valgrind --tool=callgrind` (repeatable on a noisy machine, unlike
//! timings). Not a benchmark of latency: see `benches/compare/` for that.
//!
//! ```sh
//! # 5 masters on 127.0.0.1:7101..7105, then, per contender and mode:
//! CYCLE_COST_NODES=redis://127.0.0.1:7101,... CYCLE_COST_WHO=quorumlock \
//!   CYCLE_COST_MODE=uncontended CYCLE_COST_CYCLES=2000 \
//!   valgrind --tool=callgrind target/release/examples/cycle_cost
//! ```
//!
//! Built with `--features metrics`, it installs a Prometheus recorder
//! first (with the histogram buckets of `examples/metrics.rs`), so the
//! count includes recording every metric.
//!
//! Run it once with `CYCLE_COST_CYCLES=0` and subtract, to leave out the
//! connecting and the runtime's start. `CYCLE_COST_MODE=throughput` runs
//! the cycles as 64 tasks over 1,000 keys (one try each; busy attempts
//! count as cycles too).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;
use quorumlock::LockManager;
use redis::aio::MultiplexedConnection;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// `examples/metrics.rs`: its recorder's histogram buckets.
#[cfg(feature = "metrics")]
#[path = "metrics.rs"]
mod example;

const TTL: Duration = Duration::from_secs(10);

fn env(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// The same scripts with a plain `join_all`: what the compare bench calls
/// the floor.
struct Floor {
    conns: Vec<MultiplexedConnection>,
    acquire: redis::Script,
    release: redis::Script,
}

impl Floor {
    async fn cycle(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        let lock = format!("floor:{{{name}}}");
        let fence = format!("{lock}:fence");
        let channel = format!("{lock}:released");
        let mut inv = self.acquire.prepare_invoke();
        inv.key(&lock).key(&fence).arg(owner).arg(10_000).arg(1);
        let inv = &inv;
        let replies = join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move { inv.invoke_async::<Vec<i64>>(&mut c).await }
        }))
        .await;
        let granted = replies
            .iter()
            .filter(|r| matches!(r.as_deref(), Ok([1 | 2, _])))
            .count();
        let mut rel = self.release.prepare_invoke();
        rel.key(&lock)
            .key(&channel)
            .key(&fence)
            .arg(owner)
            .arg(0)
            .arg(10_000)
            .arg(0);
        let rel = &rel;
        join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move { rel.invoke_async::<i64>(&mut c).await }
        }))
        .await;
        Ok(granted * 2 > self.conns.len())
    }
}

enum Contender {
    Floor(Floor),
    Quorumlock(LockManager),
}

impl Contender {
    async fn cycle(&self, name: &str, n: u64) -> Result<bool, BoxError> {
        match self {
            Self::Floor(f) => f.cycle(name, &format!("floor-owner-{n}")).await,
            Self::Quorumlock(m) => match m.try_lock(name, Duration::ZERO).await {
                Ok(g) => {
                    g.release().await?;
                    Ok(true)
                }
                Err(e) if e.is_contended() => Ok(false),
                Err(e) => Err(e.into()),
            },
        }
    }
}

async fn run() -> Result<(), BoxError> {
    let urls: Vec<String> = env(
        "CYCLE_COST_NODES",
        "redis://127.0.0.1:7101,redis://127.0.0.1:7102,redis://127.0.0.1:7103,redis://127.0.0.1:7104,redis://127.0.0.1:7105",
    )
    .split(',')
    .map(str::to_owned)
    .collect();
    // With the `metrics` feature, a real recorder before the manager is
    // built (Prometheus's, with the example's histogram buckets, as the
    // dashboard needs; its upkeep on a thread, rendered by nobody): the
    // cost measured is the recording's, not a no-op's.
    #[cfg(feature = "metrics")]
    {
        let builder = metrics_exporter_prometheus::PrometheusBuilder::new();
        let prometheus = example::with_buckets(builder)?.install_recorder()?;
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(5));
            prometheus.run_upkeep();
        });
    }
    let cycles: u64 = env("CYCLE_COST_CYCLES", "2000").parse()?;
    let who = env("CYCLE_COST_WHO", "quorumlock");
    let mode = env("CYCLE_COST_MODE", "uncontended");
    let contender = if who == "floor" {
        let mut conns = Vec::new();
        for u in &urls {
            conns.push(
                redis::Client::open(u.as_str())?
                    .get_multiplexed_async_connection()
                    .await?,
            );
        }
        Contender::Floor(Floor {
            conns,
            acquire: redis::Script::new(include_str!("../src/scripts/acquire.lua")),
            release: redis::Script::new(include_str!("../src/scripts/release.lua")),
        })
    } else {
        Contender::Quorumlock(
            LockManager::builder()
                .nodes(urls.iter().map(String::as_str))
                .lease(TTL)
                // valgrind slows the client down many times over.
                .node_timeout(Duration::from_secs(2))
                .build()
                .await?,
        )
    };
    // Warm-up: scripts loaded, connections settled.
    for i in 0..5 {
        contender.cycle(&format!("warm-{i}"), i).await?;
    }
    let contender = Arc::new(contender);
    let won = Arc::new(AtomicU64::new(0));
    if mode == "throughput" {
        let next = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..64u64)
            .map(|t| {
                let (c, next, won) = (Arc::clone(&contender), Arc::clone(&next), Arc::clone(&won));
                tokio::spawn(async move {
                    let mut rng = t.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
                    while next.fetch_add(1, Ordering::Relaxed) < cycles {
                        rng ^= rng << 13;
                        rng ^= rng >> 7;
                        rng ^= rng << 17;
                        let name = format!("tp-{}", rng % 1000);
                        if c.cycle(&name, rng).await? {
                            won.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    Ok::<(), BoxError>(())
                })
            })
            .collect();
        for t in tasks {
            t.await??;
        }
    } else {
        for i in 0..cycles {
            if contender.cycle(&format!("un-{i}"), i).await? {
                won.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
    if let Contender::Quorumlock(m) = &*contender {
        m.flush().await;
    }
    println!(
        "{who} {mode}: {cycles} cycles, {} won",
        won.load(Ordering::Relaxed)
    );
    Ok(())
}

fn main() -> Result<(), BoxError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(run())
}
