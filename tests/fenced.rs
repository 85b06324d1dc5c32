//! Fenced writes (`quorumlock::fenced`): a resource that rejects a stale
//! fencing token. The locks live on the shared five local masters; the
//! resource is a Redis of its own (not a lock node), or a SQLite database
//! through the SQL fence of `examples/fenced_sqlite`.
//!
//! Every test here fails if the rule is broken: a smaller token admitted,
//! or an equal one refused.

#[path = "../examples/fenced_sqlite/sql_fence.rs"]
mod sql_fence;
mod support;

use std::sync::OnceLock;
use std::time::Duration;

use quorumlock::fenced::{admits, Fence, FencedWrite};
use quorumlock::{Error, LockGuard, LockManager, NodeErrorKind, Quorum};
use redis::aio::MultiplexedConnection;
use support::{builder, unique, LocalNodes};

/// The first holder's lease: fixed, not renewed.
const LEASE: Duration = Duration::from_millis(300);
/// The first holder's pause: past its lease.
const PAUSE: Duration = Duration::from_millis(600);

/// The resource's Redis: one master of its own, not a lock node.
fn resource() -> &'static LocalNodes {
    static RESOURCE: OnceLock<LocalNodes> = OnceLock::new();
    RESOURCE.get_or_init(|| LocalNodes::start(1).expect("start the resource's redis-server"))
}

async fn resource_conn() -> MultiplexedConnection {
    support::masters::raw(resource(), 0).await
}

async fn client() -> LockManager {
    builder()
        .quorum(Quorum::Majority)
        .build()
        .await
        .expect("build a manager over the local nodes")
}

async fn get(conn: &mut MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(key)
        .query_async(conn)
        .await
        .expect("GET")
}

async fn pttl(conn: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(conn)
        .await
        .expect("PTTL")
}

/// Kleppmann's scenario up to the late write: A takes `lock` with a fixed
/// lease and pauses past it, then B takes it (a larger token). Returns A's
/// guard, its lapsed hold, and B's, held.
async fn a_lapses_and_b_takes_over(lock: &str) -> (LockGuard, LockGuard) {
    let (client_a, client_b) = (client().await, client().await);
    let a = client_a
        .lock_with_lease(lock, LEASE)
        .await
        .expect("A takes the lock");
    // A's pause: a GC pause past its lease.
    tokio::time::sleep(PAUSE).await;
    assert!(!a.is_held(), "A's fixed lease is over");
    let b = client_b
        .try_lock(lock, Duration::from_secs(2))
        .await
        .expect("B takes the lapsed lock");
    assert!(
        b.fencing_token() > a.fencing_token(),
        "B's token {} is above A's {}",
        b.fencing_token(),
        a.fencing_token()
    );
    (a, b)
}

#[tokio::test]
async fn a_write_after_a_pause_past_the_lease_is_rejected_by_the_redis_fence() {
    let lock = unique("fenced-redis");
    let fence = Fence::for_lock(&lock).unwrap();
    let key = format!("report:{{{lock}}}");
    let mut db = resource_conn().await;

    let (a, b) = a_lapses_and_b_takes_over(&lock).await;
    let b_wrote = fence
        .set(&mut db, b.fencing_token(), &key, "written by B")
        .await
        .unwrap();
    assert_eq!(b_wrote, FencedWrite::Written);

    // A wakes, still with its old token.
    let a_wrote = fence
        .set(&mut db, a.fencing_token(), &key, "written by A")
        .await
        .unwrap();
    assert_eq!(
        a_wrote,
        FencedWrite::Rejected {
            largest: b.fencing_token()
        }
    );
    assert_eq!(get(&mut db, &key).await.as_deref(), Some("written by B"));
    assert_eq!(
        fence.largest(&mut db).await.unwrap(),
        Some(b.fencing_token())
    );

    assert!(a.release().await.is_err(), "A's lease is over");
    b.release().await.unwrap();
}

