//! The client tasks: a random mix of acquisitions, re-entries, releases,
//! drops, cancellations and force-unlocks, each hold watched by a monitor
//! (`monitor`) that records when it believes itself valid. A task runs in
//! its process ([`crate::clock::test::Process`]): its sleeps are on the
//! process's monotonic clock, late after a suspend as the code's are.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::checker::{short, Ev, Invariant, Who, LOCKS};
use super::ctx::Ctx;
use super::monitor::{valid_until, Watched};
use crate::clock;
use crate::rng::up_to;
use crate::{Error, LockGuard};

/// Slack on top of the acquisition bound (scheduling of the paused clock).
const MARGIN: Duration = Duration::from_millis(5);

/// How an acquisition was asked for.
#[derive(Clone, Copy)]
enum Ask {
    Lock,
    TryLock(Duration),
    Lease(Duration),
}

impl Ask {
    fn name(self) -> &'static str {
        match self {
            Self::Lock => "lock",
            Self::TryLock(_) => "try_lock",
            Self::Lease(_) => "lock_with_lease",
        }
    }
}

/// One client task of process `p`.
pub(crate) async fn client(ctx: Arc<Ctx>, p: usize, t: usize) {
    let who = Who(p, t);
    let end = ctx.params.client_end;
    while Instant::now() < end {
        ctx.procs[p].gate().await;
        // Task `t` of every process uses lock `t`: processes contend, the
        // tasks of one process do not (determinism: see the `sim` docs).
        let l = t % LOCKS.len();
        // Sets mode: a third of the sessions take locks `l` and `l + 1`
        // together (a set polls: never a second local waiter of a lock).
        if ctx.params.sets && up_to(2) == 0 {
            set_session(&ctx, who, l).await;
            continue;
        }
        match up_to(99) {
            0..=29 => session(&ctx, who, l, Ask::Lock, false).await,
            30..=54 => {
                let wait = ctx.ms(0, 300);
                session(&ctx, who, l, Ask::TryLock(wait), false).await;
            }
            55..=69 => {
                let lease = ctx.ms(
                    ctx.params.min_fixed.as_millis() as u64,
                    ctx.params.max_fixed.as_millis() as u64,
                );
                session(&ctx, who, l, Ask::Lease(lease), false).await;
            }
            70..=86 => {
                let wait = ctx.ms(0, 300);
                session(&ctx, who, l, Ask::TryLock(wait), true).await;
            }
            87..=88 => {
                ctx.log.push(who, Ev::ForceUnlock { lock: l });
                let r = ctx.procs[p].manager.force_unlock(LOCKS[l]).await;
                if let Err(e) = r {
                    ctx.log
                        .push(who, Ev::Fault(format!("force_unlock: {}", short(&e))));
                }
            }
            _ => clock::sleep(ctx.ms(1, 100)).await,
        }
    }
}

/// When an acquisition began: on the run's clock, and the log's length
/// then (a causal order where the virtual time ties).
#[derive(Clone, Copy)]
pub(super) struct Began {
    pub(super) at: Instant,
    pub(super) since: usize,
}

impl Began {
    pub(super) fn now(ctx: &Ctx) -> Self {
        Self {
            at: Instant::now(),
            since: ctx.log.mark(),
        }
    }
}

/// Runs an acquisition beginning now. Some are dropped mid-flight, the
/// rest are cut at the end of the run: `None` for both.
pub(super) async fn attempt<T>(
    ctx: &Ctx,
    acquire: impl std::future::Future<Output = Result<T, Error>>,
) -> (Option<Result<T, Error>>, Began) {
    let began = Began::now(ctx);
    let stop = if up_to(3) == 0 {
        began.at + ctx.ms(0, 3 * ctx.params.node_timeout.as_millis() as u64)
    } else {
        ctx.params.client_end
    };
    let r = tokio::select! {
        biased;
        r = acquire => Some(r),
        () = sleep_until(stop) => None,
    };
    (r, began)
}

