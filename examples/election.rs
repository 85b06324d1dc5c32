//! A scheduler that runs its jobs only while it leads: three instances
//! campaign for the election "scheduler"; the leader runs a job every
//! 100 ms and writes each result to a store with its term, and the store
//! keeps only writes of the largest term it has seen. One leader freezes
//! (a long GC pause) past its lease: the next candidate leads with a larger
//! term, and the frozen leader's late write is rejected by the store.
//!
//! ```sh
//! cargo run --example election                 # starts 5 local masters itself
//! QUORUMLOCK_NODES=redis://127.0.0.1:7001,... cargo run --example election
//! ```

#[path = "../tests/support/local.rs"]
mod local;

use std::time::Duration;

use quorumlock::{LockManager, Quorum};
use redis::aio::MultiplexedConnection;

/// The store's fenced write: an entry is appended only with a term at
/// least as large as every term written before.
const FENCED_WRITE: &str = r"
local seen = tonumber(redis.call('get', KEYS[1]) or '0')
if tonumber(ARGV[1]) < seen then return 0 end
redis.call('set', KEYS[1], ARGV[1])
redis.call('rpush', KEYS[2], ARGV[2])
return 1
";

const LEASE: Duration = Duration::from_secs(1);

/// Writes `entry` to the store with `term`; whether the store took it.
async fn write(db: &mut MultiplexedConnection, term: u64, entry: &str) -> redis::RedisResult<bool> {
    let taken: i64 = redis::Script::new(FENCED_WRITE)
        .key("scheduler:store:term")
        .key("scheduler:store:log")
        .arg(term)
        .arg(entry)
        .invoke_async(db)
        .await?;
    Ok(taken == 1)
}

/// One instance: campaigns, runs jobs while it leads, then resigns; the
/// instance that `freezes` stops answering for twice the lease mid-term,
/// then tries one more write with its old term.
async fn instance(
    name: &'static str,
    urls: Vec<String>,
    mut db: MultiplexedConnection,
    freezes: bool,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let locks = LockManager::builder()
        .nodes(urls)
        .quorum(Quorum::Majority)
        .lease(LEASE)
        .build()
        .await?;
    let election = locks.election("scheduler");
    let me = election.campaign(name).await?;
    let term = me.term();
    for job in 1..=5 {
        if freezes && job == 3 {
            println!("  {name}: frozen for {:?} (a long pause)", 2 * LEASE);
            // A pause stops everything, the checks of `is_leader` too.
            std::thread::sleep(2 * LEASE);
            let late = format!("job {job} by {name} in term {term} (late)");
            let taken = write(&mut db, term, &late).await?;
            println!(
                "  {name}: late write in term {term} {}; still leader: {}",
                if taken {
                    "TAKEN (bad)"
                } else {
                    "rejected by the store"
                },
                me.is_leader()
            );
            return Ok(());
        }
        if !me.is_leader() {
            break;
        }
        let entry = format!("job {job} by {name} in term {term}");
        write(&mut db, term, &entry).await?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    me.resign().await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let (_local, urls) = local::env_or_local(5)?;
    println!("nodes: {}", urls.join(", "));
    let mut db = redis::Client::open(urls[0].as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis::cmd("DEL")
        .arg("scheduler:store:term")
        .arg("scheduler:store:log")
        .query_async(&mut db)
        .await?;

    // Anyone can watch the election: the leader as a quorum agrees on it.
    let observer = LockManager::builder().nodes(urls.clone()).build().await?;
    let mut leaders = observer.election("scheduler").observe();
    let watch = tokio::spawn(async move {
        while leaders.changed().await.is_ok() {
            match &*leaders.borrow_and_update() {
                Some(l) => println!("leader: {} (term {})", l.value(), l.term()),
                None => println!("leader: none"),
            }
        }
    });

    // Each instance is a process of its own: one thread, one runtime, so
    // that a freeze stops all of it (its watchdog too). The first to
    // campaign freezes; the others wait their turn.
    let mut instances = Vec::new();
    for (i, name) in ["sched-a", "sched-b", "sched-c"].into_iter().enumerate() {
        let (urls, db) = (urls.clone(), db.clone());
        instances.push(std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()?
                .block_on(instance(name, urls, db, i == 0))
        }));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for i in instances {
        i.join().map_err(|_| "an instance panicked")??;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    watch.abort();

    let log: Vec<String> = redis::cmd("LRANGE")
        .arg("scheduler:store:log")
        .arg(0)
        .arg(-1)
        .query_async(&mut db)
        .await?;
    println!(
        "\nthe store's log ({} entries, terms never going back):",
        log.len()
    );
    for entry in log {
        println!("  {entry}");
    }
    Ok(())
}
