//! `quorumlock top`: the locks with the most waiters, found by a prefix
//! scan of every node.
//!
//! Each node is walked with SCAN (MATCH `<prefix>{*}`, COUNT `--batch`),
//! never KEYS, and the locks of each batch are read with one pipeline
//! (HGETALL, PTTL, ZCARD of the queue): no call holds a node for long,
//! however many locks it has. The nodes are scanned in parallel and what
//! they hold is merged per lock name as it arrives, so memory grows with
//! the number of locks, not with nodes times locks.
//!
//! With `--layout redisson` it refuses: the locks are hashes at bare names
//! (`Layout::lock_keys_are_scannable` is false), which no SCAN pattern
//! tells from the other hashes on the nodes.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use quorumlock::{redis, HolderInfo, Layout};

use crate::cli::{Global, TopArgs};
use crate::cluster::{human, Cluster, Need};
use crate::direct::{reply, DirectNode};
use crate::exit::{self, Failure};
use crate::progress::{scanned, ScanBar};
use crate::table::align;
use crate::watch::{self, View};

/// Runs `quorumlock top`; returns the exit status.
pub async fn run(global: &Global, args: TopArgs) -> Result<u8, Failure> {
    if !global.layout.lock_keys_are_scannable() {
        return Err(Failure::usage(
            "top cannot list locks with --layout redisson: Redisson's locks are hashes at \
             bare names, which a SCAN cannot tell from other keys; use `quorumlock status NAME`",
        ));
    }
    let cluster = Cluster::connect(global, None, Need::Any).await?;
    let mut view = Top {
        known: (0..cluster.total).map(|_| Vec::new()).collect(),
        members: cluster.direct(),
        cluster,
        limit: args.limit,
        batch: args.batch,
        bar: !args.watch.watch,
        scanned: 0,
    };
    if args.watch.watch {
        return watch::run(&mut view, args.watch.interval).await;
    }
    let frame = view.frame().await?;
    exit::print(&frame)?;
    if view.scanned == 0 {
        return Err(Failure::new(
            exit::UNAVAILABLE,
            "no node could be scanned (see above)",
        ));
    }
    Ok(0)
}

/// The list `top` prints once or redraws.
struct Top {
    cluster: Cluster,
    /// Each member.
    members: Vec<DirectNode>,
    /// What the last scan walked, by member, kept for their connections
    /// ([`Top::walk`]).
    known: Vec<Vec<DirectNode>>,
    limit: usize,
    batch: usize,
    /// Show a progress bar while scanning (not while watching).
    bar: bool,
    /// Nodes scanned to the end by the last scan.
    scanned: usize,
}

impl View for Top {
    fn title(&self) -> String {
        "quorumlock top".to_owned()
    }

    async fn frame(&mut self) -> Result<String, Failure> {
        let started = Instant::now();
        let prefix = self.cluster.key_prefix.clone();
        let layout = self.cluster.layout;
        let pattern = format!("{}{{*}}", glob_escape(&prefix));
        let locks = RefCell::new(HashMap::<String, Lock>::new());
        let mut walk = self.walk().await;
        let bar = RefCell::new(ScanBar::start(walk.len(), self.bar));
        let batch = self.batch;
        let scans = walk.iter_mut().enumerate().map(|(part, node)| {
            let (pattern, prefix, locks, bar) = (&pattern, &prefix, &locks, &bar);
            async move {
                match node {
                    Ok(node) => {
                        let result =
                            scan(node, part, layout, pattern, prefix, batch, locks, bar).await;
                        (node.index, node.addr.clone(), result)
                    }
                    Err((i, addr, e)) => (*i, addr.clone(), Err(e.clone())),
                }
            }
        });
        let results = join_all(scans).await;
        bar.borrow().finish();
        for node in walk.into_iter().flatten() {
            if let Some(known) = self.known.get_mut(node.index) {
                known.push(node);
            }
        }
        let failures: Vec<String> = results
            .iter()
            .filter_map(|(i, addr, r)| {
                r.as_ref()
                    .err()
                    .map(|e| format!("node {i} ({addr}): cannot scan: {e}\n"))
            })
            .collect();
        // A member is scanned when every shard of it was.
        let failed: Vec<usize> = results
            .iter()
            .filter(|(_, _, r)| r.is_err())
            .map(|(i, _, _)| *i)
            .collect();
        self.scanned = (0..self.cluster.total)
            .filter(|i| !failed.contains(i))
            .count();
        let locks = locks.into_inner();
        let mut out = table(
            locks,
            self.limit,
            self.cluster.required,
            self.cluster.total,
            &format!(
                "under prefix {prefix} on {} of {} node(s), scanned in {}",
                self.scanned,
                self.cluster.total,
                human(started.elapsed())
            ),
        );
        out.extend(failures);
        Ok(out)
    }
}

