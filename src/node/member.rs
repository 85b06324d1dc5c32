//! A real member (a standalone master, `redis_node`, or a Redis Cluster,
//! `cluster::node`) as one `NodeOps`: every script call written once here
//! (which script, which keys from `script_keys`, which arguments, how its
//! reply reads, whether it may be sent again after a broken connection),
//! while a member states only how a call reaches its server
//! ([`Server::eval`], [`Server::batch`]) and what only it knows.

use std::marker::PhantomData;
use std::sync::Arc;

use redis::Value;

use crate::error::{NodeError, NodeErrorKind};
use crate::keys::{Keys, Role};
use crate::scripts::{self, ms};

use super::batch::RenewBatch;
use super::feed::Feed;
use super::ops::{
    Answer, BatchCost, Claim, Grant, NodeLockState, NodeOps, Place, Proclaimed, Record, Released,
    Renewed, Seen, SlotsSeen,
};
use super::order::{pair, Lane, Order, Stamp};
use super::reply::{self, grant};
use super::script_call::Resend;
use super::script_keys;
use super::shared::HolderArgs;

/// How calls reach one real member's server.
pub(crate) trait Server: Send + Sync + 'static {
    fn addr(&self) -> &str;

    /// The `maxmemory-policy` last read, if the server said.
    fn maxmemory_policy(&self) -> Option<String>;

    /// See [`NodeOps::feed`].
    fn feed(&self) -> Option<Arc<dyn Feed>>;

    /// See [`NodeOps::is_cluster`].
    fn is_cluster(&self) -> bool;

    /// See [`NodeOps::shard_breaks`].
    fn shard_breaks(&self) -> Vec<u16> {
        Vec::new()
    }

    /// Whether the server sends the calls that free (releases, queue
    /// exits: [`Lane::Frees`]) on a connection of their own, as
    /// [`Call::stamp`]'s lane says; if not, every call goes on one.
    fn frees_apart(&self) -> bool {
        false
    }

    /// Whether [`Server::eval`] sends a call's shared command
    /// ([`Call::share`]); a server that builds every command itself is not
    /// given one.
    fn sends_shared(&self) -> bool {
        false
    }

    /// See [`NodeOps::batch_cost`].
    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost;

    /// Sends `call`, again only as its `resend` allows; its reply read by
    /// its `read`.
    fn eval<T, R, A, F>(&self, call: Call<T, R, A, F>) -> Answer<R>
    where
        T: redis::FromRedisValue + Send + 'static,
        R: Send + 'static,
        A: Args,
        F: Read<T, R>;

    /// Sends a renewal, repair or keep batch (a keep batch on the
    /// connection of the attempts, without `WAIT`: a place is not a hold).
    fn batch(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>>;

    /// See [`NodeOps::status`].
    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState>;
}

/// What adds a call's arguments to its command (after its key names).
pub(crate) trait Args: Fn(&mut redis::Cmd) + Send + 'static {}

impl<A: Fn(&mut redis::Cmd) + Send + 'static> Args for A {}

/// How a call's reply reads.
pub(crate) trait Read<T, R>: FnOnce(T) -> Result<R, NodeError> + Send + 'static {}

impl<T, R, F: FnOnce(T) -> Result<R, NodeError> + Send + 'static> Read<T, R> for F {}

/// One script call as a member sends it: the script, its key names, when
/// it may be sent again, its place among its hold's calls on the member,
/// whether its write must reach replicas to count, the arguments it adds,
/// how its reply reads. The two closures are kept by value, in the call's
/// future: boxed, the argument writers alone were a tenth of a cycle's
/// allocations.
pub(crate) struct Call<T, R, A, F> {
    pub(crate) script: &'static scripts::Lua,
    pub(crate) keys: script_keys::Names,
    pub(crate) resend: Resend,
    /// Checked before every resend ([`Stamp::may_resend`]): a call is
    /// never sent again once a later call of its hold was made. It names
    /// the connection the call goes on ([`Stamp::lane`]), and is told
    /// when the call ends ([`Stamp::ended`]).
    pub(crate) stamp: Stamp,
    pub(crate) confirm: Confirm,
    pub(crate) args: A,
    pub(crate) read: F,
    /// The `EVALSHA` command the call's fan-out shares, when it is the
    /// one this call would build (see `shared`); `args` writes the same
    /// arguments, for a server that builds its own (an `EVAL`, a cluster
    /// member's).
    pub(crate) share: Option<Arc<redis::Cmd>>,
    reads: PhantomData<fn(T) -> R>,
}

