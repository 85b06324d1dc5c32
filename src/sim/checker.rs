//! The history of one run and the invariants checked on it.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use super::counts;
use super::observers::Observers;
use crate::sync::locked;
use crate::Error;

/// Lock names used by the clients; the log numbers a lock by its place
/// here.
pub(crate) const LOCKS: [&str; 3] = ["a", "b", "c"];

/// The election of the election mode (`election`), whose lock
/// (`election:e`) the log numbers [`ELECTION`], after [`LOCKS`]: its
/// leaderships are holds of that lock.
pub(crate) const ELECTION_NAME: &str = "e";

/// The election's lock number in the log.
pub(crate) const ELECTION: usize = LOCKS.len();

/// The read-write lock of the rw mode (`rw`): its writers' holds are lock
/// [`WRITER`] in the log, its readers' lock [`READER`].
pub(crate) const RW_NAME: &str = "w";

/// The rw mode's writers' lock number in the log.
pub(crate) const WRITER: usize = ELECTION + 1;

/// The rw mode's readers' lock number in the log (holds of it may overlap
/// each other, never a writer's).
pub(crate) const READER: usize = ELECTION + 2;

/// The semaphore of the semaphore mode (`semaphore`): a permit of slot `i`
/// is a hold of lock [`SLOT`]` + i` in the log.
pub(crate) const SEMAPHORE_NAME: &str = "s";

/// The semaphore mode's slot 0 lock number in the log.
pub(crate) const SLOT: usize = ELECTION + 3;

/// An error's kind as the log records it: without node addresses or times.
pub(crate) fn short(e: &Error) -> String {
    let s = format!("{e:?}");
    s.split([' ', '{', '(']).next().unwrap_or("").to_owned()
}

/// The invariants; see the module docs of `sim`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Invariant {
    /// Two holds of one lock believed themselves valid at once.
    MutualExclusion,
    /// A later hold got a token not above an earlier one's.
    Fencing,
    /// A hold believed itself valid again after a later hold was granted a
    /// larger token (a lapsed hold brought back).
    FencingResumed,
    /// `lost()` fired after `valid_until()` on the suspend-aware clock (or
    /// never, for a hold that lapsed while not released); when the process
    /// was paused or suspended at `valid_until()`, after it woke up (for a
    /// suspend, plus the resume watcher's poll period).
    LossDeadline,
    /// The same for a fixed-lease hold (no watchdog): it must be lost at
    /// the end of its validity.
    LossDeadlineFixed,
    /// A lock key outlived quiescence and `flush()`.
    Quiescence,
    /// An acquisition ran past its wait plus two node timeouts (its last
    /// fan-out and the rollback it waits for).
    Bounded,
    /// A task hung or panicked.
    Liveness,
    /// A live waiter wanted a lock that was free on a quorum of nodes it
    /// could reach, and nobody was granted it within the bound (see
    /// `liveness`).
    Progress,
    /// Node calls went round without virtual time passing (a spin: on a
    /// real network, a hot loop of round trips).
    Spin,
    /// A node held a lock at a key other than the one the run's key layout
    /// gives its name (see `liveness`, which samples the keys).
    Layout,
    /// A call that may have run (an acquire or a forced release whose try
    /// ran on a shard and whose reply was lost) was sent again (see
    /// `shards`).
    Resent,
    /// Any call was sent again after a try that ran and whose response
    /// timed out, its connection alive (see `shards`).
    ResentAfterTimeout,
    /// Two leaderships of the election believed themselves leader at once
    /// ([`Invariant::MutualExclusion`] of the election's lock, the belief
    /// being `Leadership::is_leader`).
    OneLeader,
    /// A later leadership got a term not above an earlier one's
    /// ([`Invariant::Fencing`] of the election's lock).
    Terms,
    /// An observer (a receiver of `observe()`, or a task's `leader()`
    /// reads) reported a leader of an older (term, revision) than one it
    /// reported before.
    ObservedOlder,
    /// An observer reported a leader (term, revision, value) that no
    /// quorum of the nodes held at any instant before (`records`).
    ObservedUnheld,
    /// More permits of the semaphore believed themselves valid at once
    /// than it has (`counts`).
    Permits,
    /// A later permit of a slot got a token not above an earlier one's of
    /// that slot ([`Invariant::Fencing`] of the slot).
    PermitTokens,
    /// Two writers of the read-write lock believed themselves valid at
    /// once ([`Invariant::MutualExclusion`] of its writers).
    TwoWriters,
    /// A reader believed itself valid while a writer did (`counts`).
    ReaderBesideWriter,
    /// A later writer got a token not above an earlier one's
    /// ([`Invariant::Fencing`] of its writers).
    WriterTokens,
    /// A writer asked in the fault-free end of the run waited past the
    /// bound (`rw`), readers coming all along.
    WriterWait,
}

