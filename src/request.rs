//! Asking for locks: the requests that acquire one name ([`LockRequest`])
//! or a set ([`MultiLockRequest`]), configured step by step with the same
//! settings (the manager's entry points, `LockManager::request`,
//! `LockManager::lock` and the rest, in `manager`, build them). A request
//! turns into terms (`acquire::Terms`), enters each name for its owner
//! (`reentry`), re-enters what the owner holds and acquires the rest
//! (`acquire`).

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{reenter, Terms, Wait};
use crate::error::Error;
use crate::guard::LockGuard;
use crate::keys::{Keys, Target};
use crate::multi::MultiLockGuard;
use crate::node::refuse_cross_slot_set;
use crate::owner::Owner;
use crate::reentry::Entered;
use crate::shared::LockManager;
use crate::telemetry::Acquiring;

/// One acquisition, configured step by step: of one name
/// ([`LockRequest`], from [`LockManager::request`]) or of a set
/// ([`MultiLockRequest`], from [`LockManager::request_all`]).
#[derive(Debug)]
#[must_use = "a request does nothing until `acquire` is awaited"]
pub struct Request<'a, N> {
    manager: &'a LockManager,
    names: N,
    owner: Option<Owner>,
    lease: Option<Duration>,
    wait: Wait,
    fair: bool,
}

/// What a [`LockRequest`] asks for: one lock name.
#[derive(Debug)]
pub struct OneName(pub(crate) String);

/// What a [`MultiLockRequest`] asks for: several lock names, all or none.
#[derive(Debug)]
pub struct NameSet(pub(crate) Vec<String>);

/// One acquisition, configured step by step; see [`LockManager::request`].
///
/// # Examples
///
/// ```no_run
/// use std::time::Duration;
///
/// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
/// let owner = locks.new_owner();
/// let guard = locks
///     .request("report:daily")
///     .owner(&owner)
///     .lease(Duration::from_secs(60)) // fixed: not renewed
///     .wait(Duration::from_secs(5))
///     .acquire()
///     .await?;
/// guard.release().await?;
/// # Ok(())
/// # }
/// # fn main() { let _ = demo; }
/// ```
pub type LockRequest<'a> = Request<'a, OneName>;

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
pub type MultiLockRequest<'a> = Request<'a, NameSet>;

impl<'a, N> Request<'a, N> {
    pub(crate) fn new(manager: &'a LockManager, names: N) -> Self {
        Self {
            manager,
            names,
            owner: None,
            lease: None,
            wait: Wait::Forever,
            fair: false,
        }
    }

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

    /// Give up after `wait` if the lock (a name of a set) is still taken. `Duration::ZERO`
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

    /// The measures of this acquisition (`telemetry`), from now on.
    fn probe(&self) -> Acquiring {
        let one_try = self.wait == Wait::Up(Duration::ZERO);
        self.manager.inner.nodes.metrics.acquiring(one_try)
    }

    /// The terms of the acquisition, and its owner: the one given, else
    /// the enclosing [`Owner::scope`]'s, else `None` (an owner of its own).
    fn terms(&self) -> Result<(Terms, Option<Owner>), Error> {
        let inner = &self.manager.inner;
        let config = &inner.nodes.config;
        let (lease, renew) = match self.lease {
            Some(lease) => (lease, false),
            None => (config.lease, true),
        };
        config.check_lease(lease)?;
        let terms = Terms {
            lease,
            renew,
            wait: self.wait,
            fair: self.fair,
        };
        let owner = self
            .owner
            .clone()
            .or_else(|| Owner::scoped(&inner.nodes.client_id));
        Ok((terms, owner))
    }

    /// Takes `target` for the request's owner: re-enters the names the
    /// owner holds (one level each) and acquires the others together, one
    /// guard per name in the target's order (re-entered names first).
    /// Without an owner (a new owner of its own, which nothing can
    /// re-enter) nothing is entered for re-entry: the holds only keep the
    /// manager's state alive.
    async fn take(&self, target: Target, probe: &Acquiring) -> Result<Vec<LockGuard>, Error> {
        let inner = &self.manager.inner;
        let (terms, owner) = self.terms()?;
        let acquisition = inner.acquisition(probe);
        let Some(owner) = owner else {
            let owner = Owner::explicit(&inner.nodes.client_id);
            let holds = acquisition
                .fresh(&target, &owner, terms, |_| inner.keep_alive())
                .await?;
            return Ok(holds.into_iter().map(LockGuard::new).collect());
        };
        let uses: Vec<Entered> = target
            .keys
            .iter()
            .map(|k| inner.reentry.enter(&owner, &k.name))
            .collect();
        // The gates in name order: two acquisitions of one owner never wait
        // for each other's gates in a cycle.
        let mut gates = Vec::with_capacity(uses.len());
        for u in &uses {
            gates.push(u.gate().await);
        }
        let mut guards = Vec::with_capacity(uses.len());
        let mut fresh = Vec::new();
        for (k, u) in target.keys.iter().zip(&uses) {
            match u.live_hold() {
                Some(hold) => {
                    probe.attempt();
                    guards.push(reenter(hold).await?);
                }
                None => fresh.push(Arc::clone(k)),
            }
        }
        if !fresh.is_empty() {
            // A set takes its names not held yet together; one name is
            // taken as it was asked for (queued, fair or not).
            let rest = if target.set {
                Target::set_of(fresh)
            } else {
                target
            };
            let entry_of = |name: &Arc<str>| uses.iter().find(|u| u.name() == name);
            let holds = acquisition
                .fresh(&rest, &owner, terms, |name| {
                    entry_of(name)
                        .map_or_else(|| inner.keep_alive(), |u| u.on_hold_drop(Arc::clone(inner)))
                })
                .await?;
            for hold in holds {
                if let Some(u) = entry_of(&hold.keys.name) {
                    u.keep(&hold);
                }
                guards.push(LockGuard::new(hold));
            }
        }
        drop(gates);
        Ok(guards)
    }
}

