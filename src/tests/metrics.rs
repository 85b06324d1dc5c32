//! The metrics (`telemetry`) against fake nodes: a scripted scenario with
//! every outcome, a fair handoff, a repair and a loss, and the exact counts
//! a recording recorder saw; docs/OBSERVABILITY.md's table and the Grafana dashboard
//! against the code's list.
//!
//! Recorder: `metrics_util`'s `DebuggingRecorder`, one per test, made the
//! thread's local recorder only while the manager is built
//! (`metrics::with_local_recorder`). The manager registers every handle
//! then, and all later recording (the test's own calls, the watchdog task,
//! rollbacks and late replies in the background, the pub/sub tasks) goes
//! through those handles, whatever thread or task it runs on; so no global
//! recorder is installed, and tests running in parallel never see each
//! other's values.

use std::collections::HashMap;
use std::time::Duration;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

use std::sync::atomic::Ordering;

use crate::telemetry::{Unit, METRICS};
use crate::tests::fake::{cluster_with, renewed_each_second, FakeNode, Mode};
use crate::LockManager;

const MS: Duration = Duration::from_millis(1);

/// Everything recorded so far, summed over snapshots (a snapshot of the
/// debugging recorder resets counters and inc/dec gauges to 0 and drains
/// histograms, so the sum of all snapshots is the running total).
#[derive(Default)]
struct Recorded {
    counters: HashMap<String, u64>,
    gauges: HashMap<String, f64>,
    /// Gauges as the last snapshot saw them (for gauges that are set: 0
    /// when not set since the snapshot before).
    last: HashMap<String, f64>,
    histograms: HashMap<String, Vec<f64>>,
    /// Units and descriptions, by name.
    described: HashMap<String, (Option<metrics::Unit>, bool)>,
}

/// `name{k=v,...}` with the labels sorted.
fn key_of(name: &str, labels: &[(&str, &str)]) -> String {
    let mut l: Vec<String> = labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    l.sort();
    format!("{name}{{{}}}", l.join(","))
}

impl Recorded {
    fn take(&mut self, s: &Snapshotter) {
        for (ck, unit, desc, value) in s.snapshot().into_vec() {
            let key = ck.key();
            let labels: Vec<(&str, &str)> = key.labels().map(|l| (l.key(), l.value())).collect();
            let k = key_of(key.name(), &labels);
            self.described
                .insert(key.name().to_owned(), (unit, desc.is_some()));
            match value {
                DebugValue::Counter(n) => *self.counters.entry(k).or_default() += n,
                DebugValue::Gauge(g) => {
                    self.last.insert(k.clone(), g.into_inner());
                    *self.gauges.entry(k).or_default() += g.into_inner();
                }
                DebugValue::Histogram(h) => self
                    .histograms
                    .entry(k)
                    .or_default()
                    .extend(h.into_iter().map(|v| v.into_inner())),
            }
        }
    }

    fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        let k = key_of(name, labels);
        *self
            .counters
            .get(&k)
            .unwrap_or_else(|| panic!("no counter {k}"))
    }

    fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let k = key_of(name, labels);
        *self
            .gauges
            .get(&k)
            .unwrap_or_else(|| panic!("no gauge {k}"))
    }

    fn last_gauge(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        let k = key_of(name, labels);
        *self.last.get(&k).unwrap_or_else(|| panic!("no gauge {k}"))
    }

    fn samples(&self, name: &str, labels: &[(&str, &str)]) -> &[f64] {
        let k = key_of(name, labels);
        self.histograms.get(&k).map_or(&[], |v| v.as_slice())
    }

    /// Every counter of `name`, by its labels.
    fn counters_of(&self, name: &str) -> Vec<(String, u64)> {
        let mut v: Vec<(String, u64)> = self
            .counters
            .iter()
            .filter(|(k, n)| k.starts_with(&format!("{name}{{")) && **n > 0)
            .map(|(k, n)| (k.clone(), *n))
            .collect();
        v.sort();
        v
    }
}

