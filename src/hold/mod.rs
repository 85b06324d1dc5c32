//! One held lock, shared by all the guards of its levels: where it stands
//! ([`HoldState`]) and releasing levels of it on the nodes; what it holds
//! (count, validity, granting nodes, a renewal in flight) is its
//! [`record`], changed only through the verbs there.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;

use crate::clock;
use crate::error::Error;
use crate::keys::Keys;
use crate::members::Members;
use crate::node::{Claim, Released};
use crate::owner::Owner;
use crate::quorum::{ReleaseTally, Stragglers};
use crate::resume::Resumes;
use crate::telemetry::Cause;

mod record;

pub(crate) use record::Mark;
use record::Record;

/// Where a hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldState {
    /// Held (valid until [`LockGuard::valid_until`](crate::LockGuard::valid_until)).
    Held,
    /// Released by its last guard.
    Released,
    /// No longer held: the watchdog could not confirm it on a quorum in
    /// time, a re-entry found it gone on too many nodes for a quorum (forced,
    /// or lost by nodes restarted empty), or its validity ran out (a fixed lease, or renewal that did not
    /// land before [`LockGuard::valid_until`](crate::LockGuard::valid_until)).
    /// Never later than `valid_until`.
    Lost,
    /// Renewal stopped at `max_hold`; it stays valid until `valid_until`,
    /// then it is `Lost`.
    MaxHoldReached,
}

impl HoldState {
    /// The phase as a word ([`Hold`] keeps it in an atomic).
    fn code(self) -> u8 {
        match self {
            Self::Held => 0,
            Self::Released => 1,
            Self::Lost => 2,
            Self::MaxHoldReached => 3,
        }
    }

    /// The phase of [`HoldState::code`]'s word.
    fn of_code(code: u8) -> Self {
        match code {
            0 => Self::Held,
            1 => Self::Released,
            2 => Self::Lost,
            _ => Self::MaxHoldReached,
        }
    }
}

/// Held or stopped at `max_hold`: usable, until its validity ends.
pub(crate) fn is_live(phase: HoldState) -> bool {
    matches!(phase, HoldState::Held | HoldState::MaxHoldReached)
}

/// Lost, or renewal stopped at `max_hold`.
pub(crate) fn stopped(phase: HoldState) -> bool {
    matches!(phase, HoldState::Lost | HoldState::MaxHoldReached)
}

/// What a won acquisition hands to its hold (to each of a set's holds).
#[derive(Clone)]
pub(crate) struct Acquired {
    pub(crate) token: u64,
    pub(crate) valid_until: Instant,
    pub(crate) started: Instant,
    pub(crate) granted: Vec<bool>,
    /// Per node: the acquire was never sent there (its error says so:
    /// [`NodeError::unsent_until`](crate::error::NodeError)), so the node
    /// cannot hold this hold's key unless a repair or a late grant puts it
    /// there later (then `granted` says so).
    pub(crate) unreached: Vec<bool>,
}

/// Work to run when a hold is dropped, given by its creator (the manager
/// forgets the owner's entry for the name, `reentry`). Whatever it captures
/// lives as long as the hold: the manager's state, and so its watchdog,
/// outlives every hold it renews.
pub(crate) struct OnDrop(Option<Work>);

/// See [`OnDrop`].
enum Work {
    Run(Box<dyn FnOnce() + Send + Sync>),
    /// Only keeps a value alive: nothing boxed.
    Keep {
        _alive: Arc<dyn Send + Sync>,
    },
}

impl OnDrop {
    pub(crate) fn new(f: impl FnOnce() + Send + Sync + 'static) -> Self {
        Self(Some(Work::Run(Box::new(f))))
    }

    /// Keeps `alive` alive as long as the hold, and does nothing else.
    pub(crate) fn keep(alive: Arc<dyn Send + Sync>) -> Self {
        Self(Some(Work::Keep { _alive: alive }))
    }
}

