//! The operator's `force_unlock`: a delete of the name on every node,
//! whoever holds it (`force_release.lua`: the lock's key deleted, its fence
//! counter left as it is), each delete in flight like any call. Every
//! attempt begun when it is asked, or when one of its deletes runs, is
//! broken by it (no longer owed exclusion, as the simulator's checker
//! excuses it); the holds that held when it was asked are the ones it must
//! not see undone.

use super::world::{Body, Holder, Msg, Params, Phase, State, OPERATOR};

/// Adds `x` to the sorted set `v`.
fn put<T: Ord>(v: &mut Vec<T>, x: T) {
    if let Err(i) = v.binary_search(&x) {
        v.insert(i, x);
    }
}

impl Params {
    /// Client `c`'s current attempt, if it has begun one that is not over.
    fn attempt_of(s: &State, c: usize) -> Option<Holder> {
        let cl = &s.clients[c];
        (cl.phase != Phase::Idle).then(|| Holder {
            client: u8::try_from(c).unwrap_or(u8::MAX),
            attempt: cl.attempt,
        })
    }

    /// Every attempt begun and not over is broken.
    fn break_holds(s: &mut State) {
        for c in 0..s.clients.len() {
            if let Some(h) = Self::attempt_of(s, c) {
                put(&mut s.broken, h);
            }
        }
    }

    /// The operator asks `force_unlock(name)`: a delete to every node.
    pub(super) fn force(&self, s: &mut State, name: u8) {
        s.forces += 1;
        for c in 0..s.clients.len() {
            if matches!(
                s.clients[c].phase,
                Phase::Held { .. } | Phase::Renewing { .. }
            ) {
                if let Some(h) = Self::attempt_of(s, c) {
                    put(&mut s.held_at_force, h);
                }
            }
        }
        Self::break_holds(s);
        for n in 0..self.nodes {
            let n8 = u8::try_from(n).unwrap_or(u8::MAX);
            if self.force_atomic {
                self.force_lands(s, n8, name);
                continue;
            }
            s.send(Msg {
                client: OPERATOR,
                node: n8,
                to_node: true,
                attempt: s.forces,
                body: Body::Force { name },
            });
        }
    }

    /// A forced delete of `name` runs on node `n`.
    pub(super) fn force_lands(&self, s: &mut State, n: u8, name: u8) {
        let leases = std::mem::take(&mut s.nodes[usize::from(n)].keys[usize::from(name)]);
        for l in leases {
            put(&mut s.deleted, (n, l.holder));
        }
        s.forced[usize::from(n)] = true;
        Self::break_holds(s);
    }

    /// Whether a hold that held when a `force_unlock` was asked has its
    /// key alive on a quorum of nodes once the delete ran on every node
    /// (the break undone).
    pub(super) fn undone(&self, s: &State) -> bool {
        !s.forced.is_empty()
            && s.forced.iter().all(|f| *f)
            && s.held_at_force.iter().any(|h| {
                let on = s
                    .nodes
                    .iter()
                    .filter(|node| node.keys.iter().flatten().any(|l| l.holder == *h))
                    .count();
                on >= self.required
            })
    }

    /// Whether a key a forced delete removed is alive again on its node.
    pub(super) fn recreated(s: &State) -> bool {
        s.deleted.iter().any(|(n, h)| {
            s.nodes[usize::from(*n)]
                .keys
                .iter()
                .flatten()
                .any(|l| l.holder == *h)
        })
    }
}
