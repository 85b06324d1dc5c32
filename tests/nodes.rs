//! Nodes and connections against real `redis-server` masters: timeouts that
//! redis-rs must not cap, scripts lost by a node, one server behind two URLs,
//! and eviction policies.
//!
//! Each test starts its own small set of masters (they pause, flush or
//! restart them), separate from the shared five of `support::nodes()`.

mod support;

use std::time::Duration;

use quorumlock::{LockManager, Quorum};
use support::{key, LocalNodes};

fn start(n: usize) -> LocalNodes {
    LocalNodes::start(n).expect("start local redis-server masters")
}

async fn raw_to(nodes: &LocalNodes, i: usize) -> redis::aio::MultiplexedConnection {
    redis::Client::open(nodes.url(i))
        .expect("node url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection")
}

async fn has_key(nodes: &LocalNodes, i: usize, name: &str) -> bool {
    let mut c = raw_to(nodes, i).await;
    redis::cmd("EXISTS")
        .arg(key(name))
        .query_async(&mut c)
        .await
        .expect("EXISTS")
}

async fn keys_left(nodes: &LocalNodes, name: &str) -> Vec<usize> {
    let mut left = Vec::new();
    for i in 0..nodes.len() {
        if has_key(nodes, i, name).await {
            left.push(i);
        }
    }
    left
}

/// Takes and releases `name` once, so that every node is known to have the
/// acquire and release scripts (the next calls go out as `EVALSHA`).
async fn warm_up(m: &LockManager, name: &str) {
    let g = m
        .try_lock(name, Duration::ZERO)
        .await
        .expect("warm-up lock");
    g.release().await.expect("warm-up release");
}

#[tokio::test]
async fn a_node_answering_after_600ms_grants_under_a_2s_node_timeout() {
    let nodes = start(3);
    let m = LockManager::builder()
        .nodes(nodes.urls())
        .quorum(Quorum::All)
        .node_timeout(Duration::from_secs(2))
        .build()
        .await
        .expect("build");
    // Node 1 stops answering for ~600 ms: longer than redis-rs's default
    // response timeout (500 ms), well within ours.
    let mut c = raw_to(&nodes, 1).await;
    let _: () = redis::cmd("CLIENT")
        .arg("PAUSE")
        .arg(600)
        .arg("ALL")
        .query_async(&mut c)
        .await
        .expect("CLIENT PAUSE");
    let start = std::time::Instant::now();
    let g = m
        .try_lock("slow-node", Duration::ZERO)
        .await
        .expect("all three grant, node 1 after ~600 ms");
    assert!(
        start.elapsed() >= Duration::from_millis(450),
        "node 1 was not paused: {:?}",
        start.elapsed()
    );
    assert_eq!(g.granted_nodes(), vec![0, 1, 2]);
    g.release().await.expect("release");
}

#[tokio::test]
async fn a_release_after_script_flush_deletes_the_key_on_every_node() {
    let nodes = start(3);
    let m = LockManager::builder()
        .nodes(nodes.urls())
        .quorum(Quorum::All)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("build");
    warm_up(&m, "flushed").await;
    let g = m.try_lock("flushed", Duration::ZERO).await.expect("lock");
    assert_eq!(keys_left(&nodes, "flushed").await, vec![0, 1, 2]);
    let mut c = raw_to(&nodes, 1).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .expect("SCRIPT FLUSH");
    g.release().await.expect("release after SCRIPT FLUSH");
    assert_eq!(keys_left(&nodes, "flushed").await, Vec::<usize>::new());
    // And the next acquire, also sent as EVALSHA first, still works there.
    let g = m.try_lock("flushed", Duration::ZERO).await.expect("relock");
    let mut c = raw_to(&nodes, 2).await;
    let _: () = redis::cmd("SCRIPT")
        .arg("FLUSH")
        .query_async(&mut c)
        .await
        .expect("SCRIPT FLUSH");
    g.release().await.expect("release");
    let g = m
        .try_lock("flushed", Duration::ZERO)
        .await
        .expect("acquire after SCRIPT FLUSH");
    assert_eq!(g.granted_nodes(), vec![0, 1, 2]);
    g.release().await.expect("release");
    assert_eq!(keys_left(&nodes, "flushed").await, Vec::<usize>::new());
}

#[tokio::test]
async fn a_release_after_a_restart_seen_by_status_deletes_the_key_there() {
    let nodes = start(3);
    let m = LockManager::builder()
        .nodes(nodes.urls())
        .quorum(Quorum::All)
        .node_timeout(Duration::from_secs(1))
        .build()
        .await
        .expect("build");
    warm_up(&m, "restarted").await;
    let g = m.try_lock("restarted", Duration::ZERO).await.expect("lock");
    nodes.restart(1).expect("restart node 1");
    // `status` is the first to meet the dead connection; the manager
    // reconnects, and a later status reads the new server.
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            m.status("restarted")
                .await
                .is_ok_and(|s| s.nodes.iter().all(|n| n.state.is_ok()))
        })
        .await,
        "status never reached the restarted node"
    );
    // The key as the watchdog's repair would re-create it on the empty node.
    let mut c = raw_to(&nodes, 1).await;
    let _: () = redis::pipe()
        .cmd("HSET")
        .arg(key("restarted"))
        .arg(g.holder_id())
        .arg(1)
        .cmd("PEXPIRE")
        .arg(key("restarted"))
        .arg(60_000)
        .query_async(&mut c)
        .await
        .expect("re-create the key");
    g.release().await.expect("release");
    assert_eq!(keys_left(&nodes, "restarted").await, Vec::<usize>::new());
}

#[tokio::test]
async fn a_release_after_a_restart_repaired_by_the_watchdog_deletes_the_key_there() {
    let nodes = start(3);
    let m = LockManager::builder()
        .nodes(nodes.urls())
        .quorum(Quorum::All)
        .lease(Duration::from_millis(900))
        .renew_interval(Duration::from_millis(300))
        .node_timeout(Duration::from_millis(250))
        .build()
        .await
        .expect("build");
    warm_up(&m, "repaired").await;
    let g = m.lock("repaired").await.expect("lock");
    nodes.restart(1).expect("restart node 1");
    assert!(!has_key(&nodes, 1, "repaired").await);
    assert!(
        support::eventually(Duration::from_secs(3), || async {
            has_key(&nodes, 1, "repaired").await
        })
        .await,
        "the watchdog did not repair the restarted node"
    );
    g.release().await.expect("release");
    assert_eq!(keys_left(&nodes, "repaired").await, Vec::<usize>::new());
}
