//! The coordinator against fake nodes: stalls, errors, partial grants,
//! cancellation, late grants and every subset of pre-taken nodes.

use std::sync::Arc;
use std::time::Duration;

use crate::tests::fake::{cluster_with, lock_as, FakeNode, Mode};
use crate::{Error, LockGuard, LockManager, Quorum};

const MS: Duration = Duration::from_millis(1);
const KEY: &str = "quorumlock:{job}";

fn cluster(n: usize, quorum: Quorum) -> (LockManager, Vec<Arc<FakeNode>>) {
    cluster_with(n, |b| b.quorum(quorum))
}

/// One try for `job`, without waiting.
async fn try_now(m: &LockManager) -> Result<LockGuard, Error> {
    m.try_lock("job", Duration::ZERO).await
}

fn holders(fakes: &[Arc<FakeNode>]) -> usize {
    fakes.iter().filter(|f| f.holder(KEY).is_some()).count()
}

#[tokio::test(start_paused = true)]
async fn majority_returns_without_waiting_for_a_stalled_node() {
    let (m, fakes) = cluster(5, Quorum::Majority);
    fakes[4].set_mode(Mode::Stall);
    fakes[3].set_mode(Mode::Stall);
    let start = tokio::time::Instant::now();
    let g = try_now(&m).await.expect("3 of 5 grant");
    assert!(start.elapsed() < 100 * MS, "waited for the stalled nodes");
    assert_eq!(g.granted_nodes(), vec![0, 1, 2]);
    g.release().await.expect("release");
    assert_eq!(holders(&fakes), 0);
}

#[tokio::test(start_paused = true)]
async fn all_fails_on_a_stalled_node_and_rolls_back_everywhere() {
    let (m, fakes) = cluster(5, Quorum::All);
    fakes[2].set_mode(Mode::Stall);
    let start = tokio::time::Instant::now();
    let err = try_now(&m).await.expect_err("needs all 5");
    assert!(err.is_unavailable(), "{err}");
    assert!(
        start.elapsed() >= 100 * MS,
        "gave up before the node timeout"
    );
    assert!(
        start.elapsed() < 400 * MS,
        "waited far past the node timeout"
    );
    assert_eq!(holders(&fakes), 0, "partial grants left behind");
}

#[tokio::test(start_paused = true)]
async fn errors_and_partial_grants_are_rolled_back() {
    let (m, fakes) = cluster(5, Quorum::Majority);
    fakes[0].set_mode(Mode::Fail);
    fakes[1].set_mode(Mode::Fail);
    fakes[2].take(KEY, "someone", Duration::from_secs(5));
    let err = try_now(&m).await.expect_err("2 grants of 3");
    match &err {
        Error::Contended {
            taken,
            failures,
            min_pttl,
            granted,
            ..
        } => {
            assert_eq!(taken.len(), 1);
            assert_eq!(failures.len(), 2);
            assert!(min_pttl.is_some_and(|p| p <= Duration::from_secs(5)));
            assert_eq!(*granted, 2);
        }
        other => panic!("expected contended, got {other}"),
    }
    assert_eq!(holders(&fakes), 1, "only the other owner's key may remain");
    assert_eq!(fakes[2].holder(KEY).map(|h| h.0), Some("someone".into()));
}

