//! `Layout::Redisson` beside a Redisson-protocol client on the same masters.
//!
//! The client below is written from the protocol of Redisson's `RLock` as
//! issue 24 describes it (its own scripts, not Redisson's): the lock is a
//! hash at the name, field `<uuid>:<thread id>`, value the reentrancy count,
//! lease by `PEXPIRE`; acquire grants when the key is absent or the field is
//! ours (`HINCRBY`, `PEXPIRE`, reply nil) and replies the `PTTL` otherwise;
//! release decrements, deletes at 0 and publishes `0` on
//! `redisson_lock__channel:{<name>}`; waiters subscribe to that channel and
//! retry on any message or when the `PTTL` they got runs out. A RedLock is one
//! `RLock` per master, each with its own uuid, taken one after another, held
//! with a majority.

mod support;

#[path = "support/history.rs"]
#[allow(dead_code)]
mod history;

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures::StreamExt;
use quorumlock::{Layout, LockManager, Quorum};
use support::{unique, LocalNodes};

use history::History;

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

/// Acquire: grant if absent or ours (count + 1, lease reset, nil), else PTTL.
const ACQUIRE: &str = r"
if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])";

/// Release: nil if not ours; count - 1; above 0 the lease is reset, at 0
/// the key goes and `0` is published.
const RELEASE: &str = r"
if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return nil
end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
redis.call('publish', KEYS[2], '0')
return 1";

/// Renewal: the lease reset while the field exists.
const RENEW: &str = r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0";

fn channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// One Redisson-protocol `RLock` on one master, for one client uuid and
/// thread.
struct RLock {
    client: redis::Client,
    conn: redis::aio::MultiplexedConnection,
    name: String,
    field: String,
    lease: Duration,
}

impl RLock {
    async fn new(url: &str, name: &str, lease: Duration) -> Self {
        let client = redis::Client::open(url).expect("node url");
        let conn = client
            .get_multiplexed_async_connection()
            .await
            .expect("connect");
        let uuid = format!("{:032x}", rand::random::<u128>());
        Self {
            client,
            conn,
            name: name.to_owned(),
            field: format!("{uuid}:1"),
            lease,
        }
    }

    fn ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }

    /// One acquire: `None` when granted, else the holder's PTTL in ms.
    async fn try_acquire(&self) -> Option<i64> {
        let mut c = self.conn.clone();
        redis::Script::new(ACQUIRE)
            .key(&self.name)
            .arg(self.ms())
            .arg(&self.field)
            .invoke_async(&mut c)
            .await
            .expect("acquire script")
    }

    /// Releases one level; whether the field was ours.
    async fn unlock(&self) -> bool {
        let mut c = self.conn.clone();
        let r: Option<i64> = redis::Script::new(RELEASE)
            .key(&self.name)
            .key(channel(&self.name))
            .arg(self.ms())
            .arg(&self.field)
            .invoke_async(&mut c)
            .await
            .expect("release script");
        r.is_some()
    }

    async fn renew(&self) -> bool {
        let mut c = self.conn.clone();
        let r: i64 = redis::Script::new(RENEW)
            .key(&self.name)
            .arg(&self.field)
            .arg(self.ms())
            .invoke_async(&mut c)
            .await
            .expect("renew script");
        r == 1
    }

    /// A subscription to the lock's channel on this master.
    async fn subscribe(&self) -> redis::aio::PubSub {
        let mut ps = self.client.get_async_pubsub().await.expect("pubsub");
        ps.subscribe(channel(&self.name)).await.expect("subscribe");
        ps
    }

    /// `lock()`: acquire; on a miss subscribe, retry, and wait for a
    /// message or the PTTL before the next try.
    async fn lock(&self) {
        if self.try_acquire().await.is_none() {
            return;
        }
        let mut ps = self.subscribe().await;
        loop {
            let Some(pttl) = self.try_acquire().await else {
                return;
            };
            let wait = Duration::from_millis(u64::try_from(pttl.max(1)).unwrap_or(1));
            let _ = tokio::time::timeout(wait, ps.on_message().next()).await;
        }
    }
}

/// A `RedissonRedLock`: one `RLock` per master, each of its own client
/// (uuid), taken one after another, held with a majority.
struct RedLock {
    locks: Vec<RLock>,
}

