//! A re-entry never re-creates a lock that is gone on a quorum (forced, or
//! lost by nodes restarted empty): it fails and the hold is lost. And a
//! release that errors has changed nothing.

use std::sync::Arc;
use std::time::Duration;

use crate::keys::Keys;
use crate::tests::fake::{cluster_with, lock_all_as, lock_as, renewed_each_second, FakeNode, Mode};
use crate::{Error, HoldState, LockGuard, LockManager, Owner};

const MS: Duration = Duration::from_millis(1);
const KEY: &str = "quorumlock:{job}";

/// 3 nodes, majority, lease 3 s renewed every second.
fn cluster() -> (LockManager, Vec<Arc<FakeNode>>) {
    cluster_with(3, renewed_each_second)
}

/// The cluster, with `job` held by owner A (explicit: it re-enters).
struct Held {
    m: LockManager,
    fakes: Vec<Arc<FakeNode>>,
    a: Owner,
    /// A's guard.
    g: LockGuard,
}

async fn a_holds_job() -> Held {
    let (m, fakes) = cluster();
    let a = m.new_owner();
    let g = lock_as(&m, &a, "job").await.expect("A locks");
    Held { m, fakes, a, g }
}

/// The nodes where `holder` holds the lock.
fn held_by(fakes: &[Arc<FakeNode>], holder: &str) -> usize {
    fakes
        .iter()
        .filter(|f| f.holder(KEY).is_some_and(|(h, _)| h == holder))
        .count()
}

/// The exact scenario: A holds; `force_unlock`; B takes and releases; A's
/// owner re-enters. The re-entry must not re-create A's keys: it fails with
/// `Lost`, the hold is lost (`lost()` fires), and no node holds A's key.
#[tokio::test(start_paused = true)]
async fn a_reentry_after_force_unlock_fails_and_the_hold_is_lost() {
    let Held { m, fakes, a, g } = a_holds_job().await;
    let a_id = g.holder_id().to_owned();
    assert_eq!(m.force_unlock("job").await.expect("force"), 3);
    let b = m
        .request("job")
        .owner(&m.new_owner())
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("B takes the forced lock");
    assert!(b.fencing_token() > g.fencing_token());
    b.release().await.expect("B releases");
    let again = lock_as(&m, &a, "job").await;
    let err = again.expect_err("a re-entry must not undo force_unlock");
    assert!(matches!(err, Error::Lost { .. }), "{err:?}");
    assert_eq!(g.state(), HoldState::Lost);
    assert!(
        tokio::time::timeout(10 * MS, g.lost()).await.is_ok(),
        "lost() did not fire"
    );
    tokio::time::sleep(200 * MS).await;
    assert_eq!(
        held_by(&fakes, &a_id),
        0,
        "the re-entry re-created A's keys"
    );
    assert!(fakes.iter().all(|f| f.holder(KEY).is_none()));
    assert!(g.release().await.expect_err("lost").is_lost());
}

/// A majority restarted empty: a re-entry finds the key missing on two of
/// three nodes, so no quorum can confirm the hold. It is lost; the key left
/// on the third node is released.
#[tokio::test(start_paused = true)]
async fn a_reentry_after_a_majority_restarted_empty_fails_and_the_hold_is_lost() {
    let Held { m, fakes, a, g } = a_holds_job().await;
    fakes[0].wipe();
    fakes[1].wipe();
    let err = lock_as(&m, &a, "job")
        .await
        .expect_err("a re-entry must not resurrect keys a majority lost");
    assert!(err.is_lost(), "{err:?}");
    assert!(g.is_lost());
    tokio::time::sleep(200 * MS).await;
    assert!(fakes.iter().all(|f| f.holder(KEY).is_none()));
    assert_eq!(
        fakes[0].fence(&Keys::new("quorumlock:", "job").fence),
        0,
        "no INCR on a re-entry"
    );
}

/// Missing on a minority while a quorum confirms: the re-entry succeeds and
/// creates nothing; the watchdog's repair (in its next tick, under its own
/// minority rule) re-creates the key, with the new count.
#[tokio::test(start_paused = true)]
async fn a_reentry_creates_nothing_on_a_minority_and_the_watchdog_repairs_it() {
    let Held { m, fakes, a, g } = a_holds_job().await;
    let id = g.holder_id().to_owned();
    fakes[0].wipe();
    let g2 = lock_as(&m, &a, "job")
        .await
        .expect("a quorum confirms the re-entry");
    assert_eq!(g2.hold_count(), 2);
    assert!(g.is_held());
    assert!(fakes[0].holder(KEY).is_none(), "the re-entry created a key");
    assert_eq!(
        fakes[0].fence(&Keys::new("quorumlock:", "job").fence),
        0,
        "no INCR on a re-entry"
    );
    assert_eq!(g2.granted_nodes(), vec![1, 2]);
    tokio::time::sleep(1_100 * MS).await;
    assert_eq!(fakes[0].holder(KEY), Some((id, 2)), "the watchdog repairs");
    assert!(m.watchdog_stats().repairs >= 1);
    g2.release().await.expect("release level 2");
    g.release().await.expect("release");
    assert!(fakes.iter().all(|f| f.holder(KEY).is_none()));
}

/// Nodes that merely fail say nothing about the key: the re-entry keeps
/// today's behaviour (the guard, valid until `valid_until`), and the
/// watchdog decides.
#[tokio::test(start_paused = true)]
async fn a_reentry_with_failed_nodes_keeps_the_hold() {
    let Held { m, fakes, a, g } = a_holds_job().await;
    fakes[0].set_mode(Mode::Fail);
    fakes[1].set_mode(Mode::Stall);
    let g2 = lock_as(&m, &a, "job")
        .await
        .expect("unavailable nodes do not lose the hold");
    assert_eq!(g2.hold_count(), 2);
    assert_eq!(g.state(), HoldState::Held);
    fakes[0].set_mode(Mode::Normal);
    fakes[1].set_mode(Mode::Normal);
    g2.release().await.expect("release level 2");
    g.release().await.expect("release");
}

/// `lock_all` re-enters each name it holds through the same path: a forced
/// name fails the whole call with `Lost`.
#[tokio::test(start_paused = true)]
async fn a_lock_all_reentry_after_force_unlock_fails_and_the_hold_is_lost() {
    let (m, fakes) = cluster();
    let a = m.new_owner();
    let g = lock_all_as(&m, &a, &["job", "other"])
        .await
        .expect("A locks both");
    assert_eq!(m.force_unlock("job").await.expect("force"), 3);
    let err = lock_all_as(&m, &a, &["job", "other"])
        .await
        .expect_err("a re-entry must not undo force_unlock");
    assert!(err.is_lost(), "{err:?}");
    tokio::time::sleep(200 * MS).await;
    assert!(fakes.iter().all(|f| f.holder(KEY).is_none()));
    drop(g);
}

/// A queue key of another type on every node: the release errors, and the
/// lock is still held everywhere (an error reply means nothing changed).
#[tokio::test(start_paused = true)]
async fn a_release_with_a_foreign_queue_key_errors_and_changes_nothing() {
    let (m, fakes) = cluster();
    let g = m.lock("job").await.expect("lock");
    let id = g.holder_id().to_owned();
    let queue = Keys::new("quorumlock:", "job").queue();
    for f in &fakes {
        f.put_foreign(&queue);
    }
    let err = g.release().await.expect_err("WRONGTYPE on every node");
    assert!(matches!(err, Error::Unavailable { .. }), "{err:?}");
    assert_eq!(held_by(&fakes, &id), 3, "an error reply deleted the lock");
}