#[tokio::test(start_paused = true)]
async fn every_subset_of_taken_nodes_under_each_policy() {
    for quorum in [
        Quorum::Majority,
        Quorum::All,
        Quorum::AtLeast(1),
        Quorum::AtLeast(2),
        Quorum::AtLeast(4),
    ] {
        let required = quorum.required(5).expect("valid");
        for mask in 0u32..32 {
            let (m, fakes) = cluster(5, quorum);
            for (i, f) in fakes.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    f.take(KEY, "other", Duration::from_secs(5));
                }
            }
            let free = 5 - mask.count_ones() as usize;
            let r = try_now(&m).await;
            if free >= required {
                let g = r.unwrap_or_else(|e| panic!("{quorum:?} mask {mask:05b}: {e}"));
                assert!(g.granted_nodes().len() >= required);
                g.release().await.expect("release");
            } else {
                let e = r.expect_err("quorum cannot be met");
                assert!(e.is_contended(), "{quorum:?} mask {mask:05b}: {e}");
            }
            // Nothing of ours is left; the other owner's keys are intact.
            for (i, f) in fakes.iter().enumerate() {
                let h = f.holder(KEY).map(|h| h.0);
                if mask & (1 << i) != 0 {
                    assert_eq!(
                        h.as_deref(),
                        Some("other"),
                        "{quorum:?} {mask:05b} node {i}"
                    );
                } else {
                    assert_eq!(h, None, "{quorum:?} {mask:05b} node {i} left behind");
                }
            }
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_dropped_acquisition_rolls_back_at_once() {
    let (m, fakes) = cluster(5, Quorum::All);
    fakes[4].set_mode(Mode::Stall);
    let mut acquire = Box::pin(m.try_lock("job", Duration::from_secs(1)));
    // 4 nodes grant, node 4 stalls; drop the future mid fan-out.
    tokio::select! {
        r = &mut acquire => panic!("the acquisition should still be waiting: {r:?}"),
        () = tokio::time::sleep(20 * MS) => {}
    }
    assert_eq!(holders(&fakes), 4, "grants were made before the drop");
    drop(acquire);
    // The rollback runs in the background right away, not after the lease.
    tokio::time::sleep(5 * MS).await;
    assert_eq!(holders(&fakes), 0, "grants of a dropped acquisition remain");
}

#[tokio::test(start_paused = true)]
async fn late_grants_are_tracked_and_released() {
    let (m, fakes) = cluster(5, Quorum::Majority);
    fakes[3].set_mode(Mode::Slow(50 * MS));
    fakes[4].set_mode(Mode::Slow(60 * MS));
    let g = try_now(&m).await.expect("3 fast grants");
    assert_eq!(g.granted_nodes(), vec![0, 1, 2]);
    tokio::time::sleep(80 * MS).await;
    assert_eq!(
        g.granted_nodes(),
        vec![0, 1, 2, 3, 4],
        "late grants not recorded"
    );
    fakes[3].set_mode(Mode::Normal);
    fakes[4].set_mode(Mode::Normal);
    g.release().await.expect("release");
    assert_eq!(holders(&fakes), 0);
}

#[tokio::test(start_paused = true)]
async fn reentry_converges_counts_and_needs_as_many_releases() {
    let (m, fakes) = cluster(3, Quorum::Majority);
    let me = m.new_owner();
    let a = lock_as(&m, &me, "job").await.expect("lock");
    let b = me.scope(m.lock("job")).await.expect("re-enter");
    assert_eq!(b.hold_count(), 2);
    assert_eq!(a.fencing_token(), b.fencing_token());
    // A node that lost the key gets it back with the authoritative count:
    // the re-entry creates nothing, the watchdog's next tick repairs it.
    fakes[0].wipe();
    let c = lock_as(&m, &me, "job").await.expect("re-enter again");
    assert_eq!(c.hold_count(), 3);
    assert_eq!(fakes[0].holder(KEY), None);
    tokio::time::sleep(Duration::from_secs(4)).await;
    for f in &fakes {
        assert_eq!(f.holder(KEY).map(|h| h.1), Some(3));
    }
    c.release().await.expect("release 3");
    b.release().await.expect("release 2");
    assert_eq!(holders(&fakes), 3, "still held at count 1");
    for f in &fakes {
        assert_eq!(f.holder(KEY).map(|h| h.1), Some(1));
    }
    a.release().await.expect("release 1");
    assert_eq!(holders(&fakes), 0);
}

#[tokio::test(start_paused = true)]
async fn other_tasks_are_other_owners() {
    let (m, _fakes) = cluster(3, Quorum::Majority);
    let g = m.lock("job").await.expect("lock");
    let m2 = m.clone();
    let err = tokio::spawn(async move { m2.try_lock("job", Duration::ZERO).await })
        .await
        .expect("task")
        .expect_err("another task is another owner");
    assert!(err.is_contended());
    let owner = m.new_owner();
    let g1 = lock_as(&m, &owner, "shared").await.expect("lock");
    let (m2, o2) = (m.clone(), owner.clone());
    let g2 = tokio::spawn(async move { lock_as(&m2, &o2, "shared").await })
        .await
        .expect("task")
        .expect("an explicit owner re-enters from another task");
    assert_eq!(g2.hold_count(), 2);
    g2.release().await.expect("release");
    g1.release().await.expect("release");
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn fencing_tokens_take_the_max_and_raise_lagging_nodes() {
    let (m, fakes) = cluster(3, Quorum::Majority);
    for _ in 0..5 {
        // Only nodes 0 and 1 see these acquisitions.
        fakes[2].set_mode(Mode::Fail);
        m.lock("job")
            .await
            .expect("lock")
            .release()
            .await
            .expect("release");
    }
    // Node 2 answers first, then node 1: the quorum is {2, 1}, and node 2
    // (at 1) must be raised to the token; node 0 grants late.
    fakes[2].set_mode(Mode::Normal);
    fakes[1].set_mode(Mode::Slow(MS));
    fakes[0].set_mode(Mode::Slow(2 * MS));
    let g = m.lock("job").await.expect("lock");
    assert_eq!(g.fencing_token(), 6);
    tokio::time::sleep(MS).await;
    let st = m.status("job").await.expect("status");
    for n in &st.nodes {
        assert_eq!(
            n.state.as_ref().map(|s| s.fence).ok(),
            Some(6),
            "node {}",
            n.node
        );
    }
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_guard_releases_in_the_background() {
    let (m, fakes) = cluster(3, Quorum::Majority);
    let g = m.lock("job").await.expect("lock");
    drop(g);
    m.flush().await;
    assert_eq!(holders(&fakes), 0);
}

#[tokio::test(start_paused = true)]
async fn flush_waits_for_rollbacks_and_releases_to_slow_nodes() {
    let (m, fakes) = cluster(5, Quorum::Majority);
    fakes[4].set_mode(Mode::Slow(50 * MS));
    let g = m.lock("job").await.expect("lock");
    drop(g);
    let start = tokio::time::Instant::now();
    m.flush().await;
    assert!(
        start.elapsed() >= 40 * MS,
        "flush returned before the slow node answered"
    );
    assert_eq!(holders(&fakes), 0);
    m.flush().await;
}

#[test]
fn a_guard_dropped_outside_a_runtime_does_not_panic() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (m, fakes) = rt.block_on(async { cluster(3, Quorum::Majority) });
    let g = rt.block_on(m.lock("job")).expect("lock");
    drop(rt);
    drop(g);
    // Released locally; the keys expire with the lease.
    assert!(holders(&fakes) >= 2);
}

#[tokio::test(start_paused = true)]
async fn try_lock_waits_its_full_wait_and_reports_the_pttl() {
    let (m, fakes) = cluster(3, Quorum::Majority);
    for f in &fakes {
        f.take(KEY, "other", Duration::from_secs(60));
    }
    let start = tokio::time::Instant::now();
    let err = m
        .try_lock("job", 300 * MS)
        .await
        .expect_err("held by other");
    let waited = start.elapsed();
    assert!(waited >= 300 * MS && waited < 500 * MS, "{waited:?}");
    assert!(err.min_pttl().is_some_and(|p| p > Duration::from_secs(59)));
}

#[tokio::test(start_paused = true)]
async fn a_fixed_lease_expires_and_release_says_so() {
    let (m, fakes) = cluster(3, Quorum::Majority);
    let g = m.lock_with_lease("job", 200 * MS).await.expect("lock");
    tokio::time::sleep(300 * MS).await;
    assert_eq!(
        holders(&fakes),
        0,
        "the lease should have expired on the nodes"
    );
    assert!(!g.is_held());
    let err = g.release().await.expect_err("expired");
    assert!(err.is_not_held(), "{err}");
}

#[tokio::test(start_paused = true)]
async fn bad_names_and_leases_are_typed_errors() {
    let (m, _) = cluster(3, Quorum::Majority);
    for name in ["", "a{b}", "line\nbreak"] {
        let e = m
            .try_lock(name, Duration::ZERO)
            .await
            .expect_err("bad name");
        assert!(e.is_invalid_input(), "{e}");
    }
    let long = "x".repeat(crate::MAX_NAME_LEN + 1);
    assert!(m.lock(&long).await.expect_err("long").is_invalid_input());
    assert!(m
        .lock_with_lease("job", Duration::ZERO)
        .await
        .expect_err("zero")
        .is_invalid_input());
    assert!(m
        .lock_with_lease("job", 2 * MS)
        .await
        .expect_err("drift")
        .is_invalid_input());
    assert!(m.status("").await.is_err());
    assert!(m.force_unlock("").await.is_err());
}

#[tokio::test(start_paused = true)]
async fn watchdog_renews_repairs_and_signals_loss() {
    let (m, fakes) = cluster_with(5, |b| b.lease(300 * MS).node_timeout(50 * MS));
    let g = m.lock("job").await.expect("lock");
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(holders(&fakes), 5, "renewal should keep the lock alive");
    fakes[1].wipe();
    tokio::time::sleep(150 * MS).await;
    assert_eq!(holders(&fakes), 5, "repair should restore node 1");
    assert!(m.watchdog_stats().repairs >= 1);
    for f in &fakes[..3] {
        f.set_mode(Mode::Fail);
    }
    let lost = tokio::time::timeout(300 * MS, g.lost()).await;
    assert!(lost.is_ok(), "lost() did not fire within the lease");
    assert!(g.is_lost());
    assert!(g.release().await.expect_err("lost").is_lost());
}

#[tokio::test(start_paused = true)]
async fn no_reentry_entry_outlives_its_acquisitions() {
    let (m, fakes) = cluster(3, Quorum::Majority);
    let me = m.new_owner();
    for i in 0..20 {
        let name = format!("job-{i}");
        let g = lock_as(&m, &me, &name).await.expect("lock");
        let g2 = lock_as(&m, &me, &name).await.expect("re-enter");
        g2.release().await.expect("release");
        g.release().await.expect("release");
    }
    for f in &fakes {
        f.take(KEY, "other", Duration::from_secs(60));
    }
    for _ in 0..20 {
        let _ = tokio::time::timeout(5 * MS, lock_as(&m, &me, "job")).await;
        let _ = m
            .request("job")
            .owner(&me)
            .wait(Duration::ZERO)
            .acquire()
            .await;
        let _ = try_now(&m).await;
    }
    let g = lock_as(&m, &me, "free").await.expect("lock");
    assert_eq!(
        m.inner.reentry.len(),
        1,
        "only the held lock keeps an entry"
    );
    drop(g);
    // The background release holds the hold until it is done.
    tokio::time::sleep(MS).await;
    assert_eq!(m.inner.reentry.len(), 0);
}

/// The fence counter of "job"'s slot.
fn fence() -> String {
    crate::keys::Keys::new("quorumlock:", "job").fence
}

/// Node 0's fence counter of `job`'s slot at 10 (the others' at 0), and
/// `job` held by another owner on nodes 3 and 4.
fn fence_at_10_and_job_taken_on_3_and_4(fakes: &[Arc<FakeNode>]) {
    fakes[0].set_fence(&fence(), 10);
    fakes[3].take(KEY, "other", Duration::from_secs(5));
    fakes[4].take(KEY, "other", Duration::from_secs(5));
}

/// Repairs are not only for nodes that lost a key: a lock granted by a
/// quorum while another owner held a minority is created there by the
/// first tick after that owner let go. So plain contention counts repairs
/// (`WatchdogStats::repairs`, `quorumlock_repairs_total`).
#[tokio::test(start_paused = true)]
async fn a_node_taken_at_the_grant_is_filled_by_the_next_tick_once_free() {
    let (m, fakes) = cluster_with(5, crate::tests::fake::renewed_each_second);
    fakes[3].take(KEY, "other", 100 * MS);
    fakes[4].take(KEY, "other", 100 * MS);
    let g = try_now(&m).await.expect("3 of 5 grant");
    let mine = fakes[0].holder(KEY).expect("held on node 0").0;
    let owners = || -> Vec<Option<String>> {
        fakes
            .iter()
            .map(|f| f.holder(KEY).map(|(o, _)| o))
            .collect()
    };
    assert_eq!(owners()[3].as_deref(), Some("other"));
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(
        owners(),
        vec![Some(mine); 5],
        "the tick filled nodes 3 and 4"
    );
    assert_eq!(m.watchdog_stats().repairs, 2);
    assert_eq!(m.watchdog_stats().losses, 0);
    g.release().await.expect("release");
    assert_eq!(holders(&fakes), 0);
}

#[tokio::test(start_paused = true)]
async fn the_fence_is_not_raised_on_nodes_that_answered_taken() {
    let (m, fakes) = cluster(5, Quorum::Majority);
    fence_at_10_and_job_taken_on_3_and_4(&fakes);
    let g = try_now(&m).await.expect("3 of 5 grant");
    assert_eq!(g.fencing_token(), 11);
    let fences: Vec<u64> = fakes.iter().map(|f| f.fence(&fence())).collect();
    assert_eq!(
        fences,
        vec![11, 11, 11, 0, 0],
        "the taken nodes are not asked"
    );
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn the_fence_falls_back_to_the_other_nodes_when_a_granter_fails() {
    let (m, fakes) = cluster(5, Quorum::Majority);
    fence_at_10_and_job_taken_on_3_and_4(&fakes);
    // Node 2 grants, then fails the raise.
    fakes[2].fail_after(1);
    let g = try_now(&m).await.expect("fenced on 0, 1, 3, 4");
    assert_eq!(g.fencing_token(), 11);
    let fences: Vec<u64> = fakes.iter().map(|f| f.fence(&fence())).collect();
    assert_eq!(fences, vec![11, 11, 1, 11, 11]);
    // A later holder's token is above it.
    fakes[2].set_mode(Mode::Fail);
    drop(g);
    m.flush().await;
    for f in &fakes[3..] {
        f.wipe();
        f.set_fence(&fence(), 11);
    }
    let g = try_now(&m).await.expect("free again");
    assert!(g.fencing_token() > 11);
}
