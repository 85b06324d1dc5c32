//! [`LockManagerBuilder::cluster_with_tls`].

use crate::node::{Certs, ClusterSpec};

use super::LockManagerBuilder;

impl LockManagerBuilder {
    /// Adds one member that is a whole Redis Cluster reached over TLS, as
    /// [`cluster`](Self::cluster) does, with `certs` for every connection
    /// to it: the seeds, the shards' masters and its sharded pub/sub. Give
    /// `root_cert` (PEM) to trust a CA of your own instead of the public
    /// roots, `client_tls` to show a client certificate (mutual TLS). The
    /// seeds are `rediss://` URLs; the shards' addresses come from the
    /// cluster (`CLUSTER SLOTS`), so their certificates must name the
    /// hosts the cluster announces.
    ///
    /// Needs the `tls-rustls` feature. `build()` refuses a seed that is
    /// not `rediss://` with [`Error::InvalidInput`](crate::Error::InvalidInput),
    /// and reports a certificate the member's nodes show that `certs` does
    /// not trust as [`Error::Connect`](crate::Error::Connect) naming the
    /// seed.
    pub fn cluster_with_tls<I, S>(mut self, seed_urls: I, certs: redis::TlsCertificates) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.clusters.push(ClusterSpec {
            seeds: seed_urls.into_iter().map(Into::into).collect(),
            certs: Certs(Some(certs)),
        });
        self
    }
}
