//! Plain connections to the nodes, for the reads the library does not make
//! (a lock's queue, a prefix scan): one connection per node, opened on
//! first use and again after a failure, every round trip bounded. A
//! cluster member is reached through a cluster client, which sends a
//! pipeline to the shard of its first key; a scan walks each of its shards'
//! masters ([`DirectNode::masters`]).

use std::time::Duration;

use quorumlock::redis::aio::MultiplexedConnection;
use quorumlock::redis::cluster::ClusterClient;
use quorumlock::redis::cluster_async::ClusterConnection;
use quorumlock::redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use quorumlock::redis::{
    self, AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, FromRedisValue,
    IntoConnectionInfo, Pipeline, Value,
};

/// How long a node has to accept a connection or answer one round trip
/// before it counts as down for this read.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(3);

/// How a member is reached directly.
#[derive(Clone)]
pub enum Target {
    /// A standalone master.
    Master(redis::Client),
    /// A Redis Cluster, through its seeds; `seed` is the first one's
    /// connection (its credentials and TLS reach the shards' masters), `ca`
    /// the CA of `--tls-ca`, trusted by every connection to it.
    Cluster {
        client: Box<ClusterClient>,
        seed: ConnectionInfo,
        ca: Option<Vec<u8>>,
    },
    /// A master under Redis Sentinel: the master the sentinels name when
    /// the connection opens (redis-rs's `SentinelClient`), with the
    /// scheme, credentials and database of `master` when it is a URL.
    Sentinel {
        sentinels: Vec<String>,
        master: String,
    },
}

impl Target {
    /// A cluster target over `seeds` (URLs the library accepted already),
    /// trusting `ca` if given.
    pub fn cluster(seeds: &[String], ca: Option<&[u8]>) -> Result<Self, String> {
        let seed = seeds
            .first()
            .ok_or_else(|| "a cluster member needs a seed".to_owned())?
            .as_str()
            .into_connection_info()
            .map_err(|e| e.to_string())?;
        let builder = ClusterClient::builder(seeds.iter().map(String::as_str))
            .connection_timeout(NODE_TIMEOUT)
            .response_timeout(NODE_TIMEOUT);
        #[cfg(feature = "tls-rustls")]
        let builder = match ca {
            Some(ca) => builder.certs(trusting(ca)),
            None => builder,
        };
        let client = builder.build().map_err(|e| e.to_string())?;
        Ok(Self::Cluster {
            client: Box::new(client),
            seed,
            ca: ca.map(<[u8]>::to_vec),
        })
    }

    /// A client for the shard master at `info`, of a cluster that trusts
    /// `ca` if given.
    fn shard(info: ConnectionInfo, ca: Option<&[u8]>) -> redis::RedisResult<redis::Client> {
        #[cfg(feature = "tls-rustls")]
        if let Some(ca) = ca {
            return redis::Client::build_with_tls(info, trusting(ca));
        }
        #[cfg(not(feature = "tls-rustls"))]
        let _ = ca;
        redis::Client::open(info)
    }
}

/// Certificates that trust `ca` and show no client certificate.
#[cfg(feature = "tls-rustls")]
pub fn trusting(ca: &[u8]) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: None,
        root_cert: Some(ca.to_vec()),
    }
}

/// An open connection of either kind.
enum Conn {
    Master(MultiplexedConnection),
    Cluster(ClusterConnection),
}

/// One member (or, for a scan, one shard master of a cluster member),
/// reached directly.
pub struct DirectNode {
    /// Index of the member, as the manager numbers it.
    pub index: usize,
    /// Address, without credentials.
    pub addr: String,
    target: Target,
    conn: Option<Conn>,
}

impl DirectNode {
    /// Member `index` at `addr` (for messages), reached through `target`.
    pub fn new(index: usize, addr: String, target: Target) -> Self {
        Self {
            index,
            addr,
            target,
            conn: None,
        }
    }

    /// Sends `pipe` and reads its replies as `T`; the error says why, in
    /// words (never with the URL, which may carry a password). A failed
    /// round trip closes the connection: the next one opens a new one.
    pub async fn query<T: FromRedisValue>(&mut self, pipe: &Pipeline) -> Result<T, String> {
        let answer = match self.connection().await? {
            Conn::Master(c) => tokio::time::timeout(NODE_TIMEOUT, pipe.query_async::<T>(c)).await,
            Conn::Cluster(c) => tokio::time::timeout(NODE_TIMEOUT, pipe.query_async::<T>(c)).await,
        };
        match answer {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if !matches!(e.kind(), redis::ErrorKind::Server(_)) {
                    self.conn = None;
                }
                Err(e.to_string())
            }
            Err(_) => {
                self.conn = None;
                Err(format!("no answer within {NODE_TIMEOUT:?}"))
            }
        }
    }

    /// What a scan of this member walks, each with this member's index:
    /// the master itself; for a cluster, the master of each shard (from
    /// `CLUSTER SLOTS`), reached directly with the seeds' credentials.
    pub async fn masters(&mut self) -> Result<Vec<Self>, String> {
        let Target::Cluster { seed, ca, .. } = &self.target else {
            return Ok(vec![Self::new(
                self.index,
                self.addr.clone(),
                self.target.clone(),
            )]);
        };
        let (seed, ca) = (ConnectionInfo::clone(seed), ca.clone());
        let mut pipe = redis::pipe();
        pipe.cmd("CLUSTER").arg("SLOTS");
        let (slots,): (Value,) = self.query(&pipe).await?;
        shard_masters(&slots, &seed)
            .into_iter()
            .map(|info| {
                let addr = info.addr().to_string();
                Target::shard(info, ca.as_deref())
                    .map(|c| Self::new(self.index, addr, Target::Master(c)))
                    .map_err(|e| e.to_string())
            })
            .collect()
    }

    async fn connection(&mut self) -> Result<&mut Conn, String> {
        if self.conn.is_none() {
            let connect = async {
                match &self.target {
                    Target::Master(client) => {
                        let config = AsyncConnectionConfig::new()
                            .set_connection_timeout(Some(NODE_TIMEOUT))
                            .set_response_timeout(Some(NODE_TIMEOUT));
                        client
                            .get_multiplexed_async_connection_with_config(&config)
                            .await
                            .map(Conn::Master)
                    }
                    Target::Cluster { client, .. } => {
                        client.get_async_connection().await.map(Conn::Cluster)
                    }
                    Target::Sentinel { sentinels, master } => {
                        let (name, info) = sentinel_master(master)?;
                        let mut client = SentinelClient::build(
                            sentinels.clone(),
                            name,
                            Some(info),
                            SentinelServerType::Master,
                        )?;
                        client.get_async_connection().await.map(Conn::Master)
                    }
                }
            };
            let conn = match tokio::time::timeout(NODE_TIMEOUT, connect).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(format!("cannot connect: {e}")),
                Err(_) => return Err(format!("cannot connect within {NODE_TIMEOUT:?}")),
            };
            self.conn = Some(conn);
        }
        self.conn.as_mut().ok_or_else(|| "not connected".to_owned())
    }
}

