//! A history of who *believed* they held a lock, and a checker of it.
//!
//! Every client that enters the critical section records, on one process
//! clock (`std::time::Instant` relative to the history's base):
//!
//! - when it entered (the acquisition returned), with its fencing token;
//! - what it last saw of `guard.valid_until()` while holding;
//! - when it learned of a loss (`guard.lost()` fired), if it did;
//! - when it left (just before calling `release`).
//!
//! Its *belief interval* is `[entered, believed_until)` with
//! `believed_until = min(left, valid_until, lost)`: the span during which the
//! client believed it held the lock. A client that checks its validity as it
//! works ([`Hold::observe`]) stops believing at the first validity it sees
//! lapse, even if a later renewal pushes `valid_until` forward again.
//!
//! [`History::check`] verifies that
//!
//! 1. no two belief intervals overlap (mutual exclusion as the clients saw it);
//! 2. fencing tokens strictly increase in order of entry;
//!
//! and returns a [`Verdict`] that prints counts and the first violation of each
//! kind with both intervals and the events around it.
//!
//! Primitives that let several hold at once have checkers of their own over
//! the same intervals: [`History::check_capacity`] (a semaphore: at most `P`
//! beliefs at any instant) and [`History::check_rw`] (a read-write lock: a
//! writer's belief overlaps no other belief, writers' tokens increase). Both
//! are sweeps over the belief intervals, as [`check`] is.
//!
//! ```ignore
//! let history = History::new();
//! let guard = manager.lock("orders").await?;
//! let mut hold = history.enter("client-1", &owner, guard.fencing_token(), guard.valid_until());
//! // ... work, calling hold.observe(guard.valid_until()) and hold.lost_now() ...
//! hold.exit(guard.valid_until());
//! guard.release().await?;
//! history.check().assert_clean("my scenario");
//! ```

use std::collections::BTreeSet;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many events around a violation [`Verdict`] prints.
const CONTEXT_EVENTS: usize = 24;

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// The client entered the critical section with this fencing token.
    Entered {
        /// The fencing token of the hold.
        token: u64,
    },
    /// The client saw the validity it last knew of lapse (at this time).
    Lapsed,
    /// The client learned that the lock was lost.
    Lost,
    /// The client left the critical section.
    Left,
    /// Anything else worth seeing next to a violation (an injected fault, ...).
    Note(String),
}

/// One timestamped event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Time since the history's base.
    pub at: Duration,
    /// Who (a client name, or `fault`, ...).
    pub who: String,
    /// What.
    pub kind: EventKind,
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {:<10} ", ms(self.at), self.who)?;
        match &self.kind {
            EventKind::Entered { token } => write!(f, "entered (token {token})"),
            EventKind::Lapsed => f.write_str("validity lapsed"),
            EventKind::Lost => f.write_str("learned of loss"),
            EventKind::Left => f.write_str("left"),
            EventKind::Note(text) => f.write_str(text),
        }
    }
}

/// One completed hold, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// Sequence number in the history (order of recording).
    pub id: usize,
    /// The client's name.
    pub client: String,
    /// The lock owner id the client held as.
    pub owner: String,
    /// The fencing token.
    pub token: u64,
    /// When the acquisition returned.
    pub entered: Duration,
    /// When the client left (before releasing).
    pub left: Duration,
    /// The validity the client last relied on (the lapsed one if it lapsed).
    pub valid_until: Duration,
    /// When the client learned of a loss, if it did.
    pub lost: Option<Duration>,
    /// `min(left, valid_until, lost)`.
    pub believed_until: Duration,
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "#{} {} (owner {}) token {}: believed [{}, {}) = entered, then min(left {}, valid until {}, lost {})",
            self.id,
            self.client,
            short(&self.owner),
            self.token,
            ms(self.entered),
            ms(self.believed_until),
            ms(self.left),
            ms(self.valid_until),
            self.lost.map_or_else(|| "-".to_owned(), ms),
        )
    }
}

/// The recorded history of one lock (or one scenario).
#[derive(Debug)]
pub struct History {
    base: Instant,
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    events: Vec<Event>,
    intervals: Vec<Interval>,
}

