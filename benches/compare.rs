//! `cargo bench --bench compare`: quorumlock against rslock and a raw floor on
//! five Redis masters, all in one process and one run.
//!
//! The floor is the same redis client running quorumlock's own acquire and
//! release scripts with a plain `join_all` fan-out to every node and no
//! coordination logic: what any RedLock-style lock over these scripts costs
//! at least. Contenders run in interleaved rounds with a rotating order, so
//! machine drift hits each alike.
//!
//! Cases: an uncontended lock + unlock cycle (latency), 64 tasks over 1,000
//! keys (throughput), 8 tasks on one key (release-to-next-holder handoff),
//! and the watchdog renewing 10,000 locks (round trips and CPU per tick).
//!
//! Knobs (environment): `QUORUMLOCK_BENCH_NODES` (comma-separated URLs; else
//! five local `redis-server`s are started), `QUORUMLOCK_BENCH_QUICK=1` (or
//! `-- --quick`), `QUORUMLOCK_BENCH_ROUNDS`, `QUORUMLOCK_BENCH_SECS`,
//! `QUORUMLOCK_BENCH_HANDOFF_SECS`, `QUORUMLOCK_BENCH_CYCLES`,
//! `QUORUMLOCK_BENCH_TICKS`, `QUORUMLOCK_BENCH_WATCHDOG_LOCKS` and
//! `QUORUMLOCK_BENCH_CASES` (e.g. `handoff`). See `docs/BENCHMARKS.md`.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::stream::{self, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::IntoConnectionInfo;
use serde_json::{json, Value};

#[path = "../tests/support/local.rs"]
mod local;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const CASES: [&str; 4] = ["uncontended", "throughput", "handoff", "watchdog"];

// ---------------------------------------------------------------- settings

#[derive(Debug, Clone)]
struct Settings {
    quick: bool,
    rounds: usize,
    /// Uncontended cycles per contender per round.
    cycles: usize,
    /// Throughput: tasks, keys and duration per contender per round.
    tasks: usize,
    keys: usize,
    secs: Duration,
    /// Handoff: tasks on one key, duration per contender per round, hold time.
    handoff_tasks: usize,
    handoff_secs: Duration,
    hold: Duration,
    /// TTL / lease of cases 1–3, the same for every contender.
    ttl: Duration,
    /// rslock's retry settings while waiting (its defaults).
    rs_retries: u32,
    rs_retry_delay: Duration,
    /// Watchdog case.
    watchdog_locks: usize,
    watchdog_lease: Duration,
    watchdog_ticks: u64,
    cases: Vec<String>,
}

fn env_or<T: FromStr>(name: &str, default: T) -> Result<T, BoxError>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|e| format!("{name}={v:?}: {e}").into()),
        _ => Ok(default),
    }
}

fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
}

impl Settings {
    fn from_env(quick_arg: bool) -> Result<Self, BoxError> {
        let quick = quick_arg || env_flag("QUORUMLOCK_BENCH_QUICK");
        let secs: f64 = env_or("QUORUMLOCK_BENCH_SECS", if quick { 1.0 } else { 5.0 })?;
        let handoff_secs: f64 = env_or(
            "QUORUMLOCK_BENCH_HANDOFF_SECS",
            if quick { 1.5 } else { 4.0 },
        )?;
        let cases = match std::env::var("QUORUMLOCK_BENCH_CASES") {
            Ok(v) if !v.trim().is_empty() => {
                let list: Vec<String> = v
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .filter(|c| !c.is_empty())
                    .collect();
                if let Some(bad) = list.iter().find(|c| !CASES.contains(&c.as_str())) {
                    return Err(format!(
                        "QUORUMLOCK_BENCH_CASES: unknown case {bad:?} (known: {})",
                        CASES.join(", ")
                    )
                    .into());
                }
                list
            }
            _ => CASES.iter().map(|c| (*c).to_owned()).collect(),
        };
        let s = Self {
            quick,
            rounds: env_or("QUORUMLOCK_BENCH_ROUNDS", if quick { 1 } else { 3 })?,
            cycles: env_or("QUORUMLOCK_BENCH_CYCLES", if quick { 300 } else { 2_000 })?,
            tasks: 64,
            keys: 1_000,
            secs: Duration::from_secs_f64(secs),
            handoff_tasks: 8,
            handoff_secs: Duration::from_secs_f64(handoff_secs),
            hold: Duration::from_millis(1),
            ttl: Duration::from_secs(10),
            rs_retries: 3,
            rs_retry_delay: Duration::from_millis(200),
            watchdog_locks: env_or("QUORUMLOCK_BENCH_WATCHDOG_LOCKS", 10_000)?,
            watchdog_lease: Duration::from_secs(3),
            watchdog_ticks: env_or("QUORUMLOCK_BENCH_TICKS", if quick { 3 } else { 8 })?,
            cases,
        };
        if s.rounds == 0 || s.cycles == 0 || s.watchdog_locks == 0 || s.watchdog_ticks == 0 {
            return Err("rounds, cycles, watchdog locks and ticks must be above 0".into());
        }
        if s.secs.is_zero() || s.handoff_secs.is_zero() {
            return Err(
                "QUORUMLOCK_BENCH_SECS and QUORUMLOCK_BENCH_HANDOFF_SECS must be above 0".into(),
            );
        }
        Ok(s)
    }

    fn runs(&self, case: &str) -> bool {
        self.cases.iter().any(|c| c == case)
    }

    fn json(&self) -> Value {
        json!({
            "quick": self.quick,
            "rounds": self.rounds,
            "uncontended_cycles_per_round": self.cycles,
            "throughput_tasks": self.tasks,
            "throughput_keys": self.keys,
            "throughput_secs_per_round": self.secs.as_secs_f64(),
            "handoff_tasks": self.handoff_tasks,
            "handoff_secs_per_round": self.handoff_secs.as_secs_f64(),
            "handoff_hold_ms": ms(self.hold),
            "ttl_secs": self.ttl.as_secs_f64(),
            "rslock_retry": { "count": self.rs_retries, "delay_ms": ms(self.rs_retry_delay) },
            "watchdog_locks": self.watchdog_locks,
            "watchdog_lease_secs": self.watchdog_lease.as_secs_f64(),
            "watchdog_ticks": self.watchdog_ticks,
            "cases": self.cases,
        })
    }
}

// ---------------------------------------------------------------- contenders

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Who {
    Floor,
    Quorumlock,
    Rslock,
}

const ALL: [Who; 3] = [Who::Floor, Who::Quorumlock, Who::Rslock];

impl Who {
    fn name(self) -> &'static str {
        match self {
            Self::Floor => "floor",
            Self::Quorumlock => "quorumlock",
            Self::Rslock => "rslock",
        }
    }

    fn index(self) -> usize {
        match self {
            Self::Floor => 0,
            Self::Quorumlock => 1,
            Self::Rslock => 2,
        }
    }
}

