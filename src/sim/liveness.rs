//! The liveness invariant ([`Invariant::Progress`]): whenever a live
//! waiter wants a lock that is free on a quorum of the nodes its process
//! can reach, some waiter is granted it within a bound.
//!
//! A monitor samples the world every [`SAMPLE`]: the waiting requests (a
//! registry the clients keep), the processes' state (stalled or dead: not
//! live), the links (a node counts for a waiter only if it is up, not slow,
//! and the process's link to it is not cut either way) and the nodes'
//! actual keys (the fakes). A lock is free on a node when the fake holds no
//! unexpired key for it there. While a waiter is live and its lock free on
//! a quorum of its reachable nodes, a clock runs; any key showing up (a
//! grant, or an attempt's partial grant) or a fault stops it. Past the
//! bound, the history is flagged.
//!
//! The bound, for a plain waiter: a waiter with a place on the nodes calls
//! at least every `queue_timeout / 3` (its place's refresh; this also
//! bounds a lost or misdirected release message), the attempt's fan-out
//! and its rollback take up to two node timeouts, a lost split vote one
//! backoff, plus the timers' jitter (2 ms), the quorum grace (5 ms) and a
//! margin for the sampling and the paused clock's scheduling. A fair
//! waiter may also wait out a head that will never claim its turn (a dead
//! waiter, or one whose leave was lost): one queue timeout more.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::checker::{Ev, Invariant, Log, WORLD};
use super::net::{Cut, Health, LinkCtl, NodeCtl};
use super::shards::Member;
use crate::sync::locked;

/// How often the monitor looks.
const SAMPLE: Duration = Duration::from_millis(5);

/// Slack for sampling and scheduling.
const MARGIN: Duration = Duration::from_millis(20);

/// One waiting request.
#[derive(Debug, Clone, Copy)]
struct Want {
    lock: usize,
    fair: bool,
    /// A request with time to wait (a `try_lock(ZERO)` has none).
    waits: bool,
    serial: u64,
}

/// Requests by process and task.
type Registry = HashMap<(usize, usize), Want>;

/// The requests in flight, by process and task, and when a request of
/// each lock last ended.
#[derive(Default)]
pub(crate) struct Wants {
    now: Mutex<(Registry, u64)>,
    /// By lock: when a request last ended (granted or not). A grant
    /// released at once leaves no key for the monitor to see; the end of
    /// its request restarts every clock of the lock instead.
    ended: Mutex<HashMap<usize, Instant>>,
}

impl Wants {
    /// Records that task `t` of process `p` waits for lock `lock` until the
    /// returned guard is dropped.
    pub(crate) fn enter(
        self: &Arc<Self>,
        (p, t): (usize, usize),
        lock: usize,
        fair: bool,
        waits: bool,
    ) -> Leave {
        let mut w = locked(&self.now);
        w.1 += 1;
        let serial = w.1;
        let want = Want {
            lock,
            fair,
            waits,
            serial,
        };
        w.0.insert((p, t), want);
        Leave(Arc::clone(self), (p, t), serial)
    }

    /// Processes with a waiting request now.
    pub(crate) fn waiting(&self) -> Vec<usize> {
        let w = locked(&self.now);
        let mut ps: Vec<usize> = w.0.iter().filter(|x| x.1.waits).map(|x| x.0 .0).collect();
        ps.sort_unstable();
        ps.dedup();
        ps
    }
}

/// Ends a waiting request's registration.
pub(crate) struct Leave(Arc<Wants>, (usize, usize), u64);

impl Drop for Leave {
    fn drop(&mut self) {
        let mut w = locked(&self.0.now);
        if let Some(x) = w.0.get(&self.1).filter(|x| x.serial == self.2).copied() {
            w.0.remove(&self.1);
            locked(&self.0.ended).insert(x.lock, Instant::now());
        }
    }
}

/// The bounds: see the module docs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound {
    pub(crate) plain: Duration,
    pub(crate) fair: Duration,
}

impl Bound {
    pub(crate) fn new(
        queue_timeout: Duration,
        node_timeout: Duration,
        backoff_max: Duration,
    ) -> Self {
        let plain = queue_timeout / 3
            + 2 * node_timeout
            + backoff_max
            + Duration::from_millis(2 + 5)
            + MARGIN;
        Self {
            plain,
            fair: plain + queue_timeout,
        }
    }
}

