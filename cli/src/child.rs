//! The command `exec` and `elect` run under a hold (a lock, a
//! leadership): started in a process group of its own, given the signals
//! quorumlock receives, stopped with SIGTERM then SIGKILL when the hold is
//! lost, and waited for with the rest of its group.

use std::ffi::OsString;
use std::io::{ErrorKind, IsTerminal};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{kill, killpg, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::Pid;
use quorumlock::{Error, HoldState, Leadership, LockGuard};
use tokio::process::{Child, Command};

use crate::cli::RunArgs;
use crate::cluster::human;
use crate::exit::{self, warn, Failure};
use crate::signals::Signals;

/// What the command runs under: renewed in the background, it may be lost.
pub trait Hold {
    /// Resolves when the hold stops being renewed other than by giving it
    /// back; says why, in a word or two (`lost`, `max hold reached`).
    async fn stopped(&self) -> &'static str;

    /// Until when the hold is valid if not renewed before.
    fn valid_until(&self) -> std::time::Instant;

    /// The hold's fencing token (a leadership's term).
    fn token(&self) -> u64;

    /// Gives the hold back (a release, a resignation).
    async fn give_back(self) -> Result<(), Error>;
}

impl Hold for LockGuard {
    async fn stopped(&self) -> &'static str {
        if self.renewal_stopped().await == HoldState::MaxHoldReached {
            "max hold reached"
        } else {
            "lost"
        }
    }

    fn valid_until(&self) -> std::time::Instant {
        LockGuard::valid_until(self)
    }

    fn token(&self) -> u64 {
        self.fencing_token()
    }

    async fn give_back(self) -> Result<(), Error> {
        self.release().await
    }
}

impl Hold for Leadership {
    async fn stopped(&self) -> &'static str {
        self.lost().await;
        "lost"
    }

    fn valid_until(&self) -> std::time::Instant {
        Leadership::valid_until(self)
    }

    fn token(&self) -> u64 {
        self.term()
    }

    async fn give_back(self) -> Result<(), Error> {
        self.resign().await
    }
}

/// What the command runs under: for messages, the lock to show while
/// waiting, and the command's environment.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    /// `exec`: the lock of this name.
    Lock(&'a str),
    /// `elect`: the leadership of an election.
    Leadership {
        /// The election's name.
        election: &'a str,
        /// Its lock (`election:<name>`).
        lock: &'a str,
        /// The value this candidate proclaims.
        value: &'a str,
    },
}

impl<'a> Subject<'a> {
    /// `lock NAME`, `leadership of election NAME`.
    pub fn describe(self) -> String {
        match self {
            Self::Lock(name) => format!("lock {name}"),
            Self::Leadership { election, .. } => format!("leadership of election {election}"),
        }
    }

    /// The lock taken: the lock itself, or the election's.
    pub fn lock(self) -> &'a str {
        match self {
            Self::Lock(name) | Self::Leadership { lock: name, .. } => name,
        }
    }

    /// What its token is called: `token`, `term`.
    fn token_word(self) -> &'static str {
        match self {
            Self::Lock(_) => "token",
            Self::Leadership { .. } => "term",
        }
    }

    /// `the lock`, `the leadership`.
    fn it(self) -> &'static str {
        match self {
            Self::Lock(_) => "the lock",
            Self::Leadership { .. } => "the leadership",
        }
    }

    /// What giving it back is called: `releasing`, `resigning`.
    fn giving_back(self) -> &'static str {
        match self {
            Self::Lock(_) => "releasing",
            Self::Leadership { .. } => "resigning",
        }
    }

    /// The variables the command gets, the hold's token being `token`:
    /// `QUORUMLOCK_NAME` (the lock) and `QUORUMLOCK_TOKEN`, and for a
    /// leadership `QUORUMLOCK_ELECTION`, `QUORUMLOCK_VALUE` and
    /// `QUORUMLOCK_TERM` (the token).
    fn env(self, token: u64) -> Vec<(&'static str, String)> {
        let mut env = vec![
            ("QUORUMLOCK_NAME", self.lock().to_owned()),
            ("QUORUMLOCK_TOKEN", token.to_string()),
        ];
        if let Self::Leadership {
            election, value, ..
        } = self
        {
            env.push(("QUORUMLOCK_ELECTION", election.to_owned()));
            env.push(("QUORUMLOCK_VALUE", value.to_owned()));
            env.push(("QUORUMLOCK_TERM", token.to_string()));
        }
        env
    }
}