/// The contenders of round `round`, in a rotating order.
fn order(round: usize) -> [Who; 3] {
    let mut o = ALL;
    o.rotate_left(round % ALL.len());
    o
}

/// A client with `TCP_NODELAY`, as quorumlock builds its own.
fn nodelay_client(url: &str) -> Result<redis::Client, BoxError> {
    let info = url.into_connection_info()?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Ok(redis::Client::open(info.set_tcp_settings(tcp))?)
}

/// The floor: quorumlock's scripts, a `join_all` over every node, a count.
struct Floor {
    conns: Vec<MultiplexedConnection>,
    acquire: redis::Script,
    release: redis::Script,
    required: usize,
}

struct FloorLock {
    lock: String,
    fence: String,
    channel: String,
    owner: Arc<str>,
    token: u64,
}

/// The outcome of one attempt.
enum Attempt {
    Won(Held),
    Busy,
    Failed(String),
}

enum Held {
    Floor(FloorLock),
    Quorumlock(quorumlock::LockGuard),
    Rslock(rslock::Lock),
}

fn lease_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Floor {
    async fn connect(clients: &[redis::Client]) -> Result<Self, BoxError> {
        let mut conns = Vec::with_capacity(clients.len());
        for c in clients {
            conns.push(c.get_multiplexed_async_connection().await?);
        }
        Ok(Self {
            required: conns.len() / 2 + 1,
            conns,
            acquire: redis::Script::new(include_str!("../src/scripts/acquire.lua")),
            release: redis::Script::new(include_str!("../src/scripts/release.lua")),
        })
    }

    async fn try_once(&self, name: &str, owner: &Arc<str>, ttl: Duration) -> Attempt {
        let lock = format!("floor:{{{name}}}");
        let fence = format!("{lock}:fence");
        let mut inv = self.acquire.prepare_invoke();
        inv.key(&lock)
            .key(&fence)
            .arg(&**owner)
            .arg(lease_ms(ttl))
            .arg(1);
        let inv = &inv;
        let replies = join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move { inv.invoke_async::<Vec<i64>>(&mut c).await }
        }))
        .await;
        let (mut granted, mut taken, mut token) = (0, 0, 0u64);
        let mut error = None;
        for r in &replies {
            match r.as_deref() {
                Ok([1 | 2, t]) => {
                    granted += 1;
                    token = token.max(u64::try_from(*t).unwrap_or(0));
                }
                Ok([0, _]) => taken += 1,
                Ok(other) => error = Some(format!("unexpected acquire reply {other:?}")),
                Err(e) => error = Some(e.to_string()),
            }
        }
        let held = FloorLock {
            channel: format!("{lock}:released"),
            lock,
            fence,
            owner: Arc::clone(owner),
            token,
        };
        if granted >= self.required {
            return Attempt::Won(Held::Floor(held));
        }
        // Roll back wherever we may hold a grant (token 0: a rollback).
        let _ = self.release_all(&held, 0).await;
        match (taken, error) {
            (0, Some(e)) => Attempt::Failed(e),
            _ => Attempt::Busy,
        }
    }

    /// Sends the release script to every node and waits for all; returns how
    /// many released.
    async fn release_all(&self, held: &FloorLock, token: u64) -> Result<usize, String> {
        let mut inv = self.release.prepare_invoke();
        inv.key(&held.lock)
            .key(&held.channel)
            .key(&held.fence)
            .arg(&*held.owner)
            .arg(0)
            .arg(lease_ms(Duration::from_secs(10)))
            .arg(token);
        let inv = &inv;
        let replies = join_all(self.conns.iter().map(|c| {
            let mut c = c.clone();
            async move { inv.invoke_async::<i64>(&mut c).await }
        }))
        .await;
        let mut released = 0;
        for r in replies {
            match r {
                Ok(2) => released += 1,
                Ok(_) => {}
                Err(e) => return Err(e.to_string()),
            }
        }
        Ok(released)
    }

    async fn unlock(&self, held: FloorLock) -> Result<(), String> {
        let released = self.release_all(&held, held.token).await?;
        if released >= self.required {
            Ok(())
        } else {
            Err(format!("released on {released} node(s) only"))
        }
    }
}

/// The three contenders over the same nodes.
struct Lockers {
    floor: Floor,
    ql: quorumlock::LockManager,
    /// rslock with one attempt (`set_retry(1, _)`).
    rs_once: rslock::LockManager,
    /// rslock with its default retries, for waiting.
    rs_wait: rslock::LockManager,
    /// One quorumlock manager per handoff task, as separate processes would
    /// have (no shared local queue, one pub/sub connection set each).
    ql_many: Vec<quorumlock::LockManager>,
    ttl: Duration,
}

impl Lockers {
    async fn build(urls: &[String], s: &Settings) -> Result<Self, BoxError> {
        let clients = urls
            .iter()
            .map(|u| nodelay_client(u))
            .collect::<Result<Vec<_>, _>>()?;
        let manager = || {
            quorumlock::LockManager::builder()
                .nodes(urls.iter().cloned())
                .quorum(quorumlock::Quorum::Majority)
                .lease(s.ttl)
                .build()
        };
        let ql = manager().await?;
        let mut ql_many = Vec::new();
        if s.runs("handoff") {
            for _ in 0..s.handoff_tasks {
                ql_many.push(manager().await?);
            }
        }
        let mut rs_once = rslock::LockManager::from_clients(clients.clone());
        rs_once.set_retry(1, s.rs_retry_delay);
        let mut rs_wait = rs_once.clone();
        rs_wait.set_retry(s.rs_retries, s.rs_retry_delay);
        let floor = Floor::connect(&clients).await?;
        Ok(Self {
            floor,
            ql,
            rs_once,
            rs_wait,
            ql_many,
            ttl: s.ttl,
        })
    }

    /// One attempt, no waiting.
    async fn try_once(&self, who: Who, name: &str, owner: &Arc<str>) -> Attempt {
        match who {
            Who::Floor => self.floor.try_once(name, owner, self.ttl).await,
            Who::Quorumlock => match self.ql.try_lock(name, Duration::ZERO).await {
                Ok(g) => Attempt::Won(Held::Quorumlock(g)),
                Err(e) if e.is_contended() => Attempt::Busy,
                Err(e) => Attempt::Failed(e.to_string()),
            },
            Who::Rslock => match self.rs_once.lock(name, self.ttl).await {
                Ok(l) => Attempt::Won(Held::Rslock(l)),
                Err(rslock::LockError::Unavailable) => Attempt::Busy,
                Err(e) => Attempt::Failed(e.to_string()),
            },
        }
    }

