//! The watchdog and node failures, against five real `redis-server` masters.
//!
//! These tests stop nodes and read server-wide counters, so each takes the
//! binary's `serial()` lock and leaves every node running when it ends.

#[path = "support/gate.rs"]
mod gate;
mod support;

use std::time::Duration;

use quorumlock::{HoldState, LockManager, Quorum};
use support::{builder, has_key, nodes, nodes_with_key, raw, serial, unique};

const LEASE: Duration = Duration::from_millis(900);
const PERIOD: Duration = Duration::from_millis(300);

async fn watchdog_manager(quorum: Quorum) -> LockManager {
    builder()
        .quorum(quorum)
        .lease(LEASE)
        .renew_interval(PERIOD)
        .node_timeout(Duration::from_millis(150))
        .build()
        .await
        .expect("build")
}

/// Restarts every stopped node, so the next test finds all five up.
struct Revive;

impl Drop for Revive {
    fn drop(&mut self) {
        for i in 0..nodes().len() {
            if !support::local::ping(nodes().port(i), Duration::from_millis(100)) {
                nodes().restart(i).expect("restart node");
            }
        }
    }
}

async fn evalsha_calls(i: usize) -> u64 {
    let mut c = raw(i).await;
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(&mut c)
        .await
        .expect("INFO");
    info.lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1))
        .and_then(|v| v.split(',').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

async fn reset_stats() {
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let _: () = redis::cmd("CONFIG")
            .arg("RESETSTAT")
            .query_async(&mut c)
            .await
            .expect("RESETSTAT");
    }
}

#[tokio::test]
async fn a_node_down_before_acquire_majority_succeeds_and_all_fails_cleanly() {
    let _s = serial().await;
    let _revive = Revive;
    let majority = watchdog_manager(Quorum::Majority).await;
    let all = watchdog_manager(Quorum::All).await;
    nodes().kill(4);
    let name = unique("down");
    let err = all
        .try_lock(&name, Duration::ZERO)
        .await
        .expect_err("All needs node 4");
    assert!(err.is_unavailable(), "{err}");
    for i in 0..4 {
        assert!(!has_key(i, &name).await, "All left a grant on node {i}");
    }
    let g = majority
        .try_lock(&name, Duration::ZERO)
        .await
        .expect("4 of 5 is a majority");
    let granted = g.granted_nodes();
    assert!(granted.len() >= 3 && !granted.contains(&4), "{granted:?}");
    g.release().await.expect("release");
    majority.flush().await;
    for i in 0..4 {
        assert!(!has_key(i, &name).await);
    }
}

#[tokio::test]
async fn renewal_keeps_a_lock_past_its_lease_and_a_minority_loss_is_repaired() {
    let _s = serial().await;
    let _revive = Revive;
    let m = watchdog_manager(Quorum::Majority).await;
    let rival = watchdog_manager(Quorum::Majority).await;
    let name = unique("minority");
    let g = m.lock(&name).await.expect("lock");
    nodes().kill(2);
    tokio::time::sleep(LEASE * 3).await;
    assert!(
        g.is_held(),
        "the lock should survive the loss of 1 of 5 nodes"
    );
    assert!(!g.is_lost());
    let err = rival
        .try_lock(&name, Duration::ZERO)
        .await
        .expect_err("still held");
    assert!(err.is_contended(), "{err}");
    let before = m.watchdog_stats();
    assert!(before.ticks >= 6, "{before:?}");

    nodes().restart(2).expect("restart node 2 empty");
    assert!(!has_key(2, &name).await, "node 2 came back empty");
    let repaired =
        support::eventually(PERIOD + Duration::from_millis(150), || has_key(2, &name)).await;
    assert!(
        repaired,
        "the watchdog did not repair node 2 within one period"
    );
    assert!(m.watchdog_stats().repairs > before.repairs);
    assert!(g.granted_nodes().contains(&2));
    g.release().await.expect("release");
    // `release` returns once a quorum released; the other nodes' calls go
    // on in the background until `flush`.
    m.flush().await;
    assert_eq!(nodes_with_key(&name).await, 0);
}

