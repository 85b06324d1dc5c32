//! What a node must pass before it is used: not the same server as another
//! node (`run_id`), and an eviction policy that cannot drop a held lock
//! (`maxmemory-policy`), read when the node first answers.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::ConnectionManager;

/// What a node says about itself when it first answers.
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerInfo {
    /// `run_id` from `INFO server`: one per server process.
    pub(crate) run_id: Option<String>,
    /// `maxmemory-policy` from `CONFIG GET`.
    pub(crate) policy: Option<String>,
}

impl ServerInfo {
    /// Reads both, each under `timeout`; what the node refuses or does not
    /// answer in time stays `None`.
    pub(crate) async fn read(conn: &mut ConnectionManager, timeout: Duration) -> Self {
        let run_id = match tokio::time::timeout(timeout, run_id(conn)).await {
            Ok(Ok(id)) => id,
            _ => None,
        };
        let policy = match tokio::time::timeout(timeout, maxmemory_policy(conn)).await {
            Ok(Ok(p)) => p,
            _ => None,
        };
        Self { run_id, policy }
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
    /// `(run_id, addr)` of each node admitted so far, by index.
    run_ids: Mutex<Vec<Option<(String, String)>>>,
    require_noeviction: bool,
}

impl Admission {
    pub(crate) fn new(nodes: usize, require_noeviction: bool) -> Self {
        Self {
            run_ids: Mutex::new(vec![None; nodes]),
            require_noeviction,
        }
    }

    /// Admits node `index` or says why not: the same server (`run_id`) as a
    /// node admitted before, or a `maxmemory-policy` other than `noeviction`
    /// (or one that cannot be read) while `require_noeviction` is set. An
    /// evicting or unknown policy is otherwise a warning.
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
        let Some(run_id) = &info.run_id else {
            tracing::warn!(
                node = index,
                addr,
                "cannot read run_id (INFO server); cannot tell whether it is the same server as another node"
            );
            return Ok(());
        };
        let mut ids = self.run_ids.lock().unwrap_or_else(PoisonError::into_inner);
        let same = ids.iter().enumerate().find_map(|(j, e)| match e {
            Some((id, other)) if j != index && id == run_id => Some((j, other.clone())),
            _ => None,
        });
        if let Some((j, other)) = same {
            let (first, first_addr, second, second_addr) = if j < index {
                (j, other.as_str(), index, addr)
            } else {
                (index, addr, j, other.as_str())
            };
            return Err(format!(
                "node {first} ({first_addr}) and node {second} ({second_addr}) are the same \
                 Redis server (run_id {run_id}): two URLs for one server are one node, and \
                 counting it twice would fake a quorum"
            ));
        }
        if let Some(slot) = ids.get_mut(index) {
            *slot = Some((run_id.clone(), addr.to_owned()));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(run_id: Option<&str>, policy: Option<&str>) -> ServerInfo {
        ServerInfo {
            run_id: run_id.map(str::to_owned),
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
}