    /// Waits for the lock with each contender's own retry policy, until
    /// `deadline` (a wait already under way may finish a little later).
    ///
    /// - quorumlock: `try_lock(name, deadline - now)`, the same wait loop as
    ///   `lock(name)` (jittered backoff 10–200 ms), bounded by the deadline;
    /// - rslock: `lock` with its default retries (3 tries, 0–200 ms apart),
    ///   looped like its own `acquire`;
    /// - floor: one attempt, then a random sleep of 0–200 ms, like rslock.
    async fn wait_lock(
        &self,
        ql: &quorumlock::LockManager,
        who: Who,
        name: &str,
        owner: &Arc<str>,
        deadline: Instant,
        errors: &mut u64,
    ) -> Option<Held> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match who {
                Who::Quorumlock => match ql.try_lock(name, left).await {
                    Ok(g) => return Some(Held::Quorumlock(g)),
                    Err(e) if e.is_contended() => {}
                    Err(_) => *errors += 1,
                },
                Who::Rslock => match self.rs_wait.lock(name, self.ttl).await {
                    Ok(l) => return Some(Held::Rslock(l)),
                    Err(rslock::LockError::Unavailable) => {}
                    Err(_) => *errors += 1,
                },
                Who::Floor => {
                    match self.floor.try_once(name, owner, self.ttl).await {
                        Attempt::Won(h) => return Some(h),
                        Attempt::Busy => {}
                        Attempt::Failed(_) => *errors += 1,
                    }
                    let sleep = Duration::from_millis(rand::random_range(0..200));
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(sleep.min(left)).await;
                }
            }
        }
    }

    async fn unlock(&self, held: Held) -> Result<(), String> {
        match held {
            Held::Floor(l) => self.floor.unlock(l).await,
            Held::Quorumlock(g) => g.release().await.map_err(|e| e.to_string()),
            Held::Rslock(l) => {
                self.rs_once.unlock(&l).await;
                Ok(())
            }
        }
    }
}

/// The floor's owner id, shaped like quorumlock's (`<client>:task-<n>`).
fn floor_owner(task: usize) -> Arc<str> {
    format!("{:032x}:task-{task}", rand::random::<u128>()).into()
}

/// Lock names of one contender, case and round. rslock uses them as raw
/// keys, so they get a prefix; quorumlock and the floor add their own.
fn names(run: &str, who: Who, case: &str, round: usize, n: usize) -> Vec<String> {
    let prefix = if who == Who::Rslock { "rslock:" } else { "" };
    (0..n)
        .map(|i| format!("{prefix}{run}-{case}-{round}-{i}"))
        .collect()
}

// ---------------------------------------------------------------- measures

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Nearest-rank percentile of sorted nanoseconds.
fn pct(sorted: &[u64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1] as f64)
}

fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// CPU time: this process, and all nodes' redis-servers together.
#[derive(Debug, Clone, Copy, Default)]
struct Cpu {
    process: f64,
    redis: f64,
}

impl Cpu {
    async fn now(conns: &[MultiplexedConnection], tck: f64) -> Self {
        let mut redis = 0.0;
        for c in conns {
            if let Ok(i) = info(c, "cpu").await {
                redis += redis_cpu_secs(&i);
            }
        }
        Self {
            process: process_cpu_secs(tck).unwrap_or(0.0),
            redis,
        }
    }

    fn add_since(&mut self, from: Self, to: Self) {
        self.process += to.process - from.process;
        self.redis += to.redis - from.redis;
    }

    /// Microseconds per cycle: (client, redis).
    fn per_cycle_us(&self, cycles: u64) -> (Option<f64>, Option<f64>) {
        if cycles == 0 {
            return (None, None);
        }
        let n = cycles as f64;
        (Some(self.process * 1e6 / n), Some(self.redis * 1e6 / n))
    }

    fn json(&self, cycles: u64) -> Value {
        let (client, redis) = self.per_cycle_us(cycles);
        json!({
            "client_cpu_secs": self.process,
            "redis_cpu_secs_all_nodes": self.redis,
            "client_cpu_us_per_cycle": client,
            "redis_cpu_us_per_cycle_all_nodes": redis,
        })
    }
}

#[derive(Default)]
struct Results {
    unc_cpu: Cpu,
    tp_cpu: Cpu,
    unc_ns: Vec<u64>,
    unc_round_p50_us: Vec<f64>,
    unc_errors: u64,
    unc_first_error: Option<String>,
    tp_rounds: Vec<Value>,
    tp_ok: u64,
    tp_busy: u64,
    tp_failed: u64,
    tp_secs: f64,
    tp_first_error: Option<String>,
    ho_ns: Vec<u64>,
    ho_round_p50_ms: Vec<f64>,
    ho_acquired: u64,
    /// Lock requests (script calls, SET NX) all nodes served in the handoff runs.
    ho_requests: u64,
    ho_errors: u64,
    ho_secs: f64,
}

impl Results {
    fn unc_us(&mut self, p: f64) -> Option<f64> {
        self.unc_ns.sort_unstable();
        pct(&self.unc_ns, p).map(|n| n / 1e3)
    }

    fn ho_ms(&mut self, p: f64) -> Option<f64> {
        self.ho_ns.sort_unstable();
        pct(&self.ho_ns, p).map(|n| n / 1e6)
    }

    fn tp(&self) -> Option<f64> {
        (self.tp_secs > 0.0).then(|| self.tp_ok as f64 / self.tp_secs)
    }
}

// ---------------------------------------------------------------- cases

/// Case 1: lock + unlock of distinct keys by one task; nanoseconds per cycle.
async fn uncontended(
    l: &Lockers,
    who: Who,
    names: &[String],
    owner: &Arc<str>,
    r: &mut Results,
) -> Vec<u64> {
    let mut samples = Vec::with_capacity(names.len());
    for name in names {
        let t = Instant::now();
        let outcome = match l.try_once(who, name, owner).await {
            Attempt::Won(h) => l.unlock(h).await,
            Attempt::Busy => Err("busy on a fresh key".to_owned()),
            Attempt::Failed(e) => Err(e),
        };
        let took = t.elapsed();
        match outcome {
            Ok(()) => samples.push(nanos(took)),
            Err(e) => {
                r.unc_errors += 1;
                r.unc_first_error.get_or_insert(e);
            }
        }
    }
    samples
}

#[derive(Default)]
struct TpTask {
    ok: u64,
    busy: u64,
    failed: u64,
    first_error: Option<String>,
}

