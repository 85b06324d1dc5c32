//! The clock validity is measured on: tokio's monotonic clock, moved forward
//! by the time the machine spent suspended.
//!
//! `CLOCK_MONOTONIC` (behind `Instant`) stops while a machine sleeps, so a
//! hold would look valid after a resume although its keys expired on the
//! nodes meanwhile. `CLOCK_BOOTTIME` counts the sleep: the difference between
//! how far each advanced since the process started is the time spent
//! suspended, and every validity check adds it.

use std::sync::OnceLock;
use std::time::Duration;

use tokio::time::Instant;

/// Now, on the clock that `valid_until` is kept on.
pub(crate) fn now() -> Instant {
    let now = Instant::now();
    now.checked_add(suspended()).unwrap_or(now)
}

/// Converts an instant of this clock to one of tokio's (for timers).
pub(crate) fn to_timer(at: Instant) -> Instant {
    at.checked_sub(suspended()).unwrap_or(at)
}

/// How long the machine has been suspended since the first call.
pub(crate) fn suspended() -> Duration {
    system_suspended() + test::extra()
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
    use std::time::Duration;

    thread_local! {
        static EXTRA: Cell<Duration> = const { Cell::new(Duration::ZERO) };
    }

    /// Pretends the machine slept for `d` (on this thread only).
    pub(crate) fn suspend(d: Duration) {
        EXTRA.with(|e| e.set(e.get() + d));
    }

    pub(super) fn extra() -> Duration {
        EXTRA.with(Cell::get)
    }
}

#[cfg(not(test))]
mod test {
    pub(super) fn extra() -> std::time::Duration {
        std::time::Duration::ZERO
    }
}
