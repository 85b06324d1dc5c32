//! Regression tests of the safety review: each reproduces an interleaving
//! that broke a promise of README.md or docs/SAFETY.md, against fake nodes on a paused clock.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::tests::fake::{cluster_with, lock_as, renewed_each_second, FakeNode, Mode};
use crate::HoldState;

const MS: Duration = Duration::from_millis(1);
const KEY: &str = "quorumlock:{job}";

fn holders(fakes: &[Arc<FakeNode>]) -> usize {
    fakes.iter().filter(|f| f.holder(KEY).is_some()).count()
}

/// 3 nodes, majority. C is down while A and B grant five times (A = B = 5,
/// C = 0). A goes down; Y acquires on {B, C} with token 6 but C fails right
/// after its grant, so C's counter is never raised to 6; Y's lease runs out.
/// A comes back and B goes down: Z acquires on {A, C}. Z must not get a
/// token Y already had.
#[tokio::test(start_paused = true)]
async fn fencing_tokens_never_repeat_when_raising_a_lagging_node_fails() {
    let (m, fakes) = cluster_with(3, |b| b);
    let (a, b, c) = (&fakes[0], &fakes[1], &fakes[2]);
    let mut tokens = Vec::new();
    c.set_mode(Mode::Fail);
    for _ in 0..5 {
        let g = m
            .try_lock("job", Duration::ZERO)
            .await
            .expect("A and B grant");
        tokens.push(g.fencing_token());
        g.release().await.expect("release");
    }
    a.set_mode(Mode::Fail);
    c.set_mode(Mode::Normal);
    // C answers the acquire, then fails everything after it.
    c.fail_after(1);
    let y = m
        .request("job")
        .lease(Duration::from_secs(1))
        .wait(Duration::ZERO)
        .acquire()
        .await;
    if let Ok(y) = y {
        tokens.push(y.fencing_token());
        // Y never releases: its lease runs out.
        std::mem::forget(y);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    a.set_mode(Mode::Normal);
    b.set_mode(Mode::Fail);
    c.set_mode(Mode::Normal);
    let z = m
        .request("job")
        .owner(&m.new_owner())
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .expect("A and C grant");
    tokens.push(z.fencing_token());
    assert!(
        tokens.windows(2).all(|w| w[0] < w[1]),
        "tokens of successive holds must strictly increase: {tokens:?}"
    );
}

/// Renewal ticks that fail fast, then one that stalls for the node timeout:
/// the loss must be signalled no later than `valid_until`, not when the
/// stalled tick gives up; and counted then, once
/// (`watchdog_stats().losses`), although the stalled wave finds it lost
/// already.
#[tokio::test(start_paused = true)]
async fn lost_fires_no_later_than_valid_until_when_renewal_stalls() {
    let (m, fakes) = cluster_with(3, |b| {
        b.lease(Duration::from_secs(3))
            .renew_interval(Duration::from_secs(1))
            .node_timeout(Duration::from_secs(2))
    });
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    // The first tick (t = 1 s) renews; then the nodes fail fast (t = 2 s).
    tokio::time::sleep(1_500 * MS).await;
    for f in &fakes {
        f.set_mode(Mode::Fail);
    }
    tokio::time::sleep(1_000 * MS).await;
    // From t = 2.5 s the nodes stall: the tick at 3 s waits 2 s.
    for f in &fakes {
        f.set_mode(Mode::Stall);
    }
    let valid_until = Instant::from_std(g.valid_until());
    tokio::time::timeout(Duration::from_secs(30), g.lost())
        .await
        .expect("lost() fires");
    let fired = Instant::now();
    assert!(
        fired <= valid_until,
        "lost() fired {:?} after valid_until",
        fired - valid_until
    );
    assert!(g.is_lost());
    assert_eq!(m.watchdog_stats().losses, 1, "lost() fired");
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert_eq!(m.watchdog_stats().losses, 1, "the stalled wave ended");
}

/// A fixed-lease hold is lost at the end of its lease for `lost()`,
/// `is_lost()`, `state()` and `run()`.
#[tokio::test(start_paused = true)]
async fn a_fixed_lease_hold_is_lost_at_its_end() {
    let (m, _fakes) = cluster_with(3, |b| b);
    let g = m.lock_with_lease("job", 1_000 * MS).await.expect("lock");
    let valid_until = Instant::from_std(g.valid_until());
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost() fires at the end of the lease");
    assert!(Instant::now() <= valid_until);
    assert!(g.is_lost());
    assert_eq!(g.state(), HoldState::Lost);

    let g = m
        .lock_with_lease("job", 1_000 * MS)
        .await
        .expect("lock again");
    let start = Instant::now();
    let r = g
        .run(|_| async {
            tokio::time::sleep(Duration::from_secs(3)).await;
            7
        })
        .await;
    assert!(r.as_ref().is_err_and(crate::Error::is_lost), "{r:?}");
    assert!(start.elapsed() <= Duration::from_secs(1));
}

/// `force_unlock` is an administrative break: the watchdog must not quietly
/// re-create the keys ("repair") and keep the holder believing it holds.
#[tokio::test(start_paused = true)]
async fn force_unlock_is_not_undone_by_the_watchdog() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    assert_eq!(m.force_unlock("job").await.expect("force"), 3);
    tokio::time::sleep(1_100 * MS).await;
    assert_eq!(holders(&fakes), 0, "the watchdog re-created forced keys");
    assert!(g.is_lost(), "the holder was not told");
}

