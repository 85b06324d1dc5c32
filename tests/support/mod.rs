//! The shared harness of the integration tests: five local masters started
//! once per test binary, raw connections to inspect them, and helpers.

#![allow(dead_code)]

pub mod local;

use std::sync::OnceLock;
use std::time::Duration;

use quorumlock::{LockManager, LockManagerBuilder, Quorum};

pub use local::LocalNodes;

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

/// A raw connection to node `i`, independent of quorumlock.
pub async fn raw(i: usize) -> redis::aio::MultiplexedConnection {
    redis::Client::open(nodes().url(i))
        .expect("node url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

/// The lock key of `name` under the default prefix.
pub fn key(name: &str) -> String {
    format!("quorumlock:{{{name}}}")
}

/// Makes `owner` hold `name` on node `i` for a minute, behind quorumlock's
/// back, with a raw HSET and PEXPIRE.
pub async fn pre_take(i: usize, name: &str, owner: &str) {
    let mut c = raw(i).await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key(name))
        .arg(owner)
        .arg(1)
        .cmd("PEXPIRE")
        .arg(key(name))
        .arg(60_000)
        .query_async(&mut c)
        .await
        .expect("pre-take a node");
}

/// `name` held through `m` by a fresh explicit owner (not the calling task).
pub async fn hold_as_new_owner(m: &LockManager, name: &str) -> quorumlock::LockGuard {
    m.request(name)
        .owner(&m.new_owner())
        .acquire()
        .await
        .expect("lock as a new owner")
}

/// On how many nodes the lock key of `name` exists.
pub async fn nodes_with_key(name: &str) -> usize {
    let mut n = 0;
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let exists: bool = redis::cmd("EXISTS")
            .arg(key(name))
            .query_async(&mut c)
            .await
            .unwrap_or(false);
        n += usize::from(exists);
    }
    n
}

/// A lock name unique to this test run.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
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
