//! One watchdog per manager: renews every held lock on every node, in waves
//! of 100 to [`WAVE`] locks spread over half the renew interval, one round
//! trip per node per wave (on a cluster member, per shard the wave's locks
//! sit on: holds are ordered by slot, in one lane per shard whose waves
//! run beside the other lanes', so that a wave's locks sit on one shard
//! and the shards renew at the same time), on a connection of its own;
//! repairs nodes that lost a key while a quorum of the others confirms the
//! hold; and signals locks that can no longer show a quorum. This module
//! keeps the registry of holds, paces the ticks and their lanes' waves, and
//! counts; [`wave`] renews one wave (mark → send → tally → repair →
//! finish).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use tracing::{info, warn};

use crate::clock;
use crate::config::Config;
use crate::error::Error;
use crate::hold::{Hold, HoldState};
use crate::members::Members;
use crate::sync::locked;
use crate::telemetry::Cause;

mod order;
mod stats;
mod wave;

use self::stats::Counters;
pub use self::stats::WatchdogStats;

/// What the last measured tick says of the renewals' cost, and the
/// capacity it gives: `u64::MAX` while nothing is measured.
struct Load {
    /// Renewal cost per lock, in nanoseconds (0: not measured).
    per_lock_nanos: AtomicU64,
    capacity: AtomicU64,
    /// Holds registered for renewal and still held: a hold leaves the
    /// count when it leaves [`HoldState::Held`] (released, lost, stopped
    /// at `max_hold`; see [`Hold::count_in`]), and each tick sets it to
    /// the registry's live holds.
    registered: Arc<AtomicUsize>,
}

impl Default for Load {
    fn default() -> Self {
        Self {
            per_lock_nanos: AtomicU64::new(0),
            capacity: AtomicU64::new(u64::MAX),
            registered: Arc::new(AtomicUsize::new(0)),
        }
    }
}

/// How many entries the registry takes beyond twice its length after it
/// last dropped the holds gone, before it drops them again (see
/// [`Watchdog::register`]).
const PRUNE_SLACK: usize = 1_024;

/// Below this many renewed holds a manager is never refused: with few
/// locks a wave's cost is its round trip, not the server's work per lock,
/// and the measure would say nothing about the load.
pub(crate) const MIN_CAPACITY: u64 = 1_000;

/// The share of a hold's validity (lease less drift) a tick may take with
/// the renew interval before it: a hold is renewed again within one
/// interval plus one tick, and the rest is the margin for a tick slower
/// than the last one measured.
const BUDGET_SHARE: (u32, u32) = (3, 4);

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

pub(crate) struct Watchdog {
    nodes: Arc<Members>,
    /// Most locks per wave: [`WAVE`], smaller in tests.
    wave: AtomicUsize,
    holds: Mutex<Vec<Weak<Hold>>>,
    /// The registry's length from which a registration drops the holds
    /// gone (see [`Watchdog::register`]); set under its lock.
    prune_at: AtomicUsize,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    counters: Counters,
    load: Load,
}

impl Watchdog {
    pub(crate) fn new(nodes: &Arc<Members>) -> Arc<Self> {
        Arc::new(Self {
            nodes: Arc::clone(nodes),
            wave: AtomicUsize::new(WAVE),
            holds: Mutex::new(Vec::new()),
            prune_at: AtomicUsize::new(PRUNE_SLACK),
            task: Mutex::new(None),
            counters: Counters::default(),
            load: Load::default(),
        })
    }

    /// Sets the most locks per wave (tests: many waves without many locks).
    #[cfg(test)]
    pub(crate) fn set_wave(&self, locks: usize) {
        self.wave.store(locks.max(1), Ordering::Relaxed);
    }

    /// How many holds the registry keeps, gone ones included (tests).
    #[cfg(test)]
    pub(crate) fn registry_len(&self) -> usize {
        locked(&self.holds).len()
    }

    fn interval(&self) -> Duration {
        self.nodes.config.renew_interval
    }

