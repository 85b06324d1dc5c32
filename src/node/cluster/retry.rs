//! When a cluster member sends one script call again, apart from how it
//! is sent: what an error proves ([`Failure`], read from a `RedisError` by
//! `route::failure`) and what follows it ([`Retry::after`]). No
//! I/O, so that the simulator's sharded member (`sim::shards`) follows the
//! very rules `node` does.
//!
//! The rules (see `node`'s module doc): `NOSCRIPT` is sent again
//! once as `EVAL`; `MOVED` and `ASK` to the address named (`ASK` after
//! `ASKING`), at most [`MAX_TRIES`] redirects; `TRYAGAIN`, `CLUSTERDOWN`,
//! ..., a refused connection or no connection yet after a pause, 5 ms
//! doubling up to 100 ms, while the node timeout lasts (after `ASK`, to
//! the target again); after a broken connection only a call whose
//! [`Resend`] allows it, once; anything else may have run and ends it.

use std::time::Duration;

use tokio::time::Instant;

use crate::node::script_call::Resend;

/// Tries of one script call, redirects and pauses included (the caller's
/// timeout bounds them too).
pub(crate) const MAX_TRIES: usize = 8;

/// The first and the longest pause before a call proven not run is sent
/// again.
const PAUSE_MIN: Duration = Duration::from_millis(5);
const PAUSE_MAX: Duration = Duration::from_millis(100);

/// Where to send a call again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Redirect {
    /// By the first key's slot, as the client's map says.
    BySlot,
    /// To this address (`MOVED`).
    Moved(String, u16),
    /// To this address, after `ASKING` (`ASK`: the slot is migrating).
    Ask(String, u16),
}

/// What an error says about sending the call again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Next {
    /// Proven not run: send again, routed so.
    Again(Redirect),
    /// Proven not run: send again after a pause.
    Pause,
    /// It may have run.
    MayHaveRun,
}

/// What one failed try proves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Failure {
    pub(crate) next: Next,
    /// `NOSCRIPT`: the node lacks the script (nothing ran).
    pub(crate) no_script: bool,
    /// The connection broke (the call may have run).
    pub(crate) broken: bool,
}

/// What to do after a failed try.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Step {
    /// Send again now, as [`Retry::route`] and [`Retry::send_body`] say;
    /// `moved`: after `MOVED` (the client's slot map is stale).
    Again { moved: bool },
    /// Send again after this pause.
    Wait(Duration),
    /// Give up: the try's error is the call's.
    Stop,
}

/// The retry state of one script call.
#[derive(Debug)]
pub(crate) struct Retry {
    route: Redirect,
    send_body: bool,
    /// Resends left after a broken connection.
    after_break: usize,
    started: Instant,
    pause: Duration,
    redirects: usize,
    /// How long a call proven not run is sent again: the node timeout.
    patience: Duration,
}

impl Retry {
    /// A call sent again only as `resend` allows, for at most `patience`.
    pub(crate) fn new(resend: Resend, patience: Duration) -> Self {
        Self {
            route: Redirect::BySlot,
            send_body: false,
            after_break: usize::from(resend == Resend::AfterBrokenConnection),
            started: Instant::now(),
            pause: PAUSE_MIN,
            redirects: 0,
            patience,
        }
    }

    /// Where the next try goes.
    pub(crate) fn route(&self) -> &Redirect {
        &self.route
    }

    /// Whether the next try sends the script's body (`EVAL`).
    pub(crate) fn send_body(&self) -> bool {
        self.send_body
    }

