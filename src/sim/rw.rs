//! The rw mode's tasks over one read-write lock ([`RW_NAME`]): task 0 of
//! process 0 is the writer, which asks with `write()` again and again;
//! every other task reads (`read`, or `try_read` with a wait), holding
//! each read for up to [`READ_HOLD_MAX`] and asking again within a few
//! milliseconds, so that readers overlap all along; while the faults run,
//! the other tasks also ask to write now and then (`try_write` with a
//! wait). A quarter of all acquisitions are dropped mid-flight. Writers'
//! holds are lock [`WRITER`] for the checker (their tokens the writers'),
//! readers' lock [`READER`]; each is watched by a monitor as a lock's
//! hold is.
//!
//! The writer's wait ([`Invariant::WriterWait`]): a `write()` asked once
//! every fault has healed ([`quiet`]: the fault phase's end plus the
//! longest lease plus 500 ms, past the latest heal) must return within
//! [`bound`]: the longest read hold (a reader granted just before the
//! writer first waited on a node), one queue timeout (a reader of the
//! writer's own manager waiting ahead of it), two node timeouts (an
//! attempt and its rollback), the longest backoff (a retry without a
//! release message) and 20 ms of timer jitter. Only the writer asks to
//! write then (writers are not ordered among themselves, readers are held
//! back by them), and the run goes on [`QUIET_EXTRA`] longer than the
//! other modes, so that several of its waits are checked.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::checker::{short, Ev, Invariant, Who, READER, RW_NAME, WRITER};
use super::clients::{attempt, sleep_until, taken, Began};
use super::ctx::Ctx;
use super::monitor::{valid_until_of, Held, Watched};
use super::params::{BACKOFF_MAX, QUEUE_TIMEOUT};
use crate::rng::up_to;
use crate::{clock, Error, ReadGuard, RwLock};

/// The longest read hold.
pub(crate) const READ_HOLD_MAX: Duration = Duration::from_millis(150);

/// How much longer an rw run goes on than the others: the fault-free end
/// where the writer's waits are checked.
pub(crate) const QUIET_EXTRA: Duration = Duration::from_millis(1_500);

/// From when every fault has healed (see the module docs).
pub(crate) fn quiet(ctx: &Ctx) -> Instant {
    let p = &ctx.params;
    p.fault_end + p.lease.max(p.max_fixed) + Duration::from_millis(500)
}

/// How long a writer asked from [`quiet`] on may wait (see the module
/// docs).
pub(crate) fn bound(ctx: &Ctx) -> Duration {
    READ_HOLD_MAX
        + QUEUE_TIMEOUT
        + 2 * ctx.params.node_timeout
        + BACKOFF_MAX
        + Duration::from_millis(20)
}

/// Task `t` of process `p` in rw mode.
pub(crate) async fn task(ctx: Arc<Ctx>, p: usize, t: usize) {
    let who = Who(p, t);
    let lock = ctx.procs[p].manager.rw_lock(RW_NAME);
    let mut n = 0;
    while Instant::now() < ctx.params.client_end {
        ctx.procs[p].gate().await;
        n += 1;
        let id = format!("rw:p{p}.t{t}.{n}");
        if (p, t) == (0, 0) {
            writer(&ctx, who, &lock, &id).await;
            clock::sleep(ctx.ms(0, 100)).await;
        } else if Instant::now() < ctx.params.fault_end && up_to(5) == 0 {
            let wait = ctx.ms(0, 300);
            let (r, began) = attempt(&ctx, lock.try_write(wait)).await;
            if let Some(g) = taken(&ctx, who, (WRITER, "try_write"), r, None) {
                let token = g.fencing_token();
                hold(&ctx, who, (WRITER, &id), began, g, token, ctx.ms(0, 150)).await;
            }
        } else {
            let (op, fut): (&'static str, BoxFuture<'_, Result<ReadGuard, Error>>) =
                if up_to(2) == 0 {
                    ("try_read", Box::pin(lock.try_read(ctx.ms(0, 300))))
                } else {
                    ("read", Box::pin(lock.read()))
                };
            let (r, began) = attempt(&ctx, fut).await;
            if let Some(g) = taken(&ctx, who, (READER, op), r, None) {
                let hold_for = ctx.ms(5, READ_HOLD_MAX.as_millis() as u64);
                hold(&ctx, who, (READER, &id), began, g, 0, hold_for).await;
            }
            clock::sleep(ctx.ms(0, 5)).await;
        }
    }
}

/// The writer: `write()`, some dropped mid-flight; a wait asked from
/// [`quiet`] on that outruns [`bound`] is a violation.
async fn writer(ctx: &Arc<Ctx>, who: Who, lock: &RwLock, id: &str) {
    let began = Began::now(ctx);
    let checked = began.at >= quiet(ctx);
    let drop_at = (!checked && up_to(3) == 0)
        .then(|| began.at + ctx.ms(0, 3 * ctx.params.node_timeout.as_millis() as u64));
    let stop = drop_at.unwrap_or(ctx.params.client_end);
    let r = tokio::select! {
        biased;
        r = lock.write() => Some(r),
        () = sleep_until(stop) => None,
    };
    let waited = began.at.elapsed();
    let bound = bound(ctx);
    if checked && waited > bound {
        let outcome = match &r {
            Some(Ok(_)) => "got in".to_owned(),
            Some(Err(e)) => format!("failed ({})", short(e)),
            None => "was still waiting at the end of the run".to_owned(),
        };
        ctx.log.push(
            who,
            Ev::Violation(
                Invariant::WriterWait,
                format!(
                    "write() asked at {:.3}ms {outcome} after {:.3}ms, past the bound of {:.3}ms",
                    ctx.log.at(began.at).as_secs_f64() * 1_000.0,
                    waited.as_secs_f64() * 1_000.0,
                    bound.as_secs_f64() * 1_000.0
                ),
            ),
        );
    }
    let Some(g) = taken(ctx, who, (WRITER, "write"), r, None) else {
        return;
    };
    let token = g.fencing_token();
    let hold_for = ctx.ms(0, 150);
    hold(ctx, who, (WRITER, id), began, g, token, hold_for).await;
}

/// Logs hold `id` of `lock` (the readers' or the writers'), granted to
/// `g` by an acquisition that began at `began`, holds it for `hold_for`
/// under watch of a monitor, then releases or drops it.
async fn hold<G: Held>(
    ctx: &Arc<Ctx>,
    who: Who,
    (lock, id): (usize, &str),
    began: Began,
    g: G,
    token: u64,
    hold_for: Duration,
) {
    let hold = ctx.hold_no(id);
    ctx.log.push(
        who,
        Ev::Acquired {
            hold,
            lock,
            started: ctx.log.at(began.at),
            since: began.since,
            token,
            vu: ctx.log.at(valid_until_of(&g)),
            fixed: false,
        },
    );
    let watched = Watched::start(ctx, who, g, hold);
    sleep_until((Instant::now() + hold_for).min(ctx.params.client_end)).await;
    ctx.procs[who.0].gate().await;
    watched.end(ctx, up_to(9) < 7).await;
}
