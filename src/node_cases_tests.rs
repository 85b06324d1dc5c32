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
use crate::fake::FakeNode;
use crate::node::{Keys, NodeOps, NodeSpec, RedisNode, Released, RenewBatch, RenewItem, Renewed};
use crate::quorum::Grant;

#[path = "../tests/support/local.rs"]
mod local;

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

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

// The table's vocabulary.

fn acquire(name: &'static str, holder: &'static str, lease: u64, count: u32) -> Op {
    Op::Acquire {
        name,
        holder,
        lease,
        count,
    }
}

fn release(name: &'static str, holder: &'static str, left: u32, token: u64) -> Op {
    Op::Release {
        name,
        holder,
        left,
        lease: L,
        token,
    }
}

fn granted(token: u64) -> Out {
    Out::Granted(token)
}

fn taken(pttl: u64) -> Out {
    Out::Taken(Some(ms(pttl)))
}

fn held(holder: &str, count: u32, pttl: u64, fence: u64) -> Out {
    Out::State {
        holder: Some(holder.to_owned()),
        count,
        pttl: Some(ms(pttl)),
        fence,
    }
}

fn free(fence: u64) -> Out {
    Out::State {
        holder: None,
        count: 0,
        pttl: None,
        fence,
    }
}

fn renewed(codes: &[Renewed]) -> Out {
    Out::Renewed(codes.to_vec())
}

const WRONG_TYPE: Out = Out::Failed(NodeErrorKind::WrongType);

/// A named list of steps, each with the answer both nodes must give.
struct Case {
    name: &'static str,
    steps: Vec<(Op, Out)>,
}

impl Case {
    fn new(name: &'static str) -> Self {
        Self {
            name,
            steps: Vec::new(),
        }
    }

    fn step(mut self, op: Op, expect: Out) -> Self {
        self.steps.push((op, expect));
        self
    }

    /// An action without an answer (sleep, restart, planting a value).
    fn act(self, op: Op) -> Self {
        self.step(op, Out::Done)
    }
}

