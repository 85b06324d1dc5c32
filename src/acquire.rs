//! Taking a lock: attempts until one wins or the wait runs out, sleeping
//! between them on the release channel (or a backoff), and re-entering a
//! hold the owner already has.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use crate::attempt::attempt;
use crate::clock;
use crate::error::Error;
use crate::guard::LockGuard;
use crate::hold::{Hold, HoldState, OnDrop};
use crate::keys::Keys;
use crate::nodes::Nodes;
use crate::owner::Owner;
use crate::queue::Spot;
use crate::wait::{Notifier, Waiter};
use crate::watchdog::Watchdog;

/// How long an acquisition may wait for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Forever,
    Up(Duration),
}

/// What an acquisition asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) lease: Duration,
    /// Renewed by the watchdog (else held for the fixed `lease`).
    pub(crate) renew: bool,
    pub(crate) wait: Wait,
    /// Granted in queue order only (the fair lock).
    pub(crate) fair: bool,
}

/// What an acquisition works with: the nodes, the release channels its
/// waiters listen on, and the watchdog that renews what it wins.
pub(crate) struct Acquisition<'a> {
    pub(crate) nodes: &'a Arc<Nodes>,
    pub(crate) notifier: &'a Notifier,
    pub(crate) watchdog: &'a Arc<Watchdog>,
}

impl Acquisition<'_> {
    /// Takes the lock anew for `owner` on `terms`. The hold runs `on_drop`
    /// when dropped.
    ///
    /// A waiter has a place in the lock's queue on the nodes (see the
    /// `queue` module): a fair request from its first attempt, since it
    /// may not pass waiters queued before it; a plain one from its first
    /// miss, so that a release wakes it and not one waiter per process (from
    /// its first attempt if the manager already listens on the lock's
    /// release channel: it is then woken without a second try).
    pub(crate) async fn fresh(
        &self,
        keys: Arc<Keys>,
        owner: Owner,
        terms: Terms,
        on_drop: OnDrop,
    ) -> Result<Arc<Hold>, Error> {
        let Terms {
            lease,
            renew,
            wait,
            fair,
        } = terms;
        let config = &self.nodes.config;
        let start = clock::now();
        // A wait too long to represent is a wait without end.
        let deadline = match wait {
            Wait::Forever => None,
            Wait::Up(w) => start.checked_add(w),
        };
        let mut attempt_no: u32 = 0;
        let mut spot = fair.then(|| Spot::new(self.nodes, &keys, owner.waiter_id(), true));
        let mut waiter: Option<Waiter> = None;
        // A release by this owner is one of this acquisition's rollbacks:
        // it does not ring its waiter (see `wait::bells`).
        let owner_id = owner.shared_id();
        if wait != Wait::Up(Duration::ZERO) {
            // Local order: while plain waiters of this manager are queued
            // for the lock, a plain newcomer queues behind them instead of
            // barging in. (Fair waiters do not hold it back, and a fair
            // request needs a place of its own on the nodes: it attempts.)
            if !fair {
                waiter = self.notifier.join_if_queued(&keys.channel, &owner_id);
            }
            // A request whose release channel this manager already listens
            // on joins it before its first attempt (a fair one by name), so
            // that a release during that attempt rings it: a miss needs no
            // second try before waiting (one fan-out and its rollbacks fewer
            // per contended acquisition).
            if waiter.is_none() {
                let id = spot.as_ref().map(|s| Arc::clone(s.waiter()));
                waiter = self
                    .notifier
                    .join_if_covered(&keys.channel, id.as_ref(), &owner_id);
            }
            if waiter.is_some() && spot.is_none() {
                spot = Some(Spot::new(self.nodes, &keys, owner.waiter_id(), false));
            }
        }
        // Only a plain newcomer behind local waiters defers to them.
        let mut deferred = waiter.as_ref().is_some_and(Waiter::is_behind);
        loop {
            let err = if deferred {
                None
            } else {
                if let Some(w) = waiter.as_mut() {
                    w.mark();
                }
                // A holder id per attempt: a late rollback of a failed
                // attempt can never touch a later one's grants.
                let holder_id = owner.holder_id();
                let tried = attempt(
                    self.nodes,
                    &keys,
                    &holder_id,
                    lease,
                    1,
                    0,
                    attempt_no,
                    spot.as_mut(),
                )
                .await;
                match tried {
                    Ok(won) => {
                        if let Some(w) = waiter.take() {
                            w.acquired(lease);
                        }
                        let hold = Hold::new(
                            self.nodes,
                            &keys,
                            &owner,
                            &holder_id,
                            lease,
                            renew,
                            won.acquired,
                            on_drop,
                        );
                        won.late.finish(&hold);
                        if renew {
                            self.watchdog.register(&hold);
                        }
                        // Leaves the queue where a refusal kept it.
                        if let Some(mut s) = spot {
                            s.won();
                        }
                        return Ok(hold);
                    }
                    Err(e) if e.is_retryable() => {
                        if let (Some(w), Some(pttl)) = (&waiter, e.min_pttl()) {
                            w.holder_seen(pttl);
                        }
                        Some(e)
                    }
                    Err(e) => return Err(e),
                }
            };
            let now = clock::now();
            let remaining = deadline.map(|d| d.saturating_duration_since(now));
            if remaining == Some(Duration::ZERO) {
                match err {
                    Some(e) => return Err(e),
                    // Queued the whole wait behind local waiters: one try.
                    None => {
                        deferred = false;
                        continue;
                    }
                }
            }
            attempt_no = attempt_no.saturating_add(1);
            let Some(w) = waiter.as_mut() else {
                // First miss: subscribe to the release channel, then try once
                // more, so a release that happened before the subscription
                // took effect is not missed; that try takes a place in the
                // queue.
                let s = spot
                    .get_or_insert_with(|| Spot::new(self.nodes, &keys, owner.waiter_id(), false));
                // A release naming a fair waiter rings that waiter: its turn
                // on the nodes. One naming a plain waiter of ours rings the
                // local head, which keeps the order among local waiters.
                let w =
                    self.notifier
                        .waiter(&keys.channel, s.fair().then(|| s.waiter()), &owner_id);
                if let Some(pttl) = err.as_ref().and_then(Error::min_pttl) {
                    w.holder_seen(pttl);
                }
                let limit = remaining.map_or(config.node_timeout, |r| r.min(config.node_timeout));
                w.confirmed(limit).await;
                waiter = Some(w);
                continue;
            };
            // The nodes put a fair waiter at different tickets: the next
            // attempt re-files it at the largest on every node, at once, so
            // that no node orders it differently for long.
            if spot.as_mut().is_some_and(|s| s.fair() && s.take_settle()) {
                continue;
            }
            let delay = match &err {
                Some(e) => self.fallback(e, attempt_no, w.covered(), remaining),
                // Queued behind local waiters: our bell rings when our turn
                // comes; until then, sleep no longer than the holder's key
                // is known to last (an expiry publishes nothing), or poll if
                // release messages are not covered.
                None if w.covered() => {
                    let until_expiry = w.holder_left().unwrap_or(lease);
                    remaining.map_or(until_expiry, |r| r.min(until_expiry))
                }
                None => config.backoff.delay(attempt_no),
            };
            let timer_deadline = remaining.and_then(|r| tokio::time::Instant::now().checked_add(r));
            // A waiter with a place on the nodes keeps it by calling at
            // least every refresh interval (so does the local head, placed
            // or not: see `Waiter::wait`).
            let placed = err.is_some() && spot.is_some();
            let woke = w.wait(delay, timer_deadline, placed).await;
            deferred = false;
            debug!(lock = %keys.name, ?woke, "waiter woke");
        }
    }

    /// How long a waiter sleeps when no release message comes. With release
    /// messages covered, until the holder's key would expire (so a lost
    /// message costs at most one TTL); without, the polling backoff. Never
    /// past the caller's deadline; jittered.
    fn fallback(
        &self,
        err: &Error,
        attempt_no: u32,
        covered: bool,
        remaining: Option<Duration>,
    ) -> Duration {
        let backoff = self.nodes.config.backoff.delay(attempt_no);
        let jitter = Duration::from_micros(crate::rng::up_to(2_000));
        let delay = match err.min_pttl() {
            Some(pttl) if covered => pttl + jitter,
            Some(pttl) => backoff.min(pttl + jitter),
            None => backoff,
        };
        remaining.map_or(delay, |r| delay.min(r))
    }
}

