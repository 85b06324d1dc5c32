//! Who a release rings: one manager's waiters per lock channel, as plain
//! bookkeeping with no I/O (the pub/sub connections feed it messages, the
//! waiters sleep on its bells), unit-tested apart from both.
//!
//! Per channel there are two kinds of waiter:
//!
//! - **plain** waiters, in a local FIFO (by arrival ticket). Only its head
//!   is rung by a release; the others wait their turn behind it. The head
//!   is always active: it attempts at least every refresh interval (see
//!   `Waiter::wait`), so that waiters never depend on a message that may
//!   not come. When the head leaves, the next one becomes the head: rung at
//!   once if the head gave up (the lock may be free), promoted without a
//!   ring if it won (the lock is ours; its release will ring);
//! - **fair** waiters, by their id in the nodes' queue, rung only by a
//!   message that names them (their turn on the nodes). They are not in the
//!   FIFO: a plain request never defers to them.
//!
//! A release message `<waiter> <releaser>` (see `release.lua`) rings the
//! fair waiter it names, nobody if it names another manager's waiter (that
//! manager rings it), and otherwise (a plain waiter of ours, one that has
//! left, or nobody queued on the node) the head of the FIFO. A message
//! from another manager's release, or naming a fair waiter, rings without
//! `prompt`: the waiter waits for a quorum of them (see `Waiter::wait`).
//! A message ending in ` rollback` (another owner's failed attempt undoing
//! its grants, see `release.lua`) rings the same waiter, but never counts
//! towards a quorum of messages: a waiter rung by rollbacks alone attempts
//! after its backoff, so that managers whose attempts keep failing do not
//! ring each other into new attempts without end.
//!
//! A message `0` (Redisson's unlock, on any channel, or anything else on a
//! lock's foreign channel, see [`Channel::on_foreign`]) is a release by
//! someone this manager cannot identify: it rings the head of the FIFO and
//! every fair waiter (it names none) as another manager's release does,
//! waiting for a quorum of nodes' messages. In `Layout::Redisson` our own
//! releases publish `0` on the foreign channel too, right after their own
//! message on the same node: each own message (a release's, or a forced
//! one's) expects that echo, which is then dropped.
//!
//! Measured with `tests/fair.rs`'s herd (one manager, 8 fair tasks): 16.8
//! to 16.9 scripts per acquisition over 5 nodes, against 21.5 to 25.8 when
//! our own release rang a named fair waiter at once.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::sync::locked;

mod bell;

pub(in crate::wait) use bell::Bell;
use bell::Ring;

/// One lock channel's local waiters.
pub(super) struct Channel {
    /// Per node: SUBSCRIBE confirmed on the live connection.
    pub(super) subscribed: Vec<AtomicBool>,
    /// Plain waiters in arrival order: joining, leaving and finding the head
    /// cost O(log W).
    plain: Mutex<BTreeMap<u64, Arc<Bell>>>,
    /// Fair waiters, by their id in the nodes' queue.
    fair: Mutex<HashMap<Arc<str>, Arc<Bell>>>,
    /// The latest instant the current holder's key is known to expire at:
    /// no waiter sleeps past it, since an expiry publishes nothing.
    holder_until: Mutex<Option<Instant>>,
    /// When the head of the FIFO last made an attempt: while that is
    /// recent, the waiters behind it leave the attempts to it.
    head_attempted: Mutex<Option<Instant>>,
    /// Waiters holding this channel.
    pub(super) refs: Mutex<usize>,
    /// Woken when a node confirms the subscription.
    pub(super) confirmed: Notify,
    /// An unsubscription is scheduled (see `Waiter`'s drop).
    pub(super) retiring: AtomicBool,
    /// The other client's channel this one's waiters also listen on
    /// (Redisson's, in `Layout::Redisson`), if any.
    pub(super) foreign: Option<Arc<str>>,
    /// Per node: the `0`s our own releases published on the foreign channel
    /// that have not come yet (each comes right after its release's own
    /// message, on the same connection).
    echoes: Mutex<Vec<u32>>,
}

/// Which kind of waiter joins: plain (the local FIFO) or fair (by id).
pub(super) enum Kind<'a> {
    Plain(u64),
    Fair(&'a Arc<str>),
}

