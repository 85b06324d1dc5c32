//! An in-memory node for unit tests: same semantics as the Lua scripts, plus
//! switches to stall, fail or slow down.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::Keys;
use crate::node::{Grant, NodeLockState, NodeOps, Place, Released, RenewBatch, Renewed};
use crate::sync::locked;

/// What the scripts read before they write (re-entry, queue types).
mod reads;
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

#[derive(Default)]
struct State {
    locks: HashMap<String, Entry>,
    /// By queue key.
    queues: HashMap<String, Queue>,
    fences: HashMap<String, u64>,
    /// Keys holding a value of another type (a string at a lock key, a
    /// hash at the fence key): what the scripts meet as `WRONGTYPE`.
    foreign: HashSet<String>,
    /// Subscriber connections (kept by a wipe; see `fake_feed`).
    feed: Arc<super::fake_feed::Hub>,
}

pub(crate) struct FakeNode {
    addr: String,
    mode: Mutex<Mode>,
    /// Calls left before the node switches to `Mode::Fail`, if set.
    fail_after: Mutex<Option<u64>>,
    state: Arc<Mutex<State>>,
    pub(crate) calls: AtomicU64,
}

impl FakeNode {
    pub(crate) fn new(i: usize) -> Arc<Self> {
        Arc::new(Self {
            addr: format!("fake-{i}"),
            mode: Mutex::new(Mode::Normal),
            fail_after: Mutex::new(None),
            state: Arc::default(),
            calls: AtomicU64::new(0),
        })
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

    /// Forgets every key, as a node restarted empty.
    pub(crate) fn wipe(&self) {
        let mut s = locked(&self.state);
        s.locks.clear();
        s.queues.clear();
        s.fences.clear();
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

    /// The unexpired lock keys, sorted.
    pub(crate) fn lock_keys(&self) -> Vec<String> {
        let mut s = locked(&self.state);
        expire(&mut s);
        let mut keys: Vec<String> = s.locks.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// Applies `f` when the call is made, as a request written to a socket
    /// in call order, and answers according to the mode.
    fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut State) -> T + Send + 'static,
    ) -> BoxFuture<'static, Result<T, NodeError>> {
        self.try_run(move |s| Ok(f(s)))
    }

    /// As [`run`](Self::run), for a call that can answer with an error reply.
    fn try_run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut State) -> Result<T, NodeError> + Send + 'static,
    ) -> BoxFuture<'static, Result<T, NodeError>> {
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
                Some(f(&mut s))
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

/// The `WRONGTYPE` error of a script that met a foreign key.
fn wrong_type(key: &str) -> NodeError {
    NodeError::new(
        NodeErrorKind::WrongType,
        format!("WRONGTYPE {key} holds a value of another type"),
    )
}

/// `renew.lua` (extend, report missing keys) or, with `repair`,
/// `repair.lua` (also re-create missing keys and raise the fence).
fn renew_or_repair(s: &mut State, batch: &RenewBatch, repair: bool) -> Vec<Renewed> {
    batch
        .items
        .iter()
        .map(|item| {
            let expires = Instant::now() + item.lease;
            if s.foreign.contains(&item.keys.lock) {
                return Renewed::WrongType;
            }
            match s.locks.get_mut(&item.keys.lock) {
                Some(e) if *e.owner == *item.owner => {
                    e.count = item.count;
                    e.expires = expires;
                    Renewed::Extended
                }
                Some(_) => Renewed::Conflict,
                None if !repair => Renewed::Missing,
                None if s.foreign.contains(&item.keys.fence) => Renewed::WrongType,
                None => {
                    s.locks.insert(
                        item.keys.lock.clone(),
                        Entry {
                            owner: item.owner.to_string(),
                            count: item.count,
                            expires,
                        },
                    );
                    let f = s.fences.entry(item.keys.fence.clone()).or_insert(0);
                    *f = (*f).max(item.token);
                    Renewed::Repaired
                }
            }
        })
        .collect()
}

