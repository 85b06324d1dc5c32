//! Every method of [`LockManager`], the entry point: building one, asking
//! for locks (through the requests of `request`), owners, forced unlocks,
//! status, events, flushing the background work, and the counters. What a
//! manager is made of is in `shared`.

use std::fmt;
#[cfg(test)]
use std::sync::Arc;
use std::time::Duration;

use crate::builder::LockManagerBuilder;
use crate::config::Config;
use crate::election::Election;
use crate::error::{Error, NodeFailure};
use crate::events::{self, LockEvents};
use crate::guard::LockGuard;
use crate::keys::Keys;
use crate::multi::MultiLockGuard;
#[cfg(test)]
use crate::node::NodeOps;
use crate::owner::Owner;
use crate::request::{LockRequest, MultiLockRequest, NameSet, OneName, Request};
use crate::rw_lock::RwLock;
use crate::semaphore::Semaphore;
#[cfg(test)]
use crate::shared::Inner;
use crate::shared::LockManager;
use crate::status::LockStatus;
use crate::wait::PubSubStats;
use crate::watchdog::WatchdogStats;

impl fmt::Debug for LockManager {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockManager")
            .field("nodes", &self.nodes())
            .field("config", self.config())
            .finish_non_exhaustive()
    }
}

impl LockManager {
    /// Starts building a manager.
    pub fn builder() -> LockManagerBuilder {
        LockManagerBuilder::default()
    }

    /// A manager over `nodes` with `config` as it is, unchecked (tests).
    #[cfg(test)]
    pub(crate) fn from_parts(
        config: Config,
        nodes: Vec<Arc<dyn NodeOps>>,
        unreachable: Vec<NodeFailure>,
    ) -> Self {
        Self {
            inner: Inner::start(config, nodes, unreachable),
        }
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
    /// [`LockGuard::run`](crate::LockGuard::run)), if any: acquisitions
    /// that name no owner act as it. Outside a scope, each acquisition is
    /// an owner of its own.
    #[must_use]
    pub fn current_owner(&self) -> Option<Owner> {
        Owner::scoped(&self.inner.nodes.client_id)
    }

    /// A configurable acquisition of `name`: owner, fixed lease, wait. See
    /// [`LockRequest`] for an example.
    pub fn request(&self, name: impl Into<String>) -> LockRequest<'_> {
        Request::new(self, OneName(name.into()))
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
    /// this returns errors only for bad input, wrong-type keys, re-entry of
    /// a hold that is no longer valid, and [`Error::Overloaded`] when this
    /// manager already renews as many locks as it can keep valid.
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

    /// A configurable acquisition of several names at once: owner, fixed
    /// lease, wait. See [`MultiLockRequest`] for an example.
    pub fn request_all<I, S>(&self, names: I) -> MultiLockRequest<'_>
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Request::new(self, NameSet(names.into_iter().map(Into::into).collect()))
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
    /// retried, so this returns errors only for bad input, wrong-type keys,
    /// re-entry of a hold that is no longer valid, and
    /// [`Error::Overloaded`].
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

    /// The leader election named `name` among the processes that campaign
    /// for it through managers over the same members: campaign, proclaim,
    /// resign, read and observe the leader. See [`Election`].
    ///
    /// A name that is not valid is reported by the election's calls
    /// ([`Error::InvalidInput`]), never by a panic.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
    /// let election = locks.election("scheduler");
    /// if let Some(leader) = election.leader().await? {
    ///     println!("{} leads in term {}", leader.value(), leader.term());
    /// }
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
    #[must_use]
    pub fn election(&self, name: impl Into<String>) -> Election {
        Election::new(self, name.into())
    }

    /// A counting semaphore of `permits` permits named `name` over this
    /// manager's members: at most `permits` [`Permit`](crate::Permit)s
    /// valid at once, across processes, under the lock's assumptions (each
    /// permit is one of `permits` slots, each slot a quorum lock).
    ///
    /// ```no_run
    /// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
    /// let connections = locks.semaphore("db-connections", 10)?;
    /// let permit = connections.acquire().await?;
    /// // ... at most 10 of these at once, across every process ...
    /// permit.release().await?;
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an invalid name (as a lock name) or a
    /// count of 0 or above [`MAX_PERMITS`](crate::MAX_PERMITS);
    /// [`Error::UnsafeQuorum`] when the manager's quorum has `2q ≤ N`.
    pub fn semaphore(&self, name: impl Into<String>, permits: u32) -> Result<Semaphore, Error> {
        Semaphore::new(self, name.into(), permits)
    }

    /// A read-write lock named `name` over this manager's members: readers
    /// together, a writer alone. Nothing is checked or sent until the first
    /// [`read`](RwLock::read) or [`write`](RwLock::write), which report a
    /// bad name or an unsafe quorum.
    ///
    /// ```no_run
    /// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
    /// let catalog = locks.rw_lock("catalog");
    /// let reading = catalog.read().await?;
    /// reading.release().await?;
    /// let writing = catalog.write().await?;
    /// println!("writing with token {}", writing.fencing_token());
    /// writing.release().await?;
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
    #[must_use]
    pub fn rw_lock(&self, name: impl Into<String>) -> RwLock {
        RwLock::new(self, name.into())
    }

    /// Deletes `name` on every node, whoever holds it, and wakes its waiters.
    /// Returns on how many nodes a lock was deleted.
    ///
    /// An administrative break. The holder's watchdog finds the keys gone
    /// at its next renewal and declares the hold lost (it never re-creates
    /// keys missing on so many nodes that no quorum confirms the hold); a
    /// fixed-lease holder is not told before its lease ends. Not when the
    /// deletes interleave with the hold's own calls: a renewal that reads
    /// some nodes before a delete and others after, or a late grant of its
    /// acquire, can repair the key back onto a quorum, and the holder keeps
    /// the lock untold (docs/SAFETY.md, "A forced unlock is not undone");
    /// read [`status`](Self::status) after forcing, and force again while
    /// it shows the holder.
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
        let keys = Keys::checked(nodes.config.layout, &nodes.config.key_prefix, name)?;
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
        let keys = Keys::checked(nodes.config.layout, &nodes.config.key_prefix, name)?;
        Ok(LockStatus {
            name: name.to_owned(),
            required: nodes.required(),
            nodes: nodes.status(&keys).await,
        })
    }

