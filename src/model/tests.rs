//! The bounded runs: every property holds on the protocol's worlds, and
//! each mutation (and each unsafe case the README names) is caught by the
//! property it breaks, its counterexample printed.
//!
//! `QUORUMLOCK_MODEL_DEEP=1` widens the worlds that must keep every
//! property (more attempts, a longer horizon, more faults) for the deeper
//! run docs/MODEL.md reports.

use std::collections::BTreeSet;
use std::time::Instant;

use stateright::{Checker, HasDiscoveries, Model};

use super::trace;
use super::world::{Design, Mutation, Params, Restart};

/// Whether the deeper run is asked for.
pub(super) fn deep() -> bool {
    std::env::var_os("QUORUMLOCK_MODEL_DEEP").is_some()
}

/// Two lock clients of one attempt each on 3 nodes, one name, a lease of
/// 3 ticks (drift 1), a node's clock up to the allowance ahead.
fn two_clients() -> Params {
    let mut p = Params::lock(2);
    p.lead = 1;
    p.horizon = 3;
    if deep() {
        p.renew = true;
    }
    p
}

/// One lock client of two attempts with every fault: a lost message, a
/// restart with data, a node's clock ahead, renewals and repairs.
fn one_client_faults() -> Params {
    let mut p = Params::lock(1);
    p.attempts = 2;
    p.lead = 1;
    p.losses = 1;
    p.restarts = 1;
    p.renew = true;
    p.horizon = 5;

    p
}

/// The checker's depth bound that checks every state reached in at most
/// `steps` steps: the initial state is at depth 1, and states at the
/// bound are neither checked nor expanded.
pub(super) fn bound(steps: usize) -> usize {
    steps + 2
}

/// Checks `p` breadth first, every state reached in at most `steps` steps
/// (`deeper` in the deeper run: `None`, every state); every property
/// holds.
pub(super) fn holds(what: &str, p: Params, steps: usize, deeper: Option<usize>) {
    holds_but(what, p, steps, deeper, &[]);
}

/// [`holds`], but the properties `but` may fail (a finding shown by its
/// own test).
pub(super) fn holds_but(what: &str, p: Params, steps: usize, deeper: Option<usize>, but: &[&str]) {
    let started = Instant::now();
    let b = p.checker();
    let b = match (deep(), deeper) {
        (false, _) => b.target_max_depth(bound(steps)),
        (true, Some(d)) => b.target_max_depth(bound(d)),
        (true, None) => b,
    };
    let c = b.spawn_bfs().join();
    println!(
        "{what}: {} states ({} unique), {} steps deep, {:?}",
        c.state_count(),
        c.unique_state_count(),
        c.max_depth().saturating_sub(1).min(match (deep(), deeper) {
            (true, None) => usize::MAX,
            (true, Some(d)) => d,
            (false, _) => steps,
        }),
        started.elapsed()
    );
    for (name, path) in c.discoveries() {
        assert!(
            but.contains(&name),
            "{what}: \"{name}\" fails:\n{}",
            trace::show(&path)
        );
    }
}

/// Checks `p` breadth first until `property` fails; prints the
/// counterexample (the shortest) and returns its length in steps. In the
/// deeper run, also checks the same world made safe ([`control`]).
pub(super) fn finds(what: &str, p: Params, property: &'static str) -> usize {
    let steps = found(what, p.clone(), property);
    if deep() {
        control(what, p, steps);
    }
    steps
}

/// [`finds`] with no control: `p` is the protocol as it is (a finding).
pub(super) fn found(what: &str, p: Params, property: &'static str) -> usize {
    let started = Instant::now();
    let c = p
        .checker()
        .finish_when(HasDiscoveries::AnyOf(BTreeSet::from([property])))
        .spawn_bfs()
        .join();
    let path = c
        .discovery(property)
        .unwrap_or_else(|| panic!("{what}: \"{property}\" should fail"));
    let steps = path.clone().into_actions().len();
    println!(
        "{what}: \"{property}\" fails in {steps} steps ({} states, {:?}):\n{}",
        c.unique_state_count(),
        started.elapsed(),
        trace::show(&path)
    );
    steps
}

