//! `cargo bench --bench compare`: quorumlock against rslock, a raw floor and
//! the protocol's limit on five Redis masters, all in one process and one
//! run.
//!
//! The floor is the same redis client running quorumlock's own acquire and
//! release scripts with a plain `join_all` fan-out to every node and no
//! coordination logic: what any RedLock-style lock over these scripts costs
//! at least when it waits for every node. The limit sends the same scripts
//! over the same connections but returns from each phase at the quorum-th
//! reply, the other replies (and a failed attempt's rollback) finishing in a
//! spawned task: one round trip to the quorum-th fastest node per phase.
//! Contenders run in interleaved rounds with a rotating order, so
//! machine drift hits each alike.
//!
//! Cases: an uncontended lock + unlock cycle (latency), 64 tasks over 1,000
//! keys (throughput), 8 tasks on one key (release-to-next-holder handoff),
//! the watchdog renewing 10,000 locks (round trips and CPU per tick), and
//! tail tolerance: latency and throughput with slow, black-holed and
//! refusing nodes behind a fault-injecting proxy.
//!
//! Knobs (environment): `QUORUMLOCK_BENCH_NODES` (comma-separated URLs; else
//! five local `redis-server`s are started), `QUORUMLOCK_BENCH_QUICK=1` (or
//! `-- --quick`), `QUORUMLOCK_BENCH_ROUNDS`, `QUORUMLOCK_BENCH_SECS`,
//! `QUORUMLOCK_BENCH_HANDOFF_SECS`, `QUORUMLOCK_BENCH_CYCLES`,
//! `QUORUMLOCK_BENCH_TICKS`, `QUORUMLOCK_BENCH_WATCHDOG_LOCKS`,
//! `QUORUMLOCK_BENCH_FAULT_SECS`, `QUORUMLOCK_BENCH_FAULT_CASES` and
//! `QUORUMLOCK_BENCH_CASES` (e.g.
//! `handoff`). See `docs/BENCHMARKS.md`.
//!
//! Modules, in the order a run uses them: [`settings`] (the knobs),
//! [`contenders`] (floor, quorumlock, rslock, limit behind one interface),
//! [`measures`] (percentiles, CPU), [`cases`] (uncontended, throughput,
//! handoff), [`watchdog`] (renewal cost), [`proxy`] and [`faults`] (tail
//! tolerance), [`report`] (tables and JSON) and [`charts`] (SVG).

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

mod cases;
mod charts;
mod contenders;
/// `examples/metrics.rs`: its recorder's histogram buckets (its own copy
/// of `tests/support/local.rs` is unused here).
#[cfg(feature = "metrics")]
#[allow(clippy::duplicate_mod)]
#[path = "../../examples/metrics.rs"]
mod example;
mod faults;
#[path = "../../tests/support/local.rs"]
mod local;
mod measures;
mod proxy;
mod report;
mod settings;
mod watchdog;

use cases::{handoff, throughput, uncontended, Managers};
use contenders::{floor_owner, name, names, order, Lockers, Who, ALL};
use measures::{pct, Cpu, Results};
use report::fmt_num;
use settings::Settings;

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What every phase of a run shares.
pub(crate) struct Run {
    pub(crate) id: String,
    pub(crate) urls: Vec<String>,
    pub(crate) local: bool,
    pub(crate) s: Settings,
    pub(crate) l: Arc<Lockers>,
    /// Clock ticks per second of `/proc` times.
    pub(crate) tck: f64,
}

/// Everything measured, for the report.
#[derive(Default)]
pub(crate) struct Measured {
    /// Floor, quorumlock, rslock, limit (by [`Who::index`]).
    pub(crate) res: [Results; 4],
    /// quorumlock's handoff with one manager per task.
    pub(crate) ho_separate: Results,
    /// quorumlock's handoff with one manager per task, fair requests.
    pub(crate) ho_fair: Results,
    pub(crate) watchdog: Option<Value>,
    pub(crate) faults: Option<faults::FaultReport>,
    pub(crate) elapsed: Duration,
    pub(crate) redis_version: Option<String>,
    pub(crate) load_before: Option<String>,
}

/// Warm-up: connections (rslock connects lazily), scripts, allocator.
async fn warm_up(r: &Run) {
    eprintln!("warm-up");
    for who in ALL {
        let owner = floor_owner(0);
        let mut scratch = Results::default();
        let n = if r.s.quick { 50 } else { 200 };
        let warm = names(&r.id, who, "warm", 0, n);
        uncontended(&r.l, who, &warm, &owner, &mut scratch).await;
        let warm = Arc::new(names(&r.id, who, "warmtp", 0, r.s.keys));
        throughput(&r.l, who, warm, r.s.tasks, Duration::from_millis(300)).await;
    }
}

