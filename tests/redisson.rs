//! `Layout::Redisson` beside a Redisson-protocol client on the same masters
//! (`support/redisson_client.rs`: an `RLock`, a `RedissonRedLock` and a
//! `RedissonMultiLock` as Redisson's source has them, in the tests' own
//! code).

mod support;

#[path = "support/history.rs"]
#[allow(dead_code)]
mod history;
#[path = "support/redisson_client.rs"]
mod redisson_client;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use quorumlock::{Layout, LockManager, Quorum};
use support::{unique, LocalNodes};

use history::History;
use redisson_client::{Kind, MultiLock, RLock, Server};

/// Three masters of this binary's own, besides the harness's five.
fn three() -> &'static LocalNodes {
    static NODES: OnceLock<LocalNodes> = OnceLock::new();
    NODES.get_or_init(|| LocalNodes::start(3).expect("start 3 local redis-server masters"))
}

async fn manager_over(nodes: &LocalNodes) -> LockManager {
    LockManager::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(300))
        .layout(Layout::Redisson)
        .quorum(Quorum::Majority)
        .build()
        .await
        .expect("build a manager in the Redisson layout")
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// Two Redisson RedLocks over `servers` and two tasks of `m`, a manager
/// over the same members, contend for one name; the history of their
/// holds has no overlap, and quorumlock's tokens increase.
async fn mixed_contention(m: LockManager, servers: Vec<Server>, rounds: usize) {
    let name = unique("mixed");
    let history = History::new();
    let lease = Duration::from_secs(5);
    let mut tasks = Vec::new();
    for r in 0..2 {
        let (servers, name, history) = (servers.clone(), name.clone(), Arc::clone(&history));
        tasks.push(tokio::spawn(async move {
            let red = MultiLock::new(Kind::RedLock, &servers, &name, lease).await;
            for _ in 0..rounds {
                let start = Instant::now();
                red.lock().await;
                let who = format!("redisson-{r}");
                let hold = history.enter(&who, &who, 0, start + lease);
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _ = hold.exit(start + lease);
                red.unlock().await;
            }
        }));
    }
    for q in 0..2 {
        let (m, name, history) = (m.clone(), name.clone(), Arc::clone(&history));
        tasks.push(tokio::spawn(async move {
            for _ in 0..rounds {
                let g = m
                    .request(&name)
                    .owner(&m.new_owner())
                    .acquire()
                    .await
                    .expect("quorumlock lock");
                let who = format!("quorumlock-{q}");
                let hold = history.enter(&who, g.holder_id(), g.fencing_token(), g.valid_until());
                tokio::time::sleep(Duration::from_millis(2)).await;
                let _ = hold.exit(g.valid_until());
                g.release().await.expect("release");
            }
        }));
    }
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(120), t)
            .await
            .expect("contention ends")
            .expect("task");
    }
    let verdict = history.check();
    // Redisson's holds carry no token: only the overlaps count here, and
    // quorumlock's own tokens are checked below.
    eprintln!(
        "{} members: {} holds, {} overlaps",
        servers.len(),
        verdict.acquisitions,
        verdict.overlaps
    );
    assert_eq!(verdict.acquisitions, 4 * rounds, "every hold recorded");
    assert_eq!(verdict.overlaps, 0, "{}", verdict.report());
    let by_entry: Vec<u64> = history
        .intervals()
        .iter()
        .filter(|i| i.client.starts_with("quorumlock"))
        .map(|i| (i.entered, i.token))
        .collect::<std::collections::BTreeMap<_, _>>()
        .into_values()
        .collect();
    assert!(
        by_entry.windows(2).all(|w| w[0] < w[1]),
        "quorumlock's tokens increase: {by_entry:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_redlock_and_quorumlock_never_overlap_on_three_masters() {
    mixed_contention(manager_over(three()).await, masters(three()), 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_redlock_and_quorumlock_never_overlap_on_five_masters() {
    let five = support::nodes();
    mixed_contention(manager_over(five).await, masters(five), 25).await;
}

fn masters(nodes: &LocalNodes) -> Vec<Server> {
    nodes.urls().into_iter().map(Server::Master).collect()
}

/// Who holds and who waits, in the wake-up measurement.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Way {
    /// The baseline: a quorumlock manager wakes another.
    QuorumlockToQuorumlock,
    QuorumlockToRedLock,
    QuorumlockToRLock,
    RedLockToQuorumlock,
}

const WAYS: [Way; 4] = [
    Way::QuorumlockToQuorumlock,
    Way::QuorumlockToRedLock,
    Way::QuorumlockToRLock,
    Way::RedLockToQuorumlock,
];

/// Subscriptions to Redisson's channel of `name`, summed over `urls`.
async fn listeners(urls: &[String], name: &str) -> i64 {
    let mut n = 0;
    for url in urls {
        let mut c = raw_conn(url).await;
        let (_, count): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(redisson_client::channel(name))
            .query_async(&mut c)
            .await
            .expect("PUBSUB NUMSUB");
        n += count;
    }
    n
}

/// One wake-up: `name` taken by the holder of `way`, its waiter started
/// and listening (subscribed to Redisson's channel: a quorumlock waiter on
/// every master, a Redisson waiter on the master it waits at), then the
/// release; how long after the call that freed the lock began the waiter
/// held it.
async fn one_wake(
    way: Way,
    holder: &LockManager,
    waiter: &LockManager,
    urls: &[String],
) -> Duration {
    let name = unique("wake");
    let lease = Duration::from_secs(30);
    let red_holder = MultiLock::redlock(urls, &name, lease).await;
    let guard = if way == Way::RedLockToQuorumlock {
        red_holder.lock().await;
        None
    } else {
        let g = holder.lock(&name).await.expect("holder");
        // `lock()` returns at a quorum's grants: the last master's may
        // still be on its way (or, on a busy machine, timed out and left
        // to the watchdog's repair). A waiter started before it lands
        // there could take that master at once, as an `RLock` of that
        // master alone does, and never wait.
        let everywhere = support::eventually(Duration::from_secs(10), || async {
            let s = holder.status(&name).await.expect("status");
            s.nodes
                .iter()
                .all(|n| n.state.as_ref().is_ok_and(|st| st.holder.is_some()))
        })
        .await;
        assert!(
            everywhere,
            "{way:?}: the holder's lock never reached every master"
        );
        Some(g)
    };
    let (task, listening) = match way {
        Way::QuorumlockToQuorumlock | Way::RedLockToQuorumlock => {
            let (m, n) = (waiter.clone(), name.clone());
            let task = tokio::spawn(async move {
                let g = m.lock(&n).await.expect("waiter");
                let at = Instant::now();
                g.release().await.expect("release");
                at
            });
            (task, urls.len())
        }
        Way::QuorumlockToRedLock => {
            let red = MultiLock::redlock(urls, &name, lease).await;
            let task = tokio::spawn(async move {
                red.lock().await;
                let at = Instant::now();
                red.unlock().await;
                at
            });
            (task, 1)
        }
        Way::QuorumlockToRLock => {
            let one = RLock::new(&Server::Master(urls[0].clone()), &name, lease).await;
            let task = tokio::spawn(async move {
                one.lock().await;
                let at = Instant::now();
                assert!(one.unlock().await);
                at
            });
            (task, 1)
        }
    };
    let want = i64::try_from(listening).expect("small");
    let ready = support::eventually(Duration::from_secs(10), || async {
        listeners(urls, &name).await >= want
    })
    .await;
    assert!(ready, "{way:?}: the waiter never listened");
    let released = match guard {
        Some(g) => {
            let at = Instant::now();
            g.release().await.expect("release");
            at
        }
        None => {
            // The RedLock unlocks its masters one after another: the lock
            // is free for a majority once fewer than a majority hold it,
            // at the unlock of master N - majority (counting from 0).
            let (before, rest) = red_holder.locks.split_at(urls.len() - (urls.len() / 2 + 1));
            for l in before {
                assert!(l.unlock().await);
            }
            let at = Instant::now();
            for l in rest {
                assert!(l.unlock().await);
            }
            at
        }
    };
    task.await.expect("waiter").duration_since(released)
}

/// How long a waiter takes to get the lock after the call that frees it
/// began (a quorumlock release, sent to every node at once; for a
/// RedLock, which unlocks its masters one after another as Redisson's
/// `unlock()` does, the unlock that leaves it without a majority), in the
/// issue's four ways, measured interleaved (each trial
/// runs the four in a rotated order, so load on the machine falls on all
/// alike): quorumlock → quorumlock (the baseline), quorumlock → Redisson
/// RedLock, quorumlock → a plain RLock, Redisson RedLock → quorumlock.
/// Each other way's p50 is within 2× the baseline's. The floor of 1 ms
/// over the baseline only matters below a 1 ms baseline, where doubling a
/// figure the size of one scheduler wake-up would test the scheduler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_the_other_side_at_once() {
    let nodes = three();
    let urls = nodes.urls();
    let (a, b) = (manager_over(nodes).await, manager_over(nodes).await);
    let trials = 80;
    let mut samples: Vec<Vec<Duration>> = vec![Vec::new(); WAYS.len()];
    for t in 0..trials {
        for k in 0..WAYS.len() {
            let i = (t + k) % WAYS.len();
            samples[i].push(one_wake(WAYS[i], &a, &b, &urls).await);
        }
    }
    for (way, v) in WAYS.iter().zip(&samples) {
        let mut v = v.clone();
        v.sort_unstable();
        let q = |f: usize| v[v.len() * f / 100];
        eprintln!(
            "wake-up over {trials}: {way:?} p25 {:?} p50 {:?} p75 {:?} p90 {:?}",
            q(25),
            q(50),
            q(75),
            q(90)
        );
    }
    let p50s: Vec<Duration> = samples.into_iter().map(p50).collect();
    let base = p50s[0];
    let bound = (base * 2).max(base + Duration::from_millis(1));
    for (way, p) in WAYS.iter().zip(&p50s).skip(1) {
        assert!(
            *p <= bound,
            "{way:?} p50 {p:?} above {bound:?} (2x {base:?})"
        );
    }
}