/// What the monitor watches.
pub(crate) struct Watch {
    pub(crate) log: Log,
    pub(crate) wants: Arc<Wants>,
    pub(crate) nodes: Vec<Arc<NodeCtl>>,
    /// `[process][node]`.
    pub(crate) links: Vec<Vec<Arc<LinkCtl>>>,
    /// Each process's own link (cut while it is stalled or dead).
    pub(crate) procs: Vec<Arc<LinkCtl>>,
    /// The locks' keys on the nodes (in the run's layout), by lock number.
    pub(crate) keys: Vec<String>,
    /// The prefixes of the keys held under names of their own (a
    /// read-write lock's readers): no stray keys either.
    pub(crate) prefixes: Vec<String>,
    pub(crate) bound: Bound,
    /// The sharded member, if any: not counted for a process while
    /// [`Member::impaired`] for it.
    pub(crate) member: Option<Arc<Member>>,
}

impl Watch {
    /// Whether `lock` is free on a quorum of the nodes process `p` reaches.
    fn free_for(&self, p: usize, lock: usize) -> bool {
        let key = &self.keys[lock];
        let free = self
            .nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                n.health() == Health::Up
                    && n.slow().is_zero()
                    && self.links[p][*i].cut() == Cut::None
                    && !n.fake.lock_keys().contains(key)
                    && !self
                        .member
                        .as_ref()
                        .is_some_and(|m| m.node == *i && m.impaired(p))
            })
            .count();
        free > self.nodes.len() / 2
    }

    /// Flags, once, a lock held at a key the run's layout does not give
    /// any lock name ([`Invariant::Layout`]); returns whether it did.
    fn stray_key(&self) -> bool {
        for (i, n) in self.nodes.iter().enumerate() {
            let keys = n.fake.lock_keys();
            let stray = |k: &&String| {
                !self.keys.contains(k) && !self.prefixes.iter().any(|p| k.starts_with(p))
            };
            if let Some(k) = keys.iter().find(stray) {
                self.log.push(
                    WORLD,
                    Ev::Violation(
                        Invariant::Layout,
                        format!(
                            "node {i} holds a lock at {k:?}, not at one of {:?}",
                            self.keys
                        ),
                    ),
                );
                return true;
            }
        }
        false
    }

    /// Samples until `end`, flagging every waiter that saw its lock free
    /// for longer than the bound, and a lock at a stray key.
    pub(crate) async fn run(self, end: Instant) {
        // Since when each waiting request (by serial) has seen its lock free.
        let mut since: HashMap<u64, Instant> = HashMap::new();
        let mut strayed = false;
        while Instant::now() < end {
            tokio::time::sleep(SAMPLE).await;
            let now = Instant::now();
            strayed = strayed || self.stray_key();
            let wants: Vec<((usize, usize), Want)> = {
                let w = locked(&self.wants.now);
                let mut v: Vec<_> = w.0.iter().map(|(k, v)| (*k, *v)).collect();
                v.sort_by_key(|(k, _)| *k);
                v
            };
            let mut keep = HashMap::new();
            for ((p, t), w) in wants {
                let live = self.procs[p].cut() == Cut::None;
                if !w.waits || !live || !self.free_for(p, w.lock) {
                    continue;
                }
                let ended = locked(&self.wants.ended).get(&w.lock).copied();
                let seen = *since.get(&w.serial).unwrap_or(&now);
                let start = ended.map_or(seen, |e| seen.max(e));
                let bound = if w.fair {
                    self.bound.fair
                } else {
                    self.bound.plain
                };
                if now.duration_since(start) > bound {
                    self.log.push(
                        WORLD,
                        Ev::Violation(
                            Invariant::Progress,
                            format!(
                                "lock {} free on a quorum p{p} reaches since {:.3}ms while p{p}.t{t} ({}) waited live, and nobody was granted it within {bound:?}",
                                w.lock,
                                self.log.at(start).as_secs_f64() * 1_000.0,
                                if w.fair { "fair" } else { "plain" },
                            ),
                        ),
                    );
                    continue; // flagged once, then counted afresh
                }
                keep.insert(w.serial, start);
            }
            since = keep;
        }
    }
}
