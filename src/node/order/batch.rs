//! A renewal or repair batch's place in its member's order, on
//! [`Lane::Renewals`]. A batch is not a call of one hold: it is never sent
//! again behind a later call, and only a repair can write (re-create a
//! missing key). So a batch takes a stamp for what its answer proves
//! (everything sent before it on the renewal connection has run), and a
//! repair's holds are unsettled there while it may still run: a release
//! made after a repair was given up unanswered goes on the renewal
//! connection, behind it, instead of overtaking it on another connection
//! (where the repair, run later, would re-create the released key).

use std::sync::Arc;

use super::{settle, Entry, Lane, Order, Pairs, State, LANES};
use crate::sync::locked;

/// One batch's place in its member's order (see the module doc).
pub(crate) struct BatchStamp {
    order: Arc<Order>,
    seq: u64,
    /// A repair's items, by route and pair: unsettled on
    /// [`Lane::Renewals`] until the batch ends.
    items: Vec<(u16, u64)>,
    /// Ended: answered or failed (a drop before then leaves the items
    /// unsettled until a later answer on the lane proves they ran).
    done: bool,
}

impl Order {
    /// Stamps a batch on [`Lane::Renewals`], made now; `None` on a member
    /// whose server sends everything on one connection. `repairs`: a
    /// repair's items as (hash slot, pair), empty for any other batch.
    pub(crate) fn batch(self: &Arc<Self>, repairs: &[(u16, u64)]) -> Option<BatchStamp> {
        if !self.lanes {
            return None;
        }
        let items: Vec<(u16, u64)> = repairs
            .iter()
            .map(|&(slot, p)| (self.route(slot), p))
            .collect();
        let mut state = locked(&self.state);
        state.next += 1;
        let seq = state.next;
        for &(_, p) in &items {
            let entry = state.pairs.entry(p).or_insert(Entry {
                latest: 0,
                live: 0,
                unsettled: [0; LANES],
            });
            entry.unsettled[Lane::Renewals.index()] += 1;
        }
        drop(state);
        Some(BatchStamp {
            order: Arc::clone(self),
            seq,
            items,
            done: false,
        })
    }

    /// What an answer proves something about: the slot on a member whose
    /// lanes are per shard, else the whole lane.
    pub(super) fn route(&self, slot: u16) -> u16 {
        if self.per_slot {
            slot
        } else {
            0
        }
    }
}

impl BatchStamp {
    /// The batch was answered, for item `i` by the hash slot of its part
    /// (`part(i)`: `None` when that part failed and may still run, as a
    /// cluster shard's that timed out). A part that answered proves that
    /// everything sent before it on its route has run.
    pub(crate) fn answered(mut self, len: usize, part: impl Fn(usize) -> Option<u16>) {
        self.done = true;
        let order = Arc::clone(&self.order);
        let lane = Lane::Renewals;
        let mut state = locked(&order.state);
        for (i, (route, p)) in std::mem::take(&mut self.items).into_iter().enumerate() {
            if part(i).is_some() {
                settle(&mut state.pairs, lane, &[p]);
            } else {
                state.unanswered(route, p);
            }
        }
        if state.dropped[lane.index()].is_empty() {
            return;
        }
        if order.per_slot {
            for slot in (0..len).filter_map(&part) {
                state.ran_before(lane, slot, self.seq);
            }
        } else if (0..len).any(|i| part(i).is_some()) {
            state.ran_before(lane, 0, self.seq);
        }
    }

    /// The batch failed with an answer or a broken connection: it did not
    /// run, or ran, and will not run later.
    pub(crate) fn failed(mut self) {
        self.done = true;
        let items = std::mem::take(&mut self.items);
        let mut state = locked(&self.order.state);
        for (_, p) in items {
            settle(&mut state.pairs, Lane::Renewals, &[p]);
        }
    }
}

impl Drop for BatchStamp {
    /// Dropped unanswered (its deadline passed), or failed without an
    /// answer on a live connection (a response timeout): it may still sit
    /// in its connection's queue, until a later answer there proves it
    /// ran.
    fn drop(&mut self) {
        if self.done || self.items.is_empty() {
            return;
        }
        let items = std::mem::take(&mut self.items);
        let mut state = locked(&self.order.state);
        for (route, p) in items {
            state.unanswered(route, p);
        }
    }
}

impl State {
    /// A repair of pair `p` on `route` ended unanswered: it may still sit
    /// in the renewal connection's queue, until a call made after now is
    /// answered there.
    fn unanswered(&mut self, route: u16, p: u64) {
        let at = self.next;
        self.dropped[Lane::Renewals.index()]
            .entry(route)
            .or_default()
            .push_back((at, Pairs::of(&[p])));
    }
}
