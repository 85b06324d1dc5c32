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
//! slot (`cluster_batch`). The batches go over a second cluster connection
//! of their own, as a master's renewals do, so that acquisitions never
//! queue behind them on the client side.
//!
//! **Retries.** redis-rs's cluster client retries 16 times by default, and
//! it retries on I/O errors and dropped connections too: a script that ran
//! but whose reply was lost would run twice (an acquire landing behind its
//! own rollback, a force-release deleting a lock taken meanwhile). Its
//! retries are therefore off (`retries(0)`, no response timeout of its own:
//! every call runs under one of ours), and this module re-sends a call only
//! after an answer that proves the script did not run: `MOVED` (sent again
//! to the address named), `ASK` (sent again there after `ASKING`),
//! `TRYAGAIN`, `CLUSTERDOWN`, `MASTERDOWN`, `LOADING`, `READONLY` (after a
//! pause, 5 ms doubling up to 100 ms, for as long as the caller waits, at
//! most the node timeout), `NOSCRIPT` (sent again as `EVAL`), a refused
//! connection, or no connection to the slot's node yet. After a broken connection a call is
//! sent again only where a standalone member would send it again (release,
//! leave, raise-fence: `Resend::AfterBrokenConnection`), and renewal
//! batches, which a release waits for, as on a standalone member.
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
//! (`cluster_feed`) subscribes on the shard that serves the slot. `build()`
//! refuses a seed older than Redis 7.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::{RedisError, Value};

use crate::admission::ServerInfo;
use crate::config::{Config, ReplicaWait};
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::keys::{key_slot, Keys};
use crate::sync::locked;

use super::cluster_batch::{batch_cost, send_batch};
use super::cluster_feed::{check_version, ClusterFeed};
use super::cluster_map::{check_replicas, check_seeds, SlotMap};
use super::cluster_retry::{Retry, Step};
use super::cluster_route::{confirmed, failure, send, status_values, Shards};
use super::cluster_seed::read_seed;
use super::cluster_spec::ClusterSpec;
use super::member::{Call, Confirm, Server};
use super::reply;
use super::script_call::map_err;
use super::script_keys;
use super::spec::NodeSpec;
use super::{Answer, BatchCost, Feed, NodeLockState, NodeOps, RenewBatch, Renewed};

/// The status reads' replies: the hash, its PTTL, the counter, the id of
/// the node that holds the hash.
type StatusReply = (Vec<(String, String)>, i64, Option<String>, String);

/// A quorum member that is a Redis Cluster.
pub(crate) struct ClusterNode {
    /// `cluster(<seed>,...)`, without credentials.
    addr: String,
    shards: Shards,
    /// The watchdog's renewal and repair pipelines, over a second cluster
    /// connection (one more connection to each shard, sharing the slot
    /// map), so that acquisitions and releases never queue behind a long
    /// renewal pipeline on the client side, as on a master.
    renewals: Shards,
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
    /// connects.
    pub(crate) async fn connect(
        index: usize,
        member: &ClusterSpec,
        config: &Config,
    ) -> Result<Self, Error> {
        let seeds = &member.seeds;
        let connect_timeout = config.connect_timeout;
        if seeds.is_empty() {
            return Err(Error::invalid(
                "cluster seeds",
                format!("member {index}: a cluster member needs at least one seed URL"),
            ));
        }
        let specs = seeds
            .iter()
            .map(|u| member.certs.node(NodeSpec::from_url(u)?))
            .collect::<Result<Vec<_>, _>>()?;
        let label = specs
            .iter()
            .map(|s| s.addr.as_str())
            .collect::<Vec<_>>()
            .join(",");
        let addr = format!("cluster({label})");
        let failure = |e: NodeError| Error::Connect {
            failures: vec![e.at(index, &addr)],
        };
        let read = futures::future::join_all(
            specs
                .iter()
                .map(|s| tokio::time::timeout(connect_timeout, read_seed(s))),
        )
        .await;
        let mut maps = Vec::with_capacity(specs.len());
        let mut policy = None;
        for (spec, r) in specs.iter().zip(read) {
            let seed = r
                .map_err(|_| failure(NodeError::new(NodeErrorKind::Timeout, "seed timed out")))?
                .map_err(|e| failure(NodeError::from_redis(&e)))?;
            let Some(map) = seed.map else {
                return Err(Error::Config(format!(
                    "member {index}: seed {} is a standalone server (cluster_enabled:0), not a \
                     Redis Cluster node; add it with `node(url)`",
                    spec.addr
                )));
            };
            let map = map.map_err(|why| Error::Config(format!("member {index}: {why}")))?;
            check_version(&seed.server).map_err(|why| {
                Error::Config(format!("member {index}: seed {} {why}", spec.addr))
            })?;
            policy = policy.or(seed.policy);
            maps.push((spec.addr.clone(), map));
        }
        check_seeds(&maps).map_err(|why| Error::Config(format!("member {index}: {why}")))?;
        let map = maps.swap_remove(0).1;
        if let Some(wait) = config.replica_wait {
            check_replicas(&map, wait.replicas)
                .map_err(|why| Error::Config(format!("member {index} ({addr}): {why}")))?;
        }
        let infos: Vec<_> = specs
            .iter()
            .map(|s| s.client.get_connection_info().clone())
            .collect();
        let feed = Arc::new(ClusterFeed::new(
            infos.clone(),
            member.certs.clone(),
            connect_timeout,
        ));
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        let client = member
            .certs
            .builder(infos)
            .retries(0)
            .connection_timeout(connect_timeout)
            .tcp_settings(tcp)
            .build()
            .map_err(|e| Error::invalid("cluster seeds", format!("{addr}: {e}")))?;
        let (conn, renew_conn) = tokio::time::timeout(
            connect_timeout,
            futures::future::try_join(client.get_async_connection(), client.get_async_connection()),
        )
        .await
        .map_err(|_| failure(NodeError::new(NodeErrorKind::Timeout, "connect timed out")))?
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
        let shards = Shards {
            conn,
            map: Arc::new(Mutex::new(map)),
            seed_host,
        };
        let renewals = Shards {
            conn: renew_conn,
            ..shards.clone()
        };
        Ok(Self {
            addr,
            shards,
            renewals,
            wait: config.replica_wait,
            patience: config.node_timeout,
            info,
            feed,
        })
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

    fn shard_breaks(&self) -> Vec<u16> {
        locked(&self.shards.map).shard_breaks()
    }

    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        batch_cost(&locked(&self.shards.map), &batch.items)
    }

