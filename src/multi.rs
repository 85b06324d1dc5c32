//! The multi-lock: several lock names held as one, taken on each node by one
//! script that grants all of them or none (`scripts/acquire_all.lua`), and
//! counted against the quorum like a single lock.
//!
//! Once won, the set becomes one [`Hold`] per name (same holder id, same
//! validity, same granting nodes, same fencing token), so that renewal,
//! repair, loss, release and re-entry are those of single locks: the
//! watchdog renews the names together (they are registered together, so
//! one wave renews them in one pipeline per node; with more than 100 locks
//! held a set may straddle two waves or two script calls), and a later
//! `lock(name)` by the same owner re-enters that name's hold.
//!
//! Waiting: a set that is taken is retried after the configured backoff (no
//! longer than the largest PTTL the nodes reported), not on release
//! messages: a set has no single release channel.

use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tracing::debug;

use crate::acquire::{reenter, Wait};
use crate::attempt::fence_quorum;
use crate::clock;
use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure, TakenNode};
use crate::guard::LockGuard;
use crate::hold::{Acquired, Hold, OnDrop};
use crate::keys::{check_name, Keys};
use crate::manager::{Inner, LockManager, SlotUse};
use crate::node::Grant;
use crate::nodes::Nodes;
use crate::owner::Owner;
use crate::quorum::{self, Decision, FanOut, Stragglers, Tally};
use crate::rollback::Rollback;
use crate::sync::locked;

/// Most names one [`LockManager::lock_all`] may take: each name is one more
/// key in the acquire script and one more hold renewed by the watchdog.
pub const MAX_LOCK_ALL_NAMES: usize = 64;

/// The names of one set: checked (count, names, no duplicates) and sorted.
pub(crate) struct Set {
    pub(crate) keys: Arc<[Arc<Keys>]>,
    /// The names joined, for errors and traces.
    pub(crate) label: String,
}

impl Set {
    /// Checks `names`: at least one, at most [`MAX_LOCK_ALL_NAMES`], each a
    /// valid lock name, no name twice. Sorted by name.
    pub(crate) fn checked(prefix: &str, names: &[String]) -> Result<Self, Error> {
        if names.is_empty() {
            return Err(Error::invalid("lock names", "the list of names is empty"));
        }
        if names.len() > MAX_LOCK_ALL_NAMES {
            return Err(Error::invalid(
                "lock names",
                format!("{} names is more than {MAX_LOCK_ALL_NAMES}", names.len()),
            ));
        }
        let mut seen = HashSet::with_capacity(names.len());
        for name in names {
            check_name(name)?;
            if !seen.insert(name.as_str()) {
                return Err(Error::invalid(
                    "lock names",
                    format!("{name:?} is listed twice"),
                ));
            }
        }
        let mut sorted: Vec<&String> = names.iter().collect();
        sorted.sort();
        Ok(Self::of(
            sorted
                .into_iter()
                .map(|n| Arc::new(Keys::new(prefix, n)))
                .collect(),
        ))
    }

    fn of(keys: Vec<Arc<Keys>>) -> Self {
        let label = keys.iter().map(|k| &*k.name).collect::<Vec<_>>().join(", ");
        Self {
            keys: keys.into(),
            label,
        }
    }
}

/// A won fan-out of the set.
struct WonAll {
    acquired: Acquired,
    late: Stragglers<Grant>,
}

