//! Waiters' places kept in batches (`places`, `Members::keep_place`)
//! against fake nodes, on a paused clock: a waiter on a held lock keeps its
//! place without attempting, the places of many waiters share their calls,
//! and a lock freed without a message is still taken within a refresh.

use std::sync::Arc;
use std::time::Duration;

use crate::keys::Keys;
use crate::node::NodeOps;
use crate::tests::fake::{counted, fakes, nodes, Calls, FakeNode};
use crate::LockManager;

const MS: Duration = Duration::from_millis(1);
/// A refresh every 200 ms.
const QUEUE_TIMEOUT: Duration = Duration::from_millis(600);

/// A manager of waiters over `fakes` (queue timeout 600 ms), and the count
/// of its calls by kind, over every node.
fn waiters(fakes: &[Arc<FakeNode>]) -> (LockManager, Calls) {
    let (links, calls) = counted(fakes);
    let m = LockManager::builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .node_timeout(100 * MS)
        .queue_timeout(QUEUE_TIMEOUT)
        .build_with(links)
        .expect("valid fake cluster");
    (m, calls)
}

/// The holder of the tests' locks: a lease of a minute, so that the
/// waiters' fallback (the holder's known expiry) stays beyond each test and
/// only their refreshes call the nodes.
fn holder(fakes: &[Arc<FakeNode>]) -> LockManager {
    LockManager::builder()
        .lease(Duration::from_secs(60))
        .node_timeout(100 * MS)
        .build_with(nodes(fakes))
        .expect("valid fake cluster")
}

/// A waiter for `name` on `m` (30 s at most), in a task of its own.
fn spawn_waiter(
    m: &Arc<LockManager>,
    name: &str,
) -> tokio::task::JoinHandle<Result<crate::LockGuard, crate::Error>> {
    let (m, name) = (Arc::clone(m), name.to_owned());
    tokio::spawn(async move {
        m.request(name)
            .wait(Duration::from_secs(30))
            .acquire()
            .await
    })
}

fn count(calls: &Calls, kind: &str) -> u64 {
    calls.of(|what| what == kind)
}

fn keys(name: &str) -> Keys {
    Keys::new("quorumlock:", name)
}

/// Before the batches, each refresh was an attempt on every node: about
/// 20 per node in these 4 s (one per 200 ms), 60 in all.
#[tokio::test(start_paused = true)]
async fn a_waiter_on_a_held_lock_keeps_its_place_in_batches_instead_of_attempting() {
    let fakes = fakes(3);
    let holder = holder(&fakes);
    let g = holder.lock("x").await.expect("lock");
    let (m, calls) = waiters(&fakes);
    let m = Arc::new(m);
    let w = {
        let m = Arc::clone(&m);
        tokio::spawn(async move { m.request("x").wait(Duration::from_secs(30)).acquire().await })
    };
    tokio::time::sleep(Duration::from_secs(4)).await;
    let (acquires, keeps) = (count(&calls, "acquire"), count(&calls, "keep"));
    assert!(acquires <= 2 * 3, "{acquires} attempts' calls in 4 s");
    assert!(keeps >= 15 * 3, "{keeps} keep calls in 4 s");
    for f in &fakes {
        assert_eq!(
            f.queued(&keys("x")).len(),
            1,
            "the place outlives its 600 ms timeout on {}",
            f.addr()
        );
    }
    let released = tokio::time::Instant::now();
    g.release().await.expect("release");
    let won = w.await.expect("task").expect("the waiter takes the lock");
    assert!(released.elapsed() < 100 * MS, "{:?}", released.elapsed());
    won.release().await.expect("release");
}

