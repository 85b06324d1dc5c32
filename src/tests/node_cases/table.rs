//! The table's vocabulary: a [`Case`] (a named list of steps, each with
//! the answer both nodes must give), and short names for the steps and
//! answers the cases are written in.

use super::steps::{ms, Op, Out, H1, H2, L};
use crate::error::NodeErrorKind;
use crate::node::Renewed;

pub(super) fn acquire(name: &'static str, holder: &'static str, lease: u64, count: u32) -> Op {
    Op::Acquire {
        name,
        holder,
        lease,
        count,
    }
}

/// `acquire.lua` in its re-entry mode.
pub(super) fn reenter(name: &'static str, holder: &'static str, count: u32) -> Op {
    Op::Reenter {
        name,
        holder,
        lease: L,
        count,
    }
}

/// Holder of the waiters' grants, besides `H1` and `H2`.
pub(super) const H3: &str = "holder-3";
pub(super) const W1: &str = "waiter-1";
pub(super) const W2: &str = "waiter-2";
pub(super) const W3: &str = "waiter-3";
/// A long queue timeout, in milliseconds.
pub(super) const Q: u64 = 10_000;

/// An acquire by `waiter` (as `holder`, lease `L`, count 1) with a place
/// in the queue: `ticket` (0 asks for one), fair or plain, and its queue
/// timeout in milliseconds.
pub(super) fn place(
    name: &'static str,
    holder: &'static str,
    waiter: &'static str,
    ticket: u64,
    fair: bool,
    timeout: u64,
) -> Op {
    Op::AcquireQueued {
        name,
        holder,
        lease: L,
        count: 1,
        waiter,
        ticket,
        fair,
        timeout,
    }
}

pub(super) fn leave(name: &'static str, waiter: &'static str) -> Op {
    Op::Leave { name, waiter }
}

pub(super) fn acquire_all(
    names: &[&'static str],
    holder: &'static str,
    lease: u64,
    count: u32,
) -> Op {
    Op::AcquireAll {
        names: names.to_vec(),
        holder,
        lease,
        count,
    }
}

pub(super) fn release(name: &'static str, holder: &'static str, left: u32, token: u64) -> Op {
    Op::Release {
        name,
        holder,
        left,
        lease: L,
        token,
    }
}

pub(super) fn granted(token: u64) -> Out {
    Out::Granted(token)
}

pub(super) fn taken(pttl: u64) -> Out {
    Out::Taken(Some(ms(pttl)))
}

pub(super) fn queued(wait: u64, ticket: u64) -> Out {
    Out::Queued {
        wait: Some(ms(wait)),
        ticket,
    }
}

pub(super) fn queue(waiters: &[&str]) -> Out {
    Out::Queue(waiters.iter().map(|w| (*w).to_owned()).collect())
}

pub(super) fn held(holder: &str, count: u32, pttl: u64, fence: u64) -> Out {
    Out::State {
        holder: Some(holder.to_owned()),
        count,
        pttl: Some(ms(pttl)),
        fence,
    }
}

pub(super) fn free(fence: u64) -> Out {
    Out::State {
        holder: None,
        count: 0,
        pttl: None,
        fence,
    }
}

pub(super) fn renewed(codes: &[Renewed]) -> Out {
    Out::Renewed(codes.to_vec())
}

/// A keep's answer for a kept place whose lock has about `pttl` ms left.
pub(super) fn kept(pttl: u64) -> Renewed {
    Renewed::Kept(ms(pttl))
}

pub(super) const WRONG_TYPE: Out = Out::Failed(NodeErrorKind::WrongType);

/// A named list of steps, each with the answer both nodes must give.
pub(super) struct Case {
    pub(super) name: &'static str,
    pub(super) steps: Vec<(Op, Out)>,
}

impl Case {
    pub(super) fn new(name: &'static str) -> Self {
        Self {
            name,
            steps: Vec::new(),
        }
    }

    pub(super) fn step(mut self, op: Op, expect: Out) -> Self {
        self.steps.push((op, expect));
        self
    }

    /// An action without an answer (sleep, restart, planting a value).
    pub(super) fn act(self, op: Op) -> Self {
        self.step(op, Out::Done)
    }

    /// H1 takes `a` (token 1), then two fair waiters queue behind it: W1
    /// (as H2, queue timeout `t1`: ticket 1), then W2 (as H3, `t2`: ticket 2).
    pub(super) fn two_waiters(self, t1: u64, t2: u64) -> Self {
        self.step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, t1), queued(L, 1))
            .step(place("a", H3, W2, 0, true, t2), queued(L, 2))
    }
}
