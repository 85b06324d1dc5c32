//! What a node must pass before it is used: no Redis server behind it
//! that is behind another member too (its server identities: `run_id`,
//! cluster node ids), and an eviction policy that cannot drop a held lock
//! (`maxmemory-policy`), read when the node first answers.

use std::fmt;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::ConnectionManager;

/// One name of one Redis server, comparable across member kinds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ServerId {
    /// `run_id` from `INFO server`: one per server process.
    RunId(String),
    /// A cluster node's id (`CLUSTER MYID`, or a master's id in `CLUSTER
    /// SLOTS`): one per node of a cluster, kept across restarts.
    NodeId(String),
}

impl fmt::Display for ServerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::RunId(id) => write!(f, "run_id {id}"),
            Self::NodeId(id) => write!(f, "cluster node id {id}"),
        }
    }
}

/// What a node says about itself when it first answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerInfo {
    /// The identities of the servers behind the member: a master's
    /// `run_id`, and its `CLUSTER MYID` when it is a cluster node; a
    /// cluster member's masters' node ids. Two members that share one are
    /// one server counted twice.
    pub(crate) ids: Vec<ServerId>,
    /// `maxmemory-policy` from `CONFIG GET`.
    pub(crate) policy: Option<String>,
}

impl ServerInfo {
    /// Reads a master's identities and policy, each under `timeout`; what
    /// the node refuses or does not answer in time is left out (`CLUSTER
    /// MYID` on a server that is not a cluster node, for one).
    pub(crate) async fn read(conn: &mut ConnectionManager, timeout: Duration) -> Self {
        let mut ids = Vec::new();
        if let Ok(Ok(Some(id))) = tokio::time::timeout(timeout, run_id(conn)).await {
            ids.push(ServerId::RunId(id));
        }
        let mut myid = redis::cmd("CLUSTER");
        let myid = myid.arg("MYID").query_async::<String>(conn);
        if let Ok(Ok(id)) = tokio::time::timeout(timeout, myid).await {
            if !id.is_empty() {
                ids.push(ServerId::NodeId(id));
            }
        }
        let policy = match tokio::time::timeout(timeout, maxmemory_policy(conn)).await {
            Ok(Ok(p)) => p,
            _ => None,
        };
        Self { ids, policy }
    }
}

async fn run_id(conn: &mut ConnectionManager) -> redis::RedisResult<Option<String>> {
    let info: String = redis::cmd("INFO").arg("server").query_async(conn).await?;
    Ok(info
        .lines()
        .find_map(|l| l.trim().strip_prefix("run_id:"))
        .map(str::to_owned)
        .filter(|id| !id.is_empty()))
}

pub(crate) async fn maxmemory_policy<C: redis::aio::ConnectionLike>(
    conn: &mut C,
) -> redis::RedisResult<Option<String>> {
    let reply: std::collections::HashMap<String, String> = redis::cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory-policy")
        .query_async(conn)
        .await?;
    Ok(reply.get("maxmemory-policy").cloned())
}

/// The checks a node must pass before it is used, shared by the nodes of
/// one manager so that a node connected lazily is checked against the
/// others when it first answers.
pub(crate) struct Admission {
    /// Each node admitted so far, by index.
    admitted: Mutex<Vec<Option<Admitted>>>,
    require_noeviction: bool,
}

/// A node admitted: its server identities and address.
type Admitted = (Vec<ServerId>, String);

impl Admission {
    pub(crate) fn new(nodes: usize, require_noeviction: bool) -> Self {
        Self {
            admitted: Mutex::new(vec![None; nodes]),
            require_noeviction,
        }
    }

