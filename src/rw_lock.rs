//! A read-write lock over the members: any number of readers together, a
//! writer alone, checked and granted in one script per member
//! (`scripts/read.lua`, `scripts/write.lua`), with Gifford's quorums: a
//! writer needs the manager's quorum `q_w` (with `2·q_w > N`, so two
//! writers meet in a member), a reader `q_r = N - q_w + 1` (so a reader
//! and a writer meet in a member: `q_r + q_w > N`). `Quorum::All` gives
//! read-one/write-all.
//!
//! On a member, under `<prefix>{rw:<name>}`, the writer is the hash
//! `...:writer`, each reader a key of its own (`...:reader:<id>`, listed in
//! `...:readers`), every one
//! an ordinary lease renewed by the watchdog. A writer refused by readers
//! (or by another writer) joins the waiting writers there
//! (`...:timeouts`), and while one waits no new reader is granted on that
//! member: readers that hold finish, and the writer gets in after the last
//! of them (writers are not starved by a stream of readers).
//!
//! A reader's key is not repaired on a member that lost it (a writer
//! finds readers by the set the grant wrote): a reader stands on the
//! members that kept its key, and is lost when fewer than `q_r` do.

use std::sync::Arc;
use std::time::Duration;

use crate::acquire::Wait;
use crate::error::Error;
use crate::guard::LockGuard;
use crate::keys::{check_name, Keys, Role};
use crate::members::Members;
use crate::owner::Owner;
use crate::request::fresh;
use crate::shared::LockManager;

/// A read-write lock over the manager's members, from
/// [`LockManager::rw_lock`]. Cheap to clone.
///
/// Guards are not re-entrant: every [`RwLock::read`] or [`RwLock::write`]
/// takes a new hold, so a task that holds a read guard and asks for the
/// write lock waits for itself (use [`RwLock::try_write`], or release the
/// read guard first).
///
/// A writer waits for the readers that held (or were being granted) when
/// it first asked, and for no reader that came after: new readers are
/// refused while a writer waits, for up to the manager's
/// [`queue_timeout`](crate::LockManagerBuilder::queue_timeout) after its
/// last attempt (a writer that gave up or died stops holding them back
/// then). So under a steady stream of overlapping readers a writer gets in
/// within the longest read hold in progress when it asked, plus a round
/// trip; a reader waiting in the same manager ahead of it may add up to
/// one `queue_timeout`.
#[derive(Clone)]
pub struct RwLock {
    manager: LockManager,
    name: Arc<str>,
}

