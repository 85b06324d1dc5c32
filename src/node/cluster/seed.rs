//! What a cluster member's seeds say at `build()`: their slot map, eviction
//! policy and version; the refusal of a node given as a standalone master
//! that is one shard of a larger cluster, and of a set over several hash
//! slots when a member is a cluster.

use std::sync::Arc;
use std::time::Duration;

use redis::Value;

use crate::error::Error;
use crate::keys::Keys;

use super::map::{info_field, SlotMap};
use crate::node::ops::NodeOps;
use crate::node::spec::NodeSpec;

/// What a seed says: its slot map (each shard's replicas counted from
/// `CLUSTER NODES`), or `None` for a standalone server; its
/// `maxmemory-policy`; its `INFO server` (for its version).
pub(super) struct Seed {
    pub(super) map: Option<Result<SlotMap, String>>,
    pub(super) policy: Option<String>,
    pub(super) server: String,
}

pub(super) async fn read_seed(spec: &NodeSpec) -> redis::RedisResult<Seed> {
    let mut c = spec.client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("cluster")
        .query_async(&mut c)
        .await?;
    let policy = crate::admission::maxmemory_policy(&mut c)
        .await
        .ok()
        .flatten();
    if info_field(&info, "cluster_enabled") != Some("1") {
        return Ok(Seed {
            map: None,
            policy,
            server: String::new(),
        });
    }
    let server: String = redis::cmd("INFO").arg("server").query_async(&mut c).await?;
    let slots: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut c)
        .await?;
    let nodes: String = redis::cmd("CLUSTER")
        .arg("NODES")
        .query_async(&mut c)
        .await?;
    let host = match spec.client.get_connection_info().addr() {
        redis::ConnectionAddr::Tcp(h, _) | redis::ConnectionAddr::TcpTls { host: h, .. } => {
            h.clone()
        }
        _ => String::new(),
    };
    let map = SlotMap::parse(&slots, &host).map(|mut map| {
        map.count_replicas(&nodes);
        map
    });
    Ok(Seed {
        map: Some(map),
        policy,
        server,
    })
}

/// Refuses a node given as a standalone master that is one shard of a
/// Redis Cluster of several (`CLUSTER INFO`: `cluster_size` above 1): a
/// standalone connection would meet `MOVED` for every lock of another
/// shard. A cluster node that serves every slot alone works as a master.
/// A node that will not answer `INFO cluster` in time is let through.
pub(crate) async fn refuse_shard_of_cluster<C: redis::aio::ConnectionLike>(
    conn: &mut C,
    index: usize,
    addr: &str,
    timeout: Duration,
) -> Result<(), Error> {
    let mut info = redis::cmd("INFO");
    let info = info.arg("cluster").query_async::<String>(conn);
    let Ok(Ok(info)) = tokio::time::timeout(timeout, info).await else {
        return Ok(());
    };
    if info_field(&info, "cluster_enabled") != Some("1") {
        return Ok(());
    }
    let mut size = redis::cmd("CLUSTER");
    let size = size.arg("INFO").query_async::<String>(conn);
    let Ok(Ok(size)) = tokio::time::timeout(timeout, size).await else {
        return Ok(());
    };
    match info_field(&size, "cluster_size").and_then(|n| n.parse::<u32>().ok()) {
        Some(n) if n > 1 => Err(Error::Config(format!(
            "node {index} ({addr}) is one shard of a Redis Cluster of {n} shards; add the \
             cluster as one member with `cluster(seed_urls)`, not its nodes with `node(url)`"
        ))),
        _ => Ok(()),
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
