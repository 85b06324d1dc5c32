//! `quorumlock elect`: wait for this process's turn to lead an election,
//! then run a command while it leads.
//!
//! The campaign is the library's (`Election::campaign`, or
//! `Election::try_campaign` with `--wait`): a fair acquisition of the lock
//! `election:<name>` followed by a quorum write of `--value`; the command
//! then runs as under `exec` (the same `child` module), the leadership
//! standing for the lock.

use crate::child::{self, Subject};
use crate::cli::{ElectArgs, Global};
use crate::exit::Failure;
use crate::obtain;
use crate::signals::Signals;

/// Runs `quorumlock elect`; returns the exit status.
pub async fn run(global: &Global, args: ElectArgs) -> Result<u8, Failure> {
    let mut signals = Signals::new()?;
    let cluster = obtain::connect(global, &args.run).await?;
    let election = cluster.manager.election(args.name.as_str());
    let lock = election.lock_name();
    let subject = Subject::Leadership {
        election: &args.name,
        lock: &lock,
        value: &args.value,
    };
    let taking = async {
        match args.run.wait {
            Some(wait) => election.try_campaign(args.value.as_str(), wait).await,
            None => election.campaign(args.value.as_str()).await,
        }
    };
    let leadership = obtain::obtain(&cluster, subject, &args.run, &mut signals, taking).await?;
    child::run_under(leadership, subject, &args.run, &mut signals, &cluster).await
}
