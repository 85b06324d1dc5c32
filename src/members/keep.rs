//! A manager's batches of its waiters' places (`places`): a waiter asks
//! ([`Members::keep_place`]), and one task sends the rounds, one fan-out
//! per round, until none is pending.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::Members;
use crate::keys::Keys;
use crate::node::{RenewBatch, RenewItem};
use crate::places::{self, Keeper};
use crate::quorum::Leg;

impl Members {
    /// Keeps `waiter`'s place in the queue of `keys` on the nodes for
    /// another `timeout`, in one batch per node with the places of this
    /// manager's other waiters (`places`): resolves to `Some` when a quorum
    /// kept it and no node answered that the lock is free or the place gone
    /// there, with until when the lock's key is known to last; `None` tells
    /// the waiter to attempt instead. Answered within
    /// the node timeout of the round that carries it (rounds follow one
    /// another; each waits for a quorum of answers, the rest land in the
    /// background).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops only the wait for the verdict: the place
    /// goes out in its round, and its refresh lands or not. A refresh that
    /// lands after the waiter left the queue changes nothing there.
    pub(crate) fn keep_place(
        self: &Arc<Self>,
        keys: &Arc<Keys>,
        waiter: &Arc<str>,
        timeout: Duration,
    ) -> impl Future<Output = Option<places::Kept>> + Send + 'static {
        let (verdict, start) = self.places.add(RenewItem::place(keys, waiter, timeout));
        if start {
            let nodes = Arc::clone(self);
            if !self.spawn(async move { nodes.keep_rounds().await }) {
                self.places.abandon();
            }
        }
        // The round before this place's and its own each wait a node
        // timeout at most; past both (more places pending than a round
        // carries), the waiter attempts instead.
        let patience = self.config.node_timeout.saturating_mul(2);
        async move {
            tokio::time::timeout(patience, verdict)
                .await
                .ok()
                .and_then(Result::ok)
                .flatten()
        }
    }

    /// Sends the pending places, one round after another, until none is
    /// pending. Stopped before that (its task aborted as the manager
    /// closes), it answers what is pending "not kept" and lets the next
    /// place start the rounds again.
    async fn keep_rounds(&self) {
        struct Stopped<'a>(&'a Keeper, bool);
        impl Drop for Stopped<'_> {
            fn drop(&mut self) {
                if !self.1 {
                    self.0.abandon();
                }
            }
        }
        let mut stopped = Stopped(&self.places, false);
        loop {
            let Some(round) = self.places.next_round() else {
                stopped.1 = true;
                return;
            };
            let batch = Arc::new(RenewBatch::keep(round.items));
            let required = self.required();
            // Each node read its PTTLs after this: an expiry counted from
            // here is never later than the key's.
            let sent = tokio::time::Instant::now();
            let mut fan = self.fan_out(self.config.node_timeout, |i| {
                Leg::Call(self.node(i).keep(Arc::clone(&batch)))
            });
            fan.until_quorum(required, |_| true).await;
            let (replies, rest) = fan.into_parts();
            if !rest.is_empty() {
                self.spawn(rest.for_each(|_, _| {}));
            }
            let mut kept = 0;
            for (j, tx) in round.answers.into_iter().enumerate() {
                let each = replies.iter().map(|r| match r {
                    Some(Ok(v)) => v.get(j),
                    _ => None,
                });
                let verdict = places::kept(each, required).map(|left| places::Kept {
                    holder_until: left.and_then(|l| sent.checked_add(l)),
                });
                kept += usize::from(verdict.is_some());
                let _ = tx.send(verdict);
            }
            self.metrics.places_kept(kept);
        }
    }
}
