//! The builder of a [`LockManager`]: every setter infallible, everything
//! validated at once by `build()`, which connects to the nodes.

use std::sync::Arc;
use std::time::Duration;

mod cluster;
#[cfg(feature = "tls-rustls")]
mod cluster_tls;
mod sentinel;

use crate::admission::Admission;
use crate::config::{Backoff, Config, Quorum, ReplicaWait};
use crate::error::Error;
use crate::layout::Layout;
use crate::node::{
    redact, ClusterNode, ClusterSpec, LazyCluster, Member, NodeOps, NodeSpec, RedisNode,
    SentinelSpec, Server,
};
use crate::shared::{Inner, LockManager};

/// Builds a [`crate::LockManager`]; every setter is infallible and
/// [`build`](Self::build) validates everything at once.
///
/// Defaults: `Quorum::Majority`, lease 30 s renewed every 10 s, per-node
/// timeout 200 ms, connect timeout 2 s, drift factor 0.01, backoff 10–200 ms,
/// key prefix `quorumlock:`, no `max_hold`, queue timeout 5 s, events buffer
/// 1,024.
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct LockManagerBuilder {
    urls: Vec<String>,
    clients: Vec<redis::Client>,
    /// Members that are each a Redis Cluster: their seed URLs (and
    /// certificates).
    clusters: Vec<ClusterSpec>,
    /// Members that are each a master under Redis Sentinel.
    sentinels: Vec<SentinelSpec>,
    quorum: Quorum,
    lease: Duration,
    renew_interval: Option<Duration>,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    backoff: Backoff,
    key_prefix: String,
    layout: Layout,
    max_hold: Option<Duration>,
    queue_timeout: Duration,
    events_buffer: usize,
    allow_unreachable: bool,
    require_noeviction: bool,
    /// `(replicas, timeout)`, checked by `build()`.
    replica_wait: Option<(u32, Duration)>,
}

impl std::fmt::Debug for LockManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| redact(u)).collect();
        f.debug_struct("LockManagerBuilder")
            .field("urls", &urls)
            .field("clients", &self.clients.len())
            .field("clusters", &self.clusters)
            .field("sentinels", &self.sentinels)
            .field("quorum", &self.quorum)
            .field("lease", &self.lease)
            .field("renew_interval", &self.renew_interval)
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("key_prefix", &self.key_prefix)
            .field("layout", &self.layout)
            .field("max_hold", &self.max_hold)
            .field("queue_timeout", &self.queue_timeout)
            .field("events_buffer", &self.events_buffer)
            .field("allow_unreachable", &self.allow_unreachable)
            .field("require_noeviction", &self.require_noeviction)
            .field("replica_wait", &self.replica_wait)
            .finish_non_exhaustive()
    }
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            clients: Vec::new(),
            clusters: Vec::new(),
            sentinels: Vec::new(),
            quorum: Quorum::Majority,
            lease: Duration::from_secs(30),
            renew_interval: None,
            node_timeout: Duration::from_millis(200),
            connect_timeout: Duration::from_secs(2),
            drift_factor: 0.01,
            backoff: Backoff::default(),
            key_prefix: "quorumlock:".to_owned(),
            layout: Layout::Quorumlock,
            max_hold: None,
            queue_timeout: Duration::from_secs(5),
            events_buffer: 1024,
            allow_unreachable: false,
            require_noeviction: false,
            replica_wait: None,
        }
    }
}

/// The setters that store their argument as it is: `name(arg: Type);`
/// makes `pub fn name(mut self, arg: Type) -> Self`, setting the field
/// `name`.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty);)+) => {
        $(
            $(#[$doc])*
            pub fn $name(mut self, $arg: $ty) -> Self {
                self.$name = $arg;
                self
            }
        )+
    };
}

impl LockManagerBuilder {
    /// Adds one node by URL (`redis://`, `rediss://` with the `tls-rustls`
    /// feature, credentials and db allowed).
    pub fn node(mut self, url: impl Into<String>) -> Self {
        self.urls.push(url.into());
        self
    }

    /// Adds nodes by URL.
    pub fn nodes<I, S>(mut self, urls: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.urls.extend(urls.into_iter().map(Into::into));
        self
    }

