//! A counting semaphore over the members: `P` permit slots, each an
//! ordinary quorum lock (`<prefix>{semaphore:<name>}:permit:<i>`), a
//! permit being any one slot held.
//!
//! Why slots and not a counter: a counter per member granting a permit
//! where a quorum counts one more holder is safe only when
//! `(P + 1)·q > N·P` (three members, two permits, a majority: holders
//! granted on {A,B}, {B,C} and {A,C} leave every member counting 2 while
//! 3 permits are out). A slot is a lock, so at most one holder per slot
//! is valid at a time, under the lock's assumptions, for every `P` and
//! every quorum with `2q > N`: at most `P` permits.
//!
//! An acquisition tries one slot chosen at random among those this
//! manager does not hold (one fan-out while most permits are free); after
//! a miss it reads every slot on every member (`scripts/permits.lua`, one
//! fan-out) and tries one free on a quorum; when none is, it waits on the
//! semaphore's release channel, which every slot's release publishes on,
//! or for the earliest slot's expiry (an expiry publishes nothing).
//! Within a manager, a release rings one waiter, and a waiter that wins
//! rings the next, so one message wakes one waiter per freed permit.
//!
//! The permit count is recorded on the members (`<family>:permits`) by the
//! first acquisition that finds none, and checked at the first
//! acquisition of each name and count in a manager (one read of the
//! slots): two counts for one name are an error, never a silent
//! over-admission.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::acquire::Wait;
use crate::clock;
use crate::error::{Error, NodeErrorKind, NodeFailure};
use crate::keys::{check_name, Keys};
use crate::node::SlotsSeen;
use crate::owner::Owner;
use crate::quorum::{slots_view, Leg, SlotsView};
use crate::request::fresh;
use crate::rng::{jitter, up_to};
use crate::shared::LockManager;
use crate::sync::locked;
use crate::wait::Waiter;

mod permit;

pub use self::permit::Permit;
use self::permit::Slot;

/// The most permits one semaphore may have: each is a slot read by the
/// acquisitions that miss (one key per slot in one script call).
pub const MAX_PERMITS: u32 = 4096;

/// A counting semaphore of `P` permits over the manager's members, from
/// [`LockManager::semaphore`]. Cheap to clone; clones share the slots this
/// manager holds and the count check.
///
/// Permits are counted, not owned: every [`Semaphore::acquire`] takes one
/// more permit, whichever task asks (no re-entry). Each [`Permit`] is a
/// lease renewed by the manager's watchdog, lost by its
/// [`Permit::valid_until`] like a lock, and freed by expiry when its
/// process dies.
#[derive(Clone)]
pub struct Semaphore {
    shared: Arc<Shared>,
}

struct Shared {
    manager: LockManager,
    name: Arc<str>,
    permits: u32,
    /// The members' recorded count was found equal to ours.
    checked: AtomicBool,
    /// The slots this manager holds (through any clone).
    held: Mutex<HashSet<u32>>,
}

impl std::fmt::Debug for Semaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Semaphore")
            .field("name", &self.shared.name)
            .field("permits", &self.shared.permits)
            .finish_non_exhaustive()
    }
}

impl Semaphore {
    /// Checks the name, the count and the manager's quorum.
    pub(crate) fn new(manager: &LockManager, name: String, permits: u32) -> Result<Self, Error> {
        check_name(&name).map_err(|e| match e {
            Error::InvalidInput { reason, .. } => Error::invalid("semaphore name", reason),
            other => other,
        })?;
        if permits == 0 || permits > MAX_PERMITS {
            return Err(Error::invalid(
                "permits",
                format!("{permits} is not between 1 and {MAX_PERMITS}"),
            ));
        }
        let nodes = &manager.inner.nodes;
        if !nodes.config.quorum.is_exclusive(nodes.len()) {
            return Err(Error::UnsafeQuorum {
                primitive: "semaphore",
                required: nodes.required(),
                nodes: nodes.len(),
            });
        }
        let name: Arc<str> = name.into();
        let checked = locked(&manager.inner.semaphore_counts).get(&name) == Some(&permits);
        Ok(Self {
            shared: Arc::new(Shared {
                manager: manager.clone(),
                name,
                permits,
                checked: AtomicBool::new(checked),
                held: Mutex::new(HashSet::new()),
            }),
        })
    }

    /// The semaphore's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many permits it has.
    #[must_use]
    pub fn permits(&self) -> u32 {
        self.shared.permits
    }

    /// Waits for a permit, as long as it takes.
    ///
    /// # Errors
    ///
    /// [`Error::PermitsMismatch`] when the members record another count for
    /// this name; [`Error::WrongType`] when a key of the semaphore holds
    /// another type; [`Error::Overloaded`] when the manager renews as many
    /// holds as it can keep valid. Contention and outages are waited out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it rolls back an attempt in flight (in the
    /// background, as a dropped lock acquisition does) and leaves the
    /// waiters; a permit won but not yet returned is released.
    pub async fn acquire(&self) -> Result<Permit, Error> {
        self.take(Wait::Forever).await
    }

