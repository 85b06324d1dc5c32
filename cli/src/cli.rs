//! The command line: options, help texts and parse errors.

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use clap::error::ErrorKind;
use clap::{Args, Parser, Subcommand};
use quorumlock::{Layout, Quorum};

use crate::help::{
    ELECT_HELP, EXEC_HELP, LEADER_HELP, ROOT_HELP, STATUS_HELP, TOP_HELP, UNLOCK_HELP,
};

/// Example node list, shown wherever the nodes are missing.
pub const NODES_EXAMPLE: &str = "redis://redis-a:6379,redis://redis-b:6379,redis://redis-c:6379";

/// Run a command under a distributed lock held on N independent Redis masters.
#[derive(Debug, Parser)]
#[command(
    name = "quorumlock",
    version,
    after_long_help = ROOT_HELP,
    after_help = "See 'quorumlock --help' for examples and exit statuses.",
    propagate_version = true
)]
pub struct Cli {
    /// Options shared by every command.
    #[command(flatten)]
    pub global: Global,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// Options shared by every command.
#[derive(Debug, Args)]
pub struct Global {
    /// Redis master URLs, comma separated (at least one; an odd number, 3 or
    /// 5, for a majority quorum); a Redis Cluster member as
    /// `cluster:URL+URL` (one or more of its nodes); a master under Redis
    /// Sentinel as `sentinel:MASTER_NAME@URL+URL` (one or more of its
    /// sentinels).
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_NODES",
        value_name = "URL,...",
        value_delimiter = ',',
        hide_env_values = true
    )]
    pub nodes: Vec<String>,

    /// Grants needed: `majority` (RedLock), `all` (MultiLock) or a number.
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_QUORUM",
        value_name = "majority|all|N",
        default_value = "majority",
        hide_env_values = true,
        value_parser = parse_quorum
    )]
    pub quorum: Quorum,

    /// Prefix of the lock keys (must match the applications sharing the locks).
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_KEY_PREFIX",
        value_name = "PREFIX",
        default_value = "quorumlock:",
        hide_env_values = true
    )]
    pub key_prefix: String,

    /// Where the locks live on the nodes: `quorumlock` (the hash
    /// `<prefix>{<name>}`) or `redisson` (Redisson's `RLock`, the hash at
    /// the name itself), as the applications sharing the locks build their
    /// managers (`LockManagerBuilder::layout`).
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_LAYOUT",
        value_name = "quorumlock|redisson",
        default_value = "quorumlock",
        hide_env_values = true,
        value_parser = parse_layout
    )]
    pub layout: Layout,

    /// PEM file of the CA that signed the nodes' certificates, for
    /// `rediss://` nodes whose certificates the built-in roots do not trust
    /// (a private CA).
    #[arg(
        long,
        global = true,
        env = "QUORUMLOCK_TLS_CA",
        value_name = "FILE",
        hide_env_values = true
    )]
    pub tls_ca: Option<std::path::PathBuf>,
}

/// The commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a command while holding the lock, renewed until it exits.
    #[command(after_long_help = EXEC_HELP)]
    Exec(ExecArgs),
    /// Show what every node holds for a lock (holder, hold count, PTTL,
    /// fence) and who waits for it; --watch redraws it until Ctrl-C.
    #[command(after_long_help = STATUS_HELP)]
    Status(StatusArgs),
    /// Show the locks with the most waiters, found by a prefix scan of the
    /// nodes; --watch redraws them until Ctrl-C.
    #[command(after_long_help = TOP_HELP)]
    Top(TopArgs),
    /// Break a lock whoever holds it (administrative; needs --force).
    #[command(after_long_help = UNLOCK_HELP)]
    Unlock(UnlockArgs),
    /// Wait for this process's turn to lead an election, then run a command
    /// while it leads, as exec does under a lock.
    #[command(after_long_help = ELECT_HELP)]
    Elect(ElectArgs),
    /// Show who leads an election (value, term, host, pid, since when);
    /// --watch redraws it on each change until Ctrl-C.
    #[command(after_long_help = LEADER_HELP)]
    Leader(LeaderArgs),
}