impl Top {
    /// What the scans walk, by member: a master itself, the master of each
    /// shard of a cluster member. The shards are listed again for every
    /// frame (under `--watch`, a failover or a resharding changes them);
    /// a node already known keeps its connection. A member whose shards
    /// cannot be listed is an error for this frame.
    async fn walk(&mut self) -> Vec<Result<DirectNode, (usize, String, String)>> {
        let lists =
            self.members
                .iter_mut()
                .zip(&mut self.known)
                .map(|(member, known)| async move {
                    let listed = member.masters().await.map_err(|e| {
                        (
                            member.index,
                            member.addr.clone(),
                            format!("cannot list its shards: {e}"),
                        )
                    })?;
                    Ok(reuse(listed, std::mem::take(known)))
                });
        let mut walk = Vec::new();
        for r in join_all(lists).await {
            match r {
                Ok(nodes) => walk.extend(nodes.into_iter().map(Ok)),
                Err(e) => walk.push(Err(e)),
            }
        }
        walk
    }
}

/// `listed`, each replaced by the node of `known` at the same address (with
/// its connection) if there is one.
fn reuse(listed: Vec<DirectNode>, mut known: Vec<DirectNode>) -> Vec<DirectNode> {
    listed
        .into_iter()
        .map(
            |node| match known.iter().position(|k| k.addr == node.addr) {
                Some(i) => known.swap_remove(i),
                None => node,
            },
        )
        .collect()
}

/// What the nodes hold for one lock, merged.
#[derive(Debug, Default)]
struct Lock {
    /// The nodes where the lock hash exists (by index, each once: SCAN
    /// may return a key twice).
    nodes: Vec<usize>,
    /// Each owner in the hash: on how many nodes, and its largest count.
    holders: Vec<(String, usize, u32)>,
    /// The smallest PTTL over the nodes, in ms (`None`: no node gave one).
    pttl: Option<u64>,
    /// The longest queue over the nodes.
    waiting: u64,
}

/// Walks node `node` (the `part`-th of the progress bar), merging every
/// lock found into `locks`.
#[allow(clippy::too_many_arguments)]
async fn scan(
    node: &mut DirectNode,
    part: usize,
    layout: Layout,
    pattern: &str,
    prefix: &str,
    batch: usize,
    locks: &RefCell<HashMap<String, Lock>>,
    bar: &RefCell<ScanBar>,
) -> Result<(), String> {
    let mut cursor = 0u64;
    loop {
        let mut pipe = redis::pipe();
        pipe.cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(batch);
        let ((next, keys),): ((u64, Vec<Vec<u8>>),) = node.query(&pipe).await?;
        // Each lock's name, lock key and queue key, as the layout names
        // them (a name no lock can have is someone else's key).
        let found: Vec<(String, String, String)> = keys
            .into_iter()
            .filter_map(|k| String::from_utf8(k).ok())
            .filter_map(|k| {
                let name = name_of(&k, prefix)?;
                let key = layout.lock_key(prefix, name).ok()?;
                let (queue, _) = layout.queue_keys(prefix, name).ok()?;
                Some((name.to_owned(), key, queue))
            })
            .collect();
        if !found.is_empty() {
            let mut pipe = redis::pipe();
            pipe.ignore_errors();
            for (_, key, queue) in &found {
                pipe.cmd("HGETALL")
                    .arg(key)
                    .cmd("PTTL")
                    .arg(key)
                    .cmd("ZCARD")
                    .arg(queue);
            }
            let names = found.into_iter().map(|(name, _, _)| name).collect();
            let replies: Vec<redis::Value> = node.query(&pipe).await?;
            merge(&mut locks.borrow_mut(), node.index, names, replies)?;
        }
        cursor = next;
        let done = if cursor == 0 { 1.0 } else { scanned(cursor) };
        let found = locks.borrow().len();
        bar.borrow_mut().advance(part, done, found);
        if cursor == 0 {
            return Ok(());
        }
    }
}

