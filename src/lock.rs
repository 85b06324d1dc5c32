//! The manager, the acquisition path and the guard.

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use tokio::time::Instant;

use tracing::{debug, field, warn, Instrument};

use crate::clock;
use crate::config::{check_name, Config, LockManagerBuilder};
use crate::error::{Error, NodeErrorKind, NodeFailure, TakenNode};
use crate::node::{failure, Keys, NodeLockState, NodeOps, Released};
use crate::owner::{new_client_id, Owner};
use crate::quorum::{self, Decision, FanOut, Grant, Tally};
use crate::wait::{Notifier, Waiter};
use crate::watchdog::Watchdog;

/// Locks a std mutex, recovering the data if a panic poisoned it: every
/// critical section here leaves the state consistent.
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Background work of a manager (releases of dropped guards, rollbacks of
/// cancelled acquisitions, calls to slow nodes), counted so that
/// [`LockManager::flush`] can wait for it.
#[derive(Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: tokio::sync::Notify,
}

/// Counts one piece of background work until dropped (also when its runtime
/// shuts down and drops the task).
struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Runs `fut` on the current runtime, if there is one. Returns whether it
    /// was spawned. Never panics outside a runtime.
    pub(crate) fn spawn<F>(self: &Arc<Self>, fut: F) -> bool
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        self.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(Arc::clone(self));
        drop(handle.spawn(async move {
            let _running = running;
            fut.await;
        }));
        true
    }

    async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}

/// A handle to the nodes; cheap to clone, shared by all tasks.
///
/// Build one with [`LockManager::builder`]. Every lock taken through it is
/// renewed by one background watchdog, which stops when the last clone of the
/// manager and the last guard are gone.
#[derive(Clone)]
pub struct LockManager {
    pub(crate) inner: Arc<Inner>,
}

type SlotKey = (Arc<str>, Arc<str>);

pub(crate) struct Inner {
    pub(crate) config: Config,
    pub(crate) nodes: Vec<Arc<dyn NodeOps>>,
    pub(crate) client_id: String,
    slots: Mutex<HashMap<SlotKey, Arc<Slot>>>,
    pub(crate) watchdog: Watchdog,
    notifier: Notifier,
    pub(crate) background: Arc<Background>,
}

/// Serializes acquisitions of one name by one owner and remembers its hold.
struct Slot {
    gate: tokio::sync::Mutex<()>,
    hold: Mutex<Weak<Hold>>,
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("nodes", &self.nodes())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// How long an acquisition may wait for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wait {
    Forever,
    Up(Duration),
}

/// One acquisition, configured step by step; see [`LockManager::request`].
#[derive(Debug)]
#[must_use = "a request does nothing until `acquire` is awaited"]
pub struct LockRequest<'a> {
    manager: &'a LockManager,
    name: String,
    owner: Option<Owner>,
    lease: Option<Duration>,
    wait: Wait,
}

impl LockRequest<'_> {
    /// Acquire on behalf of `owner` instead of the calling task.
    pub fn owner(mut self, owner: &Owner) -> Self {
        self.owner = Some(owner.clone());
        self
    }

    /// Hold for a fixed `lease`, without renewal.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Give up after `wait` if the lock is still taken. `Duration::ZERO`
    /// makes a single attempt.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.wait = Wait::Up(wait);
        self
    }

    /// Wait as long as it takes (the default).
    pub fn wait_forever(mut self) -> Self {
        self.wait = Wait::Forever;
        self
    }

    /// Acquires the lock, or re-enters it if this owner already holds it.
    ///
    /// The owner is the one given to [`owner`](Self::owner), else the one of
    /// the enclosing [`Owner::scope`], else a new owner of its own, which
    /// never re-enters: it waits for every other hold, including one taken
    /// by another future of the same task.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for a bad name or lease;
    /// - [`Error::Contended`] when the wait ran out while another owner held it;
    /// - [`Error::Unavailable`] when the wait ran out while too many nodes failed;
    /// - [`Error::ValidityExhausted`] when the last attempt reached the quorum too late;
    /// - [`Error::WrongType`] when the lock key holds a non-hash value;
    /// - [`Error::Expired`] or [`Error::Lost`] when re-entering a hold that is no longer valid.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future at any await point rolls back, in the
    /// background, whatever grants it obtained on every node that may hold
    /// one, at once rather than when the lease runs out. A re-entry that is
    /// dropped restores the previous hold count.
    pub async fn acquire(self) -> Result<LockGuard, Error> {
        check_name(&self.name)?;
        let inner = &self.manager.inner;
        let (lease, renew) = match self.lease {
            Some(lease) => (lease, false),
            None => (inner.config.lease, true),
        };
        inner.config.check_lease(lease)?;
        let keys = Arc::new(Keys::new(&inner.config.key_prefix, &self.name));
        let owner = self.owner.or_else(|| Owner::scoped(&inner.client_id));
        let Some(owner) = owner else {
            // An owner of its own: nothing can re-enter it, so no slot.
            let owner = Owner::explicit(&inner.client_id);
            let hold = inner
                .acquire_fresh(keys, owner, lease, renew, self.wait)
                .await?;
            return Ok(LockGuard::new(hold));
        };
        let slot = SlotUse {
            slot: inner.slot(&owner, &keys.name),
            inner,
            owner_id: owner.shared_id(),
            name: Arc::clone(&keys.name),
        };
        let slot = &slot.slot;
        let _gate = slot.gate.lock().await;
        let existing = lock(&slot.hold).upgrade().filter(|h| h.is_live());
        if let Some(hold) = existing {
            return inner.reenter(hold).await;
        }
        let hold = inner
            .acquire_fresh(keys, owner, lease, renew, self.wait)
            .await?;
        *lock(&slot.hold) = Arc::downgrade(&hold);
        Ok(LockGuard::new(hold))
    }
}

/// An acquisition's use of its slot: when the acquisition ends, however it
/// ends (including by being dropped), a slot left without a hold is removed.
struct SlotUse<'a> {
    inner: &'a Arc<Inner>,
    slot: Arc<Slot>,
    owner_id: Arc<str>,
    name: Arc<str>,
}

impl Drop for SlotUse<'_> {
    fn drop(&mut self) {
        self.inner
            .forget_slot_if_idle(&self.owner_id, &self.name, 1);
    }
}

