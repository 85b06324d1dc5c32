//! The lock's queue on the nodes: fair requests granted in ticket order
//! across managers, dead and dropped waiters leaving it, and a release
//! waking one waiter across managers instead of one per manager.
//!
//! Every test here takes `support::serial()`: the herd tests read the nodes'
//! command counters, which any other test of this binary would move.

mod support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::{LockManager, Quorum};
use redis::Script;
use support::{key, nodes, raw, script_calls, unique};

/// The queue of `name`: waiter id -> ticket.
fn queue_key(name: &str) -> String {
    format!("{}:queue", key(name))
}

/// The queue deadlines of `name`: waiter id -> node time (ms).
fn timeouts_key(name: &str) -> String {
    format!("{}:timeouts", key(name))
}

/// The members of sorted set `set` on node `i`, lowest score first.
async fn members(i: usize, set: &str) -> Vec<String> {
    let mut c = raw(i).await;
    redis::cmd("ZRANGE")
        .arg(set)
        .arg(0)
        .arg(-1)
        .query_async(&mut c)
        .await
        .expect("ZRANGE")
}

/// Whether `name`'s queue holds exactly `n` waiters on every node.
async fn queued_everywhere(name: &str, n: usize) -> bool {
    for i in 0..nodes().len() {
        if members(i, &queue_key(name)).await.len() != n {
            return false;
        }
    }
    true
}

/// Whether `waiter` is in neither queue set of `name` on any node.
async fn gone_everywhere(name: &str, waiter: &str) -> bool {
    for i in 0..nodes().len() {
        for set in [queue_key(name), timeouts_key(name)] {
            if members(i, &set).await.iter().any(|m| m == waiter) {
                return false;
            }
        }
    }
    true
}

/// The queued acquire script, as the library sends it (prelude first).
fn acquire_queued() -> Script {
    Script::new(concat!(
        include_str!("../src/scripts/queue_prelude.lua"),
        include_str!("../src/scripts/acquire_queued.lua")
    ))
}

/// A waiter id of a client that is not one of this binary's managers.
const DEAD: &str = "deadhost@4242#0badc0de:owner-1:wait-1";

/// Queues [`DEAD`] for `name` on every node with `acquire_queued.lua`, as a
/// fair waiter of a process that made one call and died: its deadline is
/// `queue_timeout` after that call, in node time. The lock must be held, so
/// that the call queues instead of granting.
async fn plant_dead_waiter(name: &str, queue_timeout: Duration) {
    let script = acquire_queued();
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let reply: Vec<i64> = script
            .key(key(name))
            .key(quorumlock::fence_counter_key("quorumlock:", name).expect("a valid name"))
            .key(queue_key(name))
            .key(timeouts_key(name))
            .key(format!("{}:released", key(name)))
            .arg("deadhost@4242#0badc0de:owner-1:hold-1@0")
            .arg(30_000)
            .arg(1)
            .arg(DEAD)
            .arg(0)
            .arg(u64::try_from(queue_timeout.as_millis()).expect("ms"))
            .arg(1)
            .invoke_async(&mut c)
            .await
            .expect("acquire_queued");
        assert_eq!(
            (reply[0], reply.get(2).copied()),
            (0, Some(1)),
            "node {i}: the dead waiter should queue first, behind the holder: {reply:?}"
        );
    }
}

