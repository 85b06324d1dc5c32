//! What an acquisition leaves behind on the nodes: the rollback of grants
//! it did not keep, and the grants that land after it was decided.

use std::sync::{Arc, Weak};

use tracing::{debug, warn};

use crate::error::NodeError;
use crate::hold::Hold;
use crate::keys::{Keys, Target};
use crate::members::Members;
use crate::node::{Claim, Grant, Released};
use crate::quorum::{FanOut, Stragglers};

/// Calls still in flight when the quorum was reached: late grants are
/// recorded on the hold. A release goes to every node, and on each node's
/// connection it runs after the acquire, so a late grant is released with
/// the lock even if it lands after the hold is gone.
///
/// A queued waiter's late answer that is not a grant (another waiter heads
/// that node's queue, or the call failed) may have left it queued there:
/// it leaves, so that no node keeps a won waiter at the head of its queue,
/// naming it in release messages and holding back the waiters behind it
/// until its queue deadline passes.
pub(crate) struct LateGrants {
    pub(crate) rest: Stragglers<Grant>,
    /// The waiter's id in the lock's queue, for a queued attempt.
    pub(crate) waiter: Option<Arc<str>>,
}

impl LateGrants {
    /// Records the late grants on `holds` (one, or a set's: a set is
    /// granted on a node all or none), and takes the waiter out of the
    /// queue of every node whose late answer was not a grant.
    pub(crate) fn finish(self, holds: &[Arc<Hold>]) {
        let Some(first) = holds.first() else { return };
        if self.rest.is_empty() {
            return;
        }
        let weak: Vec<Weak<Hold>> = holds.iter().map(Arc::downgrade).collect();
        let (nodes, keys) = (Arc::clone(&first.nodes), Arc::clone(&first.keys));
        let waiter = self.waiter;
        let rest = self.rest;
        first.nodes.spawn(async move {
            let mut queued = Vec::new();
            rest.for_each(|i, r| match r {
                Ok(Grant::Granted(_)) => {
                    debug!(node = i, "late grant");
                    for hold in weak.iter().filter_map(Weak::upgrade) {
                        hold.grant_landed(i);
                    }
                }
                _ => queued.push(i),
            })
            .await;
            let Some(waiter) = waiter else { return };
            let mut leaves = nodes.leave(&keys, &waiter, |i| queued.contains(&i));
            leaves.until(|_| false).await;
        });
    }
}

/// Undoes the grants of an acquisition that failed or was dropped.
///
/// Armed from the start of the fan-out: if the acquiring future is dropped,
/// `Drop` sends the rollback in the background. A node that answered "taken"
/// holds nothing of ours and is skipped; every other node, including those
/// that timed out or are still in flight, gets it. Commands on one node's
/// connection run in order, so the rollback lands after the acquire.
pub(crate) struct Rollback {
    nodes: Arc<Members>,
    /// Every name of the acquisition (one, or a set's).
    keys: Arc<[Arc<Keys>]>,
    label: Arc<str>,
    /// The holder and lease, and the hold count to restore: 0 for a fresh
    /// acquisition, the previous count for a re-entry.
    restore: Claim,
    armed: bool,
    /// Counted among the rollbacks (`telemetry`) already: a rollback
    /// dropped halfway and sent again counts once.
    counted: bool,
}

impl Rollback {
    pub(crate) fn new(nodes: &Arc<Members>, target: &Target, restore: Claim) -> Self {
        Self {
            nodes: Arc::clone(nodes),
            keys: Arc::clone(&target.keys),
            label: Arc::clone(&target.label),
            restore,
            armed: true,
            counted: false,
        }
    }

    /// The grants are kept: nothing to undo.
    pub(crate) fn disarm(&mut self) {
        self.armed = false;
    }

    /// A release per name (one fan-out each), to every node not in
    /// `skip`, each with the node timeout to answer.
    fn calls(&self, skip: &[bool]) -> Vec<FanOut<Released>> {
        let (nodes, claim) = (&self.nodes, &self.restore);
        let timeout = nodes.config.node_timeout;
        let skipped = |i: usize| skip.get(i).copied().unwrap_or(false);
        self.keys
            .iter()
            .map(|keys| nodes.releases(timeout, keys, claim, 0, skipped))
            .collect()
    }

    /// Rolls back and waits for it (each node for at most the node
    /// timeout): a node that answered "taken" (or, to a re-entry,
    /// "missing"), or that the acquire never reached (refused, or failed by
    /// the pause after a refused connection), holds nothing of ours and is
    /// skipped. Waiting keeps a retry from finding this attempt's grants
    /// still in place and mistaking them for another holder's; a failed
    /// last attempt therefore returns up to one node timeout after its wait.
    pub(crate) async fn run(mut self, replies: &[Option<Result<Grant, NodeError>>]) {
        // Armed until every call is answered: dropped halfway, `Drop` sends
        // the rollback again in the background.
        #[cfg(test)]
        if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::NoRollback) {
            self.armed = false;
            return;
        }
        let skip: Vec<bool> = replies
            .iter()
            .map(|r| match r {
                Some(Ok(Grant::Taken(..) | Grant::Missing)) => true,
                Some(Err(e)) => e.unsent_until.is_some(),
                _ => false,
            })
            .collect();
        if skip.contains(&false) {
            self.count();
            send_all(self.calls(&skip)).await;
        }
        self.armed = false;
    }

    /// Counts this rollback, once.
    fn count(&mut self) {
        if !self.counted {
            self.counted = true;
            self.nodes.metrics.rolled_back();
        }
    }

    /// Sends the release to every node, as background work.
    fn send(&mut self) {
        #[cfg(test)]
        if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::NoRollback) {
            return;
        }
        let calls = self.calls(&[]);
        self.count();
        let label = Arc::clone(&self.label);
        let spawned = self.nodes.spawn(async move {
            send_all(calls).await;
            debug!(lock = %label, "rolled back a cancelled acquisition");
        });
        if !spawned {
            warn!(lock = %self.label, "no runtime to roll back on; grants expire with the lease");
        }
    }
}

/// Runs the fan-outs in parallel until every call answered or timed out;
/// failures are traced.
async fn send_all(mut calls: Vec<FanOut<Released>>) {
    futures::future::join_all(calls.iter_mut().map(|f| f.until(|_| false))).await;
    for fan in &calls {
        for (i, r) in fan.replies().iter().enumerate() {
            if let Some(Err(e)) = r {
                debug!(node = i, error = %e.message, "rollback failed");
            }
        }
    }
}

impl Drop for Rollback {
    fn drop(&mut self) {
        if self.armed {
            self.send();
        }
    }
}
