//! An in-memory node for unit tests: same semantics as the Lua scripts, plus
//! switches to stall, fail or slow down.
//!
//! - `scripts`: what each Lua script does to the node's state;
//! - `test_node`: [`TestNode`], the one `NodeOps` of every node of the tests
//!   (this one, and those that wrap it: a delayed link, the simulator's).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::Keys;
use crate::node::{Answer, NodeOps};
use crate::sync::locked;
use crate::{Error, LockGuard, LockManager, LockManagerBuilder, MultiLockGuard, Owner, Quorum};

mod primitives;
mod scripts;
mod test_node;

pub(crate) use self::scripts::batch;
pub(crate) use self::test_node::{counted, Calls, Script, TestNode};
use super::fake_queue::Queue;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Normal,
    /// Never answers.
    Stall,
    /// Answers with a connection error.
    Fail,
    /// Applies the call, then answers after a delay.
    Slow(Duration),
}

struct Entry {
    owner: String,
    count: u32,
    expires: Instant,
}

/// What the node holds: what its scripts read and write.
#[derive(Default)]
pub(crate) struct State {
    locks: HashMap<String, Entry>,
    /// By queue key.
    queues: HashMap<String, Queue>,
    fences: HashMap<String, u64>,
    /// Election leader records, by record key (`proclaim.lua`).
    records: HashMap<String, crate::node::Record>,
    /// A read-write lock's waiting writers, by the lock's writer key:
    /// waiter id -> until when it holds new readers back (`write.lua`).
    waiting: HashMap<String, HashMap<String, Instant>>,
    /// A semaphore's recorded permit count, by count key (`permits.lua`).
    counts: HashMap<String, i64>,
    /// Keys holding a value of another type (a string at a lock key, a
    /// hash at the fence key): what the scripts meet as `WRONGTYPE`.
    foreign: HashSet<String>,
    /// Subscriber connections (kept by a wipe; see `fake_feed`).
    feed: Arc<super::fake_feed::Hub>,
}

/// `n` in-memory nodes, `fake-0` to `fake-{n-1}`.
pub(crate) fn fakes(n: usize) -> Vec<Arc<FakeNode>> {
    (0..n).map(FakeNode::new).collect()
}

/// `fakes` as a manager's nodes.
pub(crate) fn nodes(fakes: &[Arc<FakeNode>]) -> Vec<Arc<dyn NodeOps>> {
    fakes.iter().map(|f| Arc::clone(f) as _).collect()
}

/// A manager over `n` fresh fakes: majority, lease 10 s, node timeout
/// 100 ms, then whatever `settings` changes.
pub(crate) fn cluster_with(
    n: usize,
    settings: impl FnOnce(LockManagerBuilder) -> LockManagerBuilder,
) -> (LockManager, Vec<Arc<FakeNode>>) {
    let fakes = fakes(n);
    let builder = LockManager::builder()
        .quorum(Quorum::Majority)
        .lease(Duration::from_secs(10))
        .node_timeout(Duration::from_millis(100));
    let m = settings(builder)
        .build_with(nodes(&fakes))
        .expect("valid fake cluster");
    (m, fakes)
}

/// Lease 3 s, renewed every second (for [`cluster_with`]).
/// A manager over the same fakes as another (a second process): lease
/// 3 s renewed every second, node timeout 100 ms.
pub(crate) fn peer(fakes: &[Arc<FakeNode>]) -> LockManager {
    peer_over(nodes(fakes))
}

/// [`peer`] over links of the tests' own (a node reached its own way).
pub(crate) fn peer_over(links: Vec<Arc<dyn NodeOps>>) -> LockManager {
    LockManager::builder()
        .lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
        .node_timeout(Duration::from_millis(100))
        .build_with(links)
        .expect("valid fake cluster")
}

pub(crate) fn renewed_each_second(b: LockManagerBuilder) -> LockManagerBuilder {
    b.lease(Duration::from_secs(3))
        .renew_interval(Duration::from_secs(1))
}

/// `owner` locks every name of `names` on `m` as one set.
pub(crate) async fn lock_all_as(
    m: &LockManager,
    owner: &Owner,
    names: &[&str],
) -> Result<MultiLockGuard, Error> {
    m.request_all(names.iter().copied())
        .owner(owner)
        .acquire()
        .await
}