/// How far an acquisition that began at `began` and waited up to `wait`
/// ran past its bound: the wait, the last attempt's fan-out, and its
/// rollback, which is awaited so that a retry never meets its own leftover
/// grants.
fn overrun(ctx: &Ctx, began: Began, wait: Duration) -> Option<Duration> {
    began
        .at
        .elapsed()
        .checked_sub(wait + 2 * ctx.params.node_timeout + MARGIN)
        .filter(|late| !late.is_zero())
}

/// What an acquisition of `lock` (asked for as `op`) came to: logs a
/// cancellation or a failure, and gives what it took otherwise.
pub(super) fn taken<T>(
    ctx: &Ctx,
    who: Who,
    (lock, op): (usize, &'static str),
    r: Option<Result<T, Error>>,
    late: Option<Duration>,
) -> Option<T> {
    match r {
        None => {
            ctx.log.push(who, Ev::Cancelled { lock, op });
            None
        }
        Some(Err(e)) => {
            let error = short(&e);
            ctx.log.push(
                who,
                Ev::Failed {
                    lock,
                    op,
                    error,
                    late,
                },
            );
            None
        }
        Some(Ok(taken)) => Some(taken),
    }
}

/// Flags an acquisition (asked for as `op`) that ran `late` past its bound.
fn flag_late(ctx: &Ctx, who: Who, op: &str, late: Option<Duration>) {
    if let Some(late) = late {
        ctx.log.push(
            who,
            Ev::Violation(
                Invariant::Bounded,
                format!("{op} took {late:?} past its bound"),
            ),
        );
    }
}

/// Logs hold `hold` of `lock`, granted to `guard` by an acquisition that
/// began at `began`; `fixed`: a fixed lease (no watchdog).
fn acquired(
    ctx: &Ctx,
    who: Who,
    (lock, hold): (usize, usize),
    began: Began,
    guard: &LockGuard,
    fixed: bool,
) {
    ctx.log.push(
        who,
        Ev::Acquired {
            hold,
            lock,
            started: ctx.log.at(began.at),
            since: began.since,
            token: guard.fencing_token(),
            vu: ctx.log.at(valid_until(guard)),
            fixed,
        },
    );
}

/// Until when to hold a grant of `lease`: a random while up to two leases,
/// within the run.
fn hold_until(ctx: &Ctx, lease: Duration) -> Instant {
    let hold_for = ctx.ms(0, 2 * lease.as_millis() as u64);
    (Instant::now() + hold_for).min(ctx.params.client_end)
}

/// Acquires, holds for a while (re-entering if asked), then releases or drops.
async fn session(ctx: &Arc<Ctx>, who: Who, l: usize, ask: Ask, reenter: bool) {
    let m = &ctx.procs[who.0].manager;
    let owner = reenter.then(|| m.new_owner());
    let name = LOCKS[l];
    let fair;
    let fut: BoxFuture<'_, Result<LockGuard, Error>> = {
        let mut req = m.request(name);
        if let Some(o) = &owner {
            req = req.owner(o);
        }
        req = match ask {
            Ask::Lock => req,
            Ask::TryLock(w) => req.wait(w),
            Ask::Lease(lease) => req.lease(lease),
        };
        fair = ctx.params.fair && !matches!(ask, Ask::Lease(_)) && up_to(1) == 0;
        Box::pin(if fair { req.fair() } else { req }.acquire())
    };
    let want = ctx.want(who, l, fair, matches!(ask, Ask::TryLock(w) if w.is_zero()));
    let (r, began) = attempt(ctx, fut).await;
    drop(want);
    let late = match ask {
        Ask::TryLock(w) => overrun(ctx, began, w),
        _ => None,
    };
    let Some(guard) = taken(ctx, who, (l, ask.name()), r, late) else {
        return;
    };
    let hold = ctx.hold_no(guard.holder_id());
    let token = guard.fencing_token();
    acquired(
        ctx,
        who,
        (l, hold),
        began,
        &guard,
        matches!(ask, Ask::Lease(_)),
    );
    flag_late(ctx, who, "try_lock", late);
    let watched = Watched::start(ctx, who, guard, hold);
    let lease = match ask {
        Ask::Lease(lease) => lease,
        _ => ctx.params.lease,
    };
    let until = hold_until(ctx, lease);
    if let Some(o) = &owner {
        sleep_until(began.at + (until - began.at) / 2).await;
        ctx.procs[who.0].gate().await;
        reentry(ctx, who, l, hold, token, o).await;
    }
    sleep_until(until).await;
    ctx.procs[who.0].gate().await;
    watched.end(ctx, up_to(9) < 7).await;
}

