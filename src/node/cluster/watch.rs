//! Following a cluster member's failover that redis-rs's cluster client
//! does not see. The client refreshes its routing only on `MOVED` or an
//! I/O error; a master that stops answering without closing its
//! connections (a frozen process, a hung host, a partition) gives neither,
//! so once the cluster promotes its replica the client would go on sending
//! that shard's calls to the frozen node, for good.
//!
//! A call to the member that goes unanswered for long (a try still on the
//! wire after [`suspect_after`], a renewal part that timed out) makes the
//! member suspect its map: [`Watch::suspect`] starts one probe (none while
//! one runs). A probe asks every node the member knows (the shards'
//! masters and replicas of its last map, and its seeds), each over a
//! connection of its own under the probe timeout, for `CLUSTER SLOTS`, and
//! takes the view that most of the nodes that answered share. When that
//! view names a master the member's map does not (a failover), the member
//! opens new cluster connections whose first nodes are the nodes that
//! answered (so nothing waits on the frozen one), swaps them in for new
//! calls, renewals and status reads ([`Link`]), and tells its release feed
//! to open again, so the sharded subscriptions follow too. A probe that
//! finds a master of the map silent and no failover yet (the cluster has
//! not promoted a replica) is made again, one per `P` = the connect
//! timeout, at most 1 s (also each node's wait in a probe), until the
//! master answers again or its failover is followed; one that finds every
//! master answering ends.
//!
//! The bound: once a call to the frozen master went unanswered for
//! [`suspect_after`] (half the node timeout, within 50 ms to 1 s), a
//! failover the cluster reports at `t` is followed by `t + 2P +` the new
//! connections (at most the connect timeout): 4 s with the default
//! connect timeout of 2 s. Calls made before that fail as calls to an
//! unanswering node do; the renewals of a lease longer than the cluster's
//! failover time plus that bound keep its holds.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::cluster_async::ClusterConnection;
use redis::{ConnectionAddr, ConnectionInfo, Value};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::RELEASE_PATIENCE;
use crate::node::batch::BatchKind;
use crate::node::order::Lane;
use crate::sync::locked;

use super::feed::ClusterFeed;
use super::map::SlotMap;
use super::spec::Certs;

/// A try on the wire this long is suspect: the shard may be frozen.
pub(super) fn suspect_after(node_timeout: Duration) -> Duration {
    (node_timeout / 2).clamp(Duration::from_millis(50), Duration::from_secs(1))
}

/// The member's cluster connections: one for calls and status reads, one
/// for the calls that free, one for the watchdog's batches; replaced
/// together after a failover.
pub(super) struct Link {
    conns: Mutex<Conns>,
}

/// A cluster member's connections, each its own connection to every shard.
pub(super) struct Conns {
    /// Acquisitions and every call not below ([`Lane::Calls`]).
    pub(super) calls: ClusterConnection,
    /// Releases and queue exits behind a crowd of attempts
    /// ([`Lane::Frees`]), never queued behind it on the client side.
    pub(super) frees: ClusterConnection,
    /// Batches, and calls behind a repair given up ([`Lane::Renewals`]).
    pub(super) renewals: ClusterConnection,
}

impl Link {
    pub(super) fn new(conns: Conns) -> Self {
        Self {
            conns: Mutex::new(conns),
        }
    }

    /// The connection new calls of `lane` go over.
    pub(super) fn lane(&self, lane: Lane) -> ClusterConnection {
        let conns = locked(&self.conns);
        match lane {
            Lane::Calls => conns.calls.clone(),
            Lane::Frees => conns.frees.clone(),
            Lane::Renewals => conns.renewals.clone(),
        }
    }

    /// The connection new batches of `kind` go over: the renewals' own,
    /// and for kept places the calls' (they are the attempts' work).
    pub(super) fn batches(&self, kind: BatchKind) -> ClusterConnection {
        let conns = locked(&self.conns);
        match kind {
            BatchKind::Keep => conns.calls.clone(),
            BatchKind::Renew | BatchKind::Repair => conns.renewals.clone(),
        }
    }