/// When a call's answer counts: the calls a quorum counts (a grant, a
/// re-entry, a fence raise) on a cluster member that waits for replicas
/// (`replica_wait`) count only once `WAIT` confirms their write there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Confirm {
    /// Once the replicas the manager asks for have it.
    Replicas,
    /// As soon as the master answers (a release, a queue exit, a forced
    /// release: losing one to a failover frees nothing it should not).
    Master,
}

impl<T, R, A: Args, F: Read<T, R>> Call<T, R, A, F> {
    fn new(
        script: &'static scripts::Lua,
        keys: script_keys::Names,
        (resend, confirm, stamp): (Resend, Confirm, Stamp),
        args: A,
        read: F,
    ) -> Self {
        Self {
            script,
            keys,
            resend,
            stamp,
            confirm,
            args,
            read,
            share: None,
            reads: PhantomData,
        }
    }
}

/// How a grant is sent: never again after a broken connection (it could
/// land behind its own rollback), and counted once replicas have it.
fn grant_call(stamp: Stamp) -> (Resend, Confirm, Stamp) {
    (Resend::Never, Confirm::Replicas, stamp)
}

/// A real member: a [`Server`] behind [`NodeOps`], and the order of each
/// hold's calls on it ([`Order`]: a call is never sent again behind a
/// later call of its hold, whatever the server's retry rules, and never
/// sent on another connection than an earlier call of its hold that may
/// still run).
pub(crate) struct Member<S>(pub(crate) S, Arc<Order>);

/// The (lock, holder) pair of a call for `holder`.
fn holder(keys: &Keys, holder: &str) -> u64 {
    pair(&keys.name, holder)
}

impl<S: Server> Member<S> {
    pub(crate) fn new(server: S) -> Self {
        let order = Order::new(server.frees_apart(), server.is_cluster());
        Self(server, Arc::new(order))
    }

    /// Stamps a call about these (lock, party) pairs, routed by `slot`
    /// (its first key's), made now, that goes on `prefer` unless its
    /// pairs' order says otherwise.
    fn stamp(&self, slot: u16, pairs: &[u64], prefer: Lane) -> Stamp {
        self.1.stamp(pairs, prefer, slot)
    }

    /// A renew or repair batch, stamped in the member's order on the
    /// renewal connection (`repairs`: a repair's items as (slot, pair)):
    /// an answer proves that what was sent there before it has run.
    fn ordered_batch(
        &self,
        batch: Arc<RenewBatch>,
        repairs: &[(u16, u64)],
    ) -> Answer<Vec<Renewed>> {
        let Some(stamp) = self.1.batch(repairs) else {
            return self.0.batch(batch);
        };
        let items = Arc::clone(&batch);
        let answer = self.0.batch(batch);
        Box::pin(async move {
            let r = answer.await;
            match &r {
                Ok(codes) => stamp.answered(codes.len(), |i| {
                    let slot = items.items.get(i).map_or(0, |it| it.keys.slot());
                    (codes.get(i) != Some(&Renewed::Failed)).then_some(slot)
                }),
                // No answer on a live connection: it may still run there
                // (the stamp's drop says so).
                Err(e) if e.kind == NodeErrorKind::Timeout => drop(stamp),
                Err(_) => stamp.failed(),
            }
            r
        })
    }