/// `owner` locks `name` on `m`: a re-entry when it holds it already.
pub(crate) async fn lock_as(
    m: &LockManager,
    owner: &Owner,
    name: &str,
) -> Result<LockGuard, Error> {
    m.request(name).owner(owner).acquire().await
}

/// The in-memory node.
pub(crate) struct FakeNode {
    addr: String,
    mode: Mutex<Mode>,
    /// Calls left before the node switches to `Mode::Fail`, if set.
    fail_after: Mutex<Option<u64>>,
    state: Arc<Mutex<State>>,
    pub(crate) calls: AtomicU64,
    /// The slots where its serving shard changes, as a cluster member of
    /// several shards reports them (`NodeOps::shard_breaks`); none by
    /// default.
    breaks: Mutex<Vec<u16>>,
}

impl FakeNode {
    pub(crate) fn new(i: usize) -> Arc<Self> {
        Arc::new(Self {
            addr: format!("fake-{i}"),
            mode: Mutex::new(Mode::Normal),
            fail_after: Mutex::new(None),
            state: Arc::default(),
            calls: AtomicU64::new(0),
            breaks: Mutex::default(),
        })
    }

    /// Reports `breaks` as the slots where its serving shard changes, as
    /// a cluster member of several shards does.
    pub(crate) fn set_shard_breaks(&self, breaks: Vec<u16>) {
        *locked(&self.breaks) = breaks;
    }

    pub(crate) fn shard_breaks(&self) -> Vec<u16> {
        locked(&self.breaks).clone()
    }

    pub(crate) fn set_mode(&self, mode: Mode) {
        *locked(&self.mode) = mode;
    }

    /// Answers `calls` more calls, then fails every call after them.
    pub(crate) fn fail_after(&self, calls: u64) {
        *locked(&self.fail_after) = Some(calls);
    }

    /// Makes `owner` hold `key` here for `ttl`.
    pub(crate) fn take(&self, key: &str, owner: &str, ttl: Duration) {
        locked(&self.state).locks.insert(
            key.to_owned(),
            Entry {
                owner: owner.to_owned(),
                count: 1,
                expires: Instant::now() + ttl,
            },
        );
    }

    /// The holder of `key`, if unexpired.
    pub(crate) fn holder(&self, key: &str) -> Option<(String, u32)> {
        let s = locked(&self.state);
        s.locks
            .get(key)
            .filter(|e| e.expires > Instant::now())
            .map(|e| (e.owner.clone(), e.count))
    }

    /// The node's release feed (its subscriber connections).
    pub(crate) fn hub(&self) -> Arc<super::fake_feed::Hub> {
        Arc::clone(&locked(&self.state).feed)
    }

    /// Sets the fence counter at `key`.
    pub(crate) fn set_fence(&self, key: &str, value: u64) {
        locked(&self.state).fences.insert(key.to_owned(), value);
    }

    /// The fence counter at `key` (0 when unset).
    pub(crate) fn fence(&self, key: &str) -> u64 {
        locked(&self.state).fences.get(key).copied().unwrap_or(0)
    }

    /// Puts an election leader's record at `keys`'s record key, as a
    /// proclaim would (without checking anything).
    pub(crate) fn put_record(&self, keys: &Keys, record: crate::node::Record) {
        locked(&self.state).records.insert(keys.record(), record);
    }

    /// The election leader's record at `key` (`proclaim.lua`), if any.
    pub(crate) fn record(&self, key: &str) -> Option<crate::node::Record> {
        locked(&self.state).records.get(key).cloned()
    }

    /// Forgets every key, as a node restarted empty.
    pub(crate) fn wipe(&self) {
        let mut s = locked(&self.state);
        s.locks.clear();
        s.queues.clear();
        s.fences.clear();
        s.records.clear();
        s.waiting.clear();
        s.counts.clear();
        s.foreign.clear();
    }

    /// The waiters queued for the lock of `keys`, in order.
    pub(crate) fn queued(&self, keys: &Keys) -> Vec<String> {
        let mut s = locked(&self.state);
        expire(&mut s);
        s.queues
            .get(&keys.queue())
            .map(|q| q.order.iter().map(|(_, w)| w.clone()).collect())
            .unwrap_or_default()
    }

    /// Puts a value of another type at `key` (a lock key or the fence
    /// counter), as an operator or another program could.
    pub(crate) fn put_foreign(&self, key: &str) {
        let mut s = locked(&self.state);
        s.locks.remove(key);
        s.fences.remove(key);
        s.queues.remove(key);
        s.foreign.insert(key.to_owned());
    }

