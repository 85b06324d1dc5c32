//! Unit tests of the coordinator against in-memory nodes, as tokio keeps
//! `sync/tests/`: the fake node, and the tests that drive the real manager,
//! acquisition, hold and watchdog code over it.

pub(crate) mod fake;
pub(crate) mod fake_feed;
mod fake_queue;

mod coordinator;
mod crowd;
mod election;
mod fair;
mod limits;
mod losses;
#[cfg(feature = "metrics")]
mod metrics;
mod metrics_docs;
mod multi;
mod node_cases;
mod overload;
mod places;
mod reentry;
mod rw_lock;
mod safety;
mod scale;
mod semaphore;
mod suspend;
mod tiers;
mod unreached;
