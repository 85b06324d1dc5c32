//! A quorum member that is a whole Redis Cluster, reached through redis-rs's
//! own cluster client (`redis::cluster_async`): one vote, its locks spread
//! over its shards by hash slot.
//!
//! **Routing.** Every script call about one lock names only keys of the
//! lock's slot (`script_keys`), and redis-rs routes an `EVAL`/`EVALSHA` by
//! its first key's slot. A renewal or repair batch is split per shard (one
//! call of a per-shard script, `allow-cross-slot-keys`, per 100 locks of
//! the shard, whatever their slots), one pipeline per shard: one round
//! trip per shard per wave; a lock the shard no longer serves goes by its
//! slot (`batch`). The batches go over a cluster connection of their
//! own, as a master's renewals do, so that acquisitions never queue behind
//! them on the client side; releases and queue exits over a third
//! ([`Lane::Frees`]) behind a crowd of attempts (from `order::CROWDED`
//! calls in flight on the first), so that they never queue behind it, in
//! the order the member's `order` keeps per hash slot (a barrier there is
//! a `PING` routed to the slot's master).
//!
//! **Retries.** redis-rs's cluster client retries 16 times by default, and
//! it retries on I/O errors and dropped connections too: a script that ran
//! but whose reply was lost would run twice (an acquire landing behind its
//! own rollback, a force-release deleting a lock taken meanwhile). Its
//! retries are therefore off (`retries(0)`; its response timeout is a
//! caller's longest wait, a release's: its refreshes cannot hang on a
//! frozen node, and a late answer within that wait counts), and this
//! module re-sends a call only after an answer that proves the script did not run: `MOVED` (sent again
//! to the address named), `ASK` (sent again there after `ASKING`),
//! `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY` (after a
//! pause, 5 ms doubling up to 100 ms, for as long as the caller waits, at
//! most the node timeout), `NOSCRIPT` (sent again as `EVAL`), a refused
//! connection, or no connection to the slot's node yet. After a broken
//! connection (not a response timeout: the call may still run) a call is
//! sent again only where a standalone member would send it again (release,
//! leave, raise-fence: `Resend::AfterBrokenConnection`), and renewal
//! batches, which a release waits for, as on a standalone member. No call
//! is sent again once a later call of its hold was made to the member
//! (`order`, owned by `member`): an acquire never lands behind its release.
//!
//! **Failover of a frozen master.** A call left unanswered makes the
//! member probe its topology and follow a failover that redis-rs's client
//! cannot see (`watch`).
//!
//! **Resharding.** Mid-migration the source answers `ASK` for the keys it
//! moved: a script call, a renewal batch's calls of that slot and a status
//! read (of each key apart) are sent to the target after `ASKING`; a call
//! that names a key the target lacks yet (a release names its channel and
//! queue keys) gets `TRYAGAIN` there and is asked there again after a
//! pause, until the slot has moved (`MOVED` is followed too) or the caller
//! stops waiting.
//!
//! Release messages: the scripts publish with `SPUBLISH` on a cluster
//! member (sharded pub/sub, in the lock's slot), and its feed
//! (`feed`) subscribes on the shard that serves the slot. `build()`
//! refuses a seed older than Redis 7.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{RedisError, Value};

use crate::admission::ServerInfo;
use crate::config::{Config, ReplicaWait};
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::keys::{key_slot, Keys};
use crate::sync::locked;

use super::batch::{batch_cost, send_batch};
use super::feed::{check_version, ClusterFeed};
use super::map::{check_replicas, check_seeds, SlotMap};
use super::retry::{Retry, Step};
use super::route::{confirmed, failure, ping_slot, send, status_values, Next, Shards};
use super::seed::read_seed;
use super::spec::ClusterSpec;
use super::watch::{suspect_after, Dial, Link, Passing, Unanswered, Watch};
use crate::node::batch::{BatchKind, RenewBatch};
use crate::node::feed::Feed;
use crate::node::member::{Args, Call, Confirm, Read, Server};
use crate::node::ops::{Answer, BatchCost, NodeLockState, Renewed};
use crate::node::order::Lane;
use crate::node::reply;
use crate::node::script_call::map_err;
use crate::node::script_keys;
use crate::node::spec::NodeSpec;

/// The status reads' replies: the hash, its PTTL, the counter, the id of
/// the node that holds the hash.
type StatusReply = (Vec<(String, String)>, i64, Option<String>, String);

