//! Who holds a lock: task-scoped by default, or an explicit shared handle.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

static NEXT_EXPLICIT: AtomicU64 = AtomicU64::new(1);
static NEXT_HOLD: AtomicU64 = AtomicU64::new(1);

/// An explicit lock owner that several tasks can share.
///
/// By default a lock belongs to the tokio task that took it (outside any task,
/// to the thread). Code that must hand a held lock from one task to another,
/// or re-enter it from a spawned helper, creates an `Owner` once with
/// [`crate::LockManager::new_owner`] and passes it to
/// [`crate::LockRequest::owner`]. Clones are the same owner.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    id: Arc<str>,
}

impl Owner {
    pub(crate) fn explicit(client_id: &str) -> Self {
        let n = NEXT_EXPLICIT.fetch_add(1, Ordering::Relaxed);
        Self {
            id: format!("{client_id}:owner-{n}").into(),
        }
    }

    /// The owner of the calling task (or thread, outside a task).
    pub(crate) fn current(client_id: &str) -> Self {
        let id = match tokio::task::try_id() {
            Some(task) => format!("{client_id}:task-{task}"),
            None => format!("{client_id}:thread-{:?}", std::thread::current().id()),
        };
        Self { id: id.into() }
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
        format!("{}:hold-{n}", self.id).into()
    }
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
    async fn tasks_get_distinct_owners_and_a_task_keeps_its_own() {
        let in_task = || async {
            let a = Owner::current("c");
            tokio::task::yield_now().await;
            assert_eq!(a, Owner::current("c"));
            a
        };
        let a = tokio::spawn(in_task()).await.expect("task runs");
        let b = tokio::spawn(in_task()).await.expect("task runs");
        assert_ne!(a, b);
        assert!(a.id().starts_with("c:task-"));
    }

    #[test]
    fn outside_a_task_the_thread_owns() {
        let a = Owner::current("c");
        assert!(a.id().starts_with("c:thread-"));
        let b = std::thread::spawn(|| Owner::current("c"))
            .join()
            .expect("thread runs");
        assert_ne!(a, b);
    }

    #[test]
    fn explicit_owners_are_unique_and_clones_equal() {
        let a = Owner::explicit("c");
        let b = Owner::explicit("c");
        assert_ne!(a, b);
        assert_eq!(a.clone(), a);
    }
}