/// Case 1 of one round, each contender in the round's order.
async fn uncontended_round(r: &Run, round: usize, res: &mut [Results; 4]) {
    for who in order(round) {
        let out = &mut res[who.index()];
        let owner = floor_owner(0);
        let list = names(&r.id, who, "u", round, r.s.cycles);
        let c0 = Cpu::now(&r.l.floor.conns, r.tck).await;
        let mut samples = uncontended(&r.l, who, &list, &owner, out).await;
        out.unc_cpu
            .add_since(c0, Cpu::now(&r.l.floor.conns, r.tck).await);
        samples.sort_unstable();
        let p50 = pct(&samples, 50.0).map(|n| n / 1e3);
        eprintln!("  uncontended {:<10} p50 {} µs", who.name(), fmt_num(p50));
        out.unc_round_p50_us.extend(p50);
        out.unc_ns.extend(samples);
    }
}

/// Case 1 again, interleaved: cycle `i` of the round runs each contender
/// once, in the order of `order(round + i)`, so that every contender's
/// samples span the same stretch of time. The blocks above measure CPU per
/// cycle (which needs a contender alone on the machine); this pass is the
/// one the latency ratios are read from, since a change of load between
/// blocks (this machine's runs move by ±5%) moves one contender's
/// samples only.
async fn uncontended_mixed(r: &Run, round: usize, res: &mut [Results; 4]) {
    let owner = floor_owner(0);
    for i in 0..r.s.cycles {
        for who in order(round + i) {
            let out = &mut res[who.index()];
            let one = [name(&r.id, who, "m", round, i)];
            let samples = uncontended(&r.l, who, &one, &owner, out).await;
            out.unc_mixed_ns.extend(samples);
        }
    }
}

/// Case 2 of one round.
async fn throughput_round(r: &Run, round: usize, res: &mut [Results; 4]) {
    for who in order(round) {
        let list = Arc::new(names(&r.id, who, "t", round, r.s.keys));
        let c0 = Cpu::now(&r.l.floor.conns, r.tck).await;
        let (t, took) = throughput(&r.l, who, list, r.s.tasks, r.s.secs).await;
        let c1 = Cpu::now(&r.l.floor.conns, r.tck).await;
        let out = &mut res[who.index()];
        out.tp_cpu.add_since(c0, c1);
        let secs = took.as_secs_f64();
        eprintln!(
            "  throughput  {:<10} {:.0} cycles/s ({} busy, {} failed)",
            who.name(),
            t.ok as f64 / secs,
            t.busy,
            t.failed
        );
        out.add_throughput(t, secs);
    }
}

/// Case 3 of one round; quorumlock three times (one shared manager, one
/// manager per task, one manager per task with fair requests).
async fn handoff_round(r: &Run, round: usize, m: &mut Measured) {
    for who in order(round) {
        let variants: &[Managers] = if who == Who::Quorumlock {
            &[Managers::Shared, Managers::PerTask, Managers::PerTaskFair]
        } else {
            &[Managers::Shared]
        };
        for &managers in variants {
            let name = names(&r.id, who, managers.case(), round, 1).concat();
            let requests = measures::lock_requests(&r.l.floor.conns, who).await;
            let (mut t, took) = handoff(
                &r.l,
                who,
                managers,
                &name,
                r.s.handoff_tasks,
                r.s.handoff_secs,
                r.s.hold,
            )
            .await;
            let (out, label) = match managers {
                Managers::Shared => (&mut m.res[who.index()], who.name()),
                Managers::PerTask => (&mut m.ho_separate, "quorumlock, one manager per task"),
                Managers::PerTaskFair => (&mut m.ho_fair, "quorumlock fair, one manager per task"),
            };
            t.samples.sort_unstable();
            let p50 = pct(&t.samples, 50.0).map(|n| n / 1e6);
            let turn =
                (!t.samples.is_empty()).then(|| 100.0 * t.in_turn as f64 / t.samples.len() as f64);
            eprintln!(
                "  handoff     {label:<10} p50 {} ms over {} handoffs, {}% in ticket order",
                fmt_num(p50),
                t.samples.len(),
                fmt_num(turn)
            );
            out.ho_round_p50_ms.extend(p50);
            out.ho_ns.extend(t.samples);
            out.ho_acquired += t.acquired;
            out.ho_errors += t.errors;
            out.ho_in_turn += t.in_turn;
            out.ho_secs += took.as_secs_f64();
            out.ho_requests += measures::lock_requests(&r.l.floor.conns, who)
                .await
                .saturating_sub(requests);
        }
    }
}

