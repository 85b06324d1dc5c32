//! How a cluster member's calls reach its shards: one script call by its
//! first key's slot (a redirect's address, `ASKING`, or again after a pause
//! only when the answer proves it did not run), and the pipelines of
//! script calls a renewal batch is sent in (per shard, or per slot grouped
//! per shard); each followed, in the same pipeline, by `WAIT` when the
//! member waits for replicas.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{Route as SlotRoute, SingleNodeRoutingInfo, SlotAddr};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};

use crate::config::ReplicaWait;
use crate::error::{NodeError, NodeErrorKind};
use crate::scripts::{ms, Lua};
use crate::sync::locked;

use super::map::SlotMap;
pub(crate) use super::retry::{Failure, Next, Redirect, MAX_TRIES};
use crate::node::batch::{RenewItem, RENEW_CHUNK};
use crate::node::script_call::{broken, no_script};

/// A cluster member's way to its shards: redis-rs's cluster client (its
/// retries off) and the member's own slot map.
#[derive(Clone)]
pub(super) struct Shards {
    pub(super) conn: ClusterConnection,
    /// Which shard serves which slot, as last read (`CLUSTER SLOTS`);
    /// refreshed after a redirect. Used to group a batch per shard and to
    /// name the shard a status answer came from.
    pub(super) map: Arc<Mutex<SlotMap>>,
    /// The host of the first seed: the address of a node that does not
    /// know its own.
    pub(super) seed_host: String,
    /// The node timeout: bounds a refresh of the map.
    pub(super) patience: std::time::Duration,
}

impl Shards {
    /// Re-reads the slot map (`CLUSTER SLOTS` from any node), within the
    /// node timeout (a node that answers nothing leaves the map as it was).
    pub(super) async fn refresh(&mut self) {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let read = cmd.query_async::<Value>(&mut self.conn);
        let Ok(reply) = tokio::time::timeout(self.patience, read).await else {
            return;
        };
        if let Ok(fresh) = reply
            .map_err(|e| e.to_string())
            .and_then(|v| SlotMap::parse(&v, &self.seed_host))
        {
            *locked(&self.map) = fresh;
        }
    }
}

/// What an error proves: only the answers listed in the module doc prove
/// that the script did not run.
pub(crate) fn next(e: &RedisError) -> Next {
    let to = |host: &str| -> Option<(String, u16)> {
        let (h, p) = host.rsplit_once(':')?;
        Some((h.to_owned(), p.parse().ok()?))
    };
    match e.kind() {
        ErrorKind::Server(ServerErrorKind::Moved) => {
            match e.redirect_node().and_then(|(a, _)| to(a)) {
                Some((h, p)) => Next::Again(Redirect::Moved(h, p)),
                None => Next::Pause,
            }
        }
        ErrorKind::Server(ServerErrorKind::Ask) => match e.redirect_node().and_then(|(a, _)| to(a))
        {
            Some((h, p)) => Next::Again(Redirect::Ask(h, p)),
            None => Next::Pause,
        },
        ErrorKind::Server(
            ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::BusyLoading
            | ServerErrorKind::ReadOnly,
        )
        | ErrorKind::ClusterConnectionNotFound => Next::Pause,
        _ if e.is_connection_refusal() => Next::Pause,
        _ => Next::MayHaveRun,
    }
}

/// What a try's error proves, for [`super::retry::Retry::after`]. A
/// response timeout (redis-rs's, an I/O error `TimedOut`) is not a broken
/// connection: the connection lives on, and the call, queued on it, may
/// still run when the shard answers (a frozen master that resumes). Sent
/// again, it would run twice: a release's second copy answered "missing"
/// after its first had deleted the key, and `release()` said `Expired`.
pub(crate) fn failure(e: &RedisError) -> Failure {
    Failure {
        next: next(e),
        no_script: no_script(e),
        broken: broken(e) && (!e.is_timeout() || super::retry::timeout_is_broken()),
    }
}

/// Adds `WAIT` for `wait` to `pipe`: it blocks the shard's connection
/// until the replicas acknowledged every write the connection made, this
/// pipeline's included, or the timeout passed, and answers how many did.
fn add_wait(pipe: &mut redis::Pipeline, wait: Option<ReplicaWait>) {
    if let Some(w) = wait {
        pipe.cmd("WAIT").arg(w.replicas).arg(ms(w.timeout));
    }
}

