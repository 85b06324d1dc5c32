//! The builder, the quorum policy and the retry backoff, all validated.

use std::time::Duration;

use crate::error::Error;

/// How many nodes must grant a lock.
///
/// | policy | nodes required | known as |
/// | --- | --- | --- |
/// | `Majority` | N/2 + 1 | RedLock |
/// | `All` | N | MultiLock |
/// | `AtLeast(k)` | k, 1 <= k <= N | general; k = N = 1 is a plain lock |
///
/// Mutual exclusion needs any two quorums to share a node: `2k > N`. The
/// builder accepts smaller `k` (useful for availability experiments) but
/// [`Quorum::is_exclusive`] tells whether the choice is safe.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Quorum {
    /// More than half of the nodes (RedLock).
    #[default]
    Majority,
    /// Every node (MultiLock).
    All,
    /// At least this many nodes.
    AtLeast(usize),
}

impl Quorum {
    /// The number of grants needed among `n` nodes.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] when `n` is 0, or `AtLeast(k)` has `k` of 0 or above `n`.
    pub fn required(self, n: usize) -> Result<usize, Error> {
        if n == 0 {
            return Err(Error::Config("at least one node is required".into()));
        }
        match self {
            Self::Majority => Ok(n / 2 + 1),
            Self::All => Ok(n),
            Self::AtLeast(0) => Err(Error::Config("a quorum of 0 nodes grants nothing".into())),
            Self::AtLeast(k) if k > n => Err(Error::Config(format!(
                "a quorum of {k} is larger than the {n} node(s) given"
            ))),
            Self::AtLeast(k) => Ok(k),
        }
    }

    /// Whether two holders can never both reach this quorum among `n` nodes.
    #[must_use]
    pub fn is_exclusive(self, n: usize) -> bool {
        // `2k > n`, without overflowing for any `n` (k <= n here).
        self.required(n).is_ok_and(|k| k > n - k)
    }
}

impl std::str::FromStr for Quorum {
    type Err = Error;

    /// Parses `majority`, `all`, or a number `k`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "majority" => Ok(Self::Majority),
            "all" => Ok(Self::All),
            other => other.parse::<usize>().map(Self::AtLeast).map_err(|_| {
                Error::invalid(
                    "quorum",
                    format!("{s:?}: expected `majority`, `all` or a number"),
                )
            }),
        }
    }
}

/// Bounds of the jittered, exponential delay between attempts.
///
/// Attempt `i` sleeps a uniformly random time in `[d/2, d]` where
/// `d = min(max, min * 2^i)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    min: Duration,
    max: Duration,
}

impl Backoff {
    /// A backoff from `min` to `max`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] when `min` is zero or `min > max`.
    pub fn new(min: Duration, max: Duration) -> Result<Self, Error> {
        if min.is_zero() {
            return Err(Error::invalid(
                "backoff",
                "the minimum delay must be above 0",
            ));
        }
        if min > max {
            return Err(Error::invalid(
                "backoff",
                format!("minimum {min:?} is larger than maximum {max:?}"),
            ));
        }
        Ok(Self { min, max })
    }

    /// The smallest delay.
    #[must_use]
    pub fn min(&self) -> Duration {
        self.min
    }

    /// The largest delay.
    #[must_use]
    pub fn max(&self) -> Duration {
        self.max
    }

    /// The ceiling of the delay before attempt `attempt` (0-based), before jitter.
    #[must_use]
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let factor = 1u32.checked_shl(attempt.min(20)).unwrap_or(u32::MAX);
        self.min.saturating_mul(factor).min(self.max)
    }

    /// A jittered delay for attempt `attempt`: uniform in `[ceiling/2, ceiling]`.
    #[must_use]
    pub fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling(attempt);
        let low = ceiling / 2;
        let span = ceiling.saturating_sub(low).as_micros();
        let span = u64::try_from(span).unwrap_or(u64::MAX);
        low + Duration::from_micros(crate::rng::up_to(span))
    }
}

impl Default for Backoff {
    fn default() -> Self {
        Self {
            min: Duration::from_millis(10),
            max: Duration::from_millis(200),
        }
    }
}

