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
//! waiter with a place in the nodes' queue, attempts at least every
//! `queue_timeout / 3` (its refresh interval), so a release whose message
//! names a waiter that died, or is lost, costs at most that. Waiters behind
//! the head wait for their turn: the head passes it on when it leaves (see
//! `bells`). A waiter rung by another manager's release attempts once rung
//! by a quorum of nodes (the release ran there; several messages of one
//! node count once), or a few milliseconds after the first ring: an attempt
//! on the first node's message would often find the release not yet run
//! elsewhere, miss, and be rolled back. A release by this manager rings a
//! plain waiter for an attempt at once: its calls went to every node ahead
//! of the attempt, on the same connections (a fair waiter, named per node,
//! still waits for a quorum of nodes). Every waiter's timer ends no later
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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use self::bells::{unbounded, Bell, Board, Channel, Kind};
use self::pubsub::{node_task, Command, Timeouts};
use crate::config::Config;
use crate::keys::Keys;
use crate::node::Feed;
use crate::rng::jitter;
use crate::sync::locked;
use crate::telemetry::Metrics;

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
        Self {
            own: &keys.channel,
            foreign: keys.foreign_channel.as_deref(),
        }
    }
}

/// What the waiters of a manager share: its channels and the senders to
/// its pub/sub tasks.
struct Shared {
    board: Arc<Board>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    /// Nodes whose subscriptions must cover a channel for messages to be
    /// trusted: any holder's quorum then overlaps them.
    needed: usize,
    /// How often an active waiter attempts at least (`queue_timeout / 3`).
    refresh: Duration,
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
        let board = Arc::new(Board::new(client_id, n));
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
                needed: n.saturating_sub(config.required) + 1,
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
        let channel = channel.into();
        let mut channels = locked(&self.shared.board.channels);
        let queued = channels
            .get(channel.own)
            .is_some_and(|c| c.has_plain_waiters());
        queued.then(|| self.enter(&mut channels, channel, None, owner))
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
        let channel = channel.into();
        let mut channels = locked(&self.shared.board.channels);
        let covered = channels
            .get(channel.own)
            .is_some_and(|c| c.coverage() >= self.shared.needed);
        covered.then(|| self.enter(&mut channels, channel, fair, owner))
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

/// One waiting acquisition's membership of a channel. Dropping it leaves
/// the queue (passing the turn on if it headed the local FIFO) and, for the
/// last waiter, unsubscribes on every node.
pub(crate) struct Waiter {
    chan: Arc<Channel>,
    bell: Arc<Bell>,
    /// Rings seen so far: a ring after `mark` ends the next `wait` at once.
    seen: u64,
    /// The channel's name.
    name: Arc<str>,
    /// A plain waiter's place in the local FIFO.
    ticket: Option<u64>,
    /// A fair waiter's id in the nodes' queue.
    fair: Option<Arc<str>>,
    shared: Arc<Shared>,
    acquired: bool,
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// A release message (or a queue change) woke us.
    Notified,
    /// A timer fired: the fallback, the refresh interval or the deadline.
    Timer,
}

impl Waiter {
    /// Records the rings so far: a ring that arrives from now on ends the
    /// next `wait` at once.
    pub(crate) fn mark(&mut self) {
        self.seen = self.bell.rings.load(Ordering::Acquire);
        self.bell.prompt.store(false, Ordering::Release);
        self.bell.take_nodes();
    }

    /// Whether enough nodes confirmed the subscription for release messages
    /// to be relied on.
    pub(crate) fn covered(&self) -> bool {
        self.chan.coverage() >= self.shared.needed
    }

