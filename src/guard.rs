//! The guard of one level of a held lock, and the signal of its loss.

use std::fmt;
use std::future::Future;
use std::sync::Arc;

use tracing::debug;

use crate::clock;
use crate::error::Error;
use crate::hold::{stopped, Hold, HoldState};
use crate::owner::Owner;

/// Proof of holding a lock, one level of it.
///
/// Each successful `lock` returns a guard; a re-entry by the same owner
/// returns another guard of the same hold with a higher
/// [`hold_count`](Self::hold_count). Release each with
/// [`release`](Self::release). Dropping a guard without releasing it
/// releases its level in the background.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
/// let guard = locks.lock("stock:sku-9").await?;
/// let token = guard.fencing_token(); // hand it to the storage you write to
/// tokio::select! {
///     () = guard.lost() => eprintln!("lock lost: stop writing"),
///     () = write_with(token) => {}
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// # async fn write_with(_token: u64) {}
/// # fn main() { let _ = demo; }
/// ```
#[must_use = "dropping the guard releases the lock in the background at once"]
pub struct LockGuard {
    hold: Arc<Hold>,
    done: bool,
}

impl fmt::Debug for LockGuard {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.name())
            .field("owner", &self.hold.owner)
            .field("token", &self.hold.token)
            .field("hold_count", &self.hold_count())
            .field("state", &self.state())
            .finish_non_exhaustive()
    }
}

impl LockGuard {
    pub(crate) fn new(hold: Arc<Hold>) -> Self {
        Self { hold, done: false }
    }

    /// A signal of this hold's loss (or release), for work that must stop
    /// with it.
    pub(crate) fn signal(&self) -> LossSignal {
        LossSignal {
            hold: Arc::clone(&self.hold),
        }
    }