/// A re-entry in flight while another guard of the same hold releases must
/// not overwrite the decrement: after every guard is released, no key stays.
#[tokio::test(start_paused = true)]
async fn a_reentry_in_flight_does_not_undo_a_concurrent_release() {
    let (m, fakes) = cluster_with(3, |b| b);
    let owner = m.new_owner();
    let g1 = lock_as(&m, &owner, "job").await.expect("lock");
    let g2 = lock_as(&m, &owner, "job").await.expect("re-enter");
    for f in &fakes {
        f.set_mode(Mode::Slow(50 * MS));
    }
    let reenter = lock_as(&m, &owner, "job");
    let release = async {
        tokio::time::sleep(10 * MS).await;
        g2.release().await
    };
    let (g3, released) = tokio::join!(reenter, release);
    released.expect("release level 2");
    let g3 = g3.expect("re-enter");
    assert_eq!(g3.hold_count(), 2);
    for f in &fakes {
        f.set_mode(Mode::Normal);
    }
    g3.release().await.expect("release");
    g1.release().await.expect("release");
    assert_eq!(holders(&fakes), 0, "a key lingers after the last release");
}

/// `release()` polled once and then dropped must still release on the
/// nodes (here it is dropped while it waits for a renewal in flight).
#[tokio::test(start_paused = true)]
async fn a_release_dropped_after_its_first_poll_still_releases() {
    let (m, fakes) = cluster_with(3, |b| {
        b.lease(Duration::from_secs(3))
            .renew_interval(Duration::from_secs(1))
            .node_timeout(500 * MS)
    });
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    for f in &fakes {
        f.set_mode(Mode::Slow(200 * MS));
    }
    // The tick at 1 s is in flight until 1.2 s.
    tokio::time::sleep(1_050 * MS).await;
    let mut release = Box::pin(g.release());
    assert!(futures::poll!(&mut release).is_pending());
    drop(release);
    for f in &fakes {
        f.set_mode(Mode::Normal);
    }
    tokio::time::sleep(500 * MS).await;
    assert_eq!(holders(&fakes), 0, "the dropped release sent nothing");
}

/// Two futures of one task are not one owner: `join!` of two `lock` calls
/// must not hand out two guards at once.
#[tokio::test(start_paused = true)]
async fn two_futures_of_one_task_exclude_each_other() {
    let (m, _fakes) = cluster_with(3, |b| b);
    let held = std::sync::atomic::AtomicUsize::new(0);
    let most = std::sync::atomic::AtomicUsize::new(0);
    let critical = || async {
        let g = m.lock("job").await.expect("lock");
        let now = held.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
        most.fetch_max(now, std::sync::atomic::Ordering::SeqCst);
        tokio::time::sleep(20 * MS).await;
        held.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
        g.release().await.expect("release");
    };
    tokio::join!(critical(), critical());
    assert_eq!(most.into_inner(), 1, "two guards were held at once");
}

/// Durations a user can pass never panic.
#[tokio::test(start_paused = true)]
async fn duration_max_waits_do_not_panic() {
    let (m, _fakes) = cluster_with(3, |b| b);
    let g = m.try_lock("job", Duration::MAX).await.expect("free lock");
    let other = m.new_owner();
    let r = tokio::time::timeout(
        Duration::from_secs(1),
        m.request("job").owner(&other).wait(Duration::MAX).acquire(),
    )
    .await;
    assert!(r.is_err(), "a wait of Duration::MAX waits");
    g.release().await.expect("release");
}

/// A machine that sleeps longer than the validity: the monotonic clock
/// stopped meanwhile, but the hold must not look valid after the resume, and
/// the watchdog must not renew it.
#[tokio::test(start_paused = true)]
async fn a_suspend_longer_than_the_validity_loses_the_hold() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    assert!(g.is_held());
    // The nodes' keys expire while the client sleeps (their clocks go on).
    for f in &fakes {
        f.wipe();
    }
    crate::clock::test::suspend(Duration::from_secs(5));
    assert!(!g.is_held(), "a hold looks valid after a long suspend");
    assert!(g.is_lost());
    tokio::time::sleep(1_100 * MS).await;
    assert_eq!(holders(&fakes), 0, "the watchdog renewed a lapsed hold");
    assert_eq!(m.watchdog_stats().repairs, 0);
}
