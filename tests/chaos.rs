//! Failover chaos suite: faults injected into five Redis masters running in
//! Docker (`tests/support/containers.rs`) while clients hold and contend for
//! locks. Every critical section is recorded in a history
//! (`tests/support/history.rs`) that is checked for overlapping holders and
//! fencing-token inversions.
//!
//! | scenario | profile | fault | expected |
//! | --- | --- | --- | --- |
//! | `s1` | fast | kill 1 of 5 during a hold of 3 leases | kept, renewed, rival refused, repaired after |
//! | `s2` | safe | kill 3 of 5 during a hold | `lost()` within the lease; unavailable until they return |
//! | `s3` | fast | pause 1 node past the node timeout | bounded latency; majority works, `All` fails cleanly |
//! | `s4` | fast | partition 2 nodes | locking goes on; the watchdog repairs them when healed |
//! | `s5` | fast | restart 1 node empty at once | (a) the checker sees two holders; (b) a watchdog repair first refuses the rival; (c) a rival first: the holder loses it within one renewal |
//! | `s6` | safe | kill + start (AOF) one of the holder's nodes, 20 rounds | never two holders |
//! | `s6b` | fast | delayed empty restart | never two holders, but a fencing token repeats |
//! | `s7` | safe | seeded random kills, pauses, partitions, restarts; 8 clients | clean history |
//! | `s8` | fast | clock jumps smaller than the drift allowance; 4 clients with fixed leases | clean history |
//! | `s8b` | fast | the clocks of 2 of the holder's 3 nodes jump past the lease | the checker sees two holders |
//!
//! Every scenario takes [`exclusive`]: the binary's own serial lock (so that
//! scenarios on the two profiles do not disturb each other's timings on a
//! small machine) and then `Cluster::exclusive`, which brings every node back
//! to running, unpaused and connected. Each scenario restores the nodes when
//! it ends (through [`finish_clean`] where its history must be clean: the
//! summary, the check and the restore); after a panic the next scenario
//! restores them.
//!
//! Knobs of the randomized run (scenario 7):
//!
//! - `QUORUMLOCK_CHAOS_SEED`: the seed of the fault schedule (random if
//!   unset; always printed, so a failure can be replayed);
//! - `QUORUMLOCK_CHAOS_SECS`: how long faults are injected (default 60);
//! - `QUORUMLOCK_CHAOS_MAX_FAULTS`: nodes faulted at once (default 3: a
//!   majority may fail, so holds are lost and acquisitions refused, which
//!   must still be safe; 2 keeps every fault within a minority);
//!
//! Clock jumps: every node runs redis-server with the clock shim of
//! `docker/clockshim.c` (built with gcc at test time) in `LD_PRELOAD`, and
//! `Cluster::jump_clock` moves one node's wall clock, by which it expires
//! keys; `the_clock_shim_expires_a_60s_key_when_its_node_jumps_120s` shows
//! that it does.
//!
//! There is no Docker engine? The harness panics with a clear message: the
//! suite never skips silently.

// Test code: failures are reported by panicking.
#![allow(clippy::panic)]

mod support;
// The container harness, the history checker and the helpers of contending
// clients serve this binary only, so they (and the checker's own unit
// tests) are not compiled into the others.
#[path = "support/clients.rs"]
mod clients;
#[path = "support/cluster.rs"]
mod cluster;
#[path = "support/containers.rs"]
mod containers;
#[path = "support/history.rs"]
mod history;
#[path = "support/rng.rs"]
mod rng;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clients::{
    critical_section, enter, fixed_lease_section, sum_stats, while_holding, ClientStats,
};
use cluster::{
    block, block_3_4, build, builder, exclusive, lag_fences_of_3_4, unblock, unblock_3_4,
};
use containers::{Cluster, Profile, NODES};
use history::{History, Verdict};
use quorumlock::{Error, HoldState, LockGuard, LockManager, NodeErrorKind, Quorum};
use rng::{env_u64, Rng};
use support::masters::{has_key, holders_on, pttl, take_by_hand};
use support::{eventually, unique, Nodes};

/// Ends a scenario whose history must be clean: prints `summary` (what the
/// scenario saw) with the time it took since `t0`, asserts the history
/// clean under `label`, and restores every node. Returns the verdict, for
/// the scenario's own counts.
async fn finish_clean(
    cluster: &Cluster,
    history: &History,
    label: &str,
    t0: Instant,
    summary: String,
) -> Verdict {
    eprintln!("{summary}; took {:.1?}", t0.elapsed());
    let verdict = history.check();
    verdict.assert_clean(label);
    cluster.restore().await;
    verdict
}

// ---------------------------------------------------------------------------
// 1. One node of five killed during a long hold

#[tokio::test]
async fn s1_kill_one_of_five_during_a_long_hold_keeps_the_lock() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let t0 = Instant::now();
    const LEASE: Duration = Duration::from_millis(1500);
    let holder = build(builder(&cluster).lease(LEASE)).await;
    let rival = build(builder(&cluster).lease(LEASE)).await;
    let history = History::new();
    let name = unique("chaos-kill1");

    let guard = holder.lock(&name).await.expect("lock");
    let mut hold = enter(&history, "holder", &guard);
    let victim = guard.granted_nodes()[0];
    let before = holder.watchdog_stats();
    history.note("fault", format!("kill node {victim}"));
    while_holding(&mut hold, &guard, cluster.kill(victim)).await;

    // Hold for three leases while a rival keeps trying.
    let until = Instant::now() + LEASE * 3;
    let mut probes = 0;
    while Instant::now() < until {
        tokio::select! {
            () = guard.lost() => panic!("lost the lock with 4 of 5 nodes up"),
            () = tokio::time::sleep(Duration::from_millis(150)) => {}
        }
        assert!(
            hold.observe(guard.valid_until()),
            "validity lapsed with 4 of 5 nodes up"
        );
        match rival.try_lock(&name, Duration::ZERO).await {
            Ok(g) => {
                // Recorded so that the checker reports it.
                let h = enter(&history, "rival", &g);
                h.exit(g.valid_until());
                let _ = g.release().await;
            }
            Err(e) => assert!(e.is_contended(), "rival: expected contended, got {e}"),
        }
        probes += 1;
    }
    let during = holder.watchdog_stats();
    assert!(guard.is_held() && !guard.is_lost(), "{guard:?}");
    assert_eq!(guard.state(), HoldState::Held);
    assert!(
        during.ticks - before.ticks >= 6,
        "the watchdog should tick every {:?}: {during:?}",
        LEASE / 3
    );
    assert!(during.extended > before.extended, "{during:?}");
    assert!(
        during.node_errors > before.node_errors,
        "renewals of the killed node should fail: {during:?}"
    );
    assert_eq!(during.losses, 0, "{during:?}");

    // The node comes back empty; the watchdog re-creates the key there.
    history.note("fault", format!("start node {victim} (empty)"));
    while_holding(&mut hold, &guard, cluster.start(victim)).await;
    let repaired = while_holding(
        &mut hold,
        &guard,
        eventually(Duration::from_secs(5), || has_key(&cluster, victim, &name)),
    )
    .await;
    assert!(repaired, "the watchdog did not repair node {victim}");
    let after = holder.watchdog_stats();
    assert!(after.repairs > during.repairs, "{after:?}");

    hold.exit(guard.valid_until());
    guard.release().await.expect("release");
    let summary = format!(
        "scenario 1: held {:?} with node {victim} down, {probes} rival probes all contended; \
         watchdog ticks {}, extended {}, node errors {}, repairs {}",
        LEASE * 3,
        after.ticks - before.ticks,
        after.extended - before.extended,
        after.node_errors - before.node_errors,
        after.repairs - before.repairs,
    );
    let verdict = finish_clean(&cluster, &history, "1 kill 1 of 5", t0, summary).await;
    assert_eq!(verdict.acquisitions, 1, "the rival must never get in");
}

