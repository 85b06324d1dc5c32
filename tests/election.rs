//! Leader election on real servers: the shared five local masters, and a
//! member that is a Redis Cluster beside two masters. Several managers
//! campaign in loops (resigning, dropping their leadership, proclaiming)
//! while a node is killed and restarted; a leader's process goes silent
//! (a crash, as the nodes see it); observers follow. The history checker
//! (`support/history.rs`) finds no two overlapping leaderships and no
//! term inversion.

#![allow(clippy::unwrap_used, clippy::panic)]

#[path = "support/campaigns.rs"]
mod campaigns;
#[path = "support/history.rs"]
#[allow(dead_code)]
mod history;
#[path = "support/silence.rs"]
mod silence;
mod support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use campaigns::{candidate, record, Proclaimed};
use history::History;
use quorumlock::{Leader, LockManager, LockManagerBuilder, Quorum};
use silence::silence;
use support::local_cluster::cluster;
use support::{nodes, serial, unique};

fn builder(lease: Duration) -> LockManagerBuilder {
    support::builder()
        .quorum(Quorum::Majority)
        .lease(lease)
        .renew_interval(lease / 3)
}

async fn manager(lease: Duration) -> LockManager {
    builder(lease)
        .build()
        .await
        .expect("build over the local masters")
}

