//! A sharded member (runs with `sharded`): node 0 is a Redis Cluster of 2
//! or 3 shards, still one vote. Its data is one in-memory node (the
//! member's, so that the checks, the feed and the member-wide faults see
//! it whole); each lock's hash slot ([`crate::lock_slot`]) is served by one
//! shard ([`Member`]), and each shard has switches of its own (down, black
//! hole, slow, replies reset after the call ran, replies late past the
//! client's response timeout after the call ran) and one connection per
//! process. Slots migrate during the run, key by key, as `MIGRATE` moves
//! them.
//!
//! A shard routes each call as Redis 7 does, by the call's keys (the
//! `KEYS` a real member's call names, `node::script_keys`): a slot it does
//! not serve answers `MOVED`; on the source of a migrating slot a call
//! whose keys are all still there runs, one with none there answers `ASK`
//! (the target) and one with some there `TRYAGAIN`; the target runs a
//! call sent after `ASKING` unless it names several keys and lacks one of
//! them (`TRYAGAIN`: a channel is never a key, so a release waits for the
//! migration's end), and answers `MOVED` otherwise.
//!
//! The calls of each process ([`ShardedNode`]) follow the production
//! retry rules (`node::cluster::retry`'s `Retry`) on errors built as a real
//! member meets them (a server error line, a refused or reset
//! connection) and read by the production classifier
//! (`node::cluster::route`'s `failure`). Its client slot map goes stale when a
//! slot moves and is refreshed after `MOVED`. A renewal batch is sent per
//! slot (`node::cluster::route`'s `slot_groups`), each part's locks answered, a
//! failed part's [`Renewed::Failed`]. Release messages come from the
//! member as a whole (its feed is the member's: shard faults do not touch
//! pub/sub). A response timeout (`Cut::TimesOut`) ends the try with an
//! I/O error `TimedOut` one node timeout after the send (redis-rs's
//! response timeout before the fix that made it a release's two node
//! timeouts: harsher than production), the connection living on.
//!
//! The invariants: [`Invariant::Resent`], a call that must never be sent
//! again (an acquire, a forced release: `Resend::Never`) is sent again
//! after a try that ran on a shard; [`Invariant::ResentAfterTimeout`], any
//! call is sent again after a try that ran and timed out (its first copy,
//! queued on the live connection, may still run: a second runs twice).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::RedisError;

use super::checker::{Ev, Invariant, LOCKS, WORLD};
use super::net::{Cut, Health, LinkCtl, NodeCtl};
use super::node::{Lost, Path, ShardWay, SimNode};
use crate::error::NodeError;
use crate::keys::{key_slot, name_slot, Keys};
use crate::node::{
    failure, slot_groups, Answer, BatchKind, Feed, Grant, Redirect, RenewBatch, Renewed, Resend,
    Retry, Step,
};
use crate::rng::up_to;
use crate::sync::locked;
use crate::tests::fake::{batch as fake_batch, FakeNode, Script, State, TestNode};

/// The sharded member of a run.
pub(crate) struct Member {
    /// Its index among the run's nodes.
    pub(crate) node: usize,
    /// Each shard's switches (sharing the member's data).
    pub(crate) shards: Vec<Arc<NodeCtl>>,
    /// `[process][shard]`: each process's connection to each shard.
    pub(crate) links: Vec<Vec<Arc<LinkCtl>>>,
    table: Mutex<Table>,
}

/// Which shard serves which slot.
struct Table {
    /// The locks' slots; any other slot is served by `slot % shards`.
    owner: BTreeMap<u16, usize>,
    migrating: Option<Migration>,
}

/// A slot on its way from one shard to another.
struct Migration {
    slot: u16,
    from: usize,
    to: usize,
    /// Keys of the slot on the target (moved, or written there).
    moved: BTreeSet<String>,
}

/// How a shard answers a call: it ran it, or an error line.
#[derive(Debug)]
enum Try<T> {
    Ran(Result<T, NodeError>),
    Refused(String),
}

