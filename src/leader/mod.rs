//! An election's leader as a quorum of members agrees on it: the public
//! [`Leader`], one quorum read ([`read`], by `quorum::agree`), the
//! quorum write of a leader's record ([`proclaim`]), and the observers of
//! a manager ([`Observers`]: one watch per election name, shared by every
//! observer of it in the process).
//!
//! The leader's record (`scripts/proclaim.lua`) lives beside the
//! election's lock, `<prefix>{<lock>}:leader`, and counts on a member only
//! while the record's holder holds the lock there (`scripts/leader.lua`):
//! a resigned or expired leader reads as nobody at once, whatever its
//! record still says.

mod observe;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::error::{Error, NodeFailure};
use crate::keys::Keys;
use crate::members::Members;
use crate::node::{Proclaimed, Record, Seen};
use crate::owner::HolderInfo;
use crate::quorum::{agree, Agreement, Leg};

pub(crate) use self::observe::Observers;

/// Largest value a leader may proclaim, in bytes.
pub const MAX_LEADER_VALUE: usize = 64 * 1024;

/// An election's leader as a quorum of members reported it: what it
/// proclaimed, its term, and who holds it.
///
/// Reported by [`Election::leader`](crate::Election::leader) and
/// [`Election::observe`](crate::Election::observe) only when a quorum of
/// members agree on every part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Leader {
    value: Arc<str>,
    term: u64,
    revision: u64,
    holder_id: Arc<str>,
    holder: Option<HolderInfo>,
}

impl Leader {
    pub(crate) fn from_record(r: &Record) -> Self {
        Self {
            value: Arc::clone(&r.value),
            term: r.term,
            revision: r.rev,
            holder_id: Arc::clone(&r.holder),
            holder: HolderInfo::parse(&r.holder),
        }
    }

    /// What the leader proclaimed last (as a quorum agrees).
    #[must_use]
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The leadership's term: the fencing token of its hold of the
    /// election's lock. Terms of one election strictly increase.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.term
    }

    /// How many values the leader proclaimed in this term (1: the value it
    /// campaigned with).
    #[must_use]
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// The holder id of the leader's hold of the election's lock.
    #[must_use]
    pub fn holder_id(&self) -> &str {
        &self.holder_id
    }

    /// The host the leader runs on, if its holder id is quorumlock's.
    #[must_use]
    pub fn host(&self) -> Option<&str> {
        self.holder.as_ref().map(|h| h.host.as_str())
    }

    /// The leader's process id, if its holder id is quorumlock's.
    #[must_use]
    pub fn pid(&self) -> Option<u32> {
        self.holder.as_ref().map(|h| h.pid)
    }

    /// When the leader won its term, on its own wall clock, if its holder
    /// id is quorumlock's.
    #[must_use]
    pub fn since(&self) -> Option<SystemTime> {
        self.holder.as_ref().map(|h| h.since)
    }

    /// The (term, revision) by which observers order leaders.
    pub(crate) fn version(&self) -> (u64, u64) {
        (self.term, self.revision)
    }
}

/// One quorum read of an election's leader: the verdict, the members'
/// failures, and the smallest PTTL among the members that agreed on a
/// leader (when its keys may expire, which publishes nothing).
pub(crate) struct Read {
    pub(crate) agreement: Agreement,
    pub(crate) failures: Vec<NodeFailure>,
    pub(crate) answered: usize,
    pub(crate) expires_in: Option<Duration>,
}