/// Runs the command of `run` while `hold` (of `subject`) is held, gives
/// the hold back, and returns quorumlock's exit status: the command's own,
/// or why not.
pub async fn run_under(
    hold: impl Hold,
    subject: Subject<'_>,
    run: &RunArgs,
    signals: &mut Signals,
    cluster: &crate::cluster::Cluster,
) -> Result<u8, Failure> {
    let token = hold.token();
    let outcome = supervise(&hold, subject, run, signals).await;
    let given_back = hold.give_back().await;
    cluster.settle().await;
    let program = run.command.first().map(program_name).unwrap_or_default();
    match outcome {
        Outcome::NotStarted(failure) => Err(failure),
        Outcome::Lost { how } => Err(Failure::new(
            exit::LOST,
            format!(
                "{} ({} {token}) was lost while {program} ran: renewal could not reach a quorum in time; {how}",
                subject.describe(),
                subject.token_word(),
            ),
        )),
        Outcome::Exited(status) => match given_back {
            Ok(()) => Ok(code_of(status)),
            Err(e @ (Error::Lost { .. } | Error::Expired { .. } | Error::NotHeld { .. })) => {
                Err(Failure::new(
                    exit::LOST,
                    format!(
                        "{program} exited ({}), but {} was not held until the end: {e}",
                        describe_status(status),
                        subject.it(),
                    ),
                ))
            }
            Err(e) => {
                warn(format!(
                    "{} {}: {e}; it expires with its lease",
                    subject.giving_back(),
                    subject.describe(),
                ));
                Ok(code_of(status))
            }
        },
    }
}

/// How the command ended.
enum Outcome {
    /// It exited by itself (or after a forwarded signal).
    Exited(ExitStatus),
    /// The hold was lost and the command was terminated; `how` says how.
    Lost { how: String },
    /// It could not be started.
    NotStarted(Failure),
}

/// Runs the command until it exits or the hold is lost.
///
/// In own-group mode the hold is kept until every process of the command's
/// group is gone, not only the command itself.
async fn supervise(
    hold: &impl Hold,
    subject: Subject<'_>,
    run: &RunArgs,
    signals: &mut Signals,
) -> Outcome {
    let Some((program, rest)) = run.command.split_first() else {
        return Outcome::NotStarted(Failure::usage("no command given"));
    };
    let mut command = Command::new(program);
    command.args(rest).envs(subject.env(hold.token()));
    let own_group = !(run.foreground || in_terminal_foreground());
    if own_group {
        command.process_group(0);
        // Members the command leaves behind are re-parented to us, so that
        // we can reap them and tell when the group is gone.
        become_subreaper();
    }
    die_with_parent(&mut command);
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            let code = if e.kind() == ErrorKind::NotFound {
                exit::NOT_FOUND
            } else {
                exit::CANNOT_EXECUTE
            };
            return Outcome::NotStarted(Failure::new(
                code,
                format!("cannot run {}: {e}", program_name(program)),
            ));
        }
    };
    let target = Target::of(&child, own_group);
    let stopped = hold.stopped();
    tokio::pin!(stopped);
    // The command's status once it exited; in own-group mode we then wait
    // for the rest of its group.
    let mut exited: Option<ExitStatus> = None;
    loop {
        if let Some(status) = exited {
            if !target.group_alive() {
                return Outcome::Exited(status);
            }
        }
        tokio::select! {
            biased;
            status = child.wait(), if exited.is_none() => match status {
                Ok(status) => exited = Some(status),
                // Waiting on our own child cannot fail in practice.
                Err(e) => return Outcome::NotStarted(Failure::new(
                    exit::FAILURE,
                    format!("lost track of {}: {e}", program_name(program)),
                )),
            },
            why = &mut stopped => {
                let grace = capped_grace(hold, run.grace);
                let whom = if exited.is_some() {
                    format!("the processes {} left in its group", program_name(program))
                } else {
                    program_name(program)
                };
                warn(format!(
                    "{} {why}; sending SIGTERM to {whom} (SIGKILL in {}: --grace {} capped at {}'s remaining validity)",
                    subject.describe(),
                    human(grace),
                    human(run.grace),
                    subject.it(),
                ));
                let how = terminate(&mut child, exited.map(Ok), target, grace, signals).await;
                return Outcome::Lost { how };
            }
            sig = signals.recv() => target.forward(sig),
            () = tokio::time::sleep(GROUP_POLL), if exited.is_some() => {}
        }
    }
}

