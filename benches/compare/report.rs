//! The tables (stdout, docs/BENCHMARKS.md) and the JSON report
//! (`target/bench/compare.json`).

use std::fmt::Write as _;

use serde_json::{json, Value};

use crate::contenders::ALL;
use crate::measures::{info_field, median, Results};
use crate::settings::{target_dir, Settings};
use crate::{BoxError, Measured, Run};

pub(crate) fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

pub(crate) fn fmt_num(v: Option<f64>) -> String {
    match v {
        None => "—".to_owned(),
        Some(v) if v >= 1000.0 => format!("{v:.0}"),
        Some(v) if v >= 100.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
    }
}

pub(crate) fn fmt_ratio(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| format!("{v:.3}×"))
}

pub(crate) struct Row {
    pub(crate) metric: String,
    pub(crate) better: &'static str,
    /// By [`crate::contenders::Who::index`]: floor, quorumlock, rslock, limit.
    pub(crate) values: [Option<f64>; 4],
    pub(crate) target: String,
    pub(crate) status: String,
}

pub(crate) fn check(ok: Option<bool>) -> &'static str {
    match ok {
        Some(true) => "met",
        Some(false) => "MISSED",
        None => "n/a",
    }
}

pub(crate) fn table(rows: &[Row]) -> String {
    let header = [
        "metric",
        "better",
        "floor",
        "quorumlock",
        "rslock",
        "limit",
        "ql/rslock",
        "ql/floor",
        "ql ÷ limit",
        "target",
        "status",
    ];
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            let [f, q, rs, lim] = r.values;
            vec![
                r.metric.clone(),
                r.better.to_owned(),
                fmt_num(f),
                fmt_num(q),
                fmt_num(rs),
                fmt_num(lim),
                fmt_ratio(ratio(q, rs)),
                fmt_ratio(ratio(q, f)),
                fmt_ratio(ratio(q, lim)),
                r.target.clone(),
                r.status.clone(),
            ]
        })
        .collect();
    let mut out = String::new();
    let _ = writeln!(out, "| {} |", header.join(" | "));
    let _ = writeln!(out, "|{}", " --- |".repeat(header.len()));
    for c in cells {
        let _ = writeln!(out, "| {} |", c.join(" | "));
    }
    out
}

pub(crate) fn sh(cmd: &str, args: &[&str]) -> Option<String> {
    let o = std::process::Command::new(cmd).args(args).output().ok()?;
    Some(String::from_utf8_lossy(&o.stdout).trim().to_owned())
}

pub(crate) fn cpu_model() -> Option<String> {
    let s = std::fs::read_to_string("/proc/cpuinfo").ok()?;
    info_field(&s.replace('\t', ""), "model name").map(str::to_owned)
}

/// A row without a target.
pub(crate) fn info_row(
    metric: impl Into<String>,
    better: &'static str,
    values: [Option<f64>; 4],
) -> Row {
    Row {
        metric: metric.into(),
        better,
        values,
        target: String::new(),
        status: String::new(),
    }
}

