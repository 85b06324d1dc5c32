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
//! (docs/OBSERVABILITY.md's table and the Grafana dashboard are checked against it).

// Without the feature the tables and labels are read by the tests only.
#![cfg_attr(not(feature = "metrics"), allow(dead_code))]

mod catalog;
mod guards;
mod meter;

pub(crate) use self::catalog::*;
#[cfg(feature = "metrics")]
use self::catalog::{
    ACQUIRE_ATTEMPTS, ACQUIRE_DURATION, ACQUISITIONS, FENCE_RAISES, HOLD_DURATION, LOCKS_HELD,
    LOSSES, PLACES_KEPT, RENEWALS, RENEWAL_LAG, REPAIRS, ROLLBACKS, WAITERS, WAIT_DURATION, WAVES,
};
#[cfg(feature = "metrics")]
use self::guards::AcquiringOn;
pub(crate) use self::guards::{Acquiring, Sleep, Waiting};
pub(crate) use self::meter::Meter;
#[cfg(feature = "metrics")]
use self::meter::NodeHandles;

#[cfg(feature = "metrics")]
use {
    metrics::{Counter, Gauge, Histogram, Unit as MUnit},
    std::sync::{atomic::AtomicU32, Arc},
    tokio::time::Instant,
};

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
    places_kept: Counter,
    locks_held: Gauge,
    hold_duration: Histogram,
    waiters: Gauge,
    waves: Counter,
    renewals: Counter,
    repairs: Counter,
    renewal_lag: Histogram,
    losses: [Counter; 4],
    nodes: Vec<NodeHandles>,
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
                places_kept: metrics::counter!(PLACES_KEPT),
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
                    .map(|(i, a)| NodeHandles::register(a, up.get(i).copied().unwrap_or(false)))
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

    /// A batch of places kept `n` waiters' places without an attempt.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn places_kept(&self, n: usize) {
        #[cfg(feature = "metrics")]
        if let Some(h) = &self.on {
            h.places_kept.increment(n as u64);
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

    /// The meter of calls sent at `start` (see [`Meter`]).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn meter(&self, start: tokio::time::Instant) -> Meter {
        Meter {
            #[cfg(feature = "metrics")]
            on: self.on.clone().map(|h| (h, start)),
        }
    }
}
