//! What `exec` shows while it waits for a lock: a spinner on a terminal,
//! an occasional plain line otherwise.

use std::io::IsTerminal;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use quorumlock::{LockManager, LockStatus};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::cluster::human;

/// Nothing is shown for waits shorter than this.
const QUIET_START: Duration = Duration::from_secs(1);
/// How often the holder is looked up again.
const REFRESH: Duration = Duration::from_secs(1);
/// At most one plain line this often when stderr is not a terminal.
const PLAIN_EVERY: Duration = Duration::from_secs(5);

/// The waiting display, running in the background until [`Progress::stop`].
pub struct Progress {
    stop: oneshot::Sender<()>,
    task: JoinHandle<()>,
}

impl Progress {
    /// Starts showing the wait for `name` after a second.
    pub fn start(manager: LockManager, name: String, total: usize) -> Self {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(show(manager, name, total, stopped));
        Self { stop, task }
    }

    /// Stops it and clears the spinner.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.task.await;
    }
}

async fn show(
    manager: LockManager,
    name: String,
    total: usize,
    mut stopped: oneshot::Receiver<()>,
) {
    let started = Instant::now();
    tokio::select! {
        _ = tokio::time::sleep(QUIET_START) => {}
        _ = &mut stopped => return,
    }
    let spinner = std::io::stderr().is_terminal().then(|| {
        let bar = ProgressBar::new_spinner();
        if let Ok(style) = ProgressStyle::with_template("{spinner} {msg}") {
            bar.set_style(style);
        }
        bar.enable_steady_tick(Duration::from_millis(100));
        bar
    });
    let mut last_line: Option<Instant> = None;
    loop {
        let holder = tokio::select! {
            s = manager.status(&name) => s.map_or_else(|e| e.to_string(), |s| describe(&s, total)),
            _ = &mut stopped => break,
        };
        let waited = human(started.elapsed());
        match &spinner {
            Some(bar) => bar.set_message(format!(
                "waiting for lock {name} ({holder}), {waited} so far"
            )),
            None => {
                if last_line.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
                    eprintln!("quorumlock: waiting for lock {name} ({holder}), {waited} so far");
                    last_line = Some(Instant::now());
                }
            }
        }
        tokio::select! {
            _ = tokio::time::sleep(REFRESH) => {}
            _ = &mut stopped => break,
        }
    }
    if let Some(bar) = spinner {
        bar.finish_and_clear();
    }
}

/// Who holds the lock and for how long at most, in a few words.
fn describe(status: &LockStatus, total: usize) -> String {
    let held: Vec<_> = status
        .nodes
        .iter()
        .filter_map(|n| n.state.as_ref().ok())
        .filter(|s| s.holder.is_some())
        .collect();
    if held.is_empty() {
        return "free now, retrying".to_owned();
    }
    let pttl = held
        .iter()
        .filter_map(|s| s.pttl)
        .min()
        .map_or_else(|| "no TTL".to_owned(), |p| format!("PTTL {}", human(p)));
    match status.holder() {
        Some(holder) => format!("held by {holder}, {pttl}"),
        None => format!("taken on {} of {total} node(s), {pttl}", held.len()),
    }
}
