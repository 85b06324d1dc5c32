//! The tests that fault the local replica cluster
//! (`local_cluster::replica_cluster`): one test at a time, managers of the
//! cluster alone, and names placed on a shard. `tests/cluster_chaos.rs` and
//! the CLI's `cli/tests/cluster_chaos.rs` include it with `#[path]`.

#![allow(dead_code, clippy::unwrap_used)]

use std::time::Duration;

use quorumlock::{lock_slot, LockManager, LockManagerBuilder};

use crate::support::local_cluster::replica_cluster;
use crate::support::unique;

/// One test at a time: each faults the one cluster.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = SERIAL.lock().await;
    // A test that panicked may have left a node stopped or killed.
    let c = replica_cluster();
    for i in 0..c.nodes.len() {
        c.nodes.resume(i);
        if !crate::support::local::ping(c.nodes.port(i), Duration::from_millis(300)) {
            c.nodes.restart(i).expect("restart a killed node");
        }
    }
    c.wait_healthy(Duration::from_secs(30)).await;
    guard
}

/// The node timeout of every manager here.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(300);

/// A manager of the replica cluster alone, with `lease`.
pub fn only(lease: Duration) -> LockManagerBuilder {
    LockManager::builder()
        .cluster(replica_cluster().urls())
        .node_timeout(NODE_TIMEOUT)
        .lease(lease)
}

/// `b` built; a failure fails the test.
pub async fn build(b: LockManagerBuilder) -> LockManager {
    b.build().await.expect("build over the replica cluster")
}

/// A fresh name, the master that serves its slot and that master's replica.
pub async fn placed(stem: &str) -> (String, u16, u16, u16) {
    let c = replica_cluster();
    let name = unique(stem);
    let slot = lock_slot(&name).unwrap();
    let master = c.port_of_slot(slot);
    let replica = c.topology(&[]).await.replica_of(master).unwrap();
    (name, slot, master, replica)
}
