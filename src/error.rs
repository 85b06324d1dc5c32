//! The one error type of the crate, with predicates.

use std::fmt;
use std::time::Duration;

/// Why one node did not answer as hoped.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum NodeErrorKind {
    /// No reply within the per-node timeout.
    Timeout,
    /// The connection failed or was refused.
    Connection,
    /// The lock key (or its fence counter) holds a value of another type.
    WrongType,
    /// The node is not a master (ROLE said replica or sentinel).
    NotMaster,
    /// The node was refused when it first answered: it is the same Redis
    /// server as another node, or (with `require_noeviction`) it may evict
    /// keys. It is never used.
    Refused,
    /// Any other error reply, or a reply that could not be understood.
    Server,
    /// A cluster member's write ran on the shard's master, but `WAIT`
    /// confirmed it on fewer replicas than
    /// [`replica_wait`](crate::LockManagerBuilder::replica_wait) asks, so
    /// it does not count (a grant is rolled back with the attempt).
    NotReplicated,
    /// A member's call that was to be sent again (after an answer proving
    /// it had not run: `TRYAGAIN`, `MOVED`, `NOSCRIPT`, a refused
    /// connection, ...) was not, because a later call of the same hold
    /// (its release, or its next attempt) had been sent to that member
    /// meanwhile: sending it would land it behind that call. It did not
    /// run.
    Superseded,
}

impl fmt::Display for NodeErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Timeout => "timeout",
            Self::Connection => "connection",
            Self::WrongType => "wrong type",
            Self::NotMaster => "not a master",
            Self::Refused => "refused",
            Self::Server => "server error",
            Self::NotReplicated => "not replicated",
            Self::Superseded => "superseded",
        })
    }
}

/// The failure of one node, with the node it came from.
///
/// The node is named by its index in the builder's list and by its address
/// (`host:port/db`); credentials are never part of it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeFailure {
    /// Index of the node in the order the builder was given.
    pub node: usize,
    /// The node's address, without credentials.
    pub addr: String,
    /// What went wrong.
    pub kind: NodeErrorKind,
    /// The detail, as reported by the client or server.
    pub message: String,
}

impl fmt::Display for NodeFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "node {} ({}): {}", self.node, self.addr, self.kind)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        Ok(())
    }
}

/// A node on which another owner holds the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TakenNode {
    /// Index of the node in the order the builder was given.
    pub node: usize,
    /// The node's address, without credentials.
    pub addr: String,
    /// The holder's remaining time on that node, if the key has a TTL.
    pub pttl: Option<Duration>,
}

