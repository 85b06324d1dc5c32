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
        let name = name.to_string();
        if self.released >= required {
            return Ok(());
        }
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
        Renewed::Extended | Renewed::Repaired => Some(true),
        Renewed::Missing | Renewed::Conflict | Renewed::WrongType => Some(false),
        Renewed::Failed => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Quorum;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn validity_subtracts_elapsed_and_drift() {
        let lease = 10_000 * MS;
        let drift = 102 * MS;
        assert_eq!(validity(lease, Duration::ZERO, drift), Some(9_898 * MS));
        assert_eq!(validity(lease, 898 * MS, drift), Some(9_000 * MS));
        assert_eq!(validity(lease, 9_898 * MS, drift), None);
        assert_eq!(validity(lease, 9_897 * MS, drift), Some(MS));
        assert_eq!(validity(lease, 20_000 * MS, drift), None);
        assert_eq!(validity(MS, Duration::ZERO, 2 * MS), None);
    }

    #[test]
    fn valid_until_is_now_plus_validity() {
        let start = Instant::now();
        let now = start + 100 * MS;
        assert_eq!(
            valid_until(start, now, 1_000 * MS, 12 * MS),
            Some(now + 888 * MS)
        );
        assert_eq!(valid_until(start, now, 100 * MS, 12 * MS), None);
    }

    fn replies(spec: &str) -> Vec<Option<Result<Grant, NodeError>>> {
        spec.chars()
            .map(|c| match c {
                'g' => Some(Ok(Grant::Granted(1))),
                't' => Some(Ok(Grant::Taken(None, 0))),
                'e' => Some(Err(NodeError::timeout())),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn decides_as_soon_as_known() {
        assert_eq!(Tally::of(&replies("gg???")).decide(3), Decision::Open);
        assert_eq!(Tally::of(&replies("ggg??")).decide(3), Decision::Won);
        assert_eq!(Tally::of(&replies("tte??")).decide(3), Decision::Lost);
        assert_eq!(Tally::of(&replies("gte??")).decide(3), Decision::Open);
        assert_eq!(Tally::of(&replies("gggg?")).decide(5), Decision::Open);
        assert_eq!(Tally::of(&replies("gggg?")).decide(5), Decision::Open);
        assert_eq!(Tally::of(&replies("ggggt")).decide(5), Decision::Lost);
        assert_eq!(Tally::of(&replies("t????")).decide(5), Decision::Lost);
        assert_eq!(Tally::of(&replies("?????")).decide(1), Decision::Open);
        assert_eq!(Tally::of(&replies("e???g")).decide(1), Decision::Won);
    }

    #[test]
    fn every_subset_of_five_under_each_policy() {
        // Bit i set: node i is taken by someone else. Grants on the others.
        for required in 1..=5usize {
            for mask in 0u32..32 {
                let spec: String = (0..5)
                    .map(|i| if mask & (1 << i) != 0 { 't' } else { 'g' })
                    .collect();
                let free = 5 - mask.count_ones() as usize;
                let want = if free >= required {
                    Decision::Won
                } else {
                    Decision::Lost
                };
                assert_eq!(Tally::of(&replies(&spec)).decide(required), want, "{spec}");
            }
        }
    }

    /// Every policy for `n` nodes, as the nodes it requires.
    fn policies(n: usize) -> Vec<usize> {
        let mut all = vec![Quorum::Majority, Quorum::All];
        all.extend((1..=n).map(Quorum::AtLeast));
        all.into_iter()
            .map(|q| q.required(n).expect("a valid policy"))
            .collect()
    }

    /// The answers for `mask` (bit i set: node i renewed); `other` elsewhere.
    fn subset(n: usize, mask: u32, other: Option<Renewed>) -> Vec<Option<Renewed>> {
        (0..n)
            .map(|i| {
                if mask & (1 << i) != 0 {
                    Some(Renewed::Extended)
                } else {
                    other
                }
            })
            .collect()
    }

    /// A hold valid for 500 ms more, renewed for 1 s, next tick in 100 ms.
    fn times(now: Instant) -> Times {
        Times {
            valid_until: now + 500 * MS,
            lapsed: false,
            validity: Some(now + 1_000 * MS),
            next_tick: now + 100 * MS,
        }
    }

    #[test]
    fn every_subset_renewed_the_rest_empty() {
        let now = Instant::now();
        let t = times(now);
        for n in 1..=5usize {
            for required in policies(n) {
                for mask in 0u32..1 << n {
                    let tally = RenewalTally::of(subset(n, mask, Some(Renewed::Missing)));
                    let renewed = mask.count_ones() as usize;
                    let empty: Vec<usize> = (0..n).filter(|i| mask & (1 << i) == 0).collect();
                    assert_eq!((tally.renewed, tally.absent), (renewed, n - renewed));
                    assert_eq!(tally.empty().collect::<Vec<_>>(), empty);
                    let held: Vec<_> = (0..n).map(|i| Some(mask & (1 << i) != 0)).collect();
                    assert_eq!(tally.held().collect::<Vec<_>>(), held);
                    // Every node answered: the renewed ones are the quorum
                    // or nothing can be.
                    let want = if renewed >= required {
                        Verdict::Renewed(now + 1_000 * MS)
                    } else {
                        Verdict::Lost(Loss::Unconfirmable)
                    };
                    assert_eq!(tally.verdict(required, &t), want, "n={n} {mask:b}");
                    assert_eq!(tally.confirmable(required), renewed >= required);
                }
            }
        }
    }

    /// A node that did not answer, and one whose batch part carrying the
    /// hold failed (`Renewed::Failed`: a cluster member's shard), count
    /// alike: no vote either way.
    #[test]
    fn every_subset_renewed_the_rest_silent() {
        let now = Instant::now();
        let (t, late) = (
            times(now),
            Times {
                next_tick: now + 500 * MS,
                ..times(now)
            },
        );
        for n in 1..=5usize {
            for required in policies(n) {
                for mask in 0u32..1 << n {
                    let tally = RenewalTally::of(subset(n, mask, None));
                    let failed = RenewalTally::of(subset(n, mask, Some(Renewed::Failed)));
                    assert_eq!(failed, tally, "a failed part of a batch is silence");
                    let renewed = mask.count_ones() as usize;
                    assert_eq!((tally.renewed, tally.absent), (renewed, 0));
                    assert_eq!(tally.empty().count(), 0, "a silent node is not repaired");
                    let held = (0..n).map(|i| (mask & (1 << i) != 0).then_some(true));
                    assert!(tally.held().eq(held));
                    assert!(tally.confirmable(required), "silence takes no vote away");
                    let (now_, then) = if renewed >= required {
                        let r = Verdict::Renewed(now + 1_000 * MS);
                        (r, r)
                    } else {
                        (Verdict::Retry, Verdict::Lost(Loss::OutOfTime))
                    };
                    assert_eq!(tally.verdict(required, &t), now_, "n={n} {mask:b}");
                    assert_eq!(tally.verdict(required, &late), then, "n={n} {mask:b}");
                }
            }
        }
    }

    /// The brute-force definition of "a quorum can still confirm it": some
    /// `required` nodes, none of which answered that the key is not ours
    /// (`absent`, bit i for node i).
    fn some_quorum_without(n: usize, absent: u32, required: usize) -> bool {
        (0u32..1 << n).any(|q| q.count_ones() as usize >= required && q & absent == 0)
    }

    /// The "can a quorum still confirm it" rule over every subset of
    /// answers for N = 1..=5 and each policy, against its brute-force
    /// definition: the rule itself (each node holding, absent or silent),
    /// a renewal's tally (each node giving every renewal answer) and a
    /// re-entry's (every acquire answer).
    #[test]
    fn a_quorum_can_confirm_it_exactly_when_some_quorum_is_not_absent() {
        for n in 1..=5usize {
            for required in policies(n) {
                // The rule: 0 holds, 1 absent, 2 silent, per node.
                for code in 0..3usize.pow(n as u32) {
                    let of = |i: usize| code / 3usize.pow(i as u32) % 3;
                    let absent = (0..n).filter(|&i| of(i) == 1).fold(0u32, |m, i| m | 1 << i);
                    let count = absent.count_ones() as usize;
                    assert_eq!(
                        confirmable(n, count, required),
                        some_quorum_without(n, absent, required),
                        "n={n} required={required} code={code}"
                    );
                }
                // A renewal's answers: absent when missing, another
                // owner's or of another type.
                const RENEWED: [Option<Renewed>; 7] = [
                    Some(Renewed::Extended),
                    Some(Renewed::Repaired),
                    Some(Renewed::Missing),
                    Some(Renewed::Conflict),
                    Some(Renewed::WrongType),
                    Some(Renewed::Failed),
                    None,
                ];
                for code in 0..7usize.pow(n as u32) {
                    let answers: Vec<_> = (0..n)
                        .map(|i| RENEWED[code / 7usize.pow(i as u32) % 7])
                        .collect();
                    let absent = (0..n)
                        .filter(|&i| {
                            matches!(
                                answers[i],
                                Some(Renewed::Missing | Renewed::Conflict | Renewed::WrongType)
                            )
                        })
                        .fold(0u32, |m, i| m | 1 << i);
                    assert_eq!(
                        RenewalTally::of(answers.iter().copied()).confirmable(required),
                        some_quorum_without(n, absent, required),
                        "{answers:?} required {required}"
                    );
                }
                // A re-entry's answers: absent when taken, missing or of
                // another type.
                let grant = |k: usize| -> Option<Result<Grant, NodeError>> {
                    match k {
                        0 => Some(Ok(Grant::Granted(1))),
                        1 => Some(Ok(Grant::Taken(None, 0))),
                        2 => Some(Ok(Grant::Missing)),
                        3 => Some(Err(NodeError::new(NodeErrorKind::WrongType, "WRONGTYPE"))),
                        4 => Some(Err(NodeError::timeout())),
                        _ => None,
                    }
                };
                for code in 0..6usize.pow(n as u32) {
                    let kinds: Vec<usize> =
                        (0..n).map(|i| code / 6usize.pow(i as u32) % 6).collect();
                    let replies: Vec<_> = kinds.iter().map(|&k| grant(k)).collect();
                    let absent = (0..n)
                        .filter(|&i| (1..=3).contains(&kinds[i]))
                        .fold(0u32, |m, i| m | 1 << i);
                    assert_eq!(
                        Tally::of(&replies).confirmable(required),
                        some_quorum_without(n, absent, required),
                        "{kinds:?} required {required}"
                    );
                }
            }
        }
    }

    /// Every answer of every node to a release, for N = 1..=5 and every
    /// policy: the counts, and the verdict by its definition.
    #[test]
    fn every_release_answer_of_every_node() {
        // Index 4: an error; 5: no answer yet.
        const ANSWERS: [Option<Released>; 4] = [
            Some(Released::Deleted),
            Some(Released::Lowered),
            Some(Released::Missing),
            Some(Released::OtherOwner),
        ];
        let answer = |k: usize| -> Option<Result<Released, NodeError>> {
            match k {
                4 => Some(Err(NodeError::timeout())),
                5 => None,
                _ => ANSWERS[k].map(Ok),
            }
        };
        let failure = |i: usize, e: &NodeError| e.clone().at(i, "node");
        for n in 1..=5u32 {
            for code in 0..6usize.pow(n) {
                let kinds: Vec<usize> = (0..n).map(|i| code / 6usize.pow(i) % 6).collect();
                let replies: Vec<_> = kinds.iter().map(|&k| answer(k)).collect();
                let count = |f: fn(usize) -> bool| kinds.iter().filter(|&&k| f(k)).count();
                let released = count(|k| k <= 1);
                let other = count(|k| k == 3);
                let failed = count(|k| k == 4);
                let pending = count(|k| k == 5);
                let t = ReleaseTally::of(&replies, failure);
                assert_eq!(
                    (t.released, t.other, t.failures.len(), t.pending),
                    (released, other, failed, pending)
                );
                for required in policies(n as usize) {
                    let got = ReleaseTally::of(&replies, failure).verdict("a", required);
                    match got {
                        Ok(()) => assert!(released >= required, "{kinds:?} {required}"),
                        Err(Error::Unavailable { .. }) => {
                            assert!(released < required && released + failed + pending >= required);
                        }
                        Err(Error::NotHeld { .. }) => {
                            assert!(released + failed + pending < required);
                            assert!(other > 0 && released == 0);
                        }
                        Err(Error::Expired { .. }) => {
                            assert!(released + failed + pending < required);
                            assert!(other == 0 || released > 0);
                        }
                        Err(e) => panic!("{kinds:?} {required}: {e}"),
                    }
                }
            }
        }
    }

    #[test]
    fn every_answer_of_every_node() {
        const ANSWERS: [Option<Renewed>; 6] = [
            Some(Renewed::Extended),
            Some(Renewed::Repaired),
            Some(Renewed::Missing),
            Some(Renewed::Conflict),
            Some(Renewed::WrongType),
            None,
        ];
        let now = Instant::now();
        let base = times(now);
        let cases = [
            base,
            Times {
                lapsed: true,
                ..base
            },
            Times {
                validity: None,
                ..base
            },
            Times {
                next_tick: base.valid_until,
                ..base
            },
            // A renewal never shortens the validity.
            Times {
                validity: Some(now + 200 * MS),
                ..base
            },
        ];
        for n in 1..=5u32 {
            for code in 0..6usize.pow(n) {
                let answers: Vec<_> = (0..n).map(|i| ANSWERS[code / 6usize.pow(i) % 6]).collect();
                let tally = RenewalTally::of(answers.iter().copied());
                let count =
                    |f: fn(&Option<Renewed>) -> bool| answers.iter().filter(|a| f(a)).count();
                let renewed = count(|a| matches!(a, Some(Renewed::Extended | Renewed::Repaired)));
                let silent = count(Option::is_none);
                let missing = count(|a| *a == Some(Renewed::Missing));
                assert_eq!(tally.renewed, renewed);
                assert_eq!(tally.absent, n as usize - renewed - silent);
                assert_eq!(tally.empty().count(), missing);
                assert_eq!(tally.answers(), &answers[..]);
                for required in policies(n as usize) {
                    for t in &cases {
                        let got = tally.verdict(required, t);
                        let want = match t.validity {
                            _ if t.lapsed => Verdict::Lost(Loss::Lapsed),
                            Some(v) if renewed >= required => {
                                Verdict::Renewed(v.max(t.valid_until))
                            }
                            _ if renewed + silent < required => Verdict::Lost(Loss::Unconfirmable),
                            _ if t.valid_until <= t.next_tick => Verdict::Lost(Loss::OutOfTime),
                            _ => Verdict::Retry,
                        };
                        assert_eq!(got, want, "{answers:?} required {required} {t:?}");
                    }
                }
            }
        }
    }
}
