//! Metrics through the [`metrics`](https://docs.rs/metrics) facade, behind
//! the `metrics` cargo feature: what the coordinator counts and times.
//! Without the feature every function here is empty and inlined away, and
//! every type is empty, so call sites carry no `cfg`.
//!
//! The handles are registered once per manager, when it is built
//! ([`Metrics::register`]), with the recorder installed then (the global
//! one, or the building thread's local one): the recorder must be installed
//! before the manager is built. Background work (the watchdog, rollbacks,
//! late replies, the pub/sub tasks) records through the same handles on
//! whichever thread it runs, and no call looks a metric up by name.
//!
//! Labels are bounded: an outcome, a cause, an error kind, a node's
//! redacted address; never a lock name. [`METRICS`] lists every metric
//! (the README's table and the Grafana dashboard are checked against it).

// Without the feature the tables and labels are read by the tests only.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

use futures::future::BoxFuture;

use crate::error::{Error, NodeError, NodeErrorKind};

#[cfg(feature = "metrics")]
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
#[cfg(feature = "metrics")]
use std::sync::Arc;
#[cfg(feature = "metrics")]
use std::time::Duration;

#[cfg(feature = "metrics")]
use metrics::{Counter, Gauge, Histogram, Unit as MUnit};
#[cfg(feature = "metrics")]
use tokio::time::Instant;

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

const ACQUISITIONS: &str = "quorumlock_acquisitions_total";
const ACQUIRE_ATTEMPTS: &str = "quorumlock_acquire_attempts";
const ACQUIRE_DURATION: &str = "quorumlock_acquire_duration_seconds";
const WAIT_DURATION: &str = "quorumlock_wait_duration_seconds";
const ROLLBACKS: &str = "quorumlock_rollbacks_total";
const FENCE_RAISES: &str = "quorumlock_fence_raises_total";
const LOCKS_HELD: &str = "quorumlock_locks_held";
const HOLD_DURATION: &str = "quorumlock_hold_duration_seconds";
const WAITERS: &str = "quorumlock_waiters";
const WAVES: &str = "quorumlock_watchdog_waves_total";
const RENEWALS: &str = "quorumlock_renewals_total";
const REPAIRS: &str = "quorumlock_repairs_total";
const RENEWAL_LAG: &str = "quorumlock_renewal_lag_seconds";
const LOSSES: &str = "quorumlock_losses_total";
const NODE_CALL_DURATION: &str = "quorumlock_node_call_duration_seconds";
const NODE_ERRORS: &str = "quorumlock_node_errors_total";
const PUBSUB_RECONNECTS: &str = "quorumlock_pubsub_reconnects_total";
const NODE_UP: &str = "quorumlock_node_up";

/// Every metric the crate records, in the README's order.
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
        help: "Calls to a node that failed, by kind: timeout (no answer within the time its caller waits), connection, wrong_type, not_master, refused, server.",
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
    const ALL: [Self; 6] = [
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
    const ALL: [Self; 4] = [Self::Expired, Self::Gone, Self::NoQuorum, Self::LeaseEnded];

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
pub(crate) const KINDS: [&str; 6] = [
    "timeout",
    "connection",
    "wrong_type",
    "not_master",
    "refused",
    "server",
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
    }
}

/// The metrics of one manager: handles registered when it was built, or
/// nothing (without the feature, or for parts built without a manager).
#[derive(Clone, Default)]
pub(crate) struct Metrics {
    #[cfg(feature = "metrics")]
    on: Option<Arc<Handles>>,
}

/// A manager's handles.
#[cfg(feature = "metrics")]
struct Handles {
    acquisitions: [Counter; 6],
    acquire_duration: [Histogram; 6],
    acquire_attempts: Histogram,
    wait_duration: Histogram,
    rollbacks: Counter,
    fence_raises: Counter,
    locks_held: Gauge,
    hold_duration: Histogram,
    waiters: Gauge,
    waves: Counter,
    renewals: Counter,
    repairs: Counter,
    renewal_lag: Histogram,
    losses: [Counter; 4],
    nodes: Vec<Arc<NodeHandles>>,
}

