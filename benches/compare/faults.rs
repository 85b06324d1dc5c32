//! Tail tolerance: each contender's uncontended lock + unlock latency and
//! 64-task throughput with slow, black-holed or refusing nodes, through the
//! proxy of [`crate::proxy`]. Every case builds its own contenders over its
//! own node addresses, all with the same per-node timeout.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

use crate::cases::throughput;
use crate::contenders::{floor_owner, names, order, Attempt, Lockers, Who, ALL};
use crate::measures::{info, nanos, process_cpu_secs, redis_cpu_secs, Cpu, Results};
use crate::proxy::{proxy_cpu_secs, refused_port, Mode, Proxy};
use crate::report::{check, info_row, ratio, table, Row};
use crate::{BoxError, Run};

/// What happens to one node in a case.
#[derive(Debug, Clone, Copy)]
pub(crate) enum NodeFault {
    /// Straight to the node, no proxy.
    Direct,
    /// Through the proxy, with this added round trip (half each way) and
    /// jitter (a fraction of it).
    Slow { rtt_ms: f64, jitter: f64 },
    /// Through the proxy, turned into a black hole after the warm-up.
    BlackHole,
    /// A port with nothing listening, from the start.
    Refused,
}

/// One fault case.
pub(crate) struct Case {
    pub(crate) key: &'static str,
    pub(crate) label: &'static str,
    /// The chart's label.
    pub(crate) short: &'static str,
    pub(crate) nodes: [NodeFault; 5],
}

const D: NodeFault = NodeFault::Direct;
const SLOW20: NodeFault = NodeFault::Slow {
    rtt_ms: 20.0,
    jitter: 0.1,
};

const fn zone(rtt_ms: f64) -> NodeFault {
    NodeFault::Slow {
        rtt_ms,
        jitter: 0.2,
    }
}

/// The cases, in the order they run. The first two are the baselines of
/// the targets: the same nodes without faults, direct and through idle
/// proxies.
pub(crate) const FAULT_CASES: [Case; 7] = [
    Case {
        key: "none",
        label: "fault-free (direct)",
        short: "fault-free",
        nodes: [D; 5],
    },
    Case {
        key: "proxied",
        label: "fault-free, 5 idle proxies",
        short: "idle proxies",
        nodes: [zone(0.0); 5],
    },
    Case {
        key: "slow1",
        label: "1 node +20 ms",
        short: "1 node +20ms",
        nodes: [SLOW20, D, D, D, D],
    },
    Case {
        key: "slow2",
        label: "2 nodes +20 ms",
        short: "2 nodes +20ms",
        nodes: [SLOW20, SLOW20, D, D, D],
    },
    Case {
        key: "blackhole",
        label: "1 node black-holed",
        short: "black hole",
        nodes: [NodeFault::BlackHole, D, D, D, D],
    },
    Case {
        key: "refused",
        label: "1 node refusing",
        short: "refused",
        nodes: [NodeFault::Refused, D, D, D, D],
    },
    Case {
        key: "zones",
        label: "zones +0.2/0.5/1/2/5 ms ±20%",
        short: "zones",
        nodes: [zone(0.2), zone(0.5), zone(1.0), zone(2.0), zone(5.0)],
    },
];

/// The added round trip of the third-fastest node of a case, in ms.
fn third_fastest_rtt_ms(case: &Case) -> f64 {
    let mut rtts: Vec<f64> = case
        .nodes
        .iter()
        .map(|n| match n {
            NodeFault::Slow { rtt_ms, .. } => *rtt_ms,
            _ => 0.0,
        })
        .collect();
    rtts.sort_by(f64::total_cmp);
    rtts[2]
}

/// What one case measured, per contender (by [`Who::index`]).
pub(crate) struct CaseResult {
    pub(crate) res: [Results; 4],
    /// An error that stopped the case (the contenders could not be built).
    pub(crate) error: Option<String>,
}

/// Every fault case's results.
pub(crate) struct FaultReport {
    pub(crate) cases: Vec<CaseResult>,
    pub(crate) node_timeout: Duration,
}

/// The proxies of a case, with the fault each stands for.
type Proxied = Vec<(NodeFault, Proxy)>;

