//! What the nodes hold for one lock, as [`LockManager::status`](crate::LockManager::status) reports it.

use std::collections::HashMap;

use crate::error::NodeFailure;
use crate::node::NodeLockState;
use crate::owner::HolderInfo;

/// What every node holds for one lock; see [`LockManager::status`](crate::LockManager::status).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct LockStatus {
    /// The lock name.
    pub name: String,
    /// Grants a holder needs.
    pub required: usize,
    /// One entry per node, in the builder's order.
    pub nodes: Vec<NodeStatus>,
}

impl LockStatus {
    /// Where and since when the holder of [`holder`](Self::holder) took
    /// the lock: its host, process id and wall-clock time.
    #[must_use]
    pub fn holder_info(&self) -> Option<HolderInfo> {
        self.holder().and_then(HolderInfo::parse)
    }

    /// The holders on the nodes that are not quorumlock's, each once, sorted:
    /// another client's (in [`Layout::Redisson`](crate::Layout::Redisson), a
    /// Redisson client's `<uuid>:<thread id>`, one per master for a
    /// `RedissonRedLock`). Shown raw: the lock is held by someone else, who
    /// has no [`HolderInfo`] and no fencing token.
    #[must_use]
    pub fn foreign_holders(&self) -> Vec<&str> {
        let mut out: Vec<&str> = self
            .nodes
            .iter()
            .filter_map(|s| s.state.as_ref().ok()?.holder.as_deref())
            .filter(|h| HolderInfo::parse(h).is_none())
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// The owner holding the lock on at least `required` nodes, if any.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for s in &self.nodes {
            if let Ok(NodeLockState {
                holder: Some(h), ..
            }) = &s.state
            {
                *counts.entry(h.as_str()).or_default() += 1;
            }
        }
        counts
            .into_iter()
            .find(|(_, c)| *c >= self.required)
            .map(|(h, _)| h)
    }
}

/// One node's view of a lock.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct NodeStatus {
    /// Index of the node.
    pub node: usize,
    /// Address, without credentials.
    pub addr: String,
    /// What it holds, or why it could not tell.
    pub state: Result<NodeLockState, NodeFailure>,
    /// The node's `maxmemory-policy`; anything but `noeviction` can evict a
    /// held lock. `None` when the node would not say.
    pub maxmemory_policy: Option<String>,
}