impl Member {
    /// `shards` shards over node `node`'s data, the locks' slots dealt at
    /// random, for `procs` processes.
    pub(crate) fn new(node: usize, ctl: &NodeCtl, shards: usize, procs: usize) -> Arc<Self> {
        let mut owner = BTreeMap::new();
        for l in LOCKS {
            let slot = name_slot(l);
            if let std::collections::btree_map::Entry::Vacant(e) = owner.entry(slot) {
                e.insert(up_to(shards as u64 - 1) as usize);
            }
        }
        Arc::new(Self {
            node,
            shards: (0..shards)
                .map(|_| NodeCtl::sharing(Arc::clone(&ctl.fake)))
                .collect(),
            links: (0..procs)
                .map(|_| (0..shards).map(|_| LinkCtl::new()).collect())
                .collect(),
            table: Mutex::new(Table {
                owner,
                migrating: None,
            }),
        })
    }

    fn fake(&self) -> &FakeNode {
        &self.shards[0].fake
    }

    /// The shard that serves `slot` now.
    pub(crate) fn owner(&self, slot: u16) -> usize {
        let t = locked(&self.table);
        t.owner
            .get(&slot)
            .copied()
            .unwrap_or(usize::from(slot) % self.shards.len())
    }

    /// The slot map every client reads (after `MOVED`).
    fn map(&self) -> BTreeMap<u16, usize> {
        locked(&self.table).owner.clone()
    }

    /// Whether process `p` may find the member unable to take a lock now
    /// (a migration under way, a shard or a connection to it faulty): the
    /// liveness monitor does not count the member for `p` then.
    pub(crate) fn impaired(&self, p: usize) -> bool {
        locked(&self.table).migrating.is_some()
            || self.shards.iter().zip(&self.links[p]).any(|(s, l)| {
                s.health() != Health::Up || !s.slow().is_zero() || l.cut() != Cut::None
            })
    }

    /// How shard `k` answers a call over `keys` arriving now (after
    /// `ASKING` if `asking`): `Ok` to run it, or the error line.
    fn route(&self, k: usize, keys: &[String], asking: bool, s: &State) -> Result<(), String> {
        let Some(slot) = keys.first().map(|k| key_slot(k)) else {
            return Ok(());
        };
        if keys.iter().any(|k| key_slot(k) != slot) {
            return Err("CROSSSLOT Keys in request don't hash to the same slot".into());
        }
        let owner = self.owner(slot);
        let mut t = locked(&self.table);
        let moving = t.migrating.as_mut().filter(|m| m.slot == slot);
        let Some(m) = moving else {
            return match k == owner {
                true => Ok(()),
                false => Err(format!("MOVED {slot} shard:{owner}")),
            };
        };
        let here = |key: &String| s.holds_key(key) && m.moved.contains(key) == (k == m.to);
        let present = keys.iter().filter(|key| here(key)).count();
        let missing = keys.len() - present;
        if k == m.from {
            return match (missing, present) {
                (0, _) => Ok(()),
                (_, 0) => Err(format!("ASK {slot} shard:{}", m.to)),
                _ => Err("TRYAGAIN Multiple keys request during rehashing of slot".into()),
            };
        }
        if k == m.to && asking {
            if keys.len() > 1 && missing > 0 {
                return Err("TRYAGAIN Multiple keys request during rehashing of slot".into());
            }
            // What the call writes is written on the target.
            m.moved.extend(keys.iter().cloned());
            return Ok(());
        }
        Err(format!("MOVED {slot} shard:{owner}"))
    }

    /// Starts moving a lock's slot (drawn) to another shard (drawn):
    /// `(slot, from, to)`.
    pub(crate) fn begin_migration(&self) -> (u16, usize, usize) {
        let slots: Vec<u16> = locked(&self.table).owner.keys().copied().collect();
        let slot = slots[up_to(slots.len() as u64 - 1) as usize];
        let from = self.owner(slot);
        let n = self.shards.len();
        let to = (from + 1 + up_to(n as u64 - 2) as usize) % n;
        locked(&self.table).migrating = Some(Migration {
            slot,
            from,
            to,
            moved: BTreeSet::new(),
        });
        (slot, from, to)
    }

    /// Moves the next key of the migrating slot (`MIGRATE`), or, with none
    /// left, hands the slot to the target: whether the migration is over.
    pub(crate) fn migrate_one(&self) -> bool {
        let keys = self.fake().key_names();
        let mut t = locked(&self.table);
        let Some(m) = t.migrating.as_mut() else {
            return true;
        };
        let slot = m.slot;
        let next = keys
            .into_iter()
            .find(|k| key_slot(k) == slot && !m.moved.contains(k));
        if let Some(k) = next {
            m.moved.insert(k);
            return false;
        }
        let to = m.to;
        t.migrating = None;
        t.owner.insert(slot, to);
        true
    }

