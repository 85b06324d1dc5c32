//! The election mode's tasks: every process but the last campaigns on one
//! election (task 0), and every process observes it, through a receiver of
//! `observe()` (task 1) and `leader()` reads (the other tasks; all of the
//! last process's but task 1).
//!
//! A campaign (`campaign`, or `try_campaign` with a wait, some dropped
//! mid-flight) that wins is a hold of the election's lock for the checker
//! (lock [`ELECTION`]), its term the hold's token, watched by a monitor
//! that records when `is_leader()` turns false (looked at `valid_until()`
//! on the run's clock, then every millisecond while it stays true past it)
//! and when `lost()` fires; the leader proclaims new values now and then,
//! then resigns or drops the leadership. Every leader an observer reports
//! is logged (`Ev::Observed`), to be checked against what the nodes held
//! (`records`) and what the observer reported before.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::checker::{short, Ev, Log, Who, ELECTION, ELECTION_NAME};
use super::clients::{attempt, sleep_until, taken};
use super::ctx::Ctx;
use crate::rng::up_to;
use crate::{clock, Error, Leader, Leadership};

/// How often a monitor looks again at a leadership that still believes
/// itself leader past its `valid_until()`, or that stopped believing.
const POLL: Duration = Duration::from_millis(1);

/// Task `t` of process `p` in election mode.
pub(crate) async fn task(ctx: Arc<Ctx>, p: usize, t: usize) {
    let campaigns = p + 1 < ctx.procs.len();
    match t {
        0 if campaigns => campaigner(&ctx, Who(p, t)).await,
        1 => watcher(&ctx, Who(p, t)).await,
        _ => reader(&ctx, Who(p, t)).await,
    }
}

/// Campaigns in a loop: wins, leads a while (proclaiming new values), then
/// resigns or drops the leadership.
async fn campaigner(ctx: &Arc<Ctx>, who: Who) {
    let election = ctx.procs[who.0].manager.election(ELECTION_NAME);
    let mut n = 0;
    while Instant::now() < ctx.params.client_end {
        ctx.procs[who.0].gate().await;
        if up_to(3) == 0 {
            clock::sleep(ctx.ms(1, 100)).await;
            continue;
        }
        n += 1;
        let value = format!("p{}.{n}", who.0);
        let wait = (up_to(2) == 0).then(|| ctx.ms(0, 300));
        let (op, fut): (&'static str, BoxFuture<'_, Result<Leadership, Error>>) = match wait {
            None => ("campaign", Box::pin(election.campaign(value.clone()))),
            Some(w) => (
                "try_campaign",
                Box::pin(election.try_campaign(value.clone(), w)),
            ),
        };
        let want = ctx.want(who, ELECTION, true, wait.is_some_and(|w| w.is_zero()));
        let (r, began) = attempt(ctx, fut).await;
        drop(want);
        let Some(me) = taken(ctx, who, (ELECTION, op), r, None) else {
            continue;
        };
        let hold = ctx.hold_no(me.holder_id());
        ctx.log.push(
            who,
            Ev::Acquired {
                hold,
                lock: ELECTION,
                started: ctx.log.at(began.at),
                since: began.since,
                token: me.term(),
                vu: ctx.log.at(valid_until(&me)),
                fixed: false,
            },
        );
        let l = me.leader();
        if l.term() != me.term() || l.value() != value || l.revision() != 1 {
            ctx.log.push(
                who,
                Ev::Fault(format!(
                    "leadership of term {} reports {l:?} as itself",
                    me.term()
                )),
            );
        }
        lead(ctx, who, hold, me, &value).await;
    }
}

/// Leads until a random while ends, proclaiming up to two new values, then
/// resigns or drops the leadership.
async fn lead(ctx: &Arc<Ctx>, who: Who, hold: usize, me: Leadership, value: &str) {
    let watched = Led::start(ctx, who, me, hold);
    // Up to a lease (renewed a few times, or not at all): several terms
    // a run.
    let until = (Instant::now() + ctx.ms(0, ctx.params.lease.as_millis() as u64))
        .min(ctx.params.client_end);
    for k in 0..up_to(2) {
        let left = until.saturating_duration_since(Instant::now());
        let at = Instant::now() + ctx.ms(0, left.as_millis() as u64);
        sleep_until(at).await;
        ctx.procs[who.0].gate().await;
        let next = format!("{value}.{}", k + 2);
        let result = match watched.me.proclaim(next.clone()).await {
            Ok(()) => "ok".to_owned(),
            Err(e) => short(&e),
        };
        ctx.log.push(
            who,
            Ev::Proclaimed {
                hold,
                value: next,
                result,
            },
        );
    }
    sleep_until(until).await;
    ctx.procs[who.0].gate().await;
    watched.end(ctx, up_to(9) < 7).await;
}

