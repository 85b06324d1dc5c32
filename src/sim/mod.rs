//! Deterministic simulation: the real manager, acquisition path, watchdog
//! and waiters against in-memory nodes behind a fault-injecting decorator,
//! on tokio's paused clock, everything random drawn from one seeded RNG
//! (`crate::rng`), so that a seed replays its history exactly.
//!
//! The modules, from the ground up (each imports only modules listed
//! before it):
//!
//! - `checker`: the event log (locks numbered by their place in `LOCKS`)
//!   and the invariants ([`checker::Invariant`]):
//!   mutual exclusion, fencing order (also for a hold that comes back after
//!   a lapse), `lost()` no later than `valid_until()` on the suspend-aware
//!   clock (for a process paused at `valid_until()`, at its wake-up plus
//!   5 ms; suspended, at its resume plus the resume watcher's poll period,
//!   10 ms, plus 5 ms), no lock key after quiescence and `flush()`, bounded
//!   `try_lock`, no hang or panic, no spin, and no lock at a key other than
//!   the one the run's key layout gives its name; and for the election
//!   mode one leader at a time, increasing terms, and observers that never
//!   go back nor report a leader no quorum of the nodes held (see
//!   "Elections" below); for the semaphore and rw modes, see "Semaphores
//!   and read-write locks" below;
//! - `observers`: part of the checks (called by `checker::check`): the
//!   election's observers against the records a quorum held;
//! - `counts`: part of the checks (called by `checker::check`): which
//!   invariants each lock number's overlaps and tokens break, at most `P`
//!   permits valid at once, and no reader valid beside a writer;
//! - `params`: the shape of a run: its [`Mode`], the [`Params`] drawn from
//!   its seed, the key layout (see "Layouts" below), and the clients' queue
//!   timeout and longest backoff;
//! - `net`: the switches the faults flip and the calls go through: each
//!   node's health, slowness and restarts (`NodeCtl`), each client↔node
//!   link's cuts, in-order wire and pub/sub faults (`LinkCtl`, `FeedCtl`);
//! - `records`: in election mode, every leader record each node holds, as
//!   it changes (told by the node after each call it runs and each empty
//!   restart), and the first instant each record is on a quorum of the
//!   nodes (`Ev::Held`);
//! - `feed`: the release feed of each link. The fakes publish what the
//!   scripts publish (`tests::fake_feed`); on the way the link's faults
//!   apply: an open fails on a refusing node and hangs on a black hole or a
//!   cut link (the waiters bound it with the connect timeout), messages are
//!   lost and duplicated while the link is lossy, delayed (in order) while
//!   the node is slow, dropped on a reply-cut link or to a stalled process,
//!   and every connection of a node dies with its restart, or of a link
//!   with a kill (the stream ends; the waiters poll and reconnect);
//! - `node`: `SimNode`, a decorator over `FakeNode` per client↔node link,
//!   through the link's switches (`net`, walked by `node::Path`, which a
//!   shard's call also walks):
//!   fail fast, black hole, slow links (requests and replies jittered,
//!   requests delivered in order), one-way link cuts, restarts with data or
//!   empty, clock jumps (`FakeNode::jump_clock`); and a spin detector (node
//!   calls without virtual time passing: [`checker::Invariant::Spin`]);
//! - `shards`: in a sharded run, node 0 is a Redis Cluster of 2 or 3
//!   shards, one vote (`Member`: which shard serves each lock's slot, the
//!   slot migrating, each shard's switches and connections), reached by
//!   each process through `ShardedNode`: each call routed by the keys it
//!   names, each shard answering `MOVED`, `ASK` or `TRYAGAIN` as Redis 7
//!   does mid-migration, each error read and acted on by the production
//!   retry rules (`node::cluster::retry`); the invariants
//!   [`checker::Invariant::Resent`] (an acquire or a forced release sent
//!   again after a try that ran) and `ResentAfterTimeout` (any call sent
//!   again after a try that ran and timed out) are checked there;
//! - `liveness`: progress ([`checker::Invariant::Progress`]), sampled from
//!   the nodes' actual keys every 5 ms: while a live waiter (its process
//!   neither stalled nor dead) wants a lock that is free on a quorum of the
//!   nodes its process reaches (up, not slow, link not cut; a sharded
//!   member with no slot migrating and every shard and connection to it
//!   sound), some waiter
//!   is granted it within `queue_timeout / 3 + 2 × node_timeout +
//!   backoff max + 7 ms + 20 ms` (a placed waiter's refresh, an attempt and
//!   its rollback, a lost split vote, timer jitter and quorum grace, and
//!   sampling slack; one queue timeout more for a fair waiter, which may
//!   have to outwait a head that never claims its turn). Any key showing
//!   up, or any request of the lock ending, restarts the clock. The same
//!   samples flag a lock held at a key the layout does not give
//!   ([`checker::Invariant::Layout`]);
//! - `ctx`: what a run shares (`Ctx`): the log, the params, the processes
//!   (`Proc`: a manager, a clock, a stall and a link each), the nodes and
//!   links, the holds seen so far and the waiting requests (`liveness`);
//! - `monitor`: one per hold, records when it believes itself valid (from
//!   `valid_until()` on the suspend-aware clock) and when its `lost()`
//!   fires (one `lost()` future for the whole hold, as a caller waits);
//! - `faults`: the fault schedule of a run, per [`Mode`];
//! - `shard_faults`: a sharded run's migrations (one at a time, keys moved
//!   every 2 to 8 ms, sometimes after a pause) and shard faults (fail
//!   fast, black hole, slow, replies reset or timed out after the call
//!   ran), alongside `faults`;
//! - `clients`: processes (one manager each, one
//!   [`crate::clock::test::Process`] each: see "Suspends" below) with
//!   several tasks doing
//!   `lock`, `try_lock`, `lock_with_lease`, explicit-owner re-entry,
//!   `release`, dropped guards, acquisitions dropped mid-flight and
//!   `force_unlock`, (in `Mode::Sets`) `try_lock_all` of two names, and
//!   (in `Mode::Fair`) fair requests;
//!   stalls pause a process's tasks, sockets and watchdog (`pause`), in
//!   pause-heavy mode often from the moment a grant arrives; a process may
//!   also die while one of its tasks waits (stalled until the end of the
//!   run: it never calls again and never leaves the queues, so its fair
//!   or plain place is a dead waiter's); a process may be suspended;
//! - `election`: the election mode's tasks: campaigners, observers
//!   through `observe()` and `leader()`, and a monitor per leadership
//!   (see "Elections" below);
//! - `semaphore`, `rw`: the semaphore and rw modes' tasks (see
//!   "Semaphores and read-write locks" below);
//! - `scenario`: hand-built liveness histories (a waiter deferred behind a
//!   dead waiter; a plain request behind a stuck fair waiter); the first
//!   also catches `keep-ignores-free` (a kept place where its lock is free:
//!   the waiter sleeps past the release that named a dead waiter);
//! - `replay`: a run's names (`Setup`: mode, layout, sharded), the
//!   replay command a failing test prints, and the replay test;
//! - `tests`: the CI budget and the must-fail tests; the mutations they
//!   switch on are in `crate::hooks::mutation`.
//!
//! Running it:
//!
//! - `cargo test --all-features --lib sim::` runs 2,000 safe-mode seeds,
//!   500 each of the pause-heavy, reset-heavy, sets and fair modes, 500 safe-mode and
//!   200 each of sets- and fair-mode seeds in Redisson's layout, 400
//!   safe-mode and 200 each of fair- and pause-heavy-mode seeds with node 0
//!   sharded, 300 election-mode seeds (and 24 replayed twice), the unsafe
//!   modes and the mutations (two of them in Redisson's layout too,
//!   `resend-may-have-run` and `timeout-is-broken` sharded, four in
//!   election mode, two in semaphore mode, five in rw mode), 150
//!   semaphore-mode and 150 rw-mode seeds;
//! - `QUORUMLOCK_SIM_SEEDS=N` runs N safe-mode seeds (a soak);
//!   `QUORUMLOCK_SIM_{PAUSE,RESET,SETS,FAIR}_SEEDS` and
//!   `QUORUMLOCK_SIM_REDISSON{,_SETS,_FAIR}_SEEDS` and
//!   `QUORUMLOCK_SIM_SHARDS{,_FAIR,_PAUSE}_SEEDS` and
//!   `QUORUMLOCK_SIM_ELECTION_SEEDS` and
//!   `QUORUMLOCK_SIM_{SEMAPHORE,RW}_SEEDS` set the other sweeps (and
//!   `QUORUMLOCK_SIM_DET_ELECTION_SEEDS` the election seeds replayed);
//! - `QUORUMLOCK_SIM_SEED=S [QUORUMLOCK_SIM_MODE=pauses|resets|sets|fair|election|semaphore|rw|unsafe-restart|unsafe-clock]
//!   [QUORUMLOCK_SIM_LAYOUT=redisson] [QUORUMLOCK_SIM_SHARDS=1]
//!   [QUORUMLOCK_SIM_MUTATION=no-rollback|renew-lapsed|single-try-fence|per-node-order|deferred-unbounded|defer-to-fair|ring-quorum|ignore-resume|resend-may-have-run|timeout-is-broken|trust-first-answer|no-fence|leader-ignores-expiry|minority-quorum|reader-quorum-one|no-writer-hold-back|writer-ignores-readers|keep-ignores-free]
//!   [QUORUMLOCK_SIM_TRACE=1]
//!   cargo test --all-features --lib sim::replay::replay -- --nocapture`
//!   prints the history of seed S (with every node call and reply under
//!   `QUORUMLOCK_SIM_TRACE`); a failing test prints this command.
//!
//! Layouts: a run builds every manager in one key layout
//! ([`crate::Layout`], default `Quorumlock`; the `sweeps!` rows marked
//! `in Redisson` use `Layout::Redisson`). A seed draws the same parameters
//! and faults in either layout; the histories part where the layouts do:
//! in Redisson's the fakes keep each lock at its bare name (`a`, not
//! `quorumlock:{a}`; the fence counters and queues stay quorumlock's keys),
//! and every full release and forced release also publishes `0` on
//! `redisson_lock__channel:{<name>}` after its own message, as
//! `release.lua` and `force_release.lua` do, which the waiters listen to
//! too and drop as the echo of their node's own message (the feed's loss,
//! duplication and delay faults apply to both). The checks find the locks
//! at the keys the layout gives (`params::lock_key`). Every manager of a
//! run shares the layout: no Redisson client takes part (a foreign holder
//! is covered by the node case table and `tests/redisson.rs`).
//!
//! Elections (`Mode::Election`, `election`): one process more than drawn
//! (3 or 4); every process but the last campaigns on the election `e`
//! (task 0: `campaign`, or `try_campaign` with a wait, a quarter of them
//! dropped mid-flight; a win leads for up to a lease, proclaims up to two
//! new values, then resigns or drops the leadership), and every process
//! observes it: task 1 through receivers of `observe()` (each kept for
//! 0.1 to 1.5 s, then dropped: a new receiver is a new observer), the
//! other tasks by `leader()` reads every 1 to 60 ms. The faults are the
//! safe mix, half of them process pauses that start as a grant arrives
//! (a campaign's, before it proclaims) and suspends; a process may die
//! while it campaigns (its place in the fair queue is a dead waiter's).
//! The invariants, on the same log:
//!
//! - one leader at a time ([`checker::Invariant::OneLeader`]): a
//!   leadership is a hold of lock [`checker::ELECTION`] from the
//!   campaign's return to the earliest of its resignation or drop, its
//!   `lost()`, and the first instant its monitor sees `is_leader()` false
//!   (looked at `valid_until()` on the run's clock, then every
//!   millisecond while it stays true), checked as mutual exclusion is; the
//!   monitor is the checker's eye, and its `is_leader()` call ends a
//!   lapsed hold on the spot (a suspended process's `lost()` then fires at
//!   `valid_until()`, not at its resume);
//! - terms strictly increase ([`checker::Invariant::Terms`]), checked as
//!   fencing is, and excused as it is when a node restarted empty between
//!   the two (the counters a term is drawn from may be lost: `SAFETY.md`,
//!   "Restarts without fsync");
//! - an observer (a receiver, or a task's `leader()` reads) never reports
//!   a leader of an older (term, revision) than it reported before
//!   ([`checker::Invariant::ObservedOlder`], excused only when a node
//!   restarted empty between the instants the two records were first on a
//!   quorum, the older one later) nor a (term, revision, value) that was
//!   never on a quorum of the nodes at once before the report
//!   ([`checker::Invariant::ObservedUnheld`], against `records`);
//! - the campaigns also make progress ([`checker::Invariant::Progress`],
//!   as fair waiters), leave no key of the election's lock after
//!   `flush()`, and every process's watch ends once its receivers are gone.
//!
//! Each is shown to catch a mutation: `trust-first-answer` (a read trusts
//! the first member to answer) breaks both observer invariants (first
//! caught at seed 51 of each), `no-fence` (a token is the first granting
//! node's counter, unfenced) breaks `Terms` (seed 54), and
//! `leader-ignores-expiry` (`is_leader()` reads the hold's recorded phase
//! without its deadline) breaks `OneLeader` (seed 35: a leader suspended
//! past its validity leads on until its resume, 147 ms into the next
//! leader's term). Seeds 0 to 2,999 keep every invariant
//! (`QUORUMLOCK_SIM_ELECTION_SEEDS=3000`: 3 minutes on two cores; the 300
//! of `cargo test` take 15 to 35 s, the election tests together about
//! 40 s). Each
//! process's watch reads every member twice per change, so a burst at one
//! instant reaches 155 calls: the spin bound is
//! [`node::SPIN_CALLS_ELECTION`] there. The election mode runs unsharded,
//! in quorumlock's layout.
//!
//! Semaphores and read-write locks (`Mode::Semaphore`, `semaphore`;
//! `Mode::Rw`, `rw`): every task takes permits of one semaphore of 2 or
//! 3 permits, or reads (and one task writes) one read-write lock, under
//! the safe faults (in rw mode half of them pauses at a grant and
//! suspends, in semaphore mode half pauses at a grant). A permit, a read
//! and a write are holds as a lock's are (valid from the acquisition's
//! return until its release or drop, `lost()` or `valid_until()`), of
//! lock `checker::SLOT + slot`, `checker::READER` and `checker::WRITER`.
//! The invariants: at most `P` permits valid at once
//! ([`checker::Invariant::Permits`]) and each slot's tokens increasing
//! ([`checker::Invariant::PermitTokens`]); no reader valid beside a writer
//! ([`checker::Invariant::ReaderBesideWriter`]), one writer at a time
//! ([`checker::Invariant::TwoWriters`]), writer tokens strictly
//! increasing ([`checker::Invariant::WriterTokens`]), excused as fencing
//! is after an empty restart; and a `write()` asked once every fault has
//! healed gets in within `rw::bound` (the longest read hold, 150 ms, plus
//! a queue timeout, two node timeouts, the longest backoff and 20 ms)
//! while readers keep coming ([`checker::Invariant::WriterWait`]). Each is
//! shown to catch a mutation: `minority-quorum` (a slot or a writer needs
//! `N / 2` grants) breaks `Permits` (semaphore seed 7: 4 permits of 3
//! valid at once) and `TwoWriters` (rw seed 16); `no-fence` breaks
//! `PermitTokens` (seed 20) and `WriterTokens` (seed 0);
//! `reader-quorum-one` and `writer-ignores-readers` break
//! `ReaderBesideWriter` (seed 0 each); `no-writer-hold-back` breaks
//! `WriterWait` (seed 30: a writer asked at 2,211 ms still waits at the
//! end of the run, 1,589 ms later). Neither mode registers waiters for
//! `Progress` (so no process dies in them), and the spin bound there is
//! [`node::SPIN_CALLS_SHARED`].
//!
//! Suspends: a real machine's `CLOCK_MONOTONIC` (tokio's clock) stops while
//! it sleeps, and its `CLOCK_BOOTTIME` does not; validity is kept on the
//! latter ([`crate::clock`]), timers run on the former, so a timer armed
//! before a suspend fires late by its length. The simulator has one tokio
//! clock for every process and node, so each process carries its own
//! suspends ([`crate::clock::test::Process`]; its tasks and the tasks its
//! manager spawns run in it): in the process, `clock::now()` is the run's
//! clock, `clock::suspended()` the time it spent suspended, and
//! `clock::monotonic()` the run's clock minus that. A `Suspend` fault (in
//! the safe mix) is a stall (tasks gated, requests dropped, watchdog held)
//! during which the process's monotonic clock stands still while the
//! nodes' time goes on: the loss signals' deadline timers, the resume
//! watcher's poll, the watchdog's ticks and wave pacing, and the clients'
//! own sleeps, all armed before the suspend, fire late by it. The other
//! timers of the code (attempt deadlines, backoffs, waiters, pub/sub) run
//! on the run's clock and may fire during a suspend, as they do during a
//! stall, where the requests they lead to are dropped; on a real machine
//! they would wait for the resume too. The must-fail mutation `ignore-resume` (the resume
//! watcher never tells the waits, as before it existed) breaks the loss
//! deadline within a few seeds.
//!
//! Determinism needs every `tokio::select!` the history depends on to be
//! `biased` (tokio's unseedable RNG picks the branch otherwise), no two
//! tasks woken by one `watch` send (it wakes them in a random order: the
//! resume watcher wakes its waits through a `Notify`), maps the
//! waiters iterate walked in a fixed order, and, in the random modes, no
//! two tasks of one manager waiting on one lock at once (task `t` of every
//! process uses lock `t`). So the random modes never build two local
//! waiters of one lock: the deferral defects are covered by `scenario`.