    /// Adds a node from a ready `redis::Client` (after the URL nodes).
    pub fn client(mut self, client: redis::Client) -> Self {
        self.clients.push(client);
        self
    }

    setters! {
        /// The quorum policy.
        quorum(quorum: Quorum);
        /// The lease of renewed locks (`lock`, `try_lock`).
        lease(lease: Duration);
    }

    /// The watchdog's period (default: lease / 3).
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    setters! {
        /// How long a queued waiter may go without calling the nodes before
        /// the lock's queue skips it, as when its process died (default 5 s,
        /// as Redisson's fair lock; above zero, at most
        /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT); `build()` checks). Waiters
        /// refresh their place every third of it, so a longer timeout costs
        /// fewer calls and skips a dead waiter later.
        queue_timeout(timeout: Duration);
        /// The timeout of one call to one node (above zero, at most
        /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT); `build()` checks). Calls made
        /// under a lease are also bounded by that lease.
        node_timeout(timeout: Duration);
        /// The timeout of connecting to each node in `build`, and of each
        /// reconnection later (above zero, at most
        /// [`MAX_TIMEOUT`](crate::MAX_TIMEOUT); `build()` checks).
        connect_timeout(timeout: Duration);
        /// The clock drift factor (drift = lease × factor + 2 ms).
        drift_factor(factor: f64);
        /// The delays between attempts while waiting.
        backoff(backoff: Backoff);
        /// How many events a [`LockEvents`](crate::LockEvents) stream keeps
        /// for its reader (default 1,024; at least 1, at most
        /// [`MAX_EVENTS_BUFFER`](crate::MAX_EVENTS_BUFFER); `build()`
        /// checks). A reader that falls further behind misses the newer
        /// events and gets one [`LockEvent::Lagged`](crate::LockEvent::Lagged)
        /// saying how many.
        events_buffer(events: usize);
    }

    /// The prefix of every key (default `quorumlock:`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Where locks live on the nodes (default [`Layout::Quorumlock`]):
    /// [`Layout::Redisson`] keeps each lock where Redisson's `RLock` keeps
    /// it, so that Redisson clients and this manager exclude and wake each
    /// other on the same masters (see docs/REDISSON.md).
    pub fn layout(mut self, layout: Layout) -> Self {
        self.layout = layout;
        self
    }

    /// Stop renewing a lock after it has been held this long (above zero;
    /// `Duration::MAX` renews for as long as the lock is held, as when unset).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    setters! {
        /// Let `build` succeed while some nodes are down, as long as a quorum
        /// of them is reachable (default: every node must answer).
        ///
        /// The unreachable nodes are connected on first use (a cluster
        /// member: in the background, every half second) and take part as
        /// soon as they answer; their role is checked then (a cluster
        /// member: every check `build()` makes of one), and a node that
        /// fails it is never used. A service can then start during a
        /// minority outage, as RedLock is meant to tolerate.
        allow_unreachable(allow: bool);
        /// Refuse every node whose `maxmemory-policy` is not `noeviction`
        /// (default: such a node is used, with a warning).
        ///
        /// Under any other policy Redis may evict a key that has a TTL when
        /// it runs out of memory, and every lock key has one: a held lock can
        /// vanish from the node without anyone releasing it. With this option
        /// `build()` fails with [`Error::Config`] naming the node and its
        /// policy; a node that will not tell its policy (`CONFIG GET` refused
        /// or renamed) is refused too, since it cannot be shown to be safe. A
        /// node connected later (see
        /// [`allow_unreachable`](Self::allow_unreachable)) is checked when it
        /// first answers and never used if it fails. The policy is not
        /// watched afterwards; [`crate::LockManager::status`] shows it per
        /// node.
        require_noeviction(require: bool);
    }

    /// The nodes given by URL and as clients, each named once.
    fn specs(&self) -> Result<Vec<NodeSpec>, Error> {
        let urls = self.urls.iter().map(|url| NodeSpec::from_url(url));
        let clients = self.clients.iter().map(NodeSpec::from_client);
        let specs = urls.chain(clients).collect::<Result<Vec<_>, _>>()?;
        for (i, a) in specs.iter().enumerate() {
            if let Some(j) = specs[..i].iter().position(|b| b.identity == a.identity) {
                return Err(Error::Config(format!(
                    "node {i} ({}) is the same node as node {j}",
                    a.addr
                )));
            }
        }
        Ok(specs)
    }

    /// The settings for `nodes` nodes, validated ([`Config::validate`]).
    fn config(&self, nodes: usize) -> Result<Config, Error> {
        if nodes == 0 {
            return Err(Error::Config(
                "no nodes: add at least one with `node(url)` or `client(client)`".into(),
            ));
        }
        Config {
            quorum: self.quorum,
            required: 0,
            lease: self.lease,
            renew_interval: self.renew_interval.unwrap_or(self.lease / 3),
            node_timeout: self.node_timeout,
            connect_timeout: self.connect_timeout,
            drift_factor: self.drift_factor,
            backoff: self.backoff,
            key_prefix: self.key_prefix.clone(),
            layout: self.layout,
            max_hold: self.max_hold,
            queue_timeout: self.queue_timeout,
            replica_wait: self
                .replica_wait
                .map(|(replicas, timeout)| ReplicaWait { replicas, timeout }),
            events_buffer: self.events_buffer,
        }
        .validate(nodes)
    }

    /// Validates the settings, connects to every node in parallel and checks
    /// that each is a master, that no two are the same server, and its
    /// `maxmemory-policy` (a policy that can evict a lock's key is logged as
    /// a warning, or refused with
    /// [`require_noeviction`](Self::require_noeviction)).
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] for a malformed URL or a bad duration: a
    ///   zero one, a lease above [`MAX_LEASE`](crate::MAX_LEASE), a timeout
    ///   above [`MAX_TIMEOUT`](crate::MAX_TIMEOUT), a renew interval not below
    ///   the lease, a drift factor outside [0, 1), a
    ///   [`replica_wait`](Self::replica_wait) of 0 replicas or with a
    ///   timeout of zero or not below the node timeout;
    /// - [`Error::Config`] for no nodes, the same node twice (the same URL,
    ///   two URLs that reach the same server: same `run_id`, or a cluster
    ///   node given as a master and within a cluster member), a quorum of
    ///   0 or above the node count, or, with
    ///   [`require_noeviction`](Self::require_noeviction), a node whose
    ///   `maxmemory-policy` may evict keys;
    /// - [`Error::Connect`] listing every node that could not be reached
    ///   (with [`allow_unreachable`](Self::allow_unreachable): only when
    ///   fewer than a quorum could be reached);
    /// - [`Error::NotMaster`] for a replica;
    /// - for a member given with [`cluster`](Self::cluster):
    ///   [`Error::InvalidInput`] for no seed or a malformed seed URL,
    ///   [`Error::Config`] for a seed that is a standalone server, seeds that
    ///   disagree on the topology or do not cover every slot, the same
    ///   cluster as another member, or, with
    ///   [`replica_wait`](Self::replica_wait), a shard with fewer replicas
    ///   than it asks (or no cluster member at all); [`Error::Connect`] if it cannot be
    ///   reached (with `allow_unreachable`: as for a master). A node given with
    ///   [`node`](Self::node) that belongs to a cluster of several shards is
    ///   [`Error::Config`] too: add its cluster with `cluster`.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it closes the connections made so far.
    pub async fn build(self) -> Result<LockManager, Error> {
        let span = tracing::info_span!(
            "quorumlock.build",
            nodes =
                self.urls.len() + self.clients.len() + self.clusters.len() + self.sentinels.len()
        );
        tracing::Instrument::instrument(self.connect(), span).await
    }

    /// [`LockManagerBuilder::build`], in its span.
    async fn connect(self) -> Result<LockManager, Error> {
        #[cfg(feature = "tls-rustls")]
        install_crypto_provider();
        let specs = self.specs()?;
        let members = specs.len() + self.clusters.len() + self.sentinels.len();
        let config = self.config(members)?;
        if config.replica_wait.is_some() && self.clusters.is_empty() && self.sentinels.is_empty() {
            return Err(Error::Config(
                "replica_wait applies to cluster and Sentinel members, and none was given: add \
                 one with `cluster(seed_urls)` or `sentinel(sentinel_urls, master_name)`, or \
                 drop replica_wait"
                    .into(),
            ));
        }
        let connect_timeout = config.connect_timeout;
        let silence = config.silence();
        let (layout, prefix) = (config.layout, config.key_prefix.as_str());
        let results = futures::future::join_all(specs.iter().cloned().enumerate().map(
            |(i, spec)| async move {
                let node = RedisNode::connect(i, spec, connect_timeout)
                    .await?
                    .silent_after(silence);
                // Before any lock: a node that served the older layout
                // keeps its tokens increasing (see `adopt_legacy_fence`).
                node.adopt_legacy_fence(i, (layout, prefix), connect_timeout)
                    .await?;
                Ok::<_, Error>(node)
            },
        ))
        .await;
        let admission = Arc::new(Admission::new(members, self.require_noeviction));
        let mut nodes: Vec<Arc<dyn NodeOps>> = Vec::new();
        let mut failures = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(node) => {
                    admission
                        .admit(i, &specs[i].addr, &node.info())
                        .map_err(Error::Config)?;
                    nodes.push(Arc::new(Member::new(node)));
                }
                Err(Error::Connect { failures: f }) if self.allow_unreachable => {
                    tracing::warn!(node = i, addr = %specs[i].addr, "node unreachable at build; connecting on first use");
                    failures.extend(f);
                    let lazy = RedisNode::lazy(
                        i,
                        specs[i].clone(),
                        connect_timeout,
                        Arc::clone(&admission),
                    )?
                    .silent_after(silence);
                    nodes.push(Arc::new(Member::new(lazy)));
                }
                Err(Error::Connect { failures: f }) => failures.extend(f),
                Err(e) => return Err(e),
            }
        }
        let clusters = futures::future::join_all(
            self.clusters
                .iter()
                .enumerate()
                .map(|(k, member)| ClusterNode::connect(specs.len() + k, member, &config)),
        )
        .await;
        for (k, r) in clusters.into_iter().enumerate() {
            let i = specs.len() + k;
            match r {
                Ok(node) => {
                    admission
                        .admit(i, Server::addr(&node), &node.info())
                        .map_err(Error::Config)?;
                    nodes.push(Arc::new(Member::new(node)));
                }
                Err(Error::Connect { failures: f }) if self.allow_unreachable => {
                    let addr = f.first().map(|f| f.addr.clone()).unwrap_or_default();
                    tracing::warn!(node = i, %addr, "cluster member unreachable at build; connecting in the background");
                    let member = self.clusters[k].clone();
                    let admission = Arc::clone(&admission);
                    let lazy = LazyCluster::start(i, addr, member, config.clone(), admission);
                    nodes.push(Arc::new(Member::new(lazy)));
                    failures.extend(f);
                }
                Err(Error::Connect { failures: f }) => failures.extend(f),
                Err(e) => return Err(e),
            }
        }
        let first = specs.len() + self.clusters.len();
        let found = (&mut nodes, &mut failures);
        sentinel::connect(&self, first, &config, &admission, found).await?;
        // A Sentinel member that did not answer lists each of its sentinels.
        let mut down: Vec<usize> = failures.iter().map(|f| f.node).collect();
        down.sort_unstable();
        down.dedup();
        let reachable = members.saturating_sub(down.len());
        if !failures.is_empty() && (!self.allow_unreachable || reachable < config.required) {
            return Err(Error::Connect { failures });
        }
        Ok(LockManager {
            inner: Inner::start(config, nodes, failures),
        })
    }

    /// Builds over the nodes given, with the settings validated as by
    /// `build()` (unit tests, the simulator). URLs and clients set on the
    /// builder are not used.
    #[cfg(test)]
    pub(crate) fn build_with(self, nodes: Vec<Arc<dyn NodeOps>>) -> Result<LockManager, Error> {
        let config = self.config(nodes.len())?;
        Ok(LockManager {
            inner: Inner::start(config, nodes, Vec::new()),
        })
    }
}

/// Installs rustls' ring crypto provider as the process default, once, unless
/// the application installed one first: rustls cannot pick one by itself when
/// the dependency tree enables several (or none), and would panic on the
/// first `rediss://` connection.
#[cfg(feature = "tls-rustls")]
fn install_crypto_provider() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // An error means a provider is already installed: keep it.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}
