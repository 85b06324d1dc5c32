//! Overload over fake nodes whose renewals cost server time per lock, on a
//! paused clock: a manager asked for three times what its watchdog can
//! keep renewed refuses the excess with `Error::Overloaded` and loses no
//! held lock, its held set renewed throughout.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::node::{Answer, NodeOps, RenewBatch, Renewed};
use crate::tests::fake::{batch as fake_batch, fakes, FakeNode, Script, TestNode};
use crate::{Error, LockManager};

/// A node whose renewals cost `per_lock` of its one CPU per lock, one
/// batch at a time (a saturated server's queue); other calls are free.
struct Costly {
    fake: Arc<FakeNode>,
    per_lock: Duration,
    cpu: Arc<tokio::sync::Mutex<()>>,
}

impl TestNode for Costly {
    fn fake(&self) -> &FakeNode {
        &self.fake
    }

    fn reach<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        script: impl Script<T>,
    ) -> Answer<T> {
        self.fake.reach(what, script)
    }

    fn reach_batch(&self, what: &'static str, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        let locks = u32::try_from(batch.items.len()).unwrap_or(u32::MAX);
        let (cpu, cost, fake) = (
            Arc::clone(&self.cpu),
            self.per_lock * locks,
            Arc::clone(&self.fake),
        );
        Box::pin(async move {
            let _busy = cpu.lock().await;
            tokio::time::sleep(cost).await;
            fake.reach(what, move |s| Ok(fake_batch(s, &batch.items, batch.kind())))
                .await
        })
    }
}

/// A manager over three [`Costly`] nodes whose renewals cost 1 ms per
/// lock, lease 3 s, renewed every second.
fn costly_manager() -> LockManager {
    let nodes: Vec<Arc<dyn NodeOps>> = fakes(3)
        .into_iter()
        .map(|fake| {
            Arc::new(Costly {
                fake,
                per_lock: Duration::from_millis(1),
                cpu: Arc::default(),
            }) as Arc<dyn NodeOps>
        })
        .collect();
    LockManager::builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .node_timeout(Duration::from_secs(1))
        .build_with(nodes)
        .expect("valid fake cluster")
}

/// Lease 3 s, renewed every second; renewals cost 1 ms per lock on each
/// node, so the watchdog keeps about 1,200 locks valid (the renew
/// interval plus a tick within three quarters of the validity). Asked for
/// 3,600 locks at 1,000 a second, the manager refuses what it cannot
/// renew; every lock it holds stays held through five more ticks. Without
/// the refusal, its ticks grow past the validity and held locks lapse.
#[tokio::test(start_paused = true)]
async fn an_overloaded_manager_refuses_new_locks_and_loses_none_it_holds() {
    let m = costly_manager();
    let mut held = Vec::new();
    let mut refused = 0;
    for i in 0..3_600 {
        match m.lock(&format!("load-{i}")).await {
            Ok(g) => held.push(g),
            Err(Error::Overloaded { .. }) => refused += 1,
            Err(e) => panic!("lock {i}: {e}"),
        }
        if i % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(5)).await;
    let stats = m.watchdog_stats();
    let lost = held.iter().filter(|g| !g.is_held()).count();
    assert_eq!((lost, stats.losses), (0, 0), "{stats:?}");
    let capacity = stats.capacity.expect("measured");
    assert!(
        (1_000..1_400).contains(&capacity),
        "capacity {capacity}: {stats:?}"
    );
    assert!(
        refused >= 1_200,
        "refused {refused} of 3,600, held {}",
        held.len()
    );
    assert_eq!(stats.refused, refused);
    let e = m.lock("one-more").await.unwrap_err();
    assert!(e.is_overloaded(), "{e}");
    assert!(e.to_string().contains("capacity"), "{e}");
    // Releasing makes room again.
    let free = held.len() - 1_000;
    for g in held.drain(..free) {
        g.release().await.unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    drop(m.lock("after-releases").await.unwrap());
}

/// A manager near its capacity that takes and releases short locks one
/// after another is never refused: a released hold leaves the count of
/// held locks when it is released, not at the next tick (before, 1,000
/// held and a few hundred short holds within one tick were refused as
/// `Overloaded`, the released ones still counted). The registry drops the
/// holds gone as it grows, not only at the tick.
#[tokio::test(start_paused = true)]
async fn short_holds_near_the_capacity_are_not_refused() {
    let m = costly_manager();
    let mut held = Vec::new();
    for i in 0..1_000 {
        held.push(m.lock(&format!("kept-{i}")).await.expect("within capacity"));
        if i % 10 == 9 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let capacity = m.watchdog_stats().capacity.expect("measured");
    assert!((1_000..1_400).contains(&capacity), "capacity {capacity}");
    // Twice the room left, one at a time, all within one tick.
    let cycles = 2 * (capacity - 1_000) + 100;
    let start = tokio::time::Instant::now();
    for i in 0..cycles {
        let g = m.lock("short").await;
        let g = g.unwrap_or_else(|e| panic!("short hold {i} of {cycles}, 1,001 held at most: {e}"));
        g.release().await.expect("release");
    }
    assert!(
        start.elapsed() < Duration::from_secs(1),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(m.watchdog_stats().refused, 0);
    assert!(held.iter().all(|g| g.is_held()));
    // Nor does the registry keep every short hold until the tick.
    for _ in 0..5_000 {
        m.lock("short")
            .await
            .expect("lock")
            .release()
            .await
            .expect("release");
    }
    let kept = m.inner.watchdog.registry_len();
    assert!(
        kept <= 2 * 1_001 + 1_024 + 1,
        "{kept} holds kept in the registry"
    );
}

/// A crowd of attempts larger than [`MAX_ATTEMPTS_IN_FLIGHT`] sends that
/// many at once; the others wait for a place, then attempt (issue 35: a
/// release behind thousands of attempts in flight timed out, its answers
/// read behind theirs).
#[tokio::test(start_paused = true)]
async fn a_crowd_of_attempts_sends_at_most_the_bound_at_once() {
    use crate::members::MAX_ATTEMPTS_IN_FLIGHT;
    use crate::tests::fake::{nodes, Mode};
    use std::sync::atomic::Ordering;

    let fakes = fakes(3);
    for f in &fakes {
        f.set_mode(Mode::Stall);
    }
    let m = LockManager::builder()
        .node_timeout(Duration::from_secs(1))
        .build_with(nodes(&fakes))
        .expect("valid settings");
    let crowd = MAX_ATTEMPTS_IN_FLIGHT + 100;
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..crowd {
        let m = m.clone();
        tasks.spawn(async move { m.try_lock(&format!("crowd-{i}"), Duration::ZERO).await });
    }
    let sent = || -> u64 { fakes.iter().map(|f| f.calls.load(Ordering::Relaxed)).sum() };
    tokio::time::sleep(Duration::from_millis(10)).await;
    let bound = 3 * MAX_ATTEMPTS_IN_FLIGHT as u64;
    assert_eq!(sent(), bound, "one call per node per attempt in flight");
    for f in &fakes {
        f.set_mode(Mode::Normal);
    }
    let mut won = 0;
    while let Some(r) = tasks.join_next().await {
        won += usize::from(r.expect("an attempt task").is_ok());
    }
    // Those in flight timed out on the stalled nodes; the rest got places
    // as they freed, and took their locks.
    assert_eq!(won, 100);
}
