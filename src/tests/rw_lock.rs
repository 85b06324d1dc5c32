//! The read-write lock over fake nodes, on a paused clock: readers
//! together and a writer alone, a waiting writer holding new readers back,
//! and Gifford's quorums (`Quorum::All` reads on one node).

use std::time::Duration;

use tokio::time::Instant;

use crate::tests::fake::{cluster_with, peer, renewed_each_second, Mode};
use crate::{Error, Quorum};

const MS: Duration = Duration::from_millis(1);

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
