//! The validated configuration, the quorum policy and the retry backoff.

use std::time::Duration;

use crate::error::Error;
use crate::layout::Layout;

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
///
/// # Examples
///
/// ```
/// use quorumlock::Quorum;
///
/// assert_eq!(Quorum::Majority.required(5)?, 3);
/// assert_eq!(Quorum::All.required(5)?, 5);
/// assert!(!Quorum::AtLeast(2).is_exclusive(5)); // two quorums need not overlap
/// assert_eq!("majority".parse::<Quorum>()?, Quorum::Majority);
/// # Ok::<(), quorumlock::Error>(())
/// ```
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
        let reason = if min.is_zero() {
            "the minimum delay must be above 0".to_owned()
        } else if min > max {
            format!("minimum {min:?} is larger than maximum {max:?}")
        } else {
            return Ok(Self { min, max });
        };
        Err(Error::invalid("backoff", reason))
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

/// How a cluster member's writes that a quorum counts are confirmed on its
/// replicas (see
/// [`LockManagerBuilder::replica_wait`](crate::LockManagerBuilder::replica_wait)):
/// after each such script call, `WAIT replicas timeout` on the same shard
/// connection, and the write counts only if at least `replicas` replicas
/// acknowledged it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReplicaWait {
    /// Replicas of the shard that must acknowledge the write (at least 1).
    pub replicas: u32,
    /// How long the shard waits for them (`WAIT`'s timeout; above zero
    /// and below the node timeout).
    pub timeout: Duration,
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
    /// Prefix of every key of quorumlock's own (all of them in the default
    /// layout; the fence counters and queues in [`Layout::Redisson`]).
    pub key_prefix: String,
    /// Where a lock lives on a node and what its release publishes.
    pub layout: Layout,
    /// Stop renewing a watchdog lock after this total hold time.
    pub max_hold: Option<Duration>,
    /// How long a queued waiter may go without a call to the nodes before
    /// the lock's queue skips it (a waiter whose process died). Live
    /// waiters refresh their place every third of it.
    pub queue_timeout: Duration,
    /// On cluster members, a grant, a re-entry, a renewal, a repair or a
    /// fence raise counts only once `WAIT` confirms it on this many
    /// replicas; `None` (the default): as soon as the shard's master
    /// answers.
    pub replica_wait: Option<ReplicaWait>,
    /// Events a [`LockEvents`](crate::LockEvents) stream keeps for its
    /// reader before it drops newer ones (and tells how many).
    pub events_buffer: usize,
}

/// Largest [`events_buffer`](crate::LockManagerBuilder::events_buffer)
/// accepted: `build()` refuses a larger one with [`Error::InvalidInput`].
pub const MAX_EVENTS_BUFFER: usize = 1 << 20;

/// Fixed part of the drift: 2 ms, as in the RedLock spec.
pub(crate) const DRIFT_FLOOR: Duration = Duration::from_millis(2);

/// Longest lease accepted.
pub const MAX_LEASE: Duration = Duration::from_secs(30 * 24 * 3600);

/// How many call timeouts a release's answers have (see
/// `Members::release_quorum`).
pub(crate) const RELEASE_PATIENCE: u32 = 2;

/// Longest [`node_timeout`](crate::LockManagerBuilder::node_timeout) and
/// [`connect_timeout`](crate::LockManagerBuilder::connect_timeout) accepted: one
/// hour. `build()` refuses a longer one with [`Error::InvalidInput`].
pub const MAX_TIMEOUT: Duration = Duration::from_secs(3600);

impl Config {
    /// The drift allowance for a lease: `lease × drift_factor + 2 ms`,
    /// saturating at `Duration::MAX` (it never panics, whatever the lease).
    #[must_use]
    pub fn drift(&self, lease: Duration) -> Duration {
        drift(lease, self.drift_factor)
    }

    /// How long a master may leave every script call unanswered before
    /// its calls fail at once but for a probe (`Breaker::silent_after`):
    /// every caller has given up on a call by then, a release last, after
    /// [`RELEASE_PATIENCE`] node timeouts.
    pub(crate) fn silence(&self) -> Duration {
        self.node_timeout.saturating_mul(RELEASE_PATIENCE)
    }

    /// Checks a lease against this configuration.
    pub(crate) fn check_lease(&self, lease: Duration) -> Result<(), Error> {
        check_lease(lease, self.drift_factor)
    }

