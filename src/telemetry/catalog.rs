//! What is measured: every metric's name, kind, unit, labels and meaning
//! ([`METRICS`]), and the bounded label values (outcomes, causes, error
//! kinds).

use crate::error::{Error, NodeErrorKind};

/// What a metric is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// A metric's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unit {
    /// A count of events or things.
    Count,
    Seconds,
}

/// One metric: its name, kind, unit, labels and meaning.
#[derive(Debug)]
pub(crate) struct Spec {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) unit: Unit,
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) labels: &'static [&'static str],
    pub(crate) help: &'static str,
}

pub(super) const ACQUISITIONS: &str = "quorumlock_acquisitions_total";
pub(super) const ACQUIRE_ATTEMPTS: &str = "quorumlock_acquire_attempts";
pub(super) const ACQUIRE_DURATION: &str = "quorumlock_acquire_duration_seconds";
pub(super) const WAIT_DURATION: &str = "quorumlock_wait_duration_seconds";
pub(super) const ROLLBACKS: &str = "quorumlock_rollbacks_total";
pub(super) const FENCE_RAISES: &str = "quorumlock_fence_raises_total";
pub(super) const PLACES_KEPT: &str = "quorumlock_places_kept_total";
pub(super) const LOCKS_HELD: &str = "quorumlock_locks_held";
pub(super) const HOLD_DURATION: &str = "quorumlock_hold_duration_seconds";
pub(super) const WAITERS: &str = "quorumlock_waiters";
pub(super) const WAVES: &str = "quorumlock_watchdog_waves_total";
pub(super) const RENEWALS: &str = "quorumlock_renewals_total";
pub(super) const REPAIRS: &str = "quorumlock_repairs_total";
pub(super) const RENEWAL_LAG: &str = "quorumlock_renewal_lag_seconds";
pub(super) const LOSSES: &str = "quorumlock_losses_total";
pub(super) const NODE_CALL_DURATION: &str = "quorumlock_node_call_duration_seconds";
pub(super) const NODE_ERRORS: &str = "quorumlock_node_errors_total";
pub(super) const PUBSUB_RECONNECTS: &str = "quorumlock_pubsub_reconnects_total";
pub(super) const NODE_UP: &str = "quorumlock_node_up";

/// Every metric the crate records, in the order of docs/OBSERVABILITY.md's table.
pub(crate) const METRICS: &[Spec] = &[
    Spec {
        name: ACQUISITIONS,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &["outcome"],
        help: "Acquisitions (one per `acquire`, `lock`, `try_lock`, `lock_all`, ... call) by how they ended: acquired, contended (one try found it taken), timed_out (a wait ran out while it was taken), unavailable (too many nodes failed, or the validity ran out), cancelled (the future was dropped), error (anything else).",
    },
    Spec {
        name: ACQUIRE_ATTEMPTS,
        kind: Kind::Histogram,
        unit: Unit::Count,
        labels: &[],
        help: "Attempts (fan-outs of the acquire script) per acquisition, whatever its outcome.",
    },
    Spec {
        name: ACQUIRE_DURATION,
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        labels: &["outcome"],
        help: "Time from the request to its end (the guard, or the error), by outcome.",
    },
    Spec {
        name: WAIT_DURATION,
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        labels: &[],
        help: "Time an acquisition slept between two attempts (one sample per sleep).",
    },
    Spec {
        name: ROLLBACKS,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[],
        help: "Attempts that sent a rollback to the nodes that may hold a grant: a miss with answers still pending, a quorum that could not be kept, an attempt dropped halfway.",
    },
    Spec {
        name: FENCE_RAISES,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[],
        help: "Fence counters raised on a lagging node so that a quorum shows the token (one per node call).",
    },
    Spec {
        name: PLACES_KEPT,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[],
        help: "Waiters' places a batch of places kept on a quorum of nodes while their locks were held (`keep.lua`): each one a refresh that needed no attempt.",
    },
    Spec {
        name: LOCKS_HELD,
        kind: Kind::Gauge,
        unit: Unit::Count,
        labels: &[],
        help: "Holds alive now (a set counts one per name).",
    },
    Spec {
        name: HOLD_DURATION,
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        labels: &[],
        help: "Time from a hold's first attempt to its end: released, lost, or dropped.",
    },
    Spec {
        name: WAITERS,
        kind: Kind::Gauge,
        unit: Unit::Count,
        labels: &[],
        help: "Acquisitions waiting now: missed at least once and not ended yet.",
    },
    Spec {
        name: WAVES,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[],
        help: "Renewal waves the watchdog started (one pipeline per node each).",
    },
    Spec {
        name: RENEWALS,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[],
        help: "Holds a renewal wave confirmed on a quorum.",
    },
    Spec {
        name: REPAIRS,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &[],
        help: "Lock keys re-created on a node that had lost them while a quorum confirmed the hold.",
    },
    Spec {
        name: RENEWAL_LAG,
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        labels: &[],
        help: "How late a renewal wave started behind its schedule.",
    },
    Spec {
        name: LOSSES,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &["cause"],
        help: "Holds lost, by cause: expired (its validity ran out before a renewal confirmed it), gone (too many nodes said the key is missing or another's), no_quorum (renewal missed the quorum with no time left to retry), lease_ended (a fixed lease, or renewal stopped at max_hold, reached its end).",
    },
    Spec {
        name: NODE_CALL_DURATION,
        kind: Kind::Histogram,
        unit: Unit::Seconds,
        labels: &["node"],
        help: "Time from a call to a node to its answer (a reply or an error), per node.",
    },
    Spec {
        name: NODE_ERRORS,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &["node", "kind"],
        help: "Calls to a node that failed, by kind: timeout (no answer within the time its caller waits), connection, wrong_type, not_master, refused, server, not_replicated, superseded.",
    },
    Spec {
        name: PUBSUB_RECONNECTS,
        kind: Kind::Counter,
        unit: Unit::Count,
        labels: &["node"],
        help: "Pub/sub connections of the waiters opened again after the first, per node.",
    },
    Spec {
        name: NODE_UP,
        kind: Kind::Gauge,
        unit: Unit::Count,
        labels: &["node"],
        help: "1 while the node's last call was answered (a reply, or an error reply of the server), 0 after a connection error, a refusal or no answer.",
    },
];

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    Acquired,
    /// One try (a zero wait) found it taken.
    Contended,
    /// A wait ran out while it was taken.
    TimedOut,
    /// Too many nodes failed, or the validity ran out.
    Unavailable,
    /// The future was dropped.
    Cancelled,
    /// Anything else: bad input, a key of another type, a re-entry of a
    /// hold that is no longer valid.
    Error,
}

