//! The multi-lock's guard. A set of names is taken as one target
//! (`keys::Target`): on each node one script grants all of them or none
//! (`scripts/acquire_all.lua`), counted against the quorum like a single
//! lock (`attempt`), retried after the backoff (`turn`: a set has no
//! single release channel).
//!
//! Once won, the set becomes one hold per name (same holder id, same
//! validity, same granting nodes, same fencing token), so that renewal,
//! repair, loss, release and re-entry are those of single locks: the
//! watchdog renews the names together (they are registered together, so
//! one wave renews them in one pipeline per node; with more than 100 locks
//! held a set may straddle two waves or two script calls), and a later
//! `lock(name)` by the same owner re-enters that name's hold.

use std::fmt;

use futures::future::BoxFuture;

use crate::error::Error;
use crate::guard::LockGuard;

/// Proof of holding several locks at once: one level of each name.
///
/// Returned by [`LockManager::lock_all`](crate::LockManager::lock_all) and [`MultiLockRequest::acquire`](crate::MultiLockRequest::acquire).
/// It holds one [`LockGuard`] per name, sorted by name. Release it with
/// [`release`](Self::release); dropping it releases every name in the
/// background.
///
/// Fencing tokens: a set acquired together gets one token for all its names
/// (on each node, the fence counters of every hash slot of the set are set
/// to one value above the largest of them); like any token, it is larger
/// than every token issued before for each of those names, so each name's
/// token strictly increases across its successive holds. Names that were
/// re-entered keep the token of their existing hold; see
/// [`fencing_token`](Self::fencing_token).
#[must_use = "dropping the guard releases the locks in the background at once"]
pub struct MultiLockGuard {
    guards: Vec<LockGuard>,
}

impl fmt::Debug for MultiLockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiLockGuard")
            .field("locks", &self.guards)
            .finish()
    }
}

type Lost<'a> = BoxFuture<'a, ()>;

impl MultiLockGuard {
    pub(super) fn new(mut guards: Vec<LockGuard>) -> Self {
        guards.sort_by(|a, b| a.name().cmp(b.name()));
        Self { guards }
    }

    /// The names held, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<&str> {
        self.guards.iter().map(LockGuard::name).collect()
    }

    /// The guard of each name, sorted by name.
    pub fn guards(&self) -> &[LockGuard] {
        &self.guards
    }

    /// The guards, one per name, to release or keep separately.
    #[must_use]
    pub fn into_guards(self) -> Vec<LockGuard> {
        self.guards
    }

    /// The fencing token of `name`, if it is one of the set. Names acquired
    /// together share one token; a re-entered name keeps its hold's token.
    #[must_use]
    pub fn fencing_token(&self, name: &str) -> Option<u64> {
        self.guards
            .iter()
            .find(|g| g.name() == name)
            .map(LockGuard::fencing_token)
    }

    /// Until when every name is held for sure: the earliest of the names'
    /// [`LockGuard::valid_until`].
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        self.guards
            .iter()
            .map(LockGuard::valid_until)
            .min()
            .unwrap_or_else(std::time::Instant::now)
    }

    /// Every name is held, within its validity.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guards.iter().all(LockGuard::is_held)
    }

    /// Some name is lost (see [`LockGuard::is_lost`]).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.guards.iter().any(LockGuard::is_lost)
    }

    /// Resolves as soon as any name is lost, no later than
    /// [`valid_until`](Self::valid_until). Never resolves while every name
    /// is held.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        let all: Vec<Lost<'_>> = self
            .guards
            .iter()
            .map(|g| -> Lost<'_> { Box::pin(g.lost()) })
            .collect();
        if all.is_empty() {
            // Unreachable: a set has at least one name.
            return std::future::pending().await;
        }
        let _ = futures::future::select_all(all).await;
    }

    /// Releases one level of every name, on every node, concurrently.
    ///
    /// # Errors
    ///
    /// The first error among the names' [`LockGuard::release`] (in name
    /// order): [`Error::Lost`], [`Error::Expired`], [`Error::NotHeld`] or
    /// [`Error::Unavailable`]. Every name is released locally in every case.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe, as [`LockGuard::release`]: the last level of each name
    /// is released on the nodes in the background even if the future is
    /// dropped.
    pub async fn release(self) -> Result<(), Error> {
        let results =
            futures::future::join_all(self.guards.into_iter().map(LockGuard::release)).await;
        results
            .into_iter()
            .find_map(Result::err)
            .map_or(Ok(()), Err)
    }
}
