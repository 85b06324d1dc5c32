//! One renewal wave: mark → send → tally → repair → finish. The wave marks
//! its holds renewing (a release of one then waits for the wave's end),
//! sends one pipeline per node, tallies each hold's answers
//! ([`RenewalTally`]) into a verdict recorded on the hold, re-creates the
//! keys that nodes lost while a quorum confirmed the hold, then ends the
//! renewals and declares the losses.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use tracing::{debug, info, warn};

use super::{add, lose, renew_timeout, Watchdog};
use crate::clock;
use crate::error::{NodeError, NodeErrorKind};
use crate::hold::{Hold, Mark};
use crate::keys::Role;
use crate::members::Members;
use crate::node::{RenewBatch, RenewItem, Renewed};
use crate::quorum::{self, FanOut, Leg, Loss, RenewalTally, Verdict};
use crate::telemetry::Cause;

/// Renews one wave of holds; a node that fails it is marked in `down`.
/// Returns the wave's cost per lock: the time from its start to its last
/// answer over its locks, when every member answered it (a wave that met
/// a failure or a timeout measures the fault, not the load).
pub(super) async fn renew(
    wd: &Watchdog,
    holds: &[Arc<Hold>],
    down: &mut [bool],
) -> Option<Duration> {
    let began = Instant::now();
    let wave = mark(wd, holds)?;
    let sent = send(wd, &wave, down).await;
    let answered = sent.fan.replies().iter().all(|r| matches!(r, Some(Ok(_))));
    let locks = u32::try_from(wave.due.len()).unwrap_or(u32::MAX).max(1);
    let cost = answered.then(|| sent.read.saturating_duration_since(began) / locks);
    let tallied = tally(&wd.nodes, &wave, &sent);
    let repaired = repair(wd, &wave.due, &tallied.repairs, wave.start).await;
    finish(wd, &wave, &sent, &tallied, repaired);
    cost
}

/// A wave's holds, marked renewing, and how long the nodes have.
struct Wave {
    due: Vec<Arc<Hold>>,
    /// When it began: its renewals' validity counts from here.
    start: Instant,
    timeout: Duration,
}

/// A wave's answers, as they stood when the wait for them ended.
struct Sent {
    fan: FanOut<Vec<Renewed>>,
    /// The watchdog's own work before the pipelines went out.
    built: Duration,
    /// When the wait ended, on tokio's clock and on the validity clock.
    read: Instant,
    now: Instant,
}

/// What a wave's answers decided.
struct Tallied {
    /// Per hold of the wave: declared lost, and why.
    lost: Vec<Option<Loss>>,
    /// Per node: the holds to re-create there (by index into the wave),
    /// renewed on a quorum and missing there.
    repairs: Vec<Vec<usize>>,
    extended: u64,
    conflicts: u64,
    /// Holds renewed on a quorum.
    renewed: u64,
}

/// Marks every hold of `holds` that is still held renewing, and declares
/// lost those whose validity ran out first; `None` when none is left.
fn mark(wd: &Watchdog, holds: &[Arc<Hold>]) -> Option<Wave> {
    let config = &wd.nodes.config;
    let start = clock::now();
    // A slow node (a busy one: its answers queue behind other clients') is
    // waited for up to four times the usual renewal timeout while the
    // wave's holds have validity to spare: at most half of the shortest
    // that is left. A renewal that lands within it still extends them. A
    // node that does not answer by then is skipped for the rest of the tick.
    let least = renew_timeout(config, holds.len());
    let most = least.saturating_mul(4);
    let until = quorum::deadline_after(
        Instant::now(),
        most.saturating_mul(2).saturating_add(config.node_timeout),
    );
    let mut due = Vec::with_capacity(holds.len());
    let mut earliest: Option<Instant> = None;
    for hold in holds {
        match hold.begin_renewal(start, until) {
            Mark::Renewing(lapse) => {
                earliest = Some(earliest.map_or(lapse, |e| e.min(lapse)));
                due.push(Arc::clone(hold));
            }
            Mark::Lapsed => lose(
                hold,
                Cause::Expired,
                "its validity ran out before it could be renewed",
            ),
            Mark::NotHeld => {}
        }
    }
    let timeout = (earliest?.saturating_duration_since(start) / 2).clamp(least, most);
    Some(Wave {
        due,
        start,
        timeout,
    })
}