/// Whether `WAIT`'s answer `acks` confirms the write for `wait`: `Ok`, or
/// the error of a write that does not count.
pub(crate) fn confirmed(wait: Option<ReplicaWait>, acks: Option<Value>) -> Result<(), NodeError> {
    let Some(w) = wait else {
        return Ok(());
    };
    let acks = acks
        .ok_or_else(|| RedisError::from((redis::ErrorKind::Client, "no WAIT reply")))
        .and_then(Value::extract_error)
        .and_then(|v| redis::from_redis_value::<i64>(v).map_err(RedisError::from))
        .map_err(|e| NodeError::new(NodeErrorKind::NotReplicated, format!("WAIT: {e}")))?;
    if acks >= i64::from(w.replicas) {
        return Ok(());
    }
    Err(NodeError::new(
        NodeErrorKind::NotReplicated,
        format!(
            "WAIT {} {}: {acks} replica(s) acknowledged the write in time",
            w.replicas,
            ms(w.timeout)
        ),
    ))
}

/// How a pipeline of script calls is sent: routed to the master of
/// `slot` (as redis-rs's map says), or to `ask`'s address with `ASKING`
/// before each call (the flag holds for one command); first `load`
/// (`SCRIPT LOAD` of the calls' script) when given.
pub(super) struct Route<'a> {
    pub(super) slot: u16,
    pub(super) ask: Option<&'a (String, u16)>,
    pub(super) load: Option<&'a Lua>,
}