    fn replace(&self, conns: Conns) {
        *locked(&self.conns) = conns;
    }
}

/// Whether a failed connect may pass, so that it is worth trying again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Passing {
    Yes,
    No,
}

/// How the member opens cluster connections: its seeds' settings
/// (credentials, TLS) and certificates, the node timeout its client's
/// responses are bounded by, the connect timeout.
#[derive(Clone)]
pub(super) struct Dial {
    pub(super) seeds: Vec<ConnectionInfo>,
    pub(super) certs: Certs,
    pub(super) node_timeout: Duration,
    pub(super) connect_timeout: Duration,
}

impl Dial {
    /// A cluster client over `first` nodes: redis-rs's retries off (every
    /// call is sent again only by `retry`'s rules), its responses
    /// bounded by a caller's longest wait, a release's [`RELEASE_PATIENCE`]
    /// node timeouts (so a late answer within it counts; the bound holds
    /// its topology refreshes too), no Nagle delay.
    pub(super) fn client(
        &self,
        first: Vec<ConnectionInfo>,
    ) -> redis::RedisResult<redis::cluster::ClusterClient> {
        let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
        self.certs
            .builder(first)
            .retries(0)
            .connection_timeout(self.connect_timeout)
            .response_timeout(self.node_timeout.saturating_mul(RELEASE_PATIENCE))
            .tcp_settings(tcp)
            .build()
    }

    /// The three connections ([`Conns`]) of a client over `first`: the
    /// first nodes within the connect timeout, the map read from them
    /// within the node timeout, then every node the map names within the
    /// connect timeout (one that hangs, a frozen replica not yet marked
    /// failed, is left out after it).
    pub(super) async fn connect(&self, first: Vec<ConnectionInfo>) -> redis::RedisResult<Conns> {
        let client = self.client(first)?;
        let all = async {
            let (calls, frees, renewals) = futures::future::try_join3(
                client.get_async_connection(),
                client.get_async_connection(),
                client.get_async_connection(),
            )
            .await?;
            Ok(Conns {
                calls,
                frees,
                renewals,
            })
        };
        let bound = self
            .connect_timeout
            .saturating_mul(2)
            .saturating_add(self.node_timeout);
        tokio::time::timeout(bound, all).await.map_err(|_| {
            redis::RedisError::from((redis::ErrorKind::Io, "cluster connect timed out"))
        })?
    }

    /// How long a probe waits for each node, and the least time between
    /// two probes: the connect timeout, at most 1 s.
    pub(super) fn probe_every(&self) -> Duration {
        self.connect_timeout.min(Duration::from_secs(1))
    }

    /// The settings of the first seed at `host:port`.
    fn at(&self, host: &str, port: u16) -> Option<ConnectionInfo> {
        let seed = self.seeds.first()?;
        let addr = match seed.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: host.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host.to_owned(), port),
        };
        Some(seed.clone().set_addr(addr))
    }
}

/// Whether a probe runs, and whether calls went unanswered since it
/// started (so that it probes again if it finds nothing).
#[derive(Default)]
struct Probing {
    running: bool,
    again: bool,
}

/// One cluster member's watch over its topology.
pub(super) struct Watch {
    addr: String,
    dial: Dial,
    /// The member's map, which calls and batches also refresh after a
    /// redirect.
    map: Arc<Mutex<SlotMap>>,
    /// The topology the connections of [`Link`] were opened for (at
    /// connect, or at the last failover followed): a failover is a master
    /// this one does not name, whatever the member's map learnt since.
    linked: Mutex<SlotMap>,
    link: Arc<Link>,
    feed: Arc<ClusterFeed>,
    probing: Mutex<Probing>,
}

impl Watch {
    pub(super) fn new(
        addr: String,
        dial: Dial,
        map: Arc<Mutex<SlotMap>>,
        link: Arc<Link>,
        feed: Arc<ClusterFeed>,
    ) -> Self {
        let linked = Mutex::new(locked(&map).clone());
        Self {
            addr,
            dial,
            map,
            linked,
            link,
            feed,
            probing: Mutex::default(),
        }
    }

