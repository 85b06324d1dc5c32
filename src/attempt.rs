//! One attempt at a lock: the acquire script on every node at once,
//! counted against the quorum, the validity left after the time it took,
//! the fence token shown on a quorum, and the rollback when it fails.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{debug, field, Instrument};

use crate::clock;
use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure, TakenNode};
use crate::hold::Acquired;
use crate::keys::Keys;
use crate::node::Grant;
use crate::nodes::Nodes;
use crate::queue::Spot;
use crate::quorum::{self, Decision, FanOut, Tally};
use crate::rollback::{LateGrants, Rollback};

/// A successful fan-out.
pub(crate) struct Won {
    pub(crate) acquired: Acquired,
    pub(crate) late: LateGrants,
    /// Per node: answered that the key is missing (a re-entry's answer).
    pub(crate) missing: Vec<bool>,
}

/// One fan-out of the acquire script. On success the grants belong to the
/// caller; on failure (or if dropped) they are rolled back. With a `spot`,
/// the attempt is a queued waiter's, and the answers update its place.
///
/// With a `prior_count`, it is a re-entry of a hold at that count: the
/// nodes are asked in the re-entry mode, which never creates a missing key
/// ([`NodeOps::reenter`](crate::node::NodeOps::reenter)), and when so many
/// nodes answer that the key is missing or not ours (another holder, a key
/// of another type) that no quorum can confirm the hold, the attempt fails
/// with [`Error::Lost`], as the watchdog's renewal would find it.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn attempt(
    nodes: &Arc<Nodes>,
    keys: &Arc<Keys>,
    holder_id: &Arc<str>,
    lease: Duration,
    count: u32,
    prior_count: u32,
    attempt: u32,
    mut spot: Option<&mut Spot>,
) -> Result<Won, Error> {
    let span = tracing::debug_span!(
        "quorumlock.acquire",
        lock = %keys.name,
        holder = %holder_id,
        attempt,
        count,
        granted = field::Empty,
        taken = field::Empty,
        failed = field::Empty,
        elapsed_us = field::Empty,
        validity_ms = field::Empty,
        outcome = field::Empty,
    );
    async {
        let required = nodes.required();
        let start = clock::now();
        let mut rollback = Rollback::new(nodes, keys, holder_id, prior_count, lease);
        let timeout = nodes.call_timeout(lease);
        let place = spot.as_deref_mut().map(Spot::place);
        let mut fan = FanOut::start(nodes.len(), timeout, |i| {
            let node = nodes.node(i);
            if prior_count > 0 {
                node.reenter(keys, holder_id, lease, count)
            } else {
                node.acquire(keys, holder_id, lease, count, place.as_ref())
            }
        });
        fan.until(|f| Tally::of(f.replies()).decide(required) != Decision::Open)
            .await;
        let elapsed = clock::now().saturating_duration_since(start);
        let tally = Tally::of(fan.replies());
        let span = tracing::Span::current();
        // Nothing to record, and no per-node events, when nobody listens.
        if tracing::enabled!(tracing::Level::DEBUG) {
            span.record("granted", tally.granted);
            span.record("taken", tally.taken);
            span.record("failed", tally.failed);
            span.record(
                "elapsed_us",
                u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
            );
            for (i, r) in fan.replies().iter().enumerate() {
                match r {
                    Some(Ok(Grant::Granted(t))) => debug!(node = i, fence = t, "granted"),
                    Some(Ok(Grant::Taken(p, t))) => {
                        debug!(node = i, pttl = ?p, ticket = t, "taken")
                    }
                    Some(Ok(Grant::Missing)) => debug!(node = i, "missing"),
                    Some(Err(e)) => debug!(node = i, kind = %e.kind, error = %e.message, "failed"),
                    None => debug!(node = i, "pending"),
                }
            }
        }
        if let Some(s) = spot {
            s.record(fan.replies());
        }
        let decision = tally.decide(required);
        if decision != Decision::Won {
            span.record("outcome", "missed");
            let (replies, _) = fan.into_parts();
            rollback.run(&replies).await;
            if prior_count > 0 && unconfirmable(nodes, &replies, tally) {
                span.record("outcome", "lost");
                return Err(Error::Lost {
                    name: keys.name.to_string(),
                });
            }
            return Err(missed(nodes, &keys.name, &replies, tally));
        }
        let (replies, rest) = fan.into_parts();
        let mut granted = vec![false; replies.len()];
        let mut missing = vec![false; replies.len()];
        let mut token = 0;
        for (i, r) in replies.iter().enumerate() {
            match r {
                Some(Ok(Grant::Granted(t))) => {
                    granted[i] = true;
                    token = token.max(*t);
                }
                Some(Ok(Grant::Missing)) => missing[i] = true,
                _ => {}
            }
        }
        let fenced = if prior_count == 0 {
            fence_quorum(
                nodes,
                std::slice::from_ref(keys),
                &replies,
                token,
                start,
                lease,
            )
            .await
        } else {
            Ok(())
        };
        let now = clock::now();
        match (
            fenced,
            quorum::valid_until(start, now, lease, nodes.drift(lease)),
        ) {
            (Ok(()), Some(valid_until)) => {
                rollback.disarm();
                span.record(
                    "validity_ms",
                    u64::try_from(valid_until.saturating_duration_since(now).as_millis())
                        .unwrap_or(u64::MAX),
                );
                span.record("outcome", "won");
                Ok(Won {
                    acquired: Acquired {
                        token,
                        valid_until,
                        started: start,
                        granted,
                    },
                    late: LateGrants {
                        rest,
                        waiter: place.map(|p| p.waiter),
                    },
                    missing,
                })
            }
            (Err(failures), _) => {
                span.record("outcome", "fence quorum missed");
                rollback.run(&replies).await;
                Err(Error::Unavailable {
                    name: keys.name.to_string(),
                    failures,
                    required,
                    granted: tally.granted,
                })
            }
            (Ok(()), None) => {
                span.record("outcome", "validity exhausted");
                rollback.run(&replies).await;
                Err(Error::ValidityExhausted {
                    name: keys.name.to_string(),
                    elapsed: now.saturating_duration_since(start),
                    lease,
                })
            }
        }
    }
    .instrument(span)
    .await
}

