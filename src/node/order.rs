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
//! Script calls about locks are stamped, and renewal and repair batches
//! (`order/batch`): a batch is ordered by the hold itself while in flight
//! (a release waits for a renewal in flight, on the client side), and here
//! once given up unanswered (below). A fence raise only ever raises a
//! counter.
//!
//! **Lanes.** A member whose server has a connection of its own for the
//! calls that free ([`Lane::Frees`]: releases and queue exits; every
//! member: a master's, a Sentinel member's, a cluster member's own cluster
//! connection) sends them there, so that they never queue on the client
//! side behind
//! a crowd of attempts on the connection of every other call
//! ([`Lane::Calls`]; issue 35: a release behind 20,000 waiters' attempts
//! timed out). Two connections are not one queue: a call on one may
//! overtake a call made earlier on the other. The order of a hold's calls
//! is kept by choosing the lane here, when the call is stamped:
//!
//! - a pair is *unsettled* on a lane while a call of it there may still
//!   run: one in flight, or one dropped unanswered (its deadline passed,
//!   its future was dropped) whose command may still sit in that
//!   connection's queue. A call that ended with an answer, or an error,
//!   has run or never will; a dropped one is known to have run once a
//!   call stamped after it was dropped has been answered on the same lane
//!   (one connection answers in the order it was sent, and a call is sent
//!   when it is made, after its stamp: the dropped one went first, if it
//!   went at all). A connection that breaks and is made again runs nothing
//!   of the old one later.
//! - a call goes on the lane where its pairs are unsettled, whatever it
//!   prefers: a release whose acquire on this member has not answered (a
//!   rollback of an attempt still in flight, the release of a hold with a
//!   late grant on its way) goes on the acquire's connection, behind it,
//!   as before; an acquire made while its owner's last release is in
//!   flight goes behind that release. Otherwise it goes on the lane it
//!   prefers: a release whose acquire answered cannot land before it
//!   anywhere. A call that frees prefers its own lane only behind a
//!   crowd, from [`CROWDED`] calls in flight on [`Lane::Calls`]; with
//!   fewer it prefers [`Lane::Calls`], whose writes and reads it then
//!   shares.
//! - a third lane, [`Lane::Renewals`], is the watchdog's renewal
//!   connection. A repair batch (the only batch that writes: it re-creates
//!   a missing key) keeps its holds' pairs unsettled there while it may
//!   run, and one given up unanswered leaves them so until a later batch,
//!   or call, is answered there. A call of such a pair (a release made
//!   after its hold's wave gave the repair up) goes on the renewal
//!   connection, behind the repair, and not on another where it could run
//!   first and let the repair re-create the released key for a full
//!   lease. A `PING` barrier would not do: behind a frozen node it times
//!   out, and the release would never be sent.
//! - a call of several pairs unsettled on several lanes (a queued acquire,
//!   or a set's, whose pairs' histories differ, or a release behind both
//!   its acquire and a repair) goes on [`Lane::Renewals`] if it is one of
//!   them, else on the lane it prefers, after a barrier on each of the
//!   others: a `PING` there, answered, proves that everything sent there
//!   before it ran.
//!
//! So no call of a (lock, party) pair runs before a call of that pair made
//! earlier, as on one connection.
//!
//! **Per slot.** On a Redis Cluster member each lane is a cluster
//! connection, one connection per shard: an answer proves only that what
//! was sent earlier to the same shard has run. There the proof is kept per
//! hash slot (the lock's; a set's first name's): a call dropped in a slot
//! is settled by a later answer in that slot or a barrier's `PING` routed
//! to that slot's master, never by an answer from another slot. A slot
//! that moves mid-flight does not break this: the source runs a call only
//! while it still holds the call's keys, and answers `MOVED` or `ASK`
//! (nothing run) once they have left, so a call answered by the target
//! came after every earlier call of the slot that the source ran. A member
//! whose server has one connection for all its calls sends every call on
//! [`Lane::Calls`] and keeps no lane state (the simulator's and the unit
//! tests' fakes).

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasher, BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, LazyLock, Mutex};

use self::lane::LANES;
pub(crate) use self::lane::{Barriers, Lane};
use self::pairs::Pairs;
use crate::error::{NodeError, NodeErrorKind};
use crate::sync::locked;