impl Outcome {
    #[cfg(feature = "metrics")]
    pub(super) const ALL: [Self; 6] = [
        Self::Acquired,
        Self::Contended,
        Self::TimedOut,
        Self::Unavailable,
        Self::Cancelled,
        Self::Error,
    ];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Acquired => "acquired",
            Self::Contended => "contended",
            Self::TimedOut => "timed_out",
            Self::Unavailable => "unavailable",
            Self::Cancelled => "cancelled",
            Self::Error => "error",
        }
    }

    /// The outcome of an acquisition that ended with `result`; `one_try`
    /// when it was asked not to wait.
    pub(crate) fn of<T>(result: &Result<T, Error>, one_try: bool) -> Self {
        match result {
            Ok(_) => Self::Acquired,
            Err(Error::Contended { .. }) if one_try => Self::Contended,
            Err(Error::Contended { .. }) => Self::TimedOut,
            Err(Error::Unavailable { .. } | Error::ValidityExhausted { .. }) => Self::Unavailable,
            Err(_) => Self::Error,
        }
    }
}

/// Why a hold was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cause {
    /// A renewed hold's validity ran out before a renewal confirmed it.
    Expired,
    /// Too many nodes said the key is missing or another's for a quorum
    /// to confirm it (forced, or lost by nodes restarted empty).
    Gone,
    /// Renewal missed the quorum (nodes failed) with no time left to retry.
    NoQuorum,
    /// A hold that was not renewed (a fixed lease, or renewal stopped at
    /// `max_hold`) reached the end of its validity.
    LeaseEnded,
}

impl Cause {
    #[cfg(feature = "metrics")]
    pub(super) const ALL: [Self; 4] = [Self::Expired, Self::Gone, Self::NoQuorum, Self::LeaseEnded];

    /// The label value.
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Expired => "expired",
            Self::Gone => "gone",
            Self::NoQuorum => "no_quorum",
            Self::LeaseEnded => "lease_ended",
        }
    }
}

/// The label values of node errors' kinds, by [`kind_index`].
pub(crate) const KINDS: [&str; 8] = [
    "timeout",
    "connection",
    "wrong_type",
    "not_master",
    "refused",
    "server",
    "not_replicated",
    "superseded",
];

/// Where a node error's kind is in [`KINDS`].
pub(crate) fn kind_index(kind: &NodeErrorKind) -> usize {
    match kind {
        NodeErrorKind::Timeout => 0,
        NodeErrorKind::Connection => 1,
        NodeErrorKind::WrongType => 2,
        NodeErrorKind::NotMaster => 3,
        NodeErrorKind::Refused => 4,
        NodeErrorKind::Server => 5,
        NodeErrorKind::NotReplicated => 6,
        NodeErrorKind::Superseded => 7,
    }
}