/// How often the group is checked after the command exited.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// The grace after a loss: `--grace`, but no longer than the hold's
/// remaining validity at this moment (zero once it has run out, so that
/// SIGKILL follows SIGTERM at once). Past its validity another owner may
/// hold the lock (another candidate lead); the command must be gone by
/// then.
fn capped_grace(hold: &impl Hold, grace: Duration) -> Duration {
    let left = hold
        .valid_until()
        .saturating_duration_since(std::time::Instant::now());
    grace.min(left)
}

/// SIGTERM, then SIGKILL after `grace`; returns what it took. `status` is
/// the command's status if it has already exited (its group remains).
async fn terminate(
    child: &mut Child,
    mut status: Option<std::io::Result<ExitStatus>>,
    target: Target,
    grace: Duration,
    signals: &mut Signals,
) -> String {
    target.send(Signal::SIGTERM);
    let deadline = tokio::time::Instant::now() + grace;
    // Wait for the command, and in group mode for everything it started.
    loop {
        if status.is_some() && !target.group_alive() {
            break;
        }
        tokio::select! {
            s = child.wait(), if status.is_none() => status = Some(s),
            () = tokio::time::sleep_until(deadline) => break,
            () = tokio::time::sleep(GROUP_POLL), if status.is_some() => {}
            sig = signals.recv() => target.forward(sig),
        }
    }
    let killed = status.is_none() || target.group_alive();
    if killed {
        target.send(Signal::SIGKILL);
    }
    let status = match status {
        Some(status) => status,
        None => child.wait().await,
    };
    if killed {
        // Reap what SIGKILL left, so no zombie outlives us as a member.
        let _ = target.group_alive();
    }
    let exited = status.map_or_else(|e| format!("unknown status: {e}"), describe_status);
    if killed {
        format!(
            "killed with SIGKILL after a grace of {}, {exited}",
            human(grace)
        )
    } else {
        format!("terminated with SIGTERM, {exited}")
    }
}

/// Makes quorumlock the reaper of the orphans its command leaves behind
/// (Linux), so that members of the command's group that outlive it are
/// reaped by us rather than left as zombies that look alive.
#[cfg(target_os = "linux")]
fn become_subreaper() {
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        warn(format!(
            "cannot become the reaper of the command's processes: {e}"
        ));
    }
}

#[cfg(not(target_os = "linux"))]
fn become_subreaper() {}

/// Makes the command die with quorumlock (Linux): if quorumlock is killed,
/// even with SIGKILL, the kernel sends SIGKILL to the command, which must not
/// run on without the lock. This covers the command's process only: the
/// processes it starts do not inherit the setting.
///
/// The kernel sends the signal when the thread that spawned the command
/// exits; `exec` and `elect` spawn from the main thread (the runtime's
/// `block_on`), which lives as long as the process.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn die_with_parent(command: &mut Command) {
    let parent = nix::unistd::getpid();
    // SAFETY: the closure runs in the forked child before exec, where only
    // async-signal-safe functions may be called. It makes two system calls,
    // prctl(PR_SET_PDEATHSIG) and getppid(), through nix's thin wrappers,
    // and builds `io::Error`s from raw errno values; nothing allocates, takes
    // a lock or touches state shared with other threads of the parent.
    unsafe {
        command.pre_exec(move || {
            nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(std::io::Error::from)?;
            // quorumlock may have died between fork and prctl: then nothing
            // would ever send the signal, so give up now.
            if nix::unistd::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(Errno::ESRCH as i32));
            }
            Ok(())
        });
    }
}