/// Cases 1–3 in interleaved rounds with a rotating order.
async fn rounds(r: &Run, m: &mut Measured) {
    for round in 0..r.s.rounds {
        let o = order(round);
        eprintln!(
            "round {}/{} (order: {})",
            round + 1,
            r.s.rounds,
            o.map(Who::name).join(", ")
        );
        if r.s.runs("uncontended") {
            uncontended_round(r, round, &mut m.res).await;
            uncontended_mixed(r, round, &mut m.res).await;
        }
        if r.s.runs("throughput") {
            throughput_round(r, round, &mut m.res).await;
        }
        if r.s.runs("handoff") {
            handoff_round(r, round, m).await;
        }
    }
}

async fn run(urls: Vec<String>, local: bool, s: Settings) -> Result<(), BoxError> {
    let l = Arc::new(Lockers::build(&urls, &s).await?);
    let r = Run {
        id: format!("{:08x}", rand::random::<u32>()),
        urls,
        local,
        s,
        l,
        tck: measures::clk_tck(),
    };
    let mut m = Measured {
        redis_version: measures::info(&r.l.floor.conns[0], "server")
            .await
            .ok()
            .and_then(|i| measures::info_field(&i, "redis_version").map(str::to_owned)),
        load_before: std::fs::read_to_string("/proc/loadavg").ok(),
        ..Measured::default()
    };
    let started = Instant::now();
    if ["uncontended", "throughput", "handoff"]
        .iter()
        .any(|c| r.s.runs(c))
    {
        warm_up(&r).await;
    }
    rounds(&r, &mut m).await;
    if r.s.runs("watchdog") {
        eprintln!("watchdog");
        m.watchdog = Some(watchdog::watchdog(&r.urls, &r.l.floor.conns, &r.id, &r.s).await?);
    }
    if r.s.runs("faults") {
        m.faults = Some(faults::run(&r).await?);
    }
    m.elapsed = started.elapsed();
    report::write(&r, &mut m)
}

fn main() -> Result<(), BoxError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo test --all-targets` runs bench binaries without `--bench`:
    // do nothing there rather than a three-minute benchmark.
    if !args.iter().any(|a| a == "--bench") {
        println!("compare: run with `cargo bench --bench compare` (skipped under cargo test)");
        return Ok(());
    }
    let s = Settings::from_env(args.iter().any(|a| a == "--quick"))?;
    // With the `metrics` feature, every manager records into a real
    // recorder (Prometheus's, with the histogram buckets of
    // `examples/metrics.rs` that the dashboard reads; its upkeep on a
    // thread, rendered by nobody), installed before any manager is built:
    // `docs/BENCHMARKS.md`, "Metrics cost", compares a run with it and one
    // without.
    #[cfg(feature = "metrics")]
    {
        let builder = metrics_exporter_prometheus::PrometheusBuilder::new();
        let prometheus = example::with_buckets(builder)?.install_recorder()?;
        std::thread::spawn(move || loop {
            std::thread::sleep(std::time::Duration::from_secs(5));
            prometheus.run_upkeep();
        });
        println!("compare: metrics recorded (Prometheus recorder installed)");
    }
    if std::env::var_os("RUST_LOG").is_some() {
        // Diagnostics only: tracing costs time, so figures taken with it are not comparable.
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
            .with_writer(std::io::stderr)
            .init();
    }

    let nodes_env = std::env::var("QUORUMLOCK_BENCH_NODES").ok();
    let (urls, local_nodes) = match nodes_env.as_deref().map(str::trim) {
        Some(list) if !list.is_empty() => {
            let urls: Vec<String> = list
                .split(',')
                .map(|u| u.trim().to_owned())
                .filter(|u| !u.is_empty())
                .collect();
            if urls.len() != 5 {
                eprintln!("note: {} node(s) given; the targets assume 5", urls.len());
            }
            (urls, None)
        }
        _ => {
            let nodes = local::LocalNodes::start(5)?;
            (nodes.urls(), Some(nodes))
        }
    };
    eprintln!("nodes: {}", urls.join(", "));

    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let local = local_nodes.is_some();
    // Everything runs in spawned tasks, on the runtime's workers, as an
    // application's code would (and quorumlock's task owners need a task).
    let result = rt.block_on(async move { tokio::spawn(run(urls, local, s)).await });
    drop(rt);
    drop(local_nodes);
    result?
}
