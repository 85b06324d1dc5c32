//! The clock validity is measured on: tokio's monotonic clock, moved forward
//! by the time the machine spent suspended.
//!
//! `CLOCK_MONOTONIC` (behind `Instant`) stops while a machine sleeps, so a
//! hold would look valid after a resume although its keys expired on the
//! nodes meanwhile. `CLOCK_BOOTTIME` counts the sleep: the difference between
//! how far each advanced since the process started is the time spent
//! suspended, and every validity check adds it.
//!
//! The timers that must see a suspend as a real machine does (the loss
//! signals' deadline, the resume watcher's poll, the watchdog's ticks) go
//! through [`sleep_until`], [`sleep`] and [`ticker`] on [`monotonic`]
//! instants, and the tasks of a manager are spawned through [`inherit`].
//! Outside tests these are tokio's own calls. In tests, a simulated process
//! ([`test::Process`]) has a monotonic clock of its own that stands still
//! while it is suspended, although tokio's (shared, paused) clock goes on.

use std::future::Future;
use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::{Instant, Interval};

/// Now, on the clock that `valid_until` is kept on.
pub(crate) fn now() -> Instant {
    let now = monotonic();
    now.checked_add(suspended()).unwrap_or(now)
}

/// Converts an instant of this clock to one of the monotonic clock (for
/// timers).
pub(crate) fn to_timer(at: Instant) -> Instant {
    at.checked_sub(suspended()).unwrap_or(at)
}

/// How long the machine has been suspended since the first call.
pub(crate) fn suspended() -> Duration {
    system_suspended() + test::extra()
}

/// Now, on the monotonic clock that timers run on: tokio's.
#[cfg(not(test))]
#[inline]
pub(crate) fn monotonic() -> Instant {
    Instant::now()
}

/// Now, on the monotonic clock that timers run on: tokio's, behind it by
/// the time a simulated process spent suspended.
#[cfg(test)]
pub(crate) fn monotonic() -> Instant {
    let now = Instant::now();
    now.checked_sub(test::lag()).unwrap_or(now)
}

/// Sleeps until the monotonic clock reaches `at`.
#[cfg(not(test))]
#[inline]
pub(crate) fn sleep_until(at: Instant) -> tokio::time::Sleep {
    tokio::time::sleep_until(at)
}

/// Sleeps until the monotonic clock reaches `at` (in a simulated process,
/// late by every suspend that began meanwhile).
#[cfg(test)]
pub(crate) async fn sleep_until(at: Instant) {
    test::sleep_until(at).await;
}

/// Sleeps for `d` of the monotonic clock.
#[cfg(not(test))]
#[inline]
pub(crate) fn sleep(d: Duration) -> tokio::time::Sleep {
    tokio::time::sleep(d)
}

/// Sleeps for `d` of the monotonic clock.
#[cfg(test)]
pub(crate) async fn sleep(d: Duration) {
    let now = monotonic();
    test::sleep_until(now.checked_add(d).unwrap_or(now)).await;
}

/// Ticks every `period` of the monotonic clock, the first one `period` from
/// now; a tick that comes late delays the ones after it.
pub(crate) fn ticker(period: Duration) -> Ticker {
    let mut interval = tokio::time::interval_at(Instant::now() + period, period);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    Ticker {
        interval,
        #[cfg(test)]
        armed: test::lag(),
    }
}

/// See [`ticker`].
pub(crate) struct Ticker {
    interval: Interval,
    /// The simulated process's suspended time when the next tick was armed.
    #[cfg(test)]
    armed: Duration,
}

impl Ticker {
    /// Waits for the next tick.
    pub(crate) async fn tick(&mut self) {
        self.interval.tick().await;
        #[cfg(test)]
        {
            // tokio's interval runs on tokio's clock, which goes on while a
            // simulated process is suspended: the part of a suspend that
            // came after the tick was armed delays it.
            if test::lag() > self.armed {
                let fired = Instant::now();
                test::sleep_until(fired.checked_sub(self.armed).unwrap_or(fired)).await;
                self.interval.reset();
            }
            self.armed = test::lag();
        }
    }
}

/// Runs `fut` in the simulated process of the caller, if any: the tasks a
/// manager spawns belong to the process that spawned them.
#[cfg(not(test))]
#[inline]
pub(crate) fn inherit<F: Future>(fut: F) -> F {
    fut
}

/// Runs `fut` in the simulated process of the caller, if any: the tasks a
/// manager spawns belong to the process that spawned them.
#[cfg(test)]
pub(crate) fn inherit<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    test::inherit(fut)
}

#[cfg(target_os = "linux")]
fn system_suspended() -> Duration {
    use nix::time::{clock_gettime, ClockId};
    fn boottime() -> Option<Duration> {
        let t = clock_gettime(ClockId::CLOCK_BOOTTIME).ok()?;
        let secs = u64::try_from(t.tv_sec()).ok()?;
        let nanos = u32::try_from(t.tv_nsec()).ok()?;
        Some(Duration::new(secs, nanos))
    }
    static START: OnceLock<Option<(std::time::Instant, Duration)>> = OnceLock::new();
    let Some((mono0, boot0)) =
        *START.get_or_init(|| Some((std::time::Instant::now(), boottime()?)))
    else {
        return Duration::ZERO;
    };
    let Some(boot) = boottime() else {
        return Duration::ZERO;
    };
    let mono = mono0.elapsed();
    // Below a millisecond the two clocks disagree by reading order only.
    boot.saturating_sub(boot0)
        .saturating_sub(mono)
        .checked_sub(Duration::from_millis(1))
        .unwrap_or_default()
}