/// The nodes' addresses for a case, and the proxies that make them.
fn setup(direct: &[String], case: &Case) -> Result<(Vec<String>, Proxied), BoxError> {
    let mut urls = Vec::new();
    let mut proxies = Vec::new();
    for (url, fault) in direct.iter().zip(case.nodes) {
        let mode = match fault {
            NodeFault::Direct => {
                urls.push(url.clone());
                continue;
            }
            NodeFault::Refused => {
                urls.push(format!("redis://127.0.0.1:{}", refused_port()?));
                continue;
            }
            NodeFault::Slow { rtt_ms, jitter } => Mode::Delay {
                one_way: Duration::from_secs_f64(rtt_ms / 2.0 / 1e3),
                jitter,
            },
            // Healthy for the warm-up; a black hole from the measurement on.
            NodeFault::BlackHole => Mode::Delay {
                one_way: Duration::ZERO,
                jitter: 0.0,
            },
        };
        let upstream: SocketAddr = url
            .trim_start_matches("redis://")
            .trim_end_matches('/')
            .parse()?;
        let p = Proxy::start(upstream, mode)?;
        urls.push(p.url());
        proxies.push((fault, p));
    }
    Ok((urls, proxies))
}

/// This process's CPU less the proxies', and the nodes' (read over the
/// direct connections).
async fn cpu_now(conns: &[MultiplexedConnection], tck: f64) -> Cpu {
    let mut redis = 0.0;
    for c in conns {
        if let Ok(i) = info(c, "cpu").await {
            redis += redis_cpu_secs(&i);
        }
    }
    Cpu {
        process: process_cpu_secs(tck).unwrap_or(0.0) - proxy_cpu_secs(tck),
        redis,
    }
}

/// Uncontended lock + unlock of fresh keys, for at most `limit`.
async fn uncontended_for(
    l: &Lockers,
    who: Who,
    names: &[String],
    limit: Duration,
    r: &mut Results,
) {
    let owner = floor_owner(0);
    let end = Instant::now() + limit;
    for name in names {
        if Instant::now() >= end {
            break;
        }
        let t = Instant::now();
        let outcome = match l.try_once(who, name, &owner).await {
            Attempt::Won(h) => l.unlock(h).await,
            Attempt::Busy => Err("busy on a fresh key".to_owned()),
            Attempt::Failed(e) => Err(e),
        };
        match outcome {
            Ok(()) => r.unc_ns.push(nanos(t.elapsed())),
            Err(e) => {
                r.unc_errors += 1;
                r.unc_first_error.get_or_insert(e);
            }
        }
    }
}

/// One round of one case: each contender in the round's order.
async fn case_round(r: &Run, l: &Arc<Lockers>, case: &Case, round: usize, res: &mut [Results; 4]) {
    let s = &r.s;
    for who in order(round) {
        let out = &mut res[who.index()];
        let tag = format!("f{}", case.key);
        let list = names(&r.id, who, &tag, round, s.fault_cycles);
        uncontended_for(l, who, &list, s.fault_secs, out).await;
        let list = Arc::new(names(&r.id, who, &format!("{tag}t"), round, s.keys));
        let c0 = cpu_now(&r.l.floor.conns, r.tck).await;
        let (t, took) = throughput(l, who, list, s.tasks, s.fault_secs).await;
        out.tp_cpu
            .add_since(c0, cpu_now(&r.l.floor.conns, r.tck).await);
        let secs = took.as_secs_f64();
        eprintln!(
            "  {:<10} {:<10} {} cycles, {} failed; {:.0} cycles/s ({} failed)",
            case.key,
            who.name(),
            out.unc_ns.len(),
            out.unc_errors,
            t.ok as f64 / secs,
            t.failed
        );
        out.add_throughput(t, secs);
    }
}

/// All rounds of one case, on contenders of its own.
async fn run_case(r: &Run, case: &Case, timeout: Duration) -> Result<[Results; 4], BoxError> {
    eprintln!("fault case {}: {}", case.key, case.label);
    let (urls, proxies) = setup(&r.urls, case)?;
    let l = Arc::new(Lockers::build_faulty(&urls, &r.s, timeout).await?);
    for who in ALL {
        let mut scratch = Results::default();
        let warm = names(&r.id, who, &format!("fw{}", case.key), 0, 30);
        uncontended_for(&l, who, &warm, Duration::from_secs(2), &mut scratch).await;
    }
    for (fault, p) in &proxies {
        if matches!(fault, NodeFault::BlackHole) {
            p.set(Mode::BlackHole);
        }
    }
    let mut res: [Results; 4] = Default::default();
    for round in 0..r.s.rounds {
        case_round(r, &l, case, round, &mut res).await;
    }
    drop(l);
    drop(proxies);
    Ok(res)
}

