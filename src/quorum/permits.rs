//! Pure: a semaphore's slots as a quorum of members sees them
//! (`scripts/permits.lua` on each), with no I/O: which slots an attempt
//! may take now, when the earliest held one expires, and whether every
//! member agrees on the permit count.

use std::time::Duration;

use crate::node::SlotsSeen;

/// What the members that answered say of a semaphore's slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SlotsView {
    /// The slots free on at least a quorum of members: those an attempt
    /// can win now (another holder's grant on a quorum rules a slot out).
    pub(crate) free: Vec<u32>,
    /// The smallest PTTL among the held slots' keys: when the earliest
    /// permit may lapse (an expiry publishes nothing).
    pub(crate) earliest_expiry: Option<Duration>,
    /// A count recorded on some member that differs from ours.
    pub(crate) other_count: Option<i64>,
    /// How many members answered.
    pub(crate) answered: usize,
}

/// The view of `count` slots from the members' answers (`None`: failed or
/// silent). A slot counts as free where a member answered that its key is
/// missing; it is a candidate once `required` members say so.
pub(crate) fn view(seen: &[Option<&SlotsSeen>], count: u32, required: usize) -> SlotsView {
    let mut free_on = vec![0usize; count as usize];
    let mut earliest: Option<Duration> = None;
    let mut other_count = None;
    let mut answered = 0;
    for s in seen.iter().flatten() {
        answered += 1;
        if s.count != i64::from(count) {
            other_count = Some(s.count);
        }
        for (i, slot) in s.held.iter().enumerate().take(free_on.len()) {
            match slot {
                None => free_on[i] += 1,
                Some(Some(pttl)) => earliest = Some(earliest.map_or(*pttl, |e| e.min(*pttl))),
                Some(None) => {}
            }
        }
    }
    let free = (0..count)
        .filter(|i| free_on[*i as usize] >= required)
        .collect();
    SlotsView {
        free,
        earliest_expiry: earliest,
        other_count,
        answered,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(count: i64, held: &[bool]) -> SlotsSeen {
        SlotsSeen {
            count,
            held: held
                .iter()
                .map(|h| h.then_some(Some(Duration::from_millis(500))))
                .collect(),
        }
    }

    /// The {A,B}/{B,C}/{A,C} case: three members, two permits, slot 0 held
    /// on A and B, slot 1 on B and C. Neither slot is free on a quorum,
    /// whatever each member counts.
    #[test]
    fn a_slot_held_on_a_quorum_is_never_a_candidate() {
        let (a, b, c) = (
            seen(2, &[true, false]),
            seen(2, &[true, true]),
            seen(2, &[false, true]),
        );
        let v = view(&[Some(&a), Some(&b), Some(&c)], 2, 2);
        assert!(v.free.is_empty(), "{v:?}");
        assert_eq!(v.earliest_expiry, Some(Duration::from_millis(500)));
        // With one member silent, a slot free on one answer is no candidate.
        let v = view(&[Some(&a), None, Some(&c)], 2, 2);
        assert!(v.free.is_empty(), "{v:?}");
    }

    #[test]
    fn free_slots_and_count_mismatch() {
        let a = seen(3, &[false, true, false]);
        let b = seen(3, &[false, false, false]);
        let v = view(&[Some(&a), Some(&b), None], 3, 2);
        assert_eq!(v.free, vec![0, 2]);
        assert_eq!(v.other_count, None);
        assert_eq!(v.answered, 2);
        let c = seen(5, &[false, false, false]);
        let v = view(&[Some(&a), Some(&c)], 3, 2);
        assert_eq!(v.other_count, Some(5));
    }
}
