//! The cases of one lock and of sets: grants and tokens, re-entry,
//! release, renewal and repair, the fence counter, forced release, values
//! of another type, expiry and restarts.

use super::steps::{Op, Out, A_TWIN, H1, H2, L};
use super::table::{
    acquire, acquire_all, free, granted, held, reenter, release, renewed, taken, Case, WRONG_TYPE,
};
use crate::node::{Released, Renewed};

pub(super) fn cases() -> Vec<Case> {
    use Released::{Deleted, Lowered, Missing, OtherOwner};
    use Renewed::{Conflict, Extended, Repaired, WrongType};
    vec![
        Case::new("grant: a free lock is granted with the first token")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(Op::Status("a"), held(H1, 1, L, 1)),
        Case::new("grant: one counter per hash slot, +1 per fresh grant, shared by its names")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(1))
            .step(acquire(A_TWIN, H1, L, 1), granted(2))
            .step(acquire("c", H1, L, 1), granted(1))
            .step(Op::Status("a"), held(H1, 1, L, 2))
            .step(Op::Status(A_TWIN), held(H1, 1, L, 2))
            .step(Op::Status("b"), held(H2, 1, L, 1)),
        Case::new("re-entry: same holder sets the count, refreshes the lease, gets the counter")
            .step(acquire("a", H1, 2_000, 1), granted(1))
            .step(acquire(A_TWIN, H2, L, 1), granted(2))
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
            .step(acquire("b", H2, L, 1), granted(1))
            .step(
                Op::Renew(vec![("a", H1, 3, L), ("b", H1, 1, 3_000), ("c", H1, 1, L)]),
                renewed(&[Extended, Conflict, Renewed::Missing]),
            )
            .step(Op::Status("a"), held(H1, 3, L, 1))
            .step(Op::Status("b"), held(H2, 1, L, 1))
            .step(Op::Status("c"), free(0)),
        Case::new("repair: re-creates a missing key with the count and raises its slot's fence")
            .step(
                Op::Repair(vec![("a", H1, 2, 9, L), (A_TWIN, H1, 1, 7, L), ("b", H1, 1, 4, L)]),
                renewed(&[Repaired, Repaired, Repaired]),
            )
            .step(Op::Status("a"), held(H1, 2, L, 9))
            .step(Op::Status(A_TWIN), held(H1, 1, L, 9))
            .step(Op::Status("b"), held(H1, 1, L, 4))
            .step(release("a", H1, 0, 9), Out::Released(Deleted))
            .step(acquire("a", H2, L, 1), granted(10))
            .step(acquire("c", H2, L, 1), granted(1)),
        Case::new("repair: a token below the counter does not lower it")
            .step(acquire("x", H2, L, 1), granted(1))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::Repair(vec![("a", H1, 1, 3, L)]), renewed(&[Repaired]))
            .step(Op::Status("a"), held(H1, 1, L, 5)),
        Case::new("repair: leaves another holder's key alone, extends our own")
            .step(acquire("a", H2, L, 1), granted(1))
            .step(acquire("b", H1, 1_000, 1), granted(1))
            .step(
                Op::Repair(vec![("a", H1, 1, 9, 3_000), ("b", H1, 4, 9, L)]),
                renewed(&[Conflict, Extended]),
            )
            .step(Op::Status("a"), held(H2, 1, L, 1))
            .step(Op::Status("b"), held(H1, 4, L, 1)),
        Case::new("fence: raised to a higher token, never lowered")
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::RaiseFence(3), Out::Fence(5))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::RaiseFence(0), Out::Fence(5))
            .step(Op::Status("a"), free(5))
            .step(acquire("a", H1, L, 1), granted(6))
            .step(acquire(A_TWIN, H1, L, 1), granted(7))
            .step(acquire("b", H1, L, 1), granted(1)),
        Case::new("fence: a set's counters are raised together; the lowest comes back")
            .step(acquire("b", H1, L, 1), granted(1))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::RaiseFences(vec!["a", "b", A_TWIN], 3), Out::Fence(3))
            .step(Op::Status("a"), free(5))
            .step(Op::Status("b"), held(H1, 1, L, 3))
            .step(Op::RaiseFences(vec!["b", "c"], 6), Out::Fence(6))
            .step(Op::Status("c"), free(6))
            .step(Op::Status("a"), free(5)),
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
            .step(Op::Status("w"), free(0))
            .step(acquire("w", H1, L, 1), granted(1)),
        Case::new("wrong type at a fence counter: errors where it is read, nothing written")
            .step(acquire("a", H1, 1_000, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(1))
            .act(Op::ForeignFence)
            .step(acquire(A_TWIN, H1, L, 1), WRONG_TYPE)
            .step(
                Op::Renew(vec![(A_TWIN, H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(acquire("c", H1, L, 1), granted(1))
            .step(acquire("a", H1, L, 2), WRONG_TYPE)
            .step(acquire("a", H2, L, 1), taken(1_000))
            .step(acquire("b", H1, L, 1), taken(L))
            .step(Op::Renew(vec![("b", H2, 1, L)]), renewed(&[Extended]))
            .step(
                Op::Repair(vec![(A_TWIN, H1, 1, 5, L), ("b", H2, 1, 5, L), ("d", H1, 1, 5, L)]),
                renewed(&[WrongType, Extended, Repaired]),
            )
            .step(
                Op::Renew(vec![(A_TWIN, H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(Op::Status("d"), held(H1, 1, L, 5))
            .step(release("a", H1, 0, 1), WRONG_TYPE)
            .step(release("b", H1, 0, 1), Out::Released(OtherOwner))
            .step(release("a", H1, 0, 0), Out::Released(Deleted))
            .step(Op::RaiseFence(9), WRONG_TYPE)
            .step(Op::RaiseFences(vec!["b", "a"], 9), WRONG_TYPE)
            .step(Op::Status("b"), held(H2, 1, L, 1))
            .step(Op::Status("a"), WRONG_TYPE)
            .step(Op::ForceRelease("b"), Out::Forced(true)),
        Case::new("acquire all: one token above every counter of the set's slots, set on each")
            .step(acquire("b", H2, L, 1), granted(1))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(acquire_all(&["a", "b", "c"], H1, L, 1), taken(L))
            .step(release("b", H2, 0, 1), Out::Released(Deleted))
            .step(acquire_all(&["a", "b", "c"], H1, L, 1), granted(6))
            .step(Op::Status("a"), held(H1, 1, L, 6))
            .step(Op::Status("b"), held(H1, 1, L, 6))
            .step(Op::Status("c"), held(H1, 1, L, 6))
            .step(acquire("d", H2, L, 1), granted(1))
            .step(acquire(A_TWIN, H2, L, 1), granted(7)),
        Case::new("acquire all: names of one slot share its counter: one INCR")
            .step(acquire_all(&["a", A_TWIN], H1, L, 1), granted(1))
            .step(Op::Status(A_TWIN), held(H1, 1, L, 1))
            .step(acquire_all(&["b", A_TWIN], H2, L, 1), taken(L))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(release(A_TWIN, H1, 0, 1), Out::Released(Deleted))
            .step(acquire_all(&["b", A_TWIN, "a"], H2, L, 1), granted(2))
            .step(Op::Status("b"), held(H2, 1, L, 2)),
        Case::new("acquire all: one name taken grants none; the largest PTTL comes back")
            .step(acquire("b", H2, 3_000, 1), granted(1))
            .step(acquire("c", H2, L, 1), granted(1))
            .step(acquire_all(&["a", "b", "c"], H1, L, 1), taken(L))
            .step(acquire_all(&["a", "b"], H1, L, 1), taken(3_000))
            .step(Op::Status("a"), free(0))
            .step(Op::Status("b"), held(H2, 1, 3_000, 1))
            .step(release("b", H2, 0, 0), Out::Released(Deleted))
            .step(acquire_all(&["a", "b"], H1, L, 1), granted(2)),
        Case::new("acquire all: our names are re-entered (largest counter shown, the others raised to it)")
            .step(acquire_all(&["a", "b"], H1, 1_000, 1), granted(1))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(acquire_all(&["a", "b"], H1, L, 2), granted(5))
            .step(Op::Status("a"), held(H1, 2, L, 5))
            .step(Op::Status("b"), held(H1, 2, L, 5))
            .step(release("b", H1, 0, 0), Out::Released(Deleted))
            .step(acquire_all(&["a", "b"], H1, L, 3), granted(6))
            .step(Op::Status("a"), held(H1, 3, L, 6))
            .step(Op::Status("b"), held(H1, 3, L, 6)),
        Case::new("acquire all: a wrong-type key or counter errors and grants nothing")
            .act(Op::ForeignLock("w"))
            .step(acquire_all(&["a", "w"], H1, L, 1), WRONG_TYPE)
            .step(Op::Status("a"), free(0))
            .step(acquire("b", H2, L, 1), granted(1))
            .step(acquire_all(&["a", "b", "w"], H1, L, 1), WRONG_TYPE)
            .step(Op::ForceRelease("w"), Out::Forced(true))
            .act(Op::ForeignFence)
            .step(acquire_all(&["c", "a"], H1, L, 1), WRONG_TYPE)
            .step(Op::Status("c"), free(0))
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
            .step(release("a", H1, 0, 0), Out::Released(Deleted))
            .step(acquire("a", H2, L, 1), granted(5)),
        Case::new("restart empty: everything is gone; repair restores key and counter")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(acquire("b", H1, L, 1), granted(1))
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
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(acquire("a", H2, L, 1), granted(2)),
        Case::new(
            "re-entry mode: ours is re-entered, another's is taken, a missing key is never created",
        )
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
    ]
}
