//! No value a user can pass makes the manager panic: the largest durations
//! the builder accepts, and `Duration::MAX` where a `Config` field is set
//! past the builder (its fields are public), against fake nodes.

use std::sync::Arc;
use std::time::Duration;

use crate::tests::fake::{cluster_with, fakes, nodes, FakeNode, Mode};
use crate::{Error, LockManager, MAX_LEASE, MAX_TIMEOUT};

const KEY: &str = "quorumlock:{job}";

/// A manager whose node timeout is `Duration::MAX`, which `build()` refuses
/// but a `Config` edited by hand can carry.
fn unbounded_timeout(n: usize, lease: Duration) -> (LockManager, Vec<Arc<FakeNode>>) {
    let fakes = fakes(n);
    let nodes = nodes(&fakes);
    let m = LockManager::builder()
        .lease(lease)
        .build_with(nodes.clone())
        .expect("valid fake cluster");
    let mut config = m.config().clone();
    config.node_timeout = Duration::MAX;
    (LockManager::from_parts(config, nodes, Vec::new()), fakes)
}

#[test]
fn the_builder_refuses_timeouts_above_the_maximum() {
    for set in [
        LockManager::builder().node_timeout(Duration::MAX),
        LockManager::builder().connect_timeout(Duration::MAX),
        LockManager::builder().node_timeout(MAX_TIMEOUT + Duration::from_nanos(1)),
        LockManager::builder().lease(Duration::MAX),
        LockManager::builder().renew_interval(Duration::MAX),
        LockManager::builder()
            .lease(MAX_LEASE)
            .renew_interval(MAX_LEASE),
    ] {
        let err = set.build_with(nodes(&fakes(3))).expect_err("refused");
        assert!(matches!(err, Error::InvalidInput { .. }), "{err}");
    }
    for factor in [f64::NAN, f64::INFINITY, f64::MAX, -0.0001, 1.0] {
        let err = LockManager::builder()
            .drift_factor(factor)
            .build_with(nodes(&fakes(3)))
            .expect_err("refused");
        assert!(matches!(err, Error::InvalidInput { .. }), "{factor}: {err}");
    }
    let m = LockManager::builder()
        .lease(MAX_LEASE)
        .node_timeout(MAX_TIMEOUT)
        .connect_timeout(MAX_TIMEOUT)
        .max_hold(Duration::MAX)
        .drift_factor(0.999_999)
        .backoff(crate::Backoff::new(Duration::from_nanos(1), Duration::MAX).expect("backoff"))
        .build_with(nodes(&fakes(3)))
        .expect("the largest accepted values");
    assert_eq!(m.config().node_timeout, MAX_TIMEOUT);
    assert!(m.config().drift(Duration::MAX) >= MAX_LEASE);
    let _ = m.config().backoff.delay(u32::MAX);
}

#[tokio::test(start_paused = true)]
async fn status_and_force_unlock_take_an_unbounded_node_timeout() {
    let (m, fakes) = unbounded_timeout(3, Duration::from_secs(10));
    fakes[0].take(KEY, "someone", Duration::from_secs(5));
    let status = m.status("job").await.expect("status");
    assert_eq!(
        status.nodes[0]
            .state
            .as_ref()
            .ok()
            .and_then(|s| s.holder.as_deref()),
        Some("someone")
    );
    assert_eq!(m.force_unlock("job").await.expect("force unlock"), 1);
    assert!(fakes[0].holder(KEY).is_none());
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_renews_under_an_unbounded_node_timeout() {
    let (m, fakes) = unbounded_timeout(3, Duration::from_secs(3));
    let g = m.lock("job").await.expect("lock");
    let before = m.watchdog_stats().ticks;
    crate::watchdog::tick(&m.inner.watchdog).await;
    assert_eq!(m.watchdog_stats().ticks, before + 1);
    assert!(m.watchdog_stats().extended >= 3);
    assert!(!g.is_lost());
    assert_eq!(fakes.iter().filter(|f| f.holder(KEY).is_some()).count(), 3);
    let mut config = m.config().clone();
    config.node_timeout = Duration::MAX;
    assert_eq!(
        crate::watchdog::renew_timeout(&config, usize::MAX),
        Duration::MAX
    );
}

#[tokio::test(start_paused = true)]
async fn the_largest_node_timeout_works_end_to_end_with_a_stalled_node() {
    let (m, fakes) = cluster_with(3, |b| {
        b.lease(MAX_LEASE)
            .node_timeout(MAX_TIMEOUT)
            .max_hold(Duration::MAX)
    });
    fakes[2].set_mode(Mode::Stall);
    let g = m
        .try_lock("job", Duration::ZERO)
        .await
        .expect("2 of 3 grant");
    let status = m.status("job").await.expect("status");
    assert!(status.nodes[2].state.is_err(), "the stalled node timed out");
    crate::watchdog::tick(&m.inner.watchdog).await;
    assert!(!g.is_lost());
    g.release().await.expect("release");
    assert_eq!(fakes.iter().filter(|f| f.holder(KEY).is_some()).count(), 0);
    let err = m.force_unlock("job").await.expect_err("node 2 stalls");
    assert!(err.is_unavailable(), "{err}");
}