impl History {
    /// An empty history whose clock starts now.
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            base: Instant::now(),
            state: Mutex::new(State::default()),
        })
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// `t` on the history's clock (0 for instants before the base).
    pub fn at(&self, t: Instant) -> Duration {
        t.saturating_duration_since(self.base)
    }

    /// Now on the history's clock.
    pub fn now(&self) -> Duration {
        self.at(Instant::now())
    }

    /// Records a free-form event now (a fault, a phase of the scenario).
    pub fn note(&self, who: &str, text: impl Into<String>) {
        let at = self.now();
        self.push_event(at, who, EventKind::Note(text.into()));
    }

    fn push_event(&self, at: Duration, who: &str, kind: EventKind) {
        self.state().events.push(Event {
            at,
            who: who.to_owned(),
            kind,
        });
    }

    /// `client` entered the critical section now, holding as `owner` with
    /// `token`, valid until `valid_until`. Record what follows on the
    /// returned [`Hold`] and finish with [`Hold::exit`].
    pub fn enter(
        self: &Arc<Self>,
        client: &str,
        owner: &str,
        token: u64,
        valid_until: Instant,
    ) -> Hold {
        let entered = self.now();
        self.push_event(entered, client, EventKind::Entered { token });
        Hold {
            history: Arc::clone(self),
            client: client.to_owned(),
            owner: owner.to_owned(),
            token,
            entered,
            valid_until: self.at(valid_until),
            lost: None,
            lapsed: false,
            done: false,
        }
    }

    /// Records a completed hold directly (synthetic histories, or clients
    /// that keep their own times); its events are added and `believed_until`
    /// is computed. Returns the interval's id.
    #[allow(clippy::too_many_arguments)]
    pub fn record(
        &self,
        client: &str,
        owner: &str,
        token: u64,
        entered: Duration,
        left: Duration,
        valid_until: Duration,
        lost: Option<Duration>,
    ) -> usize {
        self.push_event(entered, client, EventKind::Entered { token });
        self.complete(client, owner, token, entered, left, valid_until, lost)
    }

    /// Adds the interval of a hold whose `Entered` event is already recorded.
    #[allow(clippy::too_many_arguments)]
    fn complete(
        &self,
        client: &str,
        owner: &str,
        token: u64,
        entered: Duration,
        left: Duration,
        valid_until: Duration,
        lost: Option<Duration>,
    ) -> usize {
        let mut believed_until = left.min(valid_until);
        if let Some(lost) = lost {
            believed_until = believed_until.min(lost);
        }
        let believed_until = believed_until.max(entered);
        if let Some(lost) = lost {
            self.push_event(lost, client, EventKind::Lost);
        }
        self.push_event(left, client, EventKind::Left);
        let mut s = self.state();
        let id = s.intervals.len();
        s.intervals.push(Interval {
            id,
            client: client.to_owned(),
            owner: owner.to_owned(),
            token,
            entered,
            left,
            valid_until,
            lost,
            believed_until,
        });
        id
    }

    /// Every completed hold so far, in recording order.
    pub fn intervals(&self) -> Vec<Interval> {
        self.state().intervals.clone()
    }

    /// Every event so far, in time order.
    pub fn events(&self) -> Vec<Event> {
        let mut events = self.state().events.clone();
        events.sort_by_key(|e| e.at);
        events
    }

    /// Checks the history; see the module docs.
    pub fn check(&self) -> Verdict {
        check(&self.intervals(), &self.events())
    }

    /// Checks that at most `capacity` belief intervals held at any instant
    /// (a semaphore of `capacity` permits).
    pub fn check_capacity(&self, capacity: usize) -> Capacity {
        check_capacity(&self.intervals(), capacity)
    }

    /// Checks a read-write lock's history, where `is_writer` tells the
    /// writers' intervals from the readers'.
    pub fn check_rw(&self, is_writer: impl Fn(&Interval) -> bool) -> Exclusion {
        check_rw(&self.intervals(), &self.events(), is_writer)
    }
}

/// What [`History::check_capacity`] found.
#[derive(Debug, Clone)]
pub struct Capacity {
    /// Completed holds.
    pub acquisitions: usize,
    /// How many held at once, at most.
    pub most: usize,
    /// Entries that made more than `capacity` holders at once.
    pub excesses: usize,
    /// The holders believed at the earliest excess, the entering one last.
    pub first_excess: Option<Vec<Interval>>,
    capacity: usize,
}

