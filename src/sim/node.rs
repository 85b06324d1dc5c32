//! Fault injection: a decorator around the in-memory node. Each manager
//! (process) gets its own `SimNode` per node, so faults can hit a node for
//! everyone ([`NodeCtl`]) or one client↔node link ([`LinkCtl`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::Keys;
use crate::node::{Answer, Grant};
use crate::sync::locked;
use crate::tests::fake::{FakeNode, Script, TestNode};

use super::checker::{Ev, Invariant, Log, Who, LOCKS, WORLD};
use super::feed::SimFeed;
use super::net::{Cut, Health, LinkCtl, NodeCtl};

/// What one client's calls to one node go through.
pub(crate) struct SimNode {
    pub(crate) node: Arc<NodeCtl>,
    /// This client's link to the node.
    pub(crate) link: Arc<LinkCtl>,
    /// This client's process link (a stalled process sends nothing).
    pub(crate) process: Arc<LinkCtl>,
    /// Traces every call into the log (replays only).
    pub(crate) trace: Option<(Log, Who, usize)>,
    /// How long a pub/sub call waits on a link that does not answer.
    pub(crate) timeout: Duration,
    /// The run's spin detector.
    pub(crate) spin: Arc<Spin>,
}

/// Calls at one virtual instant beyond which the run is spinning: above
/// the largest legitimate burst (every task's fan-out and rollback at one
/// instant: 3 processes × 3 tasks × 5 nodes × 2 = 90). Over 3,000 safe and
/// 3,000 fair seeds, the largest burst after the start was 79 calls.
const SPIN_CALLS: u32 = 100;

/// The same bound at the run's first instant, where all nine tasks start
/// at once and each may attempt, subscribe and attempt again: bursts of up
/// to 99 calls over those 6,000 seeds, and 101 at fair seed 10924. A spin
/// makes calls without end, so it passes either bound.
const SPIN_CALLS_AT_START: u32 = 200;

/// The bound after the start in election mode, where every process's
/// watch reads the leader on every node when a member publishes a change
/// (twice: on the first member's message, and on the others' that came
/// meanwhile), and a proclaim, a resignation and the next leader's grant
/// and proclaim may fall at one instant: over 1,000 election seeds the
/// largest burst after the start was 155 calls.
pub(crate) const SPIN_CALLS_ELECTION: u32 = 400;

/// The bound in the semaphore and rw modes: a release rings one waiter
/// per manager, which attempts a slot (or its reader or writer key), and
/// after a miss reads every slot, may subscribe and read again, and
/// attempts again (up to 4 fan-outs), and a permit dropped as another is
/// granted rings them again at the same instant: 3 processes × 4 × 5
/// nodes × 2 = 120 (semaphore seed 15 burst 132 calls at one instant, then
/// time passed). A spin passes it too.
pub(crate) const SPIN_CALLS_SHARED: u32 = 300;

/// Counts node calls per virtual instant: past [`SPIN_CALLS`] the run is
/// spinning (logged at the first such instant of a run), and the replies
/// are slowed by a node timeout, so that virtual time moves on and
/// the spin costs a bounded number of calls.
pub(crate) struct Spin {
    pub(crate) log: Log,
    at: Mutex<(Option<Instant>, u32)>,
    seen: AtomicBool,
    /// The bound after the start ([`SPIN_CALLS`] unless set).
    calls: u32,
}

impl Spin {
    pub(crate) fn new(log: Log) -> Arc<Self> {
        Self::bounded(log, SPIN_CALLS)
    }

    /// A detector whose bound after the start is `calls`.
    pub(crate) fn bounded(log: Log, calls: u32) -> Arc<Self> {
        Arc::new(Self {
            log,
            at: Mutex::new((None, 0)),
            seen: AtomicBool::new(false),
            calls,
        })
    }

    /// Counts one call now; whether the run is spinning.
    fn spinning(&self, what: &str) -> bool {
        let now = Instant::now();
        let mut at = locked(&self.at);
        if at.0 != Some(now) {
            *at = (Some(now), 0);
        }
        at.1 = at.1.saturating_add(1);
        let bound = if self.log.now().is_zero() {
            SPIN_CALLS_AT_START.max(self.calls)
        } else {
            self.calls
        };
        if at.1 == bound && !self.seen.swap(true, Ordering::Relaxed) {
            self.log.push(
                WORLD,
                Ev::Violation(
                    Invariant::Spin,
                    format!("{bound} node calls without time passing (last: {what})"),
                ),
            );
        }
        at.1 >= bound
    }

