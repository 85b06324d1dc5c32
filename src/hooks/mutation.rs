//! Mutation switches: deliberate bugs the simulator must catch. Each is off
//! unless a test turns it on for the current thread.

use std::cell::Cell;

/// A deliberate bug, switched on by [`enable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// Failed or cancelled acquisitions leave their grants behind.
    NoRollback,
    /// The watchdog renews holds whose validity already ran out.
    RenewLapsed,
    /// Lagging fence counters are raised once in the background and the
    /// token is handed out without waiting (the code before the fix).
    SingleTryFence,
    /// Queued waiters never send a ticket: each node orders them by its
    /// own arrival order, as a single-node fair lock does.
    PerNodeOrder,
    /// A plain waiter deferred to a local waiter has no refresh bound (it
    /// sleeps until the holder's known expiry), and a winner does not pass
    /// the turn to the next local waiter: with a release naming a dead
    /// waiter, the deferred one stalls for a lease (liveness defect 1).
    DeferredUnbounded,
    /// A plain request defers to local fair waiters queued before it, even
    /// when they cannot take their turn (liveness defect 2).
    DeferToFair,
    /// A quorum of release messages counts rings, not nodes: rollbacks seen
    /// on one live node ring waiters of other managers into new attempts
    /// at one instant (the `Spin` the simulator found).
    RingQuorum,
    /// The resume watcher never tells the loss signals that the process
    /// was suspended: a wait keeps its pre-suspend timer, late by the
    /// suspend (the code before the resume watcher).
    IgnoreResume,
    /// A cluster member sends any call again after a broken connection,
    /// one that may have run too (an acquire, a forced release): caught
    /// as `Resent` by the sharded runs of the simulator.
    ResendMayHaveRun,
    /// A cluster member reads a response timeout as a broken connection
    /// (`route::failure`, the code before the fix): a release whose try
    /// timed out is sent again behind its own first copy, caught as
    /// `ResentAfterTimeout` by the sharded runs of the simulator.
    TimeoutIsBroken,
    /// A quorum read of an election's leader trusts the first member that
    /// answers (`leader::read`): a record only a minority holds, or one a
    /// member kept after a later leader took over, is reported.
    TrustFirstAnswer,
    /// A leadership believes itself leader past its validity, until the
    /// loss signal or the watchdog marks it lost (`Leadership::is_leader`
    /// reads the hold's recorded phase without its deadline): a process
    /// suspended past `valid_until` still leads when it wakes up.
    LeaderIgnoresExpiry,
    /// No fence rule: a token (an election's term) is the counter of the
    /// first node that granted, no quorum of counters shown to be at it
    /// (`acquire::attempt`).
    NoFence,
    /// A semaphore's permit slot, or a read-write lock's writer, needs
    /// only `N / 2` grants (`Keys::required`): two holders of one slot, or
    /// two writers, granted by disjoint halves of the members.
    MinorityQuorum,
    /// A reader of a read-write lock needs one grant, not
    /// `q_r = N - q_w + 1` (`Keys::required`): a reader granted by a member
    /// outside a writer's quorum holds beside the writer.
    ReaderQuorumOne,
    /// A waiting writer holds no new reader back (`RwLock`'s writers ask
    /// for a hold-back of zero): a stream of overlapping readers starves
    /// it.
    NoWriterHoldBack,
    /// The fake nodes' `write.lua` grants a writer beside live reader keys
    /// (`tests::fake::scripts::rw`).
    WriterIgnoresReaders,
    /// A place counts as kept where a node answered that its lock is free
    /// (`places::kept`): a waiter whose release message named a dead
    /// waiter sleeps on until the holder's known expiry.
    KeepIgnoresFree,
}

impl Mutation {
    fn bit(self) -> u32 {
        match self {
            Self::NoRollback => 1,
            Self::RenewLapsed => 2,
            Self::SingleTryFence => 4,
            Self::PerNodeOrder => 8,
            Self::DeferredUnbounded => 16,
            Self::DeferToFair => 32,
            Self::RingQuorum => 64,
            Self::IgnoreResume => 128,
            Self::ResendMayHaveRun => 256,
            Self::TrustFirstAnswer => 512,
            Self::LeaderIgnoresExpiry => 1024,
            Self::NoFence => 2048,
            Self::MinorityQuorum => 4096,
            Self::ReaderQuorumOne => 8192,
            Self::NoWriterHoldBack => 16384,
            Self::WriterIgnoresReaders => 32768,
            Self::KeepIgnoresFree => 65536,
            Self::TimeoutIsBroken => 131072,
        }
    }
}

thread_local! {
    static ACTIVE: Cell<u32> = const { Cell::new(0) };
}

/// Whether `m` is switched on for this thread.
pub(crate) fn active(m: Mutation) -> bool {
    ACTIVE.with(|a| a.get() & m.bit() != 0)
}

/// Switches `m` on for this thread until the guard is dropped.
pub(crate) fn enable(m: Mutation) -> Enabled {
    ACTIVE.with(|a| a.set(a.get() | m.bit()));
    Enabled(m)
}

/// Switches its mutation off when dropped.
pub(crate) struct Enabled(Mutation);

impl Drop for Enabled {
    fn drop(&mut self) {
        let bit = self.0.bit();
        ACTIVE.with(|a| a.set(a.get() & !bit));
    }
}