/// `acquire_all.lua`: reads every name first, then grants all or none.
fn acquire_all(
    s: &mut State,
    keys: &[Arc<Keys>],
    owner: &str,
    lease: Duration,
    count: u32,
) -> Result<Grant, NodeError> {
    let now = Instant::now();
    let (mut free, mut worst) = (false, None::<Duration>);
    for k in keys {
        if s.foreign.contains(&k.lock) {
            return Err(wrong_type(&k.lock));
        }
        match s.locks.get(&k.lock) {
            None => free = true,
            Some(e) if e.owner == owner => {}
            Some(e) => {
                let left = e.expires.saturating_duration_since(now);
                worst = Some(worst.map_or(left, |w| w.max(left)));
            }
        }
    }
    if worst.is_some() {
        return Ok(Grant::Taken(worst, 0));
    }
    let Some(fence) = keys.first().map(|k| k.fence.clone()) else {
        return Ok(Grant::Granted(0));
    };
    if s.foreign.contains(&fence) {
        return Err(wrong_type(&fence));
    }
    let f = s.fences.entry(fence).or_insert(0);
    if free {
        *f += 1;
    }
    let token = *f;
    for k in keys {
        s.locks.insert(
            k.lock.clone(),
            Entry {
                owner: owner.to_owned(),
                count,
                expires: now + lease,
            },
        );
    }
    Ok(Grant::Granted(token))
}

/// `acquire.lua`: grants a free lock, re-enters our own, or reports the
/// holder's PTTL.
fn acquire(
    s: &mut State,
    keys: &Keys,
    owner: &str,
    lease: Duration,
    count: u32,
) -> Result<Grant, NodeError> {
    let expires = Instant::now() + lease;
    if s.foreign.contains(&keys.lock) {
        return Err(wrong_type(&keys.lock));
    }
    let fence_ok = if s.foreign.contains(&keys.fence) {
        Err(wrong_type(&keys.fence))
    } else {
        Ok(())
    };
    Ok(match s.locks.get_mut(&keys.lock) {
        None => {
            fence_ok?;
            s.locks.insert(
                keys.lock.clone(),
                Entry {
                    owner: owner.to_owned(),
                    count,
                    expires,
                },
            );
            let f = s.fences.entry(keys.fence.clone()).or_insert(0);
            *f += 1;
            Grant::Granted(*f)
        }
        Some(e) if *e.owner == *owner => {
            fence_ok?;
            e.count = count;
            e.expires = expires;
            Grant::Granted(s.fences.get(&keys.fence).copied().unwrap_or(0))
        }
        Some(e) => Grant::Taken(Some(e.expires.saturating_duration_since(Instant::now())), 0),
    })
}

/// `acquire_queued.lua`: drops gone waiters at the head, grants a free
/// lock (for a fair place, only to the head or an empty queue), re-enters,
/// or queues the waiter with its ticket.
fn acquire_queued(
    s: &mut State,
    keys: &Keys,
    owner: &str,
    lease: Duration,
    count: u32,
    p: &Place,
) -> Result<Grant, NodeError> {
    let now = Instant::now();
    reads::queued_types(s, keys, owner)?;
    let mut q = s.queues.remove(&keys.queue()).unwrap_or_default();
    // The script drops gone waiters first; an error after that (a key of
    // another type) keeps what was written before it.
    let dropped = q.drop_gone(now);
    let answer = place_in_queue(s, &mut q, keys, owner, lease, count, p, now);
    match (q.head(), &answer) {
        (Some(head), Ok(Grant::Taken(..))) if dropped && !s.locks.contains_key(&keys.lock) => {
            s.feed.publish(&keys.channel, head);
        }
        _ => {}
    }
    if !q.order.is_empty() {
        s.queues.insert(keys.queue(), q);
    }
    answer
}

