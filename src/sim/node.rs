//! Fault injection: a decorator around the in-memory node. Each manager
//! (process) gets its own `SimNode` per node, so faults can hit a node for
//! everyone ([`NodeCtl`]) or one client↔node link ([`LinkCtl`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::Keys;
use crate::node::{Answer, Grant};
use crate::sync::locked;
use crate::tests::fake::{FakeNode, Script, TestNode};

use super::checker::{Ev, Log, Who};
use super::feed::{FeedCtl, SimFeed};

/// How a node answers everyone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Health {
    Up,
    /// Refuses connections at once.
    Fail,
    /// Takes requests and never answers; nothing is applied.
    BlackHole,
    /// Restarting: refuses connections.
    Down,
}

/// One node as every client sees it.
pub(crate) struct NodeCtl {
    pub(crate) fake: Arc<FakeNode>,
    health: Mutex<Health>,
    /// Reply delay ceiling when slow (zero: prompt).
    slow: Mutex<Duration>,
    /// Bumped on every restart: replies of calls made before are lost.
    epoch: AtomicU64,
}

impl NodeCtl {
    pub(crate) fn new(i: usize) -> Arc<Self> {
        Arc::new(Self {
            fake: FakeNode::new(i),
            health: Mutex::new(Health::Up),
            slow: Mutex::new(Duration::ZERO),
            epoch: AtomicU64::new(0),
        })
    }

    pub(crate) fn set_health(&self, h: Health) {
        *locked(&self.health) = h;
    }

    pub(crate) fn health(&self) -> Health {
        *locked(&self.health)
    }

    pub(crate) fn slow(&self) -> Duration {
        *locked(&self.slow)
    }

    pub(crate) fn set_slow(&self, max: Duration) {
        *locked(&self.slow) = max;
    }

    /// Goes down, dropping the replies in flight; `empty` forgets all data.
    pub(crate) fn crash(&self, empty: bool) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
        if empty {
            self.fake.wipe();
        }
        // Its pub/sub connections die with it.
        self.fake.hub().disconnect_all();
        self.set_health(Health::Down);
    }

    pub(crate) fn heal(&self) {
        self.set_health(Health::Up);
        self.set_slow(Duration::ZERO);
    }

    fn epoch(&self) -> u64 {
        self.epoch.load(Ordering::Relaxed)
    }
}

/// How one client↔node link drops traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cut {
    None,
    /// Requests never arrive.
    Requests,
    /// Requests are applied; replies never arrive.
    Replies,
}

/// A request in flight on a slow link, applied when it arrives.
type Job = (Instant, Box<dyn FnOnce() -> BoxFuture<'static, ()> + Send>);

/// Requests of one link still on the wire: they arrive in order, each
/// no earlier than the one sent before it.
#[derive(Default)]
struct Wire {
    /// When the last request sent arrives.
    last: Option<Instant>,
    tx: Option<mpsc::UnboundedSender<Job>>,
    /// Requests sent and not applied yet.
    queued: Arc<AtomicU64>,
}

/// A fault that starts when its trigger happens.
pub(crate) type Armed = Box<dyn FnOnce() + Send>;

/// One client↔node link.
pub(crate) struct LinkCtl {
    cut: Mutex<Cut>,
    wire: Mutex<Wire>,
    /// On a process link: a pause that starts as the process receives its
    /// next grant.
    on_grant: Mutex<Option<Armed>>,
    /// Pub/sub faults of the link.
    pub(crate) feed: FeedCtl,
}

impl LinkCtl {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            cut: Mutex::new(Cut::None),
            wire: Mutex::default(),
            on_grant: Mutex::new(None),
            feed: FeedCtl::default(),
        })
    }

    /// Sends `job` to arrive `delay` from now, behind every request sent
    /// before; `None` when it arrives at once (nothing is queued).
    fn send(
        &self,
        delay: Duration,
        job: impl FnOnce() -> BoxFuture<'static, ()> + Send + 'static,
    ) -> Option<impl FnOnce() -> BoxFuture<'static, ()>> {
        let now = Instant::now();
        let mut w = locked(&self.wire);
        let at = w.last.map_or(now + delay, |l| l.max(now + delay));
        if at <= now && w.queued.load(Ordering::Relaxed) == 0 {
            return Some(job);
        }
        w.last = Some(at);
        w.queued.fetch_add(1, Ordering::Relaxed);
        let queued = Arc::clone(&w.queued);
        let tx = w.tx.get_or_insert_with(|| {
            let (tx, mut rx) = mpsc::unbounded_channel::<Job>();
            tokio::spawn(async move {
                while let Some((at, job)) = rx.recv().await {
                    tokio::time::sleep_until(at).await;
                    let reply = job();
                    queued.fetch_sub(1, Ordering::Relaxed);
                    reply.await;
                }
            });
            tx
        });
        let _ = tx.send((at, Box::new(job)));
        None
    }

    pub(crate) fn cut(&self) -> Cut {
        *locked(&self.cut)
    }

    pub(crate) fn set(&self, cut: Cut) {
        *locked(&self.cut) = cut;
    }

    /// Arms `f` to run as the next grant arrives (`None` disarms).
    pub(crate) fn arm(&self, f: Option<Armed>) {
        *locked(&self.on_grant) = f;
    }
}

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
/// instant: 3 processes × 3 tasks × 5 nodes × 2 = 90).
const SPIN_CALLS: u32 = 100;