/// A quorum member that is a Redis Cluster.
pub(crate) struct ClusterNode {
    /// `cluster(<seed>,...)`, without credentials.
    addr: String,
    /// The calls' and status reads' connection, and the watchdog's renewal
    /// and repair pipelines' over a second cluster connection (one more
    /// connection to each shard, sharing the slot map), so that
    /// acquisitions and releases never queue behind a long renewal
    /// pipeline on the client side, as on a master; both replaced when the
    /// member follows a failover (`watch`).
    link: Arc<Link>,
    map: Arc<Mutex<SlotMap>>,
    /// The host of the first seed (see [`Shards::seed_host`]).
    seed_host: String,
    /// Probes the topology when calls go unanswered (a frozen master).
    watch: Arc<Watch>,
    /// How long a try may stay on the wire before the member suspects its
    /// map.
    suspect_after: Duration,
    /// `WAIT` after each write a quorum counts (`replica_wait`).
    wait: Option<ReplicaWait>,
    /// How long a call is sent again after answers proving it did not run
    /// (`TRYAGAIN`, `CLUSTERDOWN`, ...), at most: the node timeout, which
    /// bounds every caller's wait.
    patience: Duration,
    info: ServerInfo,
    /// Its release messages, over sharded pub/sub.
    feed: Arc<ClusterFeed>,
}

impl ClusterNode {
    /// Checks the seeds (each a cluster node, all telling one complete
    /// topology, each shard with the replicas `replica_wait` asks for) and
    /// connects. A seed that does not answer (stopped, frozen) is left
    /// out: the checks run on what the seeds that answered tell, and the
    /// member is reached through them; only a member none of whose seeds
    /// answers is [`Error::Connect`].
    pub(crate) async fn connect(
        index: usize,
        member: &ClusterSpec,
        config: &Config,
    ) -> Result<Self, Error> {
        Self::try_connect(index, member, config)
            .await
            .map_err(|(e, _)| e)
    }

