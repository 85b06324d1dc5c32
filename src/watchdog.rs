//! One watchdog per manager: renews every held lock on every node, in waves
//! of 100 to [`WAVE`] locks spread over half the renew interval, one round
//! trip per node per wave, on a connection of its own; repairs nodes that
//! lost a key while a quorum of the others confirms the hold; and signals
//! locks that can no longer show a quorum.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::time::Instant;

use tracing::{debug, info, warn};

use crate::clock;
use crate::config::Config;
use crate::error::{NodeError, NodeErrorKind};
use crate::hold::{lapses, renew_lapsed, Hold, HoldState};
use crate::node::{RenewBatch, RenewItem, Renewed};
use crate::nodes::Nodes;
use crate::quorum::{self, FanOut};
use crate::sync::locked;

/// Counters of the watchdog since the manager was built.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct WatchdogStats {
    /// Ticks that renewed at least one lock.
    pub ticks: u64,
    /// Round trips sent, summed over nodes (one pipeline per node per tick).
    pub round_trips: u64,
    /// Lock-node renewals that extended a key.
    pub extended: u64,
    /// Lock-node renewals that re-created a missing key (repairs).
    pub repairs: u64,
    /// Lock-node renewals that found another owner.
    pub conflicts: u64,
    /// Lock-node renewals that failed (timeouts, refused connections).
    pub node_errors: u64,
    /// Locks declared lost.
    pub losses: u64,
    /// Locks whose renewal stopped at `max_hold`.
    pub max_hold_stops: u64,
    /// Locks renewed, summed over ticks.
    pub locks_renewed: u64,
    /// Time spent in the watchdog's own work (building batches and reading
    /// replies, not waiting on the network), summed over ticks, in µs.
    pub busy_micros: u64,
    /// Ticks that took longer than the renew interval: the lease is too
    /// short for the number of locks held (each is logged as a warning).
    pub overruns: u64,
}

#[derive(Default)]
struct Counters {
    ticks: AtomicU64,
    round_trips: AtomicU64,
    extended: AtomicU64,
    repairs: AtomicU64,
    conflicts: AtomicU64,
    node_errors: AtomicU64,
    losses: AtomicU64,
    max_hold_stops: AtomicU64,
    locks_renewed: AtomicU64,
    busy_micros: AtomicU64,
    overruns: AtomicU64,
}

