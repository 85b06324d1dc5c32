//! A quorum member that is a whole Redis Cluster, reached through redis-rs's
//! own cluster client (`redis::cluster_async`): one vote, its locks spread
//! over its shards by hash slot.
//!
//! **Routing.** Every script call names only keys of the lock's slot
//! (`script_keys`), and redis-rs routes an `EVAL`/`EVALSHA` by its first
//! key's slot. A renewal or repair batch is split per slot (one script call
//! carries locks of one slot only) and the calls of one shard go in one
//! pipeline: one round trip per shard per wave.
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
//! pause), `NOSCRIPT` (sent again as `EVAL`), a refused connection, or no
//! connection to the slot's node yet. After a broken connection a call is
//! sent again only where a standalone member would send it again (release,
//! leave, raise-fence: `Resend::AfterBrokenConnection`), and renewal
//! batches, which a release waits for, as on a standalone member.
//!
//! **Resharding.** Mid-migration the source answers `ASK` for the keys it
//! moved: a script call, a renewal batch's calls of that slot and a status
//! read are sent to the target after `ASKING`; a call that names a key the
//! target lacks yet (a release names its channel and queue keys) gets
//! `TRYAGAIN` there and is asked there again after a pause, until the slot
//! has moved (`MOVED` is followed too).
//!
//! Release messages: the scripts publish with `SPUBLISH` on a cluster
//! member (sharded pub/sub, in the lock's slot), and its feed
//! (`cluster_feed`) subscribes on the shard that serves the slot. `build()`
//! refuses a seed older than Redis 7.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route, SingleNodeRoutingInfo, SlotAddr};
use redis::{RedisError, Value};

use crate::admission::ServerInfo;
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::keys::Keys;

use crate::sync::locked;

use super::cluster_feed::{check_version, ClusterFeed};
use super::cluster_map::{check_seeds, SlotMap};
use super::cluster_route::{
    by_shard, next, send, send_part, slot_groups, status_values, Next, Redirect, MAX_TRIES,
};
use super::cluster_seed::read_seed;
use super::member::{Call, Server};
use super::reply;
use super::script_call::{broken, map_err, no_script, Resend};
use super::script_keys;
use super::spec::NodeSpec;
use super::{Answer, BatchCost, Feed, NodeLockState, NodeOps, RenewBatch, Renewed};

/// A node's host and port, as a redirect names it.
type Addr = (String, u16);

/// The status pipeline's reply: the hash, its PTTL, the counter, the id of
/// the node that answered.
type StatusReply = (Vec<(String, String)>, i64, Option<String>, String);

/// A quorum member that is a Redis Cluster.
pub(crate) struct ClusterNode {
    /// `cluster(<seed>,...)`, without credentials.
    addr: String,
    conn: ClusterConnection,
    /// Which shard serves which slot, as last read (`CLUSTER SLOTS`);
    /// refreshed after a redirect. Used to group a batch per shard and to
    /// name the shard a status answer came from.
    map: Arc<Mutex<SlotMap>>,
    /// The host of the first seed: the address of a node that does not
    /// know its own.
    seed_host: String,
    info: ServerInfo,
    /// Its release messages, over sharded pub/sub.
    feed: Arc<ClusterFeed>,
}

