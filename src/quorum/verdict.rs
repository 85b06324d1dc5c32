//! Every quorum verdict, with no I/O: what is left of a lease (the
//! validity math), the quorum rule ([`Decision`]), and the tallies that
//! read the nodes' answers against it: an acquisition's ([`Tally`]), a
//! release's ([`ReleaseTally`]: released, unavailable, not held or
//! expired), and one hold's renewal ([`RenewalTally`]: which nodes renewed,
//! which came back empty to repair, and the [`Verdict`]: renewed until
//! when, retry at the next tick, or lost and why).

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure};
use crate::node::{Grant, Released, Renewed};

/// What is left of a lease after `elapsed` and the drift allowance, if anything.
///
/// `validity = lease - elapsed - drift`; `None` when that is zero or less.
pub(crate) fn validity(lease: Duration, elapsed: Duration, drift: Duration) -> Option<Duration> {
    lease
        .checked_sub(elapsed)
        .and_then(|left| left.checked_sub(drift))
        .filter(|left| !left.is_zero())
}

/// The instant until which a lock taken at `start` with `lease` is valid, as
/// seen at `now`.
pub(crate) fn valid_until(
    start: Instant,
    now: Instant,
    lease: Duration,
    drift: Duration,
) -> Option<Instant> {
    validity(lease, now.saturating_duration_since(start), drift).map(|v| now + v)
}

/// The running count of an acquisition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Tally {
    pub(crate) granted: usize,
    pub(crate) taken: usize,
    /// Re-entry only: the key is missing.
    pub(crate) missing: usize,
    pub(crate) failed: usize,
    /// Of the failed: the key holds another type (`WRONGTYPE`).
    pub(crate) wrong_type: usize,
    pub(crate) pending: usize,
}

/// Where a fan-out of a quorum stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Decision {
    /// Not yet decided.
    Open,
    /// The quorum is reached.
    Won,
    /// The quorum can no longer be reached.
    Lost,
}

impl Decision {
    /// The quorum rule: won at `required` successes (`done`), lost once the
    /// calls still `pending` can no longer make up the difference.
    pub(crate) fn of(done: usize, pending: usize, required: usize) -> Self {
        if done >= required {
            Self::Won
        } else if done + pending < required {
            Self::Lost
        } else {
            Self::Open
        }
    }
}

/// Whether a quorum of `required` among `nodes` can still confirm a hold
/// of which `absent` nodes answered that the key is not ours (missing,
/// another holder's, of another type): every other node, whether it
/// answered that it holds it, failed, or has not answered, may still hold
/// it. The one rule by which a renewal ([`RenewalTally::confirmable`]) and
/// a re-entry ([`Tally::confirmable`]) find a hold gone.
pub(crate) fn confirmable(nodes: usize, absent: usize, required: usize) -> bool {
    nodes.saturating_sub(absent) >= required
}

impl Tally {
    pub(crate) fn of(replies: &[Option<Result<Grant, NodeError>>]) -> Self {
        let mut t = Self::default();
        for r in replies {
            match r {
                None => t.pending += 1,
                Some(Ok(Grant::Granted(_))) => t.granted += 1,
                Some(Ok(Grant::Taken(..))) => t.taken += 1,
                Some(Ok(Grant::Missing)) => t.missing += 1,
                Some(Err(e)) => {
                    t.failed += 1;
                    if e.kind == NodeErrorKind::WrongType {
                        t.wrong_type += 1;
                    }
                }
            }
        }
        t
    }

    pub(crate) fn decide(&self, required: usize) -> Decision {
        Decision::of(self.granted, self.pending, required)
    }

    /// Whether a quorum of `required` can still confirm the hold a
    /// re-entry asked for ([`confirmable`]): the nodes that answered that
    /// the key is missing, another holder's or of another type cannot.
    pub(crate) fn confirmable(&self, required: usize) -> bool {
        let nodes = self.granted + self.taken + self.missing + self.failed + self.pending;
        let absent = self.taken + self.missing + self.wrong_type;
        confirmable(nodes, absent, required)
    }
}

/// How the nodes answered a release.
#[derive(Default)]
pub(crate) struct ReleaseTally {
    /// Nodes that deleted the key or lowered its count.
    pub(crate) released: usize,
    /// Nodes where another owner holds it.
    pub(crate) other: usize,
    /// Nodes that had not answered when the release was decided.
    pub(crate) pending: usize,
    pub(crate) failures: Vec<NodeFailure>,
}

impl ReleaseTally {
    /// Counts `replies`, by node index (`None` where still pending); a node
    /// that failed is named by `failure`.
    pub(crate) fn of(
        replies: &[Option<Result<Released, NodeError>>],
        failure: impl Fn(usize, &NodeError) -> NodeFailure,
    ) -> Self {
        let mut t = Self::default();
        for (i, r) in replies.iter().enumerate() {
            match r {
                Some(Ok(Released::Deleted | Released::Lowered)) => t.released += 1,
                Some(Ok(Released::Missing)) => {}
                Some(Ok(Released::OtherOwner)) => t.other += 1,
                Some(Err(e)) => t.failures.push(failure(i, e)),
                None => t.pending += 1,
            }
        }
        t
    }