/// Fifty waiters, each on a held lock of its own: their places go out
/// together, a call per node per round, not one per waiter.
#[tokio::test(start_paused = true)]
async fn the_places_of_many_waiters_share_their_calls() {
    let fakes = fakes(3);
    let holder = holder(&fakes);
    let names: Vec<String> = (0..50).map(|i| format!("many-{i}")).collect();
    let mut guards = Vec::new();
    for n in &names {
        guards.push(holder.lock(n).await.expect("lock"));
    }
    let (m, calls) = waiters(&fakes);
    let m = Arc::new(m);
    let tasks: Vec<_> = names
        .iter()
        .cloned()
        .map(|n| {
            let m = Arc::clone(&m);
            tokio::spawn(async move { m.request(n).wait(Duration::from_secs(30)).acquire().await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let before = (count(&calls, "acquire"), count(&calls, "keep"));
    tokio::time::sleep(Duration::from_secs(3)).await;
    let acquires = count(&calls, "acquire") - before.0;
    let keeps = count(&calls, "keep") - before.1;
    // 15 refresh intervals: once 50 × 15 attempts on each node.
    assert_eq!(acquires, 0, "no attempt while every lock stays held");
    assert!(
        keeps <= 2 * 15 * 3,
        "{keeps} keep calls for 50 waiters in 3 s"
    );
    for n in &names {
        assert_eq!(fakes[0].queued(&keys(n)).len(), 1, "{n}'s place is kept");
    }
    for g in guards {
        g.release().await.expect("release");
    }
    for t in tasks {
        let g = t.await.expect("task").expect("each waiter takes its lock");
        g.release().await.expect("release");
    }
}

/// A lock whose key expires unannounced (a holder the waiter last saw with
/// a minute left, gone without a release: a crash, or a release whose
/// message named a dead waiter): the next place refresh finds it free, and
/// the waiter attempts at once.
#[tokio::test(start_paused = true)]
async fn a_lock_freed_without_a_message_is_taken_at_the_next_refresh() {
    let fakes = fakes(3);
    let k = keys("quiet");
    for f in &fakes {
        f.take(&k.lock, "ghost", Duration::from_secs(60));
    }
    let (m, calls) = waiters(&fakes);
    let m = Arc::new(m);
    let w = spawn_waiter(&m, "quiet");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(count(&calls, "keep") > 0, "the place was kept by then");
    for f in &fakes {
        f.take(&k.lock, "ghost", MS);
    }
    let freed = tokio::time::Instant::now();
    let g = w.await.expect("task").expect("the waiter takes the lock");
    // A refresh interval (200 ms), its round and the attempt.
    assert!(freed.elapsed() <= 300 * MS, "{:?}", freed.elapsed());
    g.release().await.expect("release");
}

/// A holder that renews (here every 300 ms, a 900 ms lease, as a watchdog
/// would): each kept place tells the waiter how long the key lasts now, so
/// it never attempts at an expiry it saw before a renewal. Before the keep
/// said so, the waiter attempted at each such stale expiry: one attempt
/// (three calls) every 600-900 ms here. When the renewals stop (the
/// holder's process is gone), the waiter attempts at the key's expiry, not
/// at its next refresh.
#[tokio::test(start_paused = true)]
async fn a_waiter_on_a_renewed_lock_does_not_attempt_at_an_expiry_that_moved() {
    let fakes = fakes(3);
    let k = keys("renewed");
    const LEASE: Duration = Duration::from_millis(900);
    let renew = |fakes: &[Arc<FakeNode>]| {
        for f in fakes {
            f.take(&k.lock, "ghost", LEASE);
        }
    };
    renew(&fakes);
    let (m, calls) = waiters(&fakes);
    let m = Arc::new(m);
    let w = spawn_waiter(&m, "renewed");
    // 4 s of renewals, every 300 ms.
    for _ in 0..13 {
        tokio::time::sleep(300 * MS).await;
        renew(&fakes);
    }
    let renewed_last = tokio::time::Instant::now();
    let acquires = count(&calls, "acquire");
    assert!(
        acquires <= 2 * 3,
        "{acquires} attempts' calls in 4 s on a lock its holder renews"
    );
    assert!(count(&calls, "keep") >= 15 * 3, "the place was kept");
    let g = w.await.expect("task").expect("the waiter takes the lock");
    let waited = renewed_last.elapsed();
    // The key's expiry (900 ms after the last renewal), the jitter and the
    // attempt; the next refresh could have come 200 ms later.
    assert!(
        waited >= LEASE && waited <= LEASE + 20 * MS,
        "taken {waited:?} after the last renewal"
    );
    g.release().await.expect("release");
}