/// The same world made safe (no mutation, restarts with data, clocks
/// within the allowance, a semaphore of slot locks, the real quorums)
/// keeps every property in every state reached in as many steps as the
/// counterexample took.
fn control(what: &str, mut p: Params, steps: usize) {
    p.mutation = None;
    p.restart = Restart::WithData;
    p.lead = p.lead.min(1);
    if p.design == Design::Counter {
        p.design = Design::Locks;
        p.names = u8::try_from(p.permits.unwrap_or(1)).expect("a few permits");
    }
    p.quorums();
    let c = p
        .checker()
        .target_max_depth(bound(steps))
        .spawn_bfs()
        .join();
    println!(
        "{what}, made safe: {} states ({} unique) to depth {steps}",
        c.state_count(),
        c.unique_state_count()
    );
    for (name, path) in c.discoveries() {
        assert!(
            name == FINDING,
            "{what}, made safe: \"{name}\" fails:\n{}",
            trace::show(&path)
        );
    }
}

/// The property the unmutated protocol breaks (docs/MODEL.md, the
/// finding): a repair racing a `force_unlock` re-creates a deleted key on
/// a minority.
pub(super) const FINDING: &str = "no key a forced unlock deleted comes back on its node";

#[test]
fn two_lock_clients_keep_every_property() {
    holds("lock, two clients", two_clients(), 9, Some(12));
}

#[test]
fn one_lock_client_keeps_every_property_under_faults() {
    holds("lock, one client, faults", one_client_faults(), 8, Some(11));
}

#[test]
fn a_quorum_of_half_the_nodes_breaks_mutual_exclusion() {
    let p = Params::lock(2).with(Mutation::HalfQuorum);
    finds("quorum N/2", p, "mutual exclusion");
}

#[test]
fn no_drift_subtracted_breaks_mutual_exclusion() {
    let mut p = Params::lock(2).with(Mutation::NoDrift);
    p.lease = 2;
    p.lead = 1;
    finds("no drift", p, "mutual exclusion");
}

#[test]
fn a_one_try_fence_raise_breaks_fencing() {
    let mut p = Params::lock(2).with(Mutation::OneTryFence);
    p.lease = 2;
    p.losses = 1;
    // Counters apart, as an attempt rolled back after a grant on node 0
    // leaves them.
    p.counters = vec![2, 1, 1];
    finds("one-try fence", p, "fencing tokens increase");
}

#[test]
fn an_acquire_sent_again_after_a_lost_reply_outlives_its_release() {
    let mut p = Params::lock(1).with(Mutation::ResendAcquire);
    p.losses = 1;
    finds(
        "acquire re-sent",
        p,
        "no grant after its release was acknowledged",
    );
}

#[test]
fn an_empty_restart_at_once_lets_two_clients_hold() {
    let mut p = Params::lock(2);
    p.restarts = 2;
    p.restart = Restart::EmptyAtOnce;
    finds("restart without fsync", p, "mutual exclusion");
}

#[test]
fn a_clock_jump_past_the_allowance_lets_two_clients_hold() {
    let mut p = Params::lock(2);
    p.lease = 2;
    p.lead = 2;
    finds("clock jump", p, "mutual exclusion");
}

/// The semaphore's two designs, 2 permits, 3 nodes, 3 clients.
fn semaphore(design: Design) -> Params {
    let mut p = Params::lock(3);
    p.permits = Some(2);
    p.design = design;
    p.horizon = 0;
    p.release = false;
    p.names = match design {
        Design::Locks => 2,
        Design::Counter => 1,
    };
    p.quorums();
    p
}

#[test]
fn a_semaphore_of_slot_locks_never_exceeds_its_permits() {
    holds(
        "semaphore, slot locks",
        semaphore(Design::Locks),
        8,
        Some(11),
    );
}

#[test]
fn a_counter_semaphore_exceeds_its_permits() {
    finds(
        "semaphore, counter",
        semaphore(Design::Counter),
        "at most P permits",
    );
}

