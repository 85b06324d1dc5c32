//! "Inventory oversold": several service instances sell a scarce item at the
//! same time. Each sale reads the stock, takes a few milliseconds to charge
//! the customer, then writes the stock back. Without a lock, instances sell
//! the same units twice; under a quorumlock lock, never.
//!
//! ```sh
//! cargo run --example inventory                 # starts 5 local masters itself
//! QUORUMLOCK_NODES=redis://127.0.0.1:7001,... cargo run --example inventory
//! ```

#[path = "../tests/support/local.rs"]
mod local;

use std::time::{Duration, Instant};

use quorumlock::{LockManager, Quorum};
use redis::aio::MultiplexedConnection;

const INSTANCES: usize = 6;
const STOCK: i64 = 25;
const ATTEMPTS_PER_INSTANCE: usize = 12;

struct Outcome {
    sold: i64,
    stock_left: i64,
    acquisitions: u64,
    elapsed: Duration,
}

/// One sale: read, "charge the card", write. Returns whether a unit was sold.
async fn sell(db: &mut MultiplexedConnection, item: &str) -> redis::RedisResult<bool> {
    let stock: i64 = redis::cmd("GET").arg(item).query_async(db).await?;
    if stock <= 0 {
        return Ok(false);
    }
    tokio::time::sleep(Duration::from_millis(3)).await;
    let _: () = redis::cmd("SET")
        .arg(item)
        .arg(stock - 1)
        .query_async(db)
        .await?;
    let _: i64 = redis::cmd("INCR")
        .arg(format!("{item}:sold"))
        .query_async(db)
        .await?;
    Ok(true)
}

async fn run(urls: &[String], with_lock: bool) -> Result<Outcome, Box<dyn std::error::Error>> {
    let item = format!(
        "inventory:widget:{}",
        if with_lock { "locked" } else { "unlocked" }
    );
    let mut db = redis::Client::open(urls[0].as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let _: () = redis::cmd("SET")
        .arg(&item)
        .arg(STOCK)
        .query_async(&mut db)
        .await?;
    let _: () = redis::cmd("DEL")
        .arg(format!("{item}:sold"))
        .query_async(&mut db)
        .await?;

    let start = Instant::now();
    let mut instances = Vec::new();
    for _ in 0..INSTANCES {
        // Each instance is its own service: its own manager and connections.
        let manager = LockManager::builder()
            .nodes(urls.iter().cloned())
            .quorum(Quorum::Majority)
            .build()
            .await?;
        let mut db = db.clone();
        let item = item.clone();
        instances.push(tokio::spawn(async move {
            let mut acquisitions = 0u64;
            for _ in 0..ATTEMPTS_PER_INSTANCE {
                if with_lock {
                    let guard = manager.lock(&item).await?;
                    acquisitions += 1;
                    sell(&mut db, &item).await?;
                    guard.release().await?;
                } else {
                    sell(&mut db, &item).await?;
                }
            }
            Ok::<u64, Box<dyn std::error::Error + Send + Sync>>(acquisitions)
        }));
    }
    let mut acquisitions = 0;
    for instance in instances {
        acquisitions += instance.await?.map_err(|e| e.to_string())?;
    }
    let sold: i64 = redis::cmd("GET")
        .arg(format!("{item}:sold"))
        .query_async(&mut db)
        .await?;
    let stock_left: i64 = redis::cmd("GET").arg(&item).query_async(&mut db).await?;
    Ok(Outcome {
        sold,
        stock_left,
        acquisitions,
        elapsed: start.elapsed(),
    })
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (_local, urls) = local::env_or_local(5)?;
    println!("nodes: {}", urls.join(", "));
    println!(
        "{INSTANCES} service instances, {ATTEMPTS_PER_INSTANCE} sale attempts each, {STOCK} units in stock\n"
    );

    let unlocked = run(&urls, false).await?;
    let locked = run(&urls, true).await?;

    println!(
        "{:<16} {:>6} {:>6} {:>9} {:>11} {:>13} {:>9}",
        "mode", "stock", "sold", "oversold", "stock left", "acquisitions", "time"
    );
    for (mode, o) in [("no lock", &unlocked), ("quorumlock", &locked)] {
        println!(
            "{:<16} {:>6} {:>6} {:>9} {:>11} {:>13} {:>8.0?}",
            mode,
            STOCK,
            o.sold,
            (o.sold - STOCK).max(0),
            o.stock_left,
            o.acquisitions,
            o.elapsed
        );
    }
    println!();
    if locked.sold == STOCK && unlocked.sold > STOCK {
        println!(
            "without the lock {} units were sold twice; under quorumlock none were.",
            unlocked.sold - STOCK
        );
    } else if locked.sold != STOCK {
        return Err(format!("the locked run sold {} of {STOCK}", locked.sold).into());
    }
    Ok(())
}
