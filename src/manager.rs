//! The manager: the entry point that owns the nodes, the watchdog and the
//! release channels, and the requests that acquire locks through it.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::acquire::{reenter, Acquisition, Terms, Wait};
use crate::config::Config;
use crate::error::{Error, NodeFailure};
use crate::guard::LockGuard;
use crate::hold::OnDrop;
use crate::keys::Keys;
use crate::node::NodeOps;
use crate::nodes::Nodes;
use crate::owner::{new_client_id, Owner};
use crate::slots::Slots;
use crate::status::LockStatus;
use crate::wait::{Notifier, PubSubStats};
use crate::watchdog::{Watchdog, WatchdogStats};

/// A handle to the nodes; cheap to clone, shared by all tasks.
///
/// Build one with [`LockManager::builder`]. Every lock taken through it is
/// renewed by one background watchdog, which stops when the last clone of the
/// manager and the last guard are gone.
///
/// # Examples
///
/// ```no_run
/// use quorumlock::{LockManager, Quorum};
///
/// # async fn demo() -> Result<(), quorumlock::Error> {
/// let locks = LockManager::builder()
///     .nodes([
///         "redis://127.0.0.1:7001",
///         "redis://127.0.0.1:7002",
///         "redis://127.0.0.1:7003",
///     ])
///     .quorum(Quorum::Majority)
///     .build()
///     .await?;
/// let guard = locks.lock("invoice:42").await?;
/// // ... work on invoice 42, passing guard.fencing_token() along ...
/// guard.release().await?;
/// # Ok(())
/// # }
/// # fn main() { let _ = demo; }
/// ```
#[derive(Clone)]
pub struct LockManager {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    pub(crate) nodes: Arc<Nodes>,
    pub(crate) slots: Arc<Slots>,
    pub(crate) watchdog: Arc<Watchdog>,
    notifier: Notifier,
    /// The nodes that could not be reached at `build()`.
    unreachable: Vec<NodeFailure>,
}

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("nodes", &self.nodes())
            .field("config", self.config())
            .finish_non_exhaustive()
    }
}

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
#[derive(Debug)]
#[must_use = "a request does nothing until `acquire` is awaited"]
pub struct LockRequest<'a> {
    manager: &'a LockManager,
    name: String,
    owner: Option<Owner>,
    lease: Option<Duration>,
    wait: Wait,
    fair: bool,
}

impl LockRequest<'_> {
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
    /// - [`Error::Expired`] or [`Error::Lost`] when re-entering a hold that is no longer valid;
    ///   [`Error::Lost`] also when the re-entry finds the lock missing (forced, or lost by
    ///   nodes restarted empty) or another holder's on so many nodes that no quorum can
    ///   confirm it: a re-entry never re-creates the lock, and the hold is then lost.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. Dropping the future at any await point rolls back, in the
    /// background, whatever grants it obtained on every node that may hold
    /// one, at once rather than when the lease runs out. A re-entry that is
    /// dropped restores the previous hold count.
    pub async fn acquire(self) -> Result<LockGuard, Error> {
        let inner = &self.manager.inner;
        let config = &inner.nodes.config;
        let keys = Keys::checked(&config.key_prefix, &self.name)?;
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
        let client_id = &inner.nodes.client_id;
        let acquisition = inner.acquisition();
        let Some(owner) = self.owner.or_else(|| Owner::scoped(client_id)) else {
            // An owner of its own: nothing can re-enter it, so no slot; the
            // hold only keeps the manager's state alive.
            let owner = Owner::explicit(client_id);
            let on_drop = inner.keep_alive();
            let hold = acquisition.fresh(keys, owner, terms, on_drop).await?;
            return Ok(LockGuard::new(hold));
        };
        let slot = inner.slots.enter(&owner, &keys.name);
        let _gate = slot.gate().await;
        if let Some(hold) = slot.live_hold() {
            return reenter(hold).await;
        }
        let on_drop = slot.on_hold_drop(Arc::clone(inner));
        let hold = acquisition.fresh(keys, owner, terms, on_drop).await?;
        slot.keep(&hold);
        Ok(LockGuard::new(hold))
    }
}

