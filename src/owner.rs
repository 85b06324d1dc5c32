//! Who holds a lock: each acquisition its own owner by default; an explicit
//! shared handle, or a scope, for re-entry.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static NEXT_EXPLICIT: AtomicU64 = AtomicU64::new(1);
static NEXT_HOLD: AtomicU64 = AtomicU64::new(1);

tokio::task_local! {
    /// The owner that acquisitions inside [`Owner::scope`] default to.
    static SCOPE: Owner;
}

/// A lock owner: acquisitions by the same owner re-enter its hold.
///
/// By default every acquisition is its own owner, so two futures never
/// share a hold by accident: two `lock("x")` calls joined in one task, or
/// run by `for_each_concurrent`, exclude each other like two tasks do.
/// Re-entry is explicit or scoped:
///
/// - create an `Owner` with [`crate::LockManager::new_owner`] and pass it to
///   [`crate::LockRequest::owner`] (clones are the same owner, and can move
///   to other tasks);
/// - or run code under [`Owner::scope`] (or [`crate::LockGuard::run`], which
///   scopes its closure to the guard's owner): acquisitions inside it that
///   name no owner act as that owner.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
/// let me = locks.new_owner();
/// let outer = locks.request("account:7").owner(&me).acquire().await?;
/// // Same owner: re-enters at once instead of waiting for itself.
/// let inner = me.scope(locks.lock("account:7")).await?;
/// assert_eq!(inner.hold_count(), 2);
/// inner.release().await?;
/// outer.release().await?;
/// # Ok(())
/// # }
/// # fn main() { let _ = demo; }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    id: Arc<str>,
}

impl Owner {
    pub(crate) fn explicit(client_id: &str) -> Self {
        let n = NEXT_EXPLICIT.fetch_add(1, Ordering::Relaxed);
        Self {
            id: suffixed(client_id, ":owner-", n),
        }
    }

    /// The owner of the enclosing [`Owner::scope`], if it belongs to the
    /// client `client_id`.
    pub(crate) fn scoped(client_id: &str) -> Option<Self> {
        SCOPE
            .try_with(|o| {
                let own =
                    o.id.strip_prefix(client_id)
                        .is_some_and(|rest| rest.starts_with(':'));
                own.then(|| o.clone())
            })
            .ok()
            .flatten()
    }

    /// Runs `fut` with this owner as the default owner of the acquisitions
    /// it makes through the manager that created the owner: they re-enter
    /// this owner's holds instead of waiting for them.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the scope ends with it.
    pub async fn scope<F: std::future::Future>(&self, fut: F) -> F::Output {
        SCOPE.scope(self.clone(), fut).await
    }

    /// The owner's id, `client-uuid:owner`. Each hold of the owner is written
    /// into the lock hash under this id plus a suffix unique to the hold (see
    /// [`crate::LockGuard::holder_id`]).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn shared_id(&self) -> Arc<str> {
        Arc::clone(&self.id)
    }

    /// The id of a new hold of this owner: `owner-id:hold-N`.
    pub(crate) fn holder_id(&self) -> Arc<str> {
        let n = NEXT_HOLD.fetch_add(1, Ordering::Relaxed);
        suffixed(&self.id, ":hold-", n)
    }
}

/// `{base}{tag}{n}`, built in one buffer of the right size (this runs on
/// every acquisition and every attempt).
fn suffixed(base: &str, tag: &str, n: u64) -> Arc<str> {
    use std::fmt::Write as _;
    let mut id = String::with_capacity(base.len() + tag.len() + 20);
    id.push_str(base);
    id.push_str(tag);
    // Writing to a String cannot fail.
    let _ = write!(id, "{n}");
    id.into()
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&&*self.id).finish()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// A random client id: 128 bits in hex.
pub(crate) fn new_client_id() -> String {
    format!("{:032x}", crate::rng::bits128())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn scopes_give_their_owner_to_their_own_client_only() {
        let a = Owner::explicit("c");
        assert_eq!(Owner::scoped("c"), None);
        let inside = a.scope(async { Owner::scoped("c") }).await;
        assert_eq!(inside, Some(a.clone()));
        let other_client = a.scope(async { Owner::scoped("d") }).await;
        assert_eq!(other_client, None);
        let prefix_only = a.scope(async { Owner::scoped("") }).await;
        assert_eq!(prefix_only, None);
    }

    #[test]
    fn explicit_owners_are_unique_and_clones_equal() {
        let a = Owner::explicit("c");
        let b = Owner::explicit("c");
        assert_ne!(a, b);
        assert_eq!(a.clone(), a);
    }
}