/// One fan-out of `acquire_all.lua`. On success the grants belong to the
/// caller; on failure (or if dropped) every name is rolled back on every
/// node that may hold a grant.
async fn attempt_all(
    nodes: &Arc<Nodes>,
    set: &Set,
    holder_id: &Arc<str>,
    lease: Duration,
) -> Result<WonAll, Error> {
    let required = nodes.required();
    let start = clock::now();
    // One rollback per name, armed from the start: dropped with this future,
    // each sends its release to every node in the background.
    let rollbacks: Vec<Rollback> = set
        .keys
        .iter()
        .map(|k| Rollback::new(nodes, k, holder_id, 0, lease))
        .collect();
    let timeout = nodes.call_timeout(lease);
    let mut fan = FanOut::start(nodes.len(), timeout, |i| {
        nodes.node(i).acquire_all(&set.keys, holder_id, lease, 1)
    });
    fan.until(|f| Tally::of(f.replies()).decide(required) != Decision::Open)
        .await;
    let tally = Tally::of(fan.replies());
    if tally.decide(required) != Decision::Won {
        let (replies, _) = fan.into_parts();
        roll_back(rollbacks, &replies).await;
        debug!(locks = %set.label, granted = tally.granted, "set missed");
        return Err(missed(nodes, &set.label, &replies, tally));
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
    // The set shares one counter per node: showing the largest token on a
    // quorum covers every name of the set.
    let fenced = fence_quorum(nodes, &set.keys[0], &replies, token, start, lease).await;
    let now = clock::now();
    match (
        fenced,
        quorum::valid_until(start, now, lease, nodes.drift(lease)),
    ) {
        (Ok(()), Some(valid_until)) => {
            for mut r in rollbacks {
                r.disarm();
            }
            Ok(WonAll {
                acquired: Acquired {
                    token,
                    valid_until,
                    started: start,
                    granted,
                },
                late: rest,
            })
        }
        (Err(failures), _) => {
            roll_back(rollbacks, &replies).await;
            Err(Error::Unavailable {
                name: set.label.clone(),
                failures,
                required,
                granted: tally.granted,
            })
        }
        (Ok(()), None) => {
            roll_back(rollbacks, &replies).await;
            Err(Error::ValidityExhausted {
                name: set.label.clone(),
                elapsed: now.saturating_duration_since(start),
                lease,
            })
        }
    }
}

/// Runs every name's rollback at once and waits for them.
async fn roll_back(rollbacks: Vec<Rollback>, replies: &[Option<Result<Grant, NodeError>>]) {
    futures::future::join_all(rollbacks.into_iter().map(|r| r.run(replies))).await;
}

/// Records the grants that land after the set was won on every hold of it
/// (a release goes to every node anyway, after the acquire on the same
/// connection, so a late grant is released with the set).
fn finish_late(nodes: &Nodes, late: Stragglers<Grant>, holds: &[Arc<Hold>]) {
    if late.is_empty() {
        return;
    }
    let weak: Vec<Weak<Hold>> = holds.iter().map(Arc::downgrade).collect();
    nodes.spawn(late.for_each(move |i, r| {
        if let Ok(Grant::Granted(_)) = r {
            debug!(node = i, "late grant of a set");
            for hold in weak.iter().filter_map(Weak::upgrade) {
                if let Some(g) = locked(&hold.record).granted.get_mut(i) {
                    *g = true;
                }
            }
        }
    }));
}

fn missed(
    nodes: &Nodes,
    label: &str,
    replies: &[Option<Result<Grant, NodeError>>],
    tally: Tally,
) -> Error {
    let name = label.to_owned();
    let mut taken = Vec::new();
    let mut failures = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        match r {
            Some(Ok(Grant::Taken(pttl))) => taken.push(TakenNode {
                node: i,
                addr: nodes.node(i).addr().to_owned(),
                pttl: *pttl,
            }),
            Some(Err(e)) => failures.push(nodes.failure(i, e)),
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
            required: nodes.required(),
            granted: tally.granted,
        };
    }
    let min_pttl = taken.iter().filter_map(|t| t.pttl).min();
    Error::Contended {
        name,
        taken,
        min_pttl,
        failures,
        required: nodes.required(),
        granted: tally.granted,
    }
}