    /// Checks every setting for a manager over `nodes` nodes and derives
    /// [`required`](Self::required) from the quorum: the one validation of
    /// the settings, whether the nodes are given by URL, as clients or as
    /// ready nodes.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] for a quorum that `nodes` cannot meet;
    /// [`Error::InvalidInput`] for a drift factor outside [0, 1), a lease
    /// [`check_lease`] refuses, a renew interval of zero or not below the
    /// lease, a zero timeout or one above [`MAX_TIMEOUT`], a key prefix with
    /// a brace, a zero `max_hold`, a [`ReplicaWait`] of no replica, or
    /// whose timeout is zero or not below the node timeout, or an events
    /// buffer of 0 or above [`MAX_EVENTS_BUFFER`].
    pub(crate) fn validate(mut self, nodes: usize) -> Result<Self, Error> {
        self.required = self.quorum.required(nodes)?;
        let factor = self.drift_factor;
        if !factor.is_finite() || !(0.0..1.0).contains(&factor) {
            let reason = format!("{factor} is not in [0, 1)");
            return Err(Error::invalid("drift factor", reason));
        }
        check_lease(self.lease, factor)?;
        let (renew, lease) = (self.renew_interval, self.lease);
        if renew.is_zero() || renew >= lease {
            let reason = format!("{renew:?} must be above zero and below the lease {lease:?}");
            return Err(Error::invalid("renew interval", reason));
        }
        for (what, t) in [
            ("node timeout", self.node_timeout),
            ("connect timeout", self.connect_timeout),
            ("queue timeout", self.queue_timeout),
        ] {
            if t.is_zero() {
                return Err(Error::invalid(what, "must be above zero"));
            }
            if t > MAX_TIMEOUT {
                let reason = format!("{t:?} is longer than the maximum of {MAX_TIMEOUT:?}");
                return Err(Error::invalid(what, reason));
            }
        }
        if self.key_prefix.contains(['{', '}']) {
            let reason = "must not contain '{' or '}' (the lock name is the hash tag)";
            return Err(Error::invalid("key prefix", reason));
        }
        if self.max_hold.is_some_and(|m| m.is_zero()) {
            return Err(Error::invalid("max hold", "must be above zero"));
        }
        if let Some(wait) = self.replica_wait {
            check_replica_wait(wait, self.node_timeout)?;
        }
        if !(1..=MAX_EVENTS_BUFFER).contains(&self.events_buffer) {
            let reason = format!("{} is not in 1..={MAX_EVENTS_BUFFER}", self.events_buffer);
            return Err(Error::invalid("events buffer", reason));
        }
        Ok(self)
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

/// A `WAIT` of at least one replica, for a time above zero (`WAIT`'s 0
/// blocks for ever) and below the node timeout: the grant and its `WAIT`
/// are answered within one call.
fn check_replica_wait(wait: ReplicaWait, node_timeout: Duration) -> Result<(), Error> {
    let timeout = wait.timeout;
    let reason = if wait.replicas == 0 {
        "confirms nothing with 0 replicas: ask for at least 1".to_owned()
    } else if timeout.is_zero() {
        "a timeout of zero would block the shard's connection for ever".to_owned()
    } else if timeout >= node_timeout {
        format!(
            "its timeout {timeout:?} must be below the node timeout {node_timeout:?}, which \
             bounds the grant and its WAIT together"
        )
    } else {
        return Ok(());
    };
    Err(Error::invalid("replica wait", reason))
}

pub(crate) fn check_lease(lease: Duration, factor: f64) -> Result<(), Error> {
    let drift = drift(lease, factor);
    let reason = if lease.is_zero() {
        "a lease of zero cannot hold a lock".to_owned()
    } else if lease > MAX_LEASE {
        format!("{lease:?} is longer than the maximum of {MAX_LEASE:?}")
    } else if lease <= drift {
        format!("{lease:?} is not larger than the clock drift allowance {drift:?}")
    } else {
        return Ok(());
    };
    Err(Error::invalid("lease", reason))
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
    fn replica_wait_checks() {
        let node = Duration::from_millis(200);
        let wait = |replicas, ms| ReplicaWait {
            replicas,
            timeout: Duration::from_millis(ms),
        };
        assert!(check_replica_wait(wait(1, 50), node).is_ok());
        assert!(check_replica_wait(wait(u32::MAX, 199), node).is_ok());
        for bad in [wait(0, 50), wait(1, 0), wait(1, 200), wait(2, 1_000)] {
            let err = check_replica_wait(bad, node).expect_err("refused");
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "replica wait",
                        ..
                    }
                ),
                "{err}"
            );
        }
        let forever = ReplicaWait {
            replicas: 1,
            timeout: Duration::MAX,
        };
        assert!(check_replica_wait(forever, node).is_err());
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
}
