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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::{NodeError, NodeErrorKind};
use crate::sync::locked;

/// One (lock name, holder or waiter id) pair.
type Party = (Arc<str>, Arc<str>);

/// The latest stamp of every (lock, party) pair with a call in flight on
/// one member, and how many of its calls are in flight.
#[derive(Default)]
pub(crate) struct Order {
    latest: Mutex<HashMap<Party, (u64, usize)>>,
    next: AtomicU64,
}

impl Order {
    /// Stamps a call about `parties`, made now: it is the latest of each.
    pub(crate) fn stamp(self: &Arc<Self>, parties: Vec<Party>) -> Stamp {
        let seq = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        if !parties.is_empty() {
            let mut latest = locked(&self.latest);
            for p in &parties {
                let entry = latest.entry(p.clone()).or_insert((seq, 0));
                *entry = (seq, entry.1 + 1);
            }
        }
        Stamp {
            order: Some(Arc::clone(self)),
            seq,
            parties,
        }
    }

    /// How many (lock, party) pairs have a call in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        locked(&self.latest).len()
    }
}

/// One call's place in its member's [`Order`], released when the call
/// ends (dropped with it).
pub(crate) struct Stamp {
    order: Option<Arc<Order>>,
    seq: u64,
    parties: Vec<Party>,
}

impl Stamp {
    /// A call that nothing orders (a batch, a fence raise, a status read).
    pub(crate) fn none() -> Self {
        Self {
            order: None,
            seq: 0,
            parties: Vec::new(),
        }
    }

    /// Whether a later call of one of this call's pairs has been made.
    pub(crate) fn superseded(&self) -> bool {
        let Some(order) = &self.order else {
            return false;
        };
        if self.parties.is_empty() {
            return false;
        }
        let latest = locked(&order.latest);
        self.parties
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
        if self.parties.is_empty() {
            return;
        }
        let mut latest = locked(&order.latest);
        for p in &self.parties {
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

    fn pair(lock: &str, who: &str) -> Party {
        (Arc::from(lock), Arc::from(who))
    }

    /// A later call of the same (lock, holder) supersedes an earlier one,
    /// also once it ended; another holder's or another lock's does not;
    /// the map forgets a pair once none of its calls is in flight.
    #[test]
    fn a_later_call_of_the_same_hold_supersedes_an_earlier_one() {
        let order = Arc::new(Order::default());
        let acquire = order.stamp(vec![pair("a", "h1")]);
        let other_holder = order.stamp(vec![pair("a", "h2")]);
        let other_lock = order.stamp(vec![pair("b", "h1")]);
        assert!(!acquire.superseded());
        assert!(acquire.may_resend().is_ok());
        let release = order.stamp(vec![pair("a", "h1")]);
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
        let next = order.stamp(vec![pair("a", "h1")]);
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
        let queued = order.stamp(vec![pair("a", "h1"), pair("a", "w1")]);
        let leave = order.stamp(vec![pair("a", "w1")]);
        assert!(queued.superseded());
        drop(leave);
        assert!(queued.superseded(), "the leave came first");
        assert!(!Stamp::none().superseded());
    }
}