/// Runs every fault case; a case whose contenders cannot be built is
/// reported with its error.
pub(crate) async fn run(r: &Run) -> Result<FaultReport, BoxError> {
    let timeout = r.s.fault_node_timeout;
    let mut cases = Vec::new();
    for case in &FAULT_CASES {
        let baseline = matches!(case.key, "none" | "proxied");
        let chosen =
            r.s.fault_only
                .as_ref()
                .is_none_or(|only| only.iter().any(|c| c == case.key));
        if !baseline && !chosen {
            cases.push(CaseResult {
                res: Default::default(),
                error: Some("not selected (QUORUMLOCK_BENCH_FAULT_CASES)".to_owned()),
            });
            continue;
        }
        match run_case(r, case, timeout).await {
            Ok(res) => cases.push(CaseResult { res, error: None }),
            Err(e) => {
                eprintln!("  fault case {} failed: {e}", case.key);
                cases.push(CaseResult {
                    res: Default::default(),
                    error: Some(e.to_string()),
                });
            }
        }
    }
    Ok(FaultReport {
        cases,
        node_timeout: timeout,
    })
}

fn ms_pct(r: &mut Results, p: f64) -> Option<f64> {
    r.unc_us(p).map(|us| us / 1e3)
}

fn failures(r: &Results) -> Option<f64> {
    Some((r.unc_errors + r.tp_failed) as f64)
}

fn attempts(r: &Results) -> u64 {
    r.tp_ok + r.tp_busy + r.tp_failed
}

impl FaultReport {
    /// quorumlock's p50 in a baseline case (0: direct, 1: idle proxies).
    fn ql_base_ms(&mut self, i: usize) -> Option<f64> {
        self.cases
            .get_mut(i)
            .and_then(|c| ms_pct(&mut c.res[Who::Quorumlock.index()], 50.0))
    }

    /// The target of a case on quorumlock's p50: (reference in ms, the
    /// factor allowed over it, text).
    fn target(&mut self, i: usize) -> Option<(f64, f64, String)> {
        let case = &FAULT_CASES[i];
        match case.key {
            "slow1" | "slow2" | "blackhole" | "refused" => {
                let base = self.ql_base_ms(0)?;
                Some((
                    base,
                    1.5,
                    format!("ql ≤ 1.5× its fault-free p50 ({base:.3} ms)"),
                ))
            }
            "zones" => {
                let base = self.ql_base_ms(1)?;
                let rtt = third_fastest_rtt_ms(case);
                let ideal = base + 2.0 * rtt;
                Some((
                    ideal,
                    1.2,
                    format!(
                        "ql ≤ 1.2× (idle-proxy p50 {base:.3} + 2 × {rtt} ms) = {:.3} ms",
                        ideal * 1.2
                    ),
                ))
            }
            _ => None,
        }
    }

    /// The fault tables (latency, throughput, failures; then CPU); pushes
    /// the targets.
    pub(crate) fn table(&mut self, targets: &mut Vec<Value>) -> String {
        let mut rows = Vec::new();
        let mut cpu_rows = Vec::new();
        for (i, case) in FAULT_CASES.iter().enumerate().take(self.cases.len()) {
            let target = self.target(i);
            let c = &mut self.cases[i];
            if let Some(e) = &c.error {
                rows.push(Row {
                    metric: format!("{}: not run", case.label),
                    better: "",
                    values: [None; 4],
                    target: String::new(),
                    status: e.replace('|', "/"),
                });
                continue;
            }
            let [f, q, rs, lim] = &mut c.res;
            let p50 = [
                ms_pct(f, 50.0),
                ms_pct(q, 50.0),
                ms_pct(rs, 50.0),
                ms_pct(lim, 50.0),
            ];
            let (text, status) = match &target {
                Some((base, factor, text)) => {
                    let ok = p50[1].map(|v| v <= base * factor);
                    let over = p50[1].map(|v| v / base);
                    targets.push(json!({"name": format!("fault case {}: {text}", case.label), "value_ms": p50[1], "reference_ms": base, "ratio": over, "limit": factor, "met": ok}));
                    (
                        text.clone(),
                        format!("{} ({})", check(ok), fmt_ratio_plain(over)),
                    )
                }
                None => (String::new(), String::new()),
            };
            rows.push(Row {
                metric: format!("{}: lock+unlock p50 (ms)", case.label),
                better: "lower",
                values: p50,
                target: text,
                status,
            });
            rows.push(info_row(
                format!("{}: lock+unlock p99 (ms)", case.label),
                "lower",
                [
                    ms_pct(f, 99.0),
                    ms_pct(q, 99.0),
                    ms_pct(rs, 99.0),
                    ms_pct(lim, 99.0),
                ],
            ));
            rows.push(info_row(
                format!("{}: throughput, 64 tasks (cycles/s)", case.label),
                "higher",
                [f.tp(), q.tp(), rs.tp(), lim.tp()],
            ));
            rows.push(info_row(
                format!("{}: failed attempts (uncontended + throughput)", case.label),
                "lower",
                [failures(f), failures(q), failures(rs), failures(lim)],
            ));
            let cpu = |r: &Results, redis: bool| {
                let (c, rd) = r.tp_cpu.per_cycle_us(attempts(r));
                if redis {
                    rd
                } else {
                    c
                }
            };
            cpu_rows.push(info_row(
                format!("{}: client CPU per attempt (µs)", case.label),
                "lower",
                [
                    cpu(f, false),
                    cpu(q, false),
                    cpu(rs, false),
                    cpu(lim, false),
                ],
            ));
            cpu_rows.push(info_row(
                format!("{}: redis CPU per attempt, all nodes (µs)", case.label),
                "lower",
                [cpu(f, true), cpu(q, true), cpu(rs, true), cpu(lim, true)],
            ));
        }
        let mut out = String::new();
        let _ = writeln!(
            out,
            "Fault cases (per-node timeout {} ms for every contender):\n",
            self.node_timeout.as_millis()
        );
        let _ = writeln!(out, "{}", table(&rows));
        let _ = writeln!(out, "{}", table(&cpu_rows));
        let _ = write!(out, "{}", self.first_errors());
        out
    }

