//! The fault schedule: node outages, slow and lossy links, restarts, clock
//! jumps, process stalls and suspends, drawn from the run's RNG.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::checker::{Ev, WORLD};
use super::ctx::Ctx;
use super::net::{Cut, Health};
use super::params::Mode;
use crate::rng::up_to;
use crate::sync::locked;

/// One fault.
#[derive(Debug, Clone, Copy)]
enum Kind {
    FailFast,
    BlackHole,
    Slow,
    CutRequests,
    CutReplies,
    /// A node whose calls run and then fail at once with a connection
    /// error, on every process's link (the replies are lost to resets).
    ResetReplies,
    RestartWithData,
    /// Restart empty, rejoining only after the longest lease (safe).
    RestartEmptyLate,
    /// Restart empty and rejoin at once (unsafe).
    RestartEmptyNow,
    /// A forward clock step within the drift allowance (safe).
    SmallJump,
    /// A forward clock step beyond it (unsafe).
    BigJump,
    Stall,
    /// The process's machine sleeps: a stall during which the process's
    /// monotonic clock stands still (its timers armed before it fire late
    /// by its length) while its suspend-aware clock and the nodes' go on.
    Suspend,
    /// A process pause that starts as the process receives its next grant,
    /// before it acts on it.
    StallOnGrant,
    /// A link's release messages are lost (and duplicated) for a while.
    FeedLossy,
    /// A link's pub/sub connections are killed (the waiters reconnect).
    FeedKill,
    /// A process with a waiting request dies: stalled until the end of the
    /// run, it never calls again and never leaves the queues.
    Die,
}

const SAFE: [Kind; 11] = [
    Kind::FailFast,
    Kind::BlackHole,
    Kind::Slow,
    Kind::CutRequests,
    Kind::CutReplies,
    Kind::RestartWithData,
    Kind::RestartEmptyLate,
    Kind::SmallJump,
    Kind::Stall,
    Kind::Stall,
    Kind::Suspend,
];

fn pick(mode: Mode) -> Kind {
    let extra = match mode {
        Mode::Safe | Mode::Sets | Mode::Fair => None,
        // Safe faults, half of them process pauses that start as a grant
        // arrives: the process stops before it sends the calls that follow
        // the grant (the fence raise, renewals, the release), and its hold
        // runs out while it sleeps.
        Mode::Pauses => Some(Kind::StallOnGrant),
        Mode::Resets => Some(Kind::ResetReplies),
        // Leaderships lapse while their process sleeps: at a grant (a
        // campaign's, before it proclaims), or anywhere (a suspend, whose
        // timers fire late).
        Mode::Election | Mode::Rw => Some([Kind::StallOnGrant, Kind::Suspend][index(2)]),
        // Permits lapse while their process sleeps at a grant.
        Mode::Semaphore => Some(Kind::StallOnGrant),
        Mode::UnsafeRestart => Some(Kind::RestartEmptyNow),
        Mode::UnsafeClock => Some(Kind::BigJump),
    };
    match extra {
        _ if up_to(24) == 0 => Kind::Die,
        _ if up_to(9) == 0 => [Kind::FeedLossy, Kind::FeedKill][index(2)],
        // Half of the faults are this one.
        Some(k) if up_to(1) == 0 => k,
        _ => SAFE[usize::try_from(up_to(SAFE.len() as u64 - 1)).unwrap_or(0)],
    }
}

fn index(n: usize) -> usize {
    usize::try_from(up_to(n as u64 - 1)).unwrap_or(0)
}