/// Case 2: `tasks` tasks over `names` for `secs`, one attempt per cycle.
async fn throughput(
    l: &Arc<Lockers>,
    who: Who,
    names: Arc<Vec<String>>,
    tasks: usize,
    secs: Duration,
) -> (TpTask, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (l, names, stop) = (Arc::clone(l), Arc::clone(&names), Arc::clone(&stop));
            tokio::spawn(async move {
                let owner = floor_owner(t);
                let mut out = TpTask::default();
                while !stop.load(Ordering::Relaxed) {
                    let name = &names[rand::random_range(0..names.len())];
                    match l.try_once(who, name, &owner).await {
                        Attempt::Won(h) => match l.unlock(h).await {
                            Ok(()) => out.ok += 1,
                            Err(e) => {
                                out.failed += 1;
                                out.first_error.get_or_insert(e);
                            }
                        },
                        Attempt::Busy => out.busy += 1,
                        Attempt::Failed(e) => {
                            out.failed += 1;
                            out.first_error.get_or_insert(e);
                        }
                    }
                }
                out
            })
        })
        .collect();
    tokio::time::sleep(secs).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = TpTask::default();
    for h in handles {
        match h.await {
            Ok(t) => {
                total.ok += t.ok;
                total.busy += t.busy;
                total.failed += t.failed;
                if total.first_error.is_none() {
                    total.first_error = t.first_error;
                }
            }
            Err(e) => {
                total.failed += 1;
                total.first_error.get_or_insert(format!("task: {e}"));
            }
        }
    }
    (total, start.elapsed())
}

#[derive(Default)]
struct HoTask {
    samples: Vec<u64>,
    acquired: u64,
    errors: u64,
}

/// Case 3: `tasks` tasks on one key. Each holder holds `hold`, records the
/// instant just before releasing, releases, and does not compete again until
/// another task took the lock; each acquirer records the gap from the last
/// release. So every sample is a handoff to a waiting task.
///
/// quorumlock's tasks share one manager, or with `separate` each has its own
/// (as tasks of different processes would).
async fn handoff(
    l: &Arc<Lockers>,
    who: Who,
    separate: bool,
    name: &str,
    tasks: usize,
    secs: Duration,
    hold: Duration,
) -> (HoTask, Duration) {
    let base = Instant::now();
    let deadline = base + secs;
    let released_at = Arc::new(AtomicU64::new(0));
    let generation = Arc::new(tokio::sync::watch::Sender::new(0u64));
    let name: Arc<str> = name.into();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (l, released_at, generation, name) = (
                Arc::clone(l),
                Arc::clone(&released_at),
                Arc::clone(&generation),
                Arc::clone(&name),
            );
            let ql = match l.ql_many.get(t) {
                Some(m) if separate => m.clone(),
                _ => l.ql.clone(),
            };
            tokio::spawn(async move {
                let owner = floor_owner(t);
                let mut out = HoTask::default();
                loop {
                    let Some(held) = l
                        .wait_lock(&ql, who, &name, &owner, deadline, &mut out.errors)
                        .await
                    else {
                        break;
                    };
                    let now = Instant::now();
                    let since = released_at.swap(0, Ordering::SeqCst);
                    if since != 0 && now < deadline {
                        out.samples
                            .push(nanos(now.duration_since(base)).saturating_sub(since));
                    }
                    out.acquired += 1;
                    let mut mine = 0;
                    generation.send_modify(|g| {
                        *g += 1;
                        mine = *g;
                    });
                    tokio::time::sleep(hold).await;
                    released_at.store(nanos(base.elapsed()).max(1), Ordering::SeqCst);
                    if l.unlock(held).await.is_err() {
                        out.errors += 1;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let mut rx = generation.subscribe();
                    if tokio::time::timeout(left, rx.wait_for(|g| *g != mine))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                out
            })
        })
        .collect();
    let mut total = HoTask::default();
    for h in handles {
        match h.await {
            Ok(t) => {
                total.samples.extend(t.samples);
                total.acquired += t.acquired;
                total.errors += t.errors;
            }
            Err(_) => total.errors += 1,
        }
    }
    (total, secs)
}

// ---------------------------------------------------------------- watchdog

async fn info(conn: &MultiplexedConnection, section: &str) -> Result<String, BoxError> {
    let mut c = conn.clone();
    Ok(redis::cmd("INFO").arg(section).query_async(&mut c).await?)
}

fn info_field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
}

/// `calls` of `cmdstat_evalsha`, 0 when never called.
fn evalsha_calls(info: &str) -> u64 {
    command_calls(info, "evalsha")
}

/// `calls` of one command in `INFO commandstats`, 0 when never called.
fn command_calls(info: &str, command: &str) -> u64 {
    info_field(info, &format!("cmdstat_{command}"))
        .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Lock requests the nodes served, summed over `conns`: script calls
/// (`EVALSHA`), plus rslock's plain `SET NX` when `who` is rslock (the other
/// contenders' scripts call SET inside, which commandstats also counts).
async fn lock_requests(conns: &[MultiplexedConnection], who: Who) -> u64 {
    let mut n = 0;
    for c in conns {
        if let Ok(i) = info(c, "commandstats").await {
            n += command_calls(&i, "evalsha");
            if who == Who::Rslock {
                n += command_calls(&i, "set");
            }
        }
    }
    n
}

fn redis_cpu_secs(info: &str) -> f64 {
    ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|k| info_field(info, k)?.parse::<f64>().ok())
        .sum()
}

/// Clock ticks per second of `/proc` times (`getconf CLK_TCK`, else 100).
fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// This process's user + system CPU time, from `/proc/self/stat`.
fn process_cpu_secs(tck: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After "pid (comm) ", field 3 (state) is index 0; utime is field 14, stime 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / tck)
}

struct Snapshot {
    stats: quorumlock::WatchdogStats,
    evalsha: Vec<u64>,
    redis_cpu: Vec<f64>,
    cpu: Option<f64>,
    at: Instant,
}