/// One node's handles.
#[cfg(feature = "metrics")]
struct NodeHandles {
    call_duration: Histogram,
    errors: [Counter; 6],
    pubsub_reconnects: Counter,
    up: Gauge,
    /// What `up` was last set to: it is set again only when that changes,
    /// so that concurrent calls do not all write the gauge.
    is_up: AtomicBool,
}

#[cfg(feature = "metrics")]
impl NodeHandles {
    fn register(addr: &str, up: bool) -> Self {
        let node = addr.to_owned();
        let h = Self {
            call_duration: metrics::histogram!(NODE_CALL_DURATION, "node" => node.clone()),
            errors: KINDS
                .map(|k| metrics::counter!(NODE_ERRORS, "node" => node.clone(), "kind" => k)),
            pubsub_reconnects: metrics::counter!(PUBSUB_RECONNECTS, "node" => node.clone()),
            up: metrics::gauge!(NODE_UP, "node" => node),
            is_up: AtomicBool::new(up),
        };
        h.up.set(if up { 1.0 } else { 0.0 });
        h
    }

    /// Whether the node answers, set on the gauge when it changed.
    fn set_up(&self, up: bool) {
        if self.is_up.load(Ordering::Relaxed) != up {
            self.is_up.store(up, Ordering::Relaxed);
            self.up.set(if up { 1.0 } else { 0.0 });
        }
    }

    /// A call answered with `r` after `took`.
    fn answered<T>(&self, r: &Result<T, NodeError>, took: Duration) {
        self.call_duration.record(took);
        match r {
            Ok(_) => self.set_up(true),
            Err(e) => {
                self.failed(&e.kind);
                // An error reply comes from a server that answers.
                self.set_up(matches!(
                    e.kind,
                    NodeErrorKind::WrongType | NodeErrorKind::Server
                ));
            }
        }
    }

    fn failed(&self, kind: &NodeErrorKind) {
        if let Some(c) = self.errors.get(kind_index(kind)) {
            c.increment(1);
        }
    }
}

/// Times one call to a node. Dropped before its answer once its caller's
/// limit has passed, it counts a timeout; dropped sooner (the outcome was
/// decided without it, or the caller was dropped), it counts nothing.
#[cfg(feature = "metrics")]
struct CallWatch {
    node: Arc<NodeHandles>,
    start: Instant,
    limit: Duration,
    answered: bool,
}

#[cfg(feature = "metrics")]
impl Drop for CallWatch {
    fn drop(&mut self) {
        if !self.answered && self.start.elapsed() >= self.limit {
            self.node.failed(&NodeErrorKind::Timeout);
            self.node.set_up(false);
        }
    }
}

#[cfg(feature = "metrics")]
fn describe() {
    for m in METRICS {
        let unit = match m.unit {
            Unit::Count => MUnit::Count,
            Unit::Seconds => MUnit::Seconds,
        };
        match m.kind {
            Kind::Counter => metrics::describe_counter!(m.name, unit, m.help),
            Kind::Gauge => metrics::describe_gauge!(m.name, unit, m.help),
            Kind::Histogram => metrics::describe_histogram!(m.name, unit, m.help),
        }
    }
}

