//! Cluster members against standalone masters: many locks held by one
//! manager over three members that are either three local `redis-server`
//! masters or three local Redis Clusters of three masters each.
//!
//! ```text
//! cargo bench --bench cluster
//! ```
//!
//! Settings (environment):
//! - `QUORUMLOCK_CLUSTER_HELD`: held-lock counts at lease 3 s (default
//!   `30000,100000`);
//! - `QUORUMLOCK_CLUSTER_KINDS`: `masters`, `clusters` or both (default
//!   `masters,clusters`);
//! - `QUORUMLOCK_CLUSTER_SHARDS`: masters per cluster member (default 3;
//!   1 is a one-node cluster serving every slot, which isolates cluster
//!   mode's own cost from the sharding);
//! - `QUORUMLOCK_CLUSTER_MEMBERS`: quorum members (default 3; 1 takes the
//!   quorum's fan-out off the client, to reach many locks on few cores).
//!
//! Per case: 64 tasks take the locks with `try_lock(ZERO)`, the manager
//! holds them for 8 s, then releases them. It reports the locks lost, the
//! node memory and node CPU (`used_cpu_user` + `used_cpu_sys`) per lock per
//! renewal tick and per member (summed over a member's shards), the same
//! net of the servers' idle CPU (measured for 3 s before the case: a
//! cluster node's bus and cron cost it whether or not it holds locks), the
//! watchdog's own client-side work per lock renewed, and for cluster
//! members how evenly the shards share the keys (`DBSIZE` while
//! held) and the script calls (`INFO commandstats`, `evalsha` + `eval`,
//! over the whole case: acquire, renewals, release). A tick's figures are
//! those of the window's renewals per lock held (a window of 8 s holds
//! whole ticks and parts of two). Prints markdown;
//! `docs/BENCHMARKS.md` keeps the last run.

#![allow(clippy::cast_precision_loss)]

#[path = "../tests/support/mod.rs"]
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockGuard, LockManager, LockManagerBuilder, Quorum};
use redis::aio::MultiplexedConnection;
use support::local::LocalNodes;
use support::local_cluster::LocalCluster;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The members of one kind, and a raw connection to each of their
/// servers (a master, or every master of a cluster), by member.
struct Members {
    kind: &'static str,
    /// Masters: one URL each. Clusters: the seeds of each.
    urls: Vec<Vec<String>>,
    conns: Vec<Vec<MultiplexedConnection>>,
}

impl Members {
    fn builder(&self) -> LockManagerBuilder {
        let mut b = LockManager::builder().quorum(Quorum::Majority);
        for urls in &self.urls {
            b = if self.kind == "masters" {
                b.nodes(urls.iter().cloned())
            } else {
                b.cluster(urls.iter().cloned())
            };
        }
        b
    }

    fn shards(&self) -> usize {
        self.conns.first().map_or(1, Vec::len)
    }

    fn all(&self) -> impl Iterator<Item = &MultiplexedConnection> {
        self.conns.iter().flatten()
    }
}

