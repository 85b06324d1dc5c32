//! Who waits for a lock: its queue of waiters on every node, read directly
//! (`<prefix>{<name>}:queue`, waiter id -> ticket, and `:timeouts`, waiter
//! id -> the node time in ms after which the nodes skip it, in either
//! layout: named by `Layout::queue_keys`), merged.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::future::join_all;
use quorumlock::redis;
use serde::Serialize;

use crate::cluster::human;
use crate::direct::{reply, DirectNode};

/// Waiters listed per lock (the total is counted all the same).
pub const SHOWN: usize = 20;

/// The waiters of a lock, as the nodes queue them.
#[derive(Debug, Default, Serialize)]
pub struct Queue {
    /// How many wait: the longest queue over the nodes that answered.
    pub waiting: u64,
    /// The first [`SHOWN`] waiters of each node, merged, in ticket order.
    pub waiters: Vec<Waiter>,
}

/// One waiter, as the nodes that queue it see it.
#[derive(Debug, Serialize)]
pub struct Waiter {
    /// The waiter id: `host@pid#client:owner-N:wait-M`.
    pub id: String,
    /// The waiter's host, when its id tells.
    pub host: Option<String>,
    /// The waiter's process id, when its id tells.
    pub pid: Option<u32>,
    /// Its ticket: the largest over the nodes (the one it settles on).
    pub ticket: u64,
    /// The smallest ticket over the nodes: differs from `ticket` only
    /// until its next attempt re-files it everywhere.
    pub min_ticket: u64,
    /// On how many nodes it is queued.
    pub nodes: usize,
    /// Milliseconds until the last node that queues it skips it unless it
    /// calls again (negative: overdue, dropped at the next call).
    pub skipped_in_ms: Option<i64>,
}

/// What one node queues: `(id, ticket, deadline - node now)`.
type NodeQueue = (u64, Vec<(String, u64, Option<i64>)>);

/// Reads a lock's queue (`keys`: its queue and timeouts keys, as
/// `Layout::queue_keys` names them) on every node in `nodes`; nodes that
/// fail are left out (their rows in the status say why).
pub async fn read(nodes: &mut [DirectNode], keys: &(String, String)) -> Queue {
    let (queue_key, timeouts_key) = keys;
    let reads = nodes
        .iter_mut()
        .map(|n| read_node(n, queue_key, timeouts_key));
    merge(join_all(reads).await.into_iter().flatten().collect())
}

/// One node's queue: its length and its first [`SHOWN`] waiters.
async fn read_node(node: &mut DirectNode, queue: &str, timeouts: &str) -> Option<NodeQueue> {
    let mut pipe = redis::pipe();
    pipe.cmd("TIME")
        .cmd("ZCARD")
        .arg(queue)
        .cmd("ZRANGE")
        .arg(queue)
        .arg(0)
        .arg(SHOWN - 1)
        .arg("WITHSCORES");
    let (time, waiting, head): ((u64, u64), u64, Vec<(String, f64)>) =
        node.query(&pipe).await.ok()?;
    let now_ms = i64::try_from(time.0.saturating_mul(1000) + time.1 / 1000).unwrap_or(i64::MAX);
    if head.is_empty() {
        return Some((waiting, Vec::new()));
    }
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    for (id, _) in &head {
        pipe.cmd("ZSCORE").arg(timeouts).arg(id);
    }
    let deadlines: Vec<redis::Value> = node.query(&pipe).await.ok()?;
    let waiters = head
        .into_iter()
        .zip(deadlines)
        .map(|((id, ticket), deadline)| {
            let left = reply::<f64>(deadline).map(|d| to_ms(d).saturating_sub(now_ms));
            (id, to_ticket(ticket), left)
        })
        .collect();
    Some((waiting, waiters))
}

/// A score as whole milliseconds.
#[allow(clippy::cast_possible_truncation)]
fn to_ms(score: f64) -> i64 {
    // `as` saturates, and NaN becomes 0.
    score as i64
}

/// A ticket score as a whole number.
#[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
fn to_ticket(score: f64) -> u64 {
    score as u64
}