fn add(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

pub(crate) struct Watchdog {
    nodes: Arc<Nodes>,
    /// Most locks per wave: [`WAVE`], smaller in tests.
    wave: AtomicUsize,
    holds: Mutex<Vec<Weak<Hold>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    counters: Counters,
}

impl Watchdog {
    pub(crate) fn new(nodes: &Arc<Nodes>) -> Arc<Self> {
        Arc::new(Self {
            nodes: Arc::clone(nodes),
            wave: AtomicUsize::new(WAVE),
            holds: Mutex::new(Vec::new()),
            task: Mutex::new(None),
            counters: Counters::default(),
        })
    }

    /// Sets the most locks per wave (tests: many waves without many locks).
    #[cfg(test)]
    pub(crate) fn set_wave(&self, locks: usize) {
        self.wave.store(locks.max(1), Ordering::Relaxed);
    }

    fn interval(&self) -> Duration {
        self.nodes.config.renew_interval
    }

    pub(crate) fn stats(&self) -> WatchdogStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        WatchdogStats {
            ticks: get(&c.ticks),
            round_trips: get(&c.round_trips),
            extended: get(&c.extended),
            repairs: get(&c.repairs),
            conflicts: get(&c.conflicts),
            node_errors: get(&c.node_errors),
            losses: get(&c.losses),
            max_hold_stops: get(&c.max_hold_stops),
            locks_renewed: get(&c.locks_renewed),
            busy_micros: get(&c.busy_micros),
            overruns: get(&c.overruns),
        }
    }

    /// Starts renewing `hold`; starts the task if it is not running.
    pub(crate) fn register(self: &Arc<Self>, hold: &Arc<Hold>) {
        locked(&self.holds).push(Arc::downgrade(hold));
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
        locked(&self.holds).retain(|weak| {
            let Some(hold) = weak.upgrade() else {
                return false;
            };
            if hold.stored_phase() != HoldState::Held {
                return false;
            }
            if let Some(max) = hold.max_hold {
                if now.saturating_duration_since(hold.acquired_at) >= max {
                    hold.max_hold_reached.store(true, Ordering::Release);
                    if hold.transition(HoldState::MaxHoldReached) {
                        add(&self.counters.max_hold_stops, 1);
                        info!(lock = %hold.keys.name, ?max, "max hold reached; renewal stopped");
                    }
                    return false;
                }
            }
            live.push(hold);
            true
        });
        live
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

/// Marks `hold` lost (once), counts it, and releases it in the background
/// wherever it is still ours.
fn lose(wd: &Watchdog, hold: &Arc<Hold>, why: &str) {
    if !hold.transition(HoldState::Lost) {
        return;
    }
    add(&wd.counters.losses, 1);
    warn!(lock = %hold.keys.name, why, "lock lost");
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
/// evenly over the spread of [`plan`]. A tick that falls behind that pace
/// (slow nodes, a busy client) doubles its waves, up to [`WAVE`] locks, so
/// that it still ends in time. A node that fails a wave (an error or no
/// answer in time) is not asked again this tick: its answers count as
/// failures, so a dead node costs one timeout per tick, not one per wave.
pub(crate) async fn tick(wd: &Watchdog) {
    let began = clock::monotonic();
    let holds = wd.live(clock::now());
    if holds.is_empty() {
        return;
    }
    let max_wave = wd.wave.load(Ordering::Relaxed).max(1);
    let (mut size, spread) = plan(holds.len(), &wd.nodes.config, max_wave);
    let gap = share(spread, size, holds.len());
    let mut down = vec![false; wd.nodes.len()];
    let mut done = 0;
    while done < holds.len() {
        let due = began + share(spread, done, holds.len());
        if clock::monotonic() > due + gap {
            size = size.saturating_mul(2).min(max_wave);
        }
        clock::sleep_until(due).await;
        let end = done.saturating_add(size).min(holds.len());
        renew_wave(wd, &holds[done..end], &mut down).await;
        done = end;
    }
    add(&wd.counters.ticks, 1);
    let took = clock::monotonic().saturating_duration_since(began);
    if took > wd.interval() {
        add(&wd.counters.overruns, 1);
        warn!(locks = holds.len(), ?took, interval = ?wd.interval(), "a renewal tick took longer than the renew interval: the lease is short for this many locks");
    }
}

/// Renews one wave of holds: marks each as renewing (a release of it then
/// waits for this wave), sends one pipeline per node, tallies per hold,
/// repairs nodes that lost keys, and declares losses.
async fn renew_wave(wd: &Watchdog, holds: &[Arc<Hold>], down: &mut [bool]) {
    let nodes = &wd.nodes;
    let start = clock::now();
    // A slow node (a busy one: its answers queue behind other clients') is
    // waited for up to four times the usual renewal timeout while the
    // wave's holds have validity to spare: at most half of the shortest
    // that is left. A renewal that lands within it still extends them. A
    // node that does not answer by then is skipped for the rest of the tick.
    let least = renew_timeout(&nodes.config, holds.len());
    let most = least.saturating_mul(4);
    let until = quorum::deadline_after(
        Instant::now(),
        most.saturating_mul(2)
            .saturating_add(nodes.config.node_timeout),
    );
    let mut due = Vec::with_capacity(holds.len());
    let mut earliest: Option<Instant> = None;
    for hold in holds {
        let mut r = locked(&hold.record);
        if hold.stored_phase() != HoldState::Held {
            continue;
        }
        let lapse = lapses(r.valid_until);
        if lapse <= start && !renew_lapsed() {
            // Lost, never renewed: a renewal would repair keys that may
            // since have been taken and released by someone else.
            drop(r);
            lose(wd, hold, "its validity ran out before it could be renewed");
            continue;
        }
        r.renewing = Some(until);
        drop(r);
        earliest = Some(earliest.map_or(lapse, |e| e.min(lapse)));
        due.push(Arc::clone(hold));
    }
    let Some(earliest) = earliest else {
        return;
    };
    let timeout = (earliest.saturating_duration_since(start) / 2).clamp(least, most);
    let batch = Arc::new(RenewBatch::new(due.iter().map(|h| renew_item(h)).collect()));
    batch.prepare();
    let n = nodes.len();
    let built = start.elapsed();
    let mut fan = FanOut::start(n, timeout, |i| {
        if down[i] {
            Box::pin(std::future::ready(Err(NodeError::new(
                NodeErrorKind::Timeout,
                "failed an earlier wave of this tick",
            ))))
        } else {
            nodes.node(i).renew(Arc::clone(&batch))
        }
    });
    fan.until(|_| false).await;
    let work = Instant::now();
    let now = clock::now();
    add(
        &wd.counters.round_trips,
        down.iter().filter(|d| !**d).count() as u64,
    );
    add(&wd.counters.locks_renewed, due.len() as u64);

    for (i, r) in fan.replies().iter().enumerate() {
        match r {
            Some(Ok(_)) => {}
            Some(Err(e)) => {
                add(&wd.counters.node_errors, due.len() as u64);
                if !down[i] {
                    warn!(node = i, addr = nodes.node(i).addr(), kind = %e.kind, error = %e.message, locks = due.len(), "renewal failed on node");
                }
                down[i] = true;
            }
            None => {
                add(&wd.counters.node_errors, due.len() as u64);
                warn!(
                    node = i,
                    addr = nodes.node(i).addr(),
                    ?timeout,
                    locks = due.len(),
                    "renewal timed out on node"
                );
                down[i] = true;
            }
        }
    }
    let required = nodes.required();
    let (mut extended, mut conflicts) = (0u64, 0u64);
    // Per node: the holds to re-create there (renewed on a quorum, missing here).
    let mut repairs: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut lost = vec![false; due.len()];
    for (k, hold) in due.iter().enumerate() {
        let (mut confirmed, mut absent) = (0, 0);
        let mut missing = Vec::new();
        let mut s = locked(&hold.record);
        for (i, r) in fan.replies().iter().enumerate() {
            let code = match r {
                Some(Ok(codes)) => codes.get(k).copied(),
                _ => None,
            };
            match code {
                Some(Renewed::Extended | Renewed::Repaired) => {
                    confirmed += 1;
                    extended += 1;
                    s.granted[i] = true;
                }
                Some(Renewed::Missing) => {
                    absent += 1;
                    s.granted[i] = false;
                    missing.push(i);
                }
                Some(Renewed::Conflict) => {
                    absent += 1;
                    conflicts += 1;
                    s.granted[i] = false;
                    warn!(lock = %hold.keys.name, node = i, "renewal conflict: another owner holds the key");
                }
                Some(Renewed::WrongType) => {
                    absent += 1;
                    s.granted[i] = false;
                    warn!(lock = %hold.keys.name, node = i, "renewal found a key of the wrong type");
                }
                None => {}
            }
        }
        // Lost when the old validity ran out before this tick completed (the
        // keys may have expired and been taken meanwhile: a renewal cannot
        // give that time back); when too many nodes answered that the key is
        // gone or someone else's for a quorum to confirm it (forced,
        // expired, or taken and released meanwhile: re-creating the keys
        // would hide that); or when this tick failed and the old validity
        // ends before the next tick could help.
        let lapsed = lapses(s.valid_until) <= now && !renew_lapsed();
        let validity = quorum::valid_until(start, now, hold.lease, nodes.drift(hold.lease));
        let renewed = !lapsed && confirmed >= required && validity.is_some();
        if let (true, Some(until)) = (renewed, validity) {
            s.valid_until = s.valid_until.max(until);
        }
        let unconfirmable = n - absent < required;
        let out_of_time = !renewed && s.valid_until <= now + wd.interval();
        drop(s);
        if lapsed || unconfirmable || out_of_time {
            lost[k] = true;
        } else if renewed {
            // Missing on a minority while a quorum confirmed: a node that
            // restarted empty (or evicted the key). Re-create it there.
            for i in missing {
                repairs[i].push(k);
            }
        } else {
            debug!(lock = %hold.keys.name, confirmed, required, "renewal missed the quorum this tick; retrying next tick");
        }
    }
    let repaired = repair(nodes, &due, &repairs, start).await;
    for (k, hold) in due.iter().enumerate() {
        locked(&hold.record).renewing = None;
        if lost[k] {
            lose(wd, hold, "renewal could not show a quorum in time");
        }
        hold.renew_done.notify_waiters();
    }
    add(&wd.counters.extended, extended);
    add(&wd.counters.repairs, repaired);
    add(&wd.counters.conflicts, conflicts);
    let busy = built + work.elapsed();
    add(
        &wd.counters.busy_micros,
        u64::try_from(busy.as_micros()).unwrap_or(u64::MAX),
    );
    debug!(
        locks = due.len(),
        extended,
        repaired,
        ?busy,
        "watchdog wave"
    );
}

/// Re-creates, on each node, the keys of the holds listed for it (by index
/// into `due`): one batch per node that needs one, in parallel, within the
/// tick's timeout. Returns how many keys were re-created.
async fn repair(
    nodes: &Nodes,
    due: &[Arc<Hold>],
    repairs: &[Vec<usize>],
    start: tokio::time::Instant,
) -> u64 {
    if repairs.iter().all(Vec::is_empty) {
        return 0;
    }
    let batches: Vec<Option<Arc<RenewBatch>>> = repairs
        .iter()
        .map(|ks| {
            (!ks.is_empty()).then(|| {
                Arc::new(RenewBatch::repair(
                    ks.iter().map(|&k| renew_item(&due[k])).collect(),
                ))
            })
        })
        .collect();
    let locks = repairs.iter().map(Vec::len).max().unwrap_or(0);
    let timeout = renew_timeout(&nodes.config, locks);
    let mut fan = FanOut::start(nodes.len(), timeout, |i| match &batches[i] {
        Some(b) => nodes.node(i).repair(Arc::clone(b)),
        None => Box::pin(std::future::ready(Ok(Vec::new()))),
    });
    fan.until(|_| false).await;
    let mut repaired = 0;
    for (i, r) in fan.replies().iter().enumerate() {
        let Some(Ok(codes)) = r else { continue };
        for (&k, code) in repairs[i].iter().zip(codes) {
            let hold = &due[k];
            if *code == Renewed::Repaired || *code == Renewed::Extended {
                repaired += u64::from(*code == Renewed::Repaired);
                if let Some(g) = locked(&hold.record).granted.get_mut(i) {
                    *g = true;
                }
                info!(lock = %hold.keys.name, node = i, addr = nodes.node(i).addr(), "repaired: re-created a missing lock key");
            }
        }
    }
    debug!(elapsed = ?clock::now().saturating_duration_since(start), repaired, "repair");
    repaired
}

/// What a renewal (or repair) sends for one hold.
fn renew_item(hold: &Hold) -> RenewItem {
    RenewItem {
        keys: Arc::clone(&hold.keys),
        owner: Arc::clone(&hold.holder_id),
        count: locked(&hold.record).count,
        token: hold.token,
        lease: hold.lease,
    }
}