    /// The last argument of every script that publishes (`release`,
    /// `leave`, `force_release`, `acquire_queued`): `1` on a cluster member,
    /// whose messages go out with `SPUBLISH` (sharded pub/sub, received on
    /// the shard that serves the lock's slot), `0` on a master (`PUBLISH`).
    fn sharded(&self) -> u8 {
        u8::from(self.0.is_cluster())
    }

    /// Sends `script` over the key names `names` with the arguments `args`
    /// adds, again only as `how`'s [`Resend`] allows, counted as its
    /// [`Confirm`] says; its reply read by `read`.
    fn run<T: redis::FromRedisValue + Send + 'static, R: Send + 'static>(
        &self,
        script: &'static scripts::Lua,
        names: script_keys::Names,
        how: (Resend, Confirm, Stamp),
        args: impl Args,
        read: impl Read<T, R>,
    ) -> Answer<R> {
        self.0.eval(Call::new(script, names, how, args, read))
    }

    /// [`Member::run`] with a holder's arguments `args`, sending the
    /// `EVALSHA` command of the fan-out `claim` belongs to (see `shared`).
    fn run_shared<T: redis::FromRedisValue + Send + 'static, R: Send + 'static>(
        &self,
        (script, names, claim): (&'static scripts::Lua, script_keys::Names, &Claim),
        how: (Resend, Confirm, Stamp),
        args: HolderArgs,
        read: impl Read<T, R>,
    ) -> Answer<R> {
        let share = if self.0.sends_shared() {
            claim.shared.command(script, &names, &args)
        } else {
            None
        };
        let mut call = Call::new(
            script,
            names,
            how,
            move |c: &mut redis::Cmd| args.write(c),
            read,
        );
        call.share = share;
        self.0.eval(call)
    }
}

impl<S: Server> NodeOps for Member<S> {
    fn addr(&self) -> &str {
        self.0.addr()
    }

    fn maxmemory_policy(&self) -> Option<String> {
        self.0.maxmemory_policy()
    }

    fn is_cluster(&self) -> bool {
        self.0.is_cluster()
    }

    fn shard_breaks(&self) -> Vec<u16> {
        self.0.shard_breaks()
    }

    fn batch_cost(&self, batch: &RenewBatch) -> BatchCost {
        self.0.batch_cost(batch)
    }

    fn feed(&self) -> Option<Arc<dyn Feed>> {
        self.0.feed()
    }

    fn acquire(&self, keys: &Arc<Keys>, claim: &Claim, place: Option<&Place>) -> Answer<Grant> {
        if keys.role != Role::Lock && keys.role != Role::Permit {
            return self.rw(keys, claim, false);
        }
        let (owner, lease, count) = (Arc::clone(&claim.holder), claim.lease, claim.count);
        let read = |reply: Vec<Value>| grant(&reply, "acquire");
        let Some(p) = place.cloned() else {
            let stamp = self.stamp(keys.slot(), &[holder(keys, &owner)], Lane::Calls);
            let args = HolderArgs::new(owner, [ms(lease), count.into()]);
            let call = (&*scripts::ACQUIRE, script_keys::acquire(keys), claim);
            return self.run_shared(call, grant_call(stamp), args, read);
        };
        let stamp = self.stamp(
            keys.slot(),
            &[holder(keys, &owner), holder(keys, &p.waiter)],
            Lane::Calls,
        );
        let sharded = self.sharded();
        let args = move |c: &mut redis::Cmd| {
            c.arg(&*owner).arg(ms(lease)).arg(count).arg(&*p.waiter);
            c.arg(p.ticket).arg(ms(p.timeout)).arg(u8::from(p.fair));
            c.arg(sharded);
        };
        let names = script_keys::acquire_queued(keys);
        self.run(
            &scripts::ACQUIRE_QUEUED,
            names,
            grant_call(stamp),
            args,
            read,
        )
    }

