//! The multi-lock: several lock names held as one, taken on each node by one
//! script that grants all of them or none (`scripts/acquire_all.lua`), and
//! counted against the quorum like a single lock.
//!
//! Once won, the set becomes one [`Hold`] per name (same holder id, same
//! validity, same granting nodes, same fencing token), so that renewal,
//! repair, loss, release and re-entry are those of single locks: the
//! watchdog renews the names together (they are registered together, so
//! one wave renews them in one pipeline per node; with more than 100 locks
//! held a set may straddle two waves or two script calls), and a later
//! `lock(name)` by the same owner re-enters that name's hold.
//!
//! Waiting: a set that is taken is retried after the configured backoff (no
//! longer than the largest PTTL the nodes reported), not on release
//! messages: a set has no single release channel.

use std::collections::HashSet;
use std::sync::{Arc, Weak};
use std::time::Duration;

use tracing::debug;

use crate::acquire::Wait;
use crate::attempt::{fence_quorum, missed};
use crate::clock;
use crate::error::{Error, NodeError};
use crate::hold::{Acquired, Hold, OnDrop};
use crate::keys::{check_name, Keys};
use crate::manager::Inner;
use crate::node::Grant;
use crate::nodes::Nodes;
use crate::owner::Owner;
use crate::quorum::{self, Decision, FanOut, Stragglers, Tally};
use crate::rollback::Rollback;

pub use self::guard::MultiLockGuard;
pub use self::request::MultiLockRequest;

mod guard;
mod request;

/// Most names one [`LockManager::lock_all`](crate::LockManager::lock_all) may take: each name is one more
/// key in the acquire script and one more hold renewed by the watchdog.
pub const MAX_LOCK_ALL_NAMES: usize = 64;

/// The names of one set: checked (count, names, no duplicates) and sorted.
pub(crate) struct Set {
    pub(crate) keys: Arc<[Arc<Keys>]>,
    /// The names joined, for errors and traces.
    pub(crate) label: String,
}

impl Set {
    /// Checks `names`: at least one, at most [`MAX_LOCK_ALL_NAMES`], each a
    /// valid lock name, no name twice. Sorted by name.
    pub(crate) fn checked(prefix: &str, names: &[String]) -> Result<Self, Error> {
        if names.is_empty() {
            return Err(Error::invalid("lock names", "the list of names is empty"));
        }
        if names.len() > MAX_LOCK_ALL_NAMES {
            return Err(Error::invalid(
                "lock names",
                format!("{} names is more than {MAX_LOCK_ALL_NAMES}", names.len()),
            ));
        }
        let mut seen = HashSet::with_capacity(names.len());
        for name in names {
            check_name(name)?;
            if !seen.insert(name.as_str()) {
                return Err(Error::invalid(
                    "lock names",
                    format!("{name:?} is listed twice"),
                ));
            }
        }
        let mut sorted: Vec<&String> = names.iter().collect();
        sorted.sort();
        Ok(Self::of(
            sorted
                .into_iter()
                .map(|n| Arc::new(Keys::new(prefix, n)))
                .collect(),
        ))
    }

    fn of(keys: Vec<Arc<Keys>>) -> Self {
        let label = keys.iter().map(|k| &*k.name).collect::<Vec<_>>().join(", ");
        Self {
            keys: keys.into(),
            label,
        }
    }
}

/// A won fan-out of the set.
struct WonAll {
    acquired: Acquired,
    late: Stragglers<Grant>,
}

