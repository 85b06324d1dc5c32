//! The monitor of each hold: it records when the hold stops (and starts
//! again) believing itself valid, and when its `lost()` fires, until its
//! client ends it.
//!
//! The monitor is the checker's eye, not part of the process: it reads the
//! hold's `valid_until()` on the suspend-aware clock (the run's clock, which
//! the nodes share; `valid_until()` itself is on the process's monotonic
//! clock, behind it by the time the process spent suspended) and wakes on
//! the run's clock, so a hold stops believing itself valid at its
//! `valid_until`, suspended or not. Its `lost()` is the process's: one
//! future for the whole hold, as a caller would wait on it (a fresh one
//! would check the deadline on its first poll, and hide a late signal).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::checker::{short, Ev, Log, Who};
use super::ctx::Ctx;
use crate::{Error, LockGuard, Permit, ReadGuard, WriteGuard};

/// What a monitor watches: a lock's guard, a semaphore's permit, a
/// read-write lock's read or write guard.
pub(crate) trait Held: std::fmt::Debug + Send + Sync + 'static {
    /// Its `valid_until()`.
    fn valid_until_std(&self) -> std::time::Instant;
    /// Its `lost()`.
    fn lost_signal(&self) -> BoxFuture<'_, ()>;
    /// Its `release()`.
    fn release_hold(self) -> BoxFuture<'static, Result<(), Error>>;
}

macro_rules! held {
    ($($t:ty),+) => {$(
        impl Held for $t {
            fn valid_until_std(&self) -> std::time::Instant {
                self.valid_until()
            }
            fn lost_signal(&self) -> BoxFuture<'_, ()> {
                Box::pin(self.lost())
            }
            fn release_hold(self) -> BoxFuture<'static, Result<(), Error>> {
                Box::pin(self.release())
            }
        }
    )+};
}

held!(LockGuard, Permit, ReadGuard, WriteGuard);

/// `guard.valid_until()` on the run's clock (call it in the guard's process).
pub(crate) fn valid_until(guard: &LockGuard) -> Instant {
    valid_until_of(guard)
}

/// `h.valid_until()` on the run's clock (call it in its process).
pub(crate) fn valid_until_of<H: Held>(h: &H) -> Instant {
    crate::clock::test::from_timer(Instant::from_std(h.valid_until_std()))
}

/// A hold under watch of its monitor.
pub(crate) struct Watched<G: Held = LockGuard> {
    guard: Arc<G>,
    hold: usize,
    who: Who,
    stop: tokio::sync::oneshot::Sender<()>,
    monitor: tokio::task::JoinHandle<()>,
}

impl<G: Held> Watched<G> {
    pub(crate) fn start(ctx: &Ctx, who: Who, guard: G, hold: usize) -> Self {
        let guard = Arc::new(guard);
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let monitor = tokio::spawn(crate::clock::inherit(monitor(
            Arc::clone(&guard),
            hold,
            ctx.log.clone(),
            who,
            stop_rx,
        )));
        Self {
            guard,
            hold,
            who,
            stop,
            monitor,
        }
    }

    /// Ends the hold: `release()` or a dropped guard.
    pub(crate) async fn end(self, ctx: &Ctx, release: bool) {
        let (hold, who) = (self.hold, self.who);
        ctx.log.push(
            who,
            Ev::Released {
                hold,
                how: if release { "release" } else { "drop" },
            },
        );
        let _ = self.stop.send(());
        let _ = self.monitor.await;
        let guard = Arc::try_unwrap(self.guard).expect("the monitor gave the guard back");
        if release {
            let result = match guard.release_hold().await {
                Ok(()) => "ok".to_owned(),
                Err(e) => short(&e),
            };
            ctx.log.push(who, Ev::ReleaseResult { hold, result });
        } else {
            drop(guard);
        }
    }
}

/// Records when the hold stops (and starts again) believing itself valid,
/// and when it is lost, until its client ends it.
async fn monitor<G: Held>(
    g: Arc<G>,
    hold: usize,
    log: Log,
    who: Who,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let poll = Duration::from_millis(10);
    let mut lapsed = false;
    let lost = g.lost_signal();
    tokio::pin!(lost);
    loop {
        let vu = valid_until_of(&*g);
        let now = Instant::now();
        if !lapsed && vu <= now {
            log.push(who, Ev::Lapsed { hold });
            lapsed = true;
        } else if lapsed && vu > now {
            log.push(
                who,
                Ev::Resumed {
                    hold,
                    vu: log.at(vu),
                },
            );
            lapsed = false;
        }
        let wake = if lapsed { now + poll } else { vu };
        tokio::select! {
            biased;
            _ = &mut stop => return,
            () = &mut lost => {
                let vu = valid_until_of(&*g);
                log.push(who, Ev::Lost { hold, vu: log.at(vu) });
                return;
            }
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}