impl Metrics {
    /// Describes every metric and registers the handles of a manager over
    /// nodes at `addrs` (redacted), with the recorder installed now; node
    /// `i` starts up when `up[i]` (it answered at build).
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn register(addrs: &[&str], up: &[bool]) -> Self {
        #[cfg(feature = "metrics")]
        {
            describe();
            let by_outcome = |name: &'static str| {
                Outcome::ALL.map(|o| metrics::counter!(name, "outcome" => o.label()))
            };
            let handles = Handles {
                acquisitions: by_outcome(ACQUISITIONS),
                acquire_duration: Outcome::ALL
                    .map(|o| metrics::histogram!(ACQUIRE_DURATION, "outcome" => o.label())),
                acquire_attempts: metrics::histogram!(ACQUIRE_ATTEMPTS),
                wait_duration: metrics::histogram!(WAIT_DURATION),
                rollbacks: metrics::counter!(ROLLBACKS),
                fence_raises: metrics::counter!(FENCE_RAISES),
                locks_held: metrics::gauge!(LOCKS_HELD),
                hold_duration: metrics::histogram!(HOLD_DURATION),
                waiters: metrics::gauge!(WAITERS),
                waves: metrics::counter!(WAVES),
                renewals: metrics::counter!(RENEWALS),
                repairs: metrics::counter!(REPAIRS),
                renewal_lag: metrics::histogram!(RENEWAL_LAG),
                losses: Cause::ALL.map(|c| metrics::counter!(LOSSES, "cause" => c.label())),
                nodes: addrs
                    .iter()
                    .enumerate()
                    .map(|(i, a)| {
                        Arc::new(NodeHandles::register(
                            a,
                            up.get(i).copied().unwrap_or(false),
                        ))
                    })
                    .collect(),
            };
            Self {
                on: Some(Arc::new(handles)),
            }
        }
        #[cfg(not(feature = "metrics"))]
        Self {}
    }

    /// Whether anything is recorded (false without the feature: code that
    /// only prepares a record is left out).
    #[inline]
    pub(crate) fn on(&self) -> bool {
        #[cfg(feature = "metrics")]
        return self.on.is_some();
        #[cfg(not(feature = "metrics"))]
        false
    }

    /// An acquisition begins; `one_try` when it was asked not to wait.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn acquiring(&self, one_try: bool) -> Acquiring {
        Acquiring {
            #[cfg(feature = "metrics")]
            on: self.on.clone().map(|h| AcquiringOn {
                handles: h,
                start: Instant::now(),
                attempts: AtomicU32::new(0),
                one_try,
                done: false,
            }),
        }
    }

    /// An attempt's grants are being rolled back.
    #[inline]
    pub(crate) fn rolled_back(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            h.rollbacks.increment(1);
        }
    }

    /// Fence counters are being raised on `nodes` lagging nodes.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn fence_raised(&self, nodes: usize) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            h.fence_raises.increment(nodes as u64);
        }
    }

    /// An acquisition sleeps between two attempts until the value
    /// returned is dropped.
    #[inline]
    pub(crate) fn sleep(&self) -> Sleep {
        Sleep {
            #[cfg(feature = "metrics")]
            on: self
                .on
                .as_ref()
                .map(|h| (h.wait_duration.clone(), Instant::now())),
        }
    }

    /// A hold began.
    #[inline]
    pub(crate) fn hold_began(&self) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            h.locks_held.increment(1.0);
        }
    }

    /// A hold that began at `began` (on the validity clock) ended now:
    /// released, lost or dropped.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn hold_ended(&self, began: tokio::time::Instant) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            h.locks_held.decrement(1.0);
            h.hold_duration
                .record(crate::clock::now().saturating_duration_since(began));
        }
    }

    /// A hold was lost.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn lost(&self, cause: Cause) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            let i = Cause::ALL.iter().position(|c| *c == cause).unwrap_or(0);
            if let Some(c) = h.losses.get(i) {
                c.increment(1);
            }
        }
    }

    /// A renewal wave due at `due` (on the monotonic clock) starts now:
    /// its lag is how late.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn wave_started(&self, due: tokio::time::Instant) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            h.waves.increment(1);
            h.renewal_lag
                .record(crate::clock::monotonic().saturating_duration_since(due));
        }
    }

    /// A wave confirmed `renewed` holds on a quorum and re-created
    /// `repaired` keys.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn renewed(&self, renewed: u64, repaired: u64) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            h.renewals.increment(renewed);
            h.repairs.increment(repaired);
        }
    }

    /// Node `i`'s pub/sub connection was opened again.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn pubsub_reconnected(&self, i: usize) {
        #[cfg(feature = "metrics")]
        if let Some(n) = self.on.as_ref().and_then(|h| h.nodes.get(i)) {
            n.pubsub_reconnects.increment(1);
        }
    }

    /// `answer`, a call to node `i` that its caller waits for `limit` at
    /// most, timed and counted: its latency, its error's kind (a timeout
    /// when it is dropped unanswered after `limit`), whether the node
    /// answers. Unchanged without the feature.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn node_call<T: Send + 'static>(
        &self,
        i: usize,
        limit: std::time::Duration,
        answer: BoxFuture<'static, Result<T, NodeError>>,
    ) -> BoxFuture<'static, Result<T, NodeError>> {
        #[cfg(feature = "metrics")]
        if let Some(n) = self.on.as_ref().and_then(|h| h.nodes.get(i)) {
            let mut watch = CallWatch {
                node: Arc::clone(n),
                start: Instant::now(),
                limit,
                answered: false,
            };
            return Box::pin(async move {
                let r = answer.await;
                watch.answered = true;
                watch.node.answered(&r, watch.start.elapsed());
                r
            });
        }
        answer
    }
}

