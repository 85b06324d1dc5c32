//! A cluster member as given to the builder: its seed URLs and the TLS
//! certificates its connections use.

use redis::cluster::ClusterClientBuilder;
use redis::ConnectionInfo;

use crate::error::Error;

use crate::node::spec::{redact, NodeSpec};

/// A cluster member as given to the builder.
#[derive(Clone, Default)]
pub(crate) struct ClusterSpec {
    /// Its seed URLs.
    pub(crate) seeds: Vec<String>,
    /// What its connections trust and show (`cluster_with_tls`).
    pub(crate) certs: Certs,
}

impl std::fmt::Debug for ClusterSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seeds: Vec<String> = self.seeds.iter().map(|u| redact(u)).collect();
        f.debug_struct("ClusterSpec")
            .field("seeds", &seeds)
            .field("certs", &self.certs.is_some())
            .finish()
    }
}

/// The TLS certificates of a cluster member's connections (a CA to trust,
/// a client certificate to show), when given; else the defaults of
/// `rediss://` (the public roots).
#[derive(Clone, Default)]
pub(crate) struct Certs(#[cfg(feature = "tls-rustls")] pub(crate) Option<redis::TlsCertificates>);

impl Certs {
    /// Whether certificates were given.
    pub(crate) fn is_some(&self) -> bool {
        #[cfg(feature = "tls-rustls")]
        return self.0.is_some();
        #[cfg(not(feature = "tls-rustls"))]
        false
    }

    /// `spec` with a client that uses these certificates; a seed that is
    /// not `rediss://` with certificates is [`Error::InvalidInput`].
    pub(crate) fn node(&self, spec: NodeSpec) -> Result<NodeSpec, Error> {
        #[cfg(feature = "tls-rustls")]
        if let Some(certs) = &self.0 {
            let info = spec.client.get_connection_info().clone();
            if !matches!(info.addr(), redis::ConnectionAddr::TcpTls { .. }) {
                return Err(Error::invalid(
                    "cluster seeds",
                    format!(
                        "{}: cluster_with_tls takes rediss:// seeds (TLS), not this one",
                        spec.addr
                    ),
                ));
            }
            let client = redis::Client::build_with_tls(info, certs.clone())
                .map_err(|e| Error::invalid("cluster seeds", format!("{}: {e}", spec.addr)))?;
            return Ok(NodeSpec { client, ..spec });
        }
        Ok(spec)
    }

    /// A cluster client builder over `seeds` that uses these certificates.
    /// A client of one node at `info`, with the certificates if any.
    pub(crate) fn client(&self, info: ConnectionInfo) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls-rustls")]
        if let Some(certs) = &self.0 {
            return redis::Client::build_with_tls(info, certs.clone());
        }
        redis::Client::open(info)
    }

    pub(crate) fn builder(&self, seeds: Vec<ConnectionInfo>) -> ClusterClientBuilder {
        let builder = ClusterClientBuilder::new(seeds);
        #[cfg(feature = "tls-rustls")]
        if let Some(certs) = &self.0 {
            return builder.certs(certs.clone());
        }
        builder
    }
}
