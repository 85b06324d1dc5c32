//! The in-memory node's queue of waiters for one lock (`fake`).

use std::collections::{BTreeSet, HashMap};

use tokio::time::Instant;

/// One lock's queue of waiters (`acquire_queued.lua`'s two sorted sets).
#[derive(Default)]
pub(crate) struct Queue {
    /// By ticket, then waiter id.
    pub(crate) order: BTreeSet<(u64, String)>,
    /// Each waiter's ticket and deadline.
    pub(crate) waiters: HashMap<String, (u64, Instant)>,
    /// When the queue's keys expire: the latest deadline among its waiters
    /// when one was last queued or refreshed (not shortened by a leave or a
    /// grant, as the scripts do not shorten the keys' TTL); a keep that
    /// finds them expiring before its deadline gives them twice its
    /// timeout.
    pub(crate) expires: Option<Instant>,
}

impl Queue {
    pub(crate) fn head(&self) -> Option<&str> {
        self.order.first().map(|(_, w)| w.as_str())
    }

    pub(crate) fn remove(&mut self, waiter: &str) -> bool {
        match self.waiters.remove(waiter) {
            Some((t, _)) => self.order.remove(&(t, waiter.to_owned())),
            None => false,
        }
    }

    /// `drop_gone` of `queue_prelude.lua`: whether any was dropped.
    pub(crate) fn drop_gone(&mut self, now: Instant) -> bool {
        let mut dropped = false;
        while let Some(head) = self.head().map(str::to_owned) {
            if self.waiters.get(&head).is_some_and(|(_, d)| *d > now) {
                break;
            }
            dropped |= self.remove(&head);
        }
        dropped
    }
}