// ---------------------------------------------------------------------------
// 2. Three of five killed during a hold

#[tokio::test]
async fn s2_kill_three_of_five_fires_lost_and_acquisitions_fail_until_they_return() {
    // Safe: the killed nodes come back with their data, fence counters included.
    let (_serial, cluster) = exclusive(Profile::Safe).await;
    let t0 = Instant::now();
    const LEASE: Duration = Duration::from_millis(1500);
    let holder = build(builder(&cluster).lease(LEASE)).await;
    let other = build(builder(&cluster).lease(LEASE)).await;
    let history = History::new();
    let name = unique("chaos-kill3");

    let guard = holder.lock(&name).await.expect("lock");
    let mut hold = enter(&history, "holder", &guard);
    tokio::time::sleep(Duration::from_millis(100)).await;
    history.note("fault", "kill nodes 0, 1, 2");
    tokio::join!(cluster.kill(0), cluster.kill(1), cluster.kill(2));
    let down = Instant::now();
    history.note("fault", "nodes 0, 1, 2 are down");

    tokio::time::timeout(LEASE, guard.lost())
        .await
        .expect("lost() should fire within the lease once a majority is down");
    hold.lost_now();
    let lost_after = down.elapsed();
    assert!(guard.is_lost() && !guard.is_held());
    assert_eq!(guard.state(), HoldState::Lost);
    assert_eq!(holder.watchdog_stats().losses, 1);
    hold.exit(guard.valid_until());
    let err = guard.release().await.expect_err("a lost lock");
    assert!(err.is_lost(), "{err}");

    // Acquisitions fail as unavailable while the majority is down.
    // (The loser's keys on the live nodes are released in the background:
    // until then the same name may look contended.)
    let released = eventually(Duration::from_secs(2), || async {
        !has_key(&cluster, 3, &name).await && !has_key(&cluster, 4, &name).await
    })
    .await;
    assert!(released, "a lost lock should be released on the live nodes");
    let mut refused = 0;
    for round in 0..4 {
        for n in [name.clone(), unique("chaos-kill3-fresh")] {
            let started = Instant::now();
            let err = other
                .try_lock(&n, Duration::from_millis(300))
                .await
                .expect_err("no quorum with 3 of 5 nodes down");
            assert!(err.is_unavailable(), "round {round}: {err}");
            assert!(
                started.elapsed() < Duration::from_secs(2),
                "{:?}",
                started.elapsed()
            );
            refused += 1;
        }
    }

    history.note("fault", "start nodes 0, 1, 2");
    tokio::join!(cluster.start(0), cluster.start(1), cluster.start(2));
    let back = Instant::now();
    let mut stats = ClientStats::default();
    let mut acquired_after = None;
    while back.elapsed() < Duration::from_secs(10) {
        if critical_section(
            &other,
            &name,
            "other",
            &history,
            Duration::from_millis(500),
            Duration::from_millis(20),
            &mut stats,
        )
        .await
        {
            acquired_after = Some(back.elapsed());
            break;
        }
    }
    let acquired_after = acquired_after.unwrap_or_else(|| {
        panic!("acquisitions should work again once the nodes are back: {stats:?}")
    });
    // And keep working.
    for _ in 0..3 {
        assert!(
            critical_section(
                &other,
                &name,
                "other",
                &history,
                Duration::from_secs(2),
                Duration::from_millis(20),
                &mut stats,
            )
            .await,
            "{stats:?}"
        );
    }
    let summary = format!(
        "scenario 2: lost() fired {lost_after:.1?} after the majority went down (lease {LEASE:?}); \
         {refused} acquisitions refused as unavailable; first acquisition {acquired_after:.1?} \
         after the nodes returned"
    );
    let verdict = finish_clean(&cluster, &history, "2 kill 3 of 5", t0, summary).await;
    assert_eq!(verdict.losses, 1);
}

// ---------------------------------------------------------------------------
// 3. One node paused past the per-node timeout

