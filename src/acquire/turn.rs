//! One acquisition's turn: its place in the lock's queue on the nodes
//! (`queue::Spot`) and its bell among this manager's waiters
//! (`wait::Waiter`), kept in step as one value, so that an acquisition
//! reads attempt → miss → [`Turn::wait`].
//!
//! A waiter has a place in the lock's queue on the nodes (see the `queue`
//! module): a fair request from its first attempt, since it may not pass
//! waiters queued before it; a plain one from its first miss, so that a
//! release wakes it and not one waiter per process (from its first attempt
//! if the manager already listens on the lock's release channel: it is
//! then woken without a second try). A set (`lock_all`) has neither: no
//! single release channel rings it, and it retries after the backoff.

use std::sync::Arc;
use std::time::Duration;

use tracing::debug;

use super::queue::Spot;
use crate::error::Error;
use crate::keys::{Keys, Target};
use crate::members::Members;
use crate::owner::Owner;
use crate::rng::jitter;
use crate::telemetry::Waiting;
use crate::wait::{Notifier, Waiter, Woke};

/// One acquisition's place on the nodes and bell, from its first attempt
/// to its end. Dropping it leaves the queue on every node where the
/// waiter may be queued (in the background) and leaves the local FIFO,
/// passing the turn on.
pub(crate) struct Turn<'a> {
    nodes: Arc<Members>,
    notifier: &'a Notifier,
    /// The lock's keys; `None` for a set, which only polls.
    keys: Option<Arc<Keys>>,
    /// The id of the owner: a release by this owner is one of this
    /// acquisition's rollbacks, which does not ring its waiter (see
    /// `wait::bells`).
    owner_id: Arc<str>,
    /// The acquisition's waiter id, made when it first takes a place in
    /// the queue (most acquisitions never do).
    waiter_id: Option<Arc<str>>,
    spot: Option<Spot>,
    bell: Option<Waiter>,
    /// A plain newcomer behind local waiters: its first attempt waits for
    /// its turn.
    deferred: bool,
    /// Misses so far (the backoff's step).
    misses: u32,
    /// Counted among the waiters from its first sleep on.
    waiting: Waiting,
}

impl<'a> Turn<'a> {
    /// The turn of an acquisition of `target` for `owner`. One that may
    /// wait (`waits`) joins the lock's waiters before its first attempt
    /// when that is useful:
    /// - a plain request, behind the plain waiters of this manager already
    ///   queued for the lock, instead of barging in (fair waiters do not
    ///   hold it back, and a fair request needs a place of its own on the
    ///   nodes: it attempts);
    /// - any request whose release channel this manager already listens on,
    ///   so that a release during its first attempt rings it: a miss needs
    ///   no second try before waiting (one fan-out and its rollbacks fewer
    ///   per contended acquisition).
    pub(crate) fn new(
        nodes: &Arc<Members>,
        notifier: &'a Notifier,
        target: &Target,
        owner: &Owner,
        fair: bool,
        waits: bool,
    ) -> Self {
        let keys = (!target.set).then(|| Arc::clone(target.first()));
        let mut turn = Self {
            nodes: Arc::clone(nodes),
            notifier,
            owner_id: owner.shared_id(),
            waiter_id: None,
            spot: None,
            bell: None,
            deferred: false,
            misses: 0,
            waiting: Waiting::default(),
            keys,
        };
        let Some(keys) = turn.keys.clone() else {
            return turn;
        };
        if fair {
            turn.spot = Some(Spot::new(nodes, &keys, turn.waiter_id(), true));
        }
        if waits {
            if !fair {
                turn.bell = notifier.join_if_queued(&*keys, &turn.owner_id);
            }
            if turn.bell.is_none() {
                let id = turn.spot.as_ref().map(|s| Arc::clone(s.waiter()));
                turn.bell = notifier.join_if_covered(&*keys, id.as_ref(), &turn.owner_id);
            }
            if turn.bell.is_some() && turn.spot.is_none() && keys.queued() {
                turn.spot = Some(Spot::new(nodes, &keys, turn.waiter_id(), false));
            }
        }
        turn.deferred = turn.bell.as_ref().is_some_and(Waiter::is_behind);
        turn
    }