    /// Waits until the subscription is confirmed on enough nodes, or `limit`.
    pub(crate) async fn confirmed(&self, limit: Duration) {
        let wait = async {
            loop {
                let notified = self.chan.confirmed.notified();
                if self.covered() {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
    }

    /// How many nodes' rings end a wait at once: a quorum (the nodes a
    /// release must have run on for an attempt to win). Fewer nodes
    /// (fewer nodes subscribed, or the rollback of another manager's failed
    /// attempt, which frees a minority only) end it after the grace: two
    /// managers whose attempts split the nodes would otherwise ring each
    /// other into a new attempt with every rollback, at once.
    fn quorum_of_messages(&self) -> u64 {
        let nodes = self.shared.board.nodes;
        let quorum = (nodes + 1).saturating_sub(self.shared.needed);
        u64::try_from(quorum).unwrap_or(u64::MAX)
    }

    /// Whether this is a plain waiter behind others of this manager: it
    /// waits for its turn instead of attempting.
    pub(crate) fn is_behind(&self) -> bool {
        self.ticket.is_some_and(|t| !self.chan.is_head(t))
    }

    /// Records that the lock's holder has `pttl` left on the nodes.
    pub(crate) fn holder_seen(&self, pttl: Duration) {
        self.chan.holder_seen(Instant::now().checked_add(pttl));
    }

    /// How long until the current holder's key is known to expire, if known.
    pub(crate) fn holder_left(&self) -> Option<Duration> {
        self.chan
            .holder_until()
            .map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Sleeps until this waiter's bell rings (a release message for it, the
    /// previous head giving up, a change of coverage), `fallback` passes, or
    /// `deadline`. While release messages are covered, a fallback that ends
    /// before the holder's known expiry sleeps on until it (no attempt while
    /// the lock is known held).
    ///
    /// An active waiter (`placed` on the nodes, or heading the local FIFO,
    /// also when it becomes the head during the wait) wakes at least every
    /// refresh interval, whatever the holder's expiry: a release whose
    /// message rings nobody here (it names a dead waiter of another
    /// process) costs it at most that.
    pub(crate) async fn wait(
        &mut self,
        fallback: Duration,
        deadline: Option<Instant>,
        placed: bool,
    ) -> Woke {
        let now = Instant::now();
        let far = now + Duration::from_secs(86_400);
        let mut until = now.checked_add(fallback).unwrap_or(far);
        let mut cap = deadline.unwrap_or(far);
        let mut refreshing = false;
        let mut grace: Option<Instant> = None;
        loop {
            let notified = self.bell.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let head = !self.is_behind() && !unbounded();
            if !refreshing && (placed || self.fair.is_some() || head) {
                refreshing = true;
                cap = cap.min(Instant::now() + self.shared.refresh);
            }
            until = until.min(cap);
            let rings = self.bell.rings.load(Ordering::Acquire);
            if rings != self.seen {
                // A release publishes on every node as it runs there: the
                // first message may come before the release ran on a quorum,
                // and an attempt then would miss and be rolled back. Wait for
                // a quorum's messages, or a moment for the rest.
                let now = Instant::now();
                // Jittered, so that two managers whose attempts split
                // the nodes do not retry in step.
                let due = grace.get_or_insert_with(|| now + QUORUM_GRACE + jitter());
                let prompt = self.bell.prompt.swap(false, Ordering::AcqRel);
                let nodes = u64::from(self.bell.nodes_rung());
                #[cfg(test)]
                let nodes =
                    if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::RingQuorum)
                    {
                        rings - self.seen
                    } else {
                        nodes
                    };
                if prompt || nodes >= self.quorum_of_messages() || now >= *due {
                    self.seen = rings;
                    self.bell.take_nodes();
                    return Woke::Notified;
                }
            }
            // Biased, so that a seeded simulation replays the same wake-ups.
            tokio::select! {
                biased;
                () = &mut notified => {}
                // The grace ends before the timer: look at the rings again.
                () = tokio::time::sleep_until(grace.unwrap_or(until)), if grace.is_some_and(|g| g < until) => {}
                () = tokio::time::sleep_until(until) => {
                    let later = self
                        .chan
                        .holder_until()
                        .filter(|h| *h > Instant::now())
                        .map(|h| h + jitter());
                    match later {
                        Some(h) if self.covered() && h > until && until < cap => {
                            until = h.min(cap);
                        }
                        _ => return Woke::Timer,
                    }
                }
            }
        }
    }

    /// Marks the acquisition as successful, holding the lock on the nodes
    /// for `lease` from now: queued waiters sleep until then at most (or
    /// their refresh interval), and leaving the queue promotes the next
    /// waiter without a ring (the lock is taken; its release will ring).
    pub(crate) fn acquired(mut self, lease: Duration) {
        self.holder_seen(lease);
        self.acquired = true;
    }
}

/// How long a waiter whose bell rang waits for the release messages of the
/// other nodes of a quorum before it attempts anyway (a node that is down,
/// or a ring that is not a release: a change of coverage, the previous head
/// leaving).
const QUORUM_GRACE: Duration = Duration::from_millis(5);

impl Drop for Waiter {
    fn drop(&mut self) {
        let channels = locked(&self.shared.board.channels);
        let kind = match (&self.fair, self.ticket) {
            (Some(id), _) => Kind::Fair(id),
            (None, t) => Kind::Plain(t.unwrap_or_default()),
        };
        self.chan
            .leave(&kind, self.acquired, &self.shared.board.wakeups);
        let mut refs = locked(&self.chan.refs);
        *refs = refs.saturating_sub(1);
        if *refs == 0 {
            drop(refs);
            drop(channels);
            self.retire_later();
        }
    }
}

/// How long a channel stays subscribed after its last waiter left: a
/// process whose one task takes the same lock again and again would
/// otherwise UNSUBSCRIBE and SUBSCRIBE on every node each time, and its
/// next miss would need a second attempt once subscribed. Measured with
/// `tests/fair.rs` (8 managers of one fair task each): 17.6 scripts per
/// acquisition with it, 25.0 when unsubscribing at once.
const LINGER: Duration = Duration::from_secs(1);

impl Waiter {
    /// Unsubscribes the channel after [`LINGER`] unless a waiter came back
    /// (one scheduled unsubscription per channel at a time).
    fn retire_later(&self) {
        if self.chan.retiring.swap(true, Ordering::AcqRel) {
            return;
        }
        let shared = Arc::downgrade(&self.shared);
        let (chan, name) = (Arc::clone(&self.chan), Arc::clone(&self.name));
        let retire = move || {
            let Some(shared) = shared.upgrade() else {
                return;
            };
            let mut channels = locked(&shared.board.channels);
            chan.retiring.store(false, Ordering::Release);
            let unused = *locked(&chan.refs) == 0
                && channels.get(&name).is_some_and(|c| Arc::ptr_eq(c, &chan));
            if unused {
                let mut names = vec![Arc::clone(&name)];
                names.extend(chan.foreign.clone());
                for n in &names {
                    channels.remove(n);
                }
                for tx in &shared.senders {
                    let _ = tx.send(Command::Unsubscribe(names.clone()));
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn(crate::clock::inherit(async move {
                tokio::time::sleep(LINGER).await;
                retire();
            }))),
            Err(_) => retire(),
        }
    }
}
