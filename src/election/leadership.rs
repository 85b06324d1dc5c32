//! One won campaign: [`Leadership`], its term and proclaimed values, and
//! the keeper that writes its record back on members that lost it (a
//! restart, a failover) while the watchdog repairs the lock there.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use crate::clock;
use crate::error::Error;
use crate::guard::{LockGuard, LossSignal};
use crate::keys::Keys;
use crate::leader::{self, Leader};
use crate::members::Members;
use crate::node::Record;

/// Pause between two tries of a campaign's first proclaim.
const RETRY: Duration = Duration::from_millis(20);

/// Writes a campaign's first record on a quorum, trying again after an
/// outage while the hold is valid and, for a bounded campaign, until its
/// `deadline` (on the validity clock, `clock::now`).
pub(super) async fn establish(
    nodes: &Arc<Members>,
    keys: &Arc<Keys>,
    guard: &LockGuard,
    record: &Record,
    deadline: Option<tokio::time::Instant>,
) -> Result<(), Error> {
    loop {
        let timeout = nodes.config.node_timeout;
        let e = match leader::proclaim(nodes, keys, record, timeout).await {
            Ok(()) => return Ok(()),
            Err(e) => e,
        };
        // Only an outage is worth another try (a later leader, another
        // type at the record key, a hold gone are final), and only while
        // the hold is valid.
        let until = tokio::time::Instant::from_std(guard.valid_until());
        let late = deadline.is_some_and(|d| clock::now() + RETRY >= d);
        if !e.is_retryable()
            || !guard.is_held()
            || late
            || tokio::time::Instant::now() + RETRY >= until
        {
            return Err(e);
        }
        clock::sleep(RETRY).await;
    }
}

/// What a leadership's handle and its keeper share.
struct State {
    nodes: Arc<Members>,
    keys: Arc<Keys>,
    /// Every value proclaimed, the current one last: `value()` lends them.
    values: boxcar::Vec<Arc<str>>,
    /// The record as last proclaimed on a quorum.
    current: std::sync::Mutex<Record>,
    /// The revision the next proclaim writes (every try takes a new one).
    next_rev: std::sync::atomic::AtomicU64,
    /// One proclaim at a time (the keeper's included).
    proclaiming: tokio::sync::Mutex<()>,
}

impl State {
    fn current(&self) -> Record {
        crate::sync::locked(&self.current).clone()
    }
}

/// Aborts the keeper when the leadership goes.
struct Keeper(JoinHandle<()>);

impl Drop for Keeper {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// This process leads an election: won by
/// [`Election::campaign`](crate::Election::campaign), kept by the
/// manager's watchdog until resigned, dropped or lost.
///
/// Dropping it resigns in the background (the lock is released at once,
/// as a dropped [`LockGuard`] is).
#[must_use = "dropping the leadership resigns in the background at once"]
pub struct Leadership {
    guard: LockGuard,
    state: Arc<State>,
    keeper: Option<Keeper>,
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("election", &self.state.keys.name)
            .field("term", &self.term())
            .field("value", &self.value())
            .field("is_leader", &self.is_leader())
            .finish_non_exhaustive()
    }
}

impl Leadership {
    pub(super) fn new(
        guard: LockGuard,
        nodes: &Arc<Members>,
        keys: &Arc<Keys>,
        record: Record,
    ) -> Self {
        let values = boxcar::Vec::new();
        values.push(Arc::clone(&record.value));
        let state = Arc::new(State {
            nodes: Arc::clone(nodes),
            keys: Arc::clone(keys),
            values,
            next_rev: (record.rev + 1).into(),
            current: record.into(),
            proclaiming: tokio::sync::Mutex::new(()),
        });
        let keeper = tokio::runtime::Handle::try_current()
            .ok()
            .map(|h| Keeper(h.spawn(clock::inherit(keep(Arc::clone(&state), guard.signal())))));
        Self {
            guard,
            state,
            keeper,
        }
    }

