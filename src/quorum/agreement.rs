//! Pure: what a quorum read of an election's leader says
//! ([`agree`]): a leader only where a quorum of members report the
//! same record, each with the record's holder holding the election's
//! lock; no leader where no quorum could confirm one; undecided between.

use crate::node::{Record, Seen};

/// What one quorum read of an election says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Agreement {
    /// At least a quorum of members report this record, its holder holding
    /// the lock (the latest such record, by term then revision).
    Leader(Record),
    /// A quorum answered, and no leadership (holder, term) is reported by
    /// enough members to make a quorum even with every member that did not
    /// answer: nobody leads now (resigned, expired, not yet proclaimed).
    Vacant,
    /// A leadership that a quorum may confirm, but no one record a quorum
    /// agrees on (a proclaim half done, or members that did not answer).
    Undecided,
    /// Fewer than a quorum of members answered.
    Unavailable,
}

/// Reads the answers of a read of an election's leader, one per member
/// (`None`: failed or not answered), against a quorum of `required`.
///
/// A record is reported only when `required` members report it exactly
/// (holder, term, revision, value): a campaign rolled back after writing
/// a record on a minority, or a proclaim that reached a minority, is never
/// a leader.
pub(crate) fn agree(answers: &[Option<&Seen>], required: usize) -> Agreement {
    let records: Vec<&Record> = answers
        .iter()
        .filter_map(|a| match a {
            Some(Seen::Leads(r, _)) => Some(r),
            _ => None,
        })
        .collect();
    let agreed = records
        .iter()
        .filter(|r| records.iter().filter(|o| o == r).count() >= required)
        .max_by_key(|r| (r.term, r.rev));
    if let Some(r) = agreed {
        return Agreement::Leader((*r).clone());
    }
    let answered = answers.iter().filter(|a| a.is_some()).count();
    if answered < required {
        return Agreement::Unavailable;
    }
    let missing = answers.len() - answered;
    let support = |r: &Record| {
        records
            .iter()
            .filter(|o| o.holder == r.holder && o.term == r.term)
            .count()
    };
    if records.iter().any(|r| support(r) + missing >= required) {
        Agreement::Undecided
    } else {
        Agreement::Vacant
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    fn record(holder: &str, term: u64, rev: u64, value: &str) -> Record {
        Record {
            holder: holder.into(),
            term,
            rev,
            value: value.into(),
        }
    }

    /// The answers a member may give: none, vacant, held without a record,
    /// and records of two leaderships, one of them in two revisions.
    fn alphabet() -> Vec<Option<Seen>> {
        let pttl = Some(Duration::from_secs(1));
        vec![
            None,
            Some(Seen::Vacant),
            Some(Seen::Unproclaimed(pttl)),
            Some(Seen::Leads(record("a", 5, 1, "x"), pttl)),
            Some(Seen::Leads(record("a", 5, 2, "y"), pttl)),
            Some(Seen::Leads(record("b", 7, 1, "z"), pttl)),
        ]
    }

    /// Every subset of `n` members, as bit masks.
    fn subsets(n: usize) -> impl Iterator<Item = Vec<usize>> {
        (0u32..1 << n).map(move |m| (0..n).filter(|i| m & (1 << i) != 0).collect())
    }

    fn leads(a: &Option<Seen>) -> Option<&Record> {
        match a {
            Some(Seen::Leads(r, _)) => Some(r),
            _ => None,
        }
    }

    /// The definition, by brute force: a record is agreed when some set of
    /// `required` members all report it; "undecided" when some way the
    /// silent members could answer would give one leadership a quorum.
    fn brute(answers: &[Option<Seen>], required: usize) -> Agreement {
        let n = answers.len();
        let mut best: Option<&Record> = None;
        for s in subsets(n).filter(|s| s.len() == required) {
            let first = leads(&answers[s[0]]);
            if let Some(r) = first {
                if s.iter().all(|&i| leads(&answers[i]) == Some(r))
                    && best.is_none_or(|b| (r.term, r.rev) > (b.term, b.rev))
                {
                    best = Some(r);
                }
            }
        }
        if let Some(r) = best {
            return Agreement::Leader(r.clone());
        }
        if answers.iter().filter(|a| a.is_some()).count() < required {
            return Agreement::Unavailable;
        }
        // Fill every silent member with each leadership seen.
        let seen: Vec<(Arc<str>, u64)> = answers
            .iter()
            .filter_map(leads)
            .map(|r| (Arc::clone(&r.holder), r.term))
            .collect();
        let possible = seen.iter().any(|(h, t)| {
            let count = answers
                .iter()
                .filter(|a| match a {
                    None => true,
                    Some(Seen::Leads(r, _)) => r.holder == *h && r.term == *t,
                    Some(_) => false,
                })
                .count();
            count >= required
        });
        if possible {
            Agreement::Undecided
        } else {
            Agreement::Vacant
        }
    }

    /// Every assignment of answers to N = 1..=5 members, for every quorum
    /// a manager accepts (any k of N, exclusive or not), against the
    /// definition.
    #[test]
    fn the_rule_matches_its_definition_over_every_set_of_answers() {
        let alphabet = alphabet();
        let k = alphabet.len();
        let mut cases = 0;
        for n in 1..=5usize {
            for required in 1..=n {
                for code in 0..k.pow(u32::try_from(n).unwrap()) {
                    let answers: Vec<Option<Seen>> = (0..n)
                        .map(|i| alphabet[code / k.pow(u32::try_from(i).unwrap()) % k].clone())
                        .collect();
                    let refs: Vec<Option<&Seen>> = answers.iter().map(Option::as_ref).collect();
                    assert_eq!(
                        agree(&refs, required),
                        brute(&answers, required),
                        "{answers:?} of {n}, quorum {required}"
                    );
                    cases += 1;
                }
            }
        }
        assert!(cases > 10_000, "{cases}");
    }

    /// The cases the election's promises rest on, spelled out.
    #[test]
    fn a_minority_record_is_never_a_leader() {
        let pttl = Some(Duration::from_secs(1));
        let old = Seen::Leads(record("a", 5, 1, "x"), pttl);
        let rolled_back = Seen::Leads(record("b", 9, 1, "z"), pttl);
        let a = [Some(&old), Some(&old), Some(&rolled_back)];
        assert_eq!(agree(&a, 2), Agreement::Leader(record("a", 5, 1, "x")));
        let vacant = Seen::Vacant;
        let b = [Some(&vacant), Some(&vacant), Some(&rolled_back)];
        assert_eq!(agree(&b, 2), Agreement::Vacant);
        let c = [Some(&vacant), None, Some(&rolled_back)];
        assert_eq!(agree(&c, 2), Agreement::Undecided);
        let d = [None, None, Some(&old)];
        assert_eq!(agree(&d, 2), Agreement::Unavailable);
        let new = Seen::Leads(record("a", 5, 2, "y"), pttl);
        let e = [Some(&old), Some(&new), Some(&vacant)];
        assert_eq!(agree(&e, 2), Agreement::Undecided);
    }
}