/// One thing that happened, at a virtual time. Fields are read through
/// `Debug` in the event log.
#[derive(Debug, Clone)]
#[allow(dead_code)]
pub(crate) enum Ev {
    Acquired {
        hold: usize,
        lock: usize,
        /// When the acquisition started.
        started: Duration,
        /// How many events the log had then (a causal order where the
        /// virtual time ties).
        since: usize,
        token: u64,
        vu: Duration,
        fixed: bool,
    },
    Reentered {
        hold: usize,
        count: u32,
    },
    /// Belief ended: released or dropped by the client.
    Released {
        hold: usize,
        how: &'static str,
    },
    ReleaseResult {
        hold: usize,
        result: String,
    },
    /// Observed at `valid_until`, which did not move.
    Lapsed {
        hold: usize,
    },
    /// `valid_until` moved past now after a lapse.
    Resumed {
        hold: usize,
        vu: Duration,
    },
    Lost {
        hold: usize,
        vu: Duration,
    },
    Failed {
        lock: usize,
        op: &'static str,
        error: String,
        late: Option<Duration>,
    },
    Cancelled {
        lock: usize,
        op: &'static str,
    },
    ForceUnlock {
        lock: usize,
    },
    /// A process (its tasks and its watchdog) is paused until `until`.
    Paused {
        proc: usize,
        until: Duration,
    },
    /// A process is suspended until `until`: paused, and its monotonic
    /// clock stands still.
    Suspended {
        proc: usize,
        until: Duration,
    },
    /// A node restarted empty.
    Wiped {
        node: usize,
    },
    Fault(String),
    /// A node's election record changed (`records`): (term, revision,
    /// value), or none.
    Record {
        node: usize,
        record: Option<(u64, u64, String)>,
    },
    /// A record is on a quorum of the nodes at once, for the first time.
    Held {
        term: u64,
        rev: u64,
        value: String,
    },
    /// A leadership proclaimed a new value (`Leadership::proclaim`).
    Proclaimed {
        hold: usize,
        value: String,
        result: String,
    },
    /// An observer reported a leader: `via` a receiver of `observe()`
    /// (`watch`) or a `leader()` read (`read`).
    Observed {
        observer: usize,
        via: &'static str,
        term: u64,
        rev: u64,
        value: String,
    },
    /// An observer reported that nobody leads.
    ObservedNone {
        observer: usize,
        via: &'static str,
    },
    /// The run's semaphore has `permits` permits (semaphore mode).
    Semaphore {
        permits: u32,
    },
    /// A node call (traced in replays).
    Call {
        node: usize,
        call: &'static str,
        fate: String,
    },
    Violation(Invariant, String),
}

/// Who did it: process and task, or the world.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Who(pub(crate) usize, pub(crate) usize);

pub(crate) const WORLD: Who = Who(usize::MAX, 0);

#[derive(Debug, Clone)]
pub(crate) struct Entry {
    pub(crate) at: Duration,
    pub(crate) who: Who,
    pub(crate) ev: Ev,
}

/// The event log of one run, shared by every task.
#[derive(Clone)]
pub(crate) struct Log {
    start: Instant,
    entries: Arc<Mutex<Vec<Entry>>>,
}

impl Log {
    pub(crate) fn new() -> Self {
        Self {
            start: Instant::now(),
            entries: Arc::default(),
        }
    }

    pub(crate) fn now(&self) -> Duration {
        Instant::now().saturating_duration_since(self.start)
    }

    /// An instant of the run as an offset from its start.
    pub(crate) fn at(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.start)
    }

    pub(crate) fn push(&self, who: Who, ev: Ev) {
        let at = self.now();
        locked(&self.entries).push(Entry { at, who, ev });
    }

    /// How many events have been logged so far.
    pub(crate) fn mark(&self) -> usize {
        locked(&self.entries).len()
    }

    pub(crate) fn entries(&self) -> Vec<Entry> {
        locked(&self.entries).clone()
    }
}

/// The log as text, one event a line.
pub(crate) fn render(entries: &[Entry]) -> String {
    let mut out = String::new();
    for e in entries {
        let who = if e.who.0 == usize::MAX {
            "world".to_owned()
        } else {
            format!("p{}.t{}", e.who.0, e.who.1)
        };
        let _ = writeln!(out, "{:>10.3}ms {who:<6} {:?}", ms(e.at), e.ev);
    }
    out
}

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1_000.0
}

/// How soon after a pause a lapsed hold must be lost or released.
const PAUSE_SLACK: Duration = Duration::from_millis(5);