    /// The term: the fencing token of this leadership's hold of the
    /// election's lock. Terms of one election strictly increase, across
    /// processes; pass it to what the leader writes to, which rejects a
    /// lower one.
    #[must_use]
    pub fn term(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// What this leader proclaimed last (its campaign's value until
    /// [`Leadership::proclaim`] succeeds).
    #[must_use]
    pub fn value(&self) -> &str {
        let n = self.state.values.count();
        self.state
            .values
            .get(n.saturating_sub(1))
            .map_or("", |v| &**v)
    }

    /// Whether this process still leads: its hold is valid (on the
    /// client's clock, suspend included, drift subtracted). Two
    /// leaderships of one election are never both leaders at one instant.
    #[must_use]
    pub fn is_leader(&self) -> bool {
        #[cfg(test)]
        if crate::hooks::mutation::active(crate::hooks::mutation::Mutation::LeaderIgnoresExpiry) {
            return self.guard.is_held_unchecked();
        }
        self.guard.is_held()
    }

    /// Until when the leadership is valid, if not renewed before.
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        self.guard.valid_until()
    }

    /// The holder id of the leadership's hold (what [`Leader::holder_id`]
    /// reports).
    #[must_use]
    pub fn holder_id(&self) -> &str {
        self.guard.holder_id()
    }

    /// The election's lock name (`election:<name>`).
    #[must_use]
    pub fn lock_name(&self) -> &str {
        self.guard.name()
    }

    /// This leadership as observers see it once a quorum has its record.
    #[must_use]
    pub fn leader(&self) -> Leader {
        Leader::from_record(&self.state.current())
    }

    /// Resolves when the leadership is lost (its hold could not be
    /// renewed on a quorum in time, or it was forced); never after a
    /// resignation.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only waits.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Changes the value observers read, keeping the term: returns once a
    /// quorum of members have it. The values a leadership proclaimed stay
    /// in memory until it is dropped ([`Leadership::value`] lends the
    /// last one).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty value or one over
    /// [`MAX_LEADER_VALUE`](crate::MAX_LEADER_VALUE) bytes;
    /// [`Error::Lost`] when this process no longer leads;
    /// [`Error::Unavailable`] when fewer than a quorum of members took the
    /// value (it may have reached some: readers see the old value, or
    /// none, until a later proclaim succeeds).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may leave the value on some members only
    /// (readers see the old value until a quorum has a new one); the
    /// leadership is unchanged.
    pub async fn proclaim(&self, value: impl Into<String>) -> Result<(), Error> {
        let value = value.into();
        super::check_value(&value)?;
        let _one = self.state.proclaiming.lock().await;
        if !self.is_leader() {
            return Err(Error::Lost {
                name: self.lock_name().to_owned(),
            });
        }
        let rev = self
            .state
            .next_rev
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let value: Arc<str> = value.into();
        let record = Record {
            holder: self.holder_id().into(),
            term: self.term(),
            rev,
            value: Arc::clone(&value),
        };
        let s = &self.state;
        leader::proclaim(&s.nodes, &s.keys, &record, s.nodes.config.node_timeout).await?;
        s.values.push(value);
        *crate::sync::locked(&s.current) = record;
        Ok(())
    }

    /// Steps down: releases the election's lock, so that the next
    /// candidate in line leads at once (woken by the release message).
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`Error::Unavailable`] when fewer than a
    /// quorum of members released (the rest expire with the lease), or
    /// an error saying the leadership was already lost.
    ///
    /// # Cancel safety
    ///
    /// A dropped resignation still resigns, in the background.
    pub async fn resign(self) -> Result<(), Error> {
        let Self { guard, keeper, .. } = self;
        drop(keeper);
        guard.release().await
    }

    /// Runs `f` while this process leads, then resigns: as
    /// [`LockGuard::run`], `f` gets a signal that fires when the
    /// leadership is lost, and is dropped no later than its validity ends.
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] when the leadership is lost before `f` returns.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `f` and resigns in the background.
    pub async fn run<F, Fut, T>(self, f: F) -> Result<T, Error>
    where
        F: FnOnce(LossSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let Self { guard, keeper, .. } = self;
        let out = guard.run(f).await;
        drop(keeper);
        out
    }
}

/// Writes the current record again every renew interval while the
/// leadership lives: a member that lost it (restarted empty, failed over)
/// while the watchdog repaired the lock there agrees again. A write that
/// changes nothing publishes nothing.
async fn keep(state: Arc<State>, mut signal: LossSignal) {
    let every = state.nodes.config.renew_interval;
    loop {
        tokio::select! {
            biased;
            () = signal.fired() => return,
            () = clock::sleep(every) => {}
        }
        let _one = state.proclaiming.lock().await;
        let record = state.current();
        let timeout = state.nodes.config.node_timeout;
        let _ = leader::proclaim(&state.nodes, &state.keys, &record, timeout).await;
    }
}
