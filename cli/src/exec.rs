//! `quorumlock exec`: run a command while holding a lock.

use crate::child::{self, Subject};
use crate::cli::{ExecArgs, Global};
use crate::exit::Failure;
use crate::obtain;
use crate::signals::Signals;

/// Runs `quorumlock exec`; returns the exit status.
pub async fn run(global: &Global, args: ExecArgs) -> Result<u8, Failure> {
    let mut signals = Signals::new()?;
    let cluster = obtain::connect(global, &args.run).await?;
    let owner = cluster.manager.new_owner();
    let request = cluster.manager.request(args.name.as_str()).owner(&owner);
    let request = match args.run.wait {
        Some(wait) => request.wait(wait),
        None => request.wait_forever(),
    };
    let request = if args.fair { request.fair() } else { request };
    let subject = Subject::Lock(&args.name);
    let taking = request.acquire();
    let guard = obtain::obtain(&cluster, subject, &args.run, &mut signals, taking).await?;
    child::run_under(guard, subject, &args.run, &mut signals, &cluster).await
}