fn uncontended_rows(res: &mut [Results; 4], rows: &mut Vec<Row>, targets: &mut Vec<Value>) {
    let [floor, ql, rs, lim] = res;
    let v50 = [
        floor.unc_us(50.0),
        ql.unc_us(50.0),
        rs.unc_us(50.0),
        lim.unc_us(50.0),
    ];
    let vs_floor = ratio(v50[1], v50[0]);
    let vs_rs = ratio(v50[1], v50[2]);
    let ok_floor = vs_floor.map(|r| r <= 1.0);
    let ok_rs = vs_rs.map(|r| r <= 0.8);
    rows.push(Row {
        metric: "uncontended lock+unlock p50 (µs)".into(),
        better: "lower",
        values: v50,
        target: "≤1.0× floor, ≤0.8× rslock".into(),
        status: format!("floor {}, rslock {}", check(ok_floor), check(ok_rs)),
    });
    targets.push(json!({"name": "uncontended p50 ≤ 1.0× floor", "ratio": vs_floor, "limit": 1.0, "met": ok_floor}));
    targets.push(json!({"name": "uncontended p50 ≤ 0.8× rslock", "ratio": vs_rs, "limit": 0.8, "met": ok_rs}));
    let m50 = [
        floor.mixed_us(50.0),
        ql.mixed_us(50.0),
        rs.mixed_us(50.0),
        lim.mixed_us(50.0),
    ];
    if m50.iter().any(Option::is_some) {
        let vs_limit = ratio(m50[1], m50[3]);
        let ok_limit = vs_limit.map(|r| r <= 1.05);
        rows.push(Row {
            metric: "uncontended p50, contenders interleaved cycle by cycle (µs)".into(),
            better: "lower",
            values: m50,
            target: "≤1.05× limit".into(),
            status: format!("limit {}", check(ok_limit)),
        });
        targets.push(json!({"name": "uncontended p50 (interleaved) ≤ 1.05× limit", "ratio": vs_limit, "limit": 1.05, "met": ok_limit}));
        rows.push(info_row(
            "uncontended p99, contenders interleaved cycle by cycle (µs)",
            "lower",
            [
                floor.mixed_us(99.0),
                ql.mixed_us(99.0),
                rs.mixed_us(99.0),
                lim.mixed_us(99.0),
            ],
        ));
    }
    for p in [99.0, 99.9] {
        rows.push(info_row(
            format!("uncontended lock+unlock p{p} (µs)"),
            "lower",
            [floor.unc_us(p), ql.unc_us(p), rs.unc_us(p), lim.unc_us(p)],
        ));
    }
    let cpu = |r: &Results, redis: bool| {
        let (c, rd) = r.unc_cpu.per_cycle_us(r.unc_ns.len() as u64);
        if redis {
            rd
        } else {
            c
        }
    };
    rows.push(info_row(
        "uncontended: client CPU per cycle (µs)",
        "lower",
        [
            cpu(floor, false),
            cpu(ql, false),
            cpu(rs, false),
            cpu(lim, false),
        ],
    ));
    rows.push(info_row(
        "uncontended: redis CPU per cycle, 5 nodes (µs)",
        "lower",
        [
            cpu(floor, true),
            cpu(ql, true),
            cpu(rs, true),
            cpu(lim, true),
        ],
    ));
}

fn throughput_rows(
    res: &[Results; 4],
    s: &Settings,
    rows: &mut Vec<Row>,
    targets: &mut Vec<Value>,
) {
    let [floor, ql, rs, lim] = res;
    let v = [floor.tp(), ql.tp(), rs.tp(), lim.tp()];
    let vs_rs = ratio(v[1], v[2]);
    let ok = vs_rs.map(|r| r >= 1.3);
    rows.push(Row {
        metric: format!("throughput, {} tasks / {} keys (cycles/s)", s.tasks, s.keys),
        better: "higher",
        values: v,
        target: "≥1.3× rslock".into(),
        status: check(ok).into(),
    });
    targets
        .push(json!({"name": "throughput ≥ 1.3× rslock", "ratio": vs_rs, "limit": 1.3, "met": ok}));
    let busy = |r: &Results| (r.tp_secs > 0.0).then(|| r.tp_busy as f64 / r.tp_secs);
    rows.push(info_row(
        "throughput: busy attempts (/s)",
        "info",
        [busy(floor), busy(ql), busy(rs), busy(lim)],
    ));
    let failed = |r: &Results| (r.tp_secs > 0.0).then(|| r.tp_failed as f64 / r.tp_secs);
    rows.push(info_row(
        "throughput: failed attempts (/s)",
        "lower",
        [failed(floor), failed(ql), failed(rs), failed(lim)],
    ));
    // Per attempt (successful or busy), so contenders with more busy
    // attempts are not charged for them per success.
    let cpu = |r: &Results, redis: bool| {
        let (c, rd) = r.tp_cpu.per_cycle_us(r.tp_ok + r.tp_busy + r.tp_failed);
        if redis {
            rd
        } else {
            c
        }
    };
    rows.push(info_row(
        "throughput: client CPU per attempt (µs)",
        "lower",
        [
            cpu(floor, false),
            cpu(ql, false),
            cpu(rs, false),
            cpu(lim, false),
        ],
    ));
    rows.push(info_row(
        "throughput: redis CPU per attempt, 5 nodes (µs)",
        "lower",
        [
            cpu(floor, true),
            cpu(ql, true),
            cpu(rs, true),
            cpu(lim, true),
        ],
    ));
}

