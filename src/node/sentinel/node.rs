//! A member that is a master under Redis Sentinel ([`SentinelNode`]): the
//! master the sentinels name, reached as any master is ([`RedisNode`]),
//! and followed across failovers.
//!
//! A background task (the watch) finds the master again through the
//! sentinels ([`Finder`], redis-rs's Sentinel support) as soon as one of
//! these happens, and at least every [`RECHECK`]:
//!
//! - a sentinel publishes `+switch-master` for the name (every sentinel's
//!   channel is listened to); a search in progress is dropped and started
//!   again, since it may be waiting on the old, frozen master;
//! - a call to the master fails, or is dropped unanswered (a per-node
//!   timeout: a frozen master answers nothing and breaks nothing).
//!
//! Each master followed has a master's breaker for silence
//! (`Breaker::silent_after`, [`Config::silence`]): once every call sent to
//! it has gone unanswered that long, calls fail at once but for a probe,
//! and each failure rings the watch as a dropped call does.
//!
//! When the master found is another server, it is connected and checked
//! as at `build()` (its `ROLE`, its identity against the other members,
//! its eviction policy), and every call from then on goes to it; the
//! release feeds opened on the old master end, so the waiters subscribe
//! again on the new one. The hold order of the member (`node/order`)
//! stays, since it is the member's.
//!
//! A failover inside the member is, to the quorum, the member losing the
//! keys the promoted replica had not received: as an empty restart of a
//! master, repaired by the watchdog only while a quorum confirms the hold,
//! and fence counters that went back are covered by the fence rule.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use redis::Client;
use tokio::sync::{watch, Notify};

use crate::admission::Admission;
use crate::config::{Config, ReplicaWait};
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::keys::Keys;
use crate::node::batch::{BatchKind, RenewBatch};
use crate::node::feed::{Feed, FeedConn};
use crate::node::member::{Args, Call, Confirm, Read, Server};
use crate::node::ops::{Answer, BatchCost, NodeLockState, Renewed};
use crate::node::order::Lane;
use crate::node::redis_node::RedisNode;
use crate::node::spec::NodeSpec;

use super::ask::{listen, where_, Finder, Refused};
use super::spec::Parsed;

/// How often the watch asks the sentinels where the master is when
/// nothing prompted it: the bound on following a failover whose
/// `+switch-master` message was missed.
pub(crate) const RECHECK: Duration = Duration::from_secs(1);

/// The shortest pause between two searches for the master, however many
/// failed calls prompt one.
const MIN_GAP: Duration = Duration::from_millis(100);

/// A member that is a master under Redis Sentinel.
pub(crate) struct SentinelNode {
    shared: Arc<Shared>,
}

/// What the member's calls and its watch share.
struct Shared {
    index: usize,
    label: String,
    /// The master calls go to; `None` until one is found (a member
    /// connected later), or while the one found is refused.
    current: Mutex<Result<Current, NodeError>>,
    /// `WAIT` after each write a quorum counts (`replica_wait`).
    wait: Option<ReplicaWait>,
    /// Counts the masters followed; a feed connection ends when it moves.
    generation: watch::Sender<u64>,
    /// Rung when a call failed or went unanswered: find the master now.
    suspect: Notify,
    /// Rung on a sentinel's `+switch-master` for the name: find the master
    /// now, dropping a search in progress.
    switched: Notify,
}

#[derive(Clone)]
struct Current {
    node: Arc<RedisNode>,
    /// `host:port` of the master.
    at: String,
}

