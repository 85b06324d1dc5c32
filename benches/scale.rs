//! Scale: many waiters queued on one lock in one process, and many locks
//! held by one manager, on five local `redis-server`s.
//!
//! ```text
//! cargo bench --bench scale
//! ```
//!
//! Settings (environment):
//! - `QUORUMLOCK_SCALE_WAITERS`: waiter counts on one lock (default
//!   `1000,10000,100000`);
//! - `QUORUMLOCK_SCALE_SPREAD`: `waiters/locks` spread over many locks
//!   (default `10000/1000`);
//! - `QUORUMLOCK_SCALE_HELD`: held-lock counts at lease 3 s (default
//!   `20000,50000,100000`);
//! - `QUORUMLOCK_SCALE_QUEUE_TIMEOUT_MS`: the waiters' manager's
//!   `queue_timeout` (default the library's, 5 s): a waiter with a place
//!   refreshes it every third of it;
//! - `QUORUMLOCK_SCALE_HOLD_S`: once the waiters have settled, the holders
//!   hold on for this many seconds more before they release (default 0),
//!   and the CPU the waiting costs meanwhile (client, and the nodes' sum)
//!   is reported per waiter and second: the upkeep of waiting on held
//!   locks (place refreshes, attempts at the holders' expiries);
//! - `QUORUMLOCK_SCALE_MILLION=1`: also hold 1,000,000 locks at the default
//!   30 s lease (takes several minutes).
//!
//! Prints markdown tables; `docs/BENCHMARKS.md` keeps the last run.

#[path = "../tests/support/local.rs"]
mod local;

use std::str::FromStr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockGuard, LockManager, Quorum};
use redis::aio::MultiplexedConnection;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The system allocator, counting the bytes live at any moment: memory per
/// queued waiter and per held lock, exact and unaffected by memory the
/// allocator keeps from an earlier case.
struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to the system allocator unchanged; the
// counter is only bookkeeping.
#[allow(unsafe_code)]
unsafe impl std::alloc::GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: std::alloc::Layout) {
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: std::alloc::Layout, new: usize) -> *mut u8 {
        LIVE.fetch_add(new as u64, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { std::alloc::System.realloc(ptr, layout, new) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Bytes allocated and not yet freed.
fn live() -> u64 {
    LIVE.load(Ordering::Relaxed)
}

fn env_list<T: FromStr>(name: &str, default: &str) -> Result<Vec<T>, BoxError> {
    let raw = std::env::var(name).unwrap_or_else(|_| default.to_owned());
    raw.split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| {
            s.trim()
                .parse()
                .map_err(|_| format!("{name}: {s:?} is not a number").into())
        })
        .collect()
}

// ---------------------------------------------------------------- process

/// Clock ticks per second of `/proc` times.
fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// This process's user + system CPU seconds.
fn cpu_secs() -> f64 {
    let read = || -> Option<f64> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let utime: f64 = f.get(11)?.parse().ok()?;
        let stime: f64 = f.get(12)?.parse().ok()?;
        Some((utime + stime) / clk_tck())
    };
    read().unwrap_or(0.0)
}

/// An INFO field of every node, summed.
async fn node_sum(conns: &[MultiplexedConnection], section: &str, fields: &[&str]) -> f64 {
    let mut total = 0.0;
    for c in conns {
        let info: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut c.clone())
            .await
            .unwrap_or_default();
        for line in info.lines() {
            if let Some((k, v)) = line.split_once(':') {
                if fields.contains(&k) {
                    total += v.trim().parse::<f64>().unwrap_or(0.0);
                }
            }
        }
    }
    total
}

/// How many times every node ran `command` (`INFO commandstats`, which
/// counts the commands scripts call too), summed.
async fn node_calls(conns: &[MultiplexedConnection], command: &str) -> f64 {
    let mut total = 0.0;
    let key = format!("cmdstat_{command}:calls=");
    for c in conns {
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c.clone())
            .await
            .unwrap_or_default();
        for line in info.lines() {
            if let Some(rest) = line.strip_prefix(&key) {
                let calls = rest.split(',').next().unwrap_or("0");
                total += calls.parse::<f64>().unwrap_or(0.0);
            }
        }
    }
    total
}