/// The shared state of one held lock, behind all its guards.
pub(crate) struct Hold {
    pub(crate) nodes: Arc<Members>,
    pub(crate) keys: Arc<Keys>,
    pub(crate) owner: Owner,
    /// The id written into the lock hash: the owner's id plus a suffix
    /// unique to this hold, so that nothing meant for an earlier hold of the
    /// same owner (a late release, a rollback) can touch this one.
    pub(crate) holder_id: Arc<str>,
    pub(crate) lease: Duration,
    /// Renewed by the watchdog (not a fixed lease).
    pub(crate) renewed: bool,
    /// Renewal stopped at `max_hold`: the end of its validity is then an
    /// expiry, not a loss.
    max_hold_reached: AtomicBool,
    pub(crate) token: u64,
    pub(crate) acquired_at: Instant,
    pub(crate) max_hold: Option<Duration>,
    record: Mutex<Record>,
    /// Per node: this hold's acquire was never sent there
    /// ([`Acquired::unreached`]).
    unreached: Vec<bool>,
    /// The phase ([`HoldState::code`]): a word, where a channel made per
    /// hold cost every acquisition an allocation that most holds, never
    /// waited on, do not need.
    phase: AtomicU8,
    /// Woken at each change of phase (`lost()` waiters, see
    /// [`Hold::wait_phase`]).
    phase_changed: Notify,
    /// Woken when a renewal wave that included this hold ends.
    renew_done: Notify,
    /// The watchdog's count of held renewed holds, once registered: the
    /// hold leaves it as it leaves [`HoldState::Held`].
    counted: OnceLock<Arc<AtomicUsize>>,
    on_drop: OnDrop,
}