/// Takes every name of `set` anew for `owner`, within `wait`: one hold per
/// name, in the set's order. `on_drop` gives each hold its drop work.
async fn fresh_all(
    inner: &Arc<Inner>,
    set: &Set,
    owner: &Owner,
    lease: Duration,
    renew: bool,
    wait: Wait,
    on_drop: impl Fn(&Arc<str>) -> OnDrop,
) -> Result<Vec<Arc<Hold>>, Error> {
    let nodes = &inner.nodes;
    let deadline = match wait {
        Wait::Forever => None,
        Wait::Up(w) => clock::now().checked_add(w),
    };
    let mut attempt_no: u32 = 0;
    loop {
        // A holder id per attempt: a late rollback of a failed attempt can
        // never touch a later one's grants.
        let holder_id = owner.holder_id();
        let err = match attempt_all(nodes, set, &holder_id, lease).await {
            Ok(won) => {
                let holds: Vec<Arc<Hold>> = set
                    .keys
                    .iter()
                    .map(|k| {
                        let acquired = Acquired {
                            token: won.acquired.token,
                            valid_until: won.acquired.valid_until,
                            started: won.acquired.started,
                            granted: won.acquired.granted.clone(),
                        };
                        Hold::new(
                            nodes,
                            k,
                            owner,
                            &holder_id,
                            lease,
                            renew,
                            acquired,
                            on_drop(&k.name),
                        )
                    })
                    .collect();
                finish_late(nodes, won.late, &holds);
                if renew {
                    for hold in &holds {
                        inner.watchdog.register(hold);
                    }
                }
                return Ok(holds);
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let remaining = deadline.map(|d| d.saturating_duration_since(clock::now()));
        if remaining == Some(Duration::ZERO) {
            return Err(err);
        }
        attempt_no = attempt_no.saturating_add(1);
        let backoff = nodes.config.backoff.delay(attempt_no);
        let jitter = Duration::from_micros(crate::rng::up_to(2_000));
        let delay = err.min_pttl().map_or(backoff, |p| backoff.min(p + jitter));
        let delay = remaining.map_or(delay, |r| delay.min(r));
        debug!(locks = %set.label, ?delay, error = %err, "set taken; retrying");
        tokio::time::sleep(delay).await;
    }
}

/// One acquisition of several names at once; see [`LockManager::request_all`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
/// let owner = locks.new_owner();
/// let both = locks
///     .request_all(["account:7", "account:9"])
///     .owner(&owner)
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// both.release().await?;
/// # Ok(())
/// # }
/// # fn main() { let _ = demo; }
/// ```
#[derive(Debug)]
#[must_use = "a request does nothing until `acquire` is awaited"]
pub struct MultiLockRequest<'a> {
    manager: &'a LockManager,
    names: Vec<String>,
    owner: Option<Owner>,
    lease: Option<Duration>,
    wait: Wait,
}

impl MultiLockRequest<'_> {
    /// Acquire on behalf of `owner` instead of the calling task.
    pub fn owner(mut self, owner: &Owner) -> Self {
        self.owner = Some(owner.clone());
        self
    }

    /// Hold every name for a fixed `lease`, without renewal.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// Give up after `wait` if a name is still taken. `Duration::ZERO`
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

    /// Acquires every name, all or none, or re-enters the names this owner
    /// already holds.
    ///
    /// On each node one script grants every name or none, and the set
    /// counts against the quorum like one lock: no partial hold is ever
    /// kept, so sets taken in any order cannot deadlock each other. Names
    /// the owner already holds (by an earlier `lock_all` of the same set,
    /// or a single lock) are re-entered one level each; the others are
    /// then acquired together. The owner is the one given, else the
    /// enclosing [`Owner::scope`]'s, else a new owner of its own.
    ///
    /// A set that is taken is retried after the configured
    /// [`Backoff`](crate::Backoff) (no longer than the largest PTTL the nodes
    /// reported); it is not woken by release messages and has no place in
    /// the queues of single-lock waiters, so under steady contention from
    /// `lock` calls on the same names it may wait longer than they do. A
    /// smaller backoff maximum retries sooner.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for an empty list, more than
    ///   [`MAX_LOCK_ALL_NAMES`] names, a name listed twice, a bad name or a
    ///   bad lease;
    /// - [`Error::Contended`] when the wait ran out while another owner held
    ///   a name (the error's `name` lists the set);
    /// - [`Error::Unavailable`] when the wait ran out while too many nodes failed;
    /// - [`Error::ValidityExhausted`] when the last attempt reached the quorum too late;
    /// - [`Error::WrongType`] when a lock key holds a non-hash value;
    /// - [`Error::Expired`] or [`Error::Lost`] when re-entering a hold that
    ///   is no longer valid (re-entered levels taken so far are given back).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future at any await point rolls back, in
    /// the background, every name of the attempt in flight on every node
    /// that may hold a grant, and gives back the levels of names re-entered
    /// so far. Nothing of a dropped acquisition stays held.
    pub async fn acquire(self) -> Result<MultiLockGuard, Error> {
        let inner = &self.manager.inner;
        let config = &inner.nodes.config;
        let set = Set::checked(&config.key_prefix, &self.names)?;
        let (lease, renew) = match self.lease {
            Some(lease) => (lease, false),
            None => (config.lease, true),
        };
        config.check_lease(lease)?;
        let client_id = &inner.nodes.client_id;
        let Some(owner) = self.owner.or_else(|| Owner::scoped(client_id)) else {
            // An owner of its own: nothing can re-enter it, so no slots; the
            // holds only keep the manager's state alive.
            let owner = Owner::explicit(client_id);
            let holds = fresh_all(inner, &set, &owner, lease, renew, self.wait, |_| {
                let keep = Arc::clone(inner);
                OnDrop::new(move || drop(keep))
            })
            .await?;
            return Ok(MultiLockGuard::new(
                holds.into_iter().map(LockGuard::new).collect(),
            ));
        };
        let uses: Vec<SlotUse<'_>> = set
            .keys
            .iter()
            .map(|k| SlotUse {
                slot: inner.slot(&owner, &k.name),
                inner,
                owner_id: owner.shared_id(),
                name: Arc::clone(&k.name),
            })
            .collect();
        // The gates in name order: two acquisitions of one owner never wait
        // for each other's gates in a cycle.
        let mut gates = Vec::with_capacity(uses.len());
        for u in &uses {
            gates.push(u.slot.gate.lock().await);
        }
        let mut guards = Vec::with_capacity(uses.len());
        let mut fresh = Vec::new();
        for (k, u) in set.keys.iter().zip(&uses) {
            let existing = locked(&u.slot.hold).upgrade().filter(|h| h.is_live());
            match existing {
                Some(hold) => guards.push(reenter(hold).await?),
                None => fresh.push(Arc::clone(k)),
            }
        }
        if !fresh.is_empty() {
            let rest = Set::of(fresh);
            let holds = fresh_all(inner, &rest, &owner, lease, renew, self.wait, |name| {
                let (inner, owner_id, name) =
                    (Arc::clone(inner), owner.shared_id(), Arc::clone(name));
                OnDrop::new(move || inner.forget_slot_if_idle(&owner_id, &name, 0))
            })
            .await?;
            for hold in holds {
                if let Some(u) = uses.iter().find(|u| u.name == hold.keys.name) {
                    *locked(&u.slot.hold) = Arc::downgrade(&hold);
                }
                guards.push(LockGuard::new(hold));
            }
        }
        drop(gates);
        Ok(MultiLockGuard::new(guards))
    }
}