/// One test's managers, each over the shared nodes as its own process.
async fn managers(n: usize) -> Vec<LockManager> {
    let mut all = Vec::with_capacity(n);
    for _ in 0..n {
        all.push(support::manager(Quorum::Majority).await);
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_waiters_are_granted_in_arrival_order() {
    let _serial = support::serial().await;
    let holder = support::manager(Quorum::Majority).await;
    let waiters = managers(8).await;
    for round in 0..3usize {
        let name = unique("fair-order");
        let g = support::hold_as_new_owner(&holder, &name).await;
        let granted = Arc::new(Mutex::new(Vec::new()));
        let inside = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        for (i, m) in waiters.iter().enumerate() {
            if i > 0 {
                // 30–50 ms apart.
                let gap = 30 + (i * 7 + round * 11) % 21;
                tokio::time::sleep(Duration::from_millis(gap as u64)).await;
            }
            let (m, lock_name, granted, inside) =
                (m.clone(), name.clone(), granted.clone(), inside.clone());
            tasks.push(tokio::spawn(async move {
                let g = m
                    .request(&lock_name)
                    .fair()
                    .acquire()
                    .await
                    .expect("fair lock");
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                crate::lock(&granted).push(i);
                tokio::time::sleep(Duration::from_millis(5)).await;
                inside.store(false, Ordering::SeqCst);
                g.release().await.expect("release");
            }));
            // Its arrival: the first attempt put it in the queue on every
            // node before the next waiter starts.
            let n = name.clone();
            assert!(
                support::eventually(Duration::from_secs(2), || queued_everywhere(&n, i + 1)).await,
                "round {round}: waiter {i} did not queue on every node"
            );
        }
        g.release().await.expect("holder releases");
        for t in tasks {
            t.await.expect("waiter task");
        }
        let order = crate::lock(&granted).clone();
        println!("round {round}: grant order {order:?}");
        // Plain requests promise no such order: a plain waiter is granted
        // whenever it finds the lock free, whoever heads the queue (see
        // `a_plain_request_is_not_held_back_by_the_queue`).
        assert_eq!(
            order,
            (0..8).collect::<Vec<_>>(),
            "round {round}: fair waiters granted out of arrival order"
        );
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[tokio::test]
async fn a_plain_request_is_not_held_back_by_the_queue() {
    let _serial = support::serial().await;
    let m = support::manager(Quorum::Majority).await;
    let name = unique("barge");
    let g = support::hold_as_new_owner(&m, &name).await;
    // A waiter of another process heads the queue for a minute.
    plant_dead_waiter(&name, Duration::from_secs(60)).await;
    g.release().await.expect("release");
    // The lock is free, but it is the dead waiter's turn: a fair request
    // may not pass it, a plain one takes the lock.
    let fair = m
        .request(&name)
        .fair()
        .wait(Duration::from_millis(300))
        .acquire()
        .await;
    assert!(
        fair.as_ref().is_err_and(quorumlock::Error::is_contended),
        "a fair request passed the head of the queue: {:?}",
        fair.map(|g| g.holder_id().to_owned())
    );
    let plain = m
        .request(&name)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("a plain request takes a free lock whoever is queued");
    plain.release().await.expect("release");
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let _: i64 = redis::cmd("DEL")
            .arg(queue_key(&name))
            .arg(timeouts_key(&name))
            .query_async(&mut c)
            .await
            .expect("DEL");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_waiter_is_skipped_after_the_queue_timeout() {
    let _serial = support::serial().await;
    let queue_timeout = Duration::from_millis(600);
    let m = support::builder()
        .queue_timeout(queue_timeout)
        .build()
        .await
        .expect("manager");
    let name = unique("dead-waiter");
    let g = support::hold_as_new_owner(&m, &name).await;
    // Read before the node's clock: the dead waiter's deadline is at least
    // `queue_timeout` after this instant.
    let planted = Instant::now();
    plant_dead_waiter(&name, queue_timeout).await;
    let live = {
        let (m, name) = (m.clone(), name.clone());
        tokio::spawn(async move {
            let g = m.request(&name).fair().acquire().await.expect("fair lock");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        })
    };
    let n = name.clone();
    assert!(
        support::eventually(Duration::from_secs(2), || queued_everywhere(&n, 2)).await,
        "the live waiter did not queue behind the dead one on every node"
    );
    for i in 0..nodes().len() {
        assert_eq!(
            members(i, &queue_key(&name))
                .await
                .first()
                .map(String::as_str),
            Some(DEAD),
            "node {i}: the dead waiter should head the queue"
        );
    }
    let released = planted.elapsed();
    g.release().await.expect("holder releases");
    let got = live.await.expect("live waiter").duration_since(planted);
    println!(
        "dead waiter: holder released at {released:?}, live waiter granted at {got:?} \
         (dead waiter's deadline at {queue_timeout:?} or later)"
    );
    // Millisecond rounding of node time aside, not before the deadline.
    assert!(
        got + Duration::from_millis(2) >= queue_timeout,
        "the live waiter passed the dead one before its deadline: {got:?}"
    );
    assert!(
        got < Duration::from_secs(3),
        "the live waiter was stuck behind the dead one: {got:?}"
    );
    assert!(
        support::eventually(Duration::from_secs(1), || gone_everywhere(&name, DEAD)).await,
        "the dead waiter is still queued"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_fair_waiter_leaves_the_queue_on_every_node() {
    let _serial = support::serial().await;
    // The default queue timeout (5 s): a dropped waiter left behind would
    // hold the next one back for seconds.
    let ms = managers(2).await;
    let name = unique("dropped-fair");
    let g = support::hold_as_new_owner(&ms[0], &name).await;
    let (cancel, cancelled) = tokio::sync::oneshot::channel::<()>();
    let first = {
        let (m, name) = (ms[0].clone(), name.clone());
        tokio::spawn(async move {
            tokio::select! {
                r = m.request(&name).fair().acquire() => {
                    panic!("the first waiter ended while the lock was held: {:?}", r.map(|_| ()))
                }
                _ = cancelled => {}
            }
        })
    };
    let n = name.clone();
    assert!(
        support::eventually(Duration::from_secs(2), || queued_everywhere(&n, 1)).await,
        "the first waiter did not queue on every node"
    );
    let dropped = members(0, &queue_key(&name)).await.remove(0);
    let second = {
        let (m, name) = (ms[1].clone(), name.clone());
        tokio::spawn(async move {
            let g = m.request(&name).fair().acquire().await.expect("fair lock");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        })
    };
    assert!(
        support::eventually(Duration::from_secs(2), || queued_everywhere(&n, 2)).await,
        "the second waiter did not queue on every node"
    );
    cancel.send(()).expect("first waiter alive");
    first.await.expect("first waiter task");
    assert!(
        support::eventually(Duration::from_secs(1), || gone_everywhere(&name, &dropped)).await,
        "the dropped waiter {dropped} is still queued"
    );
    let released = Instant::now();
    g.release().await.expect("holder releases");
    let handoff = second
        .await
        .expect("second waiter")
        .duration_since(released);
    println!("dropped fair waiter: next waiter granted {handoff:?} after the release");
    // Without the leave it would wait for the dropped waiter's deadline
    // (up to 5 s); without the wake, for its refresh timer (1.7 s). A few
    // ms on an idle machine; the bound leaves a loaded one room to stall.
    assert!(
        handoff < Duration::from_secs(1),
        "the waiter behind a dropped one got the lock only after {handoff:?}"
    );
}

/// What one herd run measured.
#[derive(Debug, Clone, Copy)]
struct Herd {
    acquisitions: u64,
    wakeups: u64,
    scripts: u64,
}

impl Herd {
    #[allow(clippy::cast_precision_loss)]
    fn wakeups_per_handoff(&self) -> f64 {
        self.wakeups as f64 / self.acquisitions as f64
    }

    #[allow(clippy::cast_precision_loss)]
    fn scripts_per_acquisition(&self) -> f64 {
        self.scripts as f64 / self.acquisitions as f64
    }
}

/// `tasks` waiters spread over `managers`, each looping lock, hold 1 ms,
/// release on one lock for `run`.
async fn herd(managers: &[LockManager], tasks: usize, fair: bool, run: Duration) -> Herd {
    let name = unique(if fair { "herd-fair" } else { "herd-plain" });
    let wakeups = || {
        managers
            .iter()
            .map(|m| m.pubsub_stats().wakeups)
            .sum::<u64>()
    };
    let (wakeups_before, scripts_before) = (wakeups(), script_calls().await);
    let acquisitions = Arc::new(AtomicU64::new(0));
    let inside = Arc::new(AtomicBool::new(false));
    let end = Instant::now() + run;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let m = managers[t % managers.len()].clone();
            let (name, acquisitions, inside) = (name.clone(), acquisitions.clone(), inside.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    let request = m.request(&name);
                    let request = if fair { request.fair() } else { request };
                    let g = request.acquire().await.expect("lock");
                    assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                    acquisitions.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    inside.store(false, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            })
        })
        .collect();
    for h in handles {
        h.await.expect("herd task");
    }
    // Leaves run in the background: let them land before counting.
    tokio::time::sleep(Duration::from_millis(100)).await;
    Herd {
        acquisitions: acquisitions.load(Ordering::Relaxed),
        wakeups: wakeups() - wakeups_before,
        scripts: script_calls().await - scripts_before,
    }
}

/// One manager with 8 tasks, then 8 managers with one task each, on the
/// same loop; prints both.
async fn one_and_eight(fair: bool) -> (Herd, Herd) {
    let run = Duration::from_millis(1_500);
    let one = herd(&managers(1).await, 8, fair, run).await;
    let eight = herd(&managers(8).await, 8, fair, run).await;
    let kind = if fair { "fair" } else { "plain" };
    for (what, h) in [("1 manager x 8 tasks", one), ("8 managers x 1 task", eight)] {
        println!(
            "{kind} herd, {what}: {} acquisitions, {:.2} wake-ups/handoff, \
             {:.2} scripts run/acquisition over {} nodes",
            h.acquisitions,
            h.wakeups_per_handoff(),
            h.scripts_per_acquisition(),
            nodes().len()
        );
    }
    assert!(
        one.acquisitions >= 20 && eight.acquisitions >= 20,
        "too few acquisitions to measure: {one:?}, {eight:?}"
    );
    (one, eight)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_wakes_one_waiter_across_managers() {
    let _serial = support::serial().await;
    let (one, eight) = one_and_eight(false).await;
    #[allow(clippy::cast_precision_loss)]
    let n = nodes().len() as f64;
    // A release publishes once per node and each message rings at most one
    // waiter in all the managers: about `n` per handoff, as in one manager.
    // Were every manager's head rung by every release, 8 managers would
    // ring about 8 × n.
    assert!(
        eight.wakeups_per_handoff() <= (one.wakeups_per_handoff() * 1.5).max(n) + 1.0,
        "8 managers rang {:.2} waiters per handoff, 1 manager {:.2}",
        eight.wakeups_per_handoff(),
        one.wakeups_per_handoff()
    );
    // The target: within 2x the one-process figure, 16.8 requests per
    // acquisition when it was set (every release woke each manager's head
    // then: 111.9). One manager now needs fewer (about 10.5), and across
    // managers a plain newcomer may still race the waiter a release named
    // (plain requests take a free lock whoever is queued), so the same-run
    // ratio is held to 2.5x.
    assert!(
        eight.scripts_per_acquisition() <= 2.0 * 16.8
            && eight.scripts_per_acquisition() <= 2.5 * one.scripts_per_acquisition(),
        "8 managers ran {:.2} scripts per acquisition, 1 manager {:.2}",
        eight.scripts_per_acquisition(),
        one.scripts_per_acquisition()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_release_wakes_one_waiter_across_managers() {
    let _serial = support::serial().await;
    let (one, eight) = one_and_eight(true).await;
    #[allow(clippy::cast_precision_loss)]
    let n = nodes().len() as f64;
    // Up to 5 scripts per node per acquisition: its attempts, its release,
    // the rare refresh or settling attempt.
    for (what, h) in [("1 manager", one), ("8 managers", eight)] {
        assert!(
            h.scripts_per_acquisition() <= 5.0 * n,
            "{what}: {:.2} scripts per fair acquisition over {n} nodes",
            h.scripts_per_acquisition()
        );
    }
    assert!(
        eight.wakeups_per_handoff() <= (one.wakeups_per_handoff() * 1.5).max(n) + 1.0,
        "8 managers rang {:.2} fair waiters per handoff, 1 manager {:.2}",
        eight.wakeups_per_handoff(),
        one.wakeups_per_handoff()
    );
}

/// Deletes `name`'s queue keys on every node (what a dead waiter left).
async fn clear_queue(name: &str) {
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let _: i64 = redis::cmd("DEL")
            .arg(queue_key(name))
            .arg(timeouts_key(name))
            .query_async(&mut c)
            .await
            .expect("DEL");
    }
}

/// A plain waiter deferring to a local one (no place on the nodes) while a
/// dead waiter of another process heads the queue: every release names
/// the dead waiter, so no release message rings this manager. The deferred
/// waiter still takes the free lock within a third of the queue timeout of
/// the local waiter's release (before the fix: a whole lease later).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deferred_waiter_behind_a_dead_one_takes_the_free_lock_within_the_refresh_bound() {
    let _serial = support::serial().await;
    let m = support::builder()
        .lease(Duration::from_secs(8))
        .build()
        .await
        .expect("manager");
    let bound = m.config().queue_timeout / 3;
    let name = unique("deferred");
    let h0 = support::hold_as_new_owner(&m, &name).await;
    plant_dead_waiter(&name, Duration::from_secs(60)).await;
    let take_and_release = |m: LockManager, name: String| async move {
        let g = m.lock(&name).await.expect("lock");
        let at = Instant::now();
        g.release().await.expect("release");
        at
    };
    // W1 misses and takes a place behind the dead waiter.
    let w1 = tokio::spawn(take_and_release(m.clone(), name.clone()));
    let n = name.clone();
    assert!(
        support::eventually(Duration::from_secs(2), || queued_everywhere(&n, 2)).await,
        "W1 did not queue behind the dead waiter"
    );
    // P2 arrives later and defers to W1 locally.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let p2 = tokio::spawn(take_and_release(m.clone(), name.clone()));
    tokio::time::sleep(Duration::from_millis(50)).await;
    h0.release().await.expect("H0 releases");
    let w1_at = w1.await.expect("W1");
    let p2_at = tokio::time::timeout(Duration::from_secs(20), p2)
        .await
        .expect("P2 took the lock at all")
        .expect("P2");
    let gap = p2_at.duration_since(w1_at);
    println!("deferred waiter: granted {gap:?} after W1 released (bound {bound:?})");
    assert!(
        gap <= bound + Duration::from_millis(500),
        "the deferred waiter slept {gap:?} while the lock was free (bound {bound:?})"
    );
    clear_queue(&name).await;
}

/// A dead waiter of another process heads the queue of a free lock, and a
/// fair waiter of this manager queues behind it: a plain request through
/// the same manager is not held back by the local fair waiter (before the
/// fix it waited for the dead head's deadline).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_request_is_not_held_back_by_a_local_fair_waiter() {
    let _serial = support::serial().await;
    let m = support::manager(Quorum::Majority).await;
    let name = unique("fair-local");
    let g = support::hold_as_new_owner(&m, &name).await;
    plant_dead_waiter(&name, Duration::from_secs(60)).await;
    g.release().await.expect("release");
    let fair = {
        let (m, name) = (m.clone(), name.clone());
        tokio::spawn(async move { m.request(&name).fair().acquire().await })
    };
    let n = name.clone();
    assert!(
        support::eventually(Duration::from_secs(2), || queued_everywhere(&n, 2)).await,
        "the fair waiter did not queue behind the dead one"
    );
    let started = Instant::now();
    let plain = tokio::time::timeout(Duration::from_secs(2), m.lock(&name))
        .await
        .expect("the plain request was held back by the local fair waiter")
        .expect("plain lock");
    let took = started.elapsed();
    println!("plain request beside a local fair waiter: granted in {took:?}");
    assert!(
        took < Duration::from_secs(1),
        "the plain request took {took:?}"
    );
    plain.release().await.expect("release");
    fair.abort();
    clear_queue(&name).await;
}
