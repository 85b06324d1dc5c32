//! The multi-lock (`lock_all`) against fake nodes: all or none on each node,
//! the quorum, rollback (also of a dropped future), re-entry, tokens,
//! renewal and loss, bad input, and sets taken in opposite orders.

use std::sync::Arc;
use std::time::Duration;

use crate::keys::Keys;
use crate::node::NodeOps;
use crate::tests::fake::{cluster_with, lock_all_as, FakeNode, Mode};
use crate::{Error, LockManager, MAX_LOCK_ALL_NAMES};

const MS: Duration = Duration::from_millis(1);

fn cluster(n: usize, lease: Duration) -> (LockManager, Vec<Arc<FakeNode>>) {
    cluster_with(n, |b| b.lease(lease).node_timeout(50 * MS))
}

fn key(name: &str) -> String {
    format!("quorumlock:{{{name}}}")
}

/// On how many fakes `name` is held (by anyone).
fn held_on(fakes: &[Arc<FakeNode>], name: &str) -> usize {
    fakes
        .iter()
        .filter(|f| f.holder(&key(name)).is_some())
        .count()
}

#[tokio::test(start_paused = true)]
async fn lock_all_takes_every_name_on_every_node_and_release_frees_them() {
    let (m, fakes) = cluster(5, Duration::from_secs(10));
    let g = m.lock_all(["b", "a", "c"]).await.expect("lock_all");
    assert_eq!(g.names(), ["a", "b", "c"]);
    assert!(g.is_held());
    let token = g.fencing_token("a").expect("a is in the set");
    assert!(token > 0);
    for name in ["a", "b", "c"] {
        assert_eq!(g.fencing_token(name), Some(token), "one token per set");
        assert_eq!(held_on(&fakes, name), 5, "{name}");
    }
    assert_eq!(g.fencing_token("d"), None);
    let holder = g.guards()[0].holder_id().to_owned();
    assert_eq!(fakes[0].holder(&key("c")), Some((holder, 1)));
    g.release().await.expect("release");
    for name in ["a", "b", "c"] {
        assert_eq!(held_on(&fakes, name), 0, "{name}");
    }
}

