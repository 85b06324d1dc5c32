//! Managers over the container cluster, exclusive use of it, and holds made
//! by hand on chosen nodes (a third owner that steers where the next grant
//! lands).

#![allow(dead_code, clippy::panic)]

use std::time::Duration;

use quorumlock::{LockManager, LockManagerBuilder, Quorum};

use crate::containers::{Cluster, ClusterGuard, Profile};
use crate::support::masters::{drop_by_hand, raw, take_by_hand};
use crate::support::Nodes;

/// Exclusive use of the `profile` cluster, serialised with every other
/// scenario of this binary (whatever their profile).
pub async fn exclusive(profile: Profile) -> (tokio::sync::MutexGuard<'static, ()>, ClusterGuard) {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let serial = SERIAL.lock().await;
    let cluster = Cluster::exclusive(profile).await;
    (serial, cluster)
}

/// A builder over the cluster's five nodes (quorum: majority).
pub fn builder(cluster: &Cluster) -> LockManagerBuilder {
    LockManager::builder()
        .nodes(cluster.urls())
        .quorum(Quorum::Majority)
        .node_timeout(Duration::from_millis(200))
        .connect_timeout(Duration::from_secs(2))
}

/// Builds `b`; panics if it cannot.
pub async fn build(b: LockManagerBuilder) -> LockManager {
    b.build().await.expect("build a manager over the cluster")
}

/// The third owner of [`block`].
pub const BLOCKER: &str = "chaos-blocker";

/// A third owner takes `name` on node `i` by hand (HSET + PEXPIRE), so that
/// quorumlock clients find it taken there.
pub async fn block(cluster: &Cluster, i: usize, name: &str, ttl: Duration) {
    take_by_hand(cluster, i, name, BLOCKER, ttl).await;
}

/// Removes the third owner's hold of `name` on node `i` (an emptied hash
/// disappears).
pub async fn unblock(cluster: &Cluster, i: usize, name: &str) {
    drop_by_hand(cluster, i, name, BLOCKER).await;
}

/// Blocks nodes 3 and 4 for a third owner, so that the next grant lands on
/// exactly nodes 0, 1, 2.
pub async fn block_3_4(cluster: &Cluster, name: &str) {
    for n in [3, 4] {
        block(cluster, n, name, Duration::from_secs(60)).await;
    }
}

/// Undoes [`block_3_4`].
pub async fn unblock_3_4(cluster: &Cluster, name: &str) {
    for n in [3, 4] {
        unblock(cluster, n, name).await;
    }
}

/// Nodes 0, 1, 2 have granted many locks of `name`'s hash slot that 3
/// and 4 did not see (one fence counter per slot serves every name of the
/// slot): 3 and 4 lag far behind. The counters of 0, 1, 2 are set to one
/// value, above every node's, whatever earlier tests left behind: the next
/// grant of `name` on 0, 1, 2 then returns the same token on each, and
/// needs no node raised.
pub async fn lag_fences_of_3_4(cluster: &Cluster, name: &str) {
    let counter = quorumlock::fence_counter_key("quorumlock:", name).expect("a valid lock name");
    let mut top = 0u64;
    for i in 0..5 {
        let mut c = raw(cluster, i).await;
        let v: Option<u64> = redis::cmd("GET")
            .arg(&counter)
            .query_async(&mut c)
            .await
            .expect("GET the fence counter");
        top = top.max(v.unwrap_or(0));
    }
    for i in 0..3 {
        let mut c = raw(cluster, i).await;
        let _: () = redis::cmd("SET")
            .arg(&counter)
            .arg(top + 1_000_000)
            .query_async(&mut c)
            .await
            .expect("SET the fence counter");
    }
}