impl LockManager {
    /// Starts building a manager.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }

    pub(crate) fn from_parts(config: Config, nodes: Vec<Arc<dyn NodeOps>>) -> Self {
        let clients: Vec<redis::Client> = nodes.iter().filter_map(|n| n.pubsub_client()).collect();
        let notifier = Notifier::start(nodes.len(), clients, config.required);
        let inner = Arc::new_cyclic(|weak: &Weak<Inner>| Inner {
            notifier,
            background: Arc::default(),
            watchdog: Watchdog::new(weak.clone(), config.renew_interval),
            config,
            nodes,
            client_id: new_client_id(),
            slots: Mutex::new(HashMap::new()),
        });
        Self { inner }
    }

    /// The validated configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The node addresses, in the builder's order, without credentials.
    #[must_use]
    pub fn nodes(&self) -> Vec<String> {
        self.inner
            .nodes
            .iter()
            .map(|n| n.addr().to_owned())
            .collect()
    }

    /// A new explicit owner, to share a lock between tasks.
    #[must_use]
    pub fn new_owner(&self) -> Owner {
        Owner::explicit(&self.inner.client_id)
    }

    /// The owner of the enclosing [`Owner::scope`] (or
    /// [`LockGuard::run`]), if any: acquisitions that name no owner act as
    /// it. Outside a scope, each acquisition is an owner of its own.
    #[must_use]
    pub fn current_owner(&self) -> Option<Owner> {
        Owner::scoped(&self.inner.client_id)
    }

    /// A configurable acquisition of `name`.
    pub fn request(&self, name: impl Into<String>) -> LockRequest<'_> {
        LockRequest {
            manager: self,
            name: name.into(),
            owner: None,
            lease: None,
            wait: Wait::Forever,
        }
    }

    /// Waits until `name` is held, then keeps it renewed until released.
    ///
    /// # Errors
    ///
    /// See [`LockRequest::acquire`]; contention and outages are retried, so
    /// this returns errors only for bad input, wrong-type keys and re-entry of
    /// a hold that is no longer valid.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future rolls back its partial grants at once.
    pub async fn lock(&self, name: &str) -> Result<LockGuard, Error> {
        self.request(name).acquire().await
    }

    /// Tries to take `name`, waiting at most `wait`; renewed while held.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] (with the holder's smallest PTTL) or
    /// [`Error::Unavailable`] once `wait` has passed; see
    /// [`LockRequest::acquire`] for the rest.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future rolls back its partial grants at once.
    pub async fn try_lock(&self, name: &str, wait: Duration) -> Result<LockGuard, Error> {
        self.request(name).wait(wait).acquire().await
    }

    /// Waits until `name` is held for a fixed `lease`, which is not renewed.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a zero lease or one not above the drift;
    /// see [`LockRequest::acquire`] for the rest.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future rolls back its partial grants at once.
    pub async fn lock_with_lease(&self, name: &str, lease: Duration) -> Result<LockGuard, Error> {
        self.request(name).lease(lease).acquire().await
    }

    /// Deletes `name` on every node, whoever holds it, and wakes its waiters.
    /// Returns on how many nodes a lock was deleted.
    ///
    /// An administrative break. The holder's watchdog finds the keys gone
    /// at its next renewal and declares the hold lost (it never re-creates
    /// keys missing on so many nodes that no quorum confirms the hold); a
    /// fixed-lease holder is not told before its lease ends.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad name; [`Error::Unavailable`] when a
    /// node could not be reached (the lock may survive there until its TTL).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the lock deleted on some nodes only.
    pub async fn force_unlock(&self, name: &str) -> Result<usize, Error> {
        check_name(name)?;
        let inner = &self.inner;
        let keys = Arc::new(Keys::new(&inner.config.key_prefix, name));
        let mut fan = FanOut::start(inner.nodes.len(), inner.config.node_timeout, |i| {
            inner.nodes[i].force_release(&keys)
        });
        fan.until(|_| false).await;
        let mut deleted = 0;
        let mut failures = Vec::new();
        for (i, r) in fan.replies().iter().enumerate() {
            match r {
                Some(Ok(true)) => deleted += 1,
                Some(Ok(false)) => {}
                Some(Err(e)) => failures.push(failure(&inner.nodes, i, e)),
                None => {}
            }
        }
        if failures.is_empty() {
            Ok(deleted)
        } else {
            Err(Error::Unavailable {
                name: name.to_owned(),
                failures,
                required: inner.nodes.len(),
                granted: deleted,
            })
        }
    }

    /// What every node holds for `name`: holder, hold count, PTTL and fence.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad name. Node failures are reported per
    /// node inside the status, not as an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn status(&self, name: &str) -> Result<LockStatus, Error> {
        check_name(name)?;
        let inner = &self.inner;
        let keys = Arc::new(Keys::new(&inner.config.key_prefix, name));
        let mut fan = FanOut::start(inner.nodes.len(), inner.config.node_timeout, |i| {
            inner.nodes[i].status(&keys)
        });
        fan.until(|_| false).await;
        let (replies, _) = fan.into_parts();
        let nodes = replies
            .into_iter()
            .enumerate()
            .map(|(i, r)| NodeStatus {
                node: i,
                addr: inner.nodes[i].addr().to_owned(),
                maxmemory_policy: inner.nodes[i].maxmemory_policy(),
                state: match r {
                    Some(Ok(s)) => Ok(s),
                    Some(Err(e)) => Err(failure(&inner.nodes, i, &e)),
                    None => Err(failure(
                        &inner.nodes,
                        i,
                        &crate::error::NodeError::timeout(),
                    )),
                },
            })
            .collect();
        Ok(LockStatus {
            name: name.to_owned(),
            required: inner.config.required,
            nodes,
        })
    }

    /// Waits until the background work started so far has finished: releases
    /// of dropped guards, rollbacks of cancelled acquisitions, and calls to
    /// nodes that answered after the outcome was decided. Each piece is
    /// bounded by the node timeout. Call it before the process exits, so
    /// that nothing is left on the nodes to expire with its lease.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the work goes on in the background.
    pub async fn flush(&self) {
        self.inner.background.idle().await;
    }

    /// Counters of the waiters' pub/sub connections.
    #[must_use]
    pub fn pubsub_stats(&self) -> crate::wait::PubSubStats {
        self.inner.notifier.stats()
    }

    /// Watchdog counters since the manager was built.
    #[must_use]
    pub fn watchdog_stats(&self) -> crate::watchdog::WatchdogStats {
        self.inner.watchdog.stats()
    }
}

