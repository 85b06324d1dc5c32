//! What every set of test masters offers, local processes
//! ([`LocalNodes`](super::local::LocalNodes)) or Docker containers
//! (`Cluster` in `containers.rs`), and the raw Redis helpers written once
//! against it: a test or helper taking `&impl Nodes` runs on either.

// Test code: failures are reported by panicking, with a message.
#![allow(dead_code, clippy::panic)]

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// A fixed set of independent Redis masters, numbered `0..len()`.
pub trait Nodes {
    /// How many nodes.
    fn len(&self) -> usize;

    /// The port of node `i` on 127.0.0.1.
    fn port(&self, i: usize) -> u16;

    /// The URL of node `i` (`redis://127.0.0.1:PORT`, or `rediss://`).
    fn url(&self, i: usize) -> String;

    /// Every node's URL, in node order.
    fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i)).collect()
    }
}

/// The lock key of `name` under the default prefix.
pub fn key(name: &str) -> String {
    format!("quorumlock:{{{name}}}")
}

/// How long [`raw`] waits for a connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// How long a harness read of a node may take (see [`raw`]).
const RAW_RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

/// A raw connection to node `i`, independent of quorumlock. Panics (this is
/// test code) when it cannot connect within 3 s.
///
/// Replies may take up to [`RAW_RESPONSE_TIMEOUT`]: redis-rs's default
/// (500 ms) is shorter than a scan of a loaded node takes on a busy machine.
pub async fn raw(nodes: &impl Nodes, i: usize) -> MultiplexedConnection {
    let client = redis::Client::open(nodes.url(i)).expect("node url");
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CONNECT_TIMEOUT))
        .set_response_timeout(Some(RAW_RESPONSE_TIMEOUT));
    let connect = client.get_multiplexed_async_connection_with_config(&config);
    match tokio::time::timeout(CONNECT_TIMEOUT, connect).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => panic!("raw connection to node {i}: {e}"),
        Err(_) => panic!("raw connection to node {i}: timed out"),
    }
}

/// Whether node `i` has the lock key of `name`, or the error of asking.
pub async fn exists(nodes: &impl Nodes, i: usize, name: &str) -> redis::RedisResult<bool> {
    let mut c = raw(nodes, i).await;
    redis::cmd("EXISTS")
        .arg(key(name))
        .query_async(&mut c)
        .await
}

/// Whether node `i` has the lock key of `name`; panics if it cannot say.
pub async fn has_key(nodes: &impl Nodes, i: usize, name: &str) -> bool {
    exists(nodes, i, name)
        .await
        .unwrap_or_else(|e| panic!("EXISTS on node {i}: {e}"))
}

/// The nodes that have the lock key of `name`; a node that cannot say
/// counts as without it.
pub async fn nodes_with_key(nodes: &impl Nodes, name: &str) -> Vec<usize> {
    let mut with = Vec::new();
    for i in 0..nodes.len() {
        if exists(nodes, i, name).await.unwrap_or(false) {
            with.push(i);
        }
    }
    with
}

/// The remaining time to live of the lock key of `name` on node `i`, in ms
/// (-2: no key, -1: no expiry).
pub async fn pttl(nodes: &impl Nodes, i: usize, name: &str) -> i64 {
    let mut c = raw(nodes, i).await;
    redis::cmd("PTTL")
        .arg(key(name))
        .query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("PTTL on node {i}: {e}"))
}

/// The owners in the lock hash of `name` on node `i`.
pub async fn holders_on(nodes: &impl Nodes, i: usize, name: &str) -> Vec<String> {
    let mut c = raw(nodes, i).await;
    redis::cmd("HKEYS")
        .arg(key(name))
        .query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("HKEYS on node {i}: {e}"))
}

/// Makes `owner` hold `name` on node `i` for `ttl`, behind quorumlock's
/// back (HSET + PEXPIRE), so that quorumlock clients find it taken there.
pub async fn take_by_hand(nodes: &impl Nodes, i: usize, name: &str, owner: &str, ttl: Duration) {
    let mut c = raw(nodes, i).await;
    let ms = u64::try_from(ttl.as_millis()).expect("ttl in ms");
    let (): () = redis::pipe()
        .cmd("HSET")
        .arg(key(name))
        .arg(owner)
        .arg(1)
        .ignore()
        .cmd("PEXPIRE")
        .arg(key(name))
        .arg(ms)
        .ignore()
        .query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("taking {name} by hand on node {i}: {e}"));
}

/// Removes `owner`'s hand-made hold of `name` on node `i` (an emptied hash
/// disappears); panics if `owner` did not hold it there.
pub async fn drop_by_hand(nodes: &impl Nodes, i: usize, name: &str, owner: &str) {
    let mut c = raw(nodes, i).await;
    let removed: u64 = redis::cmd("HDEL")
        .arg(key(name))
        .arg(owner)
        .query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("dropping {owner}'s hold of {name} on node {i}: {e}"));
    assert_eq!(removed, 1, "node {i} should still be held by {owner}");
}

/// Local `redis-server` processes; their inherent methods stay, for the
/// benchmark and the example that include `local.rs` alone.
impl Nodes for super::local::LocalNodes {
    fn len(&self) -> usize {
        super::local::LocalNodes::len(self)
    }

    fn port(&self, i: usize) -> u16 {
        super::local::LocalNodes::port(self, i)
    }

    fn url(&self, i: usize) -> String {
        super::local::LocalNodes::url(self, i)
    }
}