impl ClusterNode {
    /// Checks the seeds (each a cluster node, all telling one complete
    /// topology) and connects.
    pub(crate) async fn connect(
        index: usize,
        seeds: &[String],
        connect_timeout: Duration,
    ) -> Result<Self, Error> {
        if seeds.is_empty() {
            return Err(Error::invalid(
                "cluster seeds",
                format!("member {index}: a cluster member needs at least one seed URL"),
            ));
        }
        let specs = seeds
            .iter()
            .map(|u| NodeSpec::from_url(u))
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
        let infos: Vec<_> = specs
            .iter()
            .map(|s| s.client.get_connection_info().clone())
            .collect();
        let feed = Arc::new(ClusterFeed::new(infos.clone(), connect_timeout));
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        let client = ClusterClient::builder(infos)
            .retries(0)
            .connection_timeout(connect_timeout)
            .tcp_settings(tcp)
            .build()
            .map_err(|e| Error::invalid("cluster seeds", format!("{addr}: {e}")))?;
        let conn = tokio::time::timeout(connect_timeout, client.get_async_connection())
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
            run_id: Some(map.identity()),
            policy,
        };
        Ok(Self {
            addr,
            conn,
            map: Arc::new(Mutex::new(map)),
            seed_host,
            info,
            feed,
        })
    }

    /// What `build()` checks: the cluster's identity (its masters' ids)
    /// and a seed's `maxmemory-policy`.
    pub(crate) fn info(&self) -> ServerInfo {
        self.info.clone()
    }

    /// Re-reads the slot map (`CLUSTER SLOTS` from any node).
    async fn refresh(conn: &mut ClusterConnection, map: &Mutex<SlotMap>, seed_host: &str) {
        let reply: redis::RedisResult<Value> =
            redis::cmd("CLUSTER").arg("SLOTS").query_async(conn).await;
        if let Ok(fresh) = reply
            .map_err(|e| e.to_string())
            .and_then(|v| SlotMap::parse(&v, seed_host))
        {
            *locked(map) = fresh;
        }
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

    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        let groups = slot_groups(&batch.items);
        let map = locked(&self.map);
        let all: Vec<usize> = (0..groups.len()).collect();
        BatchCost {
            round_trips: by_shard(&map, &groups, &all).len() as u64,
            script_calls: groups.len() as u64,
        }
    }

    /// The lock's state, and the shard that answered: the status pipeline
    /// goes to the lock's slot with `CLUSTER MYID`, whose id the slot map
    /// turns into the shard's address.
    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        let mut conn = self.conn.clone();
        let keys = Arc::clone(keys);
        let map = Arc::clone(&self.map);
        let seed_host = self.seed_host.clone();
        Box::pin(async move {
            let [lock, fence] = script_keys::status(&keys);
            let slot = keys.slot();
            let route = SingleNodeRoutingInfo::SpecificNode(Route::new(slot, SlotAddr::Master));
            let mut values = status_values(&mut conn, lock, fence, route, false).await;
            // A slot that moved (`MOVED`: read it where it is now) or is
            // moving (`ASK`: the source moved the keys; read them on the
            // target, each command after `ASKING`). Reads, sent again freely.
            for _ in 0..MAX_TRIES {
                let Err(e) = &values else { break };
                let (host, port, asking) = match next(e) {
                    Next::Again(Redirect::Moved(host, port)) => (host, port, false),
                    Next::Again(Redirect::Ask(host, port)) => (host, port, true),
                    _ => break,
                };
                let to = SingleNodeRoutingInfo::ByAddress { host, port };
                values = status_values(&mut conn, lock, fence, to, asking).await;
            }
            let values = values.map_err(|e| map_err(&e))?;
            let parsed: redis::RedisResult<StatusReply> =
                redis::from_redis_value(Value::Array(values)).map_err(RedisError::from);
            let (fields, pttl, fence, id) = parsed.map_err(|e| map_err(&e))?;
            let mut state = reply::lock_state(fields, pttl, fence)?;
            let find = |m: &SlotMap| m.shards.iter().find(|s| s.id == id).map(|s| s.addr());
            let mut shard = find(&locked(&map));
            if shard.is_none() {
                Self::refresh(&mut conn, &map, &seed_host).await;
                shard = find(&locked(&map));
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
        let mut conn = self.conn.clone();
        let map = Arc::clone(&self.map);
        Box::pin(async move {
            let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
            let mut send_body = false;
            let mut route = Redirect::BySlot;
            let mut after_break = usize::from(resend == Resend::AfterBrokenConnection);
            let mut pause = Duration::from_millis(5);
            let mut last = NodeError::new(NodeErrorKind::Server, "no try made");
            for _ in 0..MAX_TRIES {
                let mut cmd = script.call(send_body, &keys);
                args(&mut cmd);
                let e = match send(&mut conn, cmd, &route).await {
                    Ok(v) => {
                        let v = redis::from_redis_value::<T>(v)
                            .map_err(|e| NodeError::new(NodeErrorKind::Server, e.to_string()))?;
                        return read(v);
                    }
                    Err(e) => e,
                };
                last = map_err(&e);
                if no_script(&e) && !send_body {
                    send_body = true;
                    continue;
                }
                match next(&e) {
                    Next::Again(to) => {
                        if matches!(to, Redirect::Moved(..)) {
                            locked(&map).shards.clear();
                        }
                        route = to;
                    }
                    Next::Pause => {
                        // `TRYAGAIN` after `ASK`: the target imports the
                        // slot still; ask it again (it answers `MOVED` if
                        // the migration was undone). Else by the slot.
                        if !matches!(route, Redirect::Ask(..)) {
                            route = Redirect::BySlot;
                        }
                        tokio::time::sleep(pause).await;
                        pause = (pause * 2).min(Duration::from_millis(200));
                    }
                    Next::MayHaveRun if broken(&e) && after_break > 0 => {
                        after_break -= 1;
                        route = Redirect::BySlot;
                    }
                    Next::MayHaveRun => return Err(last),
                }
            }
            Err(last)
        })
    }

    /// A renew or repair batch: one script call per slot (and per
    /// [`RENEW_CHUNK`] locks of it), one pipeline per shard, all shards at
    /// once. A shard that fails or redirects is sent its part again (a
    /// renewal may be: a release waits for it) after the map is re-read,
    /// up to three rounds; the member fails the wave if a part still fails.
    fn batch(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        let conn = self.conn.clone();
        let map = Arc::clone(&self.map);
        let seed_host = self.seed_host.clone();
        Box::pin(async move {
            let groups = slot_groups(&batch.items);
            let mut codes: Vec<i64> = vec![0; batch.items.len()];
            let mut pending: Vec<usize> = (0..groups.len()).collect();
            // Per group, the address an `ASK` named: its slot is migrating
            // and its keys are on that node, which runs the call after
            // `ASKING`.
            let mut asks: Vec<Option<Addr>> = vec![None; groups.len()];
            let mut last = NodeError::new(NodeErrorKind::Server, "no try made");
            for round in 0..3 {
                let mut c = conn.clone();
                if round > 0 || locked(&map).shards.is_empty() {
                    Self::refresh(&mut c, &map, &seed_host).await;
                }
                let (asked, plain): (Vec<usize>, Vec<usize>) =
                    pending.iter().partition(|&&g| asks[g].is_some());
                let mut parts: Vec<(Vec<usize>, Option<Addr>)> =
                    by_shard(&locked(&map), &groups, &plain)
                        .into_iter()
                        .map(|part| (part, None))
                        .collect();
                let mut by_addr: BTreeMap<Addr, Vec<usize>> = BTreeMap::new();
                for g in asked {
                    if let Some(to) = asks[g].take() {
                        by_addr.entry(to).or_default().push(g);
                    }
                }
                parts.extend(by_addr.into_iter().map(|(to, part)| (part, Some(to))));
                let sent = futures::future::join_all(parts.into_iter().map(|(part, ask)| {
                    let mut c = conn.clone();
                    let batch = Arc::clone(&batch);
                    let groups = &groups;
                    async move {
                        let r = send_part(&mut c, &batch, groups, &part, ask.as_ref()).await;
                        (part, r)
                    }
                }))
                .await;
                pending.clear();
                let mut load = false;
                for (part, r) in sent {
                    let replies = match r {
                        Ok(replies) => replies,
                        Err(e) => {
                            // redis-rs fails the whole pipeline with its
                            // first error: an `ASK` names its slot.
                            if let (Next::Again(Redirect::Ask(host, port)), Some((_, slot))) =
                                (next(&e), e.redirect_node())
                            {
                                for &g in part.iter().filter(|&&g| groups[g].0 == slot) {
                                    asks[g] = Some((host.clone(), port));
                                }
                            }
                            last = map_err(&e);
                            load |= no_script(&e);
                            pending.extend(part);
                            continue;
                        }
                    };
                    for (&g, reply) in part.iter().zip(replies) {
                        let items = &groups[g].1;
                        match reply {
                            Ok(reply) if reply.len() == items.len() => {
                                for (&i, code) in items.iter().zip(reply) {
                                    codes[i] = code;
                                }
                            }
                            Ok(_) => {
                                last = NodeError::protocol("renew");
                                pending.push(g);
                            }
                            Err(e) => {
                                last = map_err(&e);
                                load |= no_script(&e);
                                if let Next::Again(Redirect::Ask(host, port)) = next(&e) {
                                    asks[g] = Some((host, port));
                                }
                                pending.push(g);
                            }
                        }
                    }
                }
                if load {
                    // SCRIPT LOAD goes to every master.
                    let mut c = conn.clone();
                    let load = batch.script().prepare_invoke();
                    let _ = load.load_async(&mut c).await;
                }
                if pending.is_empty() {
                    return reply::renewed(codes, batch.items.len());
                }
            }
            Err(last)
        })
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