    /// After a try that failed with `f`: whether and how to try again.
    pub(crate) fn after(&mut self, f: &Failure) -> Step {
        if f.no_script && !self.send_body {
            self.send_body = true;
            return Step::Again { moved: false };
        }
        match &f.next {
            Next::Again(to) => {
                self.redirects += 1;
                if self.redirects > MAX_TRIES {
                    return Step::Stop;
                }
                self.route = to.clone();
                Step::Again {
                    moved: matches!(to, Redirect::Moved(..)),
                }
            }
            Next::Pause => {
                // Proven not run: again after a pause, for as long as the
                // caller waits (its timeout drops the call), at most the
                // node timeout. `TRYAGAIN` after `ASK`: the target imports
                // the slot still; ask it again (it answers `MOVED` if the
                // migration was undone). Else by the slot.
                if self.started.elapsed().saturating_add(self.pause) >= self.patience {
                    return Step::Stop;
                }
                if !matches!(self.route, Redirect::Ask(..)) {
                    self.route = Redirect::BySlot;
                }
                let pause = self.pause;
                self.pause = (pause * 2).min(PAUSE_MAX);
                Step::Wait(pause)
            }
            Next::MayHaveRun if f.broken && (self.after_break > 0 || resend_may_have_run()) => {
                self.after_break = self.after_break.saturating_sub(1);
                self.route = Redirect::BySlot;
                Step::Again { moved: false }
            }
            Next::MayHaveRun => Step::Stop,
        }
    }
}

/// The simulator's mutation that sends any call again after a broken
/// connection, an acquire or a forced release too.
fn resend_may_have_run() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::ResendMayHaveRun);
    #[cfg(not(test))]
    false
}

/// The simulator's mutation that reads a response timeout as a broken
/// connection (`route::failure` before the fix).
pub(super) fn timeout_is_broken() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::TimeoutIsBroken);
    #[cfg(not(test))]
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(next: Next, broken: bool) -> Failure {
        Failure {
            next,
            no_script: false,
            broken,
        }
    }

    /// A call that may have run is sent again only after a broken
    /// connection, once, and only when its `Resend` allows it.
    #[tokio::test(start_paused = true)]
    async fn a_call_that_may_have_run_is_sent_again_only_as_allowed() {
        let broken = failure(Next::MayHaveRun, true);
        let mut never = Retry::new(Resend::Never, Duration::from_millis(50));
        assert_eq!(never.after(&broken), Step::Stop);
        let mut once = Retry::new(Resend::AfterBrokenConnection, Duration::from_millis(50));
        assert_eq!(once.after(&broken), Step::Again { moved: false });
        assert_eq!(once.after(&broken), Step::Stop);
        let mut other = Retry::new(Resend::AfterBrokenConnection, Duration::from_millis(50));
        assert_eq!(other.after(&failure(Next::MayHaveRun, false)), Step::Stop);
    }

    /// Redirects are followed (at most `MAX_TRIES`); `TRYAGAIN` after
    /// `ASK` asks the target again, after a doubling pause, within the
    /// node timeout.
    #[tokio::test(start_paused = true)]
    async fn redirects_and_pauses_follow_the_answers() {
        let mut r = Retry::new(Resend::Never, Duration::from_millis(50));
        let ask = Redirect::Ask("h".into(), 1);
        assert_eq!(
            r.after(&failure(Next::Again(ask.clone()), false)),
            Step::Again { moved: false }
        );
        assert_eq!(r.after(&failure(Next::Pause, false)), Step::Wait(PAUSE_MIN));
        assert_eq!(r.route(), &ask, "asked there again");
        let moved = Redirect::Moved("h".into(), 2);
        assert_eq!(
            r.after(&failure(Next::Again(moved), false)),
            Step::Again { moved: true }
        );
        assert_eq!(
            r.after(&failure(Next::Pause, false)),
            Step::Wait(2 * PAUSE_MIN)
        );
        assert_eq!(r.route(), &Redirect::BySlot);
        tokio::time::sleep(Duration::from_millis(40)).await;
        assert_eq!(
            r.after(&failure(Next::Pause, false)),
            Step::Stop,
            "patience"
        );
        let mut r = Retry::new(Resend::Never, Duration::from_secs(1));
        let again = failure(Next::Again(Redirect::Moved("h".into(), 3)), false);
        for _ in 0..MAX_TRIES {
            assert_eq!(r.after(&again), Step::Again { moved: true });
        }
        assert_eq!(r.after(&again), Step::Stop);
        let mut r = Retry::new(Resend::Never, Duration::from_secs(1));
        let no_script = Failure {
            next: Next::MayHaveRun,
            no_script: true,
            broken: false,
        };
        assert_eq!(r.after(&no_script), Step::Again { moved: false });
        assert!(r.send_body());
        assert_eq!(r.after(&no_script), Step::Stop, "NOSCRIPT to EVAL");
    }
}
