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
//! `CYCLE_COST_WHO` is `quorumlock`, `floor` (the library's scripts with a
//! `join_all` over every node, as `benches/compare`'s floor) or `limit`
//! (the same, each phase returning at its third reply, the rest awaited in
//! a spawned task: the compare bench's limit). Outside valgrind, `perf
//! stat` over a run gives the CPU and the syscalls of a cycle (see
//! docs/BENCHMARKS.md).
//!
//! Run it once with `CYCLE_COST_CYCLES=0` and subtract, to leave out the
//! connecting and the runtime's start. `CYCLE_COST_MODE=throughput` runs
//! the cycles as 64 tasks over 1,000 keys (one try each; busy attempts
//! count as cycles too).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::{join_all, BoxFuture};
use futures::stream::{FuturesUnordered, StreamExt};
use quorumlock::LockManager;
use redis::aio::MultiplexedConnection;
use redis::IntoConnectionInfo;

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
/// the floor. With `at_quorum`, each phase returns at its third reply and
/// the others are awaited in a spawned task: the compare bench's limit.
struct Floor {
    conns: Vec<MultiplexedConnection>,
    acquire: redis::Script,
    release: redis::Script,
    at_quorum: bool,
}

/// Awaits `calls` until `needed` have answered; the rest finish in a
/// spawned task. Returns the replies awaited.
async fn at_quorum<T: Send + 'static>(calls: Vec<BoxFuture<'static, T>>, needed: usize) -> Vec<T> {
    let mut pending: FuturesUnordered<_> = calls.into_iter().collect();
    let mut out = Vec::with_capacity(needed);
    while out.len() < needed {
        match pending.next().await {
            Some(r) => out.push(r),
            None => break,
        }
    }
    if !pending.is_empty() {
        tokio::spawn(pending.for_each(|_| async {}));
    }
    out
}

impl Floor {
    async fn cycle(&self, name: &str, owner: &str) -> Result<bool, BoxError> {
        let lock = format!("floor:{{{name}}}");
        let fence = format!("{lock}:fence");
        let channel = format!("{lock}:released");
        let mut inv = self.acquire.prepare_invoke();
        inv.key(&lock).key(&fence).arg(owner).arg(10_000).arg(1);
        let replies = if self.at_quorum {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(self.acquire.get_hash())
                .arg(2)
                .arg(&lock)
                .arg(&fence)
                .arg(owner)
                .arg(10_000)
                .arg(1);
            let cmd = Arc::new(cmd);
            let calls = self.conns.iter().map(|c| {
                let (mut c, cmd) = (c.clone(), Arc::clone(&cmd));
                Box::pin(async move { cmd.query_async::<Vec<i64>>(&mut c).await })
                    as BoxFuture<'static, _>
            });
            at_quorum(calls.collect(), self.conns.len() / 2 + 1).await
        } else {
            let inv = &inv;
            join_all(self.conns.iter().map(|c| {
                let mut c = c.clone();
                async move { inv.invoke_async::<Vec<i64>>(&mut c).await }
            }))
            .await
        };
        let granted = replies
            .iter()
            .filter(|r| matches!(r.as_deref(), Ok([1 | 2, _])))
            .count();
        // The release carries the hold's token, as quorumlock's does (it
        // raises the fence where it is behind): the same server work.
        let token = replies
            .iter()
            .filter_map(|r| match r.as_deref() {
                Ok([1 | 2, t]) => Some(*t),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let mut rel = self.release.prepare_invoke();
        rel.key(&lock)
            .key(&channel)
            .key(&fence)
            .key(format!("{lock}:queue"))
            .key(format!("{lock}:timeouts"))
            .arg(owner)
            .arg(0)
            .arg(10_000)
            .arg(token);
        if self.at_quorum {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(self.release.get_hash())
                .arg(5)
                .arg(&lock)
                .arg(&channel)
                .arg(&fence)
                .arg(format!("{lock}:queue"))
                .arg(format!("{lock}:timeouts"))
                .arg(owner)
                .arg(0)
                .arg(10_000)
                .arg(token);
            let cmd = Arc::new(cmd);
            let calls = self.conns.iter().map(|c| {
                let (mut c, cmd) = (c.clone(), Arc::clone(&cmd));
                Box::pin(async move { cmd.query_async::<i64>(&mut c).await })
                    as BoxFuture<'static, _>
            });
            at_quorum(calls.collect(), self.conns.len() / 2 + 1).await;
        } else {
            let rel = &rel;
            join_all(self.conns.iter().map(|c| {
                let mut c = c.clone();
                async move { rel.invoke_async::<i64>(&mut c).await }
            }))
            .await;
        }
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
    let contender = if who == "floor" || who == "limit" {
        let acquire = redis::Script::new(include_str!("../src/scripts/acquire.lua"));
        // The library prepends the queue helpers to the release script.
        let release = redis::Script::new(concat!(
            include_str!("../src/scripts/queue_prelude.lua"),
            "\n",
            include_str!("../src/scripts/release.lua")
        ));
        let mut conns = Vec::new();
        for u in &urls {
            // `TCP_NODELAY`, as quorumlock sets it.
            let info = u.as_str().into_connection_info()?;
            let tcp = info.tcp_settings().clone().set_nodelay(true);
            let mut conn = redis::Client::open(info.set_tcp_settings(tcp))?
                .get_multiplexed_async_connection()
                .await?;
            // The limit sends `EVALSHA` alone.
            acquire.load_async(&mut conn).await?;
            release.load_async(&mut conn).await?;
            conns.push(conn);
        }
        Contender::Floor(Floor {
            conns,
            acquire,
            release,
            at_quorum: who == "limit",
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
