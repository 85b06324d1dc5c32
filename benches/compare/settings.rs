//! The knobs of a run, from the environment, and where its files go.

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use serde_json::{json, Value};

use crate::BoxError;

pub(crate) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Cargo's target directory: the JSON report and the charts of partial
/// runs go under `bench/` there.
pub(crate) fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"),
        PathBuf::from,
    )
}

/// The cases a run can select with `QUORUMLOCK_BENCH_CASES`.
pub(crate) const CASES: [&str; 5] = ["uncontended", "throughput", "handoff", "watchdog", "faults"];

#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) quick: bool,
    pub(crate) rounds: usize,
    /// Uncontended cycles per contender per round.
    pub(crate) cycles: usize,
    /// Throughput: tasks, keys and duration per contender per round.
    pub(crate) tasks: usize,
    pub(crate) keys: usize,
    pub(crate) secs: Duration,
    /// Handoff: tasks on one key, duration per contender per round, hold time.
    pub(crate) handoff_tasks: usize,
    pub(crate) handoff_secs: Duration,
    pub(crate) hold: Duration,
    /// TTL / lease of cases 1–3, the same for every contender.
    pub(crate) ttl: Duration,
    /// rslock's retry settings while waiting (its defaults).
    pub(crate) rs_retries: u32,
    pub(crate) rs_retry_delay: Duration,
    /// Watchdog case.
    pub(crate) watchdog_locks: usize,
    pub(crate) watchdog_lease: Duration,
    pub(crate) watchdog_ticks: u64,
    /// Faults: at most this many uncontended cycles, and at most
    /// `fault_secs`, per contender, case and round; `fault_secs` is also the
    /// throughput duration.
    pub(crate) fault_cycles: usize,
    pub(crate) fault_secs: Duration,
    /// The per-node timeout every contender gets in the fault cases.
    pub(crate) fault_node_timeout: Duration,
    /// Fault cases to run besides the two baselines (`None`: all).
    pub(crate) fault_only: Option<Vec<String>>,
    pub(crate) cases: Vec<String>,
}

pub(crate) fn env_or<T: FromStr>(name: &str, default: T) -> Result<T, BoxError>
where
    T::Err: std::fmt::Display,
{
    match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => v
            .trim()
            .parse()
            .map_err(|e| format!("{name}={v:?}: {e}").into()),
        _ => Ok(default),
    }
}

pub(crate) fn env_flag(name: &str) -> bool {
    std::env::var(name).is_ok_and(|v| !matches!(v.trim(), "" | "0" | "false" | "no"))
}

impl Settings {
    pub(crate) fn from_env(quick_arg: bool) -> Result<Self, BoxError> {
        let quick = quick_arg || env_flag("QUORUMLOCK_BENCH_QUICK");
        let secs: f64 = env_or("QUORUMLOCK_BENCH_SECS", if quick { 1.0 } else { 5.0 })?;
        let handoff_secs: f64 = env_or(
            "QUORUMLOCK_BENCH_HANDOFF_SECS",
            if quick { 1.5 } else { 4.0 },
        )?;
        let fault_secs: f64 = env_or("QUORUMLOCK_BENCH_FAULT_SECS", if quick { 1.0 } else { 2.0 })?;
        let cases = match std::env::var("QUORUMLOCK_BENCH_CASES") {
            Ok(v) if !v.trim().is_empty() => {
                let list: Vec<String> = v
                    .split(',')
                    .map(|c| c.trim().to_ascii_lowercase())
                    .filter(|c| !c.is_empty())
                    .collect();
                if let Some(bad) = list.iter().find(|c| !CASES.contains(&c.as_str())) {
                    return Err(format!(
                        "QUORUMLOCK_BENCH_CASES: unknown case {bad:?} (known: {})",
                        CASES.join(", ")
                    )
                    .into());
                }
                list
            }
            _ => CASES.iter().map(|c| (*c).to_owned()).collect(),
        };
        let s = Self {
            quick,
            rounds: env_or("QUORUMLOCK_BENCH_ROUNDS", if quick { 1 } else { 3 })?,
            cycles: env_or("QUORUMLOCK_BENCH_CYCLES", if quick { 300 } else { 2_000 })?,
            tasks: 64,
            keys: 1_000,
            secs: Duration::from_secs_f64(secs),
            handoff_tasks: 8,
            handoff_secs: Duration::from_secs_f64(handoff_secs),
            hold: Duration::from_millis(1),
            ttl: Duration::from_secs(10),
            rs_retries: 3,
            rs_retry_delay: Duration::from_millis(200),
            watchdog_locks: env_or("QUORUMLOCK_BENCH_WATCHDOG_LOCKS", 10_000)?,
            watchdog_lease: Duration::from_secs(3),
            watchdog_ticks: env_or("QUORUMLOCK_BENCH_TICKS", if quick { 3 } else { 8 })?,
            fault_cycles: if quick { 100 } else { 400 },
            fault_secs: Duration::from_secs_f64(fault_secs),
            // redis-rs's default response timeout, which rslock cannot change
            // (it opens its connections with the default configuration).
            fault_node_timeout: Duration::from_millis(500),
            fault_only: std::env::var("QUORUMLOCK_BENCH_FAULT_CASES")
                .ok()
                .filter(|v| !v.trim().is_empty())
                .map(|v| {
                    v.split(',')
                        .map(|c| c.trim().to_ascii_lowercase())
                        .collect()
                }),
            cases,
        };
        if s.rounds == 0 || s.cycles == 0 || s.watchdog_locks == 0 || s.watchdog_ticks == 0 {
            return Err("rounds, cycles, watchdog locks and ticks must be above 0".into());
        }
        if s.secs.is_zero() || s.handoff_secs.is_zero() || s.fault_secs.is_zero() {
            return Err(
                "QUORUMLOCK_BENCH_SECS, QUORUMLOCK_BENCH_HANDOFF_SECS and QUORUMLOCK_BENCH_FAULT_SECS must be above 0".into(),
            );
        }
        Ok(s)
    }

    pub(crate) fn runs(&self, case: &str) -> bool {
        self.cases.iter().any(|c| c == case)
    }

    pub(crate) fn json(&self) -> Value {
        json!({
            "quick": self.quick,
            "rounds": self.rounds,
            "uncontended_cycles_per_round": self.cycles,
            "throughput_tasks": self.tasks,
            "throughput_keys": self.keys,
            "throughput_secs_per_round": self.secs.as_secs_f64(),
            "handoff_tasks": self.handoff_tasks,
            "handoff_secs_per_round": self.handoff_secs.as_secs_f64(),
            "handoff_hold_ms": ms(self.hold),
            "ttl_secs": self.ttl.as_secs_f64(),
            "rslock_retry": { "count": self.rs_retries, "delay_ms": ms(self.rs_retry_delay) },
            "watchdog_locks": self.watchdog_locks,
            "watchdog_lease_secs": self.watchdog_lease.as_secs_f64(),
            "watchdog_ticks": self.watchdog_ticks,
            "fault_max_cycles": self.fault_cycles,
            "fault_secs": self.fault_secs.as_secs_f64(),
            "fault_node_timeout_ms": ms(self.fault_node_timeout),
            "fault_cases": self.fault_only,
            "cases": self.cases,
        })
    }
}