mod checker;
mod clients;
mod counts;
mod ctx;
mod election;
mod faults;
mod feed;
mod liveness;
mod monitor;
mod net;
mod node;
mod observers;
mod params;
mod records;
mod replay;
mod rw;
mod scenario;
mod semaphore;
mod shard_faults;
mod shards;
mod tests;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use self::checker::{Ev, Invariant, Log, ELECTION_NAME, LOCKS, RW_NAME, SEMAPHORE_NAME, WORLD};
use self::ctx::{Ctx, Proc};
use self::net::{LinkCtl, NodeCtl};
use self::node::SimNode;
use self::params::{lock_key, Mode, Params, BACKOFF_MAX, PREFIX, QUEUE_TIMEOUT};
use self::shards::{Member, ShardedNode};
use crate::node::NodeOps;
use crate::{Backoff, Layout, LockManager, Quorum};

/// The election mode's lock: `election:<ELECTION_NAME>`.
fn election_lock() -> String {
    format!("election:{ELECTION_NAME}")
}

/// What a run produced.
pub(crate) struct Outcome {
    pub(crate) log: String,
    pub(crate) violations: Vec<(Invariant, String)>,
}

/// Runs seed `seed` in `mode`, every manager in `layout`, node 0 a
/// sharded member if `sharded`, on a fresh paused runtime.
pub(crate) fn run(seed: u64, mode: Mode, layout: Layout, sharded: bool) -> Outcome {
    run_traced(seed, mode, layout, sharded, false)
}