/// Re-enters a live hold: one more level, refreshed on the nodes.
///
/// The nodes are asked in the re-entry mode, which never creates a missing
/// key: a lock forced (`force_unlock`) or lost by nodes restarted empty must
/// not come back through a re-entry. As in the watchdog's renewal:
/// - confirmed on a quorum: the re-entry succeeds; a minority that answered
///   "missing" is left to the watchdog, which re-creates the key there in
///   its next tick once a quorum confirms the hold again (its repair, with
///   the fence counter raised to the hold's token);
/// - missing or not ours on so many nodes that no quorum can confirm it:
///   the hold is lost (`lost()` fires, its keys left anywhere are
///   released) and the re-entry fails with [`Error::Lost`];
/// - otherwise (nodes failed or timed out): nothing says the lock is gone,
///   so the hold stays valid until its `valid_until` and the guard is
///   returned; the watchdog decides at its next tick.
pub(crate) async fn reenter(hold: Arc<Hold>) -> Result<LockGuard, Error> {
    if !hold.is_live() {
        return Err(hold.gone());
    }
    // The level is taken at once, as a guard: a release of another level
    // meanwhile lowers the same count, and if this future is dropped (or
    // the hold is gone when it ends), dropping the guard gives the level
    // back like any release.
    let count = hold.enter_level();
    let guard = LockGuard::new(Arc::clone(&hold));
    let nodes = &hold.nodes;
    match attempt(
        nodes,
        &hold.keys,
        &hold.holder_id,
        hold.lease,
        count,
        count - 1,
        0,
        None,
    )
    .await
    {
        Ok(won) => {
            hold.merge(&won.acquired, &won.missing);
            won.late.finish(&hold);
        }
        Err(e @ Error::Lost { .. }) => {
            // Gone on too many nodes for a quorum: the holder is told now.
            if hold.transition(HoldState::Lost) {
                warn!(lock = %hold.keys.name, "lock lost: a re-entry found it gone on too many nodes for a quorum");
                let _ = hold.release_in_background(0);
            }
            return Err(e);
        }
        Err(e) => {
            // Still held until `valid_until`: re-entry does not change who
            // holds the lock, and the watchdog or release converges the
            // nodes to the new count.
            debug!(lock = %hold.keys.name, error = %e, "re-entry could not refresh a quorum");
        }
    }
    if !hold.is_live() {
        return Err(hold.gone());
    }
    Ok(guard)
}