impl Capacity {
    /// One line of counts.
    pub fn summary(&self) -> String {
        format!(
            "{} acquisitions, at most {} held at once (capacity {}), {} excesses => {}",
            self.acquisitions,
            self.most,
            self.capacity,
            self.excesses,
            if self.excesses == 0 {
                "CLEAN"
            } else {
                "VIOLATED"
            }
        )
    }

    /// Prints the counts (and the first excess) under `label`; panics on an
    /// excess.
    pub fn assert_clean(&self, label: &str) {
        let mut out = self.summary();
        if let Some(holders) = &self.first_excess {
            out.push_str("\n  first EXCESS, every belief at that entry:");
            for iv in holders {
                out.push_str(&format!("\n    {iv}"));
            }
        }
        eprintln!("capacity[{label}]: {out}");
        assert_eq!(self.excesses, 0, "capacity[{label}] exceeded:\n{out}");
    }
}

/// Checks that at most `capacity` of `intervals` (any order) are believed at
/// any instant.
pub fn check_capacity(intervals: &[Interval], capacity: usize) -> Capacity {
    let mut sorted: Vec<&Interval> = intervals.iter().collect();
    sorted.sort_by_key(|i| (i.entered, i.id));
    let (mut most, mut excesses, mut first_excess) = (0, 0, None);
    let mut active: Vec<&Interval> = Vec::new();
    for &iv in &sorted {
        active.retain(|a| a.believed_until > iv.entered);
        if iv.believed_until <= iv.entered {
            continue;
        }
        active.push(iv);
        most = most.max(active.len());
        if active.len() > capacity {
            excesses += 1;
            if first_excess.is_none() {
                first_excess = Some(active.iter().map(|a| (*a).clone()).collect());
            }
        }
    }
    Capacity {
        acquisitions: intervals.len(),
        most,
        excesses,
        first_excess,
        capacity,
    }
}

/// What [`History::check_rw`] found.
#[derive(Debug, Clone)]
pub struct Exclusion {
    /// Completed read holds.
    pub readers: usize,
    /// Completed write holds.
    pub writers: usize,
    /// How many readers held at once, at most.
    pub most_readers: usize,
    /// Pairs of a writer and a reader whose beliefs overlap.
    pub reader_writer_overlaps: usize,
    /// The earliest of them: (writer, reader).
    pub first_clash: Option<(Interval, Interval)>,
    /// The writers alone, checked as a lock's history: overlaps between
    /// writers and token inversions.
    pub writers_verdict: Verdict,
}

impl Exclusion {
    /// Violations of every kind.
    pub fn violations(&self) -> usize {
        self.reader_writer_overlaps + self.writers_verdict.violations()
    }

    /// One line of counts.
    pub fn summary(&self) -> String {
        format!(
            "{} reads (at most {} together), {} writes; reader-writer overlaps {}, writer overlaps {}, writer token inversions {} => {}",
            self.readers,
            self.most_readers,
            self.writers,
            self.reader_writer_overlaps,
            self.writers_verdict.overlaps,
            self.writers_verdict.inversions,
            if self.violations() == 0 { "CLEAN" } else { "VIOLATED" }
        )
    }

    /// Prints the counts (and the first violations) under `label`; panics on
    /// any violation.
    pub fn assert_clean(&self, label: &str) {
        let mut out = self.summary();
        if let Some((w, r)) = &self.first_clash {
            out.push_str(&format!(
                "\n  first READER BESIDE A WRITER:\n    {w}\n    {r}"
            ));
        }
        if !self.writers_verdict.is_clean() {
            out.push_str(&format!("\n  writers: {}", self.writers_verdict.report()));
        }
        eprintln!("rw[{label}]: {out}");
        assert_eq!(self.violations(), 0, "rw[{label}] violated:\n{out}");
    }
}