    /// Heals every shard and connection.
    pub(crate) fn heal_all(&self) {
        for s in &self.shards {
            s.heal();
        }
        for l in self.links.iter().flatten() {
            l.set(Cut::None);
        }
    }
}

/// The sharded member as one process reaches it.
pub(crate) struct ShardedNode {
    /// The member as a whole: its own switches and link (faults that hit
    /// the whole member), its feed, the hooks of a grant and a forced
    /// release, the trace and the spin detector.
    pub(crate) base: SimNode,
    pub(crate) member: Arc<Member>,
    pub(crate) proc: usize,
    /// This client's slot map, refreshed after `MOVED`.
    pub(crate) view: Arc<Mutex<BTreeMap<u16, usize>>>,
    /// How long a call proven not run is sent again: the node timeout.
    pub(crate) patience: Duration,
}

impl ShardedNode {
    pub(crate) fn new(base: SimNode, member: &Arc<Member>, proc: usize) -> Self {
        Self {
            patience: base.timeout,
            base,
            member: Arc::clone(member),
            proc,
            view: Arc::new(Mutex::new(member.map())),
        }
    }

    /// One script call over `keys`, sent and sent again by the production
    /// rules.
    fn routed<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        keys: Vec<String>,
        resend: Resend,
        script: impl Script<T> + Clone,
    ) -> Answer<T> {
        let member = Arc::clone(&self.member);
        let view = Arc::clone(&self.view);
        let (node, link) = (Arc::clone(&self.base.node), Arc::clone(&self.base.link));
        let process = Arc::clone(&self.base.process);
        let (trace, spin) = (self.base.trace.clone(), Arc::clone(&self.base.spin));
        let (proc, slow, patience) = (self.proc, self.base.timeout, self.patience);
        let slot = keys.first().map_or(0, |k| key_slot(k));
        Box::pin(async move {
            let mut retry = Retry::new(resend, patience);
            let ran = Arc::new(AtomicBool::new(false));
            // Whether a try ran and timed out (its copy may still run).
            let (mut timed_out, mut flagged) = (false, false);
            loop {
                let again = match (timed_out, ran.load(Ordering::Relaxed)) {
                    (true, _) => Some((Invariant::ResentAfterTimeout, "its response timed out")),
                    (false, true) if resend == Resend::Never => Some((Invariant::Resent, "it ran")),
                    _ => None,
                };
                if let (Some((inv, why)), false) = (again, flagged) {
                    flagged = true;
                    let what = format!("p{proc}: {what} over {keys:?} sent again after {why}");
                    spin.log.push(WORLD, Ev::Violation(inv, what));
                }
                let (k, asking) = match retry.route() {
                    Redirect::BySlot => {
                        let known = locked(&view).get(&slot).copied();
                        (known.unwrap_or_else(|| member.owner(slot)), false)
                    }
                    Redirect::Moved(_, k) => (usize::from(*k), false),
                    Redirect::Ask(_, k) => (usize::from(*k), true),
                };
                let way = ShardWay {
                    index: k,
                    ctl: Arc::clone(&member.shards[k.min(member.shards.len() - 1)]),
                    link: Arc::clone(&member.links[proc][k.min(member.shards.len() - 1)]),
                };
                let path = Path {
                    node: &node,
                    link: &link,
                    process: &process,
                    shard: Some(&way),
                };
                let (m, names, run) = (Arc::clone(&member), keys.clone(), script.clone());
                let this = Arc::new(AtomicBool::new(false));
                let (ran, this_ran) = (Arc::clone(&ran), Arc::clone(&this));
                let sent = tokio::time::Instant::now();
                let reply = path.send(&trace, what, move |fake| {
                    fake.reach(what, move |s| {
                        Ok(match m.route(k, &names, asking, s) {
                            Err(line) => Try::Refused(line),
                            Ok(()) => {
                                ran.store(true, Ordering::Relaxed);
                                this_ran.store(true, Ordering::Relaxed);
                                Try::Ran(run(s))
                            }
                        })
                    })
                });
                let e = match spin.slowed(what, slow, reply).await {
                    Ok(Ok(Try::Ran(r))) => return r,
                    Ok(Err(e)) => return Err(e),
                    Ok(Ok(Try::Refused(line))) => server_error(&line),
                    Err(Lost::Refused) => io_error(std::io::ErrorKind::ConnectionRefused),
                    Err(Lost::Reset) => io_error(std::io::ErrorKind::ConnectionReset),
                    Err(Lost::TimedOut) => {
                        // The response timeout: one node timeout from the send.
                        timed_out |= this.load(Ordering::Relaxed);
                        tokio::time::sleep_until(sent + patience).await;
                        io_error(std::io::ErrorKind::TimedOut)
                    }
                };
                match retry.after(&failure(&e)) {
                    Step::Again { moved } => {
                        if moved {
                            *locked(&view) = member.map();
                        }
                    }
                    Step::Wait(pause) => tokio::time::sleep(pause).await,
                    Step::Stop => return Err(NodeError::from_redis(&e)),
                }
            }
        })
    }
}

