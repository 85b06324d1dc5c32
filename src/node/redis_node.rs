//! A Redis master reached through a connection manager: connecting,
//! refusing what must not be a node, and the script calls.
//!
//! Three connections per master, one queue each on the client side (a
//! multiplexed connection answers in the order it sends): `conn` for
//! acquisitions and every other call, `free_conn` for the calls that free
//! (releases and queue exits, [`Lane::Frees`]), `renew_conn` for the
//! watchdog's renewal and repair pipelines ([`Lane::Renewals`], and a
//! release behind a repair given up there). A release never waits behind a
//! crowd of attempts, nor behind a long renewal batch: with thousands of
//! attempts per node in `conn`'s queue at once (20,000 waiters on one
//! lock), a release behind them timed out (issue 35; `tests/crowd.rs`).
//! The server serves the connections in turn. Which calls take
//! `free_conn` is the member's order's to say (`order`, [`Stamp::lane`]):
//! only behind a crowd on `conn` (from `order::CROWDED` calls in flight
//! there; fewer share `conn`, one write and one read for both), and never
//! a release whose acquire on this node may still run: that one goes on
//! `conn`, behind it.

use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, Value};

use crate::admission::{maxmemory_policy, Admission, ServerId, ServerInfo};
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::keys::{self, Keys};
use crate::layout::Layout;
use crate::scripts;

use super::batch::{BatchKind, RenewBatch};
use super::feed::{Feed, RedisFeed};
use super::member::{Args, Call, Read, Server};
use super::ops::{Answer, BatchCost, NodeLockState, Renewed};
use super::order::Lane;
use super::reply;
use super::script_call::{broken, forget_scripts, map_err, no_script, Breaker, ScriptCall};
use super::script_keys;
use super::spec::NodeSpec;

mod replicas;

/// A Redis master reached through a [`ConnectionManager`].
pub(crate) struct RedisNode {
    addr: String,
    conn: ConnectionManager,
    /// The connection of the calls that free (releases and queue exits),
    /// so that they never queue behind a crowd of attempts on the client
    /// side ([`Lane::Frees`]; the module doc).
    free_conn: ConnectionManager,
    /// A connection for the watchdog's renewal and repair pipelines, so
    /// that acquisitions and releases never queue behind a long batch on
    /// the client side; the server serves the connections in turn.
    renew_conn: ConnectionManager,
    client: Client,
    /// Set when a node connected lazily was refused when it first answered:
    /// not a master, the same server as another node, or evicting while
    /// `require_noeviction` is set. Every call then fails with this error.
    refused: Arc<OnceLock<NodeError>>,
    /// The server's identities (`run_id`, and its cluster node id when it
    /// is a cluster node), read at connect.
    ids: Vec<ServerId>,
    /// The server's `maxmemory-policy`, as last read.
    policy: Arc<Mutex<Option<String>>>,
    /// Per one-shot script: the node is known to have it, so `EVALSHA` is
    /// enough. Cleared after a connection error (the node may have restarted).
    loaded: Arc<[AtomicBool; scripts::ONE_SHOT]>,
    /// Fails calls at once while the node refuses connections.
    breaker: Arc<Breaker>,
}