/// Sends the wave's pipeline to every node not down this tick and waits for
/// the answers; a node that fails it is down for the rest of the tick.
async fn send(wd: &Watchdog, wave: &Wave, down: &mut [bool]) -> Sent {
    let nodes = &wd.nodes;
    let deadline = quorum::deadline_after(Instant::now(), wave.timeout);
    let batch = Arc::new(
        RenewBatch::new(wave.due.iter().map(|h| renew_item(h)).collect()).answered_by(deadline),
    );
    // The masters' one pipeline, built now so that its cost counts as the
    // watchdog's work. A cluster member builds its own per shard: on a
    // manager of cluster members only, the masters' pipeline was built for
    // nothing (a fifth of the client's CPU at 300,000 locks, in `memmove`).
    if (0..nodes.len()).any(|i| !down[i] && !nodes.node(i).is_cluster()) {
        batch.prepare();
    }
    let built = wave.start.elapsed();
    let mut fan = nodes.fan_out(wave.timeout, |i| {
        if down[i] {
            Leg::Known(Err(NodeError::new(
                NodeErrorKind::Timeout,
                "failed an earlier wave of this tick",
            )))
        } else {
            Leg::Call(nodes.node(i).renew(Arc::clone(&batch)))
        }
    });
    fan.until(|_| false).await;
    let (read, now) = (Instant::now(), clock::now());
    for (i, _) in down.iter().enumerate().filter(|(_, d)| !**d) {
        let cost = nodes.node(i).batch_cost(&batch);
        add(&wd.counters.round_trips, cost.round_trips);
        add(&wd.counters.script_calls, cost.script_calls);
    }
    add(&wd.counters.locks_renewed, wave.due.len() as u64);
    note_failures(wd, wave, fan.replies(), down);
    Sent {
        fan,
        built,
        read,
        now,
    }
}

/// Counts the nodes that failed the wave (an error, or no answer in time)
/// and marks them down for the rest of the tick (a cluster member: until
/// the waves reach its next shard); logs each once so. A
/// member that answered for some locks only (a cluster member with a
/// shard that failed) is not down: its failed locks are counted.
fn note_failures(
    wd: &Watchdog,
    wave: &Wave,
    replies: &[Option<Result<Vec<Renewed>, NodeError>>],
    down: &mut [bool],
) {
    let locks = wave.due.len();
    for (i, r) in replies.iter().enumerate() {
        let addr = wd.nodes.node(i).addr();
        match r {
            Some(Ok(codes)) => {
                let failed = codes.iter().filter(|c| **c == Renewed::Failed).count();
                if failed > 0 {
                    warn!(
                        node = i,
                        addr,
                        locks = failed,
                        "renewal failed on part of the member"
                    );
                    add(&wd.counters.node_errors, failed as u64);
                }
                continue;
            }
            Some(Err(e)) if !down[i] => {
                warn!(node = i, addr, kind = %e.kind, error = %e.message, locks, "renewal failed on node");
            }
            Some(Err(_)) => {}
            None => {
                warn!(node = i, addr, timeout = ?wave.timeout, locks, "renewal timed out on node")
            }
        }
        add(&wd.counters.node_errors, locks as u64);
        down[i] = true;
    }
}

/// Tallies each hold's answers ([`RenewalTally`]) and records them on the
/// hold, which gives the verdict.
fn tally(nodes: &Members, wave: &Wave, sent: &Sent) -> Tallied {
    let mut t = Tallied {
        lost: vec![None; wave.due.len()],
        repairs: vec![Vec::new(); nodes.len()],
        extended: 0,
        conflicts: 0,
        renewed: 0,
    };
    for (k, hold) in wave.due.iter().enumerate() {
        let tally = RenewalTally::of(sent.fan.replies().iter().map(|r| match r {
            Some(Ok(codes)) => codes.get(k).copied(),
            _ => None,
        }));
        t.extended += tally.renewed as u64;
        let lock = &hold.keys.name;
        for (node, answer) in tally.answers().iter().enumerate() {
            match answer {
                Some(Renewed::Conflict) => {
                    t.conflicts += 1;
                    warn!(%lock, node, "renewal conflict: another owner holds the key");
                }
                Some(Renewed::WrongType) => {
                    warn!(%lock, node, "renewal found a key of the wrong type");
                }
                _ => {}
            }
        }
        match hold.renewal_landed(&tally, wave.start, sent.now) {
            // Missing on a minority while a quorum confirmed: a node that
            // restarted empty (or evicted the key). Re-create it there.
            // A reader's key is not re-created: a writer finds readers by
            // the set its grant wrote, which a repair would not restore,
            // so a reader stands on the nodes that kept its key.
            Verdict::Renewed(_) => {
                t.renewed += 1;
                if hold.keys.role != Role::Reader {
                    tally.empty().for_each(|i| t.repairs[i].push(k));
                }
            }
            Verdict::Retry => {
                let (confirmed, required) = (tally.renewed, nodes.required_for(&hold.keys));
                debug!(%lock, confirmed, required, "renewal missed the quorum this tick; retrying next tick");
            }
            Verdict::Lost(why) => t.lost[k] = Some(why),
        }
    }
    t
}

