//! What a run shares ([`Ctx`]): its log and parameters, its processes
//! ([`Proc`]: a manager each, with its clock, stall and link), the nodes,
//! the links, the holds seen so far and the waiting requests. The clients,
//! monitors and faults all act on it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::checker::{Log, Who};
use super::liveness::{Leave, Wants};
use super::net::{LinkCtl, NodeCtl};
use super::params::Params;
use crate::clock;
use crate::rng::up_to;
use crate::sync::locked;
use crate::LockManager;

/// One process: its manager, its stall state, its clock and its link to
/// all nodes.
pub(crate) struct Proc {
    pub(crate) manager: LockManager,
    /// Its suspends; its tasks run in it.
    pub(crate) clock: Arc<clock::test::Process>,
    /// The manager's client id (its watchdog pauses with the process).
    pub(crate) client_id: String,
    pub(crate) stalled_until: Mutex<Option<Instant>>,
    pub(crate) link: Arc<LinkCtl>,
}

impl Proc {
    /// Whether the process is stalled at `now`.
    pub(crate) fn stalled(&self, now: Instant) -> bool {
        locked(&self.stalled_until).is_some_and(|t| t > now)
    }

    /// Waits while the process is stalled.
    pub(crate) async fn gate(&self) {
        let until = *locked(&self.stalled_until);
        if let Some(t) = until {
            tokio::time::sleep_until(t).await;
        }
    }
}

/// Everything a run shares.
pub(crate) struct Ctx {
    pub(crate) log: Log,
    pub(crate) params: Params,
    pub(crate) procs: Vec<Proc>,
    pub(crate) nodes: Vec<Arc<NodeCtl>>,
    /// `[process][node]`.
    pub(crate) links: Vec<Vec<Arc<LinkCtl>>>,
    /// Holder ids to hold numbers, in order of first sight.
    holds: Mutex<HashMap<String, usize>>,
    /// Observers of the election numbered so far (election mode).
    observers: std::sync::atomic::AtomicUsize,
    pub(crate) wants: Arc<Wants>,
}

impl Ctx {
    pub(crate) fn new(
        log: Log,
        params: Params,
        procs: Vec<Proc>,
        nodes: Vec<Arc<NodeCtl>>,
        links: Vec<Vec<Arc<LinkCtl>>>,
    ) -> Self {
        Self {
            log,
            params,
            procs,
            nodes,
            links,
            holds: Mutex::default(),
            observers: std::sync::atomic::AtomicUsize::new(0),
            wants: Arc::default(),
        }
    }

    pub(crate) fn hold_no(&self, holder_id: &str) -> usize {
        let mut h = locked(&self.holds);
        let n = h.len();
        *h.entry(holder_id.to_owned()).or_insert(n)
    }

    /// A number for a new observer of the election.
    pub(crate) fn observer_no(&self) -> usize {
        self.observers
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn ms(&self, lo: u64, hi: u64) -> Duration {
        Duration::from_millis(lo + up_to(hi.saturating_sub(lo)))
    }

    /// Records a request of task `who` for `lock` until the guard drops.
    pub(crate) fn want(&self, who: Who, lock: usize, fair: bool, no_wait: bool) -> Leave {
        self.wants.enter((who.0, who.1), lock, fair, !no_wait)
    }
}