    /// Admits a new renewed hold, or refuses it with
    /// [`Error::Overloaded`] when this manager already holds as many as the
    /// last measured tick shows it can renew within their validity:
    /// renewal comes before new work, so that no held lock lapses for a
    /// new one.
    pub(crate) fn admit(&self) -> Result<(), Error> {
        let capacity = self.load.capacity.load(Ordering::Relaxed);
        let held = self.load.registered.load(Ordering::Relaxed) as u64;
        if held < capacity.max(MIN_CAPACITY) {
            return Ok(());
        }
        add(&self.counters.refused, 1);
        let per_lock = Duration::from_nanos(self.load.per_lock_nanos.load(Ordering::Relaxed));
        Err(Error::Overloaded {
            held,
            capacity,
            renewal_per_lock: per_lock,
            lease: self.nodes.config.lease,
        })
    }

    /// Records a tick's cheapest measured renewal cost per lock, and the
    /// capacity it gives: the holds whose renewal fits, after the renew
    /// interval, in [`BUDGET_SHARE`] of the validity.
    fn measured(&self, per_lock: Duration) {
        let config = &self.nodes.config;
        let validity = config.lease.saturating_sub(self.nodes.drift(config.lease));
        let budget = validity * BUDGET_SHARE.0 / BUDGET_SHARE.1;
        let room = budget.saturating_sub(config.renew_interval);
        let nanos = per_lock.as_nanos().max(1);
        let capacity = u64::try_from(room.as_nanos() / nanos).unwrap_or(u64::MAX - 1);
        let per_lock_nanos = u64::try_from(nanos).unwrap_or(u64::MAX);
        self.load
            .per_lock_nanos
            .store(per_lock_nanos, Ordering::Relaxed);
        self.load.capacity.store(capacity, Ordering::Relaxed);
    }

    /// Starts renewing `hold`; starts the task if it is not running. The
    /// registry drops the holds gone (released and dropped) once it has
    /// doubled, plus [`PRUNE_SLACK`], since it last did: a manager taking
    /// short locks at a high rate keeps no more than that between ticks,
    /// at a cost of one entry looked at per registration.
    pub(crate) fn register(self: &Arc<Self>, hold: &Arc<Hold>) {
        hold.count_in(&self.load.registered);
        {
            let mut holds = locked(&self.holds);
            if holds.len() >= self.prune_at.load(Ordering::Relaxed) {
                holds.retain(|weak| weak.strong_count() > 0);
                self.pruned(holds.len());
            }
            holds.push(Arc::downgrade(hold));
            self.load.registered.fetch_add(1, Ordering::Relaxed);
        }
        let mut task = locked(&self.task);
        if task
            .as_ref()
            .is_none_or(tokio::task::JoinHandle::is_finished)
        {
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                *task = Some(handle.spawn(clock::inherit(run(Arc::downgrade(self)))));
            }
        }
    }

    /// The holds to renew this tick. Holds that were released, lost or
    /// dropped leave the registry here; holds past their `max_hold` stop
    /// here.
    fn live(&self, now: Instant) -> Vec<Arc<Hold>> {
        let mut live = Vec::new();
        let mut holds = locked(&self.holds);
        holds.retain(|weak| {
            let Some(hold) = weak.upgrade() else {
                return false;
            };
            if hold.stored_phase() != HoldState::Held {
                return false;
            }
            if let Some(max) = hold.max_hold {
                if now.saturating_duration_since(hold.acquired_at) >= max {
                    if hold.stop_at_max_hold() {
                        add(&self.counters.max_hold_stops, 1);
                        info!(lock = %hold.keys.name, ?max, "max hold reached; renewal stopped");
                    }
                    return false;
                }
            }
            live.push(hold);
            true
        });
        // Under the registry's lock, so that no hold registered meanwhile
        // is counted out.
        self.load.registered.store(live.len(), Ordering::Relaxed);
        self.pruned(holds.len());
        drop(holds);
        live
    }

    /// The registry holds `len` entries, none known gone: it is pruned
    /// again from twice that plus [`PRUNE_SLACK`]. Under its lock.
    fn pruned(&self, len: usize) {
        let at = len.saturating_mul(2).saturating_add(PRUNE_SLACK);
        self.prune_at.store(at, Ordering::Relaxed);
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        if let Some(task) = locked(&self.task).take() {
            task.abort();
        }
    }
}

