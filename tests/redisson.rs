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
