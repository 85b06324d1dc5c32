//! What each Lua script does to the in-memory node's state: the same
//! answers, the same writes, and the same messages on the node's feed,
//! including where a script errors on a key of another type (what it wrote
//! before that stays, as on a real node).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{wrong_type, Entry, State};
use crate::error::NodeError;
use crate::keys::{fences, Keys, Role};
use crate::node::{
    BatchKind, Grant, NodeLockState, Place, Proclaimed, Record, Released, RenewItem, Renewed, Seen,
};
use crate::tests::fake_queue::Queue;

/// A batch of `kind`: `renew.lua` (extend, report missing keys),
/// `repair.lua` (also re-create missing keys and raise the fence) or
/// `keep.lua` (extend waiters' places in the queues of held locks).
pub(crate) fn batch(s: &mut State, items: &[RenewItem], kind: BatchKind) -> Vec<Renewed> {
    if kind == BatchKind::Keep {
        return items.iter().map(|item| keep(s, item)).collect();
    }
    let repair = kind == BatchKind::Repair;
    items
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

/// `keep.lua` for one place: the waiter's deadline extended while the lock
/// is held and the waiter queued; nothing written otherwise.
fn keep(s: &mut State, item: &RenewItem) -> Renewed {
    let keys = &item.keys;
    // The script reads the timeouts (ZSCORE) and the lock key's PTTL,
    // which any type has: a key of another type there counts as held.
    if s.foreign.contains(&keys.timeouts()) {
        return Renewed::WrongType;
    }
    if !s.locks.contains_key(&keys.lock) && !s.foreign.contains(&keys.lock) {
        return Renewed::Missing;
    }
    let deadline = Instant::now() + item.lease;
    let Some(q) = s.queues.get_mut(&keys.queue()) else {
        return Renewed::Conflict;
    };
    let Some((_, d)) = q.waiters.get_mut(&*item.owner) else {
        return Renewed::Conflict;
    };
    *d = deadline;
    if q.expires.is_none_or(|e| e < deadline) {
        q.expires = Some(Instant::now() + 2 * item.lease);
    }
    // The lock key's PTTL (a key of another type there has none).
    match s.locks.get(&keys.lock) {
        Some(e) => Renewed::Kept(e.expires.saturating_duration_since(Instant::now())),
        None => Renewed::Extended,
    }
}

/// `acquire_all.lua`: reads every name first, then grants all or none.
pub(super) fn acquire_all(
    s: &mut State,
    keys: &[Arc<Keys>],
    owner: &str,
    lease: Duration,
    count: u32,
) -> Result<Grant, NodeError> {
    let now = Instant::now();
    let (mut free, mut worst) = (false, None::<Duration>);
    for k in keys {
        s.read(&k.lock)?;
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
    // One token for the set: one above the largest of its slots'
    // counters (the largest, for a re-entry), and every counter set to it.
    let counters = fences(keys);
    let mut top = 0;
    for fence in &counters {
        s.read(fence)?;
        top = top.max(s.fences.get(*fence).copied().unwrap_or(0));
    }
    let token = top + u64::from(free);
    for fence in counters {
        let f = s.fences.entry(fence.to_owned()).or_insert(0);
        *f = (*f).max(token);
    }
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
/// holder's PTTL; in its re-entry mode (`reentry`), a missing key is
/// reported, never created.
pub(super) fn acquire(
    s: &mut State,
    keys: &Keys,
    owner: &str,
    lease: Duration,
    count: u32,
    reentry: bool,
) -> Result<Grant, NodeError> {
    if reentry && !s.locks.contains_key(&keys.lock) && !s.foreign.contains(&keys.lock) {
        return Ok(Grant::Missing);
    }
    let expires = Instant::now() + lease;
    s.read(&keys.lock)?;
    let fence_ok = s.read(&keys.fence);
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
pub(super) fn acquire_queued(
    s: &mut State,
    keys: &Keys,
    owner: &str,
    lease: Duration,
    count: u32,
    p: &Place,
) -> Result<Grant, NodeError> {
    let now = Instant::now();
    queued_types(s, keys, owner)?;
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
    s.read(&keys.lock)?;
    let holder = s
        .locks
        .get(&keys.lock)
        .map(|e| (e.owner == owner, e.expires));
    let wait = match holder {
        None if !p.fair || q.head().is_none_or(|h| h == &*p.waiter) => {
            // The fence counter is INCRed before the waiter leaves the
            // queue: a counter of another type errors with the waiter
            // still queued.
            let grant = acquire(s, keys, owner, lease, count, false)?;
            q.remove(&p.waiter);
            return Ok(grant);
        }
        Some((true, _)) => return acquire(s, keys, owner, lease, count, false),
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

/// `acquire_queued.lua`'s reads before any write (an error reply must
/// mean nothing changed): the lock key, the fence counter where it would
/// be used (a free lock, or ours), the queue.
fn queued_types(s: &State, keys: &Keys, owner: &str) -> Result<(), NodeError> {
    let free_or_ours = s.locks.get(&keys.lock).is_none_or(|e| e.owner == owner);
    s.read(&keys.lock)?;
    if free_or_ours {
        s.read(&keys.fence)?;
    }
    s.read(&keys.queue())
}

/// `leave.lua`: takes `waiter` out of the queue, telling the next waiter
/// when the lock is free and it was the head.
pub(super) fn leave(s: &mut State, keys: &Keys, waiter: &str) -> Result<bool, NodeError> {
    s.read(&keys.queue())?;
    if let Role::Writer { .. } = keys.role {
        // A writer leaving the waiting writers: the readers it held back
        // are told on the channel they listen on.
        let (writer, _) = keys.family_parts("");
        let left = s
            .waiting
            .get_mut(writer)
            .is_some_and(|w| w.remove(waiter).is_some());
        if let (true, Some(channel)) = (left, &keys.foreign_channel) {
            s.feed.publish(channel, "0");
        }
    }
    let Some(q) = s.queues.get_mut(&keys.queue()) else {
        return Ok(false);
    };
    let was_head = q.head() == Some(waiter);
    let left = q.remove(waiter);
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
}

/// `release.lua`: lowers the count to `count`, or deletes the lock and
/// tells the queue's head; raises the fence to `token`.
pub(super) fn release(
    s: &mut State,
    keys: &Keys,
    owner: &str,
    count: u32,
    lease: Duration,
    token: u64,
) -> Result<Released, NodeError> {
    match s.locks.get_mut(&keys.lock) {
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
                let mut msg = format!("{} {owner}", head.unwrap_or_default());
                if token == 0 {
                    msg.push_str(crate::scripts::ROLLBACK_SUFFIX);
                }
                s.feed.publish(&keys.channel, msg);
                if let Some(foreign) = &keys.foreign_channel {
                    s.feed.publish(foreign, crate::layout::REDISSON_UNLOCK);
                }
                Released::Deleted
            })
        }
    }
}

/// `raise_fence.lua`: the counters of `keys` raised to at least `token`;
/// the lowest of them after the call.
pub(super) fn raise_fence(s: &mut State, keys: &[Arc<Keys>], token: u64) -> Result<u64, NodeError> {
    let counters = fences(keys);
    for fence in &counters {
        s.read(fence)?;
    }
    let mut lowest = None::<u64>;
    for fence in counters {
        let f = s.fences.entry(fence.to_owned()).or_insert(0);
        *f = (*f).max(token);
        lowest = Some(lowest.map_or(*f, |l| l.min(*f)));
    }
    Ok(lowest.unwrap_or(0))
}

/// `force_release.lua`: deletes whatever is at the lock key.
pub(super) fn force_release(s: &mut State, keys: &Keys) -> Result<bool, NodeError> {
    let deleted = s.locks.remove(&keys.lock).is_some() | s.foreign.remove(&keys.lock);
    if deleted {
        s.feed.publish(&keys.channel, "");
        if let Some(foreign) = &keys.foreign_channel {
            s.feed.publish(foreign, crate::layout::REDISSON_UNLOCK);
        }
    }
    Ok(deleted)
}

/// `proclaim.lua`: the leader's record, written where its hold is alive
/// and never over a later term or revision; a change is published.
pub(super) fn proclaim(
    s: &mut State,
    keys: &Keys,
    record: &Record,
) -> Result<Proclaimed, NodeError> {
    let key = keys.record();
    for k in [&keys.lock, &key] {
        s.read(k)?;
    }
    if s.locks
        .get(&keys.lock)
        .is_none_or(|e| *e.owner != *record.holder)
    {
        return Ok(Proclaimed::NotHeld);
    }
    if let Some(cur) = s.records.get(&key) {
        if (cur.term, cur.rev) > (record.term, record.rev) {
            return Ok(Proclaimed::Superseded);
        }
        if cur == record {
            return Ok(Proclaimed::Written);
        }
    }
    s.records.insert(key, record.clone());
    let message = format!("{} {}", record.term, record.rev);
    s.feed.publish(&keys.elected_channel(), message);
    Ok(Proclaimed::Written)
}

/// `leader.lua`: who leads on this node, if anyone.
pub(super) fn leader(s: &mut State, keys: &Keys) -> Result<Seen, NodeError> {
    let key = keys.record();
    for k in [&keys.lock, &key] {
        s.read(k)?;
    }
    let Some(e) = s.locks.get(&keys.lock) else {
        return Ok(Seen::Vacant);
    };
    let pttl = Some(e.expires.saturating_duration_since(Instant::now()));
    Ok(match s.records.get(&key) {
        Some(r) if *r.holder == *e.owner => Seen::Leads(r.clone(), pttl),
        _ => Seen::Unproclaimed(pttl),
    })
}

/// What the status call reads: the holder, its count and PTTL, the fence.
pub(super) fn status(s: &mut State, keys: &Keys) -> Result<NodeLockState, NodeError> {
    for key in [&keys.lock, &keys.fence] {
        s.read(key)?;
    }
    let e = s.locks.get(&keys.lock);
    Ok(NodeLockState {
        holder: e.map(|e| e.owner.clone()),
        hold_count: e.map_or(0, |e| e.count),
        pttl: e.map(|e| e.expires.saturating_duration_since(Instant::now())),
        fence: s.fences.get(&keys.fence).copied().unwrap_or(0),
        shard: None,
    })
}
