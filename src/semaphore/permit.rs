//! One permit of a semaphore: a slot held, and the slot's place among
//! those this manager holds, given back when the permit goes.

use std::sync::Arc;

use super::Shared;
use crate::error::Error;
use crate::guard::LockGuard;
use crate::sync::locked;

/// One permit of a [`Semaphore`](crate::Semaphore): one slot held, a lease renewed by the
/// manager's watchdog. Dropping it releases the slot in the background.
#[derive(Debug)]
pub struct Permit {
    pub(super) guard: LockGuard,
    pub(super) slot: Slot,
}

/// The slot a permit holds, known held by this manager until dropped.
pub(super) struct Slot {
    pub(super) index: u32,
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Slot").field(&self.index).finish()
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        locked(&self.shared.held).remove(&self.index);
    }
}

impl Permit {
    /// The slot this permit holds, in `0..permits`.
    #[must_use]
    pub fn slot(&self) -> u32 {
        self.slot.index
    }

    /// The semaphore's name.
    #[must_use]
    pub fn semaphore_name(&self) -> &str {
        &self.slot.shared.name
    }

    /// The permit's fencing token. Tokens of one slot strictly increase
    /// across its holders, as a lock's do; every slot of a semaphore draws
    /// from the same counter (one per hash slot), so tokens of different
    /// slots are distinct and ordered by grant, but two of them may be
    /// valid at once (two permits): compare a token with those of the
    /// same [`Permit::slot`] to fence a resource per slot.
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.guard.fencing_token()
    }

    /// Whether the permit is still held: renewed, and within its
    /// [`Permit::valid_until`].
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.guard.is_held()
    }

    /// Until when the permit is known valid (drift subtracted), extended
    /// by each renewal.
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        self.guard.valid_until()
    }

    /// The holder id written on the members for this permit.
    #[must_use]
    pub fn holder_id(&self) -> &str {
        self.guard.holder_id()
    }

    /// Resolves when the permit is lost (no later than its `valid_until`);
    /// never if it is released.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.guard.lost().await;
    }

    /// Releases the permit; a waiter anywhere may take it at once.
    ///
    /// # Errors
    ///
    /// As [`LockGuard::release`]: [`Error::Lost`] or [`Error::Expired`] if
    /// it was no longer held, [`Error::Unavailable`] when too few members
    /// confirmed (the slot then expires with its lease there).
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::release`]: the release is sent to every member in
    /// the background if this future is dropped.
    pub async fn release(self) -> Result<(), Error> {
        let Self { guard, slot } = self;
        let result = guard.release().await;
        drop(slot);
        result
    }
}