/// Adds node `node`'s replies for `names` (HGETALL, PTTL, ZCARD each) to
/// `locks`.
fn merge(
    locks: &mut HashMap<String, Lock>,
    node: usize,
    names: Vec<String>,
    replies: Vec<redis::Value>,
) -> Result<(), String> {
    let mut replies = replies.into_iter();
    for name in names {
        let (Some(hash), Some(pttl), Some(queue)) =
            (replies.next(), replies.next(), replies.next())
        else {
            return Err("a pipeline came back short".to_owned());
        };
        // Not a hash (someone else's key), or gone since the SCAN.
        let Some(hash) = reply::<BTreeMap<String, String>>(hash).filter(|h| !h.is_empty()) else {
            continue;
        };
        let lock = locks.entry(name).or_default();
        if lock.nodes.contains(&node) {
            continue;
        }
        lock.nodes.push(node);
        for (owner, count) in hash {
            let count = count.parse().unwrap_or(0);
            match lock.holders.iter_mut().find(|(o, _, _)| *o == owner) {
                Some(h) => {
                    h.1 += 1;
                    h.2 = h.2.max(count);
                }
                None => lock.holders.push((owner, 1, count)),
            }
        }
        if let Some(p) = reply::<i64>(pttl).and_then(|p| u64::try_from(p).ok()) {
            lock.pttl = Some(lock.pttl.map_or(p, |q| q.min(p)));
        }
        lock.waiting = lock.waiting.max(reply::<u64>(queue).unwrap_or(0));
    }
    Ok(())
}

/// The lock name in `key`, if it is a lock hash `<prefix>{<name>}`.
fn name_of<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let name = key
        .strip_prefix(prefix)?
        .strip_prefix('{')?
        .strip_suffix('}')?;
    (!name.is_empty() && !name.contains(['{', '}'])).then_some(name)
}

/// `s` with the characters SCAN's MATCH treats as a pattern escaped.
fn glob_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// The `limit` locks with the most waiters (then by name) as a summary
/// line and an aligned table.
fn table(
    locks: HashMap<String, Lock>,
    limit: usize,
    required: usize,
    total: usize,
    scope: &str,
) -> String {
    let found = locks.len();
    let with_waiters = locks.values().filter(|l| l.waiting > 0).count();
    let mut locks: Vec<(String, Lock)> = locks.into_iter().collect();
    locks.sort_unstable_by(|(a, la), (b, lb)| lb.waiting.cmp(&la.waiting).then_with(|| a.cmp(b)));
    locks.truncate(limit);
    let mut out = format!(
        "{found} lock(s) {scope}; {with_waiters} with waiters; {} shown, most waiters first\n",
        locks.len()
    );
    if locks.is_empty() {
        return out;
    }
    let dash = || "-".to_owned();
    let mut rows = vec![[
        "NAME", "WAITERS", "HOLDER", "HOLDS", "HELD FOR", "PTTL", "NODES",
    ]
    .map(str::to_owned)];
    for (name, lock) in locks {
        let holder = lock
            .holders
            .iter()
            .max_by(|a, b| a.1.cmp(&b.1).then_with(|| b.0.cmp(&a.0)));
        let (who, holds, since) = match holder {
            Some((id, on, count)) => {
                let mut who = short(id);
                if *on < required {
                    who.push_str(" (no quorum)");
                }
                (who, count.to_string(), held_for(id))
            }
            None => (dash(), dash(), dash()),
        };
        rows.push([
            name,
            lock.waiting.to_string(),
            who,
            holds,
            since,
            lock.pttl
                .map_or_else(|| "no ttl".to_owned(), |p| human(Duration::from_millis(p))),
            format!("{}/{total}", lock.nodes.len()),
        ]);
    }
    out.push_str(&align(&rows));
    out
}