fn handoff_rows(m: &mut Measured, s: &Settings, rows: &mut Vec<Row>, targets: &mut Vec<Value>) {
    let sep = &mut m.ho_separate;
    let fair = &mut m.ho_fair;
    let [floor, ql, rs, lim] = &mut m.res;
    let v50 = [
        floor.ho_ms(50.0),
        ql.ho_ms(50.0),
        rs.ho_ms(50.0),
        lim.ho_ms(50.0),
    ];
    let vs_rs = ratio(v50[1], v50[2]);
    let ok = vs_rs.map(|r| r <= 0.05);
    rows.push(Row {
        metric: format!(
            "handoff p50, {} tasks / 1 key, one shared manager (ms)",
            s.handoff_tasks
        ),
        better: "lower",
        values: v50,
        target: "≤0.05× rslock".into(),
        status: check(ok).into(),
    });
    targets.push(
        json!({"name": "handoff p50 ≤ 1/20 rslock", "ratio": vs_rs, "limit": 0.05, "met": ok}),
    );
    rows.push(info_row(
        "handoff p99, one shared manager (ms)",
        "lower",
        [
            floor.ho_ms(99.0),
            ql.ho_ms(99.0),
            rs.ho_ms(99.0),
            lim.ho_ms(99.0),
        ],
    ));
    let v50_sep = [
        floor.ho_ms(50.0),
        sep.ho_ms(50.0),
        rs.ho_ms(50.0),
        lim.ho_ms(50.0),
    ];
    let ok_sep = ratio(v50_sep[1], v50_sep[2]).map(|r| r <= 0.05);
    rows.push(Row {
        metric: "handoff p50, one manager per task (ms)".into(),
        better: "lower",
        values: v50_sep,
        target: "≤0.05× rslock".into(),
        status: check(ok_sep).into(),
    });
    targets.push(json!({
        "name": "handoff p50 ≤ 1/20 rslock, one manager per task",
        "ratio": ratio(v50_sep[1], v50_sep[2]), "limit": 0.05, "met": ok_sep,
    }));
    rows.push(info_row(
        "handoff p99, one manager per task (ms)",
        "lower",
        [
            floor.ho_ms(99.0),
            sep.ho_ms(99.0),
            rs.ho_ms(99.0),
            lim.ho_ms(99.0),
        ],
    ));
    let v50_fair = [
        floor.ho_ms(50.0),
        fair.ho_ms(50.0),
        rs.ho_ms(50.0),
        lim.ho_ms(50.0),
    ];
    let ok_fair = ratio(v50_fair[1], v50_fair[2]).map(|r| r <= 0.05);
    rows.push(Row {
        metric: "handoff p50, fair, one manager per task (ms)".into(),
        better: "lower",
        values: v50_fair,
        target: "≤0.05× rslock".into(),
        status: check(ok_fair).into(),
    });
    targets.push(json!({
        "name": "fair handoff p50 ≤ 1/20 rslock, one manager per task",
        "ratio": ratio(v50_fair[1], v50_fair[2]), "limit": 0.05, "met": ok_fair,
    }));
    rows.push(info_row(
        "handoff p99, fair, one manager per task (ms)",
        "lower",
        [
            floor.ho_ms(99.0),
            fair.ho_ms(99.0),
            rs.ho_ms(99.0),
            lim.ho_ms(99.0),
        ],
    ));
    let per_acq = Results::ho_requests_per_acq;
    rows.push(info_row(
        "handoff: node requests per acquisition, 5 nodes, one shared manager",
        "lower",
        [per_acq(floor), per_acq(ql), per_acq(rs), per_acq(lim)],
    ));
    // Across processes a release should wake one waiter, as within one:
    // the requests per acquisition stay near the shared manager's.
    let sep_vs_shared = ratio(per_acq(sep), per_acq(ql));
    let ok_sep_req = sep_vs_shared.map(|r| r <= 2.0);
    rows.push(Row {
        metric: "handoff: node requests per acquisition, 5 nodes, one manager per task".into(),
        better: "lower",
        values: [per_acq(floor), per_acq(sep), per_acq(rs), per_acq(lim)],
        target: format!(
            "≤2× one shared manager ({} = {})",
            fmt_num(per_acq(ql).map(|v| v * 2.0)),
            fmt_ratio(sep_vs_shared)
        ),
        status: check(ok_sep_req).into(),
    });
    targets.push(json!({
        "name": "handoff node requests per acquisition, one manager per task ≤ 2× one shared manager",
        "value": per_acq(sep), "shared": per_acq(ql), "ratio": sep_vs_shared, "limit": 2.0, "met": ok_sep_req,
    }));
    let fair_req = per_acq(fair);
    let ok_fair_req = fair_req.map(|v| v <= 25.0);
    rows.push(Row {
        metric: "handoff: node requests per acquisition, 5 nodes, fair, one manager per task"
            .into(),
        better: "lower",
        values: [per_acq(floor), fair_req, per_acq(rs), per_acq(lim)],
        target: "≤25".into(),
        status: check(ok_fair_req).into(),
    });
    targets.push(json!({
        "name": "fair handoff node requests per acquisition ≤ 25, one manager per task",
        "value": fair_req, "limit": 25.0, "met": ok_fair_req,
    }));
    let turn = |r: &Results| r.ho_turn_share().map(|v| v * 100.0);
    rows.push(info_row(
        "handoffs in ticket order (%), one shared manager",
        "higher",
        [turn(floor), turn(ql), turn(rs), turn(lim)],
    ));
    rows.push(info_row(
        "handoffs in ticket order (%), one manager per task",
        "higher",
        [turn(floor), turn(sep), turn(rs), turn(lim)],
    ));
    let fair_turn = fair.ho_turn_share();
    let ok_turn = fair_turn.map(|v| v >= 0.99);
    rows.push(Row {
        metric: "handoffs in ticket order (%), fair, one manager per task".into(),
        better: "higher",
        values: [turn(floor), turn(fair), turn(rs), turn(lim)],
        target: "≥99%".into(),
        status: check(ok_turn).into(),
    });
    targets.push(json!({
        "name": "fair handoffs in ticket order ≥ 99%, one manager per task",
        "share": fair_turn, "limit": 0.99, "met": ok_turn,
    }));
    let rate = |r: &Results| (r.ho_secs > 0.0).then(|| r.ho_ns.len() as f64 / r.ho_secs);
    rows.push(info_row(
        "handoffs (/s), one shared manager",
        "higher",
        [rate(floor), rate(ql), rate(rs), rate(lim)],
    ));
    rows.push(info_row(
        "handoffs (/s), one manager per task",
        "higher",
        [rate(floor), rate(sep), rate(rs), rate(lim)],
    ));
    rows.push(info_row(
        "handoffs (/s), fair, one manager per task",
        "higher",
        [rate(floor), rate(fair), rate(rs), rate(lim)],
    ));
}

