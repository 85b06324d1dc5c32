//! The cases of the waiters' queue: tickets, fair and plain places, queue
//! timeouts, leaving, and the queue across a restart.

use super::steps::{Op, Out, A_TWIN, H1, H2, L};
use super::table::{
    acquire, free, granted, held, kept, leave, place, queue, queued, release, renewed, Case, H3, Q,
    W1, W2, W3, WRONG_TYPE,
};
use crate::node::{Released, Renewed};

pub(super) fn cases() -> Vec<Case> {
    use Released::{Deleted, Lowered};
    use Renewed::{Conflict, Missing};
    vec![
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
            .two_waiters(Q, Q)
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
            .two_waiters(100, Q)
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(place("a", H3, W2, 0, true, Q), granted(2))
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H2, W1, 0, true, Q), queued(L, 1)),
        Case::new("queue timeout: a gone head of a held lock is dropped; the caller goes behind the rest")
            .two_waiters(100, Q)
            .act(Op::Sleep(300))
            // The holder's time left, less the sleep: within the slack
            // even when the machine stalls the case for 400 ms more.
            .step(place("a", H2, W3, 0, true, Q), queued(L - 300, 3))
            .step(Op::Queue("a"), queue(&[W2, W3])),
        Case::new("queue timeout: the queue goes away with its last waiter")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(place("a", H3, W2, 0, false, 100), queued(L, 2))
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H3, W2, 0, false, Q), queued(L - 300, 1)),
        Case::new("queue timeout: a later waiter's shorter timeout does not cut an earlier one's")
            .two_waiters(Q, 100)
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(place("a", H1, W3, 0, true, Q), queued(Q - 300, 3))
            .step(place("a", H2, W1, 0, true, Q), granted(2))
            .step(Op::Queue("a"), queue(&[W2, W3])),
        Case::new("keep: a held lock's queued waiter is kept past its timeout; a free lock and a waiter not queued are not")
            .two_waiters(200, Q)
            .step(
                Op::Keep(vec![("a", W1, 1_000), ("a", W3, 1_000), ("b", W1, 1_000)]),
                renewed(&[kept(L), Conflict, Missing]),
            )
            .act(Op::Sleep(400))
            .step(Op::Queue("a"), queue(&[W1, W2]))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            // W1 is still the head, with about 600 ms left to claim it.
            .step(place("a", H3, W2, 0, true, Q), queued(600, 2))
            .step(Op::Keep(vec![("a", W1, 1_000)]), renewed(&[Missing]))
            .step(place("a", H2, W1, 0, true, Q), granted(2))
            .step(Op::Keep(vec![("a", W1, 1_000)]), renewed(&[Conflict])),
        Case::new("keep: the queue's keys outlive the kept deadline, twice its timeout when extended")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(place("a", H2, W1, 0, true, 100), queued(L, 1))
            .step(Op::Keep(vec![("a", W1, 1_000)]), renewed(&[kept(L)]))
            // Past the kept deadline (1 s), well before the keys' end (2 s):
            // a stall of the machine up to 700 ms changes nothing.
            .act(Op::Sleep(1_300))
            .step(Op::Queue("a"), queue(&[W1])),
        Case::new("keep: a waiter that left is not queued again")
            .two_waiters(Q, Q)
            .step(leave("a", W1), Out::Left(true))
            .step(Op::Keep(vec![("a", W1, 1_000), ("a", W2, 1_000)]), renewed(&[Conflict, kept(L)]))
            .step(Op::Queue("a"), queue(&[W2])),
        Case::new("queue timeout: the keys live to the latest deadline set, a leave does not cut it")
            .two_waiters(100, 1_000)
            .step(leave("a", W2), Out::Left(true))
            .act(Op::Sleep(300))
            .step(Op::Queue("a"), queue(&[W1]))
            .act(Op::Sleep(1_000))
            .step(Op::Queue("a"), queue(&[])),
        Case::new("re-entry: the holder with a place is granted with the fence, queue untouched")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(acquire(A_TWIN, H2, L, 1), granted(2))
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
            .two_waiters(Q, Q)
            .step(leave("a", W1), Out::Left(true))
            .step(leave("a", W1), Out::Left(false))
            .step(Op::Queue("a"), queue(&[W2]))
            .step(leave("b", W2), Out::Left(false))
            .step(leave("a", W2), Out::Left(true))
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H2, W3, 0, true, Q), queued(L, 1)),
        Case::new("release: with waiters queued deletes the lock; a gone head is dropped")
            .two_waiters(100, Q)
            .act(Op::Sleep(300))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(Op::Status("a"), free(1))
            .step(Op::Queue("a"), queue(&[W2])),
        Case::new("queue: a wrong-type lock key errors and changes nothing; gone waiters stay")
            .two_waiters(100, Q)
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
            .two_waiters(Q, Q)
            .act(Op::Restart { keep_data: false })
            .step(Op::Queue("a"), queue(&[]))
            .step(place("a", H3, W2, 0, true, Q), granted(1))
            .step(Op::Queue("a"), queue(&[])),
    ]
}