/// Observes through receivers of `observe()`: each kept for a while, then
/// dropped (a new receiver is a new observer).
async fn watcher(ctx: &Arc<Ctx>, who: Who) {
    let election = ctx.procs[who.0].manager.election(ELECTION_NAME);
    let end = ctx.params.client_end;
    while Instant::now() < end {
        ctx.procs[who.0].gate().await;
        let observer = ctx.observer_no();
        let mut rx = election.observe();
        let first = rx.borrow_and_update().clone();
        report(&ctx.log, who, observer, "watch", first.as_ref());
        let until = (Instant::now() + ctx.ms(100, 1_500)).min(end);
        loop {
            tokio::select! {
                biased;
                r = rx.changed() => {
                    if r.is_err() {
                        ctx.log.push(who, Ev::Fault("the watch ended".into()));
                        break;
                    }
                    let l = rx.borrow_and_update().clone();
                    report(&ctx.log, who, observer, "watch", l.as_ref());
                }
                () = sleep_until(until) => break,
            }
        }
        drop(rx);
        clock::sleep(ctx.ms(0, 50)).await;
    }
}

/// Observes by `leader()` reads, one observer for the whole run.
async fn reader(ctx: &Arc<Ctx>, who: Who) {
    let election = ctx.procs[who.0].manager.election(ELECTION_NAME);
    let observer = ctx.observer_no();
    while Instant::now() < ctx.params.client_end {
        ctx.procs[who.0].gate().await;
        match election.leader().await {
            Ok(l) => report(&ctx.log, who, observer, "read", l.as_ref()),
            Err(e) => ctx
                .log
                .push(who, Ev::Fault(format!("leader(): {}", short(&e)))),
        }
        clock::sleep(ctx.ms(1, 60)).await;
    }
}

/// Logs what observer `observer` reported.
fn report(log: &Log, who: Who, observer: usize, via: &'static str, l: Option<&Leader>) {
    log.push(
        who,
        match l {
            Some(l) => Ev::Observed {
                observer,
                via,
                term: l.term(),
                rev: l.revision(),
                value: l.value().to_owned(),
            },
            None => Ev::ObservedNone { observer, via },
        },
    );
}

/// `me.valid_until()` on the run's clock (call it in its process).
fn valid_until(me: &Leadership) -> Instant {
    clock::test::from_timer(Instant::from_std(me.valid_until()))
}

/// A leadership under watch of its monitor.
struct Led {
    me: Arc<Leadership>,
    hold: usize,
    who: Who,
    stop: tokio::sync::oneshot::Sender<()>,
    monitor: tokio::task::JoinHandle<()>,
}

impl Led {
    fn start(ctx: &Ctx, who: Who, me: Leadership, hold: usize) -> Self {
        let me = Arc::new(me);
        let (stop, stop_rx) = tokio::sync::oneshot::channel();
        let monitor = tokio::spawn(clock::inherit(monitor(
            Arc::clone(&me),
            hold,
            ctx.log.clone(),
            who,
            stop_rx,
        )));
        Self {
            me,
            hold,
            who,
            stop,
            monitor,
        }
    }

    /// Ends the leadership: `resign()` or a dropped leadership.
    async fn end(self, ctx: &Ctx, resign: bool) {
        let (hold, who) = (self.hold, self.who);
        ctx.log.push(
            who,
            Ev::Released {
                hold,
                how: if resign { "resign" } else { "drop" },
            },
        );
        let _ = self.stop.send(());
        let _ = self.monitor.await;
        let me = Arc::try_unwrap(self.me).expect("the monitor gave the leadership back");
        if resign {
            let result = match me.resign().await {
                Ok(()) => "ok".to_owned(),
                Err(e) => short(&e),
            };
            ctx.log.push(who, Ev::ReleaseResult { hold, result });
        } else {
            drop(me);
        }
    }
}

/// Records when the leadership stops (and starts again) believing itself
/// leader, and when it is lost, until its client ends it.
async fn monitor(
    me: Arc<Leadership>,
    hold: usize,
    log: Log,
    who: Who,
    mut stop: tokio::sync::oneshot::Receiver<()>,
) {
    let mut lapsed = false;
    let lost = me.lost();
    tokio::pin!(lost);
    loop {
        let vu = valid_until(&me);
        let now = Instant::now();
        let leads = me.is_leader();
        if !lapsed && !leads {
            log.push(who, Ev::Lapsed { hold });
            lapsed = true;
        } else if lapsed && leads {
            log.push(
                who,
                Ev::Resumed {
                    hold,
                    vu: log.at(vu),
                },
            );
            lapsed = false;
        }
        let wake = if lapsed || vu <= now { now + POLL } else { vu };
        tokio::select! {
            biased;
            _ = &mut stop => return,
            () = &mut lost => {
                let vu = valid_until(&me);
                log.push(who, Ev::Lost { hold, vu: log.at(vu) });
                return;
            }
            () = tokio::time::sleep_until(wake) => {}
        }
    }
}
