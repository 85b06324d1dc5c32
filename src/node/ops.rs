//! The calls the coordinator makes of one member (the private [`NodeOps`]
//! trait, so that it can be tested against fakes that stall, fail or grant
//! partially), each answered by an [`Answer`], and what a member answers:
//! [`Grant`], [`Released`], [`Renewed`], [`NodeLockState`]; the terms of a
//! call ([`Claim`], a waiter's [`Place`]) and what a batch costs
//! ([`BatchCost`]).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;

use super::batch::{RenewBatch, RENEW_CHUNK};
use super::feed::Feed;
use super::shared::Shared;
use crate::error::NodeError;
use crate::keys::Keys;

/// How a node answered an acquire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Grant {
    /// Granted; carries the fence counter the node returned.
    Granted(u64),
    /// Not granted: another owner holds it (with its PTTL), or, for a
    /// queued waiter, the lock is free but another waiter's turn (with the
    /// time that waiter has left to claim it). Carries the waiter's ticket
    /// on this node when it asked for a place in the queue (0 otherwise).
    Taken(Option<Duration>, u64),
    /// Re-entry only ([`NodeOps::reenter`]): the key is missing (forced,
    /// expired, or the node restarted empty); nothing was created.
    Missing,
}

/// Who a lock call is for and on what terms: the holder id written into the
/// lock hash, the lease, and the hold count (to set, or to leave on a
/// release); and the command its fan-out's calls share ([`Shared`]: a
/// call sends it only when it would have built the same one).
#[derive(Debug, Clone)]
pub(crate) struct Claim {
    pub(crate) holder: Arc<str>,
    pub(crate) lease: Duration,
    pub(crate) count: u32,
    pub(crate) shared: Shared,
}

impl Claim {
    pub(crate) fn new(holder: Arc<str>, lease: Duration, count: u32) -> Self {
        Self {
            holder,
            lease,
            count,
            shared: Shared::default(),
        }
    }
}

/// A waiter's place in a lock's queue, sent with each of its attempts
/// (`scripts/acquire_queued.lua`).
#[derive(Debug, Clone)]
pub(crate) struct Place {
    /// The waiter's id, the same for every attempt of one acquisition; it
    /// starts with the manager's client id.
    pub(crate) waiter: Arc<str>,
    /// The ticket every node is to order the waiter by; 0 until known.
    pub(crate) ticket: u64,
    /// A waiter that makes no call for this long is skipped.
    pub(crate) timeout: Duration,
    /// Granted only at the head of the queue (the fair lock); otherwise the
    /// place only decides whom a release wakes.
    pub(crate) fair: bool,
}

/// How a node answered a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Deleted, and waiters notified.
    Deleted,
    /// The hold count was lowered; the lock stays.
    Lowered,
    /// No key: expired, or the node lost it.
    Missing,
    /// Another owner holds it.
    OtherOwner,
}

/// How a node answered one lock of a renewal batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Our owner held it; extended. In a keep batch: the place was kept,
    /// and the lock's key has no TTL.
    Extended,
    /// Keep batches only: the place was kept, and the lock's key had this
    /// long left.
    Kept(Duration),
    /// The key was missing and has been re-created for us (repair only).
    Repaired,
    /// The key is missing (renewal only; nothing was created).
    Missing,
    /// Another owner holds it.
    Conflict,
    /// The key holds another type.
    WrongType,
    /// No answer for this lock: the part of the batch that carried it
    /// failed (a cluster member's shard that failed, timed out, or whose
    /// `WAIT` fell short) while other parts answered.
    Failed,
}

/// An election leader's record as a proclaim writes it on a node
/// (`scripts/proclaim.lua`) and a read finds it (`scripts/leader.lua`).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Record {
    /// The holder id of the leader's hold of the election's lock.
    pub(crate) holder: Arc<str>,
    /// The term: the hold's fencing token.
    pub(crate) term: u64,
    /// The revision of the value within the term (1 for the campaign's).
    pub(crate) rev: u64,
    pub(crate) value: Arc<str>,
}

