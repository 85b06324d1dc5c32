//! One resume watcher per manager: tells the loss signals that the machine
//! was suspended, so that they re-check their deadline at once.
//!
//! A loss signal ([`Hold::wait_phase`](crate::hold::Hold::wait_phase))
//! sleeps on one of tokio's timers, on the monotonic clock, which stops
//! while the machine is suspended; validity counts the suspended time
//! ([`clock`]). After a resume such a timer is late by the length of the
//! suspend, and the loss would be seen that late. Re-arming needs to know
//! that a suspend happened, and nothing tells a process that: the watcher
//! polls [`clock::suspended`] and publishes it when it grew.
//!
//! It runs only while someone waits for a loss (a receiver of its channel
//! is alive), however many: one task and one timer per manager, not one per
//! hold. It starts with the first wait and stops at its first poll without
//! one, so an idle manager (and a paused test clock) has no timer of it. It
//! holds the state only weakly and stops when the manager's nodes are gone.

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::{watch, Notify};
use tokio::task::JoinHandle;

use crate::clock;
use crate::sync::locked;

/// The longest poll period: after a resume, a loss whose deadline passed
/// during the suspend is seen at most this late (10 ms: 100 cheap wakeups
/// a second per manager, only while a loss signal is awaited). A wait whose
/// drift allowance is shorter polls at that allowance (at least 1 ms,
/// tokio's timer resolution), so that the signal stays within the drift
/// when a suspend ends just before `valid_until`.
pub(crate) const POLL: Duration = Duration::from_millis(10);

/// Finest poll period: tokio's timers fire on whole milliseconds.
const FINEST: Duration = Duration::from_millis(1);

/// The watcher's state, owned by [`Members`](crate::members::Members).
pub(crate) struct Resume {
    /// The suspended total last seen; sent when it grows. Its receivers are
    /// the waits (counted: the watcher stops without one).
    seen: watch::Sender<Duration>,
    /// Wakes the waits when `seen` grew, in the order they started waiting
    /// (a watch receiver's wakeup order is random: the simulator replays a
    /// seed exactly only with this one).
    grew: Notify,
    /// The task, and its poll period while it runs: the smallest drift
    /// allowance of the waits since it started, at most [`POLL`].
    task: Mutex<Task>,
}

struct Task {
    handle: Option<JoinHandle<()>>,
    period: Duration,
}

impl Resume {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Self {
            seen: watch::Sender::new(clock::suspended()),
            grew: Notify::new(),
            task: Mutex::new(Task {
                handle: None,
                period: POLL,
            }),
        })
    }

    /// Subscribes a wait whose deadline has the drift allowance `drift` to
    /// resumes: [`Resumes::next`] resolves when the suspended total grew.
    /// Starts the watcher if it is not running (and there is a runtime).
    pub(crate) fn subscribe(self: &Arc<Self>, drift: Duration) -> Resumes {
        // Under the task's lock: the watcher decides to stop under it too,
        // so it never stops with this receiver alive.
        let mut task = locked(&self.task);
        let rx = self.seen.subscribe();
        task.period = task.period.min(drift.max(FINEST));
        if task.handle.as_ref().is_none_or(JoinHandle::is_finished) {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                task.handle = Some(handle.spawn(clock::inherit(watch(Arc::downgrade(self)))));
            }
        }
        Resumes {
            rx,
            resume: Arc::clone(self),
        }
    }
}

/// One wait's subscription to resumes (see [`Resume::subscribe`]).
pub(crate) struct Resumes {
    rx: watch::Receiver<Duration>,
    resume: Arc<Resume>,
}

impl Resumes {
    /// Resolves when the suspended total grew since the subscription or
    /// the last call.
    pub(crate) async fn next(&mut self) {
        loop {
            let grew = self.resume.grew.notified();
            tokio::pin!(grew);
            grew.as_mut().enable();
            if self.rx.has_changed().unwrap_or(false) {
                self.rx.borrow_and_update();
                return;
            }
            grew.await;
        }
    }
}

impl Drop for Resume {
    fn drop(&mut self) {
        if let Some(handle) = locked(&self.task).handle.take() {
            handle.abort();
        }
    }
}

/// The watcher: every period, stops if nobody waits, else publishes the
/// suspended total if it grew.
async fn watch(resume: Weak<Resume>) {
    loop {
        let Some(period) = resume.upgrade().map(|r| locked(&r.task).period) else {
            return;
        };
        clock::sleep(period).await;
        let Some(r) = resume.upgrade() else {
            return;
        };
        {
            let mut task = locked(&r.task);
            if r.seen.receiver_count() == 0 {
                // Nobody waits: the next wait starts another watcher.
                task.handle = None;
                task.period = POLL;
                return;
            }
        }
        let now = clock::suspended();
        if ignore_resumes() {
            continue;
        }
        let grew = r.seen.send_if_modified(|seen| {
            let grew = now > *seen;
            if grew {
                *seen = now;
            }
            grew
        });
        if grew {
            r.grew.notify_waiters();
        }
    }
}

/// The simulator's mutation that keeps the waits on their pre-suspend
/// timers: the watcher never tells them (never on outside tests).
fn ignore_resumes() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::IgnoreResume);
    #[cfg(not(test))]
    false
}
