//! Where a lock lives on a node, and what its release says to waiters
//! outside quorumlock: the key layout chosen on the builder
//! ([`LockManagerBuilder::layout`](crate::LockManagerBuilder::layout)).
//! `keys` builds every key name from it; nothing else reads it. Tools that
//! read the nodes directly (the CLI's `status` and `top`) ask it for the
//! key names too: [`Layout::lock_key`], [`Layout::queue_keys`].

/// The channel prefix of Redisson's `RLock`: its waiters listen on
/// `redisson_lock__channel:{<name>}`.
const REDISSON_CHANNEL: &str = "redisson_lock__channel:";

/// The message Redisson's `RLock` publishes when it unlocks (its waiters
/// act on this one only).
pub(crate) const REDISSON_UNLOCK: &str = "0";

/// How a manager lays out a lock's keys on every node.
///
/// The layout decides the lock's key and the channel a release publishes
/// on; the fence counter and the waiters' queue are quorumlock's own keys,
/// under the [key prefix](crate::LockManagerBuilder::key_prefix), in the
/// lock's hash slot, in both layouts. Managers that share locks must use
/// the same layout (and, for [`Layout::Quorumlock`], the same prefix).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layout {
    /// quorumlock's own layout: the lock is the hash `<prefix>{<name>}`, a
    /// release publishes `<waiter> <releaser>` on `<prefix>{<name>}:released`.
    #[default]
    Quorumlock,
    /// Redisson's `RLock` layout, so that Redisson clients (an `RLock`, a
    /// `RedissonRedLock`, a `RedissonMultiLock`) and quorumlock managers on
    /// the same masters exclude and wake each other: the lock is the hash at
    /// the name itself (no prefix, no braces), whose fields are holder ids
    /// (quorumlock's own, or Redisson's `<uuid>:<thread id>`: held by
    /// someone else). A release also publishes `0` on Redisson's channel
    /// `redisson_lock__channel:{<name>}` (what Redisson's waiters wait for;
    /// with `SPUBLISH` on a Redis Cluster member, as Redisson on a Redis 7
    /// cluster),
    /// and quorumlock's waiters listen there too, so a Redisson unlock wakes
    /// them. The name `<prefix>fence` is refused in this layout
    /// ([`Error::InvalidInput`](crate::Error::InvalidInput)): its lock would
    /// be quorumlock's own key (the fence counter of older versions). See
    /// docs/REDISSON.md for which quorums exclude which.
    Redisson,
}

impl Layout {
    /// Whether the lock keys of this layout can be told from other keys by
    /// their name alone, so that a `SCAN` with a pattern finds every lock:
    /// true for [`Layout::Quorumlock`] (`<prefix>{*}`), false for
    /// [`Layout::Redisson`], whose locks are hashes at bare names, like any
    /// other hash on the nodes.
    #[must_use]
    pub fn lock_keys_are_scannable(self) -> bool {
        matches!(self, Self::Quorumlock)
    }

    /// The lock key of `name`, whose quorumlock keys start with `base`
    /// (`<prefix>{<name>}`).
    pub(crate) fn key_at(self, base: &str, name: &str) -> String {
        match self {
            Self::Quorumlock => base.to_owned(),
            Self::Redisson => name.to_owned(),
        }
    }

    /// The channel of another client's waiters where a release also
    /// publishes [`REDISSON_UNLOCK`], if the layout has one.
    pub(crate) fn foreign_channel(self, name: &str) -> Option<String> {
        match self {
            Self::Quorumlock => None,
            Self::Redisson => Some(format!("{REDISSON_CHANNEL}{{{name}}}")),
        }
    }
}
