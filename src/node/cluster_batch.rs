//! A cluster member's renewal or repair batch: one script call per slot
//! (and per [`RENEW_CHUNK`](super::RENEW_CHUNK) locks of it), one pipeline
//! per shard, all shards at once, each pipeline ending in `WAIT` when the
//! member waits for replicas; answered per lock, so that a shard that fails
//! costs only the locks it serves.

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use tokio::time::Instant;

use crate::config::ReplicaWait;
use crate::error::{NodeError, NodeErrorKind};
use crate::sync::locked;

use super::cluster_route::{
    by_shard, confirmed, next, send_part, slot_groups, Next, Redirect, Shards,
};
use super::reply;
use super::script_call::{map_err, no_script};
use super::{RenewBatch, Renewed};

/// A node's host and port, as a redirect names it.
type Addr = (String, u16);

/// Sends `batch` to the shards. A shard that fails or redirects is sent
/// its part again (a renewal may be: a release waits for it) after the
/// map is re-read, up to three rounds, each part within three quarters of
/// the time to the batch's deadline (so that the parts that answered reach
/// the watchdog before it stops waiting). A part whose `WAIT` falls short
/// of `wait` ran but does not count, and is not sent again. The locks of
/// the parts that still failed are [`Renewed::Failed`]; the member fails
/// the wave only when no part answered.
pub(super) async fn send_batch(
    shards: Shards,
    batch: Arc<RenewBatch>,
    wait: Option<ReplicaWait>,
) -> Result<Vec<Renewed>, NodeError> {
    let mut shards = shards;
    let groups = slot_groups(&batch.items);
    let mut codes: Vec<Option<i64>> = vec![None; batch.items.len()];
    let mut pending: Vec<usize> = (0..groups.len()).collect();
    let until = batch.deadline.map(|d| {
        let now = Instant::now();
        now + d.saturating_duration_since(now) * 3 / 4
    });
    // Per group, the address an `ASK` named: its slot is migrating and its
    // keys are on that node, which runs the call after `ASKING`.
    let mut asks: Vec<Option<Addr>> = vec![None; groups.len()];
    let mut last = NodeError::new(NodeErrorKind::Server, "no try made");
    for round in 0..3 {
        if until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        if round > 0 || locked(&shards.map).shards.is_empty() {
            shards.refresh().await;
        }
        let (asked, plain): (Vec<usize>, Vec<usize>) =
            pending.iter().partition(|&&g| asks[g].is_some());
        let mut parts: Vec<(Vec<usize>, Option<Addr>)> =
            by_shard(&locked(&shards.map), &groups, &plain)
                .into_iter()
                .map(|part| (part, None))
                .collect();
        let mut by_addr: BTreeMap<Addr, Vec<usize>> = BTreeMap::new();
        for g in asked {
            if let Some(to) = asks[g].take() {
                by_addr.entry(to).or_default().push(g);
            }
        }
        parts.extend(by_addr.into_iter().map(|(to, part)| (part, Some(to))));
        let sent = futures::future::join_all(parts.into_iter().map(|(part, ask)| {
            let mut c = shards.conn.clone();
            let (batch, groups) = (&*batch, &groups[..]);
            async move {
                let send = send_loaded(&mut c, (batch, groups), &part, ask.as_ref(), wait);
                let r = match until {
                    Some(t) => tokio::time::timeout_at(t, send)
                        .await
                        .unwrap_or_else(|_| Err(timed_out())),
                    None => send.await,
                };
                (part, r)
            }
        }))
        .await;
        pending.clear();
        for (part, r) in sent {
            let replies = match r {
                Ok((replies, confirm)) => match confirm {
                    Ok(()) => replies,
                    Err(e) => {
                        // Ran, not confirmed: its locks stay unanswered.
                        last = e;
                        continue;
                    }
                },
                Err(e) => {
                    // redis-rs fails the whole pipeline with its first
                    // error: an `ASK` names its slot.
                    if let (Next::Again(Redirect::Ask(host, port)), Some((_, slot))) =
                        (next(&e), e.redirect_node())
                    {
                        for &g in part.iter().filter(|&&g| groups[g].0 == slot) {
                            asks[g] = Some((host.clone(), port));
                        }
                    }
                    last = map_err(&e);
                    pending.extend(part);
                    continue;
                }
            };
            for (&g, reply) in part.iter().zip(replies) {
                let items = &groups[g].1;
                match reply {
                    Ok(reply) if reply.len() == items.len() => {
                        for (&i, code) in items.iter().zip(reply) {
                            codes[i] = Some(code);
                        }
                    }
                    Ok(_) => {
                        last = NodeError::protocol("renew");
                        pending.push(g);
                    }
                    Err(e) => {
                        last = map_err(&e);
                        if let Next::Again(Redirect::Ask(host, port)) = next(&e) {
                            asks[g] = Some((host, port));
                        }
                        pending.push(g);
                    }
                }
            }
        }
        if pending.is_empty() {
            break;
        }
    }
    if !codes.is_empty() && codes.iter().all(Option::is_none) {
        return Err(last);
    }
    reply::renewed_in_parts(codes)
}

/// A part's replies, one per script call, and whether `WAIT` confirmed
/// the writes.
type PartReply = (Vec<redis::RedisResult<Vec<i64>>>, Result<(), NodeError>);

/// Sends `part` ([`send_part`]); the calls a shard answered `NOSCRIPT`
/// (it ran none of them: it started since, or flushed its scripts) go to
/// the same place again at once, after `SCRIPT LOAD` in the same pipeline.
/// Each shard reloads on its own: one that is slow or paused does not
/// hold back the others' second try (when every shard waited for the
/// slowest before loading, a wave that met empty caches while one shard
/// was paused ran out of time and failed the whole member). The writes
/// count when the `WAIT` of each pipeline that carried them confirmed.
async fn send_loaded(
    conn: &mut ClusterConnection,
    (batch, groups): (&RenewBatch, &[(u16, Vec<usize>)]),
    part: &[usize],
    ask: Option<&Addr>,
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<PartReply> {
    let (mut replies, acks) = send_part(conn, (batch, groups), part, (ask, false), wait).await?;
    let mut confirm = confirmed(wait, acks);
    let missing: Vec<usize> = (0..part.len())
        .filter(|&k| matches!(&replies[k], Err(e) if no_script(e)))
        .collect();
    if missing.is_empty() {
        return Ok((replies, confirm));
    }
    let again: Vec<usize> = missing.iter().map(|&k| part[k]).collect();
    let (second, acks) = send_part(conn, (batch, groups), &again, (ask, true), wait).await?;
    for (&k, reply) in missing.iter().zip(second) {
        replies[k] = reply;
    }
    let loaded = confirmed(wait, acks);
    if confirm.is_ok() {
        confirm = loaded;
    }
    Ok((replies, confirm))
}

/// A part not answered before the batch's deadline (it may have run).
fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "shard did not answer before the renewal's deadline",
    ))
}
