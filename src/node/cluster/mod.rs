//! A member that is a whole Redis Cluster: one vote, its locks spread over
//! its shards by hash slot. This module is the folder's only door: the
//! node layer reaches a cluster member through what it re-exports.
//!
//! Its parts, from the leaves up (each imports only parts above it):
//!
//! - `map`: the slot map as `CLUSTER SLOTS` tells it, and the checks of a
//!   member's seeds (no I/O);
//! - `retry`: when a script call is sent again, on what a try's error
//!   proves (no I/O);
//! - `spec`: a cluster member as given to the builder (seeds, certificates);
//! - `seed`: what the seeds say at `build()`, and the refusal of a master
//!   that is one shard of a larger cluster;
//! - `feed`: the release feed over sharded pub/sub;
//! - `route`: how a call reaches its shard (redirects, `ASKING`, `WAIT`),
//!   and what a `RedisError` proves;
//! - `watch`: the probe of the topology when calls go unanswered, and the
//!   new connections after a failover redis-rs's client cannot see;
//! - `batch`: a renewal or repair batch, one pipeline per shard;
//! - `node`: the member itself (`ClusterNode`), over redis-rs's cluster
//!   client with its retries off;
//! - `lazy`: a member that did not answer at `build()`, connected in the
//!   background.

mod batch;
mod feed;
mod lazy;
mod map;
mod node;
mod retry;
mod route;
mod seed;
mod spec;
mod watch;

pub(crate) use self::lazy::LazyCluster;
pub(crate) use self::node::ClusterNode;
#[cfg(test)]
pub(crate) use self::retry::{Redirect, Retry, Step};
pub(crate) use self::route::confirmed;
#[cfg(test)]
pub(crate) use self::route::{failure, slot_groups};
pub(crate) use self::seed::refuse_cross_slot_set;
pub(crate) use self::seed::refuse_shard_of_cluster;
#[cfg(feature = "tls-rustls")]
pub(crate) use self::spec::Certs;
pub(crate) use self::spec::ClusterSpec;