/// One fan-out of `acquire_all.lua`. On success the grants belong to the
/// caller; on failure (or if dropped) every name is rolled back on every
/// node that may hold a grant.
async fn attempt_all(
    nodes: &Arc<Nodes>,
    set: &Set,
    holder_id: &Arc<str>,
    lease: Duration,
) -> Result<WonAll, Error> {
    let required = nodes.required();
    let start = clock::now();
    // One rollback per name, armed from the start: dropped with this future,
    // each sends its release to every node in the background.
    let rollbacks: Vec<Rollback> = set
        .keys
        .iter()
        .map(|k| Rollback::new(nodes, k, holder_id, 0, lease))
        .collect();
    let timeout = nodes.call_timeout(lease);
    let mut fan = FanOut::start(nodes.len(), timeout, |i| {
        nodes.node(i).acquire_all(&set.keys, holder_id, lease, 1)
    });
    fan.until(|f| Tally::of(f.replies()).decide(required) != Decision::Open)
        .await;
    let tally = Tally::of(fan.replies());
    if tally.decide(required) != Decision::Won {
        let (replies, _) = fan.into_parts();
        roll_back(rollbacks, &replies).await;
        debug!(locks = %set.label, granted = tally.granted, "set missed");
        return Err(missed(nodes, &set.label, &replies, tally));
    }
    let (replies, rest) = fan.into_parts();
    let mut granted = vec![false; replies.len()];
    let mut token = 0;
    for (i, r) in replies.iter().enumerate() {
        if let Some(Ok(Grant::Granted(t))) = r {
            granted[i] = true;
            token = token.max(*t);
        }
    }
    // A node's grant leaves every counter of the set's slots at its token,
    // and a raise raises them all: showing the largest token on a quorum
    // covers every name of the set.
    let fenced = fence_quorum(nodes, &set.keys, &replies, token, start, lease).await;
    let now = clock::now();
    match (
        fenced,
        quorum::valid_until(start, now, lease, nodes.drift(lease)),
    ) {
        (Ok(()), Some(valid_until)) => {
            for mut r in rollbacks {
                r.disarm();
            }
            Ok(WonAll {
                acquired: Acquired {
                    token,
                    valid_until,
                    started: start,
                    granted,
                },
                late: rest,
            })
        }
        (Err(failures), _) => {
            roll_back(rollbacks, &replies).await;
            Err(Error::Unavailable {
                name: set.label.clone(),
                failures,
                required,
                granted: tally.granted,
            })
        }
        (Ok(()), None) => {
            roll_back(rollbacks, &replies).await;
            Err(Error::ValidityExhausted {
                name: set.label.clone(),
                elapsed: now.saturating_duration_since(start),
                lease,
            })
        }
    }
}

/// Runs every name's rollback at once and waits for them.
async fn roll_back(rollbacks: Vec<Rollback>, replies: &[Option<Result<Grant, NodeError>>]) {
    futures::future::join_all(rollbacks.into_iter().map(|r| r.run(replies))).await;
}

/// Records the grants that land after the set was won on every hold of it
/// (a release goes to every node anyway, after the acquire on the same
/// connection, so a late grant is released with the set).
fn finish_late(nodes: &Nodes, late: Stragglers<Grant>, holds: &[Arc<Hold>]) {
    if late.is_empty() {
        return;
    }
    let weak: Vec<Weak<Hold>> = holds.iter().map(Arc::downgrade).collect();
    nodes.spawn(late.for_each(move |i, r| {
        if let Ok(Grant::Granted(_)) = r {
            debug!(node = i, "late grant of a set");
            for hold in weak.iter().filter_map(Weak::upgrade) {
                hold.grant_landed(i);
            }
        }
    }));
}

/// Takes every name of `set` anew for `owner`, within `wait`: one hold per
/// name, in the set's order. `on_drop` gives each hold its drop work.
async fn fresh_all(
    inner: &Arc<Inner>,
    set: &Set,
    owner: &Owner,
    lease: Duration,
    renew: bool,
    wait: Wait,
    on_drop: impl Fn(&Arc<str>) -> OnDrop,
) -> Result<Vec<Arc<Hold>>, Error> {
    let nodes = &inner.nodes;
    let deadline = match wait {
        Wait::Forever => None,
        Wait::Up(w) => clock::now().checked_add(w),
    };
    let mut attempt_no: u32 = 0;
    loop {
        // A holder id per attempt: a late rollback of a failed attempt can
        // never touch a later one's grants.
        let holder_id = owner.holder_id();
        let err = match attempt_all(nodes, set, &holder_id, lease).await {
            Ok(won) => {
                let holds: Vec<Arc<Hold>> = set
                    .keys
                    .iter()
                    .map(|k| {
                        let acquired = Acquired {
                            token: won.acquired.token,
                            valid_until: won.acquired.valid_until,
                            started: won.acquired.started,
                            granted: won.acquired.granted.clone(),
                        };
                        Hold::new(
                            nodes,
                            k,
                            owner,
                            &holder_id,
                            lease,
                            renew,
                            acquired,
                            on_drop(&k.name),
                        )
                    })
                    .collect();
                finish_late(nodes, won.late, &holds);
                if renew {
                    for hold in &holds {
                        inner.watchdog.register(hold);
                    }
                }
                return Ok(holds);
            }
            Err(e) if e.is_retryable() => e,
            Err(e) => return Err(e),
        };
        let remaining = deadline.map(|d| d.saturating_duration_since(clock::now()));
        if remaining == Some(Duration::ZERO) {
            return Err(err);
        }
        attempt_no = attempt_no.saturating_add(1);
        let backoff = nodes.config.backoff.delay(attempt_no);
        let jitter = Duration::from_micros(crate::rng::up_to(2_000));
        let delay = err.min_pttl().map_or(backoff, |p| backoff.min(p + jitter));
        let delay = remaining.map_or(delay, |r| delay.min(r));
        debug!(locks = %set.label, ?delay, error = %err, "set taken; retrying");
        tokio::time::sleep(delay).await;
    }
}