    /// The verdict on the release of the last level of `name`, which needs
    /// `required` nodes: released on a quorum; unavailable when the nodes
    /// that failed or did not answer could have completed it; otherwise
    /// enough nodes answered that the lock was no longer ours (not held if
    /// only another owner's was found, else expired).
    pub(crate) fn verdict(self, name: &str, required: usize) -> Result<(), Error> {
        if self.released >= required {
            return Ok(());
        }
        let name = name.to_string();
        if self.released + self.failures.len() + self.pending >= required {
            // The nodes that did not answer could have completed the quorum.
            return Err(Error::Unavailable {
                name,
                failures: self.failures,
                required,
                granted: self.released,
            });
        }
        // Enough nodes answered that the lock was no longer ours.
        Err(if self.other > 0 && self.released == 0 {
            Error::NotHeld { name }
        } else {
            Error::Expired { name }
        })
    }
}

/// One hold's answers in one renewal wave, by node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RenewalTally {
    /// Per node; `None` where it did not answer (an error, a timeout, a
    /// node skipped for the rest of the tick).
    answers: Vec<Option<Renewed>>,
    /// Nodes that extended (or re-created) the key.
    pub(crate) renewed: usize,
    /// Nodes that answered that the key is not ours: missing, another
    /// owner's, or of the wrong type.
    pub(crate) absent: usize,
}

/// What one wave decides for one hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Renewed on a quorum: valid until this instant (never earlier than
    /// before). The nodes that came back empty are to be repaired.
    Renewed(Instant),
    /// The quorum was missed this time, with time left to try again at the
    /// next tick.
    Retry,
    /// No longer held.
    Lost(Loss),
}

/// Why a renewal declares a hold lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Loss {
    /// Its validity ran out before the answers were read: the keys may have
    /// expired and been taken meanwhile, and a renewal cannot give that
    /// time back.
    Lapsed,
    /// Too many nodes answered that the key is gone or someone else's for a
    /// quorum to confirm it (forced, expired, or taken and released
    /// meanwhile: re-creating the keys would hide that).
    Unconfirmable,
    /// The quorum was missed and the validity ends before the next tick
    /// could help.
    OutOfTime,
}

/// The times a verdict weighs, for one hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Times {
    /// The hold's validity before this wave.
    pub(crate) valid_until: Instant,
    /// That validity ran out before the answers were read.
    pub(crate) lapsed: bool,
    /// What this wave's renewal leaves valid, if anything is left of the
    /// lease after the wave's time and the drift.
    pub(crate) validity: Option<Instant>,
    /// When the next tick could renew the hold again.
    pub(crate) next_tick: Instant,
}

impl RenewalTally {
    /// Counts `answers`, one per node in node order; a node that answered
    /// [`Renewed::Failed`] for this hold did not answer.
    pub(crate) fn of(answers: impl IntoIterator<Item = Option<Renewed>>) -> Self {
        let answers: Vec<_> = answers
            .into_iter()
            .map(|a| a.filter(|r| *r != Renewed::Failed))
            .collect();
        let held = || answers.iter().map(|a| held(*a));
        let renewed = held().filter(|h| *h == Some(true)).count();
        let absent = held().filter(|h| *h == Some(false)).count();
        Self {
            answers,
            renewed,
            absent,
        }
    }

    /// The answers, by node.
    pub(crate) fn answers(&self) -> &[Option<Renewed>] {
        &self.answers
    }

    /// Per node: holds the key (`Some(true)`), does not (`Some(false)`), or
    /// did not say (`None`).
    pub(crate) fn held(&self) -> impl Iterator<Item = Option<bool>> + '_ {
        self.answers.iter().map(|a| held(*a))
    }

    /// The nodes that answered that the key is missing (restarted empty, or
    /// evicted it): re-created there when the hold is renewed.
    pub(crate) fn empty(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.answers.len()).filter(|&i| self.answers[i] == Some(Renewed::Missing))
    }

    /// Whether a quorum of `required` can still confirm the hold
    /// ([`confirmable`]): enough nodes did not answer that the key is gone.
    pub(crate) fn confirmable(&self, required: usize) -> bool {
        confirmable(self.answers.len(), self.absent, required)
    }

    /// The verdict for a hold that needs `required` nodes, at `times`.
    pub(crate) fn verdict(&self, required: usize, times: &Times) -> Verdict {
        match times.validity {
            Some(v) if !times.lapsed && self.renewed >= required => {
                Verdict::Renewed(times.valid_until.max(v))
            }
            _ if times.lapsed => Verdict::Lost(Loss::Lapsed),
            _ if !self.confirmable(required) => Verdict::Lost(Loss::Unconfirmable),
            _ if times.valid_until <= times.next_tick => Verdict::Lost(Loss::OutOfTime),
            _ => Verdict::Retry,
        }
    }
}

/// What one answer says of the key on its node.
fn held(answer: Option<Renewed>) -> Option<bool> {
    match answer? {
        Renewed::Extended | Renewed::Kept(_) | Renewed::Repaired => Some(true),
        Renewed::Missing | Renewed::Conflict | Renewed::WrongType => Some(false),
        Renewed::Failed => None,
    }
}

#[cfg(test)]
#[path = "verdict/tests.rs"]
mod tests;
