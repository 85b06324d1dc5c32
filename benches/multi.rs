//! `lock_all` against two nested single locks, on five local `redis-server`s.
//!
//! ```text
//! cargo bench --bench multi
//! ```
//!
//! Cases:
//! - uncontended: one task locks two names and releases them, `ROUNDS`
//!   times: `lock_all([a, b])` against `lock(a)` then `lock(b)`;
//! - transfers: 16 tasks make 2,000 transfers between random pairs of 10
//!   accounts (GET, GET, SET, SET on node 0) under
//!   - `lock_all([from, to])`;
//!   - `lock(min)` then `lock(max)`: nested single locks in a global order
//!     (the discipline `lock_all` makes unnecessary);
//!   - `lock(from)` then `try_lock(to, 100 ms)`: nested single locks in
//!     transfer order, which can deadlock; a timed-out second lock gives up
//!     the first and retries, and the give-ups are counted (a tenth of the
//!     transfers: it spends most of its time in those timeouts).
//!
//! Settings (environment): `QUORUMLOCK_MULTI_ROUNDS` (default 500),
//! `QUORUMLOCK_MULTI_TRANSFERS` (default 2000).
//!
//! Prints markdown tables.

#[path = "../tests/support/local.rs"]
mod local;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{Backoff, LockManager, Quorum};
use redis::aio::MultiplexedConnection;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const ACCOUNTS: usize = 10;
const TASKS: usize = 16;

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

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum How {
    All,
    Ordered,
    TransferOrder,
}

impl How {
    fn label(self) -> &'static str {
        match self {
            Self::All => "`lock_all([from, to])`",
            Self::Ordered => "`lock(min)` + `lock(max)` (ordered)",
            Self::TransferOrder => "`lock(from)` + `try_lock(to, 100 ms)` (transfer order)",
        }
    }
}

async fn uncontended(m: &LockManager, how: How, rounds: usize) -> Result<Vec<Duration>, BoxError> {
    let mut times = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let (a, b) = (format!("bench-u-{r}-a"), format!("bench-u-{r}-b"));
        let start = Instant::now();
        if how == How::All {
            let g = m.lock_all([&a, &b]).await?;
            g.release().await?;
        } else {
            let ga = m.lock(&a).await?;
            let gb = m.lock(&b).await?;
            gb.release().await?;
            ga.release().await?;
        }
        times.push(start.elapsed());
    }
    times.sort();
    Ok(times)
}

async fn get(c: &mut MultiplexedConnection, key: &str) -> Result<i64, BoxError> {
    Ok(redis::cmd("GET").arg(key).query_async(c).await?)
}

async fn set(c: &mut MultiplexedConnection, key: &str, v: i64) -> Result<(), BoxError> {
    let () = redis::cmd("SET").arg(key).arg(v).query_async(c).await?;
    Ok(())
}