impl SentinelNode {
    /// Connects to the master the sentinels agree on, checks it as
    /// `build()` checks a master (a master, not another member's server,
    /// its eviction policy; the older fence counter adopted), and starts
    /// following it.
    ///
    /// # Errors
    ///
    /// As [`super::ask::agreed`]; then as [`RedisNode::connect`]
    /// ([`Error::NotMaster`] when the sentinels name a replica, which may
    /// resolve: [`Refused::later`]), and [`Error::Config`] when the
    /// admission refuses the master.
    pub(crate) async fn connect(
        index: usize,
        parsed: Parsed,
        config: &Config,
        admission: Arc<Admission>,
    ) -> Result<Self, Refused> {
        let timeout = config.connect_timeout;
        let finder = Finder::new(&parsed)?;
        let told = super::ask::ask_all(&parsed, timeout).await;
        let (host, port) = super::ask::agreed(index, &parsed, &told)?;
        let info = parsed.master_at(host, port);
        let at = where_(&info);
        let client = parsed
            .trust
            .client(info)
            .map_err(|e| Error::invalid("sentinel master", e.to_string()))?;
        let spec = NodeSpec::from_client(&client)?;
        let named = format!("{} at {at}", parsed.label);
        let master = RedisNode::connect(index, spec, timeout)
            .await
            .map(|m| m.silent_after(config.silence()))
            .map_err(|e| match e {
                Error::NotMaster { node, role, .. } => Refused::later(Error::NotMaster {
                    node,
                    addr: named.clone(),
                    role,
                }),
                Error::Connect { failures } => Refused::later(Error::Connect { failures }),
                other => Refused::now(other),
            })?;
        master
            .adopt_legacy_fence(index, (config.layout, &config.key_prefix), timeout)
            .await?;
        admission
            .admit(index, &named, &master.info())
            .map_err(Error::Config)?;
        if let Some(w) = config.replica_wait {
            let replicas =
                master
                    .connected_replicas(timeout)
                    .await
                    .map_err(|e| Error::Connect {
                        failures: vec![e.at(index, &named)],
                    })?;
            if replicas < w.replicas {
                return Err(Refused::now(Error::Config(format!(
                    "replica_wait asks for {} replica(s), but {named} has {replicas} connected: \
                     its grants could never count (WAIT would time out on each); add replicas \
                     or lower replica_wait",
                    w.replicas
                ))));
            }
        }
        let current = Current {
            node: Arc::new(master),
            at,
        };
        let watching = (finder, timeout, config.silence(), config.replica_wait);
        Ok(Self::start(index, parsed, watching, admission, Ok(current)))
    }

    /// A member not connected at `build()` (no sentinel answered, or what
    /// they said may resolve by itself): the watch finds its master when
    /// it can, and checks it then.
    pub(crate) fn lazy(
        index: usize,
        parsed: Parsed,
        config: &Config,
        admission: Arc<Admission>,
    ) -> Result<Self, Error> {
        let finder = Finder::new(&parsed)?;
        let none = Err(NodeError::new(
            NodeErrorKind::Connection,
            "no master found through the sentinels yet",
        ));
        let watching = (
            finder,
            config.connect_timeout,
            config.silence(),
            config.replica_wait,
        );
        Ok(Self::start(index, parsed, watching, admission, none))
    }

    fn start(
        index: usize,
        parsed: Parsed,
        (finder, timeout, silence, wait): (Finder, Duration, Duration, Option<ReplicaWait>),
        admission: Arc<Admission>,
        current: Result<Current, NodeError>,
    ) -> Self {
        let shared = Arc::new(Shared {
            index,
            label: parsed.label.clone(),
            current: Mutex::new(current),
            wait,
            generation: watch::Sender::new(0),
            suspect: Notify::new(),
            switched: Notify::new(),
        });
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            for (info, _) in &parsed.sentinels {
                let weak = Arc::downgrade(&shared);
                let ring = move || {
                    let Some(shared) = weak.upgrade() else {
                        return false;
                    };
                    tracing::info!(member = shared.index, sentinel_member = %shared.label, "a sentinel announced a failover");
                    shared.switched.notify_one();
                    true
                };
                let client = parsed.trust.client(info.clone());
                let alive = shared.generation.subscribe();
                let listen = listen(client, (parsed.name.clone(), timeout), alive, ring);
                drop(handle.spawn(listen));
            }
            let watch = Watch {
                shared: Arc::downgrade(&shared),
                finder,
                timeout,
                silence,
                admission,
            };
            drop(handle.spawn(watch.run()));
        }
        Self { shared }
    }

    fn current(&self) -> Result<Current, NodeError> {
        self.shared.get()
    }

    /// `answer`, ringing the watch if it fails or is dropped unanswered.
    fn watched<R: Send + 'static>(&self, answer: Answer<R>) -> Answer<R> {
        let alarm = Alarm(Some(Arc::downgrade(&self.shared)));
        Box::pin(async move {
            let mut alarm = alarm;
            let reply = answer.await;
            if reply.is_ok() {
                alarm.disarm();
            }
            reply
        })
    }
}

