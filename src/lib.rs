#![doc = include_str!("../README.md")]
#![doc(test(attr(deny(warnings))))]

// Modules, from the leaves up; each imports only those above it.
mod clock;
mod rng;
mod sync;

mod config;
mod error;
mod keys;
mod owner;
mod scripts;

mod admission;
mod node;
mod quorum;
mod renewal;

mod nodes;
mod queue;
mod resume;
mod status;

mod hold;
mod rollback;
mod wait;
mod watchdog;

mod attempt;
mod guard;

mod acquire;

mod builder;
mod manager;

mod multi;

#[cfg(test)]
mod hooks;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use crate::builder::LockManagerBuilder;
pub use crate::config::{Backoff, Config, Quorum, MAX_LEASE, MAX_TIMEOUT};
pub use crate::error::{Error, NodeErrorKind, NodeFailure, TakenNode};
pub use crate::guard::{LockGuard, LossSignal};
pub use crate::hold::HoldState;
pub use crate::keys::MAX_NAME_LEN;
pub use crate::manager::{LockManager, LockRequest};
pub use crate::multi::{MultiLockGuard, MultiLockRequest, MAX_LOCK_ALL_NAMES};
pub use crate::node::NodeLockState;
pub use crate::owner::{HolderInfo, Owner};
pub use crate::status::{LockStatus, NodeStatus};
pub use crate::wait::PubSubStats;
pub use crate::watchdog::WatchdogStats;
pub use redis;
