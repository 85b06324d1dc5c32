//! One attempt at a lock or a set: the acquire script on every node at
//! once, counted against the quorum, the validity left after the time it
//! took, the fence token shown on a quorum (`fence`), and the one rollback
//! exit when it fails.

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, field, Instrument};

use super::fence::fence_quorum;
use super::queue::Spot;
use super::rollback::{LateGrants, Rollback};
use crate::clock;
use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure, TakenNode};
use crate::hold::Acquired;
use crate::keys::{Role, Target};
use crate::members::Members;
use crate::node::{Answer, Claim, Grant, Place};
use crate::quorum::{self, Decision, Tally};

/// What one fan-out asks of the nodes: which locks, for whom and on what
/// terms (the `claim`: the attempt's holder id, one per attempt so that a
/// late rollback of a failed attempt never touches a later one's grants;
/// the lease; the count, 1 for a fresh acquisition), and whether it is a
/// re-entry.
pub(crate) struct Ask<'a> {
    pub(crate) nodes: &'a Arc<Members>,
    pub(crate) target: &'a Target,
    pub(crate) claim: Claim,
    pub(crate) kind: Kind,
    /// The attempt's number within its acquisition, for traces.
    pub(crate) attempt: u32,
}

/// A successful fan-out.
pub(crate) struct Won {
    pub(crate) acquired: Acquired,
    pub(crate) late: LateGrants,
    /// Per node: answered that the key is missing (a re-entry's answer;
    /// empty for a fresh acquisition, whose nodes never answer so).
    pub(crate) missing: Vec<bool>,
}

impl Ask<'_> {
    /// The script call to node `i`: the acquire script (queued with a
    /// `place`), its re-entry mode, or the set's.
    fn call(&self, i: usize, place: Option<&Place>) -> Answer<Grant> {
        let keys = self.target.first();
        let node = self.nodes.node(i);
        match self.kind {
            Kind::Fresh if self.target.set => node.acquire_all(&self.target.keys, &self.claim),
            Kind::Fresh => node.acquire(keys, &self.claim, place),
            Kind::Reenter => node.reenter(keys, &self.claim),
        }
    }

    /// The count a rollback restores: none for a fresh acquisition, the
    /// hold's own for a re-entry.
    fn restore(&self) -> u32 {
        match self.kind {
            Kind::Fresh => 0,
            Kind::Reenter => self.claim.count.saturating_sub(1),
        }
    }
}

/// A fresh acquisition, or the re-entry of a hold (one level above its
/// count: the claim's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Fresh,
    Reenter,
}

/// One fan-out of an acquire script, for one lock or a set. On success the
/// grants belong to the caller; on failure (or if dropped) they are rolled
/// back, for every name on every node that may hold one. With a `spot`,
/// the attempt is a queued waiter's, and the answers update its place.
///
/// A re-entry ([`Kind::Reenter`]) asks the nodes in the re-entry mode,
/// which never creates a missing key
/// ([`NodeOps::reenter`](crate::node::NodeOps::reenter)); when so many
/// nodes answer that the key is missing or not ours (another holder, a key
/// of another type) that no quorum can confirm the hold, it fails with
/// [`Error::Lost`], as the watchdog's renewal would find it.
pub(crate) async fn attempt(ask: Ask<'_>, spot: Option<&mut Spot>) -> Result<Won, Error> {
    let span = tracing::debug_span!(
        "quorumlock.acquire",
        lock = %ask.target.label,
        holder = %ask.claim.holder,
        attempt = ask.attempt,
        count = ask.claim.count,
        granted = field::Empty,
        taken = field::Empty,
        failed = field::Empty,
        elapsed_us = field::Empty,
        validity_ms = field::Empty,
        outcome = field::Empty,
    );
    fan_out(&ask, spot).instrument(span).await
}