/// Checks a read-write lock's `intervals` (any order): no reader's belief
/// overlaps a writer's, and the writers alone pass [`check`].
pub fn check_rw(
    intervals: &[Interval],
    events: &[Event],
    is_writer: impl Fn(&Interval) -> bool,
) -> Exclusion {
    let (writers, readers): (Vec<Interval>, Vec<Interval>) =
        intervals.iter().cloned().partition(|i| is_writer(i));
    let believed = |i: &Interval| i.believed_until > i.entered;
    let mut clashes = 0;
    let mut first_clash: Option<(Interval, Interval)> = None;
    for w in writers.iter().filter(|w| believed(w)) {
        for r in readers.iter().filter(|r| believed(r)) {
            if r.entered < w.believed_until && w.entered < r.believed_until {
                clashes += 1;
                let earlier = match &first_clash {
                    None => true,
                    Some((fw, fr)) => w.entered.max(r.entered) < fw.entered.max(fr.entered),
                };
                if earlier {
                    first_clash = Some((w.clone(), r.clone()));
                }
            }
        }
    }
    Exclusion {
        readers: readers.len(),
        writers: writers.len(),
        most_readers: check_capacity(&readers, usize::MAX).most,
        reader_writer_overlaps: clashes,
        first_clash,
        writers_verdict: check(&writers, events),
    }
}

/// One client's hold in progress; see [`History::enter`].
#[derive(Debug)]
#[must_use = "finish a hold with `exit`, or its interval ends when it is dropped"]
pub struct Hold {
    history: Arc<History>,
    client: String,
    owner: String,
    token: u64,
    entered: Duration,
    valid_until: Duration,
    lost: Option<Duration>,
    lapsed: bool,
    done: bool,
}

impl Hold {
    /// Whether the client still believes it holds the lock: no loss learned,
    /// no validity seen to lapse, and the last validity seen not yet passed.
    pub fn believes(&self) -> bool {
        !self.lapsed && self.lost.is_none() && self.history.now() < self.valid_until
    }

    /// The client reads `guard.valid_until()` as it works. Returns whether it
    /// still believes it holds the lock. The first time it finds the validity
    /// it last relied on already passed, it stops believing for good (at that
    /// validity), even if the new `valid_until` is later: a renewal that lands
    /// after the lapse cannot give back the time in between.
    pub fn observe(&mut self, valid_until: Instant) -> bool {
        if self.lapsed || self.lost.is_some() {
            return false;
        }
        if self.history.now() >= self.valid_until {
            self.lapsed = true;
            self.history
                .push_event(self.valid_until, &self.client, EventKind::Lapsed);
            return false;
        }
        self.valid_until = self.valid_until.max(self.history.at(valid_until));
        true
    }

    /// The client learned of a loss now (`guard.lost()` fired).
    pub fn lost_now(&mut self) {
        self.lost_at(Instant::now());
    }

    /// The client learned of a loss at `at`.
    pub fn lost_at(&mut self, at: Instant) {
        if self.lost.is_none() {
            self.lost = Some(self.history.at(at));
        }
    }

    /// Whether a loss was recorded.
    pub fn is_lost(&self) -> bool {
        self.lost.is_some()
    }

    /// The client leaves the critical section now (call it before
    /// `release`), after a last look at `guard.valid_until()`. Returns the
    /// interval's id.
    pub fn exit(mut self, valid_until: Instant) -> usize {
        self.observe(valid_until);
        self.finish()
    }

    fn finish(&mut self) -> usize {
        self.done = true;
        let left = self.history.now();
        self.history.complete(
            &self.client,
            &self.owner,
            self.token,
            self.entered,
            left,
            self.valid_until,
            self.lost,
        )
    }
}

impl Drop for Hold {
    fn drop(&mut self) {
        if !self.done {
            self.finish();
        }
    }
}

/// What [`History::check`] found.
#[derive(Debug, Clone)]
pub struct Verdict {
    /// Completed holds.
    pub acquisitions: usize,
    /// Distinct clients among them.
    pub holders: usize,
    /// Holds whose client learned of a loss.
    pub losses: usize,
    /// Holds whose client saw its validity lapse.
    pub lapses: usize,
    /// Pairs of holds whose belief intervals overlap.
    pub overlaps: usize,
    /// Holds whose token is not above every token entered before them.
    pub inversions: usize,
    /// The earliest overlap: (earlier, later) by entry.
    pub first_overlap: Option<(Interval, Interval)>,
    /// The earliest inversion: (the earlier hold with the larger or equal
    /// token, the later hold).
    pub first_inversion: Option<(Interval, Interval)>,
    events: Vec<Event>,
}

impl Verdict {
    /// Overlaps plus inversions.
    pub fn violations(&self) -> usize {
        self.overlaps + self.inversions
    }