/// `acquire_queued.lua` after the gone waiters are dropped from `q`.
#[allow(clippy::too_many_arguments)]
fn place_in_queue(
    s: &mut State,
    q: &mut Queue,
    keys: &Keys,
    owner: &str,
    lease: Duration,
    count: u32,
    p: &Place,
    now: Instant,
) -> Result<Grant, NodeError> {
    if s.foreign.contains(&keys.lock) {
        return Err(wrong_type(&keys.lock));
    }
    let holder = s
        .locks
        .get(&keys.lock)
        .map(|e| (e.owner == owner, e.expires));
    let wait = match holder {
        None if !p.fair || q.head().is_none_or(|h| h == &*p.waiter) => {
            // The fence counter is INCRed before the waiter leaves the
            // queue: a counter of another type errors with the waiter
            // still queued.
            let grant = acquire(s, keys, owner, lease, count)?;
            q.remove(&p.waiter);
            return Ok(grant);
        }
        Some((true, _)) => return acquire(s, keys, owner, lease, count),
        None => q
            .head()
            .and_then(|h| q.waiters.get(h))
            .map(|(_, d)| d.saturating_duration_since(now)),
        Some((false, expires)) => Some(expires.saturating_duration_since(now)),
    };
    let ticket = match (p.ticket, q.waiters.get(&*p.waiter)) {
        (0, Some((t, _))) => *t,
        (0, None) => q.order.last().map_or(0, |(t, _)| *t) + 1,
        (t, _) => t,
    };
    q.remove(&p.waiter);
    q.order.insert((ticket, p.waiter.to_string()));
    q.waiters
        .insert(p.waiter.to_string(), (ticket, now + p.timeout));
    q.expires = q.waiters.values().map(|(_, d)| *d).max();
    Ok(Grant::Taken(wait, ticket))
}

fn expire(s: &mut State) {
    let now = Instant::now();
    s.locks.retain(|_, e| e.expires > now);
    // A queue's keys expire at their TTL (see `Queue::expires`), and an
    // emptied sorted set is no key at all.
    s.queues
        .retain(|_, q| !q.order.is_empty() && q.expires.is_some_and(|e| e > now));
}