async fn fan_out(ask: &Ask<'_>, spot: Option<&mut Spot>) -> Result<Won, Error> {
    let (nodes, target, lease) = (ask.nodes, ask.target, ask.claim.lease);
    let required = nodes.required_for(target.first());
    // A place among the manager's attempts in flight, before anything is
    // sent (and before the lease's clock starts).
    let in_flight = nodes.attempt_place().await;
    let start = clock::now();
    // Armed from the start: dropped with this future, it sends the release
    // of every name to every node in the background.
    let restore = Claim::new(Arc::clone(&ask.claim.holder), lease, ask.restore());
    let mut rollback = Rollback::new(nodes, target, restore);
    let mut spot = spot;
    let place = spot.as_deref_mut().map(Spot::place);
    let mut fan = nodes.fan_out(nodes.call_timeout(lease), |i| ask.call(i, place.as_ref()));
    fan.until_quorum(required, |g| matches!(g, Grant::Granted(_)))
        .await;
    drop(in_flight);
    let elapsed = clock::now().saturating_duration_since(start);
    let tally = Tally::of(fan.replies());
    trace_replies(fan.replies(), tally, elapsed);
    if let Some(s) = spot {
        s.record(fan.replies());
    }
    let (replies, rest) = fan.into_parts();
    let span = tracing::Span::current();
    if tally.decide(required) != Decision::Won {
        span.record("outcome", "missed");
        rollback.run(&replies).await;
        // A re-entry that missed because the hold is gone: so many nodes
        // answered that the key is missing, another holder's or of another
        // type that no quorum can confirm it (the watchdog's rule for a
        // loss). Nodes that failed or did not answer may still hold it.
        if ask.kind == Kind::Reenter && !tally.confirmable(required) {
            span.record("outcome", "lost");
            return Err(Error::Lost {
                name: target.label.to_string(),
            });
        }
        return Err(missed(nodes, target, &replies, tally));
    }
    let mut granted = vec![false; replies.len()];
    // Only a re-entry's nodes answer "missing".
    let mut missing = match ask.kind {
        Kind::Reenter => vec![false; replies.len()],
        Kind::Fresh => Vec::new(),
    };
    let mut token = 0;
    let no_fence = no_fence();
    let mut unreached = vec![false; replies.len()];
    for (i, r) in replies.iter().enumerate() {
        match r {
            Some(Err(e)) if e.unsent_until.is_some() => unreached[i] = true,
            Some(Ok(Grant::Granted(t))) => {
                granted[i] = true;
                if !(no_fence && token > 0) {
                    token = token.max(*t);
                }
            }
            Some(Ok(Grant::Missing)) => {
                if let Some(m) = missing.get_mut(i) {
                    *m = true;
                }
            }
            _ => {}
        }
    }
    // A re-entry keeps the hold's token: nothing new to show.
    let fenced = match ask.kind {
        // A reader's token orders nothing: no counter is raised for it.
        Kind::Fresh if target.first().role == Role::Reader => Ok(()),
        Kind::Fresh if !no_fence => {
            fence_quorum(nodes, target, &replies, token, start, lease).await
        }
        Kind::Fresh | Kind::Reenter => Ok(()),
    };
    let now = clock::now();
    let valid_until = quorum::valid_until(start, now, lease, nodes.drift(lease));
    let failed = match (fenced, valid_until) {
        (Ok(()), Some(valid_until)) => {
            rollback.disarm();
            span.record(
                "validity_ms",
                u64::try_from(valid_until.saturating_duration_since(now).as_millis())
                    .unwrap_or(u64::MAX),
            );
            span.record("outcome", "won");
            return Ok(Won {
                acquired: Acquired {
                    token,
                    valid_until,
                    started: start,
                    granted,
                    unreached,
                },
                late: LateGrants {
                    rest,
                    waiter: place.map(|p| p.waiter),
                },
                missing,
            });
        }
        (Err(failures), _) => {
            span.record("outcome", "fence quorum missed");
            Error::Unavailable {
                name: target.label.to_string(),
                failures,
                required,
                granted: tally.granted,
            }
        }
        (Ok(()), None) => {
            span.record("outcome", "validity exhausted");
            Error::ValidityExhausted {
                name: target.label.to_string(),
                elapsed: now.saturating_duration_since(start),
                lease,
            }
        }
    };
    // The one exit of a fan-out that won the quorum but cannot keep it.
    rollback.run(&replies).await;
    Err(failed)
}

/// Records the tally on the attempt's span, and each node's answer as an
/// event; nothing when nobody listens.
fn trace_replies(replies: &[Option<Result<Grant, NodeError>>], tally: Tally, elapsed: Duration) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    let span = tracing::Span::current();
    span.record("granted", tally.granted);
    span.record("taken", tally.taken);
    span.record("failed", tally.failed);
    span.record(
        "elapsed_us",
        u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX),
    );
    for (i, r) in replies.iter().enumerate() {
        match r {
            Some(Ok(Grant::Granted(t))) => debug!(node = i, token = t, "granted"),
            Some(Ok(Grant::Taken(p, t))) => debug!(node = i, pttl = ?p, ticket = t, "taken"),
            Some(Ok(Grant::Missing)) => debug!(node = i, "missing"),
            Some(Err(e)) => debug!(node = i, kind = %e.kind, error = %e.message, "failed"),
            None => debug!(node = i, "pending"),
        }
    }
}

/// The error of an attempt on `name` (a lock name, or a set's label) that
/// missed the quorum: wrong type if any node said so, else contended if any
/// node holds it for another owner, else unavailable.
pub(crate) fn missed(
    nodes: &Members,
    target: &Target,
    replies: &[Option<Result<Grant, NodeError>>],
    tally: Tally,
) -> Error {
    let name = target.label.to_string();
    let required = nodes.required_for(target.first());
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
            required,
            granted: tally.granted,
        };
    }
    let min_pttl = taken.iter().filter_map(|t| t.pttl).min();
    Error::Contended {
        name,
        taken,
        min_pttl,
        failures,
        required,
        granted: tally.granted,
    }
}

/// The simulator's mutation that hands out the first granting node's
/// counter as the token, no quorum of counters shown to be at it (never
/// on outside tests).
fn no_fence() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::NoFence);
    #[cfg(not(test))]
    false
}