fn pct_s(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| format!("{:.2}%", v * 100.0))
}

/// The watchdog table; pushes its two targets.
fn watchdog_table(w: &Value, s: &Settings, targets: &mut Vec<Value>) -> String {
    let f = |k: &str| w.get(k).and_then(Value::as_f64);
    // One round trip per node per wave: the library's round-trip counter
    // divided by the nodes and ticks is the waves per tick.
    let rt = f("round_trips_per_node_per_tick");
    let locks = f("locks_renewed_per_tick");
    let per_wave = rt.zip(locks).and_then(|(rt, l)| (rt > 0.0).then(|| l / rt));
    // The plan (src/watchdog.rs): one wave per 100 locks (one script call
    // per node), at most one wave per millisecond of the spread (half the
    // renew interval); a tick that falls behind doubles its waves, so
    // fewer, larger waves (up to 10,000 locks) are within the plan too. The
    // window's edges can cut a tick: 1% slack on both counts.
    let spread_ms = f("renew_interval_secs").map_or(f64::INFINITY, |i| (i * 500.0).floor());
    let planned = (s.watchdog_locks.div_ceil(100) as f64)
        .min(spread_ms)
        .max(1.0);
    let fewest = s.watchdog_locks.div_ceil(10_000).max(1) as f64;
    let rt_ok = rt.zip(locks).map(|(rt, l)| {
        (l / s.watchdog_locks as f64 - 1.0).abs() <= 0.01
            && rt >= fewest * 0.99
            && rt <= planned * 1.01
    });
    let busy = f("busy_share_of_core");
    let cpu = f("process_cpu_share_of_core");
    let cpu_ok = match (busy, cpu) {
        (Some(b), Some(c)) => Some(b < 0.05 && c < 0.05),
        (Some(b), None) => Some(b < 0.05),
        _ => None,
    };
    targets.push(json!({"name": "renewal: every lock renewed each tick, in paced waves (one round trip per node each) within the plan", "value": rt, "planned_waves": planned, "fewest_waves": fewest, "locks_per_wave": per_wave, "locks_per_tick": locks, "met": rt_ok}));
    targets.push(json!({"name": "watchdog < 5% of one core", "busy_share": busy, "process_share": cpu, "limit": 0.05, "met": cpu_ok}));
    let redis = w
        .get("redis_cpu_ms_per_tick_by_node")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_f64).collect::<Vec<_>>())
        .unwrap_or_default();
    let redis = redis
        .iter()
        .map(|v| format!("{v:.1}"))
        .collect::<Vec<_>>()
        .join(" / ");
    let lines = [
        "| watchdog metric | value | target | status |".to_owned(),
        "| --- | --- | --- | --- |".to_owned(),
        format!("| locks renewed per tick | {} | {} | |", fmt_num(locks), s.watchdog_locks),
        format!(
            "| renewal waves per node per tick (round trips, library counter) | {} | {fewest:.0}–{planned:.0} (planned {planned:.0} of 100 locks over half the interval; a tick behind pace doubles its waves) | {} |",
            fmt_num(rt),
            check(rt_ok)
        ),
        format!(
            "| locks per wave | {} | 100–10,000 | |",
            fmt_num(per_wave)
        ),
        format!(
            "| script calls (EVALSHA) per node per tick (INFO commandstats) | {} | {} (100 locks per call) | |",
            fmt_num(f("script_calls_per_node_per_tick")),
            s.watchdog_locks.div_ceil(100)
        ),
        format!(
            "| watchdog busy time per tick (µs) | {} | | |",
            fmt_num(f("busy_micros_per_tick"))
        ),
        format!(
            "| watchdog busy share of one core (busy_micros / tick / interval) | {} | < 5% | {} |",
            pct_s(busy),
            check(busy.map(|b| b < 0.05))
        ),
        format!(
            "| process CPU share of one core, idle window (/proc/self/stat) | {} | < 5% | {} |",
            pct_s(cpu),
            check(cpu.map(|c| c < 0.05))
        ),
        format!(
            "| process CPU per tick (ms) | {} | | |",
            fmt_num(f("process_cpu_ms_per_tick"))
        ),
        format!("| redis-server CPU per node per tick (ms) | {redis} | | |"),
        format!(
            "| ticks in window / losses / node errors | {} / {} / {} | {} / 0 / 0 | |",
            w["ticks"], w["losses"], w["node_errors"], s.watchdog_ticks
        ),
    ];
    let mut out = String::new();
    for l in lines {
        let _ = writeln!(out, "{l}");
    }
    out
}

