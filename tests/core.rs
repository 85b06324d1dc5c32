//! The coordinator against five real `redis-server` masters.

mod support;

use std::sync::Arc;
use std::time::Duration;

use quorumlock::{Error, LockManager, Quorum};
use support::{builder, key, manager, nodes, nodes_with_key, raw, unique};

async fn hash_on(i: usize, name: &str) -> Vec<(String, u32)> {
    let mut c = raw(i).await;
    redis::cmd("HGETALL")
        .arg(key(name))
        .query_async(&mut c)
        .await
        .expect("HGETALL")
}

#[tokio::test]
async fn lock_and_release_touch_every_node() {
    let m = manager(Quorum::Majority).await;
    let name = unique("basic");
    let g = m.lock(&name).await.expect("lock");
    assert_eq!(g.hold_count(), 1);
    assert!(g.fencing_token() > 0);
    assert!(g.is_held());
    assert!(g.valid_until() > std::time::Instant::now());
    assert!(g.granted_nodes().len() >= 3);
    assert!(
        support::eventually(Duration::from_secs(1), || async {
            nodes_with_key(&name).await == 5
        })
        .await,
        "late grants should reach all 5 nodes"
    );
    let owner = g.holder_id().to_owned();
    for i in 0..5 {
        assert_eq!(hash_on(i, &name).await, vec![(owner.clone(), 1)]);
    }
    g.release().await.expect("release");
    m.flush().await;
    assert_eq!(nodes_with_key(&name).await, 0);
}

