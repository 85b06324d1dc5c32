//! `watchdog_stats().losses` counts every renewed hold whose holder is told
//! it is lost, once, whatever noticed it first: the watchdog's verdict, the
//! validity running out while a renewal is still out (seen by `lost()`), a
//! re-entry that found the lock gone on too many nodes. A fixed lease
//! reaching its end is not a loss there. The loss seen at `valid_until`
//! while a renewal wave is still out is counted in
//! `tests::safety::lost_fires_no_later_than_valid_until_when_renewal_stalls`.

use std::time::Duration;

use crate::tests::fake::{cluster_with, lock_as, renewed_each_second};
use crate::HoldState;

const MS: Duration = Duration::from_millis(1);

/// A re-entry finds the lock gone on every node (forced): the hold is lost
/// by the re-entry, before any renewal looked.
#[tokio::test(start_paused = true)]
async fn a_loss_found_by_a_reentry_counts() {
    let (m, _fakes) = cluster_with(3, renewed_each_second);
    let a = m.new_owner();
    let g = lock_as(&m, &a, "job").await.expect("A locks");
    assert_eq!(m.force_unlock("job").await.expect("force"), 3);
    let err = lock_as(&m, &a, "job").await.expect_err("gone");
    assert!(err.is_lost(), "{err:?}");
    assert_eq!(g.state(), HoldState::Lost);
    assert_eq!(m.watchdog_stats().losses, 1);
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(m.watchdog_stats().losses, 1, "counted once");
}

/// The watchdog's own verdict (the lock was forced): one loss, as before.
#[tokio::test(start_paused = true)]
async fn a_loss_the_watchdog_finds_counts_once() {
    let (m, _fakes) = cluster_with(3, renewed_each_second);
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    assert_eq!(m.force_unlock("job").await.expect("force"), 3);
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost() fires");
    assert!(!g.is_held());
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(m.watchdog_stats().losses, 1);
}

/// A fixed lease that reaches its end fires `lost()` too, but it was never
/// renewed: it is no loss of the watchdog's.
#[tokio::test(start_paused = true)]
async fn a_fixed_lease_reaching_its_end_is_not_counted() {
    let (m, _fakes) = cluster_with(3, |b| b);
    let g = m.lock_with_lease("job", 1_000 * MS).await.expect("lock");
    tokio::time::timeout(Duration::from_secs(5), g.lost())
        .await
        .expect("lost() fires at the end of the lease");
    assert_eq!(m.watchdog_stats().losses, 0);
}