/// Waits until `rx` holds what `want` accepts, at most `within`.
async fn until(
    rx: &mut tokio::sync::watch::Receiver<Option<Leader>>,
    within: Duration,
    want: impl Fn(&Option<Leader>) -> bool,
) -> Option<Leader> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if want(&rx.borrow_and_update()) {
            return rx.borrow().clone();
        }
        tokio::select! {
            r = rx.changed() => r.expect("the watch runs"),
            () = tokio::time::sleep_until(deadline) => panic!("not within {within:?}: {:?}", *rx.borrow()),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leaderships_never_overlap_and_terms_increase_while_a_node_restarts() {
    let _serial = serial().await;
    let election = unique("churn");
    let history = History::new();
    let proclaimed = Proclaimed::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for id in 0..4 {
        let m = manager(Duration::from_secs(2)).await;
        tasks.push(tokio::spawn(candidate(
            id,
            m,
            election.clone(),
            Arc::clone(&history),
            Arc::clone(&proclaimed),
            Arc::clone(&stop),
        )));
    }
    // An observer beside them: it never goes back, and reports only what
    // a campaign or a proclaim wrote, or may have written, under its term
    // (`Writes::check_observed`).
    let watcher = manager(Duration::from_secs(2)).await;
    let (seen, observer) = record(watcher.election(&*election).observe());
    for victim in [1, 3] {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        history.note("fault", format!("node {victim} killed, restarted empty"));
        nodes().kill(victim);
        tokio::time::sleep(Duration::from_millis(300)).await;
        nodes().restart(victim).unwrap();
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    stop.store(true, Ordering::Relaxed);
    let mut terms = 0;
    for t in tasks {
        terms += t.await.unwrap();
    }
    drop(watcher);
    observer.abort();
    let verdict = history.check();
    verdict.assert_clean("election churn");
    assert!(terms >= 20, "{terms} leaderships");
    let seen = seen.lock().unwrap().clone();
    let (reported, in_doubt) = proclaimed.lock().unwrap().check_observed(&seen).unwrap();
    assert!(reported >= 5, "the observer followed the leaders: {seen:?}");
    eprintln!("{terms} leaderships, {reported} reported by the observer ({in_doubt} written by a call that failed)");
}

#[tokio::test]
async fn the_next_candidate_leads_within_a_round_trip_of_a_resignation() {
    let election = unique("handover");
    let (a, b) = (
        manager(Duration::from_secs(5)).await,
        manager(Duration::from_secs(5)).await,
    );
    let first = a.election(&*election).campaign("a").await.unwrap();
    let term = first.term();
    let e = b.election(&*election);
    let next = tokio::spawn(async move {
        let me = e.campaign("b").await.unwrap();
        (Instant::now(), me)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let resigned = Instant::now();
    first.resign().await.unwrap();
    let (led, me) = next.await.unwrap();
    let took = led - resigned;
    assert!(me.is_leader() && me.term() > term);
    // A round trip, the release message, a grant and a proclaim: far below
    // any poll interval or lease on a loaded machine.
    assert!(took < Duration::from_millis(400), "{took:?}");
    let leader = b.election(&*election).leader().await.unwrap().unwrap();
    assert_eq!((leader.value(), leader.term()), ("b", me.term()));
    me.resign().await.unwrap();
}

#[tokio::test]
async fn a_crashed_leader_is_replaced_within_its_lease_and_learns_by_valid_until() {
    let election = unique("crash");
    let lease = Duration::from_secs(2);
    let ports: Vec<u16> = (0..nodes().len()).map(|i| nodes().port(i)).collect();
    let proxy = silence(&ports).await.unwrap();
    let crashing = LockManager::builder()
        .nodes(proxy.urls.clone())
        .node_timeout(Duration::from_millis(300))
        .lease(lease)
        .build()
        .await
        .unwrap();
    let old = crashing.election(&*election).campaign("old").await.unwrap();
    let survivor = manager(lease).await;
    let e = survivor.election(&*election);
    let mut rx = e.observe();
    until(&mut rx, Duration::from_secs(2), |l| {
        l.as_ref().is_some_and(|l| l.value() == "old")
    })
    .await;
    let next = tokio::spawn(async move { e.campaign("new").await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let crashed = Instant::now();
    proxy.silent.store(true, Ordering::SeqCst);
    // The old leader stops believing by its validity, before the keys can
    // expire on the nodes.
    let valid_until = old.valid_until();
    tokio::time::timeout(lease, old.lost())
        .await
        .expect("lost in time");
    assert!(Instant::now() <= valid_until + Duration::from_millis(50));
    assert!(!old.is_leader());
    let new = next.await.unwrap();
    let took = crashed.elapsed();
    assert!(new.is_leader() && new.term() > old.term());
    assert!(took < lease + Duration::from_millis(700), "{took:?}");
    let seen = until(&mut rx, Duration::from_secs(1), |l| {
        l.as_ref().is_some_and(|l| l.value() == "new")
    })
    .await;
    assert_eq!(seen.unwrap().term(), new.term());
    eprintln!("a crashed leader replaced after {took:?} (lease {lease:?})");
    new.resign().await.unwrap();
    until(&mut rx, Duration::from_secs(1), Option::is_none).await;
}

#[tokio::test]
async fn an_observer_sees_a_proclaim_and_a_resignation_at_once() {
    let election = unique("observe");
    let m = manager(Duration::from_secs(10)).await;
    let watcher = manager(Duration::from_secs(10)).await;
    let mut rx = watcher.election(&*election).observe();
    let mut twin = watcher.election(&*election).observe();
    let me = m.election(&*election).campaign("v1").await.unwrap();
    let t0 = Instant::now();
    until(&mut rx, Duration::from_secs(1), Option::is_some).await;
    let first = t0.elapsed();
    let t1 = Instant::now();
    me.proclaim("v2").await.unwrap();
    let seen = until(&mut rx, Duration::from_secs(1), |l| {
        l.as_ref().is_some_and(|l| l.value() == "v2")
    })
    .await;
    let proclaimed = t1.elapsed();
    assert_eq!(seen.unwrap().revision(), 2);
    let t2 = Instant::now();
    me.resign().await.unwrap();
    until(&mut rx, Duration::from_secs(1), Option::is_none).await;
    let resigned = t2.elapsed();
    // The renew interval is 3.3 s: each came by a message, not a poll.
    for took in [first, proclaimed, resigned] {
        assert!(
            took < Duration::from_millis(500),
            "{first:?} {proclaimed:?} {resigned:?}"
        );
    }
    assert!(twin.has_changed().unwrap() || twin.borrow().is_none());
    assert_eq!(*twin.borrow_and_update(), None);
    eprintln!("observed: election {first:?}, proclaim {proclaimed:?}, resignation {resigned:?}");
}

#[tokio::test]
async fn an_election_over_a_cluster_member_and_two_masters() {
    let urls = nodes().urls();
    let b = || {
        LockManager::builder()
            .node(urls[0].clone())
            .node(urls[1].clone())
            .cluster(cluster().urls())
            .quorum(Quorum::All)
            .node_timeout(Duration::from_millis(500))
            .lease(Duration::from_secs(5))
    };
    let (a, c) = (b().build().await.unwrap(), b().build().await.unwrap());
    let election = unique("cluster-election");
    let mut rx = c.election(&*election).observe();
    let first = a.election(&*election).campaign("a").await.unwrap();
    let seen = until(&mut rx, Duration::from_secs(2), Option::is_some)
        .await
        .unwrap();
    assert_eq!((seen.value(), seen.term()), ("a", first.term()));
    first.proclaim("a2").await.unwrap();
    until(&mut rx, Duration::from_secs(2), |l| {
        l.as_ref().is_some_and(|l| l.value() == "a2")
    })
    .await;
    let e = c.election(&*election);
    let next = tokio::spawn(async move { e.campaign("c").await.unwrap() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let term = first.term();
    let resigned = Instant::now();
    first.resign().await.unwrap();
    let second = next.await.unwrap();
    assert!(
        resigned.elapsed() < Duration::from_millis(500),
        "{:?}",
        resigned.elapsed()
    );
    assert!(second.term() > term);
    let seen = until(&mut rx, Duration::from_secs(2), |l| {
        l.as_ref().is_some_and(|l| l.value() == "c")
    })
    .await;
    assert_eq!(seen.unwrap().term(), second.term());
    assert_eq!(
        c.election(&*election)
            .leader()
            .await
            .unwrap()
            .map(|l| l.term()),
        Some(second.term())
    );
    second.resign().await.unwrap();
    until(&mut rx, Duration::from_secs(2), Option::is_none).await;
}
