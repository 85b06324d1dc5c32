//! The per-node measures: each node's handles, and the [`Meter`] of one
//! fan-out, which times every call where its reply lands (one clock read
//! per reply; nothing is wrapped around the call itself).

#[cfg(feature = "metrics")]
use {
    super::catalog::{
        kind_index, KINDS, NODE_CALL_DURATION, NODE_ERRORS, NODE_UP, PUBSUB_RECONNECTS,
    },
    super::Handles,
    crate::error::NodeErrorKind,
    metrics::{Counter, Gauge, Histogram},
    std::sync::{
        atomic::{AtomicBool, Ordering},
        Arc,
    },
};

use tokio::time::Instant;

use crate::error::NodeError;

/// One node's handles.
#[cfg(feature = "metrics")]
pub(super) struct NodeHandles {
    call_duration: Histogram,
    errors: [Counter; KINDS.len()],
    pub(super) pubsub_reconnects: Counter,
    up: Gauge,
    /// What `up` was last set to: it is set again only when that changes,
    /// so that concurrent calls do not all write the gauge.
    is_up: AtomicBool,
}

#[cfg(feature = "metrics")]
impl NodeHandles {
    pub(super) fn register(addr: &str, up: bool) -> Self {
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

    fn failed(&self, kind: &NodeErrorKind) {
        if let Some(c) = self.errors.get(kind_index(kind)) {
            c.increment(1);
        }
    }
}

/// The measures of calls sent together at `start` (one fan-out, or one
/// call sent again after a node's pause): each call's latency, its error's
/// kind, a timeout for a call left unanswered past its limit, whether the
/// node answers. Empty without the feature or a recorder.
#[derive(Default)]
pub(crate) struct Meter {
    #[cfg(feature = "metrics")]
    pub(super) on: Option<(Arc<Handles>, Instant)>,
}

impl Meter {
    /// The call to node `i` answered `r` at `now`, read from the clock
    /// when `None` (and kept there, for the other replies seen at once).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn answered<T>(
        &self,
        i: usize,
        r: &Result<T, NodeError>,
        now: &mut Option<Instant>,
    ) {
        #[cfg(feature = "metrics")]
        if let Some((h, start)) = &self.on {
            if let Some(n) = h.nodes.get(i) {
                let now = *now.get_or_insert_with(Instant::now);
                n.call_duration
                    .record(now.saturating_duration_since(*start));
                match r {
                    Ok(_) => n.set_up(true),
                    Err(e) => {
                        n.failed(&e.kind);
                        // An error reply comes from a server that answers.
                        n.set_up(matches!(
                            e.kind,
                            NodeErrorKind::WrongType | NodeErrorKind::Server
                        ));
                    }
                }
            }
        }
    }

    /// The calls to the nodes `unanswered` names are given up now, with no
    /// answer: timeouts if their `deadline` has passed; nothing if not (the
    /// outcome was decided without them).
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn given_up(&self, deadline: Instant, unanswered: impl Iterator<Item = usize>) {
        #[cfg(feature = "metrics")]
        if self.on.is_some() && Instant::now() >= deadline {
            for i in unanswered {
                self.unanswered(i);
            }
        }
    }

    /// The call to node `i` was left unanswered after the time its caller
    /// waits for it: a timeout.
    #[inline]
    #[cfg_attr(not(feature = "metrics"), allow(unused_variables))]
    pub(crate) fn unanswered(&self, i: usize) {
        #[cfg(feature = "metrics")]
        if let Some(n) = self.on.as_ref().and_then(|(h, _)| h.nodes.get(i)) {
            n.failed(&NodeErrorKind::Timeout);
            n.set_up(false);
        }
    }
}