    /// The first error of each contender and case that had failures.
    fn first_errors(&self) -> String {
        let mut out = String::new();
        for (case, c) in FAULT_CASES.iter().zip(&self.cases) {
            for who in ALL {
                let r = &c.res[who.index()];
                let n = r.unc_errors + r.tp_failed;
                let first = r.unc_first_error.as_ref().or(r.tp_first_error.as_ref());
                if let (true, Some(e)) = (n > 0, first) {
                    let _ = writeln!(
                        out,
                        "note: {} {}: {n} failed attempt(s), first: {e}",
                        case.label,
                        who.name()
                    );
                }
            }
        }
        out
    }

    /// The p50 (ms) of each contender in each case, for the chart.
    pub(crate) fn p50s(&mut self) -> Vec<(&'static str, [Option<f64>; 4])> {
        FAULT_CASES
            .iter()
            .zip(self.cases.iter_mut())
            .map(|(case, c)| {
                let [f, q, rs, lim] = &mut c.res;
                (
                    case.short,
                    [
                        ms_pct(f, 50.0),
                        ms_pct(q, 50.0),
                        ms_pct(rs, 50.0),
                        ms_pct(lim, 50.0),
                    ],
                )
            })
            .collect()
    }

    pub(crate) fn json(&mut self) -> Value {
        let timeout = self.node_timeout.as_secs_f64() * 1e3;
        let cases: Vec<Value> = FAULT_CASES
            .iter()
            .zip(self.cases.iter_mut())
            .map(|(case, c)| {
                let per = |r: &mut Results| {
                    json!({
                        "samples": r.unc_ns.len(),
                        "p50_ms": ms_pct(r, 50.0), "p99_ms": ms_pct(r, 99.0),
                        "uncontended_errors": r.unc_errors,
                        "uncontended_first_error": r.unc_first_error,
                        "throughput_cycles_per_sec": r.tp(),
                        "throughput_ok": r.tp_ok, "throughput_busy": r.tp_busy,
                        "throughput_failed": r.tp_failed,
                        "throughput_first_error": r.tp_first_error,
                        "cpu_per_attempt": r.tp_cpu.json(attempts(r)),
                    })
                };
                let [f, q, rs, lim] = &mut c.res;
                let p = (
                    ms_pct(q, 50.0),
                    ms_pct(f, 50.0),
                    ms_pct(rs, 50.0),
                    ms_pct(lim, 50.0),
                );
                json!({
                    "case": case.key, "label": case.label, "error": c.error,
                    "nodes": format!("{:?}", case.nodes),
                    "floor": per(f), "quorumlock": per(q), "rslock": per(rs), "limit": per(lim),
                    "p50_ratio": { "vs_floor": ratio(p.0, p.1), "vs_rslock": ratio(p.0, p.2), "vs_limit": ratio(p.0, p.3) },
                })
            })
            .collect();
        json!({ "node_timeout_ms": timeout, "cases": cases })
    }
}

fn fmt_ratio_plain(v: Option<f64>) -> String {
    v.map_or_else(|| "—".to_owned(), |v| format!("{v:.2}×"))
}