/// Ends the wave's renewals (the releases waiting for them go ahead),
/// declares its losses, and counts.
fn finish(wd: &Watchdog, wave: &Wave, sent: &Sent, tallied: &Tallied, repaired: u64) {
    for (hold, &lost) in wave.due.iter().zip(&tallied.lost) {
        hold.end_renewal();
        if let Some(why) = lost {
            let cause = match why {
                Loss::Lapsed => Cause::Expired,
                Loss::Unconfirmable => Cause::Gone,
                Loss::OutOfTime => Cause::NoQuorum,
            };
            lose(hold, cause, "renewal could not show a quorum in time");
        }
    }
    wd.nodes.metrics.renewed(tallied.renewed, repaired);
    let (extended, locks) = (tallied.extended, wave.due.len());
    add(&wd.counters.extended, extended);
    add(&wd.counters.repairs, repaired);
    add(&wd.counters.conflicts, tallied.conflicts);
    let busy = sent.built + sent.read.elapsed();
    let micros = u64::try_from(busy.as_micros()).unwrap_or(u64::MAX);
    add(&wd.counters.busy_micros, micros);
    debug!(locks, extended, repaired, ?busy, "watchdog wave");
}

/// Re-creates, on each node, the keys of the holds listed for it (by index
/// into `due`): one batch per node that needs one, in parallel, within the
/// tick's timeout. Returns how many keys were re-created.
async fn repair(wd: &Watchdog, due: &[Arc<Hold>], repairs: &[Vec<usize>], start: Instant) -> u64 {
    let nodes = &wd.nodes;
    if repairs.iter().all(Vec::is_empty) {
        return 0;
    }
    let locks = repairs.iter().map(Vec::len).max().unwrap_or(0);
    let timeout = renew_timeout(&nodes.config, locks);
    let deadline = quorum::deadline_after(Instant::now(), timeout);
    let batches: Vec<Option<Arc<RenewBatch>>> = repairs
        .iter()
        .map(|ks| {
            (!ks.is_empty()).then(|| {
                let items = ks.iter().map(|&k| renew_item(&due[k])).collect();
                Arc::new(RenewBatch::repair(items).answered_by(deadline))
            })
        })
        .collect();
    for (i, b) in batches.iter().enumerate() {
        if let Some(b) = b {
            add(
                &wd.counters.script_calls,
                nodes.node(i).batch_cost(b).script_calls,
            );
        }
    }
    let mut fan = nodes.fan_out(timeout, |i| match &batches[i] {
        Some(b) => Leg::Call(nodes.node(i).repair(Arc::clone(b))),
        None => Leg::Known(Ok(Vec::new())),
    });
    fan.until(|_| false).await;
    let mut repaired = 0;
    for (i, r) in fan.replies().iter().enumerate() {
        let Some(Ok(codes)) = r else { continue };
        for (&k, code) in repairs[i].iter().zip(codes) {
            let hold = &due[k];
            if *code == Renewed::Repaired || *code == Renewed::Extended {
                repaired += u64::from(*code == Renewed::Repaired);
                hold.grant_landed(i);
                info!(lock = %hold.keys.name, node = i, addr = nodes.node(i).addr(), "repaired: re-created a missing lock key");
            }
        }
    }
    debug!(elapsed = ?clock::now().saturating_duration_since(start), repaired, "repair");
    repaired
}

/// What a renewal (or repair) sends for one hold.
fn renew_item(hold: &Hold) -> RenewItem {
    RenewItem {
        keys: Arc::clone(&hold.keys),
        owner: Arc::clone(&hold.holder_id),
        count: hold.count(),
        token: hold.token,
        lease: hold.lease,
    }
}