/// Everything that can go wrong, told apart.
///
/// Match on it, or ask a predicate such as [`Error::is_contended`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An argument was rejected before any node was asked: an empty name, a
    /// zero lease, a malformed URL, and so on.
    #[error("invalid {what}: {reason}")]
    InvalidInput {
        /// Which argument.
        what: &'static str,
        /// Why it was rejected.
        reason: String,
    },

    /// The manager's configuration is inconsistent (a quorum larger than the
    /// node count, the same node twice, ...).
    #[error("configuration error: {0}")]
    Config(String),

    /// This manager already holds as many renewed locks as its watchdog
    /// can keep renewed within their validity, as its last renewals
    /// measured: a new one is refused rather than let held ones lapse.
    /// Release some, or raise the capacity: a longer lease, more managers,
    /// or cluster members (the load spread over shards); see the capacity
    /// in docs/BENCHMARKS.md. Trying again after releases may succeed.
    #[error(
        "overloaded: this manager renews {held} locks, its capacity at the measured \
         {renewal_per_lock:?} per lock and a lease of {lease:?} is {capacity}; release some, \
         or use a longer lease, more managers or cluster members"
    )]
    Overloaded {
        /// Renewed holds of this manager.
        held: u64,
        /// How many its renewals keep within their validity.
        capacity: u64,
        /// The renewal cost per lock measured by the last tick.
        renewal_per_lock: Duration,
        /// The manager's lease.
        lease: Duration,
    },

    /// A semaphore was asked with a permit count other than the one the
    /// nodes record for its name (the count of the first acquisition that
    /// found none recorded). Two counts for one name would let the larger
    /// one's holders exceed the smaller one's limit, so neither is served.
    #[error(
        "semaphore {name:?} asked with {permits} permits, but the nodes record {recorded}; \
         every process must use one count per name (to change it, delete {key} on every \
         node once no permit is held)"
    )]
    PermitsMismatch {
        /// The semaphore's name.
        name: String,
        /// The count asked for.
        permits: u32,
        /// The count a node records.
        recorded: i64,
        /// The key that records it, on every node.
        key: String,
    },

    /// The manager's quorum cannot make this primitive safe: a semaphore's
    /// permits and a read-write lock's writers exclude each other only if
    /// every two quorums share a member (`2q > N`).
    #[error(
        "a {primitive} needs a quorum q with 2q > N (every two quorums share a member); \
         this manager's quorum is {required} of {nodes}"
    )]
    UnsafeQuorum {
        /// `"semaphore"` or `"read-write lock"`.
        primitive: &'static str,
        /// The manager's quorum.
        required: usize,
        /// Its members.
        nodes: usize,
    },

    /// A node is not a master. Locks must live on independent masters.
    #[error("node {node} ({addr}) is a {role}, not a master; give quorumlock independent masters")]
    NotMaster {
        /// Index of the node.
        node: usize,
        /// Address of the node, without credentials.
        addr: String,
        /// The role the node reported.
        role: String,
    },

    /// Nodes could not be reached when the manager was built.
    #[error("could not connect: {}", join(failures))]
    Connect {
        /// One entry per node that failed.
        failures: Vec<NodeFailure>,
    },

    /// Another owner holds the lock on enough nodes that the quorum was missed.
    ///
    /// `taken` and `failures` list the nodes that had answered when the
    /// outcome was decided; the acquisition does not wait for the others.
    #[error(
        "lock {name:?} is held by another owner (seen on {} node(s), smallest PTTL {}); needed {required}, granted {granted}",
        taken.len(),
        fmt_opt_ms(*min_pttl)
    )]
    Contended {
        /// The lock name.
        name: String,
        /// The nodes held by someone else, with their PTTL.
        taken: Vec<TakenNode>,
        /// The smallest PTTL among `taken`: a hint of when to retry.
        min_pttl: Option<Duration>,
        /// Nodes that failed meanwhile, if any.
        failures: Vec<NodeFailure>,
        /// Grants needed.
        required: usize,
        /// Grants obtained (all rolled back).
        granted: usize,
    },

    /// Too many nodes failed (timeouts, refused connections) to reach the quorum.
    #[error(
        "quorum unavailable for {name:?}: needed {required}, granted {granted}; {}",
        join(failures)
    )]
    Unavailable {
        /// The lock name.
        name: String,
        /// One entry per node that failed.
        failures: Vec<NodeFailure>,
        /// Grants needed.
        required: usize,
        /// Grants obtained (all rolled back).
        granted: usize,
    },

    /// The quorum was reached, but too late: the lease minus the time spent and
    /// the clock drift left nothing. Everything was rolled back.
    #[error("lock {name:?}: validity exhausted after {elapsed:?} (lease {lease:?})")]
    ValidityExhausted {
        /// The lock name.
        name: String,
        /// Time spent acquiring.
        elapsed: Duration,
        /// The lease asked for.
        lease: Duration,
    },

    /// The lock key, or its fence counter, holds a value of the wrong type.
    #[error(
        "lock {name:?}: key holds a value of the wrong type on {}",
        join(failures)
    )]
    WrongType {
        /// The lock name.
        name: String,
        /// The nodes that answered WRONGTYPE.
        failures: Vec<NodeFailure>,
    },

    /// The lock is not held by this owner: another owner holds it now.
    #[error("lock {name:?} is not held by this owner")]
    NotHeld {
        /// The lock name.
        name: String,
    },

    /// The lock had already expired when it was released or re-entered.
    #[error("lock {name:?} had already expired")]
    Expired {
        /// The lock name.
        name: String,
    },

    /// The watchdog could no longer confirm the lock on a quorum of nodes,
    /// or a re-entry found it missing or another holder's on so many nodes
    /// that no quorum could confirm it (forced, or lost by nodes restarted
    /// empty).
    #[error("lock {name:?} was lost: fewer than the quorum confirmed it in time")]
    Lost {
        /// The lock name.
        name: String,
    },

    /// Renewal stopped because the lock reached its `max_hold`.
    #[error("lock {name:?} reached its max hold of {max_hold:?}; renewal stopped")]
    MaxHoldReached {
        /// The lock name.
        name: String,
        /// The configured bound.
        max_hold: Duration,
    },

    /// A call to a resource's Redis, a server that is not one of the
    /// manager's nodes, failed: a [`Fence`](crate::fenced::Fence) read or
    /// fenced write. `kind` tells a fence key of another type
    /// ([`NodeErrorKind::WrongType`]) or one that holds no token
    /// ([`NodeErrorKind::Server`], as any other error reply), both with
    /// nothing written, from a timeout or a broken connection, after which
    /// the write may or may not have run.
    #[error("fence {fence:?}: {kind}: {message}")]
    Resource {
        /// The fence's key.
        fence: String,
        /// What went wrong.
        kind: NodeErrorKind,
        /// The detail, as reported by the client or server.
        message: String,
    },
}