    /// Steps this node's clock forward by `by`: every key expires `by`
    /// earlier (the simulator's clock-jump fault).
    pub(crate) fn jump_clock(&self, by: Duration) {
        let mut s = locked(&self.state);
        s.locks.retain(|_, e| match e.expires.checked_sub(by) {
            Some(t) => {
                e.expires = t;
                true
            }
            None => false,
        });
        // Queue deadlines are node times too: they come sooner.
        let now = Instant::now();
        let earlier = |t: Instant| t.checked_sub(by).unwrap_or(now).min(t);
        for q in s.queues.values_mut() {
            for (_, d) in q.waiters.values_mut() {
                *d = earlier(*d);
            }
            q.expires = q.expires.map(earlier);
        }
        expire(&mut s);
    }

    /// Every key it holds (unexpired), sorted, as `holds_key` counts them.
    pub(crate) fn key_names(&self) -> Vec<String> {
        let mut s = locked(&self.state);
        expire(&mut s);
        let mut keys: Vec<String> = s.locks.keys().cloned().collect();
        keys.extend(s.fences.keys().cloned());
        keys.extend(s.foreign.iter().cloned());
        for q in s.queues.keys() {
            keys.push(q.clone());
            if let Some(base) = q.strip_suffix(":queue") {
                keys.push(format!("{base}:timeouts"));
            }
        }
        keys.sort();
        keys.dedup();
        keys
    }

    /// The unexpired lock keys, sorted.
    pub(crate) fn lock_keys(&self) -> Vec<String> {
        let mut s = locked(&self.state);
        expire(&mut s);
        let mut keys: Vec<String> = s.locks.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Applies `script` when the call is made, as a request written to a
    /// socket in call order, and answers according to the mode.
    fn apply<T: Send + 'static>(&self, script: impl Script<T>) -> Answer<T> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        {
            let mut left = locked(&self.fail_after);
            match *left {
                Some(0) => {
                    *left = None;
                    *locked(&self.mode) = Mode::Fail;
                }
                Some(n) => *left = Some(n - 1),
                None => {}
            }
        }
        let mode = *locked(&self.mode);
        let applied = match mode {
            Mode::Normal | Mode::Slow(_) => {
                let mut s = locked(&self.state);
                expire(&mut s);
                Some(script(&mut s))
            }
            Mode::Stall | Mode::Fail => None,
        };
        Box::pin(async move {
            match (mode, applied) {
                (Mode::Slow(d), Some(r)) => {
                    tokio::time::sleep(d).await;
                    r
                }
                (_, Some(r)) => {
                    tokio::task::yield_now().await;
                    r
                }
                (Mode::Fail, None) => Err(NodeError::new(NodeErrorKind::Connection, "refused")),
                (_, None) => {
                    futures::future::pending::<()>().await;
                    Err(NodeError::timeout())
                }
            }
        })
    }
}

impl State {
    /// Whether `key` exists (a lock, a counter, a queue's sorted sets, a
    /// foreign value; a channel is never a key), as a cluster shard sees
    /// it when it routes a call over a migrating slot.
    pub(crate) fn holds_key(&self, key: &str) -> bool {
        let queue = |k: &str| self.queues.contains_key(k);
        self.locks.contains_key(key)
            || self.fences.contains_key(key)
            || self.records.contains_key(key)
            || self.foreign.contains(key)
            || queue(key)
            || key
                .strip_suffix(":timeouts")
                .is_some_and(|base| queue(&format!("{base}:queue")))
    }

    /// What a script meets reading `key`: an error when it holds a value
    /// of another type.
    fn read(&self, key: &str) -> Result<(), NodeError> {
        if self.foreign.contains(key) {
            Err(wrong_type(key))
        } else {
            Ok(())
        }
    }
}

/// The `WRONGTYPE` error of a script that met a foreign key.
fn wrong_type(key: &str) -> NodeError {
    NodeError::new(
        NodeErrorKind::WrongType,
        format!("WRONGTYPE {key} holds a value of another type"),
    )
}

fn expire(s: &mut State) {
    let now = Instant::now();
    s.locks.retain(|_, e| e.expires > now);
    // A queue's keys expire at their TTL (see `Queue::expires`), and an
    // emptied sorted set is no key at all.
    s.queues
        .retain(|_, q| !q.order.is_empty() && q.expires.is_some_and(|e| e > now));
}