/// How a node answered a proclaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Proclaimed {
    /// The record is the leader's (written now, or already there).
    Written,
    /// The leader's hold is not alive on this node: nothing written.
    NotHeld,
    /// The node has a record of a later term or revision: nothing written.
    Superseded,
}

/// What one node says of an election's leader (`scripts/leader.lua`),
/// with the PTTL of the election's lock where it is held.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Seen {
    /// No lock: nobody leads on this node.
    Vacant,
    /// The lock is held, but not by the record's holder (a campaign won
    /// and not proclaimed here yet).
    Unproclaimed(Option<Duration>),
    /// The record's holder holds the lock.
    Leads(Record, Option<Duration>),
}

/// What one node holds for one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeLockState {
    /// The owner id holding the lock, if any.
    pub holder: Option<String>,
    /// The holder's hold count (0 when free).
    pub hold_count: u32,
    /// Remaining time of the lock key; `None` when free or without TTL.
    pub pttl: Option<Duration>,
    /// The fence counter of the lock's hash slot on this node (the last
    /// token it issued for a name of that slot, or raised it to).
    pub fence: u64,
    /// For a member that is a Redis Cluster, the shard that answered (its
    /// master's `host:port`); for a member under Redis Sentinel, the
    /// master that answered; `None` for a standalone master.
    pub shard: Option<String>,
}

/// What one renewal or repair batch costs on one member: round trips
/// (pipelines) and script calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BatchCost {
    pub(crate) round_trips: u64,
    pub(crate) script_calls: u64,
}

impl BatchCost {
    /// One pipeline carrying one script call per [`RENEW_CHUNK`] locks (a
    /// standalone member).
    pub(crate) fn of_one_pipeline(batch: &RenewBatch) -> Self {
        Self {
            round_trips: 1,
            script_calls: batch.items.len().div_ceil(RENEW_CHUNK) as u64,
        }
    }
}

/// A node's answer to one call: `'static`, so that a call still in flight
/// can outlive the caller that started it.
pub(crate) type Answer<T> = BoxFuture<'static, Result<T, NodeError>>;

