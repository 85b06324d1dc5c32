//! `quorumlock leader`: who leads an election, by one quorum read, or
//! redrawn on every change (`--watch`) from the library's shared watch of
//! the election (`Election::observe`).

use std::time::UNIX_EPOCH;

use quorumlock::{Election, Leader};
use serde::Serialize;
use tokio::sync::watch::Receiver;

use crate::cli::{Global, LeaderArgs};
use crate::cluster::{Cluster, Need};
use crate::exit::{self, Failure};
use crate::watch::{self, View};

/// What `leader` prints (`--json` prints exactly this).
#[derive(Debug, Serialize)]
pub struct Report {
    /// The election's name.
    pub election: String,
    /// Its leader, as a quorum of nodes agree on it; null when nobody leads.
    pub leader: Option<Shown>,
}

/// A leader, as printed.
#[derive(Debug, Serialize)]
pub struct Shown {
    /// What it proclaimed (`elect --value`).
    pub value: String,
    /// Its term: the fencing token of its hold of `election:<name>`.
    pub term: u64,
    /// How many values it proclaimed in this term (1: its campaign's).
    pub revision: u64,
    /// The holder id of its hold.
    pub holder_id: String,
    /// The host it runs on, when its holder id tells.
    pub host: Option<String>,
    /// Its process id, when its holder id tells.
    pub pid: Option<u32>,
    /// When it won the term, in milliseconds since the Unix epoch (its
    /// own clock), when its holder id tells.
    pub since_unix_ms: Option<u64>,
}

impl Shown {
    fn of(leader: &Leader) -> Self {
        Self {
            value: leader.value().to_owned(),
            term: leader.term(),
            revision: leader.revision(),
            holder_id: leader.holder_id().to_owned(),
            host: leader.host().map(str::to_owned),
            pid: leader.pid(),
            since_unix_ms: leader
                .since()
                .and_then(|s| s.duration_since(UNIX_EPOCH).ok())
                .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX)),
        }
    }

    /// `VALUE, term T, revision R, host H, pid P, since TIME`.
    fn describe(&self) -> String {
        let mut line = format!(
            "{}, term {}, revision {}",
            printable(&self.value),
            self.term,
            self.revision
        );
        match (&self.host, self.pid) {
            (Some(host), Some(pid)) => line.push_str(&format!(", host {host}, pid {pid}")),
            _ => line.push_str(&format!(", holder {}", printable(&self.holder_id))),
        }
        if let Some(ms) = self.since_unix_ms {
            let since = UNIX_EPOCH + std::time::Duration::from_millis(ms);
            line.push_str(&format!(
                ", since {}",
                humantime::format_rfc3339_seconds(since)
            ));
        }
        line
    }
}

/// `s` as is, or quoted with escapes when it holds control characters (a
/// value may hold anything, a newline included).
fn printable(s: &str) -> String {
    if s.chars().any(char::is_control) {
        format!("{s:?}")
    } else {
        s.to_owned()
    }
}

/// Runs `quorumlock leader`; returns the exit status.
pub async fn run(global: &Global, args: LeaderArgs) -> Result<u8, Failure> {
    let cluster = Cluster::connect(global, None, Need::Quorum).await?;
    let election = cluster.manager.election(args.name.as_str());
    // Subscribed before the first read, so that no change after it is
    // missed.
    let changes = args.watch.then(|| election.observe());
    let mut view = Leadership {
        election,
        changes,
        json: args.json,
        shown: None,
        latest: None,
    };
    if args.watch {
        return watch::follow(&mut view).await;
    }
    let frame = view.frame().await?;
    exit::print(&frame)?;
    Ok(0)
}

/// The leader of one election, as `leader` prints it once or redraws it.
struct Leadership {
    election: Election,
    /// The shared watch, with `--watch`.
    changes: Option<Receiver<Option<Leader>>>,
    json: bool,
    /// What the last frame showed (none before the first): no leader, or
    /// the (term, revision) of a leader.
    shown: Option<Option<(u64, u64)>>,
    /// The latest (term, revision) shown so far.
    latest: Option<(u64, u64)>,
}

impl Leadership {
    /// The next change to show: a leader of a later (term, revision) than
    /// any shown, or nobody after a leader. After nobody, the latest leader
    /// shown may come again: the first frame's read and the watch's reads
    /// interleave, so that the watch may report nobody from a read older
    /// than the first frame's, then that leader.
    async fn next(
        changes: &mut Receiver<Option<Leader>>,
        shown: Option<(u64, u64)>,
        latest: Option<(u64, u64)>,
    ) -> Result<Option<Leader>, Failure> {
        loop {
            changes.changed().await.map_err(|_| {
                Failure::new(exit::FAILURE, "the watch of the election's leader ended")
            })?;
            let leader = changes.borrow_and_update().clone();
            let version = leader.as_ref().map(|l| (l.term(), l.revision()));
            let show = match (version, shown) {
                (Some(v), Some(_)) => latest.is_none_or(|l| v > l),
                (Some(v), None) => latest.is_none_or(|l| v >= l),
                (None, shown) => shown.is_some(),
            };
            if show {
                return Ok(leader);
            }
        }
    }
}

impl View for Leadership {
    fn title(&self) -> String {
        format!("quorumlock leader {}", self.election.name())
    }

    fn json(&self) -> bool {
        self.json
    }

    async fn frame(&mut self) -> Result<String, Failure> {
        let leader = match (&mut self.changes, self.shown) {
            (Some(changes), Some(shown)) => Self::next(changes, shown, self.latest).await?,
            _ => self.election.leader().await?,
        };
        let version = leader.as_ref().map(|l| (l.term(), l.revision()));
        self.shown = Some(version);
        self.latest = self.latest.max(version);
        let report = Report {
            election: self.election.name().to_owned(),
            leader: leader.as_ref().map(Shown::of),
        };
        if !self.json {
            let state = report.leader.as_ref().map_or_else(
                || "no leader".to_owned(),
                |l| format!("leader {}", l.describe()),
            );
            return Ok(format!("election {}: {state}\n", report.election));
        }
        let json = if self.changes.is_some() {
            serde_json::to_string(&report)
        } else {
            serde_json::to_string_pretty(&report)
        };
        json.map(|j| format!("{j}\n"))
            .map_err(|e| Failure::new(exit::FAILURE, format!("cannot encode JSON: {e}")))
    }
}
