//! `quorumlock status`: what every node holds for a lock.

use std::collections::HashMap;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quorumlock::{HolderInfo, NodeFailure, Quorum};
use serde::Serialize;

use crate::cli::{Global, StatusArgs};
use crate::cluster::{human, Cluster, Need};
use crate::direct::DirectNode;
use crate::exit::{self, Failure};
use crate::queue::{self, Queue};
use crate::table::align;
use crate::watch::{self, View};

/// The status of a lock, as printed (`--json` prints exactly this).
#[derive(Debug, Serialize)]
pub struct Report {
    /// The lock name.
    pub name: String,
    /// The quorum policy: `majority`, `all` or a number.
    pub quorum: String,
    /// Grants a holder needs.
    pub required: usize,
    /// The owner holding it on at least `required` nodes, if any.
    pub holder: Option<String>,
    /// Where and since when that holder took it, when its id tells.
    pub holder_info: Option<Holder>,
    /// The holders on the nodes that are not quorumlock's (with `--layout
    /// redisson`, Redisson's `<uuid>:<thread id>`), each once, sorted: the
    /// lock is held by another client, which has no host, pid or token.
    pub foreign_holders: Vec<String>,
    /// One row per node, in `--nodes` order.
    pub nodes: Vec<Row>,
    /// Who waits for it (`status` reads it; `unlock` does not).
    pub queue: Option<Queue>,
}

/// Where the holder runs and since when it holds the lock.
#[derive(Debug, Serialize)]
pub struct Holder {
    /// The holder's host name.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When it took the lock, in milliseconds since the Unix epoch.
    pub since_unix_ms: u64,
}

impl Holder {
    fn of(holder_id: &str) -> Option<Self> {
        let info = HolderInfo::parse(holder_id)?;
        let since = info.since.duration_since(UNIX_EPOCH).ok()?;
        Some(Self {
            host: info.host,
            pid: info.pid,
            since_unix_ms: u64::try_from(since.as_millis()).unwrap_or(u64::MAX),
        })
    }

    /// `host web-3, pid 4242, for 12.3s`.
    fn describe(&self) -> String {
        let since = UNIX_EPOCH + Duration::from_millis(self.since_unix_ms);
        let age = SystemTime::now().duration_since(since).unwrap_or_default();
        format!("host {}, pid {}, for {}", self.host, self.pid, human(age))
    }
}

/// One node's view of the lock.
#[derive(Debug, Serialize)]
pub struct Row {
    /// Index in `--nodes`.
    pub node: usize,
    /// Address, without credentials.
    pub addr: String,
    /// For a member that is a Redis Cluster, the shard that answered (its
    /// master's `host:port`); for a member under Redis Sentinel, the master
    /// that answered; null for a standalone master.
    pub shard: Option<String>,
    /// Whether the node answered.
    pub reachable: bool,
    /// The owner holding the lock there, if any.
    pub holder: Option<String>,
    /// The holder's hold count (0 when free).
    pub hold_count: Option<u32>,
    /// Remaining time of the key in milliseconds, if held with a TTL.
    pub pttl_ms: Option<u64>,
    /// The node's fence counter of the lock's hash slot (shared by the
    /// names of that slot): the last token it issued or was raised to there.
    pub fence: Option<u64>,
    /// The node's `maxmemory-policy` (anything but `noeviction` can evict a
    /// held lock); null when the node would not say or did not answer.
    pub maxmemory_policy: Option<String>,
    /// Why the node did not answer.
    pub error: Option<String>,
}

/// Runs `quorumlock status`; returns the exit status.
pub async fn run(global: &Global, args: StatusArgs) -> Result<u8, Failure> {
    let cluster = Cluster::connect(global, None, Need::Any).await?;
    let mut view = Status {
        direct: cluster.direct(),
        cluster,
        quorum: global.quorum,
        name: args.name,
        json: args.json,
        watching: args.watch.watch,
    };
    if args.watch.watch {
        return watch::run(&mut view, args.watch.interval).await;
    }
    let frame = view.frame().await?;
    exit::print(&frame)?;
    Ok(0)
}

/// The status of one lock, as `status` prints it once or redraws it.
struct Status {
    cluster: Cluster,
    direct: Vec<DirectNode>,
    quorum: Quorum,
    name: String,
    json: bool,
    /// JSON on one line per snapshot, rather than pretty.
    watching: bool,
}

impl View for Status {
    fn title(&self) -> String {
        format!("quorumlock status {}", self.name)
    }

    fn json(&self) -> bool {
        self.json
    }

    async fn frame(&mut self) -> Result<String, Failure> {
        let queue_keys = self
            .cluster
            .layout
            .queue_keys(&self.cluster.key_prefix, &self.name)?;
        let (report, queue) = futures::join!(
            report(&self.cluster, self.quorum, &self.name),
            queue::read(&mut self.direct, &queue_keys)
        );
        let report = Report {
            queue: Some(queue),
            ..report?
        };
        if !self.json {
            return Ok(table(&report));
        }
        let json = if self.watching {
            serde_json::to_string(&report)
        } else {
            serde_json::to_string_pretty(&report)
        };
        json.map(|j| format!("{j}\n"))
            .map_err(|e| Failure::new(exit::FAILURE, format!("cannot encode JSON: {e}")))
    }
}

