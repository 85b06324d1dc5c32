//! The watchdog at scale, against fake nodes on the paused clock: many
//! holds renew in waves, a dead node costs one timeout per tick (not one
//! per wave), and a release does not wait for waves other than its own.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::node::NodeOps;
use crate::tests::fake::{FakeNode, Mode};
use crate::watchdog::{renew_timeout, tick};

/// Locks per wave here, so that a few hundred locks make several waves.
const WAVE: usize = 100;
use crate::{LockGuard, LockManager, Quorum};

async fn holding(n: usize) -> (LockManager, Vec<Arc<FakeNode>>, Vec<LockGuard>) {
    let fakes: Vec<Arc<FakeNode>> = (0..5).map(FakeNode::new).collect();
    let nodes = fakes
        .iter()
        .map(|f| Arc::clone(f) as Arc<dyn NodeOps>)
        .collect();
    let m = LockManager::builder()
        .quorum(Quorum::Majority)
        .lease(Duration::from_secs(30))
        .build_with(nodes)
        .expect("valid fake cluster");
    m.inner.watchdog.set_wave(WAVE);
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        guards.push(m.lock(&format!("entity-{i}")).await.expect("lock"));
    }
    (m, fakes, guards)
}

#[tokio::test(start_paused = true)]
async fn many_holds_renew_in_waves_and_a_dead_node_costs_one_timeout_per_tick() {
    let n = 2 * WAVE + 1;
    let (m, fakes, guards) = holding(n).await;
    let s0 = m.watchdog_stats();
    tick(&m.inner.watchdog).await;
    let s1 = m.watchdog_stats();
    assert_eq!(s1.ticks - s0.ticks, 1);
    assert_eq!(s1.locks_renewed - s0.locks_renewed, n as u64);
    assert_eq!(
        s1.round_trips - s0.round_trips,
        3 * 5,
        "three waves, five nodes"
    );
    assert_eq!(s1.extended - s0.extended, 5 * n as u64);

    // Node 4 black-holes: the first wave waits for it once, the others skip it.
    fakes[4].set_mode(Mode::Stall);
    let began = Instant::now();
    tick(&m.inner.watchdog).await;
    let took = began.elapsed();
    let s2 = m.watchdog_stats();
    let one = renew_timeout(m.config(), WAVE);
    assert!(
        took >= one && took < one * 2,
        "tick took {took:?}, one timeout is {one:?}"
    );
    assert_eq!(s2.round_trips - s1.round_trips, 5 + 4 + 4);
    assert_eq!(s2.losses, 0, "4 of 5 nodes still renew every hold");
    assert!(guards.iter().all(LockGuard::is_held));
}

#[tokio::test(start_paused = true)]
async fn a_release_waits_only_for_the_wave_of_its_own_hold() {
    let n = 2 * WAVE;
    let (m, fakes, mut guards) = holding(n).await;
    // Every call takes 100 ms: a tick is two waves of 100 ms each.
    for f in &fakes {
        f.set_mode(Mode::Slow(Duration::from_millis(100)));
    }
    let last = guards.pop().expect("a guard");
    let watchdog = Arc::clone(&m.inner.watchdog);
    let ticking = tokio::spawn(async move { tick(&watchdog).await });
    // Within the first wave: the last hold is in the second, not yet sent.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let began = Instant::now();
    last.release().await.expect("release");
    let took = began.elapsed();
    assert!(
        took < Duration::from_millis(150),
        "released in {took:?}: it waited for a wave it is not in"
    );
    ticking.await.expect("tick");
    assert_eq!(m.watchdog_stats().losses, 0);
}
