//! The watchdog at scale, against fake nodes on the paused clock: many
//! holds renew in waves paced over half the renew interval, a tick behind
//! its pace grows its waves, a dead node costs one timeout per tick (not
//! one per wave), and a release does not wait for waves other than its own.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::tests::fake::{cluster_with, FakeNode, Mode};
use crate::watchdog::{renew_timeout, tick};

/// Locks per wave here, so that a few hundred locks make several waves.
const WAVE: usize = 100;
use crate::{LockGuard, LockManager, WatchdogStats};

async fn holding(n: usize) -> (LockManager, Vec<Arc<FakeNode>>, Vec<LockGuard>) {
    // The builder's default node timeout.
    let (m, fakes) = cluster_with(5, |b| {
        b.lease(Duration::from_secs(30))
            .node_timeout(Duration::from_millis(200))
    });
    m.inner.watchdog.set_wave(WAVE);
    let mut guards = Vec::with_capacity(n);
    for i in 0..n {
        guards.push(m.lock(&format!("entity-{i}")).await.expect("lock"));
    }
    (m, fakes, guards)
}

/// One tick of `m`'s watchdog: how long it took, and the stats before and
/// after it.
async fn timed_tick(m: &LockManager) -> (Duration, WatchdogStats, WatchdogStats) {
    let s0 = m.watchdog_stats();
    let began = Instant::now();
    tick(&m.inner.watchdog).await;
    (began.elapsed(), s0, m.watchdog_stats())
}

#[tokio::test(start_paused = true)]
async fn many_holds_renew_in_paced_waves_and_a_dead_node_costs_no_wave_a_timeout() {
    let n = 2 * WAVE + 1;
    let (m, fakes, guards) = holding(n).await;
    let s0 = m.watchdog_stats();
    let began = Instant::now();
    tick(&m.inner.watchdog).await;
    let healthy = began.elapsed();
    let s1 = m.watchdog_stats();
    assert_eq!(s1.ticks - s0.ticks, 1);
    assert_eq!(s1.locks_renewed - s0.locks_renewed, n as u64);
    assert_eq!(
        s1.round_trips - s0.round_trips,
        3 * 5,
        "three waves, five nodes"
    );
    assert_eq!(s1.extended - s0.extended, 5 * n as u64);
    // Spread over half the interval (10 s of a 30 s lease): the last wave
    // starts two thirds of the way through that half.
    let interval = m.config().renew_interval;
    assert!(
        healthy >= interval / 4 && healthy < interval / 2,
        "tick took {healthy:?}"
    );

    // Node 4 black-holes: the first wave waits for it once (within its
    // slot), the others skip it.
    fakes[4].set_mode(Mode::Stall);
    let began = Instant::now();
    tick(&m.inner.watchdog).await;
    let stalled = began.elapsed();
    let s2 = m.watchdog_stats();
    let one = renew_timeout(m.config(), WAVE) * 4;
    assert!(
        stalled < healthy + one,
        "tick took {stalled:?}, healthy {healthy:?}"
    );
    assert_eq!(s2.round_trips - s1.round_trips, 5 + 4 + 4);
    assert_eq!(s2.losses, 0, "4 of 5 nodes still renew every hold");
    assert!(guards.iter().all(LockGuard::is_held));
}

#[tokio::test(start_paused = true)]
async fn a_tick_behind_its_pace_grows_its_waves() {
    let n = 20 * WAVE;
    let (m, fakes, _guards) = holding(n).await;
    m.inner.watchdog.set_wave(crate::watchdog::WAVE);
    // Every call takes 600 ms: twenty waves of 100 would take 12 s, more than the
    // renew interval. Doubling the waves keeps the tick within it.
    for f in &fakes {
        f.set_mode(Mode::Slow(Duration::from_millis(600)));
    }
    let (took, s0, s1) = timed_tick(&m).await;
    assert!(took < m.config().renew_interval, "tick took {took:?}");
    assert!(s1.round_trips - s0.round_trips < 20 * 5, "waves grew");
    assert_eq!(s1.losses, 0);
    assert_eq!(s1.overruns, 0);
}

/// On a member of several shards each shard's waves run beside the other
/// shards' (each shard is a server of its own): a tick takes about one
/// shard's waves, not the sum of all of them.
#[tokio::test(start_paused = true)]
async fn the_waves_of_different_shards_run_at_the_same_time() {
    let n = 30 * WAVE;
    let (m, fakes, _guards) = holding(n).await;
    // Each node a member of three shards (the slots' usual split); every
    // call takes 600 ms. About ten waves of 100 a shard: 6 s a shard, 18 s
    // for the three one after another, more than the 10 s renew interval.
    for f in &fakes {
        f.set_shard_breaks(vec![5461, 10923]);
        f.set_mode(Mode::Slow(Duration::from_millis(600)));
    }
    let (took, s0, s1) = timed_tick(&m).await;
    assert!(
        took < m.config().renew_interval,
        "tick took {took:?}: the shards' waves ran one after another"
    );
    // This tick alone renewed meanwhile (the manager's own watchdog ticks
    // every 10 s).
    assert_eq!(s1.locks_renewed - s0.locks_renewed, n as u64);
    assert_eq!(s1.overruns - s0.overruns, 0);
    assert_eq!(s1.losses, 0);
    // Still whole calls: at most one wave more per shard than 30.
    let waves = (s1.round_trips - s0.round_trips) / 5;
    assert!((30..=33).contains(&waves), "{waves} waves");
}

#[tokio::test(start_paused = true)]
async fn a_release_waits_only_for_the_wave_of_its_own_hold() {
    let n = 2 * WAVE;
    let (m, fakes, mut guards) = holding(n).await;
    // Every call takes 100 ms: a tick is two waves, 5 s apart.
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
