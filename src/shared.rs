//! What a [`LockManager`] is made of: the handle itself, and the state
//! every clone of it shares ([`Inner`]: the members, the re-entry registry,
//! the watchdog, the waiters' notifier, the elections' observers, the
//! members unreachable at
//! `build()`). The manager's methods are all in `manager`; the requests,
//! the builder and the manager reach the shared state here.

use std::sync::Arc;

use crate::acquire::Acquisition;
use crate::config::Config;
use crate::error::NodeFailure;
use crate::hold::OnDrop;
use crate::leader::Observers;
use crate::members::Members;
use crate::node::NodeOps;
use crate::owner::new_client_id;
use crate::reentry::Reentry;
use crate::telemetry::{Acquiring, Metrics};
use crate::wait::Notifier;
use crate::watchdog::Watchdog;

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

/// What every clone of a [`LockManager`] shares.
pub(crate) struct Inner {
    pub(crate) nodes: Arc<Members>,
    pub(crate) reentry: Arc<Reentry>,
    pub(crate) watchdog: Arc<Watchdog>,
    pub(crate) notifier: Notifier,
    /// The elections' observers: one watch per election name.
    pub(crate) observers: Observers,
    /// The nodes that could not be reached at `build()`.
    pub(crate) unreachable: Vec<NodeFailure>,
    /// The semaphores whose permit count a read found recorded on the
    /// members as this manager's (name -> count): later semaphore values
    /// of that name and count skip the check.
    pub(crate) semaphore_counts: std::sync::Mutex<std::collections::HashMap<Arc<str>, u32>>,
}

impl Inner {
    /// A manager's state over `nodes` (in the builder's order), of which
    /// `unreachable` did not answer at `build()`: the metrics registered,
    /// the waiters' notifier started on the nodes' feeds, the watchdog.
    pub(crate) fn start(
        config: Config,
        nodes: Vec<Arc<dyn NodeOps>>,
        unreachable: Vec<NodeFailure>,
    ) -> Arc<Self> {
        let feeds: Vec<_> = nodes.iter().map(|n| n.feed()).collect();
        let client_id = new_client_id();
        let addrs: Vec<&str> = nodes.iter().map(|n| n.addr()).collect();
        let up: Vec<bool> = (0..nodes.len())
            .map(|i| !unreachable.iter().any(|f| f.node == i))
            .collect();
        let metrics = Metrics::register(&addrs, &up);
        let notifier = Notifier::start(&client_id, feeds, &config, &metrics);
        let nodes = Arc::new(Members::new(config, nodes, client_id, metrics));
        Arc::new(Self {
            notifier,
            watchdog: Watchdog::new(&nodes),
            nodes,
            reentry: Arc::default(),
            observers: Observers::default(),
            unreachable,
            semaphore_counts: std::sync::Mutex::default(),
        })
    }

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
        OnDrop::keep(Arc::clone(self) as Arc<dyn Send + Sync>)
    }
}
