//! A Redisson-protocol client for the tests: what Redisson's `RLock`,
//! `RedissonRedLock` and `RedissonMultiLock` send to Redis, written here
//! from the behaviour read in Redisson's source (its own scripts are not
//! copied; the README's "Sharing locks with Redisson" names the files and
//! tags checked).
//!
//! - **Lock**: a hash at the lock name; field `<client uuid>:<thread id>`
//!   (the uuid as Java prints it, with dashes), value the reentrancy count,
//!   lease by `PEXPIRE`. An acquire grants when the key is absent or the
//!   field is ours (count + 1, lease reset, nil reply) and otherwise replies
//!   the key's `PTTL`.
//! - **Unlock**: keys the hash, the channel `redisson_lock__channel:{<name>}`
//!   and an idempotency latch `redisson_unlock_latch:{<name>}:<request id>`
//!   (32 hex digits). A latch already set is the reply of an unlock that
//!   ran before (a retry): its value comes back, nothing else happens. Not
//!   ours: nil. Otherwise count - 1: above 0 the lease is reset and the
//!   latch set to 0; at 0 the hash is deleted, `0` published on the
//!   channel, and the latch set to 1; the latch lives for the client's
//!   retry span and is deleted by the client once the reply came. On a
//!   cluster whose servers know sharded pub/sub (Redis 7+, Redisson's
//!   default `shardedSubscriptionMode` AUTO) the message goes out with
//!   `SPUBLISH`, else with `PUBLISH`.
//! - **Renewal**: while the field exists, the lease is reset.
//! - **Waiting**: subscribe to the channel (`SSUBSCRIBE` where unlocks
//!   `SPUBLISH`), retry the acquire, then wait for the message `0` (the only
//!   one a lock waiter acts on) or for the `PTTL` replied (forever when it
//!   is negative: a key without a lease).
//! - **`RedissonMultiLock`** over N `RLock`s (each may come from its own
//!   client, so its own uuid): they are taken one after another, each with
//!   `tryLock(wait, ...)` (waiting on its own master's channel); a
//!   `RedissonRedLock` tolerates N - (N/2 + 1) failed locks and gives each
//!   lock a share `remaining / N` of the wait, a MultiLock tolerates none
//!   and gives each the whole remaining wait. Past the tolerated failures
//!   the locks taken are unlocked and the round starts over from the first;
//!   a RedLock stops at the first failure once a majority is taken. `lock()`
//!   repeats `tryLock` with a wait of N × 1.5 s until it succeeds. Its
//!   unlock unlocks every `RLock`.

#![allow(dead_code, clippy::panic)]

use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::StreamExt;
use redis::cluster::ClusterClient;
use redis::{FromRedisValue, PushKind, Value};

/// Acquire: grant when absent or ours (count + 1, lease reset, nil), else
/// the PTTL.
const ACQUIRE: &str = r"
local held = redis.call('exists', KEYS[1]) == 1
if held and redis.call('hexists', KEYS[1], ARGV[2]) == 0 then
  return redis.call('pttl', KEYS[1])
end
redis.call('hincrby', KEYS[1], ARGV[2], 1)
redis.call('pexpire', KEYS[1], ARGV[1])
return nil";

/// Unlock, with its latch: see the module docs.
/// KEYS: hash, channel, latch. ARGV: field, lease ms, publish command,
/// latch ms.
const UNLOCK: &str = r"
local before = redis.call('get', KEYS[3])
if before then
  return tonumber(before)
end
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return nil
end
local left = redis.call('hincrby', KEYS[1], ARGV[1], -1)
if left <= 0 then
  redis.call('del', KEYS[1])
  redis.call(ARGV[3], KEYS[2], '0')
  redis.call('set', KEYS[3], 1, 'px', ARGV[4])
  return 1
end
redis.call('pexpire', KEYS[1], ARGV[2])
redis.call('set', KEYS[3], 0, 'px', ARGV[4])
return 0";

/// Renewal: the lease reset while the field exists.
const RENEW: &str = r"
if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then
  return 0
end
redis.call('pexpire', KEYS[1], ARGV[2])
return 1";

/// How long an unlock's latch lives: Redisson's is its retry span
/// (timeout plus retry delay, times the attempts); a few seconds here.
const LATCH_MS: u64 = 9_000;

/// Redisson's channel of the lock `name`.
pub fn channel(name: &str) -> String {
    format!("redisson_lock__channel:{{{name}}}")
}

/// The key prefix of the unlock latches of the lock `name`.
pub fn latch_prefix(name: &str) -> String {
    format!("redisson_unlock_latch:{{{name}}}:")
}

