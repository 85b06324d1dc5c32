//! The order of one hold's calls on one member, owned by the member: a
//! call that is to be sent again (after an answer proving it had not run:
//! `TRYAGAIN`, `MOVED`, `ASK`, `NOSCRIPT`, a refused connection, or a
//! broken connection for the calls that may be sent again then) is not,
//! once a later call of the same hold has been made to that member: sent
//! again, it could land behind that call (an acquire behind its own
//! release, a rollback's release behind the next attempt's grant).
//!
//! A hold is named by its lock and a party: the holder id its grants are
//! written for (acquire, re-entry, release, a set's acquire for each of its
//! names), and, for a waiter with a place in the queue, its waiter id too
//! (`acquire_queued` and `leave`). Each call is stamped when it is made, in
//! the order its caller makes them; the member keeps, per (lock, party)
//! with a call in flight, the stamp of the latest and how many are in
//! flight, and forgets the pair when the last of them ends (answered,
//! failed or dropped): a later call that already ended still supersedes an
//! earlier one still waiting to be sent again. A call whose stamp is no longer
//! the latest of one of its (lock, party) pairs is superseded: it fails
//! with [`NodeErrorKind::Superseded`] instead of being sent again. It never
//! ran, so nothing is lost: the later call finds what it would have found
//! had the earlier one failed at once.
//!
//! Only script calls about locks are stamped; renewal and repair batches
//! are ordered by the hold itself (a release waits for a renewal in
//! flight), and a fence raise only ever raises a counter.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{NodeError, NodeErrorKind};
use crate::sync::locked;

/// One (lock name, holder or waiter id) pair, as a 64-bit hash: computed
/// once per call, so that the member's map neither clones nor hashes the
/// names again. Two pairs that share a hash (about one in 2^64) only make
/// a call proven not run fail instead of being sent again.
pub(crate) fn pair(lock: &str, party: &str) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    lock.hash(&mut h);
    party.hash(&mut h);
    h.finish()
}

/// A pair is its own hash.
#[derive(Default)]
struct Identity(u64);

impl Hasher for Identity {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// The latest stamp of every pair with a call in flight on one member, and
/// how many of its calls are in flight.
#[derive(Default)]
pub(crate) struct Order {
    latest: Mutex<HashMap<u64, (u64, usize), BuildHasherDefault<Identity>>>,
    next: AtomicU64,
}

impl Order {
    /// Stamps a call about `pairs` (see [`pair`]), made now: it is the
    /// latest of each.
    pub(crate) fn stamp(self: &Arc<Self>, pairs: &[u64]) -> Stamp {
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let pairs = Pairs::of(pairs);
        if !pairs.as_slice().is_empty() {
            let mut latest = locked(&self.latest);
            for &p in pairs.as_slice() {
                let entry = latest.entry(p).or_insert((seq, 0));
                *entry = (seq, entry.1 + 1);
            }
        }
        Stamp {
            order: Some(Arc::clone(self)),
            seq,
            pairs,
        }
    }

    /// How many pairs have a call in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        locked(&self.latest).len()
    }
}

/// A call's pairs: one or two inline (a lock's holder, a queued waiter),
/// more for a set.
struct Pairs {
    inline: [u64; 2],
    len: usize,
    more: Vec<u64>,
}

impl Pairs {
    fn of(pairs: &[u64]) -> Self {
        match *pairs {
            [] => Self::none(),
            [a] => Self {
                inline: [a, 0],
                len: 1,
                more: Vec::new(),
            },
            [a, b] => Self {
                inline: [a, b],
                len: 2,
                more: Vec::new(),
            },
            _ => Self {
                inline: [0; 2],
                len: 0,
                more: pairs.to_vec(),
            },
        }
    }

    fn none() -> Self {
        Self {
            inline: [0; 2],
            len: 0,
            more: Vec::new(),
        }
    }

    fn as_slice(&self) -> &[u64] {
        if self.more.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.more
        }
    }
}

