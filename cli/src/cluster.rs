//! Connecting to the nodes, tolerating the ones that are down.

use std::time::Duration;

use quorumlock::{redis, Error, Layout, LockManager, LockManagerBuilder, NodeFailure, Quorum};

use crate::cli::{Global, NODES_EXAMPLE};
#[cfg(feature = "tls-rustls")]
use crate::direct::trusting;
use crate::direct::{DirectNode, Target};
use crate::exit::{Failure, UNAVAILABLE};
use crate::members::{self, Member};

/// How many reachable nodes a command needs to go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Enough for the quorum: taking a lock.
    Quorum,
    /// At least one: inspecting or breaking a lock.
    Any,
}

/// A manager over the nodes, and which of them were down at the start.
///
/// The manager is built once with `allow_unreachable`, over every node: the
/// ones that are down (as `build()` reports them) join when they answer, so
/// the watchdog tops a held lock up on them. Taking a lock needs a quorum
/// of reachable nodes at the start; inspecting or breaking one needs one.
pub struct Cluster {
    /// The manager over every node, in the `--nodes` order.
    pub manager: LockManager,
    /// How many nodes were given.
    pub total: usize,
    /// Grants a holder needs, out of `total`.
    pub required: usize,
    /// The nodes that could not be reached at the start.
    pub down: Vec<NodeFailure>,
    /// The prefix of the lock keys.
    pub key_prefix: String,
    /// Where the locks live on the nodes (`--layout`).
    pub layout: Layout,
    /// How each member is reached for the reads made without the manager.
    targets: Vec<Target>,
}