#[cfg(not(target_os = "linux"))]
fn die_with_parent(_command: &mut Command) {}

/// Where signals for the command go.
#[derive(Debug, Clone, Copy)]
struct Target {
    pid: Option<Pid>,
    /// The command leads a process group of its own.
    group: bool,
}

impl Target {
    fn of(child: &Child, group: bool) -> Self {
        let pid = child
            .id()
            .and_then(|id| i32::try_from(id).ok())
            .map(Pid::from_raw);
        Self { pid, group }
    }

    /// Sends `sig` to the command's process group, or to the command alone.
    fn send(self, sig: Signal) {
        let Some(pid) = self.pid else { return };
        // In group mode the group outlives its leader while members remain,
        // and its id cannot be reused meanwhile; without a group, the pid
        // is still our unreaped child (the caller has not seen it exit).
        let result = if self.group {
            killpg(pid, sig)
        } else {
            kill(pid, sig)
        };
        if let Err(e) = result {
            if e != Errno::ESRCH {
                warn(format!("cannot send {sig} to the command: {e}"));
            }
        }
    }

    /// Whether any process of the command's group is still running.
    ///
    /// Call it only once the command itself has been waited for: it first
    /// reaps the members of the group that are our children (re-parented
    /// orphans), which would otherwise count as alive while zombies.
    fn group_alive(self) -> bool {
        match self.pid {
            Some(pid) if self.group => {
                let members = Pid::from_raw(-pid.as_raw());
                while let Ok(WaitStatus::Exited(..) | WaitStatus::Signaled(..)) =
                    waitpid(members, Some(WaitPidFlag::WNOHANG))
                {}
                killpg(pid, None).is_ok()
            }
            _ => false,
        }
    }

    /// Passes a signal quorumlock received on to the command.
    fn forward(self, sig: Signal) {
        // Sharing our process group, the command already got a signal that
        // the terminal sent to the foreground group.
        if !self.group && from_terminal(sig) {
            return;
        }
        self.send(sig);
    }
}

/// Whether quorumlock runs interactively: stdin is a terminal and our
/// process group is its foreground group.
fn in_terminal_foreground() -> bool {
    let stdin = std::io::stdin();
    stdin.is_terminal()
        && nix::unistd::tcgetpgrp(&stdin).is_ok_and(|fg| fg == nix::unistd::getpgrp())
}

/// Whether `sig` was most likely sent by the terminal to our whole process
/// group: a terminal signal while we are in the terminal's foreground group.
fn from_terminal(sig: Signal) -> bool {
    if !matches!(sig, Signal::SIGINT | Signal::SIGQUIT | Signal::SIGHUP) {
        return false;
    }
    std::fs::File::open("/dev/tty")
        .ok()
        .and_then(|tty| nix::unistd::tcgetpgrp(&tty).ok())
        .is_some_and(|fg| fg == nix::unistd::getpgrp())
}

/// The exit status a shell would report for `status`.
fn code_of(status: ExitStatus) -> u8 {
    match (status.code(), status.signal()) {
        (Some(code), _) => u8::try_from(code).unwrap_or(exit::FAILURE),
        (None, Some(sig)) => exit::signaled(sig),
        (None, None) => exit::FAILURE,
    }
}

fn describe_status(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => Signal::try_from(sig).map_or_else(
            |_| format!("killed by signal {sig}"),
            |s| format!("killed by {s}"),
        ),
        (None, None) => status.to_string(),
    }
}

fn program_name(program: &OsString) -> String {
    program.to_string_lossy().into_owned()
}
