//! The four contenders (floor, quorumlock, rslock, limit) over the same
//! nodes, behind one interface: a single attempt, a wait, an unlock.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::join_all;
use futures::stream::{FuturesUnordered, StreamExt};
use redis::aio::MultiplexedConnection;
use redis::{Cmd, FromRedisValue, IntoConnectionInfo, RedisResult, Script};

use crate::settings::Settings;
use crate::BoxError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Who {
    Floor,
    Quorumlock,
    Rslock,
    Limit,
}

/// Every contender, in [`Who::index`] order.
pub(crate) const ALL: [Who; 4] = [Who::Floor, Who::Quorumlock, Who::Rslock, Who::Limit];

impl Who {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Floor => "floor",
            Self::Quorumlock => "quorumlock",
            Self::Rslock => "rslock",
            Self::Limit => "limit",
        }
    }

    pub(crate) fn index(self) -> usize {
        match self {
            Self::Floor => 0,
            Self::Quorumlock => 1,
            Self::Rslock => 2,
            Self::Limit => 3,
        }
    }
}

/// The contenders of round `round`, in a rotating order.
pub(crate) fn order(round: usize) -> [Who; 4] {
    let mut o = ALL;
    o.rotate_left(round % ALL.len());
    o
}

/// A client with `TCP_NODELAY`, as quorumlock builds its own.
pub(crate) fn nodelay_client(url: &str) -> Result<redis::Client, BoxError> {
    let info = url.into_connection_info()?;
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    Ok(redis::Client::open(info.set_tcp_settings(tcp))?)
}

/// The floor: quorumlock's scripts (acquire, and release with its queue
/// helpers and keys, as the library sends them), a `join_all` over every
/// node, a count.
pub(crate) struct Floor {
    /// The nodes' connections (the connected ones: all of them, except in the
    /// fault case where a node refuses connections); also used for `INFO`.
    pub(crate) conns: Vec<MultiplexedConnection>,
    /// One slot per node, `None` for a node that could not be reached: it
    /// counts as an error reply.
    pub(crate) nodes: Vec<Option<MultiplexedConnection>>,
    pub(crate) acquire: redis::Script,
    pub(crate) release: redis::Script,
    pub(crate) required: usize,
}

pub(crate) struct FloorLock {
    pub(crate) lock: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
    pub(crate) owner: Arc<str>,
    pub(crate) token: u64,
}

/// The outcome of one attempt.
pub(crate) enum Attempt {
    Won(Held),
    Busy,
    Failed(String),
}

pub(crate) enum Held {
    Floor(FloorLock),
    Quorumlock(quorumlock::LockGuard),
    Rslock(rslock::Lock),
    /// The limit's hold: the floor's keys, its holder id unique to the hold.
    Limit(FloorLock),
}

pub(crate) fn lease_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