    /// `reply`, delayed by `slow` when the run is spinning (counts one call).
    pub(crate) fn slowed<T: Send + 'static>(
        &self,
        what: &str,
        slow: Duration,
        reply: BoxFuture<'static, T>,
    ) -> BoxFuture<'static, T> {
        if !self.spinning(what) {
            return reply;
        }
        Box::pin(async move {
            tokio::time::sleep(slow).await;
            reply.await
        })
    }
}

fn never<T: Send + 'static, E: Send + 'static>() -> BoxFuture<'static, Result<T, E>> {
    Box::pin(futures::future::pending())
}

impl SimNode {
    /// Sends the request unless a fault drops it; the node applies it when
    /// it arrives (at once, or after the link's jitter when the node is
    /// slow, always in the order sent) if it is still up then; the reply
    /// comes back after more jitter unless a fault drops it.
    fn call<T: std::fmt::Debug + Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&FakeNode) -> BoxFuture<'static, Result<T, NodeError>> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, NodeError>> {
        let reply = self.call_now(what, f);
        self.spin.slowed(what, self.timeout, reply)
    }

    fn call_now<T: std::fmt::Debug + Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&FakeNode) -> BoxFuture<'static, Result<T, NodeError>> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, NodeError>> {
        let path = Path {
            node: &self.node,
            link: &self.link,
            process: &self.process,
            shard: None,
        };
        let reply = path.send(&self.trace, what, f);
        Box::pin(async move {
            match reply.await {
                Ok(r) => r,
                Err(Lost::Refused) => Err(NodeError::new(NodeErrorKind::Connection, "refused")),
                Err(Lost::Reset) => Err(NodeError::new(NodeErrorKind::Connection, "reset")),
                Err(Lost::TimedOut) => Err(NodeError::timeout()),
            }
        })
    }
}

/// How a call failed on its way, without an answer of the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lost {
    /// The connection was refused: nothing was sent.
    Refused,
    /// The connection was reset after the node ran the call.
    Reset,
    /// The node ran the call; the client's response timeout ended the try
    /// before its reply came (the connection lives on).
    TimedOut,
}

/// One shard of a sharded member on one client's way: its switches and
/// this client's connection to it.
#[derive(Clone)]
pub(crate) struct ShardWay {
    pub(crate) index: usize,
    pub(crate) ctl: Arc<NodeCtl>,
    pub(crate) link: Arc<LinkCtl>,
}

/// The switches a call passes: the process's, the client↔node link's, the
/// node's, and, on a sharded member, the shard's and the client↔shard
/// connection's (which then carries the requests in order).
pub(crate) struct Path<'a> {
    pub(crate) node: &'a Arc<NodeCtl>,
    pub(crate) link: &'a Arc<LinkCtl>,
    pub(crate) process: &'a Arc<LinkCtl>,
    pub(crate) shard: Option<&'a ShardWay>,
}