/// How late after a resume a loss is seen: the resume watcher's longest
/// poll period (a wait whose deadline passed during the suspend, or ends
/// within a period after it, learns of the resume at the watcher's next
/// poll).
const RESUME_POLL: Duration = crate::resume::POLL;

#[derive(Default)]
struct HoldView {
    lock: usize,
    proc: usize,
    /// Log positions: acquisition start and completion.
    since: usize,
    seq: usize,
    /// When its acquisition started (its grants landed from then on).
    started: Duration,
    acquired: Duration,
    token: u64,
    fixed: bool,
    /// Belief intervals, `[start, end)`.
    intervals: Vec<(Duration, Option<Duration>)>,
    /// `valid_until` at the first lapse.
    first_lapse: Option<Duration>,
    /// Log positions and times where it believed itself valid again.
    resumed: Vec<(usize, Duration)>,
    released: Option<Duration>,
    lost: Option<Duration>,
}

impl HoldView {
    fn close(&mut self, at: Duration) {
        if let Some(last) = self.intervals.last_mut() {
            if last.1.is_none() {
                last.1 = Some(at);
            }
        }
    }

    fn open(&self) -> bool {
        self.intervals.last().is_some_and(|i| i.1.is_none())
    }
}

/// Every violation of the history, by invariant.
///
/// `attempt` bounds one acquisition attempt (the node timeout): a hold
/// granted more than that after another was granted came from an attempt
/// that started after it.
pub(crate) fn check(
    entries: &[Entry],
    end: Duration,
    attempt: Duration,
) -> Vec<(Invariant, String)> {
    let mut out = Vec::new();
    let mut holds: BTreeMap<usize, HoldView> = BTreeMap::new();
    let mut wipes = Vec::new();
    let mut breaks = Vec::new();
    let mut pauses = Vec::new();
    let mut observers = Observers::default();
    let mut permits = None;
    for (seq, e) in entries.iter().enumerate() {
        match &e.ev {
            Ev::Held { term, rev, value } => {
                observers
                    .held
                    .entry((*term, *rev, value.clone()))
                    .or_insert(e.at);
            }
            Ev::Observed {
                observer,
                via,
                term,
                rev,
                value,
            } => out.extend(observers.check(*observer, via, (*term, *rev, value.clone()), e.at)),
            Ev::Acquired {
                hold,
                lock,
                started,
                since,
                token,
                fixed,
                ..
            } => {
                holds.insert(
                    *hold,
                    HoldView {
                        lock: *lock,
                        proc: e.who.0,
                        since: *since,
                        seq,
                        started: *started,
                        acquired: e.at,
                        token: *token,
                        fixed: *fixed,
                        intervals: vec![(e.at, None)],
                        ..HoldView::default()
                    },
                );
            }
            Ev::Released { hold, .. } => {
                if let Some(h) = holds.get_mut(hold) {
                    h.released.get_or_insert(e.at);
                    h.close(e.at);
                }
            }
            Ev::Lapsed { hold } => {
                if let Some(h) = holds.get_mut(hold) {
                    h.first_lapse.get_or_insert(e.at);
                    h.close(e.at);
                }
            }
            Ev::Resumed { hold, .. } => {
                if let Some(h) = holds.get_mut(hold) {
                    if !h.open() && h.released.is_none() && h.lost.is_none() {
                        h.intervals.push((e.at, None));
                        h.resumed.push((seq, e.at));
                    }
                }
            }
            Ev::Lost { hold, vu } => {
                if let Some(h) = holds.get_mut(hold) {
                    h.lost.get_or_insert(e.at);
                    h.close(e.at);
                    if e.at > *vu && h.first_lapse.is_none() {
                        h.first_lapse = Some(*vu);
                    }
                }
            }
            Ev::ForceUnlock { lock } => breaks.push((*lock, seq, e.at)),
            Ev::Wiped { .. } => {
                wipes.push(e.at);
                observers.wipes.push(e.at);
            }
            Ev::Paused { proc, until } => pauses.push((*proc, e.at, *until, Duration::ZERO)),
            Ev::Suspended { proc, until } => pauses.push((*proc, e.at, *until, RESUME_POLL)),
            Ev::Failed {
                late: Some(late),
                op,
                error,
                ..
            } => out.push((
                Invariant::Bounded,
                format!(
                    "{op} at {:.3}ms resolved {late:?} past its bound ({error})",
                    ms(e.at)
                ),
            )),
            Ev::Violation(inv, what) => out.push((*inv, what.clone())),
            Ev::Semaphore { permits: p } => permits = Some(*p),
            _ => {}
        }
    }
    for h in holds.values_mut() {
        h.close(end);
        // A force-unlock is an administrative break: a hold whose
        // acquisition had started by then is no longer expected to be
        // exclusive from then on. It is logged when asked for and again as
        // it lands on each node (a delete that was in flight may land after
        // `force_unlock` returned, and breaks the holds of that moment).
        let broken = breaks
            .iter()
            .filter(|(l, seq, _)| *l == h.lock && *seq >= h.since)
            .map(|(_, _, at)| *at)
            .min();
        if let Some(at) = broken {
            h.intervals.retain(|i| i.0 < at);
            for i in &mut h.intervals {
                i.1 = Some(i.1.map_or(at, |e| e.min(at)));
            }
        }
    }
    let views: Vec<counts::View<'_>> = holds
        .iter()
        .map(|(k, h)| (*k, h.lock, h.intervals.as_slice()))
        .collect();
    out.extend(counts::check(&views, end, permits));
    let list: Vec<(&usize, &HoldView)> = holds.iter().collect();
    for (i, (ka, a)) in list.iter().enumerate() {
        for (kb, b) in &list[i + 1..] {
            // Readers share: `counts` checks them against the writers.
            if a.lock != b.lock || a.lock == READER {
                continue;
            }
            let (exclusive, fenced) = counts::invariants(a.lock);
            for ia in &a.intervals {
                for ib in &b.intervals {
                    let (ae, be) = (ia.1.unwrap_or(end), ib.1.unwrap_or(end));
                    if ia.0 < be && ib.0 < ae {
                        out.push((
                            exclusive,
                            format!(
                                "lock {}: hold {ka} valid {:.3}..{:.3}ms and hold {kb} valid {:.3}..{:.3}ms overlap",
                                a.lock, ms(ia.0), ms(ae), ms(ib.0), ms(be)
                            ),
                        ));
                    }
                }
            }
            // Successive: the second acquisition started after the first
            // one completed.
            let after =
                |x: &HoldView, y: &HoldView| x.since > y.seq || x.acquired > y.acquired + attempt;
            let (first, second, kf, ks) = if after(b, a) {
                (a, b, ka, kb)
            } else if after(a, b) {
                (b, a, kb, ka)
            } else {
                continue;
            };
            // A hold that believes itself valid again after a later hold
            // was granted is, to the resource, a successor with a smaller
            // token.
            for (x, y, kx, ky) in [(a, b, ka, kb), (b, a, kb, ka)] {
                for (seq, at) in &x.resumed {
                    let wiped = wipes.iter().any(|w| *w >= y.acquired && *w <= *at);
                    if y.seq < *seq && y.token > x.token && !wiped {
                        out.push((
                            Invariant::FencingResumed,
                            format!(
                                "lock {}: hold {kx} (token {}) believed itself valid again at {:.3}ms, after hold {ky} got token {}",
                                a.lock,
                                x.token,
                                ms(*at),
                                y.token
                            ),
                        ));
                    }
                }
            }
            // A node restarted empty after the first hold's grant landed
            // there (its acquisition had started) lost its counter.
            let wiped = wipes
                .iter()
                .any(|w| *w >= first.started && *w <= second.acquired);
            if !wiped && second.token <= first.token {
                out.push((
                    fenced,
                    format!(
                        "lock {}: hold {ks} at {:.3}ms got token {} after hold {kf} at {:.3}ms got {}",
                        a.lock,
                        ms(second.acquired),
                        second.token,
                        ms(first.acquired),
                        first.token
                    ),
                ));
            }
        }
    }
    for (k, h) in &holds {
        let Some(vu) = h.first_lapse else { continue };
        // A paused process cannot tell at `valid_until`; it must tell as
        // soon as it wakes up. A suspended one as soon as its resume
        // watcher polls after the resume: `valid_until` is on the
        // suspend-aware clock (the run's), but the waits' timers armed
        // before the suspend are late by it. Back-to-back pauses chain.
        let mut deadline = vu;
        while let Some(next) = pauses
            .iter()
            .filter(|(p, from, until, late)| {
                *p == h.proc && *from <= deadline && deadline <= *until + *late
            })
            .map(|(_, _, until, late)| *until + *late + PAUSE_SLACK)
            .max()
        {
            deadline = next;
        }
        let released_first = h.released.is_some_and(|r| r <= deadline);
        let lost_in_time = h.lost.is_some_and(|l| l <= deadline);
        if !released_first && !lost_in_time {
            out.push((
                if h.fixed {
                    Invariant::LossDeadlineFixed
                } else {
                    Invariant::LossDeadline
                },
                format!(
                    "hold {k}{}: valid until {:.3}ms, lost {}",
                    if h.fixed { " (fixed lease)" } else { "" },
                    ms(vu),
                    h.lost
                        .map_or("never".to_owned(), |l| format!("at {:.3}ms", ms(l)))
                ),
            ));
        }
    }
    out
}