#[tokio::test]
async fn s3_a_paused_node_bounds_latency_majority_succeeds_all_fails_cleanly() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let t0 = Instant::now();
    const TIMEOUT: Duration = Duration::from_millis(100);
    const SLACK: Duration = Duration::from_millis(500);
    // A long fixed lease: keys left behind could not have expired meanwhile.
    const LEASE: Duration = Duration::from_secs(20);
    let majority = build(builder(&cluster).node_timeout(TIMEOUT)).await;
    let all = build(builder(&cluster).node_timeout(TIMEOUT).quorum(Quorum::All)).await;
    let history = History::new();
    let name = unique("chaos-pause");
    let all_name = unique("chaos-pause-all");
    // Warm up: connections made, scripts loaded.
    for m in [&majority, &all] {
        let g = m
            .request(unique("chaos-pause-warm-up"))
            .lease(LEASE)
            .wait(Duration::ZERO)
            .acquire()
            .await;
        g.expect("warm-up")
            .release()
            .await
            .expect("warm-up release");
    }

    let victim = 3;
    history.note("fault", format!("pause node {victim}"));
    cluster.pause(victim).await;
    let mut majority_latency = Duration::ZERO;
    for i in 0..8 {
        let started = Instant::now();
        let g = majority
            .request(&name)
            .lease(LEASE)
            .wait(Duration::ZERO)
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("majority with 4 of 5 answering, try {i}: {e}"));
        let elapsed = started.elapsed();
        majority_latency = majority_latency.max(elapsed);
        assert!(
            elapsed < TIMEOUT + SLACK,
            "majority acquire took {elapsed:?}"
        );
        assert!(
            !g.granted_nodes().contains(&victim),
            "{:?}",
            g.granted_nodes()
        );
        let hold = enter(&history, "majority", &g);
        hold.exit(g.valid_until());
        g.release().await.expect("release with 4 of 5 answering");
    }

    let mut all_latency = Duration::ZERO;
    for i in 0..3 {
        let started = Instant::now();
        let err = all
            .request(&all_name)
            .lease(LEASE)
            .wait(Duration::ZERO)
            .acquire()
            .await
            .expect_err("All cannot be granted with a node paused");
        let elapsed = started.elapsed();
        all_latency = all_latency.max(elapsed);
        assert!(err.is_unavailable(), "try {i}: {err}");
        match &err {
            Error::Unavailable { failures, .. } => assert!(
                failures
                    .iter()
                    .any(|f| f.node == victim && f.kind == NodeErrorKind::Timeout),
                "the paused node should be reported as a timeout: {err}"
            ),
            other => panic!("expected Unavailable, got {other}"),
        }
        assert!(elapsed < TIMEOUT + SLACK, "All acquire took {elapsed:?}");
        for n in (0..NODES).filter(|n| *n != victim) {
            assert!(
                !has_key(&cluster, n, &all_name).await,
                "All left a grant on node {n}"
            );
        }
    }

    history.note("fault", format!("unpause node {victim}"));
    cluster.unpause(victim).await;
    // The paused node runs the queued acquire and then its rollback, in order.
    let clean = eventually(Duration::from_secs(3), || async {
        !has_key(&cluster, victim, &all_name).await && !has_key(&cluster, victim, &name).await
    })
    .await;
    assert!(
        clean,
        "node {victim} kept a grant after it resumed: {:?} / {:?}",
        holders_on(&cluster, victim, &all_name).await,
        holders_on(&cluster, victim, &name).await
    );
    let g = all
        .request(&all_name)
        .lease(LEASE)
        .wait(Duration::from_secs(2))
        .acquire()
        .await
        .expect("All works again once the node resumed");
    assert_eq!(g.granted_nodes().len(), NODES);
    g.release().await.expect("release");
    let summary = format!(
        "scenario 3: node timeout {TIMEOUT:?}; worst majority acquire {majority_latency:.1?}, \
         worst failed All acquire {all_latency:.1?}"
    );
    finish_clean(&cluster, &history, "3 pause 1", t0, summary).await;
}

// ---------------------------------------------------------------------------
// 4. A minority partitioned

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_a_partitioned_minority_keeps_locking_and_is_repaired_when_healed() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let t0 = Instant::now();
    const LEASE: Duration = Duration::from_secs(1);
    let holder = build(builder(&cluster).lease(LEASE)).await;
    let history = History::new();
    let name = unique("chaos-part");
    let held = unique("chaos-part-held");

    let held_guard = holder.lock(&held).await.expect("lock the held lock");
    let everywhere = eventually(Duration::from_secs(2), || async {
        for n in 0..NODES {
            if !has_key(&cluster, n, &held).await {
                return false;
            }
        }
        true
    })
    .await;
    assert!(everywhere, "late grants should reach every node");
    // Managers connect to every node when built: build them first.
    let mut clients = Vec::new();
    for _ in 0..3 {
        clients.push(build(builder(&cluster).lease(LEASE)).await);
    }
    history.note("fault", "partition nodes 3, 4");
    tokio::join!(cluster.partition(3), cluster.partition(4));
    let cut = Instant::now();

    // Three contending clients, six cycles each, all must get through.
    let mut tasks = tokio::task::JoinSet::new();
    for (c, m) in clients.into_iter().enumerate() {
        let (name, history) = (name.clone(), Arc::clone(&history));
        tasks.spawn(async move {
            let client = format!("client-{c}");
            let mut stats = ClientStats::default();
            for _ in 0..6 {
                let ok = critical_section(
                    &m,
                    &name,
                    &client,
                    &history,
                    Duration::from_secs(5),
                    Duration::from_millis(40),
                    &mut stats,
                )
                .await;
                assert!(ok, "{client}: majority locking should continue: {stats:?}");
            }
            stats
        });
    }
    let mut stats = ClientStats::default();
    while let Some(r) = tasks.join_next().await {
        stats.add(&r.expect("client task"));
    }
    // Keep the minority cut off for more than two leases: the held lock's
    // keys expire there.
    tokio::time::sleep((LEASE * 5 / 2).saturating_sub(cut.elapsed())).await;
    assert!(
        held_guard.is_held() && !held_guard.is_lost(),
        "{held_guard:?}"
    );
    let before = holder.watchdog_stats();
    assert!(before.node_errors > 0, "{before:?}");

    history.note("fault", "heal nodes 3, 4");
    tokio::join!(cluster.heal(3), cluster.heal(4));
    let healed = Instant::now();
    let repaired = eventually(Duration::from_secs(5), || async {
        has_key(&cluster, 3, &held).await && has_key(&cluster, 4, &held).await
    })
    .await;
    assert!(
        repaired,
        "the watchdog should re-create the key on nodes 3, 4"
    );
    let repaired_after = healed.elapsed();
    let after = holder.watchdog_stats();
    assert!(
        after.repairs >= before.repairs + 2,
        "before {before:?}, after {after:?}"
    );
    let granted = held_guard.granted_nodes();
    assert!(granted.contains(&3) && granted.contains(&4), "{granted:?}");
    held_guard.release().await.expect("release the held lock");

    let summary = format!(
        "scenario 4: {} lock/release cycles by 3 clients ({} attempts) with nodes 3, 4 cut \
         off; nodes repaired {repaired_after:.1?} after healing (repairs {} -> {})",
        stats.acquisitions, stats.attempts, before.repairs, after.repairs,
    );
    let verdict = finish_clean(&cluster, &history, "4 partition 2", t0, summary).await;
    assert_eq!(verdict.acquisitions, 18, "{stats:?}");
}

// ---------------------------------------------------------------------------
// 5. An immediate empty restart: the RedLock hazard, and the watchdog

