//! The signals a command catches instead of dying of them: `exec` forwards
//! them to its child, a watch ends on them.

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};

use crate::exit::{self, Failure};

/// The signals the CLI catches: SIGINT, SIGTERM, SIGHUP, SIGQUIT.
pub struct Signals {
    int: tokio::signal::unix::Signal,
    term: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
    quit: tokio::signal::unix::Signal,
}

impl Signals {
    pub fn new() -> Result<Self, Failure> {
        let listen = |kind: SignalKind| {
            signal(kind)
                .map_err(|e| Failure::new(exit::FAILURE, format!("cannot listen for signals: {e}")))
        };
        Ok(Self {
            int: listen(SignalKind::interrupt())?,
            term: listen(SignalKind::terminate())?,
            hup: listen(SignalKind::hangup())?,
            quit: listen(SignalKind::quit())?,
        })
    }

    /// The next signal received.
    ///
    /// Cancel safe: a signal that arrives meanwhile is kept for the next call.
    pub async fn recv(&mut self) -> Signal {
        tokio::select! {
            _ = self.int.recv() => Signal::SIGINT,
            _ = self.term.recv() => Signal::SIGTERM,
            _ = self.hup.recv() => Signal::SIGHUP,
            _ = self.quit.recv() => Signal::SIGQUIT,
        }
    }
}