    /// [`ClusterNode::connect`], saying whether its error may pass (no
    /// seed answered; seeds that disagree, or slots no shard serves, as
    /// mid-failover or while the cluster is being made), so that a member
    /// connected later tries again instead of refusing it for good.
    pub(crate) async fn try_connect(
        index: usize,
        member: &ClusterSpec,
        config: &Config,
    ) -> Result<Self, (Error, Passing)> {
        let lasting = |e: Error| (e, Passing::No);
        let seeds = &member.seeds;
        let connect_timeout = config.connect_timeout;
        if seeds.is_empty() {
            return Err(lasting(Error::invalid(
                "cluster seeds",
                format!("member {index}: a cluster member needs at least one seed URL"),
            )));
        }
        let specs = seeds
            .iter()
            .map(|u| member.certs.node(NodeSpec::from_url(u)?))
            .collect::<Result<Vec<_>, _>>()
            .map_err(lasting)?;
        let label = specs
            .iter()
            .map(|s| s.addr.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let addr = format!("cluster({label})");
        let failure = |e: NodeError| {
            (
                Error::Connect {
                    failures: vec![e.at(index, &addr)],
                },
                Passing::Yes,
            )
        };
        let read = futures::future::join_all(
            specs
                .iter()
                .map(|s| tokio::time::timeout(connect_timeout, read_seed(s))),
        )
        .await;
        let mut maps = Vec::with_capacity(specs.len());
        let mut answered = Vec::with_capacity(specs.len());
        let mut unreached: Vec<NodeError> = Vec::new();
        let mut policy = None;
        for (spec, r) in specs.iter().zip(read) {
            let seed = match r {
                Ok(Ok(seed)) => seed,
                Ok(Err(e)) => {
                    let e = NodeError::from_redis(&e);
                    unreached.push(NodeError::new(
                        e.kind,
                        format!("seed {}: {}", spec.addr, e.message),
                    ));
                    continue;
                }
                Err(_) => {
                    unreached.push(NodeError::new(
                        NodeErrorKind::Timeout,
                        format!("seed {} timed out", spec.addr),
                    ));
                    continue;
                }
            };
            let Some(map) = seed.map else {
                return Err(lasting(Error::Config(format!(
                    "member {index}: seed {} is a standalone server (cluster_enabled:0), not a \
                     Redis Cluster node; add it with `node(url)`",
                    spec.addr
                ))));
            };
            let map =
                map.map_err(|why| lasting(Error::Config(format!("member {index}: {why}"))))?;
            check_version(&seed.server).map_err(|why| {
                lasting(Error::Config(format!(
                    "member {index}: seed {} {why}",
                    spec.addr
                )))
            })?;
            policy = policy.or(seed.policy);
            maps.push((spec.addr.clone(), map));
            answered.push(spec.client.get_connection_info().clone());
        }
        if maps.is_empty() {
            let kind = unreached
                .first()
                .map_or(NodeErrorKind::Connection, |e| e.kind.clone());
            let why: Vec<String> = unreached.into_iter().map(|e| e.message).collect();
            return Err(failure(NodeError::new(
                kind,
                format!("no seed answered ({})", why.join("; ")),
            )));
        }
        for e in &unreached {
            tracing::warn!(member = index, addr = %addr, error = %e.message, "a cluster seed did not answer; reached through the others");
        }
        check_seeds(&maps).map_err(|why| {
            // Seeds of one cluster that disagree (mid-failover) or leave
            // slots unserved (being made) may agree later; seeds of two
            // clusters (no master in common) never will.
            let one_cluster = maps.iter().all(|(_, m)| {
                m.shards
                    .iter()
                    .any(|s| maps[0].1.shards.iter().any(|f| f.id == s.id))
            });
            let passing = if one_cluster {
                Passing::Yes
            } else {
                Passing::No
            };
            (Error::Config(format!("member {index}: {why}")), passing)
        })?;
        let map = maps.swap_remove(0).1;
        if let Some(wait) = config.replica_wait {
            check_replicas(&map, wait.replicas)
                .map_err(|why| lasting(Error::Config(format!("member {index} ({addr}): {why}"))))?;
        }
        let infos: Vec<_> = specs
            .iter()
            .map(|s| s.client.get_connection_info().clone())
            .collect();
        // The cluster client and the feed start from the seeds that
        // answered (one that hangs would hold every first connect for the
        // connect timeout); probes ask every seed.
        let feed = Arc::new(ClusterFeed::new(
            answered.clone(),
            member.certs.clone(),
            connect_timeout,
        ));
        let dial = Dial {
            seeds: infos,
            certs: member.certs.clone(),
            node_timeout: config.node_timeout,
            connect_timeout,
        };
        dial.client(answered.clone())
            .map_err(|e| lasting(Error::invalid("cluster seeds", format!("{addr}: {e}"))))?;
        let conns = dial
            .connect(answered)
            .await
            .map_err(|e| failure(NodeError::from_redis(&e)))?;
        let seed_host = specs
            .first()
            .and_then(|s| match s.client.get_connection_info().addr() {
                redis::ConnectionAddr::Tcp(h, _)
                | redis::ConnectionAddr::TcpTls { host: h, .. } => Some(h.clone()),
                _ => None,
            })
            .unwrap_or_else(|| "127.0.0.1".to_owned());
        let info = ServerInfo {
            ids: map.identity(),
            policy,
        };
        let map = Arc::new(Mutex::new(map));
        let link = Arc::new(Link::new(conns));
        let watch = Arc::new(Watch::new(
            addr.clone(),
            dial,
            Arc::clone(&map),
            Arc::clone(&link),
            Arc::clone(&feed),
        ));
        Ok(Self {
            addr,
            link,
            map,
            seed_host,
            watch,
            suspect_after: suspect_after(config.node_timeout),
            wait: config.replica_wait,
            patience: config.node_timeout,
            info,
            feed,
        })
    }

    /// The way to the shards for one call: the connection of the moment.
    fn shards(&self) -> Shards {
        Shards {
            conn: self.link.lane(Lane::Calls),
            map: Arc::clone(&self.map),
            seed_host: self.seed_host.clone(),
            patience: self.patience,
        }
    }

    /// The way to the shards for one batch of `kind`.
    fn batches(&self, kind: BatchKind) -> Shards {
        Shards {
            conn: self.link.batches(kind),
            ..self.shards()
        }
    }

    /// What `build()` checks: the cluster's identities (its masters' node
    /// ids) and a seed's `maxmemory-policy`.
    pub(crate) fn info(&self) -> ServerInfo {
        self.info.clone()
    }
}

impl Server for ClusterNode {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn maxmemory_policy(&self) -> Option<String> {
        self.info.policy.clone()
    }

    fn is_cluster(&self) -> bool {
        true
    }

    fn frees_apart(&self) -> bool {
        true
    }

    fn shard_breaks(&self) -> Vec<u16> {
        locked(&self.map).shard_breaks()
    }

    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        batch_cost(&locked(&self.map), &batch.items)
    }