#[tokio::test]
async fn a_write_after_a_pause_past_the_lease_is_rejected_by_the_sql_fence() {
    let lock = unique("fenced-sqlite");
    let dir = std::env::temp_dir().join(unique("quorumlock-fenced"));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("resource.db");
    // Each client with a connection of its own, as two services would.
    let mut db_a = sql_fence::open(&path).unwrap();
    let mut db_b = sql_fence::open(&path).unwrap();

    let (a, b) = a_lapses_and_b_takes_over(&lock).await;
    let b_wrote = sql_fence::write(&mut db_b, &lock, b.fencing_token(), "report", "by B");
    assert_eq!(b_wrote.unwrap(), FencedWrite::Written);

    let a_wrote = sql_fence::write(&mut db_a, &lock, a.fencing_token(), "report", "by A");
    assert_eq!(
        a_wrote.unwrap(),
        FencedWrite::Rejected {
            largest: b.fencing_token()
        }
    );
    assert_eq!(
        sql_fence::read(&db_a, "report").unwrap(),
        Some(("by B".to_owned(), b.fencing_token()))
    );
    assert_eq!(
        sql_fence::largest(&db_a, &lock).unwrap(),
        Some(b.fencing_token())
    );

    assert!(a.release().await.is_err(), "A's lease is over");
    b.release().await.unwrap();
    drop((db_a, db_b));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn the_redis_fence_admits_an_equal_token_and_rejects_a_smaller_one() {
    let fence = Fence::at(format!("fence:{}", unique("rule")));
    let key = format!("{}:value", fence.key());
    let mut db = resource_conn().await;

    assert_eq!(fence.largest(&mut db).await.unwrap(), None);
    // No token seen yet: the first write is admitted, whatever its token.
    let first = fence.set(&mut db, 5, &key, "first").await.unwrap();
    assert_eq!(first, FencedWrite::Written);
    assert_eq!(fence.largest(&mut db).await.unwrap(), Some(5));

    // The same holder writes again with its token.
    let again = fence.set(&mut db, 5, &key, "second").await.unwrap();
    assert_eq!(again, FencedWrite::Written);
    assert_eq!(get(&mut db, &key).await.as_deref(), Some("second"));

    let stale = fence.set(&mut db, 4, &key, "stale").await.unwrap();
    assert_eq!(stale, FencedWrite::Rejected { largest: 5 });
    assert_eq!(get(&mut db, &key).await.as_deref(), Some("second"));
    assert_eq!(fence.largest(&mut db).await.unwrap(), Some(5));

    // A larger token raises the fence; the value may expire, the fence not.
    let later = fence
        .set_expiring(&mut db, 9, &key, 42_u32, Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(later, FencedWrite::Written);
    assert_eq!(get(&mut db, &key).await.as_deref(), Some("42"));
    assert_eq!(fence.largest(&mut db).await.unwrap(), Some(9));
    assert!(pttl(&mut db, &key).await > 0, "the value expires");
    assert_eq!(pttl(&mut db, fence.key()).await, -1, "the fence does not");
    let stale = fence.set(&mut db, 5, &key, "stale").await.unwrap();
    assert_eq!(stale, FencedWrite::Rejected { largest: 9 });
}

/// Tokens near `u64::MAX` are compared exactly (a Lua number would round
/// them to the same double).
#[tokio::test]
async fn the_redis_fence_compares_every_u64_exactly() {
    let fence = Fence::at(format!("fence:{}", unique("u64")));
    let key = format!("{}:value", fence.key());
    let mut db = resource_conn().await;
    let top = u64::MAX;
    for (token, largest) in [(top - 1, None), (top, Some(top - 1)), (top - 1, Some(top))] {
        let got = fence.set(&mut db, token, &key, token).await.unwrap();
        assert_eq!(
            got.is_written(),
            admits(largest, token),
            "{token} after {largest:?}"
        );
    }
    assert_eq!(fence.largest(&mut db).await.unwrap(), Some(top));
    assert_eq!(get(&mut db, &key).await, Some(top.to_string()));
}

/// The SQL fence follows the same rule as `admits`, case by case.
#[test]
fn the_sql_fence_follows_admits() {
    let dir = std::env::temp_dir().join(unique("quorumlock-fenced"));
    std::fs::create_dir_all(&dir).unwrap();
    let mut db = sql_fence::open(&dir.join("rule.db")).unwrap();
    let max = i64::MAX.unsigned_abs();
    let cases: [(Option<u64>, u64); 8] = [
        (None, 0),
        (None, 7),
        (Some(7), 7),
        (Some(7), 8),
        (Some(7), 6),
        (Some(7), 0),
        (Some(max), max - 1),
        (Some(max), max),
    ];
    for (n, (largest, token)) in cases.into_iter().enumerate() {
        let lock = format!("lock-{n}");
        if let Some(largest) = largest {
            let seeded = sql_fence::write(&mut db, &lock, largest, &lock, "before");
            assert_eq!(seeded.unwrap(), FencedWrite::Written);
        }
        let got = sql_fence::write(&mut db, &lock, token, &lock, "after").unwrap();
        let admitted = admits(largest, token);
        assert_eq!(got.is_written(), admitted, "{token} after {largest:?}");
        let (body, last) = sql_fence::read(&db, &lock).unwrap().unwrap();
        if admitted {
            assert_eq!((body.as_str(), last), ("after", token));
        } else {
            assert_eq!(
                got,
                FencedWrite::Rejected {
                    largest: largest.unwrap()
                }
            );
            assert_eq!(body, "before");
        }
        let expected = largest.map_or(token, |l| l.max(token));
        assert_eq!(sql_fence::largest(&db, &lock).unwrap(), Some(expected));
    }
    drop(db);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test]
async fn a_fence_key_of_another_type_is_a_typed_error_and_nothing_is_written() {
    let fence = Fence::at(format!("fence:{}", unique("wrongtype")));
    let key = format!("{}:value", fence.key());
    let mut db = resource_conn().await;
    let _: () = redis::cmd("HSET")
        .arg(fence.key())
        .arg("field")
        .arg("value")
        .query_async(&mut db)
        .await
        .unwrap();

    let err = fence.set(&mut db, 7, &key, "never").await.unwrap_err();
    assert!(err.is_wrong_type(), "{err:?}");
    assert!(!err.is_unavailable(), "{err:?}");
    match &err {
        Error::Resource {
            fence: at, kind, ..
        } => {
            assert_eq!(at, fence.key());
            assert_eq!(*kind, NodeErrorKind::WrongType);
        }
        other => panic!("expected Error::Resource, got {other:?}"),
    }
    assert_eq!(get(&mut db, &key).await, None, "nothing written");
    let err = fence.largest(&mut db).await.unwrap_err();
    assert!(err.is_wrong_type(), "{err:?}");

    // A string that is no token: an error too, with nothing written.
    let other = Fence::at(format!("fence:{}", unique("notoken")));
    let _: () = redis::cmd("SET")
        .arg(other.key())
        .arg("twelve")
        .query_async(&mut db)
        .await
        .unwrap();
    let err = other.set(&mut db, 7, &key, "never").await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::Resource {
                kind: NodeErrorKind::Server,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(get(&mut db, &key).await, None, "nothing written");
    assert!(other.largest(&mut db).await.is_err());
}

#[tokio::test]
async fn bad_writes_are_refused_before_anything_is_sent() {
    let fence = Fence::at(format!("fence:{}", unique("input")));
    let mut db = resource_conn().await;
    let own = fence.key().to_owned();
    let err = fence.set(&mut db, 1, &own, "x").await.unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    let err = fence
        .set(&mut db, 1, "some:key", vec!["a", "b"])
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    let err = fence
        .set_expiring(&mut db, 1, "some:key", "x", Duration::ZERO)
        .await
        .unwrap_err();
    assert!(err.is_invalid_input(), "{err:?}");
    assert_eq!(fence.largest(&mut db).await.unwrap(), None);
    assert_eq!(get(&mut db, "some:key").await, None);
}