#[tokio::test]
async fn s5_an_immediate_empty_restart_lets_two_clients_hold_and_the_checker_sees_it() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let t0 = Instant::now();

    // (a) Unsafe: fixed leases, no watchdog, no persistence, no delay.
    let history = History::new();
    let name = unique("chaos-hazard");
    let a = build(builder(&cluster)).await;
    block_3_4(&cluster, &name).await;
    lag_fences_of_3_4(&cluster, &name).await;
    let ga = a
        .lock_with_lease(&name, Duration::from_secs(30))
        .await
        .expect("A gets 0, 1, 2");
    assert_eq!(ga.granted_nodes(), vec![0, 1, 2]);
    let hold_a = enter(&history, "A", &ga);
    history.note("fault", "restart node 2 empty");
    cluster.restart_empty(2).await;
    assert!(!has_key(&cluster, 2, &name).await, "node 2 came back empty");
    unblock_3_4(&cluster, &name).await;
    let b = build(builder(&cluster)).await;
    let gb = b
        .request(&name)
        .lease(Duration::from_secs(30))
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("B gets the forgotten node 2 plus 3, 4: a majority");
    assert_eq!(gb.granted_nodes(), vec![2, 3, 4]);
    let hold_b = enter(&history, "B", &gb);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(ga.is_held() && gb.is_held(), "both believe they hold it");
    hold_a.exit(ga.valid_until());
    hold_b.exit(gb.valid_until());
    let _ = ga.release().await;
    gb.release().await.expect("B releases");
    let verdict = history.check().print("5a hazard, unsafe");
    assert!(
        verdict.overlaps >= 1,
        "the checker must detect the double hold:\n{verdict}"
    );
    assert!(
        verdict.inversions >= 1,
        "node 2 forgot its fence counter: B's token cannot exceed A's:\n{verdict}"
    );

    // (b) A holds all five nodes: when node 2 comes back empty, the other
    // four still confirm A's hold (a quorum), so the watchdog repairs node 2
    // before B tries: B is refused. (On a bare quorum with node 2 missing,
    // no quorum confirms the hold: A is told it lost the lock instead, see
    // `tests::safety::force_unlock_is_not_undone_by_the_watchdog`.)
    let history = History::new();
    let name = unique("chaos-hazard-repair");
    let a = build(
        builder(&cluster)
            .lease(Duration::from_secs(6))
            .renew_interval(Duration::from_millis(500)),
    )
    .await;
    let ga = a.lock(&name).await.expect("A gets all five");
    // The quorum decides at three; the last two grants land just after.
    let all_five = eventually(Duration::from_secs(1), || async {
        ga.granted_nodes().len() == 5
    })
    .await;
    assert!(all_five, "{:?}", ga.granted_nodes());
    let mut hold_a = enter(&history, "A", &ga);
    let repairs = a.watchdog_stats().repairs;
    history.note("fault", "restart node 2 empty");
    while_holding(&mut hold_a, &ga, cluster.restart_empty(2)).await;
    let repaired = while_holding(
        &mut hold_a,
        &ga,
        eventually(Duration::from_secs(5), || has_key(&cluster, 2, &name)),
    )
    .await;
    assert!(repaired, "A's watchdog should re-create its key on node 2");
    assert!(a.watchdog_stats().repairs > repairs);
    let b = build(builder(&cluster)).await;
    let err = b
        .try_lock(&name, Duration::ZERO)
        .await
        .expect_err("node 2 is A's again");
    assert!(err.is_contended(), "{err}");
    assert!(hold_a.observe(ga.valid_until()));
    assert!(ga.is_held() && !ga.is_lost());
    hold_a.exit(ga.valid_until());
    ga.release().await.expect("A releases");
    let gb = b
        .try_lock(&name, Duration::from_secs(2))
        .await
        .expect("B after A");
    let hold_b = enter(&history, "B", &gb);
    hold_b.exit(gb.valid_until());
    gb.release().await.expect("B releases");
    history
        .check()
        .assert_clean("5b hazard, watchdog repaired first");

    // (c) B acquires before A's watchdog ticks again: A's next renewal finds
    // B on three nodes and declares the lock lost. The watchdog bounds the
    // double hold to about one renewal interval; it cannot prevent it.
    const INTERVAL: Duration = Duration::from_secs(5);
    let history = History::new();
    let name = unique("chaos-hazard-conflict");
    let a = build(
        builder(&cluster)
            .lease(INTERVAL * 3)
            .renew_interval(INTERVAL),
    )
    .await;
    block_3_4(&cluster, &name).await;
    let ga = a.lock(&name).await.expect("A gets 0, 1, 2");
    let acquired = Instant::now();
    assert_eq!(ga.granted_nodes(), vec![0, 1, 2]);
    let mut hold_a = enter(&history, "A", &ga);
    history.note("fault", "restart node 2 empty");
    cluster.restart_empty(2).await;
    unblock_3_4(&cluster, &name).await;
    let b = build(builder(&cluster)).await;
    let gb = b
        .request(&name)
        .lease(Duration::from_secs(30))
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("B gets 2, 3, 4 before A's watchdog runs");
    let b_at = acquired.elapsed();
    assert!(
        b_at + Duration::from_millis(500) < INTERVAL && a.watchdog_stats().ticks == 0,
        "the restart took {b_at:?}: B was meant to acquire before A's first renewal at {INTERVAL:?}"
    );
    assert_eq!(gb.granted_nodes(), vec![2, 3, 4]);
    let hold_b = enter(&history, "B", &gb);
    tokio::time::timeout(INTERVAL + Duration::from_secs(2), ga.lost())
        .await
        .expect("A's watchdog should find B on 3 nodes and declare the lock lost");
    hold_a.lost_now();
    let stats = a.watchdog_stats();
    assert!(stats.conflicts >= 3 && stats.losses == 1, "{stats:?}");
    hold_a.exit(ga.valid_until());
    let _ = ga.release().await;
    hold_b.exit(gb.valid_until());
    gb.release().await.expect("B releases");
    let verdict = history.check().print("5c hazard, B before A's renewal");
    assert_eq!(verdict.overlaps, 1, "{verdict}");
    let (x, y) = verdict.first_overlap.clone().expect("the overlap");
    let window = x.believed_until.min(y.believed_until) - y.entered;
    assert!(
        window <= INTERVAL + Duration::from_millis(500),
        "the double hold lasted {window:?}, more than one renewal interval"
    );
    eprintln!(
        "scenario 5: (a) unsafe double hold detected; (b) repaired first, B refused; \
         (c) B first, A lost after a double hold of {window:.1?}; took {:.1?}",
        t0.elapsed()
    );
    cluster.restore().await;
}

// ---------------------------------------------------------------------------
// 6. The same restart with persistence

