//! The measures that span an acquisition: the acquisition itself (counted
//! as cancelled when dropped), its place among the waiters, each sleep.

#[cfg(feature = "metrics")]
use {
    super::{catalog::Outcome, Handles},
    metrics::{Gauge, Histogram},
    std::sync::{
        atomic::{AtomicU32, Ordering},
        Arc,
    },
    tokio::time::Instant,
};

use super::Metrics;
use crate::error::Error;

/// One acquisition's measures, from the request to its end
/// ([`Acquiring::finish`]); dropped before that (the future was dropped),
/// it counts as cancelled.
pub(crate) struct Acquiring {
    #[cfg(feature = "metrics")]
    pub(super) on: Option<AcquiringOn>,
}

#[cfg(feature = "metrics")]
pub(super) struct AcquiringOn {
    pub(super) handles: Arc<Handles>,
    pub(super) start: Instant,
    /// Shared by reference across awaits: an atomic, so the future stays
    /// `Send`.
    pub(super) attempts: AtomicU32,
    pub(super) one_try: bool,
    pub(super) done: bool,
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
    pub(super) on: Option<(Histogram, Instant)>,
}

#[cfg(feature = "metrics")]
impl Drop for Sleep {
    fn drop(&mut self) {
        if let Some((h, start)) = self.on.take() {
            h.record(start.elapsed());
        }
    }
}