/// One call's place in its member's [`Order`], released when the call
/// ends (dropped with it).
pub(crate) struct Stamp {
    order: Option<Arc<Order>>,
    seq: u64,
    pairs: Pairs,
}

impl Stamp {
    /// A call that nothing orders (a batch, a fence raise, a status read).
    pub(crate) fn none() -> Self {
        Self {
            order: None,
            seq: 0,
            pairs: Pairs::none(),
        }
    }

    /// Whether a later call of one of this call's pairs has been made.
    pub(crate) fn superseded(&self) -> bool {
        let Some(order) = &self.order else {
            return false;
        };
        let pairs = self.pairs.as_slice();
        if pairs.is_empty() {
            return false;
        }
        let latest = locked(&order.latest);
        pairs
            .iter()
            .any(|p| latest.get(p).is_some_and(|&(s, _)| s != self.seq))
    }

    /// `Ok` when the call may be sent again; the error it fails with when
    /// a later call of its hold was made meanwhile.
    pub(crate) fn may_resend(&self) -> Result<(), NodeError> {
        if self.superseded() {
            return Err(NodeError::new(
                NodeErrorKind::Superseded,
                "not sent again: a later call of the same hold was made to this member \
                 meanwhile (this one had not run)",
            ));
        }
        Ok(())
    }
}

impl Drop for Stamp {
    fn drop(&mut self) {
        let Some(order) = &self.order else { return };
        let pairs = self.pairs.as_slice();
        if pairs.is_empty() {
            return;
        }
        let mut latest = locked(&order.latest);
        for p in pairs {
            if let Some(entry) = latest.get_mut(p) {
                entry.1 -= 1;
                if entry.1 == 0 {
                    latest.remove(p);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stamp(order: &Arc<Order>, pairs: &[(&str, &str)]) -> Stamp {
        let pairs: Vec<u64> = pairs.iter().map(|(l, w)| pair(l, w)).collect();
        order.stamp(&pairs)
    }

    /// A later call of the same (lock, holder) supersedes an earlier one,
    /// also once it ended; another holder's or another lock's does not;
    /// the map forgets a pair once none of its calls is in flight.
    #[test]
    fn a_later_call_of_the_same_hold_supersedes_an_earlier_one() {
        let order = Arc::new(Order::default());
        let acquire = stamp(&order, &[("a", "h1")]);
        let other_holder = stamp(&order, &[("a", "h2")]);
        let other_lock = stamp(&order, &[("b", "h1")]);
        assert!(!acquire.superseded());
        assert!(acquire.may_resend().is_ok());
        let release = stamp(&order, &[("a", "h1")]);
        assert!(acquire.superseded(), "the release was made after it");
        let e = acquire.may_resend().expect_err("superseded");
        assert_eq!(e.kind, NodeErrorKind::Superseded);
        assert!(!release.superseded());
        assert!(!other_holder.superseded() && !other_lock.superseded());
        drop(release);
        assert!(
            acquire.superseded(),
            "a release that already ended still comes first"
        );
        drop(acquire);
        let next = stamp(&order, &[("a", "h1")]);
        assert!(!next.superseded(), "a new call after both ended");
        drop((next, other_holder, other_lock));
        assert_eq!(order.in_flight(), 0, "nothing kept once the calls end");
    }

    /// A queued acquire is ordered by its holder and by its waiter: a
    /// `leave` of the waiter supersedes it, as a release of the holder
    /// does; a stamp of no pair is never superseded.
    #[test]
    fn a_queued_acquire_is_ordered_by_its_holder_and_its_waiter() {
        let order = Arc::new(Order::default());
        let queued = stamp(&order, &[("a", "h1"), ("a", "w1")]);
        let leave = stamp(&order, &[("a", "w1")]);
        assert!(queued.superseded());
        drop(leave);
        assert!(queued.superseded(), "the leave came first");
        assert!(!Stamp::none().superseded());
    }
}
