//! The semaphore on real servers: three masters each manager sees only two
//! of (the {A,B}/{B,C}/{A,C} case a counter per member would over-admit),
//! many tasks over several managers hammering a small count (the history
//! checker, `support/history.rs`, finds at most `P` permits believed at
//! once and every slot's tokens increasing), permits as leases (a silent
//! holder's permit taken after its lease; `available` counting), a count
//! asked two ways and other bad input, a waiter woken by the release
//! message, and a member that is a Redis Cluster beside two masters.

#![allow(clippy::unwrap_used, clippy::panic)]

#[path = "support/history.rs"]
#[allow(dead_code)]
mod history;
#[path = "support/silence.rs"]
mod silence;
mod support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use history::History;
use quorumlock::{Error, LockManager, LockManagerBuilder, Permit, Quorum, Semaphore, MAX_PERMITS};
use silence::silence;
use support::local_cluster::cluster;
use support::{nodes, unique};

async fn build(b: LockManagerBuilder) -> LockManager {
    b.build().await.expect("build a manager")
}

/// A port nothing listens on.
async fn dead_port() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Holds `permit` in the history as `client` for `hold`, then releases it.
async fn hold(history: &Arc<History>, client: &str, permit: Permit, hold: Duration) {
    let owner = format!("slot {}", permit.slot());
    let h = history.enter(client, &owner, permit.fencing_token(), permit.valid_until());
    tokio::time::sleep(hold).await;
    h.exit(permit.valid_until());
    permit.release().await.expect("release a permit");
}