/// The validated settings of a manager. Read them with [`crate::LockManager::config`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Config {
    /// The quorum policy.
    pub quorum: Quorum,
    /// Grants required, derived from `quorum` and the node count.
    pub required: usize,
    /// The lease of watchdog locks (renewed) and the default of `try_lock`.
    pub lease: Duration,
    /// The watchdog's period; `lease / 3` unless set.
    pub renew_interval: Duration,
    /// The timeout of one call to one node.
    pub node_timeout: Duration,
    /// The timeout of connecting to a node in `build()`.
    pub connect_timeout: Duration,
    /// Clock drift factor: drift = lease × factor + 2 ms.
    pub drift_factor: f64,
    /// Delays between attempts while waiting.
    pub backoff: Backoff,
    /// Prefix of every key.
    pub key_prefix: String,
    /// Stop renewing a watchdog lock after this total hold time.
    pub max_hold: Option<Duration>,
}

/// Fixed part of the drift: 2 ms, as in the RedLock spec.
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Longest lock name, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// Longest lease accepted.
pub const MAX_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);

/// Longest [`node_timeout`](LockManagerBuilder::node_timeout) and
/// [`connect_timeout`](LockManagerBuilder::connect_timeout) accepted: one
/// hour. `build()` refuses a longer one with [`Error::InvalidInput`].
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

impl Config {
    /// The drift allowance for a lease: `lease × drift_factor + 2 ms`,
    /// saturating at `Duration::MAX` (it never panics, whatever the lease).
    #[must_use]
    pub fn drift(&self, lease: Duration) -> Duration {
        drift(lease, self.drift_factor)
    }

    /// Checks a lease against this configuration.
    pub(crate) fn check_lease(&self, lease: Duration) -> Result<(), Error> {
        check_lease(lease, self.drift_factor)
    }
}

pub(crate) fn drift(lease: Duration, factor: f64) -> Duration {
    // `mul_f64` panics on overflow, NaN and negative factors; a factor that
    // made it past `build()` is in [0, 1), but `Config`'s fields are public.
    let product = lease.as_secs_f64() * factor;
    let scaled = Duration::try_from_secs_f64(product).unwrap_or(if product > 0.0 {
        Duration::MAX
    } else {
        Duration::ZERO
    });
    scaled.saturating_add(DRIFT_FLOOR)
}

pub(crate) fn check_lease(lease: Duration, factor: f64) -> Result<(), Error> {
    if lease.is_zero() {
        return Err(Error::invalid(
            "lease",
            "a lease of zero cannot hold a lock",
        ));
    }
    if lease > MAX_LEASE {
        return Err(Error::invalid(
            "lease",
            format!("{lease:?} is longer than the maximum of {MAX_LEASE:?}"),
        ));
    }
    let drift = drift(lease, factor);
    if lease <= drift {
        return Err(Error::invalid(
            "lease",
            format!("{lease:?} is not larger than the clock drift allowance {drift:?}"),
        ));
    }
    Ok(())
}

