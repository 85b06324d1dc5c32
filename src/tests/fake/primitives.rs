//! What the semaphore's and the read-write lock's Lua scripts do to the
//! in-memory node's state (`read.lua`, `write.lua`, `permits.lua`), with
//! the same answers as a real node.

use std::time::Duration;

use tokio::time::Instant;

use super::{Entry, State};
use crate::error::NodeError;
use crate::hooks::mutation::{self, Mutation};
use crate::keys::{Keys, Role};
use crate::node::{Grant, SlotsSeen};

/// `read.lua` (a reader) and `write.lua` (a writer): a reader is granted
/// where no writer holds the lock or waits for it; a writer where no other
/// writer and no live reader key is, and otherwise waits there, holding
/// new readers back for its `hold_back`. Reader keys are found by their
/// prefix (the real node keeps a set of them).
pub(super) fn rw(
    s: &mut State,
    keys: &Keys,
    owner: &str,
    lease: Duration,
    count: u32,
    reentry: bool,
) -> Result<Grant, NodeError> {
    let now = Instant::now();
    // The waiting writers are kept by the family's name; the writer's key
    // is `<family>:writer`.
    let (family, _) = keys.family_parts("");
    let (writer, family) = (format!("{family}:writer"), family.to_owned());
    s.read(&keys.lock)?;
    s.read(&keys.fence)?;
    let fence = s.fences.get(&keys.fence).copied().unwrap_or(0);
    if let Some(e) = s.locks.get_mut(&keys.lock) {
        if e.owner == owner {
            e.count = count;
            e.expires = now + lease;
            let token = match keys.role {
                Role::Reader => fence.max(1),
                _ => fence,
            };
            return Ok(Grant::Granted(token));
        }
        let left = e.expires.saturating_duration_since(now);
        if let Role::Writer { waiter, hold_back } = &keys.role {
            if !reentry {
                wait_as_writer(s, &family, waiter, now + *hold_back);
            }
        }
        return Ok(Grant::Taken(Some(left), 0));
    }
    if reentry {
        return Ok(Grant::Missing);
    }
    let blocked = match &keys.role {
        Role::Writer { .. } if mutation::active(Mutation::WriterIgnoresReaders) => None,
        Role::Writer { waiter, hold_back } => {
            let readers = format!("{family}:reader:");
            let longest = s
                .locks
                .iter()
                .filter(|(k, _)| k.starts_with(&readers))
                .map(|(_, e)| e.expires.saturating_duration_since(now))
                .max();
            if longest.is_some() {
                wait_as_writer(s, &family, waiter, now + *hold_back);
            }
            longest
        }
        _ => {
            let held = s
                .locks
                .get(&writer)
                .map(|e| e.expires.saturating_duration_since(now));
            let waits = s.waiting.get_mut(&family).and_then(|w| {
                w.retain(|_, until| *until > now);
                w.values().min().map(|u| u.saturating_duration_since(now))
            });
            held.or(waits)
        }
    };
    if let Some(left) = blocked {
        return Ok(Grant::Taken(Some(left), 0));
    }
    s.locks.insert(
        keys.lock.clone(),
        Entry {
            owner: owner.to_owned(),
            count,
            expires: now + lease,
        },
    );
    Ok(match &keys.role {
        Role::Writer { waiter, .. } => {
            if let Some(w) = s.waiting.get_mut(&family) {
                w.remove(&**waiter);
            }
            let f = s.fences.entry(keys.fence.clone()).or_insert(0);
            *f += 1;
            Grant::Granted(*f)
        }
        _ => Grant::Granted(fence.max(1)),
    })
}

/// A refused writer waits: new readers are refused until `until`.
fn wait_as_writer(s: &mut State, writer: &str, waiter: &str, until: Instant) {
    s.waiting
        .entry(writer.to_owned())
        .or_default()
        .insert(waiter.to_owned(), until);
}

/// `permits.lua`: the recorded count (recording `count` if none), and
/// each of the `count` slots' PTTL.
pub(super) fn permits(s: &mut State, slot: &Keys, count: u32) -> Result<SlotsSeen, NodeError> {
    let now = Instant::now();
    let (family, _) = slot.family_parts("");
    let count_key = format!("{family}:permits");
    s.read(&count_key)?;
    let recorded = *s.counts.entry(count_key).or_insert(i64::from(count));
    let held = (0..count)
        .map(|i| {
            s.locks
                .get(&format!("{family}:permit:{i}"))
                .map(|e| Some(e.expires.saturating_duration_since(now)))
        })
        .collect();
    Ok(SlotsSeen {
        count: recorded,
        held,
    })
}
