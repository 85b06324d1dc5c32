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