impl RedisNode {
    /// The connection manager's settings. Its response timeout is off: every
    /// call already runs under one of our own timeouts (the fan-out's per-node
    /// timeout, the watchdog's renewal timeout, the connect timeout), and
    /// redis-rs's default of 500 ms would otherwise cut every longer one short
    /// (a `node_timeout` of 2 s would act as 500 ms). Reconnecting uses the
    /// connect timeout. The pub/sub connection (`Client::get_async_pubsub`)
    /// has no response timeout of its own in redis-rs 1.x.
    fn manager_config(connect_timeout: Duration) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(connect_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500))
    }

    /// Connects and checks that the node is a master.
    pub(crate) async fn connect(
        index: usize,
        spec: NodeSpec,
        connect_timeout: Duration,
    ) -> Result<Self, Error> {
        let failure = |e: NodeError| Error::Connect {
            failures: vec![e.at(index, &spec.addr)],
        };
        let open = || {
            ConnectionManager::new_with_config(
                spec.client.clone(),
                Self::manager_config(connect_timeout),
            )
        };
        let (conn, free_conn, renew_conn) = tokio::time::timeout(
            connect_timeout,
            futures::future::try_join3(open(), open(), open()),
        )
        .await
        .map_err(|_| failure(NodeError::new(NodeErrorKind::Timeout, "connect timed out")))?
        .map_err(|e| failure(NodeError::from_redis(&e)))?;
        let mut conn = conn;
        let role = tokio::time::timeout(connect_timeout, role(&mut conn))
            .await
            .map_err(|_| failure(NodeError::new(NodeErrorKind::Timeout, "ROLE timed out")))?
            .map_err(|e| failure(NodeError::from_redis(&e)))?;
        if role != "master" {
            return Err(Error::NotMaster {
                node: index,
                addr: spec.addr,
                role,
            });
        }
        super::cluster::refuse_shard_of_cluster(&mut conn, index, &spec.addr, connect_timeout)
            .await?;
        let info = ServerInfo::read(&mut conn, connect_timeout).await;
        Ok(Self {
            addr: spec.addr,
            conn,
            free_conn,
            renew_conn,
            client: spec.client,
            refused: Arc::default(),
            ids: info.ids,
            policy: Arc::new(Mutex::new(info.policy)),
            loaded: Arc::default(),
            breaker: Arc::default(),
        })
    }

    /// Adopts the node's fence counter of the layout before per-slot
    /// counters (`<prefix>fence`, see [`keys::legacy_fence_key`]): every
    /// per-slot counter is raised to it and it is deleted, in one script,
    /// so that no name's token goes back after an upgrade. A node without
    /// one (every node but one that served an older version) costs one
    /// `EXISTS`, and the 16,384 counters are not even named. Returns the
    /// adopted value (0: none).
    ///
    /// Only what can be that counter is taken: in [`Layout::Quorumlock`]
    /// (the only layout of those versions, where no lock key can be
    /// `<prefix>fence`), a string integer. Anything else there (a hash, a
    /// string that is not an integer) is left as it is, with a warning; in
    /// [`Layout::Redisson`] nothing is read, since the key may be a
    /// Redisson object named `<prefix>fence` (an `RLock`, an
    /// `RAtomicLong`).
    pub(crate) async fn adopt_legacy_fence(
        &self,
        index: usize,
        (layout, prefix): (Layout, &str),
        timeout: Duration,
    ) -> Result<u64, Error> {
        if layout != Layout::Quorumlock {
            return Ok(0);
        }
        let failure = |e: NodeError| Error::Connect {
            failures: vec![e.at(index, &self.addr)],
        };
        let old = keys::legacy_fence_key(prefix);
        let mut conn = self.conn.clone();
        let adopt = async {
            let exists: bool = redis::cmd("EXISTS")
                .arg(&old)
                .query_async(&mut conn)
                .await?;
            if !exists {
                return Ok(0);
            }
            redis::Script::new(scripts::ADOPT_FENCE)
                .key(&old)
                .key(keys::fence_keys(prefix))
                .invoke_async::<i64>(&mut conn)
                .await
        };
        let adopted = tokio::time::timeout(timeout, adopt)
            .await
            .map_err(|_| {
                failure(NodeError::new(
                    NodeErrorKind::Timeout,
                    "fence adoption timed out",
                ))
            })?
            .map_err(|e| failure(NodeError::from_redis(&e)))?;
        let Ok(adopted) = u64::try_from(adopted) else {
            tracing::warn!(node = index, addr = %self.addr, key = %old, "a key of the older fence counter's name holds something else (not a string integer); left as it is, not adopted");
            return Ok(0);
        };
        if adopted > 0 {
            tracing::info!(node = index, addr = %self.addr, counter = adopted, "adopted the fence counter of the older key layout");
        }
        Ok(adopted)
    }

    /// What `build()` checks of a node that answered: its identity and
    /// eviction policy (see [`Admission`]).
    pub(crate) fn info(&self) -> ServerInfo {
        ServerInfo {
            ids: self.ids.clone(),
            policy: self.maxmemory_policy(),
        }
    }

    /// A node that could not be reached at build time: its connection is
    /// made on first use, and a background probe checks it as soon as it
    /// answers: its role, and through `admission` its identity (not the same
    /// server as another node) and eviction policy. A node refused then is
    /// never used: every call to it fails with [`NodeErrorKind::NotMaster`]
    /// or [`NodeErrorKind::Refused`].
    pub(crate) fn lazy(
        index: usize,
        spec: NodeSpec,
        connect_timeout: Duration,
        admission: Arc<Admission>,
    ) -> Result<Self, Error> {
        let open = || {
            ConnectionManager::new_lazy_with_config(
                spec.client.clone(),
                Self::manager_config(connect_timeout),
            )
            .map_err(|e| Error::Connect {
                failures: vec![NodeError::from_redis(&e).at(index, &spec.addr)],
            })
        };
        let (conn, free_conn, renew_conn) = (open()?, open()?, open()?);
        let refused: Arc<OnceLock<NodeError>> = Arc::default();
        let policy: Arc<Mutex<Option<String>>> = Arc::default();
        let probe = Arc::downgrade(&refused);
        let probe_policy = Arc::downgrade(&policy);
        let (mut probe_conn, addr) = (conn.clone(), spec.addr.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            drop(handle.spawn(async move {
                loop {
                    if probe.strong_count() == 0 {
                        return;
                    }
                    if let Ok(Ok(role)) = tokio::time::timeout(connect_timeout, role(&mut probe_conn)).await {
                        let refusal = if role == "master" {
                            let info = ServerInfo::read(&mut probe_conn, connect_timeout).await;
                            if let Some(p) = probe_policy.upgrade() {
                                set_policy(&p, info.policy.clone());
                            }
                            admission
                                .admit(index, &addr, &info)
                                .err()
                                .map(|why| NodeError::new(NodeErrorKind::Refused, why))
                        } else {
                            Some(NodeError::new(
                                NodeErrorKind::NotMaster,
                                format!("the node is a {role}, not a master"),
                            ))
                        };
                        match (refusal, probe.upgrade()) {
                            (Some(why), Some(flag)) => {
                                tracing::error!(node = index, addr = %addr, reason = %why.message, "node refused; it will not be used");
                                let _ = flag.set(why);
                            }
                            (Some(_), None) => {}
                            (None, _) => tracing::info!(node = index, addr = %addr, "node reached"),
                        }
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }));
        }
        Ok(Self {
            addr: spec.addr,
            conn,
            free_conn,
            renew_conn,
            client: spec.client,
            refused,
            ids: Vec::new(),
            policy,
            loaded: Arc::default(),
            breaker: Arc::default(),
        })
    }

    /// The same node, whose script calls fail at once (unsent, but for a
    /// probe per `silence`) once it has left every call unanswered for
    /// `silence`: a stopped or black-holed master is not written every
    /// call (see [`Breaker`]).
    pub(crate) fn silent_after(mut self, silence: Duration) -> Self {
        self.breaker = Arc::new(Breaker::silent_after(silence));
        self
    }

    /// The connection of `lane`.
    fn lane(&self, lane: Lane) -> &ConnectionManager {
        match lane {
            Lane::Calls => &self.conn,
            Lane::Frees => &self.free_conn,
            Lane::Renewals => &self.renew_conn,
        }
    }

    /// The connection, unless the node was found not to be a master.
    fn checked(&self) -> Result<ConnectionManager, NodeError> {
        self.checked_conn(&self.conn)
    }

    fn checked_conn(&self, conn: &ConnectionManager) -> Result<ConnectionManager, NodeError> {
        match self.refused.get() {
            Some(why) => Err(why.clone()),
            None => Ok(conn.clone()),
        }
    }
}

fn set_policy(cell: &Mutex<Option<String>>, policy: Option<String>) {
    *cell.lock().unwrap_or_else(PoisonError::into_inner) = policy;
}

/// The node's role: `master`, `slave` or `sentinel`.
async fn role(conn: &mut ConnectionManager) -> redis::RedisResult<String> {
    let answer: Value = redis::cmd("ROLE").query_async(conn).await?;
    Ok(reply::role(&answer))
}

impl Server for RedisNode {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn feed(&self) -> Option<Arc<dyn Feed>> {
        Some(Arc::new(RedisFeed::new(self.client.clone())))
    }

    fn maxmemory_policy(&self) -> Option<String> {
        self.policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        let conn = self.checked();
        let keys = Arc::clone(keys);
        let loaded = Arc::clone(&self.loaded);
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let mut conn = conn?;
            // The policy can change at run time (CONFIG SET); a node that
            // refuses CONFIG keeps what was read before.
            match maxmemory_policy(&mut conn).await {
                Ok(Some(p)) => set_policy(&policy, Some(p)),
                Ok(None) => {}
                Err(e) => forget_scripts(&loaded, &e),
            }
            let [lock, fence] = script_keys::status(&keys);
            let (fields, pttl, fence): (Vec<(String, String)>, i64, Option<String>) = redis::pipe()
                .cmd("HGETALL")
                .arg(lock)
                .cmd("PTTL")
                .arg(lock)
                .cmd("GET")
                .arg(fence)
                .query_async(&mut conn)
                .await
                .map_err(|e| {
                    forget_scripts(&loaded, &e);
                    map_err(&e)
                })?;
            reply::lock_state(fields, pttl, fence)
        })
    }

    fn is_cluster(&self) -> bool {
        false
    }

    fn frees_apart(&self) -> bool {
        true
    }

    fn sends_shared(&self) -> bool {
        true
    }

    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        BatchCost::of_one_pipeline(batch)
    }

    /// One call of `script` over the key names `keys`, with the arguments
    /// `args` adds, sent as [`ScriptCall::run`] does (`resend`) on the
    /// connection of its lane ([`Stamp::lane`](super::order::Stamp::lane)),
    /// after a `PING` answered on the other one where its order asks for a
    /// barrier; its reply is read by `read`.
    fn eval<T, R, A, F>(&self, call: Call<T, R, A, F>) -> Answer<R>
    where
        T: redis::FromRedisValue + Send + 'static,
        R: Send + 'static,
        A: Args,
        F: Read<T, R>,
    {
        let sender = self
            .checked_conn(self.lane(call.stamp.lane()))
            .map(|conn| ScriptCall {
                conn,
                loaded: Arc::clone(&self.loaded),
                breaker: Arc::clone(&self.breaker),
            });
        // Almost always none: then nothing is collected.
        let barriers = call.stamp.barriers();
        let barriers: Vec<(Lane, ConnectionManager)> = if barriers.is_empty() {
            Vec::new()
        } else {
            barriers.iter().map(|l| (l, self.lane(l).clone())).collect()
        };
        Box::pin(async move {
            let share = call.share;
            let stamp = &call.stamp;
            let reply = async {
                let sender = sender?;
                for (l, mut conn) in barriers {
                    let _: String = redis::cmd("PING")
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| map_err(&e))?;
                    stamp.passed(l);
                }
                sender
                    .run(
                        call.script,
                        &call.keys,
                        (call.resend, stamp),
                        (call.args, share.as_deref()),
                    )
                    .await
            }
            .await;
            // Answered, failed or never sent: it will not run later.
            stamp.ended(reply.is_ok());
            (call.read)(reply?)
        })
    }

    /// Sends a renew or repair batch on the renewal connection (a keep
    /// batch on the attempts'): one pipeline, one round trip.
    fn batch(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        let conn = self.checked_conn(self.lane(match batch.kind() {
            BatchKind::Keep => Lane::Calls,
            BatchKind::Renew | BatchKind::Repair => Lane::Renewals,
        }));
        let loaded = Arc::clone(&self.loaded);
        Box::pin(async move {
            let mut conn = conn?;
            let pipe = batch.pipeline();
            let seen = |e: redis::RedisError| {
                forget_scripts(&loaded, &e);
                e
            };
            // Retrying is safe here, unlike for acquire and release: a release
            // waits until the renewal that includes its lock has finished,
            // repairs and retries included. The retry after a broken
            // connection reaches a node that just came back.
            let first = match pipe.query_async(&mut conn).await.map_err(seen) {
                Err(e) if broken(&e) => pipe.query_async(&mut conn).await.map_err(seen),
                other => other,
            };
            let replies: Vec<Vec<i64>> = match first {
                Ok(r) => r,
                Err(e) if no_script(&e) => {
                    let _: String = batch
                        .script()
                        .load_cmd()
                        .query_async(&mut conn)
                        .await
                        .map_err(|e| map_err(&seen(e)))?;
                    pipe.query_async(&mut conn)
                        .await
                        .map_err(|e| map_err(&seen(e)))?
                }
                Err(e) => return Err(map_err(&e)),
            };
            reply::renewed(replies.into_iter().flatten().collect(), batch.items.len())
        })
    }
}