    /// A call went unanswered for long: probes the topology, unless a
    /// probe runs (which then probes once more if it finds nothing).
    pub(super) fn suspect(self: &Arc<Self>) {
        {
            let mut p = locked(&self.probing);
            if p.running {
                p.again = true;
                return;
            }
            p.running = true;
            p.again = false;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            locked(&self.probing).running = false;
            return;
        };
        let watch = Arc::downgrade(self);
        drop(rt.spawn(async move {
            loop {
                let Some(w) = watch.upgrade() else { return };
                let started = Instant::now();
                let found = w.probe().await;
                let again = {
                    let mut p = locked(&w.probing);
                    let again = found == Found::Unsure || (found == Found::Same && p.again);
                    p.again = false;
                    p.running = again;
                    again
                };
                if !again {
                    return;
                }
                let spacing = w.dial.probe_every();
                drop(w);
                tokio::time::sleep_until(started + spacing).await;
            }
        }));
    }

    /// Asks every known node for the slot map; follows a failover it
    /// shows.
    async fn probe(&self) -> Found {
        let asked = self.known_nodes();
        let timeout = self.dial.probe_every();
        let certs = self.dial.certs.clone();
        let answers = futures::future::join_all(asked.into_iter().map(|(host, port, info)| {
            let certs = certs.clone();
            async move {
                let read = read_slots(info.clone(), certs, host.clone());
                match tokio::time::timeout(timeout, read).await {
                    Ok(Ok(map)) => Some(((host, port, info), map)),
                    Ok(Err(e)) => {
                        debug!(node = %format!("{host}:{port}"), error = %e, "probe: no map");
                        None
                    }
                    Err(_) => {
                        debug!(node = %format!("{host}:{port}"), "probe: timed out");
                        None
                    }
                }
            }
        }))
        .await;
        let answered: Vec<(Asked, SlotMap)> = answers.into_iter().flatten().collect();
        let current = locked(&self.linked).clone();
        // A master of the map that did not answer: frozen, dead or cut
        // off, and perhaps not failed over yet.
        let silent = current.shards.iter().any(|s| {
            !answered
                .iter()
                .any(|((h, p, _), _)| *h == s.host && *p == s.port)
        });
        let unsure = if silent { Found::Unsure } else { Found::Same };
        let Some(view) = agreed(&answered) else {
            return unsure;
        };
        if !failed_over(&current, view) {
            // Same masters: redis-rs's own routing follows (`MOVED`).
            return unsure;
        }
        let first: Vec<ConnectionInfo> = answered
            .iter()
            .filter(|(_, m)| m.fingerprint() == view.fingerprint())
            .map(|((_, _, i), _)| i.clone())
            .collect();
        match self.dial.connect(first.clone()).await {
            Ok(conns) => {
                *locked(&self.map) = view.clone();
                *locked(&self.linked) = view.clone();
                self.link.replace(conns);
                self.feed.follow(first);
                info!(member = %self.addr, "cluster member follows a failover: new connections to its shards");
                Found::Followed
            }
            Err(e) => {
                warn!(member = %self.addr, error = %e, "cluster member: cannot connect to the new topology yet");
                Found::Unsure
            }
        }
    }

    /// Every node the member knows: its map's masters and replicas, and its
    /// seeds; once each.
    fn known_nodes(&self) -> Vec<(String, u16, ConnectionInfo)> {
        let mut out: Vec<(String, u16, ConnectionInfo)> = Vec::new();
        let mut push = |host: String, port: u16, info: ConnectionInfo| {
            if !out.iter().any(|(h, p, _)| *h == host && *p == port) {
                out.push((host, port, info));
            }
        };
        let nodes = locked(&self.map).nodes();
        for (host, port) in nodes {
            if let Some(info) = self.dial.at(&host, port) {
                push(host, port, info);
            }
        }
        for seed in &self.dial.seeds {
            if let ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } =
                seed.addr()
            {
                push(host.clone(), *port, seed.clone());
            }
        }
        out
    }
}