    /// The lock's state, and the shard that holds it: the reads go to the
    /// lock's slot, each key followed where it lives mid-migration
    /// (`status_values`), the hash's with `CLUSTER MYID`, whose id the slot
    /// map turns into the shard's address.
    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        let mut shards = self.shards();
        let keys = Arc::clone(keys);
        Box::pin(async move {
            let [lock, fence] = script_keys::status(&keys);
            let values = status_values(&shards.conn, keys.slot(), lock, fence).await;
            let values = values.map_err(|e| map_err(&e))?;
            let parsed: redis::RedisResult<StatusReply> =
                redis::from_redis_value(Value::Array(values)).map_err(RedisError::from);
            let (fields, pttl, fence, id) = parsed.map_err(|e| map_err(&e))?;
            let mut state = reply::lock_state(fields, pttl, fence)?;
            let find = |m: &SlotMap| m.shards.iter().find(|s| s.id == id).map(|s| s.addr());
            let mut shard = find(&locked(&shards.map));
            if shard.is_none() {
                shards.refresh().await;
                shard = find(&locked(&shards.map));
            }
            state.shard = Some(shard.unwrap_or_else(|| format!("node id {id}")));
            Ok(state)
        })
    }

    fn feed(&self) -> Option<Arc<dyn Feed>> {
        Some(Arc::clone(&self.feed) as Arc<dyn Feed>)
    }

    /// One script call on the connection of its lane
    /// ([`Stamp::lane`](crate::node::order::Stamp::lane)), after a `PING`
    /// answered by its slot's master on the other one where its order asks
    /// for a barrier; sent again only when an answer proves it did not run
    /// (see the module doc).
    fn eval<T, R, A, F>(&self, call: Call<T, R, A, F>) -> Answer<R>
    where
        T: redis::FromRedisValue + Send + 'static,
        R: Send + 'static,
        A: Args,
        F: Read<T, R>,
    {
        let (script, resend, args) = (call.script, call.resend, call.args);
        let (keys, read, stamp) = (call.keys, call.read, call.stamp);
        let wait = self.wait.filter(|_| call.confirm == Confirm::Replicas);
        let patience = self.patience;
        let link = Arc::clone(&self.link);
        let map = Arc::clone(&self.map);
        let (watch, suspect_after) = (Arc::clone(&self.watch), self.suspect_after);
        Box::pin(async move {
            let slot = keys.first().map_or(0, key_slot);
            let order = &stamp;
            let reply = async move {
                let stamp = order;
                for lane in stamp.barriers().iter() {
                    let on_wire = Unanswered::new(&watch, suspect_after);
                    let ping = ping_slot(&mut link.lane(lane), slot).await;
                    on_wire.answered(ping.is_ok());
                    ping.map_err(|e| map_err(&e))?;
                    stamp.passed(lane);
                }
                // The rules of `retry`, shared with the simulator.
                let mut retry = Retry::new(resend, patience);
                // Whether a try may have run (a broken connection): a call
                // superseded after one fails as that try did, not as unrun.
                let mut may_have_run = None;
                loop {
                    let mut cmd = keys.call(script, retry.send_body());
                    args(&mut cmd);
                    // Each try over the connection of the moment: one made
                    // after a failover was followed goes to the new master.
                    let mut conn = link.lane(stamp.lane());
                    let on_wire = Unanswered::new(&watch, suspect_after);
                    let sent = send(&mut conn, cmd, (retry.route(), slot), wait).await;
                    // An error after a long wait (redis-rs's response
                    // timeout) is suspect as no answer is.
                    on_wire.answered(sent.is_ok());
                    let e = match sent {
                        Ok((v, acks)) => return Ok((v, acks)),
                        Err(e) => e,
                    };
                    let failed = failure(&e);
                    if failed.next == Next::MayHaveRun {
                        may_have_run = Some(map_err(&e));
                    }
                    match retry.after(&failed) {
                        Step::Again { moved } => {
                            if moved {
                                locked(&map).shards.clear();
                            }
                        }
                        Step::Wait(pause) => tokio::time::sleep(pause).await,
                        Step::Stop => return Err(map_err(&e)),
                    }
                    // Never again behind a later call of the same hold (its
                    // release, its next attempt), made while this one
                    // waited: the member owns the order of a hold's calls.
                    if let Err(superseded) = stamp.may_resend() {
                        return Err(may_have_run.unwrap_or(superseded));
                    }
                }
            }
            .await;
            // Answered (by its slot's master, or where a redirect sent it),
            // failed or never sent: it will not run later.
            stamp.ended(reply.is_ok());
            let (v, acks) = reply?;
            // Ran: counted only once the replicas have it.
            confirmed(wait, acks)?;
            let v = redis::from_redis_value::<T>(v)
                .map_err(|e| NodeError::new(NodeErrorKind::Server, e.to_string()))?;
            read(v)
        })
    }

    /// A renew or repair batch (see `batch`), on the renewal
    /// connection; a keep batch on the calls' connection, without `WAIT`.
    fn batch(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        let sent = send_batch(self.batches(batch.kind()), batch, self.wait);
        let (watch, suspect_after) = (Arc::clone(&self.watch), self.suspect_after);
        Box::pin(async move {
            let on_wire = Unanswered::new(&watch, suspect_after);
            let r = sent.await;
            on_wire.answered(r.is_ok());
            // A part that timed out (its shard answered nothing within the
            // batch's deadline) may sit on a frozen master.
            let timed_out = match &r {
                Err(e) => e.kind == NodeErrorKind::Timeout,
                Ok(each) => each.contains(&Renewed::Failed),
            };
            if timed_out {
                watch.suspect();
            }
            r
        })
    }
}
