//! Failover chaos on a local Redis Cluster of three masters with one
//! replica each (`support::local_cluster::replica_cluster`: started once
//! for this binary, `cluster-node-timeout` 1 s, so a replica is promoted
//! about 2.5 s after its master died). Contending clients record every
//! critical section in a history (`support/history.rs`) that is checked
//! for overlapping holders and fencing-token inversions.
//!
//! | test | fault | manager | expected |
//! | --- | --- | --- | --- |
//! | `replica_wait_is_checked_at_build` | none | bad `replica_wait` values | typed errors, no panic |
//! | `a_grant_the_replica_did_not_confirm_does_not_count` | the shard's replica stopped | `replica_wait(1, 100 ms)` | the grant fails (`NotReplicated`) and is rolled back; a hold's renewals do not count: lost by its validity |
//! | `a_grant_lost_in_a_failover_is_caught_by_the_checker_and_wait_prevents_it` | replica cut off, master killed, replica promoted | without, then with `replica_wait` | without: the checker sees two holders; with: the grant never counted, clean |
//! | `a_killed_master_under_contention` | master SIGKILLed under contention, replica promoted, old master back as a replica | `replica_wait` | clean; locking resumes |
//! | `a_stopped_master_under_contention` | master SIGSTOPped past the node timeout (failed over), then SIGCONT | `replica_wait` | clean; locking resumes |
//! | `a_member_is_reached_through_any_live_seed` | a replica killed, then another frozen; every node a seed | `build()`, and `allow_unreachable` | connected through the live seeds; locks at once |
//! | `a_frozen_masters_failover_is_followed_while_it_stays_frozen` | the lock's master SIGSTOPped and failed over, left frozen | two managers, lease 9 s | a new lock of that shard within the follow bound; the held lock kept (renewed on the promoted replica); a waiter woken by the release |
//! | `a_slot_migrated_under_contention` | the lock's slot migrated to another shard and back while held and waited for | `replica_wait` | clean |
//! | `a_migration_racing_acquisitions_and_releases_leaves_no_grant_behind` | the lock's slot migrated away and back three times, each left half-done (`TRYAGAIN`) for 600 ms, under contention | two masters and the cluster, quorum 2, lease 10 s | clean; no member holds the lock once every release returned |
//! | `an_election_keeps_one_leader_through_its_masters_failover` | the election lock's master SIGKILLed under three campaigning candidates, replica promoted, old master back | `replica_wait`, queue timeout 1 s | clean; terms increase; leaders follow after the failover; the observer never goes back |
//! | `a_shard_that_fails_its_renewals_costs_only_its_own_locks` | one shard's master paused for writes (`CLIENT PAUSE WRITE`, no failover) for three leases | no `replica_wait` | the other shards' locks kept, the paused shard's lost |
//!
//! The managers here have the cluster as their only member (quorum 1): a
//! grant lost in a failover then hands the lock to a second holder at
//! once, the hardest case for the history.
//!
//! Every test takes [`serial`] (they fault the one cluster) and leaves the
//! cluster healthy: every shard with a master and a replica in sync.
//!
//! The command line under a failover (`top --watch` and `status --watch`)
//! is tested over the same cluster by the CLI package, in
//! `cli/tests/cluster_chaos.rs`.

#![allow(clippy::unwrap_used, clippy::panic)]

mod support;
// The history checker and the contending clients, as `tests/chaos.rs`
// includes them.
#[path = "support/clients.rs"]
mod clients;
// One test at a time, managers of the cluster alone, placed names (shared
// with the CLI's failover test, cli/tests/cluster_chaos.rs).
#[path = "support/failover.rs"]
mod failover;
#[path = "support/history.rs"]
mod history;
// Candidates of one election in a loop (shared with tests/election.rs).
#[path = "support/campaigns.rs"]
mod campaigns;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clients::{critical_section, enter, ClientStats};
use failover::{build, only, placed, serial, NODE_TIMEOUT};
use history::History;
use quorumlock::{lock_slot, Error, LockManager, LockManagerBuilder, NodeErrorKind};
use support::local_cluster::{has_lock_at, raw_at, replica_cluster, LocalCluster, Migration};
use support::unique;

/// Pauses the writes of the master on `port` (`CLIENT PAUSE WRITE`, no
/// failover) for `d`, under 2.5 s (the pause's own limit, a safety net
/// should the test stop before `UNPAUSE`).
async fn pause_writes(port: u16, d: Duration) {
    let mut pause = redis::cmd("CLIENT");
    pause.arg("PAUSE").arg(2500).arg("WRITE");
    let () = pause.query_async(&mut raw_at(port).await).await.unwrap();
    tokio::time::sleep(d).await;
    let mut unpause = redis::cmd("CLIENT");
    unpause.arg("UNPAUSE");
    let () = unpause.query_async(&mut raw_at(port).await).await.unwrap();
}