/// A Redisson RedLock holds with a 30 s lease (renewed): quorumlock waits
/// and never takes it; `status` shows the Redisson holders as foreign; the
/// unlock lets quorumlock in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorumlock_waits_for_a_redisson_holder() {
    let nodes = three();
    let m = manager_over(nodes).await;
    let name = unique("held");
    let red = MultiLock::redlock(&nodes.urls(), &name, Duration::from_secs(30)).await;
    red.lock().await;
    let r = m.try_lock(&name, Duration::from_millis(1500)).await;
    assert!(r.is_err(), "quorumlock took a lock Redisson holds");
    assert_eq!(red.renew().await, 3, "Redisson still holds every master");
    let status = m.status(&name).await.expect("status");
    assert_eq!(status.holder(), None);
    let foreign = status.foreign_holders();
    assert_eq!(
        foreign.len(),
        3,
        "one Redisson client per master: {foreign:?}"
    );
    assert!(foreign.iter().all(|h| h.ends_with(":1")), "{foreign:?}");
    let m2 = m.clone();
    let n2 = name.clone();
    let waiter = tokio::spawn(async move { m2.lock(&n2).await.map(|g| (Instant::now(), g)) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    red.unlock().await;
    let (at, g) = waiter.await.expect("task").expect("lock after the unlock");
    assert!(at.duration_since(released) < Duration::from_secs(1));
    // And the other way: Redisson cannot take what quorumlock holds.
    let other = RLock::new(
        &Server::Master(nodes.url(0)),
        &name,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        other.try_acquire().await.is_some(),
        "Redisson took a held lock"
    );
    g.release().await.expect("release");
    assert_eq!(other.try_acquire().await, None);
    assert!(other.unlock().await);
}

/// A Redisson client dies holding the lock (no renewal, no unlock):
/// quorumlock gets it once the lease ran out, not before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_redisson_holders_lock_is_taken_after_its_pttl() {
    let nodes = three();
    let m = manager_over(nodes).await;
    let name = unique("dead");
    let lease = Duration::from_millis(1500);
    let red = MultiLock::redlock(&nodes.urls(), &name, lease).await;
    let taken = Instant::now();
    red.lock().await;
    drop(red);
    let g = m
        .request(&name)
        .wait(Duration::from_secs(10))
        .acquire()
        .await
        .expect("lock after the dead holder's lease");
    let after = taken.elapsed();
    assert!(
        after >= lease - Duration::from_millis(100),
        "taken after {after:?}"
    );
    assert!(
        after < lease + Duration::from_secs(1),
        "taken after {after:?}"
    );
    g.release().await.expect("release");
}