/// Sends `calls` script calls (`add(pipe, k)` adds the k-th) as one
/// pipeline, routed by `route`, and, with `wait`, `WAIT` last. One result
/// per call (a call's error, `NOSCRIPT`, ..., is its own) and `WAIT`'s
/// answer. redis-rs fails the whole pipeline with the first redirect
/// (`MOVED`, `ASK`, `TRYAGAIN`, ...) among the replies.
pub(super) async fn send_calls(
    conn: &mut ClusterConnection,
    calls: usize,
    add: impl Fn(&mut redis::Pipeline, usize),
    route: Route<'_>,
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<(Vec<redis::RedisResult<Vec<i64>>>, Option<Value>)> {
    let per_call = if route.ask.is_some() { 2 } else { 1 };
    let mut pipe = redis::Pipeline::with_capacity(calls * per_call + 2);
    if let Some(script) = route.load {
        pipe.add_command(script.load_cmd());
    }
    for k in 0..calls {
        if route.ask.is_some() {
            pipe.cmd("ASKING");
        }
        add(&mut pipe, k);
    }
    add_wait(&mut pipe, wait);
    let to = match route.ask {
        Some((host, port)) => SingleNodeRoutingInfo::ByAddress {
            host: host.clone(),
            port: *port,
        },
        None => SingleNodeRoutingInfo::SpecificNode(SlotRoute::new(route.slot, SlotAddr::Master)),
    };
    let count = calls * per_call + usize::from(wait.is_some());
    let skip = usize::from(route.load.is_some());
    let mut values = conn.route_pipeline(pipe, skip, count, to).await?;
    let acks = wait.and_then(|_| values.pop());
    let replies = values
        .into_iter()
        .skip(per_call - 1)
        .step_by(per_call)
        .map(|v| redis::from_redis_value::<Vec<i64>>(v.extract_error()?).map_err(RedisError::from))
        .collect();
    Ok((replies, acks))
}

/// Where a try goes: the master of `slot` as redis-rs's map says, or the
/// address a redirect named.
fn routing(route: &Redirect, slot: u16) -> SingleNodeRoutingInfo {
    match route {
        Redirect::BySlot => {
            SingleNodeRoutingInfo::SpecificNode(SlotRoute::new(slot, SlotAddr::Master))
        }
        Redirect::Moved(host, port) | Redirect::Ask(host, port) => {
            SingleNodeRoutingInfo::ByAddress {
                host: host.clone(),
                port: *port,
            }
        }
    }
}

/// Sends one command: by `slot` (its first key's), to a redirect's
/// address, or there after `ASKING`; with `wait`, `WAIT` after it in the
/// same pipeline. Its reply, and `WAIT`'s.
pub(super) async fn send(
    conn: &mut ClusterConnection,
    cmd: redis::Cmd,
    (route, slot): (&Redirect, u16),
    wait: Option<ReplicaWait>,
) -> redis::RedisResult<(Value, Option<Value>)> {
    let to = routing(route, slot);
    let asking = matches!(route, Redirect::Ask(..));
    let mut pipe = redis::pipe();
    if asking {
        pipe.cmd("ASKING");
    }
    pipe.add_command(cmd);
    add_wait(&mut pipe, wait);
    let count = 1 + usize::from(wait.is_some());
    let mut values = conn
        .route_pipeline(pipe, usize::from(asking), count, to)
        .await?
        .into_iter();
    let reply = values.next().unwrap_or(Value::Nil).extract_error()?;
    Ok((reply, values.next()))
}

/// A barrier: `PING` to the master of `slot`, answered once everything
/// sent there before it on `conn` has run.
pub(super) async fn ping_slot(conn: &mut ClusterConnection, slot: u16) -> redis::RedisResult<()> {
    let ping = redis::cmd("PING");
    send(conn, ping, (&Redirect::BySlot, slot), None)
        .await
        .map(|_| ())
}

/// The items `which` (indices into `items`) by slot, each slot's cut in
/// calls of at most [`RENEW_CHUNK`] locks: `(slot, item indices)` per
/// script call.
pub(crate) fn slot_groups(
    items: &[RenewItem],
    which: impl Iterator<Item = usize>,
) -> Vec<(u16, Vec<usize>)> {
    let mut by_slot: BTreeMap<u16, Vec<usize>> = BTreeMap::new();
    for i in which {
        by_slot.entry(items[i].keys.slot()).or_default().push(i);
    }
    by_slot
        .into_iter()
        .flat_map(|(slot, ix)| {
            ix.chunks(RENEW_CHUNK)
                .map(|c| (slot, c.to_vec()))
                .collect::<Vec<_>>()
        })
        .collect()
}

/// The groups `pending` (indices into `groups`) by the shard the map says
/// serves their slot; a slot the map does not know goes alone.
pub(super) fn by_shard(
    map: &SlotMap,
    groups: &[(u16, Vec<usize>)],
    pending: &[usize],
) -> Vec<Vec<usize>> {
    let mut parts: BTreeMap<Option<usize>, Vec<usize>> = BTreeMap::new();
    let mut alone = Vec::new();
    for &g in pending {
        match map.shard_of(groups[g].0) {
            Some(s) => parts.entry(Some(s)).or_default().push(g),
            None => alone.push(vec![g]),
        }
    }
    parts.into_values().chain(alone).collect()
}

/// The status reads of one lock, each key read where it lives: the hash
/// and its PTTL with `CLUSTER MYID` (so the id names the shard that holds
/// the lock), and the fence counter, each on its own from the slot's
/// master. Mid-migration the source answers `ASK` for a key it has moved
/// and serves the keys it still has, so one key may be on each side (the
/// counter moved, the hash not yet): each is followed on its own. Four
/// replies: the hash, its PTTL, the counter, the id.
pub(super) async fn status_values(
    conn: &ClusterConnection,
    slot: u16,
    lock: &str,
    fence: &str,
) -> redis::RedisResult<Vec<Value>> {
    let (mut on_lock, mut on_fence) = (conn.clone(), conn.clone());
    let (lock_reads, fence_reads) = ([("HGETALL", lock), ("PTTL", lock)], [("GET", fence)]);
    let (mut values, counter) = futures::future::try_join(
        read_following(&mut on_lock, slot, &lock_reads, true),
        read_following(&mut on_fence, slot, &fence_reads, false),
    )
    .await?;
    let id = values.pop();
    values.extend(counter);
    values.extend(id);
    Ok(values)
}

/// `reads` (commands of one key each, all of one key) and, with `myid`,
/// `CLUSTER MYID`, in one pipeline to the master of `slot`; after `MOVED`
/// to the address named, after `ASK` there with `ASKING` before each read
/// (the flag holds for one command). Reads, sent again freely, at most
/// [`MAX_TRIES`] redirects. One reply per read, then the id.
async fn read_following(
    conn: &mut ClusterConnection,
    slot: u16,
    reads: &[(&str, &str)],
    myid: bool,
) -> redis::RedisResult<Vec<Value>> {
    let mut route = Redirect::BySlot;
    let mut redirects = 0;
    loop {
        let asking = matches!(route, Redirect::Ask(..));
        let mut pipe = redis::pipe();
        for (cmd, key) in reads {
            if asking {
                pipe.cmd("ASKING");
            }
            pipe.cmd(cmd).arg(*key);
        }
        if myid {
            pipe.cmd("CLUSTER").arg("MYID");
        }
        let per_read = if asking { 2 } else { 1 };
        let to = routing(&route, slot);
        let count = reads.len() * per_read + usize::from(myid);
        let e = match conn.route_pipeline(pipe, 0, count, to).await {
            Ok(values) => {
                // Without the `ASKING` replies.
                return values
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| *i >= reads.len() * per_read || (i + 1) % per_read == 0)
                    .map(|(_, v)| v.extract_error())
                    .collect();
            }
            Err(e) => e,
        };
        match next(&e) {
            Next::Again(to) if redirects < MAX_TRIES => {
                redirects += 1;
                route = to;
            }
            _ => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    use crate::node::cluster::retry::{Retry, Step};
    use crate::node::script_call::Resend;

    fn server_error(text: &str) -> RedisError {
        let v = redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).expect("parses");
        v.extract_error().expect_err("an error reply")
    }

    /// Only answers that prove the script did not run are sent again.
    /// A write counts only with as many acknowledgements as asked: fewer,
    /// an error, or no `WAIT` reply at all is `NotReplicated`.
    #[test]
    fn wait_confirms_a_write_only_with_enough_replicas() {
        let wait = Some(ReplicaWait {
            replicas: 2,
            timeout: Duration::from_millis(50),
        });
        assert!(confirmed(None, None).is_ok(), "nothing asked");
        assert!(confirmed(wait, Some(Value::Int(2))).is_ok());
        assert!(confirmed(wait, Some(Value::Int(3))).is_ok());
        let refused = [
            Some(Value::Int(1)),
            Some(Value::Int(-1)),
            Some(Value::Nil),
            None,
            Some(redis::parse_redis_value(b"-ERR WAIT cannot be used\r\n").expect("parses")),
        ];
        for acks in refused {
            let e = confirmed(wait, acks.clone()).expect_err("not confirmed");
            assert_eq!(e.kind, NodeErrorKind::NotReplicated, "{acks:?}: {e:?}");
        }
        let e = confirmed(wait, Some(Value::Int(1))).expect_err("one of two");
        assert!(e.message.contains("WAIT 2 50: 1 replica"), "{}", e.message);
    }

    #[test]
    fn only_answers_proving_nothing_ran_are_sent_again() {
        let again = |e: &RedisError| !matches!(next(e), Next::MayHaveRun);
        assert!(matches!(
            next(&server_error("MOVED 3999 127.0.0.1:6381")),
            Next::Again(Redirect::Moved(h, 6381)) if h == "127.0.0.1"
        ));
        assert!(matches!(
            next(&server_error("ASK 3999 127.0.0.1:6382")),
            Next::Again(Redirect::Ask(_, 6382))
        ));
        for proven in [
            "TRYAGAIN x",
            "CLUSTERDOWN x",
            "MASTERDOWN x",
            "LOADING x",
            "READONLY x",
        ] {
            assert!(again(&server_error(proven)), "{proven}");
        }
        for unknown in ["ERR x", "CROSSSLOT x", "WRONGTYPE x", "BUSY x"] {
            assert!(!again(&server_error(unknown)), "{unknown}");
        }
        let cut = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert!(!again(&cut), "a reset connection may have run it");
        let timeout = RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut));
        assert!(!again(&timeout), "a timeout may have run it");
        assert!(failure(&cut).broken);
        assert!(
            !failure(&timeout).broken,
            "a timeout left the call queued on a live connection"
        );
        // A release (sent again after a broken connection) that timed out
        // is not sent again; one whose connection broke is, once.
        let patience = Duration::from_secs(1);
        let release = || Retry::new(Resend::AfterBrokenConnection, patience);
        assert_eq!(release().after(&failure(&timeout)), Step::Stop);
        assert_eq!(
            release().after(&failure(&cut)),
            Step::Again { moved: false }
        );
        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert!(again(&refused), "a refused connection sent nothing");
    }

    /// A batch is split so that each script call carries one slot's locks
    /// (at most RENEW_CHUNK), and the calls are grouped per shard.
    #[test]
    fn a_batch_splits_per_slot_and_groups_per_shard() {
        let items: Vec<RenewItem> = (0..500)
            .map(|i| RenewItem::named(&format!("n{}", i % 250), 1, 1, Duration::from_secs(1)))
            .collect();
        let groups = slot_groups(&items, 0..items.len());
        let mut seen = vec![0; items.len()];
        for (slot, ix) in &groups {
            assert!(ix.len() <= RENEW_CHUNK);
            for &i in ix {
                assert_eq!(items[i].keys.slot(), *slot);
                seen[i] += 1;
            }
        }
        assert!(seen.iter().all(|&n| n == 1), "every item once");
        let reply = crate::node::cluster::map::slots_reply(&[
            (0, 5460, 7000, "a"),
            (5461, 10922, 7000, "b"),
            (10923, 16383, 7000, "c"),
        ]);
        let map = SlotMap::parse(&reply, "h").expect("parses");
        let all: Vec<usize> = (0..groups.len()).collect();
        let parts = by_shard(&map, &groups, &all);
        assert_eq!(parts.len(), 3, "one pipeline per shard");
        for part in parts {
            let shards: std::collections::HashSet<_> =
                part.iter().map(|&g| map.shard_of(groups[g].0)).collect();
            assert_eq!(shards.len(), 1);
        }
    }
}