const WAIT_TIMEOUT: Duration = Duration::from_millis(100);

/// [`only`], counting a grant once one replica has it.
fn waiting(lease: Duration) -> LockManagerBuilder {
    only(lease).replica_wait(1, WAIT_TIMEOUT)
}

/// How a master is taken out.
#[derive(Clone, Copy, Debug)]
enum Fault {
    /// SIGKILL, then started again (empty) once its replica is promoted:
    /// it rejoins as the new master's replica.
    Kill,
    /// SIGSTOP until its replica is promoted, then SIGCONT: it finds
    /// itself failed over and becomes a replica.
    Stop,
}

/// Takes out `master` (which serves `slot`) by `fault`, waits until its
/// replica is promoted, brings it back as a replica and waits until the
/// cluster is healthy; notes each step in `history`. Returns the new master.
async fn fail_over(slot: u16, master: u16, fault: Fault, history: &History) -> u16 {
    let c = replica_cluster();
    let i = c.index_of(master);
    let started = Instant::now();
    history.note("fault", format!("{fault:?} master {master}"));
    match fault {
        Fault::Kill => c.nodes.kill(i),
        Fault::Stop => c.nodes.stop(i),
    }
    let promoted = c.wait_promoted(slot, master, Duration::from_secs(20)).await;
    history.note("fault", format!("{promoted} promoted"));
    match fault {
        Fault::Kill => c.nodes.restart(i).expect("restart the old master"),
        Fault::Stop => c.nodes.resume(i),
    }
    c.wait_healthy(Duration::from_secs(30)).await;
    history.note("fault", format!("{master} back as a replica"));
    eprintln!(
        "{fault:?} {master}: {promoted} promoted, healthy after {:?}",
        started.elapsed()
    );
    promoted
}

/// Four clients, each over its own manager with `replica_wait` (lease
/// 2 s), taking one lock again and again (waiting up to 1 s, working 20 to
/// 100 ms; client 0 for 600 ms, so the lock is held most of the time and
/// waited for), recorded in one history.
struct Contention {
    history: Arc<History>,
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<ClientStats>>,
}

