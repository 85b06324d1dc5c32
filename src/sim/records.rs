//! The election's leader records as the nodes hold them (election mode):
//! each node tells the tracker after every call it runs and every empty
//! restart (`NodeCtl::on_change`), the only ways a record changes, so the
//! tracker sees every record each node held, at the instant it held it.
//! It logs each change (`Ev::Record`) and, the first time one record
//! (holder, term, revision, value) is on a quorum of the nodes at once,
//! `Ev::Held`: the ground truth of [`Invariant::ObservedUnheld`].
//!
//! [`Invariant::ObservedUnheld`]: super::checker::Invariant::ObservedUnheld

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use super::checker::{Ev, Log, WORLD};
use super::net::NodeCtl;
use crate::node::Record;
use crate::sync::locked;
use crate::tests::fake::FakeNode;

/// The records of one election on every node.
pub(crate) struct Records {
    log: Log,
    /// The record's key on the nodes.
    key: String,
    quorum: usize,
    /// What each node holds now, and every record that was on a quorum.
    state: Mutex<(Vec<Option<Record>>, HashSet<Record>)>,
}

impl Records {
    /// Tracks the record at `key` on `nodes` (a quorum is a majority).
    pub(crate) fn watch(log: &Log, key: String, nodes: &[Arc<NodeCtl>]) -> Arc<Self> {
        let records = Arc::new(Self {
            log: log.clone(),
            key,
            quorum: nodes.len() / 2 + 1,
            state: Mutex::new((vec![None; nodes.len()], HashSet::new())),
        });
        for (i, n) in nodes.iter().enumerate() {
            let r = Arc::clone(&records);
            n.on_change(Arc::new(move |fake: &FakeNode| r.note(i, fake)));
        }
        records
    }

    /// Node `node` may have changed: reads its record.
    fn note(&self, node: usize, fake: &FakeNode) {
        let now = fake.record(&self.key);
        let mut s = locked(&self.state);
        let (held, reached) = &mut *s;
        if held[node] == now {
            return;
        }
        held[node].clone_from(&now);
        self.log.push(
            WORLD,
            Ev::Record {
                node,
                record: now.as_ref().map(|r| (r.term, r.rev, r.value.to_string())),
            },
        );
        let Some(r) = now else { return };
        let on = held.iter().filter(|h| h.as_ref() == Some(&r)).count();
        if on >= self.quorum && !reached.contains(&r) {
            self.log.push(
                WORLD,
                Ev::Held {
                    term: r.term,
                    rev: r.rev,
                    value: r.value.to_string(),
                },
            );
            reached.insert(r);
        }
    }
}
