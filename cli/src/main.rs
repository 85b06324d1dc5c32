//! `quorumlock`: run a command under a distributed lock held on N independent
//! Redis masters, inspect a lock (once or redrawn), list the busiest locks,
//! or break one; run a command while this process leads an election, and
//! show an election's leader (once or on each change).
//!
//! See `quorumlock --help` for the commands, examples and exit statuses.

mod child;
mod cli;
mod cluster;
mod direct;
mod elect;
mod exec;
mod exit;
mod help;
mod leader;
mod members;
mod obtain;
mod progress;
mod queue;
mod signals;
mod status;
mod table;
mod top;
mod unlock;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};
use crate::exit::Failure;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return cli::report_parse_error(&e),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            return Failure::new(
                exit::FAILURE,
                format!("cannot start the async runtime: {e}"),
            )
            .report()
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Exec(args) => exec::run(&cli.global, args).await,
            Command::Status(args) => status::run(&cli.global, args).await,
            Command::Top(args) => top::run(&cli.global, args).await,
            Command::Unlock(args) => unlock::run(&cli.global, args).await,
            Command::Elect(args) => elect::run(&cli.global, args).await,
            Command::Leader(args) => leader::run(&cli.global, args).await,
        }
    });
    // Background work still queued by the library (rollbacks of cancelled
    // acquisitions, releases to slow nodes) gets no further chance after
    // this point; every command settles what matters before returning.
    runtime.shutdown_background();
    match result {
        Ok(code) => ExitCode::from(code),
        Err(failure) => failure.report(),
    }
}
