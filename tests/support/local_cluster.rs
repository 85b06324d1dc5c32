//! A local Redis Cluster of three masters (`redis-server --cluster-enabled
//! yes`, joined by `redis-cli --cluster create`), started once per test
//! binary and killed with it (see [`LocalNodes`]), a one-node cluster
//! that serves every slot alone (a second, different cluster), and a
//! cluster of three masters with a replica each, whose masters the chaos
//! tests kill, stop and fail over ([`replica_cluster`]).

#![allow(dead_code, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::local::{Extra, LocalNodes};

/// A local cluster: its nodes (each a master of a third of the slots).
pub struct LocalCluster {
    pub nodes: LocalNodes,
}

/// The `cluster-node-timeout` of the clusters without replicas.
const NODE_TIMEOUT: Duration = Duration::from_millis(2000);

fn cluster_args(node_timeout: Duration) -> Extra {
    Extra {
        args: vec![
            "--cluster-enabled".to_owned(),
            "yes".to_owned(),
            "--cluster-node-timeout".to_owned(),
            node_timeout.as_millis().to_string(),
            // A replica (re)joining syncs at once, not after 5 s.
            "--repl-diskless-sync-delay".to_owned(),
            "0".to_owned(),
        ],
        tls: false,
    }
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Waits until every node of `nodes` says `cluster_state:ok` and knows
/// `known` nodes, and every replica's link to its master is up.
fn wait_ok(nodes: &LocalNodes, known: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let ok = (0..nodes.len()).all(|i| {
            let info = cli(nodes.port(i), &["CLUSTER", "INFO"]);
            let replication = cli(nodes.port(i), &["INFO", "replication"]);
            info.contains("cluster_state:ok")
                && info.contains(&format!("cluster_known_nodes:{known}"))
                && (replication.contains("role:master")
                    || replication.contains("master_link_status:up"))
        });
        if ok {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the local cluster did not reach cluster_state:ok");
}

impl LocalCluster {
    /// Starts `n` cluster-enabled masters and joins them into one cluster.
    pub fn start(n: usize) -> Self {
        Self::start_with_replicas(n, 0, NODE_TIMEOUT)
    }

    /// Starts `masters * (1 + replicas)` cluster-enabled nodes with
    /// `cluster-node-timeout` `node_timeout` and joins them into one
    /// cluster of `masters` shards, each with `replicas` replicas.
    pub fn start_with_replicas(masters: usize, replicas: usize, node_timeout: Duration) -> Self {
        let n = masters * (1 + replicas);
        let nodes =
            LocalNodes::start_with(n, cluster_args(node_timeout)).expect("start cluster nodes");
        let addrs: Vec<String> = (0..n)
            .map(|i| format!("127.0.0.1:{}", nodes.port(i)))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &replicas.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "redis-cli --cluster create: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        wait_ok(&nodes, n);
        Self { nodes }
    }

    /// One cluster-enabled node that serves every slot itself.
    pub fn start_single() -> Self {
        let nodes =
            LocalNodes::start_with(1, cluster_args(NODE_TIMEOUT)).expect("start a cluster node");
        let reply = cli(nodes.port(0), &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        assert!(reply.contains("OK"), "CLUSTER ADDSLOTSRANGE: {reply}");
        wait_ok(&nodes, 1);
        Self { nodes }
    }

    /// Every node's URL: seeds for `LockManagerBuilder::cluster`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.urls()
    }

    /// The port of the master that serves `slot`, as the first node that
    /// answers tells it (a node that is down answers nothing).
    pub fn port_of_slot(&self, slot: u16) -> u16 {
        let text = (0..self.nodes.len())
            .map(|i| cli(self.nodes.port(i), &["CLUSTER", "NODES"]))
            .find(|t| !t.trim().is_empty())
            .unwrap_or_default();
        Topology::parse(&text)
            .master_of(slot)
            .unwrap_or_else(|| panic!("no master serves slot {slot}"))
    }

    /// The master ports, as the first node that answers tells them.
    pub fn master_ports(&self) -> Vec<u16> {
        let text = (0..self.nodes.len())
            .map(|i| cli(self.nodes.port(i), &["CLUSTER", "NODES"]))
            .find(|t| !t.trim().is_empty())
            .unwrap_or_default();
        Topology::parse(&text).masters()
    }

    /// The index in [`LocalCluster::nodes`] of the node on `port`.
    pub fn index_of(&self, port: u16) -> usize {
        (0..self.nodes.len())
            .find(|&i| self.nodes.port(i) == port)
            .unwrap_or_else(|| panic!("no node on port {port}"))
    }

    /// The topology as the first node that answers within 300 ms tells it
    /// (a stopped node is skipped, not waited for), skipping `except`.
    pub async fn topology(&self, except: &[u16]) -> Topology {
        for i in 0..self.nodes.len() {
            let port = self.nodes.port(i);
            if except.contains(&port) {
                continue;
            }
            let ask = async {
                let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))
                    .ok()?
                    .get_multiplexed_async_connection()
                    .await
                    .ok()?;
                redis::cmd("CLUSTER")
                    .arg("NODES")
                    .query_async::<String>(&mut c)
                    .await
                    .ok()
            };
            if let Ok(Some(text)) = tokio::time::timeout(Duration::from_millis(300), ask).await {
                return Topology::parse(&text);
            }
        }
        panic!("no node of the cluster answered CLUSTER NODES")
    }

    /// Waits (at most `within`) until a node other than `old` serves
    /// `slot` as every live node but `old` tells it, and returns its port.
    pub async fn wait_promoted(&self, slot: u16, old: u16, within: Duration) -> u16 {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let t = self.topology(&[old]).await;
            if let Some(port) = t.master_of(slot).filter(|&p| p != old) {
                if t.is_ok_without(Some(old)) {
                    return port;
                }
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "no replica of {old} was promoted within {within:?}: {t:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most `within`) until every node answers, every master
    /// serving slots has a replica whose link to it is up, and every node
    /// says `cluster_state:ok`.
    pub async fn wait_healthy(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            if self.is_healthy().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the cluster did not heal within {within:?}: {:?}",
                self.topology(&[]).await
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Every node answers, says `cluster_state:ok`, is a master with a
    /// replica or a replica whose link is up, and sees every master
    /// serving slots up with a replica that is not failing.
    async fn is_healthy(&self) -> bool {
        for i in 0..self.nodes.len() {
            let port = self.nodes.port(i);
            let ask = async {
                let mut c = raw_at(port).await;
                let read = |section: &'static str, arg: &'static str| {
                    let mut cmd = redis::cmd(section);
                    cmd.arg(arg);
                    cmd
                };
                let info: String = read("INFO", "replication").query_async(&mut c).await.ok()?;
                let state: String = read("CLUSTER", "INFO").query_async(&mut c).await.ok()?;
                let nodes: String = read("CLUSTER", "NODES").query_async(&mut c).await.ok()?;
                Some((info, state, Topology::parse(&nodes)))
            };
            let Ok(Some((info, state, view))) =
                tokio::time::timeout(Duration::from_millis(300), ask).await
            else {
                return false;
            };
            let master_with_replica =
                info.contains("role:master") && !info.contains("connected_slaves:0");
            let linked = master_with_replica || info.contains("master_link_status:up");
            let replicated = view.masters().iter().all(|&m| view.replica_of(m).is_some());
            if !linked
                || !state.contains("cluster_state:ok")
                || !view.is_ok_without(None)
                || !replicated
            {
                return false;
            }
        }
        true
    }
}

/// One node of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct NodeLine {
    pub id: String,
    pub port: u16,
    pub master: bool,
    /// The id of its master, for a replica.
    pub master_id: Option<String>,
    /// Flagged `fail` or `fail?`.
    pub failed: bool,
    pub slots: Vec<(u16, u16)>,
}

/// A cluster's topology, as one node's `CLUSTER NODES` tells it.
#[derive(Debug, Clone)]
pub struct Topology(pub Vec<NodeLine>);

impl Topology {
    pub fn parse(text: &str) -> Self {
        let mut nodes = Vec::new();
        for line in text.lines() {
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() < 8 {
                continue;
            }
            let port = f[1]
                .split('@')
                .next()
                .and_then(|hp| hp.rsplit_once(':'))
                .and_then(|(_, p)| p.parse().ok())
                .unwrap_or(0);
            let flags: Vec<&str> = f[2].split(',').collect();
            let slots = f[8..]
                .iter()
                .filter(|r| !r.starts_with('['))
                .filter_map(|r| {
                    let (a, b) = r.split_once('-').unwrap_or((r, r));
                    Some((a.parse().ok()?, b.parse().ok()?))
                })
                .collect();
            nodes.push(NodeLine {
                id: f[0].to_owned(),
                port,
                master: flags.contains(&"master"),
                master_id: (f[3] != "-").then(|| f[3].to_owned()),
                failed: flags.contains(&"fail") || flags.contains(&"fail?"),
                slots,
            });
        }
        Self(nodes)
    }

    /// The port of the master that serves `slot`.
    pub fn master_of(&self, slot: u16) -> Option<u16> {
        self.0
            .iter()
            .find(|n| n.master && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b))
            .map(|n| n.port)
    }

    /// The ports of the masters that serve slots.
    pub fn masters(&self) -> Vec<u16> {
        self.0
            .iter()
            .filter(|n| n.master && !n.slots.is_empty())
            .map(|n| n.port)
            .collect()
    }

    /// The port of a replica of the master on `port`.
    pub fn replica_of(&self, port: u16) -> Option<u16> {
        let master = self.0.iter().find(|n| n.port == port)?;
        self.0
            .iter()
            .find(|n| n.master_id.as_deref() == Some(master.id.as_str()) && !n.failed)
            .map(|n| n.port)
    }

    /// Every master serving slots is up (not flagged failing), the node on
    /// `except` aside, and together they serve every slot.
    fn is_ok_without(&self, except: Option<u16>) -> bool {
        let live: Vec<&NodeLine> = self
            .0
            .iter()
            .filter(|n| n.master && !n.slots.is_empty() && Some(n.port) != except)
            .collect();
        let covered: u32 = live
            .iter()
            .flat_map(|n| &n.slots)
            .map(|&(a, b)| u32::from(b - a) + 1)
            .sum();
        live.iter().all(|n| !n.failed) && covered == 16384
    }
}

/// A cluster of three masters with one replica each, shared by every test
/// of the binary that asks for it; `cluster-node-timeout` is 1 s, so that a
/// replica is promoted about 2 s after its master died.
pub fn replica_cluster() -> &'static LocalCluster {
    static CLUSTER: OnceLock<LocalCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| LocalCluster::start_with_replicas(3, 1, Duration::from_millis(1000)))
}