impl Channel {
    #[cfg(test)]
    pub(super) fn new(nodes: usize) -> Self {
        Self::with_foreign(nodes, None)
    }

    /// A channel whose waiters also listen on `foreign`.
    pub(super) fn with_foreign(nodes: usize, foreign: Option<Arc<str>>) -> Self {
        Self {
            foreign,
            echoes: Mutex::new(vec![0; nodes]),
            subscribed: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            plain: Mutex::new(BTreeMap::new()),
            fair: Mutex::new(HashMap::new()),
            holder_until: Mutex::new(None),
            head_attempted: Mutex::new(None),
            refs: Mutex::new(0),
            confirmed: Notify::new(),
            retiring: AtomicBool::new(false),
        }
    }

    /// Adds a waiter acquiring for `owner`; returns its bell.
    pub(super) fn join(&self, kind: &Kind<'_>, owner: &Arc<str>) -> Arc<Bell> {
        let bell = Arc::new(Bell {
            owner: Arc::clone(owner),
            ..Bell::default()
        });
        match kind {
            Kind::Plain(ticket) => {
                let mut plain = locked(&self.plain);
                plain.insert(*ticket, Arc::clone(&bell));
                if plain.len() == 1 {
                    // A new head: it is about to attempt.
                    self.head_attempts();
                }
            }
            Kind::Fair(id) => {
                locked(&self.fair).insert(Arc::clone(id), Arc::clone(&bell));
            }
        }
        bell
    }

    /// Takes a waiter out. A plain head passes the turn on: the next one is
    /// rung if the head gave up (the lock may be free), nudged if it won.
    pub(super) fn leave(&self, kind: &Kind<'_>, won: bool, wakeups: &AtomicU64) {
        match kind {
            Kind::Fair(id) => {
                locked(&self.fair).remove(*id);
            }
            Kind::Plain(ticket) => {
                let next = {
                    let mut q = locked(&self.plain);
                    let was_head = q.keys().next() == Some(ticket);
                    q.remove(ticket);
                    was_head.then(|| q.values().next().cloned()).flatten()
                };
                if next.is_some() {
                    // The next head attempts when rung, or by its refresh.
                    self.head_attempts();
                }
                match next {
                    Some(_) if won && unbounded() => {}
                    Some(bell) if won => bell.nudge(),
                    Some(bell) => bell.ring(wakeups),
                    None => {}
                }
            }
        }
    }

    /// Whether plain waiters are queued here (a plain newcomer defers to
    /// them).
    pub(super) fn has_plain_waiters(&self) -> bool {
        !locked(&self.plain).is_empty() || (defer_to_fair() && !locked(&self.fair).is_empty())
    }

    /// Whether the plain waiter with `ticket` heads the local FIFO.
    pub(super) fn is_head(&self, ticket: u64) -> bool {
        let fair_first = defer_to_fair() && !locked(&self.fair).is_empty();
        !fair_first && locked(&self.plain).keys().next() == Some(&ticket)
    }

    /// Rings the head of the FIFO, unless `releaser` is its own owner.
    fn wake_head(&self, wakeups: &AtomicU64, how: Ring, releaser: &str, node: usize) {
        let head = locked(&self.plain).values().next().cloned();
        if let Some(bell) = head.filter(|b| !b.own(releaser)) {
            bell.ring_for(wakeups, how, node);
        }
    }

