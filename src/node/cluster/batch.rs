//! A cluster member's renewal or repair batch: per shard, one call of the
//! per-shard script (`shard_prelude.lua`: locks of any slots of the shard)
//! per [`RENEW_CHUNK`] locks, one pipeline per shard, all shards at once,
//! each pipeline ending in `WAIT` when the member waits for replicas. A
//! lock the shard does not serve (its slot moved or is moving: the script
//! answers [`RENEW_NOT_HERE`]), or whose call failed, is sent again by its
//! slot: one call of the per-slot script per slot (and chunk), following
//! `MOVED` and `ASK`. Answered per lock, so that a shard that fails costs
//! only the locks it serves.

use std::collections::BTreeMap;
use std::sync::Arc;

use redis::cluster_async::ClusterConnection;
use tokio::time::Instant;

use crate::config::ReplicaWait;
use crate::error::{NodeError, NodeErrorKind};
use crate::scripts::{Lua, RENEW_NOT_HERE};
use crate::sync::locked;

use super::map::SlotMap;
use super::route::{
    by_shard, confirmed, next, send_calls, slot_groups, Next, Redirect, Route, Shards,
};
use crate::node::batch::{BatchKind, RenewBatch, RenewItem, RENEW_CHUNK};
use crate::node::ops::{BatchCost, Renewed};
use crate::node::reply;
use crate::node::script_call::{map_err, no_script};

/// A node's host and port, as a redirect names it.
type Addr = (String, u16);

/// Answers by item index (into the batch), and the last error met.
type Answers = (Vec<(usize, i64)>, Option<NodeError>);

/// Sends `batch` to the shards: each shard's locks in per-shard calls,
/// then, in the same task (a shard slow to answer holds back no other),
/// the locks it did not serve or answer by slot ([`per_slot`]). Every
/// part within three quarters of the time to the batch's deadline (so
/// that the parts that answered reach the watchdog before it stops
/// waiting). A part whose `WAIT` falls short of `wait` ran but does not
/// count, and is not sent again. The locks still unanswered are
/// [`Renewed::Failed`]; the member fails the wave only when no lock was
/// answered.
pub(super) async fn send_batch(
    mut shards: Shards,
    batch: Arc<RenewBatch>,
    wait: Option<ReplicaWait>,
) -> Result<Vec<Renewed>, NodeError> {
    // A place is not a hold: kept places wait for no replica.
    let wait = wait.filter(|_| batch.kind() != BatchKind::Keep);
    if locked(&shards.map).shards.is_empty() {
        shards.refresh().await;
    }
    let until = batch.deadline.map(|d| {
        let now = Instant::now();
        now + d.saturating_duration_since(now) * 3 / 4
    });
    let (parts, alone) = by_shard_items(&locked(&shards.map), &batch.items);
    let parts = parts
        .into_iter()
        .map(|p| (p, true))
        .chain((!alone.is_empty()).then_some((alone, false)));
    let sent = futures::future::join_all(parts.map(|(items, whole)| {
        let (mut shards, batch) = (shards.clone(), &*batch);
        async move {
            let (mut answered, again, mut last) = if whole {
                per_shard(&mut shards.conn, batch, &items, until, wait).await
            } else {
                (Vec::new(), items, None)
            };
            if !again.is_empty() {
                let (more, why) = per_slot(&mut shards, batch, &again, until, wait).await;
                answered.extend(more);
                last = why.or(last);
            }
            (answered, last)
        }
    }))
    .await;
    let mut codes: Vec<Option<i64>> = vec![None; batch.items.len()];
    let mut last = None;
    for (answered, why) in sent {
        for (i, code) in answered {
            codes[i] = Some(code);
        }
        last = why.or(last);
    }
    if !codes.is_empty() && codes.iter().all(Option::is_none) {
        return Err(last.unwrap_or_else(|| NodeError::new(NodeErrorKind::Server, "no try made")));
    }
    reply::renewed_in_parts(codes)
}