/// Calls to one node (each answered by an [`Answer`]).
pub(crate) trait NodeOps: Send + Sync + 'static {
    fn addr(&self) -> &str;

    /// The node's `maxmemory-policy` as last read (at connect, when a lazily
    /// connected node first answered, and by each status call); `None` when
    /// the node would not say (`CONFIG` refused or renamed) or never answered.
    fn maxmemory_policy(&self) -> Option<String> {
        None
    }

    /// Whether the member is a Redis Cluster (a set over several hash
    /// slots cannot be taken on it in one script).
    fn is_cluster(&self) -> bool {
        false
    }

    /// The hash slots at which the shard serving the slots changes (see
    /// `SlotMap::shard_breaks`), ascending: a cluster member of several
    /// shards; empty for a master. The watchdog orders its holds by slot
    /// and starts a lane at each, so that a wave renews the locks of one
    /// shard (one full script call per 100 of its locks) and the shards'
    /// lanes run at the same time.
    fn shard_breaks(&self) -> Vec<u16> {
        Vec::new()
    }

    /// What sending `batch` costs here: one pipeline carrying one script
    /// call per [`RENEW_CHUNK`] locks (a cluster member: one pipeline per
    /// shard, one call per shard and chunk).
    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        BatchCost::of_one_pipeline(batch)
    }

    /// The node's release messages, if it publishes any the waiters can
    /// receive (see [`Feed`]).
    fn feed(&self) -> Option<Arc<dyn Feed>> {
        None
    }

    /// Acquires for `claim` (`scripts/acquire.lua`), or, with a `place`,
    /// for a waiter with a place in the queue (`scripts/acquire_queued.lua`):
    /// queued (or refreshed) when not granted, and for a fair place granted
    /// only at the head of the queue.
    fn acquire(&self, keys: &Arc<Keys>, claim: &Claim, place: Option<&Place>) -> Answer<Grant>;

    /// Re-enters a hold (`scripts/acquire.lua` in its re-entry mode):
    /// `Granted` with the fence counter when the claim's holder holds the
    /// lock (the count is set to the claim's and the lease refreshed),
    /// `Taken` when another holder does, `Missing` when there is no key. A
    /// missing key is never created: a lock forced, or lost by a node
    /// restarted empty, must not come back through a re-entry.
    fn reenter(&self, keys: &Arc<Keys>, claim: &Claim) -> Answer<Grant>;

    /// Takes `waiter` out of the lock's queue (`scripts/leave.lua`),
    /// telling the next waiter if the lock is free and it was the head.
    /// Returns whether it was queued.
    fn leave(&self, keys: &Arc<Keys>, waiter: &Arc<str>) -> Answer<bool>;

    /// Acquires every lock of `keys` (one set) in one call, all or none
    /// (`scripts/acquire_all.lua`): `Granted` with one token when every
    /// name is ours afterwards (every fence counter of the set's slots is
    /// then at that token on this node), `Taken` with the largest PTTL
    /// among the names another holder holds.
    fn acquire_all(&self, keys: &Arc<[Arc<Keys>]>, claim: &Claim) -> Answer<Grant>;

    /// Releases all but the claim's count of levels (`scripts/release.lua`);
    /// a count left above 0 resets the lease.
    fn release(&self, keys: &Arc<Keys>, claim: &Claim, token: u64) -> Answer<Released>;

    fn renew(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>>;

    /// Re-creates the missing keys of a batch (built with
    /// [`RenewBatch::repair`]) and raises each one's fence counter to its
    /// token.
    fn repair(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>>;

    /// Keeps the waiters' places of a batch built with
    /// [`RenewBatch::keep`] (`scripts/keep.lua`): per place,
    /// [`Renewed::Kept`] with the lock's PTTL when its lock is held and the
    /// waiter's deadline was extended ([`Renewed::Extended`] if the key has
    /// no TTL), [`Renewed::Missing`] when the lock is free,
    /// [`Renewed::Conflict`] when the waiter is not queued here (nothing
    /// written in either case). Sent on the connection of the attempts,
    /// never the watchdog's.
    fn keep(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>>;

    /// Raises the fence counters of the locks of `keys` (one lock, or a
    /// set: each slot's counter once) to at least `token`; returns the
    /// lowest of them after the call.
    fn raise_fence(&self, keys: &[Arc<Keys>], token: u64) -> Answer<u64>;

    fn force_release(&self, keys: &Arc<Keys>) -> Answer<bool>;

    /// Writes an election leader's record where its hold is alive
    /// (`scripts/proclaim.lua`), publishing the change to observers.
    fn proclaim(&self, keys: &Arc<Keys>, record: &Record) -> Answer<Proclaimed>;

    /// Reads an election's leader as this node sees it
    /// (`scripts/leader.lua`).
    fn leader(&self, keys: &Arc<Keys>) -> Answer<Seen>;

    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState>;

    /// Reads a semaphore's `count` permit slots (`slot` is any slot's
    /// keys) and the permit count recorded for it, recording `count` if
    /// none is (`scripts/permits.lua`).
    fn permits(&self, slot: &Arc<Keys>, count: u32) -> Answer<SlotsSeen>;
}

/// What one node says of a semaphore (`scripts/permits.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotsSeen {
    /// The permit count recorded on the node (-1 if not a number).
    pub(crate) count: i64,
    /// Per slot: `None` when free, else the key's PTTL (`None` inside when
    /// it has no expiry).
    pub(crate) held: Vec<Option<Option<Duration>>>,
}