#[cfg(not(target_os = "linux"))]
fn system_suspended() -> Duration {
    Duration::ZERO
}

#[cfg(test)]
pub(crate) mod test {
    use std::cell::Cell;
    use std::future::Future;
    use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
    use std::time::Duration;

    use tokio::sync::Notify;
    use tokio::time::Instant;

    thread_local! {
        static EXTRA: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    /// Pretends the machine slept for `d` (on this thread only): the
    /// suspend-aware clock jumps, tokio's clock (the monotonic one here)
    /// does not move.
    pub(crate) fn suspend(d: Duration) {
        EXTRA.with(|e| e.set(e.get() + d));
    }

    tokio::task_local! {
        /// The simulated process the current task belongs to.
        static PROCESS: Arc<Process>;
    }

    /// A simulated process, one machine of the simulator: while it is
    /// suspended, its monotonic clock stands still and the suspend-aware
    /// clock goes on with tokio's (which the nodes and the other processes
    /// run on). So [`super::now`] in the process is tokio's now, its
    /// [`super::suspended`] is the time it spent suspended, its
    /// [`super::monotonic`] is tokio's now minus that, and a timer it armed
    /// on the monotonic clock before a suspend fires late by the suspend.
    /// Its tasks run inside [`scope`]; the tasks they spawn through
    /// [`super::inherit`] too.
    #[derive(Default)]
    pub(crate) struct Process {
        /// Its suspends on tokio's clock, `[from, until)`, in order.
        suspends: Mutex<Vec<(Instant, Instant)>>,
        /// Wakes its timers when a suspend begins.
        began: Notify,
    }

    impl Process {
        pub(crate) fn new() -> Arc<Self> {
            Arc::default()
        }

        fn suspends(&self) -> MutexGuard<'_, Vec<(Instant, Instant)>> {
            self.suspends.lock().unwrap_or_else(PoisonError::into_inner)
        }

        /// Suspends the process for `d` from now.
        pub(crate) fn suspend(&self, d: Duration) {
            let now = Instant::now();
            self.suspends().push((now, now + d));
            self.began.notify_waiters();
        }

        /// How long it has been suspended by `at`.
        fn suspended(&self, at: Instant) -> Duration {
            self.suspends()
                .iter()
                .filter(|(from, _)| *from < at)
                .map(|(from, until)| (*until).min(at) - *from)
                .sum()
        }

        /// When the suspend that `at` is in ends.
        fn resumes(&self, at: Instant) -> Option<Instant> {
            self.suspends()
                .iter()
                .find(|(from, until)| *from <= at && at < *until)
                .map(|(_, until)| *until)
        }

        /// Sleeps until its monotonic clock reaches `at`.
        async fn sleep_until(&self, at: Instant) {
            loop {
                let began = self.began.notified();
                tokio::pin!(began);
                began.as_mut().enable();
                let now = Instant::now();
                let wake = match self.resumes(now) {
                    // Nothing of it runs before the resume.
                    Some(until) => until,
                    None => {
                        let wake = at.checked_add(self.suspended(now)).unwrap_or(at);
                        if wake <= now {
                            return;
                        }
                        wake
                    }
                };
                tokio::select! {
                    biased;
                    () = tokio::time::sleep_until(wake) => {}
                    () = began => {}
                }
            }
        }
    }

    /// Runs `fut` as a task of `process`.
    pub(crate) fn scope<F: Future>(
        process: Arc<Process>,
        fut: F,
    ) -> impl Future<Output = F::Output> {
        PROCESS.scope(process, fut)
    }

    pub(super) fn inherit<F: Future>(fut: F) -> impl Future<Output = F::Output> {
        let process = PROCESS.try_with(Arc::clone).ok();
        async move {
            match process {
                Some(p) => PROCESS.scope(p, fut).await,
                None => fut.await,
            }
        }
    }

    /// How far the current process's monotonic clock is behind tokio's.
    pub(super) fn lag() -> Duration {
        PROCESS
            .try_with(|p| p.suspended(Instant::now()))
            .unwrap_or_default()
    }

    pub(super) fn extra() -> Duration {
        EXTRA.with(Cell::get) + lag()
    }

    pub(super) async fn sleep_until(at: Instant) {
        match PROCESS.try_with(Arc::clone) {
            Ok(p) => p.sleep_until(at).await,
            Err(_) => tokio::time::sleep_until(at).await,
        }
    }

    /// An instant of the monotonic clock (a timer's, or
    /// [`LockGuard::valid_until`](crate::LockGuard::valid_until)) back on
    /// the suspend-aware clock, which in the simulator is tokio's.
    pub(crate) fn from_timer(at: Instant) -> Instant {
        at + super::suspended()
    }
}

#[cfg(not(test))]
mod test {
    pub(super) fn extra() -> std::time::Duration {
        std::time::Duration::ZERO
    }
}
