//! The semaphore over fake nodes, on a paused clock: at most `P` permits,
//! one waiter woken per freed permit, one call per node each way while
//! most permits are free, the count checked on the nodes, and bad input
//! (the read-write lock's too).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::tests::fake::{cluster_with, peer, renewed_each_second};
use crate::{Error, Quorum, MAX_PERMITS};

const MS: Duration = Duration::from_millis(1);

#[tokio::test(start_paused = true)]
async fn never_more_than_p_permits_across_managers() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let other = peer(&fakes);
    let sem = m.semaphore("pool", 2).unwrap();
    let theirs = other.semaphore("pool", 2).unwrap();
    assert_eq!(sem.available().await.unwrap(), 2);
    let a = sem.acquire().await.unwrap();
    let b = theirs.acquire().await.unwrap();
    assert_ne!(a.slot(), b.slot());
    assert_eq!(sem.available().await.unwrap(), 0);
    let third = theirs.try_acquire(200 * MS).await.unwrap_err();
    assert!(matches!(third, Error::Contended { .. }), "{third}");
    // Held through renewals, still two.
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(a.is_held() && b.is_held());
    assert!(sem.try_acquire(Duration::ZERO).await.is_err());
    let slot = a.slot();
    a.release().await.unwrap();
    let c = theirs.try_acquire(100 * MS).await.unwrap();
    assert_eq!(c.slot(), slot);
    assert!(c.fencing_token() > 0);
}

/// A release rings one waiter of a manager, and a waiter that wins rings
/// the next: two freed permits serve two of five waiters at once (by
/// message: the lease is far longer), and the other three keep waiting.
#[tokio::test(start_paused = true)]
async fn one_waiter_is_woken_per_freed_permit() {
    let (m, fakes) = cluster_with(3, |b| {
        b.lease(Duration::from_secs(30))
            .renew_interval(Duration::from_secs(10))
    });
    let other = peer(&fakes);
    let sem = m.semaphore("pool", 3).unwrap();
    let held: Vec<_> = futures::future::join_all((0..3).map(|_| sem.acquire()))
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    let theirs = other.semaphore("pool", 3).unwrap();
    let won = Arc::new(AtomicUsize::new(0));
    let mut waiters = Vec::new();
    for _ in 0..5 {
        let (theirs, won) = (theirs.clone(), Arc::clone(&won));
        waiters.push(tokio::spawn(async move {
            let p = theirs.acquire().await.unwrap();
            won.fetch_add(1, Ordering::SeqCst);
            p
        }));
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(won.load(Ordering::SeqCst), 0);
    let start = Instant::now();
    let mut held = held.into_iter();
    for p in held.by_ref().take(2) {
        p.release().await.unwrap();
    }
    while won.load(Ordering::SeqCst) < 2 {
        tokio::time::sleep(MS).await;
        assert!(start.elapsed() < Duration::from_millis(200), "not woken");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(won.load(Ordering::SeqCst), 2, "only the freed permits");
    drop(held);
    for w in waiters {
        w.abort();
    }
}

#[tokio::test(start_paused = true)]
async fn a_count_other_than_the_recorded_one_is_refused() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let p = m.semaphore("x", 5).unwrap().acquire().await.unwrap();
    let other = peer(&fakes);
    let err = other
        .semaphore("x", 7)
        .unwrap()
        .acquire()
        .await
        .unwrap_err();
    match &err {
        Error::PermitsMismatch {
            permits, recorded, ..
        } => assert_eq!((*permits, *recorded), (7, 5)),
        e => panic!("{e}"),
    }
    assert!(err.is_invalid_input());
    drop(p);
}

#[tokio::test(start_paused = true)]
async fn bad_semaphores_are_refused() {
    let (m, _) = cluster_with(3, renewed_each_second);
    for permits in [0, MAX_PERMITS + 1] {
        let e = m.semaphore("s", permits).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidInput {
                    what: "permits",
                    ..
                }
            ),
            "{e}"
        );
    }
    for name in ["", "a{b}"] {
        let e = m.semaphore(name, 2).unwrap_err();
        assert!(
            matches!(
                e,
                Error::InvalidInput {
                    what: "semaphore name",
                    ..
                }
            ),
            "{e}"
        );
    }
    let (loose, _) = cluster_with(3, |b| b.quorum(Quorum::AtLeast(1)));
    let e = loose.semaphore("s", 2).unwrap_err();
    assert!(matches!(e, Error::UnsafeQuorum { .. }), "{e}");
    assert!(e.to_string().contains("2q > N"), "{e}");
    let e = loose.rw_lock("c").read().await.unwrap_err();
    assert!(matches!(e, Error::UnsafeQuorum { .. }), "{e}");
    let e = m.rw_lock("a}b").write().await.unwrap_err();
    assert!(
        matches!(
            e,
            Error::InvalidInput {
                what: "read-write lock name",
                ..
            }
        ),
        "{e}"
    );
}

/// While most permits are free, an acquisition and a release cost one call
/// per node each: one slot tried at random, no read of the slots (after
/// the first acquisition, which checks the count).
#[tokio::test(start_paused = true)]
async fn an_uncontended_permit_costs_one_call_per_node_each_way() {
    let (m, fakes) = cluster_with(3, |b| {
        b.lease(Duration::from_secs(30))
            .renew_interval(Duration::from_secs(10))
    });
    let sem = m.semaphore("pool", 64).unwrap();
    sem.acquire().await.unwrap().release().await.unwrap();
    let calls = || {
        fakes
            .iter()
            .map(|f| f.calls.load(Ordering::Relaxed))
            .sum::<u64>()
    };
    let before = calls();
    let rounds = 50;
    for _ in 0..rounds {
        sem.acquire().await.unwrap().release().await.unwrap();
    }
    // One acquire and one release per node per round; the watchdog does
    // not tick within these rounds (paused clock, 10 s interval).
    assert_eq!(calls() - before, rounds * 2 * 3);
}
