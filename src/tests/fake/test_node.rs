//! The one `NodeOps` of every node of the tests: the in-memory node, and
//! the nodes that wrap it (a link that delays each call, the simulator's
//! faulty links). Each states only how a call reaches the in-memory node
//! ([`TestNode::reach`]) and what else it changes; every call is the same
//! script applied to the node's state.

use std::fmt::Debug;
use std::sync::Arc;

use crate::error::NodeError;
use crate::keys::{Keys, Role};
use crate::node::{
    call_keys, Answer, Claim, Feed, Grant, NodeLockState, NodeOps, Place, Proclaimed, Record,
    Released, RenewBatch, Renewed, Resend, Seen, SlotsSeen,
};
use crate::tests::fake_feed::HubFeed;

use super::{primitives, scripts, FakeNode, State};

/// One call as the in-memory node runs it: a script applied to its state.
pub(crate) trait Script<T>:
    FnOnce(&mut State) -> Result<T, NodeError> + Send + 'static
{
}

impl<T, F: FnOnce(&mut State) -> Result<T, NodeError> + Send + 'static> Script<T> for F {}

/// A node of the tests: the in-memory node, reached its own way.
pub(crate) trait TestNode: Send + Sync + 'static {
    /// The in-memory node behind it.
    fn fake(&self) -> &FakeNode;

    /// Sends the call `what` and answers: `script` is applied to the
    /// in-memory node's state when (and if) the call reaches it.
    fn reach<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        script: impl Script<T>,
    ) -> Answer<T>;

    /// [`TestNode::reach`] for a call that names the keys `keys` gives (its
    /// `KEYS`, as a real member's call names them: `node::script_keys`)
    /// and may be sent again as `resend` says: the in-memory node takes it
    /// as any call; a sharded one (`sim::shards`) routes it by their slot.
    fn reach_keyed<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        (keys, resend): (impl FnOnce() -> crate::node::call_keys::Names, Resend),
        script: impl Script<T> + Clone,
    ) -> Answer<T> {
        let _ = (keys, resend);
        self.reach(what, script)
    }

    /// A renewal, repair or keep batch (`RenewBatch::kind`): one call here.
    fn reach_batch(&self, what: &'static str, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.reach(what, move |s| {
            Ok(scripts::batch(s, &batch.items, batch.kind()))
        })
    }

    /// The slots where the serving shard changes (`NodeOps::shard_breaks`):
    /// the in-memory node's setting (none unless a test sets them).
    fn breaks(&self) -> Vec<u16> {
        self.fake().shard_breaks()
    }

    /// The release messages the waiters receive: the in-memory node's.
    fn release_feed(&self) -> Option<Arc<dyn Feed>> {
        Some(Arc::new(HubFeed(self.fake().hub())))
    }

    /// An acquire's answer, on its way back to the caller.
    fn acquired(&self, answer: Answer<Grant>) -> Answer<Grant> {
        answer
    }

    /// What else happens as a forced release lands on the node, run just
    /// before its script (each time it lands).
    fn forced(&self, _keys: &Keys) -> Arc<dyn Fn() + Send + Sync> {
        Arc::new(|| {})
    }
}

impl TestNode for FakeNode {
    fn fake(&self) -> &FakeNode {
        self
    }

    fn reach<T: Debug + Send + 'static>(
        &self,
        _: &'static str,
        script: impl Script<T>,
    ) -> Answer<T> {
        self.apply(script)
    }
}

impl<N: TestNode> NodeOps for N {
    fn addr(&self) -> &str {
        &self.fake().addr
    }

    fn feed(&self) -> Option<Arc<dyn Feed>> {
        self.release_feed()
    }

    fn shard_breaks(&self) -> Vec<u16> {
        self.breaks()
    }

    fn acquire(&self, keys: &Arc<Keys>, claim: &Claim, place: Option<&Place>) -> Answer<Grant> {
        let (k, c, p) = (Arc::clone(keys), claim.clone(), place.cloned());
        let queued = place.is_some();
        let role = keys.role.clone();
        let names = move || match (&keys.role, queued) {
            (Role::Reader, _) => call_keys::read(keys),
            (Role::Writer { .. }, _) => call_keys::write(keys),
            (_, false) => call_keys::acquire(keys),
            (_, true) => call_keys::acquire_queued(keys),
        };
        let names = (names, Resend::Never);
        self.acquired(
            self.reach_keyed("acquire", names, move |s| match (role, p) {
                (Role::Reader | Role::Writer { .. }, _) => {
                    primitives::rw(s, &k, &c.holder, c.lease, c.count, false)
                }
                (_, None) => scripts::acquire(s, &k, &c.holder, c.lease, c.count, false),
                (_, Some(p)) => scripts::acquire_queued(s, &k, &c.holder, c.lease, c.count, &p),
            }),
        )
    }

