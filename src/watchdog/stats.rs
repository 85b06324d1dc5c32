//! What a watchdog counts ([`WatchdogStats`], public) and its counters.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::Watchdog;

/// Counters of the watchdog since the manager was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchdogStats {
    /// Ticks that renewed at least one lock.
    pub ticks: u64,
    /// Round trips sent, summed over nodes (one pipeline per master per
    /// wave; for a member that is a Redis Cluster, one per shard its locks
    /// sit on). With a cluster member of several shards and more locks
    /// than one wave takes, the holds follow the slots in one lane per
    /// shard (the lanes run at the same time), so each wave's locks sit on
    /// one shard of it: one round trip per wave there too, and one wave
    /// more per shard (thus one pipeline more per master of the same
    /// manager) per tick.
    pub round_trips: u64,
    /// Renewal and repair script calls sent, summed over nodes: one per
    /// 100 locks on a master; on a cluster member, one per shard and 100
    /// locks of it in a wave (a per-shard script renews locks of any slots
    /// of its shard; the waves being cut at the shards' edges, a shard of
    /// `n` locks costs `ceil(n / 100)` calls a tick, as a master of `n`
    /// locks), and one per slot for locks of a slot no shard serves
    /// in the member's map (the per-slot calls of locks a shard answers it
    /// no longer serves, mid-resharding, are not counted).
    pub script_calls: u64,
    /// Lock-node renewals that extended a key.
    pub extended: u64,
    /// Lock-node renewals that re-created a missing key (repairs).
    pub repairs: u64,
    /// Lock-node renewals that found another owner.
    pub conflicts: u64,
    /// Lock-node renewals that failed (timeouts, refused connections).
    pub node_errors: u64,
    /// Renewed locks lost: each hold under renewal whose holder is told it
    /// is lost ([`LockGuard::lost`](crate::LockGuard::lost) fires, an
    /// operation on it fails with [`Error::Lost`](crate::Error::Lost)),
    /// once, whatever noticed it first: a renewal wave (the lock is gone
    /// or another's on too many nodes, or no quorum answered in time), its
    /// validity running out before a renewal confirmed it (also while the
    /// wave is still out), or a re-entry that found it gone. Not counted:
    /// a fixed lease ([`LockManager::lock_with_lease`](crate::LockManager::lock_with_lease))
    /// or a hold stopped at `max_hold` reaching the end of its validity
    /// (`lost()` fires, but the lock expired as asked; the
    /// `quorumlock_losses_total` metric counts these as
    /// `cause="lease_ended"`, see `max_hold_stops` for the latter).
    pub losses: u64,
    /// Locks whose renewal stopped at `max_hold`.
    pub max_hold_stops: u64,
    /// Locks renewed, summed over ticks.
    pub locks_renewed: u64,
    /// Time spent in the watchdog's own work (building batches and reading
    /// replies, not waiting on the network), summed over ticks, in µs.
    pub busy_micros: u64,
    /// Ticks that took longer than the renew interval: the lease is too
    /// short for the number of locks held (each is logged as a warning).
    pub overruns: u64,
    /// The renewal cost per lock the last measured tick showed: the
    /// cheapest of its waves that every member answered (a wave's time
    /// from its start to its last answer, over its locks), `None` before
    /// one was measured. It grows as a server saturates.
    pub renewal_per_lock: Option<Duration>,
    /// How many renewed holds this manager keeps at that cost, its
    /// capacity (see [`Error::Overloaded`](crate::Error::Overloaded));
    /// `None` before the first measured tick.
    pub capacity: Option<u64>,
    /// Acquisitions refused with [`Error::Overloaded`](crate::Error::Overloaded).
    pub refused: u64,
}

#[derive(Default)]
pub(super) struct Counters {
    pub(super) ticks: AtomicU64,
    pub(super) round_trips: AtomicU64,
    pub(super) script_calls: AtomicU64,
    pub(super) extended: AtomicU64,
    pub(super) repairs: AtomicU64,
    pub(super) conflicts: AtomicU64,
    pub(super) node_errors: AtomicU64,
    pub(super) max_hold_stops: AtomicU64,
    pub(super) locks_renewed: AtomicU64,
    pub(super) busy_micros: AtomicU64,
    pub(super) overruns: AtomicU64,
    pub(super) refused: AtomicU64,
}

impl Watchdog {
    /// The counters, as [`WatchdogStats`].
    pub(crate) fn stats(&self) -> WatchdogStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WatchdogStats {
            ticks: get(&c.ticks),
            round_trips: get(&c.round_trips),
            script_calls: get(&c.script_calls),
            extended: get(&c.extended),
            repairs: get(&c.repairs),
            conflicts: get(&c.conflicts),
            node_errors: get(&c.node_errors),
            losses: self.nodes.lost_holds.load(Ordering::Relaxed),
            max_hold_stops: get(&c.max_hold_stops),
            locks_renewed: get(&c.locks_renewed),
            busy_micros: get(&c.busy_micros),
            overruns: get(&c.overruns),
            renewal_per_lock: match self.load.per_lock_nanos.load(Ordering::Relaxed) {
                0 => None,
                n => Some(Duration::from_nanos(n)),
            },
            capacity: match self.load.capacity.load(Ordering::Relaxed) {
                u64::MAX => None,
                n => Some(n),
            },
            refused: get(&c.refused),
        }
    }
}
