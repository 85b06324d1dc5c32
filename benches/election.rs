//! Leader election: how soon the next candidate leads, quorumlock's
//! `Election` against an election hand-rolled on rslock (the usual one:
//! `lock` with its retries in a loop, an `extend` loop while leading, an
//! `unlock` to resign), on five local `redis-server`s, side by side in one
//! run.
//!
//! ```text
//! cargo bench --bench election
//! ```
//!
//! Cases, each a leader and one waiting candidate, roles swapped each round:
//! - resign: from the leader's call to resign (`resign()`, `unlock`) to the
//!   candidate's campaign returning (`campaign()`, `lock`);
//! - crash: the leader's process goes silent (quorumlock: its connections
//!   stop through a proxy; rslock: its extend loop stops, nothing is
//!   unlocked), lease and TTL 1 s: from the crash to the candidate leading.
//!
//! Settings (environment): `QUORUMLOCK_ELECTION_ROUNDS` (resign rounds,
//! default 200), `QUORUMLOCK_ELECTION_CRASHES` (default 12).
//!
//! Prints markdown tables: p50 and p99 of each, and quorumlock ÷ rslock.

#[path = "../tests/support/local.rs"]
mod local;
#[path = "../tests/support/silence.rs"]
mod silence;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockManager, Quorum};
use silence::silence;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The lease of quorumlock and the TTL of rslock in the crash case.
const LEASE: Duration = Duration::from_secs(1);

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

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1e3)
}

async fn manager(urls: Vec<String>, lease: Duration) -> Result<LockManager, BoxError> {
    Ok(LockManager::builder()
        .nodes(urls)
        .quorum(Quorum::Majority)
        .node_timeout(Duration::from_millis(300))
        .lease(lease)
        .build()
        .await?)
}

/// quorumlock: `rounds` hand-overs by resignation between two managers.
async fn ql_resign(urls: &[String], rounds: usize) -> Result<Vec<Duration>, BoxError> {
    let pair = [
        manager(urls.to_vec(), Duration::from_secs(10)).await?,
        manager(urls.to_vec(), Duration::from_secs(10)).await?,
    ];
    let name = format!("bench-resign-{:08x}", rand::random::<u32>());
    let mut leader = pair[0].election(&*name).campaign("0").await?;
    let mut out = Vec::with_capacity(rounds);
    for round in 0..rounds {
        let e = pair[(round + 1) % 2].election(&*name);
        let next = tokio::spawn(async move {
            let me = e.campaign("next").await;
            (Instant::now(), me)
        });
        // The candidate is queued once its first attempt missed.
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t0 = Instant::now();
        leader.resign().await?;
        let (t1, me) = next.await?;
        leader = me?;
        out.push(t1 - t0);
    }
    leader.resign().await?;
    Ok(out)
}

/// rslock: the same hand-overs, the candidate looping on `lock` (its
/// default retries: 3 tries, up to 200 ms apart).
async fn rs_resign(urls: &[String], rounds: usize) -> Result<Vec<Duration>, BoxError> {
    let rs = rslock::LockManager::new(urls.to_vec());
    let name = format!("rslock:bench-resign-{:08x}", rand::random::<u32>());
    let ttl = Duration::from_secs(10);
    let mut leader = loop {
        if let Ok(l) = rs.lock(name.as_bytes(), ttl).await {
            break l;
        }
    };
    let mut out = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let (rs2, n) = (rs.clone(), name.clone());
        let next = tokio::spawn(async move {
            loop {
                if let Ok(l) = rs2.lock(n.as_bytes(), ttl).await {
                    return (Instant::now(), l);
                }
            }
        });
        tokio::time::sleep(Duration::from_millis(5)).await;
        let t0 = Instant::now();
        rs.unlock(&leader).await;
        let (t1, l) = next.await?;
        leader = l;
        out.push(t1 - t0);
    }
    rs.unlock(&leader).await;
    Ok(out)
}

