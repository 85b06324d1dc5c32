//! Test only: the protocol as a model, checked exhaustively with
//! stateright on small worlds (docs/MODEL.md). Nodes hold lock keys with
//! an expiry on their own clock, a fence counter per name; clients fan out
//! acquire, fence raises, renewals, repairs and releases, and every
//! decision they make is the real code's: `quorum`'s verdicts (`Tally`,
//! `Decision`, `FenceTally`, `valid_until`, `RenewalTally`), the re-send
//! rule (`Resend::again`), the quorums of `Keys::required`. Messages are
//! delayed, reordered across connections, lost; nodes restart; clocks run
//! ahead within (or past) the drift allowance; a client that takes no step
//! while time passes is paused.
//!
//! - `world`: parameters, state, ticks as durations.
//! - `step`: a node's scripts, a client's reactions, over the verdicts.
//! - `check`: the `Model`: its actions.
//! - `props`: the properties, safety and liveness.
//! - `force`: the operator's `force_unlock`.
//! - `election`: candidates that proclaim, leaderships, the observer.
//! - `trace`: a counterexample, readable.

mod check;
mod election;
mod force;
mod props;
mod step;
mod trace;
mod world;

mod tests;
mod tests_election;