#[tokio::test]
async fn s6_restarts_with_fsynced_aof_never_let_two_clients_hold() {
    let (_serial, cluster) = exclusive(Profile::Safe).await;
    let t0 = Instant::now();
    const ROUNDS: usize = 20;
    let history = History::new();
    let name = unique("chaos-safe");
    let a = build(builder(&cluster)).await;
    let contenders = [
        build(builder(&cluster).lease(Duration::from_secs(2))).await,
        build(builder(&cluster).lease(Duration::from_secs(2))).await,
    ];
    let mut stats = ClientStats::default();
    let mut refused = 0;
    let mut release_misses = 0;
    for round in 0..ROUNDS {
        // A holds exactly three nodes; the victim is one of them.
        let mine = [round % NODES, (round + 1) % NODES, (round + 2) % NODES];
        let blocked = [(round + 3) % NODES, (round + 4) % NODES];
        let victim = mine[2];
        for n in blocked {
            block(&cluster, n, &name, Duration::from_secs(60)).await;
        }
        let ga = a
            .request(&name)
            .lease(Duration::from_secs(30))
            .wait(Duration::from_secs(5))
            .acquire()
            .await
            .unwrap_or_else(|e| panic!("round {round}: A: {e}"));
        let mut granted = ga.granted_nodes();
        granted.sort_unstable();
        let mut expected = mine.to_vec();
        expected.sort_unstable();
        assert_eq!(granted, expected, "round {round}");
        let mut hold_a = enter(&history, "A", &ga);
        history.note(
            "fault",
            format!("round {round}: kill + start node {victim}"),
        );
        cluster.kill(victim).await;
        cluster.start(victim).await;
        assert!(
            has_key(&cluster, victim, &name).await,
            "round {round}: node {victim} lost A's key across the restart"
        );
        for n in blocked {
            unblock(&cluster, n, &name).await;
        }
        // The two contenders race for it while A holds: both refused.
        let (r0, r1) = tokio::join!(
            contenders[0].try_lock(&name, Duration::ZERO),
            contenders[1].try_lock(&name, Duration::ZERO)
        );
        for (c, r) in [r0, r1].into_iter().enumerate() {
            match r {
                Ok(g) => {
                    let h = enter(&history, &format!("contender-{c}"), &g);
                    h.exit(g.valid_until());
                    let _ = g.release().await;
                }
                Err(e) => {
                    assert!(e.is_contended(), "round {round}: {e}");
                    refused += 1;
                }
            }
        }
        assert!(hold_a.observe(ga.valid_until()), "round {round}");
        hold_a.exit(ga.valid_until());
        // The first call on a connection broken by the restart fails (it is
        // not re-sent), so the release may miss the victim: it is then
        // reported unavailable and the key there expires with its lease.
        match ga.release().await {
            Ok(()) => {}
            Err(Error::Unavailable { failures, .. })
                if failures.iter().all(|f| f.node == victim) =>
            {
                release_misses += 1;
            }
            Err(e) => panic!("round {round}: A's release: {e}"),
        }
        // Then they contend normally.
        let (s0, s1) = tokio::join!(
            async {
                let mut s = ClientStats::default();
                let ok = critical_section(
                    &contenders[0],
                    &name,
                    "contender-0",
                    &history,
                    Duration::from_secs(3),
                    Duration::from_millis(20),
                    &mut s,
                )
                .await;
                (ok, s)
            },
            async {
                let mut s = ClientStats::default();
                let ok = critical_section(
                    &contenders[1],
                    &name,
                    "contender-1",
                    &history,
                    Duration::from_secs(3),
                    Duration::from_millis(20),
                    &mut s,
                )
                .await;
                (ok, s)
            }
        );
        assert!(s0.0 && s1.0, "round {round}: {s0:?} {s1:?}");
        stats.add(&s0.1);
        stats.add(&s1.1);
    }
    let summary = format!(
        "scenario 6: {ROUNDS} rounds of hold + kill/start of one of the holder's nodes + \
         contention: {refused} contender attempts refused while held, {} acquisitions after; \
         A's release missed the restarted node {release_misses} times",
        stats.acquisitions,
    );
    let verdict = finish_clean(&cluster, &history, "6 safe restarts", t0, summary).await;
    assert_eq!(verdict.acquisitions, ROUNDS * 3);
    assert_eq!(refused, ROUNDS * 2);
}

/// A delayed restart (down longer than the lease) keeps mutual exclusion,
/// but the node forgot its fence counter: fencing tokens can repeat.
#[tokio::test]
async fn s6b_a_delayed_empty_restart_keeps_exclusion_but_not_fencing_tokens() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let t0 = Instant::now();
    const LEASE: Duration = Duration::from_secs(1);
    let history = History::new();
    let name = unique("chaos-delayed");
    let a = build(builder(&cluster)).await;
    block_3_4(&cluster, &name).await;
    lag_fences_of_3_4(&cluster, &name).await;
    let ga = a
        .lock_with_lease(&name, LEASE)
        .await
        .expect("A gets 0, 1, 2");
    assert_eq!(ga.granted_nodes(), vec![0, 1, 2]);
    let token_a = ga.fencing_token();
    let mut hold_a = enter(&history, "A", &ga);
    history.note("fault", "node 2 down, back empty after lease + 500 ms");
    let pending = cluster
        .restart_delayed(2, LEASE + Duration::from_millis(500))
        .await;
    // A works until its validity ends.
    while hold_a.observe(ga.valid_until()) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hold_a.exit(ga.valid_until());
    let _ = ga.release().await;
    pending.wait().await;
    unblock_3_4(&cluster, &name).await;
    let b = build(builder(&cluster)).await;
    // Nodes 0 and 1 are unreachable when B asks: B's quorum is 2, 3, 4.
    history.note("fault", "partition nodes 0, 1");
    tokio::join!(cluster.partition(0), cluster.partition(1));
    let gb = b
        .request(&name)
        .lease(Duration::from_secs(5))
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("B gets 2, 3, 4 after A's lease ended");
    assert_eq!(gb.granted_nodes(), vec![2, 3, 4]);
    let hold_b = enter(&history, "B", &gb);
    hold_b.exit(gb.valid_until());
    let token_b = gb.fencing_token();
    gb.release().await.expect("B releases");
    tokio::join!(cluster.heal(0), cluster.heal(1));
    let verdict = history.check().print("6b delayed restart");
    assert_eq!(verdict.overlaps, 0, "{verdict}");
    assert!(
        verdict.inversions >= 1,
        "expected B's token to repeat A's (no node of B's quorum remembers A's fence):\n{verdict}"
    );
    eprintln!(
        "scenario 6b: no overlap; tokens A {token_a}, B {token_b}; took {:.1?}",
        t0.elapsed()
    );
    cluster.restore().await;
}

// ---------------------------------------------------------------------------
// 7. Randomized chaos

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    Kill,
    Pause,
    Partition,
}