impl std::fmt::Debug for RwLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwLock")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl RwLock {
    pub(crate) fn new(manager: &LockManager, name: String) -> Self {
        Self {
            manager: manager.clone(),
            name: name.into(),
        }
    }

    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits until no writer holds or waits for the lock, then holds it
    /// for reading, beside any other readers.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an invalid name; [`Error::UnsafeQuorum`]
    /// when the manager's quorum has `2q ≤ N`; [`Error::WrongType`] when
    /// the lock's keys hold another type; [`Error::Overloaded`] when the
    /// manager renews as many holds as it can keep valid. Contention and
    /// outages are waited out.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it rolls back an attempt in flight in the
    /// background, as a dropped lock acquisition does.
    pub async fn read(&self) -> Result<ReadGuard, Error> {
        let guard = self.take(true, Wait::Forever).await?;
        Ok(ReadGuard { guard })
    }

    /// [`RwLock::read`], giving up after `wait` (`Duration::ZERO`: one
    /// attempt).
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] or [`Error::Unavailable`] once `wait` has
    /// passed; the rest as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::read`].
    pub async fn try_read(&self, wait: Duration) -> Result<ReadGuard, Error> {
        let guard = self.take(true, Wait::Up(wait)).await?;
        Ok(ReadGuard { guard })
    }

    /// Waits until no reader or writer holds the lock, then holds it alone.
    /// While it waits, new readers are held back.
    ///
    /// # Errors
    ///
    /// As [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it rolls back an attempt in flight and takes
    /// the writer out of the waiting writers on every member (in the
    /// background), so readers are not held back for it.
    pub async fn write(&self) -> Result<WriteGuard, Error> {
        let guard = self.take(false, Wait::Forever).await?;
        Ok(WriteGuard { guard })
    }

    /// [`RwLock::write`], giving up after `wait` (`Duration::ZERO`: one
    /// attempt).
    ///
    /// # Errors
    ///
    /// [`Error::Contended`] or [`Error::Unavailable`] once `wait` has
    /// passed; the rest as [`RwLock::read`].
    ///
    /// # Cancel safety
    ///
    /// As [`RwLock::write`].
    pub async fn try_write(&self, wait: Duration) -> Result<WriteGuard, Error> {
        let guard = self.take(false, Wait::Up(wait)).await?;
        Ok(WriteGuard { guard })
    }

    async fn take(&self, reader: bool, wait: Wait) -> Result<LockGuard, Error> {
        let nodes = &self.manager.inner.nodes;
        check_name(&self.name).map_err(|e| match e {
            Error::InvalidInput { reason, .. } => Error::invalid("read-write lock name", reason),
            other => other,
        })?;
        if !nodes.config.quorum.is_exclusive(nodes.len()) {
            return Err(Error::UnsafeQuorum {
                primitive: "read-write lock",
                required: nodes.required(),
                nodes: nodes.len(),
            });
        }
        let owner = Owner::explicit(&nodes.client_id);
        let id = owner.waiter_id();
        let prefix = &nodes.config.key_prefix;
        if reader {
            let keys = Arc::new(Keys::rw(prefix, &self.name, Role::Reader, &id));
            return fresh(&self.manager, &keys, &owner, wait).await;
        }
        let hold_back = if no_hold_back() {
            Duration::ZERO
        } else {
            nodes.config.queue_timeout
        };
        let role = Role::Writer {
            waiter: Arc::clone(&id),
            hold_back,
        };
        let keys = Arc::new(Keys::rw(prefix, &self.name, role, &id));
        let mut leave = Leave {
            nodes: Arc::clone(nodes),
            keys: Arc::clone(&keys),
            waiter: id,
            granted: Vec::new(),
        };
        let guard = fresh(&self.manager, &keys, &owner, wait).await?;
        leave.granted = guard.granted_nodes();
        Ok(guard)
    }
}

/// The simulator's mutation under which a waiting writer holds no new
/// reader back (never on outside tests).
fn no_hold_back() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::NoWriterHoldBack);
    #[cfg(not(test))]
    false
}

/// Takes a writer out of the waiting writers, in the background, when its
/// acquisition ends (won, failed or dropped), on every member but those
/// that granted it (their grant took it out).
struct Leave {
    nodes: Arc<Members>,
    keys: Arc<Keys>,
    waiter: Arc<str>,
    granted: Vec<usize>,
}

impl Drop for Leave {
    fn drop(&mut self) {
        let granted = std::mem::take(&mut self.granted);
        if granted.len() == self.nodes.len() {
            return;
        }
        let mut fan = self
            .nodes
            .leave(&self.keys, &self.waiter, |i| !granted.contains(&i));
        let _ = self.nodes.spawn(async move { fan.until(|_| false).await });
    }
}

/// A read hold of an [`RwLock`], beside any other readers; a lease renewed
/// by the manager's watchdog. Dropping it releases it in the background.
#[derive(Debug)]
pub struct ReadGuard {
    guard: LockGuard,
}

/// The write hold of an [`RwLock`], alone; a lease renewed by the
/// manager's watchdog. Dropping it releases it in the background.
#[derive(Debug)]
pub struct WriteGuard {
    guard: LockGuard,
}

impl ReadGuard {
    /// Whether the read hold is still held: renewed, and within its
    /// [`ReadGuard::valid_until`].
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Until when the hold is known valid (drift subtracted).
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        self.guard.valid_until()
    }

    /// Resolves when the hold is lost (no later than its `valid_until`);
    /// never if it is released.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Releases the read hold; a waiting writer is told when it was the
    /// last reader.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<(), Error> {
        self.guard.release().await
    }
}

impl WriteGuard {
    /// The write hold's fencing token: strictly increasing across the
    /// lock's writers (readers draw none).
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Whether the write hold is still held: renewed, and within its
    /// [`WriteGuard::valid_until`].
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Until when the hold is known valid (drift subtracted).
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        self.guard.valid_until()
    }

    /// Resolves when the hold is lost (no later than its `valid_until`);
    /// never if it is released.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Releases the write hold; waiting readers and writers are told.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`].
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`].
    pub async fn release(self) -> Result<(), Error> {
        self.guard.release().await
    }
}