/// The timeout of one renewal pipeline: the per-node timeout plus 50 ms per
/// thousand locks for encoding and the script's own time on the node, at
/// most half the renewal period (and never below the per-node timeout).
pub(crate) fn renew_timeout(config: &Config, locks: usize) -> Duration {
    let thousands = u32::try_from(locks.div_ceil(1_000)).unwrap_or(u32::MAX);
    let want = config
        .node_timeout
        .saturating_add(Duration::from_millis(50).saturating_mul(thousands));
    want.min(config.renew_interval / 2).max(config.node_timeout)
}

async fn run(watchdog: Weak<Watchdog>) {
    let Some(interval) = watchdog.upgrade().map(|w| w.interval()) else {
        return;
    };
    let mut ticker = clock::ticker(interval);
    loop {
        ticker.tick().await;
        #[cfg(test)]
        {
            // The simulator's process pauses stop the watchdog too.
            let Some(id) = watchdog.upgrade().map(|w| w.nodes.client_id.clone()) else {
                return;
            };
            crate::hooks::pause::wait(&id).await;
        }
        let Some(watchdog) = watchdog.upgrade() else {
            return;
        };
        tick(&watchdog).await;
    }
}

/// Marks `hold` lost (once, counted there) for `cause`, and releases it in
/// the background wherever it is still ours.
fn lose(hold: &Arc<Hold>, cause: Cause, why: &str) {
    if !hold.lose(cause) {
        return;
    }
    warn!(lock = %hold.keys.name, cause = why, "lock lost");
    let _ = hold.release_in_background(0);
}

/// Most locks per wave. A tick renews its holds in waves spread over part
/// of the renew interval, each one pipeline per node (of
/// [`RENEW_CHUNK`](crate::node::RENEW_CHUNK) locks per script). A wave's
/// validity is counted from its own start, its pipeline is the only one in
/// memory, a release waits at most for the wave of its own hold, and the
/// nodes see a steady trickle of small batches instead of one burst that
/// would delay every acquisition behind it.
pub(crate) const WAVE: usize = 10_000;

/// Fewest locks per wave (one script call per node), unless fewer are held.
const MIN_WAVE: usize = crate::node::RENEW_CHUNK;

/// Shortest time between the starts of two waves.
const MIN_GAP: Duration = Duration::from_millis(1);

/// How a tick renews `holds` locks: the locks per wave to start with, and
/// the time the waves are spread over. The spread is at most half the renew
/// interval, and at most half of what the lease leaves after the interval,
/// so that a hold is renewed again within `interval + spread`, well inside
/// its lease. Waves start at least [`MIN_GAP`] apart.
fn plan(holds: usize, config: &Config, max_wave: usize) -> (usize, Duration) {
    let interval = config.renew_interval;
    let spread = (interval / 2).min(config.lease.saturating_sub(interval) / 2);
    let most_waves = usize::try_from(spread.as_micros() / MIN_GAP.as_micros())
        .unwrap_or(usize::MAX)
        .max(1);
    let max_wave = max_wave.max(1);
    let waves = holds
        .div_ceil(MIN_WAVE.min(max_wave))
        .min(most_waves)
        .max(holds.div_ceil(max_wave))
        .max(1);
    (holds.div_ceil(waves).max(1), spread)
}

/// `spread × done / total`: when the wave that starts at hold `done` is due.
fn share(spread: Duration, done: usize, total: usize) -> Duration {
    let nanos = spread.as_nanos() * done as u128 / total.max(1) as u128;
    Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX))
}