/// A manager over `n` fakes (lease 3 s, renewed every second) whose
/// metrics go to a recorder of its own.
fn metered_cluster(n: usize) -> (LockManager, Vec<std::sync::Arc<FakeNode>>, Snapshotter) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let (m, fakes) =
        metrics::with_local_recorder(&recorder, || cluster_with(n, renewed_each_second));
    (m, fakes, snapshotter)
}

#[tokio::test(start_paused = true)]
async fn a_scripted_scenario_records_exact_counts() {
    let (m, fakes, snap) = metered_cluster(3);
    let mut rec = Recorded::default();

    // 1. Acquired at once, then contended: one try finds it taken.
    let a = m.lock("a").await.expect("lock a");
    let busy = m
        .try_lock("a", Duration::ZERO)
        .await
        .expect_err("a is held");
    assert!(busy.is_contended(), "{busy}");

    // 2. A fair handoff: a fair waiter queues, the holder releases, the
    //    waiter is rung and takes it.
    let waiter = {
        let m = m.clone();
        tokio::spawn(async move { m.request("a").fair().acquire().await })
    };
    tokio::time::sleep(10 * MS).await;
    a.release().await.expect("release a");
    let handed = waiter
        .await
        .expect("join")
        .expect("the fair waiter takes a");
    handed.release().await.expect("release the handed-over a");

    // 3. A wait that runs out, and a wait that is dropped.
    let b = m.lock("b").await.expect("lock b");
    let late = m.try_lock("b", 50 * MS).await.expect_err("b is held");
    assert!(late.is_contended(), "{late}");
    let dropped = {
        let m = m.clone();
        tokio::spawn(async move { m.lock("b").await })
    };
    tokio::time::sleep(10 * MS).await;
    dropped.abort();
    assert!(dropped.await.expect_err("aborted").is_cancelled());
    b.release().await.expect("release b");

    // 4. Unavailable: two of three nodes refuse; the grant of the third is
    //    rolled back. And an error: a bad name.
    fakes[0].set_mode(Mode::Fail);
    fakes[1].set_mode(Mode::Fail);
    let down = m.try_lock("u", Duration::ZERO).await.expect_err("1 of 3");
    assert!(down.is_unavailable(), "{down}");
    fakes[0].set_mode(Mode::Normal);
    fakes[1].set_mode(Mode::Normal);
    assert!(m.lock("").await.is_err(), "an empty name is refused");

    // 5. One node fails while a lock is taken and released: a quorum of
    //    two is enough. Then one stalls: its calls are left unanswered
    //    until their deadline (the node timeout, 100 ms), and it is down.
    //    `u`, `e` and `s` share a hash slot, so one fence counter per node:
    //    u's grant left node 2's ahead, and e's and s's grants find it so.
    let (e_name, s_name) = (same_slot_as("u", "e"), same_slot_as("u", "s"));
    fakes[1].set_mode(Mode::Fail);
    let e = m.lock(&e_name).await.expect("2 of 3 grant");
    e.release().await.expect("2 of 3 release");
    fakes[1].set_mode(Mode::Normal);
    fakes[2].set_mode(Mode::Stall);
    let s = m.lock(&s_name).await.expect("2 of 3 grant");
    s.release().await.expect("2 of 3 release");
    m.flush().await;
    rec.take(&snap);
    assert_eq!(
        rec.last_gauge("quorumlock_node_up", &[("node", "fake-2")]),
        0.0
    );
    assert_eq!(
        rec.last_gauge("quorumlock_node_up", &[("node", "fake-1")]),
        1.0
    );
    fakes[2].set_mode(Mode::Normal);

    // The waiters' pub/sub connection to node 0 drops: it is opened again.
    fakes[0].hub().disconnect_all();
    tokio::time::sleep(200 * MS).await;

    // 6. A repair and a loss in the watchdog's first wave (1 s after the
    //    first hold): node 2 restarts empty while `r` and `l` are held, and
    //    `l` is forced on every node.
    let r = m.lock("r").await.expect("lock r");
    let l = m.lock("l").await.expect("lock l");
    fakes[2].wipe();
    assert_eq!(m.force_unlock("l").await.expect("force l"), 2);
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(l.is_lost(), "l was forced: the wave finds it gone");
    assert!(r.is_held(), "r is confirmed by nodes 0 and 1");
    assert!(l.release().await.is_err());
    r.release().await.expect("release r");
    m.flush().await;
    rec.take(&snap);

    let wd = m.watchdog_stats();
    let acq = |o: &str| rec.counter("quorumlock_acquisitions_total", &[("outcome", o)]);
    // a, the fair waiter, b, e, s, r, l; the one try at a; the 50 ms wait
    // for b; the aborted wait for b; u; the empty name.
    assert_eq!(acq("acquired"), 7);
    assert_eq!(acq("contended"), 1);
    assert_eq!(acq("timed_out"), 1);
    assert_eq!(acq("unavailable"), 1);
    assert_eq!(acq("cancelled"), 1);
    assert_eq!(acq("error"), 1);
    // In the order they ended: a, the one try, the fair waiter (queued and
    // missed, subscribed and missed again, rung by the release and won),
    // b, the 50 ms wait (a miss, a subscription, a last try at its end),
    // the aborted wait (it joined the subscribed channel before its first
    // try), u, the empty name (no attempt), e, s, r, l.
    assert_eq!(
        rec.samples("quorumlock_acquire_attempts", &[]),
        [1.0, 1.0, 3.0, 1.0, 3.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 1.0]
    );
    let took = |o: &str| rec.samples("quorumlock_acquire_duration_seconds", &[("outcome", o)]);
    assert_eq!(took("acquired").len(), 7);
    assert_eq!(took("contended"), [0.0]);
    assert_secs(took("timed_out"), &[0.05]);
    assert_secs(took("cancelled"), &[0.01]);
    assert_eq!(took("unavailable"), [0.0]);
    assert_eq!(took("error"), [0.0]);
    // The fair waiter: until subscribed (at once), then until rung (10 ms);
    // the 50 ms wait: until subscribed, then the rest of its wait; the
    // aborted one: 10 ms until dropped.
    assert_secs(
        rec.samples("quorumlock_wait_duration_seconds", &[]),
        &[0.0, 0.01, 0.0, 0.05, 0.01],
    );
    // Only u's grant (node 2) was rolled back: every other miss found the
    // lock taken on the nodes that answered.
    assert_eq!(rec.counter("quorumlock_rollbacks_total", &[]), 1);
    // e (node 0 lagged behind node 2's counter) and s (node 1, behind since
    // it failed u and e, and the stalled node 2, asked in the same round).
    assert_eq!(rec.counter("quorumlock_fence_raises_total", &[]), 3);
    assert_eq!(
        rec.samples("quorumlock_hold_duration_seconds", &[]).len(),
        7,
        "a, the waiter's, b, e, s, r, l"
    );
    assert_eq!(rec.gauge("quorumlock_locks_held", &[]), 0.0);
    assert_eq!(rec.gauge("quorumlock_waiters", &[]), 0.0);
    // One tick with holds (r and l, at 1 s), one wave, on time.
    assert_eq!(rec.counter("quorumlock_watchdog_waves_total", &[]), 1);
    assert_eq!(rec.samples("quorumlock_renewal_lag_seconds", &[]), [0.0]);
    assert_eq!(rec.counter("quorumlock_renewals_total", &[]), 1, "r");
    assert_eq!(
        rec.counter("quorumlock_repairs_total", &[]),
        1,
        "r on node 2"
    );
    assert_eq!(
        rec.counters_of("quorumlock_losses_total"),
        [(key_of("quorumlock_losses_total", &[("cause", "gone")]), 1)],
        "l, forced"
    );
    assert_eq!((wd.ticks, wd.repairs, wd.losses), (1, 1, 1));
    let err = |node: &str, kind: &str| {
        key_of(
            "quorumlock_node_errors_total",
            &[("node", node), ("kind", kind)],
        )
    };
    assert_eq!(
        rec.counters_of("quorumlock_node_errors_total"),
        [
            // u's acquire and rollback.
            (err("fake-0", "connection"), 2),
            // u's acquire and rollback, e's acquire and release.
            (err("fake-1", "connection"), 4),
            // s's acquire, fence raise and release, stalled.
            (err("fake-2", "timeout"), 3),
        ]
    );
    assert_eq!(
        rec.counters_of("quorumlock_pubsub_reconnects_total"),
        [(
            key_of("quorumlock_pubsub_reconnects_total", &[("node", "fake-0")]),
            1
        )]
    );
    // Node 2, down at the first snapshot, answered again (the gauge is set
    // when it changes; a snapshot resets it to 0, so nodes 0 and 1, up at
    // the first snapshot and since, read 0 in the second).
    assert_eq!(
        rec.last_gauge("quorumlock_node_up", &[("node", "fake-2")]),
        1.0
    );
    // Every call answered is timed once: all the calls the fakes got but
    // the three stalled ones and the one try's call to node 2, left
    // unanswered once two "taken" decided the miss (neither a timeout).
    let answered: usize = ["fake-0", "fake-1", "fake-2"]
        .iter()
        .map(|n| {
            rec.samples("quorumlock_node_call_duration_seconds", &[("node", n)])
                .len()
        })
        .sum();
    let calls: u64 = fakes.iter().map(|f| f.calls.load(Ordering::Relaxed)).sum();
    assert_eq!(answered as u64, calls - 4);
    // Every metric was described with its unit when the manager was built.
    for spec in METRICS {
        let unit = match spec.unit {
            Unit::Count => metrics::Unit::Count,
            Unit::Seconds => metrics::Unit::Seconds,
        };
        assert_eq!(
            rec.described.get(spec.name),
            Some(&(Some(unit), true)),
            "{} described",
            spec.name
        );
    }
}

