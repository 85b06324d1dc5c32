//! A crowd of one manager's waiters on one lock, against fake nodes on a
//! paused clock: only the head of the local FIFO attempts, also while the
//! attempts time out, and the crowd is then served one after another.
//!
//! Issue 35: 100,000 waiters of one manager on one lock stalled in 2 of 24
//! release-build runs on two cores: no waiter served in two minutes. The
//! manager's counters in a stalled run showed all 512 attempt places taken
//! and about 2,500 attempts a second, every one timing out. They were the
//! waiters that had attempted before the local FIFO formed (4,220 of them
//! with a place on the nodes): each refreshed its place every
//! `queue_timeout / 3` (1.7 s) whatever its turn, and after an attempt
//! that timed out retried within the backoff (200 ms at most). Hundreds
//! of attempts on the one lock were always in flight, each answered after
//! the node timeout, and none won: the head's attempts timed out too.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::keys::Keys;
use crate::node::NodeOps;
use crate::tests::fake::{cluster_with, counted, fakes, FakeNode, Mode};
use crate::{LockManager, Quorum};

/// Calls that the fakes served so far.
fn calls(fakes: &[Arc<FakeNode>]) -> u64 {
    fakes.iter().map(|f| f.calls.load(Ordering::Relaxed)).sum()
}

/// 200 waiters of one manager attempt at once on a lock another process
/// holds (before any of them queued locally), miss and queue. For the next
/// 10 s every node answers after the node timeout, so every attempt times
/// out: the crowd makes a few calls per node timeout (its head's attempts
/// and their rollbacks), not one attempt per waiter every backoff. Then
/// the nodes answer again and the holder's key expires: every waiter is
/// served.
///
/// Before the fix, every waiter that had attempted kept attempting: its
/// place's refresh every `queue_timeout / 3`, and within the backoff after
/// each attempt that timed out.
#[tokio::test(start_paused = true)]
async fn only_the_head_of_a_crowd_attempts_while_attempts_time_out() {
    const WAITERS: usize = 200;
    let (m, fakes) = cluster_with(5, |b| b);
    let name = "crowd";
    let keys = Keys::new("quorumlock:", name);
    let held_for = Duration::from_secs(15);
    for f in &fakes {
        f.take(&keys.lock, "another-process:hold-1", held_for);
    }
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WAITERS {
        let m = m.clone();
        tasks.spawn(async move {
            let g = m.lock(name).await.expect("lock");
            g.release().await.expect("release");
        });
    }
    // The crowd's first attempts missed; it waits.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let timeout = m.config().node_timeout;
    for f in &fakes {
        f.set_mode(Mode::Slow(timeout + timeout / 2));
    }
    let before = calls(&fakes);
    let window = Duration::from_secs(10);
    tokio::time::sleep(window).await;
    let during = calls(&fakes) - before;
    for f in &fakes {
        f.set_mode(Mode::Normal);
    }
    // One attempt in flight at a time: at most five calls and five
    // rollbacks per node timeout.
    let bound = 10 * u64::try_from(window.as_millis() / timeout.as_millis()).expect("small");
    println!("{during} calls in {window:?} while every attempt timed out (bound {bound})");
    assert!(
        during <= bound,
        "{during} calls in {window:?} while every attempt timed out (bound {bound})"
    );
    let all = async { while tasks.join_next().await.is_some() {} };
    let within = Duration::from_secs(30);
    assert!(
        tokio::time::timeout(within, all).await.is_ok(),
        "the crowd was not served within {within:?} of the nodes' recovery"
    );
}

/// 200 waiters of one manager queue behind a lock another process holds
/// and never releases: its key expires, which publishes nothing. Each
/// waiter knows the expiry (the holder's PTTL in its miss), but only the
/// head attempts then, and each waiter is then served by its own single
/// attempt, in turn: the crowd's attempts are its first ones and one per
/// handoff.
///
/// Before the fix, every waiter behind the head woke at the known expiry
/// and attempted at once: a herd of 199 attempts, one more per waiter.
#[tokio::test(start_paused = true)]
async fn a_crowd_behind_an_attempting_head_does_not_wake_at_the_holders_expiry() {
    const WAITERS: usize = 200;
    let fakes = fakes(5);
    let (nodes, calls) = counted(&fakes);
    let m = LockManager::builder()
        .quorum(Quorum::Majority)
        .node_timeout(Duration::from_millis(100))
        .build_with(nodes)
        .expect("valid fake cluster");
    let name = "expiring";
    let keys = Keys::new("quorumlock:", name);
    for f in &fakes {
        f.take(&keys.lock, "another-process:hold-1", Duration::from_secs(8));
    }
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WAITERS {
        let m = m.clone();
        tasks.spawn(async move {
            let g = m.lock(name).await.expect("lock");
            g.release().await.expect("release");
        });
    }
    let all = async { while tasks.join_next().await.is_some() {} };
    let within = Duration::from_secs(20);
    assert!(
        tokio::time::timeout(within, all).await.is_ok(),
        "the crowd was not served within {within:?}"
    );
    let acquires =
        usize::try_from(calls.of(|what| what.starts_with("acquire"))).unwrap_or(usize::MAX);
    println!("{acquires} acquire calls for {WAITERS} waiters");
    // Five per waiter for its first attempt and five for its winning one,
    // and the head's refreshes and retries: well under a herd's 1,000 more.
    assert!(
        acquires <= 5 * (2 * WAITERS + 40),
        "{acquires} acquire calls for {WAITERS} waiters"
    );
}