#[tokio::test]
async fn a_majority_loss_fires_lost_within_the_lease() {
    let _s = serial().await;
    let _revive = Revive;
    let m = watchdog_manager(Quorum::Majority).await;
    let name = unique("majority");
    let me = m.new_owner();
    let g = m.request(&name).owner(&me).acquire().await.expect("lock");
    let g2 = m
        .request(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("re-enter");
    let valid_until = g.valid_until();
    let run = tokio::spawn(g2.run(|mut signal| async move {
        signal.fired().await;
        "closure saw the signal"
    }));
    tokio::time::sleep(Duration::from_millis(50)).await;
    let killed = std::time::Instant::now();
    for i in 0..3 {
        nodes().kill(i);
    }
    tokio::time::timeout(LEASE, g.lost())
        .await
        .expect("lost() within the lease");
    assert!(killed.elapsed() <= LEASE);
    assert!(
        std::time::Instant::now() <= valid_until + PERIOD,
        "loss signalled long after validity ended"
    );
    assert!(g.is_lost());
    assert!(!g.is_held());
    assert_eq!(g.state(), HoldState::Lost);
    let r = run.await.expect("run task");
    assert!(matches!(r, Err(ref e) if e.is_lost()), "{r:?}");
    assert_eq!(m.watchdog_stats().losses, 1);
    let err = g.release().await.expect_err("lost");
    assert!(err.is_lost());
    // Acquisitions fail while the majority is down.
    let err = m
        .try_lock(&unique("after"), Duration::ZERO)
        .await
        .expect_err("no quorum");
    assert!(err.is_unavailable(), "{err}");
}

#[tokio::test]
async fn no_renewal_reaches_a_node_after_release_or_drop() {
    let _s = serial().await;
    let m = watchdog_manager(Quorum::Majority).await;
    for how in ["release", "drop"] {
        let name = unique(how);
        let g = m.lock(&name).await.expect("lock");
        tokio::time::sleep(PERIOD * 2).await;
        assert!(m.watchdog_stats().ticks >= 1);
        if how == "release" {
            g.release().await.expect("release");
        } else {
            drop(g);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        let before: Vec<u64> = futures_calls().await;
        let ticks = m.watchdog_stats().ticks;
        tokio::time::sleep(PERIOD * 4).await;
        assert_eq!(futures_calls().await, before, "a script ran after {how}");
        assert_eq!(
            m.watchdog_stats().ticks,
            ticks,
            "the watchdog ticked with nothing held"
        );
        assert_eq!(nodes_with_key(&name).await, 0);
    }
}

async fn futures_calls() -> Vec<u64> {
    let mut v = Vec::new();
    for i in 0..nodes().len() {
        v.push(evalsha_calls(i).await);
    }
    v
}

#[tokio::test]
async fn a_thousand_locks_cost_ten_paced_round_trips_per_node_per_tick() {
    let _s = serial().await;
    let m = builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .build()
        .await
        .expect("build");
    let owner = m.new_owner();
    let prefix = unique("batch");
    let mut guards = Vec::new();
    for chunk in 0..10 {
        let locks = (0..100).map(|i| {
            m.request(format!("{prefix}-{}", chunk * 100 + i))
                .owner(&owner)
                .acquire()
        });
        for r in futures::future::join_all(locks).await {
            guards.push(r.expect("lock"));
        }
    }
    assert_eq!(guards.len(), 1_000);
    // Align on a tick, then count exactly three.
    let wait_tick = |after: u64| {
        let m = m.clone();
        async move {
            support::eventually(Duration::from_secs(3), || {
                let m = m.clone();
                async move { m.watchdog_stats().ticks > after }
            })
            .await
        }
    };
    let t0 = m.watchdog_stats().ticks;
    assert!(wait_tick(t0).await);
    tokio::time::sleep(Duration::from_millis(200)).await;
    reset_stats().await;
    let s0 = m.watchdog_stats();
    for k in 0..3 {
        assert!(wait_tick(s0.ticks + k).await, "tick {k} did not come");
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    let s1 = m.watchdog_stats();
    let ticks = s1.ticks - s0.ticks;
    assert_eq!(ticks, 3);
    assert_eq!(s1.locks_renewed - s0.locks_renewed, 3_000);
    assert_eq!(
        s1.round_trips - s0.round_trips,
        3 * 10 * 5,
        "one pipeline per node per wave of 100 locks, 10 waves per tick"
    );
    for i in 0..nodes().len() {
        assert_eq!(
            evalsha_calls(i).await,
            30,
            "node {i}: one script call per 100 locks per tick"
        );
    }
    for g in guards {
        drop(g);
    }
}

#[tokio::test]
async fn max_hold_stops_renewal_and_says_so() {
    let _s = serial().await;
    let m = builder()
        .lease(LEASE)
        .renew_interval(PERIOD)
        .max_hold(Duration::from_millis(1_000))
        .build()
        .await
        .expect("build");
    let name = unique("maxhold");
    let g = m.lock(&name).await.expect("lock");
    let start = std::time::Instant::now();
    let state = tokio::time::timeout(Duration::from_secs(3), g.renewal_stopped())
        .await
        .expect("renewal stops");
    assert_eq!(state, HoldState::MaxHoldReached);
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "stopped early"
    );
    assert!(!g.is_lost(), "max hold is not a loss");
    assert_eq!(m.watchdog_stats().max_hold_stops, 1);
    let expired = support::eventually(LEASE + PERIOD, || async {
        nodes_with_key(&name).await == 0
    })
    .await;
    assert!(expired, "the lock should expire once renewal stops");
    assert!(!g.is_held());
    let err = g.release().await.expect_err("expired");
    assert!(err.is_expired(), "{err}");

    // The closure helper reports it distinctly.
    let g = m.lock(&name).await.expect("lock again");
    let r = g
        .run(|_signal| async { tokio::time::sleep(Duration::from_secs(10)).await })
        .await;
    assert!(matches!(r, Err(ref e) if e.is_max_hold_reached()), "{r:?}");
}

#[tokio::test]
async fn a_stolen_lock_is_lost_not_renewed() {
    let _s = serial().await;
    let m = watchdog_manager(Quorum::Majority).await;
    let thief = watchdog_manager(Quorum::Majority).await;
    let name = unique("stolen");
    let g = m.lock(&name).await.expect("lock");
    m.force_unlock(&name).await.expect("break");
    let t = thief
        .try_lock(&name, Duration::ZERO)
        .await
        .expect("thief takes it");
    tokio::time::timeout(LEASE, g.lost())
        .await
        .expect("loss detected");
    assert!(m.watchdog_stats().conflicts >= 3);
    // The thief's lock is untouched by the loser's cleanup.
    tokio::time::sleep(PERIOD).await;
    assert!(t.is_held());
    assert!(nodes_with_key(&name).await >= 3);
    t.release().await.expect("thief releases");
}

#[tokio::test]
async fn a_manager_can_start_during_a_minority_outage() {
    let _s = serial().await;
    let _revive = Revive;
    nodes().kill(3);
    let err = watchdog_manager_result(false)
        .await
        .expect_err("strict build");
    assert!(
        matches!(err, quorumlock::Error::Connect { ref failures } if failures.len() == 1 && failures[0].node == 3),
        "{err}"
    );
    let m = watchdog_manager_result(true)
        .await
        .expect("a quorum is reachable");
    let name = unique("outage");
    let g = m.lock(&name).await.expect("lock on 4 of 5");
    assert!(!g.granted_nodes().contains(&3));
    nodes().restart(3).expect("node 3 returns");
    let used = support::eventually(PERIOD * 3, || has_key(3, &name)).await;
    assert!(
        used,
        "the node that was down at build should be used once it answers"
    );
    g.release().await.expect("release");
    m.flush().await;
    assert_eq!(nodes_with_key(&name).await, 0);

    for i in 0..3 {
        nodes().kill(i);
    }
    let err = watchdog_manager_result(true)
        .await
        .expect_err("no quorum reachable");
    assert!(
        matches!(err, quorumlock::Error::Connect { ref failures } if failures.len() == 3),
        "{err}"
    );
}

async fn watchdog_manager_result(allow: bool) -> Result<LockManager, quorumlock::Error> {
    builder()
        .lease(LEASE)
        .renew_interval(PERIOD)
        .connect_timeout(Duration::from_millis(500))
        .allow_unreachable(allow)
        .build()
        .await
}

#[tokio::test]
async fn a_flushed_script_cache_is_resent_once_as_eval() {
    let _s = serial().await;
    let m = watchdog_manager(Quorum::Majority).await;
    let name = unique("noscript");
    m.lock(&name)
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut c)
            .await
            .expect("SCRIPT FLUSH");
    }
    // NOSCRIPT means nothing ran: the call goes again as EVAL and succeeds...
    let g = m
        .try_lock(&name, Duration::ZERO)
        .await
        .expect("acquire after NOSCRIPT everywhere");
    assert!(g.granted_nodes().len() >= 3);
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let _: () = redis::cmd("SCRIPT")
            .arg("FLUSH")
            .query_async(&mut c)
            .await
            .expect("SCRIPT FLUSH");
    }
    // ...and so does the release, which leaves nothing behind.
    g.release()
        .await
        .expect("release after NOSCRIPT everywhere");
    m.flush().await;
    assert_eq!(nodes_with_key(&name).await, 0);
}