/// Hands out `token` only once a quorum of nodes is known to have a fence
/// counter of at least `token`: the granting nodes that returned it, plus
/// lagging nodes raised to it now. Every later quorum then overlaps that
/// set in a node whose next INCR is above `token`. Returns the failures
/// when no quorum could be shown within the lease's validity.
///
/// `keys` are the locks the token is for: one name, or a set. The rule
/// holds per counter (one per hash slot): a node's grant of a set leaves
/// every counter of the set's slots at its token, and a raise raises them
/// all, so the token is shown for every name of `keys`.
pub(crate) async fn fence_quorum(
    nodes: &Nodes,
    keys: &[Arc<Keys>],
    replies: &[Option<Result<Grant, NodeError>>],
    token: u64,
    start: Instant,
    lease: Duration,
) -> Result<(), Vec<NodeFailure>> {
    let required = nodes.required();
    let at_token: Vec<bool> = replies
        .iter()
        .map(|r| matches!(r, Some(Ok(Grant::Granted(t))) if *t >= token))
        .collect();
    if at_token.iter().filter(|b| **b).count() >= required {
        return Ok(());
    }
    #[cfg(test)]
    if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::SingleTryFence) {
        let calls: Vec<_> = (0..nodes.len())
            .filter(|i| matches!(replies[*i], Some(Ok(Grant::Granted(t))) if t < token))
            .map(|i| nodes.node(i).raise_fence(keys, token))
            .collect();
        nodes.spawn(async move {
            for call in calls {
                let _ = call.await;
            }
        });
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
    let mut at = at_token;
    let mut failures = Vec::new();
    for first_round in [true, false] {
        let targets: Vec<bool> = (0..nodes.len())
            .map(|i| {
                let first = matches!(replies[i], None | Some(Ok(Grant::Granted(_))));
                !at[i] && first == first_round
            })
            .collect();
        if !targets.contains(&true) {
            continue;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let round = if first_round { left / 2 } else { left };
        let mut fan = FanOut::start(nodes.len(), round, |i| {
            if at[i] {
                Box::pin(std::future::ready(Ok(token)))
            } else if targets[i] {
                nodes.node(i).raise_fence(keys, token)
            } else {
                // Not asked in this round: neither raised nor pending.
                Box::pin(std::future::ready(Ok(0)))
            }
        });
        let raised = |f: &FanOut<u64>| {
            let (mut done, mut pending) = (0, 0);
            for r in f.replies() {
                match r {
                    Some(Ok(c)) if *c >= token => done += 1,
                    None => pending += 1,
                    _ => {}
                }
            }
            (done, pending)
        };
        fan.until(|f| {
            let (done, pending) = raised(f);
            done >= required || done + pending < required
        })
        .await;
        let (done, _) = raised(&fan);
        let (raised_replies, rest) = fan.into_parts();
        if !rest.is_empty() {
            nodes.spawn(rest.for_each(|_, _| {}));
        }
        if done >= required {
            return Ok(());
        }
        for (i, r) in raised_replies.iter().enumerate() {
            match r {
                Some(Ok(c)) if *c >= token => at[i] = true,
                Some(Err(e)) => failures.push(nodes.failure(i, e)),
                _ => {}
            }
        }
    }
    let locks: Vec<&str> = keys.iter().map(|k| &*k.name).collect();
    debug!(
        ?locks,
        token, required, "fence counters could not be raised on a quorum"
    );
    Err(failures)
}

/// A re-entry that missed the quorum because the hold is gone: so many
/// nodes answered that the key is missing, another holder's, or of another
/// type, that the others could not make a quorum (the watchdog's rule for a
/// loss). Nodes that failed or did not answer may still hold it.
fn unconfirmable(
    nodes: &Nodes,
    replies: &[Option<Result<Grant, NodeError>>],
    tally: Tally,
) -> bool {
    let wrong = replies
        .iter()
        .filter(|r| matches!(r, Some(Err(e)) if e.kind == NodeErrorKind::WrongType))
        .count();
    let absent = tally.taken + tally.missing + wrong;
    nodes.len().saturating_sub(absent) < nodes.required()
}

/// The error of an attempt on `name` (a lock name, or a set's label) that
/// missed the quorum: wrong type if any node said so, else contended if any
/// node holds it for another owner, else unavailable.
pub(crate) fn missed(
    nodes: &Nodes,
    name: &str,
    replies: &[Option<Result<Grant, NodeError>>],
    tally: Tally,
) -> Error {
    let name = name.to_owned();
    let mut taken = Vec::new();
    let mut failures = Vec::new();
    for (i, r) in replies.iter().enumerate() {
        match r {
            Some(Ok(Grant::Taken(pttl, _))) => taken.push(TakenNode {
                node: i,
                addr: nodes.node(i).addr().to_owned(),
                pttl: *pttl,
            }),
            Some(Err(e)) => failures.push(nodes.failure(i, e)),
            _ => {}
        }
    }
    let wrong: Vec<NodeFailure> = failures
        .iter()
        .filter(|f| f.kind == NodeErrorKind::WrongType)
        .cloned()
        .collect();
    if !wrong.is_empty() {
        return Error::WrongType {
            name,
            failures: wrong,
        };
    }
    if taken.is_empty() {
        return Error::Unavailable {
            name,
            failures,
            required: nodes.required(),
            granted: tally.granted,
        };
    }
    let min_pttl = taken.iter().filter_map(|t| t.pttl).min();
    Error::Contended {
        name,
        taken,
        min_pttl,
        failures,
        required: nodes.required(),
        granted: tally.granted,
    }
}
