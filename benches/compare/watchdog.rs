//! Case 4: the watchdog renewing many locks, measured over a quiet window
//! of renewal ticks (waves, which are one round trip per node each; script
//! calls; CPU).

use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};
use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

use crate::measures::{clk_tck, evalsha_calls, info, process_cpu_secs, redis_cpu_secs};
use crate::settings::Settings;
use crate::BoxError;

pub(crate) struct Snapshot {
    pub(crate) stats: quorumlock::WatchdogStats,
    pub(crate) evalsha: Vec<u64>,
    pub(crate) redis_cpu: Vec<f64>,
    pub(crate) cpu: Option<f64>,
    pub(crate) at: Instant,
}

pub(crate) async fn snapshot(
    mgr: &quorumlock::LockManager,
    conns: &[MultiplexedConnection],
    tck: f64,
) -> Result<Snapshot, BoxError> {
    let cpu = process_cpu_secs(tck);
    let at = Instant::now();
    let stats = mgr.watchdog_stats();
    let mut evalsha = Vec::new();
    let mut redis_cpu = Vec::new();
    for c in conns {
        evalsha.push(evalsha_calls(&info(c, "commandstats").await?));
        redis_cpu.push(redis_cpu_secs(&info(c, "cpu").await?));
    }
    Ok(Snapshot {
        stats,
        evalsha,
        redis_cpu,
        cpu,
        at,
    })
}

pub(crate) async fn wait_ticks(mgr: &quorumlock::LockManager, after: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while mgr.watchdog_stats().ticks < after {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// Takes `s.watchdog_locks` locks with 16 tasks; returns the guards and the
/// time it took.
async fn acquire_all(
    mgr: &quorumlock::LockManager,
    run: &str,
    s: &Settings,
) -> Result<(Vec<quorumlock::LockGuard>, Duration), BoxError> {
    const ACQUIRERS: usize = 16;
    let t0 = Instant::now();
    let per = s.watchdog_locks.div_ceil(ACQUIRERS);
    let handles: Vec<_> = (0..ACQUIRERS)
        .map(|t| {
            let mgr = mgr.clone();
            let run = run.to_owned();
            let (from, to) = (
                (t * per).min(s.watchdog_locks),
                ((t + 1) * per).min(s.watchdog_locks),
            );
            tokio::spawn(async move {
                let mut guards = Vec::with_capacity(to - from);
                for i in from..to {
                    guards.push(mgr.lock(&format!("{run}-wd-{i}")).await?);
                }
                Ok::<_, quorumlock::Error>(guards)
            })
        })
        .collect();
    let mut guards = Vec::with_capacity(s.watchdog_locks);
    for h in handles {
        guards.extend(h.await??);
    }
    Ok((guards, t0.elapsed()))
}

/// Per-tick figures of the window between two snapshots.
fn window(a: &Snapshot, b: &Snapshot, interval: Duration, n: usize) -> Value {
    let wall = b.at.duration_since(a.at).as_secs_f64();
    let ticks = b.stats.ticks - a.stats.ticks;
    let per_tick = |x: f64| (ticks > 0).then(|| x / ticks as f64);
    let round_trips =
        per_tick((b.stats.round_trips - a.stats.round_trips) as f64).map(|x| x / n as f64);
    let calls_per_node_tick: Vec<f64> = b
        .evalsha
        .iter()
        .zip(&a.evalsha)
        .map(|(b, a)| per_tick(b.saturating_sub(*a) as f64).unwrap_or(0.0))
        .collect();
    let busy_us = (b.stats.busy_micros - a.stats.busy_micros) as f64;
    let cpu = a.cpu.zip(b.cpu).map(|(a, b)| b - a);
    let redis_ms_per_tick: Vec<f64> = b
        .redis_cpu
        .iter()
        .zip(&a.redis_cpu)
        .map(|(b, a)| per_tick((b - a) * 1e3).unwrap_or(0.0))
        .collect();
    json!({
        "window_secs": wall,
        "ticks": ticks,
        "locks_renewed_per_tick": per_tick((b.stats.locks_renewed - a.stats.locks_renewed) as f64),
        "round_trips_per_node_per_tick": round_trips,
        "script_calls_per_node_per_tick": calls_per_node_tick.iter().sum::<f64>() / n as f64,
        "script_calls_per_node_per_tick_by_node": calls_per_node_tick,
        "busy_micros_per_tick": per_tick(busy_us),
        "busy_share_of_core": per_tick(busy_us).map(|us| us / (interval.as_secs_f64() * 1e6)),
        "process_cpu_secs": cpu,
        "process_cpu_share_of_core": cpu.map(|c| c / wall),
        "process_cpu_ms_per_tick": cpu.and_then(|c| per_tick(c * 1e3)),
        "redis_cpu_ms_per_tick_by_node": redis_ms_per_tick,
        "losses": b.stats.losses - a.stats.losses,
        "node_errors": b.stats.node_errors - a.stats.node_errors,
    })
}

/// Case 4: one manager holds `watchdog_locks` locks with a short lease; the
/// window of `watchdog_ticks` renewal intervals, aligned mid-interval, has
/// no other load.
pub(crate) async fn watchdog(
    urls: &[String],
    conns: &[MultiplexedConnection],
    run: &str,
    s: &Settings,
) -> Result<Value, BoxError> {
    let mgr = quorumlock::LockManager::builder()
        .nodes(urls.iter().cloned())
        .quorum(quorumlock::Quorum::Majority)
        .lease(s.watchdog_lease)
        .build()
        .await?;
    let interval = mgr.config().renew_interval;
    let tck = clk_tck();
    let (guards, acquire_time) = acquire_all(&mgr, run, s).await?;
    eprintln!(
        "  watchdog: {} locks acquired in {:.2} s; waiting for full ticks",
        guards.len(),
        acquire_time.as_secs_f64()
    );

    // Two ticks with the full set, then align to mid-interval.
    let now_ticks = mgr.watchdog_stats().ticks;
    if !wait_ticks(&mgr, now_ticks + 2, interval * 4).await {
        return Err("the watchdog did not tick".into());
    }
    tokio::time::sleep(interval / 2).await;
    let a = snapshot(&mgr, conns, tck).await?;
    tokio::time::sleep(interval * u32::try_from(s.watchdog_ticks).unwrap_or(u32::MAX)).await;
    let b = snapshot(&mgr, conns, tck).await?;
    let mut out = window(&a, &b, interval, urls.len());

    let t1 = Instant::now();
    let released = stream::iter(guards)
        .map(|g| async move { g.release().await.is_ok() })
        .buffer_unordered(64)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    if let Value::Object(o) = &mut out {
        o.extend(
            json!({
                "locks": s.watchdog_locks,
                "lease_secs": s.watchdog_lease.as_secs_f64(),
                "renew_interval_secs": interval.as_secs_f64(),
                "acquire_secs": acquire_time.as_secs_f64(),
                "expected_ticks": s.watchdog_ticks,
                "expected_script_calls_per_node_per_tick": s.watchdog_locks.div_ceil(100),
                "released": released,
                "release_secs": t1.elapsed().as_secs_f64(),
                "clk_tck": tck,
            })
            .as_object()
            .cloned()
            .unwrap_or_default(),
        );
    }
    Ok(out)
}
