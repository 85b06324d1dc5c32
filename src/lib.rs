//! Reentrant distributed locks over N independent Redis masters.
//!
//! A [`LockManager`] sends a hash-per-lock acquire script (Redisson's) to
//! every master in parallel, returns as soon as a [`Quorum`] is decided,
//! subtracts elapsed time and clock drift from the lease, and rolls partial
//! grants back on every node, also when the acquiring future is dropped. One
//! watchdog per manager renews every held lock and tells the holder, through
//! [`LockGuard::lost`], when the lock is lost. Waiters wake on release
//! messages instead of polling, and every grant carries a fencing token
//! ([`LockGuard::fencing_token`]).
//!
//! # Quickstart
//!
//! ```rust,no_run
//! use std::time::Duration;
//! use quorumlock::{LockManager, Quorum};
//!
//! # #[tokio::main]
//! # async fn main() -> Result<(), quorumlock::Error> {
//! let locks = LockManager::builder()
//!     .nodes([
//!         "redis://127.0.0.1:7001",
//!         "redis://127.0.0.1:7002",
//!         "redis://127.0.0.1:7003",
//!     ])
//!     .quorum(Quorum::Majority)
//!     .build()
//!     .await?; // connects to every node, refuses replicas
//!
//! // Wait until held; renewed by the watchdog until released.
//! let guard = locks.lock("orders:42").await?;
//! let token = guard.fencing_token(); // pass it to the resource you protect
//! # let _ = token;
//!
//! // Stop working when the lock is lost.
//! tokio::select! {
//!     () = guard.lost() => eprintln!("lock lost: stop writing"),
//!     () = tokio::time::sleep(Duration::from_secs(1)) => {}
//! }
//! guard.release().await?;
//!
//! // Re-entry is explicit: an `Owner` re-enters its own hold.
//! let me = locks.new_owner();
//! let outer = locks.request("orders:7").owner(&me).acquire().await?;
//! let again = me.scope(locks.lock("orders:7")).await?;
//! assert_eq!(again.hold_count(), 2);
//! again.release().await?;
//! outer.release().await?;
//!
//! // Several names at once, all or none, in any order: no deadlock.
//! let both = locks.lock_all(["account:7", "account:9"]).await?;
//! both.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! # Modes
//!
//! | quorum | nodes that must grant | known as |
//! | --- | --- | --- |
//! | [`Quorum::Majority`] | N/2 + 1 | RedLock (Redisson `RedissonRedLock`) |
//! | [`Quorum::All`] | N | MultiLock (Redisson `RedissonMultiLock`) |
//! | [`Quorum::AtLeast`]`(k)` | k, 1 ≤ k ≤ N | general case; N = k = 1 is a plain Redisson `RLock` |
//!
//! Mutual exclusion needs any two quorums to share a node (2k > N);
//! [`Quorum::is_exclusive`] says whether a choice is safe. A member may also
//! be a whole Redis Cluster ([`LockManagerBuilder::cluster`]), and
//! [`Layout::Redisson`] shares locks with Java services on Redisson.
//!
//! # Conventions
//!
//! - **Cancel safety.** Every async function documents `# Cancel safety`:
//!   a dropped acquisition rolls back its grants on every node, and a
//!   dropped `release()` still releases.
//! - **Errors.** One `#[non_exhaustive]` [`Error`] tells contention,
//!   unavailable nodes, loss and bad input apart (see
//!   [`Error::is_contended`], [`Error::is_retryable`]); every fallible
//!   function documents `# Errors`.
//!
//! # Main types
//!
//! - [`LockManager`], built with [`LockManagerBuilder`]: the entry point
//!   ([`LockManager::lock`], [`LockManager::try_lock`],
//!   [`LockManager::request`], [`LockManager::lock_all`],
//!   [`LockManager::status`], [`LockManager::events`]).
//! - [`LockGuard`] and [`MultiLockGuard`]: a held lock or set, with its
//!   fencing token and loss signal.
//! - [`Election`] ([`LockManager::election`]): leader election, a
//!   [`Leadership`] with its term, the [`Leader`] a quorum agrees on.
//! - [`Owner`]: who re-enters a hold.
//! - [`LockStatus`], [`LockEvents`], [`WatchdogStats`], [`PubSubStats`]:
//!   what the nodes and the manager tell.
//!
//! # Cargo features
//!
//! - `cli` (default): the `quorumlock` command (`exec`, `status`, `top`,
//!   `unlock --force`).
//! - `metrics`: metrics through the `metrics` facade, to any exporter.
//! - `tls-rustls`: `rediss://` URLs over rustls.
//!
//! # Guides
//!
//! The source repository, and the published crate, have longer guides in
//! `docs/`:
//!
//! - `docs/SAFETY.md`: what a Redis lock can and cannot promise, the tests
//!   behind every promise, and what fencing tokens can be compared with;
//! - `docs/FEATURES.md`: every feature in full (re-entry, sets, waiting,
//!   the fair lock, the watchdog, loss, ordering, outages);
//! - `docs/ELECTION.md`: leader election, its promises and their tests;
//! - `docs/CLUSTER.md`: members that are Redis Clusters;
//! - `docs/REDISSON.md`: sharing locks with Redisson;
//! - `docs/OBSERVABILITY.md`: `status` and `top`, metrics, tracing, events;
//! - `docs/CLI.md`: the command-line tool;
//! - `docs/BENCHMARKS.md`: the current figures against rslock and a raw
//!   fan-out floor, each with its command.
#![doc(test(attr(deny(warnings))))]

