//! The N members (masters, or Redis Clusters) as one value: the
//! configuration, the member list, the background work and the calls that
//! go to every member at once (release, force release, status). The
//! acquisition, the hold and the watchdog take this, never the manager.

use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;
use tracing::debug;

use crate::config::Config;
use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure};
use crate::keys::Keys;
use crate::node::{Claim, NodeOps, Released};
use crate::places::Keeper;
use crate::quorum::{deadline_after, FanOut, Leg, ReleaseTally, Stragglers};
use crate::resume::{Resume, Resumes};
use crate::status::NodeStatus;
use crate::sync::Background;
use crate::telemetry::Metrics;

/// The members of one manager, with what every call to them shares.
pub(crate) struct Members {
    pub(crate) config: Config,
    list: Vec<Arc<dyn NodeOps>>,
    /// This manager's id: the prefix of every owner id it creates.
    pub(crate) client_id: String,
    background: Arc<Background>,
    /// The resume watcher of the loss signals.
    resume: Arc<Resume>,
    /// What the manager records (`telemetry`).
    pub(crate) metrics: Metrics,
    /// Renewed holds lost, whatever noticed it ([`WatchdogStats::losses`]).
    ///
    /// [`WatchdogStats::losses`]: crate::WatchdogStats::losses
    pub(crate) lost_holds: AtomicU64,
    /// The places of acquisition attempts in flight
    /// ([`MAX_ATTEMPTS_IN_FLIGHT`]).
    attempts: tokio::sync::Semaphore,
    /// The waiters' places in the locks' queues, kept in batches
    /// ([`Members::keep_place`]).
    places: Keeper,
}

/// The most acquisition attempts of one manager in flight at once (from
/// their send to their quorum's answer); more wait for a place before they
/// send anything. A crowd of attempts (thousands of waiters or `try_lock`s
/// at once) otherwise puts thousands of replies per node ahead of a
/// release's in the client's runtime, and on a small machine the release's
/// answers are read after its per-node timeout (issue 35,
/// `tests/crowd.rs`). Releases, queue exits, renewals and reads take no
/// place. 512 attempts in flight keep every node's connection busy (the
/// throughput benchmark's 512 tasks ran at the limit).
pub(crate) const MAX_ATTEMPTS_IN_FLIGHT: usize = 512;

impl Members {
    pub(crate) fn new(
        config: Config,
        list: Vec<Arc<dyn NodeOps>>,
        client_id: String,
        metrics: Metrics,
    ) -> Self {
        Self {
            config,
            list,
            client_id,
            background: Arc::default(),
            resume: Resume::new(),
            metrics,
            lost_holds: AtomicU64::new(0),
            attempts: tokio::sync::Semaphore::new(MAX_ATTEMPTS_IN_FLIGHT),
            places: Keeper::default(),
        }
    }

