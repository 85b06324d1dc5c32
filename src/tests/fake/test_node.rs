//! The one `NodeOps` of every node of the tests: the in-memory node, and
//! the nodes that wrap it (a link that delays each call, the simulator's
//! faulty links). Each states only how a call reaches the in-memory node
//! ([`TestNode::reach`]) and what else it changes; every call is the same
//! script applied to the node's state.

use std::fmt::Debug;
use std::sync::Arc;

use crate::error::NodeError;
use crate::keys::Keys;
use crate::node::{
    Answer, Claim, Feed, Grant, NodeLockState, NodeOps, Place, Released, RenewBatch, Renewed,
};
use crate::tests::fake_feed::HubFeed;

use super::{scripts, FakeNode, State};

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

    /// The release messages the waiters receive: the in-memory node's.
    fn release_feed(&self) -> Option<Arc<dyn Feed>> {
        Some(Arc::new(HubFeed(self.fake().hub())))
    }

    /// An acquire's answer, on its way back to the caller.
    fn acquired(&self, answer: Answer<Grant>) -> Answer<Grant> {
        answer
    }

    /// What else happens as a forced release lands on the node, run just
    /// before its script.
    fn forced(&self, _keys: &Keys) -> Box<dyn FnOnce() + Send> {
        Box::new(|| {})
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

    fn acquire(&self, keys: &Arc<Keys>, claim: &Claim, place: Option<&Place>) -> Answer<Grant> {
        let (keys, c, place) = (Arc::clone(keys), claim.clone(), place.cloned());
        self.acquired(self.reach("acquire", move |s| match place {
            None => scripts::acquire(s, &keys, &c.holder, c.lease, c.count, false),
            Some(p) => scripts::acquire_queued(s, &keys, &c.holder, c.lease, c.count, &p),
        }))
    }

    fn reenter(&self, keys: &Arc<Keys>, claim: &Claim) -> Answer<Grant> {
        let (keys, c) = (Arc::clone(keys), claim.clone());
        self.reach("reenter", move |s| {
            scripts::acquire(s, &keys, &c.holder, c.lease, c.count, true)
        })
    }

    fn leave(&self, keys: &Arc<Keys>, waiter: &Arc<str>) -> Answer<bool> {
        let (keys, waiter) = (Arc::clone(keys), Arc::clone(waiter));
        self.reach("leave", move |s| scripts::leave(s, &keys, &waiter))
    }

    fn acquire_all(&self, keys: &Arc<[Arc<Keys>]>, claim: &Claim) -> Answer<Grant> {
        let (keys, c) = (Arc::clone(keys), claim.clone());
        self.reach("acquire_all", move |s| {
            scripts::acquire_all(s, &keys, &c.holder, c.lease, c.count)
        })
    }

    fn release(&self, keys: &Arc<Keys>, claim: &Claim, token: u64) -> Answer<Released> {
        let (keys, c) = (Arc::clone(keys), claim.clone());
        self.reach("release", move |s| {
            scripts::release(s, &keys, &c.holder, c.count, c.lease, token)
        })
    }

    fn renew(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.reach("renew", move |s| {
            Ok(scripts::renew_or_repair(s, &batch, false))
        })
    }

    fn repair(&self, batch: Arc<RenewBatch>) -> Answer<Vec<Renewed>> {
        self.reach("repair", move |s| {
            Ok(scripts::renew_or_repair(s, &batch, true))
        })
    }

    fn raise_fence(&self, keys: &[Arc<Keys>], token: u64) -> Answer<u64> {
        let keys = keys.to_vec();
        self.reach("raise_fence", move |s| {
            scripts::raise_fence(s, &keys, token)
        })
    }

    fn force_release(&self, keys: &Arc<Keys>) -> Answer<bool> {
        let (landed, keys) = (self.forced(keys), Arc::clone(keys));
        self.reach("force_release", move |s| {
            landed();
            scripts::force_release(s, &keys)
        })
    }

    fn status(&self, keys: &Arc<Keys>) -> Answer<NodeLockState> {
        let keys = Arc::clone(keys);
        self.reach("status", move |s| scripts::status(s, &keys))
    }
}
