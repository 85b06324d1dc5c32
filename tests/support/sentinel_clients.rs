//! The Sentinel member's tests' managers and clients (`tests/sentinel.rs`
//! includes it with `#[path]`): builders over the local group
//! (`support/sentinel.rs`), waiting for the member to answer, and contending
//! clients recorded in one history.

#![allow(clippy::unwrap_used, clippy::panic)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockManager, LockManagerBuilder};

use crate::clients::{critical_section, ClientStats};
use crate::history::History;
use crate::sentinel::{self, group};
use crate::support::{nodes, unique};

pub const NODE_TIMEOUT: Duration = Duration::from_millis(300);

/// How soon after the sentinels name a new master the member must answer
/// there: its watch looks at least every second, at once on a sentinel's
/// `+switch-master` or a failed call; one connect on top.
pub const FOLLOW_BOUND: Duration = Duration::from_secs(3);

/// The member alone.
pub fn member_only() -> LockManagerBuilder {
    let g = group();
    LockManager::builder()
        .sentinel(g.sentinel_urls(), g.master_name())
        .node_timeout(NODE_TIMEOUT)
}

/// Shared masters 0 and 1, then the member (member 2).
pub fn beside_masters() -> LockManagerBuilder {
    beside_masters_with(group().sentinel_urls())
}

/// [`beside_masters`], the member's sentinels at `sentinels`.
pub fn beside_masters_with(sentinels: Vec<String>) -> LockManagerBuilder {
    LockManager::builder()
        .nodes(nodes().urls().into_iter().take(2))
        .sentinel(sentinels, group().master_name())
        .node_timeout(NODE_TIMEOUT)
}

/// Waits until member 2 of `m` answers from the group's master, then
/// holds a lock there: how long it took.
pub async fn member_connects(m: &LockManager) -> Duration {
    let since = Instant::now();
    let name = unique("sentinel-later");
    let master = format!("127.0.0.1:{}", master_port().await);
    loop {
        let status = m.status(&name).await.unwrap();
        if status.nodes[2]
            .state
            .as_ref()
            .is_ok_and(|s| s.shard.as_ref() == Some(&master))
        {
            break;
        }
        assert!(since.elapsed() < FOLLOW_BOUND, "not connected: {status:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = since.elapsed();
    let held = m.lock(&name).await.unwrap();
    // The member's grant may land just after the quorum's.
    let port = master_port().await;
    while !sentinel::has_lock(port, &name).await {
        assert!(since.elapsed() < FOLLOW_BOUND, "no grant on the member");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    held.release().await.unwrap();
    took
}

pub async fn master_port() -> u16 {
    group().master_told(0).await.unwrap()
}

/// Four clients over managers of two masters and the member (lease 2 s),
/// taking one lock again and again, recorded in one history.
pub struct Contention {
    pub history: Arc<History>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<ClientStats>>,
}

impl Contention {
    pub async fn start(name: &str) -> Self {
        let history = History::new();
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for i in 0..4u64 {
            let m = beside_masters()
                .lease(Duration::from_secs(2))
                .build()
                .await
                .unwrap();
            let name = name.to_owned();
            let (history, stop) = (Arc::clone(&history), Arc::clone(&stop));
            clients.push(tokio::spawn(async move {
                let mut stats = ClientStats::default();
                let client = format!("c{i}");
                let mut k = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    k += 1;
                    let work = Duration::from_millis(20 + (k * 37 + i * 11) % 80);
                    let wait = Duration::from_secs(1);
                    critical_section(&m, &name, &client, &history, wait, work, &mut stats).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                stats
            }));
        }
        Self {
            history,
            stop,
            clients,
        }
    }

    pub async fn finish(self, label: &str, since: Instant) {
        self.stop.store(true, Ordering::SeqCst);
        let mut stats = ClientStats::default();
        for c in self.clients {
            stats.add(&c.await.expect("a client panicked"));
        }
        let v = self.history.check();
        v.assert_clean(label);
        eprintln!("{label}: {stats:?}");
        assert!(stats.acquisitions >= 5, "{stats:?}");
        let since = self.history.at(since);
        assert!(
            self.history.intervals().iter().any(|i| i.entered > since),
            "locking went on after the fault: {v}"
        );
    }
}

/// Waits until a lock over every member, the sentinel member included,
/// succeeds: how long after `since`.
pub async fn member_answers(m: &LockManager, since: Instant) -> Duration {
    loop {
        if let Ok(g) = m.try_lock(&unique("sentinel-probe"), Duration::ZERO).await {
            let took = since.elapsed();
            g.release().await.unwrap();
            return took;
        }
        assert!(
            since.elapsed() < Duration::from_secs(20),
            "the member did not answer within 20 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