/// The connection of each shard's master in a `CLUSTER SLOTS` reply, each
/// once, in the order of their first slot range: `seed` with its address
/// replaced (its credentials and TLS kept). A master that announces no
/// host (an empty or `?` endpoint) is taken to be on the seed's host.
fn shard_masters(slots: &Value, seed: &ConnectionInfo) -> Vec<ConnectionInfo> {
    let Value::Array(ranges) = slots else {
        return Vec::new();
    };
    let mut seen: Vec<(String, u16)> = Vec::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            continue;
        };
        let Some(Value::Array(master)) = fields.get(2) else {
            continue;
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        };
        let Some(Value::Int(port)) = master.get(1) else {
            continue;
        };
        let Ok(port) = u16::try_from(*port) else {
            continue;
        };
        let host = if host.is_empty() || host == "?" {
            match seed.addr() {
                ConnectionAddr::Tcp(h, _) | ConnectionAddr::TcpTls { host: h, .. } => h.clone(),
                _ => continue,
            }
        } else {
            host
        };
        if !seen.contains(&(host.clone(), port)) {
            seen.push((host, port));
        }
    }
    seen.into_iter()
        .map(|(host, port)| {
            let addr = match seed.addr().clone() {
                ConnectionAddr::TcpTls {
                    insecure,
                    tls_params,
                    ..
                } => ConnectionAddr::TcpTls {
                    host,
                    port,
                    insecure,
                    tls_params,
                },
                _ => ConnectionAddr::Tcp(host, port),
            };
            seed.clone().set_addr(addr)
        })
        .collect()
}

/// A Sentinel member's master name, bare or as a URL whose host is the
/// name, read as redis-rs's Sentinel client takes it: the name, and the
/// master's credentials, database and TLS.
fn sentinel_master(master: &str) -> redis::RedisResult<(String, SentinelNodeConnectionInfo)> {
    if !master.contains("://") {
        return Ok((master.to_owned(), SentinelNodeConnectionInfo::default()));
    }
    let info = master.into_connection_info()?;
    let base = SentinelNodeConnectionInfo::default()
        .set_redis_connection_info(info.redis_settings().clone());
    Ok(match info.addr() {
        ConnectionAddr::TcpTls { host, insecure, .. } => {
            let mode = if *insecure {
                redis::TlsMode::Insecure
            } else {
                redis::TlsMode::Secure
            };
            (host.clone(), base.set_tls_mode(mode))
        }
        ConnectionAddr::Tcp(host, _) => (host.clone(), base),
        other => (other.to_string(), base),
    })
}

/// Parses one reply of a pipeline read with `ignore_errors`: a server
/// error (a key of another type) or a reply of another shape is `None`.
pub fn reply<T: FromRedisValue>(value: redis::Value) -> Option<T> {
    match value {
        redis::Value::ServerError(_) => None,
        v => redis::from_redis_value(v).ok(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_shard_master_once_with_the_seeds_credentials() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |a, b, master, replica| {
            Value::Array(vec![Value::Int(a), Value::Int(b), master, replica])
        };
        let slots = Value::Array(vec![
            range(0, 99, node("10.0.0.1", 7000), node("10.0.0.9", 7009)),
            range(100, 199, node("", 7001), node("10.0.0.8", 7008)),
            range(200, 16383, node("10.0.0.1", 7000), node("10.0.0.7", 7007)),
        ]);
        let seed = "redis://user:pw@127.0.0.1:7000/0"
            .into_connection_info()
            .expect("a url");
        let masters = shard_masters(&slots, &seed);
        let addrs: Vec<String> = masters.iter().map(|m| m.addr().to_string()).collect();
        assert_eq!(addrs, ["10.0.0.1:7000", "127.0.0.1:7001"]);
        for m in &masters {
            assert_eq!(m.redis_settings().password(), Some("pw"));
            assert_eq!(m.redis_settings().username(), Some("user"));
        }
        assert!(shard_masters(&Value::Nil, &seed).is_empty());
    }
}
