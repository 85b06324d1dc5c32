//! The shape of a run: which faults it may inject ([`Mode`]), what it
//! draws from its seed ([`Params`]), and the clients' fixed settings.

use std::time::Duration;

use tokio::time::Instant;

use crate::layout::Layout;
use crate::rng::up_to;

/// Which faults a run may inject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Only faults the protocol claims to survive.
    Safe,
    /// Safe faults, weighted towards process pauses, many of them starting
    /// as a grant arrives.
    Pauses,
    /// Also nodes that restart empty and rejoin at once.
    UnsafeRestart,
    /// Also clock jumps beyond the drift allowance.
    UnsafeClock,
    /// Safe faults; the clients also take two names at once (`lock_all`).
    Sets,
    /// Safe faults; half the clients' `lock` and `try_lock` calls are fair
    /// requests (granted in queue order), with a short queue timeout so
    /// that waiters cut off by faults are skipped within the run.
    Fair,
    /// Safe faults, half of them links whose calls run on the node and
    /// then fail at once with a connection error (the reply lost to a
    /// reset): attempts that may have been granted fail fast and roll back.
    Resets,
    /// Leader election (`election`): the processes but the last campaign
    /// in loops on one election and every process observes it; safe
    /// faults, half of them process pauses that start as a grant arrives
    /// and suspends.
    Election,
    /// A counting semaphore (`semaphore`): every task of every process
    /// takes, holds and releases or drops permits of one semaphore of 2 or
    /// 3 permits; safe faults, half of them process pauses that start as a
    /// grant arrives.
    Semaphore,
    /// A read-write lock (`rw`): one writer task, the other tasks mostly
    /// readers (writers too while faults run); safe faults, half of them
    /// process pauses that start as a grant arrives and suspends, then a
    /// longer fault-free end where the writer's waits are bounded.
    Rw,
}

/// The shape of one run, drawn from its seed.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) nodes: usize,
    pub(crate) procs: usize,
    pub(crate) tasks: usize,
    pub(crate) lease: Duration,
    pub(crate) min_fixed: Duration,
    pub(crate) max_fixed: Duration,
    /// The drift allowance of the shortest lease in use.
    pub(crate) drift: Duration,
    pub(crate) node_timeout: Duration,
    pub(crate) fault_gap_ms: u64,
    pub(crate) fault_end: Instant,
    pub(crate) client_end: Instant,
    /// The clients also take sets of names (set from the mode, not drawn).
    pub(crate) sets: bool,
    /// Half the clients' waits are fair requests (set from the mode).
    pub(crate) fair: bool,
    /// The key layout of every manager (set from the run, not drawn: a
    /// seed draws the same history up to where the layouts differ).
    pub(crate) layout: Layout,
    /// Shards of the sharded member (node 0), 2 or 3, drawn after the rest
    /// in a sharded run only; 0 when every node is a standalone one.
    pub(crate) shards: usize,
    /// The semaphore's permits in semaphore mode (2 or 3, drawn after the
    /// rest); 0 otherwise.
    pub(crate) permits: u32,
}

impl Params {
    pub(crate) fn draw(start: Instant) -> Self {
        let lease = Duration::from_millis(if up_to(1) == 0 { 300 } else { 600 });
        let (min_fixed, max_fixed) = (Duration::from_millis(100), Duration::from_millis(500));
        let drift = crate::config::drift(min_fixed.min(lease), 0.01);
        let fault_end = start + Duration::from_millis(1_000);
        let longest = lease.max(max_fixed);
        Self {
            nodes: if up_to(1) == 0 { 3 } else { 5 },
            procs: 2 + usize::from(up_to(1) == 1),
            tasks: 2 + usize::from(up_to(1) == 1),

            lease,
            min_fixed,
            max_fixed,
            drift,
            node_timeout: Duration::from_millis(20 + up_to(30)),
            fault_gap_ms: 50 + up_to(200),
            fault_end,
            // Every fault heals by `fault_end + longest + 260ms` (the
            // slowest: an empty restart kept out for the longest lease);
            // keys written before then expire one lease later.
            client_end: fault_end + 2 * longest + Duration::from_millis(300),
            sets: false,
            fair: false,
            layout: Layout::Quorumlock,
            shards: 0,
            permits: 0,
        }
    }
}

/// The managers' key prefix (the builder's default, named so that the
/// checks can find the lock keys in either layout: [`lock_key`]).
pub(crate) const PREFIX: &str = "quorumlock:";

/// The key of lock `name` on the nodes in `layout`.
pub(crate) fn lock_key(layout: Layout, name: &str) -> String {
    layout
        .lock_key(PREFIX, name)
        .expect("the simulator's lock names are valid")
}

/// The clients' queue timeout: short, so that waiters cut off by faults
/// (or dead) are skipped within the run.
pub(crate) const QUEUE_TIMEOUT: Duration = Duration::from_millis(300);

/// The clients' longest backoff.
pub(crate) const BACKOFF_MAX: Duration = Duration::from_millis(100);
