//! The fence rule: a fencing token is handed out only once a quorum of
//! nodes has a fence counter at least as large, so that every later
//! quorum's grant draws a larger one.

use std::time::Duration;

use tokio::time::Instant;
use tracing::debug;

use crate::clock;
use crate::error::{NodeError, NodeFailure};
use crate::keys::Target;
use crate::members::Members;
use crate::node::Grant;
use crate::quorum::{self, FenceTally, Leg};

/// Hands out `token` (of one lock, or of a set, whose names share one
/// counter per node) only once a quorum of nodes is known to have a fence
/// counter of at least `token`: the granting nodes that returned it, plus
/// lagging nodes raised to it now. Every later quorum then overlaps that
/// set in a node whose next INCR is above `token`. Returns the failures
/// when no quorum could be shown within the lease's validity.
///
/// The rule holds per counter (one per hash slot): a node's grant of a set
/// leaves every counter of the set's slots at its token, and a raise raises
/// them all, so the token is shown for every name of the target.
pub(crate) async fn fence_quorum(
    nodes: &Members,
    target: &Target,
    replies: &[Option<Result<Grant, NodeError>>],
    token: u64,
    start: Instant,
    lease: Duration,
) -> Result<(), Vec<NodeFailure>> {
    let required = nodes.required_for(target.first());
    // Shown by the grants alone (the common case): no tally to keep.
    if FenceTally::shown_by(replies, token, required) {
        return Ok(());
    }
    let mut at = FenceTally::of(replies, token);
    #[cfg(test)]
    if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::SingleTryFence) {
        let below = |i: usize| matches!(replies[i], Some(Ok(Grant::Granted(t))) if t < token);
        nodes
            .metrics
            .fence_raised((0..nodes.len()).filter(|i| below(*i)).count());
        let mut fan = nodes.fan_out(lease, |i| {
            if below(i) {
                Leg::Call(nodes.node(i).raise_fence(&target.keys, token))
            } else {
                Leg::Known(Ok(0))
            }
        });
        nodes.spawn(async move { fan.until(|_| false).await });
        return Ok(());
    }
    // First the nodes that granted below the token, or have not answered
    // yet (their grant lands late and will hold the lock too): once raised
    // they make a quorum with the nodes at the token. The nodes that
    // answered "taken" or failed are asked only when that fails, or has not
    // succeeded within half the time: under contention that spares a raise
    // per node that holds nothing of ours, and both rounds stay within the
    // one timeout a single round had.
    // The raise spends what is left of the attempt's own node timeout, so an
    // attempt (acquire and raise) never takes longer than one node timeout
    // and a failed one, rolled back, ends within two.
    let elapsed = clock::now().saturating_duration_since(start);
    let valid_for = quorum::validity(lease, elapsed, nodes.drift(lease)).unwrap_or_default();
    let timeout = nodes
        .call_timeout(lease)
        .saturating_sub(elapsed)
        .min(valid_for);
    let deadline = quorum::deadline_after(Instant::now(), timeout);
    let mut failures = Vec::new();
    for first_round in [true, false] {
        let targets = at.targets(replies, first_round);
        if !targets.contains(&true) {
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let round = if first_round { left / 2 } else { left };
        nodes
            .metrics
            .fence_raised(targets.iter().filter(|t| **t).count());
        let mut fan = nodes.fan_out(round, |i| {
            if at.at(i) {
                Leg::Known(Ok(token))
            } else if targets[i] {
                Leg::Call(nodes.node(i).raise_fence(&target.keys, token))
            } else {
                // Not asked in this round: neither raised nor pending.
                Leg::Known(Ok(0))
            }
        });
        let done = fan.until_quorum(required, |c| *c >= token).await;
        let (raised_replies, rest) = fan.into_parts();
        if !rest.is_empty() {
            nodes.spawn(rest.for_each(|_, _| {}));
        }
        if done >= required {
            return Ok(());
        }
        for (i, r) in raised_replies.iter().enumerate() {
            match r {
                Some(Ok(c)) => at.raised(i, *c),
                Some(Err(e)) => failures.push(nodes.failure(i, e)),
                _ => {}
            }
        }
    }
    debug!(lock = %target.label, token, required, "fence counters could not be raised on a quorum");
    Err(failures)
}
