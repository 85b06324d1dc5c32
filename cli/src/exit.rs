//! Exit statuses and the one-line failure report.

use std::io::{ErrorKind, Write};
use std::process::ExitCode;

use quorumlock::Error;

/// Any other failure (a declined confirmation, a key of the wrong type).
pub const FAILURE: u8 = 1;
/// Usage or configuration error: a bad option, duration, URL, quorum or lock
/// name, or no nodes given. Also what clap uses for usage errors.
pub const USAGE: u8 = 2;
/// Not enough nodes could be reached for the quorum (`EX_UNAVAILABLE`).
pub const UNAVAILABLE: u8 = 69;
/// The lock (`elect`: the leadership) was not obtained within `--wait`:
/// another owner holds it (`EX_TEMPFAIL`: try again later).
pub const NOT_OBTAINED: u8 = 75;
/// The lock (`elect`: the leadership) was lost while the command ran; the
/// command was terminated.
pub const LOST: u8 = 76;
/// The command was found but could not be started.
pub const CANNOT_EXECUTE: u8 = 126;
/// The command was not found.
pub const NOT_FOUND: u8 = 127;

/// The exit status of a process killed by `signal`, as shells report it.
pub fn signaled(signal: i32) -> u8 {
    u8::try_from(128 + signal).unwrap_or(u8::MAX)
}

/// A failure of quorumlock itself: a one-line message and an exit status.
#[derive(Debug)]
pub struct Failure {
    /// The exit status.
    pub code: u8,
    /// What went wrong, on one line.
    pub message: String,
}

impl Failure {
    /// A failure with `code` and `message`.
    pub fn new(code: u8, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }

    /// A usage or configuration error (exit status 2).
    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(USAGE, message)
    }

    /// A failure whose status says it all (`--quiet`): no message.
    pub fn silent(code: u8) -> Self {
        Self::new(code, String::new())
    }

    /// Prints `quorumlock: error: MESSAGE` on stderr (nothing for a silent
    /// failure) and returns the status.
    pub fn report(&self) -> ExitCode {
        if !self.message.is_empty() {
            eprintln!("quorumlock: error: {}", one_line(&self.message));
        }
        ExitCode::from(self.code)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Self {
        let code = if e.is_invalid_input() {
            USAGE
        } else if e.is_unavailable() {
            UNAVAILABLE
        } else if e.is_contended() || e.is_validity_exhausted() {
            NOT_OBTAINED
        } else if e.is_lost() || e.is_not_held() || e.is_max_hold_reached() {
            LOST
        } else {
            FAILURE
        };
        Self::new(code, e.to_string())
    }
}

/// Folds a message onto one line.
pub fn one_line(message: &str) -> String {
    message
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Prints `quorumlock: warning: MESSAGE` on stderr.
pub fn warn(message: impl AsRef<str>) {
    eprintln!("quorumlock: warning: {}", one_line(message.as_ref()));
}

/// Writes `text` to stdout; a reader that went away (`| head`) is no error.
pub fn print(text: &str) -> Result<(), Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() != ErrorKind::BrokenPipe => Err(Failure::new(
            FAILURE,
            format!("cannot write to stdout: {e}"),
        )),
        _ => Ok(()),
    }
}
