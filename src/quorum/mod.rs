//! Quorums: the fan-out to every node under one deadline, with the one
//! stop rule every fan-out of a quorum follows (`fan_out`). This module is
//! the folder's door.

mod fan_out;

pub(crate) use self::fan_out::{
    deadline_after, valid_until, validity, Decision, FanOut, Slot, Stragglers, Tally,
};