/// Injects faults until the fault phase ends; heals each after a while.
pub(crate) async fn schedule(ctx: Arc<Ctx>, mode: Mode) {
    let p = &ctx.params;
    let n = ctx.nodes.len();
    let start = Instant::now();
    // Per node: busy until (no overlapping node faults), last clock jump.
    let mut busy = vec![start; n];
    let mut jumped: Vec<Option<Instant>> = vec![None; n];
    let mut link_busy = vec![vec![start; n]; ctx.procs.len()];
    let mut proc_busy = vec![start; ctx.procs.len()];
    let mut died = false;
    let longest = p.lease.max(p.max_fixed);
    while Instant::now() < p.fault_end {
        tokio::time::sleep(Duration::from_millis(10 + up_to(p.fault_gap_ms))).await;
        let now = Instant::now();
        let kind = pick(mode);
        let node = index(n);
        let proc = index(ctx.procs.len());
        let dur = Duration::from_millis(10 + up_to(400));
        let what = format!("{kind:?}");
        match kind {
            Kind::FailFast | Kind::BlackHole | Kind::Slow | Kind::RestartWithData => {
                // `>=`: the fault ending now heals the node at this instant,
                // maybe after a new one started (an empty restart would then
                // rejoin at once, unsafe, under a safe label).
                if busy[node] >= now {
                    continue;
                }
                busy[node] = now + dur;
                let ctl = &ctx.nodes[node];
                match kind {
                    Kind::FailFast => ctl.set_health(Health::Fail),
                    Kind::BlackHole => ctl.set_health(Health::BlackHole),
                    Kind::Slow => ctl.set_slow(p.node_timeout * 2),
                    _ => ctl.crash(false),
                }
                ctx.log
                    .push(WORLD, Ev::Fault(format!("{what} node {node} for {dur:?}")));
                heal_node(&ctx, node, dur);
            }
            Kind::RestartEmptyLate | Kind::RestartEmptyNow => {
                if busy[node] >= now {
                    continue;
                }
                let down = if matches!(kind, Kind::RestartEmptyLate) {
                    longest + p.lease / 10 + Duration::from_millis(up_to(200))
                } else {
                    Duration::from_millis(up_to(5))
                };
                busy[node] = now + down;
                ctx.nodes[node].crash(true);
                ctx.log.push(WORLD, Ev::Wiped { node });
                ctx.log.push(
                    WORLD,
                    Ev::Fault(format!("{what} node {node}, down {down:?}")),
                );
                heal_node(&ctx, node, down);
            }
            Kind::SmallJump | Kind::BigJump => {
                let by = if matches!(kind, Kind::SmallJump) {
                    // One step per node per longest lease, within the drift
                    // allowance of the shortest lease.
                    if jumped[node].is_some_and(|t| now < t + longest + p.lease / 10) {
                        continue;
                    }
                    jumped[node] = Some(now);
                    let max = p.drift.as_micros() as u64;
                    Duration::from_micros(up_to(max))
                } else {
                    Duration::from_millis(up_to(2 * longest.as_millis() as u64))
                };
                ctx.nodes[node].fake.jump_clock(by);
                ctx.log
                    .push(WORLD, Ev::Fault(format!("{what} node {node} by {by:?}")));
            }
            Kind::CutRequests | Kind::CutReplies | Kind::ResetReplies => {
                // A reset is the node's (a proxy in front of it drops every
                // connection after forwarding): on every process's link.
                let procs: Vec<usize> = if matches!(kind, Kind::ResetReplies) {
                    (0..ctx.procs.len()).collect()
                } else {
                    vec![proc]
                };
                if procs.iter().any(|&q| link_busy[q][node] > now) {
                    continue;
                }
                let cut = match kind {
                    Kind::CutRequests => Cut::Requests,
                    Kind::CutReplies => Cut::Replies,
                    _ => Cut::Resets,
                };
                for q in procs {
                    link_busy[q][node] = now + dur;
                    let link = Arc::clone(&ctx.links[q][node]);
                    link.set(cut);
                    ctx.log.push(
                        WORLD,
                        Ev::Fault(format!("{what} p{q}->node {node} for {dur:?}")),
                    );
                    tokio::spawn(async move {
                        tokio::time::sleep(dur).await;
                        link.set(Cut::None);
                    });
                }
            }
            Kind::Stall | Kind::Suspend => {
                if proc_busy[proc] > now || ctx.procs[proc].stalled(now) {
                    continue;
                }
                // Sometimes longer than a lease.
                let d = Duration::from_millis(10 + up_to(p.lease.as_millis() as u64 + 200));
                proc_busy[proc] = now + d;
                if matches!(kind, Kind::Suspend) {
                    suspend(&ctx, proc, d);
                } else {
                    stall(&ctx, proc, d);
                }
            }
            Kind::FeedLossy | Kind::FeedKill => {
                let link = Arc::clone(&ctx.links[proc][node]);
                ctx.log.push(
                    WORLD,
                    Ev::Fault(format!("{what} p{proc}->node {node} for {dur:?}")),
                );
                if matches!(kind, Kind::FeedKill) {
                    link.feed.kill();
                    continue;
                }
                link.feed.set_lossy(50);
                tokio::spawn(async move {
                    tokio::time::sleep(dur).await;
                    link.feed.set_lossy(0);
                });
            }
            Kind::Die => {
                // One death per run, of a process that waits, never the last.
                let waiting = ctx.wants.waiting();
                let Some(&proc) = waiting.get(index(waiting.len().max(1))) else {
                    continue;
                };
                if died || ctx.procs.len() < 2 || ctx.procs[proc].stalled(now) {
                    continue;
                }
                died = true;
                proc_busy[proc] = p.client_end;
                ctx.log
                    .push(WORLD, Ev::Fault(format!("Die p{proc} (a waiter)")));
                stall(&ctx, proc, p.client_end.saturating_duration_since(now));
            }
            Kind::StallOnGrant => {
                // Half a lease to longer than a lease: a hold granted as it
                // starts usually lapses.
                let d = p.lease / 2
                    + Duration::from_millis(up_to(p.lease.as_millis() as u64 / 2 + 200));
                ctx.log.push(
                    WORLD,
                    Ev::Fault(format!("Stall p{proc} for {d:?} at its next grant")),
                );
                let c = Arc::clone(&ctx);
                ctx.procs[proc].link.arm(Some(Box::new(move || {
                    // Every fault starts within the fault phase.
                    let now = Instant::now();
                    if now <= c.params.fault_end && !c.procs[proc].stalled(now) {
                        stall(&c, proc, d);
                    }
                })));
            }
        }
    }
}