fn cases() -> Vec<Case> {
    use Released::{Deleted, Lowered, Missing, OtherOwner};
    use Renewed::{Conflict, Extended, Repaired, WrongType};
    vec![
        Case::new("grant: a free lock is granted with the first token")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(Op::Status("a"), held(H1, 1, L, 1)),
        Case::new("grant: one counter per node, +1 per fresh grant, across names")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .step(acquire("c", H1, L, 1), granted(3))
            .step(Op::Status("a"), held(H1, 1, L, 3))
            .step(Op::Status("b"), held(H2, 1, L, 3)),
        Case::new("re-entry: same holder sets the count, refreshes the lease, gets the counter")
            .step(acquire("a", H1, 2_000, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .step(acquire("a", H1, L, 2), granted(2))
            .step(Op::Status("a"), held(H1, 2, L, 2))
            .step(acquire("a", H1, L, 5), granted(2))
            .step(Op::Status("a"), held(H1, 5, L, 2)),
        Case::new("conflict: another holder gets the PTTL; nothing changes")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(acquire("a", H2, 3_000, 1), taken(L))
            .step(Op::Status("a"), held(H1, 1, L, 1)),
        Case::new("release: one level lowers the count and sets the lease")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(
                Op::Release {
                    name: "a",
                    holder: H1,
                    left: 1,
                    lease: 4_000,
                    token: 1,
                },
                Out::Released(Lowered),
            )
            .step(Op::Status("a"), held(H1, 1, 4_000, 1)),
        Case::new("release: the last level deletes the key; again: missing")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(release("a", H1, 0, 1), Out::Released(Deleted))
            .step(Op::Status("a"), free(1))
            .step(release("a", H1, 0, 1), Out::Released(Missing)),
        Case::new("release: raises the fence to the hold's token; a rollback (0) does not")
            .step(acquire("a", H1, L, 1), granted(1))
            .step(release("a", H1, 0, 7), Out::Released(Deleted))
            .step(Op::Status("a"), free(7))
            .step(acquire("a", H2, L, 1), granted(8))
            .step(release("a", H2, 0, 0), Out::Released(Deleted))
            .step(Op::Status("a"), free(8)),
        Case::new("release: by a wrong holder is refused and changes nothing")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(release("a", H2, 0, 5), Out::Released(OtherOwner))
            .step(release("a", H2, 1, 5), Out::Released(OtherOwner))
            .step(Op::Status("a"), held(H1, 2, L, 1)),
        Case::new("release: a missing key raises nothing")
            .step(Op::Status("a"), free(0))
            .step(release("a", H1, 0, 3), Out::Released(Missing))
            .step(Op::Status("a"), free(0)),
        Case::new("renew: held by us / by another / missing, in one batch")
            .step(acquire("a", H1, 1_000, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .step(
                Op::Renew(vec![("a", H1, 3, L), ("b", H1, 1, 3_000), ("c", H1, 1, L)]),
                renewed(&[Extended, Conflict, Renewed::Missing]),
            )
            .step(Op::Status("a"), held(H1, 3, L, 2))
            .step(Op::Status("b"), held(H2, 1, L, 2))
            .step(Op::Status("c"), free(2)),
        Case::new("repair: re-creates a missing key with the count and raises the fence")
            .step(Op::Repair(vec![("a", H1, 2, 9, L)]), renewed(&[Repaired]))
            .step(Op::Status("a"), held(H1, 2, L, 9))
            .step(acquire("b", H2, L, 1), granted(10)),
        Case::new("repair: a token below the counter does not lower it")
            .step(acquire("x", H2, L, 1), granted(1))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::Repair(vec![("a", H1, 1, 3, L)]), renewed(&[Repaired]))
            .step(Op::Status("a"), held(H1, 1, L, 5)),
        Case::new("repair: leaves another holder's key alone, extends our own")
            .step(acquire("a", H2, L, 1), granted(1))
            .step(acquire("b", H1, 1_000, 1), granted(2))
            .step(
                Op::Repair(vec![("a", H1, 1, 9, 3_000), ("b", H1, 4, 9, L)]),
                renewed(&[Conflict, Extended]),
            )
            .step(Op::Status("a"), held(H2, 1, L, 2))
            .step(Op::Status("b"), held(H1, 4, L, 2)),
        Case::new("fence: raised to a higher token, never lowered")
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::RaiseFence(3), Out::Fence(5))
            .step(Op::RaiseFence(5), Out::Fence(5))
            .step(Op::RaiseFence(0), Out::Fence(5))
            .step(Op::Status("a"), free(5))
            .step(acquire("a", H1, L, 1), granted(6)),
        Case::new("force release: deletes whoever holds it; then there is nothing")
            .step(acquire("a", H1, L, 3), granted(1))
            .step(Op::ForceRelease("a"), Out::Forced(true))
            .step(Op::Status("a"), free(1))
            .step(Op::ForceRelease("a"), Out::Forced(false))
            .step(acquire("a", H2, L, 1), granted(2)),
        Case::new("wrong type at the lock key: a typed error, or WrongType per lock")
            .step(Op::RaiseFence(2), Out::Fence(2))
            .act(Op::ForeignLock("w"))
            .step(acquire("w", H1, L, 1), WRONG_TYPE)
            .step(release("w", H1, 0, 3), WRONG_TYPE)
            .step(release("w", H1, 0, 0), WRONG_TYPE)
            .step(Op::Renew(vec![("w", H1, 1, L)]), renewed(&[WrongType]))
            .step(Op::Repair(vec![("w", H1, 1, 3, L)]), renewed(&[WrongType]))
            .step(Op::Status("w"), WRONG_TYPE)
            .step(Op::Status("a"), free(2))
            .step(Op::ForceRelease("w"), Out::Forced(true))
            .step(Op::Status("w"), free(2))
            .step(acquire("w", H1, L, 1), granted(3)),
        Case::new("wrong type at the fence counter: errors where it is read, nothing written")
            .step(acquire("a", H1, 1_000, 1), granted(1))
            .step(acquire("b", H2, L, 1), granted(2))
            .act(Op::ForeignFence)
            .step(acquire("c", H1, L, 1), WRONG_TYPE)
            .step(
                Op::Renew(vec![("c", H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(acquire("a", H1, L, 2), WRONG_TYPE)
            .step(acquire("a", H2, L, 1), taken(1_000))
            .step(acquire("b", H1, L, 1), taken(L))
            .step(Op::Renew(vec![("b", H2, 1, L)]), renewed(&[Extended]))
            .step(
                Op::Repair(vec![("d", H1, 1, 5, L), ("b", H2, 1, 5, L)]),
                renewed(&[WrongType, Extended]),
            )
            .step(
                Op::Renew(vec![("d", H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(release("a", H1, 0, 1), WRONG_TYPE)
            .step(release("b", H1, 0, 1), Out::Released(OtherOwner))
            .step(release("a", H1, 0, 0), Out::Released(Deleted))
            .step(Op::RaiseFence(9), WRONG_TYPE)
            .step(Op::Status("b"), WRONG_TYPE)
            .step(Op::ForceRelease("b"), Out::Forced(true)),
        Case::new("lease expiry: a 50 ms lease lapses and the lock is free")
            .step(acquire("a", H1, 50, 1), granted(1))
            .act(Op::Sleep(150))
            .step(Op::Status("a"), free(1))
            .step(
                Op::Renew(vec![("a", H1, 1, L)]),
                renewed(&[Renewed::Missing]),
            )
            .step(release("a", H1, 0, 1), Out::Released(Missing))
            .step(acquire("a", H2, L, 1), granted(2)),
        Case::new("restart with data: holds, counts, leases and the counter survive")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(Op::RaiseFence(4), Out::Fence(4))
            .act(Op::Restart { keep_data: true })
            .step(Op::Status("a"), held(H1, 2, L, 4))
            .step(acquire("a", H2, L, 1), taken(L))
            .step(acquire("b", H2, L, 1), granted(5)),
        Case::new("restart empty: everything is gone; repair restores key and counter")
            .step(acquire("a", H1, L, 2), granted(1))
            .step(acquire("b", H1, L, 1), granted(2))
            .act(Op::Restart { keep_data: false })
            .step(Op::Status("a"), free(0))
            .step(
                Op::Renew(vec![("a", H1, 2, L), ("b", H1, 1, L)]),
                renewed(&[Renewed::Missing, Renewed::Missing]),
            )
            .step(release("b", H1, 0, 2), Out::Released(Missing))
            .step(Op::Status("b"), free(0))
            .step(Op::Repair(vec![("a", H1, 2, 1, L)]), renewed(&[Repaired]))
            .step(Op::Status("a"), held(H1, 2, L, 1))
            .step(acquire("c", H2, L, 1), granted(2)),
    ]
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
            } => outcome(
                n.acquire(&keys(name), &Arc::from(*holder), ms(*lease), *count)
                    .await,
                |g| match g {
                    Grant::Granted(t) => Out::Granted(t),
                    Grant::Taken(p) => Out::Taken(p),
                },
            ),
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
            Op::ForeignLock(name) => {
                let key = keys(name).lock.clone();
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
                Op::Sleep(_) | Op::Restart { .. } | Op::ForeignLock(_) | Op::ForeignFence
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