impl LockManager {
    pub(crate) fn from_parts(
        config: Config,
        nodes: Vec<Arc<dyn NodeOps>>,
        unreachable: Vec<NodeFailure>,
    ) -> Self {
        let feeds: Vec<_> = nodes.iter().map(|n| n.feed()).collect();
        let client_id = new_client_id();
        let notifier = Notifier::start(&client_id, feeds, &config);
        let nodes = Arc::new(Nodes::new(config, nodes, client_id));
        let inner = Arc::new(Inner {
            notifier,
            watchdog: Watchdog::new(&nodes),
            nodes,
            slots: Arc::default(),
            unreachable,
        });
        Self { inner }
    }

    /// The validated configuration.
    #[must_use]
    pub fn config(&self) -> &Config {
        &self.inner.nodes.config
    }

    /// The node addresses, in the builder's order, without credentials.
    #[must_use]
    pub fn nodes(&self) -> Vec<String> {
        self.inner
            .nodes
            .all()
            .iter()
            .map(|n| n.addr().to_owned())
            .collect()
    }

    /// The nodes that could not be reached when the manager was built with
    /// [`allow_unreachable`](crate::LockManagerBuilder::allow_unreachable); they
    /// are connected on first use. Empty otherwise.
    #[must_use]
    pub fn unreachable_at_build(&self) -> &[NodeFailure] {
        &self.inner.unreachable
    }

    /// A new explicit owner, to share a lock between tasks.
    #[must_use]
    pub fn new_owner(&self) -> Owner {
        Owner::explicit(&self.inner.nodes.client_id)
    }

    /// The owner of the enclosing [`Owner::scope`] (or
    /// [`LockGuard::run`]), if any: acquisitions that name no owner act as
    /// it. Outside a scope, each acquisition is an owner of its own.
    #[must_use]
    pub fn current_owner(&self) -> Option<Owner> {
        Owner::scoped(&self.inner.nodes.client_id)
    }

    /// A configurable acquisition of `name`: owner, fixed lease, wait. See
    /// [`LockRequest`] for an example.
    pub fn request(&self, name: impl Into<String>) -> LockRequest<'_> {
        LockRequest {
            manager: self,
            name: name.into(),
            owner: None,
            lease: None,
            wait: Wait::Forever,
            fair: false,
        }
    }

    /// Waits until `name` is held, then keeps it renewed until released.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
    /// let guard = locks.lock("account:7").await?;
    /// assert!(guard.is_held());
    /// guard.release().await?;
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
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
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    ///
    /// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
    /// match locks.try_lock("cron:cleanup", Duration::ZERO).await {
    ///     Ok(guard) => guard.release().await?,
    ///     Err(e) if e.is_contended() => println!("another instance runs it"),
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
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
    /// node did not answer: the lock may survive there until its TTL, or the
    /// delete land there later and break a hold taken after this returned.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the lock deleted on some nodes only.
    pub async fn force_unlock(&self, name: &str) -> Result<usize, Error> {
        let nodes = &self.inner.nodes;
        let keys = Keys::checked(&nodes.config.key_prefix, name)?;
        nodes.force_release(&keys).await
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
        let nodes = &self.inner.nodes;
        let keys = Keys::checked(&nodes.config.key_prefix, name)?;
        Ok(LockStatus {
            name: name.to_owned(),
            required: nodes.required(),
            nodes: nodes.status(&keys).await,
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
        self.inner.nodes.idle().await;
    }

    /// Counters of the waiters' pub/sub connections.
    #[must_use]
    pub fn pubsub_stats(&self) -> PubSubStats {
        self.inner.notifier.stats()
    }

    /// Watchdog counters since the manager was built.
    #[must_use]
    pub fn watchdog_stats(&self) -> WatchdogStats {
        self.inner.watchdog.stats()
    }
}

impl Inner {
    fn acquisition(&self) -> Acquisition<'_> {
        Acquisition {
            nodes: &self.nodes,
            notifier: &self.notifier,
            watchdog: &self.watchdog,
        }
    }

    /// What a hold with no slot (an owner of its own) runs when dropped:
    /// nothing, but it keeps the manager's state alive as long as the hold.
    pub(crate) fn keep_alive(self: &Arc<Self>) -> OnDrop {
        let keep = Arc::clone(self);
        OnDrop::new(move || drop(keep))
    }
}