/// Every slot's holds alone, checked as a lock's: one holder per slot at a
/// time, its tokens increasing.
fn check_slots(history: &History, label: &str) {
    let intervals = history.intervals();
    let events = history.events();
    let mut slots: Vec<&str> = intervals.iter().map(|i| i.owner.as_str()).collect();
    slots.sort_unstable();
    slots.dedup();
    for slot in slots {
        let mine: Vec<_> = intervals
            .iter()
            .filter(|i| i.owner == slot)
            .cloned()
            .collect();
        history::check(&mine, &events).assert_clean(&format!("{label}, {slot}"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_managers_that_each_see_two_of_three_masters_hold_at_most_two_permits() {
    let urls = nodes().urls();
    let name = unique("pairs");
    let mut sems = Vec::new();
    for blind in 0..3 {
        let mut members = urls[..3].to_vec();
        members[blind] = format!("redis://127.0.0.1:{}", dead_port().await);
        let m = build(
            LockManager::builder()
                .nodes(members)
                .allow_unreachable(true)
                .quorum(Quorum::Majority)
                .node_timeout(Duration::from_millis(300))
                .connect_timeout(Duration::from_millis(300)),
        )
        .await;
        sems.push(m.semaphore(&name, 2).expect("a semaphore"));
    }
    let history = History::new();
    // Blind to A, then to B: their permits stand on {B,C} and {A,C}.
    let p0 = sems[0]
        .try_acquire(Duration::from_secs(2))
        .await
        .expect("p0");
    let h0 = history.enter("sees BC", "a", p0.fencing_token(), p0.valid_until());
    let p1 = sems[1]
        .try_acquire(Duration::from_secs(2))
        .await
        .expect("p1");
    let h1 = history.enter("sees AC", "b", p1.fencing_token(), p1.valid_until());
    assert_ne!(p0.slot(), p1.slot());
    // Blind to C, it sees each slot taken on one of its two members.
    let started = Instant::now();
    let third = sems[2].try_acquire(Duration::from_millis(500)).await;
    assert!(
        matches!(third, Err(Error::Contended { .. })),
        "a third permit: {third:?}"
    );
    eprintln!(
        "pairs: the third manager refused after {:?}",
        started.elapsed()
    );
    for s in &sems {
        assert_eq!(s.available().await.expect("available"), 0);
    }
    let waiter = {
        let s = sems[2].clone();
        tokio::spawn(async move {
            let p = s.acquire().await;
            (p, Instant::now())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiter.is_finished(), "the third waits while two are held");
    h0.exit(p0.valid_until());
    let released = Instant::now();
    p0.release().await.expect("release p0");
    let (p2, got) = tokio::time::timeout(Duration::from_secs(3), waiter)
        .await
        .expect("the third gets the freed permit")
        .expect("the waiter runs");
    let p2 = p2.expect("a permit");
    let h2 = history.enter("sees AB", "c", p2.fencing_token(), p2.valid_until());
    eprintln!(
        "pairs: the third got slot {} {:?} after the release",
        p2.slot(),
        got.saturating_duration_since(released)
    );
    h1.exit(p1.valid_until());
    h2.exit(p2.valid_until());
    let capacity = history.check_capacity(2);
    capacity.assert_clean("pairs");
    assert_eq!(capacity.most, 2);
    p1.release().await.expect("release p1");
    p2.release().await.expect("release p2");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn many_tasks_over_three_managers_never_hold_more_than_three_permits() {
    const PERMITS: u32 = 3;
    const TASKS: usize = 24;
    const ROUNDS: usize = 15;
    let name = unique("hammer");
    let history = History::new();
    let errors = Arc::new(AtomicUsize::new(0));
    let mut sems = Vec::new();
    for _ in 0..3 {
        let m = build(support::builder().quorum(Quorum::Majority)).await;
        sems.push(m.semaphore(&name, PERMITS).expect("a semaphore"));
    }
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..TASKS {
        let sem: Semaphore = sems[t % sems.len()].clone();
        let history = Arc::clone(&history);
        let errors = Arc::clone(&errors);
        tasks.push(tokio::spawn(async move {
            let client = format!("task {t}");
            for _ in 0..ROUNDS {
                match sem.acquire().await {
                    Ok(p) => hold(&history, &client, p, Duration::from_millis(3)).await,
                    Err(e) => {
                        eprintln!("{client}: {e}");
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("the tasks finish")
            .expect("a task runs");
    }
    let elapsed = started.elapsed();
    let capacity = history.check_capacity(PERMITS as usize);
    capacity.assert_clean("hammer");
    check_slots(&history, "hammer");
    assert_eq!(errors.load(Ordering::Relaxed), 0);
    assert_eq!(capacity.acquisitions, TASKS * ROUNDS);
    eprintln!(
        "hammer: {} acquisitions in {elapsed:?} ({:.0}/s), at most {} held at once",
        capacity.acquisitions,
        capacity.acquisitions as f64 / elapsed.as_secs_f64(),
        capacity.most
    );
    assert_eq!(sems[0].available().await.expect("available"), PERMITS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_silent_holders_permit_is_taken_after_its_lease_and_available_counts() {
    let lease = Duration::from_millis(1500);
    let ports: Vec<u16> = (0..nodes().len()).map(|i| nodes().port(i)).collect();
    let proxies = silence(&ports).await.expect("proxies");
    let doomed = build(
        LockManager::builder()
            .nodes(proxies.urls.clone())
            .node_timeout(Duration::from_millis(300))
            .lease(lease),
    )
    .await;
    let m = build(support::builder().lease(lease)).await;
    let name = unique("lease");
    let sem = m.semaphore(&name, 2).expect("a semaphore");
    assert_eq!(sem.available().await.expect("available"), 2);
    let mine = sem.acquire().await.expect("a permit");
    assert_eq!(sem.available().await.expect("available"), 1);
    let theirs = doomed
        .semaphore(&name, 2)
        .expect("a semaphore")
        .acquire()
        .await
        .expect("the other permit");
    assert_eq!(sem.available().await.expect("available"), 0);
    // Its process goes silent: no release, no renewal.
    proxies.silent.store(true, Ordering::SeqCst);
    let silenced = Instant::now();
    let next = tokio::time::timeout(Duration::from_secs(5), sem.acquire())
        .await
        .expect("the lease runs out")
        .expect("a permit");
    let granted = Instant::now();
    let after = granted.saturating_duration_since(silenced);
    // The silent holder stopped believing before the permit went on.
    assert!(
        theirs.valid_until() <= granted,
        "believed valid {:?} past the new grant",
        theirs.valid_until().saturating_duration_since(granted)
    );
    eprintln!(
        "lease: the silent holder's slot {} taken (slot {}) {after:?} after it went silent (lease {lease:?})",
        theirs.slot(),
        next.slot()
    );
    assert_eq!(next.slot(), theirs.slot());
    assert!(after < lease + Duration::from_secs(1), "{after:?}");
    assert_eq!(sem.available().await.expect("available"), 0);
    mine.release().await.expect("release");
    assert_eq!(sem.available().await.expect("available"), 1);
    next.release().await.expect("release");
    assert_eq!(sem.available().await.expect("available"), 2);
    drop(theirs);
    // A permit dropped is released in the background.
    let dropped = sem.acquire().await.expect("a permit");
    assert_eq!(sem.available().await.expect("available"), 1);
    drop(dropped);
    let back = support::eventually(Duration::from_secs(1), || async {
        sem.available().await.ok() == Some(2)
    })
    .await;
    assert!(back, "a dropped permit comes back");
}

#[tokio::test]
async fn a_count_asked_two_ways_and_other_bad_input_are_refused() {
    let a = support::manager(Quorum::Majority).await;
    let b = support::manager(Quorum::Majority).await;
    let name = unique("count");
    let five = a.semaphore(&name, 5).expect("a semaphore of 5");
    let p = five.acquire().await.expect("a permit");
    let seven = b.semaphore(&name, 7).expect("a semaphore of 7");
    for r in [
        seven.try_acquire(Duration::ZERO).await.map(|_| ()),
        seven.acquire().await.map(|_| ()),
        seven.available().await.map(|_| ()),
    ] {
        match r {
            Err(Error::PermitsMismatch {
                permits, recorded, ..
            }) => assert_eq!((permits, recorded), (7, 5)),
            other => panic!("a second count: {other:?}"),
        }
    }
    assert_eq!(five.available().await.expect("available"), 4);
    p.release().await.expect("release");

    for bad in [0, MAX_PERMITS + 1] {
        assert!(
            matches!(a.semaphore("x", bad), Err(Error::InvalidInput { .. })),
            "{bad} permits"
        );
    }
    assert!(a.semaphore(unique("max"), MAX_PERMITS).is_ok());
    for bad in ["", "a{b}"] {
        assert!(
            matches!(a.semaphore(bad, 2), Err(Error::InvalidInput { .. })),
            "name {bad:?}"
        );
    }
    let loose = support::manager(Quorum::AtLeast(2)).await;
    match loose.semaphore("x", 2) {
        Err(Error::UnsafeQuorum {
            required, nodes, ..
        }) => assert_eq!((required, nodes), (2, 5)),
        other => panic!("a quorum of 2 of 5: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_waiter_in_another_manager_is_woken_by_the_release() {
    let lease = Duration::from_secs(10);
    let holder = build(support::builder().lease(lease)).await;
    let waiter = Arc::new(build(support::builder().lease(lease)).await);
    let name = unique("wake");
    let held = holder.semaphore(&name, 1).expect("a semaphore");
    let wanted = waiter.semaphore(&name, 1).expect("a semaphore");
    let mut delays = Vec::new();
    for i in 0..5 {
        let p = held.acquire().await.expect("the permit");
        let w = {
            let (wanted, waiter) = (wanted.clone(), Arc::clone(&waiter));
            tokio::spawn(async move {
                let p = wanted.acquire().await.expect("the permit");
                (p, Instant::now(), waiter.pubsub_stats().messages)
            })
        };
        tokio::time::sleep(Duration::from_millis(400)).await;
        assert!(!w.is_finished(), "the waiter waits");
        let before = waiter.pubsub_stats().messages;
        let released = Instant::now();
        p.release().await.expect("release");
        let (got, at, heard) = tokio::time::timeout(Duration::from_secs(3), w)
            .await
            .expect("woken")
            .expect("the waiter runs");
        let delay = at.saturating_duration_since(released);
        // The mechanism: the release's message reached the waiting manager
        // by the time its waiter won. Without it the waiter wins at its
        // place's refresh, 1.27 s after the release here (2026-11-29).
        assert!(
            heard > before,
            "release {i}: won without the release's message, {delay:?} after it"
        );
        delays.push(delay);
        got.release().await.expect("release");
    }
    eprintln!("wake: release to grant in another manager: {delays:?} (lease {lease:?})");
    // A few ms on an idle machine; the bound leaves a loaded one room to
    // stall, and stays under the refresh that wakes a waiter unheard.
    let worst = delays.iter().max().copied().unwrap_or_default();
    assert!(worst < Duration::from_secs(1), "{delays:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn permits_on_a_cluster_member_beside_two_masters() {
    let urls = nodes().urls();
    let mixed = || {
        LockManager::builder()
            .node(urls[0].clone())
            .node(urls[1].clone())
            .cluster(cluster().urls())
            .quorum(Quorum::Majority)
            .node_timeout(Duration::from_millis(500))
    };
    let name = unique("mixed");
    let history = History::new();
    let mut sems = Vec::new();
    for _ in 0..2 {
        let m = build(mixed()).await;
        assert!(m.nodes()[2].starts_with("cluster("), "{:?}", m.nodes());
        sems.push(m.semaphore(&name, 2).expect("a semaphore"));
    }
    let p = sems[0].acquire().await.expect("a permit");
    assert_eq!(sems[1].available().await.expect("available"), 1);
    p.release().await.expect("release");
    assert_eq!(sems[1].available().await.expect("available"), 2);
    let mut tasks = Vec::new();
    for t in 0..6 {
        let sem = sems[t % 2].clone();
        let history = Arc::clone(&history);
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let p = sem.acquire().await.expect("a permit");
                hold(&history, &format!("task {t}"), p, Duration::from_millis(5)).await;
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(20), t)
            .await
            .expect("the tasks finish")
            .expect("a task runs");
    }
    let capacity = history.check_capacity(2);
    capacity.assert_clean("cluster member");
    check_slots(&history, "cluster member");
    assert_eq!(capacity.acquisitions, 48);
}
