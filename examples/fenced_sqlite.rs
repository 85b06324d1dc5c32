//! Fencing tokens end to end, with a database that checks them (Kleppmann's
//! scenario, "How to do distributed locking"):
//!
//! 1. client A takes a lock with a short lease and no renewal;
//! 2. A pauses (a GC pause, a stopped VM) past its lease;
//! 3. client B takes the lock, with a larger fencing token, and writes to a
//!    SQLite table;
//! 4. A wakes, still believing it holds the lock, and writes with its old
//!    token: the database rejects it, and B's row stays.
//!
//! The database keeps the largest token per lock name in a table `fences`
//! and checks it in the transaction of each write (`fenced_sqlite/sql_fence.rs`).
//!
//! ```sh
//! cargo run --example fenced_sqlite                 # starts 5 local masters itself
//! QUORUMLOCK_NODES=redis://127.0.0.1:7001,... cargo run --example fenced_sqlite
//! ```

#[path = "../tests/support/local.rs"]
mod local;
#[path = "fenced_sqlite/sql_fence.rs"]
mod sql_fence;

use std::time::Duration;

use quorumlock::fenced::FencedWrite;
use quorumlock::{LockManager, Quorum};

/// A's lease: fixed, not renewed.
const LEASE: Duration = Duration::from_millis(500);
/// A's pause: past its lease.
const PAUSE: Duration = Duration::from_millis(1_500);

const DOCUMENT: &str = "quarterly-report";

async fn manager(urls: &[String]) -> Result<LockManager, quorumlock::Error> {
    LockManager::builder()
        .nodes(urls.iter().cloned())
        .quorum(Quorum::Majority)
        .build()
        .await
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_local, urls) = local::env_or_local(5)?;
    println!("nodes: {}", urls.join(", "));
    let path = std::env::temp_dir().join(format!("fenced_sqlite-{}.db", std::process::id()));
    let lock = format!("fenced-sqlite:{}", std::process::id());
    println!("database: {}\nlock: {lock}\n", path.display());

    // Two services, each with its manager and its database connection.
    let (client_a, client_b) = (manager(&urls).await?, manager(&urls).await?);
    let mut db_a = sql_fence::open(&path)?;
    let mut db_b = sql_fence::open(&path)?;

    let guard_a = client_a.lock_with_lease(&lock, LEASE).await?;
    let token_a = guard_a.fencing_token();
    println!("A holds the lock, token {token_a}, lease {LEASE:?} without renewal");
    println!("A pauses for {PAUSE:?}; its lease runs out meanwhile");

    // B runs while A is paused: it waits for the lock, then writes.
    let b = {
        let lock = lock.clone();
        tokio::spawn(async move {
            let guard = client_b.lock(&lock).await?;
            let token = guard.fencing_token();
            let outcome = sql_fence::write(&mut db_b, &lock, token, DOCUMENT, "written by B")?;
            guard.release().await?;
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>((token, outcome))
        })
    };
    tokio::time::sleep(PAUSE).await;
    let (token_b, outcome_b) = b.await?.map_err(|e| e.to_string())?;
    println!("B took the lock, token {token_b}, and wrote: {outcome_b:?}");

    println!(
        "A wakes (is_held: {}) and writes with token {token_a}",
        guard_a.is_held()
    );
    let outcome_a = sql_fence::write(&mut db_a, &lock, token_a, DOCUMENT, "written by A")?;
    println!("  the database answers: {outcome_a:?}");
    if let Err(e) = guard_a.release().await {
        println!("  A's release: {e}");
    }

    let row = sql_fence::read(&db_a, DOCUMENT)?;
    println!("\ndocument {DOCUMENT:?}: {row:?}");
    drop(db_a);
    let _ = std::fs::remove_file(&path);

    let expected_row = Some(("written by B".to_owned(), token_b));
    if outcome_b != FencedWrite::Written
        || outcome_a != (FencedWrite::Rejected { largest: token_b })
        || row != expected_row
    {
        return Err("the stale write was not fenced off".into());
    }
    println!("A's stale write was rejected: the token only protects a resource that checks it.");
    Ok(())
}
