//! Naming a run for people: the names of modes, layouts and mutations, the
//! command that replays a seed (printed by a failing sweep), and the
//! replay test that reads it back.

use super::params::Mode;
use super::run_traced;
use crate::hooks::mutation::{self, Mutation};
use crate::Layout;

/// What a sweep runs: its mode, its key layout, and whether node 0 is a
/// sharded member (`shards`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Setup {
    pub(super) mode: Mode,
    pub(super) layout: Layout,
    pub(super) sharded: bool,
}

impl std::fmt::Display for Setup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shards = if self.sharded { ", node 0 sharded" } else { "" };
        write!(
            f,
            "{} ({} layout{shards})",
            mode_name(self.mode),
            layout_name(self.layout)
        )
    }
}

pub(super) fn mode_name(mode: Mode) -> &'static str {
    match mode {
        Mode::Safe => "safe",
        Mode::Pauses => "pauses",
        Mode::UnsafeRestart => "unsafe-restart",
        Mode::UnsafeClock => "unsafe-clock",
        Mode::Sets => "sets",
        Mode::Fair => "fair",
        Mode::Resets => "resets",
        Mode::Election => "election",
        Mode::Semaphore => "semaphore",
        Mode::Rw => "rw",
    }
}

pub(super) fn layout_name(layout: Layout) -> &'static str {
    match layout {
        Layout::Redisson => "redisson",
        _ => "quorumlock",
    }
}

pub(super) fn mutation_name(m: Mutation) -> &'static str {
    match m {
        Mutation::NoRollback => "no-rollback",
        Mutation::RenewLapsed => "renew-lapsed",
        Mutation::SingleTryFence => "single-try-fence",
        Mutation::PerNodeOrder => "per-node-order",
        Mutation::DeferredUnbounded => "deferred-unbounded",
        Mutation::DeferToFair => "defer-to-fair",
        Mutation::RingQuorum => "ring-quorum",
        Mutation::IgnoreResume => "ignore-resume",
        Mutation::ResendMayHaveRun => "resend-may-have-run",
        Mutation::TimeoutIsBroken => "timeout-is-broken",
        Mutation::TrustFirstAnswer => "trust-first-answer",
        Mutation::LeaderIgnoresExpiry => "leader-ignores-expiry",
        Mutation::NoFence => "no-fence",
        Mutation::MinorityQuorum => "minority-quorum",
        Mutation::ReaderQuorumOne => "reader-quorum-one",
        Mutation::NoWriterHoldBack => "no-writer-hold-back",
        Mutation::WriterIgnoresReaders => "writer-ignores-readers",
        Mutation::KeepIgnoresFree => "keep-ignores-free",
    }
}

pub(super) fn replay_command(seed: u64, setup: Setup, m: Option<Mutation>) -> String {
    let mut env = format!("QUORUMLOCK_SIM_SEED={seed}");
    if setup.mode != Mode::Safe {
        env += &format!(" QUORUMLOCK_SIM_MODE={}", mode_name(setup.mode));
    }
    if setup.layout != Layout::Quorumlock {
        env += &format!(" QUORUMLOCK_SIM_LAYOUT={}", layout_name(setup.layout));
    }
    if setup.sharded {
        env += " QUORUMLOCK_SIM_SHARDS=1";
    }
    if let Some(m) = m {
        env += &format!(" QUORUMLOCK_SIM_MUTATION={}", mutation_name(m));
    }
    format!("{env} cargo test --all-features --lib sim::replay::replay -- --nocapture")
}

pub(super) fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// `QUORUMLOCK_SIM_SEED=S` replays one seed and prints its history.
#[test]
fn replay() {
    let Some(seed) = env_u64("QUORUMLOCK_SIM_SEED") else {
        return;
    };
    let mode = match std::env::var("QUORUMLOCK_SIM_MODE").as_deref() {
        Ok("unsafe-restart") => Mode::UnsafeRestart,
        Ok("unsafe-clock") => Mode::UnsafeClock,
        Ok("pauses") => Mode::Pauses,
        Ok("sets") => Mode::Sets,
        Ok("fair") => Mode::Fair,
        Ok("resets") => Mode::Resets,
        Ok("election") => Mode::Election,
        Ok("semaphore") => Mode::Semaphore,
        Ok("rw") => Mode::Rw,
        _ => Mode::Safe,
    };
    let layout = match std::env::var("QUORUMLOCK_SIM_LAYOUT").as_deref() {
        Ok("redisson") => Layout::Redisson,
        _ => Layout::Quorumlock,
    };
    let m = match std::env::var("QUORUMLOCK_SIM_MUTATION").as_deref() {
        Ok("no-rollback") => Some(Mutation::NoRollback),
        Ok("renew-lapsed") => Some(Mutation::RenewLapsed),
        Ok("single-try-fence") => Some(Mutation::SingleTryFence),
        Ok("per-node-order") => Some(Mutation::PerNodeOrder),
        Ok("deferred-unbounded") => Some(Mutation::DeferredUnbounded),
        Ok("defer-to-fair") => Some(Mutation::DeferToFair),
        Ok("ring-quorum") => Some(Mutation::RingQuorum),
        Ok("ignore-resume") => Some(Mutation::IgnoreResume),
        Ok("resend-may-have-run") => Some(Mutation::ResendMayHaveRun),
        Ok("timeout-is-broken") => Some(Mutation::TimeoutIsBroken),
        Ok("trust-first-answer") => Some(Mutation::TrustFirstAnswer),
        Ok("leader-ignores-expiry") => Some(Mutation::LeaderIgnoresExpiry),
        Ok("no-fence") => Some(Mutation::NoFence),
        Ok("minority-quorum") => Some(Mutation::MinorityQuorum),
        Ok("reader-quorum-one") => Some(Mutation::ReaderQuorumOne),
        Ok("no-writer-hold-back") => Some(Mutation::NoWriterHoldBack),
        Ok("writer-ignores-readers") => Some(Mutation::WriterIgnoresReaders),
        Ok("keep-ignores-free") => Some(Mutation::KeepIgnoresFree),
        _ => None,
    };
    let _m = m.map(mutation::enable);
    let trace = std::env::var("QUORUMLOCK_SIM_TRACE").is_ok();
    let sharded = env_u64("QUORUMLOCK_SIM_SHARDS").is_some_and(|n| n > 0);
    let out = run_traced(seed, mode, layout, sharded, trace);
    println!("{}", out.log);
    for (i, what) in &out.violations {
        println!("VIOLATION {i:?}: {what}");
    }
    println!("seed {seed}: {} violations", out.violations.len());
}
