//! Connecting to the nodes, tolerating the ones that are down.

use std::time::Duration;

use quorumlock::{Error, LockManager, LockManagerBuilder, NodeFailure, Quorum};

use crate::cli::{Global, NODES_EXAMPLE};
use crate::exit::{Failure, UNAVAILABLE};

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
/// `LockManagerBuilder::build` fails when any node cannot be reached. To take
/// a lock, the manager is rebuilt with `allow_unreachable`, over every node:
/// the ones that are down join when they answer. To inspect or break a lock,
/// it is rebuilt over the reachable nodes only, with the quorum computed for
/// all N (`Quorum::AtLeast(required)`): exactly as safe, since a holder
/// still needs `required` grants among the same N nodes.
pub struct Cluster {
    /// The manager over the reachable nodes.
    pub manager: LockManager,
    /// For each node of `manager`, its index in the `--nodes` list.
    index: Vec<usize>,
    /// How many nodes were given.
    pub total: usize,
    /// Grants a holder needs, out of `total`.
    pub required: usize,
    /// The nodes that could not be reached, by their `--nodes` index.
    pub down: Vec<NodeFailure>,
}

impl Cluster {
    /// Connects to the nodes of `global`; `lease` sets the renewed lease.
    pub async fn connect(
        global: &Global,
        lease: Option<Duration>,
        need: Need,
    ) -> Result<Self, Failure> {
        let urls: Vec<String> = global
            .nodes
            .iter()
            .map(|u| u.trim())
            .filter(|u| !u.is_empty())
            .map(str::to_owned)
            .collect();
        if urls.is_empty() {
            return Err(Failure::usage(format!(
                "no Redis nodes given: pass --nodes {NODES_EXAMPLE} or set QUORUMLOCK_NODES={NODES_EXAMPLE}"
            )));
        }
        let total = urls.len();
        let required = global.quorum.required(total)?;
        let builder = |quorum: Quorum| {
            let b = LockManager::builder()
                .quorum(quorum)
                .key_prefix(global.key_prefix.clone());
            match lease {
                Some(lease) => b.lease(lease),
                None => b,
            }
        };
        let failures = match with_urls(builder(global.quorum), &urls).build().await {
            Ok(manager) => {
                return Ok(Self {
                    manager,
                    index: (0..total).collect(),
                    total,
                    required,
                    down: Vec::new(),
                })
            }
            Err(Error::Connect { failures }) => failures,
            Err(e) => return Err(e.into()),
        };
        let index: Vec<usize> = (0..total)
            .filter(|i| !failures.iter().any(|f| f.node == *i))
            .collect();
        let needed = match need {
            Need::Quorum => required,
            Need::Any => 1,
        };
        if index.len() < needed {
            return Err(Failure::new(
                UNAVAILABLE,
                format!(
                    "reached {} of {total} node(s), {needed} needed: {}",
                    index.len(),
                    join(&failures)
                ),
            ));
        }
        if need == Need::Quorum {
            // Taking a lock: keep every node in the manager. The ones that
            // are down join as soon as they answer, and the watchdog then
            // tops the lock up on them, so a long run does not stay on a
            // bare quorum.
            let manager = with_urls(builder(global.quorum), &urls)
                .allow_unreachable(true)
                .build()
                .await
                .map_err(|e| Failure::new(UNAVAILABLE, e.to_string()))?;
            return Ok(Self {
                manager,
                index: (0..total).collect(),
                total,
                required,
                down: failures,
            });
        }
        // Inspecting or breaking a lock: the reachable nodes are enough.
        let up: Vec<String> = index.iter().map(|&i| urls[i].clone()).collect();
        // The first attempt validated everything; a failure now is a node
        // that went down in between.
        let manager = with_urls(builder(Quorum::AtLeast(required.min(up.len()))), &up)
            .build()
            .await
            .map_err(|e| Failure::new(UNAVAILABLE, e.to_string()))?;
        Ok(Self {
            manager,
            index,
            total,
            required,
            down: failures,
        })
    }

    /// The `--nodes` index of node `i` of the manager.
    pub fn original(&self, i: usize) -> usize {
        self.index.get(i).copied().unwrap_or(i)
    }

    /// One line naming the nodes that are down, if any.
    pub fn down_summary(&self) -> Option<String> {
        (!self.down.is_empty()).then(|| {
            format!(
                "{} of {} node(s) unreachable, going on with the other {}: {}",
                self.down.len(),
                self.total,
                self.total - self.down.len(),
                join(&self.down)
            )
        })
    }

    /// Waits until the library's background work (releases to slow nodes,
    /// rollbacks of cancelled acquisitions) has landed: the process must not
    /// exit before it does.
    pub async fn settle(&self) {
        self.manager.flush().await;
    }
}

fn with_urls(builder: LockManagerBuilder, urls: &[String]) -> LockManagerBuilder {
    builder.nodes(urls.iter().cloned())
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