fn pct(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[allow(clippy::cast_precision_loss)]
fn per(total: f64, n: usize) -> f64 {
    total / n.max(1) as f64
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

// ---------------------------------------------------------------- waiters

struct WaitRow {
    label: String,
    waiters: usize,
    handoffs_per_s: f64,
    cpu_us_per_handoff: f64,
    bytes_per_waiter: f64,
    wakeups_per_handoff: f64,
    worst_wait: Duration,
    /// From the release of a waiter's lock (the call made) to the waiter
    /// holding it: the median and the worst, over the locks' first waiters.
    after_release: (Duration, Duration),
    /// Acquisitions or releases that returned an error.
    failed: usize,
    /// With `QUORUMLOCK_SCALE_HOLD_S`: the client's and the nodes' CPU
    /// while the waiters waited on held locks, µs per waiter per second.
    upkeep: Option<(f64, f64)>,
}

/// `waiters` tasks queue on `locks` locks held by one holder each, then
/// the holders release and every waiter takes its lock once (lock, then
/// release at once).
async fn waiters(
    urls: &[String],
    conns: &[MultiplexedConnection],
    waiters: usize,
    locks: usize,
) -> Result<WaitRow, BoxError> {
    let mut builder = LockManager::builder()
        .nodes(urls.iter().cloned())
        .quorum(Quorum::Majority);
    if let Ok(ms) = std::env::var("QUORUMLOCK_SCALE_QUEUE_TIMEOUT_MS") {
        builder = builder.queue_timeout(Duration::from_millis(ms.parse()?));
    }
    let m = builder.build().await?;
    let run = rand::random::<u32>();
    let names: Vec<String> = (0..locks).map(|l| format!("hot-{run}-{l}")).collect();
    let mut holders = Vec::new();
    for n in &names {
        holders.push(m.lock(n).await?);
    }
    let live0 = live();
    let queued = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let worst = Arc::new(AtomicU64::new(0));
    let start = Arc::new(std::sync::OnceLock::<Instant>::new());
    // Per lock: when its holder's release was called (µs after `start`,
    // plus one; 0 before) and when its first waiter held it.
    let released: Arc<Vec<AtomicU64>> = Arc::new((0..locks).map(|_| AtomicU64::new(0)).collect());
    let first_held: Arc<Vec<AtomicU64>> = Arc::new((0..locks).map(|_| AtomicU64::new(0)).collect());
    let since = |start: &std::sync::OnceLock<Instant>| {
        start.get().map_or(0, |s| {
            u64::try_from(s.elapsed().as_micros()).unwrap_or(u64::MAX) + 1
        })
    };
    let mut tasks = tokio::task::JoinSet::new();
    let queuing = Instant::now();
    for w in 0..waiters {
        let (m, name) = (m.clone(), names[w % locks].clone());
        let (queued, worst, start) = (Arc::clone(&queued), Arc::clone(&worst), Arc::clone(&start));
        let (failed, first_held) = (Arc::clone(&failed), Arc::clone(&first_held));
        tasks.spawn(async move {
            queued.fetch_add(1, Ordering::Relaxed);
            let g = match m.lock(&name).await {
                Ok(g) => g,
                Err(e) => {
                    if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                        eprintln!("first error (lock): {e}");
                    }
                    return;
                }
            };
            let _ = first_held[w % locks].compare_exchange(
                0,
                since(&start),
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
            let waited = start.get().map_or(Duration::ZERO, Instant::elapsed);
            worst.fetch_max(
                u64::try_from(waited.as_micros()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            if let Err(e) = g.release().await {
                if failed.fetch_add(1, Ordering::Relaxed) == 0 {
                    eprintln!("first error (release): {e}");
                }
            }
        });
    }
    // Every waiter has made its first attempt and is asleep on its bell:
    // all tasks started, and the nodes have gone quiet.
    while queued.load(Ordering::Relaxed) < waiters {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let settling = Instant::now();
    settle(conns).await;
    eprintln!(
        "every waiter started after {:.1} s; the nodes settled {:.1} s later (at most 60 s)",
        settling.duration_since(queuing).as_secs_f64(),
        settling.elapsed().as_secs_f64()
    );
    let queued_bytes = live().saturating_sub(live0);
    let upkeep = hold_on(conns, waiters).await;
    let (cpu0, wake0) = (cpu_secs(), m.pubsub_stats().wakeups);
    let began = Instant::now();
    let _ = start.set(began);
    for (l, g) in holders.into_iter().enumerate() {
        released[l].store(since(&start), Ordering::Relaxed);
        if g.release().await.is_err() {
            failed.fetch_add(1, Ordering::Relaxed);
        }
    }
    while let Some(r) = tasks.join_next().await {
        r?;
    }
    let elapsed = began.elapsed();
    let cpu = cpu_secs() - cpu0;
    let wakeups = m.pubsub_stats().wakeups - wake0;
    let mut after: Vec<Duration> = (0..locks)
        .filter_map(|l| {
            let (r, h) = (
                released[l].load(Ordering::Relaxed),
                first_held[l].load(Ordering::Relaxed),
            );
            (r > 0 && h > 0).then(|| Duration::from_micros(h.saturating_sub(r)))
        })
        .collect();
    after.sort();
    #[allow(clippy::cast_precision_loss)]
    Ok(WaitRow {
        label: if locks == 1 {
            format!("{waiters} on one lock")
        } else {
            format!("{waiters} over {locks} locks")
        },
        waiters,
        handoffs_per_s: waiters as f64 / elapsed.as_secs_f64(),
        cpu_us_per_handoff: per(cpu * 1e6, waiters),
        bytes_per_waiter: per(queued_bytes as f64, waiters),
        wakeups_per_handoff: per(wakeups as f64, waiters),
        worst_wait: Duration::from_micros(worst.load(Ordering::Relaxed)),
        after_release: (pct(&after, 0.5), after.last().copied().unwrap_or_default()),
        failed: failed.load(Ordering::Relaxed),
        upkeep,
    })
}

/// Holds on for `QUORUMLOCK_SCALE_HOLD_S` seconds, if set: the client's and
/// the nodes' CPU meanwhile, µs per waiter per second.
async fn hold_on(conns: &[MultiplexedConnection], waiters: usize) -> Option<(f64, f64)> {
    let secs: f64 = std::env::var("QUORUMLOCK_SCALE_HOLD_S")
        .ok()?
        .parse()
        .ok()?;
    let fields = ["used_cpu_sys", "used_cpu_user"];
    let (cpu0, ncpu0) = (cpu_secs(), node_sum(conns, "cpu", &fields).await);
    // `HEXISTS` runs in attempts (`acquire_queued.lua`), not in place
    // refreshes (`keep.lua`) nor renewals.
    let attempts0 = node_calls(conns, "hexists").await;
    let t0 = Instant::now();
    tokio::time::sleep(Duration::from_secs_f64(secs)).await;
    let (cpu, ncpu) = (
        cpu_secs() - cpu0,
        node_sum(conns, "cpu", &fields).await - ncpu0,
    );
    let attempts = node_calls(conns, "hexists").await - attempts0;
    let per_waiter_s = |cpu: f64| per(cpu * 1e6 / t0.elapsed().as_secs_f64(), waiters);
    #[allow(clippy::cast_precision_loss)]
    let per_node = attempts / conns.len().max(1) as f64;
    eprintln!(
        "held on {secs} s: client {cpu:.2} s of CPU, nodes {ncpu:.2} s; {per_node:.0} attempts per node"
    );
    Some((per_waiter_s(cpu), per_waiter_s(ncpu)))
}

/// Waits until the nodes have processed no command for 300 ms (at most
/// 60 s): the waiters' first attempts and subscriptions are all done.
async fn settle(conns: &[MultiplexedConnection]) {
    let limit = Instant::now() + Duration::from_secs(60);
    let mut last = node_sum(conns, "stats", &["total_commands_processed"]).await;
    while Instant::now() < limit {
        tokio::time::sleep(Duration::from_millis(300)).await;
        // INFO itself is one command per node.
        let now = node_sum(conns, "stats", &["total_commands_processed"]).await;
        #[allow(clippy::cast_precision_loss)]
        if now - last <= 2.0 * conns.len() as f64 {
            return;
        }
        last = now;
    }
}

fn wait_table(rows: &[WaitRow]) -> String {
    let mut t = String::from(
        "| waiters (one process) | handoffs/s | client CPU per handoff (µs) | memory per queued waiter (bytes) | wake-ups per handoff | worst wait (s) | held after its lock's release, p50 / worst (ms) | errors | while held, CPU per waiter-second: client / nodes (µs) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        let upkeep = r
            .upkeep
            .map_or_else(|| "—".to_owned(), |(c, n)| format!("{c:.1} / {n:.1}"));
        t.push_str(&format!(
            "| {} | {:.0} | {:.0} | {:.0} | {:.2} | {:.1} | {:.1} / {:.1} | {} | {upkeep} |\n",
            r.label,
            r.handoffs_per_s,
            r.cpu_us_per_handoff,
            r.bytes_per_waiter,
            r.wakeups_per_handoff,
            r.worst_wait.as_secs_f64(),
            ms(r.after_release.0),
            ms(r.after_release.1),
            r.failed
        ));
    }
    if let (Some(first), Some(last)) = (
        rows.iter().find(|r| r.label.ends_with("one lock")),
        rows.iter().rfind(|r| r.label.ends_with("one lock")),
    ) {
        t.push_str(&format!(
            "\nHandoff rate at {} waiters: {:.2}× the rate at {}.\n",
            last.waiters,
            last.handoffs_per_s / first.handoffs_per_s,
            first.waiters
        ));
    }
    t
}

// ---------------------------------------------------------------- held

struct HeldRow {
    locks: usize,
    lease: Duration,
    failed: usize,
    /// Refused with `Error::Overloaded`: past the manager's capacity.
    refused: usize,
    /// Locks held once the acquisitions ended.
    held: usize,
    /// The watchdog's capacity at the end (`WatchdogStats::capacity`).
    capacity: Option<u64>,
    worst_acquire: Duration,
    acquire_secs: f64,
    lost: u64,
    overruns: u64,
    idle_p99: Duration,
    renewing_p99: Duration,
    client_bytes_per_lock: f64,
    node_bytes_per_lock: f64,
    node_ms_per_tick: f64,
    client_ms_per_tick: f64,
}

/// Uncontended try_lock + release of a name of its own, every 2 ms, for
/// `span`: the latencies of the acquisitions.
async fn probe(m: &LockManager, span: Duration) -> Vec<Duration> {
    let name = format!("probe-{}", rand::random::<u32>());
    let until = Instant::now() + span;
    let mut v = Vec::new();
    while Instant::now() < until {
        let t = Instant::now();
        if let Ok(g) = m.try_lock(&name, Duration::ZERO).await {
            v.push(t.elapsed());
            let _ = g.release().await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    v.sort();
    v
}

/// 64 tasks take `locks` locks with `try_lock(ZERO)`; the manager then
/// holds them for `hold` while a probe measures uncontended acquisitions.
async fn held(
    urls: &[String],
    conns: &[MultiplexedConnection],
    locks: usize,
    lease: Duration,
    hold: Duration,
) -> Result<HeldRow, BoxError> {
    let m = LockManager::builder()
        .nodes(urls.iter().cloned())
        .quorum(Quorum::Majority)
        .lease(lease)
        .build()
        .await?;
    let idle = probe(&m, Duration::from_secs(2)).await;
    let (live0, node0) = (live(), node_sum(conns, "memory", &["used_memory"]).await);
    let run = rand::random::<u32>();
    let next = Arc::new(AtomicUsize::new(0));
    let began = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..64 {
        let (m, next) = (m.clone(), Arc::clone(&next));
        tasks.spawn(async move {
            let (mut guards, mut failed, mut worst) = (Vec::new(), 0usize, Duration::ZERO);
            let mut refused = 0usize;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= locks {
                    return (guards, failed, refused, worst);
                }
                let t = Instant::now();
                match m
                    .try_lock(&format!("entity-{run}-{i}"), Duration::ZERO)
                    .await
                {
                    Ok(g) => guards.push(g),
                    Err(e) if e.is_overloaded() => refused += 1,
                    Err(_) => failed += 1,
                }
                worst = worst.max(t.elapsed());
            }
        });
    }
    let (mut guards, mut failed, mut refused, mut worst): (Vec<LockGuard>, usize, usize, Duration) =
        (Vec::with_capacity(locks), 0, 0, Duration::ZERO);
    while let Some(r) = tasks.join_next().await {
        let (g, f, o, w) = r?;
        guards.extend(g);
        failed += f;
        refused += o;
        worst = worst.max(w);
    }
    let acquire_secs = began.elapsed().as_secs_f64();
    let client_bytes = live().saturating_sub(live0);
    let node_bytes = node_sum(conns, "memory", &["used_memory"]).await - node0;
    let s0 = m.watchdog_stats();
    let (cpu0, ncpu0) = (
        cpu_secs(),
        node_sum(conns, "cpu", &["used_cpu_sys", "used_cpu_user"]).await,
    );
    let renewing = probe(&m, hold).await;
    let s1 = m.watchdog_stats();
    let ticks = s1.ticks.saturating_sub(s0.ticks).max(1);
    let ncpu = node_sum(conns, "cpu", &["used_cpu_sys", "used_cpu_user"]).await - ncpu0;
    let cpu = cpu_secs() - cpu0;
    // One per lock no longer held: a hold the watchdog declared lost is
    // also a guard that is not held (counting both counted it twice).
    let lost = guards.iter().filter(|g| !g.is_held()).count() as u64;
    let held = guards.len();
    drop(guards);
    m.flush().await;
    #[allow(clippy::cast_precision_loss)]
    Ok(HeldRow {
        locks,
        lease,
        failed,
        refused,
        held,
        capacity: s1.capacity,
        worst_acquire: worst,
        acquire_secs,
        lost,
        overruns: s1.overruns,
        idle_p99: pct(&idle, 0.99),
        renewing_p99: pct(&renewing, 0.99),
        client_bytes_per_lock: per(client_bytes as f64, held),
        node_bytes_per_lock: per(node_bytes, held * conns.len()),
        node_ms_per_tick: ncpu * 1e3 / ticks as f64 / conns.len() as f64,
        client_ms_per_tick: cpu * 1e3 / ticks as f64,
    })
}

fn held_table(rows: &[HeldRow]) -> String {
    let mut t = String::from(
        "| locks asked | lease | failed `try_lock(ZERO)` while acquiring | refused (overloaded) | held | capacity | worst acquire (ms) | acquired in (s) | lost while held | tick overruns | uncontended p99 idle / while renewing (ms) | client memory per lock (bytes) | node memory per lock (bytes) | node CPU per node per tick (ms) | client CPU per tick (ms) |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n",
    );
    for r in rows {
        t.push_str(&format!(
            "| {} | {} s | {} | {} | {} | {} | {:.0} | {:.1} | {} | {} | {:.2} / {:.2} ({:.2}×) | {:.0} | {:.0} | {:.1} | {:.1} |\n",
            r.locks,
            r.lease.as_secs(),
            r.failed,
            r.refused,
            r.held,
            r.capacity.map_or_else(|| "-".to_owned(), |c| c.to_string()),
            ms(r.worst_acquire),
            r.acquire_secs,
            r.lost,
            r.overruns,
            ms(r.idle_p99),
            ms(r.renewing_p99),
            r.renewing_p99.as_secs_f64() / r.idle_p99.as_secs_f64().max(1e-9),
            r.client_bytes_per_lock,
            r.node_bytes_per_lock,
            r.node_ms_per_tick,
            r.client_ms_per_tick,
        ));
    }
    t
}

// ---------------------------------------------------------------- main

async fn run() -> Result<(), BoxError> {
    let nodes = local::LocalNodes::start(5)?;
    let urls = nodes.urls();
    let mut conns = Vec::new();
    for u in &urls {
        conns.push(
            redis::Client::open(u.as_str())?
                .get_multiplexed_async_connection()
                .await?,
        );
    }
    let sizes: Vec<usize> = env_list("QUORUMLOCK_SCALE_WAITERS", "1000,10000,100000")?;
    let spread: Vec<String> = env_list("QUORUMLOCK_SCALE_SPREAD", "10000/1000")?;
    let mut rows = Vec::new();
    for s in spread {
        let (w, l) = s
            .split_once('/')
            .ok_or("QUORUMLOCK_SCALE_SPREAD: waiters/locks")?;
        let (w, l): (usize, usize) = (w.parse()?, l.parse()?);
        eprintln!("waiters: {w} over {l} locks");
        rows.push(waiters(&urls, &conns, w, l.max(1)).await?);
        eprint!("{}", wait_table(&rows[rows.len() - 1..]));
    }
    for w in sizes {
        eprintln!("waiters: {w} on one lock");
        rows.push(waiters(&urls, &conns, w, 1).await?);
        eprint!("{}", wait_table(&rows[rows.len() - 1..]));
    }
    println!("{}", wait_table(&rows));
    let mut held_rows = Vec::new();
    for n in env_list::<usize>("QUORUMLOCK_SCALE_HELD", "20000,50000,100000")? {
        eprintln!("held: {n} locks, lease 3 s");
        held_rows.push(
            held(
                &urls,
                &conns,
                n,
                Duration::from_secs(3),
                Duration::from_secs(8),
            )
            .await?,
        );
        eprint!("{}", held_table(&held_rows[held_rows.len() - 1..]));
        flushall(&conns).await;
    }
    if std::env::var("QUORUMLOCK_SCALE_MILLION").is_ok_and(|v| v == "1") {
        eprintln!("held: 1,000,000 locks, lease 30 s");
        held_rows.push(
            held(
                &urls,
                &conns,
                1_000_000,
                Duration::from_secs(30),
                Duration::from_secs(25),
            )
            .await?,
        );
    }
    println!("{}", held_table(&held_rows));
    Ok(())
}

async fn flushall(conns: &[MultiplexedConnection]) {
    for c in conns {
        let _: Result<(), _> = redis::cmd("FLUSHALL").query_async(&mut c.clone()).await;
    }
}

fn main() -> Result<(), BoxError> {
    // `cargo test --all-targets` runs bench binaries without `--bench`:
    // do nothing there rather than the whole benchmark in debug mode.
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        println!("scale: run with `cargo bench --bench scale` (skipped under cargo test)");
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}