    /// A message `<waiter> <releaser>` from `node` (see the module docs).
    /// `client_id` is this manager's: the prefix of its waiters' and
    /// holders' ids.
    pub(super) fn on_message(
        &self,
        node: usize,
        payload: &[u8],
        client_id: &str,
        wakeups: &AtomicU64,
    ) {
        let text = std::str::from_utf8(payload).unwrap_or_default();
        if text == crate::layout::REDISSON_UNLOCK {
            self.on_unknown_release(node, wakeups);
            return;
        }
        if self.foreign.is_some() && (text.is_empty() || text.contains(' ')) {
            // A release or a forced one: its `0` on the foreign channel
            // follows on this connection.
            if let Some(n) = locked(&self.echoes).get_mut(node) {
                *n += 1;
            }
        }
        let (text, rollback) = match text.strip_suffix(crate::scripts::ROLLBACK_SUFFIX) {
            Some(t) => (t, true),
            None => (text, false),
        };
        let (id, releaser) = text.split_once(' ').unwrap_or((text, ""));
        let ours = |id: &str| {
            id.strip_prefix(client_id)
                .is_some_and(|rest| rest.starts_with(':'))
        };
        let how = if rollback {
            Ring::Rollback
        } else if releaser.is_empty() || ours(releaser) {
            Ring::Prompt
        } else {
            Ring::Remote
        };
        if !id.is_empty() {
            let named = locked(&self.fair).get(id).cloned();
            if let Some(bell) = named {
                // Never prompt: a message names a fair waiter on one node,
                // which may be its turn there only (another waiter's grant
                // took that waiter out of this node's queue, and its
                // rollback published), so even our own release waits for a
                // quorum of messages. A real release publishes on every
                // node at once, so the head's quorum comes at once too.
                if !bell.own(releaser) {
                    let how = if rollback {
                        Ring::Rollback
                    } else {
                        Ring::Remote
                    };
                    bell.ring_for(wakeups, how, node);
                }
                return;
            }
            if !ours(id) {
                return;
            }
        }
        self.wake_head(wakeups, how, releaser, node);
    }

    /// A message on the foreign channel from `node`: the echo of one of our
    /// own releases (dropped), or a release by another client (Redisson's
    /// `0`, or anything it may publish), which rings as an unknown release.
    pub(super) fn on_foreign(&self, node: usize, wakeups: &AtomicU64) {
        {
            let mut echoes = locked(&self.echoes);
            if let Some(n) = echoes.get_mut(node).filter(|n| **n > 0) {
                *n -= 1;
                return;
            }
        }
        self.on_unknown_release(node, wakeups);
    }

    /// A release by a client this manager cannot identify, seen on `node`:
    /// the head of the FIFO and every fair waiter (none is named) are rung
    /// as by another manager's release (a quorum of nodes' messages, or the
    /// grace).
    fn on_unknown_release(&self, node: usize, wakeups: &AtomicU64) {
        let mut fair: Vec<(Arc<str>, Arc<Bell>)> = locked(&self.fair)
            .iter()
            .map(|(k, b)| (Arc::clone(k), Arc::clone(b)))
            .collect();
        fair.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, bell) in fair {
            bell.ring_remote(wakeups, node);
        }
        self.wake_head(wakeups, Ring::Remote, "", node);
    }

    /// Node `node`'s connection is gone: echoes it owed will not come.
    pub(super) fn forget_echoes(&self, node: usize) {
        if let Some(n) = locked(&self.echoes).get_mut(node) {
            *n = 0;
        }
    }

    /// Coverage changed (a pub/sub connection came or went): a release may
    /// have gone unheard, so the head of the FIFO and every fair waiter
    /// attempt. The plain waiters behind the head leave the attempt to it
    /// (see `Waiter::wait`): ringing them too made a crowd of one manager
    /// attempt all at once when its channel's subscription was first
    /// confirmed. Rare, unlike release messages.
    pub(super) fn wake_all(&self, wakeups: &AtomicU64) {
        let mut bells: Vec<Arc<Bell>> = locked(&self.plain).values().take(1).cloned().collect();
        let mut fair: Vec<(Arc<str>, Arc<Bell>)> = locked(&self.fair)
            .iter()
            .map(|(k, b)| (Arc::clone(k), Arc::clone(b)))
            .collect();
        // By id, so that a seeded simulation replays the same wake order.
        fair.sort_by(|a, b| a.0.cmp(&b.0));
        bells.extend(fair.into_iter().map(|(_, b)| b));
        for bell in bells {
            bell.ring(wakeups);
        }
    }

    /// Nodes whose subscription is confirmed.
    pub(super) fn coverage(&self) -> usize {
        self.subscribed
            .iter()
            .filter(|s| s.load(Ordering::Acquire))
            .count()
    }

    /// Records that the head of the FIFO makes an attempt now.
    pub(super) fn head_attempts(&self) {
        *locked(&self.head_attempted) = Some(Instant::now());
    }

    /// Whether the head of the FIFO made an attempt within `within`.
    pub(super) fn head_active(&self, within: Duration) -> bool {
        locked(&self.head_attempted).is_some_and(|t| t.elapsed() <= within)
    }

    /// Records that the holder's key lasts until `until`.
    pub(super) fn holder_seen(&self, until: Option<Instant>) {
        *locked(&self.holder_until) = until;
    }

    /// When the holder's key is known to expire, if known.
    pub(super) fn holder_until(&self) -> Option<Instant> {
        *locked(&self.holder_until)
    }
}