/// Proof of holding several locks at once: one level of each name.
///
/// Returned by [`LockManager::lock_all`] and [`MultiLockRequest::acquire`].
/// It holds one [`LockGuard`] per name, sorted by name. Release it with
/// [`release`](Self::release); dropping it releases every name in the
/// background.
///
/// Fencing tokens: a set acquired together gets one token for all its names
/// (one fence INCR per node for the set); like any token, it is larger than
/// every token issued before for each of those names, so each name's token
/// strictly increases across its successive holds. Names that were
/// re-entered keep the token of their existing hold; see
/// [`fencing_token`](Self::fencing_token).
#[must_use = "dropping the guard releases the locks in the background at once"]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("locks", &self.guards)
            .finish()
    }
}

type Lost<'a> = BoxFuture<'a, ()>;

impl MultiLockGuard {
    fn new(mut guards: Vec<LockGuard>) -> Self {
        guards.sort_by(|a, b| a.name().cmp(b.name()));
        Self { guards }
    }

    /// The names held, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::name).collect()
    }

    /// The guard of each name, sorted by name.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guards, one per name, to release or keep separately.
    #[must_use]
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// The fencing token of `name`, if it is one of the set. Names acquired
    /// together share one token; a re-entered name keeps its hold's token.
    #[must_use]
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// Until when every name is held for sure: the earliest of the names'
    /// [`LockGuard::valid_until`].
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        self.guards
            .iter()
            .map(LockGuard::valid_until)
            .min()
            .unwrap_or_else(std::time::Instant::now)
    }

    /// Every name is held, within its validity.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Some name is lost (see [`LockGuard::is_lost`]).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves as soon as any name is lost, no later than
    /// [`valid_until`](Self::valid_until). Never resolves while every name
    /// is held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        let all: Vec<Lost<'_>> = self
            .guards
            .iter()
            .map(|g| -> Lost<'_> { Box::pin(g.lost()) })
            .collect();
        if all.is_empty() {
            // Unreachable: a set has at least one name.
            return std::future::pending().await;
        }
        let _ = futures::future::select_all(all).await;
    }

    /// Releases one level of every name, on every node, concurrently.
    ///
    /// # Errors
    ///
    /// The first error among the names' [`LockGuard::release`] (in name
    /// order): [`Error::Lost`], [`Error::Expired`], [`Error::NotHeld`] or
    /// [`Error::Unavailable`]. Every name is released locally in every case.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`LockGuard::release`]: the last level of each name
    /// is released on the nodes in the background even if the future is
    /// dropped.
    pub async fn release(self) -> Result<(), Error> {
        let results =
            futures::future::join_all(self.guards.into_iter().map(LockGuard::release)).await;
        results
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }
}

