//! A client in the critical section: entering it with a guard, working while
//! watching the validity and the loss signal, recording all of it in a
//! [`History`], and the counters of what happened.

#![allow(dead_code, clippy::panic)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{LockGuard, LockManager, WatchdogStats};

use crate::history::{History, Hold};

/// Records that `client` entered the critical section with `guard`.
pub fn enter(history: &Arc<History>, client: &str, guard: &LockGuard) -> Hold {
    history.enter(
        client,
        guard.holder_id(),
        guard.fencing_token(),
        guard.valid_until(),
    )
}

/// Runs `fut` while the holder of `guard` keeps working: it reads its
/// validity every 50 ms (a holder that stopped looking would see a stale
/// validity lapse). Panics if the validity lapses or the lock is lost.
pub async fn while_holding<F: std::future::Future>(
    hold: &mut Hold,
    guard: &LockGuard,
    fut: F,
) -> F::Output {
    tokio::pin!(fut);
    loop {
        assert!(
            hold.observe(guard.valid_until()) && !guard.is_lost(),
            "the hold should stay valid: {guard:?}"
        );
        tokio::select! {
            out = &mut fut => return out,
            () = tokio::time::sleep(Duration::from_millis(50)) => {}
        }
    }
}

/// Counters of one contending client.
#[derive(Debug, Default, Clone, Copy)]
pub struct ClientStats {
    pub attempts: u64,
    pub acquisitions: u64,
    pub losses: u64,
    pub lapses: u64,
    pub contended: u64,
    pub unavailable: u64,
    pub exhausted: u64,
    pub release_errors: u64,
    /// Of which: the lock had been lost / had expired / was held by another
    /// owner / too many nodes failed to confirm.
    pub release_lost: u64,
    pub release_expired: u64,
    pub release_not_held: u64,
    pub release_unavailable: u64,
}

impl ClientStats {
    pub fn add(&mut self, o: &ClientStats) {
        self.attempts += o.attempts;
        self.acquisitions += o.acquisitions;
        self.losses += o.losses;
        self.lapses += o.lapses;
        self.contended += o.contended;
        self.unavailable += o.unavailable;
        self.exhausted += o.exhausted;
        self.release_errors += o.release_errors;
        self.release_lost += o.release_lost;
        self.release_expired += o.release_expired;
        self.release_not_held += o.release_not_held;
        self.release_unavailable += o.release_unavailable;
    }
}

/// One pass of a contending client: takes `name` (waiting at most `wait`;
/// renewed while held), works in the critical section for `work` while
/// watching its validity and the loss signal, records all of it in
/// `history`, leaves, releases. Returns whether it got the lock.
pub async fn critical_section(
    manager: &LockManager,
    name: &str,
    client: &str,
    history: &Arc<History>,
    wait: Duration,
    work: Duration,
    stats: &mut ClientStats,
) -> bool {
    let acquired = manager.try_lock(name, wait).await;
    work_in_section(acquired, client, history, work, stats).await
}

/// [`critical_section`] with a fixed `lease`, not renewed: a `work` longer
/// than the validity ends when the validity lapses.
#[allow(clippy::too_many_arguments)]
pub async fn fixed_lease_section(
    manager: &LockManager,
    name: &str,
    client: &str,
    history: &Arc<History>,
    lease: Duration,
    wait: Duration,
    work: Duration,
    stats: &mut ClientStats,
) -> bool {
    let acquired = manager
        .request(name)
        .lease(lease)
        .wait(wait)
        .acquire()
        .await;
    work_in_section(acquired, client, history, work, stats).await
}

/// The body of both kinds of section, from the outcome of the acquisition.
async fn work_in_section(
    acquired: Result<LockGuard, quorumlock::Error>,
    client: &str,
    history: &Arc<History>,
    work: Duration,
    stats: &mut ClientStats,
) -> bool {
    stats.attempts += 1;
    let guard = match acquired {
        Ok(guard) => guard,
        Err(e) if e.is_contended() => {
            stats.contended += 1;
            return false;
        }
        Err(e) if e.is_unavailable() => {
            stats.unavailable += 1;
            return false;
        }
        Err(e) if e.is_validity_exhausted() => {
            stats.exhausted += 1;
            return false;
        }
        Err(e) => panic!("{client}: unexpected acquisition error: {e}"),
    };
    stats.acquisitions += 1;
    let mut hold = enter(history, client, &guard);
    let done = Instant::now() + work;
    loop {
        if !hold.observe(guard.valid_until()) {
            if !hold.is_lost() {
                stats.lapses += 1;
            }
            break;
        }
        let now = Instant::now();
        if now >= done {
            break;
        }
        tokio::select! {
            biased;
            () = guard.lost() => {
                hold.lost_now();
                stats.losses += 1;
                break;
            }
            () = tokio::time::sleep((done - now).min(Duration::from_millis(10))) => {}
        }
    }
    hold.exit(guard.valid_until());
    let released = guard.release().await;
    if let Err(e) = released {
        stats.release_errors += 1;
        if e.is_lost() {
            stats.release_lost += 1;
        } else if e.is_expired() {
            stats.release_expired += 1;
        } else if e.is_not_held() {
            stats.release_not_held += 1;
        } else if e.is_unavailable() {
            stats.release_unavailable += 1;
        } else {
            panic!("{client}: unexpected release error: {e}");
        }
    }
    true
}

/// Sums watchdog counters.
pub fn sum_stats(managers: &[LockManager]) -> WatchdogStats {
    let mut t = WatchdogStats::default();
    for m in managers {
        let s = m.watchdog_stats();
        t.ticks += s.ticks;
        t.extended += s.extended;
        t.repairs += s.repairs;
        t.conflicts += s.conflicts;
        t.node_errors += s.node_errors;
        t.losses += s.losses;
    }
    t
}