// ---- Re-entry, watchdog, repair, loss, lock_all and a MultiLock, each in
// the Redisson layout, checked on the nodes.

/// A short lease, so that the watchdog's work shows within a test.
const SHORT_LEASE: Duration = Duration::from_millis(900);
const SHORT_PERIOD: Duration = Duration::from_millis(300);

async fn short_manager_over(nodes: &LocalNodes, quorum: Quorum) -> LockManager {
    LockManager::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(150))
        .lease(SHORT_LEASE)
        .renew_interval(SHORT_PERIOD)
        .layout(Layout::Redisson)
        .quorum(quorum)
        .build()
        .await
        .expect("build a manager in the Redisson layout")
}

async fn raw_conn(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .expect("node url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect")
}

/// `cmd key` on the node at `url`, read as `T`.
async fn read_at<T: redis::FromRedisValue>(url: &str, cmd: &str, key: &str) -> T {
    let mut c = raw_conn(url).await;
    redis::cmd(cmd)
        .arg(key)
        .query_async(&mut c)
        .await
        .expect("a read of the node")
}

/// The hash at `key` on the node at `url` (field -> value).
async fn hash_at(url: &str, key: &str) -> std::collections::BTreeMap<String, String> {
    read_at(url, "HGETALL", key).await
}

async fn pttl_at(url: &str, key: &str) -> i64 {
    read_at(url, "PTTL", key).await
}

async fn exists_at(url: &str, key: &str) -> bool {
    read_at(url, "EXISTS", key).await
}

/// `{holder: count}`, the hash every node must hold for one holder.
fn held_by(holder: &str, count: u32) -> std::collections::BTreeMap<String, String> {
    [(holder.to_owned(), count.to_string())].into()
}

