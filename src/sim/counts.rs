//! The checks of the shared holds, part of `checker::check`: which
//! invariants a lock number's overlaps and tokens break (a plain lock's,
//! the election's, a semaphore slot's, the read-write lock's writers'),
//! and the invariants over several locks at once: at most `P` permits of
//! the semaphore valid at once ([`Invariant::Permits`]), and no reader
//! valid beside a writer ([`Invariant::ReaderBesideWriter`]).
//!
//! A hold is valid over its belief intervals, as mutual exclusion sees
//! them: from its acquisition's return to the first of its release or
//! drop, its `lost()`, and its `valid_until()` (a lapsed hold believed
//! valid again opens a new interval).

use std::time::Duration;

use super::checker::{Invariant, ELECTION, READER, SLOT, WRITER};

/// A hold as these checks see it: its number, its lock number, and its
/// belief intervals (`[start, end)`, open ones ending with the run).
pub(crate) type View<'a> = (usize, usize, &'a [(Duration, Option<Duration>)]);

/// What two overlapping holds of `lock`, and a later hold's token not
/// above an earlier one's, break.
pub(crate) fn invariants(lock: usize) -> (Invariant, Invariant) {
    match lock {
        ELECTION => (Invariant::OneLeader, Invariant::Terms),
        WRITER => (Invariant::TwoWriters, Invariant::WriterTokens),
        // One slot is one lock: at most one holder at a time.
        l if l >= SLOT => (Invariant::MutualExclusion, Invariant::PermitTokens),
        _ => (Invariant::MutualExclusion, Invariant::Fencing),
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// The intervals of every hold whose lock `pick` chooses: (start, end,
/// hold).
fn intervals(
    holds: &[View<'_>],
    end: Duration,
    pick: impl Fn(usize) -> bool,
) -> Vec<(Duration, Duration, usize)> {
    holds
        .iter()
        .filter(|(_, lock, _)| pick(*lock))
        .flat_map(|(k, _, iv)| iv.iter().map(move |i| (i.0, i.1.unwrap_or(end), *k)))
        .filter(|(s, e, _)| s < e)
        .collect()
}

/// The violations of the semaphore's count (`permits`, when the run has a
/// semaphore) and of the readers beside the writers.
pub(crate) fn check(
    holds: &[View<'_>],
    end: Duration,
    permits: Option<u32>,
) -> Vec<(Invariant, String)> {
    let mut out = Vec::new();
    if let Some(p) = permits {
        out.extend(too_many(holds, end, p));
    }
    let writers = intervals(holds, end, |l| l == WRITER);
    let readers = intervals(holds, end, |l| l == READER);
    for (rs, re, r) in &readers {
        for (ws, we, w) in &writers {
            if rs < we && ws < re {
                out.push((
                    Invariant::ReaderBesideWriter,
                    format!(
                        "reader hold {r} valid {:.3}..{:.3}ms and writer hold {w} valid {:.3}..{:.3}ms overlap",
                        ms(*rs),
                        ms(*re),
                        ms(*ws),
                        ms(*we)
                    ),
                ));
            }
        }
    }
    out
}

/// The first instant more than `p` permits were valid at once, if any
/// (one violation: the later instants follow from it).
fn too_many(holds: &[View<'_>], end: Duration, p: u32) -> Option<(Invariant, String)> {
    let permits = intervals(holds, end, |l| l >= SLOT);
    // Ends before starts at one instant: a permit released as another is
    // acquired is not beside it.
    let mut edges: Vec<(Duration, bool, usize)> = permits
        .iter()
        .flat_map(|(s, e, k)| [(*s, true, *k), (*e, false, *k)])
        .collect();
    edges.sort_unstable();
    let mut valid: Vec<usize> = Vec::new();
    for (at, starts, k) in edges {
        if !starts {
            if let Some(i) = valid.iter().position(|v| *v == k) {
                valid.swap_remove(i);
            }
            continue;
        }
        valid.push(k);
        if valid.len() > p as usize {
            valid.sort_unstable();
            let slots: Vec<String> = valid
                .iter()
                .filter_map(|v| holds.iter().find(|(h, _, _)| h == v))
                .map(|(h, l, _)| format!("hold {h} (slot {})", l - SLOT))
                .collect();
            return Some((
                Invariant::Permits,
                format!(
                    "{} permits of {p} valid at once at {:.3}ms: {}",
                    valid.len(),
                    ms(at),
                    slots.join(", ")
                ),
            ));
        }
    }
    None
}
