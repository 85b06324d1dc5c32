//! [`LockManagerBuilder::cluster`] and [`LockManagerBuilder::replica_wait`].

use std::time::Duration;

use crate::node::ClusterSpec;

use super::LockManagerBuilder;

impl LockManagerBuilder {
    /// Adds one member that is a whole Redis Cluster, reached through
    /// `seed_urls` (one or more of its nodes): it counts as one vote, as a
    /// master does, and each lock lives on the shard its name's hash slot
    /// belongs to. Cluster members come after the URL nodes and the
    /// clients, in the order added.
    ///
    /// `build()` checks that every seed is a cluster node and that the
    /// seeds tell one topology covering every slot, and that each seed runs
    /// Redis 7 or later (its release messages go over sharded pub/sub).
    /// `rediss://` seeds trust the public roots; for a CA of your own or a
    /// client certificate, see `cluster_with_tls` (feature `tls-rustls`).
    /// With [`allow_unreachable`](Self::allow_unreachable), a cluster
    /// member that does not answer at build is connected in the background
    /// and checked then, as a master is. Not yet on a cluster member:
    /// `lock_all` over names of several hash slots (refused with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput)).
    pub fn cluster<I, S>(mut self, seed_urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.clusters.push(ClusterSpec {
            seeds: seed_urls.into_iter().map(Into::into).collect(),
            ..ClusterSpec::default()
        });
        self
    }

    /// Counts a cluster member's (or a Sentinel member's) write only once
    /// its shard's (its master's) replicas have it (default: off). After each script call whose answer a quorum
    /// counts (an acquire, a re-entry, a fence raise) and each renewal or
    /// repair pipeline, the shard is sent `WAIT replicas timeout` on the
    /// same connection (in the same pipeline: no extra round trip); a
    /// write acknowledged by fewer than `replicas` replicas within
    /// `timeout` does not count: the call fails with
    /// [`NodeErrorKind::NotReplicated`](crate::NodeErrorKind::NotReplicated)
    /// (a grant is rolled back with the attempt, a renewal is not counted
    /// towards the hold's quorum). Releases and queue exits do not wait.
    ///
    /// Without it, a grant that the shard's master answered but had not yet
    /// sent to its replicas is lost when a replica is promoted in its place
    /// (the member then no longer holds the key, as after an empty restart);
    /// with it, a grant counts only once `replicas` replicas have it, so a
    /// promoted replica that acknowledged it keeps it. The cost: one
    /// replica round trip per counted call and per renewal pipeline, the
    /// shard's connection blocked meanwhile, and, while a shard has fewer
    /// than `replicas` replicas in sync (after a failover, until the old
    /// master is back as a replica), no grant or renewal counts there and
    /// each waits `timeout`. See docs/CLUSTER.md, "Failover inside a member".
    ///
    /// `build()` checks: `replicas` at least 1, `timeout` above zero and
    /// below [`node_timeout`](Self::node_timeout) (else
    /// [`Error::InvalidInput`](crate::Error::InvalidInput)); at least one cluster or Sentinel member,
    /// each cluster shard with `replicas` replicas and each Sentinel
    /// member's master with `replicas` connected ones (else
    /// [`Error::Config`](crate::Error::Config)). On a Sentinel member `WAIT` is a second round
    /// trip after the call, on the same connection (docs/SENTINEL.md).
    pub fn replica_wait(mut self, replicas: u32, timeout: Duration) -> Self {
        self.replica_wait = Some((replicas, timeout));
        self
    }
}