/// quorumlock: `rounds` crashes of a leader whose connections go silent.
async fn ql_crash(
    urls: &[String],
    ports: &[u16],
    rounds: usize,
) -> Result<Vec<Duration>, BoxError> {
    let survivor = manager(urls.to_vec(), LEASE).await?;
    let mut out = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let name = format!("bench-crash-{:08x}", rand::random::<u32>());
        let proxy = silence(ports).await?;
        let doomed = manager(proxy.urls.clone(), LEASE).await?;
        let old = doomed.election(&*name).campaign("old").await?;
        let e = survivor.election(&*name);
        let next = tokio::spawn(async move {
            let me = e.campaign("new").await;
            (Instant::now(), me)
        });
        // Crash at a random point of the renewal period.
        let at = rand::random_range(50..LEASE.as_millis() as u64 / 3 + 50);
        tokio::time::sleep(Duration::from_millis(at)).await;
        let t0 = Instant::now();
        proxy.silent.store(true, Ordering::SeqCst);
        let (t1, me) = next.await?;
        out.push(t1 - t0);
        me?.resign().await?;
        drop(old);
    }
    Ok(out)
}

/// rslock: the same crashes, the leader's extend loop stopped without an
/// unlock.
async fn rs_crash(urls: &[String], rounds: usize) -> Result<Vec<Duration>, BoxError> {
    let rs = rslock::LockManager::new(urls.to_vec());
    let mut out = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let name = format!("rslock:bench-crash-{:08x}", rand::random::<u32>());
        let leader = loop {
            if let Ok(l) = rs.lock(name.as_bytes(), LEASE).await {
                break l;
            }
        };
        let (rs1, stop) = (rs.clone(), Arc::new(AtomicBool::new(false)));
        let stopped = Arc::clone(&stop);
        let renew = tokio::spawn(async move {
            let mut held = leader;
            while !stopped.load(Ordering::SeqCst) {
                tokio::time::sleep(LEASE / 3).await;
                if stopped.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(l) = rs1.extend(&held, LEASE).await {
                    held = l;
                }
            }
        });
        let (rs2, n) = (rs.clone(), name.clone());
        let next = tokio::spawn(async move {
            loop {
                if let Ok(l) = rs2.lock(n.as_bytes(), LEASE).await {
                    return (Instant::now(), l);
                }
            }
        });
        let at = rand::random_range(50..LEASE.as_millis() as u64 / 3 + 50);
        tokio::time::sleep(Duration::from_millis(at)).await;
        let t0 = Instant::now();
        stop.store(true, Ordering::SeqCst);
        renew.abort();
        let (t1, l) = next.await?;
        out.push(t1 - t0);
        rs.unlock(&l).await;
    }
    Ok(out)
}

fn row(
    case: &str,
    who: &str,
    mut v: Vec<Duration>,
    base: Option<(Duration, Duration)>,
) -> (Duration, Duration) {
    v.sort();
    let (p50, p99) = (percentile(&v, 0.5), percentile(&v, 0.99));
    let ratio = base.map_or_else(
        || "1".to_owned(),
        |(b50, b99)| {
            format!(
                "{:.3} / {:.3}",
                p50.as_secs_f64() / b50.as_secs_f64(),
                p99.as_secs_f64() / b99.as_secs_f64()
            )
        },
    );
    println!(
        "| {case} | {who} | {} | {} | {} | {ratio} |",
        v.len(),
        ms(p50),
        ms(p99)
    );
    (p50, p99)
}

fn main() -> Result<(), BoxError> {
    let rounds = env_usize("QUORUMLOCK_ELECTION_ROUNDS", 200);
    let crashes = env_usize("QUORUMLOCK_ELECTION_CRASHES", 12);
    let nodes = local::LocalNodes::start(5)?;
    let urls = nodes.urls();
    let ports: Vec<u16> = (0..nodes.len()).map(|i| nodes.port(i)).collect();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        // Interleaved: each contender's half of a case runs in turn, twice.
        let (mut qr, mut rr, mut qc, mut rc) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..2 {
            qr.extend(ql_resign(&urls, rounds / 2).await?);
            rr.extend(rs_resign(&urls, rounds / 2).await?);
            qc.extend(ql_crash(&urls, &ports, crashes / 2).await?);
            rc.extend(rs_crash(&urls, crashes / 2).await?);
        }
        println!("| case | election | rounds | p50 | p99 | p50 / p99 ÷ rslock |");
        println!("| --- | --- | --- | --- | --- | --- |");
        let base = row("resign → next leader", "rslock, hand-rolled", rr, None);
        row(
            "resign → next leader",
            "quorumlock `Election`",
            qr,
            Some(base),
        );
        let base = row(
            "crash → next leader (lease 1 s)",
            "rslock, hand-rolled",
            rc,
            None,
        );
        row(
            "crash → next leader (lease 1 s)",
            "quorumlock `Election`",
            qc,
            Some(base),
        );
        Ok::<_, BoxError>(())
    })
}