/// A read-write lock: a reader and a writer, 3 nodes, the quorums of
/// `Keys::required` (`q_w` a majority, `q_r = N - q_w + 1`).
fn read_write() -> Params {
    let mut p = Params::lock(2);
    p.readers = vec![true, false];
    p.lead = 1;
    p.horizon = 3;
    p.quorums();
    p
}

#[test]
fn a_reader_never_holds_beside_a_writer() {
    holds("read-write", read_write(), 8, None);
}

#[test]
fn a_reader_quorum_of_one_holds_beside_a_writer() {
    let mut p = read_write();
    {
        // The simulator's switch, read by the real `Keys::required`.
        let _one =
            crate::hooks::mutation::enable(crate::hooks::mutation::Mutation::ReaderQuorumOne);
        p.quorums();
    }
    assert_eq!(p.reader_required, 1);
    finds("reader quorum 1", p, "no reader beside a writer");
}

/// One lock client that renews and repairs, and one `force_unlock`,
/// asked at any time (`quiet`: only while nothing is in flight; `atomic`:
/// its deletes landing on every node in one step).
fn forced(quiet: bool, atomic: bool) -> Params {
    let mut p = Params::lock(1);
    p.renew = true;
    p.forces = 1;
    p.force_quiet = quiet;
    p.force_atomic = atomic;
    p.horizon = 4;
    p
}

#[test]
fn a_forced_unlock_that_lands_at_once_in_a_quiet_moment_is_not_undone() {
    holds("force_unlock, quiet, at once", forced(true, true), 60, None);
}

#[test]
fn a_repair_without_a_confirming_quorum_undoes_a_forced_unlock() {
    let p = forced(true, true).with(Mutation::RepairUnconfirmed);
    finds("repair unconfirmed", p, "a forced unlock is not undone");
}

/// [`forced`] for a finding, smaller: two ticks, every answer in time
/// (its behaviours are some of the larger world's).
fn race(quiet: bool) -> Params {
    let mut p = forced(quiet, false);
    p.horizon = 2;
    p.timeouts = false;
    p
}

#[test]
fn a_repair_racing_a_forced_unlock_recreates_its_key_on_a_minority() {
    found("repair racing force_unlock", race(false), FINDING);
}

#[test]
fn a_late_grant_and_a_repair_undo_a_forced_unlock() {
    found(
        "late grant and repair",
        race(false),
        "a forced unlock is not undone",
    );
}

#[test]
fn repairs_between_the_deletes_of_a_forced_unlock_undo_it() {
    found(
        "repairs between the deletes",
        race(true),
        "a forced unlock is not undone",
    );
}

/// A lone lock client of two attempts (`clients` 1), or two of one
/// attempt each, with no faults, every answer in time, and pauses only
/// before the horizon (`horizon` ticks, a lease of 3: a pause of 2 ticks
/// fails an attempt): explored completely, every path ends.
fn live(clients: usize, horizon: u8) -> Params {
    let mut p = Params::lock(clients);
    p.attempts = if clients == 1 { 2 } else { 1 };
    p.horizon = horizon;
    p.skewed = 0;
    p.timeouts = false;
    p.live = true;
    p
}

/// Explores `p` completely: every property holds, the liveness one on
/// every path that ends.
fn live_holds(what: &str, p: Params) {
    let started = Instant::now();
    let c = p.checker().spawn_bfs().join();
    println!(
        "{what}: {} states ({} unique), the deepest {} steps, {:?}",
        c.state_count(),
        c.unique_state_count(),
        c.max_depth().saturating_sub(1),
        started.elapsed()
    );
    c.assert_properties();
}

#[test]
fn a_lone_waiter_eventually_holds() {
    live_holds("liveness, one waiter", live(1, 2));
}

#[test]
fn one_of_two_contenders_eventually_holds() {
    live_holds("liveness, two contenders", live(2, 1));
}

#[test]
fn a_failed_attempt_that_leaves_its_grants_keeps_the_waiter_out() {
    let p = live(1, 2).with(Mutation::NoRollback);
    finds("no rollback", p, "a waiter holds");
}