    /// The events of `name` as the nodes tell them: releases, forced
    /// unlocks, and, where the nodes send keyspace notifications, expiries
    /// and deletions by anything else; what Redisson's `addListener` on a
    /// lock gives Java users.
    ///
    /// Returns once a quorum of nodes confirmed the subscriptions; events
    /// from then on are delivered, each once (when a quorum of nodes told
    /// it, see [`LockEvent`](crate::LockEvent)). Each stream has one subscriber connection
    /// per node of its own.
    ///
    /// # What is seen where
    ///
    /// - [`LockEvent::Released`](crate::LockEvent::Released) and [`LockEvent::Forced`](crate::LockEvent::Forced) come from the
    ///   messages the release and force scripts publish on the lock's
    ///   channel, whatever the nodes' settings (a user without rights on
    ///   the channel publishes nothing, and its releases are not seen).
    /// - [`LockEvent::Expired`](crate::LockEvent::Expired) and [`LockEvent::Deleted`](crate::LockEvent::Deleted) come from
    ///   keyspace notifications (`__keyspace@<db>__:<key>`), which need
    ///   `notify-keyspace-events` to include `K` and `g` (`del`) and `x`
    ///   (`expired`) on the nodes, e.g. `CONFIG SET notify-keyspace-events
    ///   Kgx`. Where they are off (Redis's default), an expiry publishes
    ///   nothing and is **not seen**, nor is a `DEL`, an eviction or (in
    ///   the default layout) a Redisson client's unlock of the key; a
    ///   released or forced lock is seen either way. A node with keyspace notifications sends a `del`
    ///   with each release too; it is paired with the release message and
    ///   not counted again (a `del` with no release message within 100 ms
    ///   counts as [`LockEvent::Deleted`](crate::LockEvent::Deleted)).
    /// - In [`Layout::Redisson`](crate::Layout::Redisson),
    ///   [`LockEvent::ForeignReleased`](crate::LockEvent::ForeignReleased)
    ///   comes from Redisson's channel `redisson_lock__channel:{<name>}`:
    ///   a Redisson client's unlock (or forced unlock), whatever the nodes'
    ///   settings. The `0` our own releases also publish there is dropped.
    /// - A cluster member publishes nothing yet (no release feed).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a bad name; [`Error::Unavailable`] when
    /// fewer than a quorum of nodes confirmed the subscriptions within the
    /// connect timeout plus the node timeout.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future or the stream closes its connections (which
    /// unsubscribes them).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use futures::StreamExt;
    /// use quorumlock::{LockEvent, LockManager};
    ///
    /// # async fn demo(locks: LockManager) -> Result<(), quorumlock::Error> {
    /// let mut events = locks.events("orders:42").await?;
    /// while let Some(event) = events.next().await {
    ///     if let LockEvent::Released { holder, .. } = event {
    ///         println!("released by {holder}");
    ///     }
    /// }
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
    pub async fn events(&self, name: &str) -> Result<LockEvents, Error> {
        let nodes = &self.inner.nodes;
        let keys = Keys::checked(nodes.config.layout, &nodes.config.key_prefix, name)?;
        events::subscribe(nodes, &keys).await
    }

    /// Waits until the background work started so far has finished: releases
    /// of dropped guards, rollbacks of cancelled acquisitions, and calls to
    /// nodes that answered after the outcome was decided. Call it before the
    /// process exits, so that nothing is left on the nodes to expire with
    /// its lease.
    ///
    /// Each call is bounded by the node timeout (a release's by twice it),
    /// but a release (or a queue exit) that met a node refusing connections is sent again when the
    /// node's pause between dials ends (at most 1 s), for as long as the
    /// lease (the queue timeout) it undoes lasts, so that a node back with
    /// its data does not keep the key: with a node down, `flush` may wait
    /// up to a lease. A process that must exit sooner bounds the wait, for
    /// example with `tokio::time::timeout` of four times the node timeout
    /// plus 1 s, as the CLI does (a release in flight, then one sent again
    /// after the pause); what is left expires with its lease.
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