/// Pauses process `proc` (its tasks, sockets and watchdog) for `d` from now.
fn stall(ctx: &Arc<Ctx>, proc: usize, d: Duration) {
    halt(ctx, proc, d);
    let now = Instant::now();
    ctx.log
        .push(WORLD, Ev::Fault(format!("Stall p{proc} for {d:?}")));
    ctx.log.push(
        WORLD,
        Ev::Paused {
            proc,
            until: ctx.log.at(now + d + Duration::from_millis(1)),
        },
    );
}

/// Suspends process `proc` for `d` from now: a stall, and its monotonic
/// clock stands still meanwhile.
fn suspend(ctx: &Arc<Ctx>, proc: usize, d: Duration) {
    ctx.procs[proc].clock.suspend(d);
    halt(ctx, proc, d);
    let until = ctx.log.at(Instant::now() + d);
    ctx.log
        .push(WORLD, Ev::Fault(format!("Suspend p{proc} for {d:?}")));
    ctx.log.push(WORLD, Ev::Suspended { proc, until });
}

/// Stops process `proc` (its tasks, sockets and watchdog) for `d` from now.
fn halt(ctx: &Arc<Ctx>, proc: usize, d: Duration) {
    let now = Instant::now();
    *locked(&ctx.procs[proc].stalled_until) = Some(now + d);
    // The watchdog resumes just after the links, as a process
    // that wakes up finds its sockets working.
    crate::hooks::pause::pause(
        &ctx.procs[proc].client_id,
        now + d + Duration::from_millis(1),
    );
    ctx.procs[proc].link.set(Cut::Requests);
    let c = Arc::clone(ctx);
    tokio::spawn(async move {
        tokio::time::sleep(d).await;
        // Unless a pause that began as this one ended still runs.
        if !c.procs[proc].stalled(Instant::now()) {
            c.procs[proc].link.set(Cut::None);
        }
    });
}

fn heal_node(ctx: &Arc<Ctx>, node: usize, after: Duration) {
    let c = Arc::clone(ctx);
    tokio::spawn(async move {
        tokio::time::sleep(after).await;
        c.nodes[node].heal();
    });
}

/// Ends every fault now.
pub(crate) fn heal_all(ctx: &Ctx) {
    for n in &ctx.nodes {
        n.heal();
    }
    for links in &ctx.links {
        for l in links {
            l.set(Cut::None);
        }
    }
    for p in &ctx.procs {
        p.link.arm(None);
        p.link.set(Cut::None);
        *locked(&p.stalled_until) = None;
    }
}