/// The three-master cluster shared by every test of this binary.
pub fn cluster() -> &'static LocalCluster {
    static CLUSTER: OnceLock<LocalCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| LocalCluster::start(3))
}

/// A second three-master cluster whose slots the resharding tests move,
/// so that the shared [`cluster`]'s map never changes under other tests.
pub fn reshard_cluster() -> &'static LocalCluster {
    static CLUSTER: OnceLock<LocalCluster> = OnceLock::new();
    CLUSTER.get_or_init(|| LocalCluster::start(3))
}

/// A raw connection to the cluster node on `port`.
pub async fn raw_at(port: u16) -> redis::aio::MultiplexedConnection {
    redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .expect("a node url")
        .get_multiplexed_async_connection()
        .await
        .expect("connect to a cluster node")
}

/// Whether the cluster node on `port` (a master, or a replica: read after
/// `READONLY`) has the lock hash of `name` under the default prefix.
pub async fn has_lock_at(port: u16, name: &str) -> bool {
    let key = quorumlock::Layout::Quorumlock
        .lock_key("quorumlock:", name)
        .expect("a valid lock name");
    let (_, n): ((), i64) = redis::pipe()
        .cmd("READONLY")
        .cmd("EXISTS")
        .arg(&key)
        .query_async(&mut raw_at(port).await)
        .await
        .expect("READONLY and EXISTS");
    n == 1
}

