//! The election's observers as the checks see them (part of
//! `checker::check`): what each reported, against the records a quorum of
//! the nodes held ([`Invariant::ObservedOlder`],
//! [`Invariant::ObservedUnheld`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::checker::{ms, Invariant};

/// A leader record as the checks name it: (term, revision, value).
type Rec = (u64, u64, String);

/// What the observers of the election reported, against what the nodes
/// held ([`Invariant::ObservedOlder`], [`Invariant::ObservedUnheld`]).
#[derive(Default)]
pub(crate) struct Observers {
    /// Every record on a quorum of the nodes so far, and when it first was.
    pub(crate) held: std::collections::HashMap<Rec, Duration>,
    /// When nodes restarted empty so far.
    pub(crate) wipes: Vec<Duration>,
    /// The latest record each observer reported (by term and revision).
    latest: BTreeMap<usize, Rec>,
}

impl Observers {
    /// Observer `observer` reports `rec` at `at`.
    ///
    /// An older record than one reported before is excused when a node
    /// restarted empty between the instants the two were first on a
    /// quorum, the later one after: the fence counters may have been lost
    /// and the terms started over, as [`Invariant::Terms`] excuses (the
    /// observer then goes on from it).
    pub(crate) fn check(
        &mut self,
        observer: usize,
        via: &str,
        rec: Rec,
        at: Duration,
    ) -> Vec<(Invariant, String)> {
        let mut out = Vec::new();
        let (term, rev, value) = &rec;
        let held = self.held.get(&rec).copied();
        if held.is_none() {
            out.push((
                Invariant::ObservedUnheld,
                format!(
                    "observer {observer} ({via}) at {:.3}ms reported term {term} revision {rev} {value:?}, which no quorum of the nodes held",
                    ms(at)
                ),
            ));
        }
        let Some(before) = self.latest.get(&observer) else {
            self.latest.insert(observer, rec);
            return out;
        };
        if (rec.0, rec.1) >= (before.0, before.1) {
            self.latest.insert(observer, rec);
            return out;
        }
        let restarted = match (self.held.get(before), held) {
            (Some(b), Some(h)) => self.wipes.iter().any(|w| *b <= *w && *w <= h),
            _ => false,
        };
        if restarted {
            self.latest.insert(observer, rec);
            return out;
        }
        out.push((
            Invariant::ObservedOlder,
            format!(
                "observer {observer} ({via}) at {:.3}ms reported term {term} revision {rev} after term {} revision {}",
                ms(at),
                before.0,
                before.1
            ),
        ));
        out
    }
}