impl Hold {
    /// A hold of one level, as `acquired`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        nodes: &Arc<Members>,
        keys: &Arc<Keys>,
        owner: &Owner,
        holder_id: &Arc<str>,
        lease: Duration,
        renewed: bool,
        acquired: Acquired,
        on_drop: OnDrop,
    ) -> Arc<Self> {
        nodes.metrics.hold_began();
        Arc::new(Self {
            nodes: Arc::clone(nodes),
            keys: Arc::clone(keys),
            owner: owner.clone(),
            holder_id: Arc::clone(holder_id),
            lease,
            renewed,
            max_hold_reached: AtomicBool::new(false),
            token: acquired.token,
            acquired_at: acquired.started,
            max_hold: if renewed { nodes.config.max_hold } else { None },
            record: Mutex::new(Record::new(acquired.valid_until, acquired.granted)),
            unreached: acquired.unreached,
            phase: AtomicU8::new(HoldState::Held.code()),
            phase_changed: Notify::new(),
            renew_done: Notify::new(),
            counted: OnceLock::new(),
            on_drop,
        })
    }

    /// The phase, with the validity deadline applied: a live hold whose
    /// `valid_until` has passed is lost from that instant on, whatever the
    /// watchdog is doing.
    pub(crate) fn phase(&self) -> HoldState {
        let stored = self.stored_phase();
        if is_live(stored) && clock::now() >= lapses(self.valid_until()) && !renew_lapsed() {
            // Not renewed: its lease ran out; renewed: renewal came too late.
            let cause = if !self.renewed || self.max_hold_reached.load(Ordering::Acquire) {
                Cause::LeaseEnded
            } else {
                Cause::Expired
            };
            self.lose(cause);
            return self.stored_phase();
        }
        stored
    }

    /// The phase as last recorded, without checking the deadline (for code
    /// that holds the record's lock and checks `valid_until` itself).
    pub(crate) fn stored_phase(&self) -> HoldState {
        HoldState::of_code(self.phase.load(Ordering::SeqCst))
    }

    /// Still usable for re-entry: not released and not lost.
    pub(crate) fn is_live(&self) -> bool {
        is_live(self.phase())
    }

    /// Renewal stops at `max_hold`: from the end of its validity on, the
    /// hold has expired rather than been lost. Returns whether it moved to
    /// [`HoldState::MaxHoldReached`] (from a live phase).
    pub(crate) fn stop_at_max_hold(&self) -> bool {
        self.max_hold_reached.store(true, Ordering::Release);
        self.transition(HoldState::MaxHoldReached)
    }

    /// Counts this hold in `held` (the watchdog's count of renewed holds)
    /// while it is [`HoldState::Held`]: it leaves the count as it leaves
    /// that phase. The caller adds it.
    pub(crate) fn count_in(&self, held: &Arc<AtomicUsize>) {
        let _ = self.counted.set(Arc::clone(held));
    }

    /// Moves from a live phase to `to`; returns whether it moved. Moving
    /// to a phase that is not live ends the hold (counted once: such a
    /// phase is never left). Leaving [`HoldState::Held`], it leaves the
    /// watchdog's count of held holds ([`Hold::count_in`]).
    pub(crate) fn transition(&self, to: HoldState) -> bool {
        let from = self
            .phase
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |p| {
                let p = HoldState::of_code(p);
                (is_live(p) && p != to).then_some(to.code())
            });
        let moved = from.is_ok();
        if from.is_ok_and(|p| HoldState::of_code(p) == HoldState::Held) {
            if let Some(held) = self.counted.get() {
                // Never below zero: a hold that leaves the phase as it is
                // registered leaves before its registration counts it.
                let _ = held.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    Some(n.saturating_sub(1))
                });
            }
        }
        if moved {
            // After the store: a waiter that read the old phase had
            // registered first (see `wait_phase`), and is woken.
            self.phase_changed.notify_waiters();
        }
        if moved && !is_live(to) {
            self.nodes.metrics.hold_ended(self.acquired_at);
        }
        moved
    }

    /// Moves from a live phase to [`HoldState::Lost`] for `cause` (counted
    /// once, whoever noticed it: the watchdog, a re-entry, a reader of the
    /// phase past the validity); returns whether it moved. A renewed hold's
    /// loss (any cause but the end of a lease that was not, or no longer,
    /// renewed) counts in [`WatchdogStats::losses`] too.
    ///
    /// [`WatchdogStats::losses`]: crate::WatchdogStats::losses
    pub(crate) fn lose(&self, cause: Cause) -> bool {
        let moved = self.transition(HoldState::Lost);
        if moved {
            self.nodes.metrics.lost(cause);
            if cause != Cause::LeaseEnded {
                self.nodes.lost_holds.fetch_add(1, Ordering::Relaxed);
            }
        }
        moved
    }

    /// Waits until the phase satisfies `done`, and returns it. Wakes at the
    /// validity deadline too, so a hold that nobody renews in time is seen
    /// lost at `valid_until`, not when the watchdog next looks; and when the
    /// machine resumes from a suspend (the deadline's timer runs on the
    /// monotonic clock, which stopped meanwhile), to re-check the deadline
    /// and re-arm the timer: a validity that ran out during the suspend is
    /// seen lost at resume (within [`POLL`](crate::resume::POLL)).
    pub(crate) async fn wait_phase(&self, done: impl Fn(HoldState) -> bool) -> HoldState {
        // Subscribed on the first wait for a deadline only: a wait that ends
        // at once starts no watcher.
        let mut resumes = None;
        loop {
            // Registered before the phase is read: a change after the read
            // wakes it (`notify_waiters` wakes every `Notified` made
            // before it, polled or not).
            let changed = self.phase_changed.notified();
            let phase = self.phase();
            if done(phase) {
                return phase;
            }
            let lapse = lapses(self.valid_until());
            // Past the deadline yet still live: only the simulator's
            // mutation that ignores deadlines gets here; wait for a change.
            let deadline = (lapse > clock::now()).then(|| clock::to_timer(lapse));
            if deadline.is_some() && resumes.is_none() {
                // Then the phase and deadline again: a suspend seen by the
                // watcher from the subscription on wakes this wait, and one
                // before it is in the clock read again.
                resumes = Some(self.nodes.resumes(self.lease));
                continue;
            }
            tokio::select! {
                () = changed => {}
                () = sleep_until_some(deadline) => {}
                () = resumed(resumes.as_mut()) => {}
            }
        }
    }

    /// Releases all but `left` levels on every node: returns at the
    /// quorum's decision, and the calls still in flight go on as background
    /// work, so every node gets the release.
    pub(crate) async fn release_levels(&self, left: u32) -> ReleaseTally {
        let (t, rest) = self.release_quorum(left).await;
        if !rest.is_empty() {
            self.nodes.spawn(rest.for_each(|_, _| {}));
        }
        t
    }

    /// Sends this hold's release of all but `left` levels to every node;
    /// hands back the calls still in flight at the quorum's decision. In
    /// the span `quorumlock.release` (see docs/OBSERVABILITY.md, "Tracing").
    async fn release_quorum(&self, left: u32) -> (ReleaseTally, Stragglers<Released>) {
        let span = tracing::debug_span!(
            "quorumlock.release",
            lock = %self.keys.name,
            holder = %self.holder_id,
            count = left,
        );
        let claim = Claim::new(Arc::clone(&self.holder_id), self.lease, left);
        let skip = self.unreached_nodes();
        let release = self
            .nodes
            .release_quorum(&self.keys, &claim, self.token, &skip);
        tracing::Instrument::instrument(release, span).await
    }

    /// Releases all but `left` levels on every node as background work,
    /// after any renewal of this hold in flight (so that a renewal or a
    /// repair never lands after the release; one given up unanswered is
    /// ordered by the member, see `record`); the receiver gets the tally.
    /// `None` without a runtime: the keys then expire with the lease.
    pub(crate) fn release_in_background(
        self: &Arc<Self>,
        left: u32,
    ) -> Option<oneshot::Receiver<ReleaseTally>> {
        let (tx, rx) = oneshot::channel();
        let hold = Arc::clone(self);
        self.nodes
            .spawn(async move {
                hold.wait_renewal_done().await;
                let (t, rest) = hold.release_quorum(left).await;
                let _ = tx.send(t);
                // The calls the quorum did not wait for run on in this task,
                // so that every node gets the release (no second task).
                drop(hold);
                rest.for_each(|_, _| {}).await;
            })
            .then_some(rx)
    }

    /// Releases the last level on every node, in the caller's future: after
    /// any renewal of this hold in flight, until the quorum's decision; the
    /// calls still in flight then go on as background work. Dropped before
    /// the decision, it sends the whole release again as background work
    /// ([`Hold::release_in_background`]). Sending it twice is harmless: the
    /// holder id belongs to this hold alone, so a node that already released
    /// it finds nothing more of ours to delete.
    pub(crate) async fn release_last(self: &Arc<Self>) -> ReleaseTally {
        /// Sends the release in the background unless disarmed.
        struct Resend<'a>(Option<&'a Arc<Hold>>);
        impl Drop for Resend<'_> {
            fn drop(&mut self) {
                if let Some(hold) = self.0.take() {
                    let _ = hold.release_in_background(0);
                }
            }
        }
        let mut resend = Resend(Some(self));
        self.wait_renewal_done().await;
        let t = self.release_levels(0).await;
        resend.0 = None;
        t
    }

    /// The error for an operation on a hold that is no longer live.
    pub(crate) fn gone(&self) -> Error {
        let name = self.keys.name.to_string();
        let max_hold = self.max_hold_reached.load(Ordering::Acquire);
        if self.renewed && !max_hold && self.stored_phase() == HoldState::Lost {
            Error::Lost { name }
        } else {
            Error::Expired { name }
        }
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if self.nodes.metrics.on() && is_live(self.stored_phase()) {
            // Dropped while live (all its guards and work gone): it ends.
            self.nodes.metrics.hold_ended(self.acquired_at);
        }
        if let Some(Work::Run(f)) = self.on_drop.0.take() {
            f();
        }
    }
}

/// tokio's timers fire on whole milliseconds, rounding up: a hold counts as
/// lapsed this much before `valid_until`, so that the loss signal, woken by
/// such a timer, fires no later than `valid_until`.
const TIMER_SLACK: Duration = Duration::from_millis(1);

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => clock::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Resolves when the machine resumed from a suspend; never without a
/// subscription.
async fn resumed(resumes: Option<&mut Resumes>) {
    match resumes {
        Some(r) => r.next().await,
        None => std::future::pending().await,
    }
}

/// When a hold valid until `valid_until` counts as lapsed.
pub(crate) fn lapses(valid_until: Instant) -> Instant {
    valid_until.checked_sub(TIMER_SLACK).unwrap_or(valid_until)
}

/// The simulator's mutation that treats lapsed holds as held: the watchdog
/// renews them and their validity deadline is ignored (never on outside
/// tests).
pub(crate) fn renew_lapsed() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::RenewLapsed);
    #[cfg(not(test))]
    false
}
