//! The cases: a named list of steps per case, each with the answer both
//! nodes must give.

use std::time::Duration;

use super::{Op, Out, H1, H2, L};
use crate::error::NodeErrorKind;
use crate::node::{Released, Renewed};

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// The table's vocabulary.

fn acquire(name: &'static str, holder: &'static str, lease: u64, count: u32) -> Op {
    Op::Acquire {
        name,
        holder,
        lease,
        count,
    }
}

/// `acquire.lua` in its re-entry mode.
fn reenter(name: &'static str, holder: &'static str, count: u32) -> Op {
    Op::Reenter {
        name,
        holder,
        lease: L,
        count,
    }
}

/// Holder of the waiters' grants, besides `H1` and `H2`.
const H3: &str = "holder-3";
const W1: &str = "waiter-1";
const W2: &str = "waiter-2";
const W3: &str = "waiter-3";
/// A long queue timeout, in milliseconds.
const Q: u64 = 10_000;

/// An acquire by `waiter` (as `holder`, lease `L`, count 1) with a place
/// in the queue: `ticket` (0 asks for one), fair or plain, and its queue
/// timeout in milliseconds.
fn place(
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

fn leave(name: &'static str, waiter: &'static str) -> Op {
    Op::Leave { name, waiter }
}

fn acquire_all(names: &[&'static str], holder: &'static str, lease: u64, count: u32) -> Op {
    Op::AcquireAll {
        names: names.to_vec(),
        holder,
        lease,
        count,
    }
}

fn release(name: &'static str, holder: &'static str, left: u32, token: u64) -> Op {
    Op::Release {
        name,
        holder,
        left,
        lease: L,
        token,
    }
}

fn granted(token: u64) -> Out {
    Out::Granted(token)
}

fn taken(pttl: u64) -> Out {
    Out::Taken(Some(ms(pttl)))
}

fn queued(wait: u64, ticket: u64) -> Out {
    Out::Queued {
        wait: Some(ms(wait)),
        ticket,
    }
}

fn queue(waiters: &[&str]) -> Out {
    Out::Queue(waiters.iter().map(|w| (*w).to_owned()).collect())
}

fn held(holder: &str, count: u32, pttl: u64, fence: u64) -> Out {
    Out::State {
        holder: Some(holder.to_owned()),
        count,
        pttl: Some(ms(pttl)),
        fence,
    }
}

fn free(fence: u64) -> Out {
    Out::State {
        holder: None,
        count: 0,
        pttl: None,
        fence,
    }
}

fn renewed(codes: &[Renewed]) -> Out {
    Out::Renewed(codes.to_vec())
}

const WRONG_TYPE: Out = Out::Failed(NodeErrorKind::WrongType);

/// A named list of steps, each with the answer both nodes must give.
pub(super) struct Case {
    pub(super) name: &'static str,
    pub(super) steps: Vec<(Op, Out)>,
}

impl Case {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            steps: Vec::new(),
        }
    }

    fn step(mut self, op: Op, expect: Out) -> Self {
        self.steps.push((op, expect));
        self
    }

    /// An action without an answer (sleep, restart, planting a value).
    fn act(self, op: Op) -> Self {
        self.step(op, Out::Done)
    }
}