/// `got` are `want` seconds, to the nanosecond.
fn assert_secs(got: &[f64], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!((g - w).abs() < 1e-9, "{got:?} vs {want:?}");
    }
}

/// A lock name starting with `stem` in the hash slot of `name`: names of
/// one slot share a fence counter per node.
fn same_slot_as(name: &str, stem: &str) -> String {
    let slot = crate::keys::name_slot(name);
    (0u32..)
        .map(|i| format!("{stem}-{i}"))
        .find(|n| crate::keys::name_slot(n) == slot)
        .unwrap_or_else(|| stem.to_owned())
}

/// A waiter on a held lock whose refresh interval ends (5 s queue timeout:
/// at 1.67 s) keeps its place in a batch of places: one kept place
/// counted. Its attempts: the miss, the one once subscribed, the winning
/// one (none for the refresh).
#[tokio::test(start_paused = true)]
async fn a_kept_place_is_counted() {
    let (m, fakes, snap) = metered_cluster(3);
    let mut rec = Recorded::default();
    let holder = crate::tests::fake::peer(&fakes);
    let g = holder.lock("k").await.expect("lock");
    let w = {
        let m = m.clone();
        tokio::spawn(async move { m.lock("k").await })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    rec.take(&snap);
    assert_eq!(rec.counter("quorumlock_places_kept_total", &[]), 1);
    g.release().await.expect("release");
    let won = w.await.expect("task").expect("the waiter takes it");
    won.release().await.expect("release");
    rec.take(&snap);
    assert_eq!(rec.samples("quorumlock_acquire_attempts", &[]), [3.0]);
}