/// Eight clients, each with its own manager, contend for one lock (watchdog
/// locks, lease 1 s; mostly brief holds, a few over several leases) while a
/// seeded schedule kills and starts, pauses and unpauses, partitions and
/// heals, and restarts (kill + start: the AOF keeps the data) nodes. On
/// `lost()` or a lapsed validity a client stops believing at once. The
/// history must be clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_randomized_chaos_on_the_safe_profile_has_no_violations() {
    let seed = env_u64("QUORUMLOCK_CHAOS_SEED").unwrap_or_else(rand::random);
    let secs = env_u64("QUORUMLOCK_CHAOS_SECS").unwrap_or(60);
    let max_faults = env_u64("QUORUMLOCK_CHAOS_MAX_FAULTS").map_or(3, |n| n as usize);
    assert!((1..=NODES).contains(&max_faults));
    eprintln!(
        "chaos: seed {seed} (replay with QUORUMLOCK_CHAOS_SEED={seed}), {secs} s of faults, \
         at most {max_faults} node(s) faulted at once"
    );
    let (_serial, cluster) = exclusive(Profile::Safe).await;
    let t0 = Instant::now();
    const CLIENTS: usize = 8;
    const LEASE: Duration = Duration::from_secs(1);
    let history = History::new();
    let name = unique("chaos-random");
    let mut managers = Vec::new();
    for _ in 0..CLIENTS {
        managers.push(build(builder(&cluster).lease(LEASE)).await);
    }
    let faults_end = Instant::now() + Duration::from_secs(secs);
    // Clients go on for a while on the restored cluster.
    let clients_end = faults_end + Duration::from_secs(4);

    let mut tasks = tokio::task::JoinSet::new();
    for (c, m) in managers.iter().enumerate() {
        let (m, name, history) = (m.clone(), name.clone(), Arc::clone(&history));
        let mut rng = Rng(seed ^ (0xC1E7 + c as u64));
        tasks.spawn(async move {
            let client = format!("client-{c}");
            let mut stats = ClientStats::default();
            while Instant::now() < clients_end {
                let wait = rng.millis(200, 1_000);
                // Mostly brief holds; one in twenty spans a few leases, so that
                // faults hit holds that need renewing.
                let work = if rng.chance(0.05) {
                    rng.millis(1_000, 2_500)
                } else {
                    rng.millis(5, 80)
                };
                critical_section(&m, &name, &client, &history, wait, work, &mut stats).await;
                tokio::time::sleep(rng.millis(0, 20)).await;
            }
            stats
        });
    }

    // The fault schedule: decided by the seed alone.
    let mut rng = Rng(seed);
    let mut faulted: Vec<(usize, Fault)> = Vec::new();
    let mut injected: BTreeMap<&str, usize> = BTreeMap::new();
    let mut max_at_once = 0;
    while Instant::now() < faults_end {
        tokio::time::sleep(rng.millis(200, 1_500)).await;
        let inject = faulted.len() < max_faults && (faulted.is_empty() || rng.chance(0.5));
        if inject {
            let healthy: Vec<usize> = (0..NODES)
                .filter(|n| !faulted.iter().any(|(f, _)| f == n))
                .collect();
            let node = healthy[rng.below(healthy.len())];
            let (what, fault) = match rng.below(4) {
                0 => ("kill", Some(Fault::Kill)),
                1 => ("pause", Some(Fault::Pause)),
                2 => ("partition", Some(Fault::Partition)),
                _ => ("restart", None),
            };
            history.note("fault", format!("{what} node {node}"));
            match fault {
                Some(Fault::Kill) => cluster.kill(node).await,
                Some(Fault::Pause) => cluster.pause(node).await,
                Some(Fault::Partition) => cluster.partition(node).await,
                // Kill and start at once; the AOF keeps the data.
                None => {
                    cluster.kill(node).await;
                    cluster.start(node).await;
                }
            }
            *injected.entry(what).or_default() += 1;
            if let Some(f) = fault {
                faulted.push((node, f));
            }
            max_at_once = max_at_once.max(faulted.len());
        } else {
            let (node, fault) = faulted.remove(rng.below(faulted.len()));
            let what = match fault {
                Fault::Kill => {
                    cluster.start(node).await;
                    "start"
                }
                Fault::Pause => {
                    cluster.unpause(node).await;
                    "unpause"
                }
                Fault::Partition => {
                    cluster.heal(node).await;
                    "heal"
                }
            };
            history.note("fault", format!("{what} node {node}"));
        }
    }
    history.note("fault", "restore every node");
    cluster.restore().await;
    let restored = t0.elapsed();

    let mut stats = ClientStats::default();
    while let Some(r) = tasks.join_next().await {
        stats.add(&r.expect("client task"));
    }
    let wd = sum_stats(&managers);
    let total_faults: usize = injected.values().sum();
    let verdict = history.check();
    eprintln!(
        "chaos: seed {seed}; {total_faults} faults injected {injected:?} (at most {max_at_once} \
         at once); clients: {} attempts, {} acquisitions, {} losses, {} lapses, {} contended, \
         {} unavailable, {} validity exhausted, {} release errors ({} lost, {} expired, \
         {} not held, {} unavailable); watchdog: {} ticks, {} \
         extended, {} repairs, {} conflicts, {} node errors, {} losses; restored at {restored:.1?}, \
         took {:.1?}",
        stats.attempts,
        stats.acquisitions,
        stats.losses,
        stats.lapses,
        stats.contended,
        stats.unavailable,
        stats.exhausted,
        stats.release_errors,
        stats.release_lost,
        stats.release_expired,
        stats.release_not_held,
        stats.release_unavailable,
        wd.ticks,
        wd.extended,
        wd.repairs,
        wd.conflicts,
        wd.node_errors,
        wd.losses,
        t0.elapsed()
    );
    verdict.assert_clean(&format!("7 chaos seed {seed}"));
    assert!(
        stats.acquisitions >= 50,
        "too few acquisitions for a meaningful run: {stats:?}"
    );
    assert!(total_faults >= secs as usize / 6, "{injected:?}");
    drop(managers);
}

// ---------------------------------------------------------------------------
// 8. Clock jumps on real servers (the clock shim, docker/clockshim.c)

/// The shim moves the clock by which a real redis-server expires keys: a
/// key with 60 s to live vanishes when its node's clock jumps 120 s ahead,
/// and only on that node; a clock set back lengthens what was set meanwhile.
#[tokio::test]
async fn the_clock_shim_expires_a_60s_key_when_its_node_jumps_120s() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let name = unique("clock-shim");
    const TTL: Duration = Duration::from_secs(60);
    for n in [0, 1] {
        take_by_hand(&cluster, n, &name, "probe", TTL).await;
    }
    assert!(pttl(&cluster, 0, &name).await > 59_000);
    cluster.jump_clock(0, Duration::from_secs(120)).await;
    assert!(
        !has_key(&cluster, 0, &name).await,
        "a 60 s key should vanish when its node's clock jumps 120 s ahead"
    );
    let untouched = pttl(&cluster, 1, &name).await;
    assert!(untouched > 58_000, "node 1 kept the true time: {untouched}");
    // Set on the jumped clock, then the clock goes back 120 s.
    take_by_hand(&cluster, 0, &name, "probe", TTL).await;
    assert!(pttl(&cluster, 0, &name).await > 59_000);
    cluster.jump_clock(0, Duration::ZERO).await;
    let longer = pttl(&cluster, 0, &name).await;
    assert!(
        (170_000..=180_000).contains(&longer),
        "set back 120 s, the key should have about 180 s to live: {longer}"
    );
    cluster.restore().await;
}

