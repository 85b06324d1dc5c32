//! A master's replicas: `WAIT` after a write, and how many are connected.

use std::time::Duration;

use redis::Value;

use super::RedisNode;
use crate::config::ReplicaWait;
use crate::error::{NodeError, NodeErrorKind};
use crate::node::cluster::confirmed;
use crate::node::ops::Answer;
use crate::node::order::Lane;
use crate::node::script_call::map_err;
use crate::scripts;

impl RedisNode {
    /// Sends `WAIT` for `wait` on the connection of `lane` (a batch's:
    /// [`Lane::Renewals`]), after the write it must confirm was
    /// answered there: `Ok` when enough replicas acknowledged every write
    /// the connection made, else [`NodeErrorKind::NotReplicated`].
    pub(crate) fn wait_replicas(&self, lane: Lane, wait: ReplicaWait) -> Answer<()> {
        let conn = self.checked_conn(self.lane(lane));
        Box::pin(async move {
            let mut conn = conn?;
            let acks: Value = redis::cmd("WAIT")
                .arg(wait.replicas)
                .arg(scripts::ms(wait.timeout))
                .query_async(&mut conn)
                .await
                .map_err(|e| map_err(&e))?;
            confirmed(Some(wait), Some(acks))
        })
    }

    /// How many replicas the master has connected (`INFO replication`).
    pub(crate) async fn connected_replicas(&self, timeout: Duration) -> Result<u32, NodeError> {
        let mut conn = self.checked()?;
        let info: String = tokio::time::timeout(
            timeout,
            redis::cmd("INFO").arg("replication").query_async(&mut conn),
        )
        .await
        .map_err(|_| NodeError::new(NodeErrorKind::Timeout, "INFO timed out"))?
        .map_err(|e| map_err(&e))?;
        Ok(info
            .lines()
            .find_map(|l| l.trim().strip_prefix("connected_slaves:"))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0))
    }
}
