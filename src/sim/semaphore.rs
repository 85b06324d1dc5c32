//! The semaphore mode's tasks: every task of every process takes permits
//! of one semaphore ([`SEMAPHORE_NAME`], 2 or 3 permits: more tasks than
//! permits), by `acquire` or `try_acquire` with a wait, a quarter of them
//! dropped mid-flight, holds each for up to a lease, then releases or
//! drops it. A permit is a hold of its slot's lock for the checker (lock
//! [`SLOT`]` + slot`, its token the permit's), watched by a monitor as a
//! lock's hold is, so that the count of permits valid at once
//! ([`Invariant::Permits`](super::checker::Invariant::Permits)) and each
//! slot's tokens are checked on the same belief intervals as mutual
//! exclusion.

use std::sync::Arc;

use futures::future::BoxFuture;
use tokio::time::Instant;

use super::checker::{short, Ev, Who, SEMAPHORE_NAME, SLOT};
use super::clients::{attempt, sleep_until, taken};
use super::ctx::Ctx;
use super::monitor::{valid_until_of, Watched};
use crate::rng::up_to;
use crate::{clock, Error, Permit};

/// Task `t` of process `p` in semaphore mode.
pub(crate) async fn task(ctx: Arc<Ctx>, p: usize, t: usize) {
    let who = Who(p, t);
    let semaphore = match ctx.procs[p]
        .manager
        .semaphore(SEMAPHORE_NAME, ctx.params.permits)
    {
        Ok(s) => s,
        Err(e) => {
            ctx.log
                .push(who, Ev::Fault(format!("semaphore(): {}", short(&e))));
            return;
        }
    };
    while Instant::now() < ctx.params.client_end {
        ctx.procs[p].gate().await;
        if up_to(4) == 0 {
            clock::sleep(ctx.ms(1, 50)).await;
            continue;
        }
        let wait = (up_to(1) == 0).then(|| ctx.ms(0, 300));
        let (op, fut): (&'static str, BoxFuture<'_, Result<Permit, Error>>) = match wait {
            None => ("acquire", Box::pin(semaphore.acquire())),
            Some(w) => ("try_acquire", Box::pin(semaphore.try_acquire(w))),
        };
        let (r, began) = attempt(&ctx, fut).await;
        let Some(permit) = taken(&ctx, who, (SLOT, op), r, None) else {
            continue;
        };
        let lock = SLOT + permit.slot() as usize;
        let hold = ctx.hold_no(permit.holder_id());
        ctx.log.push(
            who,
            Ev::Acquired {
                hold,
                lock,
                started: ctx.log.at(began.at),
                since: began.since,
                token: permit.fencing_token(),
                vu: ctx.log.at(valid_until_of(&permit)),
                fixed: false,
            },
        );
        let watched = Watched::start(&ctx, who, permit, hold);
        let lease = ctx.params.lease.as_millis() as u64;
        let until = (Instant::now() + ctx.ms(0, lease)).min(ctx.params.client_end);
        sleep_until(until).await;
        ctx.procs[p].gate().await;
        watched.end(&ctx, up_to(9) < 7).await;
    }
}
