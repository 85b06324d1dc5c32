//! Hand-built histories for the liveness invariant: the exact shapes of
//! the defects it was written for, in the simulator (three `SimNode`
//! masters, the real managers, release messages through the fakes' feed,
//! a dead waiter as a process whose links are cut for good), checked by
//! the same monitor as the random runs.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::checker::{Ev, Invariant, Log};
use super::liveness::{Bound, Wants, Watch};
use super::net::{Cut, LinkCtl, NodeCtl};
use super::node::{SimNode, Spin};
use crate::node::NodeOps;
use crate::{Backoff, Layout, LockManager, Quorum};

const LEASE: Duration = Duration::from_secs(8);
const QUEUE_TIMEOUT: Duration = Duration::from_secs(5);
const NODE_TIMEOUT: Duration = Duration::from_millis(50);
const BACKOFF_MAX: Duration = Duration::from_millis(100);
/// How long a scenario runs: past every lease it involves.
const RUN: Duration = Duration::from_secs(14);

/// Which history to build.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Scenario {
    /// Defect 1: manager M holds the lock (H0); a fair waiter of manager D
    /// queues, then D dies; W1 (plain, M) misses and takes a place; P2
    /// (plain, M) arrives 300 ms later and defers to W1; H0 releases (the
    /// message names the dead waiter); W1's refresh takes the lock and
    /// releases at once (again naming the dead waiter). P2 must then be
    /// granted within the bound.
    DeferredBehindDead,
    /// Defect 2: a dead fair waiter (of D) heads the queue of a free lock;
    /// F (fair, M) queues behind it; P (plain, M) asks with `lock()`. P
    /// must be granted within the bound (a plain request is not held back
    /// by a fair waiter that cannot take its turn).
    PlainBehindFair,
}

/// One process of a scenario.
struct Proc {
    manager: LockManager,
    link: Arc<LinkCtl>,
}

/// Runs `scenario` on a fresh paused runtime; returns its violations and
/// its log.
pub(crate) fn run(scenario: Scenario) -> (Vec<(Invariant, String)>, String) {
    let _rng = crate::rng::seed(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a current-thread runtime");
    let out = rt.block_on(world(scenario));
    drop(rt);
    crate::hooks::pause::clear();
    out
}

async fn world(scenario: Scenario) -> (Vec<(Invariant, String)>, String) {
    let log = Log::new();
    let start = Instant::now();
    let spin = Spin::new(log.clone());
    let nodes: Vec<Arc<NodeCtl>> = (0..3).map(NodeCtl::new).collect();
    let mut procs = Vec::new();
    let mut links = Vec::new();
    // 0: M, 1: D (dies), 2: O (another manager).
    for _ in 0..3 {
        let process = LinkCtl::new();
        let mine: Vec<Arc<LinkCtl>> = nodes.iter().map(|_| LinkCtl::new()).collect();
        let ops: Vec<Arc<dyn NodeOps>> = nodes
            .iter()
            .zip(&mine)
            .map(|(n, l)| {
                Arc::new(SimNode {
                    trace: None,
                    node: Arc::clone(n),
                    link: Arc::clone(l),
                    process: Arc::clone(&process),
                    timeout: NODE_TIMEOUT,
                    spin: Arc::clone(&spin),
                }) as Arc<dyn NodeOps>
            })
            .collect();
        let manager = LockManager::builder()
            .quorum(Quorum::Majority)
            .lease(LEASE)
            .node_timeout(NODE_TIMEOUT)
            .queue_timeout(QUEUE_TIMEOUT)
            .connect_timeout(2 * NODE_TIMEOUT)
            .backoff(Backoff::new(Duration::from_millis(5), BACKOFF_MAX).expect("valid backoff"))
            .build_with(ops)
            .expect("a valid simulated cluster");
        procs.push(Arc::new(Proc {
            manager,
            link: process,
        }));
        links.push(mine);
    }
    let wants: Arc<Wants> = Arc::default();
    let watch = Watch {
        log: log.clone(),
        wants: Arc::clone(&wants),
        nodes: nodes.clone(),
        links,
        procs: procs.iter().map(|p| Arc::clone(&p.link)).collect(),
        keys: vec![super::params::lock_key(Layout::Quorumlock, "x")],
        prefixes: Vec::new(),
        bound: Bound::new(QUEUE_TIMEOUT, NODE_TIMEOUT, BACKOFF_MAX),
        member: None,
    };
    let monitor = tokio::spawn(watch.run(start + RUN));
    let at = |ms: u64| tokio::time::sleep_until(start + Duration::from_millis(ms));
    let note = |what: String| log.push(super::checker::WORLD, Ev::Fault(what));
    // A waiter of process `p` (task `t`) that takes the lock, notes when,
    // and releases it at once.
    let waiter = |p: usize, t: usize, fair: bool| {
        let (proc, wants, log) = (Arc::clone(&procs[p]), Arc::clone(&wants), log.clone());
        tokio::spawn(async move {
            let want = wants.enter((p, t), 0, fair, true);
            let req = proc.manager.request("x");
            let r = if fair { req.fair() } else { req }.acquire().await;
            drop(want);
            let who = super::checker::Who(p, t);
            log.push(who, Ev::Fault(format!("granted: {:?}", r.is_ok())));
            if let Ok(g) = r {
                let _ = g.release().await;
            }
        })
    };
    // The dead waiter: a fair request of D, then D's links cut for good.
    let dies = |log: &Log| {
        let d = Arc::clone(&procs[1]);
        tokio::spawn(async move {
            let _ = d.manager.request("x").fair().acquire().await;
        });
        let d = Arc::clone(&procs[1]);
        let log = log.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(40)).await;
            d.link.set(Cut::Requests);
            log.push(super::checker::WORLD, Ev::Fault("D dies".into()));
        }
    };
    let mut tasks = Vec::new();
    match scenario {
        Scenario::DeferredBehindDead => {
            let h0 = procs[0].manager.lock("x").await.expect("H0 on a free lock");
            note("H0 (M) holds".into());
            at(10).await;
            dies(&log).await;
            at(100).await;
            tasks.push(waiter(0, 1, false));
            at(400).await;
            tasks.push(waiter(0, 2, false));
            at(600).await;
            let _ = h0.release().await;
            note("H0 released".into());
        }
        Scenario::PlainBehindFair => {
            let o = procs[2].manager.lock("x").await.expect("O on a free lock");
            at(10).await;
            dies(&log).await;
            at(100).await;
            let _ = o.release().await;
            note("O released: the lock is free, the dead waiter heads the queue".into());
            at(200).await;
            tasks.push(waiter(0, 1, true));
            at(500).await;
            tasks.push(waiter(0, 2, false));
        }
    }
    let _ = monitor.await;
    for t in tasks {
        t.abort();
    }
    let entries = log.entries();
    let violations = entries
        .iter()
        .filter_map(|e| match &e.ev {
            Ev::Violation(i, what) => Some((*i, what.clone())),
            _ => None,
        })
        .collect();
    (violations, super::checker::render(&entries))
}
