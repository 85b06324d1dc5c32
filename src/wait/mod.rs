//! Release notifications for waiters: one pub/sub connection per node,
//! shared by every waiter of a manager, and a local FIFO so that the
//! longest-waiting local waiter retries first.
//!
//! - `bells`: who a release rings (pure bookkeeping, unit-tested);
//! - `pubsub`: the per-node connections over the nodes' release feeds.
//!
//! A released lock publishes on `<prefix>{name}:released` on every node where
//! it was held. A waiter subscribes to that channel (the first waiter of a
//! channel sends SUBSCRIBE on every node; [`LINGER`] after the last one
//! left, UNSUBSCRIBE follows unless a waiter came back), retries once the
//! subscription is confirmed, then sleeps until its bell rings or a timer
//! fires.
//!
//! Liveness does not rest on messages: the head of the local FIFO, and every
//! fair waiter, attempts at least every `queue_timeout / 3` (its refresh
//! interval), so a release whose message names a waiter that died, or is
//! lost, costs at most that. Plain waiters behind the head wait for their
//! turn, also after a miss (one of a crowd that attempted before any of it
//! queued): the head passes it on when it leaves (see `bells`), and only
//! the head attempts: a crowd of one manager keeps its head's attempt on
//! the lock in flight, not one per waiter. A waiter rung by another
//! manager's release attempts once rung by a quorum of nodes (the release
//! ran there; several messages of one node count once), or a few
//! milliseconds after the first ring: an attempt
//! on the first node's message would often find the release not yet run
//! elsewhere, miss, and be rolled back. A release by this manager rings a
//! plain waiter for an attempt at once: its calls went to every node before
//! the first node's message came, so ahead of the attempt in practice (a
//! fair waiter, named per node, still waits for a quorum of nodes). Not
//! by rule: on a master a release takes the connection of the calls that
//! free and the attempt another (`node/redis_node`), and an attempt that
//! lands first misses and waits again. Every waiter's timer ends no later
//! than the holder's key is known to expire (the PTTL seen by the last
//! attempt, or the lease of a local holder), since an expiry publishes
//! nothing.
//!
//! In `Layout::Redisson` a lock has a second channel, Redisson's
//! (`Keys::foreign_channel`): a release publishes `0` there after its own
//! message, and the waiters listen on both (one SUBSCRIBE for both, so that
//! a node's messages on them come in the order it published them), so that
//! a Redisson unlock wakes them (see `bells`).

mod bells;
mod pubsub;
#[cfg(test)]
mod tests;
mod waiter;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::sync::mpsc;

use self::bells::{Board, Channel, Kind};
use self::pubsub::{node_task, Command, Timeouts};
use crate::config::Config;
use crate::keys::Keys;
use crate::node::Feed;

use crate::sync::locked;
use crate::telemetry::Metrics;

use self::waiter::Shared;
pub(crate) use self::waiter::{Waiter, Woke};

/// Counters of the waiters' pub/sub connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PubSubStats {
    /// Release messages received, over all nodes.
    pub messages: u64,
    /// Pub/sub connections established, over all nodes (reconnects included).
    pub connections: u64,
    /// Channels with at least one local waiter now.
    pub channels: usize,
    /// Waiters woken by a release message, a queue change or a change of
    /// coverage: one per release message whatever the queue's length.
    pub wakeups: u64,
    /// Subscriptions a node refused (e.g. an ACL user without channel
    /// rights); waiters then poll with the backoff.
    pub refusals: u64,
}

/// The channels a lock's waiters listen on: its own, and another client's
/// (Redisson's), if the layout has one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Listen<'a> {
    pub(crate) own: &'a str,
    pub(crate) foreign: Option<&'a str>,
}

impl<'a> From<&'a str> for Listen<'a> {
    fn from(own: &'a str) -> Self {
        Self { own, foreign: None }
    }
}

impl<'a> From<&'a Keys> for Listen<'a> {
    fn from(keys: &'a Keys) -> Self {
        let (own, foreign) = keys.listen();
        Self { own, foreign }
    }
}

/// The waiters' side of a manager.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
}

