#![doc = include_str!("../README.md")]
#![doc(test(attr(deny(warnings))))]

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

mod node;

mod quorum;
mod resume;
mod status;

mod members;

mod events;
mod hold;
mod wait;

mod guard;
mod reentry;
mod watchdog;

mod acquire;
mod multi;

mod shared;

mod builder;
mod request;

mod manager;

#[cfg(test)]
mod tests;

#[cfg(test)]
mod sim;

pub use crate::builder::LockManagerBuilder;
pub use crate::config::{
    Backoff, Config, Quorum, ReplicaWait, MAX_EVENTS_BUFFER, MAX_LEASE, MAX_TIMEOUT,
};
pub use crate::error::{Error, NodeErrorKind, NodeFailure, TakenNode};
pub use crate::events::{LockEvent, LockEvents};
pub use crate::guard::{LockGuard, LossSignal};
pub use crate::hold::HoldState;
pub use crate::keys::lock_slot;
pub use crate::keys::{fence_counter_key, MAX_LOCK_ALL_NAMES, MAX_NAME_LEN};
pub use crate::layout::Layout;
pub use crate::multi::MultiLockGuard;
pub use crate::node::NodeLockState;
pub use crate::owner::{HolderInfo, Owner};
pub use crate::request::{LockRequest, MultiLockRequest, NameSet, OneName, Request};
pub use crate::shared::LockManager;
pub use crate::status::{LockStatus, NodeStatus};
pub use crate::wait::PubSubStats;
pub use crate::watchdog::WatchdogStats;
pub use redis;