/// A try on the wire: dropped unanswered (its caller stopped waiting, or
/// it failed) after `suspect_after` or more, it makes the member probe its
/// topology (see `watch`).
pub(super) struct Unanswered<'a> {
    watch: &'a Arc<Watch>,
    since: Instant,
    after: Duration,
    answered: bool,
}

impl<'a> Unanswered<'a> {
    pub(super) fn new(watch: &'a Arc<Watch>, after: Duration) -> Self {
        Self {
            watch,
            since: Instant::now(),
            after,
            answered: false,
        }
    }

    /// Answered: `ok`, or an error (suspect after a long wait, as no
    /// answer is).
    pub(super) fn answered(mut self, ok: bool) {
        self.answered = ok;
    }
}

impl Drop for Unanswered<'_> {
    fn drop(&mut self) {
        if !self.answered && self.since.elapsed() >= self.after {
            self.watch.suspect();
        }
    }
}

/// A node asked: its host, port and connection settings.
type Asked = (String, u16, ConnectionInfo);

/// What a probe found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// A failover, followed.
    Followed,
    /// The same masters, every one of them answering.
    Same,
    /// A master of the map did not answer (and no failover could be
    /// followed yet): probe again.
    Unsure,
}

/// `CLUSTER SLOTS` from one node, over a connection of its own.
async fn read_slots(info: ConnectionInfo, certs: Certs, host: String) -> Result<SlotMap, String> {
    let client = certs.client(info).map_err(|e| e.to_string())?;
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| e.to_string())?;
    let reply: Value = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .map_err(|e| e.to_string())?;
    SlotMap::parse(&reply, &host)
}

/// The view most of the answering nodes share (every slot served), if
/// any node answered with one.
fn agreed<A>(answers: &[(A, SlotMap)]) -> Option<&SlotMap> {
    let mut votes: HashMap<String, (usize, &SlotMap)> = HashMap::new();
    for (_, map) in answers.iter().filter(|(_, m)| m.covered() == 16384) {
        votes.entry(map.fingerprint()).or_insert((0, map)).0 += 1;
    }
    votes
        .into_values()
        .max_by_key(|&(n, m)| (n, m.fingerprint()))
        .map(|(_, m)| m)
}

/// Whether `view` names a master (by id) that `current` does not: a
/// failover (a migration only moves slots between the same masters).
fn failed_over(current: &SlotMap, view: &SlotMap) -> bool {
    view.shards
        .iter()
        .any(|s| !current.shards.iter().any(|c| c.id == s.id))
}

#[cfg(test)]
mod tests {
    use super::super::map::slots_reply;
    use super::*;

    fn map(ranges: &[(i64, i64, i64, &str)]) -> SlotMap {
        SlotMap::parse(&slots_reply(ranges), "127.0.0.1").unwrap()
    }

    fn info() -> ConnectionInfo {
        redis::IntoConnectionInfo::into_connection_info("redis://127.0.0.1:1").unwrap()
    }

    /// The view most answering nodes share wins; a node that serves part
    /// of the slots (not ready, or cut off) is not counted.
    #[test]
    fn the_view_most_nodes_share_is_taken() {
        let old = map(&[(0, 8191, 7000, "a"), (8192, 16383, 7001, "b")]);
        let new = map(&[(0, 8191, 7002, "c"), (8192, 16383, 7001, "b")]);
        let part = map(&[(0, 100, 7003, "d")]);
        let answers = vec![
            (info(), old.clone()),
            (info(), new.clone()),
            (info(), new.clone()),
            (info(), part),
        ];
        let view = agreed(&answers).unwrap();
        assert_eq!(view.fingerprint(), new.fingerprint());
        assert!(failed_over(&old, view), "master c is new");
        assert!(agreed::<ConnectionInfo>(&[]).is_none());
    }

    /// A migration moves slots between the same masters: not a failover.
    #[test]
    fn a_migration_is_not_a_failover() {
        let before = map(&[(0, 8191, 7000, "a"), (8192, 16383, 7001, "b")]);
        let after = map(&[
            (0, 100, 7001, "b"),
            (101, 8191, 7000, "a"),
            (8192, 16383, 7001, "b"),
        ]);
        assert!(!failed_over(&before, &after));
    }
}
