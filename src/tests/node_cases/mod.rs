//! One table of node-level cases, run through [`NodeOps`] against the
//! in-memory [`FakeNode`] and against a real node ([`RedisNode`] running the
//! Lua scripts on a `redis-server` started for the test). Every step's answer
//! must be the expected one on both, so the fake cannot drift from the
//! scripts unnoticed.
//!
//! Both run on real time (the fake's clock is `tokio::time::Instant`, not
//! paused here). Remaining times are compared within [`SLACK`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::error::NodeErrorKind;
use crate::keys::Keys;
use crate::node::{
    Grant, NodeOps, NodeSpec, Place, RedisNode, Released, RenewBatch, RenewItem, Renewed,
};
use crate::tests::fake::FakeNode;

#[path = "../../../tests/support/local.rs"]
mod local;
mod table;

use self::table::{cases, ms};

/// Key prefix of every case.
const PREFIX: &str = "nc:";
/// A long lease, in milliseconds.
const L: u64 = 10_000;
/// How far two remaining times may differ and still count as the same.
const SLACK: Duration = Duration::from_millis(500);
const H1: &str = "holder-1";
const H2: &str = "holder-2";

/// One call, or an action around the calls.
#[derive(Debug, Clone)]
enum Op {
    Acquire {
        name: &'static str,
        holder: &'static str,
        lease: u64,
        count: u32,
    },
    /// `acquire.lua` in its re-entry mode (never creates a missing key).
    Reenter {
        name: &'static str,
        holder: &'static str,
        lease: u64,
        count: u32,
    },
    /// `acquire_queued.lua`: an acquire by a waiter with a place in the
    /// lock's queue.
    AcquireQueued {
        name: &'static str,
        holder: &'static str,
        lease: u64,
        count: u32,
        waiter: &'static str,
        ticket: u64,
        fair: bool,
        /// Queue timeout in milliseconds.
        timeout: u64,
    },
    /// `leave.lua`.
    Leave {
        name: &'static str,
        waiter: &'static str,
    },
    /// The waiter ids queued for this name, in order.
    Queue(&'static str),
    /// `acquire_all.lua` over several names.
    AcquireAll {
        names: Vec<&'static str>,
        holder: &'static str,
        lease: u64,
        count: u32,
    },
    Release {
        name: &'static str,
        holder: &'static str,
        left: u32,
        lease: u64,
        token: u64,
    },
    /// `(name, holder, count, lease)` per lock.
    Renew(Vec<(&'static str, &'static str, u32, u64)>),
    /// `(name, holder, count, token, lease)` per lock.
    Repair(Vec<(&'static str, &'static str, u32, u64, u64)>),
    RaiseFence(u64),
    ForceRelease(&'static str),
    Status(&'static str),
    /// A string at the lock key of this name.
    ForeignLock(&'static str),
    /// A string at the queue key of this name.
    ForeignQueue(&'static str),
    /// A hash at the node's fence counter.
    ForeignFence,
    Sleep(u64),
    /// The node restarts, keeping its data or empty.
    Restart {
        keep_data: bool,
    },
}

/// What a step answered, as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Granted(u64),
    Taken(Option<Duration>),
    /// A re-entry found no key.
    Missing,
    /// Not granted, with a place in the queue: the wait and the ticket.
    Queued {
        wait: Option<Duration>,
        ticket: u64,
    },
    /// Whether a leave found the waiter queued.
    Left(bool),
    /// The queued waiter ids, in order.
    Queue(Vec<String>),
    Released(Released),
    Renewed(Vec<Renewed>),
    Fence(u64),
    Forced(bool),
    State {
        holder: Option<String>,
        count: u32,
        pttl: Option<Duration>,
        fence: u64,
    },
    Failed(NodeErrorKind),
    /// An action without an answer.
    Done,
}

impl fmt::Display for Out {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms =
            |d: &Option<Duration>| d.map_or("none".to_owned(), |d| format!("{}ms", d.as_millis()));
        match self {
            Self::Taken(p) => write!(f, "Taken(pttl {})", ms(p)),
            Self::Queued { wait, ticket } => {
                write!(f, "Queued(wait {}, ticket {ticket})", ms(wait))
            }
            Self::State {
                holder,
                count,
                pttl,
                fence,
            } => write!(
                f,
                "State(holder {holder:?}, count {count}, pttl {}, fence {fence})",
                ms(pttl)
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Equal, remaining times within [`SLACK`].
fn same(a: &Out, b: &Out) -> bool {
    let near = |x: &Option<Duration>, y: &Option<Duration>| match (x, y) {
        (Some(x), Some(y)) => x.abs_diff(*y) <= SLACK,
        (None, None) => true,
        _ => false,
    };
    match (a, b) {
        (Out::Taken(x), Out::Taken(y)) => near(x, y),
        (Out::Queued { wait: x, ticket: t }, Out::Queued { wait: y, ticket: u }) => {
            t == u && near(x, y)
        }
        (
            Out::State {
                holder: h1,
                count: c1,
                pttl: p1,
                fence: f1,
            },
            Out::State {
                holder: h2,
                count: c2,
                pttl: p2,
                fence: f2,
            },
        ) => h1 == h2 && c1 == c2 && f1 == f2 && near(p1, p2),
        _ => a == b,
    }
}

/// The real server of the test, and what the fake does instead.
enum Ctl {
    Fake(Arc<FakeNode>),
    Real(Arc<local::LocalNodes>),
}

/// One node under test.
struct Side {
    node: Arc<dyn NodeOps>,
    ctl: Ctl,
}

fn keys(name: &str) -> Arc<Keys> {
    Arc::new(Keys::new(PREFIX, name))
}

fn grant(g: Grant) -> Out {
    match g {
        Grant::Granted(t) => Out::Granted(t),
        Grant::Taken(p, _) => Out::Taken(p),
        Grant::Missing => Out::Missing,
    }
}

fn outcome<T>(r: Result<T, crate::error::NodeError>, f: impl FnOnce(T) -> Out) -> Out {
    r.map_or_else(|e| Out::Failed(e.kind), f)
}

impl Side {
    async fn admin(server: &local::LocalNodes) -> redis::aio::MultiplexedConnection {
        redis::Client::open(server.url(0))
            .expect("server url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin connection")
    }

    async fn admin_cmd(server: &local::LocalNodes, cmd: &mut redis::Cmd) {
        let mut conn = Self::admin(server).await;
        let () = cmd.query_async(&mut conn).await.expect("admin command");
    }

    async fn run(&self, op: &Op) -> Out {
        let n = &self.node;
        match op {
            Op::Acquire {
                name,
                holder,
                lease,
                count,
            }
            | Op::Reenter {
                name,
                holder,
                lease,
                count,
            } => {
                let (k, h, lease) = (keys(name), Arc::from(*holder), ms(*lease));
                let call = match op {
                    Op::Reenter { .. } => n.reenter(&k, &h, lease, *count),
                    _ => n.acquire(&k, &h, lease, *count, None),
                };
                outcome(call.await, grant)
            }
            Op::AcquireQueued {
                name,
                holder,
                lease,
                count,
                waiter,
                ticket,
                fair,
                timeout,
            } => {
                let place = Place {
                    waiter: Arc::from(*waiter),
                    ticket: *ticket,
                    timeout: ms(*timeout),
                    fair: *fair,
                };
                outcome(
                    n.acquire(
                        &keys(name),
                        &Arc::from(*holder),
                        ms(*lease),
                        *count,
                        Some(&place),
                    )
                    .await,
                    |g| match g {
                        Grant::Taken(wait, ticket) => Out::Queued { wait, ticket },
                        g => grant(g),
                    },
                )
            }
            Op::Leave { name, waiter } => {
                outcome(n.leave(&keys(name), &Arc::from(*waiter)).await, Out::Left)
            }
            Op::Queue(name) => {
                let keys = keys(name);
                match &self.ctl {
                    Ctl::Fake(f) => Out::Queue(f.queued(&keys)),
                    Ctl::Real(r) => {
                        let mut conn = Self::admin(r).await;
                        let ids: Vec<String> = redis::cmd("ZRANGE")
                            .arg(keys.queue())
                            .arg(0)
                            .arg(-1)
                            .query_async(&mut conn)
                            .await
                            .expect("ZRANGE");
                        Out::Queue(ids)
                    }
                }
            }
            Op::AcquireAll {
                names,
                holder,
                lease,
                count,
            } => {
                let set: Arc<[Arc<Keys>]> = names.iter().map(|n| keys(n)).collect();
                outcome(
                    n.acquire_all(&set, &Arc::from(*holder), ms(*lease), *count)
                        .await,
                    grant,
                )
            }
            Op::Release {
                name,
                holder,
                left,
                lease,
                token,
            } => outcome(
                n.release(&keys(name), &Arc::from(*holder), *left, ms(*lease), *token)
                    .await,
                Out::Released,
            ),
            Op::Renew(items) => {
                let items = items
                    .iter()
                    .map(|(name, holder, count, lease)| RenewItem {
                        keys: keys(name),
                        owner: Arc::from(*holder),
                        count: *count,
                        token: 0,
                        lease: ms(*lease),
                    })
                    .collect();
                outcome(
                    n.renew(Arc::new(RenewBatch::new(items))).await,
                    Out::Renewed,
                )
            }
            Op::Repair(items) => {
                let items = items
                    .iter()
                    .map(|(name, holder, count, token, lease)| RenewItem {
                        keys: keys(name),
                        owner: Arc::from(*holder),
                        count: *count,
                        token: *token,
                        lease: ms(*lease),
                    })
                    .collect();
                outcome(
                    n.repair(Arc::new(RenewBatch::repair(items))).await,
                    Out::Renewed,
                )
            }
            Op::RaiseFence(token) => outcome(n.raise_fence(&keys("a"), *token).await, Out::Fence),
            Op::ForceRelease(name) => outcome(n.force_release(&keys(name)).await, Out::Forced),
            Op::Status(name) => outcome(n.status(&keys(name)).await, |s| Out::State {
                holder: s.holder,
                count: s.hold_count,
                pttl: s.pttl,
                fence: s.fence,
            }),
            Op::ForeignLock(name) | Op::ForeignQueue(name) => {
                let key = match op {
                    Op::ForeignQueue(_) => keys(name).queue(),
                    _ => keys(name).lock.clone(),
                };
                match &self.ctl {
                    Ctl::Fake(f) => f.put_foreign(&key),
                    Ctl::Real(r) => Self::admin_cmd(r, redis::cmd("SET").arg(key).arg("x")).await,
                }
                Out::Done
            }
            Op::ForeignFence => {
                let key = keys("a").fence.clone();
                match &self.ctl {
                    Ctl::Fake(f) => f.put_foreign(&key),
                    Ctl::Real(r) => {
                        Self::admin_cmd(r, redis::cmd("DEL").arg(&key)).await;
                        let mut conn = Self::admin(r).await;
                        let _: i64 = redis::cmd("HSET")
                            .arg(&key)
                            .arg("f")
                            .arg(1)
                            .query_async(&mut conn)
                            .await
                            .expect("HSET");
                    }
                }
                Out::Done
            }
            Op::Sleep(t) => {
                tokio::time::sleep(ms(*t)).await;
                Out::Done
            }
            Op::Restart { keep_data } => {
                self.restart(*keep_data).await;
                Out::Done
            }
        }
    }

    /// The fake keeps its data (nothing to do) or forgets it (`wipe`, as
    /// the simulator's empty restart). The server reloads its data from a
    /// snapshot (`DEBUG RELOAD`), or its process is killed and started again
    /// empty on the same port; the node then reconnects, which is waited
    /// for here (the calls meeting the dead connection fail, which the fake
    /// has no counterpart for).
    async fn restart(&self, keep_data: bool) {
        match (&self.ctl, keep_data) {
            (Ctl::Fake(_), true) => {}
            (Ctl::Fake(f), false) => f.wipe(),
            (Ctl::Real(r), true) => {
                let mut conn = Self::admin(r).await;
                let _: String = redis::cmd("DEBUG")
                    .arg("RELOAD")
                    .query_async(&mut conn)
                    .await
                    .expect("DEBUG RELOAD");
            }
            (Ctl::Real(r), false) => {
                // Without persistence there is no snapshot to load, unless
                // `DEBUG RELOAD` (the restart with data) left one behind.
                r.kill(0);
                let snapshot = r.dir().join("node-0").join("dump.rdb");
                if let Err(e) = std::fs::remove_file(&snapshot) {
                    assert_eq!(e.kind(), std::io::ErrorKind::NotFound, "{e}");
                }
                r.restart(0).expect("restart redis-server");
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                while self.node.status(&keys("a")).await.is_err() {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "the node did not reconnect after the restart"
                    );
                    tokio::time::sleep(ms(20)).await;
                }
            }
        }
    }
}

/// Runs every case on a fresh fake and on the flushed server; returns a
/// report of each case where an answer differs from the expected one.
async fn run_all(server: &Arc<local::LocalNodes>, real: &Arc<dyn NodeOps>) -> Vec<String> {
    let mut failures = Vec::new();
    for case in cases() {
        let fake = FakeNode::new(0);
        let sides = [
            Side {
                node: Arc::clone(&fake) as Arc<dyn NodeOps>,
                ctl: Ctl::Fake(fake),
            },
            Side {
                node: Arc::clone(real),
                ctl: Ctl::Real(Arc::clone(server)),
            },
        ];
        Side::admin_cmd(server, &mut redis::cmd("FLUSHALL")).await;
        let mut answers: [Vec<Out>; 2] = [Vec::new(), Vec::new()];
        for (side, answers) in sides.iter().zip(&mut answers) {
            for (op, _) in &case.steps {
                answers.push(side.run(op).await);
            }
        }
        let mut report = String::new();
        for (i, ((op, expect), (fake, real))) in case
            .steps
            .iter()
            .zip(answers[0].iter().zip(&answers[1]))
            .enumerate()
        {
            let mark = if same(expect, fake) && same(expect, real) && same(fake, real) {
                "  "
            } else {
                "!!"
            };
            report.push_str(&format!(
                "\n  {mark} step {i}: {op:?}\n       expected {expect}\n       fake     {fake}\n       real     {real}"
            ));
        }
        if report.contains("!!") {
            failures.push(format!("case {:?}:{report}", case.name));
        }
    }
    failures
}

#[tokio::test]
async fn node_cases_fake_and_scripts_agree() {
    let server = local::LocalNodes::start_with(
        1,
        local::Extra {
            args: vec!["--enable-debug-command".to_owned(), "yes".to_owned()],
            tls: false,
        },
    )
    .expect("start a local redis-server (scripts/setup.sh installs it)");
    let server = Arc::new(server);
    let spec = NodeSpec::from_url(&server.url(0)).expect("node url");
    let real: Arc<dyn NodeOps> = Arc::new(
        RedisNode::connect(0, spec, Duration::from_secs(5))
            .await
            .expect("connect to the local redis-server"),
    );
    let failures = run_all(&server, &real).await;
    assert!(
        failures.is_empty(),
        "{} case(s) where the fake, the scripts or the expectation differ:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn node_cases_names_are_unique_and_steps_answer() {
    let cases = cases();
    let mut names: Vec<&str> = cases.iter().map(|c| c.name).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), cases.len(), "case names must be unique");
    for case in &cases {
        assert!(!case.steps.is_empty(), "{}: no step", case.name);
        for (op, expect) in &case.steps {
            let action = matches!(
                op,
                Op::Sleep(_)
                    | Op::Restart { .. }
                    | Op::ForeignLock(_)
                    | Op::ForeignQueue(_)
                    | Op::ForeignFence
            );
            assert_eq!(
                action,
                *expect == Out::Done,
                "{}: {op:?} is an action exactly when it expects no answer",
                case.name
            );
        }
    }
}
