//! One waiting acquisition's membership of a channel: its sleep until its
//! bell rings, the holder's known expiry, the fallback or its refresh
//! interval; leaving the queue (and the channel, after [`LINGER`]) when
//! dropped.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::Instant;

use super::bells::Board;
use super::bells::{unbounded, Bell, Channel, Kind};
use super::pubsub::Command;
use crate::rng::jitter;
use crate::sync::locked;

/// What the waiters of a manager share: its channels and the senders to
/// its pub/sub tasks.
pub(super) struct Shared {
    pub(super) board: Arc<Board>,
    pub(super) senders: Vec<mpsc::UnboundedSender<Command>>,
    /// How often an active waiter attempts at least (`queue_timeout / 3`).
    pub(super) refresh: Duration,
}

/// One waiting acquisition's membership of a channel. Dropping it leaves
/// the queue (passing the turn on if it headed the local FIFO) and, for the
/// last waiter, unsubscribes on every node.
pub(crate) struct Waiter {
    pub(super) chan: Arc<Channel>,
    pub(super) bell: Arc<Bell>,
    /// Rings seen so far: a ring after `mark` ends the next `wait` at once.
    pub(super) seen: u64,
    /// The channel's name.
    pub(super) name: Arc<str>,
    /// A plain waiter's place in the local FIFO.
    pub(super) ticket: Option<u64>,
    /// A fair waiter's id in the nodes' queue.
    pub(super) fair: Option<Arc<str>>,
    pub(super) shared: Arc<Shared>,
    pub(super) acquired: bool,
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// A release message (or a queue change) woke us.
    Notified,
    /// A timer fired: the fallback, the holder's known expiry or the
    /// deadline.
    Timer,
    /// The refresh interval of an active waiter ended first, before its
    /// deadline and the holder's known expiry: the lock is held as far as
    /// it knows, and its place on the nodes is due for a refresh (kept in
    /// a batch, or by an attempt).
    Refresh,
}

impl Waiter {
    /// Records the rings so far: a ring that arrives from now on ends the
    /// next `wait` at once.
    pub(crate) fn mark(&mut self) {
        if self.ticket.is_some() && !self.is_behind() {
            self.chan.head_attempts();
        }
        self.seen = self.bell.rings.load(Ordering::Acquire);
        self.bell.prompt.store(false, Ordering::Release);
        self.bell.take_nodes();
    }

    /// The waiter's place on the nodes was kept without an attempt
    /// (`Members::keep_place`): heading the local FIFO, it still counts as
    /// the head that attempts for the waiters behind it (they leave the
    /// attempts to a head active within two refresh intervals).
    pub(crate) fn kept(&self) {
        if self.ticket.is_some() && !self.is_behind() {
            self.chan.head_attempts();
        }
    }

    /// Whether enough nodes confirmed the subscription for release messages
    /// to be relied on.
    pub(crate) fn covered(&self) -> bool {
        self.chan.coverage() >= self.shared.board.needed
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
        let quorum = (nodes + 1).saturating_sub(self.shared.board.needed);
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

    /// Records that the lock's holder lasts until `until` on the nodes.
    pub(crate) fn holder_seen_until(&self, until: Instant) {
        self.chan.holder_seen(Some(until));
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
    /// An active waiter (`placed` on the nodes and not behind local waiters,
    /// fair, or heading the local FIFO, also when it becomes the head
    /// during the wait) wakes at least every refresh interval, whatever the
    /// holder's expiry ([`Woke::Refresh`] when that interval ends first): a
    /// release whose message rings nobody here (it names a dead waiter of
    /// another process) costs it at most that and its place's refresh
    /// (`Members::keep_place` finds the lock free).
    ///
    /// A ring by rollbacks only (other owners' failed attempts undoing
    /// their grants) ends the wait `retry()` (the waiter's backoff) after
    /// it, not at once: the rollback may have freed what this waiter last missed on,
    /// but attempts that keep failing (a quorum out of reach) must not ring
    /// each other into new attempts without pause.
    pub(crate) async fn wait(
        &mut self,
        fallback: Duration,
        retry: impl Fn() -> Duration,
        deadline: Option<Instant>,
        placed: bool,
    ) -> Woke {
        let now = Instant::now();
        let far = now + Duration::from_secs(86_400);
        let mut until = now.checked_add(fallback).unwrap_or(far);
        let mut cap = deadline.unwrap_or(far);
        let mut refreshing = false;
        // When the refresh interval ends, if it is before the deadline.
        let mut refresh_at: Option<Instant> = None;
        let mut grace: Option<Instant> = None;
        // When rollbacks alone rang: the waiter's backoff after the first.
        let mut rolled: Option<Instant> = None;
        loop {
            let notified = self.bell.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let head = !self.is_behind() && !unbounded();
            if !refreshing && (placed || self.fair.is_some() || head) {
                refreshing = true;
                let now = Instant::now();
                let at = now + self.shared.refresh;
                refresh_at = (at < cap).then_some(at);
                cap = cap.min(at);
                if head {
                    // The head attempts when the holder's key is known to
                    // expire (behind, it slept past that, the attempts
                    // being the head's then).
                    if let Some(h) = self.chan.holder_until().filter(|h| *h > now) {
                        until = until.min(h + jitter());
                    }
                }
            }
            until = until.min(cap);
            let rings = self.bell.rings.load(Ordering::Acquire);
            if rings != self.seen {
                // A release publishes on every node as it runs there: the
                // first message may come before the release ran on a quorum,
                // and an attempt then would miss and be rolled back. Wait for
                // a quorum's messages, or a moment for the rest.
                let now = Instant::now();
                let prompt = self.bell.prompt.swap(false, Ordering::AcqRel);
                let nodes = u64::from(self.bell.nodes_rung());
                if !prompt && nodes == 0 && self.bell.rolled_back() {
                    rolled.get_or_insert_with(|| now + retry());
                } else {
                    // Jittered, so that two managers whose attempts split
                    // the nodes do not retry in step.
                    grace.get_or_insert_with(|| now + QUORUM_GRACE + jitter());
                }
                let due = earliest(grace, rolled).unwrap_or(now);
                #[cfg(test)]
                let nodes =
                    if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::RingQuorum)
                    {
                        rings - self.seen
                    } else {
                        nodes
                    };
                if prompt || nodes >= self.quorum_of_messages() || now >= due {
                    self.seen = rings;
                    self.bell.take_nodes();
                    return Woke::Notified;
                }
            }
            // Biased, so that a seeded simulation replays the same wake-ups.
            tokio::select! {
                biased;
                () = &mut notified => {}
                // The grace (or the backoff after rollbacks) ends before the
                // timer: look at the rings again.
                () = tokio::time::sleep_until(earliest(grace, rolled).unwrap_or(until)),
                    if earliest(grace, rolled).is_some_and(|g| g < until) => {}
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
                        // Behind a head that attempts (at least every refresh
                        // interval while it waits): the attempt is the
                        // head's. At the holder's known expiry, a crowd
                        // behind it would otherwise attempt all at once;
                        // behind a head that stopped attempting (its future
                        // no longer polled), it attempts.
                        _ if until < cap
                            && self.is_behind()
                            && self.chan.head_active(2 * self.shared.refresh) =>
                        {
                            until = (Instant::now() + self.shared.refresh).min(cap);
                        }
                        _ if refresh_at.is_some_and(|r| until >= r) => return Woke::Refresh,
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

/// The earlier of two instants, either of which may be unset.
fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
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
pub(super) const LINGER: Duration = Duration::from_secs(1);

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
