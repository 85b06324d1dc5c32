//! The simulated network's switches: how each node answers everyone
//! ([`NodeCtl`]) and how each client↔node link carries traffic
//! ([`LinkCtl`], with its pub/sub faults in [`FeedCtl`]). The faults
//! (`faults`) flip them; the node calls (`node`) and the release feeds
//! (`feed`) go through them; the liveness monitor reads them.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::futures::Notified;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;

use crate::rng::up_to;
use crate::sync::locked;
use crate::tests::fake::FakeNode;

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
    /// Told after every call the node runs and every empty restart (the
    /// election mode's record tracker, `records`).
    changed: Mutex<Option<Changed>>,
}

/// What a node tells after each change it may have made.
pub(crate) type Changed = Arc<dyn Fn(&FakeNode) + Send + Sync>;

impl NodeCtl {
    pub(crate) fn new(i: usize) -> Arc<Self> {
        Arc::new(Self {
            fake: FakeNode::new(i),
            health: Mutex::new(Health::Up),
            slow: Mutex::new(Duration::ZERO),
            epoch: AtomicU64::new(0),
            changed: Mutex::new(None),
        })
    }

    /// The switches of one shard of a sharded member, whose data (`fake`)
    /// every shard of the member shares.
    pub(crate) fn sharing(fake: Arc<FakeNode>) -> Arc<Self> {
        Arc::new(Self {
            fake,
            health: Mutex::new(Health::Up),
            slow: Mutex::new(Duration::ZERO),
            epoch: AtomicU64::new(0),
            changed: Mutex::new(None),
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

    /// A random delay up to the node's slowness; `None` (and no draw)
    /// when the node is prompt.
    pub(crate) fn jitter(&self) -> Option<Duration> {
        let slow = self.slow();
        if slow.is_zero() {
            return None;
        }
        let max = u64::try_from(slow.as_micros()).unwrap_or(u64::MAX);
        Some(Duration::from_micros(up_to(max)))
    }

    /// Tells `f` of every call the node runs from now on, and of every
    /// empty restart, once it is done.
    pub(crate) fn on_change(&self, f: Changed) {
        *locked(&self.changed) = Some(f);
    }

    /// The node ran a call or forgot its data: tells `on_change`'s watcher.
    pub(crate) fn changed(&self) {
        let f = locked(&self.changed).clone();
        if let Some(f) = f {
            f(&self.fake);
        }
    }

    /// Goes down, dropping the replies in flight; `empty` forgets all data.
    pub(crate) fn crash(&self, empty: bool) {
        self.epoch.fetch_add(1, Ordering::Relaxed);
        if empty {
            self.fake.wipe();
            self.changed();
        }
        // Its pub/sub connections die with it.
        self.fake.hub().disconnect_all();
        self.set_health(Health::Down);
    }

    pub(crate) fn heal(&self) {
        self.set_health(Health::Up);
        self.set_slow(Duration::ZERO);
    }

    /// Its restarts so far: a reply of an older epoch is lost.
    pub(crate) fn epoch(&self) -> u64 {
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
    /// Requests are applied; each reply is a connection error at once (the
    /// command connection was reset after the node ran the call); the
    /// pub/sub connection still delivers.
    Resets,
    /// Requests are applied; each reply comes after the client's response
    /// timeout, which ends the try with a timeout error (the connection
    /// lives on: a sharded member's shard connections only).
    TimesOut,
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
    pub(crate) fn send(
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

    /// Takes the fault armed for the next grant, if any.
    pub(crate) fn disarm(&self) -> Option<Armed> {
        locked(&self.on_grant).take()
    }
}

/// The pub/sub faults of one link.
#[derive(Default)]
pub(crate) struct FeedCtl {
    /// Percent of messages lost (and, half as often, duplicated).
    lossy: AtomicU32,
    /// Ends every pub/sub connection of the link.
    kill: Notify,
}

impl FeedCtl {
    pub(crate) fn set_lossy(&self, percent: u32) {
        self.lossy.store(percent, Ordering::Relaxed);
    }

    /// Percent of messages lost now.
    pub(crate) fn lossy(&self) -> u32 {
        self.lossy.load(Ordering::Relaxed)
    }

    /// Kills the link's pub/sub connections now: their streams end.
    pub(crate) fn kill(&self) {
        self.kill.notify_waiters();
    }

    /// Completes at the next [`FeedCtl::kill`] (enable it to count from now).
    pub(crate) fn killed(&self) -> Notified<'_> {
        self.kill.notified()
    }
}