/// The first line of the printed report.
fn headline(r: &Run, m: &Measured, cores: usize, nproc: Option<&str>) -> String {
    format!(
        "quorumlock compare — {} node(s) ({}), {} core(s) (nproc {}), redis {}, {} round(s){}",
        r.urls.len(),
        if r.local {
            "local redis-server on loopback"
        } else {
            "QUORUMLOCK_BENCH_NODES"
        },
        cores,
        nproc.unwrap_or("?"),
        m.redis_version.as_deref().unwrap_or("?"),
        r.s.rounds,
        if r.s.quick { ", QUICK" } else { "" }
    )
}

/// One note per contender and case with failed attempts.
fn error_notes(m: &Measured, out: &mut String) {
    let res = &m.res;
    for (label, r) in [
        ("quorumlock, one manager per task", &m.ho_separate),
        ("quorumlock fair, one manager per task", &m.ho_fair),
    ] {
        if r.ho_errors > 0 {
            let _ = writeln!(
                out,
                "note: {label} handoff: {} failed attempt(s)",
                r.ho_errors
            );
        }
    }
    for (who, r) in ALL.iter().zip(res.iter()) {
        let errs = [
            ("uncontended", r.unc_errors, r.unc_first_error.as_deref()),
            ("throughput", r.tp_failed, r.tp_first_error.as_deref()),
            ("handoff", r.ho_errors, None),
        ];
        for (case, n, first) in errs {
            if n > 0 {
                let _ = writeln!(
                    out,
                    "note: {} {case}: {n} failed attempt(s){}",
                    who.name(),
                    first.map(|e| format!(", first: {e}")).unwrap_or_default()
                );
            }
        }
    }
}