async fn snapshot(
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

async fn wait_ticks(mgr: &quorumlock::LockManager, after: u64, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while mgr.watchdog_stats().ticks < after {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    true
}

/// Case 4: one manager holds `watchdog_locks` locks with a short lease; the
/// window of `watchdog_ticks` renewal intervals, aligned mid-interval, has
/// no other load.
async fn watchdog(
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
    let n = urls.len();
    let tck = clk_tck();

    let t0 = Instant::now();
    const ACQUIRERS: usize = 16;
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
    let acquire_time = t0.elapsed();
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

    let wall = b.at.duration_since(a.at).as_secs_f64();
    let ticks = b.stats.ticks - a.stats.ticks;
    let per_tick = |x: u64| (ticks > 0).then(|| x as f64 / ticks as f64);
    let round_trips = per_tick(b.stats.round_trips - a.stats.round_trips).map(|x| x / n as f64);
    let locks_per_tick = per_tick(b.stats.locks_renewed - a.stats.locks_renewed);
    let calls: Vec<u64> = b
        .evalsha
        .iter()
        .zip(&a.evalsha)
        .map(|(b, a)| b.saturating_sub(*a))
        .collect();
    let calls_per_node_tick: Vec<f64> = calls
        .iter()
        .map(|c| {
            if ticks > 0 {
                *c as f64 / ticks as f64
            } else {
                0.0
            }
        })
        .collect();
    let calls_mean = calls_per_node_tick.iter().sum::<f64>() / n as f64;
    let busy_us = b.stats.busy_micros - a.stats.busy_micros;
    let busy_share = per_tick(busy_us).map(|us| us / (interval.as_secs_f64() * 1e6));
    let cpu = a.cpu.zip(b.cpu).map(|(a, b)| b - a);
    let cpu_share = cpu.map(|c| c / wall);
    let redis_ms_per_tick: Vec<f64> = b
        .redis_cpu
        .iter()
        .zip(&a.redis_cpu)
        .map(|(b, a)| {
            if ticks > 0 {
                (b - a) * 1e3 / ticks as f64
            } else {
                0.0
            }
        })
        .collect();
    let losses = b.stats.losses - a.stats.losses;
    let node_errors = b.stats.node_errors - a.stats.node_errors;

    let t1 = Instant::now();
    let released = stream::iter(guards)
        .map(|g| async move { g.release().await.is_ok() })
        .buffer_unordered(64)
        .filter(|ok| futures::future::ready(*ok))
        .count()
        .await;
    let release_time = t1.elapsed();

    Ok(json!({
        "locks": s.watchdog_locks,
        "lease_secs": s.watchdog_lease.as_secs_f64(),
        "renew_interval_secs": interval.as_secs_f64(),
        "acquire_secs": acquire_time.as_secs_f64(),
        "window_secs": wall,
        "ticks": ticks,
        "expected_ticks": s.watchdog_ticks,
        "locks_renewed_per_tick": locks_per_tick,
        "round_trips_per_node_per_tick": round_trips,
        "script_calls_per_node_per_tick": calls_mean,
        "script_calls_per_node_per_tick_by_node": calls_per_node_tick,
        "expected_script_calls_per_node_per_tick": s.watchdog_locks.div_ceil(1_000),
        "busy_micros_per_tick": per_tick(busy_us),
        "busy_share_of_core": busy_share,
        "process_cpu_secs": cpu,
        "process_cpu_share_of_core": cpu_share,
        "process_cpu_ms_per_tick": cpu.filter(|_| ticks > 0).map(|c| c * 1e3 / ticks as f64),
        "redis_cpu_ms_per_tick_by_node": redis_ms_per_tick,
        "losses": losses,
        "node_errors": node_errors,
        "released": released,
        "release_secs": release_time.as_secs_f64(),
        "clk_tck": tck,
    }))
}

// ---------------------------------------------------------------- report

fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

fn fmt_num(v: Option<f64>) -> String {
    match v {
        None => "—".to_owned(),
        Some(v) if v >= 1000.0 => format!("{v:.0}"),
        Some(v) if v >= 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

fn fmt_ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| format!("{v:.3}×"))
}

struct Row {
    metric: String,
    better: &'static str,
    values: [Option<f64>; 3],
    target: String,
    status: String,
}

fn check(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

fn table(rows: &[Row]) -> String {
    let header = [
        "metric",
        "better",
        "floor",
        "quorumlock",
        "rslock",
        "ql/rslock",
        "ql/floor",
        "target",
        "status",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let [f, q, rs] = r.values;
            vec![
                r.metric.clone(),
                r.better.to_owned(),
                fmt_num(f),
                fmt_num(q),
                fmt_num(rs),
                fmt_ratio(ratio(q, rs)),
                fmt_ratio(ratio(q, f)),
                r.target.clone(),
                r.status.clone(),
            ]
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(header.len()));
    for c in cells {
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out
}

fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(cmd).args(args).output().ok()?;
    Some(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

fn cpu_model() -> Option<String> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info_field(&s.replace('\t', ""), "model name").map(str::to_owned)
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    )
}

// ---------------------------------------------------------------- main

async fn run(urls: Vec<String>, local: bool, s: Settings) -> Result<(), BoxError> {
    let run_id = format!("{:08x}", rand::random::<u32>());
    let l = Arc::new(Lockers::build(&urls, &s).await?);
    let redis_version = info(&l.floor.conns[0], "server")
        .await
        .ok()
        .and_then(|i| info_field(&i, "redis_version").map(str::to_owned));
    let load_before = std::fs::read_to_string("/proc/loadavg").ok();
    let started = Instant::now();

    let mut res: [Results; 3] = Default::default();
    let mut ho_separate = Results::default();
    let tck = clk_tck();
    let contenders_needed = ["uncontended", "throughput", "handoff"]
        .iter()
        .any(|c| s.runs(c));

    if contenders_needed {
        // Warm-up: connections (rslock connects lazily), scripts, allocator.
        eprintln!("warm-up");
        for who in ALL {
            let owner = floor_owner(0);
            let mut scratch = Results::default();
            let warm = names(&run_id, who, "warm", 0, if s.quick { 50 } else { 200 });
            uncontended(&l, who, &warm, &owner, &mut scratch).await;
            let warm = Arc::new(names(&run_id, who, "warmtp", 0, s.keys));
            throughput(&l, who, warm, s.tasks, Duration::from_millis(300)).await;
        }
    }

    for round in 0..s.rounds {
        let o = order(round);
        eprintln!(
            "round {}/{} (order: {})",
            round + 1,
            s.rounds,
            o.map(Who::name).join(", ")
        );
        if s.runs("uncontended") {
            for who in o {
                let r = &mut res[who.index()];
                let owner = floor_owner(0);
                let list = names(&run_id, who, "u", round, s.cycles);
                let c0 = Cpu::now(&l.floor.conns, tck).await;
                let mut samples = uncontended(&l, who, &list, &owner, r).await;
                r.unc_cpu.add_since(c0, Cpu::now(&l.floor.conns, tck).await);
                samples.sort_unstable();
                let p50 = pct(&samples, 50.0).map(|n| n / 1e3);
                eprintln!("  uncontended {:<10} p50 {} µs", who.name(), fmt_num(p50));
                r.unc_round_p50_us.extend(p50);
                r.unc_ns.extend(samples);
            }
        }
        if s.runs("throughput") {
            for who in o {
                let list = Arc::new(names(&run_id, who, "t", round, s.keys));
                let c0 = Cpu::now(&l.floor.conns, tck).await;
                let (t, took) = throughput(&l, who, list, s.tasks, s.secs).await;
                let c1 = Cpu::now(&l.floor.conns, tck).await;
                let r = &mut res[who.index()];
                r.tp_cpu.add_since(c0, c1);
                let secs = took.as_secs_f64();
                eprintln!(
                    "  throughput  {:<10} {:.0} cycles/s ({} busy, {} failed)",
                    who.name(),
                    t.ok as f64 / secs,
                    t.busy,
                    t.failed
                );
                r.tp_rounds.push(json!({
                    "cycles_per_sec": t.ok as f64 / secs,
                    "ok": t.ok, "busy": t.busy, "failed": t.failed, "secs": secs,
                }));
                r.tp_ok += t.ok;
                r.tp_busy += t.busy;
                r.tp_failed += t.failed;
                r.tp_secs += secs;
                if r.tp_first_error.is_none() {
                    r.tp_first_error = t.first_error;
                }
            }
        }
        if s.runs("handoff") {
            for who in o {
                let variants: &[bool] = if who == Who::Quorumlock {
                    &[false, true]
                } else {
                    &[false]
                };
                for &separate in variants {
                    let case = if separate { "hs" } else { "h" };
                    let name = names(&run_id, who, case, round, 1).concat();
                    let requests = lock_requests(&l.floor.conns, who).await;
                    let (mut t, took) = handoff(
                        &l,
                        who,
                        separate,
                        &name,
                        s.handoff_tasks,
                        s.handoff_secs,
                        s.hold,
                    )
                    .await;
                    let (r, label) = if separate {
                        (&mut ho_separate, "quorumlock, one manager per task")
                    } else {
                        (&mut res[who.index()], who.name())
                    };
                    t.samples.sort_unstable();
                    let p50 = pct(&t.samples, 50.0).map(|n| n / 1e6);
                    eprintln!(
                        "  handoff     {label:<10} p50 {} ms over {} handoffs",
                        fmt_num(p50),
                        t.samples.len()
                    );
                    r.ho_round_p50_ms.extend(p50);
                    r.ho_ns.extend(t.samples);
                    r.ho_acquired += t.acquired;
                    r.ho_errors += t.errors;
                    r.ho_secs += took.as_secs_f64();
                    r.ho_requests += lock_requests(&l.floor.conns, who)
                        .await
                        .saturating_sub(requests);
                }
            }
        }
    }

    let wd = if s.runs("watchdog") {
        eprintln!("watchdog");
        Some(watchdog(&urls, &l.floor.conns, &run_id, &s).await?)
    } else {
        None
    };
    let elapsed = started.elapsed();

    // ------------------------------------------------------------ figures
    let [floor, ql, rs] = &mut res;
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    if s.runs("uncontended") {
        let v50 = [floor.unc_us(50.0), ql.unc_us(50.0), rs.unc_us(50.0)];
        let vs_floor = ratio(v50[1], v50[0]);
        let vs_rs = ratio(v50[1], v50[2]);
        let ok_floor = vs_floor.map(|r| r <= 1.0);
        let ok_rs = vs_rs.map(|r| r <= 0.8);
        rows.push(Row {
            metric: "uncontended lock+unlock p50 (µs)".into(),
            better: "lower",
            values: v50,
            target: "≤1.0× floor, ≤0.8× rslock".into(),
            status: format!("floor {}, rslock {}", check(ok_floor), check(ok_rs)),
        });
        targets.push(json!({"name": "uncontended p50 ≤ 1.0× floor", "ratio": vs_floor, "limit": 1.0, "met": ok_floor}));
        targets.push(json!({"name": "uncontended p50 ≤ 0.8× rslock", "ratio": vs_rs, "limit": 0.8, "met": ok_rs}));
        for p in [99.0, 99.9] {
            rows.push(Row {
                metric: format!("uncontended lock+unlock p{p} (µs)"),
                better: "lower",
                values: [floor.unc_us(p), ql.unc_us(p), rs.unc_us(p)],
                target: String::new(),
                status: String::new(),
            });
        }
        let cpu = |r: &Results, redis: bool| {
            let (c, rd) = r.unc_cpu.per_cycle_us(r.unc_ns.len() as u64);
            if redis {
                rd
            } else {
                c
            }
        };
        rows.push(Row {
            metric: "uncontended: client CPU per cycle (µs)".into(),
            better: "lower",
            values: [cpu(floor, false), cpu(ql, false), cpu(rs, false)],
            target: String::new(),
            status: String::new(),
        });
        rows.push(Row {
            metric: "uncontended: redis CPU per cycle, 5 nodes (µs)".into(),
            better: "lower",
            values: [cpu(floor, true), cpu(ql, true), cpu(rs, true)],
            target: String::new(),
            status: String::new(),
        });
    }
    if s.runs("throughput") {
        let v = [floor.tp(), ql.tp(), rs.tp()];
        let vs_rs = ratio(v[1], v[2]);
        let ok = vs_rs.map(|r| r >= 1.3);
        rows.push(Row {
            metric: format!("throughput, {} tasks / {} keys (cycles/s)", s.tasks, s.keys),
            better: "higher",
            values: v,
            target: "≥1.3× rslock".into(),
            status: check(ok).into(),
        });
        targets.push(
            json!({"name": "throughput ≥ 1.3× rslock", "ratio": vs_rs, "limit": 1.3, "met": ok}),
        );
        let busy = |r: &Results| (r.tp_secs > 0.0).then(|| r.tp_busy as f64 / r.tp_secs);
        rows.push(Row {
            metric: "throughput: busy attempts (/s)".into(),
            better: "info",
            values: [busy(floor), busy(ql), busy(rs)],
            target: String::new(),
            status: String::new(),
        });
        let failed = |r: &Results| (r.tp_secs > 0.0).then(|| r.tp_failed as f64 / r.tp_secs);
        rows.push(Row {
            metric: "throughput: failed attempts (/s)".into(),
            better: "lower",
            values: [failed(floor), failed(ql), failed(rs)],
            target: String::new(),
            status: String::new(),
        });
        // Per attempt (successful or busy), so contenders with more busy
        // attempts are not charged for them per success.
        let cpu = |r: &Results, redis: bool| {
            let (c, rd) = r.tp_cpu.per_cycle_us(r.tp_ok + r.tp_busy + r.tp_failed);
            if redis {
                rd
            } else {
                c
            }
        };
        rows.push(Row {
            metric: "throughput: client CPU per attempt (µs)".into(),
            better: "lower",
            values: [cpu(floor, false), cpu(ql, false), cpu(rs, false)],
            target: String::new(),
            status: String::new(),
        });
        rows.push(Row {
            metric: "throughput: redis CPU per attempt, 5 nodes (µs)".into(),
            better: "lower",
            values: [cpu(floor, true), cpu(ql, true), cpu(rs, true)],
            target: String::new(),
            status: String::new(),
        });
    }
    if s.runs("handoff") {
        let sep = &mut ho_separate;
        let v50 = [floor.ho_ms(50.0), ql.ho_ms(50.0), rs.ho_ms(50.0)];
        let vs_rs = ratio(v50[1], v50[2]);
        let ok = vs_rs.map(|r| r <= 0.05);
        rows.push(Row {
            metric: format!(
                "handoff p50, {} tasks / 1 key, one shared manager (ms)",
                s.handoff_tasks
            ),
            better: "lower",
            values: v50,
            target: "≤0.05× rslock".into(),
            status: check(ok).into(),
        });
        targets.push(
            json!({"name": "handoff p50 ≤ 1/20 rslock", "ratio": vs_rs, "limit": 0.05, "met": ok}),
        );
        rows.push(Row {
            metric: "handoff p99, one shared manager (ms)".into(),
            better: "lower",
            values: [floor.ho_ms(99.0), ql.ho_ms(99.0), rs.ho_ms(99.0)],
            target: String::new(),
            status: String::new(),
        });
        let v50_sep = [floor.ho_ms(50.0), sep.ho_ms(50.0), rs.ho_ms(50.0)];
        let ok_sep = ratio(v50_sep[1], v50_sep[2]).map(|r| r <= 0.05);
        rows.push(Row {
            metric: "handoff p50, one manager per task (ms)".into(),
            better: "lower",
            values: v50_sep,
            target: "≤0.05× rslock".into(),
            status: check(ok_sep).into(),
        });
        targets.push(json!({
            "name": "handoff p50 ≤ 1/20 rslock, one manager per task",
            "ratio": ratio(v50_sep[1], v50_sep[2]), "limit": 0.05, "met": ok_sep,
        }));
        rows.push(Row {
            metric: "handoff p99, one manager per task (ms)".into(),
            better: "lower",
            values: [floor.ho_ms(99.0), sep.ho_ms(99.0), rs.ho_ms(99.0)],
            target: String::new(),
            status: String::new(),
        });
        let per_handoff =
            |r: &Results| (r.ho_acquired > 0).then(|| r.ho_requests as f64 / r.ho_acquired as f64);
        rows.push(Row {
            metric: "handoff: node requests per acquisition, 5 nodes, one shared manager".into(),
            better: "lower",
            values: [per_handoff(floor), per_handoff(ql), per_handoff(rs)],
            target: String::new(),
            status: String::new(),
        });
        rows.push(Row {
            metric: "handoff: node requests per acquisition, 5 nodes, one manager per task".into(),
            better: "lower",
            values: [per_handoff(floor), per_handoff(sep), per_handoff(rs)],
            target: String::new(),
            status: String::new(),
        });
        let rate = |r: &Results| (r.ho_secs > 0.0).then(|| r.ho_ns.len() as f64 / r.ho_secs);
        rows.push(Row {
            metric: "handoffs (/s), one shared manager".into(),
            better: "higher",
            values: [rate(floor), rate(ql), rate(rs)],
            target: String::new(),
            status: String::new(),
        });
    }

    let mut wd_rows = String::new();
    if let Some(w) = &wd {
        let f = |k: &str| w.get(k).and_then(Value::as_f64);
        let rt = f("round_trips_per_node_per_tick");
        let locks = f("locks_renewed_per_tick");
        let rt_ok = rt
            .zip(locks)
            .map(|(rt, l)| (rt - 1.0).abs() < 1e-9 && (l - s.watchdog_locks as f64).abs() < 1e-9);
        let busy = f("busy_share_of_core");
        let cpu = f("process_cpu_share_of_core");
        let cpu_ok = match (busy, cpu) {
            (Some(b), Some(c)) => Some(b < 0.05 && c < 0.05),
            (Some(b), None) => Some(b < 0.05),
            _ => None,
        };
        targets.push(json!({"name": "renewal: exactly 1 round trip per node per tick", "value": rt, "locks_per_tick": locks, "met": rt_ok}));
        targets.push(json!({"name": "watchdog < 5% of one core", "busy_share": busy, "process_share": cpu, "limit": 0.05, "met": cpu_ok}));
        let pct_s =
            |v: Option<f64>| v.map_or_else(|| "—".to_owned(), |v| format!("{:.2}%", v * 100.0));
        let _ = writeln!(wd_rows, "| watchdog metric | value | target | status |");
        let _ = writeln!(wd_rows, "| --- | --- | --- | --- |");
        let _ = writeln!(
            wd_rows,
            "| locks renewed per tick | {} | {} | |",
            fmt_num(locks),
            s.watchdog_locks
        );
        let _ = writeln!(
            wd_rows,
            "| round trips per node per tick (library counter) | {} | exactly 1 | {} |",
            fmt_num(rt),
            check(rt_ok)
        );
        let _ = writeln!(
            wd_rows,
            "| script calls (EVALSHA) per node per tick (INFO commandstats) | {} | {} (1,000 locks per call, one pipeline) | |",
            fmt_num(f("script_calls_per_node_per_tick")),
            s.watchdog_locks.div_ceil(1_000)
        );
        let _ = writeln!(
            wd_rows,
            "| watchdog busy time per tick (µs) | {} | | |",
            fmt_num(f("busy_micros_per_tick"))
        );
        let _ = writeln!(
            wd_rows,
            "| watchdog busy share of one core (busy_micros / tick / interval) | {} | < 5% | {} |",
            pct_s(busy),
            check(busy.map(|b| b < 0.05))
        );
        let _ = writeln!(
            wd_rows,
            "| process CPU share of one core, idle window (/proc/self/stat) | {} | < 5% | {} |",
            pct_s(cpu),
            check(cpu.map(|c| c < 0.05))
        );
        let _ = writeln!(
            wd_rows,
            "| process CPU per tick (ms) | {} | | |",
            fmt_num(f("process_cpu_ms_per_tick"))
        );
        let redis = w
            .get("redis_cpu_ms_per_tick_by_node")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<_>>())
            .unwrap_or_default();
        let _ = writeln!(
            wd_rows,
            "| redis-server CPU per node per tick (ms) | {} | | |",
            redis
                .iter()
                .map(|v| format!("{v:.1}"))
                .collect::<Vec<_>>()
                .join(" / ")
        );
        let _ = writeln!(
            wd_rows,
            "| ticks in window / losses / node errors | {} / {} / {} | {} / 0 / 0 | |",
            w["ticks"], w["losses"], w["node_errors"], s.watchdog_ticks
        );
    }

    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get);
    let nproc = sh("nproc", &[]);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "quorumlock compare — {} node(s) ({}), {} core(s) (nproc {}), redis {}, {} round(s){}",
        urls.len(),
        if local {
            "local redis-server on loopback"
        } else {
            "QUORUMLOCK_BENCH_NODES"
        },
        cores,
        nproc.as_deref().unwrap_or("?"),
        redis_version.as_deref().unwrap_or("?"),
        s.rounds,
        if s.quick { ", QUICK" } else { "" }
    );
    let _ = writeln!(out);
    if !rows.is_empty() {
        let _ = writeln!(out, "{}", table(&rows));
    }
    if !wd_rows.is_empty() {
        let _ = writeln!(out, "{wd_rows}");
    }
    let _ = writeln!(
        out,
        "ratios are quorumlock / other; for latency lower is better, for throughput higher is better. Run took {:.0} s.",
        elapsed.as_secs_f64()
    );
    for (who, r) in ALL.iter().zip(res.iter()) {
        let errs = [
            ("uncontended", r.unc_errors, r.unc_first_error.as_deref()),
            ("throughput", r.tp_failed, r.tp_first_error.as_deref()),
            ("handoff", r.ho_errors, None),
        ];
        for (case, n, first) in errs {
            if n > 0 {
                let _ = writeln!(
                    out,
                    "note: {} {case}: {n} failed attempt(s){}",
                    who.name(),
                    first.map(|e| format!(", first: {e}")).unwrap_or_default()
                );
            }
        }
    }
    println!("{out}");

    // ------------------------------------------------------------ JSON
    let per = |r: &mut Results| {
        json!({
            "uncontended": {
                "samples": r.unc_ns.len(),
                "p50_us": r.unc_us(50.0), "p99_us": r.unc_us(99.0), "p99_9_us": r.unc_us(99.9),
                "round_p50_us": r.unc_round_p50_us,
                "median_round_p50_us": median(&r.unc_round_p50_us),
                "errors": r.unc_errors,
                "cpu": r.unc_cpu.json(r.unc_ns.len() as u64),
            },
            "throughput": {
                "cycles_per_sec": r.tp(),
                "ok": r.tp_ok, "busy": r.tp_busy, "failed": r.tp_failed, "secs": r.tp_secs,
                "rounds": r.tp_rounds,
                "first_error": r.tp_first_error,
                "cpu_per_attempt": r.tp_cpu.json(r.tp_ok + r.tp_busy + r.tp_failed),
            },
            "handoff": {
                "samples": r.ho_ns.len(),
                "p50_ms": r.ho_ms(50.0), "p99_ms": r.ho_ms(99.0),
                "round_p50_ms": r.ho_round_p50_ms,
                "acquired": r.ho_acquired, "errors": r.ho_errors, "secs": r.ho_secs,
                "node_requests_all_nodes": r.ho_requests,
                "node_requests_per_acquisition": (r.ho_acquired > 0).then(|| r.ho_requests as f64 / r.ho_acquired as f64),
            },
        })
    };
    let [floor, ql, rs] = &mut res;
    let report = json!({
        "machine": {
            "available_parallelism": cores,
            "nproc": nproc,
            "cpu": cpu_model(),
            "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_owned()),
            "loadavg_before": load_before.map(|s| s.trim().to_owned()),
            "loadavg_after": std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_owned()),
        },
        "nodes": { "count": urls.len(), "local": local, "redis_version": redis_version },
        "settings": s.json(),
        "elapsed_secs": elapsed.as_secs_f64(),
        "direction": { "latency": "lower is better", "throughput": "higher is better", "ratios": "quorumlock / other" },
        "contenders": { "floor": per(floor), "quorumlock": per(ql), "rslock": per(rs) },
        "quorumlock_one_manager_per_task": { "handoff": per(&mut ho_separate)["handoff"].clone() },
        "ratios": {
            "uncontended_p50": { "vs_rslock": ratio(ql.unc_us(50.0), rs.unc_us(50.0)), "vs_floor": ratio(ql.unc_us(50.0), floor.unc_us(50.0)) },
            "uncontended_p99": { "vs_rslock": ratio(ql.unc_us(99.0), rs.unc_us(99.0)), "vs_floor": ratio(ql.unc_us(99.0), floor.unc_us(99.0)) },
            "uncontended_p99_9": { "vs_rslock": ratio(ql.unc_us(99.9), rs.unc_us(99.9)), "vs_floor": ratio(ql.unc_us(99.9), floor.unc_us(99.9)) },
            "throughput": { "vs_rslock": ratio(ql.tp(), rs.tp()), "vs_floor": ratio(ql.tp(), floor.tp()) },
            "handoff_p50": { "vs_rslock": ratio(ql.ho_ms(50.0), rs.ho_ms(50.0)), "vs_floor": ratio(ql.ho_ms(50.0), floor.ho_ms(50.0)) },
            "handoff_p99": { "vs_rslock": ratio(ql.ho_ms(99.0), rs.ho_ms(99.0)), "vs_floor": ratio(ql.ho_ms(99.0), floor.ho_ms(99.0)) },
            "handoff_p50_one_manager_per_task": { "vs_rslock": ratio(ho_separate.ho_ms(50.0), rs.ho_ms(50.0)), "vs_floor": ratio(ho_separate.ho_ms(50.0), floor.ho_ms(50.0)) },
        },
        "watchdog": wd,
        "targets": targets,
        "table_markdown": out,
    });
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("compare.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --all-targets` runs bench binaries without `--bench`:
    // do nothing there rather than a three-minute benchmark.
    if !args.iter().any(|a| a == "--bench") {
        println!("compare: run with `cargo bench --bench compare` (skipped under cargo test)");
        return Ok(());
    }
    let s = Settings::from_env(args.iter().any(|a| a == "--quick"))?;
    if std::env::var_os("RUST_LOG").is_some() {
        // Diagnostics only: tracing costs time, so figures taken with it are not comparable.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }

    let nodes_env = std::env::var("QUORUMLOCK_BENCH_NODES").ok();
    let (urls, local_nodes) = match nodes_env.as_deref().map(str::trim) {
        Some(list) if !list.is_empty() => {
            let urls: Vec<String> = list
                .split(',')
                .map(|u| u.trim().to_owned())
                .filter(|u| !u.is_empty())
                .collect();
            if urls.len() != 5 {
                eprintln!("note: {} node(s) given; the targets assume 5", urls.len());
            }
            (urls, None)
        }
        _ => {
            let nodes = local::LocalNodes::start(5)?;
            (nodes.urls(), Some(nodes))
        }
    };
    eprintln!("nodes: {}", urls.join(", "));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let local = local_nodes.is_some();
    // Everything runs in spawned tasks, on the runtime's workers, as an
    // application's code would (and quorumlock's task owners need a task).
    let result = rt.block_on(async move { tokio::spawn(run(urls, local, s)).await });
    drop(rt);
    drop(local_nodes);
    result?
}
