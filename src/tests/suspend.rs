//! Regression tests of issue 20, item 3 ("a suspend hides a loss"): a loss
//! signal already waiting when the machine suspends must fire at resume
//! when the validity ran out meanwhile, not when its pre-suspend timer (on
//! the monotonic clock, which stops while suspended) would have.
//!
//! A suspend is faked with `clock::test::suspend`: the suspend-aware clock
//! jumps, tokio's (paused, monotonic) clock does not move, as on a real
//! machine, where `CLOCK_MONOTONIC` timers are simply late after a resume.
//! The resume is the instant of that call.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::tests::fake::{cluster_with, FakeNode};
use crate::{Error, HoldState, LockGuard};

const MS: Duration = Duration::from_millis(1);

/// How late after the resume a loss may be observed (the resume watcher
/// polls every 10 ms at most).
const AT_RESUME: Duration = Duration::from_millis(20);

/// The machine sleeps `d`; the nodes' clocks go on meanwhile.
fn suspend(fakes: &[Arc<FakeNode>], d: Duration) -> Instant {
    for f in fakes {
        f.jump_clock(d);
    }
    crate::clock::test::suspend(d);
    Instant::now()
}

/// `what`, which fired at `fired`, fired at the resume: within
/// [`AT_RESUME`] of `resumed`.
fn assert_at_resume(what: &str, fired: Instant, resumed: Instant) {
    let late = fired - resumed;
    assert!(
        late <= AT_RESUME,
        "{what} fired {late:?} after the resume (the validity ran out during the suspend)"
    );
}

/// Sleeps `d`; `signal` must not fire meanwhile (else: panics with `what`).
async fn quiet(signal: impl Future, d: Duration, what: &str) {
    tokio::pin!(signal);
    tokio::select! {
        biased;
        _ = signal => panic!("{what}"),
        () = tokio::time::sleep(d) => {}
    }
}

/// `g.run()` of a closure that works `before`, during which the machine
/// then sleeps `d`, and works `after`: it returns `Err(Lost)` at the resume.
async fn run_is_lost_at_resume(
    g: LockGuard,
    fakes: &[Arc<FakeNode>],
    before: Duration,
    d: Duration,
    after: Duration,
) {
    let resumed = std::cell::Cell::new(None);
    let r = g
        .run(|_| async {
            tokio::time::sleep(before).await;
            resumed.set(Some(suspend(fakes, d)));
            tokio::time::sleep(after).await;
            7
        })
        .await;
    assert!(r.as_ref().is_err_and(Error::is_lost), "{r:?}");
    let resumed = resumed.get().expect("the closure ran");
    assert_at_resume("run()'s loss", Instant::now(), resumed);
}

/// A fixed lease of 2 s, a 5 s suspend at 100 ms: `lost()`, already
/// waiting, fires at the resume (it used to fire 1.9 s after it).
#[tokio::test(start_paused = true)]
async fn lost_fires_at_resume_when_a_fixed_lease_ran_out_in_a_suspend() {
    let (m, fakes) = cluster_with(3, |b| b);
    let g = m.lock_with_lease("job", 2_000 * MS).await.expect("lock");
    let lost = g.lost();
    tokio::pin!(lost);
    quiet(&mut lost, 100 * MS, "lost() fired before the suspend").await;
    let resumed = suspend(&fakes, Duration::from_secs(5));
    tokio::time::timeout(Duration::from_secs(10), &mut lost)
        .await
        .expect("lost() fires");
    assert_at_resume("lost()", Instant::now(), resumed);
    assert!(g.is_lost());
}

/// `run()` under a 2 s fixed lease, whose closure works 1.5 s after a 5 s
/// suspend: `Err(Lost)` at the resume (it used to return `Ok`).
#[tokio::test(start_paused = true)]
async fn run_returns_lost_at_resume_when_a_fixed_lease_ran_out_in_a_suspend() {
    let (m, fakes) = cluster_with(3, |b| b);
    let g = m.lock_with_lease("job", 2_000 * MS).await.expect("lock");
    run_is_lost_at_resume(g, &fakes, 100 * MS, Duration::from_secs(5), 1_500 * MS).await;
}

/// A renewed hold (lease 10 s), a 20 s suspend: `lost()`,
/// `renewal_stopped()` (what `quorumlock exec` waits on) and the loss
/// signal of `run()` fire at the resume, not at the next watchdog tick.
#[tokio::test(start_paused = true)]
async fn a_renewed_hold_is_lost_at_resume_after_a_suspend_past_its_validity() {
    let (m, fakes) = cluster_with(3, |b| b);
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    let waiters = async {
        tokio::join!(
            async {
                g.lost().await;
                Instant::now()
            },
            async { (g.renewal_stopped().await, Instant::now()) },
        )
    };
    tokio::pin!(waiters);
    let before = "a loss signal fired before the suspend";
    quiet(&mut waiters, 4_000 * MS, before).await;
    let resumed = suspend(&fakes, Duration::from_secs(20));
    let (lost_at, (state, stopped_at)) = tokio::time::timeout(Duration::from_secs(30), waiters)
        .await
        .expect("the loss signals fire");
    assert_at_resume("lost()", lost_at, resumed);
    assert_eq!(state, HoldState::Lost);
    assert_at_resume("renewal_stopped()", stopped_at, resumed);
    assert!(g.is_lost());
}

/// The same through `run()`: its closure is dropped and it returns
/// `Err(Lost)` at the resume.
#[tokio::test(start_paused = true)]
async fn run_of_a_renewed_hold_returns_lost_at_resume_after_a_long_suspend() {
    let (m, fakes) = cluster_with(3, |b| b);
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    let (before, after) = (4_000 * MS, Duration::from_secs(60));
    run_is_lost_at_resume(g, &fakes, before, Duration::from_secs(20), after).await;
}