    fn reenter(&self, keys: &Arc<Keys>, claim: &Claim) -> Answer<Grant> {
        if keys.role != Role::Lock && keys.role != Role::Permit {
            return self.rw(keys, claim, true);
        }
        let (owner, lease, count) = (Arc::clone(&claim.holder), claim.lease, claim.count);
        let names = script_keys::acquire(keys);
        let stamp = self.stamp(keys.slot(), &[holder(keys, &owner)], Lane::Calls);
        let args = move |c: &mut redis::Cmd| {
            c.arg(&*owner).arg(ms(lease)).arg(count).arg(1);
        };
        let read = |reply: Vec<Value>| grant(&reply, "acquire");
        self.run(&scripts::ACQUIRE, names, grant_call(stamp), args, read)
    }

    fn leave(&self, keys: &Arc<Keys>, waiter: &Arc<str>) -> Answer<bool> {
        let stamp = self.stamp(keys.slot(), &[holder(keys, waiter)], Lane::Frees);
        let waiter = Arc::clone(waiter);
        let names = script_keys::leave(keys);
        let sharded = self.sharded();
        let args = move |c: &mut redis::Cmd| {
            c.arg(&*waiter).arg(sharded);
        };
        let read = |n: i64| Ok(n == 1);
        let how = (Resend::AfterBrokenConnection, Confirm::Master, stamp);
        self.run(&scripts::LEAVE, names, how, args, read)
    }

    fn acquire_all(&self, keys: &Arc<[Arc<Keys>]>, claim: &Claim) -> Answer<Grant> {
        let (owner, lease, count) = (Arc::clone(&claim.holder), claim.lease, claim.count);
        let names = script_keys::acquire_all(keys);
        let pairs: Vec<u64> = keys.iter().map(|k| holder(k, &owner)).collect();
        let slot = keys.first().map_or(0, |k| k.slot());
        let stamp = self.stamp(slot, &pairs, Lane::Calls);
        let n = keys.len();
        let args = move |c: &mut redis::Cmd| {
            c.arg(&*owner).arg(ms(lease)).arg(count).arg(n);
        };
        let read = |reply: Vec<Value>| grant(&reply, "acquire_all");
        self.run(&scripts::ACQUIRE_ALL, names, grant_call(stamp), args, read)
    }

    fn release(&self, keys: &Arc<Keys>, claim: &Claim, token: u64) -> Answer<Released> {
        let (owner, lease, count) = (Arc::clone(&claim.holder), claim.lease, claim.count);
        let names = script_keys::release(keys);
        let stamp = self.stamp(keys.slot(), &[holder(keys, &owner)], Lane::Frees);
        let sharded = self.sharded().into();
        let args = HolderArgs::new(owner, [count.into(), ms(lease), token, sharded]);
        let how = (Resend::AfterBrokenConnection, Confirm::Master, stamp);
        let call = (&*scripts::RELEASE, names, claim);
        self.run_shared(call, how, args, reply::released)
    }

    fn renew(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.ordered_batch(batch, &[])
    }

    /// A repair's holds are unsettled on the renewal connection while it
    /// may run there: a release made meanwhile goes behind it (`order`).
    fn repair(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        let items: Vec<(u16, u64)> = batch
            .items
            .iter()
            .map(|it| (it.keys.slot(), holder(&it.keys, &it.owner)))
            .collect();
        self.ordered_batch(batch, &items)
    }

    fn keep(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.0.batch(batch)
    }

    fn raise_fence(&self, keys: &[Arc<Keys>], token: u64) -> Answer<u64> {
        let args = move |c: &mut redis::Cmd| {
            c.arg(token);
        };
        let read = |counter: i64| Ok(u64::try_from(counter).unwrap_or(0));
        let names = script_keys::raise_fences(keys);
        let how = (
            Resend::AfterBrokenConnection,
            Confirm::Replicas,
            Stamp::none(),
        );
        self.run(&scripts::RAISE_FENCE, names, how, args, read)
    }