/// Re-entry counts in the holder's field of the hash at the bare name: 2
/// after two acquisitions by one owner, 1 after one release (still
/// excluding Redisson), gone after the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reentry_counts_in_the_hash_field_and_needs_two_releases() {
    let nodes = three();
    let m = manager_over(nodes).await;
    let name = unique("reenter");
    let me = m.new_owner();
    let outer = m.request(&name).owner(&me).acquire().await.expect("lock");
    let inner = m
        .request(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("re-enter");
    assert_eq!(inner.hold_count(), 2);
    assert_eq!(inner.holder_id(), outer.holder_id(), "one hold, one field");
    let holder = outer.holder_id().to_owned();
    for url in nodes.urls() {
        assert_eq!(hash_at(&url, &name).await, held_by(&holder, 2), "{url}");
        let prefixed = format!("quorumlock:{{{name}}}");
        assert!(!exists_at(&url, &prefixed).await, "no key at {prefixed}");
    }
    let rlock = RLock::new(
        &Server::Master(nodes.url(0)),
        &name,
        Duration::from_secs(30),
    )
    .await;

    inner.release().await.expect("release the inner level");
    m.flush().await;
    assert_eq!(outer.hold_count(), 1);
    for url in nodes.urls() {
        assert_eq!(hash_at(&url, &name).await, held_by(&holder, 1), "{url}");
        assert!(pttl_at(&url, &name).await > 0);
    }
    assert!(
        rlock.try_acquire().await.is_some(),
        "one release of two left it held"
    );

    outer.release().await.expect("release the outer level");
    m.flush().await;
    for url in nodes.urls() {
        assert!(!exists_at(&url, &name).await, "{url}: deleted at 0");
    }
    assert_eq!(rlock.try_acquire().await, None, "free for Redisson");
    assert!(rlock.unlock().await);
}

/// The watchdog keeps the hash at the name alive over several leases: its
/// PTTL stays within one lease, its field and count unchanged, and
/// Redisson stays excluded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watchdog_renews_the_redisson_hash_past_several_leases() {
    let nodes = three();
    let m = short_manager_over(nodes, Quorum::Majority).await;
    let name = unique("renewed");
    let g = m.lock(&name).await.expect("lock");
    let holder = g.holder_id().to_owned();
    let ticks = m.watchdog_stats().ticks;
    tokio::time::sleep(SHORT_LEASE * 4).await;
    assert!(g.is_held() && !g.is_lost(), "held past four leases");
    assert!(
        m.watchdog_stats().ticks >= ticks + 6,
        "{:?}",
        m.watchdog_stats()
    );
    let lease_ms = i64::try_from(SHORT_LEASE.as_millis()).expect("small");
    for url in nodes.urls() {
        assert_eq!(hash_at(&url, &name).await, held_by(&holder, 1), "{url}");
        let pttl = pttl_at(&url, &name).await;
        assert!(pttl > 0 && pttl <= lease_ms, "{url}: PTTL {pttl}");
    }
    kept_out_then_gone(&m, g, nodes, &nodes.url(1), &name).await;
}

/// While `g` holds `name`, a Redisson client on the master at `url` is kept
/// out; once `g` is released (and `m`'s background work flushed), no master
/// of `nodes` has the hash.
async fn kept_out_then_gone(
    m: &LockManager,
    g: quorumlock::LockGuard,
    nodes: &LocalNodes,
    url: &str,
    name: &str,
) {
    let rlock = RLock::new(
        &Server::Master(url.to_owned()),
        name,
        Duration::from_secs(30),
    )
    .await;
    assert!(rlock.try_acquire().await.is_some(), "Redisson is kept out");
    g.release().await.expect("release");
    m.flush().await;
    for url in nodes.urls() {
        assert!(!exists_at(&url, name).await, "{url}");
    }
}

/// A node flushed while the lock is held gets the hash back at the bare
/// name (holder field, count, a lease) from the watchdog's repair.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_flushed_while_held_is_repaired_at_the_bare_name() {
    // Masters of this test's own: FLUSHALL would disturb the others.
    let nodes = LocalNodes::start(3).expect("start 3 masters");
    let m = short_manager_over(&nodes, Quorum::Majority).await;
    let name = unique("repair");
    let g = m.lock(&name).await.expect("lock");
    let holder = g.holder_id().to_owned();
    let before = m.watchdog_stats().repairs;
    let mut c = raw_conn(&nodes.url(2)).await;
    let () = redis::cmd("FLUSHALL")
        .query_async(&mut c)
        .await
        .expect("FLUSHALL");
    assert!(!exists_at(&nodes.url(2), &name).await);
    let url = nodes.url(2);
    let repaired = support::eventually(SHORT_PERIOD * 2 + Duration::from_millis(300), || {
        exists_at(&url, &name)
    })
    .await;
    assert!(repaired, "node 2 was not repaired");
    assert_eq!(hash_at(&url, &name).await, held_by(&holder, 1));
    assert!(pttl_at(&url, &name).await > 0);
    assert!(
        m.watchdog_stats().repairs > before,
        "{:?}",
        m.watchdog_stats()
    );
    assert!(g.is_held() && !g.is_lost());
    assert!(g.granted_nodes().contains(&2), "{:?}", g.granted_nodes());
    kept_out_then_gone(&m, g, &nodes, &url, &name).await;
}

