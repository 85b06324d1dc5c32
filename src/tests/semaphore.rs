//! The semaphore and the read-write lock over fake nodes, on a paused
//! clock: at most `P` permits, one waiter woken per freed permit, the count
//! checked on the nodes, readers together and a writer alone, a waiting
//! writer holding new readers back, Gifford's quorums, and bad input.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::tests::fake::{cluster_with, renewed_each_second, FakeNode, Mode};
use crate::{Error, LockManager, Quorum, MAX_PERMITS};

const MS: Duration = Duration::from_millis(1);

/// A manager over the same fakes (another process).
fn peer(fakes: &[Arc<FakeNode>]) -> LockManager {
    LockManager::builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .node_timeout(Duration::from_millis(100))
        .build_with(crate::tests::fake::nodes(fakes))
        .expect("valid fake cluster")
}

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

#[tokio::test(start_paused = true)]
async fn readers_hold_together_and_a_writer_alone() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let other = peer(&fakes);
    let rw = m.rw_lock("catalog");
    let theirs = other.rw_lock("catalog");
    let r1 = rw.read().await.unwrap();
    let r2 = theirs.read().await.unwrap();
    let r3 = rw.try_read(Duration::ZERO).await.unwrap();
    assert!(theirs.try_write(100 * MS).await.is_err());
    drop((r1, r2));
    r3.release().await.unwrap();
    let w = theirs.try_write(500 * MS).await.unwrap();
    assert!(w.fencing_token() > 0);
    assert!(rw.try_read(100 * MS).await.is_err());
    assert!(rw.try_write(100 * MS).await.is_err());
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(w.is_held());
    let token = w.fencing_token();
    w.release().await.unwrap();
    let w2 = rw.try_write(100 * MS).await.unwrap();
    assert!(w2.fencing_token() > token);
}

/// A writer waiting behind a reader holds new readers back: the reader that
/// comes after it waits until the writer got in and left.
#[tokio::test(start_paused = true)]
async fn a_waiting_writer_holds_new_readers_back() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let (w_side, r_side) = (peer(&fakes), peer(&fakes));
    let first = m.rw_lock("c").read().await.unwrap();
    let writer = tokio::spawn(async move {
        let w = w_side.rw_lock("c").write().await.unwrap();
        let at = Instant::now();
        tokio::time::sleep(100 * MS).await;
        w.release().await.unwrap();
        at
    });
    tokio::time::sleep(50 * MS).await;
    let late = r_side.rw_lock("c");
    let refused = late.try_read(200 * MS).await.unwrap_err();
    assert!(matches!(refused, Error::Contended { .. }), "{refused}");
    let released = Instant::now();
    first.release().await.unwrap();
    let reading = late.read().await.unwrap();
    let read_at = Instant::now();
    let wrote_at = writer.await.unwrap();
    assert!(wrote_at >= released && wrote_at < released + 50 * MS);
    assert!(
        read_at >= wrote_at + 100 * MS,
        "the reader came after the writer"
    );
    drop(reading);
}

/// `Quorum::All`: a reader needs one node (`N - N + 1`), a writer every
/// node.
#[tokio::test(start_paused = true)]
async fn quorum_all_reads_on_one_node_and_writes_on_all() {
    let (m, fakes) = cluster_with(3, |b| renewed_each_second(b).quorum(Quorum::All));
    fakes[0].set_mode(Mode::Fail);
    fakes[1].set_mode(Mode::Fail);
    let rw = m.rw_lock("c");
    let r = rw.try_read(200 * MS).await.unwrap();
    r.release().await.unwrap();
    let e = rw.try_write(200 * MS).await.unwrap_err();
    assert!(matches!(e, Error::Unavailable { .. }), "{e}");
    fakes[0].set_mode(Mode::Normal);
    fakes[1].set_mode(Mode::Normal);
    rw.try_write(200 * MS).await.unwrap();
}