impl Cluster {
    /// Connects to the nodes of `global`; `lease` sets the renewed lease.
    pub async fn connect(
        global: &Global,
        lease: Option<Duration>,
        need: Need,
    ) -> Result<Self, Failure> {
        let members = members::parse(&global.nodes).map_err(|e| Failure::usage(e.to_string()))?;
        if members.is_empty() {
            return Err(Failure::usage(format!(
                "no Redis nodes given: pass --nodes {NODES_EXAMPLE} or set QUORUMLOCK_NODES={NODES_EXAMPLE}"
            )));
        }
        // The manager numbers its masters first, then its cluster members,
        // then its Sentinel members, each in the order given: so do the
        // rows and messages.
        let (urls, seeds, sentinels) = split(members);
        let total = urls.len() + seeds.len() + sentinels.len();
        let required = global.quorum.required(total)?;
        let (quorum, needed) = match need {
            Need::Quorum => (global.quorum, required),
            // The manager's own quorum only decides how many nodes `build()`
            // wants reachable here: status and force unlock count nothing.
            Need::Any => (Quorum::AtLeast(1), 1),
        };
        let ca = global.tls_ca.as_deref().map(read_ca).transpose()?;
        let mut builder = match &ca {
            None => LockManager::builder().nodes(urls.clone()),
            Some(ca) => {
                let mut b = LockManager::builder();
                for (i, url) in urls.iter().enumerate() {
                    b = b.client(tls_client(i, url, ca)?);
                }
                b
            }
        };
        for (k, s) in seeds.iter().enumerate() {
            builder = match &ca {
                None => builder.cluster(s.clone()),
                Some(ca) => tls_cluster(builder, urls.len() + k, s, ca)?,
            };
        }
        if ca.is_some() && !sentinels.is_empty() {
            return Err(Failure::usage(
                "--tls-ca does not apply to a sentinel: member yet; reach its master with \
                 rediss:// and a certificate the system trusts, or rediss://...#insecure",
            ));
        }
        for (master, urls) in &sentinels {
            builder = builder.sentinel(urls.clone(), master.clone());
        }
        builder = builder
            .quorum(quorum)
            .key_prefix(global.key_prefix.clone())
            .layout(global.layout)
            .allow_unreachable(true);
        if let Some(lease) = lease {
            builder = builder.lease(lease);
        }
        match builder.build().await {
            Ok(manager) => {
                let down = manager.unreachable_at_build().to_vec();
                let mut targets = targets(&urls, &seeds, ca.as_deref())?;
                targets.extend(
                    sentinels
                        .into_iter()
                        .map(|(master, sentinels)| Target::Sentinel { sentinels, master }),
                );
                Ok(Self {
                    manager,
                    total,
                    required,
                    down,
                    key_prefix: global.key_prefix.clone(),
                    layout: global.layout,
                    targets,
                })
            }
            Err(Error::Connect { failures }) => Err(Failure::new(
                UNAVAILABLE,
                format!(
                    "reached {} of {total} node(s), {needed} needed: {}",
                    total.saturating_sub(members_down(&failures)),
                    join(&failures)
                ),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether node `i` could not be reached at the start (its status is
    /// reported from that failure).
    pub fn is_down(&self, i: usize) -> bool {
        self.down.iter().any(|f| f.node == i)
    }

    /// One line naming the nodes that are down, if any.
    pub fn down_summary(&self) -> Option<String> {
        (!self.down.is_empty()).then(|| {
            let down = members_down(&self.down);
            format!(
                "{down} of {} node(s) unreachable, going on with the other {}: {}",
                self.total,
                self.total.saturating_sub(down),
                join(&self.down)
            )
        })
    }

    /// Every node, reached directly (not through the manager), in the
    /// `--nodes` order.
    pub fn direct(&self) -> Vec<DirectNode> {
        self.manager
            .nodes()
            .into_iter()
            .zip(&self.targets)
            .enumerate()
            .map(|(i, (addr, target))| DirectNode::new(i, addr, target.clone()))
            .collect()
    }

    /// Waits until the library's background work (releases to slow nodes,
    /// rollbacks of cancelled acquisitions) has landed, for at most four
    /// times the node timeout plus 1 s ([`SETTLE_PAUSE`]): time for every
    /// call in flight (a release has twice the node timeout) and for one
    /// release sent again after a node's pause between dials. A release to a node that stays down would otherwise be sent
    /// again until its lease ends, holding the exit back a whole lease;
    /// the key left there expires with it.
    pub async fn settle(&self) {
        let bound = self
            .manager
            .config()
            .node_timeout
            .saturating_mul(4)
            .saturating_add(SETTLE_PAUSE);
        let _ = tokio::time::timeout(bound, self.manager.flush()).await;
    }
}

/// The longest pause between dials of a node that refuses connections,
/// after which a release that met it is sent again (the library's).
const SETTLE_PAUSE: std::time::Duration = std::time::Duration::from_secs(1);

/// How many members `failures` name (a Sentinel member that did not
/// answer lists each of its sentinels).
fn members_down(failures: &[NodeFailure]) -> usize {
    let mut down: Vec<usize> = failures.iter().map(|f| f.node).collect();
    down.sort_unstable();
    down.dedup();
    down.len()
}

/// The members as the manager numbers them: masters' URLs, clusters'
/// seeds, Sentinel members (master name, sentinel URLs), each in order.
type Split = (Vec<String>, Vec<Vec<String>>, Vec<(String, Vec<String>)>);

/// `members` split by kind, see [`Split`].
fn split(members: Vec<Member>) -> Split {
    let (mut urls, mut seeds, mut sentinels) = (Vec::new(), Vec::new(), Vec::new());
    for m in members {
        match m {
            Member::Master(url) => urls.push(url),
            Member::Cluster(s) => seeds.push(s),
            Member::Sentinel {
                master,
                sentinels: s,
            } => sentinels.push((master, s)),
        }
    }
    (urls, seeds, sentinels)
}

/// How to reach each member directly, in the manager's order: a client per
/// master URL, trusting the CA of `--tls-ca` if given, then a cluster
/// client per cluster. The manager accepted these URLs already; errors name
/// the node by index (a URL may carry a password).
fn targets(
    urls: &[String],
    seeds: &[Vec<String>],
    ca: Option<&[u8]>,
) -> Result<Vec<Target>, Failure> {
    let masters = urls.iter().enumerate().map(|(i, url)| {
        match ca {
            Some(ca) => tls_client(i, url, ca),
            None => redis::Client::open(url.as_str())
                .map_err(|e| Failure::usage(format!("node {i}: {e}"))),
        }
        .map(Target::Master)
    });
    let clusters = seeds.iter().enumerate().map(|(k, s)| {
        Target::cluster(s, ca).map_err(|e| Failure::usage(format!("node {}: {e}", urls.len() + k)))
    });
    masters.chain(clusters).collect()
}

/// The PEM of the CA given with `--tls-ca`.
fn read_ca(path: &std::path::Path) -> Result<Vec<u8>, Failure> {
    std::fs::read(path).map_err(|e| Failure::usage(format!("--tls-ca {}: {e}", path.display())))
}

/// A client for node `i` at `url` that trusts `ca` for the node's
/// certificate. Errors name the node by its index: a URL may carry a
/// password.
#[cfg(feature = "tls-rustls")]
fn tls_client(i: usize, url: &str, ca: &[u8]) -> Result<redis::Client, Failure> {
    if !url.starts_with("rediss://") {
        return Err(Failure::usage(format!(
            "--tls-ca is for rediss:// nodes; node {i} is not one"
        )));
    }
    redis::Client::build_with_tls(url, trusting(ca))
        .map_err(|e| Failure::usage(format!("--tls-ca: node {i}: {e}")))
}

#[cfg(not(feature = "tls-rustls"))]
fn tls_client(_i: usize, _url: &str, _ca: &[u8]) -> Result<redis::Client, Failure> {
    Err(no_tls())
}

/// `builder` with cluster member `i` (its seeds `seeds`) added, trusting
/// `ca` for its nodes' certificates.
#[cfg(feature = "tls-rustls")]
fn tls_cluster(
    builder: LockManagerBuilder,
    i: usize,
    seeds: &[String],
    ca: &[u8],
) -> Result<LockManagerBuilder, Failure> {
    if !seeds.iter().all(|s| s.starts_with("rediss://")) {
        return Err(Failure::usage(format!(
            "--tls-ca is for rediss:// nodes; a seed of node {i} is not one"
        )));
    }
    Ok(builder.cluster_with_tls(seeds.to_vec(), trusting(ca)))
}

#[cfg(not(feature = "tls-rustls"))]
fn tls_cluster(
    _builder: LockManagerBuilder,
    _i: usize,
    _seeds: &[String],
    _ca: &[u8],
) -> Result<LockManagerBuilder, Failure> {
    Err(no_tls())
}

#[cfg(not(feature = "tls-rustls"))]
fn no_tls() -> Failure {
    Failure::usage("--tls-ca needs TLS support: build quorumlock with the tls-rustls feature")
}

/// Node failures on one line.
pub fn join(failures: &[NodeFailure]) -> String {
    failures
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// A duration for people: `850ms`, `29.5s`, `4m 10s`.
pub fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if d.is_zero() {
        "0s".to_owned()
    } else if ms < 1_000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", d.as_secs_f64())
    } else {
        let s = d.as_secs();
        if s < 3_600 {
            format!("{}m {}s", s / 60, s % 60)
        } else {
            format!("{}h {}m", s / 3_600, (s % 3_600) / 60)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_well() {
        assert_eq!(human(Duration::ZERO), "0s");
        assert_eq!(human(Duration::from_millis(850)), "850ms");
        assert_eq!(human(Duration::from_millis(29_512)), "29.5s");
        assert_eq!(human(Duration::from_secs(250)), "4m 10s");
        assert_eq!(human(Duration::from_secs(7_300)), "2h 1m");
    }
}