/// No false alarm: a 2 s suspend that ends well before `valid_until` does
/// not make a renewed hold lost; the watchdog goes on renewing it.
#[tokio::test(start_paused = true)]
async fn a_short_suspend_does_not_lose_a_renewed_hold() {
    let (m, fakes) = cluster_with(3, |b| b);
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    {
        let lost = g.lost();
        tokio::pin!(lost);
        quiet(&mut lost, 1_000 * MS, "lost() fired before the suspend").await;
        suspend(&fakes, Duration::from_secs(2));
        assert!(g.is_held(), "a short suspend made the hold lapse");
        let quiet = tokio::time::timeout(Duration::from_secs(30), &mut lost).await;
        assert!(quiet.is_err(), "lost() fired after a short suspend");
    }
    assert!(g.is_held());
    assert_eq!(m.watchdog_stats().losses, 0);
    g.release().await.expect("release");
}

/// The resume watcher runs only while a loss signal is awaited: one task
/// for any number of waiters, gone within a poll period once none waits,
/// so that an idle manager keeps no timer (a paused clock goes idle).
#[tokio::test(start_paused = true)]
async fn the_resume_watcher_runs_only_while_a_loss_is_awaited() {
    let (m, _fakes) = cluster_with(3, |b| b);
    let tasks = || {
        tokio::runtime::Handle::current()
            .metrics()
            .num_alive_tasks()
    };
    let g = m.try_lock("job", Duration::ZERO).await.expect("lock");
    let h = m.try_lock("other", Duration::ZERO).await.expect("lock");
    let idle = tasks();
    {
        let waiters = async { tokio::join!(g.lost(), g.renewal_stopped(), h.lost()) };
        tokio::pin!(waiters);
        quiet(&mut waiters, 100 * MS, "a loss signal fired").await;
        assert_eq!(tasks(), idle + 1, "one watcher for every waiter");
    }
    tokio::time::sleep(20 * MS).await;
    assert_eq!(tasks(), idle, "the watcher outlived its waiters");
    // It starts again with the next wait.
    quiet(h.lost(), 100 * MS, "lost() fired").await;
    assert_eq!(tasks(), idle + 1);
    g.release().await.expect("release");
    h.release().await.expect("release");
}

/// The simulator's suspend of one process (`clock::test::Process`): its
/// monotonic timers armed before the suspend fire late by it, the ones it
/// arms after it on time; its suspend-aware clock is tokio's (the nodes'
/// and the other processes'), its monotonic clock is behind by the
/// suspend; a task outside it sees none of this.
#[tokio::test(start_paused = true)]
async fn a_simulated_suspend_delays_the_timers_its_process_armed_before_it() {
    use crate::clock::{self, test::Process};
    let p = Process::new();
    let t0 = Instant::now();
    let timers = clock::test::scope(Arc::clone(&p), async move {
        let early = clock::sleep(100 * MS);
        let outside = tokio::spawn(async { tokio::time::sleep(100 * MS).await });
        let inside = tokio::spawn(clock::inherit(clock::sleep(100 * MS)));
        early.await;
        let fired = Instant::now();
        assert_eq!(clock::now(), fired, "the suspend-aware clock is tokio's");
        assert_eq!(clock::suspended(), 200 * MS);
        assert_eq!(clock::monotonic(), fired - 200 * MS);
        assert!(
            outside.is_finished(),
            "a task of no process is not suspended"
        );
        let _ = inside.await;
        let armed = Instant::now();
        clock::sleep(50 * MS).await;
        (fired, Instant::now() - armed)
    });
    let suspend = async {
        tokio::time::sleep(30 * MS).await;
        p.suspend(200 * MS);
    };
    let ((fired, after), ()) = tokio::join!(timers, suspend);
    assert_eq!(fired - t0, 300 * MS, "late by the suspend");
    assert_eq!(after, 50 * MS, "a timer armed after the resume is on time");
}

/// A process suspended past a fixed lease's end with `lost()` waiting: the
/// resume watcher, suspended too, polls within 10 ms of the resume and the
/// signal fires then; without its news (the simulator's mutation) the
/// signal waits for its pre-suspend timer, late by the suspend.
#[tokio::test(start_paused = true)]
async fn a_simulated_suspend_past_a_fixed_lease_is_signalled_at_resume() {
    use crate::hooks::mutation::{self, Mutation};
    for ignore in [false, true] {
        let _m = ignore.then(|| mutation::enable(Mutation::IgnoreResume));
        let (m, _fakes) = cluster_with(3, |b| b);
        let p = crate::clock::test::Process::new();
        let process = Arc::clone(&p);
        let lost = crate::clock::test::scope(process, async move {
            let g = m
                .lock_with_lease("job", Duration::from_secs(2))
                .await
                .expect("lock");
            g.lost().await;
            Instant::now()
        });
        let suspend = async {
            tokio::time::sleep(100 * MS).await;
            p.suspend(Duration::from_secs(5));
            Instant::now() + Duration::from_secs(5)
        };
        let (lost_at, resumed) = tokio::join!(lost, suspend);
        if ignore {
            assert!(lost_at >= resumed + 1_800 * MS, "{:?}", lost_at - resumed);
        } else {
            assert!(
                lost_at >= resumed && lost_at - resumed <= AT_RESUME,
                "lost() fired {:?} after the resume",
                lost_at - resumed
            );
        }
    }
}
