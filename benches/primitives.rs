//! The semaphore and the read-write lock against quorumlock's own lock,
//! on the same five local `redis-server`s, side by side in one run
//! (interleaved: each contender's half of a case runs in turn, twice).
//!
//! ```text
//! cargo bench --bench primitives
//! ```
//!
//! Cases:
//! - uncontended acquire + release, one task: `lock` + `release` against a
//!   semaphore of 16 permits (`acquire` + `release`, most permits free),
//!   `read` + `release` and `write` + `release`; p50 and p99;
//! - throughput with 64 tasks for a fixed time: the lock of one name
//!   (everyone waits for everyone), a semaphore of 16 permits, the read
//!   lock (64 readers together) and the write lock of one name.
//!
//! Settings (environment): `QUORUMLOCK_PRIMITIVES_ROUNDS` (uncontended
//! rounds, default 400), `QUORUMLOCK_PRIMITIVES_SECS` (seconds per
//! throughput half, default 3).
//!
//! Prints markdown tables: each case and its ratio to the lock's.

#[path = "../tests/support/local.rs"]
mod local;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockManager, Quorum};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const TASKS: usize = 64;
const PERMITS: u32 = 16;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Case {
    Lock,
    Semaphore,
    Read,
    Write,
}

impl Case {
    fn label(self) -> &'static str {
        match self {
            Self::Lock => "lock (one name)",
            Self::Semaphore => "semaphore, 16 permits",
            Self::Read => "read lock",
            Self::Write => "write lock",
        }
    }
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    // Rounded rank of a percentile: small and non-negative.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// One acquire + release of `case` on `m`, under `name`.
async fn cycle(m: &LockManager, case: Case, name: &str) -> Result<(), BoxError> {
    match case {
        Case::Lock => m.lock(name).await?.release().await?,
        Case::Semaphore => {
            m.semaphore(name, PERMITS)?
                .acquire()
                .await?
                .release()
                .await?
        }
        Case::Read => m.rw_lock(name).read().await?.release().await?,
        Case::Write => m.rw_lock(name).write().await?.release().await?,
    }
    Ok(())
}

/// `rounds` uncontended cycles of `case`, one task; each cycle's time.
async fn uncontended(
    m: &LockManager,
    case: Case,
    rounds: usize,
) -> Result<Vec<Duration>, BoxError> {
    let name = format!("bench-u-{case:?}");
    // One cycle first: the scripts loaded, the semaphore's count checked.
    cycle(m, case, &name).await?;
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let t = Instant::now();
        cycle(m, case, &name).await?;
        times.push(t.elapsed());
    }
    Ok(times)
}

/// Cycles of `case` per second by [`TASKS`] tasks over `secs`.
async fn throughput(m: &LockManager, case: Case, secs: u64) -> Result<f64, BoxError> {
    let name = format!("bench-t-{case:?}");
    cycle(m, case, &name).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::with_capacity(TASKS);
    for _ in 0..TASKS {
        let (m, name, stop, done) = (m.clone(), name.clone(), stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                if cycle(&m, case, &name).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_secs(secs)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await?;
    }
    // A count of cycles over a few seconds: well within f64.
    #[allow(clippy::cast_precision_loss)]
    let rate = done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    Ok(rate)
}

fn main() -> Result<(), BoxError> {
    let rounds = env_usize("QUORUMLOCK_PRIMITIVES_ROUNDS", 400);
    let secs = u64::try_from(env_usize("QUORUMLOCK_PRIMITIVES_SECS", 3)).unwrap_or(3);
    let nodes = local::LocalNodes::start(5)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let m = LockManager::builder()
            .nodes(nodes.urls())
            .quorum(Quorum::Majority)
            .node_timeout(Duration::from_millis(300))
            .build()
            .await?;
        let cases = [Case::Lock, Case::Semaphore, Case::Read, Case::Write];
        let mut times: Vec<Vec<Duration>> = vec![Vec::new(); cases.len()];
        let mut rates = vec![0.0; cases.len()];
        for _ in 0..2 {
            for (i, case) in cases.iter().enumerate() {
                times[i].extend(uncontended(&m, *case, rounds / 2).await?);
                rates[i] += throughput(&m, *case, secs).await? / 2.0;
            }
        }
        let p50: Vec<Duration> = times
            .iter_mut()
            .map(|t| {
                t.sort();
                percentile(t, 0.5)
            })
            .collect();
        println!(
            "| case | uncontended p50 | p99 | p50 ÷ lock's | {TASKS} tasks, cycles/s | ÷ lock's |"
        );
        println!("| --- | --- | --- | --- | --- | --- |");
        for (i, case) in cases.iter().enumerate() {
            println!(
                "| {} | {:.2} ms | {:.2} ms | {:.2} | {:.0} | {:.2} |",
                case.label(),
                p50[i].as_secs_f64() * 1e3,
                percentile(&times[i], 0.99).as_secs_f64() * 1e3,
                p50[i].as_secs_f64() / p50[0].as_secs_f64(),
                rates[i],
                rates[i] / rates[0],
            );
        }
        Ok::<(), BoxError>(())
    })
}