#[tokio::test(start_paused = true)]
async fn one_taken_name_grants_none_and_a_minority_grant_is_rolled_back() {
    let (m, fakes) = cluster(5, Duration::from_secs(10));
    // "b" is held by someone else on 3 of 5 nodes: those refuse the whole
    // set; the 2 others grant it, which must be rolled back.
    for f in &fakes[..3] {
        f.take(&key("b"), "other", Duration::from_secs(5));
    }
    let err = m
        .try_lock_all(["a", "b"], Duration::ZERO)
        .await
        .expect_err("b is taken on a majority");
    assert!(err.is_contended(), "{err}");
    assert!(err.min_pttl().is_some());
    assert_eq!(held_on(&fakes, "a"), 0, "partial grants of a left behind");
    assert_eq!(held_on(&fakes, "b"), 3, "the other holder's keys touched");
    for f in &fakes[3..] {
        assert_eq!(f.holder(&key("b")), None, "b rolled back on {}", f.addr());
    }
    // Once "b" expires the set is granted, within the wait.
    let g = m
        .try_lock_all(["a", "b"], Duration::from_secs(6))
        .await
        .expect("b expired");
    assert_eq!(held_on(&fakes, "b"), 5);
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_dropped_lock_all_rolls_back_every_name_on_every_node() {
    let (m, fakes) = cluster(5, Duration::from_secs(10));
    // Every node applies the script at once but answers late: the future is
    // dropped while every grant is in place and no reply has come. The
    // rollback goes out from `Drop` (a fake applies it when it is sent).
    for f in &fakes {
        f.set_mode(Mode::Slow(40 * MS));
    }
    let dropped = tokio::time::timeout(10 * MS, m.lock_all(["x", "y"])).await;
    assert!(dropped.is_err(), "should still be waiting for replies");
    for f in &fakes {
        // The set's script, then one release per name.
        assert_eq!(f.calls.load(std::sync::atomic::Ordering::Relaxed), 3);
    }
    assert_eq!(held_on(&fakes, "x"), 0, "x left behind");
    assert_eq!(held_on(&fakes, "y"), 0, "y left behind");
    for f in &fakes {
        f.set_mode(Mode::Normal);
    }
    m.flush().await;
    let g = m
        .try_lock_all(["y", "x"], Duration::ZERO)
        .await
        .expect("free again");
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_a_typed_error() {
    let (m, _fakes) = cluster(3, Duration::from_secs(10));
    let none: [&str; 0] = [];
    let too_many: Vec<String> = (0..=MAX_LOCK_ALL_NAMES).map(|i| format!("n{i}")).collect();
    let cases: Vec<Vec<String>> = vec![
        none.iter().map(ToString::to_string).collect(),
        vec!["a".into(), "b".into(), "a".into()],
        too_many,
        vec!["a".into(), String::new()],
        vec!["a".into(), "b{c}".into()],
        vec!["a".into(), "x".repeat(crate::MAX_NAME_LEN + 1)],
    ];
    for names in cases {
        let n = names.len();
        let err = m
            .try_lock_all(names, Duration::ZERO)
            .await
            .expect_err("refused");
        assert!(
            matches!(err, Error::InvalidInput { .. }),
            "{n} names: {err}"
        );
    }
    let err = m
        .request_all(["a"])
        .lease(Duration::ZERO)
        .acquire()
        .await
        .expect_err("zero lease");
    assert!(err.is_invalid_input(), "{err}");
    // The largest allowed set is fine.
    let most: Vec<String> = (0..MAX_LOCK_ALL_NAMES).map(|i| format!("n{i}")).collect();
    let g = m
        .try_lock_all(most, Duration::ZERO)
        .await
        .expect("64 names");
    assert_eq!(g.names().len(), MAX_LOCK_ALL_NAMES);
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn the_same_owner_re_enters_the_set_and_its_names() {
    let (m, fakes) = cluster(3, Duration::from_secs(10));
    let me = m.new_owner();
    let first = lock_all_as(&m, &me, &["a", "b"]).await.expect("lock_all");
    let again = tokio::time::timeout(100 * MS, me.scope(m.lock_all(["b", "a"])))
        .await
        .expect("re-entry does not wait")
        .expect("re-enter the set");
    assert_eq!(again.fencing_token("a"), first.fencing_token("a"));
    let single = me.scope(m.lock("a")).await.expect("re-enter one name");
    assert_eq!(single.hold_count(), 3);
    assert_eq!(fakes[0].holder(&key("a")).map(|h| h.1), Some(3));
    assert_eq!(fakes[0].holder(&key("b")).map(|h| h.1), Some(2));
    // Partly held: "a" is re-entered, "c" acquired.
    let mixed = me
        .scope(m.lock_all(["a", "c"]))
        .await
        .expect("re-enter a, take c");
    assert_eq!(fakes[0].holder(&key("a")).map(|h| h.1), Some(4));
    assert_eq!(held_on(&fakes, "c"), 3);
    // Another owner waits.
    let err = m
        .try_lock_all(["b", "z"], Duration::ZERO)
        .await
        .expect_err("b is ours");
    assert!(err.is_contended());
    assert_eq!(held_on(&fakes, "z"), 0);
    mixed.release().await.expect("release mixed");
    assert_eq!(held_on(&fakes, "c"), 0);
    single.release().await.expect("release single");
    again.release().await.expect("release again");
    assert_eq!(fakes[0].holder(&key("a")).map(|h| h.1), Some(1));
    assert_eq!(held_on(&fakes, "b"), 3);
    first.release().await.expect("release first");
    assert_eq!(held_on(&fakes, "a") + held_on(&fakes, "b"), 0);
}

#[tokio::test(start_paused = true)]
async fn each_names_token_increases_across_holds_and_the_fence_quorum_covers_the_set() {
    let (m, fakes) = cluster(5, Duration::from_secs(10));
    // Node 0's counter of a's slot is far ahead of the others (b's slot's
    // is not), and nodes 3 and 4 answer late: the quorum is nodes 0, 1
    // and 2, and only node 0 is at the token, for both counters.
    let (ka, kb) = (
        Arc::new(Keys::new("quorumlock:", "a")),
        Keys::new("quorumlock:", "b"),
    );
    assert_ne!(ka.slot(), kb.slot());
    fakes[0].raise_fence(&[ka], 100).await.expect("raise");
    for f in &fakes[3..] {
        f.set_mode(Mode::Slow(20 * MS));
    }
    let g = m
        .request_all(["a", "b"])
        .lease(500 * MS)
        .acquire()
        .await
        .expect("lock_all");
    let t1 = g.fencing_token("a").expect("a");
    assert_eq!(t1, 101);
    // It expires: no release raises any counter to the token.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(g.release().await.is_err());
    // Without node 0, a later hold of either name must still go above it:
    // the set's token was shown on a quorum before it was handed out.
    fakes[0].set_mode(Mode::Fail);
    for f in &fakes[3..] {
        f.set_mode(Mode::Normal);
    }
    let a = m.lock("a").await.expect("lock a");
    assert!(a.fencing_token() > t1, "{} <= {t1}", a.fencing_token());
    let ta = a.fencing_token();
    a.release().await.expect("release a");
    // b's counter was raised with a's: b's next token is above the set's.
    let g = m.lock_all(["b", "c"]).await.expect("lock_all b c");
    let tb = g.fencing_token("b").expect("b");
    assert!(tb > t1, "{tb} <= {t1}");
    g.release().await.expect("release");
    // A set's token is above every earlier token of each of its names.
    let g = m.lock_all(["a", "b"]).await.expect("lock_all again");
    let t = g.fencing_token("a").expect("a");
    assert!(t > ta && t > tb, "{t} <= {ta} or {tb}");
    g.release().await.expect("release");
}

/// The names of a set sit in different hash slots, whose counters differ
/// from node to node: each granting node answers one token above the
/// largest of the set's counters, and before the largest of those is
/// handed out every counter of the set is at least it on a quorum.
#[tokio::test(start_paused = true)]
async fn a_sets_token_is_shown_on_a_quorum_for_every_slots_counter() {
    let (m, fakes) = cluster(5, Duration::from_secs(10));
    let (a, b) = (Keys::new("quorumlock:", "a"), Keys::new("quorumlock:", "b"));
    assert_ne!(a.fence, b.fence, "two slots, two counters");
    fakes[0].set_fence(&a.fence, 10);
    fakes[1].set_fence(&b.fence, 20);
    for f in &fakes[3..] {
        f.set_mode(Mode::Slow(20 * MS));
    }
    let g = m.lock_all(["a", "b"]).await.expect("lock_all");
    let t = g.fencing_token("a").expect("a");
    assert_eq!((t, g.fencing_token("b")), (21, Some(21)));
    let at_token = |fence: &str| fakes.iter().filter(|f| f.fence(fence) >= t).count();
    assert!(
        at_token(&a.fence) >= 3,
        "a's counter is at the token on a quorum"
    );
    assert!(
        at_token(&b.fence) >= 3,
        "b's counter is at the token on a quorum"
    );
    g.release().await.expect("release");
    m.flush().await;
    // Either name alone, on any quorum, now gets a larger token.
    for f in &fakes[..2] {
        f.set_mode(Mode::Fail);
    }
    for f in &fakes[3..] {
        f.set_mode(Mode::Normal);
    }
    for name in ["a", "b"] {
        let g = m.lock(name).await.expect("lock on 2, 3, 4");
        assert!(
            g.fencing_token() > t,
            "{name}: {} <= {t}",
            g.fencing_token()
        );
        g.release().await.expect("release");
    }
}

#[tokio::test(start_paused = true)]
async fn the_watchdog_renews_every_name_and_lost_fires_when_one_is_lost() {
    let (m, fakes) = cluster(5, 300 * MS);
    let g = m.lock_all(["a", "b", "c"]).await.expect("lock_all");
    tokio::time::sleep(Duration::from_secs(1)).await;
    for name in ["a", "b", "c"] {
        assert_eq!(held_on(&fakes, name), 5, "{name} not renewed");
    }
    assert!(g.is_held());
    // The names ride the same batch: one round trip per node per tick.
    let stats = m.watchdog_stats();
    assert!(stats.ticks >= 2, "{stats:?}");
    assert_eq!(stats.locks_renewed, 3 * stats.ticks, "{stats:?}");
    assert_eq!(stats.round_trips, 5 * stats.ticks, "{stats:?}");
    // Another owner forces "b" away on a majority: the set is lost.
    for f in &fakes[..3] {
        f.take(&key("b"), "thief", Duration::from_secs(60));
    }
    let lost = tokio::time::timeout(300 * MS, g.lost()).await;
    assert!(lost.is_ok(), "lost() did not fire within the lease");
    assert!(g.is_lost());
    assert!(!g.is_held());
    let err = g.release().await.expect_err("b is lost");
    assert!(err.is_lost() || err.is_not_held(), "{err}");
    assert_eq!(held_on(&fakes, "a"), 0, "a released with the set");
}

#[tokio::test(start_paused = true)]
async fn sets_taken_in_opposite_orders_do_not_deadlock() {
    let (m, fakes) = cluster(3, Duration::from_secs(10));
    let run = |names: [&'static str; 2]| {
        let m = m.clone();
        tokio::spawn(async move {
            for _ in 0..50 {
                let g = m.lock_all(names).await.expect("lock_all");
                tokio::time::sleep(MS).await;
                g.release().await.expect("release");
            }
        })
    };
    let (ab, ba) = (run(["a", "b"]), run(["b", "a"]));
    let done = tokio::time::timeout(Duration::from_secs(60), async {
        ab.await.expect("a,b task");
        ba.await.expect("b,a task");
    })
    .await;
    assert!(done.is_ok(), "deadlocked");
    assert_eq!(held_on(&fakes, "a") + held_on(&fakes, "b"), 0);
}

#[tokio::test(start_paused = true)]
async fn failed_nodes_make_the_set_unavailable_and_leave_no_grant() {
    let (m, fakes) = cluster(5, Duration::from_secs(10));
    for f in &fakes[..3] {
        f.set_mode(Mode::Fail);
    }
    let err = m
        .try_lock_all(["a", "b"], Duration::ZERO)
        .await
        .expect_err("3 of 5 fail");
    assert!(err.is_unavailable(), "{err}");
    assert_eq!(held_on(&fakes, "a") + held_on(&fakes, "b"), 0);
    // One slow node of the quorum: won, and the late grant is recorded.
    for f in &fakes[..3] {
        f.set_mode(Mode::Normal);
    }
    fakes[4].set_mode(Mode::Slow(30 * MS));
    let g = m
        .try_lock_all(["a", "b"], Duration::ZERO)
        .await
        .expect("4 of 5 answer at once");
    tokio::time::sleep(50 * MS).await;
    for guard in g.guards() {
        assert_eq!(
            guard.granted_nodes(),
            vec![0, 1, 2, 3, 4],
            "{}",
            guard.name()
        );
    }
    g.release().await.expect("release");
}

#[tokio::test(start_paused = true)]
async fn a_wrong_type_key_in_the_set_is_an_error_not_a_wait() {
    let (m, fakes) = cluster(3, Duration::from_secs(10));
    for f in &fakes {
        f.put_foreign(&key("w"));
    }
    let err = tokio::time::timeout(Duration::from_secs(1), m.lock_all(["a", "w"]))
        .await
        .expect("no waiting on a wrong-type key")
        .expect_err("w is not a lock");
    assert!(err.is_wrong_type(), "{err}");
    assert_eq!(held_on(&fakes, "a"), 0);
}