/// One contender's figures in the JSON report.
fn contender_json(r: &mut Results) -> Value {
    json!({
        "uncontended": {
            "samples": r.unc_ns.len(),
            "p50_us": r.unc_us(50.0), "p99_us": r.unc_us(99.0), "p99_9_us": r.unc_us(99.9),
            "interleaved": { "samples": r.unc_mixed_ns.len(), "p50_us": r.mixed_us(50.0), "p99_us": r.mixed_us(99.0) },
            "round_p50_us": r.unc_round_p50_us,
            "median_round_p50_us": median(&r.unc_round_p50_us),
            "errors": r.unc_errors,
            "cpu": r.unc_cpu.json(r.unc_ns.len() as u64),
        },
        "throughput": {
            "cycles_per_sec": r.tp(),
            "ok": r.tp_ok, "busy": r.tp_busy, "failed": r.tp_failed, "secs": r.tp_secs,
            "rounds": r.tp_rounds,
            "first_error": r.tp_first_error,
            "cpu_per_attempt": r.tp_cpu.json(r.tp_ok + r.tp_busy + r.tp_failed),
        },
        "handoff": {
            "samples": r.ho_ns.len(),
            "p50_ms": r.ho_ms(50.0), "p99_ms": r.ho_ms(99.0),
            "round_p50_ms": r.ho_round_p50_ms,
            "acquired": r.ho_acquired, "errors": r.ho_errors, "secs": r.ho_secs,
            "node_requests_all_nodes": r.ho_requests,
            "node_requests_per_acquisition": r.ho_requests_per_acq(),
            "in_ticket_order": r.ho_in_turn,
            "in_ticket_order_share": r.ho_turn_share(),
        },
    })
}

/// quorumlock / other for the headline latencies and throughput.
fn ratios_json(m: &mut Measured) -> Value {
    let sep = &mut m.ho_separate;
    let fair = &mut m.ho_fair;
    let [floor, ql, rs, lim] = &mut m.res;
    json!({
        "uncontended_p50": { "vs_rslock": ratio(ql.unc_us(50.0), rs.unc_us(50.0)), "vs_floor": ratio(ql.unc_us(50.0), floor.unc_us(50.0)), "vs_limit": ratio(ql.unc_us(50.0), lim.unc_us(50.0)) },
        "uncontended_p50_interleaved": { "vs_rslock": ratio(ql.mixed_us(50.0), rs.mixed_us(50.0)), "vs_floor": ratio(ql.mixed_us(50.0), floor.mixed_us(50.0)), "vs_limit": ratio(ql.mixed_us(50.0), lim.mixed_us(50.0)) },
        "uncontended_p99": { "vs_rslock": ratio(ql.unc_us(99.0), rs.unc_us(99.0)), "vs_floor": ratio(ql.unc_us(99.0), floor.unc_us(99.0)), "vs_limit": ratio(ql.unc_us(99.0), lim.unc_us(99.0)) },
        "uncontended_p99_9": { "vs_rslock": ratio(ql.unc_us(99.9), rs.unc_us(99.9)), "vs_floor": ratio(ql.unc_us(99.9), floor.unc_us(99.9)), "vs_limit": ratio(ql.unc_us(99.9), lim.unc_us(99.9)) },
        "throughput": { "vs_rslock": ratio(ql.tp(), rs.tp()), "vs_floor": ratio(ql.tp(), floor.tp()), "vs_limit": ratio(ql.tp(), lim.tp()) },
        "handoff_p50": { "vs_rslock": ratio(ql.ho_ms(50.0), rs.ho_ms(50.0)), "vs_floor": ratio(ql.ho_ms(50.0), floor.ho_ms(50.0)), "vs_limit": ratio(ql.ho_ms(50.0), lim.ho_ms(50.0)) },
        "handoff_p99": { "vs_rslock": ratio(ql.ho_ms(99.0), rs.ho_ms(99.0)), "vs_floor": ratio(ql.ho_ms(99.0), floor.ho_ms(99.0)), "vs_limit": ratio(ql.ho_ms(99.0), lim.ho_ms(99.0)) },
        "handoff_p50_one_manager_per_task": { "vs_rslock": ratio(sep.ho_ms(50.0), rs.ho_ms(50.0)), "vs_floor": ratio(sep.ho_ms(50.0), floor.ho_ms(50.0)), "vs_limit": ratio(sep.ho_ms(50.0), lim.ho_ms(50.0)) },
        "handoff_p50_fair_one_manager_per_task": { "vs_rslock": ratio(fair.ho_ms(50.0), rs.ho_ms(50.0)), "vs_floor": ratio(fair.ho_ms(50.0), floor.ho_ms(50.0)), "vs_limit": ratio(fair.ho_ms(50.0), lim.ho_ms(50.0)) },
    })
}