async fn query<T: redis::FromRedisValue>(port: u16, cmd: &redis::Cmd) -> T {
    let mut c = raw_at(port).await;
    cmd.query_async(&mut c)
        .await
        .unwrap_or_else(|e| panic!("{cmd:?} on {port}: {e}"))
}

/// One slot's manual migration, the standard resharding steps, taken one
/// at a time: [`Migration::begin`] (`IMPORTING` on the target, `MIGRATING`
/// on the source), [`Migration::move_keys`] (`MIGRATE ... KEYS` of every
/// key of the slot), [`Migration::finish`] (`SETSLOT <slot> NODE <target>`
/// on every master).
pub struct Migration {
    pub slot: u16,
    pub from: u16,
    pub to: u16,
    ports: Vec<u16>,
}

impl Migration {
    /// `CLUSTER SETSLOT <slot> IMPORTING` on `to`, `MIGRATING` on the
    /// master that serves the slot now.
    pub async fn begin(c: &LocalCluster, slot: u16, to: u16) -> Self {
        let from = c.port_of_slot(slot);
        assert_ne!(from, to, "slot {slot} is on {to} already");
        let m = Self {
            slot,
            from,
            to,
            ports: c.master_ports(),
        };
        let (from_id, to_id) = (node_id(from).await, node_id(to).await);
        let setslot = |state: &str, id: &str| {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(slot).arg(state).arg(id);
            cmd
        };
        let () = query(to, &setslot("IMPORTING", &from_id)).await;
        let () = query(from, &setslot("MIGRATING", &to_id)).await;
        m
    }