impl Contention {
    async fn start(name: &str) -> Self {
        let history = History::new();
        let stop = Arc::new(AtomicBool::new(false));
        let mut clients = Vec::new();
        for i in 0..4u64 {
            let m = build(waiting(Duration::from_secs(2))).await;
            let name = name.to_owned();
            let (history, stop) = (Arc::clone(&history), Arc::clone(&stop));
            clients.push(tokio::spawn(async move {
                let mut stats = ClientStats::default();
                let client = format!("c{i}");
                let mut k = 0u64;
                while !stop.load(Ordering::SeqCst) {
                    k += 1;
                    let work = if i == 0 {
                        Duration::from_millis(600)
                    } else {
                        Duration::from_millis(20 + (k * 37 + i * 11) % 80)
                    };
                    let wait = Duration::from_secs(1);
                    critical_section(&m, &name, &client, &history, wait, work, &mut stats).await;
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
                stats
            }));
        }
        Self {
            history,
            stop,
            clients,
        }
    }

    /// Stops the clients; the history must be clean, the lock taken at
    /// least 5 times, and at least once after `since`.
    async fn finish(self, label: &str, since: Instant) {
        self.stop.store(true, Ordering::SeqCst);
        let mut stats = ClientStats::default();
        for c in self.clients {
            stats.add(&c.await.expect("a client panicked"));
        }
        let v = self.history.check();
        v.assert_clean(label);
        eprintln!("{label}: {stats:?}");
        assert!(stats.acquisitions >= 5, "{stats:?}");
        let since = self.history.at(since);
        assert!(
            self.history.intervals().iter().any(|i| i.entered > since),
            "locking went on after the fault: {v}"
        );
    }
}

#[tokio::test]
async fn replica_wait_is_checked_at_build() {
    let invalid = |b: LockManagerBuilder| async move {
        match b.build().await {
            Err(Error::InvalidInput { what, reason }) => {
                assert_eq!(what, "replica wait", "{reason}");
                reason
            }
            other => panic!("want InvalidInput, got {other:?}"),
        }
    };
    let ms = Duration::from_millis;
    let why = invalid(only(ms(900)).replica_wait(0, ms(50))).await;
    assert!(why.contains("0 replicas"), "{why}");
    let why = invalid(only(ms(900)).replica_wait(1, Duration::ZERO)).await;
    assert!(why.contains("zero"), "{why}");
    for timeout in [NODE_TIMEOUT, Duration::MAX] {
        let why = invalid(only(ms(900)).replica_wait(1, timeout)).await;
        assert!(why.contains("below the node timeout"), "{why}");
    }
    let config = |b: LockManagerBuilder| async move {
        match b.build().await {
            Err(Error::Config(why)) => why,
            other => panic!("want Config, got {other:?}"),
        }
    };
    // More replicas than a shard has.
    let why = config(only(ms(900)).replica_wait(2, ms(50))).await;
    assert!(why.contains("asks for 2 replica(s)"), "{why}");
    let why = config(only(ms(900)).replica_wait(u32::MAX, ms(50))).await;
    assert!(why.contains("replica_wait"), "{why}");
    // No cluster or Sentinel member to apply it to.
    let masters = LockManager::builder()
        .node(replica_cluster().urls()[0].clone())
        .replica_wait(1, ms(50));
    let why = config(masters).await;
    assert!(why.contains("cluster and Sentinel members"), "{why}");
    // And the manager it builds says what it waits for.
    let m = build(waiting(ms(900))).await;
    let wait = m.config().replica_wait.expect("set");
    assert_eq!((wait.replicas, wait.timeout), (1, WAIT_TIMEOUT));
}

/// With `replica_wait`, a grant counts once the shard's replica has it:
/// right after `lock()` returns, the replica holds the key. With the
/// replica stopped, the master grants but `WAIT` times out: the call fails
/// with `NotReplicated`, the attempt fails and its grant is rolled back on
/// the master (a manager without `replica_wait` gets the lock there). A
/// hold whose renewals the replica does not confirm is lost by its
/// validity's end.
#[tokio::test]
async fn a_grant_the_replica_did_not_confirm_does_not_count() {
    let _serial = serial().await;
    let c = replica_cluster();
    let (name, _, master, replica) = placed("unconfirmed").await;
    let on = build(waiting(Duration::from_millis(450))).await;
    let off = build(only(Duration::from_millis(450))).await;

    let g = on
        .lock(&name)
        .await
        .expect("lock, confirmed by the replica");
    assert!(
        has_lock_at(replica, &name).await,
        "the replica has the grant"
    );
    g.release().await.expect("release");

    c.nodes.stop(c.index_of(replica));
    let err = on
        .try_lock(&name, Duration::ZERO)
        .await
        .expect_err("the replica cannot confirm the grant");
    c.nodes.resume(c.index_of(replica));
    match &err {
        Error::Unavailable {
            failures, granted, ..
        } => {
            assert_eq!(*granted, 0, "{err}");
            assert_eq!(failures.len(), 1, "{err}");
            assert_eq!(failures[0].kind, NodeErrorKind::NotReplicated, "{err}");
            assert!(failures[0].message.contains("WAIT 1 100"), "{err}");
        }
        other => panic!("want Unavailable, got {other:?}"),
    }
    assert!(
        !has_lock_at(master, &name).await,
        "the grant was rolled back"
    );
    let g = off
        .try_lock(&name, Duration::ZERO)
        .await
        .expect("without replica_wait the master's grant counts");
    g.release().await.expect("release");

    // Renewals the replica does not confirm do not count.
    let g = on.lock(&name).await.expect("lock");
    c.nodes.stop(c.index_of(replica));
    let lost = tokio::time::timeout(Duration::from_millis(800), g.lost()).await;
    c.nodes.resume(c.index_of(replica));
    assert!(lost.is_ok(), "lost by its validity: {g:?}");
    assert!(on.watchdog_stats().node_errors > 0);
    c.wait_healthy(Duration::from_secs(30)).await;
    let _ = g.release().await;
}

/// The hazard `replica_wait` closes, shown twice. The shard's replica is
/// cut off (stopped, its replication link killed on the master), A takes
/// the lock, the master is killed and the replica promoted without A's
/// grant, the old master comes back as its replica; B then tries. Without
/// `replica_wait` A's grant counted: B gets the lock while A still
/// believes it holds it (its first renewal, which would find the key gone,
/// is 9 s away), and the checker reports the overlap and the repeated
/// token. With it, A's grant never counted (`WAIT` timed out), so only B
/// holds: clean.
#[tokio::test]
async fn a_grant_lost_in_a_failover_is_caught_by_the_checker_and_wait_prevents_it() {
    let _serial = serial().await;
    let lease = Duration::from_secs(10);
    let off = || only(lease).renew_interval(Duration::from_secs(9));
    let on = || off().replica_wait(1, WAIT_TIMEOUT);

    // Without replica_wait: two holders.
    let (a, b) = (build(off()).await, build(off()).await);
    let history = lose_a_grant_in_a_failover(&a, &b, "lost-grant").await;
    let v = history.check().print("failover without replica_wait");
    assert!(v.overlaps >= 1, "the checker flags the two holders: {v}");
    // The slot's fence counter went with the grant: B's token repeats A's.
    assert!(v.inversions >= 1, "and the repeated token: {v}");
    let (first, second) = v.first_overlap.clone().unwrap();
    assert_eq!((first.client.as_str(), second.client.as_str()), ("A", "B"));

    // With replica_wait: A never held it.
    let (a, b) = (build(on()).await, build(on()).await);
    let history = lose_a_grant_in_a_failover(&a, &b, "kept-grant").await;
    let v = history.check();
    v.assert_clean("failover with replica_wait");
    assert_eq!((v.acquisitions, v.holders), (1, 1), "{v}");
}

/// The scenario of the test above for managers `a` and `b`: returns the
/// history of the lock's holders.
async fn lose_a_grant_in_a_failover(a: &LockManager, b: &LockManager, stem: &str) -> Arc<History> {
    let c = replica_cluster();
    let history = History::new();
    let (name, slot, master, replica) = placed(stem).await;
    history.note("fault", format!("cut off replica {replica}"));
    c.nodes.stop(c.index_of(replica));
    let mut kill = redis::cmd("CLIENT");
    kill.arg("KILL").arg("TYPE").arg("replica");
    let killed: i64 = kill.query_async(&mut raw_at(master).await).await.unwrap();
    assert_eq!(killed, 1, "the replica's link to {master}");

    let held = a.try_lock(&name, Duration::ZERO).await;
    let mut hold = match &held {
        Ok(g) => Some(enter(&history, "A", g)),
        Err(e) => {
            assert!(e.is_unavailable(), "{e}");
            history.note("A", format!("not granted: {e}"));
            None
        }
    };
    history.note("fault", format!("kill master {master}"));
    c.nodes.kill(c.index_of(master));
    c.nodes.resume(c.index_of(replica));
    let promoted = c.wait_promoted(slot, master, Duration::from_secs(20)).await;
    history.note("fault", format!("{promoted} promoted"));
    c.nodes
        .restart(c.index_of(master))
        .expect("restart the old master");
    c.wait_healthy(Duration::from_secs(30)).await;
    history.note("fault", format!("{master} back as a replica"));

    let deadline = Instant::now() + Duration::from_secs(10);
    let gb = loop {
        match b.try_lock(&name, Duration::ZERO).await {
            Ok(g) => break g,
            Err(e) => assert!(
                Instant::now() < deadline,
                "B never got the lock after the failover: {e}"
            ),
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let hold_b = enter(&history, "B", &gb);
    if let (Some(mut h), Ok(ga)) = (hold.take(), &held) {
        // A leaves now, still believing unless told otherwise: its lease
        // has seconds left and its watchdog has not yet looked.
        if ga.is_lost() {
            h.lost_now();
        }
        h.exit(ga.valid_until());
    }
    hold_b.exit(gb.valid_until());
    let _ = gb.release().await;
    if let Ok(ga) = held {
        let _ = ga.release().await;
    }
    history
}

/// A contended lock whose shard's master is taken out by `fault`: the
/// replica is promoted (with every grant that counted, since `WAIT`
/// confirmed each), the old master rejoins as its replica, and the
/// history stays clean; locking resumes once the shard has a replica
/// again.
async fn contended_failover(stem: &str, fault: Fault) {
    let _serial = serial().await;
    let (name, slot, master, _) = placed(stem).await;
    let contention = Contention::start(&name).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    fail_over(slot, master, fault, &contention.history).await;
    let healed = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let label = format!("{fault:?} under contention");
    contention.finish(&label, healed).await;
}

#[tokio::test]
async fn a_killed_master_under_contention() {
    contended_failover("killed", Fault::Kill).await;
}

#[tokio::test]
async fn a_stopped_master_under_contention() {
    contended_failover("stopped", Fault::Stop).await;
}

/// The lock's slot is migrated to another shard and back while clients
/// contend for it and wait for it: a clean history.
/// One seed down does not make the member unreachable: with a replica
/// killed (refusing connections), then another frozen (SIGSTOP: it
/// accepts and answers nothing), `build()` over every seed connects
/// through the others, checks what they tell, and locks; so does a
/// manager with `allow_unreachable` (which the CLI uses), at once. Before:
/// `Error::Connect` at `build()`, and with `allow_unreachable` the member
/// was never connected while the seed stayed down.
#[tokio::test]
async fn a_member_is_reached_through_any_live_seed() {
    let _serial = serial().await;
    let c = replica_cluster();
    let (name, _, _, replica) = placed("seed-down").await;
    let connect = Duration::from_secs(1);
    for fault in [Fault::Kill, Fault::Stop] {
        let i = c.index_of(replica);
        match fault {
            Fault::Kill => c.nodes.kill(i),
            Fault::Stop => c.nodes.stop(i),
        }
        let strict = only(Duration::from_secs(5))
            .connect_timeout(connect)
            .build()
            .await
            .unwrap_or_else(|e| panic!("build with one seed down ({fault:?}): {e}"));
        let g = strict.lock(&name).await.expect("lock");
        g.release().await.expect("release");
        let lazy = only(Duration::from_secs(5))
            .connect_timeout(connect)
            .allow_unreachable(true)
            .build()
            .await
            .expect("build");
        let g = lazy
            .try_lock(&name, Duration::ZERO)
            .await
            .unwrap_or_else(|e| panic!("used at once with one seed down ({fault:?}): {e}"));
        g.release().await.expect("release");
        match fault {
            Fault::Kill => c.nodes.restart(i).expect("restart the replica"),
            Fault::Stop => c.nodes.resume(i),
        }
        c.wait_healthy(Duration::from_secs(30)).await;
    }
}

/// A name that is not `name`, served by the master on `port`.
fn same_shard_name(stem: &str, port: u16) -> String {
    let c = replica_cluster();
    loop {
        let n = unique(stem);
        if c.port_of_slot(lock_slot(&n).unwrap()) == port {
            return n;
        }
    }
}

/// A master frozen (SIGSTOP: it answers nothing and closes nothing, so
/// redis-rs's client sees no `MOVED` and no I/O error) is failed over by
/// the cluster; while it stays frozen, the member follows within the
/// documented bound (docs/CLUSTER.md: two probe spacings plus a connect, here 2 × 1 s + 1 s,
/// from the promotion): a new lock of that shard is granted, the lock
/// held across the failover is renewed on the promoted replica and kept,
/// and a waiter on it is woken by its release (the sharded subscription
/// followed). Before, every call of that shard went to the frozen node
/// until it came back: the new lock failed, and the held one was lost.
#[tokio::test]
async fn a_frozen_masters_failover_is_followed_while_it_stays_frozen() {
    let _serial = serial().await;
    let c = replica_cluster();
    let (name, slot, master, _) = placed("frozen").await;
    let other = same_shard_name("frozen-new", master);
    let connect = Duration::from_secs(1);
    let lease = Duration::from_secs(9);
    let a = build(only(lease).connect_timeout(connect)).await;
    let b = build(only(lease).connect_timeout(connect)).await;
    let g = a.lock(&name).await.expect("lock");
    // `b` has used the shard before the freeze.
    b.try_lock(&other, Duration::ZERO)
        .await
        .expect("lock")
        .release()
        .await
        .expect("release");

    c.nodes.stop(c.index_of(master));
    let promoted = c.wait_promoted(slot, master, Duration::from_secs(20)).await;
    let at = Instant::now();
    let fresh = b
        .try_lock(&other, Duration::from_secs(8))
        .await
        .expect("a new lock of the failed-over shard, its old master still frozen");
    let took = at.elapsed();
    let bound = 3 * connect + NODE_TIMEOUT + Duration::from_millis(500);
    assert!(
        took < bound,
        "followed {took:?} after the promotion (bound {bound:?})"
    );
    fresh.release().await.expect("release");

    // The held lock: renewed on the promoted replica, not lost.
    tokio::time::sleep(lease / 2).await;
    assert!(!g.is_lost(), "the held lock was kept across the failover");
    assert!(
        has_lock_at(promoted, &name).await,
        "held on the promoted replica"
    );

    // A waiter on it is woken by its release.
    let waiter = {
        let (b, name) = (b.clone(), name.clone());
        tokio::spawn(async move { b.lock(&name).await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiter.is_finished(), "held");
    let released = Instant::now();
    g.release().await.expect("release on the promoted replica");
    let got = tokio::time::timeout(Duration::from_secs(2), waiter)
        .await
        .expect("the waiter is woken")
        .unwrap()
        .expect("lock");
    eprintln!(
        "frozen {master}: {promoted} promoted; new lock {took:?} after; waiter woken {:?} after the release",
        released.elapsed()
    );
    got.release().await.expect("release");
    c.nodes.resume(c.index_of(master));
    c.wait_healthy(Duration::from_secs(30)).await;
}

#[tokio::test]
async fn a_slot_migrated_under_contention() {
    let _serial = serial().await;
    let c: &LocalCluster = replica_cluster();
    let (name, slot, master, _) = placed("migrated").await;
    let to = *c
        .master_ports()
        .iter()
        .find(|&&p| p != master)
        .expect("another master");
    let contention = Contention::start(&name).await;
    let history = &contention.history;
    tokio::time::sleep(Duration::from_millis(500)).await;
    history.note("fault", format!("migrate slot {slot} to {to}"));
    Migration::run(c, slot, to).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    history.note("fault", format!("migrate slot {slot} back to {master}"));
    Migration::run(c, slot, master).await;
    let back = Instant::now();
    tokio::time::sleep(Duration::from_millis(500)).await;
    contention
        .finish("slot migrated under contention", back)
        .await;
}

/// Whether the local master on `port` holds a key of the lock `name`.
async fn master_has_lock(port: u16, name: &str) -> bool {
    let key = quorumlock::Layout::Quorumlock
        .lock_key("quorumlock:", name)
        .unwrap();
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
    let mut c = client.get_multiplexed_async_connection().await.unwrap();
    redis::cmd("EXISTS")
        .arg(&key)
        .query_async::<i64>(&mut c)
        .await
        .unwrap()
        == 1
}

/// A migration racing acquisitions and releases: four clients over two
/// masters and the replica cluster (quorum 2 of 3, lease 10 s, so that the
/// masters make the quorum while the cluster's calls wait out `TRYAGAIN`)
/// take one lock again and again while its slot is migrated away and back
/// three times, each migration left half-done (keys moved, slot not yet
/// reassigned) for 600 ms. The history is clean (no overlap, no token
/// inversion), and once every client's last release returned and every
/// call's patience ran out, no member holds the lock: no grant outlived
/// its hold's release (each would hold a member for a 10 s lease).
#[tokio::test]
async fn a_migration_racing_acquisitions_and_releases_leaves_no_grant_behind() {
    let _serial = serial().await;
    let c: &LocalCluster = replica_cluster();
    let (name, slot, master, _) = placed("racing").await;
    let to = *c
        .master_ports()
        .iter()
        .find(|&&p| p != master)
        .expect("another master");
    let masters = support::nodes();
    let patience = Duration::from_secs(1);
    let history = History::new();
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for i in 0..4u64 {
        let m = build(
            LockManager::builder()
                .node(masters.urls()[0].clone())
                .node(masters.urls()[1].clone())
                .cluster(c.urls())
                .quorum(quorumlock::Quorum::Majority)
                .lease(Duration::from_secs(10))
                .node_timeout(patience),
        )
        .await;
        let name = name.clone();
        let (history, stop) = (Arc::clone(&history), Arc::clone(&stop));
        clients.push(tokio::spawn(async move {
            let mut stats = ClientStats::default();
            let client = format!("c{i}");
            let mut k = 0u64;
            while !stop.load(Ordering::SeqCst) {
                k += 1;
                let work = Duration::from_millis(5 + (k * 37 + i * 11) % 30);
                let wait = Duration::from_millis(500);
                critical_section(&m, &name, &client, &history, wait, work, &mut stats).await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            stats
        }));
    }
    for round in 0..3 {
        for (from, into) in [(master, to), (to, master)] {
            tokio::time::sleep(Duration::from_millis(200)).await;
            history.note(
                "fault",
                format!("round {round}: slot {slot} {from} -> {into}, half-done"),
            );
            let m = Migration::begin(c, slot, into).await;
            m.move_keys().await;
            tokio::time::sleep(Duration::from_millis(600)).await;
            m.finish().await;
        }
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    let mut stats = ClientStats::default();
    for client in clients {
        stats.add(&client.await.expect("a client panicked"));
    }
    history
        .check()
        .assert_clean("a migration racing acquisitions and releases");
    eprintln!("racing migration: {stats:?}");
    assert!(stats.acquisitions >= 10, "{stats:?}");
    // Every call's pauses end within its patience.
    tokio::time::sleep(patience + Duration::from_millis(300)).await;
    let mut left = Vec::new();
    let owner = c.port_of_slot(slot);
    if has_lock_at(owner, &name).await {
        left.push(format!("cluster node {owner}"));
    }
    for i in 0..2 {
        if master_has_lock(masters.port(i), &name).await {
            left.push(format!("master {}", masters.port(i)));
        }
    }
    assert!(
        left.is_empty(),
        "grants left after every release returned: {left:?}"
    );
}

/// One shard that does not answer a renewal wave costs only the locks it
/// serves. Its master is paused for writes (`CLIENT PAUSE WRITE` blocks
/// scripts but not the cluster bus: no failover) for three leases: a
/// manager of the cluster alone keeps the locks of the other two shards,
/// renewed by their pipelines of each wave, and loses those of the paused
/// shard by their validity. The shards' script caches are flushed first,
/// so the first wave of the pause meets `NOSCRIPT` on every shard. (A wave
/// used to fail the whole member when one shard failed, and, after that,
/// still when the shards lacked the renew script: every lock was lost.)
#[tokio::test]
async fn a_shard_that_fails_its_renewals_costs_only_its_own_locks() {
    let _serial = serial().await;
    let c = replica_cluster();
    let lease = Duration::from_millis(600);
    let m = build(only(lease)).await;
    let masters = c.master_ports();
    let mut held = Vec::new();
    for (k, &port) in masters.iter().enumerate() {
        for i in 0.. {
            let name = unique(&format!("shard{k}-{i}"));
            if c.port_of_slot(lock_slot(&name).unwrap()) == port {
                held.push((port, m.lock(&name).await.expect("lock")));
                break;
            }
        }
    }
    let paused = masters[0];
    // Every shard forgets its scripts: the next wave meets `NOSCRIPT` on
    // every shard while one of them is paused (as the first wave after the
    // shards started does). The shards that answer load the script and
    // renew within the wave, not after the paused one timed out.
    for &port in &masters {
        let mut flush = redis::cmd("SCRIPT");
        flush.arg("FLUSH");
        let () = flush.query_async(&mut raw_at(port).await).await.unwrap();
    }
    pause_writes(paused, lease * 3).await;
    for (port, g) in &held {
        if *port == paused {
            assert!(g.is_lost(), "{} on the paused shard is lost", g.name());
        } else {
            assert!(
                g.is_held() && !g.is_lost(),
                "{} on shard {port} is kept while {paused} is paused",
                g.name()
            );
        }
    }
    assert!(m.watchdog_stats().node_errors > 0);
    for (_, g) in held {
        let _ = g.release().await;
    }
}

/// The same with 600 locks, more than one wave a tick: the waves follow
/// the slots, each on one shard, so the paused shard's waves fail whole.
/// The member is asked again once the waves reach the next shard: the
/// locks of the other two shards are kept. (While a member that failed a
/// wave stayed down for the rest of the tick, the paused shard, first in
/// slot order, cost every lock.)
#[tokio::test]
async fn a_shard_that_fails_whole_waves_costs_only_its_own_locks() {
    let _serial = serial().await;
    let c = replica_cluster();
    let lease = Duration::from_millis(600);
    let m = build(only(lease)).await;
    let topology = c.topology(&[]).await;
    let paused = topology.master_of(0).expect("slot 0 served");
    let mut held = Vec::new();
    for i in 0..600 {
        let name = unique(&format!("waves{i}"));
        let port = topology.master_of(lock_slot(&name).unwrap()).unwrap();
        let g = m.try_lock(&name, Duration::ZERO).await.expect("lock");
        held.push((port, g));
    }
    pause_writes(paused, lease * 3).await;
    let kept = held
        .iter()
        .filter(|(p, g)| *p != paused && g.is_held() && !g.is_lost())
        .count();
    let others = held.iter().filter(|(p, _)| *p != paused).count();
    let lost_paused = held
        .iter()
        .filter(|(p, g)| *p == paused && g.is_lost())
        .count();
    assert_eq!(kept, others, "locks of the other shards kept");
    assert_eq!(lost_paused, held.len() - others, "the paused shard's lost");
    for (_, g) in held {
        let _ = g.release().await;
    }
}

/// What `replica_wait(1, 100 ms)` costs (a measurement, not a check; run
/// it by name, see docs/BENCHMARKS.md): the latency of `try_lock` on a
/// healthy cluster, without and with it, interleaved in rounds of 50, and
/// the lock-and-release throughput of 16 tasks on distinct names.
#[tokio::test]
#[ignore = "a measurement: cargo test --test cluster_chaos -- --ignored replica_wait_cost"]
async fn replica_wait_cost() {
    let _serial = serial().await;
    let lease = Duration::from_secs(30);
    let (off, on) = (build(only(lease)).await, build(waiting(lease)).await);
    for m in [&off, &on] {
        for _ in 0..50 {
            m.lock(&unique("warm"))
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
        }
    }
    let mut lat: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for round in 0..20 {
        for k in [round % 2, 1 - round % 2] {
            let m = [&off, &on][k];
            for _ in 0..50 {
                let name = unique("cost");
                let t = Instant::now();
                let g = m.try_lock(&name, Duration::ZERO).await.unwrap();
                lat[k].push(t.elapsed().as_secs_f64() * 1e3);
                g.release().await.unwrap();
            }
        }
    }
    let pct = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p) as usize]
    };
    let mut ops = [0u64; 2];
    for round in 0..4 {
        let k = round % 2;
        let m = [&off, &on][k];
        let until = Instant::now() + Duration::from_millis(1500);
        let tasks: Vec<_> = (0..16)
            .map(|_| {
                let m = m.clone();
                tokio::spawn(async move {
                    let mut n = 0u64;
                    while Instant::now() < until {
                        let g = m.lock(&unique("tput")).await.unwrap();
                        g.release().await.unwrap();
                        n += 1;
                    }
                    n
                })
            })
            .collect();
        for t in tasks {
            ops[k] += t.await.unwrap();
        }
    }
    let [mut a, mut b] = lat;
    let (a50, a90, a99) = (pct(&mut a, 0.5), pct(&mut a, 0.9), pct(&mut a, 0.99));
    let (b50, b90, b99) = (pct(&mut b, 0.5), pct(&mut b, 0.9), pct(&mut b, 0.99));
    let (ta, tb) = (ops[0] as f64 / 3.0, ops[1] as f64 / 3.0);
    eprintln!("try_lock ms without replica_wait: p50 {a50:.3} p90 {a90:.3} p99 {a99:.3}");
    eprintln!("try_lock ms with replica_wait(1): p50 {b50:.3} p90 {b90:.3} p99 {b99:.3}");
    eprintln!(
        "ratio with/without: p50 {:.2} p90 {:.2} p99 {:.2}",
        b50 / a50,
        b90 / a90,
        b99 / a99
    );
    eprintln!(
        "16 tasks lock+release: {ta:.0}/s without, {tb:.0}/s with: {:.2}x",
        tb / ta
    );
}

/// Three candidates campaign for one election in a loop (resigning,
/// dropping, proclaiming) while the master of the election lock's shard
/// is killed and its replica promoted: no two leaderships overlap, terms
/// increase, leaders follow after the failover, and an observer never goes
/// back nor reports a value no campaign or proclaim wrote, or may have
/// written, under its term (a campaign that failed once its record was
/// written, its reply lost to the failover: `Writes::check_observed`).
#[tokio::test]
async fn an_election_keeps_one_leader_through_its_masters_failover() {
    let _serial = serial().await;
    let c = replica_cluster();
    let election = unique("failover-election");
    let slot = lock_slot(&format!("election:{election}")).unwrap();
    let master = c.port_of_slot(slot);
    let history = History::new();
    let proclaimed = campaigns::Proclaimed::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for id in 0..3 {
        // A campaign dropped while the master was down may leave its place
        // in the queue (its exit failed): the queue skips it after the
        // queue timeout, 1 s here, as it skips a dead candidate.
        let b = waiting(Duration::from_secs(2)).queue_timeout(Duration::from_secs(1));
        let m = build(b).await;
        tasks.push(tokio::spawn(campaigns::candidate(
            id,
            m,
            election.clone(),
            Arc::clone(&history),
            Arc::clone(&proclaimed),
            Arc::clone(&stop),
        )));
    }
    let watcher = build(only(Duration::from_secs(2))).await;
    let (seen, observer) = campaigns::record(watcher.election(&*election).observe());
    tokio::time::sleep(Duration::from_millis(800)).await;
    fail_over(slot, master, Fault::Kill, &history).await;
    let healed = Instant::now();
    // Past a queue timeout and a lease: what the failover left behind
    // (queue places, a leadership whose renewals failed) is gone by then.
    tokio::time::sleep(Duration::from_millis(3500)).await;
    stop.store(true, Ordering::SeqCst);
    let mut terms = 0;
    for t in tasks {
        terms += t.await.unwrap();
    }
    drop(watcher);
    observer.abort();
    history.check().assert_clean("election through a failover");
    let after = history.at(healed);
    assert!(
        history.intervals().iter().any(|i| i.entered > after),
        "leaders followed after the failover"
    );
    let seen = seen.lock().unwrap().clone();
    let (reported, in_doubt) = proclaimed.lock().unwrap().check_observed(&seen).unwrap();
    eprintln!(
        "{terms} leaderships through the failover; the observer reported {reported}, \
         {in_doubt} of them written by a call that failed"
    );
}
