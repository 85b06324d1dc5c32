//! The election's bounded runs: leaderships never overlap, terms
//! increase, the observer (the real `quorum::agree`) never goes back; and
//! each property caught by a mutation, its counterexample printed.

use super::tests::{deep, finds, holds};
use super::world::{Mutation, Params};

/// Two candidates of one attempt each on 3 nodes, a lease of 3 ticks, a
/// node's clock up to the allowance ahead, and an observer of `reads`
/// quorum reads.
fn election(reads: u8) -> Params {
    let mut p = Params::lock(2);
    p.election = true;
    p.reads = reads;
    p.lead = 1;
    p.horizon = 3;
    p
}

#[test]
fn two_candidates_never_lead_at_once_and_their_terms_increase() {
    let mut p = election(0);
    if !deep() {
        p.lead = 0;
    }
    holds("election, two candidates", p, 8, Some(10));
}

/// Every state of the world in which two candidates take turns without
/// time passing (they resign), answers in time.
#[test]
fn candidates_that_resign_keep_every_property_completely() {
    holds("election, two candidates resigning", quick(0), 60, None);
}

/// Every state of one candidate of two attempts (two terms) without time
/// passing, and an observer of two reads.
#[test]
fn an_observer_never_goes_back() {
    holds("election, two terms, observed", resigning(2), 20, None);
}

/// The same candidates, for a mutation: no clock ahead, answers in
/// time, and (`horizon` 0) no time passing, the leaders resigning.
fn quick(horizon: u8) -> Params {
    let mut p = election(0);
    p.lead = 0;
    p.timeouts = false;
    p.horizon = horizon;
    p.release = horizon == 0;
    p
}

#[test]
fn a_leader_that_ignores_its_expiry_overlaps_the_next() {
    let mut p = quick(2).with(Mutation::LeaderIgnoresExpiry);
    p.lease = 2;
    finds("leader ignores expiry", p, "one leader at a time");
}

#[test]
fn a_term_not_taken_from_the_token_does_not_increase() {
    let p = quick(0).with(Mutation::TermIsRevision);
    finds("term from the revision", p, "terms increase");
}

/// One candidate of two attempts that resigns, an observer of `reads`
/// reads.
fn resigning(reads: u8) -> Params {
    let mut p = quick(0);
    p.readers = vec![false];
    p.attempts = 2;
    p.reads = reads;
    // An earlier history: node 2's counter ahead, so that the second
    // term is shown on a quorum without a raise.
    p.counters = vec![0, 0, 1];
    p
}

#[test]
fn an_observer_that_trusts_one_node_reports_a_deposed_leader() {
    let p = resigning(1).with(Mutation::ObserverQuorumOne);
    finds(
        "observer quorum 1",
        p,
        "the observer never reports a term older than a leader made before its read",
    );
}

#[test]
fn an_observer_that_trusts_one_node_goes_back() {
    let p = resigning(2).with(Mutation::ObserverQuorumOne);
    finds(
        "observer quorum 1, two reads",
        p,
        "the observer never reports an older term than before",
    );
}