/// A release whose answers come after the node timeout, but within twice
/// it, succeeds: the lock is held until they come anyway, and on a busy
/// client an answer is read late although the node sent it in time.
///
/// Issue 35: 1 of 100,000 releases of the crowd failed, `Unavailable` with
/// three nodes timed out, on two cores busy with the crowd and a test run
/// beside it (the release landed on every node later, its calls still in
/// flight; the caller was told it failed). Before the fix a release's
/// answers had one node timeout, as an attempt's.
#[tokio::test(start_paused = true)]
async fn a_release_answered_late_within_twice_the_node_timeout_succeeds() {
    let (m, fakes) = cluster_with(5, |b| b);
    let g = m.lock("late-release").await.expect("lock");
    let timeout = m.config().node_timeout;
    for f in &fakes {
        f.set_mode(Mode::Slow(timeout + timeout / 2));
    }
    let began = tokio::time::Instant::now();
    let released = g.release().await;
    let took = began.elapsed();
    assert!(
        released.is_ok(),
        "answered after {:?} (node timeout {timeout:?}): {released:?}",
        timeout + timeout / 2
    );
    assert!(took < 2 * timeout, "the release took {took:?}");
    let keys = Keys::new("quorumlock:", "late-release");
    for f in &fakes {
        assert!(f.holder(&keys.lock).is_none(), "still held on {}", f.addr());
    }
    // Answers that do not come within twice the node timeout fail it.
    let g = {
        for f in &fakes {
            f.set_mode(Mode::Normal);
        }
        m.lock("late-release").await.expect("lock again")
    };
    for f in &fakes {
        f.set_mode(Mode::Stall);
    }
    let began = tokio::time::Instant::now();
    let released = g.release().await;
    assert!(
        matches!(released, Err(crate::Error::Unavailable { .. })),
        "{released:?}"
    );
    let took = began.elapsed();
    assert!(
        took >= 2 * timeout && took < 2 * timeout + Duration::from_millis(10),
        "a release that nobody answered took {took:?}"
    );
}

/// The head of the local FIFO is a `lock()` future that its task stopped
/// polling without dropping it (it keeps its place and is rung in vain): a
/// waiter behind it takes the free lock within the queue timeout of the
/// release, once the head has made no attempt for two refresh intervals.
#[tokio::test(start_paused = true)]
async fn a_waiter_behind_a_head_that_is_no_longer_polled_takes_the_free_lock() {
    let (m, fakes) = cluster_with(5, |b| b);
    let other = crate::tests::fake::peer(&fakes);
    let name = "stuck-head";
    let g = other.lock(name).await.expect("the holder");
    let mut stuck = Box::pin(m.lock(name));
    // Polled for a while: it misses, queues as the head, and waits.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut stuck)
            .await
            .is_err(),
        "the lock is held"
    );
    let behind = {
        let m = m.clone();
        tokio::spawn(async move {
            let g = m.lock(name).await.expect("lock");
            let at = tokio::time::Instant::now();
            g.release().await.expect("release");
            at
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = tokio::time::Instant::now();
    g.release().await.expect("the holder's release");
    let bound = m.config().queue_timeout + Duration::from_millis(500);
    let at = tokio::time::timeout(Duration::from_secs(60), behind)
        .await
        .expect("the waiter behind took the lock at all")
        .expect("task");
    let after = at.duration_since(released);
    println!("behind a head no longer polled: the lock taken {after:?} after its release");
    assert!(
        after <= bound,
        "{after:?} after the release (bound {bound:?})"
    );
    drop(stuck);
}
