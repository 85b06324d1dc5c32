//! Unit tests of the verdicts: each rule over every subset of answers.
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
                let kinds: Vec<usize> = (0..n).map(|i| code / 6usize.pow(i as u32) % 6).collect();
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
            let count = |f: fn(&Option<Renewed>) -> bool| answers.iter().filter(|a| f(a)).count();
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
                        Some(v) if renewed >= required => Verdict::Renewed(v.max(t.valid_until)),
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