    /// The lock name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.hold.keys.name
    }

    /// The owner holding it.
    #[must_use]
    pub fn owner(&self) -> &Owner {
        &self.hold.owner
    }

    /// The id this hold is written under in the lock hash (and shown by
    /// [`LockManager::status`](crate::LockManager::status)): the owner's id plus a suffix unique to the
    /// hold. Re-entries share it; a later hold of the same owner gets another.
    #[must_use]
    pub fn holder_id(&self) -> &str {
        &self.hold.holder_id
    }

    /// The fencing token: larger than every token issued for this lock
    /// before, as long as the nodes keep their fence counters (persistence
    /// with fsync; a node restarted empty loses them). Pass it to the
    /// protected resource and have it reject smaller ones. It stays the same
    /// across re-entries. Compare it only with tokens of the same name:
    /// tokens come from one counter per hash slot, and names of different
    /// slots have unrelated tokens (see the crate's "Fencing tokens").
    #[must_use]
    pub fn fencing_token(&self) -> u64 {
        self.hold.token
    }

    /// Until when the lock is held for sure, on the local monotonic clock.
    /// The watchdog moves it forward after each renewal. From this instant
    /// on, unless renewed before it, the hold is [`HoldState::Lost`].
    #[must_use]
    pub fn valid_until(&self) -> std::time::Instant {
        clock::to_timer(self.hold.valid_until()).into_std()
    }

    /// How many levels the owner holds (re-entries plus one).
    #[must_use]
    pub fn hold_count(&self) -> u32 {
        self.hold.count()
    }

    /// The indexes of the nodes that granted the lock (including late grants
    /// and watchdog repairs).
    #[must_use]
    pub fn granted_nodes(&self) -> Vec<usize> {
        self.hold.granted_nodes()
    }

    /// Where the hold stands.
    #[must_use]
    pub fn state(&self) -> HoldState {
        self.hold.phase()
    }

    /// Held, and still within its validity.
    #[must_use]
    pub fn is_held(&self) -> bool {
        self.hold.is_live()
    }

    /// Held as last recorded, without checking the validity deadline (the
    /// simulator's mutation `LeaderIgnoresExpiry`).
    #[cfg(test)]
    pub(crate) fn is_held_unchecked(&self) -> bool {
        crate::hold::is_live(self.hold.stored_phase())
    }

    /// Whether the lock is lost: the watchdog could not confirm it, or its
    /// validity ran out (see [`HoldState::Lost`]).
    #[must_use]
    pub fn is_lost(&self) -> bool {
        self.hold.phase() == HoldState::Lost
    }

    /// Resolves when the lock is lost, no later than
    /// [`valid_until`](Self::valid_until): the watchdog's verdict, or the
    /// validity running out without a renewal (a stalled node, a fixed
    /// lease), whichever comes first. Never resolves while it is held or
    /// after a plain release. A validity that ran out while the machine was
    /// suspended is signalled at resume (within 10 ms), here and in
    /// [`renewal_stopped`](Self::renewal_stopped) and [`run`](Self::run).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.hold
            .wait_phase(|p| matches!(p, HoldState::Lost | HoldState::Released))
            .await;
        if self.hold.stored_phase() == HoldState::Released {
            std::future::pending::<()>().await;
        }
    }

    /// Resolves when the lock stops being renewed for any reason other than
    /// release: lost (no later than `valid_until`), or `max_hold` reached.
    /// Returns the state.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn renewal_stopped(&self) -> HoldState {
        self.hold.wait_phase(stopped).await
    }

    /// Releases this level: the lock stays held while other levels remain;
    /// the last release deletes it on every node and wakes waiters.
    ///
    /// Returns as soon as a quorum confirmed the release.
    ///
    /// # Errors
    ///
    /// - [`Error::Lost`] if the watchdog had found it lost;
    /// - [`Error::Expired`] if it had already expired (locally or on the nodes);
    /// - [`Error::NotHeld`] if another owner holds it now;
    /// - [`Error::Unavailable`] if too many nodes failed to confirm (each
    ///   node has twice the node timeout to answer a release, against one
    ///   for an attempt: an answer read late on a busy client still
    ///   counts); the keys expire with the lease there.
    ///
    /// In every case the hold is released locally and renewal has stopped.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe. The local release happens before the first await. The
    /// last level's node calls run in this future until a quorum answered,
    /// then the rest as background work; dropping the future before that
    /// sends the release to every node again as background work. Either
    /// way, every node gets it (see
    /// [`LockManager::flush`](crate::LockManager::flush)). Dropping the
    /// release of a nested level may
    /// leave the nodes' count one level high until the next renewal
    /// converges it; the lock is still deleted by the last release.
    pub async fn release(mut self) -> Result<(), Error> {
        self.done = true;
        let hold = Arc::clone(&self.hold);
        let (left, live) = hold.leave_level();
        if left > 0 {
            if !live {
                return Err(hold.gone());
            }
            // A nested level: converge the nodes' counts; errors are traced
            // and the watchdog converges them on its next tick.
            let t = hold.release_levels(left).await;
            if !t.failures.is_empty() {
                debug!(lock = %hold.keys.name, failed = t.failures.len(), "lowering the hold count failed on some nodes");
            }
            return Ok(());
        }
        // The last level.
        if !live {
            // Nothing left to wait for: report now, clean up in the background.
            let _ = hold.release_in_background(0);
            return Err(hold.gone());
        }
        if tokio::runtime::Handle::try_current().is_err() {
            // No runtime to release on: the keys expire with the lease.
            return Err(hold.gone());
        }
        // Run here, not as a task of its own; dropping this future before the
        // quorum answered sends the release again as background work.
        let t = hold.release_last().await;
        t.verdict(&hold.keys.name, hold.nodes.required_for(&hold.keys))
    }

    /// Runs `f` while holding the lock, then releases it.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
    /// let guard = locks.lock("migrations").await?;
    /// let applied = guard
    ///     .run(|lost| async move {
    ///         for step in 0..3 {
    ///             if lost.is_fired() {
    ///                 return step;
    ///             }
    ///             // ... apply migration `step` ...
    ///         }
    ///         3
    ///     })
    ///     .await?;
    /// assert_eq!(applied, 3);
    /// # Ok(())
    /// # }
    /// # fn main() { let _ = demo; }
    /// ```
    ///
    /// `f` gets a token that fires if the lock is lost (or stops being
    /// renewed at `max_hold`); stop touching the resource when it fires. If
    /// the lock is lost before `f` returns (no later than its validity
    /// ends), `f` is dropped and the result is [`Error::Lost`] (or
    /// [`Error::MaxHoldReached`]).
    ///
    /// `f` runs in the guard owner's [`Owner::scope`]: locks it takes that
    /// name no owner re-enter this hold (and others of the same owner).
    ///
    /// # Errors
    ///
    /// [`Error::Lost`] or [`Error::MaxHoldReached`] as above; errors of the
    /// final release are ignored when `f` completed.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future drops `f` and the guard, which releases the lock
    /// in the background.
    pub async fn run<F, Fut, T>(self, f: F) -> Result<T, Error>
    where
        F: FnOnce(LossSignal) -> Fut,
        Fut: Future<Output = T>,
    {
        let signal = LossSignal {
            hold: Arc::clone(&self.hold),
        };
        let watch = self.renewal_stopped();
        let work = self.hold.owner.scope(f(signal));
        let outcome = tokio::select! {
            biased;
            state = watch => Err(state),
            value = work => Ok(value),
        };
        match outcome {
            Ok(value) => {
                if let Err(e) = self.release().await {
                    debug!(error = %e, "release after run");
                }
                Ok(value)
            }
            Err(state) => {
                let name = self.name().to_owned();
                let max_hold = self.hold.max_hold.unwrap_or_default();
                drop(self);
                Err(if state == HoldState::MaxHoldReached {
                    Error::MaxHoldReached { name, max_hold }
                } else {
                    Error::Lost { name }
                })
            }
        }
    }
}

/// Fires when a held lock is lost or stops being renewed; handed to the
/// closure of [`LockGuard::run`].
#[derive(Clone)]
pub struct LossSignal {
    hold: Arc<Hold>,
}

impl fmt::Debug for LossSignal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LossSignal")
            .field("fired", &self.is_fired())
            .finish()
    }
}

impl LossSignal {
    /// Whether it has fired.
    #[must_use]
    pub fn is_fired(&self) -> bool {
        stopped(self.hold.phase())
    }

    /// Resolves when it fires: no later than the hold's validity ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe.
    pub async fn fired(&mut self) {
        self.hold.wait_phase(stopped).await;
    }
}

impl Drop for LockGuard {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let hold = Arc::clone(&self.hold);
        let (left, live) = hold.leave_level();
        if !live && left > 0 {
            return;
        }
        if left == 0 {
            let _ = hold.release_in_background(0);
        } else {
            let nodes = Arc::clone(&hold.nodes);
            nodes.spawn(async move {
                let _ = hold.release_levels(left).await;
            });
        }
    }
}