    /// Admits node `index` or says why not: a server behind it is behind a
    /// node admitted before too (one server identity in common: a master
    /// twice, a cluster twice, or a cluster node given both as a master
    /// and as a cluster member), or a `maxmemory-policy` other than
    /// `noeviction` (or one that cannot be read) while `require_noeviction`
    /// is set. An evicting or unknown policy is otherwise a warning.
    pub(crate) fn admit(&self, index: usize, addr: &str, info: &ServerInfo) -> Result<(), String> {
        match info.policy.as_deref() {
            Some("noeviction") => {}
            Some(policy) if self.require_noeviction => {
                return Err(format!(
                    "node {index} ({addr}) has maxmemory-policy {policy}, which can evict a held \
                     lock's key; set it to noeviction (require_noeviction is on)"
                ));
            }
            Some(policy) => tracing::warn!(
                node = index,
                addr,
                policy,
                "maxmemory-policy can evict keys with a TTL: a held lock may vanish from this node; use noeviction"
            ),
            None if self.require_noeviction => {
                return Err(format!(
                    "node {index} ({addr}) does not tell its maxmemory-policy (CONFIG GET \
                     refused or renamed), so it cannot be shown to be noeviction \
                     (require_noeviction is on)"
                ));
            }
            None => tracing::warn!(
                node = index,
                addr,
                "cannot read maxmemory-policy (CONFIG GET refused or renamed); if it evicts, a held lock may vanish from this node"
            ),
        }
        if info.ids.is_empty() {
            tracing::warn!(
                node = index,
                addr,
                "cannot read run_id (INFO server) nor a cluster node id; cannot tell whether it is the same server as another node"
            );
            return Ok(());
        }
        let mut admitted = self.admitted.lock().unwrap_or_else(PoisonError::into_inner);
        let same = admitted.iter().enumerate().find_map(|(j, e)| match e {
            Some((ids, other)) if j != index => info
                .ids
                .iter()
                .find(|id| ids.contains(id))
                .map(|id| (j, other.clone(), id)),
            _ => None,
        });
        if let Some((j, other, id)) = same {
            let (first, first_addr, second, second_addr) = if j < index {
                (j, other.as_str(), index, addr)
            } else {
                (index, addr, j, other.as_str())
            };
            return Err(format!(
                "node {first} ({first_addr}) and node {second} ({second_addr}) reach the same \
                 Redis server ({id}): one server backs one member only (two URLs for it, or \
                 it as a master and within a cluster member, are one node), and counting it \
                 twice would fake a quorum"
            ));
        }
        if let Some(slot) = admitted.get_mut(index) {
            *slot = Some((info.ids.clone(), addr.to_owned()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: Option<&str>, policy: Option<&str>) -> ServerInfo {
        ServerInfo {
            ids: run_id
                .map(|id| ServerId::RunId(id.to_owned()))
                .into_iter()
                .collect(),
            policy: policy.map(str::to_owned),
        }
    }

    #[test]
    fn admission_refuses_one_server_twice_and_evicting_nodes_on_request() {
        let a = Admission::new(4, false);
        assert!(a
            .admit(0, "h:1", &info(Some("r1"), Some("noeviction")))
            .is_ok());
        assert!(a
            .admit(1, "h:2", &info(Some("r2"), Some("allkeys-lru")))
            .is_ok());
        assert!(a.admit(2, "h:3", &info(None, None)).is_ok());
        let why = a
            .admit(3, "h:1/1", &info(Some("r1"), Some("noeviction")))
            .expect_err("same run_id as node 0");
        assert!(why.contains("node 0 (h:1) and node 3 (h:1/1)"), "{why}");
        // Re-admitting the same index (a lazy node checked again) is fine.
        assert!(a
            .admit(0, "h:1", &info(Some("r1"), Some("noeviction")))
            .is_ok());

        let strict = Admission::new(2, true);
        let why = strict
            .admit(1, "h:2", &info(Some("r2"), Some("volatile-lru")))
            .expect_err("evicting");
        assert!(
            why.contains("node 1 (h:2)") && why.contains("volatile-lru"),
            "{why}"
        );
        let why = strict
            .admit(1, "h:2", &info(Some("r2"), None))
            .expect_err("unknown policy");
        assert!(why.contains("node 1 (h:2)"), "{why}");
        assert!(strict
            .admit(0, "h:1", &info(None, Some("noeviction")))
            .is_ok());
    }

    /// Identities compare across member kinds: a master that is a cluster
    /// node (its `run_id` and node id) and a cluster member with that node
    /// among its masters share one; two clusters with a master in common
    /// too. Disjoint sets are different servers.
    #[test]
    fn one_server_behind_two_members_of_any_kind_is_refused() {
        let node = |id: &str| ServerId::NodeId(id.to_owned());
        let run = |id: &str| ServerId::RunId(id.to_owned());
        let with = |ids: Vec<ServerId>| ServerInfo {
            ids,
            policy: Some("noeviction".to_owned()),
        };
        let a = Admission::new(4, false);
        assert!(a
            .admit(0, "h:1", &with(vec![run("r1"), node("n1")]))
            .is_ok());
        assert!(a.admit(1, "h:2", &with(vec![run("r2")])).is_ok());
        assert!(a
            .admit(2, "cluster(h:3)", &with(vec![node("n3"), node("n4")]))
            .is_ok());
        let why = a
            .admit(3, "cluster(h:1)", &with(vec![node("n1")]))
            .expect_err("node 0's server");
        assert!(
            why.contains("node 0 (h:1) and node 3 (cluster(h:1))")
                && why.contains("same Redis server (cluster node id n1)"),
            "{why}"
        );
        let why = a
            .admit(3, "cluster(h:4)", &with(vec![node("n5"), node("n4")]))
            .expect_err("a master of node 2");
        assert!(why.contains("node 2 (cluster(h:3)) and node 3"), "{why}");
        // A run_id and a node id never match each other.
        assert!(a.admit(3, "h:5", &with(vec![run("n3")])).is_ok());
    }
}