    /// The keys of the slot still on the source.
    pub async fn keys_left(&self) -> Vec<String> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("GETKEYSINSLOT").arg(self.slot).arg(10_000);
        query(self.from, &cmd).await
    }

    /// `MIGRATE` of every key of the slot to the target, in one call;
    /// returns the keys moved.
    pub async fn move_keys(&self) -> Vec<String> {
        let keys = self.keys_left().await;
        if !keys.is_empty() {
            let mut cmd = redis::cmd("MIGRATE");
            cmd.arg("127.0.0.1").arg(self.to).arg("").arg(0).arg(5000);
            cmd.arg("KEYS").arg(&keys);
            let _: redis::Value = query(self.from, &cmd).await;
        }
        assert!(self.keys_left().await.is_empty(), "every key moved");
        keys
    }

    /// `CLUSTER SETSLOT <slot> NODE <target>` on the target, the source,
    /// then the other masters; waits until every master tells the target.
    pub async fn finish(self) {
        let to_id = node_id(self.to).await;
        let mut order = vec![self.to, self.from];
        order.extend(
            self.ports
                .iter()
                .filter(|p| ![self.to, self.from].contains(p)),
        );
        for port in order {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("SETSLOT").arg(self.slot).arg("NODE").arg(&to_id);
            let () = query(port, &cmd).await;
        }
        for port in &self.ports {
            let mut cmd = redis::cmd("CLUSTER");
            cmd.arg("COUNTKEYSINSLOT").arg(self.slot);
            let _: i64 = query(*port, &cmd).await;
        }
    }

    /// All three steps.
    pub async fn run(c: &LocalCluster, slot: u16, to: u16) -> Vec<String> {
        let m = Self::begin(c, slot, to).await;
        let keys = m.move_keys().await;
        m.finish().await;
        keys
    }
}

/// `CLUSTER MYID` of the node on `port`.
pub async fn node_id(port: u16) -> String {
    let mut cmd = redis::cmd("CLUSTER");
    cmd.arg("MYID");
    query(port, &cmd).await
}

/// Kills every connection of the node on `port` that holds a sharded
/// subscription (`ssub` above 0 in `CLIENT LIST`); returns how many.
pub async fn kill_shard_subscribers(port: u16) -> usize {
    let ids = shard_subscriber_ids(port).await;
    for id in &ids {
        let mut kill = redis::cmd("CLIENT");
        kill.arg("KILL").arg("ID").arg(id);
        let _: i64 = query(port, &kill).await;
    }
    ids.len()
}

/// How many clients of the shard at `port` are subscribed to a sharded
/// channel (`SSUBSCRIBE`).
pub async fn shard_subscribers(port: u16) -> usize {
    shard_subscriber_ids(port).await.len()
}

/// The ids of the clients of the shard at `port` subscribed to a sharded
/// channel.
async fn shard_subscriber_ids(port: u16) -> Vec<String> {
    let mut list = redis::cmd("CLIENT");
    list.arg("LIST");
    let text: String = query(port, &list).await;
    let mut ids = Vec::new();
    for line in text.lines() {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name).map(str::to_owned))
        };
        let subscribed = field("ssub=").and_then(|n| n.parse::<u32>().ok()) > Some(0);
        if let (true, Some(id)) = (subscribed, field("id=")) {
            ids.push(id);
        }
    }
    ids
}