/// Asks every node about `name`; nodes that do not answer get a row that
/// says why (the failure at the start for a node down since then).
pub async fn report(cluster: &Cluster, quorum: Quorum, name: &str) -> Result<Report, Failure> {
    let status = cluster.manager.status(name).await?;
    let foreign_holders = status
        .foreign_holders()
        .into_iter()
        .map(str::to_owned)
        .collect();
    let mut nodes: Vec<Row> = status
        .nodes
        .into_iter()
        .filter(|n| n.state.is_ok() || !cluster.is_down(n.node))
        .map(|n| {
            let node = n.node;
            let policy = n.maxmemory_policy;
            match n.state {
                Ok(s) => Row {
                    node,
                    addr: n.addr,
                    reachable: true,
                    shard: s.shard,
                    hold_count: Some(s.hold_count),
                    pttl_ms: s
                        .pttl
                        .filter(|_| s.holder.is_some())
                        .map(|p| u64::try_from(p.as_millis()).unwrap_or(u64::MAX)),
                    holder: s.holder,
                    fence: Some(s.fence),
                    maxmemory_policy: policy,
                    error: None,
                },
                Err(f) => Row {
                    maxmemory_policy: policy,
                    ..unreachable_row(f)
                },
            }
        })
        .collect();
    let answered: Vec<usize> = nodes.iter().map(|r| r.node).collect();
    nodes.extend(
        cluster
            .down
            .iter()
            .filter(|f| !answered.contains(&f.node))
            .cloned()
            .map(unreachable_row),
    );
    nodes.sort_by_key(|r| r.node);
    let mut counts: HashMap<&str, usize> = HashMap::new();
    for holder in nodes.iter().filter_map(|r| r.holder.as_deref()) {
        *counts.entry(holder).or_default() += 1;
    }
    let holder = counts
        .into_iter()
        .find(|(_, c)| *c >= cluster.required)
        .map(|(h, _)| h.to_owned());
    Ok(Report {
        name: name.to_owned(),
        quorum: quorum_name(quorum),
        required: cluster.required,
        holder_info: holder.as_deref().and_then(Holder::of),
        holder,
        foreign_holders,
        nodes,
        queue: None,
    })
}

fn unreachable_row(f: NodeFailure) -> Row {
    let error = if f.message.is_empty() {
        f.kind.to_string()
    } else {
        format!("{}: {}", f.kind, f.message)
    };
    Row {
        node: f.node,
        addr: f.addr,
        shard: None,
        reachable: false,
        holder: None,
        hold_count: None,
        pttl_ms: None,
        fence: None,
        maxmemory_policy: None,
        error: Some(error),
    }
}

fn quorum_name(quorum: Quorum) -> String {
    match quorum {
        Quorum::Majority => "majority".to_owned(),
        Quorum::All => "all".to_owned(),
        Quorum::AtLeast(k) => k.to_string(),
        other => format!("{other:?}").to_lowercase(),
    }
}

/// The report as a summary line and an aligned table.
pub fn table(report: &Report) -> String {
    let total = report.nodes.len();
    let reachable = report.nodes.iter().filter(|r| r.reachable).count();
    let held = report.nodes.iter().filter(|r| r.holder.is_some()).count();
    let state = match &report.holder {
        Some(h) => match &report.holder_info {
            Some(info) => format!(
                "held by {h} ({}) on {held} of {total} node(s)",
                info.describe()
            ),
            None if report.foreign_holders.contains(h) => {
                format!("held by {h} (another client, not quorumlock) on {held} of {total} node(s)")
            }
            None => format!("held by {h} on {held} of {total} node(s)"),
        },
        None if held == 0 => "free".to_owned(),
        None => format!("not held by any owner on a quorum (taken on {held} of {total} node(s))"),
    };
    let mut out = format!(
        "lock {}: {state}; quorum {} needs {} of {total}, {reachable} reachable\n",
        report.name, report.quorum, report.required
    );
    let dash = || "-".to_owned();
    // A SHARD column only when a cluster member answered: the shard that
    // serves the lock's slot there.
    let shards = report.nodes.iter().any(|r| r.shard.is_some());
    let mut rows = vec![vec![
        "NODE".to_owned(),
        "ADDRESS".to_owned(),
        "REACHABLE".to_owned(),
        "HOLDER".to_owned(),
        "HOLDS".to_owned(),
        "PTTL".to_owned(),
        "FENCE".to_owned(),
        "POLICY".to_owned(),
    ]];
    if shards {
        rows[0].insert(2, "SHARD".to_owned());
    }
    for r in &report.nodes {
        let mut row = vec![
            r.node.to_string(),
            r.addr.clone(),
            if r.reachable { "yes" } else { "no" }.to_owned(),
            r.holder.clone().unwrap_or_else(dash),
            r.hold_count.map_or_else(dash, |c| c.to_string()),
            match (r.holder.is_some(), r.pttl_ms) {
                (true, Some(ms)) => human(std::time::Duration::from_millis(ms)),
                (true, None) => "no ttl".to_owned(),
                (false, _) => dash(),
            },
            r.fence.map_or_else(dash, |f| f.to_string()),
            r.maxmemory_policy.clone().unwrap_or_else(dash),
        ];
        if shards {
            row.insert(2, r.shard.clone().unwrap_or_else(dash));
        }
        rows.push(row);
    }
    out.push_str(&align(&rows));
    if !report.foreign_holders.is_empty() {
        out.push_str(&format!(
            "held by another client (not quorumlock; no host, pid or fencing token): {}\n",
            report.foreign_holders.join(", ")
        ));
    }
    if let Some(queue) = &report.queue {
        out.push_str(&queue.lines(total));
    }
    for r in report.nodes.iter().filter(|r| !r.reachable) {
        if let Some(e) = &r.error {
            out.push_str(&format!("node {} ({}): {e}\n", r.node, r.addr));
        }
    }
    for r in &report.nodes {
        if let Some(p) = r.maxmemory_policy.as_deref().filter(|p| *p != "noeviction") {
            out.push_str(&format!(
                "node {} ({}): maxmemory-policy {p} can evict a held lock; use noeviction\n",
                r.node, r.addr
            ));
        }
    }
    out
}