/// `quorumlock exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// The lock name.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// The command, and how it runs under the lock.
    #[command(flatten)]
    pub run: RunArgs,

    /// Take the lock in turn: among fair waiters, across hosts, the one that
    /// asked first gets it first, and a release wakes only that one. A
    /// waiter that stops calling the nodes (killed) is skipped after 5 s.
    #[arg(long)]
    pub fair: bool,
}

/// `quorumlock elect`.
#[derive(Debug, Args)]
pub struct ElectArgs {
    /// What this candidate proclaims once it leads, for `quorumlock leader`
    /// and the applications that read the election (such as the address
    /// where it serves): not empty, at most 64 KiB.
    #[arg(long, value_name = "VALUE", required = true, value_parser = parse_value)]
    pub value: String,

    /// The election name.
    #[arg(value_name = "NAME")]
    pub name: String,

    /// The command, and how it runs while this process leads.
    #[command(flatten)]
    pub run: RunArgs,
}

/// What `exec` and `elect` share: the command, and how it runs under the
/// lock (for `elect`, the election's lock, `election:<name>`).
#[derive(Debug, Args)]
pub struct RunArgs {
    /// Give up if the lock is not obtained within this time (`0s`: a single
    /// attempt). Default: wait as long as it takes.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub wait: Option<Duration>,

    /// The lease on the nodes, renewed every lease/3 while the command runs.
    /// A shorter lease frees the lock sooner after a crash. [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub lease: Option<Duration>,

    /// After the lock is lost, how long the command has between SIGTERM and
    /// SIGKILL, at most the lock's remaining validity at that moment.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub grace: Duration,

    /// Keep the command in quorumlock's process group even when not run
    /// from a terminal (the default there): signals then reach the command
    /// alone, not every process it started, and the lock is released when
    /// the command exits even if processes it started still run.
    #[arg(long)]
    pub foreground: bool,

    /// Say nothing when the lock is not obtained within --wait (the exit
    /// status, 75, still tells).
    #[arg(short, long)]
    pub quiet: bool,

    /// The command and its arguments (after `--`).
    #[arg(
        value_name = "CMD",
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// `quorumlock leader`.
#[derive(Debug, Args)]
pub struct LeaderArgs {
    /// Print JSON instead of a line of text (with --watch: one document per
    /// line).
    #[arg(long)]
    pub json: bool,

    /// Redraw the leader on each change until interrupted (Ctrl-C exits
    /// with 0).
    #[arg(short, long)]
    pub watch: bool,

    /// The election name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `quorumlock status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of a table (with --watch: one document per line).
    #[arg(long)]
    pub json: bool,

    /// Redraw the status every --interval until Ctrl-C.
    #[command(flatten)]
    pub watch: WatchArgs,

    /// The lock name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// `quorumlock top`.
#[derive(Debug, Args)]
pub struct TopArgs {
    /// How many locks to list.
    #[arg(long, value_name = "N", default_value = "20", value_parser = parse_limit)]
    pub limit: usize,

    /// Keys each SCAN call examines (its COUNT): a larger batch scans
    /// faster, a smaller one keeps each call shorter on the nodes.
    #[arg(long, value_name = "N", default_value = "1000", value_parser = parse_batch)]
    pub batch: usize,

    /// Redraw the list every --interval until Ctrl-C (a new scan each time).
    #[command(flatten)]
    pub watch: WatchArgs,
}

/// `--watch` and `--interval`, shared by `status` and `top`.
#[derive(Debug, Args)]
pub struct WatchArgs {
    /// Redraw every --interval until interrupted (Ctrl-C exits with 0).
    #[arg(short, long)]
    pub watch: bool,

    /// Time between two redraws with --watch (at least 100ms).
    #[arg(
        long,
        value_name = "DURATION",
        default_value = "1s",
        requires = "watch",
        value_parser = parse_interval
    )]
    pub interval: Duration,
}

/// `quorumlock unlock`.
#[derive(Debug, Args)]
pub struct UnlockArgs {
    /// Confirm that this is an administrative break of someone else's lock.
    #[arg(long)]
    pub force: bool,

    /// Do not ask for confirmation on stdin.
    #[arg(short, long)]
    pub yes: bool,