    /// No violation.
    pub fn is_clean(&self) -> bool {
        self.violations() == 0
    }

    /// One line of counts.
    pub fn summary(&self) -> String {
        format!(
            "{} acquisitions by {} holders, {} losses, {} lapses; overlaps {}, token inversions {} => {}",
            self.acquisitions,
            self.holders,
            self.losses,
            self.lapses,
            self.overlaps,
            self.inversions,
            if self.is_clean() { "CLEAN" } else { "VIOLATED" }
        )
    }

    /// The counts and, for each kind of violation, the first one with both
    /// intervals and the events around it.
    pub fn report(&self) -> String {
        let mut out = self.summary();
        if let Some((a, b)) = &self.first_overlap {
            out.push_str(&format!(
                "\n  first OVERLAP (both believed they held the lock during [{}, {})):\n    {a}\n    {b}\n  events around it:\n{}",
                ms(b.entered),
                ms(a.believed_until.min(b.believed_until)),
                self.context(a, b)
            ));
        }
        if let Some((a, b)) = &self.first_inversion {
            out.push_str(&format!(
                "\n  first TOKEN INVERSION (token {} entered after token {}):\n    {a}\n    {b}\n  events around it:\n{}",
                b.token,
                a.token,
                self.context(a, b)
            ));
        }
        out
    }

    /// Prints the report under `label` and returns self.
    pub fn print(self, label: &str) -> Self {
        eprintln!("history[{label}]: {}", self.report());
        self
    }

    /// Prints the report and panics unless the history is clean.
    pub fn assert_clean(&self, label: &str) {
        eprintln!("history[{label}]: {}", self.report());
        assert!(
            self.is_clean(),
            "history[{label}] has violations:\n{}",
            self.report()
        );
    }

    /// The events from just before `a` entered to just after both ended,
    /// at most [`CONTEXT_EVENTS`] of them, centred on `b`'s entry.
    fn context(&self, a: &Interval, b: &Interval) -> String {
        let from = a.entered.min(b.entered);
        let to = a.believed_until.max(b.believed_until).max(b.entered);
        let first = self
            .events
            .iter()
            .position(|e| e.at >= from)
            .unwrap_or(self.events.len());
        let last = self
            .events
            .iter()
            .rposition(|e| e.at <= to)
            .map_or(first, |i| i + 1);
        let (lo, hi) = (first.saturating_sub(2), (last + 2).min(self.events.len()));
        let centre = self
            .events
            .iter()
            .position(|e| e.at >= b.entered)
            .unwrap_or(hi)
            .clamp(lo, hi);
        let half = CONTEXT_EVENTS / 2;
        let start = centre.saturating_sub(half).max(lo);
        let end = (start + CONTEXT_EVENTS).min(hi);
        let mut out = String::new();
        if start > lo {
            out.push_str(&format!("      ... {} earlier events\n", start - lo));
        }
        for e in &self.events[start..end] {
            out.push_str(&format!("      {e}\n"));
        }
        if end < hi {
            out.push_str(&format!("      ... {} later events\n", hi - end));
        }
        out
    }
}

impl fmt::Display for Verdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.report())
    }
}

/// Checks `intervals` (any order); `events` (time order) give the context.
pub fn check(intervals: &[Interval], events: &[Event]) -> Verdict {
    let mut sorted: Vec<&Interval> = intervals.iter().collect();
    sorted.sort_by_key(|i| (i.entered, i.id));

    // (a) Belief intervals: a sweep in order of entry, keeping those still
    // believed at the current entry.
    let mut overlaps = 0;
    let mut first_overlap = None;
    let mut active: Vec<&Interval> = Vec::new();
    for &iv in &sorted {
        active.retain(|a| a.believed_until > iv.entered);
        if iv.believed_until <= iv.entered {
            continue; // an empty belief overlaps nothing
        }
        for a in &active {
            overlaps += 1;
            if first_overlap.is_none() {
                first_overlap = Some(((*a).clone(), iv.clone()));
            }
        }
        active.push(iv);
    }

    // (b) Tokens: each above every token entered before it.
    let mut inversions = 0;
    let mut first_inversion = None;
    let mut max: Option<&Interval> = None;
    for &iv in &sorted {
        match max {
            Some(m) if iv.token <= m.token => {
                inversions += 1;
                if first_inversion.is_none() {
                    first_inversion = Some((m.clone(), iv.clone()));
                }
            }
            _ => max = Some(iv),
        }
    }

    let holders: BTreeSet<&str> = intervals.iter().map(|i| i.client.as_str()).collect();
    Verdict {
        acquisitions: intervals.len(),
        holders: holders.len(),
        losses: intervals.iter().filter(|i| i.lost.is_some()).count(),
        lapses: events
            .iter()
            .filter(|e| e.kind == EventKind::Lapsed)
            .count(),
        overlaps,
        inversions,
        first_overlap,
        first_inversion,
        events: events.to_vec(),
    }
}

