//! `quorumlock unlock --force`: an administrative break.

use std::io::{BufRead, Write};

use quorumlock::Error;

use crate::cli::{Global, UnlockArgs};
use crate::cluster::{join, Cluster, Need};
use crate::exit::{self, Failure};
use crate::status;

/// Runs `quorumlock unlock`; returns the exit status.
pub async fn run(global: &Global, args: UnlockArgs) -> Result<u8, Failure> {
    if !args.force {
        return Err(Failure::usage(format!(
            "refusing to unlock {name:?} without --force: this is an administrative break that \
             deletes the lock whoever holds it, while the holder may still be running; \
             if that is what you want, run `quorumlock unlock --force {name}`",
            name = args.name
        )));
    }
    let cluster = Cluster::connect(global, None, Need::Any).await?;
    let name = &args.name;
    if !args.yes {
        let report = status::report(&cluster, global.quorum, name).await?;
        let held = report.nodes.iter().filter(|r| r.holder.is_some()).count();
        let who = match &report.holder {
            Some(h) => format!("held by {h} on {held} of {} node(s)", cluster.total),
            None if held == 0 => "not held on any reachable node".to_owned(),
            None => format!("taken on {held} of {} node(s)", cluster.total),
        };
        let prompt = format!(
            "lock {name} is {who}.\nBreaking it lets another owner take it while its holder may still be running.\nType the lock name to confirm: "
        );
        let answer = ask(prompt).await?;
        if answer.as_deref().map(str::trim) != Some(name.as_str()) {
            let why = if answer.is_none() {
                "no answer on stdin (use --yes to skip the question)"
            } else {
                "the name typed did not match"
            };
            return Err(Failure::new(
                exit::FAILURE,
                format!("lock {name} left as it is: {why}"),
            ));
        }
    }
    let result = cluster.manager.force_unlock(name).await;
    let (deleted, mut failures) = match result {
        Ok(deleted) => (deleted, Vec::new()),
        Err(Error::Unavailable {
            failures, granted, ..
        }) => (
            granted,
            failures
                .into_iter()
                .filter(|f| !cluster.is_down(f.node))
                .collect(),
        ),
        Err(e) => return Err(e.into()),
    };
    failures.extend(cluster.down.iter().cloned());
    failures.sort_by_key(|f| f.node);
    exit::print(&if deleted == 0 {
        format!("lock {name} was not held on any reachable node\n")
    } else {
        format!(
            "broke lock {name}: deleted on {deleted} of {} node(s)\n",
            cluster.total
        )
    })?;
    if failures.is_empty() {
        Ok(0)
    } else {
        Err(Failure::new(
            exit::UNAVAILABLE,
            format!(
                "could not reach {} node(s); the lock may survive there until its TTL: {}",
                failures.len(),
                join(&failures)
            ),
        ))
    }
}

/// Prints `prompt` on stderr and reads one line from stdin; `None` at the
/// end of input.
async fn ask(prompt: String) -> Result<Option<String>, Failure> {
    let read = tokio::task::spawn_blocking(move || {
        let mut err = std::io::stderr().lock();
        let _ = err.write_all(prompt.as_bytes());
        let _ = err.flush();
        let mut line = String::new();
        match std::io::stdin().lock().read_line(&mut line) {
            Ok(0) => Ok(None),
            Ok(_) => Ok(Some(line)),
            Err(e) => Err(e),
        }
    });
    match read.await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(Failure::new(
            exit::FAILURE,
            format!("cannot read stdin: {e}"),
        )),
        Err(e) => Err(Failure::new(
            exit::FAILURE,
            format!("cannot read stdin: {e}"),
        )),
    }
}