/// One acquisition's measures, from the request to its end
/// ([`Acquiring::finish`]); dropped before that (the future was dropped),
/// it counts as cancelled.
pub(crate) struct Acquiring {
    #[cfg(feature = "metrics")]
    on: Option<AcquiringOn>,
}

#[cfg(feature = "metrics")]
struct AcquiringOn {
    handles: Arc<Handles>,
    start: Instant,
    /// Shared by reference across awaits: an atomic, so the future stays
    /// `Send`.
    attempts: AtomicU32,
    one_try: bool,
    done: bool,
}

#[cfg(feature = "metrics")]
impl AcquiringOn {
    fn end(&mut self, outcome: Outcome) {
        self.done = true;
        let i = Outcome::ALL.iter().position(|o| *o == outcome).unwrap_or(0);
        let h = &self.handles;
        if let Some(c) = h.acquisitions.get(i) {
            c.increment(1);
        }
        if let Some(d) = h.acquire_duration.get(i) {
            d.record(self.start.elapsed());
        }
        h.acquire_attempts
            .record(f64::from(self.attempts.load(Ordering::Relaxed)));
    }
}

impl Acquiring {
    /// An attempt is made (a fresh fan-out, or a re-entry's).
    #[inline]
    pub(crate) fn attempt(&self) {
        #[cfg(feature = "metrics")]
        if let Some(a) = &self.on {
            a.attempts.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The acquisition ended with `result`, which is handed back.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_mut))]
    pub(crate) fn finish<T>(mut self, result: Result<T, Error>) -> Result<T, Error> {
        #[cfg(feature = "metrics")]
        if let Some(a) = &mut self.on {
            let outcome = Outcome::of(&result, a.one_try);
            a.end(outcome);
        }
        result
    }
}

#[cfg(feature = "metrics")]
impl Drop for Acquiring {
    fn drop(&mut self) {
        if let Some(a) = &mut self.on {
            if !a.done {
                a.end(Outcome::Cancelled);
            }
        }
    }
}

/// One acquisition among the waiters (the `quorumlock_waiters` gauge), from
/// its first sleep ([`Waiting::begin`]) until dropped.
#[derive(Default)]
pub(crate) struct Waiting {
    #[cfg(feature = "metrics")]
    gauge: Option<Gauge>,
}

impl Waiting {
    /// Counts the acquisition among the waiters, once.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn begin(&mut self, metrics: &Metrics) {
        #[cfg(feature = "metrics")]
        if self.gauge.is_none() {
            if let Some(h) = &metrics.on {
                h.waiters.increment(1.0);
                self.gauge = Some(h.waiters.clone());
            }
        }
    }
}

#[cfg(feature = "metrics")]
impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(g) = self.gauge.take() {
            g.decrement(1.0);
        }
    }
}

/// One sleep of an acquisition between two attempts, timed until dropped.
pub(crate) struct Sleep {
    #[cfg(feature = "metrics")]
    on: Option<(Histogram, Instant)>,
}

#[cfg(feature = "metrics")]
impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some((h, start)) = self.on.take() {
            h.record(start.elapsed());
        }
    }
}
