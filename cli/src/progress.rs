//! Progress on stderr: what `exec` and `elect` show while they wait for a
//! lock or a leadership (a spinner on a terminal, an occasional plain line
//! otherwise), and the bar of `top`'s scan (on a terminal only).

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
    /// Starts showing the wait for lock `name` after a second, as the
    /// wait for `what` (`lock NAME`, `leadership of election NAME`).
    pub fn start(manager: LockManager, name: String, what: String, total: usize) -> Self {
        let (stop, stopped) = oneshot::channel();
        let task = tokio::spawn(show(manager, name, what, total, stopped));
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
    what: String,
    total: usize,
    mut stopped: oneshot::Receiver<()>,
) {
    let started = Instant::now();
    tokio::select! {
        _ = tokio::time::sleep(QUIET_START) => {}
        _ = &mut stopped => return,
    }
    let spinner = on_terminal(ProgressBar::new_spinner(), "{spinner} {msg}");
    let mut last_line: Option<Instant> = None;
    loop {
        let holder = tokio::select! {
            s = manager.status(&name) => s.map_or_else(|e| e.to_string(), |s| describe(&s, total)),
            _ = &mut stopped => break,
        };
        let waited = human(started.elapsed());
        match &spinner {
            Some(bar) => bar.set_message(format!("waiting for {what} ({holder}), {waited} so far")),
            None => {
                if last_line.is_none_or(|t| t.elapsed() >= PLAIN_EVERY) {
                    eprintln!("quorumlock: waiting for {what} ({holder}), {waited} so far");
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

/// `bar` with the style of `template`, ticking, if stderr is a terminal.
fn on_terminal(bar: ProgressBar, template: &str) -> Option<ProgressBar> {
    if !std::io::stderr().is_terminal() {
        return None;
    }
    if let Ok(style) = ProgressStyle::with_template(template) {
        bar.set_style(style);
    }
    bar.enable_steady_tick(Duration::from_millis(100));
    Some(bar)
}

/// Steps of the scan bar.
const SCAN_STEPS: u64 = 1_000;

/// The bar of a scan over several nodes: how far each node's keyspace has
/// been walked, and how many locks were found so far.
pub struct ScanBar {
    bar: Option<ProgressBar>,
    done: Vec<f64>,
}

impl ScanBar {
    /// A bar for a scan of `nodes` nodes, shown if `show` and stderr is a
    /// terminal.
    pub fn start(nodes: usize, show: bool) -> Self {
        let template = "{spinner} scanning [{bar:30}] {percent:>3}% {msg}";
        Self {
            bar: show
                .then(|| on_terminal(ProgressBar::new(SCAN_STEPS), template))
                .flatten(),
            done: vec![0.0; nodes],
        }
    }

    /// Node `node` has walked `fraction` of its keyspace; `found` locks so
    /// far over every node.
    pub fn advance(&mut self, node: usize, fraction: f64, found: usize) {
        if let Some(d) = self.done.get_mut(node) {
            // A rehash may move the cursor back a little: never go back.
            *d = d.max(fraction.clamp(0.0, 1.0));
        }
        if let Some(bar) = &self.bar {
            #[allow(clippy::cast_precision_loss)]
            let nodes = self.done.len().max(1) as f64;
            let part = self.done.iter().sum::<f64>() / nodes;
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            bar.set_position((part * 1_000.0) as u64);
            bar.set_message(format!("{found} lock(s) found"));
        }
    }

    /// Clears the bar.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

/// How far a SCAN whose next cursor is `cursor` has walked the node's
/// keyspace: Redis visits the buckets of its table in the order of their
/// bits reversed, so the reversed cursor, over 2^64, is the part visited
/// (0 when done: the cursor is back at 0).
pub fn scanned(cursor: u64) -> f64 {
    #[allow(clippy::cast_precision_loss)]
    let visited = cursor.reverse_bits() as f64;
    visited / 2f64.powi(64)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scan_cursor_tells_the_part_walked() {
        // A table of 8 buckets: after bucket 0 comes 4 (100b reversed is
        // 001b, the second of 8), after 6 (011b) comes 1 (100b).
        assert!(scanned(0).abs() < f64::EPSILON);
        assert!((scanned(4) - 1.0 / 8.0).abs() < 1e-12);
        assert!((scanned(1) - 4.0 / 8.0).abs() < 1e-12);
        assert!((scanned(7) - 7.0 / 8.0).abs() < 1e-12);
    }
}