/// What every node holds for one lock; see [`LockManager::status`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock name.
    pub name: String,
    /// Grants a holder needs.
    pub required: usize,
    /// One entry per node, in the builder's order.
    pub nodes: Vec<NodeStatus>,
}

impl LockStatus {
    /// The owner holding the lock on at least `required` nodes, if any.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for s in &self.nodes {
            if let Ok(NodeLockState {
                holder: Some(h), ..
            }) = &s.state
            {
                *counts.entry(h.as_str()).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .find(|(_, c)| *c >= self.required)
            .map(|(h, _)| h)
    }
}

/// One node's view of a lock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeStatus {
    /// Index of the node.
    pub node: usize,
    /// Address, without credentials.
    pub addr: String,
    /// What it holds, or why it could not tell.
    pub state: Result<NodeLockState, NodeFailure>,
    /// The node's `maxmemory-policy`; anything but `noeviction` can evict a
    /// held lock. `None` when the node would not say.
    pub maxmemory_policy: Option<String>,
}

/// Where a hold stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HoldState {
    /// Held (valid until [`LockGuard::valid_until`]).
    Held,
    /// Released by its last guard.
    Released,
    /// No longer held: the watchdog could not confirm it on a quorum in
    /// time, or its validity ran out (a fixed lease, or renewal that did not
    /// land before [`LockGuard::valid_until`]). Never later than
    /// `valid_until`.
    Lost,
    /// Renewal stopped at `max_hold`; it stays valid until `valid_until`,
    /// then it is `Lost`.
    MaxHoldReached,
}

pub(crate) struct HoldInner {
    pub(crate) count: u32,
    pub(crate) valid_until: Instant,
    pub(crate) granted: Vec<bool>,
    /// A renewal batch that includes this hold is on the wire.
    pub(crate) renewing: bool,
}

/// The shared state of one held lock, behind all its guards.
pub(crate) struct Hold {
    pub(crate) inner: Arc<Inner>,
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
    pub(crate) max_hold_reached: std::sync::atomic::AtomicBool,
    pub(crate) token: u64,
    pub(crate) acquired_at: Instant,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) state: Mutex<HoldInner>,
    /// The phase, watched by `lost()` waiters.
    pub(crate) phase: tokio::sync::watch::Sender<HoldState>,
    /// Woken when a renewal batch that included this hold completes.
    pub(crate) renew_done: tokio::sync::Notify,
}

impl Hold {
    /// The phase, with the validity deadline applied: a live hold whose
    /// `valid_until` has passed is lost from that instant on, whatever the
    /// watchdog is doing.
    pub(crate) fn phase(&self) -> HoldState {
        let stored = self.stored_phase();
        if is_live(stored)
            && clock::now() >= lapses(lock(&self.state).valid_until)
            && !crate::watchdog::renew_lapsed()
        {
            self.transition(HoldState::Lost);
            return self.stored_phase();
        }
        stored
    }

    /// The phase as last recorded, without checking the deadline (for code
    /// that holds the state lock and checks `valid_until` itself).
    pub(crate) fn stored_phase(&self) -> HoldState {
        *self.phase.borrow()
    }

    /// Still usable for re-entry: not released and not lost.
    fn is_live(&self) -> bool {
        is_live(self.phase())
    }

    /// Moves from a live phase to `to`; returns whether it moved.
    pub(crate) fn transition(&self, to: HoldState) -> bool {
        self.phase.send_if_modified(|p| {
            if is_live(*p) && *p != to {
                *p = to;
                true
            } else {
                false
            }
        })
    }