impl NodeOps for FakeNode {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn acquire(
        &self,
        keys: &Arc<Keys>,
        owner: &Arc<str>,
        lease: Duration,
        count: u32,
        place: Option<&Place>,
    ) -> BoxFuture<'static, Result<Grant, NodeError>> {
        let (keys, owner, place) = (Arc::clone(keys), Arc::clone(owner), place.cloned());
        self.try_run(move |s| match place {
            None => acquire(s, &keys, &owner, lease, count),
            Some(p) => acquire_queued(s, &keys, &owner, lease, count, &p),
        })
    }

    fn reenter(
        &self,
        keys: &Arc<Keys>,
        owner: &Arc<str>,
        lease: Duration,
        count: u32,
    ) -> BoxFuture<'static, Result<Grant, NodeError>> {
        let (keys, owner) = (Arc::clone(keys), Arc::clone(owner));
        self.try_run(move |s| reads::reenter(s, &keys, &owner, lease, count))
    }

    fn leave(
        &self,
        keys: &Arc<Keys>,
        waiter: &Arc<str>,
    ) -> BoxFuture<'static, Result<bool, NodeError>> {
        let (keys, waiter) = (Arc::clone(keys), Arc::clone(waiter));
        self.try_run(move |s| {
            if s.foreign.contains(&keys.queue()) {
                return Err(wrong_type(&keys.queue()));
            }
            let Some(q) = s.queues.get_mut(&keys.queue()) else {
                return Ok(false);
            };
            let was_head = q.head() == Some(&*waiter);
            let left = q.remove(&waiter);
            if let Some(next) = q
                .head()
                .filter(|_| was_head && !s.locks.contains_key(&keys.lock))
            {
                s.feed.publish(&keys.channel, next);
            }
            if q.order.is_empty() {
                s.queues.remove(&keys.queue());
            }
            Ok(left)
        })
    }

    fn acquire_all(
        &self,
        keys: &Arc<[Arc<Keys>]>,
        owner: &Arc<str>,
        lease: Duration,
        count: u32,
    ) -> BoxFuture<'static, Result<Grant, NodeError>> {
        let (keys, owner) = (Arc::clone(keys), Arc::clone(owner));
        self.try_run(move |s| acquire_all(s, &keys, &owner, lease, count))
    }

    fn release(
        &self,
        keys: &Arc<Keys>,
        owner: &Arc<str>,
        count: u32,
        lease: Duration,
        token: u64,
    ) -> BoxFuture<'static, Result<Released, NodeError>> {
        let (keys, owner) = (Arc::clone(keys), Arc::clone(owner));
        self.try_run(move |s| match s.locks.get_mut(&keys.lock) {
            None if s.foreign.contains(&keys.lock) => Err(wrong_type(&keys.lock)),
            None => Ok(Released::Missing),
            Some(e) if *e.owner != *owner => Ok(Released::OtherOwner),
            Some(_) if token > 0 && s.foreign.contains(&keys.fence) => Err(wrong_type(&keys.fence)),
            // A full release reads the queue before it deletes anything.
            Some(_) if count == 0 && s.foreign.contains(&keys.queue()) => {
                Err(wrong_type(&keys.queue()))
            }
            Some(e) => {
                let f = s.fences.entry(keys.fence.clone()).or_insert(0);
                *f = (*f).max(token);
                Ok(if count > 0 {
                    e.count = count;
                    e.expires = Instant::now() + lease;
                    Released::Lowered
                } else {
                    s.locks.remove(&keys.lock);
                    let q = s.queues.get_mut(&keys.queue());
                    let head = q.and_then(|q| (q.drop_gone(Instant::now()), q.head()).1);
                    let msg = format!("{} {owner}", head.unwrap_or_default());
                    s.feed.publish(&keys.channel, msg);
                    Released::Deleted
                })
            }
        })
    }

    fn renew(&self, batch: Arc<RenewBatch>) -> BoxFuture<'static, Result<Vec<Renewed>, NodeError>> {
        self.run(move |s| renew_or_repair(s, &batch, false))
    }

    fn repair(
        &self,
        batch: Arc<RenewBatch>,
    ) -> BoxFuture<'static, Result<Vec<Renewed>, NodeError>> {
        self.run(move |s| renew_or_repair(s, &batch, true))
    }

    fn raise_fence(
        &self,
        keys: &Arc<Keys>,
        token: u64,
    ) -> BoxFuture<'static, Result<u64, NodeError>> {
        let keys = Arc::clone(keys);
        self.try_run(move |s| {
            if s.foreign.contains(&keys.fence) {
                return Err(wrong_type(&keys.fence));
            }
            let f = s.fences.entry(keys.fence.clone()).or_insert(0);
            *f = (*f).max(token);
            Ok(*f)
        })
    }

    fn force_release(&self, keys: &Arc<Keys>) -> BoxFuture<'static, Result<bool, NodeError>> {
        let keys = Arc::clone(keys);
        self.run(move |s| {
            let deleted = s.locks.remove(&keys.lock).is_some() | s.foreign.remove(&keys.lock);
            if deleted {
                s.feed.publish(&keys.channel, "");
            }
            deleted
        })
    }

    fn feed(&self) -> Option<Arc<dyn crate::node::Feed>> {
        Some(Arc::new(super::fake_feed::HubFeed(self.hub())))
    }

    fn status(&self, keys: &Arc<Keys>) -> BoxFuture<'static, Result<NodeLockState, NodeError>> {
        let keys = Arc::clone(keys);
        self.try_run(move |s| {
            for key in [&keys.lock, &keys.fence] {
                if s.foreign.contains(key) {
                    return Err(wrong_type(key));
                }
            }
            let e = s.locks.get(&keys.lock);
            Ok(NodeLockState {
                holder: e.map(|e| e.owner.clone()),
                hold_count: e.map_or(0, |e| e.count),
                pttl: e.map(|e| e.expires.saturating_duration_since(Instant::now())),
                fence: s.fences.get(&keys.fence).copied().unwrap_or(0),
            })
        })
    }
}
