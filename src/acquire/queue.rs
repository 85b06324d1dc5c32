//! A waiter's place in a lock's queue on the nodes.
//!
//! Each node keeps, per lock, the waiters in ticket order and the node time
//! after which each counts as gone (`scripts/acquire_queued.lua`). The
//! queue serves two ends:
//!
//! - **Whom a release wakes.** A release publishes the id of the waiter at
//!   the head of the queue, so that across processes one waiter retries, not
//!   one per process (see the `wait` module).
//! - **Fairness.** A fair request is granted only at the head of the queue,
//!   so grants follow ticket order.
//!
//! Over N masters, arrival order differs per node: waiter A could head nodes
//! 1–2, B nodes 3–4 and C node 5, and no one would reach a quorum until
//! timeouts passed. So a waiter carries one ticket to every node. A node
//! hands out its tail's ticket plus one; the waiter takes the largest ticket
//! any node handed out and sends it on every later attempt, which re-files
//! it at that ticket everywhere. Nodes then agree on the order of every
//! waiter that has attempted twice; a fair waiter whose first tickets
//! disagreed retries at once, so the split lasts one round trip.
//!
//! A waiter that stops calling (its process died) is skipped once its
//! deadline passes (the queue timeout), and a waiter whose acquisition ends
//! without the lock, or is dropped, leaves the queue on every node where it
//! may be queued, in the background.

use std::sync::Arc;

use crate::error::NodeError;
use crate::keys::Keys;
use crate::members::Members;
use crate::node::{Grant, Place};

/// One acquisition's place in a lock's queue, across all nodes. Dropping it
/// takes the waiter out of the queue wherever it may still be queued.
pub(crate) struct Spot {
    place: Place,
    nodes: Arc<Members>,
    keys: Arc<Keys>,
    /// Per node: the waiter may be queued there (sent an attempt whose
    /// answer did not show it left).
    queued: Vec<bool>,
    /// The last answers put the waiter at different tickets: the next
    /// attempt, with the largest, re-files it everywhere.
    settle: bool,
    /// Per node: the last attempt had no answer yet when it was decided.
    pending: Vec<bool>,
}

impl Spot {
    pub(crate) fn new(
        nodes: &Arc<Members>,
        keys: &Arc<Keys>,
        waiter: Arc<str>,
        fair: bool,
    ) -> Self {
        Self {
            place: Place {
                waiter,
                ticket: 0,
                timeout: nodes.config.queue_timeout,
                fair,
            },
            nodes: Arc::clone(nodes),
            keys: Arc::clone(keys),
            queued: vec![false; nodes.len()],
            settle: false,
            pending: vec![false; nodes.len()],
        }
    }

    /// What the next attempt sends; from now on the waiter may be queued on
    /// every node (the attempt may be dropped before any answer).
    pub(crate) fn place(&mut self) -> Place {
        self.queued.fill(true);
        #[cfg(test)]
        if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::PerNodeOrder) {
            return Place {
                ticket: 0,
                ..self.place.clone()
            };
        }
        self.place.clone()
    }

    pub(crate) fn fair(&self) -> bool {
        self.place.fair
    }

    pub(crate) fn waiter(&self) -> &Arc<str> {
        &self.place.waiter
    }

    /// Reads an attempt's answers: where the waiter is queued, and the
    /// ticket to send from now on (the largest any node handed out).
    pub(crate) fn record(&mut self, replies: &[Option<Result<Grant, NodeError>>]) {
        let sent = self.place.ticket;
        let mut seen = Vec::with_capacity(replies.len());
        for (i, r) in replies.iter().enumerate() {
            self.pending[i] = r.is_none();
            match r {
                // A grant takes the waiter out of that node's queue.
                Some(Ok(Grant::Granted(_))) => self.queued[i] = false,
                Some(Ok(Grant::Taken(_, t))) if *t > 0 => seen.push(*t),
                // Pending, failed, or an answer without a place: may be
                // queued; a leave is harmless where it is not.
                _ => {}
            }
        }
        let top = seen.iter().copied().max().unwrap_or(0);
        self.place.ticket = self.place.ticket.max(top);
        self.settle = self.place.ticket != sent && seen.iter().any(|t| *t != self.place.ticket);
    }

    /// The acquisition won with its last attempt: a node that had not
    /// answered then is not asked to drop the waiter here. Its late answer
    /// is a grant, which took the waiter out of its queue, or anything else,
    /// on which the waiter leaves that node's queue then
    /// (`rollback::LateGrants`).
    pub(crate) fn won(&mut self) {
        for (q, p) in self.queued.iter_mut().zip(&self.pending) {
            *q &= !*p;
        }
    }

    /// Whether the last attempt's tickets disagreed (then the next attempt
    /// settles them); clears the flag.
    pub(crate) fn take_settle(&mut self) -> bool {
        std::mem::take(&mut self.settle)
    }
}

impl Drop for Spot {
    fn drop(&mut self) {
        if !self.queued.contains(&true) {
            return;
        }
        let queued = &self.queued;
        let on = |i: usize| queued.get(i).copied().unwrap_or(false);
        let mut leaves = self.nodes.leave(&self.keys, &self.place.waiter, on);
        self.nodes
            .spawn(async move { leaves.until(|_| false).await });
    }
}