/// A holder id in short: `host@pid` when it tells, the id otherwise.
fn short(id: &str) -> String {
    match crate::queue::who(id) {
        (Some(host), Some(pid)) => format!("{host}@{pid}"),
        _ => id.to_owned(),
    }
}

/// How long the holder `id` has held the lock, when its id tells.
fn held_for(id: &str) -> String {
    HolderInfo::parse(id).map_or_else(
        || "-".to_owned(),
        |info| {
            human(
                SystemTime::now()
                    .duration_since(info.since)
                    .unwrap_or_default(),
            )
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lock_hashes_are_names() {
        assert_eq!(name_of("ql:{a}", "ql:"), Some("a"));
        assert_eq!(name_of("ql:{a b:c}", "ql:"), Some("a b:c"));
        assert_eq!(name_of("ql:{a}:queue", "ql:"), None);
        assert_eq!(name_of("ql:{}", "ql:"), None);
        assert_eq!(name_of("ql:{a}b}", "ql:"), None);
        assert_eq!(name_of("other:{a}", "ql:"), None);
        assert_eq!(glob_escape("a*b?[c]\\"), "a\\*b\\?\\[c\\]\\\\");
    }

    #[test]
    fn the_busiest_come_first_then_by_name() {
        let lock = |waiting, holders: Vec<(&str, usize, u32)>| Lock {
            nodes: vec![0, 1, 2],
            holders: holders
                .into_iter()
                .map(|(h, n, c)| (h.to_owned(), n, c))
                .collect(),
            pttl: Some(1_500),
            waiting,
        };
        let locks = HashMap::from([
            (
                "b".to_owned(),
                lock(2, vec![("h@1#c:owner-1:hold-1@0", 3, 2)]),
            ),
            ("a".to_owned(), lock(2, vec![("x", 1, 1), ("y", 2, 1)])),
            ("c".to_owned(), lock(5, vec![])),
            ("d".to_owned(), lock(0, vec![])),
        ]);
        let text = table(locks, 3, 2, 3, "here");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "4 lock(s) here; 3 with waiters; 3 shown, most waiters first"
        );
        let cells = |l: &str| l.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(cells(lines[1])[0], "NAME");
        assert_eq!(cells(lines[2]), ["c", "5", "-", "-", "-", "1.5s", "3/3"]);
        assert_eq!(cells(lines[3]), ["a", "2", "y", "1", "-", "1.5s", "3/3"]);
        assert_eq!(cells(lines[4])[..4], ["b", "2", "h@1", "2"]);
        assert_eq!(lines.len(), 5);
    }

    #[test]
    fn a_node_counts_once_per_lock_and_foreign_keys_not_at_all() {
        use redis::Value::{Array, BulkString, Int};
        let replies = |pttl, waiting| {
            vec![
                Array(vec![BulkString(b"o".to_vec()), BulkString(b"2".to_vec())]),
                Int(pttl),
                Int(waiting),
            ]
        };
        let mut locks = HashMap::new();
        let names = || vec!["a".to_owned()];
        merge(&mut locks, 0, names(), replies(900, 1)).expect("merge");
        // SCAN returned the key again on node 0.
        merge(&mut locks, 0, names(), replies(900, 1)).expect("merge");
        merge(&mut locks, 1, names(), replies(-1, 4)).expect("merge");
        // Gone between the SCAN and the read: an empty hash, no lock.
        let gone = vec![Array(vec![]), Int(-2), Int(0)];
        merge(&mut locks, 1, vec!["b".to_owned()], gone).expect("merge");
        assert!(!locks.contains_key("b"));
        let a = &locks["a"];
        assert_eq!(a.nodes, [0, 1]);
        assert_eq!(a.holders, [("o".to_owned(), 2, 2)]);
        assert_eq!((a.pttl, a.waiting), (Some(900), 4));
        assert!(
            merge(&mut locks, 2, names(), vec![Int(1)]).is_err(),
            "short"
        );
    }
}
