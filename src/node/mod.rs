//! One member (a Redis master, or a whole Redis Cluster) as the coordinator
//! sees it. This module is the node layer's only door: it holds no code of
//! its own, and the rest of the crate reaches the layer only through what
//! it re-exports.
//!
//! Its parts, from the leaves up (each imports only parts above it):
//!
//! - `batch`: the locks of one watchdog tick, sent as one pipeline;
//! - `feed`: the node's release messages, as the waiters receive them;
//! - `spec`: a node as given to the builder, before connecting;
//! - `order`: the order of one hold's calls on one member (a call proven
//!   not run is never sent again once a later call of its hold was made);
//! - `script_keys`: the key names each script call passes, all in the
//!   lock's hash slot for a call about one lock;
//! - `shared`: the one command the calls of a fan-out share, sent only
//!   by calls that would have built the same;
//! - `ops`: [`NodeOps`], the calls the coordinator makes of a member, and
//!   their answers;
//! - `reply`: what a real master's replies mean (no I/O);
//! - `script_call`: one script call, as `EVAL` or `EVALSHA`, and when it
//!   may be sent again;
//! - `member`: a real member as one `NodeOps`, every script call written
//!   once, over a `Server` that states only how a call reaches it;
//! - `cluster`: a member that is a whole Redis Cluster, over redis-rs's
//!   cluster client (a folder of its own, reached through its `mod.rs`);
//! - `redis_node`: a real master behind a connection manager;
//! - `sentinel`: a member that is a master under Redis Sentinel, followed
//!   across failovers (a folder of its own, reached through its `mod.rs`).

mod batch;
mod cluster;
mod feed;
mod member;
mod ops;
mod order;
mod redis_node;
mod reply;
mod script_call;
mod script_keys;

mod sentinel;
mod shared;
mod spec;

#[cfg(test)]
pub(crate) use self::batch::BatchKind;
pub(crate) use self::batch::{RenewBatch, RenewItem, RENEW_CHUNK};
#[cfg(feature = "tls-rustls")]
pub(crate) use self::cluster::Certs;
#[cfg(test)]
pub(crate) use self::cluster::{failure, slot_groups, Redirect, Retry, Step};
pub(crate) use self::cluster::{refuse_cross_slot_set, ClusterNode, ClusterSpec, LazyCluster};
pub(crate) use self::feed::{Feed, FeedConn};
#[cfg(test)]
pub(crate) use self::feed::{FeedMessage, FeedSink};
pub(crate) use self::member::{Member, Server};
pub use self::ops::NodeLockState;
pub(crate) use self::ops::{
    Answer, Claim, Grant, NodeOps, Place, Proclaimed, Record, Released, Renewed, Seen, SlotsSeen,
};
pub(crate) use self::redis_node::RedisNode;
#[cfg(test)]
pub(crate) use self::script_call::{Again, Resend};
pub(crate) use self::sentinel::{
    SentinelNode, SentinelRefused, SentinelSpec, Trust as SentinelTrust,
};
pub(crate) use self::spec::{redact, NodeSpec};

/// The keys (`KEYS`) each script call names, for the tests' nodes, which
/// name them as a real member does.
#[cfg(test)]
pub(crate) mod call_keys {
    pub(crate) use super::script_keys::{
        acquire, acquire_all, acquire_queued, force_release, leader, leave, permits, proclaim,
        raise_fences, read, release, write, Names,
    };
}
