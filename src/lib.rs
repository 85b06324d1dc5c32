#![doc = include_str!("../README.md")]
#![doc(test(attr(deny(warnings))))]

mod admission;
mod clock;
mod config;
mod error;
mod lock;
mod node;
mod owner;
mod quorum;
mod rng;
mod scripts;
mod wait;
mod watchdog;

#[cfg(test)]
mod coordinator_tests;
#[cfg(test)]
mod fake;
#[cfg(test)]
mod limits_tests;
#[cfg(test)]
mod node_cases_tests;
#[cfg(test)]
mod safety_tests;
#[cfg(test)]
mod sim;

pub use crate::config::{
    Backoff, Config, LockManagerBuilder, Quorum, MAX_LEASE, MAX_NAME_LEN, MAX_TIMEOUT,
};
pub use crate::error::{Error, NodeErrorKind, NodeFailure, TakenNode};
pub use crate::lock::{
    HoldState, LockGuard, LockManager, LockRequest, LockStatus, LossSignal, NodeStatus,
};
pub use crate::node::NodeLockState;
pub use crate::owner::Owner;
pub use crate::wait::PubSubStats;
pub use crate::watchdog::WatchdogStats;
pub use redis;