    /// The acquisition's waiter id, the same for all its attempts.
    fn waiter_id(&mut self) -> Arc<str> {
        let owner_id = &self.owner_id;
        let id = self
            .waiter_id
            .get_or_insert_with(|| Owner::waiter_id_of(owner_id));
        Arc::clone(id)
    }

    /// Whether the next attempt waits for this waiter's turn first (a
    /// plain newcomer behind local waiters).
    pub(crate) fn deferred(&self) -> bool {
        self.deferred
    }

    /// The deferred newcomer's wait ran out: it attempts once anyway.
    pub(crate) fn stop_deferring(&mut self) {
        self.deferred = false;
    }

    /// The attempts so far that missed.
    pub(crate) fn misses(&self) -> u32 {
        self.misses
    }

    /// Readies the next attempt: a ring from now on ends the next wait at
    /// once. Returns the place the attempt sends, if queued.
    pub(crate) fn attempting(&mut self) -> Option<&mut Spot> {
        if let Some(b) = self.bell.as_mut() {
            b.mark();
        }
        self.spot.as_mut()
    }

    /// The attempt won, holding the lock for `lease`: the local waiters
    /// behind sleep until then at most, and the place is left where a
    /// refusal kept it (not where an answer was still pending: see
    /// `rollback::LateGrants`).
    pub(crate) fn won(mut self, lease: Duration) {
        if let Some(b) = self.bell.take() {
            // A shared hold (a permit, a reader) leaves room for the next
            // local waiter: leaving as if it gave up rings it at once.
            if !self.keys.as_ref().is_some_and(|k| k.shared()) {
                b.acquired(lease);
            }
        }
        if let Some(s) = self.spot.as_mut() {
            s.won();
        }
    }

