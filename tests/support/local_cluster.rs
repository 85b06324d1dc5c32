//! A local Redis Cluster of three masters (`redis-server --cluster-enabled
//! yes`, joined by `redis-cli --cluster create`), started once per test
//! binary and killed with it (see [`LocalNodes`]), and a one-node cluster
//! that serves every slot alone (a second, different cluster).

#![allow(dead_code, clippy::panic)]

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::support::local::{Extra, LocalNodes};

/// A local cluster: its nodes (each a master of a third of the slots).
pub struct LocalCluster {
    pub nodes: LocalNodes,
}

fn cluster_args() -> Extra {
    Extra {
        args: ["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"]
            .map(str::to_owned)
            .to_vec(),
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
/// `known` nodes.
fn wait_ok(nodes: &LocalNodes, known: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let ok = (0..nodes.len()).all(|i| {
            let info = cli(nodes.port(i), &["CLUSTER", "INFO"]);
            info.contains("cluster_state:ok")
                && info.contains(&format!("cluster_known_nodes:{known}"))
        });
        if ok {
            // Every node must also tell the same slot map.
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("the local cluster did not reach cluster_state:ok");
}

impl LocalCluster {
    /// Starts `n` cluster-enabled masters and joins them into one cluster.
    pub fn start(n: usize) -> Self {
        let nodes = LocalNodes::start_with(n, cluster_args()).expect("start cluster nodes");
        let addrs: Vec<String> = (0..n)
            .map(|i| format!("127.0.0.1:{}", nodes.port(i)))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
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
        let nodes = LocalNodes::start_with(1, cluster_args()).expect("start a cluster node");
        let reply = cli(nodes.port(0), &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
        assert!(reply.contains("OK"), "CLUSTER ADDSLOTSRANGE: {reply}");
        wait_ok(&nodes, 1);
        Self { nodes }
    }

    /// Every node's URL: seeds for `LockManagerBuilder::cluster`.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.urls()
    }

    /// The port of the master that serves `slot`.
    pub fn port_of_slot(&self, slot: u16) -> u16 {
        let nodes = cli(self.nodes.port(0), &["CLUSTER", "NODES"]);
        for line in nodes.lines() {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let Some(addr) = fields.get(1) else { continue };
            for range in fields.iter().skip(8) {
                let (a, b) = range.split_once('-').unwrap_or((range, range));
                let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) else {
                    continue;
                };
                if a <= slot && slot <= b {
                    let port = addr.split('@').next().and_then(|hp| hp.rsplit_once(':'));
                    return port
                        .and_then(|(_, p)| p.parse().ok())
                        .expect("a node address with a port");
                }
            }
        }
        panic!("no master serves slot {slot}")
    }
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
            ports: (0..c.nodes.len()).map(|i| c.nodes.port(i)).collect(),
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
    let mut list = redis::cmd("CLIENT");
    list.arg("LIST");
    let text: String = query(port, &list).await;
    let mut killed = 0;
    for line in text.lines() {
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name).map(str::to_owned))
        };
        let subscribed = field("ssub=").and_then(|n| n.parse::<u32>().ok()) > Some(0);
        if let (true, Some(id)) = (subscribed, field("id=")) {
            let mut kill = redis::cmd("CLIENT");
            kill.arg("KILL").arg("ID").arg(id);
            let _: i64 = query(port, &kill).await;
            killed += 1;
        }
    }
    killed
}