impl Floor {
    /// Connects to every node; with `lenient`, a node that cannot be
    /// reached is left out (its slot errs on every call) instead of failing.
    pub(crate) async fn connect(
        clients: &[redis::Client],
        lenient: bool,
    ) -> Result<Self, BoxError> {
        let mut nodes = Vec::with_capacity(clients.len());
        for c in clients {
            match c.get_multiplexed_async_connection().await {
                Ok(conn) => nodes.push(Some(conn)),
                Err(_) if lenient => nodes.push(None),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(Self {
            required: nodes.len() / 2 + 1,
            conns: nodes.iter().flatten().cloned().collect(),
            nodes,
            acquire: redis::Script::new(include_str!("../../src/scripts/acquire.lua")),
            // The library prepends the queue helpers to the release script.
            release: redis::Script::new(concat!(
                include_str!("../../src/scripts/queue_prelude.lua"),
                "\n",
                include_str!("../../src/scripts/release.lua")
            )),
        })
    }

    pub(crate) async fn try_once(&self, name: &str, owner: &Arc<str>, ttl: Duration) -> Attempt {
        let lock = format!("floor:{{{name}}}");
        let fence = format!("{lock}:fence");
        let mut inv = self.acquire.prepare_invoke();
        inv.key(&lock)
            .key(&fence)
            .arg(&**owner)
            .arg(lease_ms(ttl))
            .arg(1);
        let inv = &inv;
        let replies = join_all(self.nodes.iter().map(|c| {
            let c = c.clone();
            async move {
                let Some(mut c) = c else {
                    return Err(not_connected());
                };
                inv.invoke_async::<Vec<i64>>(&mut c).await
            }
        }))
        .await;
        let (mut granted, mut taken, mut token) = (0, 0, 0u64);
        let mut error = None;
        for r in &replies {
            match r.as_deref() {
                Ok([1 | 2, t]) => {
                    granted += 1;
                    token = token.max(u64::try_from(*t).unwrap_or(0));
                }
                Ok([0, _]) => taken += 1,
                Ok(other) => error = Some(format!("unexpected acquire reply {other:?}")),
                Err(e) => error = Some(e.to_string()),
            }
        }
        let held = FloorLock {
            channel: format!("{lock}:released"),
            lock,
            fence,
            owner: Arc::clone(owner),
            token,
        };
        if granted >= self.required {
            return Attempt::Won(Held::Floor(held));
        }
        // Roll back wherever we may hold a grant (token 0: a rollback).
        let _ = self.release_all(&held, 0).await;
        match (taken, error) {
            (0, Some(e)) => Attempt::Failed(e),
            _ => Attempt::Busy,
        }
    }

    /// Sends the release script to every node and waits for all; returns how
    /// many released, and the first error.
    pub(crate) async fn release_all(
        &self,
        held: &FloorLock,
        token: u64,
    ) -> (usize, Option<String>) {
        let mut inv = self.release.prepare_invoke();
        inv.key(&held.lock)
            .key(&held.channel)
            .key(&held.fence)
            .key(format!("{}:queue", held.lock))
            .key(format!("{}:timeouts", held.lock))
            .arg(&*held.owner)
            .arg(0)
            .arg(lease_ms(Duration::from_secs(10)))
            .arg(token);
        let inv = &inv;
        let replies = join_all(self.nodes.iter().map(|c| {
            let c = c.clone();
            async move {
                let Some(mut c) = c else {
                    return Err(not_connected());
                };
                inv.invoke_async::<i64>(&mut c).await
            }
        }))
        .await;
        let mut released = 0;
        let mut error = None;
        for r in replies {
            match r {
                Ok(2) => released += 1,
                Ok(_) => {}
                Err(e) => {
                    error.get_or_insert_with(|| e.to_string());
                }
            }
        }
        (released, error)
    }

    /// Released on a quorum is a success, whatever the other nodes said.
    pub(crate) async fn unlock(&self, held: FloorLock) -> Result<(), String> {
        let (released, error) = self.release_all(&held, held.token).await;
        if released >= self.required {
            Ok(())
        } else {
            Err(error.unwrap_or_else(|| format!("released on {released} node(s) only")))
        }
    }
}

/// The limit: the floor's scripts and connections, but each phase (the
/// acquire fan-out, the release fan-out) returns as soon as its outcome is
/// known: at the quorum-th grant or release, or once a quorum can no longer
/// be reached. The other nodes' replies are awaited in a spawned task, and a
/// failed attempt rolls its grants back there. So a cycle costs one round
/// trip to the quorum-th fastest node per phase and no client work beyond
/// the redis client's: the physical limit of the protocol over these
/// scripts.
pub(crate) struct Limit {
    nodes: Arc<[Option<MultiplexedConnection>]>,
    acquire: Arc<Script>,
    release: Arc<Script>,
    required: usize,
}

/// Numbers the limit's holds: a holder id is unique to its attempt, so a
/// rollback that finishes in the background never releases a later hold of
/// the same task.
static LIMIT_HOLDS: AtomicU64 = AtomicU64::new(0);

/// One script call on one node: `EVALSHA`, loading the script on `NOSCRIPT`.
async fn script_call<T: FromRedisValue>(
    conn: Option<MultiplexedConnection>,
    cmd: Arc<Cmd>,
    script: Arc<Script>,
) -> RedisResult<T> {
    let Some(mut c) = conn else {
        return Err(not_connected());
    };
    match cmd.query_async(&mut c).await {
        Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
            script.load_async(&mut c).await?;
            cmd.query_async(&mut c).await
        }
        r => r,
    }
}

/// Awaits the replies still pending in a spawned task.
fn finish<F>(pending: FuturesUnordered<F>)
where
    F: Future + Send + 'static,
    F::Output: Send,
{
    if !pending.is_empty() {
        tokio::spawn(pending.for_each(|_| async {}));
    }
}

impl Limit {
    /// Over the floor's connections, with the same scripts.
    pub(crate) fn new(floor: &Floor) -> Self {
        Self {
            nodes: floor.nodes.clone().into(),
            acquire: Arc::new(floor.acquire.clone()),
            release: Arc::new(floor.release.clone()),
            required: floor.required,
        }
    }