impl RedLock {
    async fn new(urls: &[String], name: &str, lease: Duration) -> Self {
        let mut locks = Vec::new();
        for url in urls {
            locks.push(RLock::new(url, name, lease).await);
        }
        Self { locks }
    }

    fn majority(&self) -> usize {
        self.locks.len() / 2 + 1
    }

    /// One round: each lock tried once in order; on fewer than a majority
    /// the ones taken are released. `Err` is the longest PTTL seen.
    async fn try_round(&self) -> Result<(), i64> {
        let mut taken = Vec::new();
        let mut worst = 0;
        for (i, l) in self.locks.iter().enumerate() {
            match l.try_acquire().await {
                None => taken.push(i),
                Some(p) => worst = worst.max(p),
            }
        }
        if taken.len() >= self.majority() {
            return Ok(());
        }
        for i in taken {
            self.locks[i].unlock().await;
        }
        Err(worst)
    }

    /// `lock()`: rounds until a majority, waiting between rounds for a
    /// message on any master's channel or the PTTL seen.
    async fn lock(&self) {
        if self.try_round().await.is_ok() {
            return;
        }
        let mut subs = Vec::new();
        for l in &self.locks {
            subs.push(l.subscribe().await);
        }
        let mut messages =
            futures::stream::select_all(subs.iter_mut().map(|ps| ps.on_message().boxed()));
        loop {
            let Err(pttl) = self.try_round().await else {
                return;
            };
            let wait = Duration::from_millis(u64::try_from(pttl.clamp(1, 1000)).unwrap_or(1));
            let _ = tokio::time::timeout(wait, messages.next()).await;
        }
    }

    async fn unlock(&self) {
        for l in &self.locks {
            l.unlock().await;
        }
    }

    async fn renew(&self) -> usize {
        let mut n = 0;
        for l in &self.locks {
            n += usize::from(l.renew().await);
        }
        n
    }
}