impl Notifier {
    /// Starts one pub/sub task per node that has a release feed, on the
    /// current runtime. Without feeds (or a runtime), waiters only poll.
    pub(crate) fn start(
        client_id: &str,
        feeds: Vec<Option<Arc<dyn Feed>>>,
        config: &Config,
        metrics: &Metrics,
    ) -> Self {
        let n = feeds.len();
        let needed = n.saturating_sub(config.required) + 1;
        let board = Arc::new(Board::new(client_id, n, needed));
        let timeouts = Timeouts {
            connect: config.connect_timeout,
            call: config.node_timeout,
        };
        let mut senders = Vec::with_capacity(n);
        for (i, feed) in feeds.into_iter().enumerate() {
            let Some(feed) = feed else { continue };
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                drop(handle.spawn(crate::clock::inherit(node_task(
                    i,
                    feed,
                    timeouts,
                    Arc::downgrade(&board),
                    rx,
                    metrics.clone(),
                ))));
            }
        }
        Self {
            shared: Arc::new(Shared {
                board,
                senders,
                refresh: config.queue_timeout / 3,
            }),
        }
    }

    /// Joins the waiters of `channel`, subscribing on every node if this is
    /// the first one: a plain waiter at the back of the local FIFO, a fair
    /// one (with its id in the nodes' queue) rung by name only.
    pub(crate) fn waiter<'a>(
        &self,
        channel: impl Into<Listen<'a>>,
        fair: Option<&Arc<str>>,
        owner: &Arc<str>,
    ) -> Waiter {
        let mut channels = locked(&self.shared.board.channels);
        self.enter(&mut channels, channel.into(), fair, owner)
    }

    /// Joins the plain waiters of `channel` only if some are queued already
    /// (a plain newcomer then queues behind them instead of barging in; fair
    /// waiters do not hold it back). Decided under the channel map's lock,
    /// so a newcomer that arrives as the last waiter leaves either finds
    /// the queue empty or becomes its head.
    pub(crate) fn join_if_queued<'a>(
        &self,
        channel: impl Into<Listen<'a>>,
        owner: &Arc<str>,
    ) -> Option<Waiter> {
        self.join_if(channel.into(), None, owner, Channel::has_plain_waiters)
    }

    /// Joins the waiters of `channel` only if this manager is subscribed to
    /// it on enough nodes already (other waiters, or one that left less
    /// than [`LINGER`] ago): a waiter that listens before its first attempt
    /// needs no second one to catch a release that came before it listened.
    pub(crate) fn join_if_covered<'a>(
        &self,
        channel: impl Into<Listen<'a>>,
        fair: Option<&Arc<str>>,
        owner: &Arc<str>,
    ) -> Option<Waiter> {
        let needed = self.shared.board.needed;
        self.join_if(channel.into(), fair, owner, |c| c.coverage() >= needed)
    }

    /// Joins `channel`'s waiters if the channel exists and `ready` says so,
    /// decided under the channel map's lock.
    fn join_if(
        &self,
        channel: Listen<'_>,
        fair: Option<&Arc<str>>,
        owner: &Arc<str>,
        ready: impl Fn(&Channel) -> bool,
    ) -> Option<Waiter> {
        let mut channels = locked(&self.shared.board.channels);
        let go = channels.get(channel.own).is_some_and(|c| ready(c));
        go.then(|| self.enter(&mut channels, channel, fair, owner))
    }

    fn enter(
        &self,
        channels: &mut std::collections::HashMap<Arc<str>, Arc<Channel>>,
        channel: Listen<'_>,
        fair: Option<&Arc<str>>,
        owner: &Arc<str>,
    ) -> Waiter {
        let name: Arc<str> = channel.own.into();
        let chan = match channels.get(channel.own) {
            Some(c) => Arc::clone(c),
            None => {
                let foreign: Option<Arc<str>> = channel.foreign.map(Into::into);
                let nodes = self.shared.board.nodes;
                let c = Arc::new(Channel::with_foreign(nodes, foreign.clone()));
                let mut names = vec![Arc::clone(&name)];
                names.extend(foreign);
                for n in &names {
                    channels.insert(Arc::clone(n), Arc::clone(&c));
                }
                for tx in &self.shared.senders {
                    let _ = tx.send(Command::Subscribe(names.clone()));
                }
                c
            }
        };
        *locked(&chan.refs) += 1;
        let kind = match fair {
            Some(id) => Kind::Fair(id),
            None => Kind::Plain(
                self.shared
                    .board
                    .next_ticket
                    .fetch_add(1, Ordering::Relaxed),
            ),
        };
        let bell = chan.join(&kind, owner);
        Waiter {
            chan,
            bell,
            seen: 0,
            name,
            ticket: match kind {
                Kind::Plain(t) => Some(t),
                Kind::Fair(_) => None,
            },
            fair: fair.cloned(),
            shared: Arc::clone(&self.shared),
            acquired: false,
        }
    }

    pub(crate) fn stats(&self) -> PubSubStats {
        let b = &self.shared.board;
        PubSubStats {
            messages: b.messages.load(Ordering::Relaxed),
            connections: b.connections.load(Ordering::Relaxed),
            channels: locked(&b.channels)
                .iter()
                .filter(|(name, c)| c.foreign.as_deref() != Some(&**name))
                .count(),
            wakeups: b.wakeups.load(Ordering::Relaxed),
            refusals: b.refusals.load(Ordering::Relaxed),
        }
    }
}