/// Counts node calls per virtual instant: past [`SPIN_CALLS`] the run is
/// spinning (logged at the first such instant of a run), and the replies
/// are slowed by a node timeout, so that virtual time moves on and
/// the spin costs a bounded number of calls.
pub(crate) struct Spin {
    pub(crate) log: Log,
    at: Mutex<(Option<Instant>, u32)>,
    seen: std::sync::atomic::AtomicBool,
}

impl Spin {
    pub(crate) fn new(log: Log) -> Arc<Self> {
        Arc::new(Self {
            log,
            at: Mutex::new((None, 0)),
            seen: std::sync::atomic::AtomicBool::new(false),
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
        if at.1 == SPIN_CALLS && !self.seen.swap(true, Ordering::Relaxed) {
            self.log.push(
                super::checker::WORLD,
                Ev::Violation(
                    super::checker::Invariant::Spin,
                    format!("{SPIN_CALLS} node calls without time passing (last: {what})"),
                ),
            );
        }
        at.1 >= SPIN_CALLS
    }
}

fn never<T: Send + 'static>() -> BoxFuture<'static, Result<T, NodeError>> {
    Box::pin(async {
        futures::future::pending::<()>().await;
        Err(NodeError::timeout())
    })
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
        if !self.spin.spinning(what) {
            return reply;
        }
        let slow = self.timeout;
        Box::pin(async move {
            tokio::time::sleep(slow).await;
            reply.await
        })
    }

    fn call_now<T: std::fmt::Debug + Send + 'static>(
        &self,
        what: &'static str,
        f: impl FnOnce(&FakeNode) -> BoxFuture<'static, Result<T, NodeError>> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, NodeError>> {
        let health = *locked(&self.node.health);
        let cut = match *locked(&self.process.cut) {
            Cut::None => *locked(&self.link.cut),
            c => c,
        };
        if let Some((log, who, node)) = &self.trace {
            log.push(
                *who,
                Ev::Call {
                    node: *node,
                    call: what,
                    fate: format!("{health:?} {cut:?}"),
                },
            );
        }
        match health {
            Health::Fail | Health::Down => {
                return Box::pin(async {
                    tokio::task::yield_now().await;
                    Err(NodeError::new(NodeErrorKind::Connection, "refused"))
                })
            }
            Health::BlackHole => return never(),
            Health::Up => {}
        }
        if cut == Cut::Requests {
            return never();
        }
        let slow = *locked(&self.node.slow);
        let jitter = || {
            if slow.is_zero() {
                Duration::ZERO
            } else {
                let max = u64::try_from(slow.as_micros()).unwrap_or(u64::MAX);
                Duration::from_micros(crate::rng::up_to(max))
            }
        };
        let (there, back) = (jitter(), jitter());
        let (tx, rx) = oneshot::channel();
        let node = Arc::clone(&self.node);
        let apply = move || -> BoxFuture<'static, ()> {
            // Arrived: a node that went down meanwhile never saw it.
            if *locked(&node.health) != Health::Up {
                return Box::pin(async {});
            }
            let epoch = node.epoch();
            let reply = f(&node.fake);
            Box::pin(async move {
                let r = reply.await;
                let _ = tx.send((epoch, r));
            })
        };
        // Applied now, in call order, when nothing is queued on the link.
        let applied = self.link.send(there, apply).map(|apply| apply());
        let node = Arc::clone(&self.node);
        let trace = self.trace.clone();
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
            if !back.is_zero() {
                tokio::time::sleep(back).await;
            }
            if node.epoch() != epoch {
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
            r
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
                let armed = locked(&process.on_grant).take();
                if let Some(pause) = armed {
                    pause();
                }
            }
            r
        })
    }

    fn forced(&self, keys: &Keys) -> Box<dyn FnOnce() + Send> {
        let log = self.spin.log.clone();
        let lock = super::clients::LOCKS.iter().position(|l| **l == *keys.name);
        Box::new(move || {
            // An administrative break lands on this node now, maybe after
            // `force_unlock` returned: holds that exist now are broken.
            if let Some(lock) = lock {
                log.push(super::checker::WORLD, Ev::ForceUnlock { lock });
            }
        })
    }
}