/// `+12.345s`.
fn ms(d: Duration) -> String {
    format!("+{:.3}s", d.as_secs_f64())
}

/// An owner id (`<32 hex client id>:<task or owner>`) shortened to the
/// first 6 digits of the client id and the rest.
fn short(owner: &str) -> String {
    match owner.split_once(':') {
        Some((client, rest)) if client.len() > 6 && client.is_ascii() => {
            format!("{}..:{rest}", &client[..6])
        }
        _ => owner.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(ms: u64) -> Duration {
        Duration::from_millis(ms)
    }

    #[test]
    fn counts_holders_at_once_against_a_capacity() {
        let h = History::new();
        h.record("a", "slot 0", 1, s(0), s(100), s(1_000), None);
        h.record("b", "slot 1", 2, s(50), s(150), s(1_000), None);
        h.record("c", "slot 0", 3, s(100), s(200), s(1_000), None); // a left at 100
        let v = h.check_capacity(2);
        v.assert_clean("unit: capacity");
        assert_eq!((v.most, v.excesses), (2, 0), "{}", v.summary());
        h.record("d", "slot 2", 4, s(120), s(130), s(1_000), None); // b, c, d
        let v = h.check_capacity(2);
        assert_eq!((v.most, v.excesses), (3, 1), "{}", v.summary());
        let first = v.first_excess.expect("an excess");
        assert_eq!(first.last().map(|i| i.client.as_str()), Some("d"));
    }

    #[test]
    fn flags_a_reader_beside_a_writer() {
        let h = History::new();
        h.record("r1", "r", 0, s(0), s(100), s(1_000), None);
        h.record("r2", "r", 0, s(50), s(150), s(1_000), None);
        h.record("w1", "w", 5, s(150), s(200), s(1_000), None);
        h.record("w2", "w", 6, s(200), s(300), s(1_000), None);
        let writer = |i: &Interval| i.client.starts_with('w');
        let v = h.check_rw(writer);
        assert_eq!((v.readers, v.writers, v.most_readers), (2, 2, 2));
        v.assert_clean("unit: readers and writers");
        h.record("r3", "r", 0, s(250), s(260), s(1_000), None);
        h.record("w3", "w", 4, s(400), s(500), s(1_000), None);
        let v = h.check_rw(writer);
        assert_eq!(v.reader_writer_overlaps, 1, "{}", v.summary());
        let (w, r) = v.first_clash.clone().expect("a clash");
        assert_eq!((w.client.as_str(), r.client.as_str()), ("w2", "r3"));
        assert_eq!(v.writers_verdict.inversions, 1, "{}", v.summary());
    }

    #[test]
    fn accepts_a_clean_history() {
        let h = History::new();
        h.record("a", "owner-a", 1, s(0), s(100), s(1_000), None);
        h.record("b", "owner-b", 2, s(100), s(250), s(1_100), None); // touches, no overlap
        h.record("c", "owner-c", 5, s(300), s(400), s(1_300), None);
        h.record("a", "owner-a", 6, s(500), s(600), s(1_500), None);
        let v = h.check().print("unit: clean");
        assert!(v.is_clean(), "{v}");
        assert_eq!(
            (v.acquisitions, v.holders, v.overlaps, v.inversions),
            (4, 3, 0, 0)
        );
        assert!(v.first_overlap.is_none() && v.first_inversion.is_none());
        assert!(v.summary().ends_with("CLEAN"), "{}", v.summary());
    }

    #[test]
    fn flags_an_overlap() {
        let h = History::new();
        h.record("a", "owner-a", 1, s(0), s(100), s(1_000), None);
        h.note("fault", "node 2 restarted empty");
        h.record("b", "owner-b", 2, s(100), s(900), s(1_100), None);
        h.record("c", "owner-c", 3, s(950), s(1_000), s(2_000), None);
        // a: [0, 100); b: [100, 900); c: [950, 1000) -- clean so far.
        h.record("d", "owner-d", 4, s(500), s(600), s(1_500), None); // inside b
        let v = h.check().print("unit: overlap");
        assert_eq!(v.overlaps, 1, "{v}");
        let (a, b) = v.first_overlap.clone().expect("an overlap");
        assert_eq!((a.client.as_str(), b.client.as_str()), ("b", "d"));
        // d entered after b with a larger token, but c (entered later) has a
        // smaller token than d: an inversion too.
        assert_eq!(v.inversions, 1, "{v}");
        let report = v.report();
        assert!(report.contains("first OVERLAP"), "{report}");
        assert!(report.contains("b (owner owner-b) token 2"), "{report}");
        assert!(report.contains("d (owner owner-d) token 4"), "{report}");
        assert!(report.contains("VIOLATED"), "{report}");
        assert!(!v.is_clean());
    }

    #[test]
    fn flags_a_token_inversion() {
        let h = History::new();
        h.record("a", "owner-a", 7, s(0), s(100), s(1_000), None);
        h.record("b", "owner-b", 7, s(200), s(300), s(1_200), None); // equal: not strictly larger
        h.record("c", "owner-c", 3, s(400), s(500), s(1_400), None); // smaller
        h.record("d", "owner-d", 8, s(600), s(700), s(1_600), None);
        let v = h.check().print("unit: inversion");
        assert_eq!(v.overlaps, 0, "{v}");
        assert_eq!(v.inversions, 2, "{v}");
        let (a, b) = v.first_inversion.clone().expect("an inversion");
        assert_eq!((a.token, b.token), (7, 7));
        assert!(v.report().contains("first TOKEN INVERSION"));
    }

    #[test]
    fn belief_ends_at_the_earliest_of_exit_validity_and_loss() {
        let h = History::new();
        // a stays in the section until 10 s, but its validity ended at 2 s.
        h.record("a", "owner-a", 1, s(0), s(10_000), s(2_000), None);
        // b learned of a loss at 3 s, long before its validity or exit.
        h.record(
            "b",
            "owner-b",
            2,
            s(2_000),
            s(9_000),
            s(9_500),
            Some(s(3_000)),
        );
        h.record("c", "owner-c", 3, s(3_000), s(4_000), s(5_000), None);
        let v = h.check();
        assert!(v.is_clean(), "{v}");
        let iv = h.intervals();
        assert_eq!(iv[0].believed_until, s(2_000));
        assert_eq!(iv[1].believed_until, s(3_000));
        // Without the loss, b would overlap c.
        let h2 = History::new();
        h2.record("b", "owner-b", 2, s(2_000), s(9_000), s(9_500), None);
        h2.record("c", "owner-c", 3, s(3_000), s(4_000), s(5_000), None);
        assert_eq!(h2.check().overlaps, 1);
    }

    #[test]
    fn a_lapsed_validity_is_not_given_back_by_a_later_renewal() {
        let h = History::new();
        let now = Instant::now();
        let mut hold = h.enter("a", "owner-a", 1, now);
        assert!(
            !hold.observe(now + Duration::from_secs(30)),
            "already lapsed"
        );
        assert!(!hold.believes());
        hold.exit(now + Duration::from_secs(30));
        let iv = &h.intervals()[0];
        // Validity ended before it entered: an empty belief.
        assert_eq!(iv.believed_until, iv.entered, "{iv}");
        assert!(h.events().iter().any(|e| e.kind == EventKind::Lapsed));

        let mut hold = h.enter("b", "owner-b", 2, now + Duration::from_secs(30));
        assert!(hold.observe(now + Duration::from_secs(31)));
        hold.lost_now();
        assert!(!hold.observe(now + Duration::from_secs(32)));
        let id = hold.exit(now + Duration::from_secs(33));
        let iv = &h.intervals()[id];
        assert!(iv.lost.is_some() && iv.believed_until == iv.lost.expect("lost"));
        let v = h.check();
        assert_eq!((v.losses, v.lapses, v.violations()), (1, 1, 0), "{v}");
    }
}