    /// `cmd` (an `EVALSHA` of `script`) to every node at once.
    fn fan_out<T: FromRedisValue + Send + 'static>(
        &self,
        cmd: Cmd,
        script: &Arc<Script>,
    ) -> FuturesUnordered<impl Future<Output = RedisResult<T>> + Send + 'static> {
        let cmd = Arc::new(cmd);
        self.nodes
            .iter()
            .map(|c| script_call(c.clone(), Arc::clone(&cmd), Arc::clone(script)))
            .collect()
    }

    pub(crate) async fn try_once(&self, name: &str, owner: &Arc<str>, ttl: Duration) -> Attempt {
        let lock = format!("limit:{{{name}}}");
        let fence = format!("{lock}:fence");
        let hold = LIMIT_HOLDS.fetch_add(1, Ordering::Relaxed);
        let holder: Arc<str> = format!("{owner}:{hold}").into();
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.acquire.get_hash())
            .arg(2)
            .arg(&lock)
            .arg(&fence)
            .arg(&*holder)
            .arg(lease_ms(ttl))
            .arg(1);
        let mut pending = self.fan_out::<Vec<i64>>(cmd, &self.acquire);
        let mut left = pending.len();
        let (mut granted, mut taken, mut token) = (0, 0, 0u64);
        let mut error = None;
        while let Some(r) = pending.next().await {
            left -= 1;
            match r.as_deref() {
                Ok([1 | 2, t]) => {
                    granted += 1;
                    token = token.max(u64::try_from(*t).unwrap_or(0));
                }
                Ok([0, _]) => taken += 1,
                Ok(other) => error = Some(format!("unexpected acquire reply {other:?}")),
                Err(e) => error = Some(e.to_string()),
            }
            if granted >= self.required || granted + left < self.required {
                break;
            }
        }
        let held = FloorLock {
            channel: format!("{lock}:released"),
            lock,
            fence,
            owner: holder,
            token,
        };
        if granted >= self.required {
            finish(pending);
            return Attempt::Won(Held::Limit(held));
        }
        // Roll back wherever a grant may be (token 0), once every node
        // answered the acquire.
        let rollback = self.release_fan_out(&held, 0);
        tokio::spawn(async move {
            pending.for_each(|_| async {}).await;
            rollback.for_each(|_| async {}).await;
        });
        match (taken, error) {
            (0, Some(e)) => Attempt::Failed(e),
            _ => Attempt::Busy,
        }
    }

    /// The release script, as the floor sends it, to every node.
    fn release_fan_out(
        &self,
        held: &FloorLock,
        token: u64,
    ) -> FuturesUnordered<impl Future<Output = RedisResult<i64>> + Send + 'static> {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.release.get_hash())
            .arg(5)
            .arg(&held.lock)
            .arg(&held.channel)
            .arg(&held.fence)
            .arg(format!("{}:queue", held.lock))
            .arg(format!("{}:timeouts", held.lock))
            .arg(&*held.owner)
            .arg(0)
            .arg(lease_ms(Duration::from_secs(10)))
            .arg(token);
        self.fan_out::<i64>(cmd, &self.release)
    }

    /// Released on a quorum is a success: returns at the quorum-th release.
    pub(crate) async fn unlock(&self, held: FloorLock) -> Result<(), String> {
        let mut pending = self.release_fan_out(&held, held.token);
        let mut left = pending.len();
        let mut released = 0;
        let mut error = None;
        while let Some(r) = pending.next().await {
            left -= 1;
            match r {
                Ok(2) => released += 1,
                Ok(_) => {}
                Err(e) => {
                    error.get_or_insert_with(|| e.to_string());
                }
            }
            if released >= self.required || released + left < self.required {
                break;
            }
        }
        finish(pending);
        if released >= self.required {
            Ok(())
        } else {
            Err(error.unwrap_or_else(|| format!("released on {released} node(s) only")))
        }
    }
}

