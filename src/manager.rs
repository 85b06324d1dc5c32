//! The manager: the entry point that owns the nodes, the watchdog and the
//! release channels, and the requests that acquire locks through it.

use std::fmt;
use std::sync::Arc;

use crate::acquire::Acquisition;
use crate::config::Config;
use crate::error::{Error, NodeFailure};
use crate::events::{self, LockEvents};
use crate::hold::OnDrop;
use crate::keys::Keys;
use crate::members::Members;
use crate::node::NodeOps;
use crate::owner::{new_client_id, Owner};
use crate::reentry::Reentry;
use crate::status::LockStatus;
use crate::telemetry::{Acquiring, Metrics};
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
    pub(crate) nodes: Arc<Members>,
    pub(crate) reentry: Arc<Reentry>,
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

impl LockManager {
    pub(crate) fn from_parts(
        config: Config,
        nodes: Vec<Arc<dyn NodeOps>>,
        unreachable: Vec<NodeFailure>,
    ) -> Self {
        let feeds: Vec<_> = nodes.iter().map(|n| n.feed()).collect();
        let client_id = new_client_id();
        let addrs: Vec<&str> = nodes.iter().map(|n| n.addr()).collect();
        let up: Vec<bool> = (0..nodes.len())
            .map(|i| !unreachable.iter().any(|f| f.node == i))
            .collect();
        let metrics = Metrics::register(&addrs, &up);
        let notifier = Notifier::start(&client_id, feeds, &config, &metrics);
        let nodes = Arc::new(Members::new(config, nodes, client_id, metrics));
        let inner = Arc::new(Inner {
            notifier,
            watchdog: Watchdog::new(&nodes),
            nodes,
            reentry: Arc::default(),
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
    /// [`LockGuard::run`](crate::LockGuard::run)), if any: acquisitions
    /// that name no owner act as it. Outside a scope, each acquisition is
    /// an owner of its own.
    #[must_use]
    pub fn current_owner(&self) -> Option<Owner> {
        Owner::scoped(&self.inner.nodes.client_id)
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
    /// What an acquisition measured by `probe` works with.
    pub(crate) fn acquisition<'a>(&'a self, probe: &'a Acquiring) -> Acquisition<'a> {
        Acquisition {
            nodes: &self.nodes,
            notifier: &self.notifier,
            watchdog: &self.watchdog,
            probe,
        }
    }

    /// What a hold entered for no owner (an owner of its own) runs when
    /// dropped: nothing, but it keeps the manager's state alive as long as
    /// the hold.
    pub(crate) fn keep_alive(self: &Arc<Self>) -> OnDrop {
        let keep = Arc::clone(self);
        OnDrop::new(move || drop(keep))
    }
}