fn p50(mut v: Vec<Duration>) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// A Redisson RedLock and a quorumlock manager contend for one name; the
/// history of their holds has no overlap.
async fn mixed_contention(nodes: &LocalNodes, rounds: usize) {
    let urls = nodes.urls();
    let m = manager_over(nodes).await;
    let name = unique("mixed");
    let history = History::new();
    let lease = Duration::from_secs(5);
    let mut tasks = Vec::new();
    for r in 0..2 {
        let (urls, name, history) = (urls.clone(), name.clone(), Arc::clone(&history));
        tasks.push(tokio::spawn(async move {
            let red = RedLock::new(&urls, &name, lease).await;
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
        "{} masters: {} holds, {} overlaps",
        nodes.len(),
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
    mixed_contention(three(), 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redisson_redlock_and_quorumlock_never_overlap_on_five_masters() {
    mixed_contention(support::nodes(), 25).await;
}

/// How long a waiter takes to get the lock after the holder released it:
/// quorumlock → quorumlock, quorumlock → Redisson, Redisson → quorumlock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_wake_the_other_side_at_once() {
    let nodes = three();
    let urls = nodes.urls();
    let (a, b) = (manager_over(nodes).await, manager_over(nodes).await);
    let lease = Duration::from_secs(30);
    let trials = 15;
    let (mut qq, mut qr, mut q1, mut rq) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..trials {
        // quorumlock → quorumlock.
        let name = unique("wake-qq");
        let g = a.lock(&name).await.expect("holder");
        let b2 = b.clone();
        let n2 = name.clone();
        let waiter = tokio::spawn(async move {
            let g = b2.lock(&n2).await.expect("waiter");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let released = Instant::now();
        g.release().await.expect("release");
        qq.push(waiter.await.expect("waiter").duration_since(released));

        // quorumlock → Redisson.
        let name = unique("wake-qr");
        let g = a.lock(&name).await.expect("holder");
        let red = RedLock::new(&urls, &name, lease).await;
        let waiter = tokio::spawn(async move {
            red.lock().await;
            let at = Instant::now();
            red.unlock().await;
            at
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let released = Instant::now();
        g.release().await.expect("release");
        qr.push(waiter.await.expect("waiter").duration_since(released));

        // quorumlock → a plain RLock on one master.
        let name = unique("wake-q1");
        let g = a.lock(&name).await.expect("holder");
        let one = RLock::new(&urls[0], &name, lease).await;
        let waiter = tokio::spawn(async move {
            one.lock().await;
            let at = Instant::now();
            assert!(one.unlock().await);
            at
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let released = Instant::now();
        g.release().await.expect("release");
        q1.push(waiter.await.expect("waiter").duration_since(released));

        // Redisson → quorumlock.
        let name = unique("wake-rq");
        let red = RedLock::new(&urls, &name, lease).await;
        red.lock().await;
        let b2 = b.clone();
        let n2 = name.clone();
        let waiter = tokio::spawn(async move {
            let g = b2.lock(&n2).await.expect("waiter");
            let at = Instant::now();
            g.release().await.expect("release");
            at
        });
        tokio::time::sleep(Duration::from_millis(150)).await;
        let released = Instant::now();
        red.unlock().await;
        rq.push(waiter.await.expect("waiter").duration_since(released));
    }
    let (qq, qr, q1, rq) = (p50(qq), p50(qr), p50(q1), p50(rq));
    eprintln!(
        "wake-up p50 over {trials}: quorumlock→quorumlock {qq:?}, quorumlock→Redisson RedLock \
         {qr:?}, quorumlock→Redisson RLock {q1:?}, Redisson RedLock→quorumlock {rq:?}"
    );
    // Within 2× quorumlock↔quorumlock, with a floor for a loaded machine.
    let bound = (qq * 2).max(Duration::from_millis(20));
    assert!(
        qr <= bound,
        "quorumlock→Redisson p50 {qr:?} above {bound:?}"
    );
    assert!(q1 <= bound, "quorumlock→RLock p50 {q1:?} above {bound:?}");
    assert!(
        rq <= bound,
        "Redisson→quorumlock p50 {rq:?} above {bound:?}"
    );
}

/// A Redisson RedLock holds with a 30 s lease (renewed): quorumlock waits
/// and never takes it; `status` shows the Redisson holders as foreign; the
/// unlock lets quorumlock in at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quorumlock_waits_for_a_redisson_holder() {
    let nodes = three();
    let m = manager_over(nodes).await;
    let name = unique("held");
    let red = RedLock::new(&nodes.urls(), &name, Duration::from_secs(30)).await;
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
    let other = RLock::new(&nodes.url(0), &name, Duration::from_secs(30)).await;
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
    let red = RedLock::new(&nodes.urls(), &name, lease).await;
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
    let rlock = RLock::new(&nodes.url(0), &name, Duration::from_secs(30)).await;

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
    let rlock = RLock::new(&nodes.url(1), &name, Duration::from_secs(30)).await;
    assert!(rlock.try_acquire().await.is_some(), "Redisson is kept out");
    g.release().await.expect("release");
    m.flush().await;
    for url in nodes.urls() {
        assert!(!exists_at(&url, &name).await, "{url}");
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
    let rlock = RLock::new(&url, &name, Duration::from_secs(30)).await;
    assert!(rlock.try_acquire().await.is_some(), "Redisson is kept out");
    g.release().await.expect("release");
    m.flush().await;
    for url in nodes.urls() {
        assert!(!exists_at(&url, &name).await, "{url}");
    }
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
        let rlock = RLock::new(&nodes.url(0), name, Duration::from_secs(30)).await;
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
    let red = RedLock::new(&nodes.urls(), &b, Duration::from_secs(30)).await;
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
    let multi = RedLock::new(&nodes.urls(), &name, Duration::from_secs(30)).await;
    for l in &multi.locks {
        assert_eq!(
            l.try_acquire().await,
            None,
            "the MultiLock takes every master"
        );
    }
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

    multi.unlock().await;
    let g = majority
        .try_lock(&name, Duration::from_secs(2))
        .await
        .expect("free after the MultiLock's unlock");
    let mut refused = 0;
    for l in &multi.locks {
        match l.try_acquire().await {
            Some(pttl) => {
                assert!(pttl > 0);
                refused += 1;
            }
            None => {
                l.unlock().await;
            }
        }
    }
    assert!(
        refused >= 2,
        "quorumlock holds a majority: {refused} refused"
    );
    g.release().await.expect("release");
}
