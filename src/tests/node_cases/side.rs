//! One node under test, the fake or the real one, and how a step runs on
//! it: a call through [`NodeOps`], or an action (a sleep, a restart, a
//! value of another type planted at a key).

use std::sync::Arc;
use std::time::Duration;

use crate::keys::Keys;
use crate::layout::Layout;
use crate::node::{Claim, Grant, NodeOps, Place, RenewBatch, RenewItem};
use crate::tests::fake::FakeNode;

use super::local;
use super::steps::{ms, Op, Out, PREFIX};

/// The real server of the test, and what the fake does instead.
pub(super) enum Ctl {
    Fake(Arc<FakeNode>),
    Real(Arc<local::LocalNodes>),
}

/// One node under test.
pub(super) struct Side {
    pub(super) node: Arc<dyn NodeOps>,
    pub(super) ctl: Ctl,
    /// The key layout the case runs in: every case runs in each.
    pub(super) layout: Layout,
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
    fn keys(&self, name: &str) -> Arc<Keys> {
        Arc::new(Keys::in_layout(self.layout, PREFIX, name))
    }

    /// A renewal (or repair) batch's item from a case's plain values.
    fn item(&self, name: &str, holder: &str, count: u32, token: u64, lease: u64) -> RenewItem {
        RenewItem {
            keys: self.keys(name),
            owner: Arc::from(holder),
            count,
            token,
            lease: ms(lease),
        }
    }

    async fn admin(server: &local::LocalNodes) -> redis::aio::MultiplexedConnection {
        redis::Client::open(server.url(0))
            .expect("server url")
            .get_multiplexed_async_connection()
            .await
            .expect("admin connection")
    }

    pub(super) async fn admin_cmd(server: &local::LocalNodes, cmd: &mut redis::Cmd) {
        let mut conn = Self::admin(server).await;
        let () = cmd.query_async(&mut conn).await.expect("admin command");
    }

    pub(super) async fn run(&self, op: &Op) -> Out {
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
                let (k, c) = (self.keys(name), claim(holder, *lease, *count));
                let call = match op {
                    Op::Reenter { .. } => n.reenter(&k, &c),
                    _ => n.acquire(&k, &c, None),
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
                        &self.keys(name),
                        &claim(holder, *lease, *count),
                        Some(&place),
                    )
                    .await,
                    |g| match g {
                        Grant::Taken(wait, ticket) => Out::Queued { wait, ticket },
                        g => grant(g),
                    },
                )
            }
            Op::Leave { name, waiter } => outcome(
                n.leave(&self.keys(name), &Arc::from(*waiter)).await,
                Out::Left,
            ),
            Op::Queue(name) => {
                let keys = self.keys(name);
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
                let set: Arc<[Arc<Keys>]> = names.iter().map(|n| self.keys(n)).collect();
                outcome(
                    n.acquire_all(&set, &claim(holder, *lease, *count)).await,
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
                n.release(&self.keys(name), &claim(holder, *lease, *left), *token)
                    .await,
                Out::Released,
            ),
            Op::Renew(items) => {
                let items = items
                    .iter()
                    .map(|(name, holder, count, lease)| self.item(name, holder, *count, 0, *lease))
                    .collect();
                outcome(
                    n.renew(Arc::new(RenewBatch::new(items))).await,
                    Out::Renewed,
                )
            }
            Op::Repair(items) => {
                let items = items
                    .iter()
                    .map(|(name, holder, count, token, lease)| {
                        self.item(name, holder, *count, *token, *lease)
                    })
                    .collect();
                outcome(
                    n.repair(Arc::new(RenewBatch::repair(items))).await,
                    Out::Renewed,
                )
            }
            Op::Keep(places) => {
                let items = places
                    .iter()
                    .map(|(name, waiter, timeout)| {
                        RenewItem::place(&self.keys(name), &Arc::from(*waiter), ms(*timeout))
                    })
                    .collect();
                outcome(
                    n.keep(Arc::new(RenewBatch::keep(items))).await,
                    Out::Renewed,
                )
            }
            Op::RaiseFence(token) => {
                outcome(n.raise_fence(&[self.keys("a")], *token).await, Out::Fence)
            }
            Op::RaiseFences(names, token) => {
                let set: Vec<Arc<Keys>> = names.iter().map(|n| self.keys(n)).collect();
                outcome(n.raise_fence(&set, *token).await, Out::Fence)
            }
            Op::ForceRelease(name) => outcome(n.force_release(&self.keys(name)).await, Out::Forced),
            Op::Status(name) => outcome(n.status(&self.keys(name)).await, |s| Out::State {
                holder: s.holder,
                count: s.hold_count,
                pttl: s.pttl,
                fence: s.fence,
            }),
            Op::ForeignLock(name) | Op::ForeignQueue(name) => {
                let key = match op {
                    Op::ForeignQueue(_) => self.keys(name).queue(),
                    _ => self.keys(name).lock.clone(),
                };
                match &self.ctl {
                    Ctl::Fake(f) => f.put_foreign(&key),
                    Ctl::Real(r) => Self::admin_cmd(r, redis::cmd("SET").arg(key).arg("x")).await,
                }
                Out::Done
            }
            Op::ForeignFence => {
                let key = self.keys("a").fence.clone();
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
                while self.node.status(&self.keys("a")).await.is_err() {
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

/// A call's claim from a case's plain values (a lease in milliseconds).
fn claim(holder: &str, lease_ms: u64, count: u32) -> Claim {
    Claim::new(Arc::from(holder), ms(lease_ms), count)
}
