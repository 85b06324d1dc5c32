//! Waiting: pub/sub wake-ups, broken subscriptions, cancellation, fairness.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockManager, Quorum};
use support::{key, manager, nodes, nodes_with_key, raw, unique};

/// Subscriptions to `name`'s release channel, summed over nodes.
async fn pubsub_channels(name: &str) -> usize {
    let mut n = 0;
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let chans: Vec<String> = redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg(format!("{}:released", key(name)))
            .query_async(&mut c)
            .await
            .expect("PUBSUB CHANNELS");
        n += chans.len();
    }
    n
}

/// A task that waits for `name`, releases it at once, and returns when it
/// got it.
fn spawn_waiter(m: &LockManager, name: &str) -> tokio::task::JoinHandle<Instant> {
    let (m, name) = (m.clone(), name.to_owned());
    tokio::spawn(async move {
        let g = m.lock(&name).await.expect("waiter locks");
        let at = Instant::now();
        g.release().await.expect("release");
        at
    })
}

#[tokio::test]
async fn a_waiter_wakes_on_release_not_on_its_timer() {
    let m = manager(Quorum::Majority).await;
    let name = unique("wake");
    let g = support::hold_as_new_owner(&m, &name).await;
    let waiter = spawn_waiter(&m, &name);
    // Let the waiter subscribe and go to sleep on its fallback timer, which
    // is the holder's PTTL (about 30 s).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    g.release().await.expect("release");
    let acquired = waiter.await.expect("waiter task");
    let handoff = acquired.duration_since(released);
    assert!(
        handoff < Duration::from_secs(1),
        "woke after {handoff:?}: not by pub/sub"
    );
    assert!(m.pubsub_stats().messages >= 1);
}

#[tokio::test]
async fn a_waiter_still_acquires_when_its_subscription_is_killed() {
    // Killing every pub/sub connection also reconnects (and wakes every
    // waiter of) other tests' managers: not while wake-ups are counted.
    let _serial = support::serial().await;
    let m = manager(Quorum::Majority).await;
    let name = unique("killed");
    let g = support::hold_as_new_owner(&m, &name).await;
    let waiter = spawn_waiter(&m, &name);
    let n3 = name.clone();
    assert!(
        support::eventually(Duration::from_secs(2), || async {
            pubsub_channels(&n3).await >= 5
        })
        .await,
        "the waiter should have subscribed on every node"
    );
    let connections = m.pubsub_stats().connections;
    // Kill every pub/sub connection to every node.
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let _: i64 = redis::cmd("CLIENT")
            .arg("KILL")
            .arg("TYPE")
            .arg("pubsub")
            .query_async(&mut c)
            .await
            .expect("CLIENT KILL");
    }
    // Release right away: the message may be lost; the waiter must not hang
    // until the holder's 30 s TTL would have run out.
    let released = Instant::now();
    g.release().await.expect("release");
    let acquired = waiter.await.expect("waiter task");
    assert!(
        acquired.duration_since(released) < Duration::from_secs(3),
        "waiter hung after its pub/sub connection died: {:?}",
        acquired.duration_since(released)
    );
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            m.pubsub_stats().connections >= connections + 5
        })
        .await,
        "pub/sub connections should come back"
    );
}