/// Checks a lock name: non-empty, at most [`MAX_NAME_LEN`] bytes, and free of
/// `{` and `}` (the name becomes the key's hash tag).
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::invalid("lock name", "the name is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::invalid(
            "lock name",
            format!("{} bytes is longer than {MAX_NAME_LEN}", name.len()),
        ));
    }
    if name.contains(['{', '}']) {
        return Err(Error::invalid(
            "lock name",
            format!("{name:?} contains '{{' or '}}', which would break its hash tag"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "lock name",
            format!("{name:?} contains a control character"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majority_all_and_at_least() {
        assert_eq!(Quorum::Majority.required(5).ok(), Some(3));
        assert_eq!(Quorum::Majority.required(4).ok(), Some(3));
        assert_eq!(Quorum::Majority.required(1).ok(), Some(1));
        assert_eq!(Quorum::All.required(5).ok(), Some(5));
        assert_eq!(Quorum::AtLeast(2).required(5).ok(), Some(2));
        assert!(Quorum::AtLeast(0).required(5).is_err());
        assert!(Quorum::AtLeast(6).required(5).is_err());
        assert!(Quorum::Majority.required(0).is_err());
        assert!(Quorum::Majority.is_exclusive(5));
        assert!(Quorum::All.is_exclusive(2));
        assert!(!Quorum::AtLeast(2).is_exclusive(5));
        assert!(Quorum::AtLeast(3).is_exclusive(5));
    }

    #[test]
    fn quorum_parses() {
        assert_eq!("majority".parse::<Quorum>().ok(), Some(Quorum::Majority));
        assert_eq!("ALL".parse::<Quorum>().ok(), Some(Quorum::All));
        assert_eq!("3".parse::<Quorum>().ok(), Some(Quorum::AtLeast(3)));
        assert!("most".parse::<Quorum>().is_err());
        assert!("-1".parse::<Quorum>().is_err());
    }

    #[test]
    fn backoff_validates_and_stays_in_bounds() {
        assert!(Backoff::new(Duration::ZERO, Duration::from_millis(5)).is_err());
        assert!(Backoff::new(Duration::from_millis(6), Duration::from_millis(5)).is_err());
        let b = Backoff::new(Duration::from_millis(10), Duration::from_millis(100))
            .expect("valid backoff");
        assert_eq!(b.ceiling(0), Duration::from_millis(10));
        assert_eq!(b.ceiling(2), Duration::from_millis(40));
        assert_eq!(b.ceiling(40), Duration::from_millis(100));
        for attempt in 0..50 {
            let d = b.delay(attempt);
            assert!(
                d >= b.ceiling(attempt) / 2 && d <= b.ceiling(attempt),
                "{d:?}"
            );
        }
    }

    #[test]
    fn lease_checks() {
        assert!(check_lease(Duration::ZERO, 0.01).is_err());
        assert!(check_lease(Duration::from_millis(2), 0.01).is_err());
        assert!(check_lease(Duration::from_millis(3), 0.01).is_ok());
        assert!(check_lease(Duration::from_secs(10), 0.99).is_ok());
        assert!(check_lease(Duration::from_secs(10), 1.0).is_err());
        assert!(check_lease(MAX_LEASE + Duration::from_secs(1), 0.01).is_err());
    }

    #[test]
    fn quorum_and_drift_take_any_value() {
        assert!(Quorum::All.is_exclusive(usize::MAX));
        assert!(Quorum::Majority.is_exclusive(usize::MAX));
        assert!(!Quorum::AtLeast(usize::MAX / 2).is_exclusive(usize::MAX));
        assert!(Quorum::AtLeast(usize::MAX).required(3).is_err());
        assert_eq!(drift(Duration::MAX, 0.0), DRIFT_FLOOR);
        assert!(drift(Duration::MAX, 0.999_999_999) > Duration::from_secs(u64::MAX / 2));
        assert_eq!(drift(Duration::MAX, 1.0), Duration::MAX);
        assert_eq!(drift(Duration::MAX, f64::INFINITY), Duration::MAX);
        assert_eq!(drift(Duration::MAX, f64::NAN), DRIFT_FLOOR);
        assert_eq!(drift(Duration::MAX, -1.0), DRIFT_FLOOR);
        assert_eq!(
            drift(Duration::from_secs(10), 0.01),
            Duration::from_millis(102)
        );
        assert!(check_lease(Duration::MAX, 0.5).is_err());
    }

    #[test]
    fn name_checks() {
        assert!(check_name("").is_err());
        assert!(check_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
        assert!(check_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
        assert!(check_name("a{b}").is_err());
        assert!(check_name("line\nbreak").is_err());
        assert!(check_name("orders:42").is_ok());
    }
}

/// Builds a [`crate::LockManager`]; every setter is infallible and
/// [`build`](Self::build) validates everything at once.
///
/// Defaults: `Quorum::Majority`, lease 30 s renewed every 10 s, per-node
/// timeout 200 ms, connect timeout 2 s, drift factor 0.01, backoff 10–200 ms,
/// key prefix `quorumlock:`, no `max_hold`.
#[derive(Clone)]
#[must_use = "a builder does nothing until `build` is awaited"]
pub struct LockManagerBuilder {
    urls: Vec<String>,
    clients: Vec<redis::Client>,
    quorum: Quorum,
    lease: Duration,
    renew_interval: Option<Duration>,
    node_timeout: Duration,
    connect_timeout: Duration,
    drift_factor: f64,
    backoff: Backoff,
    key_prefix: String,
    max_hold: Option<Duration>,
    allow_unreachable: bool,
    require_noeviction: bool,
}

impl std::fmt::Debug for LockManagerBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.urls.iter().map(|u| crate::node::redact(u)).collect();
        f.debug_struct("LockManagerBuilder")
            .field("urls", &urls)
            .field("clients", &self.clients.len())
            .field("quorum", &self.quorum)
            .field("lease", &self.lease)
            .field("renew_interval", &self.renew_interval)
            .field("node_timeout", &self.node_timeout)
            .field("drift_factor", &self.drift_factor)
            .field("key_prefix", &self.key_prefix)
            .field("max_hold", &self.max_hold)
            .field("allow_unreachable", &self.allow_unreachable)
            .field("require_noeviction", &self.require_noeviction)
            .finish_non_exhaustive()
    }
}

impl Default for LockManagerBuilder {
    fn default() -> Self {
        Self {
            urls: Vec::new(),
            clients: Vec::new(),
            quorum: Quorum::Majority,
            lease: Duration::from_secs(30),
            renew_interval: None,
            node_timeout: Duration::from_millis(200),
            connect_timeout: Duration::from_secs(2),
            drift_factor: 0.01,
            backoff: Backoff::default(),
            key_prefix: "quorumlock:".to_owned(),
            max_hold: None,
            allow_unreachable: false,
            require_noeviction: false,
        }
    }
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

    /// The quorum policy.
    pub fn quorum(mut self, quorum: Quorum) -> Self {
        self.quorum = quorum;
        self
    }

    /// The lease of renewed locks (`lock`, `try_lock`).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease;
        self
    }

    /// The watchdog's period (default: lease / 3).
    pub fn renew_interval(mut self, interval: Duration) -> Self {
        self.renew_interval = Some(interval);
        self
    }

    /// The timeout of one call to one node (above zero, at most
    /// [`MAX_TIMEOUT`]; `build()` checks). Calls made under a lease are also
    /// bounded by that lease.
    pub fn node_timeout(mut self, timeout: Duration) -> Self {
        self.node_timeout = timeout;
        self
    }

    /// The timeout of connecting to each node in `build`, and of each
    /// reconnection later (above zero, at most [`MAX_TIMEOUT`]; `build()`
    /// checks).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The clock drift factor (drift = lease × factor + 2 ms).
    pub fn drift_factor(mut self, factor: f64) -> Self {
        self.drift_factor = factor;
        self
    }

    /// The delays between attempts while waiting.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The prefix of every key (default `quorumlock:`).
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = prefix.into();
        self
    }

    /// Stop renewing a lock after it has been held this long (above zero;
    /// `Duration::MAX` renews for as long as the lock is held, as when unset).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Let `build` succeed while some nodes are down, as long as a quorum of
    /// them is reachable (default: every node must answer).
    ///
    /// The unreachable nodes are connected on first use and take part as soon
    /// as they answer; their role is checked then, and a node that turns out
    /// not to be a master is never used. A service can then start during a
    /// minority outage, as RedLock is meant to tolerate.
    pub fn allow_unreachable(mut self, allow: bool) -> Self {
        self.allow_unreachable = allow;
        self
    }

    /// Refuse every node whose `maxmemory-policy` is not `noeviction`
    /// (default: such a node is used, with a warning).
    ///
    /// Under any other policy Redis may evict a key that has a TTL when it
    /// runs out of memory, and every lock key has one: a held lock can vanish
    /// from the node without anyone releasing it. With this option `build()`
    /// fails with [`Error::Config`] naming the node and its policy; a node
    /// that will not tell its policy (`CONFIG GET` refused or renamed) is
    /// refused too, since it cannot be shown to be safe. A node connected
    /// later (see [`allow_unreachable`](Self::allow_unreachable)) is checked
    /// when it first answers and never used if it fails. The policy is not
    /// watched afterwards; [`crate::LockManager::status`] shows it per node.
    pub fn require_noeviction(mut self, require: bool) -> Self {
        self.require_noeviction = require;
        self
    }

    fn validate(&self) -> Result<(Config, Vec<crate::node::NodeSpec>), Error> {
        let mut specs = Vec::with_capacity(self.urls.len() + self.clients.len());
        for url in &self.urls {
            specs.push(crate::node::NodeSpec::from_url(url)?);
        }
        for client in &self.clients {
            specs.push(crate::node::NodeSpec::from_client(client)?);
        }
        if specs.is_empty() {
            return Err(Error::Config(
                "no nodes: add at least one with `node(url)` or `client(client)`".into(),
            ));
        }
        for (i, a) in specs.iter().enumerate() {
            if let Some(j) = specs[..i].iter().position(|b| b.identity == a.identity) {
                return Err(Error::Config(format!(
                    "node {i} ({}) is the same node as node {j}",
                    a.addr
                )));
            }
        }
        let required = self.quorum.required(specs.len())?;
        if !self.drift_factor.is_finite() || !(0.0..1.0).contains(&self.drift_factor) {
            return Err(Error::invalid(
                "drift factor",
                format!("{} is not in [0, 1)", self.drift_factor),
            ));
        }
        check_lease(self.lease, self.drift_factor)?;
        let renew_interval = self.renew_interval.unwrap_or(self.lease / 3);
        if renew_interval.is_zero() || renew_interval >= self.lease {
            return Err(Error::invalid(
                "renew interval",
                format!(
                    "{renew_interval:?} must be above zero and below the lease {:?}",
                    self.lease
                ),
            ));
        }
        for (what, t) in [
            ("node timeout", self.node_timeout),
            ("connect timeout", self.connect_timeout),
        ] {
            if t.is_zero() {
                return Err(Error::invalid(what, "must be above zero"));
            }
            if t > MAX_TIMEOUT {
                return Err(Error::invalid(
                    what,
                    format!("{t:?} is longer than the maximum of {MAX_TIMEOUT:?}"),
                ));
            }
        }
        if self.key_prefix.contains(['{', '}']) {
            return Err(Error::invalid(
                "key prefix",
                "must not contain '{' or '}' (the lock name is the hash tag)",
            ));
        }
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(Error::invalid("max hold", "must be above zero"));
        }
        Ok((
            Config {
                quorum: self.quorum,
                required,
                lease: self.lease,
                renew_interval,
                node_timeout: self.node_timeout,
                connect_timeout: self.connect_timeout,
                drift_factor: self.drift_factor,
                backoff: self.backoff,
                key_prefix: self.key_prefix.clone(),
                max_hold: self.max_hold,
            },
            specs,
        ))
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
    ///   zero one, a lease above [`MAX_LEASE`], a timeout above
    ///   [`MAX_TIMEOUT`], a renew interval not below the lease, a drift
    ///   factor outside [0, 1);
    /// - [`Error::Config`] for no nodes, the same node twice (the same URL,
    ///   or two URLs that reach the same server: same `run_id`), a quorum of
    ///   0 or above the node count, or, with
    ///   [`require_noeviction`](Self::require_noeviction), a node whose
    ///   `maxmemory-policy` may evict keys;
    /// - [`Error::Connect`] listing every node that could not be reached
    ///   (with [`allow_unreachable`](Self::allow_unreachable): only when
    ///   fewer than a quorum could be reached);
    /// - [`Error::NotMaster`] for a replica.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it closes the connections made so far.
    pub async fn build(self) -> Result<crate::LockManager, Error> {
        #[cfg(feature = "tls-rustls")]
        install_crypto_provider();
        let (config, specs) = self.validate()?;
        let connect_timeout = config.connect_timeout;
        let results = futures::future::join_all(
            specs
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, spec)| crate::node::RedisNode::connect(i, spec, connect_timeout)),
        )
        .await;
        let admission = std::sync::Arc::new(crate::admission::Admission::new(
            specs.len(),
            self.require_noeviction,
        ));
        let mut nodes: Vec<std::sync::Arc<dyn crate::node::NodeOps>> = Vec::new();
        let mut failures = Vec::new();
        for (i, r) in results.into_iter().enumerate() {
            match r {
                Ok(node) => {
                    admission
                        .admit(i, &specs[i].addr, &node.info())
                        .map_err(Error::Config)?;
                    nodes.push(std::sync::Arc::new(node));
                }
                Err(Error::Connect { failures: f }) if self.allow_unreachable => {
                    tracing::warn!(node = i, addr = %specs[i].addr, "node unreachable at build; connecting on first use");
                    failures.extend(f);
                    let lazy = crate::node::RedisNode::lazy(
                        i,
                        specs[i].clone(),
                        connect_timeout,
                        std::sync::Arc::clone(&admission),
                    )?;
                    nodes.push(std::sync::Arc::new(lazy));
                }
                Err(Error::Connect { failures: f }) => failures.extend(f),
                Err(e) => return Err(e),
            }
        }
        let reachable = specs.len() - failures.len();
        if !failures.is_empty() && (!self.allow_unreachable || reachable < config.required) {
            return Err(Error::Connect { failures });
        }
        Ok(crate::LockManager::from_parts(config, nodes))
    }

    /// Builds over fake nodes (unit tests).
    #[cfg(test)]
    pub(crate) fn build_with(
        self,
        nodes: Vec<std::sync::Arc<dyn crate::node::NodeOps>>,
    ) -> Result<crate::LockManager, Error> {
        let mut this = self;
        this.urls.clear();
        this.clients.clear();
        let n = nodes.len();
        let mut probe = this.clone();
        probe.urls = (0..n)
            .map(|i| format!("redis://127.0.0.1:{}", 1 + i))
            .collect();
        let (config, _) = probe.validate()?;
        Ok(crate::LockManager::from_parts(config, nodes))
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
