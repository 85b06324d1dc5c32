//! The N masters as one value: the configuration, the node list, the
//! background work and the calls that go to every node at once (release,
//! force release, status). The acquisition, the hold and the watchdog take
//! this, never the manager.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::config::Config;
use crate::error::{Error, NodeError, NodeFailure};
use crate::keys::Keys;
use crate::node::{NodeOps, Released};
use crate::quorum::{FanOut, Stragglers};
use crate::resume::Resume;
use crate::status::NodeStatus;
use crate::sync::Background;

pub(crate) struct Nodes {
    pub(crate) config: Config,
    list: Vec<Arc<dyn NodeOps>>,
    /// This manager's id: the prefix of every owner id it creates.
    pub(crate) client_id: String,
    background: Arc<Background>,
    /// The resume watcher of the loss signals.
    resume: Arc<Resume>,
}

impl Nodes {
    pub(crate) fn new(config: Config, list: Vec<Arc<dyn NodeOps>>, client_id: String) -> Self {
        Self {
            config,
            list,
            client_id,
            background: Arc::default(),
            resume: Resume::new(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Grants a holder needs.
    pub(crate) fn required(&self) -> usize {
        self.config.required
    }

    /// Node `i`, in the builder's order.
    pub(crate) fn node(&self, i: usize) -> &dyn NodeOps {
        &*self.list[i]
    }

    pub(crate) fn all(&self) -> &[Arc<dyn NodeOps>] {
        &self.list
    }

    /// The drift allowance of a lease.
    pub(crate) fn drift(&self, lease: Duration) -> Duration {
        self.config.drift(lease)
    }

    /// The per-node timeout of a call made under `lease`: never longer than
    /// what the lease leaves after the drift.
    pub(crate) fn call_timeout(&self, lease: Duration) -> Duration {
        self.config
            .node_timeout
            .min(lease.saturating_sub(self.drift(lease)))
    }

    /// The failure of node `i`, with its identity.
    pub(crate) fn failure(&self, i: usize, e: &NodeError) -> NodeFailure {
        e.clone().at(i, self.list[i].addr())
    }

    /// Runs `fut` as background work (see [`Background::spawn`]).
    pub(crate) fn spawn<F>(&self, fut: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        self.background.spawn(fut)
    }

    /// Resumes of the machine, for a loss signal of a lease of `lease`: the
    /// receiver changes when the time spent suspended grew (see
    /// [`Resume`]); the watcher runs while a receiver is alive.
    pub(crate) fn resumes(&self, lease: Duration) -> watch::Receiver<Duration> {
        self.resume.subscribe(self.drift(lease))
    }

    /// Resolves once the background work started so far has finished.
    pub(crate) async fn idle(&self) {
        self.background.idle().await;
    }

    /// Sends the release script for all but `left` levels of `holder`'s hold
    /// to every node, and tallies the answers. Returns once a quorum
    /// released or can no longer release; the other calls go on in the
    /// background, so every node gets the release.
    pub(crate) async fn release(
        &self,
        keys: &Arc<Keys>,
        holder: &Arc<str>,
        left: u32,
        lease: Duration,
        token: u64,
    ) -> ReleaseTally {
        let (t, rest) = self.release_quorum(keys, holder, left, lease, token).await;
        if !rest.is_empty() {
            self.spawn(rest.for_each(|_, _| {}));
        }
        t
    }

    /// [`Nodes::release`], handing back the calls still in flight when the
    /// quorum was decided instead of spawning their drain: a caller that
    /// already runs as background work drains them itself, one task fewer.
    pub(crate) async fn release_quorum(
        &self,
        keys: &Arc<Keys>,
        holder: &Arc<str>,
        left: u32,
        lease: Duration,
        token: u64,
    ) -> (ReleaseTally, Stragglers<Released>) {
        let required = self.required();
        let mut fan = FanOut::start(self.len(), self.call_timeout(lease), |i| {
            self.list[i].release(keys, holder, left, lease, token)
        });
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
        let mut t = ReleaseTally::default();
        for (i, r) in replies.iter().enumerate() {
            match r {
                Some(Ok(Released::Deleted | Released::Lowered)) => t.released += 1,
                Some(Ok(Released::Missing)) => {}
                Some(Ok(Released::OtherOwner)) => t.other += 1,
                Some(Err(e)) => t.failures.push(self.failure(i, e)),
                None => t.pending += 1,
            }
        }
        (t, rest)
    }

    /// Deletes the lock on every node, whoever holds it; returns on how many
    /// it was deleted.
    pub(crate) async fn force_release(&self, keys: &Arc<Keys>) -> Result<usize, Error> {
        let mut fan = FanOut::start(self.len(), self.config.node_timeout, |i| {
            self.list[i].force_release(keys)
        });
        fan.until(|_| false).await;
        let mut deleted = 0;
        let mut failures = Vec::new();
        for (i, r) in fan.replies().iter().enumerate() {
            match r {
                Some(Ok(true)) => deleted += 1,
                Some(Ok(false)) | None => {}
                Some(Err(e)) => failures.push(self.failure(i, e)),
            }
        }
        if failures.is_empty() {
            Ok(deleted)
        } else {
            Err(Error::Unavailable {
                name: keys.name.to_string(),
                failures,
                required: self.len(),
                granted: deleted,
            })
        }
    }

    /// What every node holds for the lock.
    pub(crate) async fn status(&self, keys: &Arc<Keys>) -> Vec<NodeStatus> {
        let mut fan = FanOut::start(self.len(), self.config.node_timeout, |i| {
            self.list[i].status(keys)
        });
        fan.until(|_| false).await;
        let (replies, _) = fan.into_parts();
        replies
            .into_iter()
            .enumerate()
            .map(|(i, r)| NodeStatus {
                node: i,
                addr: self.list[i].addr().to_owned(),
                maxmemory_policy: self.list[i].maxmemory_policy(),
                state: match r {
                    Some(Ok(s)) => Ok(s),
                    Some(Err(e)) => Err(self.failure(i, &e)),
                    None => Err(self.failure(i, &NodeError::timeout())),
                },
            })
            .collect()
    }
}

/// How the nodes answered a release.
#[derive(Default)]
pub(crate) struct ReleaseTally {
    /// Nodes that deleted the key or lowered its count.
    pub(crate) released: usize,
    /// Nodes where another owner holds it.
    pub(crate) other: usize,
    /// Nodes that had not answered when the release was decided.
    pub(crate) pending: usize,
    pub(crate) failures: Vec<NodeFailure>,
}