async fn connect(urls: &[String]) -> Result<Vec<MultiplexedConnection>, BoxError> {
    let mut conns = Vec::new();
    for u in urls {
        conns.push(
            redis::Client::open(u.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    Ok(conns)
}

/// An INFO field of one server, summed over `fields`.
async fn info(c: &MultiplexedConnection, section: &str, fields: &[&str]) -> f64 {
    let text: String = redis::cmd("INFO")
        .arg(section)
        .query_async(&mut c.clone())
        .await
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| l.split_once(':'))
        .filter(|(k, _)| fields.contains(k))
        .map(|(_, v)| v.trim().parse::<f64>().unwrap_or(0.0))
        .sum()
}

/// Scripts run by one server so far (`evalsha` and `eval` calls).
async fn script_calls(c: &MultiplexedConnection) -> f64 {
    let text: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c.clone())
        .await
        .unwrap_or_default();
    text.lines()
        .filter_map(|l| l.trim().split_once(':'))
        .filter(|(k, _)| *k == "cmdstat_evalsha" || *k == "cmdstat_eval")
        .filter_map(|(_, v)| v.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .map(|n| n.parse::<f64>().unwrap_or(0.0))
        .sum()
}

async fn each<F, Fut>(m: &Members, f: F) -> Vec<f64>
where
    F: Fn(MultiplexedConnection) -> Fut,
    Fut: std::future::Future<Output = f64>,
{
    let mut out = Vec::new();
    for c in m.all() {
        out.push(f(c.clone()).await);
    }
    out
}

async fn dbsize(c: MultiplexedConnection) -> f64 {
    redis::cmd("DBSIZE")
        .query_async::<u64>(&mut c.clone())
        .await
        .map_or(0.0, |n| n as f64)
}

/// The smallest and the largest of `v` over their mean.
fn spread(v: &[f64]) -> (f64, f64) {
    let mean = v.iter().sum::<f64>() / v.len().max(1) as f64;
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    let max = v.iter().copied().fold(0.0, f64::max);
    (min / mean.max(1e-9), max / mean.max(1e-9))
}

struct Row {
    kind: &'static str,
    members: usize,
    shards: usize,
    locks: usize,
    failed: usize,
    acquire_secs: f64,
    lost: u64,
    overruns: u64,
    ticks: u64,
    node_bytes_per_lock: f64,
    node_us_per_lock_tick: f64,
    node_net_us_per_lock_tick: f64,
    idle_ms_per_sec: f64,
    busiest_shard_ms_per_tick: f64,
    round_trips_per_tick: f64,
    scripts_per_tick: f64,
    /// The watchdog's own work (`WatchdogStats::busy_micros`) per lock
    /// renewed (over every member).
    busy_us_per_lock: f64,
    keys: (f64, f64),
    scripts: (f64, f64),
    keys_per_shard: Vec<f64>,
}

/// How long the servers' idle CPU is measured before each case.
const IDLE: Duration = Duration::from_secs(3);

/// Holds `locks` locks over `m` for `hold` at `lease`.
async fn held(m: &Members, locks: usize, lease: Duration, hold: Duration) -> Result<Row, BoxError> {
    let manager = m.builder().lease(lease).build().await?;
    let mem0: f64 = each(
        m,
        |c| async move { info(&c, "memory", &["used_memory"]).await },
    )
    .await
    .iter()
    .sum();
    let scripts0 = each(m, |c| async move { script_calls(&c).await }).await;
    let cpu = |c: MultiplexedConnection| async move {
        info(&c, "cpu", &["used_cpu_user", "used_cpu_sys"]).await
    };
    // The servers' own CPU per second with nothing held, over `IDLE`.
    let idle0 = each(m, cpu).await;
    tokio::time::sleep(IDLE).await;
    let idle1 = each(m, cpu).await;
    let idle_per_sec =
        idle1.iter().zip(&idle0).map(|(a, b)| a - b).sum::<f64>() / IDLE.as_secs_f64();
    let run = rand::random::<u32>();
    let next = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (manager, next) = (manager.clone(), Arc::clone(&next));
        tasks.spawn(async move {
            let (mut guards, mut failed) = (Vec::new(), 0usize);
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= locks {
                    return (guards, failed);
                }
                match manager
                    .try_lock(&format!("entity-{run}-{i}"), Duration::ZERO)
                    .await
                {
                    Ok(g) => guards.push(g),
                    Err(_) => failed += 1,
                }
            }
        });
    }
    let (mut guards, mut failed): (Vec<LockGuard>, usize) = (Vec::with_capacity(locks), 0);
    while let Some(r) = tasks.join_next().await {
        let (g, f) = r?;
        guards.extend(g);
        failed += f;
    }
    let acquire_secs = began.elapsed().as_secs_f64();
    let mem: f64 = each(
        m,
        |c| async move { info(&c, "memory", &["used_memory"]).await },
    )
    .await
    .iter()
    .sum();
    let keys_per_shard = each(m, dbsize).await;
    let s0 = manager.watchdog_stats();
    let cpu0 = each(m, cpu).await;
    let held_from = Instant::now();
    tokio::time::sleep(hold).await;
    let held_secs = held_from.elapsed().as_secs_f64();
    let s1 = manager.watchdog_stats();
    let cpu1 = each(m, cpu).await;
    let ticks = s1.ticks.saturating_sub(s0.ticks).max(1);
    // Each lock lost once, whenever it was (while the others were taken
    // or while held).
    let lost = guards.iter().filter(|g| !g.is_held()).count() as u64;
    let held = guards.len().max(1);
    let releases = guards.into_iter().map(LockGuard::release);
    let _ = futures::future::join_all(releases).await;
    manager.flush().await;
    let scripts1 = each(m, |c| async move { script_calls(&c).await }).await;
    let scripts: Vec<f64> = scripts1.iter().zip(&scripts0).map(|(a, b)| a - b).collect();
    let cpu: Vec<f64> = cpu1.iter().zip(&cpu0).map(|(a, b)| a - b).collect();
    let members = m.conns.len() as f64;
    // Per tick: per lock renewed, times the locks held. The renewals of the
    // window count the partial ticks at its two ends for what they did
    // (dividing by whole ticks counted them as a full tick's work more,
    // up to a sixth when ticks overrun).
    let ticks_f = (s1.locks_renewed - s0.locks_renewed).max(1) as f64 / held as f64;
    // Keys and script calls per shard, compared within each member.
    let (mut keys, mut calls) = ((f64::INFINITY, 0.0f64), (f64::INFINITY, 0.0f64));
    for member in 0..m.conns.len() {
        let range = member * m.shards()..(member + 1) * m.shards();
        let (a, b) = spread(&keys_per_shard[range.clone()]);
        keys = (keys.0.min(a), keys.1.max(b));
        let (a, b) = spread(&scripts[range]);
        calls = (calls.0.min(a), calls.1.max(b));
    }
    Ok(Row {
        kind: m.kind,
        members: m.conns.len(),
        shards: m.shards(),
        locks,
        failed,
        acquire_secs,
        lost,
        overruns: s1.overruns - s0.overruns,
        ticks,
        node_bytes_per_lock: (mem - mem0) / held as f64 / members,
        node_us_per_lock_tick: cpu.iter().sum::<f64>() * 1e6 / ticks_f / held as f64 / members,
        node_net_us_per_lock_tick: (cpu.iter().sum::<f64>() - idle_per_sec * held_secs).max(0.0)
            * 1e6
            / ticks_f
            / held as f64
            / members,
        idle_ms_per_sec: idle_per_sec * 1e3 / members,
        busiest_shard_ms_per_tick: cpu.iter().copied().fold(0.0, f64::max) * 1e3 / ticks_f,
        round_trips_per_tick: (s1.round_trips - s0.round_trips) as f64 / ticks_f / members,
        scripts_per_tick: (s1.script_calls - s0.script_calls) as f64 / ticks_f / members,
        busy_us_per_lock: (s1.busy_micros - s0.busy_micros) as f64
            / (s1.locks_renewed - s0.locks_renewed).max(1) as f64,
        keys,
        scripts: calls,
        keys_per_shard,
    })
}