    /// The lock's state, and the shard that holds it: the reads go to the
    /// lock's slot, each key followed where it lives mid-migration
    /// (`status_values`), the hash's with `CLUSTER MYID`, whose id the slot
    /// map turns into the shard's address.
    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        let mut shards = self.shards.clone();
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

    /// One script call, sent again only when an answer proves it did not
    /// run (see the module doc).
    fn eval<T: redis::FromRedisValue + Send + 'static, R: Send + 'static>(
        &self,
        call: Call<T, R>,
    ) -> Answer<R> {
        let (script, resend, args) = (call.script, call.resend, call.args);
        let (keys, read) = (call.keys, call.read);
        let wait = self.wait.filter(|_| call.confirm == Confirm::Replicas);
        let patience = self.patience;
        let mut conn = self.shards.conn.clone();
        let map = Arc::clone(&self.shards.map);
        Box::pin(async move {
            let slot = keys.first().map_or(0, key_slot);
            // The rules of `cluster_retry`, shared with the simulator.
            let mut retry = Retry::new(resend, patience);
            loop {
                let mut cmd = keys.call(script, retry.send_body());
                args(&mut cmd);
                let e = match send(&mut conn, cmd, (retry.route(), slot), wait).await {
                    Ok((v, acks)) => {
                        // Ran: counted only once the replicas have it.
                        confirmed(wait, acks)?;
                        let v = redis::from_redis_value::<T>(v)
                            .map_err(|e| NodeError::new(NodeErrorKind::Server, e.to_string()))?;
                        return read(v);
                    }
                    Err(e) => e,
                };
                match retry.after(&failure(&e)) {
                    Step::Again { moved } => {
                        if moved {
                            locked(&map).shards.clear();
                        }
                    }
                    Step::Wait(pause) => tokio::time::sleep(pause).await,
                    Step::Stop => return Err(map_err(&e)),
                }
            }
        })
    }

    /// A renew or repair batch (see `cluster_batch`), on the renewal
    /// connection.
    fn batch(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        Box::pin(send_batch(self.renewals.clone(), batch, self.wait))
    }
}

/// Refuses a set over several hash slots when a member is a cluster: one
/// script cannot touch keys of several slots there (`CROSSSLOT`), and
/// taking the slots one after another would no longer be all or none on
/// that member. Lock names may not hold braces, so no hash tag can put
/// names of the caller's choosing in one slot; the error says what works.
pub(crate) fn refuse_cross_slot_set(
    members: &[Arc<dyn NodeOps>],
    set: &[Arc<Keys>],
) -> Result<(), Error> {
    let Some(cluster) = members.iter().position(|m| m.is_cluster()) else {
        return Ok(());
    };
    let mut slots: Vec<(u16, &str)> = set.iter().map(|k| (k.slot(), &*k.name)).collect();
    slots.sort_unstable();
    slots.dedup_by_key(|(s, _)| *s);
    if slots.len() <= 1 {
        return Ok(());
    }
    let shown: Vec<String> = slots
        .iter()
        .take(4)
        .map(|(s, n)| format!("{n:?} in slot {s}"))
        .collect();
    Err(Error::invalid(
        "lock names",
        format!(
            "member {cluster} ({}) is a Redis Cluster, where one script can only touch keys of \
             one hash slot, and these names sit in {} slots ({}{}); lock_all there takes only \
             names of one slot (lock names cannot carry a {{hash tag}}, so check with \
             quorumlock::lock_slot), or take the names one by one with nested lock() calls in \
             a fixed order (e.g. sorted) to stay deadlock-free",
            members[cluster].addr(),
            slots.len(),
            shown.join(", "),
            if slots.len() > 4 { ", ..." } else { "" },
        ),
    ))
}
