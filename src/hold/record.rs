//! What a hold holds: its levels, its validity, the nodes known to hold its
//! key, and the renewal in flight. Private to this module, and changed only
//! through the verbs below: a level entered or left, a grant landed, a
//! re-entry merged, a renewal begun, landed and ended.
//!
//! One rule lives here: **a release waits for a marked renewal**. A renewal
//! wave marks a hold renewing ([`Hold::begin_renewal`]) only while it is
//! held, under the record's lock, and the last level marks it released
//! ([`Hold::leave_level`]) under the same lock. So either the wave sees the
//! release and leaves the hold alone, or the release waits
//! ([`Hold::wait_renewal_done`]) until the wave ends ([`Hold::end_renewal`],
//! after its repairs) or the end the wave marked has passed: a renewal or a
//! repair answered in time never lands on the nodes after the release.
//!
//! The rule is the client's. A batch given up at its timeout may still sit
//! in its node's queue on the renewal connection; the release must not
//! overtake it there on another connection, or a repair run after it
//! re-creates the released key for a full lease. The member's order sees
//! to that: a repair given up unanswered leaves its holds unsettled on the
//! renewal connection, and their releases go there, behind it
//! (`node::order`, [`Lane::Renewals`](crate::node::Lane)). A renewal run
//! late finds no key and does nothing.

use tokio::time::Instant;

use super::{lapses, renew_lapsed, Acquired, Hold, HoldState};
use crate::quorum::{self, RenewalTally, Times, Verdict};
use crate::sync::locked;

/// What a hold holds, behind the hold's mutex.
pub(super) struct Record {
    /// Levels held (re-entries plus one).
    count: u32,
    valid_until: Instant,
    /// Per node: known to hold the key.
    granted: Vec<bool>,
    /// A renewal wave that includes this hold is on the wire, and ends by
    /// this instant at the latest.
    renewing: Option<Instant>,
}

impl Record {
    /// One level, as won.
    pub(super) fn new(valid_until: Instant, granted: Vec<bool>) -> Self {
        Self {
            count: 1,
            valid_until,
            granted,
            renewing: None,
        }
    }

    /// Learns, per node, whether it holds the key (`None`: nothing learnt),
    /// and keeps the later of the two validities.
    fn merge(&mut self, held: impl IntoIterator<Item = Option<bool>>, until: Option<Instant>) {
        if let Some(until) = until {
            self.valid_until = self.valid_until.max(until);
        }
        for (g, h) in self.granted.iter_mut().zip(held) {
            if let Some(h) = h {
                *g = h;
            }
        }
    }
}

/// How a renewal wave found a hold as it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mark {
    /// Marked renewing: a release now waits for the wave to end. Its
    /// validity lapses at this instant.
    Renewing(Instant),
    /// No longer held (released, lost, or stopped at `max_hold`): left alone.
    NotHeld,
    /// Its validity ran out before it could be renewed: lost, never renewed
    /// (a renewal would repair keys that may since have been taken and
    /// released by someone else).
    Lapsed,
}

impl Hold {
    /// Until when the hold is valid (on [`clock`](crate::clock)'s clock).
    pub(crate) fn valid_until(&self) -> Instant {
        locked(&self.record).valid_until
    }

    /// Levels held (re-entries plus one).
    pub(crate) fn count(&self) -> u32 {
        locked(&self.record).count
    }

    /// The indexes of the nodes known to hold the key.
    pub(crate) fn granted_nodes(&self) -> Vec<usize> {
        let r = locked(&self.record);
        (0..r.granted.len()).filter(|&i| r.granted[i]).collect()
    }

    /// Per node: this hold's acquire was never sent there and nothing has
    /// put the key there since (a late grant, a repair): its release need
    /// not go there ([`Members::release_quorum`]'s `skip`).
    ///
    /// [`Members::release_quorum`]: crate::members::Members::release_quorum
    pub(crate) fn unreached_nodes(&self) -> Vec<bool> {
        let r = locked(&self.record);
        self.unreached
            .iter()
            .zip(&r.granted)
            .map(|(&unreached, &granted)| unreached && !granted)
            .collect()
    }

