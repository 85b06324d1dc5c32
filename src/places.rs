//! A manager's keeper of its waiters' places in the locks' queues on the
//! nodes ([`Keeper`]): the refreshes its waiters ask for while their locks
//! are held, gathered into one batch per node (`scripts/keep.lua`).
//!
//! A waiter with a place keeps it by calling at least every refresh
//! interval (`queue_timeout / 3`; a place lapses after `queue_timeout`).
//! It once did so with a queued attempt on every node, which costs a whole
//! acquire script per node and a fan-out of the client's. Thousands of
//! waiters each on a held lock of its own made those refreshes the whole
//! load of the client and the nodes. Now a waiter whose refresh interval
//! ends while its lock is held as far as it knows asks the keeper instead,
//! and attempts only when the keeper says it must (the lock is free on a
//! node, the place is gone there, or too few nodes answered).
//!
//! Batching is by group commit: the first request starts a round at once;
//! the requests that come while a round is in flight go in the next one.
//! An idle manager adds no latency, and a busy one sends larger batches.
//! The waiter drives its own refreshes: a `lock()` future its task no
//! longer polls asks for none, so its place lapses as it did before.

use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::node::{RenewItem, Renewed};
use crate::sync::locked;

/// Places per round at most: about 2,000 × 4 Redis commands on each node,
/// a few milliseconds of its time, in calls of `RENEW_CHUNK` places. The
/// rest wait for the next round.
pub(crate) const PLACES_PER_ROUND: usize = 2_000;

/// The places waiting for the next round, and whether a round is running.
#[derive(Default)]
pub(crate) struct Keeper {
    pending: Mutex<Pending>,
}

#[derive(Default)]
struct Pending {
    items: Vec<RenewItem>,
    answers: Vec<oneshot::Sender<Option<Kept>>>,
    /// A round is running: it takes what is pending when it ends.
    running: bool,
}

/// The places of one round and where each one's verdict goes.
pub(crate) struct Round {
    pub(crate) items: Vec<RenewItem>,
    pub(crate) answers: Vec<oneshot::Sender<Option<Kept>>>,
}

/// A kept place's verdict: until when the lock's key is known to last, if
/// a node that kept the place said (the earliest of what they said, from
/// the time the round was sent: a lower bound). The waiter sleeps on to
/// then at most, instead of attempting at an expiry it saw before the
/// holder renewed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kept {
    pub(crate) holder_until: Option<Instant>,
}

impl Keeper {
    /// Adds a place to the next round. Returns where its verdict comes,
    /// and whether the caller starts the rounds (none is running).
    pub(crate) fn add(&self, item: RenewItem) -> (oneshot::Receiver<Option<Kept>>, bool) {
        let (tx, rx) = oneshot::channel();
        let mut p = locked(&self.pending);
        p.items.push(item);
        p.answers.push(tx);
        let start = !std::mem::replace(&mut p.running, true);
        (rx, start)
    }

    /// The places of the next round, at most [`PLACES_PER_ROUND`], or
    /// `None` when none is pending: the rounds have stopped then, and the
    /// next [`Keeper::add`] starts them again.
    pub(crate) fn next_round(&self) -> Option<Round> {
        let mut p = locked(&self.pending);
        if p.items.is_empty() {
            p.running = false;
            return None;
        }
        let n = p.items.len().min(PLACES_PER_ROUND);
        let items: Vec<RenewItem> = p.items.drain(..n).collect();
        let answers: Vec<_> = p.answers.drain(..n).collect();
        Some(Round { items, answers })
    }

    /// The rounds could not start (no runtime, or the manager is closing):
    /// every pending place is answered "not kept" (its waiter attempts).
    pub(crate) fn abandon(&self) {
        let mut p = locked(&self.pending);
        p.running = false;
        p.items.clear();
        for tx in p.answers.drain(..) {
            let _ = tx.send(None);
        }
    }
}

