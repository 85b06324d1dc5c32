//! Percentiles, CPU accounting (this process from `/proc`, the nodes from
//! `INFO`), and what each contender accumulates over the rounds.

use std::time::Duration;

use redis::aio::MultiplexedConnection;
use serde_json::{json, Value};

use crate::contenders::Who;
use crate::BoxError;

pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// What the tasks of one throughput round (`cases::throughput`) counted.
#[derive(Default)]
pub(crate) struct TpTask {
    pub(crate) ok: u64,
    pub(crate) busy: u64,
    pub(crate) failed: u64,
    pub(crate) first_error: Option<String>,
}

/// Nearest-rank percentile of sorted nanoseconds.
pub(crate) fn pct(sorted: &[u64], p: f64) -> Option<f64> {
    if sorted.is_empty() {
        return None;
    }
    let rank = (p / 100.0 * sorted.len() as f64).ceil() as usize;
    Some(sorted[rank.clamp(1, sorted.len()) - 1] as f64)
}

pub(crate) fn median(v: &[f64]) -> Option<f64> {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => None,
        n if n % 2 == 1 => Some(v[n / 2]),
        n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
    }
}

/// CPU time: this process, and all nodes' redis-servers together.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cpu {
    pub(crate) process: f64,
    pub(crate) redis: f64,
}

impl Cpu {
    pub(crate) async fn now(conns: &[MultiplexedConnection], tck: f64) -> Self {
        let mut redis = 0.0;
        for c in conns {
            if let Ok(i) = info(c, "cpu").await {
                redis += redis_cpu_secs(&i);
            }
        }
        Self {
            process: process_cpu_secs(tck).unwrap_or(0.0),
            redis,
        }
    }

    pub(crate) fn add_since(&mut self, from: Self, to: Self) {
        self.process += to.process - from.process;
        self.redis += to.redis - from.redis;
    }

    /// Microseconds per cycle: (client, redis).
    pub(crate) fn per_cycle_us(&self, cycles: u64) -> (Option<f64>, Option<f64>) {
        if cycles == 0 {
            return (None, None);
        }
        let n = cycles as f64;
        (Some(self.process * 1e6 / n), Some(self.redis * 1e6 / n))
    }

    pub(crate) fn json(&self, cycles: u64) -> Value {
        let (client, redis) = self.per_cycle_us(cycles);
        json!({
            "client_cpu_secs": self.process,
            "redis_cpu_secs_all_nodes": self.redis,
            "client_cpu_us_per_cycle": client,
            "redis_cpu_us_per_cycle_all_nodes": redis,
        })
    }
}

#[derive(Default)]
pub(crate) struct Results {
    pub(crate) unc_cpu: Cpu,
    pub(crate) tp_cpu: Cpu,
    pub(crate) unc_ns: Vec<u64>,
    pub(crate) unc_round_p50_us: Vec<f64>,
    /// Cycles of the interleaved pass: the contenders take turns cycle by
    /// cycle, so that a change in the machine's load between blocks does
    /// not land on one contender's samples only.
    pub(crate) unc_mixed_ns: Vec<u64>,
    pub(crate) unc_errors: u64,
    pub(crate) unc_first_error: Option<String>,
    pub(crate) tp_rounds: Vec<Value>,
    pub(crate) tp_ok: u64,
    pub(crate) tp_busy: u64,
    pub(crate) tp_failed: u64,
    pub(crate) tp_secs: f64,
    pub(crate) tp_first_error: Option<String>,
    pub(crate) ho_ns: Vec<u64>,
    pub(crate) ho_round_p50_ms: Vec<f64>,
    pub(crate) ho_acquired: u64,
    /// Lock requests (script calls, SET NX) all nodes served in the handoff runs.
    pub(crate) ho_requests: u64,
    pub(crate) ho_errors: u64,
    pub(crate) ho_secs: f64,
    /// Handoffs (of `ho_ns`) whose new holder's lock call had started
    /// before every other waiting task's.
    pub(crate) ho_in_turn: u64,
}

