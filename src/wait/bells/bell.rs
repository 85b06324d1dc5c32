//! One waiter's doorbell, and how a message rings it.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use tokio::sync::Notify;

/// One waiter's doorbell.
#[derive(Default)]
pub(in crate::wait) struct Bell {
    /// The id of the owner the waiter acquires for: a release by this
    /// owner is one of the waiter's own rollbacks (a failed attempt undoing
    /// its minority of grants), which does not ring it: the lock is still
    /// held elsewhere, and an attempt at once would miss and roll back
    /// again, a hot loop while the quorum is out of reach.
    pub(in crate::wait) owner: Arc<str>,
    /// Rings so far: a waiter compares it with the count it last saw.
    pub(in crate::wait) rings: AtomicU64,
    /// The nodes whose messages rang since the waiter last looked, a bit
    /// per node (node `i` at bit `i % 64`): a quorum of messages is a
    /// quorum of nodes, not of rings. Two rollbacks seen on one node say
    /// nothing of the others: three managers whose attempts each reach one
    /// live node would otherwise ring each other into new attempts with
    /// every rollback, at one instant.
    pub(in crate::wait) from: AtomicU64,
    /// The nodes whose rollback messages (another owner's failed attempt
    /// undoing its grants) rang since the waiter last looked, a bit per
    /// node as in `from`. They never count towards a quorum of messages:
    /// a rollback frees a minority at most, and managers whose attempts
    /// keep failing (a quorum out of reach) would otherwise ring each other
    /// into a new attempt with every rollback, without end. A waiter rung
    /// only by rollbacks attempts after its backoff (see `Waiter::wait`).
    pub(in crate::wait) rolled: AtomicU64,
    /// A ring since the waiter last looked needs no quorum of rings.
    pub(in crate::wait) prompt: AtomicBool,
    pub(in crate::wait) notify: Notify,
}

impl Bell {
    /// Rings for something that needs no other node's word: this manager's
    /// own release (its calls went to every node before the message came,
    /// so ahead of the waiter's attempt in practice, though a release goes
    /// on a master's connection of the calls that free and the attempt on
    /// another: an attempt that still finds it held misses and waits
    /// again), a change of coverage, the previous head giving up.
    pub(in crate::wait) fn ring(&self, wakeups: &AtomicU64) {
        self.prompt.store(true, Ordering::Release);
        self.bump(wakeups);
    }

    pub(super) fn ring_for(&self, wakeups: &AtomicU64, how: Ring, node: usize) {
        match how {
            Ring::Prompt => self.ring(wakeups),
            Ring::Remote => self.ring_remote(wakeups, node),
            Ring::Rollback => {
                self.rolled.fetch_or(1 << (node % 64), Ordering::AcqRel);
                self.bump(wakeups);
            }
        }
    }

    /// Rings for another manager's release, seen on `node`: it may not
    /// have run on the others yet.
    pub(super) fn ring_remote(&self, wakeups: &AtomicU64, node: usize) {
        self.from.fetch_or(1 << (node % 64), Ordering::AcqRel);
        self.bump(wakeups);
    }

    /// How many nodes rang since the waiter last looked; forgets them, and
    /// the rollbacks.
    pub(in crate::wait) fn take_nodes(&self) -> u32 {
        self.rolled.store(0, Ordering::Release);
        self.from.swap(0, Ordering::AcqRel).count_ones()
    }

    /// Whether a rollback rang since the waiter last looked.
    pub(in crate::wait) fn rolled_back(&self) -> bool {
        self.rolled.load(Ordering::Acquire) != 0
    }

    /// How many nodes rang since the waiter last looked.
    pub(in crate::wait) fn nodes_rung(&self) -> u32 {
        self.from.load(Ordering::Acquire).count_ones()
    }

    pub(super) fn bump(&self, wakeups: &AtomicU64) {
        self.rings.fetch_add(1, Ordering::AcqRel);
        wakeups.fetch_add(1, Ordering::Relaxed);
        self.notify.notify_one();
    }

    /// Whether a release by `releaser` (a holder id) is this waiter's own.
    pub(super) fn own(&self, releaser: &str) -> bool {
        !self.owner.is_empty()
            && releaser
                .strip_prefix(&*self.owner)
                .is_some_and(|rest| rest.starts_with(":hold-"))
    }

    /// Wakes the waiter without a ring: it re-reads where it stands (it
    /// became the head) and re-arms its timer, without attempting.
    pub(super) fn nudge(&self) {
        self.notify.notify_one();
    }
}

/// How a message rings a waiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ring {
    /// No other node's word needed (this manager's own release).
    Prompt,
    /// Another manager's release, seen on one node: a quorum of nodes'
    /// messages, or the grace.
    Remote,
    /// Another owner's rollback: after the waiter's backoff.
    Rollback,
}
