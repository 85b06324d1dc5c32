//! Taking what `exec` and `elect` run their command under: the nodes with
//! a quorum reachable, then the lock or the leadership, the wait shown on
//! stderr, given up after `--wait` or on a signal.

use std::future::Future;
use std::time::Duration;

use quorumlock::Error;

use crate::child::Subject;
use crate::cli::{Global, RunArgs};
use crate::cluster::{human, join, Cluster, Need};
use crate::exit::{self, warn, Failure};
use crate::progress::Progress;
use crate::signals::Signals;

/// Connects to the nodes with the lease of `--lease`, a quorum of them
/// reachable; warns about the nodes that are down and a quorum that does
/// not exclude.
pub async fn connect(global: &Global, run: &RunArgs) -> Result<Cluster, Failure> {
    let cluster = Cluster::connect(global, run.lease, Need::Quorum).await?;
    if let Some(down) = cluster.down_summary() {
        warn(down);
    }
    if !global.quorum.is_exclusive(cluster.total) {
        warn(format!(
            "a quorum of {} out of {} node(s) does not guarantee mutual exclusion",
            cluster.required, cluster.total
        ));
    }
    Ok(cluster)
}

/// Waits for `taking` (the acquisition of `subject`'s lock, by itself or
/// for a campaign), showing the wait; a signal cancels it. Not obtained
/// within `--wait`: exit status 75, silently with `--quiet`.
pub async fn obtain<T>(
    cluster: &Cluster,
    subject: Subject<'_>,
    run: &RunArgs,
    signals: &mut Signals,
    taking: impl Future<Output = Result<T, Error>>,
) -> Result<T, Failure> {
    let what = subject.describe();
    let progress = Progress::start(
        cluster.manager.clone(),
        subject.lock().to_owned(),
        what.clone(),
        cluster.total,
    );
    let result = tokio::select! {
        r = taking => Ok(r),
        s = signals.recv() => Err(s),
    };
    progress.stop().await;
    match result {
        Ok(Ok(taken)) => Ok(taken),
        Ok(Err(e)) => {
            let failure = not_obtained(cluster, &what, run.wait, e);
            if failure.code == exit::NOT_OBTAINED && run.quiet {
                return Err(Failure::silent(exit::NOT_OBTAINED));
            }
            Err(failure)
        }
        Err(sig) => {
            // The dropped acquisition rolls its grants back in the background.
            cluster.settle().await;
            Err(Failure::new(
                exit::signaled(sig as i32),
                format!("interrupted by {sig} while waiting for {what}"),
            ))
        }
    }
}

/// The one-line reason `what` (`lock NAME`) was not obtained.
fn not_obtained(cluster: &Cluster, what: &str, wait: Option<Duration>, e: Error) -> Failure {
    let within = wait.map_or_else(String::new, |w| format!(" within {}", human(w)));
    match e {
        Error::Contended {
            taken,
            min_pttl,
            failures,
            required,
            granted,
            ..
        } => {
            let nodes = taken
                .iter()
                .map(|t| format!("#{} {}", t.node, t.addr))
                .collect::<Vec<_>>()
                .join(", ");
            let pttl = min_pttl.map_or_else(|| "none".to_owned(), human);
            let mut message = format!(
                "{what} not obtained{within}: held by another owner, smallest PTTL {pttl}, taken on {nodes}; needed {required} of {} node(s), got {granted}",
                cluster.total,
            );
            if !failures.is_empty() {
                message.push_str(&format!("; unreachable: {}", join(&failures)));
            }
            Failure::new(exit::NOT_OBTAINED, message)
        }
        Error::Unavailable {
            failures,
            required,
            granted,
            ..
        } => Failure::new(
            exit::UNAVAILABLE,
            format!(
                "{what} not obtained{within}: too few nodes answered (needed {required}, got {granted}): {}",
                join(&failures)
            ),
        ),
        e @ Error::ValidityExhausted { .. } => {
            let mut f = Failure::from(e);
            f.message = format!("{what} not obtained{within}: {}", f.message);
            f
        }
        e => e.into(),
    }
}
