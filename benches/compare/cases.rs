//! Cases 1–3: uncontended lock + unlock, throughput over many keys, and the
//! handoff of one contended key.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::contenders::{floor_owner, Attempt, Lockers, QlWait, Who};
use crate::measures::{nanos, Results, TpTask};

/// Case 1: lock + unlock of distinct keys by one task; nanoseconds per cycle.
pub(crate) async fn uncontended(
    l: &Lockers,
    who: Who,
    names: &[String],
    owner: &Arc<str>,
    r: &mut Results,
) -> Vec<u64> {
    let mut samples = Vec::with_capacity(names.len());
    for name in names {
        let t = Instant::now();
        let outcome = match l.try_once(who, name, owner).await {
            Attempt::Won(h) => l.unlock(h).await,
            Attempt::Busy => Err("busy on a fresh key".to_owned()),
            Attempt::Failed(e) => Err(e),
        };
        let took = t.elapsed();
        match outcome {
            Ok(()) => samples.push(nanos(took)),
            Err(e) => {
                r.unc_errors += 1;
                r.unc_first_error.get_or_insert(e);
            }
        }
    }
    samples
}

/// Case 2: `tasks` tasks over `names` for `secs`, one attempt per cycle.
pub(crate) async fn throughput(
    l: &Arc<Lockers>,
    who: Who,
    names: Arc<Vec<String>>,
    tasks: usize,
    secs: Duration,
) -> (TpTask, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (l, names, stop) = (Arc::clone(l), Arc::clone(&names), Arc::clone(&stop));
            tokio::spawn(async move {
                let owner = floor_owner(t);
                let mut out = TpTask::default();
                while !stop.load(Ordering::Relaxed) {
                    let name = &names[rand::random_range(0..names.len())];
                    match l.try_once(who, name, &owner).await {
                        Attempt::Won(h) => match l.unlock(h).await {
                            Ok(()) => out.ok += 1,
                            Err(e) => {
                                out.failed += 1;
                                out.first_error.get_or_insert(e);
                            }
                        },
                        Attempt::Busy => out.busy += 1,
                        Attempt::Failed(e) => {
                            out.failed += 1;
                            out.first_error.get_or_insert(e);
                        }
                    }
                }
                out
            })
        })
        .collect();
    tokio::time::sleep(secs).await;
    stop.store(true, Ordering::Relaxed);
    let mut total = TpTask::default();
    for h in handles {
        match h.await {
            Ok(t) => {
                total.ok += t.ok;
                total.busy += t.busy;
                total.failed += t.failed;
                if total.first_error.is_none() {
                    total.first_error = t.first_error;
                }
            }
            Err(e) => {
                total.failed += 1;
                total.first_error.get_or_insert(format!("task: {e}"));
            }
        }
    }
    (total, start.elapsed())
}

#[derive(Default)]
pub(crate) struct HoTask {
    pub(crate) samples: Vec<u64>,
    pub(crate) acquired: u64,
    pub(crate) errors: u64,
    /// Handoffs whose new holder was the earliest-started waiter.
    pub(crate) in_turn: u64,
}

/// Which quorumlock managers the handoff tasks use, and how they ask.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Managers {
    /// All tasks share one manager (the other contenders run this way).
    Shared,
    /// One manager per task, as tasks of different processes would have.
    PerTask,
    /// One manager per task, fair requests (`request(..).fair()`).
    PerTaskFair,
}

impl Managers {
    /// The case's part of the lock name.
    pub(crate) fn case(self) -> &'static str {
        match self {
            Self::Shared => "h",
            Self::PerTask => "hs",
            Self::PerTaskFair => "hf",
        }
    }
}

/// When each task's current lock call started, `None` while it is not
/// waiting (holding, or sitting out until someone else took the lock).
struct Waiting(Mutex<Vec<Option<Instant>>>);

impl Waiting {
    fn start(&self, task: usize) {
        self.0.lock().unwrap_or_else(|e| e.into_inner())[task] = Some(Instant::now());
    }

    /// Task `task` was granted the lock: whether its call started first
    /// among the calls still waiting (it included). It stops waiting.
    fn granted(&self, task: usize) -> bool {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mine = w[task].take();
        mine.is_some_and(|m| w.iter().flatten().all(|other| m <= *other))
    }

    /// The task's call ended without the lock (the deadline).
    fn gave_up(&self, task: usize) {
        self.0.lock().unwrap_or_else(|e| e.into_inner())[task] = None;
    }
}

/// Case 3: `tasks` tasks on one key. Each holder holds `hold`, records the
/// instant just before releasing, releases, and does not compete again until
/// another task took the lock; each acquirer records the gap from the last
/// release. So every sample is a handoff to a waiting task.
///
/// At each handoff the case also records whether the new holder's lock call
/// started before those of every other task still waiting (ticket order).
///
/// quorumlock's tasks share one manager, or each has its own (as tasks of
/// different processes would), asking plainly or fairly: see [`Managers`].
pub(crate) async fn handoff(
    l: &Arc<Lockers>,
    who: Who,
    managers: Managers,
    name: &str,
    tasks: usize,
    secs: Duration,
    hold: Duration,
) -> (HoTask, Duration) {
    let base = Instant::now();
    let deadline = base + secs;
    let released_at = Arc::new(AtomicU64::new(0));
    let generation = Arc::new(tokio::sync::watch::Sender::new(0u64));
    let name: Arc<str> = name.into();
    let waiting = Arc::new(Waiting(Mutex::new(vec![None; tasks])));
    let fair = managers == Managers::PerTaskFair;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (l, released_at, generation, name, waiting) = (
                Arc::clone(l),
                Arc::clone(&released_at),
                Arc::clone(&generation),
                Arc::clone(&name),
                Arc::clone(&waiting),
            );
            let ql = QlWait {
                manager: match l.ql_many.get(t) {
                    Some(m) if managers != Managers::Shared => m.clone(),
                    _ => l.ql.clone(),
                },
                fair,
            };
            tokio::spawn(async move {
                let owner = floor_owner(t);
                let mut out = HoTask::default();
                loop {
                    waiting.start(t);
                    let Some(held) = l
                        .wait_lock(&ql, who, &name, &owner, deadline, &mut out.errors)
                        .await
                    else {
                        waiting.gave_up(t);
                        break;
                    };
                    let in_turn = waiting.granted(t);
                    let now = Instant::now();
                    let since = released_at.swap(0, Ordering::SeqCst);
                    if since != 0 && now < deadline {
                        out.samples
                            .push(nanos(now.duration_since(base)).saturating_sub(since));
                        out.in_turn += u64::from(in_turn);
                    }
                    out.acquired += 1;
                    let mut mine = 0;
                    generation.send_modify(|g| {
                        *g += 1;
                        mine = *g;
                    });
                    tokio::time::sleep(hold).await;
                    released_at.store(nanos(base.elapsed()).max(1), Ordering::SeqCst);
                    if l.unlock(held).await.is_err() {
                        out.errors += 1;
                    }
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        break;
                    }
                    let mut rx = generation.subscribe();
                    if tokio::time::timeout(left, rx.wait_for(|g| *g != mine))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
                out
            })
        })
        .collect();
    let mut total = HoTask::default();
    for h in handles {
        match h.await {
            Ok(t) => {
                total.samples.extend(t.samples);
                total.acquired += t.acquired;
                total.errors += t.errors;
                total.in_turn += t.in_turn;
            }
            Err(_) => total.errors += 1,
        }
    }
    (total, secs)
}
