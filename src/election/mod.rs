//! Leader election over the members, etcd's `concurrency.Election` in
//! quorumlock's terms: a campaign is a fair acquisition of the election's
//! lock (`election:<name>`), whose fencing token is the term, followed by
//! a quorum write of the leader's record (`leader::proclaim`); the leader
//! is what a quorum of members agree on (`leader::read`); observers share
//! one watch per name and process (`leader::Observers`).
//!
//! - One leader at a time: a [`Leadership`] believes itself leader
//!   ([`Leadership::is_leader`]) only while its hold of the lock is valid,
//!   so two never overlap, under the lock's assumptions.
//! - Terms strictly increase: the term is the hold's fencing token.
//! - Arrival order: campaigns wait in the lock's fair queue, across
//!   processes; a candidate whose process died is skipped after the queue
//!   timeout.
//!
//! The door of the folder: `leadership` holds [`Leadership`].

mod leadership;

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock;
use crate::error::Error;
use crate::keys::{check_name, Keys};
use crate::leader::{self, Leader, MAX_LEADER_VALUE};
use crate::node::Record;
use crate::request::{OneName, Request};
use crate::shared::LockManager;

pub use self::leadership::Leadership;

/// The lock an election named `name` campaigns for.
fn lock_name(name: &str) -> String {
    format!("election:{name}")
}

/// A leader election among the processes that campaign for one name, over
/// a manager's members. Get one with
/// [`LockManager::election`](crate::LockManager::election); cheap to
/// clone.
///
/// The election's lock is the lock named `election:<name>` (what
/// `quorumlock status election:<name>` shows); its leader's record sits
/// beside it.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
/// let election = locks.election("scheduler");
/// let me = election.campaign("host-a:8080").await?; // waits until leader
/// let term = me.term(); // pass it to what the leader writes to
/// tokio::select! {
///     () = me.lost() => eprintln!("deposed: stop scheduling"),
///     () = tokio::time::sleep(std::time::Duration::from_secs(1)) => {}
/// }
/// me.resign().await?;
/// # let _ = term;
/// # Ok(())
/// # }
/// # fn main() { let _ = demo; }
/// ```
#[derive(Clone)]
pub struct Election {
    manager: LockManager,
    name: Arc<str>,
    /// The lock's keys, or why the name is refused.
    keys: Result<Arc<Keys>, String>,
}

impl std::fmt::Debug for Election {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Election")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Election {
    pub(crate) fn new(manager: &LockManager, name: String) -> Self {
        let config = &manager.inner.nodes.config;
        let keys = check_name(&name)
            .and_then(|()| Keys::checked(config.layout, &config.key_prefix, &lock_name(&name)))
            .map_err(|e| match e {
                Error::InvalidInput { reason, .. } => reason,
                e => e.to_string(),
            });
        Self {
            manager: manager.clone(),
            name: name.into(),
            keys,
        }
    }

    /// The election's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The lock the candidates campaign for: `election:<name>`.
    #[must_use]
    pub fn lock_name(&self) -> String {
        lock_name(&self.name)
    }

    fn keys(&self) -> Result<Arc<Keys>, Error> {
        self.keys
            .clone()
            .map_err(|reason| Error::invalid("election name", reason))
    }

    /// Waits until this candidate leads, then proclaims `value` (what the
    /// others read from [`Election::leader`] and [`Election::observe`]).
    ///
    /// Candidates are served in the order they arrived, across processes;
    /// the leadership is renewed by the manager's watchdog until resigned,
    /// dropped or lost.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an invalid election name or an empty
    /// value, or one over [`MAX_LEADER_VALUE`] bytes; [`Error::WrongType`]
    /// when the election's keys hold another type; [`Error::Overloaded`]
    /// when the manager renews as many holds as it can keep valid.
    /// Contention and outages are waited out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: a dropped campaign leaves the queue and rolls back its
    /// grants, as a dropped acquisition does; a leadership won but not yet
    /// returned is released in the background (a record it wrote on some
    /// members reads as nobody's, since its hold is gone there).
    pub async fn campaign(&self, value: impl Into<String>) -> Result<Leadership, Error> {
        self.run(value.into(), None).await
    }