// The README and the guides' examples are doctests too.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}
#[cfg(doctest)]
#[doc = include_str!("../docs/CLUSTER.md")]
mod cluster_guide {}
#[cfg(doctest)]
#[doc = include_str!("../docs/SENTINEL.md")]
mod sentinel_guide {}
#[cfg(doctest)]
#[doc = include_str!("../docs/ELECTION.md")]
mod election_guide {}
#[cfg(doctest)]
#[doc = include_str!("../docs/PRIMITIVES.md")]
mod primitives_guide {}
#[cfg(doctest)]
#[doc = include_str!("../docs/OBSERVABILITY.md")]
mod observability_guide {}
#[cfg(doctest)]
#[doc = include_str!("../docs/REDISSON.md")]
mod redisson_guide {}

// Modules in tiers, from the leaves up, one group per tier, as the table
// of docs/ARCHITECTURE.md lists them (the test `tests::tiers` holds the
// code, this list and that table to one another): a module imports only
// modules of the tiers above its own, never one of its own tier or below,
// so no two modules import each other. Test-only: `hooks`, the switches
// the simulator turns (a leaf, so that production code never imports
// `sim`), and at the end `tests` (the fakes, and the tests that drive the
// real code over them; unit tests such as `wait`'s use them too) and
// `sim` (the simulator, over the fakes of `tests`).
mod clock;
#[cfg(test)]
mod hooks;
mod rng;

mod admission;
mod error;
mod layout;
mod scripts;
mod sync;

mod config;
mod keys;
mod owner;
mod telemetry;

pub mod fenced;
mod node;

mod places;
mod quorum;
mod resume;
mod status;

mod members;

mod events;
mod hold;
mod leader;
mod wait;

mod guard;
mod reentry;
mod watchdog;

mod acquire;
mod multi;

mod shared;

mod builder;
mod request;

mod election;
mod rw_lock;
mod semaphore;

mod manager;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod sim;

#[cfg(test)]
mod model;

pub use crate::builder::LockManagerBuilder;
pub use crate::config::{
    Backoff, Config, Quorum, ReplicaWait, MAX_EVENTS_BUFFER, MAX_LEASE, MAX_TIMEOUT,
};
pub use crate::election::{Election, Leadership};
pub use crate::error::{Error, NodeErrorKind, NodeFailure, TakenNode};
pub use crate::events::{LockEvent, LockEvents};
pub use crate::fenced::{Fence, FencedWrite};
pub use crate::guard::{LockGuard, LossSignal};
pub use crate::hold::HoldState;
pub use crate::keys::lock_slot;
pub use crate::keys::{fence_counter_key, MAX_LOCK_ALL_NAMES, MAX_NAME_LEN};
pub use crate::layout::Layout;
pub use crate::leader::{Leader, MAX_LEADER_VALUE};
pub use crate::multi::MultiLockGuard;
pub use crate::node::NodeLockState;
pub use crate::owner::{HolderInfo, Owner};
pub use crate::request::{LockRequest, MultiLockRequest, NameSet, OneName, Request};
pub use crate::rw_lock::{ReadGuard, RwLock, WriteGuard};
pub use crate::semaphore::{Permit, Semaphore, MAX_PERMITS};
pub use crate::shared::LockManager;
pub use crate::status::{LockStatus, NodeStatus};
pub use crate::wait::PubSubStats;
pub use crate::watchdog::WatchdogStats;
pub use redis;