impl Shared {
    fn get(&self) -> Result<Current, NodeError> {
        self.current
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn set(&self, current: Result<Current, NodeError>) {
        *self.current.lock().unwrap_or_else(PoisonError::into_inner) = current;
        self.generation.send_modify(|g| *g += 1);
    }
}

/// Rings the watch when dropped armed: the call it guards failed, or was
/// dropped before an answer.
struct Alarm(Option<Weak<Shared>>);

impl Alarm {
    fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        if let Some(shared) = self.0.take().and_then(|w| w.upgrade()) {
            shared.suspect.notify_one();
        }
    }
}

/// The member's watch: finds the master again when rung and every
/// [`RECHECK`], and moves the member to it.
struct Watch {
    shared: Weak<Shared>,
    finder: Finder,
    timeout: Duration,
    /// The masters' [`Config::silence`].
    silence: Duration,
    admission: Arc<Admission>,
}

impl Watch {
    async fn run(self) {
        loop {
            let Some(shared) = self.shared.upgrade() else {
                return;
            };
            // The first look is at once: a member connected later has no
            // master yet. A sentinel's `+switch-master` drops a look in
            // progress (it may wait on a frozen master's `ROLE` until its
            // timeout) and starts another: the new master is asked at once.
            let switched = tokio::select! {
                () = self.look() => false,
                () = shared.switched.notified() => true,
            };
            if switched {
                continue;
            }
            tokio::time::sleep(MIN_GAP).await;
            let rung = async {
                tokio::select! {
                    () = shared.suspect.notified() => {}
                    () = shared.switched.notified() => {}
                }
            };
            let _ = tokio::time::timeout(RECHECK, rung).await;
        }
    }

    /// Asks the sentinels; moves to the master they name if it is another.
    async fn look(&self) {
        let Ok(info) = self.finder.find(self.timeout).await else {
            return;
        };
        let at = where_(&info);
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        if shared.get().is_ok_and(|c| c.at == at) {
            return;
        }
        let (index, label) = (shared.index, shared.label.clone());
        drop(shared);
        let moved = async {
            let client = Client::open(info).map_err(|e| NodeError::from_redis(&e))?;
            let spec = NodeSpec::from_client(&client)
                .map_err(|e| NodeError::new(NodeErrorKind::Connection, e.to_string()))?;
            let node = RedisNode::connect(index, spec, self.timeout)
                .await
                .map_err(|e| NodeError::new(NodeErrorKind::Connection, e.to_string()))?
                .silent_after(self.silence);
            Ok::<_, NodeError>(node)
        };
        let node = match moved.await {
            Ok(node) => node,
            Err(e) => {
                tracing::warn!(member = index, sentinel_member = %label, master = %at, reason = %e.message, "the master the sentinels name could not be used yet");
                return;
            }
        };
        let Some(shared) = self.shared.upgrade() else {
            return;
        };
        let admitted = self
            .admission
            .admit(index, &format!("{label} at {at}"), &node.info());
        match admitted {
            Ok(()) => {
                tracing::info!(member = index, sentinel_member = %label, master = %at, "following the master the sentinels name");
                shared.set(Ok(Current {
                    node: Arc::new(node),
                    at,
                }));
            }
            Err(why) => {
                tracing::error!(member = index, sentinel_member = %label, master = %at, reason = %why, "the master the sentinels name was refused; the member is not used until they name another");
                shared.set(Err(NodeError::new(NodeErrorKind::Refused, why)));
            }
        }
    }
}