impl Results {
    pub(crate) fn unc_us(&mut self, p: f64) -> Option<f64> {
        self.unc_ns.sort_unstable();
        pct(&self.unc_ns, p).map(|n| n / 1e3)
    }

    /// The interleaved pass's percentile `p`, in µs.
    pub(crate) fn mixed_us(&mut self, p: f64) -> Option<f64> {
        self.unc_mixed_ns.sort_unstable();
        pct(&self.unc_mixed_ns, p).map(|n| n / 1e3)
    }

    pub(crate) fn ho_ms(&mut self, p: f64) -> Option<f64> {
        self.ho_ns.sort_unstable();
        pct(&self.ho_ns, p).map(|n| n / 1e6)
    }

    /// The share of handoffs in ticket order (0–1).
    pub(crate) fn ho_turn_share(&self) -> Option<f64> {
        (!self.ho_ns.is_empty()).then(|| self.ho_in_turn as f64 / self.ho_ns.len() as f64)
    }

    /// Node requests per acquisition in the handoff runs.
    pub(crate) fn ho_requests_per_acq(&self) -> Option<f64> {
        (self.ho_acquired > 0).then(|| self.ho_requests as f64 / self.ho_acquired as f64)
    }

    /// Adds one round of the throughput case.
    pub(crate) fn add_throughput(&mut self, t: TpTask, secs: f64) {
        self.tp_rounds.push(json!({
            "cycles_per_sec": t.ok as f64 / secs,
            "ok": t.ok, "busy": t.busy, "failed": t.failed, "secs": secs,
        }));
        self.tp_ok += t.ok;
        self.tp_busy += t.busy;
        self.tp_failed += t.failed;
        self.tp_secs += secs;
        if self.tp_first_error.is_none() {
            self.tp_first_error = t.first_error;
        }
    }

    pub(crate) fn tp(&self) -> Option<f64> {
        (self.tp_secs > 0.0).then(|| self.tp_ok as f64 / self.tp_secs)
    }
}

pub(crate) async fn info(conn: &MultiplexedConnection, section: &str) -> Result<String, BoxError> {
    let mut c = conn.clone();
    Ok(redis::cmd("INFO").arg(section).query_async(&mut c).await?)
}

pub(crate) fn info_field<'a>(info: &'a str, key: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(':')))
        .map(str::trim)
}

/// `calls` of `cmdstat_evalsha`, 0 when never called.
pub(crate) fn evalsha_calls(info: &str) -> u64 {
    command_calls(info, "evalsha")
}

/// `calls` of one command in `INFO commandstats`, 0 when never called.
pub(crate) fn command_calls(info: &str, command: &str) -> u64 {
    info_field(info, &format!("cmdstat_{command}"))
        .and_then(|v| v.split(',').find_map(|kv| kv.strip_prefix("calls=")))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Lock requests the nodes served, summed over `conns`: script calls
/// (`EVALSHA`), plus rslock's plain `SET NX` when `who` is rslock (the other
/// contenders' scripts call SET inside, which commandstats also counts).
pub(crate) async fn lock_requests(conns: &[MultiplexedConnection], who: Who) -> u64 {
    let mut n = 0;
    for c in conns {
        if let Ok(i) = info(c, "commandstats").await {
            n += command_calls(&i, "evalsha");
            if who == Who::Rslock {
                n += command_calls(&i, "set");
            }
        }
    }
    n
}

pub(crate) fn redis_cpu_secs(info: &str) -> f64 {
    ["used_cpu_sys", "used_cpu_user"]
        .iter()
        .filter_map(|k| info_field(info, k)?.parse::<f64>().ok())
        .sum()
}

/// Clock ticks per second of `/proc` times (`getconf CLK_TCK`, else 100).
pub(crate) fn clk_tck() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// This process's user + system CPU time, from `/proc/self/stat`.
pub(crate) fn process_cpu_secs(tck: f64) -> Option<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After "pid (comm) ", field 3 (state) is index 0; utime is field 14, stime 15.
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / tck)
}