    /// Adds a level (a re-entry); returns the new count.
    pub(crate) fn enter_level(&self) -> u32 {
        let mut r = locked(&self.record);
        r.count = r.count.saturating_add(1);
        r.count
    }

    /// Gives up one level: returns the levels left, and whether the hold was
    /// live (not lost, within its validity) when it did. The last level
    /// marks the hold released, under the record's lock: a renewal wave
    /// either sees the release or has marked a renewal that the release
    /// waits for.
    pub(crate) fn leave_level(&self) -> (u32, bool) {
        let live = self.is_live();
        let mut r = locked(&self.record);
        r.count = r.count.saturating_sub(1);
        if r.count == 0 {
            self.transition(HoldState::Released);
        }
        (r.count, live)
    }

    /// A grant landed on `node` after the acquisition was decided, or a
    /// repair re-created the key there.
    pub(crate) fn grant_landed(&self, node: usize) {
        if let Some(g) = locked(&self.record).granted.get_mut(node) {
            *g = true;
        }
    }

    /// A re-entry won: its validity and its grants join the hold's. A node
    /// that answered that the key is missing holds nothing until repaired.
    pub(crate) fn merge(&self, won: &Acquired, missing: &[bool]) {
        let held =
            won.granted.iter().zip(missing).map(
                |(&g, &m)| {
                    if m {
                        Some(false)
                    } else {
                        g.then_some(true)
                    }
                },
            );
        locked(&self.record).merge(held, Some(won.valid_until));
    }

    /// A renewal wave that began at `start` marks this hold renewing until
    /// `until` at the latest, if it is still held and within its validity.
    pub(crate) fn begin_renewal(&self, start: Instant, until: Instant) -> Mark {
        let mut r = locked(&self.record);
        if self.stored_phase() != HoldState::Held {
            return Mark::NotHeld;
        }
        let lapse = lapses(r.valid_until);
        if lapse <= start && !renew_lapsed() {
            return Mark::Lapsed;
        }
        r.renewing = Some(until);
        Mark::Renewing(lapse)
    }

    /// The answers of a renewal wave that began at `start` were read at
    /// `now`: records which nodes hold the key and, when the wave renewed
    /// it on a quorum, the new validity. Returns the verdict.
    pub(crate) fn renewal_landed(
        &self,
        tally: &RenewalTally,
        start: Instant,
        now: Instant,
    ) -> Verdict {
        let nodes = &self.nodes;
        let mut r = locked(&self.record);
        let times = Times {
            valid_until: r.valid_until,
            lapsed: lapses(r.valid_until) <= now && !renew_lapsed(),
            validity: quorum::valid_until(start, now, self.lease, nodes.drift(self.lease)),
            next_tick: now + nodes.config.renew_interval,
        };
        let verdict = tally.verdict(nodes.required_for(&self.keys), &times);
        let until = match verdict {
            Verdict::Renewed(until) => Some(until),
            Verdict::Retry | Verdict::Lost(_) => None,
        };
        r.merge(tally.held(), until);
        verdict
    }

    /// The renewal wave marked by [`Hold::begin_renewal`] is over (its
    /// repairs too): a release waiting for it goes ahead.
    pub(crate) fn end_renewal(&self) {
        locked(&self.record).renewing = None;
        self.renew_done.notify_waiters();
    }

    /// Waits until no renewal wave that includes this hold is in flight.
    ///
    /// Bounded by the end the wave marked: if the watchdog was stopped
    /// halfway (its runtime shut down), this gives up then.
    pub(super) async fn wait_renewal_done(&self) {
        loop {
            let notified = self.renew_done.notified();
            let Some(until) = locked(&self.record).renewing else {
                return;
            };
            if tokio::time::timeout_at(until, notified).await.is_err() {
                return;
            }
        }
    }
}