    fn force_release(&self, keys: &Arc<Keys>) -> Answer<bool> {
        let names = script_keys::force_release(keys);
        let read = |n: i64| Ok(n == 1);
        let sharded = self.sharded();
        let args = move |c: &mut redis::Cmd| {
            c.arg(sharded);
        };
        let how = (Resend::Never, Confirm::Master, Stamp::none());
        self.run(&scripts::FORCE_RELEASE, names, how, args, read)
    }

    fn proclaim(&self, keys: &Arc<Keys>, record: &Record) -> Answer<Proclaimed> {
        let names = script_keys::proclaim(keys);
        let stamp = self.stamp(keys.slot(), &[holder(keys, &record.holder)], Lane::Calls);
        let record = record.clone();
        let sharded = self.sharded();
        let args = move |c: &mut redis::Cmd| {
            c.arg(&*record.holder).arg(record.term).arg(record.rev);
            c.arg(&*record.value).arg(sharded);
        };
        // Sent again after a broken connection: it writes only where the
        // hold is alive and never over a later revision, so a late copy
        // changes nothing a later call made.
        let how = (Resend::AfterBrokenConnection, Confirm::Replicas, stamp);
        self.run(&scripts::PROCLAIM, names, how, args, reply::proclaimed)
    }

    fn leader(&self, keys: &Arc<Keys>) -> Answer<Seen> {
        let names = script_keys::leader(keys);
        let read = |reply: Vec<Value>| reply::seen(&reply);
        let how = (
            Resend::AfterBrokenConnection,
            Confirm::Master,
            Stamp::none(),
        );
        self.run(&scripts::LEADER, names, how, |_| {}, read)
    }

    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        self.0.status(keys)
    }

    fn permits(&self, slot: &Arc<Keys>, count: u32) -> Answer<SlotsSeen> {
        let names = script_keys::permits(slot, count);
        let args = move |c: &mut redis::Cmd| {
            c.arg(count);
        };
        // It writes only the count, and only where none is: sent again
        // after a broken connection, it changes nothing a later call did.
        let how = (
            Resend::AfterBrokenConnection,
            Confirm::Master,
            Stamp::none(),
        );
        self.run(&scripts::PERMITS, names, how, args, |reply: Vec<Value>| {
            reply::slots_seen(&reply)
        })
    }
}

impl<S: Server> Member<S> {
    /// A read-write lock's reader (`scripts/read.lua`) or writer
    /// (`scripts/write.lua`) acquiring, or re-entering (`reenter`).
    fn rw(&self, keys: &Arc<Keys>, claim: &Claim, reenter: bool) -> Answer<Grant> {
        let (owner, lease, count) = (Arc::clone(&claim.holder), claim.lease, claim.count);
        let flag = u8::from(reenter);
        let read = |reply: Vec<Value>| grant(&reply, "rw");
        if let Role::Writer { waiter, hold_back } = &keys.role {
            // Stamped for the writer's waiter id too, as a queued waiter's
            // attempt is: its exit from the waiting writers (`leave`) then
            // never overtakes an attempt still out, which would put it back
            // among them, holding readers back for nobody.
            let stamp = self.stamp(
                keys.slot(),
                &[holder(keys, &owner), holder(keys, waiter)],
                Lane::Calls,
            );
            let (waiter, hold_back) = (Arc::clone(waiter), *hold_back);
            let args = move |c: &mut redis::Cmd| {
                c.arg(&*owner).arg(ms(lease)).arg(count).arg(flag);
                c.arg(&*waiter).arg(ms(hold_back));
            };
            let names = script_keys::write(keys);
            return self.run(&scripts::WRITE, names, grant_call(stamp), args, read);
        }
        let stamp = self.stamp(keys.slot(), &[holder(keys, &owner)], Lane::Calls);
        let args = move |c: &mut redis::Cmd| {
            c.arg(&*owner).arg(ms(lease)).arg(count).arg(flag);
        };
        let names = script_keys::read(keys);
        self.run(&scripts::READ, names, grant_call(stamp), args, read)
    }
}