/// The member's release feed: each connection opened on the master of
/// the moment, ended when the member moves to another.
struct SentinelFeed(Weak<Shared>);

impl Feed for SentinelFeed {
    fn open(&self) -> futures::future::BoxFuture<'static, Result<FeedConn, NodeError>> {
        let shared = self.0.upgrade();
        Box::pin(async move {
            let shared =
                shared.ok_or_else(|| NodeError::new(NodeErrorKind::Connection, "closed"))?;
            let mut moved = shared.generation.subscribe();
            let feed = shared.get()?.node.feed().ok_or_else(|| {
                NodeError::new(NodeErrorKind::Connection, "the master has no feed")
            })?;
            drop(shared);
            let conn = feed.open().await?;
            let ended = async move {
                let _ = moved.changed().await;
            };
            Ok(FeedConn {
                sink: conn.sink,
                messages: conn.messages.take_until(ended.boxed()).boxed(),
            })
        })
    }

    fn keyspace_channel(&self, key: &str) -> Option<Arc<str>> {
        let shared = self.0.upgrade()?;
        let feed = shared.get().ok()?.node.feed()?;
        feed.keyspace_channel(key)
    }
}

impl Server for SentinelNode {
    fn addr(&self) -> &str {
        &self.shared.label
    }

    fn maxmemory_policy(&self) -> Option<String> {
        self.current().ok()?.node.maxmemory_policy()
    }

    fn feed(&self) -> Option<Arc<dyn Feed>> {
        Some(Arc::new(SentinelFeed(Arc::downgrade(&self.shared))))
    }

    fn is_cluster(&self) -> bool {
        false
    }

    fn frees_apart(&self) -> bool {
        true
    }

    /// Its calls go through the current master's [`RedisNode`], which
    /// sends them.
    fn sends_shared(&self) -> bool {
        true
    }

    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        BatchCost::of_one_pipeline(batch)
    }

    fn eval<T, R, A, F>(&self, call: Call<T, R, A, F>) -> Answer<R>
    where
        T: redis::FromRedisValue + Send + 'static,
        R: Send + 'static,
        A: Args,
        F: Read<T, R>,
    {
        match self.current() {
            Ok(c) => match self.shared.wait {
                Some(wait) if call.confirm == Confirm::Replicas => {
                    let confirm = c.node.wait_replicas(call.stamp.lane(), wait);
                    let answer = c.node.eval(call);
                    self.watched(Box::pin(async move {
                        let reply = answer.await?;
                        confirm.await?;
                        Ok(reply)
                    }))
                }
                _ => self.watched(c.node.eval(call)),
            },
            Err(e) => {
                call.stamp.ended(false);
                Box::pin(async move { Err(e) })
            }
        }
    }

    fn batch(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        let wait = self.shared.wait.filter(|_| batch.kind() != BatchKind::Keep);
        match self.current() {
            Ok(c) => match wait {
                Some(wait) => {
                    let confirm = c.node.wait_replicas(Lane::Renewals, wait);
                    let answer = c.node.batch(batch);
                    self.watched(Box::pin(async move {
                        let renewed = answer.await?;
                        confirm.await?;
                        Ok(renewed)
                    }))
                }
                None => self.watched(c.node.batch(batch)),
            },
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }

    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        match self.current() {
            Ok(c) => {
                let state = self.watched(c.node.status(keys));
                Box::pin(async move {
                    let mut state = state.await?;
                    state.shard = Some(c.at);
                    Ok(state)
                })
            }
            Err(e) => Box::pin(async move { Err(e) }),
        }
    }
}