/// Whether one place was kept, from each node's answer for it (`None`
/// where the node failed or has not answered): at least `required` nodes
/// kept it, and none said that the lock is free, that the waiter is not
/// queued there, or that a key has another type. Any of those, or too few
/// answers, and the waiter attempts, as every refresh once did: an
/// attempt takes a free lock, and queues the waiter again where its place
/// was gone. Kept, it says how long the lock's key is known to last: the
/// least PTTL the keeping nodes reported ([`Renewed::Kept`]), if any did.
pub(crate) fn kept<'a>(
    answers: impl Iterator<Item = Option<&'a Renewed>>,
    required: usize,
) -> Option<Option<Duration>> {
    let mut kept = 0;
    let mut left: Option<Duration> = None;
    #[cfg(test)]
    let free_kept =
        crate::hooks::mutation::active(crate::hooks::mutation::Mutation::KeepIgnoresFree);
    #[cfg(not(test))]
    let free_kept = false;
    for a in answers {
        match a {
            Some(Renewed::Extended) => kept += 1,
            Some(Renewed::Kept(pttl)) => {
                kept += 1;
                left = Some(left.map_or(*pttl, |l| l.min(*pttl)));
            }
            Some(Renewed::Missing) if free_kept => kept += 1,
            Some(Renewed::Failed) | None => {}
            Some(_) => return None,
        }
    }
    (kept >= required).then_some(left)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;
    use crate::keys::Keys;

    fn item(i: usize) -> RenewItem {
        let keys = Arc::new(Keys::new("ql:", &format!("l{i}")));
        RenewItem::place(&keys, &Arc::from(format!("w{i}")), Duration::from_secs(5))
    }

    #[test]
    fn the_first_place_starts_the_rounds_and_later_ones_join_them() {
        let k = Keeper::default();
        let (_a, start) = k.add(item(0));
        assert!(start);
        let (_b, start) = k.add(item(1));
        assert!(!start, "a round is running: the second place waits for it");
        let round = k.next_round().expect("two places pending");
        assert_eq!(round.items.len(), 2);
        let (_c, start) = k.add(item(2));
        assert!(!start, "still running until a round finds nothing");
        assert_eq!(k.next_round().map(|r| r.items.len()), Some(1));
        assert!(k.next_round().is_none());
        let (_d, start) = k.add(item(3));
        assert!(start, "the rounds stopped: the next place starts them");
    }

    #[test]
    fn a_round_carries_at_most_its_share_and_the_rest_wait() {
        let k = Keeper::default();
        let rx: Vec<_> = (0..PLACES_PER_ROUND + 5)
            .map(|i| k.add(item(i)).0)
            .collect();
        assert_eq!(
            k.next_round().map(|r| r.items.len()),
            Some(PLACES_PER_ROUND)
        );
        let rest = k.next_round().expect("the rest");
        assert_eq!(rest.items.len(), 5);
        assert_eq!(&*rest.items[0].owner, format!("w{PLACES_PER_ROUND}"));
        drop(rx);
    }

    #[tokio::test]
    async fn abandoning_answers_every_pending_place_not_kept() {
        let k = Keeper::default();
        let (rx, _) = k.add(item(0));
        k.abandon();
        assert_eq!(rx.await, Ok(None));
        assert!(k.add(item(1)).1, "abandoning stops the rounds");
    }

    #[test]
    fn a_place_is_kept_only_by_a_quorum_and_no_node_against_it() {
        use Renewed::{Conflict, Extended, Failed, Missing, WrongType};
        let e = Some(&Extended);
        assert_eq!(
            kept([e, e, e, None, Some(&Failed)].into_iter(), 3),
            Some(None)
        );
        assert_eq!(kept([e, e, None, None, Some(&Failed)].into_iter(), 3), None);
        for against in [Missing, Conflict, WrongType] {
            assert_eq!(
                kept([e, e, e, e, Some(&against)].into_iter(), 3),
                None,
                "{against:?}"
            );
        }
    }

    /// A kept place says how long the lock is known to last: the least
    /// PTTL the keeping nodes reported (a key without a TTL says nothing).
    #[test]
    fn a_kept_place_knows_the_least_pttl_reported() {
        let s = |ms| Renewed::Kept(Duration::from_millis(ms));
        let (a, b, e) = (s(900), s(400), Renewed::Extended);
        let answers = [Some(&a), Some(&e), Some(&b), None];
        let left = kept(answers.into_iter(), 3);
        assert_eq!(left, Some(Some(Duration::from_millis(400))));
        let short = [Some(&a), Some(&b), None, None];
        assert_eq!(kept(short.into_iter(), 3), None, "two of three");
    }
}