    /// The lock name.
    #[arg(value_name = "NAME")]
    pub name: String,
}

/// Parses a duration such as `500ms`, `30s`, `5m` or `1h 30m`.
fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("{e} (expected a duration such as 500ms, 30s, 5m or 1h)"))
}

/// Shortest `--interval`: shorter ones would keep the nodes busy for a view
/// no one can read that fast.
pub const MIN_INTERVAL: Duration = Duration::from_millis(100);

/// Parses a `--interval`: a duration of at least [`MIN_INTERVAL`].
fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < MIN_INTERVAL {
        return Err(format!(
            "{} is too short: the interval must be at least 100ms",
            s.trim()
        ));
    }
    Ok(d)
}

/// Most locks `top --limit` lists.
pub const MAX_LIMIT: usize = 100_000;

/// Parses `top --limit`: 1 to [`MAX_LIMIT`].
fn parse_limit(s: &str) -> Result<usize, String> {
    parse_count(s, MAX_LIMIT)
}

/// Largest `top --batch`: a SCAN COUNT above it would make single calls
/// long on a big node.
pub const MAX_BATCH: usize = 10_000;

/// Parses `top --batch`: 1 to [`MAX_BATCH`].
fn parse_batch(s: &str) -> Result<usize, String> {
    parse_count(s, MAX_BATCH)
}

/// A whole number from 1 to `max`.
fn parse_count(s: &str, max: usize) -> Result<usize, String> {
    match s.trim().parse::<usize>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("expected a whole number from 1 to {max}")),
    }
}

/// Parses `elect --value`: not empty, at most
/// [`MAX_LEADER_VALUE`](quorumlock::MAX_LEADER_VALUE) bytes.
fn parse_value(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Err(
            "the value is empty: give what the others read from `quorumlock leader`, such as the address this process serves on"
                .to_owned(),
        );
    }
    if s.len() > quorumlock::MAX_LEADER_VALUE {
        return Err(format!(
            "{} bytes is too long: the value may have at most {} bytes",
            s.len(),
            quorumlock::MAX_LEADER_VALUE
        ));
    }
    Ok(s.to_owned())
}

/// Parses `majority`, `all` or a number.
fn parse_quorum(s: &str) -> Result<Quorum, String> {
    s.parse::<Quorum>()
        .map_err(|_| "expected `majority`, `all` or a number of nodes (at least 1)".to_owned())
}

/// Parses `quorumlock` or `redisson`.
fn parse_layout(s: &str) -> Result<Layout, String> {
    match s.trim() {
        "quorumlock" => Ok(Layout::Quorumlock),
        "redisson" => Ok(Layout::Redisson),
        _ => Err("expected `quorumlock` (the default) or `redisson`".to_owned()),
    }
}

/// Reports a command-line error: help and version as clap prints them,
/// anything else as one `quorumlock: error:` line (plus the usage line when
/// clap has one). Returns clap's exit status (2 for errors).
pub fn report_parse_error(e: &clap::Error) -> ExitCode {
    let code = u8::try_from(e.exit_code()).unwrap_or(crate::exit::USAGE);
    if matches!(
        e.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        // Help goes to stdout, as clap does; nothing to add.
        let _ = e.print();
        return ExitCode::from(code);
    }
    let rendered = e.render().to_string();
    let mut lines = rendered.lines();
    let mut message = lines
        .next()
        .unwrap_or("invalid command line")
        .trim_start_matches("error: ")
        .trim_end()
        .to_owned();
    // Clap lists missing arguments on indented lines after the first one.
    for line in lines.by_ref() {
        if line.trim().is_empty() {
            break;
        }
        if line.starts_with(char::is_whitespace) && !line.trim_start().starts_with("tip:") {
            message.push(' ');
            message.push_str(line.trim());
        }
    }
    eprintln!("quorumlock: error: {message}");
    if let Some(usage) = rendered.lines().find(|l| l.starts_with("Usage: ")) {
        eprintln!("quorumlock: {}", usage.replacen("Usage: ", "usage: ", 1));
    }
    ExitCode::from(code)
}

#[cfg(test)]
mod tests;
