//! The shared harness of the integration tests: five local masters started
//! once per test binary, raw connections to inspect them, and helpers.
//!
//! Modules of every test binary:
//!
//! - `local`: local `redis-server` processes ([`LocalNodes`]);
//! - `local_cluster`: a local Redis Cluster of three masters, started once
//!   per test binary that asks for it, and a one-node cluster;
//! - `masters`: the [`Nodes`] trait that local processes and containers
//!   share, and raw Redis helpers written once against it.
//!
//! Modules that only the binaries needing them include (with `#[path]`), so
//! that the others do not build them:
//!
//! - `containers.rs`: five masters in Docker with fault injection and clock
//!   jumps (`Cluster`; `tests/chaos.rs`);
//! - `cluster.rs`: managers over the cluster, exclusive use, hand-made holds
//!   (`tests/chaos.rs`);
//! - `history.rs`: who believed they held a lock, and its checker;
//! - `clients.rs`: contending clients' critical sections and counters;
//! - `rng.rs`: the seeded randomness of fault schedules, env knobs;
//! - `failover.rs`: the tests that fault the local replica cluster, one at a
//!   time (`tests/cluster_chaos.rs`, `cli/tests/cluster_chaos.rs`);
//! - `tls.rs`: TLS-only masters and a TLS-only cluster node with a CA of our
//!   own (`tests/security.rs`, `cli/tests/cli.rs`);
//! - `sentinel.rs`: a local master group under three sentinels, passwords
//!   on both, and a TLS-only one (`tests/sentinel.rs`, `cli/tests/cli.rs`);
//! - `sentinel_clients.rs`: managers over that group and contending
//!   clients (`tests/sentinel.rs`);
//! - `gate.rs`: a proxy that holds one connection's requests from the
//!   first that carries a script's digest (`tests/watchdog.rs`).
//!
//! The command line's tests (`cli/tests/`, the `quorumlock-cli` package)
//! include this harness by path, so both packages share the one harness.

#![allow(dead_code)]

pub mod local;
pub mod local_cluster;
pub mod masters;

use std::sync::OnceLock;
use std::time::Duration;

use quorumlock::{LockManager, LockManagerBuilder, Quorum};

pub use local::LocalNodes;
#[allow(unused_imports)]
pub use masters::{key, Nodes};

/// Five masters shared by every test of this binary.
pub fn nodes() -> &'static LocalNodes {
    static NODES: OnceLock<LocalNodes> = OnceLock::new();
    NODES.get_or_init(|| LocalNodes::start(5).expect("start 5 local redis-server masters"))
}

/// A builder over the shared nodes with test-friendly timings.
pub fn builder() -> LockManagerBuilder {
    LockManager::builder()
        .nodes(nodes().urls())
        .node_timeout(Duration::from_millis(300))
}

/// A manager over the shared nodes with `quorum`.
pub async fn manager(quorum: Quorum) -> LockManager {
    builder()
        .quorum(quorum)
        .build()
        .await
        .expect("build a manager over the local nodes")
}

/// A raw connection to shared node `i`, independent of quorumlock.
pub async fn raw(i: usize) -> redis::aio::MultiplexedConnection {
    masters::raw(nodes(), i).await
}

/// Makes `owner` hold `name` on shared node `i` for a minute, behind
/// quorumlock's back, with a raw HSET and PEXPIRE.
pub async fn pre_take(i: usize, name: &str, owner: &str) {
    masters::take_by_hand(nodes(), i, name, owner, Duration::from_secs(60)).await;
}

/// `name` held through `m` by a fresh explicit owner (not the calling task).
pub async fn hold_as_new_owner(m: &LockManager, name: &str) -> quorumlock::LockGuard {
    m.request(name)
        .owner(&m.new_owner())
        .acquire()
        .await
        .expect("lock as a new owner")
}

/// Whether shared node `i` has the lock key of `name`; a node that cannot
/// say counts as without it.
pub async fn has_key(i: usize, name: &str) -> bool {
    masters::exists(nodes(), i, name).await.unwrap_or(false)
}

/// On how many shared nodes the lock key of `name` exists.
pub async fn nodes_with_key(name: &str) -> usize {
    masters::nodes_with_key(nodes(), name).await.len()
}

/// A lock name unique to this test run.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// Scripts run (`EVALSHA` and `EVAL` calls), summed over the shared nodes.
pub async fn script_calls() -> u64 {
    let mut total = 0;
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let info: String = redis::cmd("INFO")
            .arg("commandstats")
            .query_async(&mut c)
            .await
            .expect("INFO commandstats");
        for line in info.lines() {
            let Some((cmd, stats)) = line.trim().split_once(':') else {
                continue;
            };
            if cmd != "cmdstat_evalsha" && cmd != "cmdstat_eval" {
                continue;
            }
            let calls = stats
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|v| v.parse::<u64>().ok())
                .expect("calls=N in commandstats");
            total += calls;
        }
    }
    total
}

/// Waits until the shared nodes have run no script for `quiet` (at most
/// `within`): the calls of a burst of requests are over. Whether they are.
pub async fn scripts_settled(quiet: Duration, within: Duration) -> bool {
    let end = tokio::time::Instant::now() + within;
    let mut last = script_calls().await;
    while tokio::time::Instant::now() < end {
        tokio::time::sleep(quiet).await;
        let now = script_calls().await;
        if now == last {
            return true;
        }
        last = now;
    }
    false
}

/// Polls `f` every 10 ms until it returns true or `within` passes.
pub async fn eventually<F, Fut>(within: Duration, mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if f().await {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Serializes the tests of one binary that stop nodes or read global
/// counters, so they do not disturb each other.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
        .lock()
        .await
}

/// What the server at `url` runs for `for_` (`MONITOR`, commands run by
/// scripts included), the lines that contain `needle`.
pub async fn monitored(url: &str, needle: &str, for_: Duration) -> Vec<String> {
    use futures::StreamExt;
    let client = redis::Client::open(url).expect("server url");
    let monitor = client.get_async_monitor().await.expect("MONITOR");
    let lines = monitor.into_on_message::<String>();
    let until = tokio::time::sleep(for_);
    lines
        .take_until(until)
        .filter(|l| std::future::ready(l.contains(needle)))
        .collect()
        .await
}

/// Of `monitored` lines, those of a queued acquire (`acquire_queued.lua`
/// reads the lock with `HEXISTS`; nothing else a waiter sends does) and
/// those of a kept place (`keep.lua`'s `ZADD ... XX`).
pub fn attempts_and_keeps(lines: &[String]) -> (usize, usize) {
    let attempts = lines.iter().filter(|l| l.contains("\"hexists\"")).count();
    let keeps = lines
        .iter()
        .filter(|l| l.contains("\"zadd\"") && l.contains("\"XX\""))
        .count();
    (attempts, keeps)
}

/// Waits (at most 5 s) until the server at `url` has `n` waiters queued
/// for `lock` (the key of a lock: its timeouts are `<lock>:timeouts`).
pub async fn until_queued(url: &str, lock: &str, n: usize) {
    let mut c = redis::Client::open(url)
        .expect("server url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let until = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let queued: usize = redis::cmd("ZCARD")
            .arg(format!("{lock}:timeouts"))
            .query_async(&mut c)
            .await
            .expect("ZCARD");
        if queued == n {
            return;
        }
        assert!(
            std::time::Instant::now() < until,
            "{queued} queued for {lock}, not {n}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