/// The hash deleted on a majority of the masters (as if a Redisson admin
/// broke it there): the hold is lost, not repaired, within the lease, and
/// its release says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn losing_the_hash_on_a_majority_is_a_loss() {
    let nodes = three();
    let m = short_manager_over(nodes, Quorum::Majority).await;
    let name = unique("lost");
    let g = m.lock(&name).await.expect("lock");
    for i in 0..2 {
        let mut c = raw_conn(&nodes.url(i)).await;
        let deleted: i64 = redis::cmd("DEL")
            .arg(&name)
            .query_async(&mut c)
            .await
            .expect("DEL");
        assert_eq!(deleted, 1, "node {i} held the hash at the name");
    }
    tokio::time::timeout(SHORT_LEASE, g.lost())
        .await
        .expect("lost() within the lease");
    assert!(g.is_lost() && !g.is_held());
    for i in 0..2 {
        assert!(
            !exists_at(&nodes.url(i), &name).await,
            "node {i}: a lost hold is not re-created"
        );
    }
    let err = g.release().await.expect_err("lost");
    assert!(err.is_lost(), "{err}");
}

/// `lock_all` of two names writes both hashes at the bare names, in one
/// holder's field on every node; Redisson and another manager are kept
/// out of each, and a Redisson holder of one keeps the set out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_all_of_two_names_in_the_redisson_layout() {
    let nodes = three();
    let m = manager_over(nodes).await;
    let rival = manager_over(nodes).await;
    let (a, b) = (unique("all-a"), unique("all-b"));
    let set = m.lock_all([a.clone(), b.clone()]).await.expect("lock_all");
    assert_eq!(set.names(), [a.as_str(), b.as_str()]);
    assert!(set.guards().iter().all(|g| g.hold_count() == 1));
    for (name, g) in [&a, &b].into_iter().zip(set.guards()) {
        for url in nodes.urls() {
            assert_eq!(
                hash_at(&url, name).await,
                held_by(g.holder_id(), 1),
                "{url} {name}"
            );
        }
        let rlock = RLock::new(&Server::Master(nodes.url(0)), name, Duration::from_secs(30)).await;
        assert!(rlock.try_acquire().await.is_some(), "Redisson took {name}");
        let err = rival
            .try_lock(name, Duration::ZERO)
            .await
            .expect_err("held by the set");
        assert!(err.is_contended(), "{err}");
    }
    set.release().await.expect("release the set");
    m.flush().await;
    for name in [&a, &b] {
        for url in nodes.urls() {
            assert!(!exists_at(&url, name).await, "{url} {name}");
        }
    }

    // A Redisson RedLock on b keeps the set out, and takes nothing of a.
    let red = MultiLock::redlock(&nodes.urls(), &b, Duration::from_secs(30)).await;
    red.lock().await;
    let err = m
        .try_lock_all([a.clone(), b.clone()], Duration::from_millis(300))
        .await
        .expect_err("b is Redisson's");
    assert!(err.is_contended(), "{err}");
    m.flush().await;
    for url in nodes.urls() {
        assert!(!exists_at(&url, &a).await, "{url}: no partial set kept");
    }
    red.unlock().await;
}

/// A `RedissonMultiLock` (an `RLock` on every master, each of its own
/// client, all required) excludes quorumlock at any quorum, even one
/// node; once it unlocks, quorumlock gets the lock, and then the
/// MultiLock cannot get all masters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_multilock_excludes_a_quorumlock_manager() {
    let nodes = three();
    let majority = manager_over(nodes).await;
    let one = LockManager::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(300))
        .layout(Layout::Redisson)
        .quorum(Quorum::AtLeast(1))
        .build()
        .await
        .expect("build a manager of quorum 1");
    let name = unique("multilock");
    let multi = MultiLock::new(
        Kind::MultiLock,
        &masters(nodes),
        &name,
        Duration::from_secs(30),
    )
    .await;
    assert!(
        multi.try_lock(Duration::ZERO).await,
        "the MultiLock takes every master"
    );
    for m in [&majority, &one] {
        let err = m
            .try_lock(&name, Duration::from_millis(300))
            .await
            .expect_err("the MultiLock holds it");
        assert!(err.is_contended(), "{err}");
    }
    assert_eq!(
        multi.renew().await,
        3,
        "the MultiLock still holds all three"
    );
    let status = majority.status(&name).await.expect("status");
    assert_eq!(status.foreign_holders().len(), 3);
    for url in nodes.urls() {
        let hash = hash_at(&url, &name).await;
        assert_eq!(hash.len(), 1, "{url}: only Redisson's field: {hash:?}");
        assert!(hash.keys().all(|f| f.ends_with(":1")), "{hash:?}");
    }

    assert_eq!(multi.unlock().await, 3, "the MultiLock held all three");
    let g = majority
        .try_lock(&name, Duration::from_secs(2))
        .await
        .expect("free after the MultiLock's unlock");
    assert!(
        !multi.try_lock(Duration::from_millis(300)).await,
        "the MultiLock got all masters while quorumlock holds a majority"
    );
    for (url, l) in nodes.urls().iter().zip(&multi.locks) {
        let hash = hash_at(url, &name).await;
        assert!(
            !hash.contains_key(&l.field),
            "{url}: the MultiLock kept a lock it took: {hash:?}"
        );
    }
    g.release().await.expect("release");
}

