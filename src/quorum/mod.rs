//! Quorums: every verdict on the nodes' answers, pure (`verdict`; an
//! election's quorum read, `agreement`; a semaphore's slots, `permits`;
//! the fence rule, `fence`), and the
//! fan-out to every node under one deadline that gathers them (`fan_out`).
//! This module is the folder's door.

mod agreement;
mod fence;
mod permits;
mod verdict;

mod fan_out;

pub(crate) use self::agreement::{agree, Agreement};
pub(crate) use self::fan_out::{deadline_after, FanOut, Leg, Stragglers};
pub(crate) use self::fence::FenceTally;
pub(crate) use self::permits::{view as slots_view, SlotsView};
pub(crate) use self::verdict::{
    valid_until, validity, Decision, Loss, ReleaseTally, RenewalTally, Tally, Times, Verdict,
};