    /// Waits until the phase satisfies `done`, and returns it. Wakes at the
    /// validity deadline too, so a hold that nobody renews in time is seen
    /// lost at `valid_until`, not when the watchdog next looks.
    async fn wait_phase(&self, done: impl Fn(HoldState) -> bool) -> HoldState {
        let mut rx = self.phase.subscribe();
        loop {
            let phase = self.phase();
            if done(phase) {
                return phase;
            }
            let lapse = lapses(lock(&self.state).valid_until);
            // Past the deadline yet still live: only the simulator's
            // mutation that ignores deadlines gets here; wait for a change.
            let deadline = (lapse > clock::now()).then(|| clock::to_timer(lapse));
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        // The sender lives in this hold: unreachable.
                        return self.phase();
                    }
                }
                () = sleep_until_some(deadline) => {}
            }
        }
    }

    /// Gives up one level: returns the levels left, and whether the hold was
    /// live (not lost, within its validity) when it did. The last level
    /// marks the hold released, under the state lock, so that the watchdog
    /// either sees the release or has marked a renewal that the release
    /// waits for.
    fn leave_level(&self) -> (u32, bool) {
        let live = self.is_live();
        let mut s = lock(&self.state);
        s.count = s.count.saturating_sub(1);
        if s.count == 0 {
            self.transition(HoldState::Released);
        }
        (s.count, live)
    }

    /// Sends the release of all but `left` levels to every node.
    pub(crate) async fn release_on_nodes(&self, left: u32) -> ReleaseTally {
        self.inner
            .release_on_nodes(&self.keys, &self.holder_id, left, self.lease, self.token)
            .await
    }

    /// The error for an operation on a hold that is no longer live.
    fn gone(&self) -> Error {
        let name = self.keys.name.to_string();
        let max_hold = self.max_hold_reached.load(Ordering::Acquire);
        if self.renewed && !max_hold && self.stored_phase() == HoldState::Lost {
            Error::Lost { name }
        } else {
            Error::Expired { name }
        }
    }

    /// Waits until no renewal batch that includes this hold is in flight, so
    /// that a release always reaches a node after the renewal.
    ///
    /// Bounded: a renewal batch ends within its timeout; if the watchdog was
    /// stopped halfway (its runtime shut down), this gives up after that.
    async fn wait_renewal_done(&self) {
        let limit =
            crate::watchdog::renew_timeout(&self.inner.config, self.inner.watchdog.registered())
                .saturating_add(self.inner.config.node_timeout)
                .saturating_mul(2);
        let wait = async {
            loop {
                let notified = self.renew_done.notified();
                if !lock(&self.state).renewing {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
    }
}

/// tokio's timers fire on whole milliseconds, rounding up: a hold counts as
/// lapsed this much before `valid_until`, so that the loss signal, woken by
/// such a timer, fires no later than `valid_until`.
const TIMER_SLACK: Duration = Duration::from_millis(1);

/// Sleeps until `at`, or forever without one.
async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// When a hold valid until `valid_until` counts as lapsed.
pub(crate) fn lapses(valid_until: Instant) -> Instant {
    valid_until.checked_sub(TIMER_SLACK).unwrap_or(valid_until)
}

/// Held or stopped at `max_hold`: usable, until its validity ends.
fn is_live(phase: HoldState) -> bool {
    matches!(phase, HoldState::Held | HoldState::MaxHoldReached)
}

impl Drop for Hold {
    fn drop(&mut self) {
        self.inner
            .forget_slot_if_idle(&self.owner.shared_id(), &self.keys.name, 0);
    }
}

impl Inner {
    fn slot(&self, owner: &Owner, name: &Arc<str>) -> Arc<Slot> {
        let mut slots = lock(&self.slots);
        Arc::clone(
            slots
                .entry((owner.shared_id(), Arc::clone(name)))
                .or_insert_with(|| {
                    Arc::new(Slot {
                        gate: tokio::sync::Mutex::new(()),
                        hold: Mutex::new(Weak::new()),
                    })
                }),
        )
    }

    /// How many (owner, name) slots are tracked.
    #[cfg(test)]
    pub(crate) fn slot_count(&self) -> usize {
        lock(&self.slots).len()
    }

    /// Drops the slot of (`owner`, `name`) if nobody uses it any more
    /// besides the map and the caller's `own` references.
    fn forget_slot_if_idle(&self, owner: &Arc<str>, name: &Arc<str>, own: usize) {
        let mut slots = lock(&self.slots);
        let key = (Arc::clone(owner), Arc::clone(name));
        let idle = slots.get(&key).is_some_and(|slot| {
            Arc::strong_count(slot) == 1 + own && lock(&slot.hold).strong_count() == 0
        });
        if idle {
            slots.remove(&key);
        }
    }

    fn drift(&self, lease: Duration) -> Duration {
        self.config.drift(lease)
    }

    /// The per-node timeout of a call made under `lease`.
    fn call_timeout(&self, lease: Duration) -> Duration {
        self.config
            .node_timeout
            .min(lease.saturating_sub(self.drift(lease)))
    }

    async fn acquire_fresh(
        self: &Arc<Self>,
        keys: Arc<Keys>,
        owner: Owner,
        lease: Duration,
        renew: bool,
        wait: Wait,
    ) -> Result<Arc<Hold>, Error> {
        let start = clock::now();
        // A wait too long to represent is a wait without end.
        let deadline = match wait {
            Wait::Forever => None,
            Wait::Up(w) => start.checked_add(w),
        };
        let mut attempt: u32 = 0;
        let mut waiter: Option<Waiter> = None;
        // Local fairness: while other local waiters are queued for this lock,
        // a newcomer queues behind them instead of barging in.
        if wait != Wait::Up(Duration::ZERO) {
            waiter = self.notifier.join_if_queued(&keys.channel);
        }
        let mut deferred = waiter.as_ref().is_some_and(|w| !w.is_head());
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
                match self.attempt(&keys, &holder_id, lease, 1, 0, attempt).await {
                    Ok(won) => {
                        if let Some(w) = waiter.take() {
                            w.acquired(lease);
                        }
                        return Ok(self.hold(&keys, &owner, &holder_id, lease, renew, won));
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
            attempt = attempt.saturating_add(1);
            let Some(w) = waiter.as_mut() else {
                // First miss: subscribe to the release channel, then try once
                // more, so a release that happened before the subscription
                // took effect is not missed.
                let w = self.notifier.waiter(&keys.channel);
                if let Some(pttl) = err.as_ref().and_then(Error::min_pttl) {
                    w.holder_seen(pttl);
                }
                let limit = remaining.map_or(self.config.node_timeout, |r| {
                    r.min(self.config.node_timeout)
                });
                w.confirmed(limit).await;
                waiter = Some(w);
                continue;
            };
            let delay = match &err {
                Some(e) => self.fallback(e, attempt, w.covered(), remaining),
                // Queued behind local waiters: our bell rings when our turn
                // comes; until then, sleep no longer than the holder's key
                // is known to last (an expiry publishes nothing), or poll if
                // release messages are not covered.
                None if w.covered() => {
                    let until_expiry = w.holder_left().unwrap_or(lease);
                    remaining.map_or(until_expiry, |r| r.min(until_expiry))
                }
                None => self.config.backoff.delay(attempt),
            };
            let timer_deadline = remaining.and_then(|r| tokio::time::Instant::now().checked_add(r));
            let woke = w.wait(delay, timer_deadline).await;
            deferred = false;
            debug!(lock = %keys.name, ?woke, "waiter woke");
        }
    }

    fn hold(
        self: &Arc<Self>,
        keys: &Arc<Keys>,
        owner: &Owner,
        holder_id: &Arc<str>,
        lease: Duration,
        renew: bool,
        won: Won,
    ) -> Arc<Hold> {
        let hold = Arc::new(Hold {
            inner: Arc::clone(self),
            keys: Arc::clone(keys),
            owner: owner.clone(),
            holder_id: Arc::clone(holder_id),
            lease,
            renewed: renew,
            max_hold_reached: std::sync::atomic::AtomicBool::new(false),
            token: won.token,
            acquired_at: won.started,
            max_hold: if renew { self.config.max_hold } else { None },
            state: Mutex::new(HoldInner {
                count: 1,
                valid_until: won.valid_until,
                granted: won.granted,
                renewing: false,
            }),
            phase: tokio::sync::watch::Sender::new(HoldState::Held),
            renew_done: tokio::sync::Notify::new(),
        });
        won.late.finish(self, &hold);
        if renew {
            self.watchdog.register(&hold);
        }
        hold
    }

    /// How long a waiter sleeps when no release message comes. With release
    /// messages covered, until the holder's key would expire (so a lost
    /// message costs at most one TTL); without, the polling backoff. Never
    /// past the caller's deadline; jittered.
    fn fallback(
        &self,
        err: &Error,
        attempt: u32,
        covered: bool,
        remaining: Option<Duration>,
    ) -> Duration {
        let backoff = self.config.backoff.delay(attempt);
        let jitter = Duration::from_micros(crate::rng::up_to(2_000));
        let delay = match err.min_pttl() {
            Some(pttl) if covered => pttl + jitter,
            Some(pttl) => backoff.min(pttl + jitter),
            None => backoff,
        };
        remaining.map_or(delay, |r| delay.min(r))
    }

    /// One fan-out of the acquire script. On success the grants belong to the
    /// caller; on failure (or if dropped) they are rolled back.
    async fn attempt(
        self: &Arc<Self>,
        keys: &Arc<Keys>,
        holder_id: &Arc<str>,
        lease: Duration,
        count: u32,
        prior_count: u32,
        attempt: u32,
    ) -> Result<Won, Error> {
        let span = tracing::debug_span!(
            "quorumlock.acquire",
            lock = %keys.name,
            holder = %holder_id,
            attempt,
            count,
            granted = field::Empty,
            taken = field::Empty,
            failed = field::Empty,
            elapsed_us = field::Empty,
            validity_ms = field::Empty,
            outcome = field::Empty,
        );
        async {
            let required = self.config.required;
            let start = clock::now();
            let mut rollback = Rollback::new(self, keys, holder_id, prior_count, lease);
            let timeout = self.call_timeout(lease);
            let mut fan = FanOut::start(self.nodes.len(), timeout, |i| {
                self.nodes[i].acquire(keys, holder_id, lease, count)
            });
            fan.until(|f| Tally::of(f.replies()).decide(required) != Decision::Open)
                .await;
            let elapsed = clock::now().saturating_duration_since(start);
            let tally = Tally::of(fan.replies());
            let span = tracing::Span::current();
            span.record("granted", tally.granted);
            span.record("taken", tally.taken);
            span.record("failed", tally.failed);
            span.record(
                "elapsed_us",
                u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            );
            for (i, r) in fan.replies().iter().enumerate() {
                match r {
                    Some(Ok(Grant::Granted(t))) => debug!(node = i, fence = t, "granted"),
                    Some(Ok(Grant::Taken(p))) => debug!(node = i, pttl = ?p, "taken"),
                    Some(Err(e)) => debug!(node = i, kind = %e.kind, error = %e.message, "failed"),
                    None => debug!(node = i, "pending"),
                }
            }
            let decision = tally.decide(required);
            if decision != Decision::Won {
                span.record("outcome", "missed");
                let (replies, _) = fan.into_parts();
                rollback.run(&replies).await;
                return Err(self.missed(keys, &replies, tally));
            }
            let (replies, rest) = fan.into_parts();
            let mut granted = vec![false; replies.len()];
            let mut token = 0;
            for (i, r) in replies.iter().enumerate() {
                if let Some(Ok(Grant::Granted(t))) = r {
                    granted[i] = true;
                    token = token.max(*t);
                }
            }
            let fenced = if prior_count == 0 {
                self.fence_quorum(keys, &replies, token, start, lease).await
            } else {
                Ok(())
            };
            let now = clock::now();
            match (
                fenced,
                quorum::valid_until(start, now, lease, self.drift(lease)),
            ) {
                (Ok(()), Some(valid_until)) => {
                    rollback.disarm();
                    span.record(
                        "validity_ms",
                        u64::try_from(valid_until.saturating_duration_since(now).as_millis())
                            .unwrap_or(u64::MAX),
                    );
                    span.record("outcome", "won");
                    Ok(Won {
                        token,
                        valid_until,
                        started: start,
                        granted,
                        late: LateGrants { rest },
                    })
                }
                (Err(failures), _) => {
                    span.record("outcome", "fence quorum missed");
                    rollback.run(&replies).await;
                    Err(Error::Unavailable {
                        name: keys.name.to_string(),
                        failures,
                        required,
                        granted: tally.granted,
                    })
                }
                (Ok(()), None) => {
                    span.record("outcome", "validity exhausted");
                    rollback.run(&replies).await;
                    Err(Error::ValidityExhausted {
                        name: keys.name.to_string(),
                        elapsed: now.saturating_duration_since(start),
                        lease,
                    })
                }
            }
        }
        .instrument(span)
        .await
    }

    /// Hands out `token` only once a quorum of nodes is known to have a fence
    /// counter of at least `token`: the granting nodes that returned it, plus
    /// lagging nodes raised to it now. Every later quorum then overlaps that
    /// set in a node whose next INCR is above `token`. Returns the failures
    /// when no quorum could be shown within the lease's validity.
    async fn fence_quorum(
        &self,
        keys: &Arc<Keys>,
        replies: &[Option<Result<Grant, crate::error::NodeError>>],
        token: u64,
        start: Instant,
        lease: Duration,
    ) -> Result<(), Vec<NodeFailure>> {
        let required = self.config.required;
        let at_token: Vec<bool> = replies
            .iter()
            .map(|r| matches!(r, Some(Ok(Grant::Granted(t))) if *t >= token))
            .collect();
        if at_token.iter().filter(|b| **b).count() >= required {
            return Ok(());
        }
        #[cfg(test)]
        if crate::sim::mutation::active(crate::sim::mutation::Mutation::SingleTryFence) {
            let calls: Vec<_> = (0..self.nodes.len())
                .filter(|i| matches!(replies[*i], Some(Ok(Grant::Granted(t))) if t < token))
                .map(|i| self.nodes[i].raise_fence(keys, token))
                .collect();
            self.background.spawn(async move {
                for call in calls {
                    let _ = call.await;
                }
            });
            return Ok(());
        }
        let valid_for = quorum::validity(
            lease,
            clock::now().saturating_duration_since(start),
            self.drift(lease),
        )
        .unwrap_or_default();
        let timeout = self.call_timeout(lease).min(valid_for);
        let mut fan = FanOut::start(self.nodes.len(), timeout, |i| {
            if at_token[i] {
                Box::pin(std::future::ready(Ok(token)))
            } else {
                self.nodes[i].raise_fence(keys, token)
            }
        });
        let raised = |f: &FanOut<u64>| {
            let (mut done, mut pending) = (0, 0);
            for r in f.replies() {
                match r {
                    Some(Ok(c)) if *c >= token => done += 1,
                    None => pending += 1,
                    _ => {}
                }
            }
            (done, pending)
        };
        fan.until(|f| {
            let (done, pending) = raised(f);
            done >= required || done + pending < required
        })
        .await;
        let (done, _) = raised(&fan);
        let (replies, rest) = fan.into_parts();
        if !rest.is_empty() {
            self.background.spawn(rest.for_each(|_, _| {}));
        }
        if done >= required {
            return Ok(());
        }
        debug!(lock = %keys.name, token, done, required, "fence counters could not be raised on a quorum");
        Err(replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Err(e)) => Some(failure(&self.nodes, i, e)),
                _ => None,
            })
            .collect())
    }

    fn missed(
        &self,
        keys: &Keys,
        replies: &[Option<Result<Grant, crate::error::NodeError>>],
        tally: Tally,
    ) -> Error {
        let name = keys.name.to_string();
        let mut taken = Vec::new();
        let mut failures = Vec::new();
        for (i, r) in replies.iter().enumerate() {
            match r {
                Some(Ok(Grant::Taken(pttl))) => taken.push(TakenNode {
                    node: i,
                    addr: self.nodes[i].addr().to_owned(),
                    pttl: *pttl,
                }),
                Some(Err(e)) => failures.push(failure(&self.nodes, i, e)),
                _ => {}
            }
        }
        let wrong: Vec<NodeFailure> = failures
            .iter()
            .filter(|f| f.kind == NodeErrorKind::WrongType)
            .cloned()
            .collect();
        if !wrong.is_empty() {
            return Error::WrongType {
                name,
                failures: wrong,
            };
        }
        if taken.is_empty() {
            return Error::Unavailable {
                name,
                failures,
                required: self.config.required,
                granted: tally.granted,
            };
        }
        let min_pttl = taken.iter().filter_map(|t| t.pttl).min();
        Error::Contended {
            name,
            taken,
            min_pttl,
            failures,
            required: self.config.required,
            granted: tally.granted,
        }
    }

    async fn reenter(self: &Arc<Self>, hold: Arc<Hold>) -> Result<LockGuard, Error> {
        if !hold.is_live() {
            return Err(hold.gone());
        }
        // The level is taken at once, as a guard: a release of another level
        // meanwhile lowers the same count, and if this future is dropped (or
        // the hold is gone when it ends), dropping the guard gives the level
        // back like any release.
        let count = {
            let mut s = lock(&hold.state);
            s.count = s.count.saturating_add(1);
            s.count
        };
        let guard = LockGuard::new(Arc::clone(&hold));
        match self
            .attempt(&hold.keys, &hold.holder_id, hold.lease, count, count - 1, 0)
            .await
        {
            Ok(won) => {
                let mut s = lock(&hold.state);
                s.valid_until = s.valid_until.max(won.valid_until);
                for (g, w) in s.granted.iter_mut().zip(&won.granted) {
                    *g |= *w;
                }
                drop(s);
                won.late.finish(self, &hold);
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

    /// Sends the release script to every node and tallies the answers.
    pub(crate) async fn release_on_nodes(
        &self,
        keys: &Arc<Keys>,
        holder_id: &Arc<str>,
        count: u32,
        lease: Duration,
        token: u64,
    ) -> ReleaseTally {
        let required = self.config.required;
        let mut fan = FanOut::start(self.nodes.len(), self.call_timeout(lease), |i| {
            self.nodes[i].release(keys, holder_id, count, lease, token)
        });
        // Decided once a quorum released, or can no longer release.
        fan.until(|f| {
            let (mut released, mut pending) = (0, 0);
            for r in f.replies() {
                match r {
                    Some(Ok(Released::Deleted | Released::Lowered)) => released += 1,
                    None => pending += 1,
                    _ => {}
                }
            }
            released >= required || released + pending < required
        })
        .await;
        let (replies, rest) = fan.into_parts();
        if !rest.is_empty() {
            // Let the stragglers finish so every node gets the release.
            self.background.spawn(rest.for_each(|_, _| {}));
        }
        let mut t = ReleaseTally::default();
        for (i, r) in replies.iter().enumerate() {
            match r {
                Some(Ok(Released::Deleted | Released::Lowered)) => t.released += 1,
                Some(Ok(Released::Missing)) => {}
                Some(Ok(Released::OtherOwner)) => t.other += 1,
                Some(Err(e)) => t.failures.push(failure(&self.nodes, i, e)),
                None => t.pending += 1,
            }
        }
        t
    }
}

#[derive(Default)]
pub(crate) struct ReleaseTally {
    released: usize,
    other: usize,
    pending: usize,
    failures: Vec<NodeFailure>,
}

/// A successful fan-out.
struct Won {
    token: u64,
    valid_until: Instant,
    started: Instant,
    granted: Vec<bool>,
    late: LateGrants,
}

/// Calls still in flight when the quorum was reached: late grants are
/// recorded on the hold. A release goes to every node, and on each node's
/// connection it runs after the acquire, so a late grant is released with
/// the lock even if it lands after the hold is gone.
struct LateGrants {
    rest: quorum::Stragglers<Grant>,
}

impl LateGrants {
    fn finish(self, inner: &Arc<Inner>, hold: &Arc<Hold>) {
        if self.rest.is_empty() {
            return;
        }
        let weak = Arc::downgrade(hold);
        inner.background.spawn(self.rest.for_each(move |i, r| {
            if let (Ok(Grant::Granted(_)), Some(hold)) = (r, weak.upgrade()) {
                debug!(node = i, "late grant");
                if let Some(g) = lock(&hold.state).granted.get_mut(i) {
                    *g = true;
                }
            }
        }));
    }
}

/// Undoes the grants of an acquisition that failed or was dropped.
///
/// Armed from the start of the fan-out: if the acquiring future is dropped,
/// `Drop` sends the rollback in the background. A node that answered "taken"
/// holds nothing of ours and is skipped; every other node, including those
/// that timed out or are still in flight, gets it. Commands on one node's
/// connection run in order, so the rollback lands after the acquire.
struct Rollback {
    inner: Arc<Inner>,
    keys: Arc<Keys>,
    holder_id: Arc<str>,
    restore: u32,
    lease: Duration,
    armed: bool,
}

impl Rollback {
    fn new(
        inner: &Arc<Inner>,
        keys: &Arc<Keys>,
        holder_id: &Arc<str>,
        restore: u32,
        lease: Duration,
    ) -> Self {
        Self {
            inner: Arc::clone(inner),
            keys: Arc::clone(keys),
            holder_id: Arc::clone(holder_id),
            restore,
            lease,
            armed: true,
        }
    }

    fn disarm(&mut self) {
        self.armed = false;
    }

    fn calls(
        &self,
        skip: &[bool],
    ) -> Vec<(
        usize,
        futures::future::BoxFuture<'static, Result<Released, crate::error::NodeError>>,
    )> {
        let lease = self.lease;
        (0..self.inner.nodes.len())
            .filter(|i| !skip.get(*i).copied().unwrap_or(false))
            .map(|i| {
                (
                    i,
                    self.inner.nodes[i].release(
                        &self.keys,
                        &self.holder_id,
                        self.restore,
                        lease,
                        0,
                    ),
                )
            })
            .collect()
    }

    /// Rolls back and waits for it (each node for at most the node
    /// timeout): a node that answered "taken" holds nothing of ours and is
    /// skipped. Waiting keeps a retry from finding this attempt's grants
    /// still in place and mistaking them for another holder's; a failed
    /// last attempt therefore returns up to one node timeout after its wait.
    async fn run(mut self, replies: &[Option<Result<Grant, crate::error::NodeError>>]) {
        // Armed until every call is answered: dropped halfway, `Drop` sends
        // the rollback again in the background.
        #[cfg(test)]
        if crate::sim::mutation::active(crate::sim::mutation::Mutation::NoRollback) {
            self.armed = false;
            return;
        }
        let skip: Vec<bool> = replies
            .iter()
            .map(|r| matches!(r, Some(Ok(Grant::Taken(_)))))
            .collect();
        let calls = self.calls(&skip);
        let timeout = self.inner.config.node_timeout;
        let results = futures::future::join_all(
            calls
                .into_iter()
                .map(|(i, c)| async move { (i, tokio::time::timeout(timeout, c).await) }),
        )
        .await;
        for (i, r) in results {
            match r {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => debug!(node = i, error = %e.message, "rollback failed"),
                Err(_) => debug!(node = i, "rollback timed out"),
            }
        }
        self.armed = false;
    }

    /// Sends the release to every node, as background work.
    fn send(&self, done: &'static str) {
        #[cfg(test)]
        if crate::sim::mutation::active(crate::sim::mutation::Mutation::NoRollback) {
            return;
        }
        let calls = self.calls(&[]);
        let timeout = self.inner.config.node_timeout;
        let name = Arc::clone(&self.keys.name);
        let spawned = self.inner.background.spawn(async move {
            let results = futures::future::join_all(
                calls
                    .into_iter()
                    .map(|(i, c)| async move { (i, tokio::time::timeout(timeout, c).await) }),
            )
            .await;
            for (i, r) in results {
                match r {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => debug!(node = i, error = %e.message, "rollback failed"),
                    Err(_) => debug!(node = i, "rollback timed out"),
                }
            }
            debug!(lock = %name, "{done}");
        });
        if !spawned {
            warn!(lock = %self.keys.name, "no runtime to roll back on; grants expire with the lease");
        }
    }
}

impl Drop for Rollback {
    fn drop(&mut self) {
        if self.armed {
            self.send("rolled back a cancelled acquisition");
        }
    }
}

/// Proof of holding a lock, one level of it.
///
/// Each successful `lock` returns a guard; a re-entry by the same owner
/// returns another guard of the same hold with a higher
/// [`hold_count`](Self::hold_count). Release each with
/// [`release`](Self::release). Dropping a guard without releasing it
/// releases its level in the background.
#[must_use = "dropping the guard releases the lock in the background at once"]
pub struct LockGuard {
    hold: Arc<Hold>,
    done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("owner", &self.hold.owner)
            .field("token", &self.hold.token)
            .field("hold_count", &self.hold_count())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    fn new(hold: Arc<Hold>) -> Self {
        Self { hold, done: false }
    }

    /// The lock name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.hold.keys.name
    }

    /// The owner holding it.
    #[must_use]
    pub fn owner(&self) -> &Owner {
        &self.hold.owner
    }

    /// The id this hold is written under in the lock hash (and shown by
    /// [`LockManager::status`]): the owner's id plus a suffix unique to the
    /// hold. Re-entries share it; a later hold of the same owner gets another.
    #[must_use]
    pub fn holder_id(&self) -> &str {
        &self.hold.holder_id
    }

    /// The fencing token: larger than every token issued for this lock
    /// before, as long as the nodes keep their fence counters (persistence
    /// with fsync; a node restarted empty loses them). Pass it to the
    /// protected resource and have it reject smaller ones. It stays the same
    /// across re-entries.
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.hold.token
    }

    /// Until when the lock is held for sure, on the local monotonic clock.
    /// The watchdog moves it forward after each renewal. From this instant
    /// on, unless renewed before it, the hold is [`HoldState::Lost`].
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        clock::to_timer(lock(&self.hold.state).valid_until).into_std()
    }

    /// How many levels the owner holds (re-entries plus one).
    #[must_use]
    pub fn hold_count(&self) -> u32 {
        lock(&self.hold.state).count
    }

    /// The indexes of the nodes that granted the lock (including late grants
    /// and watchdog repairs).
    #[must_use]
    pub fn granted_nodes(&self) -> Vec<usize> {
        lock(&self.hold.state)
            .granted
            .iter()
            .enumerate()
            .filter_map(|(i, g)| g.then_some(i))
            .collect()
    }

    /// Where the hold stands.
    #[must_use]
    pub fn state(&self) -> HoldState {
        self.hold.phase()
    }

    /// Held, and still within its validity.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.hold.is_live()
    }

    /// Whether the lock is lost: the watchdog could not confirm it, or its
    /// validity ran out (see [`HoldState::Lost`]).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.hold.phase() == HoldState::Lost
    }

    /// Resolves when the lock is lost, no later than
    /// [`valid_until`](Self::valid_until): the watchdog's verdict, or the
    /// validity running out without a renewal (a stalled node, a fixed
    /// lease), whichever comes first. Never resolves while it is held or
    /// after a plain release.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.hold
            .wait_phase(|p| matches!(p, HoldState::Lost | HoldState::Released))
            .await;
        if self.hold.stored_phase() == HoldState::Released {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when the lock stops being renewed for any reason other than
    /// release: lost (no later than `valid_until`), or `max_hold` reached.
    /// Returns the state.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn renewal_stopped(&self) -> HoldState {
        self.hold.wait_phase(stopped).await
    }

    /// Releases this level: the lock stays held while other levels remain;
    /// the last release deletes it on every node and wakes waiters.
    ///
    /// Returns as soon as a quorum confirmed the release.
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`] if the watchdog had found it lost;
    /// - [`Error::Expired`] if it had already expired (locally or on the nodes);
    /// - [`Error::NotHeld`] if another owner holds it now;
    /// - [`Error::Unavailable`] if too many nodes failed to confirm; the keys
    ///   expire with the lease there.
    ///
    /// In every case the hold is released locally and renewal has stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. The local release happens before the first await, and
    /// the node calls of the last level run as background work: dropping the
    /// future at any point still releases on every node (see
    /// [`LockManager::flush`]). Dropping the release of a nested level may
    /// leave the nodes' count one level high until the next renewal
    /// converges it; the lock is still deleted by the last release.
    pub async fn release(mut self) -> Result<(), Error> {
        self.done = true;
        let hold = Arc::clone(&self.hold);
        let (left, live) = hold.leave_level();
        if left > 0 {
            if !live {
                return Err(hold.gone());
            }
            // A nested level: converge the nodes' counts; errors are traced
            // and the watchdog converges them on its next tick.
            let t = hold.release_on_nodes(left).await;
            if !t.failures.is_empty() {
                debug!(lock = %hold.keys.name, failed = t.failures.len(), "lowering the hold count failed on some nodes");
            }
            return Ok(());
        }
        // The last level. The node calls run as background work, so that
        // dropping this future at any point still releases on every node.
        let work = Arc::clone(&hold);
        let (tx, rx) = tokio::sync::oneshot::channel();
        hold.inner.background.spawn(async move {
            work.wait_renewal_done().await;
            let _ = tx.send(work.release_on_nodes(0).await);
        });
        if !live {
            // Nothing left to wait for: report now, clean up in the background.
            return Err(hold.gone());
        }
        let Ok(t) = rx.await else {
            // The runtime is shutting down: the keys expire with the lease.
            return Err(hold.gone());
        };
        let name = hold.keys.name.to_string();
        let required = hold.inner.config.required;
        if t.released >= required {
            return Ok(());
        }
        if t.released + t.failures.len() + t.pending >= required {
            // The nodes that did not answer could have completed the quorum.
            return Err(Error::Unavailable {
                name,
                failures: t.failures,
                required,
                granted: t.released,
            });
        }
        // Enough nodes answered that the lock was no longer ours.
        Err(if t.other > 0 && t.released == 0 {
            Error::NotHeld { name }
        } else {
            Error::Expired { name }
        })
    }

    /// Runs `f` while holding the lock, then releases it.
    ///
    /// `f` gets a token that fires if the lock is lost (or stops being
    /// renewed at `max_hold`); stop touching the resource when it fires. If
    /// the lock is lost before `f` returns (no later than its validity
    /// ends), `f` is dropped and the result is [`Error::Lost`] (or
    /// [`Error::MaxHoldReached`]).
    ///
    /// `f` runs in the guard owner's [`Owner::scope`]: locks it takes that
    /// name no owner re-enter this hold (and others of the same owner).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] or [`Error::MaxHoldReached`] as above; errors of the
    /// final release are ignored when `f` completed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `f` and the guard, which releases the lock
    /// in the background.
    pub async fn run<F, Fut, T>(self, f: F) -> Result<T, Error>
    where
        F: FnOnce(LossSignal) -> Fut,
        Fut: std::future::Future<Output = T>,
    {
        let signal = LossSignal {
            hold: Arc::clone(&self.hold),
        };
        let watch = self.renewal_stopped();
        let work = self.hold.owner.scope(f(signal));
        let outcome = tokio::select! {
            biased;
            state = watch => Err(state),
            value = work => Ok(value),
        };
        match outcome {
            Ok(value) => {
                if let Err(e) = self.release().await {
                    debug!(error = %e, "release after run");
                }
                Ok(value)
            }
            Err(state) => {
                let name = self.name().to_owned();
                let max_hold = self.hold.max_hold.unwrap_or_default();
                drop(self);
                Err(if state == HoldState::MaxHoldReached {
                    Error::MaxHoldReached { name, max_hold }
                } else {
                    Error::Lost { name }
                })
            }
        }
    }
}

/// Fires when a held lock is lost or stops being renewed; handed to the
/// closure of [`LockGuard::run`].
#[derive(Clone)]
pub struct LossSignal {
    hold: Arc<Hold>,
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("fired", &self.is_fired())
            .finish()
    }
}

/// Lost, or renewal stopped at `max_hold`.
fn stopped(phase: HoldState) -> bool {
    matches!(phase, HoldState::Lost | HoldState::MaxHoldReached)
}

impl LossSignal {
    /// Whether it has fired.
    #[must_use]
    pub fn is_fired(&self) -> bool {
        stopped(self.hold.phase())
    }

    /// Resolves when it fires: no later than the hold's validity ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn fired(&mut self) {
        self.hold.wait_phase(stopped).await;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let hold = Arc::clone(&self.hold);
        let (left, live) = hold.leave_level();
        if !live && left > 0 {
            return;
        }
        let background = Arc::clone(&hold.inner.background);
        background.spawn(async move {
            if left == 0 {
                hold.wait_renewal_done().await;
            }
            let _ = hold.release_on_nodes(left).await;
        });
    }
}