// ---- A manager with a Redis Cluster member (two masters of `three()` and
// the shared local cluster), beside Redisson clients that publish and
// listen with sharded pub/sub on the cluster.

use support::local_cluster::cluster;

/// Members: masters 0 and 1 of `three()`, and the local cluster.
fn mixed_servers() -> Vec<Server> {
    let urls = three().urls();
    vec![
        Server::Master(urls[0].clone()),
        Server::Master(urls[1].clone()),
        Server::Cluster(cluster().urls()),
    ]
}

async fn mixed_manager(quorum: Quorum) -> LockManager {
    let urls = three().urls();
    LockManager::builder()
        .node(urls[0].clone())
        .node(urls[1].clone())
        .cluster(cluster().urls())
        .node_timeout(Duration::from_millis(500))
        .layout(Layout::Redisson)
        .quorum(quorum)
        .build()
        .await
        .expect("build over two masters and a cluster in the Redisson layout")
}

/// `cmd key` on the cluster shard that serves the slot of the lock `name`.
async fn read_on_shard<T: redis::FromRedisValue>(cmd: &str, name: &str, key: &str) -> T {
    let port = cluster().port_of_slot(quorumlock::lock_slot(name).expect("a lock name"));
    read_at(&format!("redis://127.0.0.1:{port}"), cmd, key).await
}

/// On the cluster member the lock is the hash at the bare name, on the
/// shard of the name's slot, beside the fence counter of that slot; a
/// Redisson client on the cluster is kept out, sees quorumlock's release
/// as `0` on `redisson_lock__channel:{<name>}` over `SSUBSCRIBE`, and
/// quorumlock's status shows it as a foreign holder once it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_member_the_lock_is_the_hash_at_the_bare_name() {
    let m = mixed_manager(Quorum::All).await;
    let seeds = Server::Cluster(cluster().urls());
    for name in [unique("c-bare"), unique("orders:42"), unique("x y")] {
        let g = m.lock(&name).await.expect("lock");
        let hash: std::collections::BTreeMap<String, String> =
            read_on_shard("HGETALL", &name, &name).await;
        assert_eq!(hash, held_by(g.holder_id(), 1), "{name} on its shard");
        let fence = quorumlock::fence_counter_key("quorumlock:", &name).expect("key");
        let token: u64 = read_on_shard("GET", &name, &fence).await;
        assert!(token >= g.fencing_token(), "{fence}: {token}");
        let prefixed = format!("quorumlock:{{{name}}}");
        assert!(!read_on_shard::<bool>("EXISTS", &name, &prefixed).await);

        let rlock = RLock::new(&seeds, &name, Duration::from_secs(30)).await;
        assert!(rlock.try_acquire().await.is_some(), "Redisson took {name}");
        let mut wakes = rlock.subscribe().await;
        g.release().await.expect("release");
        tokio::time::timeout(Duration::from_secs(2), futures::StreamExt::next(&mut wakes))
            .await
            .expect("Redisson's waiter hears the release over SSUBSCRIBE")
            .expect("a message");
        assert_eq!(rlock.try_acquire().await, None, "free for Redisson");
        let status = m.status(&name).await.expect("status");
        let on_cluster = status.nodes[2].state.as_ref().expect("the cluster answers");
        assert_eq!(on_cluster.holder.as_deref(), Some(rlock.field.as_str()));
        assert_eq!(status.foreign_holders(), [rlock.field.as_str()]);
        assert!(rlock.unlock().await);
        assert!(!read_on_shard::<bool>("EXISTS", &name, &name).await);
    }
}

/// A Redisson RedLock over the same three members (an `RLock` on each
/// master, one on the cluster) and quorumlock managers contend; the
/// history of holds has no overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_redlock_and_quorumlock_never_overlap_with_a_cluster_member() {
    mixed_contention(mixed_manager(Quorum::Majority).await, mixed_servers(), 25).await;
}

