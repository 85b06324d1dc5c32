//! Two small helpers every other module uses: a mutex that shrugs off
//! poisoning, and the tracker of a manager's background tasks.

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use tokio::sync::Notify;

/// Locks a std mutex, recovering the data if a panic poisoned it: every
/// critical section in this crate leaves its data consistent.
pub(crate) fn locked<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Background work of a manager (releases of dropped guards, rollbacks of
/// cancelled acquisitions, calls to slow nodes), counted so that
/// [`LockManager::flush`](crate::LockManager::flush) can wait for it.
#[derive(Default)]
pub(crate) struct Background {
    running: AtomicUsize,
    idle: Notify,
}

/// Counts one piece of background work until dropped (also when its runtime
/// shuts down and drops the task).
struct Running(Arc<Background>);

impl Drop for Running {
    fn drop(&mut self) {
        if self.0.running.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Background {
    /// Runs `fut` on the current runtime, if there is one. Returns whether it
    /// was spawned. Never panics outside a runtime.
    pub(crate) fn spawn<F>(self: &Arc<Self>, fut: F) -> bool
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        self.running.fetch_add(1, Ordering::AcqRel);
        let running = Running(Arc::clone(self));
        drop(handle.spawn(crate::clock::inherit(async move {
            let _running = running;
            fut.await;
        })));
        true
    }

    /// Resolves once no background work is running.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            if self.running.load(Ordering::Acquire) == 0 {
                return;
            }
            notified.await;
        }
    }
}