/// What a batch costs on a cluster member with `map`: one pipeline per
/// shard (and per slot no shard serves), one call per [`RENEW_CHUNK`]
/// locks of a shard (and per slot, and chunk of it, no shard serves).
/// The per-slot calls of locks a shard no longer serves are not counted.
pub(super) fn batch_cost(map: &SlotMap, items: &[RenewItem]) -> BatchCost {
    let (parts, alone) = by_shard_items(map, items);
    let groups = slot_groups(items, alone.into_iter());
    BatchCost {
        round_trips: (parts.len() + groups.len()) as u64,
        script_calls: parts
            .iter()
            .map(|p| p.len().div_ceil(RENEW_CHUNK))
            .sum::<usize>() as u64
            + groups.len() as u64,
    }
}

/// The items' indices by the shard that `map` says serves their slot, and
/// those of slots no shard serves.
fn by_shard_items(map: &SlotMap, items: &[RenewItem]) -> (Vec<Vec<usize>>, Vec<usize>) {
    let mut parts: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    let mut alone = Vec::new();
    for (i, item) in items.iter().enumerate() {
        match map.shard_of(item.keys.slot()) {
            Some(s) => parts.entry(s).or_default().push(i),
            None => alone.push(i),
        }
    }
    (parts.into_values().collect(), alone)
}

/// Sends the locks `items` (of one shard, as the map says) in per-shard
/// calls, one pipeline routed by the first lock's slot. Returns the
/// answers, the locks to send again by slot (the shard does not serve
/// them, or their call failed: a renewal may be sent again, a release
/// waits for it) and the last error.
async fn per_shard(
    conn: &mut ClusterConnection,
    batch: &RenewBatch,
    items: &[usize],
    until: Option<Instant>,
    wait: Option<ReplicaWait>,
) -> (Vec<(usize, i64)>, Vec<usize>, Option<NodeError>) {
    let chunks: Vec<&[usize]> = items.chunks(RENEW_CHUNK).collect();
    let slot = items.first().map_or(0, |&i| batch.items[i].keys.slot());
    let add = |pipe: &mut redis::Pipeline, k: usize| {
        batch.add_shard_call(pipe, chunks[k].iter().map(|&i| &batch.items[i]));
    };
    let script = batch.shard_script();
    let sent = bounded(
        until,
        send_loaded(conn, chunks.len(), add, slot, None, script, wait),
    )
    .await;
    let (mut answered, mut again) = (Vec::new(), Vec::new());
    let (replies, confirm) = match sent {
        Ok(r) => r,
        Err(e) => return (answered, items.to_vec(), Some(map_err(&e))),
    };
    let mut last = confirm.as_ref().err().cloned();
    for (chunk, reply) in chunks.iter().zip(replies) {
        match reply {
            Ok(codes) if codes.len() == chunk.len() => {
                for (&i, code) in chunk.iter().zip(codes) {
                    if code == RENEW_NOT_HERE {
                        again.push(i);
                    } else if confirm.is_ok() {
                        answered.push((i, code));
                    }
                }
            }
            Ok(_) => {
                last = Some(NodeError::protocol("renew"));
                again.extend_from_slice(chunk);
            }
            Err(e) => {
                last = Some(map_err(&e));
                again.extend_from_slice(chunk);
            }
        }
    }
    (answered, again, last)
}