#[tokio::test]
async fn reentry_counts_and_needs_as_many_releases() {
    let m = manager(Quorum::Majority).await;
    let name = unique("reentry");
    let me = m.new_owner();
    let a = m.request(&name).owner(&me).acquire().await.expect("lock");
    let b = tokio::time::timeout(Duration::from_millis(500), me.scope(m.lock(&name)))
        .await
        .expect("re-entry does not wait")
        .expect("re-enter");
    let c = m
        .request(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("re-enter");
    assert_eq!(c.hold_count(), 3);
    assert_eq!(a.fencing_token(), c.fencing_token());
    for i in 0..5 {
        let h = hash_on(i, &name).await;
        assert!(h.is_empty() || h[0].1 == 3, "node {i}: {h:?}");
    }
    c.release().await.expect("release 3");
    b.release().await.expect("release 2");
    assert_eq!(a.hold_count(), 1);
    assert!(
        nodes_with_key(&name).await >= 3,
        "still held after 2 of 3 releases"
    );
    a.release().await.expect("release 1");
    m.flush().await;
    assert_eq!(nodes_with_key(&name).await, 0);
}

#[tokio::test]
async fn other_owners_are_refused_and_cannot_release() {
    let m = manager(Quorum::Majority).await;
    let name = unique("owners");
    let alice = m.new_owner();
    let bob = m.new_owner();
    let g = m
        .request(&name)
        .owner(&alice)
        .acquire()
        .await
        .expect("alice");
    let err = m
        .request(&name)
        .owner(&bob)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect_err("bob is refused");
    assert!(err.is_contended(), "{err}");
    let pttl = err.min_pttl().expect("holder pttl");
    assert!(
        pttl > Duration::from_secs(20) && pttl <= Duration::from_secs(30),
        "{pttl:?}"
    );

    // Another task of the same process is another owner too.
    let (m2, n2) = (m.clone(), name.clone());
    let err = tokio::spawn(async move { m2.try_lock(&n2, Duration::ZERO).await })
        .await
        .expect("task")
        .expect_err("another task");
    assert!(err.is_contended());

    // An explicit owner re-enters from any task.
    let (m2, n2, a2) = (m.clone(), name.clone(), alice.clone());
    let g2 = tokio::spawn(async move { m2.request(&n2).owner(&a2).acquire().await })
        .await
        .expect("task")
        .expect("alice re-enters from another task");
    assert_eq!(g2.hold_count(), 2);
    g2.release().await.expect("release");

    // Break alice's lock, let bob take it: alice can no longer release it.
    m.force_unlock(&name).await.expect("force");
    let gb = m
        .request(&name)
        .owner(&bob)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("bob");
    let err = g.release().await.expect_err("alice no longer holds it");
    assert!(matches!(err, Error::NotHeld { .. }), "{err}");
    assert!(
        nodes_with_key(&name).await >= 3,
        "alice's release must not free bob's lock"
    );
    gb.release().await.expect("bob releases");
}

#[tokio::test]
async fn fencing_tokens_strictly_increase_across_holders() {
    let m = manager(Quorum::Majority).await;
    let name = unique("fence");
    let mut last = 0;
    for round in 0..20 {
        let owner = m.new_owner();
        let g = m
            .request(&name)
            .owner(&owner)
            .acquire()
            .await
            .expect("lock");
        assert!(
            g.fencing_token() > last,
            "round {round}: {} <= {last}",
            g.fencing_token()
        );
        last = g.fencing_token();
        g.release().await.expect("release");
    }
}

#[tokio::test]
async fn partial_grants_are_rolled_back() {
    let m = manager(Quorum::Majority).await;
    let name = unique("partial");
    for i in 0..3 {
        support::pre_take(i, &name, "someone-else").await;
    }
    let err = m
        .try_lock(&name, Duration::ZERO)
        .await
        .expect_err("3 of 5 taken");
    assert!(err.is_contended(), "{err}");
    for i in 3..5 {
        assert!(hash_on(i, &name).await.is_empty(), "grant left on node {i}");
    }
    for i in 0..3 {
        assert_eq!(
            hash_on(i, &name).await,
            vec![("someone-else".to_owned(), 1)]
        );
    }
    m.force_unlock(&name).await.expect("clean up");
}

#[tokio::test]
async fn every_subset_of_taken_nodes_on_real_redis() {
    for quorum in [Quorum::Majority, Quorum::All, Quorum::AtLeast(2)] {
        let m = manager(quorum).await;
        let required = quorum.required(5).expect("valid");
        for mask in 0u32..32 {
            let name = unique("subset");
            for i in 0..5 {
                if mask & (1 << i) != 0 {
                    support::pre_take(i, &name, "other").await;
                }
            }
            let free = 5 - mask.count_ones() as usize;
            match m.try_lock(&name, Duration::ZERO).await {
                Ok(g) => {
                    assert!(
                        free >= required,
                        "{quorum:?} {mask:05b}: granted with {free} free"
                    );
                    g.release().await.expect("release");
                }
                Err(e) => {
                    assert!(free < required, "{quorum:?} {mask:05b}: {e}");
                    assert!(e.is_contended(), "{e}");
                }
            }
            for i in 0..5 {
                let h = hash_on(i, &name).await;
                if mask & (1 << i) != 0 {
                    assert_eq!(
                        h,
                        vec![("other".to_owned(), 1)],
                        "{quorum:?} {mask:05b} node {i}"
                    );
                } else {
                    assert!(h.is_empty(), "{quorum:?} {mask:05b} node {i} left {h:?}");
                }
            }
            let _ = m.force_unlock(&name).await;
        }
    }
}

#[tokio::test]
async fn status_and_force_unlock_report_reality() {
    let m = manager(Quorum::Majority).await;
    let name = unique("status");
    let me = m.new_owner();
    let g = m.request(&name).owner(&me).acquire().await.expect("lock");
    let g2 = m
        .request(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("re-enter");
    support::eventually(Duration::from_secs(1), || async {
        nodes_with_key(&name).await == 5
    })
    .await;
    let st = m.status(&name).await.expect("status");
    assert_eq!(st.nodes.len(), 5);
    assert_eq!(st.holder(), Some(g.holder_id()));
    let mut fenced = 0;
    for n in &st.nodes {
        let s = n.state.as_ref().expect("reachable");
        assert_eq!(s.holder.as_deref(), Some(g.holder_id()));
        assert_eq!(s.hold_count, 2);
        assert!(s.pttl.is_some_and(|p| p > Duration::from_secs(25)));
        fenced += usize::from(s.fence >= g.fencing_token());
    }
    // The token is handed out once a quorum's counters are at least the
    // token (a node whose grant came after the decision may lag: the nodes'
    // counters are shared with every other test of this binary).
    assert!(fenced >= 3, "{fenced} counters are at least the token");
    assert_eq!(m.force_unlock(&name).await.expect("force"), 5);
    assert_eq!(nodes_with_key(&name).await, 0);
    let st = m.status(&name).await.expect("status");
    assert_eq!(st.holder(), None);
    drop(g2);
    drop(g);
}

#[tokio::test]
async fn a_wrong_type_key_is_a_typed_error_and_is_left_intact() {
    let m = manager(Quorum::Majority).await;
    let name = unique("wrongtype");
    for i in 0..5 {
        let mut c = raw(i).await;
        let _: () = redis::cmd("SET")
            .arg(key(&name))
            .arg("precious")
            .query_async(&mut c)
            .await
            .expect("SET");
    }
    let err = m
        .try_lock(&name, Duration::from_millis(300))
        .await
        .expect_err("wrong type");
    assert!(err.is_wrong_type(), "{err}");
    let err = m
        .lock(&name)
        .await
        .expect_err("lock() does not retry a wrong type");
    assert!(err.is_wrong_type(), "{err}");
    for i in 0..5 {
        let mut c = raw(i).await;
        let v: String = redis::cmd("GET")
            .arg(key(&name))
            .query_async(&mut c)
            .await
            .expect("GET");
        assert_eq!(v, "precious");
        let _: () = redis::cmd("DEL")
            .arg(key(&name))
            .query_async(&mut c)
            .await
            .expect("DEL");
    }
    let st = m.status(&name).await.expect("status");
    assert!(st.nodes.iter().all(|n| n.state.is_ok()));
}

#[tokio::test]
async fn bad_input_gets_typed_errors() {
    let m = manager(Quorum::Majority).await;
    for name in ["", "has{brace", "x\ty"] {
        let e = m
            .try_lock(name, Duration::ZERO)
            .await
            .expect_err("bad name");
        assert!(
            matches!(
                e,
                Error::InvalidInput {
                    what: "lock name",
                    ..
                }
            ),
            "{e}"
        );
    }
    let long = "n".repeat(quorumlock::MAX_NAME_LEN + 1);
    assert!(m
        .lock(&long)
        .await
        .expect_err("oversized")
        .is_invalid_input());
    let e = m
        .lock_with_lease("x", Duration::ZERO)
        .await
        .expect_err("zero lease");
    assert!(
        matches!(e, Error::InvalidInput { what: "lease", .. }),
        "{e}"
    );
    let e = m
        .lock_with_lease("x", Duration::from_millis(2))
        .await
        .expect_err("lease <= drift");
    assert!(
        matches!(e, Error::InvalidInput { what: "lease", .. }),
        "{e}"
    );

    let e = LockManager::builder().build().await.expect_err("no nodes");
    assert!(matches!(e, Error::Config(_)), "{e}");
    let url = nodes().url(0);
    let e = LockManager::builder()
        .nodes([url.clone(), url.replace("127.0.0.1", "localhost")])
        .build()
        .await
        .expect_err("same node twice");
    assert!(
        matches!(e, Error::Config(ref s) if s.contains("same node")),
        "{e}"
    );
    for q in [Quorum::AtLeast(0), Quorum::AtLeast(6)] {
        let e = builder().quorum(q).build().await.expect_err("bad quorum");
        assert!(matches!(e, Error::Config(_)), "{q:?}: {e}");
    }
    for bad in ["not a url", "http://127.0.0.1:1", "redis://:secret@[::1"] {
        let e = LockManager::builder()
            .node(bad)
            .build()
            .await
            .expect_err("bad url");
        assert!(
            matches!(
                e,
                Error::InvalidInput {
                    what: "node URL",
                    ..
                }
            ),
            "{bad}: {e}"
        );
        assert!(!e.to_string().contains("secret"), "password leaked: {e}");
    }
    let e = builder()
        .lease(Duration::ZERO)
        .build()
        .await
        .expect_err("zero lease");
    assert!(e.is_invalid_input());
    let e = builder()
        .drift_factor(f64::NAN)
        .build()
        .await
        .expect_err("nan drift");
    assert!(e.is_invalid_input());
    let e = builder()
        .key_prefix("a{")
        .build()
        .await
        .expect_err("brace prefix");
    assert!(e.is_invalid_input());

    // An unreachable node: a closed port.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("free port")
        .port();
    let e = LockManager::builder()
        .node(format!("redis://:hunter2@127.0.0.1:{port}"))
        .connect_timeout(Duration::from_millis(500))
        .build()
        .await
        .expect_err("unreachable");
    assert!(
        matches!(e, Error::Connect { ref failures } if failures.len() == 1),
        "{e}"
    );
    assert!(!e.to_string().contains("hunter2"), "password leaked: {e}");
}

#[tokio::test]
async fn a_replica_is_refused() {
    let replica = support::LocalNodes::start(1).expect("start a node");
    let mut c = redis::Client::open(replica.url(0))
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(nodes().port(0))
        .query_async(&mut c)
        .await
        .expect("REPLICAOF");
    let e = LockManager::builder()
        .node(nodes().url(1))
        .node(replica.url(0))
        .build()
        .await
        .expect_err("replica");
    match e {
        Error::NotMaster { node, ref role, .. } => {
            assert_eq!(node, 1);
            assert_eq!(role, "slave");
        }
        other => panic!("expected NotMaster, got {other}"),
    }
}

#[tokio::test]
async fn a_node_that_comes_back_as_a_replica_is_never_used() {
    let extra = support::LocalNodes::start(1).expect("start a node");
    extra.kill(0);
    let m = builder()
        .node(extra.url(0))
        .connect_timeout(Duration::from_millis(300))
        .allow_unreachable(true)
        .build()
        .await
        .expect("5 of 6 reachable");
    extra
        .restart_as_replica(0, nodes().port(0))
        .expect("restart as a replica");
    let name = unique("replica");
    let refused = support::eventually(Duration::from_secs(3), || async {
        let st = m.status(&name).await.expect("status");
        matches!(&st.nodes[5].state, Err(f) if f.kind == quorumlock::NodeErrorKind::NotMaster)
    })
    .await;
    assert!(
        refused,
        "the replica should be refused once its role is known"
    );
    let g = m.lock(&name).await.expect("lock on the masters");
    assert!(!g.granted_nodes().contains(&5));
    g.release().await.expect("release");
}

#[tokio::test]
async fn a_cancelled_acquisition_leaves_nothing_behind() {
    let m = manager(Quorum::All).await;
    let name = unique("cancel");
    let holder = m.new_owner();
    // Someone holds one node, so acquisitions keep retrying until dropped.
    support::pre_take(4, &name, "blocker").await;
    for trial in 0..100u64 {
        let wait = Duration::from_micros(50 + (trial * 37) % 3_000);
        let r = tokio::time::timeout(wait, m.request(&name).owner(&holder).acquire()).await;
        assert!(r.is_err() || r.is_ok_and(|r| r.is_err()));
    }
    let clean = support::eventually(Duration::from_secs(2), || async {
        let mut n = 0;
        for i in 0..4 {
            n += hash_on(i, &name).await.len();
        }
        n == 0
    })
    .await;
    assert!(clean, "a cancelled acquisition left a key behind");
    m.force_unlock(&name).await.expect("clean up");
}

#[tokio::test]
async fn a_dropped_guard_releases_at_once() {
    let m = manager(Quorum::Majority).await;
    let name = unique("drop");
    let g = m.lock(&name).await.expect("lock");
    drop(g);
    m.flush().await;
    assert_eq!(
        nodes_with_key(&name).await,
        0,
        "dropping the guard should release in the background"
    );
    let g = tokio::time::timeout(Duration::from_secs(1), m.lock(&name))
        .await
        .expect("free again at once")
        .expect("lock");
    g.release().await.expect("release");
}

#[tokio::test]
async fn a_fixed_lease_expires_and_is_not_renewed() {
    let m = manager(Quorum::Majority).await;
    let name = unique("lease");
    let g = m
        .lock_with_lease(&name, Duration::from_millis(300))
        .await
        .expect("lock");
    assert!(g.valid_until() <= std::time::Instant::now() + Duration::from_millis(300));
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(!g.is_held());
    assert_eq!(
        nodes_with_key(&name).await,
        0,
        "a fixed lease must not be renewed"
    );
    let other = m.new_owner();
    let g2 = m
        .request(&name)
        .owner(&other)
        .wait(Duration::ZERO)
        .acquire()
        .await
        .expect("free");
    let e = g.release().await.expect_err("expired");
    assert!(e.is_expired(), "{e}");
    assert!(
        nodes_with_key(&name).await >= 3,
        "an expired guard's release must not free the new holder"
    );
    g2.release().await.expect("release");
}

#[tokio::test]
async fn try_lock_waits_its_wait_then_reports_the_holder() {
    let m = manager(Quorum::Majority).await;
    let name = unique("wait");
    let g = support::hold_as_new_owner(&m, &name).await;
    let start = std::time::Instant::now();
    let e = m
        .try_lock(&name, Duration::from_millis(400))
        .await
        .expect_err("held");
    let waited = start.elapsed();
    assert!(
        waited >= Duration::from_millis(400),
        "returned early: {waited:?}"
    );
    assert!(
        waited < Duration::from_millis(1_500),
        "returned late: {waited:?}"
    );
    assert!(e.is_contended() && e.min_pttl().is_some(), "{e}");
    g.release().await.expect("release");
}

/// Read-modify-write of a counter kept in Redis, with a pause between the
/// read and the write so that unprotected writers overlap.
async fn bump(c: &mut redis::aio::MultiplexedConnection, counter: &str) {
    let v: Option<i64> = redis::cmd("GET")
        .arg(counter)
        .query_async(c)
        .await
        .expect("GET");
    tokio::time::sleep(Duration::from_micros(300)).await;
    let _: () = redis::cmd("SET")
        .arg(counter)
        .arg(v.unwrap_or(0) + 1)
        .query_async(c)
        .await
        .expect("SET");
}

async fn hammer(m: Option<LockManager>, tasks: usize, iterations: usize) -> i64 {
    let name = unique("counter");
    let counter = format!("counter:{name}");
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (m, name, counter) = (m.clone(), name.clone(), counter.clone());
        handles.push(tokio::spawn(async move {
            let mut c = raw(0).await;
            for _ in 0..iterations {
                match &m {
                    Some(m) => {
                        let g = m.lock(&name).await.expect("lock");
                        bump(&mut c, &counter).await;
                        g.release().await.expect("release");
                    }
                    None => bump(&mut c, &counter).await,
                }
            }
        }));
    }
    for h in handles {
        h.await.expect("task");
    }
    let mut c = raw(0).await;
    redis::cmd("GET")
        .arg(&counter)
        .query_async(&mut c)
        .await
        .expect("GET")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mutual_exclusion_under_load_and_its_control() {
    let (tasks, iterations) = (8, 25);
    let m = manager(Quorum::Majority).await;
    let locked = hammer(Some(m), tasks, iterations).await;
    assert_eq!(locked, (tasks * iterations) as i64, "the lock lost updates");
    let unlocked = hammer(None, tasks, iterations).await;
    assert!(
        unlocked < (tasks * iterations) as i64,
        "without the lock the same run should lose updates (got {unlocked})"
    );
}

#[tokio::test]
async fn the_manager_debug_output_hides_credentials() {
    let m = builder().build().await.expect("build");
    let text = format!("{m:?}");
    assert!(text.contains("127.0.0.1"));
    let b = LockManager::builder().node("redis://u:topsecret@127.0.0.1:1");
    assert!(!format!("{b:?}").contains("topsecret"));
    let _ = Arc::new(m);
}

/// Every name's counter is the key `fence_counter_key` names, on every
/// node, and `status` reads it.
#[tokio::test]
async fn status_reads_the_fence_counter_of_the_names_slot() {
    let m = manager(Quorum::Majority).await;
    let name = unique("slot-fence");
    let counter = quorumlock::fence_counter_key("quorumlock:", &name).expect("a valid name");
    let g = m.lock(&name).await.expect("lock");
    let token = g.fencing_token();
    g.release().await.expect("release");
    m.flush().await;
    let st = m.status(&name).await.expect("status");
    for (i, n) in st.nodes.iter().enumerate() {
        let mut c = raw(i).await;
        let v: Option<u64> = redis::cmd("GET")
            .arg(&counter)
            .query_async(&mut c)
            .await
            .expect("GET");
        let s = n.state.as_ref().expect("reachable");
        assert_eq!(Some(s.fence), v, "node {i}: status reads {counter}");
        assert!(s.fence >= token, "node {i}: released at the token");
    }
}

/// Nodes that served the layout before per-slot counters keep one counter
/// per node, `<prefix>fence`. A manager built over them adopts it (every
/// per-slot counter raised to it, the old one deleted), so no name's token
/// goes back after the upgrade; nodes without one are left as they are.
#[tokio::test]
async fn build_adopts_the_fence_counter_of_the_older_layout() {
    let prefix = format!("{}:", unique("upgrade"));
    // Old counters 1000..=1003 on nodes 0..=3, none on node 4. The older
    // layout handed out a token only once a quorum (3 of 5) had a counter
    // at least as large, so no token above 1001 can have been handed out.
    for i in 0..4 {
        let mut c = raw(i).await;
        let () = redis::cmd("SET")
            .arg(format!("{prefix}fence"))
            .arg(1000 + i)
            .query_async(&mut c)
            .await
            .expect("SET the old counter");
    }
    let m = builder()
        .key_prefix(&prefix)
        .quorum(Quorum::Majority)
        .build()
        .await
        .expect("build over nodes of the older layout");
    let name = unique("after-upgrade");
    let g = m.lock(&name).await.expect("lock");
    // Any grant quorum includes one of nodes 1..=3, adopted at 1001 or more.
    assert!(
        g.fencing_token() > 1001,
        "a token after the upgrade ({}) is above every token the old counters could give",
        g.fencing_token()
    );
    g.release().await.expect("release");
    m.flush().await;
    let counter = quorumlock::fence_counter_key(&prefix, &name).expect("a valid name");
    // A counter of another slot, which no lock of this test used.
    let other = ["another-name", "yet-another-name"]
        .into_iter()
        .map(|n| quorumlock::fence_counter_key(&prefix, n).expect("a valid name"))
        .find(|k| *k != counter)
        .expect("two names of two slots");
    for i in 0..5 {
        let mut c = raw(i).await;
        let old: Option<u64> = redis::cmd("GET")
            .arg(format!("{prefix}fence"))
            .query_async(&mut c)
            .await
            .expect("GET");
        assert_eq!(old, None, "node {i}: the old counter is gone");
        let v: Option<u64> = redis::cmd("GET")
            .arg(&other)
            .query_async(&mut c)
            .await
            .expect("GET");
        let want = (i < 4).then_some(1000 + i as u64);
        assert_eq!(v, want, "node {i}: every slot's counter adopted, no more");
        let v: Option<u64> = redis::cmd("GET")
            .arg(&counter)
            .query_async(&mut c)
            .await
            .expect("GET");
        assert!(v.is_some(), "node {i}: {counter} exists");
    }
    // The 16384 counters of this test's prefix go with it.
    for i in 0..5 {
        let mut c = raw(i).await;
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{prefix}*"))
            .query_async(&mut c)
            .await
            .expect("KEYS");
        if !keys.is_empty() {
            let _: u64 = redis::cmd("DEL")
                .arg(keys)
                .query_async(&mut c)
                .await
                .expect("DEL");
        }
    }
}

/// A single-node Redis Cluster that owns every slot: the server refuses a
/// script whose keys are in two slots (CROSSSLOT), so each call about one
/// name, and a set whose names share a slot, shows it keeps to one slot.
/// (Renewal batches of several slots, and sets over several slots, are not
/// covered: one lock is held at a time here.)
#[tokio::test]
async fn every_single_name_call_runs_on_a_redis_cluster_node() {
    let args = [
        "--cluster-enabled",
        "yes",
        "--cluster-config-file",
        "nodes.conf",
    ];
    let server = support::local::LocalNodes::start_with(
        1,
        support::local::Extra {
            args: args.map(str::to_owned).to_vec(),
            tls: false,
        },
    )
    .expect("start a cluster-enabled redis-server");
    let mut c = redis::Client::open(server.url(0))
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let () = redis::cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query_async(&mut c)
        .await
        .expect("CLUSTER ADDSLOTSRANGE");
    let ready = support::eventually(Duration::from_secs(10), || {
        let mut c = c.clone();
        async move {
            let info: String = redis::cmd("CLUSTER")
                .arg("INFO")
                .query_async(&mut c)
                .await
                .unwrap_or_default();
            info.contains("cluster_state:ok")
        }
    })
    .await;
    assert!(ready, "the one-node cluster serves every slot");
    let slot = |key: String| {
        let mut c = c.clone();
        async move {
            redis::cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(key)
                .query_async::<u16>(&mut c)
                .await
                .expect("CLUSTER KEYSLOT")
        }
    };
    let name = "orders:42";
    let counter = quorumlock::fence_counter_key("quorumlock:", name).expect("a valid name");
    assert_eq!(
        slot(counter).await,
        slot(format!("quorumlock:{{{name}}}")).await
    );
    // A second name of the same slot, for a set that a cluster can take.
    let twin = (0..100_000)
        .map(|i| format!("twin-{i}"))
        .find(|n| {
            quorumlock::fence_counter_key("quorumlock:", n).ok()
                == quorumlock::fence_counter_key("quorumlock:", name).ok()
        })
        .expect("a name in the slot of orders:42");
    assert_eq!(slot(twin.clone()).await, slot(name.to_owned()).await);

    let m = LockManager::builder()
        .node(server.url(0))
        .node_timeout(Duration::from_millis(500))
        .lease(Duration::from_millis(600))
        .build()
        .await
        .expect("build over the cluster node");
    let me = m.new_owner();
    let g = m
        .request(name)
        .owner(&me)
        .wait(Duration::from_secs(1))
        .acquire()
        .await
        .expect("lock (keys of two slots would be CROSSSLOT)");
    let again = m
        .request(name)
        .owner(&me)
        .acquire()
        .await
        .expect("re-enter");
    assert_eq!(again.fencing_token(), g.fencing_token());
    let st = m.status(name).await.expect("status");
    let s = st.nodes[0].state.as_ref().expect("status of the node");
    assert_eq!((s.hold_count, s.fence), (2, g.fencing_token()));
    // Renewed past its lease by the watchdog (a batch of this one lock).
    tokio::time::sleep(Duration::from_millis(900)).await;
    assert!(g.is_held());
    let stats = m.watchdog_stats();
    assert!(stats.extended >= 1 && stats.node_errors == 0, "{stats:?}");
    again.release().await.expect("release one level");
    // A fair waiter queues, is woken by the release, and takes it.
    let waiter = {
        let m = m.clone();
        tokio::spawn(async move {
            m.request(name)
                .fair()
                .wait(Duration::from_secs(5))
                .acquire()
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let first = g.fencing_token();
    g.release().await.expect("release");
    let w = waiter.await.expect("join").expect("the waiter takes it");
    assert!(w.fencing_token() > first);
    assert_eq!(m.force_unlock(name).await.expect("force"), 1);
    drop(w);
    // A set whose names share the slot, all or none in one script.
    let set = m.lock_all([name, twin.as_str()]).await.expect("lock_all");
    assert!(set.fencing_token(name) > Some(first));
    set.release().await.expect("release the set");
    m.flush().await;
}