/// The simulator's mutation that restores unbounded deferred waiters.
pub(super) fn unbounded() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::DeferredUnbounded);
    #[cfg(not(test))]
    false
}

/// The simulator's mutation that makes plain requests defer to local fair
/// waiters.
fn defer_to_fair() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::DeferToFair);
    #[cfg(not(test))]
    false
}

/// One manager's channels and the counters of its pub/sub connections,
/// shared by the waiters and the pub/sub tasks.
pub(super) struct Board {
    pub(super) channels: Mutex<HashMap<Arc<str>, Arc<Channel>>>,
    /// The manager's client id: the prefix of its waiters' and holders' ids.
    pub(super) client_id: Arc<str>,
    pub(super) nodes: usize,
    /// Nodes whose subscriptions must cover a channel for its messages to
    /// be trusted: any holder's quorum then overlaps them.
    pub(super) needed: usize,
    pub(super) next_ticket: AtomicU64,
    pub(super) connections: AtomicU64,
    pub(super) messages: AtomicU64,
    pub(super) wakeups: AtomicU64,
    pub(super) refusals: AtomicU64,
}

impl Board {
    pub(super) fn new(client_id: &str, nodes: usize, needed: usize) -> Self {
        Self {
            channels: Mutex::new(HashMap::new()),
            client_id: client_id.into(),
            nodes,
            needed,
            next_ticket: AtomicU64::new(0),
            connections: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        }
    }

    /// Every channel, by name (a seeded simulation replays the same order).
    pub(super) fn sorted_channels(&self) -> Vec<(Arc<str>, Arc<Channel>)> {
        let mut all: Vec<_> = locked(&self.channels)
            .iter()
            .map(|(k, c)| (Arc::clone(k), Arc::clone(c)))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub(super) fn channel(&self, name: &str) -> Option<Arc<Channel>> {
        locked(&self.channels).get(name).cloned()
    }

    /// A message on `channel`, from node `node`: on a lock's own channel,
    /// or on the foreign channel its waiters also listen on.
    pub(super) fn deliver(&self, node: usize, channel: &str, payload: &[u8]) {
        self.messages.fetch_add(1, Ordering::Relaxed);
        if let Some(c) = self.channel(channel) {
            if c.foreign.as_deref() == Some(channel) {
                c.on_foreign(node, &self.wakeups);
            } else {
                c.on_message(node, payload, &self.client_id, &self.wakeups);
            }
        }
    }

    /// Node `i`'s subscriptions are confirmed (`true`) or gone. The waiters
    /// of a channel whose coverage crossed [`Board::needed`] are rung: they
    /// switch between polling and trusting messages, and a release may have
    /// gone unheard while the channel was not covered. A change that leaves
    /// a channel covered (or uncovered) rings nobody: while at least
    /// `needed` nodes are subscribed, any holder's quorum publishes on one
    /// of them, so no release went unheard; ringing there made every waiter
    /// of every manager attempt at once each time one node's connection
    /// came or went (a herd per flap of a failing node).
    pub(super) fn covered(&self, i: usize, channels: &[Arc<Channel>], on: bool) {
        for c in channels {
            let before = c.coverage() >= self.needed;
            c.subscribed[i].store(on, Ordering::Release);
            c.forget_echoes(i);
            if on {
                c.confirmed.notify_waiters();
            }
            if before != (c.coverage() >= self.needed) {
                c.wake_all(&self.wakeups);
            }
        }
    }
}

#[cfg(test)]
mod tests;