fn machine_json(cores: usize, nproc: Option<String>, load_before: Option<&str>) -> Value {
    json!({
        "available_parallelism": cores,
        "nproc": nproc,
        "cpu": cpu_model(),
        "kernel": std::fs::read_to_string("/proc/sys/kernel/osrelease").ok().map(|s| s.trim().to_owned()),
        "loadavg_before": load_before.map(|s| s.trim().to_owned()),
        "loadavg_after": std::fs::read_to_string("/proc/loadavg").ok().map(|s| s.trim().to_owned()),
    })
}

/// Prints the tables, writes `target/bench/compare.json` and the charts.
pub(crate) fn write(r: &Run, m: &mut Measured) -> Result<(), BoxError> {
    let s = &r.s;
    let mut rows = Vec::new();
    let mut targets = Vec::new();
    if s.runs("uncontended") {
        uncontended_rows(&mut m.res, &mut rows, &mut targets);
    }
    if s.runs("throughput") {
        throughput_rows(&m.res, s, &mut rows, &mut targets);
    }
    if s.runs("handoff") {
        handoff_rows(m, s, &mut rows, &mut targets);
    }
    let wd_rows = m
        .watchdog
        .as_ref()
        .map(|w| watchdog_table(w, s, &mut targets))
        .unwrap_or_default();
    let fault_rows = m
        .faults
        .as_mut()
        .map(|f| f.table(&mut targets))
        .unwrap_or_default();

    let cores = std::thread::available_parallelism().map_or(0, std::num::NonZeroUsize::get);
    let nproc = sh("nproc", &[]);
    let mut out = String::new();
    let _ = writeln!(out, "{}", headline(r, m, cores, nproc.as_deref()));
    let _ = writeln!(out);
    if !rows.is_empty() {
        let _ = writeln!(out, "{}", table(&rows));
    }
    if !wd_rows.is_empty() {
        let _ = writeln!(out, "{wd_rows}");
    }
    if !fault_rows.is_empty() {
        let _ = writeln!(out, "{fault_rows}");
    }
    let _ = writeln!(
        out,
        "ratios are quorumlock / other (÷ limit: quorumlock / limit); for latency lower is better, for throughput higher is better. Run took {:.0} s.",
        m.elapsed.as_secs_f64()
    );
    error_notes(m, &mut out);
    println!("{out}");

    let chart_files = crate::charts::write_all(r, m)?;
    let [floor, ql, rs, lim] = &mut m.res;
    let contenders = json!({ "floor": contender_json(floor), "quorumlock": contender_json(ql), "rslock": contender_json(rs), "limit": contender_json(lim) });
    let report = json!({
        "machine": machine_json(cores, nproc, m.load_before.as_deref()),
        "nodes": { "count": r.urls.len(), "local": r.local, "redis_version": m.redis_version },
        "settings": s.json(),
        "elapsed_secs": m.elapsed.as_secs_f64(),
        "direction": { "latency": "lower is better", "throughput": "higher is better", "ratios": "quorumlock / other" },
        "contenders": contenders,
        "quorumlock_one_manager_per_task": { "handoff": contender_json(&mut m.ho_separate)["handoff"].clone() },
        "quorumlock_fair_one_manager_per_task": { "handoff": contender_json(&mut m.ho_fair)["handoff"].clone() },
        "ratios": ratios_json(m),
        "watchdog": m.watchdog,
        "faults": m.faults.as_mut().map(|f| f.json()),
        "charts": chart_files,
        "targets": targets,
        "table_markdown": out,
    });
    let dir = target_dir().join("bench");
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("compare.json");
    std::fs::write(&path, serde_json::to_string_pretty(&report)?)?;
    eprintln!("wrote {}", path.display());
    Ok(())
}