/// One (lock name, holder or waiter id) pair, as a 64-bit hash: computed
/// once per call, so that the member's map neither clones nor hashes the
/// names again. Two pairs that share a hash (about one in 2^64) only make
/// a call proven not run fail instead of being sent again, or take the
/// other lane.
/// foldhash's, seeded once per process: a tenth of SipHash's instructions
/// on these names, and a collision costs no safety.
pub(crate) fn pair(lock: &str, party: &str) -> u64 {
    static SEED: LazyLock<foldhash::quality::RandomState> = LazyLock::new(Default::default);
    SEED.hash_one((lock, party))
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

    /// A hash slot, spread over the whole word.
    fn write_u16(&mut self, n: u16) {
        self.0 = u64::from(n).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }
}

/// One pair's calls: the stamp of the latest, how many stamps are alive,
/// and per lane how many of its calls may still run there.
struct Entry {
    latest: u64,
    live: usize,
    unsettled: [usize; LANES],
}

impl Entry {
    fn idle(&self) -> bool {
        self.live == 0 && self.unsettled == [0; LANES]
    }
}

type PairMap = HashMap<u64, Entry, BuildHasherDefault<Identity>>;

/// Per route (see [`Order::new`]): the calls dropped unanswered, in the
/// order dropped, each with the last stamp made before it was dropped.
type Dropped = HashMap<u16, VecDeque<(u64, Pairs)>, BuildHasherDefault<Identity>>;

#[derive(Default)]
struct State {
    pairs: PairMap,
    /// The last stamp made.
    next: u64,
    /// Per lane, per route: the calls dropped unanswered there.
    dropped: [Dropped; LANES],
    /// The tracked calls on [`Lane::Calls`] that have not ended: the
    /// client-side queue a call that frees would wait behind there.
    on_calls: usize,
}

impl State {
    /// The lane for a call of `pairs` that prefers `prefer`, and the lanes
    /// to pass a barrier on first (see the module doc).
    fn lane(&self, pairs: &[u64], prefer: Lane) -> (Lane, Barriers) {
        let mut unsettled = [false; LANES];
        for e in pairs.iter().filter_map(|p| self.pairs.get(p)) {
            for (u, n) in unsettled.iter_mut().zip(e.unsettled) {
                *u |= n > 0;
            }
        }
        let on = |l: Lane| unsettled[l.index()];
        let lane = if on(Lane::Renewals) {
            Lane::Renewals
        } else if on(prefer) {
            prefer
        } else {
            Lane::ALL.into_iter().find(|&l| on(l)).unwrap_or(prefer)
        };
        let barriers = Lane::ALL
            .into_iter()
            .filter(|&l| l != lane && on(l))
            .fold(Barriers::NONE, Barriers::with);
        (lane, barriers)
    }

    /// Everything sent on `lane` by `route` before stamp `seq` was made has
    /// run: the calls dropped there before it are settled.
    fn ran_before(&mut self, lane: Lane, route: u16, seq: u64) {
        let i = lane.index();
        let Some(queue) = self.dropped[i].get_mut(&route) else {
            return;
        };
        while queue.front().is_some_and(|(at, _)| *at < seq) {
            if let Some((_, pairs)) = queue.pop_front() {
                settle(&mut self.pairs, lane, pairs.as_slice());
            }
        }
        if queue.is_empty() {
            self.dropped[i].remove(&route);
        }
    }
}

/// A call of `pairs` may no longer run on `lane`.
fn settle(map: &mut PairMap, lane: Lane, pairs: &[u64]) {
    for p in pairs {
        if let Some(e) = map.get_mut(p) {
            e.unsettled[lane.index()] = e.unsettled[lane.index()].saturating_sub(1);
            if e.idle() {
                map.remove(p);
            }
        }
    }
}

/// A stamp of `pairs` is gone; with `lane`, its call can no longer run there.
fn release(map: &mut PairMap, pairs: &[u64], lane: Option<Lane>) {
    for p in pairs {
        if let Some(e) = map.get_mut(p) {
            e.live = e.live.saturating_sub(1);
            if let Some(lane) = lane {
                e.unsettled[lane.index()] = e.unsettled[lane.index()].saturating_sub(1);
            }
            if e.idle() {
                map.remove(p);
            }
        }
    }
}