    fn reenter(&self, keys: &Arc<Keys>, claim: &Claim) -> Answer<Grant> {
        let (k, c) = (Arc::clone(keys), claim.clone());
        let names = (|| call_keys::acquire(keys), Resend::Never);
        self.reach_keyed("reenter", names, move |s| match k.role {
            Role::Reader | Role::Writer { .. } => {
                primitives::rw(s, &k, &c.holder, c.lease, c.count, true)
            }
            _ => scripts::acquire(s, &k, &c.holder, c.lease, c.count, true),
        })
    }

    fn permits(&self, slot: &Arc<Keys>, count: u32) -> Answer<SlotsSeen> {
        let k = Arc::clone(slot);
        let names = (
            move || call_keys::permits(slot, count),
            Resend::AfterBrokenConnection,
        );
        self.reach_keyed("permits", names, move |s| primitives::permits(s, &k, count))
    }

    fn leave(&self, keys: &Arc<Keys>, waiter: &Arc<str>) -> Answer<bool> {
        let (k, waiter) = (Arc::clone(keys), Arc::clone(waiter));
        let names = (|| call_keys::leave(keys), Resend::AfterBrokenConnection);
        self.reach_keyed("leave", names, move |s| scripts::leave(s, &k, &waiter))
    }

    fn acquire_all(&self, keys: &Arc<[Arc<Keys>]>, claim: &Claim) -> Answer<Grant> {
        let (k, c) = (Arc::clone(keys), claim.clone());
        let names = (|| call_keys::acquire_all(keys), Resend::Never);
        self.reach_keyed("acquire_all", names, move |s| {
            scripts::acquire_all(s, &k, &c.holder, c.lease, c.count)
        })
    }

    fn release(&self, keys: &Arc<Keys>, claim: &Claim, token: u64) -> Answer<Released> {
        let (k, c) = (Arc::clone(keys), claim.clone());
        let names = (|| call_keys::release(keys), Resend::AfterBrokenConnection);
        self.reach_keyed("release", names, move |s| {
            scripts::release(s, &k, &c.holder, c.count, c.lease, token)
        })
    }

    fn renew(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.reach_batch("renew", batch)
    }

    fn repair(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.reach_batch("repair", batch)
    }

    fn keep(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.reach_batch("keep", batch)
    }

    fn raise_fence(&self, keys: &[Arc<Keys>], token: u64) -> Answer<u64> {
        let k = keys.to_vec();
        let names = (
            || call_keys::raise_fences(keys),
            Resend::AfterBrokenConnection,
        );
        self.reach_keyed("raise_fence", names, move |s| {
            scripts::raise_fence(s, &k, token)
        })
    }

    fn force_release(&self, keys: &Arc<Keys>) -> Answer<bool> {
        let (landed, k) = (self.forced(keys), Arc::clone(keys));
        let names = (|| call_keys::force_release(keys), Resend::Never);
        self.reach_keyed("force_release", names, move |s| {
            landed();
            scripts::force_release(s, &k)
        })
    }

    fn proclaim(&self, keys: &Arc<Keys>, record: &Record) -> Answer<Proclaimed> {
        let (k, r) = (Arc::clone(keys), record.clone());
        let names = (|| call_keys::proclaim(keys), Resend::AfterBrokenConnection);
        self.reach_keyed("proclaim", names, move |s| scripts::proclaim(s, &k, &r))
    }

    fn leader(&self, keys: &Arc<Keys>) -> Answer<Seen> {
        let k = Arc::clone(keys);
        let names = (|| call_keys::leader(keys), Resend::AfterBrokenConnection);
        self.reach_keyed("leader", names, move |s| scripts::leader(s, &k))
    }

    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        let keys = Arc::clone(keys);
        self.reach("status", move |s| scripts::status(s, &keys))
    }
}

/// The calls that reached a set of [`Counted`] links, by kind (`what`).
#[derive(Default, Clone)]
pub(crate) struct Calls(Arc<std::sync::Mutex<std::collections::HashMap<&'static str, u64>>>);

impl Calls {
    /// The calls of the kinds `kind` accepts.
    pub(crate) fn of(&self, kind: impl Fn(&str) -> bool) -> u64 {
        crate::sync::locked(&self.0)
            .iter()
            .filter(|(what, _)| kind(what))
            .map(|(_, n)| n)
            .sum()
    }
}

/// A link to a fake node that counts the calls reaching it, by kind.
pub(crate) struct Counted {
    fake: Arc<FakeNode>,
    calls: Calls,
}

impl TestNode for Counted {
    fn fake(&self) -> &FakeNode {
        &self.fake
    }

    fn reach<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        script: impl Script<T>,
    ) -> Answer<T> {
        *crate::sync::locked(&self.calls.0).entry(what).or_default() += 1;
        self.fake.reach(what, script)
    }
}

/// Links to `fakes` that count their calls in one tally.
pub(crate) fn counted(fakes: &[Arc<FakeNode>]) -> (Vec<Arc<dyn NodeOps>>, Calls) {
    let calls = Calls::default();
    let links = fakes
        .iter()
        .map(|f| {
            Arc::new(Counted {
                fake: Arc::clone(f),
                calls: calls.clone(),
            }) as Arc<dyn NodeOps>
        })
        .collect();
    (links, calls)
}