/// One renewal round: every registered hold, wave by wave, the waves paced
/// evenly over the spread of [`plan`]; with a cluster member of several
/// shards, the holds by slot in lanes, one per shard ([`order`]), whose
/// waves run at the same time. A lane that falls behind that pace (slow
/// nodes, a busy client) doubles its waves, up to [`WAVE`] locks, so that
/// it still ends in time. A node that fails a wave (an error or no answer
/// in time) is not asked again in its lane this tick: its answers count as
/// failures, so a dead node costs one timeout per lane (the lanes wait at
/// the same time), not one per wave; a shard that fails costs its own
/// lane's locks only.
pub(crate) async fn tick(wd: &Watchdog) {
    let began = clock::monotonic();
    let mut holds = wd.live(clock::now());
    if holds.is_empty() {
        return;
    }
    // Earliest expiry first: under load, the holds closest to lapsing are
    // renewed first (a cluster member's lanes then order by slot).
    holds.sort_by_cached_key(|h| h.valid_until());
    let max_wave = wd.wave.load(Ordering::Relaxed).max(1);
    let (mut size, spread) = plan(holds.len(), &wd.nodes.config, max_wave);
    // More than one wave on a manager with a cluster member of several
    // shards: holds by slot, in one lane per shard of it (`order`), each
    // lane's waves of whole script calls but for its last.
    let cuts = if holds.len() > size {
        order::by_shard(&wd.nodes, &mut holds)
    } else {
        Vec::new()
    };
    if !cuts.is_empty() {
        let chunk = MIN_WAVE.min(max_wave);
        size = size.next_multiple_of(chunk).min(max_wave);
    }
    let pace = Pace {
        total: holds.len(),
        began,
        spread,
        size,
        max_wave,
    };
    // A shard is a server of its own: its lane runs beside the others, and
    // the tick takes about as long as one shard's waves.
    let lanes = order::lanes(&cuts, holds.len());
    let costs =
        futures::future::join_all(lanes.into_iter().map(|r| lane(wd, &holds[r], pace))).await;
    // The lanes run side by side: a tick costs its slowest lane's time,
    // here per lock of the whole tick.
    if let Some(per_lock) = costs.into_iter().flatten().max() {
        wd.measured(per_lock);
    }
    add(&wd.counters.ticks, 1);
    let took = clock::monotonic().saturating_duration_since(began);
    if took > wd.interval() {
        add(&wd.counters.overruns, 1);
        warn!(locks = holds.len(), ?took, interval = ?wd.interval(), "a renewal tick took longer than the renew interval: the lease is short for this many locks");
    }
}

/// How a tick's lanes pace their waves.
#[derive(Clone, Copy)]
struct Pace {
    /// Holds of the whole tick, over every lane.
    total: usize,
    began: Instant,
    spread: Duration,
    /// Locks per wave to start with.
    size: usize,
    max_wave: usize,
}

/// Renews `holds` (one lane of a tick) in waves paced evenly over the
/// spread, doubling the waves when behind; a node that fails a wave is
/// down for the rest of the lane. Returns the lane's renewal cost per lock
/// of the tick: its cheapest measured wave's, scaled by the lane's share
/// of the tick's holds (`None` if no wave was measured).
async fn lane(wd: &Watchdog, holds: &[Arc<Hold>], pace: Pace) -> Option<Duration> {
    let mut cheapest: Option<Duration> = None;
    let part = u32::try_from(pace.total.div_ceil(holds.len().max(1))).unwrap_or(u32::MAX);
    let mut size = pace.size;
    let gap = share(pace.spread, size, holds.len());
    let mut down = vec![false; wd.nodes.len()];
    let mut done = 0;
    while done < holds.len() {
        let due = pace.began + share(pace.spread, done, holds.len());
        if clock::monotonic() > due + gap {
            size = size.saturating_mul(2).min(pace.max_wave);
        }
        clock::sleep_until(due).await;
        wd.nodes.metrics.wave_started(due);
        let end = done.saturating_add(size).min(holds.len());
        let cost = wave::renew(wd, &holds[done..end], &mut down).await;
        if let Some(c) = cost {
            let c = cheapest.map_or(c, |m| m.min(c));
            cheapest = Some(c);
            // Known from the first wave on: a burst of acquisitions is
            // refused while the tick is still renewing, not after it.
            wd.measured(c / part.max(1));
        }
        done = end;
    }
    cheapest.map(|c| c / part.max(1))
}