    /// Sleeps after a miss (`err`, or none when the attempt was deferred)
    /// until the next attempt is due, never past `remaining`:
    /// - the first miss subscribes to the release channel and returns once
    ///   the subscription is confirmed, so that the next attempt catches a
    ///   release that came before it (that attempt takes a place in the
    ///   queue);
    /// - a fair waiter that the nodes put at different tickets retries at
    ///   once with the largest, so that no node orders it differently for
    ///   long;
    /// - otherwise until the bell rings, or the fallback: the holder's
    ///   known expiry while release messages are covered (an expiry
    ///   publishes nothing), the polling backoff while they are not.
    pub(crate) async fn wait(
        &mut self,
        err: Option<&Error>,
        remaining: Option<Duration>,
        lease: Duration,
    ) {
        self.waiting.begin(&self.nodes.metrics);
        let _sleep = self.nodes.metrics.sleep();
        self.misses = self.misses.saturating_add(1);
        let pttl = err.and_then(Error::min_pttl);
        let Some(keys) = self.keys.clone() else {
            // A set: the backoff, no longer than the largest PTTL reported.
            let delay = fallback(&self.nodes, self.misses, pttl, false, remaining);
            tokio::time::sleep(delay).await;
            return;
        };
        let bell = match self.bell.as_mut() {
            Some(b) => {
                if let Some(pttl) = pttl {
                    b.holder_seen(pttl);
                }
                b
            }
            None => {
                if keys.queued() && self.spot.is_none() {
                    let waiter = self.waiter_id();
                    self.spot = Some(Spot::new(&self.nodes, &keys, waiter, false));
                }
                let nodes = &self.nodes;
                // A release naming a fair waiter rings that waiter: its turn
                // on the nodes. One naming a plain waiter of ours rings the
                // local head, which keeps the order among local waiters.
                let fair = self
                    .spot
                    .as_ref()
                    .and_then(|s| s.fair().then(|| s.waiter()));
                let bell = self.notifier.waiter(&*keys, fair, &self.owner_id);
                if let Some(pttl) = pttl {
                    bell.holder_seen(pttl);
                }
                let timeout = nodes.config.node_timeout;
                bell.confirmed(remaining.map_or(timeout, |r| r.min(timeout)))
                    .await;
                // Behind local waiters (one of a crowd that attempted before
                // any of it queued): its turn comes from the head, as a
                // newcomer's does, instead of another attempt now.
                self.deferred = bell.is_behind();
                self.bell = Some(bell);
                return;
            }
        };
        if self
            .spot
            .as_mut()
            .is_some_and(|s| s.fair() && s.take_settle())
        {
            return;
        }
        let covered = bell.covered();
        // A plain waiter behind others of this manager waits for its turn
        // after a miss too: only the head of the local FIFO attempts (it
        // polls when release messages are not covered). A crowd whose
        // every waiter retried after its miss (its backoff when the attempt
        // timed out, its place's refresh) kept hundreds of attempts on one
        // lock in flight, slow enough on a busy machine to time out in
        // turn, and none of them won (issue 35's stall of 100,000 waiters).
        let behind = bell.is_behind();
        let delay = match err {
            Some(_) if !behind => fallback(&self.nodes, self.misses, pttl, covered, remaining),
            // Missed behind local waiters: our bell rings when our turn
            // comes; until then, until the holder's key is known to expire,
            // or a lease when that is not known (or past: the attempt just
            // made found the lock taken, or did not hear back).
            Some(_) => {
                let until_expiry = bell
                    .holder_left()
                    .filter(|left| !left.is_zero())
                    .unwrap_or(lease);
                remaining.map_or(until_expiry, |r| r.min(until_expiry))
            }
            // Queued behind local waiters: our bell rings when our turn
            // comes; until then, sleep no longer than the holder's key is
            // known to last, or poll if release messages are not covered.
            None if covered => {
                let until_expiry = bell.holder_left().unwrap_or(lease);
                remaining.map_or(until_expiry, |r| r.min(until_expiry))
            }
            None => self.nodes.config.backoff.delay(self.misses),
        };
        let deadline = remaining.and_then(|r| tokio::time::Instant::now().checked_add(r));
        // A waiter with a place on the nodes keeps it by calling at least
        // every refresh interval (so does the local head, placed or not:
        // see `Waiter::wait`); one behind local waiters lets it lapse: the
        // head calls for this manager, and the waiter takes a place again
        // at its next miss.
        let placed = err.is_some() && self.spot.is_some() && !behind;
        // Rung by rollbacks only, the waiter attempts after its backoff.
        let (backoff, misses) = (&self.nodes.config.backoff, self.misses);
        // A placed waiter whose refresh interval ends while its lock is
        // held as far as it knows keeps its place in this manager's next
        // batch of places instead of attempting, and sleeps on; it attempts
        // when the batch says the lock is free, or the place is gone, on a
        // node (`places`). A waiter without a place attempts, as before.
        let keep = self
            .spot
            .as_ref()
            .filter(|_| placed)
            .map(|s| Arc::clone(s.waiter()));
        let fallback_at = tokio::time::Instant::now() + delay;
        let woke = loop {
            let left = fallback_at.saturating_duration_since(tokio::time::Instant::now());
            let woke = bell
                .wait(left, || backoff.delay(misses), deadline, placed)
                .await;
            let Some(waiter) = keep.as_ref().filter(|_| woke == Woke::Refresh) else {
                break woke;
            };
            let timeout = self.nodes.config.queue_timeout;
            let kept = self.nodes.keep_place(&keys, waiter, timeout);
            // Never past the acquisition's deadline.
            let kept = match deadline {
                Some(d) => tokio::time::timeout_at(d, kept).await.ok().flatten(),
                None => kept.await,
            };
            let Some(kept) = kept else {
                break woke;
            };
            // The holder renewed, if its key lasts past the expiry seen
            // before: the waiter sleeps on to the new one, not attempting
            // at the old.
            if let Some(until) = kept.holder_until {
                bell.holder_seen_until(until);
            }
            bell.kept();
        };
        self.deferred = false;
        debug!(lock = %keys.name, ?woke, "waiter woke");
    }
}

/// How long a waiter sleeps after its `misses`-th miss when no release
/// message comes. With release messages covered, until the holder's key
/// would expire (`pttl`, so a lost message costs at most one TTL); without,
/// the polling backoff, no longer than that. Never past `remaining`;
/// jittered.
fn fallback(
    nodes: &Members,
    misses: u32,
    pttl: Option<Duration>,
    covered: bool,
    remaining: Option<Duration>,
) -> Duration {
    let backoff = nodes.config.backoff.delay(misses);
    let delay = match pttl {
        Some(pttl) if covered => pttl + jitter(),
        Some(pttl) => backoff.min(pttl + jitter()),
        None => backoff,
    };
    remaining.map_or(delay, |r| delay.min(r))
}