/// Sends the locks `items` by slot: one call per slot (and chunk), the
/// calls of one shard in one pipeline. A part that fails or redirects is
/// sent again (`ASK`: to the address named, after `ASKING`) after the map
/// is re-read, up to three rounds; the map is re-read first, too, since a
/// lock comes here when its shard did not answer for it.
async fn per_slot(
    shards: &mut Shards,
    batch: &RenewBatch,
    items: &[usize],
    until: Option<Instant>,
    wait: Option<ReplicaWait>,
) -> Answers {
    let groups = slot_groups(&batch.items, items.iter().copied());
    let mut answered = Vec::new();
    let mut pending: Vec<usize> = (0..groups.len()).collect();
    // Per group, the address an `ASK` named: its slot is migrating and its
    // keys are on that node, which runs the call after `ASKING`.
    let mut asks: Vec<Option<Addr>> = vec![None; groups.len()];
    let mut last = None;
    for _ in 0..3 {
        if until.is_some_and(|t| Instant::now() >= t) {
            break;
        }
        shards.refresh().await;
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
            let groups = &groups[..];
            async move {
                let add = |pipe: &mut redis::Pipeline, k: usize| {
                    batch.add_call(pipe, groups[part[k]].1.iter().map(|&i| &batch.items[i]));
                };
                let slot = part.first().map_or(0, |&g| groups[g].0);
                let send = send_loaded(
                    &mut c,
                    part.len(),
                    add,
                    slot,
                    ask.as_ref(),
                    batch.script(),
                    wait,
                );
                let r = bounded(until, send).await;
                (part, r)
            }
        }))
        .await;
        pending.clear();
        for (part, r) in sent {
            let replies = match r {
                Ok((replies, Ok(()))) => replies,
                Ok((_, Err(e))) => {
                    // Ran, not confirmed: its locks stay unanswered.
                    last = Some(e);
                    continue;
                }
                Err(e) => {
                    // redis-rs fails the whole pipeline with its first
                    // redirect: an `ASK` names its slot.
                    if let (Next::Again(Redirect::Ask(host, port)), Some((_, slot))) =
                        (next(&e), e.redirect_node())
                    {
                        for &g in part.iter().filter(|&&g| groups[g].0 == slot) {
                            asks[g] = Some((host.clone(), port));
                        }
                    }
                    last = Some(map_err(&e));
                    pending.extend(part);
                    continue;
                }
            };
            for (&g, reply) in part.iter().zip(replies) {
                let items = &groups[g].1;
                match reply {
                    Ok(reply) if reply.len() == items.len() => {
                        answered.extend(items.iter().copied().zip(reply));
                    }
                    Ok(_) => {
                        last = Some(NodeError::protocol("renew"));
                        pending.push(g);
                    }
                    Err(e) => {
                        last = Some(map_err(&e));
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
    (answered, last)
}

/// A part's replies, one per script call, and whether `WAIT` confirmed
/// the writes.
type PartReply = (Vec<redis::RedisResult<Vec<i64>>>, Result<(), NodeError>);

/// Sends `calls` calls of `script` ([`send_calls`], routed by `slot` or
/// to `ask`); the calls a shard answered `NOSCRIPT` (it ran none of them:
/// it started since, or flushed its scripts) go to the same place again
/// at once, after `SCRIPT LOAD` in the same pipeline. Each shard reloads
/// on its own: one that is slow or paused does not hold back the others'
/// second try (when every shard waited for the slowest before loading, a
/// wave that met empty caches while one shard was paused ran out of time
/// and failed the whole member). The writes count when the `WAIT` of each
/// pipeline that carried them confirmed.
async fn send_loaded(
    conn: &mut ClusterConnection,
    calls: usize,
    add: impl Fn(&mut redis::Pipeline, usize),
    slot: u16,
    ask: Option<&Addr>,
    script: &Lua,
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<PartReply> {
    let route = Route {
        slot,
        ask,
        load: None,
    };
    let (mut replies, acks) = send_calls(conn, calls, &add, route, wait).await?;
    let mut confirm = confirmed(wait, acks);
    let missing: Vec<usize> = (0..calls)
        .filter(|&k| matches!(&replies[k], Err(e) if no_script(e)))
        .collect();
    if missing.is_empty() {
        return Ok((replies, confirm));
    }
    let route = Route {
        slot,
        ask,
        load: Some(script),
    };
    let again = |pipe: &mut redis::Pipeline, k: usize| add(pipe, missing[k]);
    let (second, acks) = send_calls(conn, missing.len(), again, route, wait).await?;
    for (&k, reply) in missing.iter().zip(second) {
        replies[k] = reply;
    }
    let loaded = confirmed(wait, acks);
    if confirm.is_ok() {
        confirm = loaded;
    }
    Ok((replies, confirm))
}

/// `send`, failed as not answered once `until` passed (it may have run).
async fn bounded<T>(
    until: Option<Instant>,
    send: impl std::future::Future<Output = redis::RedisResult<T>>,
) -> redis::RedisResult<T> {
    match until {
        Some(t) => tokio::time::timeout_at(t, send)
            .await
            .unwrap_or_else(|_| Err(timed_out())),
        None => send.await,
    }
}

/// A part not answered before the batch's deadline (it may have run).
fn timed_out() -> redis::RedisError {
    redis::RedisError::from(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        "shard did not answer before the renewal's deadline",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::cluster::map::slots_reply;
    use std::time::Duration;

    /// A batch goes per shard, one call per 100 locks of a shard whatever
    /// their slots; a lock of a slot no shard serves goes by its slot.
    #[test]
    fn a_batch_groups_per_shard_in_chunks() {
        let items: Vec<RenewItem> = (0..1000)
            .map(|i| RenewItem::named(&format!("n{i}"), 1, 1, Duration::from_secs(1)))
            .collect();
        // Slots 16000 to 16383 served by no shard.
        let reply = slots_reply(&[
            (0, 5460, 7000, "a"),
            (5461, 10922, 7000, "b"),
            (10923, 15999, 7000, "c"),
        ]);
        let map = SlotMap::parse(&reply, "h").expect("parses");
        let (parts, alone) = by_shard_items(&map, &items);
        assert_eq!(parts.len(), 3, "one part per shard");
        let mut seen = vec![0; items.len()];
        for part in &parts {
            let shard = map.shard_of(items[part[0]].keys.slot());
            for &i in part {
                assert_eq!(map.shard_of(items[i].keys.slot()), shard);
                seen[i] += 1;
            }
        }
        for &i in &alone {
            assert_eq!(map.shard_of(items[i].keys.slot()), None);
            seen[i] += 1;
        }
        assert!(seen.iter().all(|&n| n == 1), "every item once");
        assert!(!alone.is_empty());
        let cost = batch_cost(&map, &items);
        let chunks: usize = parts.iter().map(|p| p.len().div_ceil(RENEW_CHUNK)).sum();
        let slots = slot_groups(&items, alone.iter().copied()).len();
        assert_eq!(cost.script_calls, (chunks + slots) as u64);
        assert_eq!(cost.round_trips, (3 + slots) as u64);
        // About 300 locks a shard: 4 calls each, not one per slot.
        assert!(chunks <= 3 * 4, "{chunks}");
    }

    /// One per-shard call: the first lock's key declared, then the count of
    /// key names, the names and the arguments.
    #[test]
    fn a_shard_call_declares_one_key_and_passes_the_others() {
        let items: Vec<RenewItem> = ["a", "b", "c"]
            .iter()
            .map(|n| RenewItem::named(n, 2, 7, Duration::from_millis(900)))
            .collect();
        let batch = RenewBatch::new(items.clone());
        let mut pipe = redis::pipe();
        batch.add_shard_call(&mut pipe, items.iter());
        let cmd = pipe.cmd_iter().next().expect("one call");
        let args = crate::node::batch::cmd_args(cmd);
        let lock = |i: usize| items[i].keys.lock.clone();
        assert_eq!(args[0], "EVALSHA");
        assert_eq!(args[1], crate::scripts::RENEW_SHARD.sha());
        assert_eq!(
            args[2..7],
            ["1".to_owned(), lock(0), "3".to_owned(), lock(0), lock(1)]
        );
        assert_eq!(args[7], lock(2));
        assert_eq!(args[8..11], ["o", "2", "900"]);
        assert_eq!(args.len(), 7 + 1 + 9);
    }
}