/// Takes locks `l` and `l + 1` with `try_lock_all`, holds them a while,
/// then releases or drops each. Every name is a hold of its own for the
/// checker (numbered by holder id and name: the set shares one holder id).
async fn set_session(ctx: &Arc<Ctx>, who: Who, l: usize) {
    let m = &ctx.procs[who.0].manager;
    let ls = [l, (l + 1) % LOCKS.len()];
    let wait = ctx.ms(0, 300);
    let (r, began) = attempt(ctx, m.try_lock_all([LOCKS[ls[0]], LOCKS[ls[1]]], wait)).await;
    let late = overrun(ctx, began, wait);
    let Some(set) = taken(ctx, who, (ls[0], "try_lock_all"), r, late) else {
        return;
    };
    flag_late(ctx, who, "try_lock_all", late);
    let mut watched = Vec::new();
    for guard in set.into_guards() {
        let Some(lock) = LOCKS.iter().position(|n| *n == guard.name()) else {
            continue;
        };
        let hold = ctx.hold_no(&format!("{}#{}", guard.holder_id(), guard.name()));
        acquired(ctx, who, (lock, hold), began, &guard, false);
        watched.push(Watched::start(ctx, who, guard, hold));
    }
    sleep_until(hold_until(ctx, ctx.params.lease)).await;
    ctx.procs[who.0].gate().await;
    let release = up_to(9) < 7;
    for w in watched {
        w.end(ctx, release).await;
    }
}

/// Re-enters the hold through its explicit owner, holds a little, releases.
/// If the hold was lost meanwhile, this is a fresh acquisition, watched
/// like any other.
async fn reentry(ctx: &Arc<Ctx>, who: Who, l: usize, hold: usize, token: u64, o: &crate::Owner) {
    let m = &ctx.procs[who.0].manager;
    let name = LOCKS[l];
    let began = Began::now(ctx);
    let r = m
        .request(name)
        .owner(o)
        .wait(Duration::ZERO)
        .acquire()
        .await;
    let Some(g) = taken(ctx, who, (l, "reenter"), Some(r), None) else {
        return;
    };
    let again = ctx.hold_no(g.holder_id());
    if again == hold {
        ctx.log.push(
            who,
            Ev::Reentered {
                hold,
                count: g.hold_count(),
            },
        );
        if g.fencing_token() != token {
            ctx.log.push(
                who,
                Ev::Violation(
                    Invariant::Fencing,
                    format!("re-entry of hold {hold} changed its token"),
                ),
            );
        }
        clock::sleep(ctx.ms(0, 50)).await;
        if up_to(1) == 0 {
            let _ = g.release().await;
        }
        return;
    }
    acquired(ctx, who, (l, again), began, &g, false);
    let watched = Watched::start(ctx, who, g, again);
    clock::sleep(ctx.ms(0, 50)).await;
    watched.end(ctx, up_to(1) == 0).await;
}

/// Sleeps until `at` of the run's clock, on the process's monotonic clock
/// (armed now: a suspend that begins meanwhile delays it).
pub(super) async fn sleep_until(at: Instant) {
    clock::sleep(at.saturating_duration_since(Instant::now())).await;
}