/// Runs a seed; `trace` also logs every node call.
pub(crate) fn run_traced(
    seed: u64,
    mode: Mode,
    layout: Layout,
    sharded: bool,
    trace: bool,
) -> Outcome {
    count_panics();
    PANICS.with(|p| p.set(0));
    let _rng = crate::rng::seed(seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let mut out = rt.block_on(world(mode, layout, sharded, trace));
    drop(rt);
    crate::hooks::pause::clear();
    // Tasks of the crate that panicked (tokio swallows those panics).
    let panics = PANICS.with(std::cell::Cell::get);
    if panics > 0 {
        out.violations
            .push((Invariant::Liveness, format!("{panics} task(s) panicked")));
    }
    out
}

thread_local! {
    /// Panics on this thread since the run started.
    static PANICS: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Counts panics per thread (every task of a run is on its thread), then
/// reports them as before.
fn count_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            PANICS.with(|p| p.set(p.get().saturating_add(1)));
            previous(info);
        }));
    });
}

async fn world(mode: Mode, layout: Layout, sharded: bool, trace: bool) -> Outcome {
    let log = Log::new();
    let mut params = Params::draw(Instant::now());
    params.sets = mode == Mode::Sets;
    params.fair = mode == Mode::Fair;
    params.layout = layout;
    if mode == Mode::Election {
        // One more process: every process but the last campaigns.
        params.procs += 1;
    }
    if sharded {
        params.shards = 2 + usize::from(crate::rng::up_to(1) == 1);
    }
    if mode == Mode::Semaphore {
        params.permits = 2 + u32::from(crate::rng::up_to(1) == 1);
    }
    if mode == Mode::Rw {
        params.client_end += rw::QUIET_EXTRA;
    }
    let nodes: Vec<Arc<NodeCtl>> = (0..params.nodes).map(NodeCtl::new).collect();
    // The lock keys the run may hold: the clients' locks, and in election
    // mode the election's lock, numbered `checker::ELECTION`.
    let mut lock_keys: Vec<String> = LOCKS.iter().map(|l| lock_key(layout, l)).collect();
    if mode == Mode::Election {
        let keys = crate::keys::Keys::in_layout(layout, PREFIX, &election_lock());
        lock_keys.push(keys.lock.clone());
        records::Records::watch(&log, keys.record(), &nodes);
    }
    // Keys held under names of their own: the semaphore's slots, the
    // read-write lock's writer, and its readers (by prefix).
    let mut prefixes = Vec::new();
    if mode == Mode::Semaphore {
        let slots =
            (0..params.permits).map(|i| crate::keys::Keys::permit(PREFIX, SEMAPHORE_NAME, i).lock);
        lock_keys.extend(slots);
        log.push(
            WORLD,
            Ev::Semaphore {
                permits: params.permits,
            },
        );
    }
    if mode == Mode::Rw {
        let family = format!("{PREFIX}{{rw:{RW_NAME}}}");
        prefixes.push(format!("{family}:reader:"));
        lock_keys.push(format!("{family}:writer"));
    }
    let member = sharded.then(|| Member::new(0, &nodes[0], params.shards, params.procs));
    let mut procs = Vec::new();
    let mut links = Vec::new();
    let spin = match mode {
        Mode::Election => node::Spin::bounded(log.clone(), node::SPIN_CALLS_ELECTION),
        Mode::Semaphore | Mode::Rw => node::Spin::bounded(log.clone(), node::SPIN_CALLS_SHARED),
        _ => node::Spin::new(log.clone()),
    };
    for p in 0..params.procs {
        let process = LinkCtl::new();
        let mine: Vec<Arc<LinkCtl>> = (0..params.nodes).map(|_| LinkCtl::new()).collect();
        let ops: Vec<Arc<dyn NodeOps>> = nodes
            .iter()
            .zip(&mine)
            .enumerate()
            .map(|(i, (n, l))| {
                let node = SimNode {
                    trace: trace.then(|| (log.clone(), checker::Who(p, 99), i)),
                    node: Arc::clone(n),
                    link: Arc::clone(l),
                    process: Arc::clone(&process),
                    timeout: params.node_timeout,
                    spin: Arc::clone(&spin),
                };
                match member.as_ref().filter(|m| m.node == i) {
                    Some(m) => Arc::new(ShardedNode::new(node, m, p)) as Arc<dyn NodeOps>,
                    None => Arc::new(node) as Arc<dyn NodeOps>,
                }
            })
            .collect();
        let manager = LockManager::builder()
            .layout(layout)
            .key_prefix(PREFIX)
            .quorum(Quorum::Majority)
            .lease(params.lease)
            .node_timeout(params.node_timeout)
            .queue_timeout(QUEUE_TIMEOUT)
            .connect_timeout(2 * params.node_timeout)
            .backoff(Backoff::new(Duration::from_millis(5), BACKOFF_MAX).expect("valid backoff"))
            .build_with(ops)
            .expect("a valid simulated cluster");
        if member.is_some() {
            // Waves of one lock: a tick of several holds renews them in
            // one lane per shard of the sharded member, the lanes at once.
            manager.inner.watchdog.set_wave(1);
        }
        let client_id = manager
            .new_owner()
            .id()
            .split(':')
            .next()
            .unwrap_or_default()
            .to_owned();
        procs.push(Proc {
            client_id,
            manager,
            clock: crate::clock::test::Process::new(),
            stalled_until: Mutex::new(None),
            link: process,
        });
        links.push(mine);
    }
    log.push(
        WORLD,
        Ev::Fault(format!(
            "{} nodes{}, {} processes x {} tasks, lease {:?}, node timeout {:?}, fault gap <= {}ms, {:?} layout",
            params.nodes,
            member.as_ref().map_or(String::new(), |m| format!(
                " (node {} a cluster of {} shards)",
                m.node, params.shards
            )),
            params.procs,
            params.tasks,
            params.lease,
            params.node_timeout,
            params.fault_gap_ms + 10,
            params.layout
        )),
    );
    let ctx = Arc::new(Ctx::new(log.clone(), params.clone(), procs, nodes, links));
    let watch = liveness::Watch {
        log: log.clone(),
        wants: Arc::clone(&ctx.wants),
        nodes: ctx.nodes.clone(),
        links: ctx.links.clone(),
        procs: ctx.procs.iter().map(|p| Arc::clone(&p.link)).collect(),
        keys: lock_keys.clone(),
        prefixes: prefixes.clone(),
        bound: liveness::Bound::new(QUEUE_TIMEOUT, params.node_timeout, BACKOFF_MAX),
        member: member.clone(),
    };
    let monitor = tokio::spawn(watch.run(params.client_end));
    let faults = tokio::spawn(faults::schedule(Arc::clone(&ctx), mode));
    let shard_faults = member
        .clone()
        .map(|m| tokio::spawn(shard_faults::faults(m, log.clone(), params.clone())));
    let mut tasks = Vec::new();
    for p in 0..params.procs {
        for t in 0..params.tasks {
            let process = Arc::clone(&ctx.procs[p].clock);
            let c = Arc::clone(&ctx);
            tasks.push(match mode {
                Mode::Election => {
                    tokio::spawn(crate::clock::test::scope(process, election::task(c, p, t)))
                }
                Mode::Semaphore => {
                    tokio::spawn(crate::clock::test::scope(process, semaphore::task(c, p, t)))
                }
                Mode::Rw => tokio::spawn(crate::clock::test::scope(process, rw::task(c, p, t))),
                _ => tokio::spawn(crate::clock::test::scope(process, clients::client(c, p, t))),
            });
        }
    }
    for task in std::iter::once(faults).chain(shard_faults) {
        if let Err(e) = task.await {
            log.push(
                WORLD,
                Ev::Violation(Invariant::Liveness, format!("fault task: {e}")),
            );
        }
    }
    let grace = params.client_end + Duration::from_secs(5);
    for (k, task) in tasks.into_iter().enumerate() {
        match tokio::time::timeout_at(grace, task).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => log.push(
                WORLD,
                Ev::Violation(
                    Invariant::Liveness,
                    format!("client task {k} panicked: {e}"),
                ),
            ),
            Err(_) => log.push(
                WORLD,
                Ev::Violation(Invariant::Liveness, format!("client task {k} hung")),
            ),
        }
    }
    let _ = monitor.await;
    faults::heal_all(&ctx);
    if let Some(m) = &member {
        m.heal_all();
    }
    for p in &ctx.procs {
        if tokio::time::timeout(Duration::from_secs(5), p.manager.flush())
            .await
            .is_err()
        {
            log.push(
                WORLD,
                Ev::Violation(Invariant::Liveness, "flush hung".into()),
            );
        }
    }
    // Every receiver of `observe()` is gone with its task: each watch
    // ends at its next wake-up (a read, then the receivers' absence seen).
    if mode == Mode::Election {
        tokio::time::sleep(2 * params.node_timeout).await;
    }
    for (k, p) in ctx.procs.iter().enumerate() {
        let running = p.manager.inner.observers.running();
        if running > 0 {
            log.push(
                WORLD,
                Ev::Violation(
                    Invariant::Liveness,
                    format!("p{k}: {running} election watch(es) outlived their receivers"),
                ),
            );
        }
    }
    for (i, n) in ctx.nodes.iter().enumerate() {
        let keys = n.fake.lock_keys();
        let ours: Vec<&String> = keys
            .iter()
            .filter(|k| lock_keys.contains(k) || prefixes.iter().any(|p| k.starts_with(p)))
            .collect();
        if !ours.is_empty() {
            log.push(
                WORLD,
                Ev::Violation(
                    Invariant::Quiescence,
                    format!("node {i} still holds {ours:?} after flush"),
                ),
            );
        }
    }
    let end = log.now();
    let entries = log.entries();
    Outcome {
        violations: checker::check(&entries, end, params.node_timeout),
        log: checker::render(&entries),
    }
}