fn table(rows: &[Row]) -> String {
    let mut t = String::from(
        "| members | locks held | lease | failed `try_lock(ZERO)` | acquired in (s) | lost | tick overruns | ticks | node memory per lock per member (bytes) | node CPU per lock per tick per member (µs) | idle node CPU per member (ms/s) | the same net of idle (µs) | busiest server CPU per tick (ms) | round trips per tick per member | script calls per tick per member | watchdog busy per lock renewed (µs) | keys per shard, min / max over mean | script calls per shard, min / max over mean |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let members = if r.kind == "masters" {
            format!("{} masters", r.members)
        } else {
            format!("{} clusters of {} shards", r.members, r.shards)
        };
        let balance = |(a, b): (f64, f64)| {
            if r.kind == "masters" {
                "-".to_owned()
            } else {
                format!("{a:.2} / {b:.2}")
            }
        };
        t.push_str(&format!(
            "| {members} | {} | 3 s | {} | {:.1} | {} | {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | {:.1} | {:.1} | {:.0} | {:.2} | {} | {} |\n",
            r.locks,
            r.failed,
            r.acquire_secs,
            r.lost,
            r.overruns,
            r.ticks,
            r.node_bytes_per_lock,
            r.node_us_per_lock_tick,
            r.idle_ms_per_sec,
            r.node_net_us_per_lock_tick,
            r.busiest_shard_ms_per_tick,
            r.round_trips_per_tick,
            r.scripts_per_tick,
            r.busy_us_per_lock,
            balance(r.keys),
            balance(r.scripts),
        ));
    }
    t
}