#[tokio::test]
async fn dropped_acquisitions_leave_no_key_and_no_subscription() {
    let m = manager(Quorum::Majority).await;
    let name = unique("dropped");
    let holder = m.new_owner();
    let contender = m.new_owner();
    let mut rng_state = 0x9e37_79b9_u64;
    let mut next = move || {
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        rng_state
    };
    for trial in 0..500u32 {
        // Half the trials race a free lock, half wait on a held one.
        let g = if trial % 2 == 0 {
            Some(
                m.request(&name)
                    .owner(&holder)
                    .acquire()
                    .await
                    .expect("holder"),
            )
        } else {
            None
        };
        let cut = Duration::from_micros(next() % 4_000);
        let r = tokio::time::timeout(cut, m.request(&name).owner(&contender).acquire()).await;
        if let Ok(Ok(won)) = r {
            won.release().await.expect("release");
        }
        if let Some(g) = g {
            g.release().await.expect("release");
        }
    }
    let clean = support::eventually(Duration::from_secs(3), || async {
        nodes_with_key(&name).await == 0
    })
    .await;
    assert!(clean, "a dropped acquisition left a key behind");
    let unsubscribed = support::eventually(Duration::from_secs(3), || async {
        pubsub_channels(&name).await == 0 && m.pubsub_stats().channels == 0
    })
    .await;
    assert!(
        unsubscribed,
        "a dropped acquisition left a subscription behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_share_one_lock_fairly() {
    let m: LockManager = manager(Quorum::Majority).await;
    let name = unique("fair");
    let total = 2_000usize;
    let tasks = 16usize;
    let inside = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let (m, name, inside, done) = (m.clone(), name.clone(), inside.clone(), done.clone());
        handles.push(tokio::spawn(async move {
            let mut waits = Vec::new();
            let mut mine = 0usize;
            loop {
                let start = Instant::now();
                let g = m.lock(&name).await.expect("lock");
                waits.push(start.elapsed());
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                let taken = done.fetch_add(1, Ordering::SeqCst);
                inside.store(false, Ordering::SeqCst);
                g.release().await.expect("release");
                if taken >= total {
                    break;
                }
                mine += 1;
            }
            (mine, waits)
        }));
    }
    let mut all = Vec::new();
    for h in handles {
        let (mine, waits) = h.await.expect("task");
        assert!(mine > 0, "a task never got the lock");
        all.extend(waits);
    }
    all.sort();
    let p99 = all[all.len() * 99 / 100];
    let max = all[all.len() - 1];
    let p50 = all[all.len() / 2];
    println!(
        "fairness: {} acquisitions by {tasks} tasks; wait p50 {p50:?}, p99 {p99:?}, max {max:?}",
        all.len()
    );
    assert!(
        max < Duration::from_secs(10),
        "a waiter starved for {max:?}"
    );
}

/// Redisson's `testLeaseTimeout`, translated: 8 tasks of one manager each
/// try for 10 s to take a lock with a 500 ms lease that nobody releases. An
/// expiry publishes nothing, so every queued waiter's fallback must end by
/// the holder's expiry: all 8 get the lock, one after another.
#[tokio::test]
async fn queued_waiters_take_turns_on_leases_that_expire_unreleased() {
    let m = manager(Quorum::Majority).await;
    let name = unique("lease-timeout");
    let start = Instant::now();
    // They arrive 50 ms apart, so most find others queued before them.
    let tasks: Vec<_> = (0..8u64)
        .map(|i| {
            let (m, name) = (m.clone(), name.clone());
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(50 * i)).await;
                let g = m
                    .request(&name)
                    .lease(Duration::from_millis(500))
                    .wait(Duration::from_secs(10))
                    .acquire()
                    .await?;
                let at = Instant::now();
                // Never released: the lease runs out on the nodes.
                std::mem::forget(g);
                Ok::<Instant, quorumlock::Error>(at)
            })
        })
        .collect();
    let mut got = Vec::new();
    for t in tasks {
        match t.await.expect("task") {
            Ok(at) => got.push(at.duration_since(start)),
            Err(e) => panic!("a waiter failed while the lock was free most of the time: {e}"),
        }
    }
    got.sort();
    assert_eq!(got.len(), 8);
    let last = got[7];
    assert!(
        last < Duration::from_secs(6),
        "8 leases of 500 ms took {last:?}"
    );
}

/// A release wakes the head of the local queue only: the wake-ups per
/// handoff do not grow with the number of queued waiters.
#[tokio::test]
async fn a_handoff_wakes_the_same_number_of_waiters_for_10_or_1000_queued() {
    let _serial = support::serial().await;
    let m = manager(Quorum::Majority).await;
    let mut per_handoff = Vec::new();
    for queued in [10usize, 1_000] {
        let name = unique("wakeups");
        let g = support::hold_as_new_owner(&m, &name).await;
        let tasks: Vec<_> = (0..queued).map(|_| spawn_waiter(&m, &name)).collect();
        // Let every waiter queue and settle on its timer, and the nodes
        // work off the burst of their first attempts (on a loaded machine
        // it can outlast the sleep; the release would then wait behind it
        // and time out).
        tokio::time::sleep(Duration::from_millis(500)).await;
        support::scripts_settled(Duration::from_millis(200), Duration::from_secs(10)).await;
        let before = m.pubsub_stats().wakeups;
        g.release().await.expect("release");
        for t in tasks {
            t.await.expect("waiter");
        }
        let woken = m.pubsub_stats().wakeups - before;
        #[allow(clippy::cast_precision_loss)]
        per_handoff.push(woken as f64 / queued as f64);
    }
    eprintln!(
        "wake-ups per handoff: 10 queued {:.2}, 1,000 queued {:.2}",
        per_handoff[0], per_handoff[1]
    );
    // Each release message rings one waiter; a release publishes on every
    // node (5 here), so about 5 per handoff, whatever the queue's length.
    assert!(
        per_handoff[1] <= per_handoff[0] * 1.5 + 1.0 && per_handoff[1] <= 8.0,
        "wake-ups per handoff: 10 queued {:.1}, 1,000 queued {:.1}",
        per_handoff[0],
        per_handoff[1]
    );
}