/// The predicates of [`Error`]: `$name => $pattern` makes a `#[must_use]`
/// method `$name` telling whether the error matches the pattern.
macro_rules! predicates {
    ($($(#[$doc:meta])* $name:ident => $pattern:pat,)+) => {
        $(
            $(#[$doc])*
            #[must_use]
            pub fn $name(&self) -> bool {
                matches!(self, $pattern)
            }
        )+
    };
}

impl Error {
    predicates! {
        /// Another owner holds the lock.
        is_contended => Self::Contended { .. },
        /// The manager refused a new lock to keep the ones it holds renewed.
        is_overloaded => Self::Overloaded { .. },
        /// Nodes failed, or a resource's Redis timed out or broke the
        /// connection ([`Error::Resource`]): the outcome is unknown there.
        is_unavailable => Self::Unavailable { .. }
            | Self::Connect { .. }
            | Self::Resource { kind: NodeErrorKind::Timeout | NodeErrorKind::Connection, .. },
        /// The lock was lost while held.
        is_lost => Self::Lost { .. },
        /// The lock was not held (another owner has it) or had expired.
        is_not_held => Self::NotHeld { .. } | Self::Expired { .. },
        /// The lock had expired.
        is_expired => Self::Expired { .. },
        /// The quorum was met too late.
        is_validity_exhausted => Self::ValidityExhausted { .. },
        /// The caller passed a bad argument or configuration.
        is_invalid_input => Self::InvalidInput { .. }
            | Self::Config(_)
            | Self::NotMaster { .. }
            | Self::PermitsMismatch { .. }
            | Self::UnsafeQuorum { .. },
        /// The lock key, or a fence's key ([`Error::Resource`]), holds a
        /// value of another type.
        is_wrong_type => Self::WrongType { .. }
            | Self::Resource { kind: NodeErrorKind::WrongType, .. },
        /// Renewal stopped at `max_hold`.
        is_max_hold_reached => Self::MaxHoldReached { .. },
        /// Trying again later may succeed: contention, unavailable nodes, or
        /// a quorum met too late.
        is_retryable =>
            Self::Contended { .. } | Self::Unavailable { .. } | Self::ValidityExhausted { .. },
    }

    /// The smallest PTTL reported by nodes held by another owner, if any.
    #[must_use]
    pub fn min_pttl(&self) -> Option<Duration> {
        match self {
            Self::Contended { min_pttl, .. } => *min_pttl,
            _ => None,
        }
    }

    pub(crate) fn invalid(what: &'static str, reason: impl Into<String>) -> Self {
        Self::InvalidInput {
            what,
            reason: reason.into(),
        }
    }
}

fn join(failures: &[NodeFailure]) -> String {
    if failures.is_empty() {
        return "no node reported an error".to_owned();
    }
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

fn fmt_opt_ms(d: Option<Duration>) -> String {
    d.map_or_else(|| "none".to_owned(), |d| format!("{}ms", d.as_millis()))
}

/// A node-level error before the node's identity is attached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct NodeError {
    pub(crate) kind: NodeErrorKind,
    pub(crate) message: String,
    /// Set when the call never reached the node: failed at once by the
    /// node's pause after a refused connection, or refused itself, and no
    /// earlier try of it may have run. It may be sent from this instant,
    /// when the pause ends.
    pub(crate) unsent_until: Option<tokio::time::Instant>,
}

impl NodeError {
    pub(crate) fn new(kind: NodeErrorKind, message: impl Into<String>) -> Self {
        Self {
            kind,
            message: message.into(),
            unsent_until: None,
        }
    }

    pub(crate) fn timeout() -> Self {
        Self::new(NodeErrorKind::Timeout, "")
    }

    pub(crate) fn from_redis(err: &redis::RedisError) -> Self {
        let kind = if err.code() == Some("WRONGTYPE") || err.to_string().contains("WRONGTYPE") {
            NodeErrorKind::WrongType
        } else if err.is_timeout() {
            NodeErrorKind::Timeout
        } else if err.is_io_error()
            || err.is_connection_dropped()
            || err.is_connection_refusal()
            || err.is_unrecoverable_error()
        {
            NodeErrorKind::Connection
        } else {
            NodeErrorKind::Server
        };
        Self::new(kind, err.to_string())
    }

    pub(crate) fn protocol(what: &str) -> Self {
        Self::new(NodeErrorKind::Server, format!("unexpected reply: {what}"))
    }

    pub(crate) fn at(self, node: usize, addr: &str) -> NodeFailure {
        NodeFailure {
            node,
            addr: addr.to_owned(),
            kind: self.kind,
            message: self.message,
        }
    }
}