/// The error a client reads from the server's error line `line`.
fn server_error(line: &str) -> RedisError {
    match redis::parse_redis_value(format!("-{line}\r\n").as_bytes()).map(|v| v.extract_error()) {
        Ok(Err(e)) | Err(e) => e,
        Ok(Ok(_)) => io_error(std::io::ErrorKind::Other),
    }
}

fn io_error(kind: std::io::ErrorKind) -> RedisError {
    RedisError::from(std::io::Error::from(kind))
}

impl TestNode for ShardedNode {
    fn fake(&self) -> &FakeNode {
        self.member.fake()
    }

    /// A call without keys (a status read): the member as a whole.
    fn reach<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        script: impl Script<T>,
    ) -> Answer<T> {
        self.base.reach(what, script)
    }

    fn reach_keyed<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        (keys, resend): (impl FnOnce() -> crate::node::call_keys::Names, Resend),
        script: impl Script<T> + Clone,
    ) -> Answer<T> {
        self.routed(what, keys().to_vec(), resend, script)
    }

    /// Where this client's slot map changes shard, among the slots it
    /// knows (the lock names' slots): the watchdog's lanes follow them.
    fn breaks(&self) -> Vec<u16> {
        let view = locked(&self.view);
        let mut breaks = Vec::new();
        let mut before = None;
        for (&slot, &shard) in view.iter() {
            if before.is_some_and(|b| b != shard) {
                breaks.push(slot);
            }
            before = Some(shard);
        }
        breaks
    }

    fn reach_batch(&self, what: &'static str, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        let kind = batch.kind();
        let parts: Vec<(Vec<usize>, Answer<Vec<Renewed>>)> =
            slot_groups(&batch.items, 0..batch.items.len())
                .into_iter()
                .map(|(_, ix)| {
                    let items: Vec<_> = ix.iter().map(|&i| batch.items[i].clone()).collect();
                    let mut keys = Vec::new();
                    for item in &items {
                        keys.push(item.keys.lock.clone());
                        match kind {
                            BatchKind::Renew => {}
                            BatchKind::Repair => keys.push(item.keys.fence.clone()),
                            BatchKind::Keep => {
                                keys.push(item.keys.queue());
                                keys.push(item.keys.timeouts());
                            }
                        }
                    }
                    let resend = Resend::AfterBrokenConnection;
                    let call =
                        self.routed(what, keys, resend, move |s| Ok(fake_batch(s, &items, kind)));
                    (ix, call)
                })
                .collect();
        let (n, deadline) = (batch.items.len(), batch.deadline);
        Box::pin(async move {
            let parts = parts.into_iter().map(|(ix, call)| async move {
                let r = match deadline {
                    Some(d) => tokio::time::timeout_at(d, call)
                        .await
                        .unwrap_or_else(|_| Err(NodeError::timeout())),
                    None => call.await,
                };
                (ix, r)
            });
            let mut out = vec![Renewed::Failed; n];
            let (mut answered, mut last) = (false, None);
            for (ix, r) in futures::future::join_all(parts).await {
                match r {
                    Ok(v) => {
                        answered = true;
                        for (i, x) in ix.into_iter().zip(v) {
                            out[i] = x;
                        }
                    }
                    Err(e) => last = Some(e),
                }
            }
            match last {
                Some(e) if !answered => Err(e),
                _ => Ok(out),
            }
        })
    }

    fn release_feed(&self) -> Option<Arc<dyn Feed>> {
        self.base.release_feed()
    }

    fn acquired(&self, reply: Answer<Grant>) -> Answer<Grant> {
        self.base.acquired(reply)
    }

    fn forced(&self, keys: &Keys) -> Arc<dyn Fn() + Send + Sync> {
        self.base.forced(keys)
    }
}
