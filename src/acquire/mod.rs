//! Taking a lock or a set: attempts (`attempt`) until one wins or the wait
//! runs out, sleeping between them for the acquisition's turn (`turn`),
//! and re-entering a hold the owner already has.
//!
//! The acquisition's own parts, private to it, from the leaves up (each
//! imports only parts above it):
//!
//! - `queue`: a waiter's place in the lock's queue on every node (`Spot`);
//! - `fence`: the fence rule, a token shown only on a quorum of counters;
//! - `rollback`: undoing the grants an attempt does not keep, and the
//!   grants that land late;
//! - `turn`: one acquisition's turn, its place in the queue and its bell;
//! - `attempt`: one attempt, the script on every node counted against the
//!   quorum, with one exit that rolls back;
//! - this module: the loop over them ([`Acquisition::fresh`]) and
//!   re-entry ([`reenter`]), all that the request layer and the manager use.

mod attempt;
mod fence;
mod queue;
mod rollback;
mod turn;

use std::sync::Arc;
use std::time::Duration;

use tracing::{debug, warn};

use self::attempt::{attempt, Ask, Kind};
use self::turn::Turn;
use crate::clock;
use crate::error::Error;
use crate::guard::LockGuard;
use crate::hold::{Hold, OnDrop};
use crate::keys::Target;
use crate::members::Members;
use crate::node::Claim;
use crate::owner::Owner;
use crate::telemetry::{Acquiring, Cause};
use crate::wait::Notifier;
use crate::watchdog::Watchdog;

/// How long an acquisition may wait for the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    Forever,
    Up(Duration),
}

/// What an acquisition asks for.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Terms {
    pub(crate) lease: Duration,
    /// Renewed by the watchdog (else held for the fixed `lease`).
    pub(crate) renew: bool,
    pub(crate) wait: Wait,
    /// Granted in queue order only (the fair lock).
    pub(crate) fair: bool,
}

/// What an acquisition works with: the nodes, the release channels its
/// waiters listen on, the watchdog that renews what it wins, and its
/// measures.
pub(crate) struct Acquisition<'a> {
    pub(crate) nodes: &'a Arc<Members>,
    pub(crate) notifier: &'a Notifier,
    pub(crate) watchdog: &'a Arc<Watchdog>,
    pub(crate) probe: &'a Acquiring,
}

impl Acquisition<'_> {
    /// Takes `target` (one lock, or a set all or none) anew for `owner` on
    /// `terms`: attempt → miss → wait for the turn, until an attempt wins
    /// or the wait runs out. Returns one hold per name, in the target's
    /// order; each runs `on_drop(name)`'s work when dropped.
    pub(crate) async fn fresh(
        &self,
        target: &Target,
        owner: &Owner,
        terms: Terms,
        on_drop: impl Fn(&Arc<str>) -> OnDrop,
    ) -> Result<Vec<Arc<Hold>>, Error> {
        let Terms {
            lease,
            renew,
            wait,
            fair,
        } = terms;
        // Renewal comes before new work: a manager that renews as many
        // holds as it can keep valid takes no more.
        if renew {
            self.watchdog.admit()?;
        }
        // A wait too long to represent is a wait without end.
        let deadline = match wait {
            Wait::Forever => None,
            Wait::Up(w) => clock::now().checked_add(w),
        };
        let waits = wait != Wait::Up(Duration::ZERO);
        let mut turn = Turn::new(self.nodes, self.notifier, target, owner, fair, waits);
        loop {
            let err = if turn.deferred() {
                None
            } else {
                // A holder id per attempt: a late rollback of a failed
                // attempt can never touch a later one's grants.
                let holder_id = owner.holder_id();
                let ask = Ask {
                    nodes: self.nodes,
                    target,
                    claim: Claim::new(Arc::clone(&holder_id), lease, 1),
                    kind: Kind::Fresh,
                    attempt: turn.misses(),
                };
                self.probe.attempt();
                match attempt(ask, turn.attempting()).await {
                    Ok(won) => {
                        let holds: Vec<Arc<Hold>> = target
                            .keys
                            .iter()
                            .map(|keys| {
                                let hold = Hold::new(
                                    self.nodes,
                                    keys,
                                    owner,
                                    &holder_id,
                                    lease,
                                    renew,
                                    won.acquired.clone(),
                                    on_drop(&keys.name),
                                );
                                if renew {
                                    self.watchdog.register(&hold);
                                }
                                hold
                            })
                            .collect();
                        won.late.finish(&holds);
                        turn.won(lease);
                        return Ok(holds);
                    }
                    Err(e) if e.is_retryable() => Some(e),
                    Err(e) => return Err(e),
                }
            };
            let remaining = deadline.map(|d| d.saturating_duration_since(clock::now()));
            if remaining == Some(Duration::ZERO) {
                match err {
                    Some(e) => return Err(e),
                    // Queued the whole wait behind local waiters: one try.
                    None => {
                        turn.stop_deferring();
                        continue;
                    }
                }
            }
            turn.wait(err.as_ref(), remaining, lease).await;
        }
    }
}

/// Re-enters a live hold: one more level, refreshed on the nodes.
///
/// The nodes are asked in the re-entry mode, which never creates a missing
/// key: a lock forced (`force_unlock`) or lost by nodes restarted empty must
/// not come back through a re-entry. As in the watchdog's renewal:
/// - confirmed on a quorum: the re-entry succeeds; a minority that answered
///   "missing" is left to the watchdog, which re-creates the key there in
///   its next tick once a quorum confirms the hold again (its repair, with
///   the fence counter raised to the hold's token);
/// - missing or not ours on so many nodes that no quorum can confirm it:
///   the hold is lost (`lost()` fires, its keys left anywhere are
///   released) and the re-entry fails with [`Error::Lost`];
/// - otherwise (nodes failed or timed out): nothing says the lock is gone,
///   so the hold stays valid until its `valid_until` and the guard is
///   returned; the watchdog decides at its next tick.
pub(crate) async fn reenter(hold: Arc<Hold>) -> Result<LockGuard, Error> {
    if !hold.is_live() {
        return Err(hold.gone());
    }
    // The level is taken at once, as a guard: a release of another level
    // meanwhile lowers the same count, and if this future is dropped (or
    // the hold is gone when it ends), dropping the guard gives the level
    // back like any release.
    let count = hold.enter_level();
    let guard = LockGuard::new(Arc::clone(&hold));
    let nodes = &hold.nodes;
    let ask = Ask {
        nodes,
        target: &Target::one(&hold.keys),
        claim: Claim::new(Arc::clone(&hold.holder_id), hold.lease, count),
        kind: Kind::Reenter,
        attempt: 0,
    };
    match attempt(ask, None).await {
        Ok(won) => {
            hold.merge(&won.acquired, &won.missing);
            won.late.finish(std::slice::from_ref(&hold));
        }
        Err(e @ Error::Lost { .. }) => {
            // Gone on too many nodes for a quorum: the holder is told now.
            if hold.lose(Cause::Gone) {
                warn!(lock = %hold.keys.name, "lock lost: a re-entry found it gone on too many nodes for a quorum");
                let _ = hold.release_in_background(0);
            }
            return Err(e);
        }
        Err(e) => {
            // Still held until `valid_until`: re-entry does not change who
            // holds the lock, and the watchdog or release converges the
            // nodes to the new count.
            debug!(lock = %hold.keys.name, error = %e, "re-entry could not refresh a quorum");
        }
    }
    if !hold.is_live() {
        return Err(hold.gone());
    }
    Ok(guard)
}