impl Request<'_, OneName> {
    /// Take the lock in turn (Redisson's fair lock, over N masters): grants
    /// follow the order in which fair waiters first asked, across processes,
    /// and a release wakes only the waiter whose turn it is.
    ///
    /// Each waiter carries one ticket to every node, so all nodes agree on
    /// the order. A waiter that stops calling the nodes (its process died)
    /// is skipped after the manager's
    /// [`queue_timeout`](crate::LockManagerBuilder::queue_timeout); a
    /// dropped acquisition leaves the queue on every node at once. Plain
    /// requests for the same name are not held back by the queue: they may
    /// take the lock whenever it is free.
    pub fn fair(mut self) -> Self {
        self.fair = true;
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
    /// - [`Error::Expired`] or [`Error::Lost`] when re-entering a hold that is no longer valid;
    ///   [`Error::Lost`] also when the re-entry finds the lock missing (forced, or lost by
    ///   nodes restarted empty) or another holder's on so many nodes that no quorum can
    ///   confirm it: a re-entry never re-creates the lock, and the hold is then lost;
    /// - [`Error::Overloaded`] for a renewed lock when this manager already renews as many
    ///   as it can keep valid (measured by its watchdog; a re-entry is never refused).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future at any await point rolls back, in the
    /// background, whatever grants it obtained on every node that may hold
    /// one, at once rather than when the lease runs out. A re-entry that is
    /// dropped restores the previous hold count.
    pub async fn acquire(self) -> Result<LockGuard, Error> {
        let probe = self.probe();
        let taken = async {
            let config = &self.manager.inner.nodes.config;
            let keys = Keys::checked(config.layout, &config.key_prefix, &self.names.0)?;
            let mut guards = self.take(Target::one(&keys), &probe).await?;
            // One name, one guard.
            guards.pop().ok_or_else(|| Error::NotHeld {
                name: keys.name.to_string(),
            })
        };
        let taken = taken.await;
        probe.finish(taken)
    }
}

impl Request<'_, NameSet> {
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
    ///   [`MAX_LOCK_ALL_NAMES`](crate::MAX_LOCK_ALL_NAMES) names, a name listed twice, a bad name or a
    ///   bad lease, or, on a manager with a member that is a Redis Cluster,
    ///   names of more than one hash slot (see [`lock_slot`](crate::lock_slot));
    /// - [`Error::Contended`] when the wait ran out while another owner held
    ///   a name (the error's `name` lists the set);
    /// - [`Error::Unavailable`] when the wait ran out while too many nodes failed;
    /// - [`Error::ValidityExhausted`] when the last attempt reached the quorum too late;
    /// - [`Error::WrongType`] when a lock key holds a non-hash value;
    /// - [`Error::Expired`] or [`Error::Lost`] when re-entering a hold that
    ///   is no longer valid (re-entered levels taken so far are given back);
    /// - [`Error::Overloaded`] as for [`LockRequest::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future at any await point rolls back, in
    /// the background, every name of the attempt in flight on every node
    /// that may hold a grant, and gives back the levels of names re-entered
    /// so far. Nothing of a dropped acquisition stays held.
    pub async fn acquire(self) -> Result<MultiLockGuard, Error> {
        let probe = self.probe();
        let taken = async {
            let config = &self.manager.inner.nodes.config;
            let set = Target::set_checked(config.layout, &config.key_prefix, &self.names.0)?;
            refuse_cross_slot_set(self.manager.inner.nodes.all(), &set.keys)?;
            Ok(MultiLockGuard::new(self.take(set, &probe).await?))
        };
        let taken = taken.await;
        probe.finish(taken)
    }
}

/// `lock_all`'s future can be spawned.
#[allow(dead_code)]
fn lock_all_is_send(m: &LockManager) -> impl Send + '_ {
    m.lock_all(["a"])
}

/// Takes the one key `keys` anew for `owner` (an owner of its own, which
/// nothing re-enters), with the manager's lease renewed by the watchdog,
/// waiting as `wait` says: what a semaphore's permit and a read-write
/// lock's guards are made of.
pub(crate) async fn fresh(
    manager: &LockManager,
    keys: &Arc<Keys>,
    owner: &Owner,
    wait: Wait,
) -> Result<LockGuard, Error> {
    let inner = &manager.inner;
    let probe = inner
        .nodes
        .metrics
        .acquiring(wait == Wait::Up(Duration::ZERO));
    let terms = Terms {
        lease: inner.nodes.config.lease,
        renew: true,
        wait,
        fair: false,
    };
    let holds = inner
        .acquisition(&probe)
        .fresh(&Target::one(keys), owner, terms, |_| inner.keep_alive())
        .await?;
    holds
        .into_iter()
        .next()
        .map(LockGuard::new)
        .ok_or_else(|| Error::Lost {
            name: keys.name.to_string(),
        })
}