/// Clock jumps smaller than the drift allowance keep mutual exclusion, even
/// for clients that hold fixed leases to the last moment of their validity
/// (a rival gets in as soon as the keys expire): four clients contend while
/// the nodes' clocks jump ahead, one node every 500 ms, by three quarters of
/// the drift each time, so that no key lives through two jumps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8_clock_jumps_within_the_drift_allowance_keep_mutual_exclusion() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let t0 = Instant::now();
    const CLIENTS: usize = 4;
    const LEASE: Duration = Duration::from_millis(1500);
    const JUMPS: usize = 10;
    const EVERY: Duration = Duration::from_millis(500);
    let history = History::new();
    let name = unique("chaos-clock-small");
    let mut managers = Vec::new();
    for _ in 0..CLIENTS {
        managers.push(build(builder(&cluster).drift_factor(0.1)).await);
    }
    let drift = managers[0].config().drift(LEASE);
    let jump = drift * 3 / 4;
    // Each node jumps at most once in any span of NODES * EVERY > LEASE.
    assert!(EVERY * NODES as u32 > LEASE);
    let clients_end = Instant::now() + EVERY * (JUMPS as u32 + 1);
    let mut tasks = tokio::task::JoinSet::new();
    for (c, m) in managers.iter().enumerate() {
        let (m, name, history) = (m.clone(), name.clone(), Arc::clone(&history));
        tasks.spawn(async move {
            let client = format!("client-{c}");
            let mut stats = ClientStats::default();
            while Instant::now() < clients_end {
                // Work past the validity: the hold ends when it lapses.
                fixed_lease_section(
                    &m,
                    &name,
                    &client,
                    &history,
                    LEASE,
                    LEASE * 2,
                    LEASE,
                    &mut stats,
                )
                .await;
            }
            stats
        });
    }
    let mut ahead = [Duration::ZERO; NODES];
    for j in 0..JUMPS {
        tokio::time::sleep(EVERY).await;
        let n = j % NODES;
        ahead[n] += jump;
        history.note(
            "fault",
            format!("node {n} clock +{jump:?} (now {:?} ahead)", ahead[n]),
        );
        cluster.jump_clock(n, ahead[n]).await;
    }
    let mut stats = ClientStats::default();
    while let Some(r) = tasks.join_next().await {
        stats.add(&r.expect("client task"));
    }
    let summary = format!(
        "scenario 8: {JUMPS} clock jumps of {jump:?} (drift allowance {drift:?}, lease \
         {LEASE:?}); {} acquisitions, {} lapses, {} contended",
        stats.acquisitions, stats.lapses, stats.contended,
    );
    finish_clean(
        &cluster,
        &history,
        "8 clock jumps within the drift",
        t0,
        summary,
    )
    .await;
    assert!(
        stats.acquisitions >= 3 && stats.losses + stats.lapses >= 3,
        "the holds should run to the end of their validity: {stats:?}"
    );
}

/// The RedLock clock hazard on real servers: A holds a fixed lease on nodes
/// 0, 1, 2; the clocks of 1 and 2 jump ahead by more than the lease, so
/// A's keys there expire at once while A still believes it holds the lock;
/// three rivals then take 1, 2 and 3 (a majority) while A works. The
/// checker must find the double hold.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s8b_a_clock_jump_past_the_lease_lets_a_rival_in_and_the_checker_sees_it() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    let t0 = Instant::now();
    const LEASE: Duration = Duration::from_secs(10);
    let history = History::new();
    let name = unique("chaos-clock-large");
    let a = build(builder(&cluster)).await;
    block_3_4(&cluster, &name).await;
    let ga = a
        .lock_with_lease(&name, LEASE)
        .await
        .expect("A gets 0, 1, 2");
    assert_eq!(ga.granted_nodes(), vec![0, 1, 2]);
    let mut hold_a = enter(&history, "A", &ga);
    history.note("fault", "clocks of nodes 1, 2 jump 2 leases ahead");
    tokio::join!(
        cluster.jump_clock(1, LEASE * 2),
        cluster.jump_clock(2, LEASE * 2)
    );
    for n in [1, 2] {
        assert!(
            !has_key(&cluster, n, &name).await,
            "A's key expired on node {n}"
        );
    }
    assert!(has_key(&cluster, 0, &name).await, "node 0 kept A's key");
    unblock(&cluster, 3, &name).await;
    let mut tasks = tokio::task::JoinSet::new();
    for c in 0..3 {
        let (m, name, history) = (
            build(builder(&cluster)).await,
            name.clone(),
            Arc::clone(&history),
        );
        tasks.spawn(async move {
            let client = format!("rival-{c}");
            let mut stats = ClientStats::default();
            for _ in 0..2 {
                fixed_lease_section(
                    &m,
                    &name,
                    &client,
                    &history,
                    Duration::from_secs(1),
                    Duration::from_secs(3),
                    Duration::from_millis(50),
                    &mut stats,
                )
                .await;
            }
            stats
        });
    }
    let mut stats = ClientStats::default();
    while let Some(r) = while_holding(&mut hold_a, &ga, tasks.join_next()).await {
        stats.add(&r.expect("rival task"));
    }
    assert!(ga.is_held(), "A still believes it holds the lock: {ga:?}");
    hold_a.exit(ga.valid_until());
    let _ = ga.release().await;
    unblock(&cluster, 4, &name).await;
    let verdict = history.check().print("8b clock jump past the lease");
    assert_eq!(stats.acquisitions, 6, "every rival got in: {stats:?}");
    assert!(
        verdict.overlaps >= 1,
        "the checker must detect the double hold:\n{verdict}"
    );
    let (x, y) = verdict.first_overlap.clone().expect("the overlap");
    assert!(
        x.client == "A" || y.client == "A",
        "the overlap is A's with a rival: {x} / {y}"
    );
    eprintln!(
        "scenario 8b: clocks of 2 of A's 3 nodes jumped {:?}; {} rival holds inside A's \
         validity, {} overlaps found; took {:.1?}",
        LEASE * 2,
        stats.acquisitions,
        verdict.overlaps,
        t0.elapsed()
    );
    cluster.restore().await;
}