    /// [`Semaphore::acquire`], giving up after `wait` (`Duration::ZERO`: a
    /// single try, plus the slots' read after a miss).
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] when every permit stayed taken, or
    /// [`Error::Unavailable`] when too few members answered, once `wait`
    /// has passed; the rest as [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// As [`Semaphore::acquire`].
    pub async fn try_acquire(&self, wait: Duration) -> Result<Permit, Error> {
        self.take(Wait::Up(wait)).await
    }

    /// How many permits could be taken now: the slots free on at least a
    /// quorum of the members that answered (a permit being released or
    /// expiring counts as taken until it is gone from a quorum's view).
    ///
    /// # Errors
    ///
    /// [`Error::Unavailable`] when fewer than a quorum answered;
    /// [`Error::PermitsMismatch`] and [`Error::WrongType`] as
    /// [`Semaphore::acquire`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads (and records the count where none is).
    pub async fn available(&self) -> Result<u32, Error> {
        let view = self.scan(false).await?;
        Ok(u32::try_from(view.free.len()).unwrap_or(u32::MAX))
    }

    fn keys(&self, slot: u32) -> Arc<Keys> {
        let prefix = &self.shared.manager.inner.nodes.config.key_prefix;
        Arc::new(Keys::permit(prefix, &self.shared.name, slot))
    }

    /// Reads every slot on every member and checks the count they record:
    /// until all answered or the node timeout, or, for an acquisition
    /// (`early`), as soon as the answers show a slot free on a quorum (a
    /// silent member then costs no wait).
    async fn scan(&self, early: bool) -> Result<SlotsView, Error> {
        let nodes = &self.shared.manager.inner.nodes;
        let (keys, count) = (self.keys(0), self.shared.permits);
        let required = nodes.required();
        let mut fan = nodes.fan_out(nodes.config.node_timeout, |i| {
            Leg::Call(nodes.node(i).permits(&keys, count))
        });
        let view_of = |replies: &[Option<Result<SlotsSeen, _>>]| {
            let seen: Vec<Option<&SlotsSeen>> = replies
                .iter()
                .map(|r| r.as_ref().and_then(|r| r.as_ref().ok()))
                .collect();
            slots_view(&seen, count, required)
        };
        fan.until(|f| {
            early && {
                let v = view_of(f.replies());
                !v.free.is_empty() && v.other_count.is_none()
            }
        })
        .await;
        let replies = fan.replies();
        let view = view_of(replies);
        let failures: Vec<NodeFailure> = replies
            .iter()
            .enumerate()
            .filter_map(|(i, r)| match r {
                Some(Err(e)) => Some(nodes.failure(i, e)),
                _ => None,
            })
            .collect();
        let name = self.shared.name.to_string();
        if failures.iter().any(|f| f.kind == NodeErrorKind::WrongType) {
            return Err(Error::WrongType { name, failures });
        }
        if let Some(recorded) = view.other_count {
            let (family, _) = keys.family_parts("");
            return Err(Error::PermitsMismatch {
                name,
                permits: count,
                recorded,
                key: format!("{family}:permits"),
            });
        }
        if view.answered < required {
            return Err(Error::Unavailable {
                name,
                failures,
                required,
                granted: 0,
            });
        }
        // Checked once a read waited for every member (those that could
        // answer did), or all answered.
        if !early || view.answered == nodes.len() {
            self.shared.checked.store(true, Ordering::Release);
            let mut counts = locked(&self.shared.manager.inner.semaphore_counts);
            counts.insert(Arc::clone(&self.shared.name), count);
        }
        Ok(view)
    }

    /// A slot to try: one of `free` (a read's candidates) not held here,
    /// or, without a read, any slot not held here; at random.
    fn choose(&self, free: Option<&mut Vec<u32>>) -> Option<u32> {
        let held = locked(&self.shared.held);
        match free {
            Some(free) => {
                free.retain(|s| !held.contains(s));
                if free.is_empty() {
                    return None;
                }
                let at = random_index(free.len());
                Some(free.swap_remove(at))
            }
            None => {
                let p = self.shared.permits;
                let left = usize::try_from(p).unwrap_or(usize::MAX) - held.len().min(p as usize);
                if left == 0 {
                    return None;
                }
                // The k-th slot not held here.
                let k = random_index(left);
                (0..p).filter(|s| !held.contains(s)).nth(k)
            }
        }
    }

    async fn take(&self, wait: Wait) -> Result<Permit, Error> {
        let inner = &self.shared.manager.inner;
        let nodes = &inner.nodes;
        let deadline = match wait {
            Wait::Forever => None,
            Wait::Up(w) => clock::now().checked_add(w),
        };
        let backoff = nodes.config.backoff;
        let owner = Owner::explicit(&nodes.client_id);
        let owner_id = owner.shared_id();
        let mut last: Option<Error> = None;
        // Until the count is checked, read first: the read checks it (an
        // outage is waited out like any other, below).
        let mut free: Option<Vec<u32>> = if self.shared.checked.load(Ordering::Acquire) {
            None
        } else {
            match self.scan(false).await {
                Ok(view) => Some(view.free),
                Err(e) if e.is_retryable() => {
                    last = Some(e);
                    Some(Vec::new())
                }
                Err(e) => return Err(e),
            }
        };
        let mut bell: Option<Waiter> = None;
        let mut misses = 0u32;
        // Misses on slots a read found free, since the last wait.
        let mut raced = 0u32;
        loop {
            if let Some(slot) = self.choose(free.as_mut()) {
                if let Some(b) = bell.as_mut() {
                    b.mark();
                }
                let keys = self.keys(slot);
                let attempt_owner = Owner::explicit(&nodes.client_id);
                match fresh(
                    &self.shared.manager,
                    &keys,
                    &attempt_owner,
                    Wait::Up(Duration::ZERO),
                )
                .await
                {
                    Ok(guard) => {
                        locked(&self.shared.held).insert(slot);
                        // Dropping the bell rings the next local waiter:
                        // another permit may be free.
                        drop(bell);
                        return Ok(Permit {
                            guard,
                            slot: Slot {
                                index: slot,
                                shared: Arc::clone(&self.shared),
                            },
                        });
                    }
                    Err(e) if e.is_retryable() => {
                        misses = misses.saturating_add(1);
                        raced = raced.saturating_add(u32::from(free.is_some()));
                        last = Some(e);
                        // Another free slot of the last read, if any.
                        if free.as_ref().is_some_and(|f| !f.is_empty()) {
                            continue;
                        }
                    }
                    Err(e) => return Err(e),
                }
            }
            // Which slots are free on a quorum now.
            let mut expiry = None;
            match self.scan(true).await {
                Ok(view) => {
                    expiry = view.earliest_expiry;
                    let found = !view.free.is_empty();
                    free = Some(view.free);
                    if found && self.choose_possible(free.as_ref()) {
                        // Slots that look free but keep being missed (other
                        // managers' attempts racing for them): back off
                        // before trying again, as a lock's waiter does.
                        if raced > 2 {
                            let pause = backoff.delay(raced);
                            let left = deadline.map(|d| d.saturating_duration_since(clock::now()));
                            tokio::time::sleep(left.map_or(pause, |l| pause.min(l))).await;
                        }
                        continue;
                    }
                }
                Err(e) if e.is_retryable() => last = Some(e),
                Err(e) => return Err(e),
            }
            let remaining = deadline.map(|d| d.saturating_duration_since(clock::now()));
            if remaining == Some(Duration::ZERO) {
                return Err(last.unwrap_or_else(|| self.all_taken(expiry)));
            }
            let b = match bell.as_mut() {
                Some(b) => b,
                None => {
                    // Listen first, then read again: a release between the
                    // read and the subscription is not missed.
                    let waiter = inner.notifier.waiter(&*self.keys(0), None, &owner_id);
                    let limit = nodes.config.node_timeout;
                    waiter
                        .confirmed(remaining.map_or(limit, |r| r.min(limit)))
                        .await;
                    bell = Some(waiter);
                    free = Some(Vec::new());
                    continue;
                }
            };
            let fallback = match expiry {
                Some(e) if b.covered() => e + jitter(),
                Some(e) => backoff.delay(misses).min(e + jitter()),
                None => backoff.delay(misses),
            };
            let fallback = remaining.map_or(fallback, |r| fallback.min(r));
            let until = remaining.and_then(|r| tokio::time::Instant::now().checked_add(r));
            b.wait(fallback, || backoff.delay(misses), until, false)
                .await;
            raced = 0;
            // Read again before the next attempt.
            free = Some(Vec::new());
        }
    }

    /// Whether `free` has a slot this manager does not hold.
    fn choose_possible(&self, free: Option<&Vec<u32>>) -> bool {
        let held = locked(&self.shared.held);
        free.is_some_and(|f| f.iter().any(|s| !held.contains(s)))
    }

    /// The error of a wait that ran out while every permit was taken.
    fn all_taken(&self, expiry: Option<Duration>) -> Error {
        Error::Contended {
            name: self.shared.name.to_string(),
            taken: Vec::new(),
            min_pttl: expiry,
            failures: Vec::new(),
            required: self.shared.manager.inner.nodes.required(),
            granted: 0,
        }
    }
}

/// A uniform index below `len` (at least 1).
fn random_index(len: usize) -> usize {
    let max = u64::try_from(len.saturating_sub(1)).unwrap_or(u64::MAX);
    usize::try_from(up_to(max)).unwrap_or(0)
}