/// The nodes' queues as one, in ticket order (then by id, as the nodes
/// order them).
fn merge(per_node: Vec<NodeQueue>) -> Queue {
    let mut by_id: BTreeMap<String, Waiter> = BTreeMap::new();
    let mut waiting = 0;
    for (count, waiters) in per_node {
        waiting = waiting.max(count);
        for (id, ticket, left) in waiters {
            let w = by_id.entry(id.clone()).or_insert_with(|| {
                let (host, pid) = who(&id);
                Waiter {
                    id,
                    host,
                    pid,
                    ticket,
                    min_ticket: ticket,
                    nodes: 0,
                    skipped_in_ms: None,
                }
            });
            w.ticket = w.ticket.max(ticket);
            w.min_ticket = w.min_ticket.min(ticket);
            w.nodes += 1;
            w.skipped_in_ms = w.skipped_in_ms.max(left);
        }
    }
    let mut waiters: Vec<Waiter> = by_id.into_values().collect();
    waiters.sort_by(|a, b| (a.ticket, &a.id).cmp(&(b.ticket, &b.id)));
    waiters.truncate(SHOWN);
    Queue { waiting, waiters }
}

/// The host and pid in an id written by this crate (`host@pid#...`).
pub fn who(id: &str) -> (Option<String>, Option<u32>) {
    let Some((client, _)) = id.split_once('#') else {
        return (None, None);
    };
    match client.rsplit_once('@') {
        Some((host, pid)) if !host.is_empty() => (Some(host.to_owned()), pid.parse().ok()),
        _ => (None, None),
    }
}

impl Queue {
    /// The waiters as lines: a count, then an aligned table.
    pub fn lines(&self, total_nodes: usize) -> String {
        if self.waiting == 0 {
            return "no one waiting\n".to_owned();
        }
        let mut out = format!("{} waiting, in ticket order:\n", self.waiting);
        let dash = || "-".to_owned();
        let mut rows =
            vec![["TICKET", "WAITER", "HOST", "PID", "NODES", "SKIPPED IN"].map(str::to_owned)];
        for w in &self.waiters {
            rows.push([
                if w.min_ticket == w.ticket {
                    w.ticket.to_string()
                } else {
                    format!("{}..{}", w.min_ticket, w.ticket)
                },
                w.id.clone(),
                w.host.clone().unwrap_or_else(dash),
                w.pid.map_or_else(dash, |p| p.to_string()),
                format!("{}/{total_nodes}", w.nodes),
                match w.skipped_in_ms {
                    Some(ms) if ms > 0 => human(Duration::from_millis(ms.unsigned_abs())),
                    Some(_) => "overdue".to_owned(),
                    None => dash(),
                },
            ]);
        }
        out.push_str(&crate::table::align(&rows));
        let listed = u64::try_from(self.waiters.len()).unwrap_or(u64::MAX);
        if self.waiting > listed {
            out.push_str(&format!("... and {} more\n", self.waiting - listed));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queues_merge_in_ticket_order() {
        let a = "web-1@10#c1:owner-1:wait-2".to_owned();
        let b = "web-2@20#c2:owner-1:wait-5".to_owned();
        let q = merge(vec![
            (
                2,
                vec![(b.clone(), 1, Some(4_000)), (a.clone(), 2, Some(3_000))],
            ),
            (2, vec![(a.clone(), 2, Some(4_500)), (b.clone(), 3, None)]),
            (3, vec![]),
        ]);
        assert_eq!(q.waiting, 3);
        let ids: Vec<&str> = q.waiters.iter().map(|w| w.id.as_str()).collect();
        assert_eq!(ids, [a.as_str(), b.as_str()]);
        assert_eq!((q.waiters[0].ticket, q.waiters[0].min_ticket), (2, 2));
        assert_eq!((q.waiters[1].ticket, q.waiters[1].min_ticket), (3, 1));
        assert_eq!(q.waiters[0].skipped_in_ms, Some(4_500));
        assert_eq!(q.waiters[0].host.as_deref(), Some("web-1"));
        assert_eq!(q.waiters[1].pid, Some(20));
        let text = q.lines(3);
        assert!(text.starts_with("3 waiting, in ticket order:\n"), "{text}");
        assert!(text.contains("1..3"), "{text}");
        assert!(text.ends_with("... and 1 more\n"), "{text}");
    }

    #[test]
    fn ids_tell_host_and_pid() {
        assert_eq!(
            who("h@42#00ff:owner-1:wait-3"),
            (Some("h".to_owned()), Some(42))
        );
        assert_eq!(who("thief"), (None, None));
        assert_eq!(who("@1#x"), (None, None));
    }
}