// ---------------------------------------------------------------------------
// Regressions: library bugs this suite found, each pinned by the test that
// first showed it.

/// Re-acquiring as the same owner right after the release of an expired hold
/// re-enters that hold's stale keys (the same fencing token), and the expired
/// hold's background clean-up then deletes the new hold's keys, so a third
/// client gets the lock while the new hold is still valid.
#[tokio::test]
async fn reacquiring_right_after_an_expired_release_is_exclusive_with_a_new_token() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    const LEASE: Duration = Duration::from_secs(2);
    let history = History::new();
    let name = unique("chaos-reacquire");
    // A large drift allowance: the local validity (about 1.1 s) ends well
    // before the keys expire on the nodes (2 s), as after a slow renewal.
    let m = build(builder(&cluster).drift_factor(0.45)).await;
    let rival = build(builder(&cluster)).await;
    let owner = m.new_owner();
    let g1 = m
        .request(&name)
        .owner(&owner)
        .lease(LEASE)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("first hold");
    let h1 = enter(&history, "A", &g1);
    let first_token = g1.fencing_token();
    tokio::time::sleep_until(
        tokio::time::Instant::from_std(g1.valid_until()) + Duration::from_millis(20),
    )
    .await;
    h1.exit(g1.valid_until());
    let err = g1.release().await.expect_err("the hold had expired");
    assert!(err.is_expired(), "{err}");
    // At once, the same owner takes the lock again: it is a new hold, which
    // waits for the old one's keys to be cleaned up (or to expire).
    let g2 = m
        .request(&name)
        .owner(&owner)
        .lease(LEASE)
        .wait(Duration::from_secs(3))
        .acquire()
        .await
        .expect("second hold");
    assert!(
        g2.fencing_token() > first_token,
        "a new hold needs a new token: {} after {first_token}",
        g2.fencing_token()
    );
    let mut h2 = enter(&history, "A", &g2);
    tokio::time::sleep(Duration::from_millis(100)).await;
    let mut with_key = 0;
    for n in 0..NODES {
        with_key += usize::from(has_key(&cluster, n, &name).await);
    }
    if let Ok(g) = rival.try_lock(&name, Duration::ZERO).await {
        let h = enter(&history, "rival", &g);
        tokio::time::sleep(Duration::from_millis(50)).await;
        h.exit(g.valid_until());
        let _ = g.release().await;
    }
    assert!(h2.observe(g2.valid_until()), "the second hold is valid");
    h2.exit(g2.valid_until());
    let _ = g2.release().await;
    eprintln!(
        "re-acquisition: nodes holding the second hold's key 100 ms after it was granted: \
         {with_key} of {NODES}"
    );
    history
        .check()
        .assert_clean("same owner re-acquires after an expired release");
}

/// A hold whose validity ended while its process was stalled (a GC pause,
/// SIGSTOP, a swapped-out VM), and which another client took and released
/// meanwhile, is not renewed ("repaired") by the watchdog when the process
/// resumes: it is lost, `is_held()` stays false and `lost()` fires. (It
/// used to be renewed, with `lost()` never firing.)
#[tokio::test]
async fn a_hold_that_lapsed_during_a_process_stall_is_lost_not_renewed() {
    let (_serial, cluster) = exclusive(Profile::Fast).await;
    const LEASE: Duration = Duration::from_secs(1);
    let name = unique("chaos-stall");
    let a = build(builder(&cluster).lease(LEASE)).await;
    let ga = a.lock(&name).await.expect("A");
    let token_a = ga.fencing_token();
    let (urls, b_name) = (cluster.urls(), name.clone());
    let b_thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("B's runtime");
        rt.block_on(async move {
            let b = LockManager::builder()
                .nodes(urls)
                .node_timeout(Duration::from_millis(200))
                .build()
                .await
                .expect("B's manager");
            let g = b
                .try_lock(&b_name, Duration::from_secs(3))
                .await
                .expect("B gets the lock once A's keys expired");
            let token = g.fencing_token();
            tokio::time::sleep(Duration::from_millis(200)).await;
            g.release().await.expect("B releases");
            token
        })
    });
    // A's process stalls for two and a half leases: nothing of it runs.
    std::thread::sleep(LEASE * 5 / 2);
    let token_b = b_thread.join().expect("B's thread");
    assert!(token_b > token_a, "B held the lock in between");
    let held_after_stall = ga.is_held();
    // A's runtime runs again: the watchdog ticks.
    tokio::time::sleep(LEASE / 2).await;
    let stats = a.watchdog_stats();
    eprintln!(
        "stall: A token {token_a}, B token {token_b}; right after the stall is_held={held_after_stall}; \
         after a tick: state {:?}, is_held {}, is_lost {}, watchdog {stats:?}",
        ga.state(),
        ga.is_held(),
        ga.is_lost()
    );
    assert!(!held_after_stall);
    assert!(
        ga.is_lost() && !ga.is_held(),
        "B held the lock while A was stalled; A's hold must be lost, not renewed: state {:?}",
        ga.state()
    );
}

/// After a node restarts, the first call of each manager to it fails with a
/// broken pipe (one-shot scripts are not re-sent on a fresh connection), so
/// a release right after the restart misses that node: with `Quorum::All`
/// the lock then stays taken there until its lease runs out.
#[tokio::test]
async fn a_release_right_after_a_node_restart_reaches_that_node() {
    let (_serial, cluster) = exclusive(Profile::Safe).await;
    let name = unique("chaos-first-call");
    let a = build(builder(&cluster).quorum(Quorum::All)).await;
    let b = build(builder(&cluster).quorum(Quorum::All)).await;
    let ga = a
        .lock_with_lease(&name, Duration::from_secs(30))
        .await
        .expect("A holds all five");
    cluster.kill(0).await;
    cluster.start(0).await;
    assert!(has_key(&cluster, 0, &name).await, "the AOF kept A's key");
    let released = ga.release().await;
    let left_on_0 = has_key(&cluster, 0, &name).await;
    let first = b.try_lock(&name, Duration::ZERO).await;
    let next = b.try_lock(&name, Duration::ZERO).await;
    eprintln!(
        "first call after a restart: A's release -> {released:?}; key left on node 0: \
         {left_on_0}; B's first acquisition -> {:?}; B's second -> {:?}",
        first.as_ref().map(LockGuard::fencing_token),
        next.as_ref().map(LockGuard::fencing_token)
    );
    if let Ok(g) = first {
        let _ = g.release().await;
    }
    assert!(released.is_ok(), "all five nodes are up");
    assert!(!left_on_0, "the release should reach the restarted node");
    next.expect("the lock is free once A released it")
        .release()
        .await
        .expect("B releases");
}