/// A random id as Java's `UUID.toString()` prints it.
fn java_uuid() -> String {
    let h = format!("{:032x}", rand::random::<u128>());
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Where an `RLock` lives: a standalone master, or a Redis Cluster (its
/// seeds), where unlocks `SPUBLISH` and waiters `SSUBSCRIBE`.
#[derive(Clone)]
pub enum Server {
    Master(String),
    Cluster(Vec<String>),
}

#[derive(Clone)]
enum Conn {
    Master(Box<redis::Client>, redis::aio::MultiplexedConnection),
    Cluster(Vec<String>, redis::cluster_async::ClusterConnection),
}

/// One `RLock` of one Redisson client (uuid) and thread.
pub struct RLock {
    conn: Conn,
    pub name: String,
    pub field: String,
    lease: Duration,
}

impl RLock {
    /// An `RLock` of a client of its own, thread 1.
    pub async fn new(server: &Server, name: &str, lease: Duration) -> Self {
        Self::with_field(server, name, lease, &format!("{}:1", java_uuid())).await
    }

    /// An `RLock` whose field is `field`.
    pub async fn with_field(server: &Server, name: &str, lease: Duration, field: &str) -> Self {
        let conn = match server {
            Server::Master(url) => {
                let client = redis::Client::open(url.as_str()).expect("node url");
                let c = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("connect");
                Conn::Master(Box::new(client), c)
            }
            Server::Cluster(seeds) => {
                let c = ClusterClient::new(seeds.clone())
                    .expect("cluster seeds")
                    .get_async_connection()
                    .await
                    .expect("connect to the cluster");
                Conn::Cluster(seeds.clone(), c)
            }
        };
        Self {
            conn,
            name: name.to_owned(),
            field: field.to_owned(),
            lease,
        }
    }

    fn ms(&self) -> u64 {
        u64::try_from(self.lease.as_millis()).unwrap_or(u64::MAX)
    }

    async fn eval<T: FromRedisValue>(&self, call: redis::ScriptInvocation<'_>) -> T {
        let r = match &self.conn {
            Conn::Master(_, c) => call.invoke_async(&mut c.clone()).await,
            Conn::Cluster(_, c) => call.invoke_async(&mut c.clone()).await,
        };
        r.unwrap_or_else(|e| panic!("a Redisson script on {}: {e}", self.name))
    }

    /// One acquire: `None` when granted, else the holder's PTTL in ms.
    pub async fn try_acquire(&self) -> Option<i64> {
        let script = redis::Script::new(ACQUIRE);
        let mut call = script.prepare_invoke();
        call.key(&self.name).arg(self.ms()).arg(&self.field);
        self.eval(call).await
    }

    /// Unlocks one level; whether the field was ours. The latch is deleted
    /// after the reply, as Redisson does.
    pub async fn unlock(&self) -> bool {
        let latch = format!(
            "{}{:032x}",
            latch_prefix(&self.name),
            rand::random::<u128>()
        );
        let publish = match self.conn {
            Conn::Master(..) => "publish",
            Conn::Cluster(..) => "spublish",
        };
        let script = redis::Script::new(UNLOCK);
        let mut call = script.prepare_invoke();
        call.key(&self.name)
            .key(channel(&self.name))
            .key(&latch)
            .arg(&self.field)
            .arg(self.ms())
            .arg(publish)
            .arg(LATCH_MS);
        let r: Option<i64> = self.eval(call).await;
        let mut del = redis::cmd("DEL");
        del.arg(&latch);
        let _: redis::RedisResult<i64> = match &self.conn {
            Conn::Master(_, c) => del.query_async(&mut c.clone()).await,
            Conn::Cluster(_, c) => del.query_async(&mut c.clone()).await,
        };
        r.is_some()
    }

    /// One renewal; whether the field was still there.
    pub async fn renew(&self) -> bool {
        let script = redis::Script::new(RENEW);
        let mut call = script.prepare_invoke();
        call.key(&self.name).arg(&self.field).arg(self.ms());
        let r: i64 = self.eval(call).await;
        r == 1
    }

    /// The messages on the lock's channel that wake a waiter (`0`), over a
    /// subscription of its own: `SUBSCRIBE` on a master, `SSUBSCRIBE` on a
    /// cluster.
    pub async fn subscribe(&self) -> BoxStream<'static, ()> {
        let chan = channel(&self.name);
        match &self.conn {
            Conn::Master(client, _) => {
                let mut ps = client.get_async_pubsub().await.expect("pubsub");
                ps.subscribe(&chan).await.expect("subscribe");
                ps.into_on_message()
                    .filter_map(|m| async move { (m.get_payload_bytes() == b"0").then_some(()) })
                    .boxed()
            }
            Conn::Cluster(seeds, _) => {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                let mut conn = ClusterClient::builder(seeds.clone())
                    .use_protocol(redis::ProtocolVersion::RESP3)
                    .push_sender(tx)
                    .build()
                    .expect("cluster seeds")
                    .get_async_connection()
                    .await
                    .expect("connect to the cluster");
                conn.ssubscribe(&chan).await.expect("ssubscribe");
                futures::stream::unfold((rx, conn), |(mut rx, conn)| async move {
                    loop {
                        let push = rx.recv().await?;
                        let wake = push.kind == PushKind::SMessage
                            && matches!(push.data.get(1), Some(Value::BulkString(b)) if b == b"0");
                        if wake {
                            return Some(((), (rx, conn)));
                        }
                    }
                })
                .boxed()
            }
        }
    }

    /// `tryLock(wait)`: acquire; on a miss subscribe, and retry after each
    /// `0` or once the PTTL replied ran out, until `wait` has passed.
    pub async fn try_lock(&self, wait: Duration) -> bool {
        let deadline = Instant::now() + wait;
        if self.try_acquire().await.is_none() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        let mut wakes = self.subscribe().await;
        loop {
            let Some(pttl) = self.try_acquire().await else {
                return true;
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            let pause = match u64::try_from(pttl) {
                Ok(ms) => Duration::from_millis(ms).min(left),
                Err(_) => left,
            };
            let _ = tokio::time::timeout(pause, wakes.next()).await;
        }
    }

    /// `lock()`: as [`RLock::try_lock`] without a deadline; a negative PTTL
    /// waits for a message only.
    pub async fn lock(&self) {
        if self.try_acquire().await.is_none() {
            return;
        }
        let mut wakes = self.subscribe().await;
        loop {
            let Some(pttl) = self.try_acquire().await else {
                return;
            };
            match u64::try_from(pttl) {
                Ok(ms) => {
                    let _ = tokio::time::timeout(Duration::from_millis(ms), wakes.next()).await;
                }
                Err(_) => {
                    let _ = wakes.next().await;
                }
            }
        }
    }
}

/// Which of Redisson's two multi-locks.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Kind {
    /// `RedissonRedLock`: a majority.
    RedLock,
    /// `RedissonMultiLock`: all.
    MultiLock,
}

/// A `RedissonRedLock` or `RedissonMultiLock` over one `RLock` per server,
/// each of its own client (uuid).
pub struct MultiLock {
    pub locks: Vec<RLock>,
    kind: Kind,
}

impl MultiLock {
    pub async fn new(kind: Kind, servers: &[Server], name: &str, lease: Duration) -> Self {
        let mut locks = Vec::new();
        for s in servers {
            locks.push(RLock::new(s, name, lease).await);
        }
        Self { locks, kind }
    }

    /// A `RedissonRedLock` over standalone masters.
    pub async fn redlock(urls: &[String], name: &str, lease: Duration) -> Self {
        let servers: Vec<Server> = urls.iter().cloned().map(Server::Master).collect();
        Self::new(Kind::RedLock, &servers, name, lease).await
    }

    /// How many locks may fail.
    fn tolerated(&self) -> usize {
        match self.kind {
            Kind::RedLock => self.locks.len() - (self.locks.len() / 2 + 1),
            Kind::MultiLock => 0,
        }
    }

    /// `tryLock(wait)`: the locks one after another (see the module docs);
    /// a zero `wait` is `tryLock()`: each lock tried once, no retry round.
    pub async fn try_lock(&self, wait: Duration) -> bool {
        let n = self.locks.len();
        let start = Instant::now();
        let timed = !wait.is_zero();
        let mut budget = self.tolerated();
        let mut taken: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < n {
            let remain = wait.saturating_sub(start.elapsed());
            let share = match self.kind {
                Kind::RedLock => remain / u32::try_from(n).unwrap_or(1),
                Kind::MultiLock => remain,
            };
            let share = if timed {
                share.max(Duration::from_millis(1)).min(remain)
            } else {
                Duration::ZERO
            };
            if self.locks[i].try_lock(share).await {
                taken.push(i);
            } else if n - taken.len() == self.tolerated() {
                break;
            } else if budget == 0 {
                self.unlock_some(&taken).await;
                if !timed || start.elapsed() >= wait {
                    return false;
                }
                taken.clear();
                budget = self.tolerated();
                i = 0;
                continue;
            } else {
                budget -= 1;
            }
            if timed && start.elapsed() >= wait {
                self.unlock_some(&taken).await;
                return false;
            }
            i += 1;
        }
        true
    }

    /// `lock()`: `tryLock` with a wait of N × 1.5 s until it succeeds.
    pub async fn lock(&self) {
        let wait = Duration::from_millis(1500) * u32::try_from(self.locks.len()).unwrap_or(1);
        while !self.try_lock(wait).await {}
    }

    async fn unlock_some(&self, which: &[usize]) {
        for &i in which {
            self.locks[i].unlock().await;
        }
    }

    /// Unlocks every `RLock` (a RedLock ignores those it did not hold);
    /// how many it held.
    pub async fn unlock(&self) -> usize {
        let mut held = 0;
        for l in &self.locks {
            held += usize::from(l.unlock().await);
        }
        held
    }

    /// Renews every `RLock`; how many were still held.
    pub async fn renew(&self) -> usize {
        let mut n = 0;
        for l in &self.locks {
            n += usize::from(l.renew().await);
        }
        n
    }
}