    /// A place among this manager's acquisition attempts in flight, taken
    /// before an attempt sends anything and given back when its quorum is
    /// decided; waits while [`MAX_ATTEMPTS_IN_FLIGHT`] are out. Taken at
    /// once, without yielding, while places are free.
    ///
    /// # Cancel safety
    ///
    /// Dropping it while it waits gives up the wait; nothing was sent.
    pub(crate) async fn attempt_place(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        match self.attempts.try_acquire() {
            Ok(place) => Some(place),
            // Never closed: `None` would only let the attempt go unbounded.
            Err(_) => self.attempts.acquire().await.ok(),
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.list.len()
    }

    /// Grants a holder needs.
    pub(crate) fn required(&self) -> usize {
        self.config.required
    }

    /// Grants a hold of `keys` needs: the quorum, or a reader's read
    /// quorum (see [`Keys::required`]).
    pub(crate) fn required_for(&self, keys: &Keys) -> usize {
        keys.required(self.len(), self.required())
    }

    /// Node `i`, in the builder's order: its address, its settings. Its
    /// calls go through [`Members::fan_out`].
    pub(crate) fn node(&self, i: usize) -> &dyn NodeOps {
        &*self.list[i]
    }

    /// Starts a fan-out: `each` says what to do with node `i` (a call, or
    /// a reply known without asking), and every call has `timeout` to
    /// answer. Every call to a node goes through a fan-out (or
    /// [`Members::after_pause`]'s resend), so that each is metered in one
    /// place, fakes and real masters alike: latency, errors by kind, a
    /// timeout when it is left unanswered after `timeout`, whether the node
    /// answers (`telemetry`; nothing without the `metrics` feature).
    pub(crate) fn fan_out<T, S>(&self, timeout: Duration, each: impl FnMut(usize) -> S) -> FanOut<T>
    where
        T: Send + 'static,
        S: Into<Leg<T>>,
    {
        let now = Instant::now();
        FanOut::start(self.len(), now, timeout, self.metrics.meter(now), each)
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
    /// subscription tells when the time spent suspended grew (see
    /// [`Resume`]); the watcher runs while a subscription is alive.
    pub(crate) fn resumes(&self, lease: Duration) -> Resumes {
        self.resume.subscribe(self.drift(lease))
    }

    /// Resolves once the background work started so far has finished.
    pub(crate) async fn idle(&self) {
        self.background.idle().await;
    }

    /// Sends the release script for all but `left` levels of `holder`'s hold
    /// to every node, and tallies the answers. Returns once a quorum
    /// released or can no longer release, with the calls still in flight:
    /// the caller drains them (as background work), so every node gets the
    /// release.
    ///
    /// Each node has [`RELEASE_PATIENCE`](crate::config::RELEASE_PATIENCE)
    /// call timeouts to answer: nothing is gained by giving up on a release
    /// sooner (the lock stays held until its answers come, and nothing else
    /// is decided by them), while on a busy client an answer sent in time
    /// is read late (issue 35: 1 of 100,000 releases of a crowd on two
    /// cores failed, answered late).
    ///
    /// A node `skip` names (the hold's acquire never reached it, and
    /// nothing put the key there since) is not asked: it counts as a node
    /// that failed, unsent, so that no release waits to be sent there
    /// after a pause for a key the node cannot have.
    pub(crate) async fn release_quorum(
        self: &Arc<Self>,
        keys: &Arc<Keys>,
        claim: &Claim,
        token: u64,
        skip: &[bool],
    ) -> (ReleaseTally, Stragglers<Released>) {
        let required = self.required_for(keys);
        let timeout = self
            .call_timeout(claim.lease)
            .saturating_mul(crate::config::RELEASE_PATIENCE);
        let skipped = |i: usize| skip.get(i).copied().unwrap_or(false);
        let mut fan = self.releases(timeout, keys, claim, token, skipped);
        fan.until_quorum(required, |r| {
            matches!(r, Released::Deleted | Released::Lowered)
        })
        .await;
        let (mut replies, rest) = fan.into_parts();
        for (i, r) in replies.iter_mut().enumerate() {
            if skipped(i) {
                *r = Some(Err(NodeError::new(
                    NodeErrorKind::Timeout,
                    "not sent: this hold's acquire never reached the node",
                )));
            }
        }
        (ReleaseTally::of(&replies, |i, e| self.failure(i, e)), rest)
    }

    /// The release of all but `left` levels of `holder`'s hold (a rollback
    /// too) on every node but those `skip` names (they answer
    /// [`Released::Missing`] unasked), each with `timeout` to answer. A
    /// call that meets the node's pause after a refused connection was
    /// never sent: it is sent when the pause ends (as
    /// [`Members::after_pause`] sends it, by the fan-out's
    /// [`FanOut::on_reply`]: one closure per fan-out, not a future per
    /// node), so that a node back with its data (it was persisted) does
    /// not keep the key for the rest of the lease.
    pub(crate) fn releases(
        self: &Arc<Self>,
        timeout: Duration,
        keys: &Arc<Keys>,
        claim: &Claim,
        token: u64,
        skip: impl Fn(usize) -> bool,
    ) -> FanOut<Released> {
        let now = Instant::now();
        let fan = FanOut::start(self.len(), now, timeout, self.metrics.meter(now), |i| {
            if skip(i) {
                Leg::Known(Ok(Released::Missing))
            } else {
                Leg::Call(self.list[i].release(keys, claim, token))
            }
        });
        let end = deadline_after(now, claim.lease);
        let (nodes, keys, claim) = (Arc::clone(self), Arc::clone(keys), claim.clone());
        fan.on_reply(move |i, r| {
            if let Err(NodeError {
                unsent_until: Some(at),
                ..
            }) = r
            {
                let (keys, claim) = (Arc::clone(&keys), claim.clone());
                let call = move |n: &dyn NodeOps| n.release(&keys, &claim, token);
                let again = send_after_pause(Arc::clone(&nodes), i, call, *at, end);
                nodes.spawn(again);
            }
        })
    }

    /// Takes `waiter` out of the queue of `keys` on every node `on` names
    /// (the others answer `false` unasked), each with the node timeout to
    /// answer; as [`Members::releases`], a call that met a node's pause
    /// is sent when the pause ends.
    pub(crate) fn leave(
        self: &Arc<Self>,
        keys: &Arc<Keys>,
        waiter: &Arc<str>,
        on: impl Fn(usize) -> bool,
    ) -> FanOut<bool> {
        self.fan_out(self.config.node_timeout, |i| {
            if !on(i) {
                return Leg::Known(Ok(false));
            }
            let (keys, waiter) = (Arc::clone(keys), Arc::clone(waiter));
            Leg::Call(self.after_pause(i, self.config.queue_timeout, move |n| {
                n.leave(&keys, &waiter)
            }))
        })
    }

    /// Makes `call` to node `i` and answers as it does. When the node's
    /// pause after a refused connection failed it without sending it (the
    /// error's `unsent_until`), it is sent again as background work once
    /// the pause ends: once, and again only while it keeps meeting the
    /// pause unsent, so a call that may have run is never sent twice. Only
    /// for calls whose late arrival is harmless (a release or a rollback
    /// deletes or lowers what one hold owns, and a hold's id is never
    /// reused; a `leave` removes one waiter), and only within `life`, the
    /// longest the state they undo can last on the node (the lease, the
    /// queue timeout); each try waits for its answer for the node timeout.
    /// The first try is metered by the fan-out it is sent in, each resend
    /// here.
    fn after_pause<T, C>(
        self: &Arc<Self>,
        i: usize,
        life: Duration,
        call: C,
    ) -> BoxFuture<'static, Result<T, NodeError>>
    where
        T: Send + 'static,
        C: Fn(&dyn NodeOps) -> BoxFuture<'static, Result<T, NodeError>> + Send + Sync + 'static,
    {
        let first = call(&*self.list[i]);
        let nodes = Arc::clone(self);
        let end = deadline_after(Instant::now(), life);
        Box::pin(async move {
            let r = first.await;
            if let Err(NodeError {
                unsent_until: Some(at),
                ..
            }) = &r
            {
                let again = send_after_pause(Arc::clone(&nodes), i, call, *at, end);
                nodes.spawn(again);
            }
            r
        })
    }

    /// Deletes the lock on every node, whoever holds it; returns on how many
    /// it was deleted.
    pub(crate) async fn force_release(&self, keys: &Arc<Keys>) -> Result<usize, Error> {
        let mut fan = self.fan_out(self.config.node_timeout, |i| {
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
        let mut fan = self.fan_out(self.config.node_timeout, |i| self.list[i].status(keys));
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

/// Sends `call` to node `i` once its pause ends (`at`), and again each time
/// it meets a pause unsent, as long as that ends before `end`; each try has
/// the node timeout to answer, and is metered.
async fn send_after_pause<T, C>(
    nodes: Arc<Members>,
    i: usize,
    call: C,
    mut at: Instant,
    end: Instant,
) where
    C: Fn(&dyn NodeOps) -> BoxFuture<'static, Result<T, NodeError>>,
{
    let timeout = nodes.config.node_timeout;
    while at < end {
        tokio::time::sleep_until(at).await;
        let meter = nodes.metrics.meter(Instant::now());
        let answer = tokio::time::timeout(timeout, call(&*nodes.list[i])).await;
        match &answer {
            Ok(r) => meter.answered(i, r, &mut None),
            Err(_) => meter.unanswered(i),
        }
        match answer {
            Ok(Err(NodeError {
                unsent_until: Some(next),
                ..
            })) => at = next,
            Ok(Ok(_)) => {
                debug!(node = i, "sent after the node's pause");
                return;
            }
            Ok(Err(e)) => {
                debug!(node = i, error = %e.message, "failed after the node's pause");
                return;
            }
            Err(_) => {
                debug!(node = i, "timed out after the node's pause");
                return;
            }
        }
    }
    debug!(
        node = i,
        "the node's pause outlasted what the call undoes; not sent"
    );
}

mod keep;