fn not_connected() -> redis::RedisError {
    redis::RedisError::from((redis::ErrorKind::Io, "node not connected"))
}

/// The quorumlock manager a task waits through, and whether its requests
/// are fair (`request(name).fair()`).
pub(crate) struct QlWait {
    pub(crate) manager: quorumlock::LockManager,
    pub(crate) fair: bool,
}

impl QlWait {
    async fn acquire(
        &self,
        name: &str,
        wait: Duration,
    ) -> Result<quorumlock::LockGuard, quorumlock::Error> {
        if self.fair {
            self.manager.request(name).fair().wait(wait).acquire().await
        } else {
            self.manager.try_lock(name, wait).await
        }
    }
}

/// The four contenders over the same nodes.
pub(crate) struct Lockers {
    pub(crate) floor: Floor,
    /// Over the floor's connections.
    pub(crate) limit: Limit,
    pub(crate) ql: quorumlock::LockManager,
    /// rslock with one attempt (`set_retry(1, _)`).
    pub(crate) rs_once: rslock::LockManager,
    /// rslock with its default retries, for waiting.
    pub(crate) rs_wait: rslock::LockManager,
    /// One quorumlock manager per handoff task, as separate processes would
    /// have (no shared local queue, one pub/sub connection set each); the
    /// plain and the fair per-task runs both use them.
    pub(crate) ql_many: Vec<quorumlock::LockManager>,
    pub(crate) ttl: Duration,
}

impl Lockers {
    pub(crate) async fn build(urls: &[String], s: &Settings) -> Result<Self, BoxError> {
        Self::build_with(urls, s, None).await
    }

    /// The contenders of a fault case: every one with the same per-node
    /// timeout (`node_timeout`; the floor and rslock have it as redis-rs's
    /// default response timeout), and tolerant of a node unreachable at
    /// start (quorumlock's `allow_unreachable`, a missing floor connection,
    /// rslock's lazy connect).
    pub(crate) async fn build_faulty(
        urls: &[String],
        s: &Settings,
        node_timeout: Duration,
    ) -> Result<Self, BoxError> {
        Self::build_with(urls, s, Some(node_timeout)).await
    }

    async fn build_with(
        urls: &[String],
        s: &Settings,
        faulty: Option<Duration>,
    ) -> Result<Self, BoxError> {
        let clients = urls
            .iter()
            .map(|u| nodelay_client(u))
            .collect::<Result<Vec<_>, _>>()?;
        let manager = || {
            let b = quorumlock::LockManager::builder()
                .nodes(urls.iter().cloned())
                .quorum(quorumlock::Quorum::Majority)
                .lease(s.ttl);
            match faulty {
                Some(t) => b
                    .node_timeout(t)
                    .connect_timeout(Duration::from_secs(1))
                    .allow_unreachable(true),
                None => b,
            }
            .build()
        };
        let ql = manager().await?;
        let mut ql_many = Vec::new();
        if s.runs("handoff") && faulty.is_none() {
            for _ in 0..s.handoff_tasks {
                ql_many.push(manager().await?);
            }
        }
        let mut rs_once = rslock::LockManager::from_clients(clients.clone());
        rs_once.set_retry(1, s.rs_retry_delay);
        let mut rs_wait = rs_once.clone();
        rs_wait.set_retry(s.rs_retries, s.rs_retry_delay);
        let floor = Floor::connect(&clients, faulty.is_some()).await?;
        Ok(Self {
            limit: Limit::new(&floor),
            floor,
            ql,
            rs_once,
            rs_wait,
            ql_many,
            ttl: s.ttl,
        })
    }