async fn flushall(m: &Members) {
    for c in m.all() {
        let _: Result<(), _> = redis::cmd("FLUSHALL").query_async(&mut c.clone()).await;
    }
}

async fn run() -> Result<(), BoxError> {
    let sizes: Vec<usize> = std::env::var("QUORUMLOCK_CLUSTER_HELD")
        .unwrap_or_else(|_| "30000,100000".to_owned())
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse())
        .collect::<Result<_, _>>()?;
    let kinds =
        std::env::var("QUORUMLOCK_CLUSTER_KINDS").unwrap_or_else(|_| "masters,clusters".to_owned());
    let shards: usize = std::env::var("QUORUMLOCK_CLUSTER_SHARDS")
        .unwrap_or_else(|_| "3".to_owned())
        .parse()?;
    let members: usize = std::env::var("QUORUMLOCK_CLUSTER_MEMBERS")
        .unwrap_or_else(|_| "3".to_owned())
        .parse()?;
    let mut sets = Vec::new();
    // Kept alive until the end: dropping them stops the servers.
    let mut masters_alive = None;
    let mut clusters_alive = Vec::new();
    if kinds.contains("masters") {
        let nodes = LocalNodes::start(members)?;
        let mut conns = Vec::new();
        for u in nodes.urls() {
            conns.push(connect(std::slice::from_ref(&u)).await?);
        }
        sets.push(Members {
            kind: "masters",
            urls: nodes.urls().into_iter().map(|u| vec![u]).collect(),
            conns,
        });
        masters_alive = Some(nodes);
    }
    if kinds.contains("clusters") {
        let (mut urls, mut conns) = (Vec::new(), Vec::new());
        for _ in 0..members {
            let c = if shards == 1 {
                LocalCluster::start_single()
            } else {
                LocalCluster::start(shards)
            };
            urls.push(c.urls());
            conns.push(connect(&c.urls()).await?);
            clusters_alive.push(c);
        }
        sets.push(Members {
            kind: "clusters",
            urls,
            conns,
        });
    }
    let mut rows = Vec::new();
    for &n in &sizes {
        for set in &sets {
            eprintln!("{}: {n} locks held, lease 3 s", set.kind);
            let row = held(set, n, Duration::from_secs(3), Duration::from_secs(8)).await?;
            eprint!("{}", table(std::slice::from_ref(&row)));
            if set.kind != "masters" {
                eprintln!("keys per shard while held: {:?}", row.keys_per_shard);
            }
            rows.push(row);
            flushall(set).await;
        }
    }
    println!("{}", table(&rows));
    drop((masters_alive, clusters_alive));
    Ok(())
}

fn main() -> Result<(), BoxError> {
    // `cargo test --all-targets` runs bench binaries without `--bench`:
    // do nothing there rather than the whole benchmark in debug mode.
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        println!("cluster: run with `cargo bench --bench cluster` (skipped under cargo test)");
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}