#[tokio::test]
async fn a_release_naming_a_dead_waiter_stalls_a_plain_waiter_briefly_only() {
    // A release wakes only the waiter at the head of the nodes' queue. If
    // that waiter's process died, nobody is woken: the live waiter must
    // find the free lock on its own, within a third of the queue timeout,
    // not at the old holder's expiry (30 s here).
    let name = unique("dead-head");
    let holder = manager(Quorum::Majority).await;
    let m = manager(Quorum::Majority).await;
    let g = holder.lock(&name).await.expect("lock");
    let waiting = {
        let (m, name) = (m.clone(), name.clone());
        tokio::spawn(async move {
            let g = m.lock(&name).await.expect("waiter locks");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        })
    };
    // The live waiter has queued; a dead one goes in front of it on every
    // node, with a deadline that never passes.
    assert!(
        support::eventually(Duration::from_secs(5), || async {
            let mut c = raw(0).await;
            let n: usize = redis::cmd("ZCARD")
                .arg(format!("{}:queue", key(&name)))
                .query_async(&mut c)
                .await
                .expect("ZCARD");
            n == 1
        })
        .await,
        "the waiter never queued"
    );
    let dead = "deadhost@1#0000000000000000:owner-1:wait-1";
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let () = redis::pipe()
            .cmd("ZADD")
            .arg(format!("{}:queue", key(&name)))
            .arg(0)
            .arg(dead)
            .ignore()
            .cmd("ZADD")
            .arg(format!("{}:timeouts", key(&name)))
            .arg(i64::MAX / 2)
            .arg(dead)
            .ignore()
            .query_async(&mut c)
            .await
            .expect("plant a dead waiter");
    }
    let released = Instant::now();
    g.release().await.expect("release");
    let at = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the live waiter got the lock")
        .expect("task");
    let waited = at.saturating_duration_since(released);
    // queue_timeout 5 s: a waiter checks at least every 5/3 s.
    assert!(waited < Duration::from_secs(3), "waited {waited:?}");
    for i in 0..nodes().len() {
        let mut c = raw(i).await;
        let _: () = redis::cmd("DEL")
            .arg(format!("{}:queue", key(&name)))
            .arg(format!("{}:timeouts", key(&name)))
            .query_async(&mut c)
            .await
            .expect("DEL");
    }
}

/// A waiter on a held lock keeps its place on the nodes with its
/// manager's batches of places (`keep.lua`), not with attempts: with a
/// 600 ms queue timeout (a refresh every 200 ms), a node runs about ten
/// kept places for the lock in 2 s and no queued acquire, and the place
/// outlives its timeout. Before, each refresh was a queued attempt on every
/// node (ten `HEXISTS` in those 2 s, no `ZADD XX`). Three masters of its
/// own, so that `MONITOR` slows no other test.
#[tokio::test]
async fn a_waiter_on_a_held_lock_keeps_its_place_without_attempting() {
    let own = support::LocalNodes::start(3).expect("three masters");
    let over = || {
        LockManager::builder()
            .nodes(own.urls())
            .node_timeout(Duration::from_millis(300))
    };
    let holder = over().build().await.expect("build");
    let name = unique("kept");
    let g = support::hold_as_new_owner(&holder, &name).await;
    let m = over()
        .queue_timeout(Duration::from_millis(600))
        .build()
        .await
        .expect("build");
    let waiter = spawn_waiter(&m, &name);
    // Its first miss, its subscription, and the attempt that takes its
    // place: from then on it only refreshes the place.
    support::until_queued(&own.url(0), &key(&name), 1).await;
    let lines = support::monitored(&own.url(0), &key(&name), Duration::from_secs(2)).await;
    let (attempts, keeps) = support::attempts_and_keeps(&lines);
    assert_eq!(attempts, 0, "{lines:#?}");
    assert!(keeps >= 5, "{keeps} kept places in 2 s: {lines:#?}");
    let mut c = redis::Client::open(own.url(0))
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let queued: usize = redis::cmd("ZCARD")
        .arg(format!("{}:timeouts", key(&name)))
        .query_async(&mut c)
        .await
        .expect("ZCARD");
    assert_eq!(queued, 1, "the place outlives its 600 ms timeout");
    let released = Instant::now();
    g.release().await.expect("release");
    let acquired = waiter.await.expect("waiter task");
    assert!(acquired.duration_since(released) < Duration::from_secs(1));
}