/// Wake-ups through the cluster member alone, both ways, while the holder's
/// key has 30 s to live (a missed message would show as a wait that long):
/// a quorumlock release wakes a Redisson `RLock` waiting on the cluster
/// (`SSUBSCRIBE`), and a Redisson unlock on the cluster (`SPUBLISH`) wakes
/// a manager of quorum all, which needs the cluster's grant (one node's
/// message from an unknown client: the waiter tries after a grace of a few
/// milliseconds, not at the lease's end).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_on_the_cluster_member_wake_the_other_side() {
    let m = mixed_manager(Quorum::All).await;
    let seeds = Server::Cluster(cluster().urls());
    let lease = Duration::from_secs(30);
    let soon = Duration::from_secs(3);

    // quorumlock → a Redisson RLock on the cluster.
    let name = unique("c-wake-qr");
    let g = m.lock(&name).await.expect("holder");
    let rlock = RLock::new(&seeds, &name, lease).await;
    let waiter = tokio::spawn(async move {
        rlock.lock().await;
        let at = Instant::now();
        assert!(rlock.unlock().await);
        at
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    g.release().await.expect("release");
    let at = tokio::time::timeout(soon, waiter)
        .await
        .expect("the Redisson waiter woke at once")
        .expect("waiter");
    eprintln!("quorumlock → RLock on the cluster: {:?}", at - released);

    // A Redisson RLock on the cluster → quorumlock (quorum all).
    let name = unique("c-wake-rq");
    let rlock = RLock::new(&seeds, &name, lease).await;
    assert_eq!(rlock.try_acquire().await, None);
    let (m2, n2) = (m.clone(), name.clone());
    let waiter = tokio::spawn(async move {
        let g = m2.lock(&n2).await.expect("waiter");
        (Instant::now(), g)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiter.is_finished(),
        "quorumlock took a lock Redisson holds"
    );
    let released = Instant::now();
    assert!(rlock.unlock().await);
    let (at, g) = tokio::time::timeout(soon, waiter)
        .await
        .expect("the quorumlock waiter woke at once")
        .expect("waiter");
    eprintln!("RLock on the cluster → quorumlock: {:?}", at - released);
    g.release().await.expect("release");
}

/// A name with a brace is refused with a typed error before any node is
/// called, in this layout as in the default one, on masters and on a
/// cluster member: Redisson keeps `{user}:lock`'s channel in the name's
/// own hash tag, while quorumlock's keys wrap the name in braces, so their
/// keys could not share a slot (and `a}b`'s channel and key lie in
/// different slots even for Redisson).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_with_a_brace_is_refused_in_the_redisson_layout() {
    let on_masters = manager_over(three()).await;
    let with_cluster = mixed_manager(Quorum::Majority).await;
    for m in [&on_masters, &with_cluster] {
        for name in ["{user}:lock", "a}b", "{}x"] {
            let err = m
                .try_lock(name, Duration::ZERO)
                .await
                .expect_err("a brace in the name");
            assert!(err.is_invalid_input(), "{name}: {err}");
            assert!(m.status(name).await.expect_err("status").is_invalid_input());
        }
    }
    assert!(Layout::Redisson
        .lock_key("quorumlock:", "{user}:lock")
        .is_err());
}

// ---- A lock name that is the key of quorumlock's older fence counter
// (`<prefix>fence`, `quorumlock:fence` by default): in this layout a lock
// is its name, so that key may be a Redisson object of the user's.

/// The default prefix's older fence counter key.
const OLD_COUNTER: &str = "quorumlock:fence";

/// A builder over `nodes` in `layout`, default key prefix.
fn over(nodes: &LocalNodes, layout: Layout) -> quorumlock::LockManagerBuilder {
    LockManager::builder()
        .nodes(nodes.urls())
        .node_timeout(Duration::from_millis(300))
        .layout(layout)
}

/// A Java `RLock` named `quorumlock:fence` holds on every master: a
/// manager built over them (in either layout) builds and leaves the hash
/// alone; the Redisson-layout manager sees the lock held. (`build()` used
/// to adopt whatever was at that key, and failed with `WRONGTYPE`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_lock_at_the_older_counters_key_does_not_break_build() {
    let nodes = LocalNodes::start(3).expect("start 3 local redis-server masters");
    let mut held = Vec::new();
    for url in nodes.urls() {
        let rlock = RLock::new(&Server::Master(url), OLD_COUNTER, Duration::from_secs(60)).await;
        assert_eq!(rlock.try_acquire().await, None, "the RLock holds");
        held.push(rlock);
    }
    for layout in [Layout::Redisson, Layout::Quorumlock] {
        let m = over(&nodes, layout)
            .build()
            .await
            .unwrap_or_else(|e| panic!("{layout:?}: build beside a held RLock: {e}"));
        let g = m.lock(&unique("beside")).await.expect("lock another name");
        g.release().await.expect("release");
    }
    for (url, rlock) in nodes.urls().iter().zip(&held) {
        assert_eq!(
            hash_at(url, OLD_COUNTER).await,
            held_by(&rlock.field, 1),
            "{url}: the RLock's hash is untouched"
        );
        assert!(pttl_at(url, OLD_COUNTER).await > 50_000, "{url}");
    }
    for rlock in &held {
        assert!(rlock.unlock().await);
    }
}