impl LockManager {
    /// A configurable acquisition of several names at once: owner, fixed
    /// lease, wait. See [`MultiLockRequest`] for an example.
    pub fn request_all<I, S>(&self, names: I) -> MultiLockRequest<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        MultiLockRequest {
            manager: self,
            names: names.into_iter().map(Into::into).collect(),
            owner: None,
            lease: None,
            wait: Wait::Forever,
        }
    }

    /// Waits until every one of `names` is held, all at once, then keeps
    /// them renewed until released.
    ///
    /// On each node, one script grants every name or none, and the set
    /// counts against the quorum like a single lock, so no ordering is
    /// needed: two transfers `a → b` and `b → a` locking `["a", "b"]` and
    /// `["b", "a"]` cannot deadlock. At most [`MAX_LOCK_ALL_NAMES`] names.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
    /// let both = locks.lock_all(["account:7", "account:9"]).await?;
    /// assert_eq!(both.names(), ["account:7", "account:9"]);
    /// let token = both.fencing_token("account:7");
    /// // ... move money between the two accounts, passing `token` along ...
    /// both.release().await?;
    /// # let _ = token;
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`MultiLockRequest::acquire`]; contention and outages are
    /// retried, so this returns errors only for bad input, wrong-type keys
    /// and re-entry of a hold that is no longer valid.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future rolls back every name's partial grants
    /// at once, on every node that may hold one.
    pub async fn lock_all<I, S>(&self, names: I) -> Result<MultiLockGuard, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.request_all(names).acquire().await
    }

    /// Tries to take every one of `names` at once, waiting at most `wait`;
    /// renewed while held.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] or [`Error::Unavailable`] once `wait` has
    /// passed; see [`MultiLockRequest::acquire`] for the rest.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped future rolls back every name's partial grants
    /// at once.
    pub async fn try_lock_all<I, S>(
        &self,
        names: I,
        wait: Duration,
    ) -> Result<MultiLockGuard, Error>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.request_all(names).wait(wait).acquire().await
    }
}

/// `lock_all`'s future can be spawned.
#[allow(dead_code)]
fn lock_all_is_send(m: &LockManager) -> impl Send + '_ {
    m.lock_all(["a"])
}