/// How many calls in flight on [`Lane::Calls`] make a call that frees
/// prefer [`Lane::Frees`]; with fewer, it goes on [`Lane::Calls`] too.
///
/// A second connection is not free: its commands no longer share the
/// first's writes and reads, and on 2 cores 64 tasks of lock+unlock spent
/// 6-13% more client CPU per cycle with every release apart
/// (`examples/cycle_cost.rs`, 2026-11-29; docs/BENCHMARKS.md). Behind 128
/// calls a release waits for 128 script runs, a few milliseconds on a busy
/// server, far within its patience; behind the thousands of a crowd it
/// waits no more, because from 128 on it takes its own connection.
pub(crate) const CROWDED: usize = 128;

/// The latest stamp of every pair with a call in flight on one member, and
/// how many of its calls are in flight; on a member of two lanes, where
/// each pair's calls may still run.
#[derive(Default)]
pub(crate) struct Order {
    state: Mutex<State>,
    /// Whether the member's server sends [`Lane::Frees`] calls apart.
    lanes: bool,
    /// From how many calls in flight on [`Lane::Calls`] a call that frees
    /// prefers [`Lane::Frees`] ([`CROWDED`]).
    crowded: usize,
    /// Whether each lane is one connection per shard (a cluster member):
    /// an answer then proves only what was sent before it by the same
    /// route, the lock's hash slot.
    per_slot: bool,
}

impl Order {
    /// The order of a member whose server sends the calls that free on a
    /// connection of their own (`lanes`), or all on one; `per_slot` when
    /// a lane is a connection per shard (a cluster member), so that what a
    /// call's answer proves is kept per hash slot.
    pub(crate) fn new(lanes: bool, per_slot: bool) -> Self {
        Self {
            lanes,
            per_slot,
            crowded: CROWDED,
            ..Self::default()
        }
    }

    /// The same order, whose calls that free prefer [`Lane::Frees`] from
    /// `crowded` calls in flight on [`Lane::Calls`] on (0: always).
    #[cfg(test)]
    pub(crate) fn crowded_at(mut self, crowded: usize) -> Self {
        self.crowded = crowded;
        self
    }

    /// Stamps a call about `pairs` (see [`pair`]) of the lock in hash slot
    /// `slot`, made now: it is the latest of each. It goes on the lane
    /// `prefer` unless the order of its pairs' calls says otherwise
    /// ([`Stamp::lane`]); a call that prefers [`Lane::Frees`] prefers
    /// [`Lane::Calls`] while fewer than [`CROWDED`] calls are in flight
    /// there.
    pub(crate) fn stamp(self: &Arc<Self>, pairs: &[u64], prefer: Lane, slot: u16) -> Stamp {
        let pairs = Pairs::of(pairs);
        let mut stamp = Stamp {
            order: Some(Arc::clone(self)),
            seq: 0,
            route: if self.per_slot { slot } else { 0 },
            pairs,
            lane: if self.lanes { prefer } else { Lane::Calls },
            barriers: Barriers::NONE,
            tracked: false,
            done: AtomicBool::new(false),
        };
        let mut state = locked(&self.state);
        state.next += 1;
        stamp.seq = state.next;
        let pairs = stamp.pairs.as_slice();
        if pairs.is_empty() {
            return stamp;
        }
        if self.lanes {
            let prefer = if prefer == Lane::Frees && state.on_calls < self.crowded {
                Lane::Calls
            } else {
                prefer
            };
            (stamp.lane, stamp.barriers) = state.lane(pairs, prefer);
            stamp.tracked = true;
            if stamp.lane == Lane::Calls {
                state.on_calls += 1;
            }
        }
        let (seq, lane) = (stamp.seq, stamp.lane.index());
        for &p in pairs {
            let entry = state.pairs.entry(p).or_insert(Entry {
                latest: seq,
                live: 0,
                unsettled: [0; LANES],
            });
            entry.latest = seq;
            entry.live += 1;
            if stamp.tracked {
                entry.unsettled[lane] += 1;
            }
        }
        drop(state);
        stamp
    }