impl Path<'_> {
    /// Sends the request unless a fault drops it; the node applies it when
    /// it arrives (at once, or after the link's jitter when the node is
    /// slow, always in the order sent) if it is still up then; the reply
    /// comes back after more jitter unless a fault drops it.
    pub(crate) fn send<T: std::fmt::Debug + Send + 'static>(
        &self,
        trace: &Option<(Log, Who, usize)>,
        what: &'static str,
        f: impl FnOnce(&FakeNode) -> BoxFuture<'static, T> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, Lost>> {
        let shard = self.shard.cloned();
        let mut health = self.node.health();
        if let (Health::Up, Some(s)) = (health, &shard) {
            health = s.ctl.health();
        }
        let mut cut = match self.process.cut() {
            Cut::None => self.link.cut(),
            c => c,
        };
        if let (Cut::None, Some(s)) = (cut, &shard) {
            cut = s.link.cut();
        }
        if let Some((log, who, node)) = trace {
            let on = shard
                .as_ref()
                .map_or(String::new(), |s| format!("shard {} ", s.index));
            log.push(
                *who,
                Ev::Call {
                    node: *node,
                    call: what,
                    fate: format!("{on}{health:?} {cut:?}"),
                },
            );
        }
        match health {
            Health::Fail | Health::Down => {
                return Box::pin(async {
                    tokio::task::yield_now().await;
                    Err(Lost::Refused)
                })
            }
            Health::BlackHole => return never(),
            Health::Up => {}
        }
        if cut == Cut::Requests {
            return never();
        }
        let jitter = || {
            let by_shard = shard.as_ref().and_then(|s| s.ctl.jitter());
            by_shard.or_else(|| self.node.jitter()).unwrap_or_default()
        };
        let (there, back) = (jitter(), jitter());
        let (tx, rx) = oneshot::channel();
        let node = Arc::clone(self.node);
        let on = shard.as_ref().map(|s| Arc::clone(&s.ctl));
        let epochs = move |node: &NodeCtl, on: &Option<Arc<NodeCtl>>| {
            (node.epoch(), on.as_ref().map(|s| s.epoch()))
        };
        let apply = move || -> BoxFuture<'static, ()> {
            // Arrived: a node that went down meanwhile never saw it.
            let up = |n: &NodeCtl| n.health() == Health::Up;
            if !up(&node) || on.as_deref().is_some_and(|s| !up(s)) {
                return Box::pin(async {});
            }
            let epoch = epochs(&node, &on);
            let reply = f(&node.fake);
            node.changed();
            Box::pin(async move {
                let r = reply.await;
                let _ = tx.send((epoch, r));
            })
        };
        // Applied now, in call order, when nothing is queued on the link.
        let wire = shard.as_ref().map_or(self.link, |s| &s.link);
        let applied = wire.send(there, apply).map(|apply| apply());
        let node = Arc::clone(self.node);
        let on = shard.as_ref().map(|s| Arc::clone(&s.ctl));
        let trace = trace.clone();
        Box::pin(async move {
            if let Some(reply) = applied {
                reply.await;
            }
            let Ok((epoch, r)) = rx.await else {
                return never().await;
            };
            if cut == Cut::Replies {
                return never().await;
            }
            match cut {
                Cut::Resets => return Err(Lost::Reset),
                Cut::TimesOut => return Err(Lost::TimedOut),
                _ => {}
            }
            if !back.is_zero() {
                tokio::time::sleep(back).await;
            }
            if epochs(&node, &on) != epoch {
                // The connection died with the node: the reply is lost.
                return never().await;
            }
            if let Some((log, who, node)) = trace {
                log.push(
                    who,
                    Ev::Call {
                        node,
                        call: what,
                        fate: format!("reply {r:?}"),
                    },
                );
            }
            Ok(r)
        })
    }
}

impl TestNode for SimNode {
    fn fake(&self) -> &FakeNode {
        &self.node.fake
    }

    fn reach<T: std::fmt::Debug + Send + 'static>(
        &self,
        what: &'static str,
        script: impl Script<T>,
    ) -> Answer<T> {
        self.call(what, move |n| n.reach(what, script))
    }

    fn release_feed(&self) -> Option<Arc<dyn crate::node::Feed>> {
        Some(Arc::new(SimFeed {
            node: Arc::clone(&self.node),
            link: Arc::clone(&self.link),
            process: Arc::clone(&self.process),
            timeout: self.timeout,
        }))
    }

    fn acquired(&self, reply: Answer<Grant>) -> Answer<Grant> {
        let process = Arc::clone(&self.process);
        Box::pin(async move {
            let r = reply.await;
            if matches!(r, Ok(Grant::Granted(_))) {
                if let Some(pause) = process.disarm() {
                    pause();
                }
            }
            r
        })
    }

    fn forced(&self, keys: &Keys) -> Arc<dyn Fn() + Send + Sync> {
        let log = self.spin.log.clone();
        let lock = LOCKS.iter().position(|l| **l == *keys.name);
        Arc::new(move || {
            // An administrative break lands on this node now, maybe after
            // `force_unlock` returned: holds that exist now are broken.
            if let Some(lock) = lock {
                log.push(WORLD, Ev::ForceUnlock { lock });
            }
        })
    }
}