/// Reads `keys`'s leader on every member (`scripts/leader.lua`), until the
/// answers decide (a record agreed, or no leader possible) or the node
/// timeout.
pub(crate) async fn read(nodes: &Members, keys: &Arc<Keys>) -> Read {
    let required = nodes.required();
    let mut fan = nodes.fan_out(nodes.config.node_timeout, |i| {
        Leg::Call(nodes.node(i).leader(keys))
    });
    let verdict = |replies: &[Option<Result<Seen, _>>]| {
        let seen: Vec<Option<&Seen>> = replies
            .iter()
            .map(|r| r.as_ref().and_then(|r| r.as_ref().ok()))
            .collect();
        #[cfg(test)]
        if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::TrustFirstAnswer) {
            return first_answer(&seen);
        }
        agree(&seen, required)
    };
    fan.until(|f| {
        matches!(
            verdict(f.replies()),
            Agreement::Leader(_) | Agreement::Vacant
        )
    })
    .await;
    let replies = fan.replies();
    let agreement = verdict(replies);
    let mut failures = Vec::new();
    let mut answered = 0;
    let mut expires_in: Option<Duration> = None;
    for (i, r) in replies.iter().enumerate() {
        match r {
            Some(Ok(seen)) => {
                answered += 1;
                if let (Seen::Leads(rec, Some(pttl)), Agreement::Leader(agreed)) =
                    (seen, &agreement)
                {
                    if rec == agreed {
                        expires_in = Some(expires_in.map_or(*pttl, |e| e.min(*pttl)));
                    }
                }
            }
            Some(Err(e)) => failures.push(nodes.failure(i, e)),
            None => {}
        }
    }
    Read {
        agreement,
        failures,
        answered,
        expires_in,
    }
}

/// What the simulator's mutation `TrustFirstAnswer` reads: the first
/// member that answered (the first by index among those in) decides
/// alone.
#[cfg(test)]
fn first_answer(seen: &[Option<&Seen>]) -> Agreement {
    match seen.iter().flatten().next() {
        Some(Seen::Leads(r, _)) => Agreement::Leader(r.clone()),
        Some(Seen::Vacant) => Agreement::Vacant,
        Some(Seen::Unproclaimed(_)) => Agreement::Undecided,
        None => Agreement::Unavailable,
    }
}

/// The leader `keys`'s election has now, by one quorum read: `None` when
/// no record has a quorum.
///
/// # Errors
///
/// [`Error::Unavailable`] when fewer than a quorum of members answered.
pub(crate) async fn current(nodes: &Members, keys: &Arc<Keys>) -> Result<Option<Leader>, Error> {
    let r = read(nodes, keys).await;
    match r.agreement {
        Agreement::Leader(rec) => Ok(Some(Leader::from_record(&rec))),
        Agreement::Vacant | Agreement::Undecided => Ok(None),
        Agreement::Unavailable => Err(Error::Unavailable {
            name: keys.name.to_string(),
            failures: r.failures,
            required: nodes.required(),
            granted: r.answered,
        }),
    }
}

/// Writes `record` on every member where its hold is alive, and returns
/// once a quorum has it; the calls still in flight then finish in the
/// background.
///
/// # Errors
///
/// [`Error::WrongType`] when a member's record key holds another type;
/// [`Error::Lost`] when a member holds a record of a later term or
/// revision (a later leader); [`Error::Unavailable`] when fewer than a
/// quorum wrote it within `timeout` (members failed, or the hold is not
/// alive there).
pub(crate) async fn proclaim(
    nodes: &Arc<Members>,
    keys: &Arc<Keys>,
    record: &Record,
    timeout: Duration,
) -> Result<(), Error> {
    let required = nodes.required();
    let mut fan = nodes.fan_out(timeout, |i| Leg::Call(nodes.node(i).proclaim(keys, record)));
    let written = fan
        .until_quorum(required, |p| *p == Proclaimed::Written)
        .await;
    let (replies, stragglers) = fan.into_parts();
    if !stragglers.is_empty() {
        nodes.spawn(stragglers.for_each(|_, _| {}));
    }
    let mut failures = Vec::new();
    let mut superseded = false;
    for (i, r) in replies.iter().enumerate() {
        match r {
            Some(Err(e)) => failures.push(nodes.failure(i, e)),
            Some(Ok(Proclaimed::Superseded)) => superseded = true,
            _ => {}
        }
    }
    let wrong_type = failures
        .iter()
        .any(|f| f.kind == crate::error::NodeErrorKind::WrongType);
    if written >= required {
        Ok(())
    } else if wrong_type {
        // Another type at the record key: no retry will write it.
        Err(Error::WrongType {
            name: keys.name.to_string(),
            failures,
        })
    } else if superseded {
        Err(Error::Lost {
            name: keys.name.to_string(),
        })
    } else {
        Err(Error::Unavailable {
            name: keys.name.to_string(),
            failures,
            required,
            granted: written,
        })
    }
}
