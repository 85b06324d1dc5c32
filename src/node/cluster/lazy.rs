//! A cluster member that did not answer at `build()` (with
//! `allow_unreachable`): it is connected in the background, as a master
//! that was down is, and is used once it answers and passes every check
//! `build()` makes of a cluster member.
//!
//! Until then each call fails at once, unsent ([`NodeError::unsent_until`]
//! at the next connection attempt), and the member counts as a node that
//! did not answer. A member whose seeds then fail a lasting check (a
//! standalone server, a server before Redis 7, too few replicas for
//! `replica_wait`, the same cluster as another member, an evicting policy
//! under `require_noeviction`) is refused: never used, every call failing
//! with [`NodeErrorKind::Refused`]. Checks that pass with time (seeds
//! that disagree mid-failover, slots not all served yet) are tried again,
//! as an unreachable member is.

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::admission::Admission;
use crate::config::Config;
use crate::error::{Error, NodeError, NodeErrorKind};
use crate::keys::Keys;
use crate::sync::locked;

use super::node::ClusterNode;
use super::spec::ClusterSpec;
use super::watch::Passing;
use crate::node::batch::RenewBatch;
use crate::node::feed::{Feed, FeedConn};
use crate::node::member::{Args, Call, Read, Server};
use crate::node::ops::{Answer, BatchCost, NodeLockState, Renewed};

/// Time between two connection attempts.
const RETRY: Duration = Duration::from_millis(500);

/// What the background connection found, once it found anything.
enum State {
    Connected(ClusterNode),
    Refused(NodeError),
}

/// A cluster member connected in the background.
pub(crate) struct LazyCluster {
    addr: String,
    state: Arc<OnceLock<State>>,
    /// When the next connection attempt starts (calls fail unsent until
    /// then).
    next: Arc<std::sync::Mutex<Instant>>,
    feed: Arc<LazyFeed>,
}

impl LazyCluster {
    /// Member `index` at `addr` (as its connection failure named it), over
    /// `member`, connected in the background with the manager's `config`
    /// and checked through `admission`, until the manager is dropped.
    pub(crate) fn start(
        index: usize,
        addr: String,
        member: ClusterSpec,
        config: Config,
        admission: Arc<Admission>,
    ) -> Self {
        let state: Arc<OnceLock<State>> = Arc::default();
        let next = Arc::new(std::sync::Mutex::new(Instant::now()));
        let feed = Arc::new(LazyFeed {
            state: Arc::downgrade(&state),
        });
        let (weak, at, label) = (Arc::downgrade(&state), Arc::clone(&next), addr.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            drop(handle.spawn(async move {
                loop {
                    *locked(&at) = Instant::now() + config.connect_timeout + RETRY;
                    let found = match ClusterNode::try_connect(index, &member, &config).await {
                        Ok(node) => Some(match admission.admit(index, &label, &node.info()) {
                            Ok(()) => State::Connected(node),
                            Err(why) => State::Refused(NodeError::new(NodeErrorKind::Refused, why)),
                        }),
                        Err((Error::Connect { .. }, _)) => None,
                        Err((e, Passing::Yes)) => {
                            // Seeds that disagree or slots not all served
                            // (mid-failover, a cluster being made): later.
                            tracing::debug!(node = index, addr = %label, reason = %e, "cluster member not ready; trying again");
                            None
                        }
                        Err((e, Passing::No)) => Some(State::Refused(NodeError::new(
                            NodeErrorKind::Refused,
                            e.to_string(),
                        ))),
                    };
                    let Some(slot) = weak.upgrade() else { return };
                    if let Some(found) = found {
                        match &found {
                            State::Connected(_) => {
                                tracing::info!(node = index, addr = %label, "cluster member reached");
                            }
                            State::Refused(why) => {
                                tracing::error!(node = index, addr = %label, reason = %why.message, "cluster member refused; it will not be used");
                            }
                        }
                        let _ = slot.set(found);
                        return;
                    }
                    drop(slot);
                    *locked(&at) = Instant::now() + RETRY;
                    tokio::time::sleep(RETRY).await;
                }
            }));
        }
        Self {
            addr,
            state,
            next,
            feed,
        }
    }

    /// The connected member, or why a call cannot be sent now (not yet
    /// connected: unsent until the next attempt).
    fn node(&self) -> Result<&ClusterNode, NodeError> {
        reach(self.state.get()).map_err(|mut e| {
            if self.state.get().is_none() {
                e.unsent_until = Some(*locked(&self.next));
            }
            e
        })
    }
}

/// The connected member in `state`, or why it cannot be used (refused, or
/// not connected yet).
fn reach(state: Option<&State>) -> Result<&ClusterNode, NodeError> {
    match state {
        Some(State::Connected(node)) => Ok(node),
        Some(State::Refused(why)) => Err(why.clone()),
        None => Err(NodeError::new(
            NodeErrorKind::Connection,
            "not connected yet",
        )),
    }
}

/// An answer that is `e` at once.
fn failed<T: Send + 'static>(e: NodeError) -> Answer<T> {
    Box::pin(std::future::ready(Err(e)))
}

impl Server for LazyCluster {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn maxmemory_policy(&self) -> Option<String> {
        self.node().ok().and_then(|n| n.maxmemory_policy())
    }

    fn feed(&self) -> Option<Arc<dyn Feed>> {
        Some(Arc::clone(&self.feed) as Arc<dyn Feed>)
    }

    fn is_cluster(&self) -> bool {
        true
    }

    /// As the connected member's ([`ClusterNode`]): fixed at build, when
    /// the member's order is made.
    fn frees_apart(&self) -> bool {
        true
    }

    fn shard_breaks(&self) -> Vec<u16> {
        self.node().map(|n| n.shard_breaks()).unwrap_or_default()
    }

    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        match self.node() {
            Ok(node) => node.batch_cost(batch),
            Err(_) => BatchCost {
                round_trips: 0,
                script_calls: 0,
            },
        }
    }

    fn eval<T, R, A, F>(&self, call: Call<T, R, A, F>) -> Answer<R>
    where
        T: redis::FromRedisValue + Send + 'static,
        R: Send + 'static,
        A: Args,
        F: Read<T, R>,
    {
        match self.node() {
            Ok(node) => node.eval(call),
            Err(e) => {
                // Never sent: it will not run later, so its order keeps
                // nothing of it.
                call.stamp.ended(false);
                failed(e)
            }
        }
    }

    fn batch(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        match self.node() {
            Ok(node) => node.batch(batch),
            Err(e) => failed(e),
        }
    }

    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        match self.node() {
            Ok(node) => node.status(keys),
            Err(e) => failed(e),
        }
    }
}

/// The member's feed: the connected member's, once it is.
struct LazyFeed {
    state: Weak<OnceLock<State>>,
}

impl Feed for LazyFeed {
    fn open(&self) -> BoxFuture<'static, Result<FeedConn, NodeError>> {
        let state = self.state.upgrade();
        match reach(state.as_deref().and_then(OnceLock::get)).map(Server::feed) {
            Ok(Some(feed)) => feed.open(),
            Ok(None) => failed(NodeError::new(NodeErrorKind::Connection, "no feed")),
            Err(e) => failed(e),
        }
    }
}