/// A repair given up at its timeout still sits in its node's queue; the
/// hold's release must run after it there, not before, or the repair
/// re-creates the released key for a full lease. The repair's bytes are
/// held on their way to node 0 until the release has returned.
#[tokio::test]
async fn a_repair_given_up_at_its_timeout_never_brings_a_released_key_back() {
    let _s = serial().await;
    let repair = gate::repair_script();
    let gate = gate::Gate::start(nodes().port(0), repair.get_hash())
        .await
        .expect("gate proxy");
    // Cached on node 0 beforehand, as on a server that ran a repair before:
    // a repair answered `NOSCRIPT` would run nothing.
    let mut c = raw(0).await;
    let _: String = repair
        .prepare_invoke()
        .load_async(&mut c)
        .await
        .expect("SCRIPT LOAD");
    let lease = Duration::from_secs(3);
    let m = LockManager::builder()
        .nodes([gate.url.clone(), nodes().url(1), nodes().url(2)])
        .quorum(Quorum::Majority)
        .lease(lease)
        .renew_interval(PERIOD)
        .node_timeout(Duration::from_millis(150))
        .build()
        .await
        .expect("build");
    let name = unique("stale-repair");
    let g = m.lock(&name).await.expect("lock");
    assert!(has_key(0, &name).await);
    // Node 0 loses the key; the next wave repairs it there, and the gate
    // holds the repair.
    gate.arm();
    let _: i64 = redis::cmd("DEL")
        .arg(support::key(&name))
        .query_async(&mut c)
        .await
        .expect("DEL");
    assert!(
        gate.holding(PERIOD * 4).await,
        "no repair reached node 0's gate"
    );
    // The release waits for the wave, whose repair is given up at its
    // timeout, then goes out; a quorum answers.
    g.release().await.expect("release");
    gate.open();
    // Both reach node 0 now, each in its connection's order; the repair
    // re-creates the key for a full lease if it runs last.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let left = support::masters::pttl(nodes(), 0, &name).await;
    assert_eq!(
        left, -2,
        "node 0 has the released lock's key back (PTTL {left} ms): the repair ran after the release"
    );
    m.flush().await;
    assert_eq!(nodes_with_key(&name).await, 0);
}