    /// One attempt, no waiting.
    pub(crate) async fn try_once(&self, who: Who, name: &str, owner: &Arc<str>) -> Attempt {
        match who {
            Who::Floor => self.floor.try_once(name, owner, self.ttl).await,
            Who::Limit => self.limit.try_once(name, owner, self.ttl).await,
            Who::Quorumlock => match self.ql.try_lock(name, Duration::ZERO).await {
                Ok(g) => Attempt::Won(Held::Quorumlock(g)),
                Err(e) if e.is_contended() => Attempt::Busy,
                Err(e) => Attempt::Failed(e.to_string()),
            },
            Who::Rslock => match self.rs_once.lock(name, self.ttl).await {
                Ok(l) => Attempt::Won(Held::Rslock(l)),
                Err(rslock::LockError::Unavailable) => Attempt::Busy,
                Err(e) => Attempt::Failed(e.to_string()),
            },
        }
    }

    /// Waits for the lock with each contender's own retry policy, until
    /// `deadline` (a wait already under way may finish a little later).
    ///
    /// - quorumlock: `try_lock(name, deadline - now)`, the same wait loop as
    ///   `lock(name)` (jittered backoff 10–200 ms), bounded by the deadline;
    ///   a fair one `request(name).fair().wait(deadline - now).acquire()`;
    /// - rslock: `lock` with its default retries (3 tries, 0–200 ms apart),
    ///   looped like its own `acquire`;
    /// - floor and limit: one attempt, then a random sleep of 0–200 ms, like
    ///   rslock.
    pub(crate) async fn wait_lock(
        &self,
        ql: &QlWait,
        who: Who,
        name: &str,
        owner: &Arc<str>,
        deadline: Instant,
        errors: &mut u64,
    ) -> Option<Held> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            match who {
                Who::Quorumlock => match ql.acquire(name, left).await {
                    Ok(g) => return Some(Held::Quorumlock(g)),
                    Err(e) if e.is_contended() => {}
                    Err(_) => *errors += 1,
                },
                Who::Rslock => match self.rs_wait.lock(name, self.ttl).await {
                    Ok(l) => return Some(Held::Rslock(l)),
                    Err(rslock::LockError::Unavailable) => {}
                    Err(_) => *errors += 1,
                },
                Who::Floor | Who::Limit => {
                    match self.try_once(who, name, owner).await {
                        Attempt::Won(h) => return Some(h),
                        Attempt::Busy => {}
                        Attempt::Failed(_) => *errors += 1,
                    }
                    let sleep = Duration::from_millis(rand::random_range(0..200));
                    let left = deadline.saturating_duration_since(Instant::now());
                    tokio::time::sleep(sleep.min(left)).await;
                }
            }
        }
    }

    pub(crate) async fn unlock(&self, held: Held) -> Result<(), String> {
        match held {
            Held::Floor(l) => self.floor.unlock(l).await,
            Held::Limit(l) => self.limit.unlock(l).await,
            Held::Quorumlock(g) => g.release().await.map_err(|e| e.to_string()),
            Held::Rslock(l) => {
                self.rs_once.unlock(&l).await;
                Ok(())
            }
        }
    }
}

/// The floor's owner id, shaped like quorumlock's (`<client>:task-<n>`).
pub(crate) fn floor_owner(task: usize) -> Arc<str> {
    format!("{:032x}:task-{task}", rand::random::<u128>()).into()
}

/// Lock names of one contender, case and round. rslock uses them as raw
/// keys, so they get a prefix; quorumlock, the floor and the limit add their
/// own.
pub(crate) fn names(run: &str, who: Who, case: &str, round: usize, n: usize) -> Vec<String> {
    (0..n).map(|i| name(run, who, case, round, i)).collect()
}

/// The `i`-th of [`names`].
pub(crate) fn name(run: &str, who: Who, case: &str, round: usize, i: usize) -> String {
    let prefix = if who == Who::Rslock { "rslock:" } else { "" };
    format!("{prefix}{run}-{case}-{round}-{i}")
}