pub(super) fn cases() -> Vec<Case> {
    use Released::{Deleted, Lowered, Missing, OtherOwner};
    use Renewed::{Conflict, Extended, Repaired, WrongType};
    vec![
        Case::new("grant: a free lock is granted with the first token")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(Op::Status("a"), held(H1, 1, L, 1)),
        Case::new("grant: one counter per node, +1 per fresh grant, across names")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .step(acquire("c", H1, L, 1), granted(3))
            .step(Op::Status("a"), held(H1, 1, L, 3))
            .step(Op::Status("b"), held(H2, 1, L, 3)),
        Case::new("re-entry: same holder sets the count, refreshes the lease, gets the counter")
            .step(acquire("a", H1, 2_000, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .step(acquire("a", H1, L, 2), granted(2))
            .step(Op::Status("a"), held(H1, 2, L, 2))
            .step(acquire("a", H1, L, 5), granted(2))
            .step(Op::Status("a"), held(H1, 5, L, 2)),
        Case::new("conflict: another holder gets the PTTL; nothing changes")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(acquire("a", H2, 3_000, 1), taken(L))
            .step(Op::Status("a"), held(H1, 1, L, 1)),
        Case::new("release: one level lowers the count and sets the lease")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(
                Op::Release {
                    name: "a",
                    holder: H1,
                    left: 1,
                    lease: 4_000,
                    token: 1,
                },
                Out::Released(Lowered),
            )
            .step(Op::Status("a"), held(H1, 1, 4_000, 1)),
        Case::new("release: the last level deletes the key; again: missing")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(Op::Status("a"), free(1))
            .step(release("a", H1, 0, 1), Out::Released(Missing)),
        Case::new("release: raises the fence to the hold's token; a rollback (0) does not")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(release("a", H1, 0, 7), Out::Released(Deleted))
            .step(Op::Status("a"), free(7))
            .step(acquire("a", H2, L, 1), granted(8))
            .step(release("a", H2, 0, 0), Out::Released(Deleted))
            .step(Op::Status("a"), free(8)),
        Case::new("release: by a wrong holder is refused and changes nothing")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(release("a", H2, 0, 5), Out::Released(OtherOwner))
            .step(release("a", H2, 1, 5), Out::Released(OtherOwner))
            .step(Op::Status("a"), held(H1, 2, L, 1)),
        Case::new("release: a missing key raises nothing")
            .step(Op::Status("a"), free(0))
            .step(release("a", H1, 0, 3), Out::Released(Missing))
            .step(Op::Status("a"), free(0)),
        Case::new("renew: held by us / by another / missing, in one batch")
            .step(acquire("a", H1, 1_000, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .step(
                Op::Renew(vec![("a", H1, 3, L), ("b", H1, 1, 3_000), ("c", H1, 1, L)]),
                renewed(&[Extended, Conflict, Renewed::Missing]),
            )
            .step(Op::Status("a"), held(H1, 3, L, 2))
            .step(Op::Status("b"), held(H2, 1, L, 2))
            .step(Op::Status("c"), free(2)),
        Case::new("repair: re-creates a missing key with the count and raises the fence")
            .step(Op::Repair(vec![("a", H1, 2, 9, L)]), renewed(&[Repaired]))
            .step(Op::Status("a"), held(H1, 2, L, 9))
            .step(acquire("b", H2, L, 1), granted(10)),
        Case::new("repair: a token below the counter does not lower it")
            .step(acquire("x", H2, L, 1), granted(1))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::Repair(vec![("a", H1, 1, 3, L)]), renewed(&[Repaired]))
            .step(Op::Status("a"), held(H1, 1, L, 5)),
        Case::new("repair: leaves another holder's key alone, extends our own")
            .step(acquire("a", H2, L, 1), granted(1))
            .step(acquire("b", H1, 1_000, 1), granted(2))
            .step(
                Op::Repair(vec![("a", H1, 1, 9, 3_000), ("b", H1, 4, 9, L)]),
                renewed(&[Conflict, Extended]),
            )
            .step(Op::Status("a"), held(H2, 1, L, 2))
            .step(Op::Status("b"), held(H1, 4, L, 2)),
        Case::new("fence: raised to a higher token, never lowered")
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::RaiseFence(3), Out::Fence(5))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::RaiseFence(0), Out::Fence(5))
            .step(Op::Status("a"), free(5))
            .step(acquire("a", H1, L, 1), granted(6)),
        Case::new("force release: deletes whoever holds it; then there is nothing")
            .step(acquire("a", H1, L, 3), granted(1))
            .step(Op::ForceRelease("a"), Out::Forced(true))
            .step(Op::Status("a"), free(1))
            .step(Op::ForceRelease("a"), Out::Forced(false))
            .step(acquire("a", H2, L, 1), granted(2)),
        Case::new("wrong type at the lock key: a typed error, or WrongType per lock")
            .step(Op::RaiseFence(2), Out::Fence(2))
            .act(Op::ForeignLock("w"))
            .step(acquire("w", H1, L, 1), WRONG_TYPE)
            .step(release("w", H1, 0, 3), WRONG_TYPE)
            .step(release("w", H1, 0, 0), WRONG_TYPE)
            .step(Op::Renew(vec![("w", H1, 1, L)]), renewed(&[WrongType]))
            .step(Op::Repair(vec![("w", H1, 1, 3, L)]), renewed(&[WrongType]))
            .step(Op::Status("w"), WRONG_TYPE)
            .step(Op::Status("a"), free(2))
            .step(Op::ForceRelease("w"), Out::Forced(true))
            .step(Op::Status("w"), free(2))
            .step(acquire("w", H1, L, 1), granted(3)),
        Case::new("wrong type at the fence counter: errors where it is read, nothing written")
            .step(acquire("a", H1, 1_000, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .act(Op::ForeignFence)
            .step(acquire("c", H1, L, 1), WRONG_TYPE)
            .step(
                Op::Renew(vec![("c", H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(acquire("a", H1, L, 2), WRONG_TYPE)
            .step(acquire("a", H2, L, 1), taken(1_000))
            .step(acquire("b", H1, L, 1), taken(L))
            .step(Op::Renew(vec![("b", H2, 1, L)]), renewed(&[Extended]))
            .step(
                Op::Repair(vec![("d", H1, 1, 5, L), ("b", H2, 1, 5, L)]),
                renewed(&[WrongType, Extended]),
            )
            .step(
                Op::Renew(vec![("d", H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(release("a", H1, 0, 1), WRONG_TYPE)
            .step(release("b", H1, 0, 1), Out::Released(OtherOwner))
            .step(release("a", H1, 0, 0), Out::Released(Deleted))
            .step(Op::RaiseFence(9), WRONG_TYPE)
            .step(Op::Status("b"), WRONG_TYPE)
            .step(Op::ForceRelease("b"), Out::Forced(true)),
        Case::new("acquire all: free names are granted together with one INCR")
            .step(acquire("x", H2, L, 1), granted(1))
            .step(acquire_all(&["a", "b", "c"], H1, L, 1), granted(2))
            .step(Op::Status("a"), held(H1, 1, L, 2))
            .step(Op::Status("b"), held(H1, 1, L, 2))
            .step(Op::Status("c"), held(H1, 1, L, 2))
            .step(acquire("d", H2, L, 1), granted(3)),
        Case::new("acquire all: one name taken grants none; the largest PTTL comes back")
            .step(acquire("b", H2, 3_000, 1), granted(1))
            .step(acquire("c", H2, L, 1), granted(2))
            .step(acquire_all(&["a", "b", "c"], H1, L, 1), taken(L))
            .step(acquire_all(&["a", "b"], H1, L, 1), taken(3_000))
            .step(Op::Status("a"), free(2))
            .step(Op::Status("b"), held(H2, 1, 3_000, 2))
            .step(release("b", H2, 0, 0), Out::Released(Deleted))
            .step(acquire_all(&["a", "b"], H1, L, 1), granted(3)),
        Case::new("acquire all: our names are re-entered (counter shown), mixed sets granted")
            .step(acquire_all(&["a", "b"], H1, 1_000, 1), granted(1))
            .step(acquire("x", H2, L, 1), granted(2))
            .step(acquire_all(&["a", "b"], H1, L, 2), granted(2))
            .step(Op::Status("a"), held(H1, 2, L, 2))
            .step(Op::Status("b"), held(H1, 2, L, 2))
            .step(release("b", H1, 0, 0), Out::Released(Deleted))
            .step(acquire_all(&["a", "b"], H1, L, 3), granted(3))
            .step(Op::Status("a"), held(H1, 3, L, 3))
            .step(Op::Status("b"), held(H1, 3, L, 3)),
        Case::new("acquire all: a wrong-type key or counter errors and grants nothing")
            .act(Op::ForeignLock("w"))
            .step(acquire_all(&["a", "w"], H1, L, 1), WRONG_TYPE)
            .step(Op::Status("a"), free(0))
            .step(acquire("b", H2, L, 1), granted(1))
            .step(acquire_all(&["a", "b", "w"], H1, L, 1), WRONG_TYPE)
            .step(Op::ForceRelease("w"), Out::Forced(true))
            .act(Op::ForeignFence)
            .step(acquire_all(&["a", "c"], H1, L, 1), WRONG_TYPE)
            .step(Op::Status("c"), WRONG_TYPE)
            .step(acquire_all(&["a", "b"], H1, L, 1), taken(L))
            .step(Op::ForceRelease("b"), Out::Forced(true)),
        Case::new("lease expiry: a 50 ms lease lapses and the lock is free")
            .step(acquire("a", H1, 50, 1), granted(1))
            .act(Op::Sleep(150))
            .step(Op::Status("a"), free(1))
            .step(
                Op::Renew(vec![("a", H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(release("a", H1, 0, 1), Out::Released(Missing))
            .step(acquire("a", H2, L, 1), granted(2)),
        Case::new("restart with data: holds, counts, leases and the counter survive")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(Op::RaiseFence(4), Out::Fence(4))
            .act(Op::Restart { keep_data: true })
            .step(Op::Status("a"), held(H1, 2, L, 4))
            .step(acquire("a", H2, L, 1), taken(L))
            .step(acquire("b", H2, L, 1), granted(5)),
        Case::new("restart empty: everything is gone; repair restores key and counter")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(acquire("b", H1, L, 1), granted(2))
            .act(Op::Restart { keep_data: false })
            .step(Op::Status("a"), free(0))
            .step(
                Op::Renew(vec![("a", H1, 2, L), ("b", H1, 1, L)]),
                renewed(&[Renewed::Missing, Renewed::Missing]),
            )
            .step(release("b", H1, 0, 2), Out::Released(Missing))
            .step(Op::Status("b"), free(0))
            .step(Op::Repair(vec![("a", H1, 2, 1, L)]), renewed(&[Repaired]))
            .step(Op::Status("a"), held(H1, 2, L, 1))
            .step(acquire("c", H2, L, 1), granted(2)),
        Case::new("queue: first waiter on a held lock gets ticket 1, the next tail+1, a refresh keeps it")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .step(place("a", H3, W2, 0, false, Q), queued(L, 2))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .step(place("a", H3, W2, 0, false, Q), queued(L, 2))
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(Op::Status("a"), held(H1, 1, L, 1))
            .step(Op::Queue("b"), queue(&[])),
        Case::new("queue: a sent ticket re-files the waiter; ties go by waiter id")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .step(place("a", H2, W1, 5, true, Q), queued(L, 5))
            .step(Op::Queue("a"), queue(&[W2, W1]))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 5))
            .step(place("a", H2, W3, 0, true, Q), queued(L, 6))
            .step(place("a", H3, W2, 5, true, Q), queued(L, 5))
            .step(Op::Queue("a"), queue(&[W1, W2, W3])),
        Case::new("fair: a free lock with an empty queue is granted; the waiter is not queued")
            .step(place("a", H2, W1, 0, true, Q), granted(1))
            .step(Op::Queue("a"), queue(&[]))
            .step(Op::Status("a"), held(H2, 1, L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 1))
            .step(release("a", H2, 0, 1), Out::Released(Deleted))
            .step(place("a", H3, W2, 0, true, Q), granted(2))
            .step(Op::Queue("a"), queue(&[])),
        Case::new("fair: a free lock another waiter heads is not granted; the wait is the head's time left")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 3_000), queued(L, 1))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(place("a", H3, W2, 0, true, Q), queued(3_000, 2))
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(Op::Status("a"), free(1))
            .step(place("a", H2, W1, 0, true, 3_000), granted(2))
            .step(Op::Queue("a"), queue(&[W2]))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2)),
        Case::new("plain: a free lock is granted with others queued; it leaves the queue")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .step(place("a", H3, W2, 0, false, Q), queued(L, 2))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(place("a", H3, W2, 0, false, Q), granted(2))
            .step(Op::Queue("a"), queue(&[W1]))
            .step(Op::Status("a"), held(H3, 1, L, 2)),
        Case::new("queue timeout: a gone head is dropped by the next call; the next waiter is granted")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(place("a", H3, W2, 0, true, Q), granted(2))
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1)),
        Case::new("queue timeout: a gone head of a held lock is dropped; the caller goes behind the rest")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .act(Op::Sleep(300))
            .step(place("a", H2, W3, 0, true, Q), queued(L, 3))
            .step(Op::Queue("a"), queue(&[W2, W3])),
        Case::new("queue timeout: the queue goes away with its last waiter")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(place("a", H3, W2, 0, false, 100), queued(L, 2))
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H3, W2, 0, false, Q), queued(L, 1)),
        Case::new("queue timeout: a later waiter's shorter timeout does not cut an earlier one's")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .step(place("a", H3, W2, 0, true, 100), queued(L, 2))
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(place("a", H1, W3, 0, true, Q), queued(Q - 300, 3))
            .step(place("a", H2, W1, 0, true, Q), granted(2))
            .step(Op::Queue("a"), queue(&[W2, W3])),
        Case::new("queue timeout: the keys live to the latest deadline set, a leave does not cut it")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(place("a", H3, W2, 0, true, 1_000), queued(L, 2))
            .step(leave("a", W2), Out::Left(true))
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[W1]))
            .act(Op::Sleep(1_000))
            .step(Op::Queue("a"), queue(&[])),
        Case::new("re-entry: the holder with a place is granted with the fence, queue untouched")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 1))
            .step(
                Op::AcquireQueued {
                    name: "a",
                    holder: H1,
                    lease: L,
                    count: 2,
                    waiter: W1,
                    ticket: 0,
                    fair: true,
                    timeout: Q,
                },
                granted(2),
            )
            .step(Op::Status("a"), held(H1, 2, L, 2))
            .step(Op::Queue("a"), queue(&[W2])),
        Case::new("leave: takes the waiter out once (true, then false)")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .step(leave("a", W1), Out::Left(true))
            .step(leave("a", W1), Out::Left(false))
            .step(Op::Queue("a"), queue(&[W2]))
            .step(leave("b", W2), Out::Left(false))
            .step(leave("a", W2), Out::Left(true))
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H2, W3, 0, true, Q), queued(L, 1)),
        Case::new("release: with waiters queued deletes the lock; a gone head is dropped")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .act(Op::Sleep(300))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(Op::Status("a"), free(1))
            .step(Op::Queue("a"), queue(&[W2])),
        Case::new("queue: a wrong-type lock key errors and changes nothing; gone waiters stay")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .act(Op::Sleep(300))
            .act(Op::ForeignLock("a"))
            .step(place("a", H3, W2, 0, true, Q), WRONG_TYPE)
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(Op::ForceRelease("a"), Out::Forced(true))
            .act(Op::ForeignFence)
            .step(place("a", H3, W2, 0, true, Q), WRONG_TYPE)
            .step(Op::Queue("a"), queue(&[W1, W2])),
        Case::new("a queue key of another type: release changes nothing and errors")
            .step(acquire("a", H1, L, 2), granted(1))
            .act(Op::ForeignQueue("a"))
            .step(release("a", H1, 0, 7), WRONG_TYPE)
            .step(Op::Status("a"), held(H1, 2, L, 1))
            .step(release("a", H1, 1, 5), Out::Released(Lowered))
            .step(Op::Status("a"), held(H1, 1, L, 5))
            .step(release("a", H1, 0, 0), WRONG_TYPE)
            .step(place("a", H2, W1, 0, true, Q), WRONG_TYPE)
            .step(leave("a", W1), WRONG_TYPE)
            .step(Op::Status("a"), held(H1, 1, L, 5))
            .step(Op::ForceRelease("a"), Out::Forced(true))
            .step(Op::Status("a"), free(5)),
        Case::new("re-entry mode: ours is re-entered, another's is taken, a missing key is never created")
            .step(reenter("a", H1, 2), Out::Missing)
            .step(Op::Status("a"), free(0))
            .step(acquire("a", H1, 1_000, 1), granted(1))
            .step(reenter("a", H1, 2), granted(1))
            .step(Op::Status("a"), held(H1, 2, L, 1))
            .step(reenter("a", H2, 1), taken(L))
            .step(Op::ForceRelease("a"), Out::Forced(true))
            .step(reenter("a", H1, 3), Out::Missing)
            .step(Op::Status("a"), free(1))
            .act(Op::ForeignLock("w"))
            .step(reenter("w", H1, 2), WRONG_TYPE)
            .act(Op::ForeignFence)
            .step(reenter("b", H1, 2), Out::Missing),
        Case::new("re-entry mode: a key lost by a restart empty stays missing")
            .step(acquire("a", H1, L, 1), granted(1))
            .act(Op::Restart { keep_data: false })
            .step(reenter("a", H1, 2), Out::Missing)
            .step(Op::Status("a"), free(0)),
        Case::new("queue: a wrong-type fence errors a grant; the waiter keeps its place")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .act(Op::ForeignFence)
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .step(release("a", H1, 0, 0), Out::Released(Deleted))
            .step(place("a", H2, W1, 0, true, Q), WRONG_TYPE)
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(Op::Status("a"), WRONG_TYPE),
        Case::new("restart with data: the queue survives")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .act(Op::Restart { keep_data: true })
            .step(Op::Queue("a"), queue(&[W1]))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2)),
        Case::new("restart empty: the queue is wiped")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1))
            .step(place("a", H3, W2, 0, true, Q), queued(L, 2))
            .act(Op::Restart { keep_data: false })
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H3, W2, 0, true, Q), granted(1))
            .step(Op::Queue("a"), queue(&[])),
    ]
}