    /// [`Election::campaign`], giving up after `wait` (`Duration::ZERO`:
    /// one attempt), as [`LockManager::try_lock`] does; a won lock whose
    /// first proclaim does not reach a quorum by then is released.
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] or [`Error::Unavailable`] once `wait` has
    /// passed; the rest as [`Election::campaign`]. A campaign that fails
    /// after its record reached a quorum unheard (its answers lost to a
    /// failover) is released at once; until the release reaches the
    /// members, observers may report that record, under the term of the
    /// hold it won, which no other candidate has.
    ///
    /// # Cancel safety
    ///
    /// As [`Election::campaign`].
    pub async fn try_campaign(
        &self,
        value: impl Into<String>,
        wait: Duration,
    ) -> Result<Leadership, Error> {
        self.run(value.into(), Some(wait)).await
    }

    async fn run(&self, value: String, wait: Option<Duration>) -> Result<Leadership, Error> {
        let keys = self.keys()?;
        check_value(&value)?;
        let value: Arc<str> = value.into();
        let deadline = wait.map(|w| clock::now() + w.min(crate::MAX_TIMEOUT));
        let nodes = &self.manager.inner.nodes;
        loop {
            let mut request = Request::new(&self.manager, OneName(keys.name.to_string())).fair();
            if let Some(d) = deadline {
                request = request.wait(d.saturating_duration_since(clock::now()));
            }
            let guard = request.acquire().await?;
            let record = Record {
                holder: guard.holder_id().into(),
                term: guard.fencing_token(),
                rev: 1,
                value: Arc::clone(&value),
            };
            match leadership::establish(nodes, &keys, &guard, &record, deadline).await {
                Ok(()) => return Ok(Leadership::new(guard, nodes, &keys, record)),
                Err(e) => {
                    // Released before the next try: the queue's next
                    // candidate may lead meanwhile.
                    let _ = guard.release().await;
                    let late = deadline.is_some_and(|d| clock::now() >= d);
                    if late || !(e.is_retryable() || e.is_lost()) {
                        return Err(e);
                    }
                }
            }
        }
    }

    /// The leader now, by one quorum read: `None` when no leader's record
    /// has a quorum of members (nobody leads, a new leader has not
    /// proclaimed yet, or a proclaim is half done).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an invalid election name;
    /// [`Error::Unavailable`] when fewer than a quorum of members answered.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn leader(&self) -> Result<Option<Leader>, Error> {
        leader::current(&self.manager.inner.nodes, &self.keys()?).await
    }

    /// The leader as it changes: `None`, then each leader a quorum of
    /// members agree on, never one of an older term (or an older value of
    /// the same term) than one already seen, and `None` again once nobody
    /// leads (resigned, or its lease ran out with nobody elected).
    ///
    /// Observers of one election on one manager share one watch: a quorum
    /// read or two per change (not one per observer), one subscriber
    /// connection per member. A
    /// change is seen within one pub/sub delivery and one quorum read; an
    /// expiry (which publishes nothing) within a round trip of the keys'
    /// expiry on the members; anything else (a message lost) within the
    /// manager's renew interval. The watch ends with its last receiver.
    ///
    /// An invalid election name gives a receiver that stays at `None`,
    /// whose `changed()` fails at once (no sender).
    #[must_use]
    pub fn observe(&self) -> watch::Receiver<Option<Leader>> {
        match &self.keys {
            Ok(keys) => {
                let inner = &self.manager.inner;
                inner.observers.observe(&inner.nodes, keys)
            }
            Err(_) => watch::channel(None).1,
        }
    }
}

/// A value a leader may proclaim: not empty, at most [`MAX_LEADER_VALUE`]
/// bytes.
fn check_value(value: &str) -> Result<(), Error> {
    if value.is_empty() {
        return Err(Error::invalid(
            "leader value",
            "the value is empty".to_owned(),
        ));
    }
    if value.len() > MAX_LEADER_VALUE {
        return Err(Error::invalid(
            "leader value",
            format!("{} bytes is longer than {MAX_LEADER_VALUE}", value.len()),
        ));
    }
    Ok(())
}
