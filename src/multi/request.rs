//! The request that takes a multi-lock, and the manager's entry points.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{reenter, Wait};
use crate::error::Error;
use crate::guard::LockGuard;
use crate::manager::LockManager;
use crate::owner::Owner;
use crate::slots::SlotUse;

use super::{fresh_all, MultiLockGuard, Set};

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
    ///   [`MAX_LOCK_ALL_NAMES`](crate::MAX_LOCK_ALL_NAMES) names, a name listed twice, a bad name or a
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
                inner.keep_alive()
            })
            .await?;
            return Ok(MultiLockGuard::new(
                holds.into_iter().map(LockGuard::new).collect(),
            ));
        };
        let uses: Vec<SlotUse> = set
            .keys
            .iter()
            .map(|k| inner.slots.enter(&owner, &k.name))
            .collect();
        // The gates in name order: two acquisitions of one owner never wait
        // for each other's gates in a cycle.
        let mut gates = Vec::with_capacity(uses.len());
        for u in &uses {
            gates.push(u.gate().await);
        }
        let mut guards = Vec::with_capacity(uses.len());
        let mut fresh = Vec::new();
        for (k, u) in set.keys.iter().zip(&uses) {
            match u.live_hold() {
                Some(hold) => guards.push(reenter(hold).await?),
                None => fresh.push(Arc::clone(k)),
            }
        }
        if !fresh.is_empty() {
            let rest = Set::of(fresh);
            let slot_of = |name: &Arc<str>| uses.iter().find(|u| u.name() == name);
            let holds = fresh_all(inner, &rest, &owner, lease, renew, self.wait, |name| {
                slot_of(name)
                    .map_or_else(|| inner.keep_alive(), |u| u.on_hold_drop(Arc::clone(inner)))
            })
            .await?;
            for hold in holds {
                if let Some(u) = slot_of(&hold.keys.name) {
                    u.keep(&hold);
                }
                guards.push(LockGuard::new(hold));
            }
        }
        drop(gates);
        Ok(MultiLockGuard::new(guards))
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
    /// `["b", "a"]` cannot deadlock. At most [`MAX_LOCK_ALL_NAMES`](crate::MAX_LOCK_ALL_NAMES) names.
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