/// Wall time and give-ups of `transfers` transfers by `TASKS` tasks.
async fn transfers(
    m: &LockManager,
    client: &redis::Client,
    how: How,
    transfers: usize,
) -> Result<(Duration, u64), BoxError> {
    let run = format!("bench-t-{:08x}", rand::random::<u32>());
    let mut c = client.get_multiplexed_async_connection().await?;
    for i in 0..ACCOUNTS {
        set(&mut c, &format!("{run}:account:{i}"), 1_000).await?;
    }
    let give_ups = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let (m, client, run, give_ups) = (
                m.clone(),
                client.clone(),
                run.clone(),
                Arc::clone(&give_ups),
            );
            let share = transfers / TASKS + usize::from(t < transfers % TASKS);
            tokio::spawn(async move {
                let mut c = client.get_multiplexed_async_connection().await?;
                for _ in 0..share {
                    let from = rand::random_range(0..ACCOUNTS);
                    let to = (from + rand::random_range(1..ACCOUNTS)) % ACCOUNTS;
                    let (lf, lt) = (format!("{run}:lock:{from}"), format!("{run}:lock:{to}"));
                    let guards = match how {
                        How::All => m.lock_all([&lf, &lt]).await?.into_guards(),
                        How::Ordered => {
                            let (x, y) = if from < to { (&lf, &lt) } else { (&lt, &lf) };
                            let gx = m.lock(x).await?;
                            vec![gx, m.lock(y).await?]
                        }
                        How::TransferOrder => loop {
                            let gf = m.lock(&lf).await?;
                            match m.try_lock(&lt, Duration::from_millis(100)).await {
                                Ok(gt) => break vec![gf, gt],
                                Err(e) if e.is_contended() => {
                                    give_ups.fetch_add(1, Ordering::Relaxed);
                                    gf.release().await?;
                                    let pause = rand::random_range(0..5_000);
                                    tokio::time::sleep(Duration::from_micros(pause)).await;
                                }
                                Err(e) => return Err(BoxError::from(e)),
                            }
                        },
                    };
                    let (ka, kb) = (
                        format!("{run}:account:{from}"),
                        format!("{run}:account:{to}"),
                    );
                    let (x, y) = (get(&mut c, &ka).await?, get(&mut c, &kb).await?);
                    set(&mut c, &ka, x - 1).await?;
                    set(&mut c, &kb, y + 1).await?;
                    for g in guards {
                        g.release().await?;
                    }
                }
                Ok::<(), BoxError>(())
            })
        })
        .collect();
    for t in tasks {
        t.await??;
    }
    let elapsed = start.elapsed();
    let mut total = 0;
    for i in 0..ACCOUNTS {
        total += get(&mut c, &format!("{run}:account:{i}")).await?;
    }
    if total != 1_000 * i64::try_from(ACCOUNTS)? {
        return Err(format!("{}: total {total}, not conserved", how.label()).into());
    }
    Ok((elapsed, give_ups.load(Ordering::Relaxed)))
}

async fn run() -> Result<(), BoxError> {
    let rounds = env_usize("QUORUMLOCK_MULTI_ROUNDS", 500);
    let n = env_usize("QUORUMLOCK_MULTI_TRANSFERS", 2_000);
    let nodes = local::LocalNodes::start(5)?;
    let m = LockManager::builder()
        .nodes(nodes.urls())
        .quorum(Quorum::Majority)
        .backoff(Backoff::new(
            Duration::from_millis(1),
            Duration::from_millis(8),
        )?)
        .build()
        .await?;
    let client = redis::Client::open(nodes.url(0))?;

    println!("## Two names, uncontended ({rounds} rounds, lock + release)\n");
    println!("| how | p50 ms | p99 ms |");
    println!("| --- | ---: | ---: |");
    for how in [How::All, How::Ordered] {
        let t = uncontended(&m, how, rounds).await?;
        println!(
            "| {} | {:.3} | {:.3} |",
            how.label(),
            ms(percentile(&t, 0.5)),
            ms(percentile(&t, 0.99))
        );
    }

    println!("\n## Transfers: {TASKS} tasks, {n} transfers, {ACCOUNTS} accounts\n");
    println!("| how | transfers | wall s | transfers/s | give-ups (deadlock timeouts) |");
    println!("| --- | ---: | ---: | ---: | ---: |");
    for how in [How::All, How::Ordered, How::TransferOrder] {
        // Transfer order spends most of its time in timeouts: a tenth.
        let n = if how == How::TransferOrder { n / 10 } else { n };
        let (elapsed, give_ups) = transfers(&m, &client, how, n).await?;
        #[allow(clippy::cast_precision_loss)]
        let rate = n as f64 / elapsed.as_secs_f64();
        println!(
            "| {} | {n} | {:.2} | {rate:.0} | {give_ups} |",
            how.label(),
            elapsed.as_secs_f64()
        );
    }
    m.flush().await;
    Ok(())
}

fn main() -> Result<(), BoxError> {
    // `cargo test --all-targets` runs bench binaries without `--bench`:
    // do nothing there rather than the whole benchmark in debug mode.
    if !std::env::args().skip(1).any(|a| a == "--bench") {
        println!("multi: run with `cargo bench --bench multi` (skipped under cargo test)");
        return Ok(());
    }
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?
        .block_on(run())
}
