//! A member that is a master under Redis Sentinel: one vote, the master of
//! one named group, followed across failovers. This module is the folder's
//! only door: the node layer reaches a Sentinel member through what it
//! re-exports.
//!
//! Its parts, from the leaves up (each imports only parts above it):
//!
//! - `spec`: the member as given to the builder (the sentinels' URLs, the
//!   master's name or a URL naming it), checked (no I/O);
//! - `ask`: what the sentinels say: every one asked at `build()` and their
//!   answers checked against each other, the master found afterwards
//!   through redis-rs's Sentinel support, and their `+switch-master`
//!   messages listened to;
//! - `node`: the member itself (`SentinelNode`), its watch and its feed.

mod ask;
mod node;
mod spec;

pub(crate) use self::ask::Refused as SentinelRefused;
pub(crate) use self::node::SentinelNode;
pub(crate) use self::spec::{SentinelSpec, Trust};