    /// How many pairs have a call in flight, or one that may still run.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        locked(&self.state).pairs.len()
    }
}

/// One call's place in its member's [`Order`], released when the call
/// ends (dropped with it), and the lane it goes on.
pub(crate) struct Stamp {
    order: Option<Arc<Order>>,
    seq: u64,
    /// What an answer of this call proves something about: its hash slot
    /// on a member whose lanes are per shard, else the whole lane (0).
    route: u16,
    pairs: Pairs,
    lane: Lane,
    /// The lanes to pass a barrier on before sending (see the module doc).
    barriers: Barriers,
    /// Whether the order counts this call among its pairs' unsettled ones.
    tracked: bool,
    /// Ended: answered, failed, or never sent.
    done: AtomicBool,
}

impl Stamp {
    /// A call that nothing orders (a batch, a fence raise, a status read).
    pub(crate) fn none() -> Self {
        Self {
            order: None,
            seq: 0,
            route: 0,
            pairs: Pairs::none(),
            lane: Lane::Calls,
            barriers: Barriers::NONE,
            tracked: false,
            done: AtomicBool::new(false),
        }
    }

    /// The lane the call goes on.
    pub(crate) fn lane(&self) -> Lane {
        self.lane
    }

    /// The lanes where a `PING` must be answered before the call is sent.
    pub(crate) fn barriers(&self) -> Barriers {
        self.barriers
    }

    /// The barrier's `PING` was answered on `lane` (on a cluster member,
    /// by the master of the call's slot): everything sent there before
    /// it, so everything made before this call, has run.
    pub(crate) fn passed(&self, lane: Lane) {
        if let (Some(order), true) = (&self.order, self.tracked) {
            locked(&order.state).ran_before(lane, self.route, self.seq);
        }
    }

    /// The call ended: it will not run later. `answered`: its last send
    /// was answered on its connection, so every call sent there before it
    /// has run.
    /// Its place ends here too (nothing asks an ended call's stamp more):
    /// one lock of the order fewer per call than ending it in its drop.
    pub(crate) fn ended(&self, answered: bool) {
        let Some(order) = &self.order else { return };
        if !self.tracked || self.done.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut state = locked(&order.state);
        release(&mut state.pairs, self.pairs.as_slice(), Some(self.lane));
        if self.lane == Lane::Calls {
            state.on_calls = state.on_calls.saturating_sub(1);
        }
        if answered {
            state.ran_before(self.lane, self.route, self.seq);
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
        let state = locked(&order.state);
        pairs
            .iter()
            .any(|p| state.pairs.get(p).is_some_and(|e| e.latest != self.seq))
    }

    /// `Ok` when the call may be sent again; the error it fails with when
    /// a later call of its hold was made meanwhile.
    pub(crate) fn may_resend(&self) -> Result<(), NodeError> {
        if self.superseded() {
            return Err(superseded_error());
        }
        Ok(())
    }
}

/// The error of a call not sent again because a later call of its hold
/// was made to the member meanwhile.
pub(crate) fn superseded_error() -> NodeError {
    NodeError::new(
        NodeErrorKind::Superseded,
        "not sent again: a later call of the same hold was made to this member \
         meanwhile (this one had not run)",
    )
}

impl Drop for Stamp {
    fn drop(&mut self) {
        let Some(order) = &self.order else { return };
        // Ended: its place ended then (see `Stamp::ended`).
        if self.pairs.as_slice().is_empty() || (self.tracked && *self.done.get_mut()) {
            return;
        }
        let mut state = locked(&order.state);
        release(&mut state.pairs, self.pairs.as_slice(), None);
        // Dropped unanswered: its command may still sit in its
        // connection's queue, until a call made after now is answered
        // there.
        if self.tracked {
            if self.lane == Lane::Calls {
                state.on_calls = state.on_calls.saturating_sub(1);
            }
            let at = state.next;
            let pairs = self.pairs.take();
            state.dropped[self.lane.index()]
                .entry(self.route)
                .or_default()
                .push_back((at, pairs));
        }
    }
}

mod batch;
mod lane;
mod pairs;
#[cfg(test)]
mod tests;