/// An integer at `quorumlock:fence` (a Redisson `RAtomicLong` of that name,
/// or quorumlock's counter from before per-slot counters, which only the
/// quorumlock layout ever wrote) is adopted only by a manager in the
/// quorumlock layout; one in the Redisson layout leaves it as it is (and
/// its tokens are not raised to it). A string that is not a plain
/// integer is never adopted, in either layout, and breaks no `build()`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_older_counters_key_is_adopted_only_in_the_quorumlock_layout() {
    let nodes = LocalNodes::start(3).expect("start 3 local redis-server masters");
    let set_all = |value: &'static str| {
        let urls = nodes.urls();
        async move {
            for url in &urls {
                let () = redis::cmd("SET")
                    .arg(OLD_COUNTER)
                    .arg(value)
                    .query_async(&mut raw_conn(url).await)
                    .await
                    .expect("SET");
            }
        }
    };
    let values = || async {
        let mut out = Vec::new();
        for url in nodes.urls() {
            out.push(read_at::<Option<String>>(&url, "GET", OLD_COUNTER).await);
        }
        out
    };
    let name = unique("after");

    set_all("5000").await;
    let redisson = over(&nodes, Layout::Redisson).build().await.expect("build");
    assert_eq!(
        values().await,
        vec![Some("5000".to_owned()); 3],
        "left as it is"
    );
    let g = redisson.lock(&name).await.expect("lock");
    assert!(
        g.fencing_token() < 5000,
        "not adopted: {}",
        g.fencing_token()
    );
    g.release().await.expect("release");

    for junk in ["12abc", "-7", "1.5"] {
        set_all(junk).await;
        for layout in [Layout::Quorumlock, Layout::Redisson] {
            over(&nodes, layout)
                .build()
                .await
                .unwrap_or_else(|e| panic!("{layout:?} beside {junk:?}: {e}"));
            assert_eq!(values().await, vec![Some(junk.to_owned()); 3], "{layout:?}");
        }
    }

    set_all("5000").await;
    let own = over(&nodes, Layout::Quorumlock)
        .build()
        .await
        .expect("build");
    assert_eq!(values().await, vec![None; 3], "adopted and deleted");
    let g = own.lock(&name).await.expect("lock");
    assert!(g.fencing_token() > 5000, "adopted: {}", g.fencing_token());
    g.release().await.expect("release");
}

/// In the Redisson layout a lock's key is its name, so the name that is
/// the key of an internal key of the manager's prefix (`<prefix>fence`)
/// is refused (`Error::InvalidInput`) by every call that takes a name,
/// and by `Layout::lock_key`; the quorumlock layout, whose lock keys are
/// `<prefix>{<name>}`, takes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_name_that_is_an_internal_key_is_refused_in_the_redisson_layout() {
    let prefix = format!("{}:", unique("names"));
    let reserved = format!("{prefix}fence");
    let m = LockManager::builder()
        .nodes(three().urls())
        .node_timeout(Duration::from_millis(300))
        .layout(Layout::Redisson)
        .key_prefix(&prefix)
        .build()
        .await
        .expect("build");
    let err = m
        .try_lock(&reserved, Duration::ZERO)
        .await
        .expect_err("the older fence counter's key");
    assert!(err.is_invalid_input(), "{err}");
    assert!(err.to_string().contains("fence"), "{err}");
    assert!(m
        .status(&reserved)
        .await
        .expect_err("status")
        .is_invalid_input());
    let all = m
        .try_lock_all([reserved.clone(), unique("x")], Duration::ZERO)
        .await;
    assert!(all.expect_err("lock_all").is_invalid_input());
    // Another prefix's name is just a name here.
    let g = m.lock(OLD_COUNTER).await.expect("not this manager's key");
    g.release().await.expect("release");
    assert!(Layout::Redisson.lock_key(&prefix, &reserved).is_err());
    assert!(Layout::Redisson
        .lock_key("quorumlock:", OLD_COUNTER)
        .is_err());
    assert_eq!(
        Layout::Quorumlock.lock_key(&prefix, &reserved).expect("ok"),
        format!("{prefix}{{{reserved}}}")
    );
    let own = LockManager::builder()
        .nodes(three().urls())
        .node_timeout(Duration::from_millis(300))
        .key_prefix(&prefix)
        .build()
        .await
        .expect("build");
    let g = own
        .lock(&reserved)
        .await
        .expect("a plain name in its layout");
    g.release().await.expect("release");
}
