//! The election on name 0: a candidate whose hold of the lock is won
//! proclaims its record (holder, term = the hold's fencing token) on every
//! node (`proclaim.lua`), and leads once a quorum wrote it (the quorum
//! rule, `Decision::of`); it is leader while its hold is valid
//! (`Leadership::is_leader`). A campaign whose proclaim cannot reach a
//! quorum releases its hold. The observer reads the leader from every
//! node (`leader.lua`) and decides with the real `quorum::agree`, stopping
//! at a leader or a vacancy as `leader::read` does.

use std::sync::Arc;

use crate::node::{Record, Seen};
use crate::quorum::{agree, Agreement, Decision};

use super::world::{Body, Holder, Msg, Mutation, Params, Phase, State, OBSERVER};

/// How a node answered a proclaim (`Proclaimed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Wrote {
    Written,
    NotHeld,
    Superseded,
}

/// A node's answer to a read of the leader (`Seen`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum View {
    Vacant,
    Unproclaimed,
    Leads(Rec),
}

/// A leader's record on a node: its hold and term (revision 1, the
/// campaign's value).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Rec {
    pub(crate) holder: Holder,
    pub(crate) term: u64,
}

/// Where one candidate's campaign stands, for its current attempt.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Lead {
    None,
    /// Proclaiming its record of `term`; per node, written (`Some(true)`),
    /// not (`Some(false)`: not held there, superseded, failed), pending.
    Proclaiming {
        attempt: u8,
        term: u64,
        answers: Vec<Option<bool>>,
    },
    /// A leadership of `term` (the campaign returned).
    Leading {
        attempt: u8,
        term: u64,
    },
}

/// The observer: its reads of the leader and what it reported.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub(crate) struct Observer {
    /// Reads started (the current one's number).
    pub(crate) reads: u8,
    /// The current read's answers by node (`None`: pending), or no read
    /// in flight.
    pub(crate) answers: Option<Vec<Option<View>>>,
    /// The largest term of a leadership made before the current read
    /// began.
    pub(crate) floor: u64,
    /// The largest term reported.
    pub(crate) last: Option<u64>,
    /// A read reported a term older than one reported before.
    pub(crate) older: bool,
    /// A read reported a term older than a leadership made before it
    /// began.
    pub(crate) behind: bool,
}

/// The election's state.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Vote {
    /// Per client.
    pub(crate) lead: Vec<Lead>,
    /// The largest term of a leadership so far.
    pub(crate) top: u64,
    /// A leadership was made with a term not above an earlier one's.
    pub(crate) stale_term: bool,
    pub(crate) observer: Observer,
}

impl Vote {
    pub(crate) fn new(clients: usize) -> Self {
        Self {
            lead: vec![Lead::None; clients],
            top: 0,
            stale_term: false,
            observer: Observer::default(),
        }
    }
}

/// A record as the real code holds it.
fn record(r: Rec) -> Record {
    Record {
        holder: format!("c{}#{}", r.holder.client, r.holder.attempt).into(),
        term: r.term,
        rev: 1,
        value: Arc::from("v"),
    }
}

fn seen(v: View) -> Seen {
    match v {
        View::Vacant => Seen::Vacant,
        View::Unproclaimed => Seen::Unproclaimed(None),
        View::Leads(r) => Seen::Leads(record(r), None),
    }
}

impl Params {
    /// Whether client `c` is leader now (`Leadership::is_leader`: its
    /// hold valid; under [`Mutation::LeaderIgnoresExpiry`], held).
    pub(super) fn leads(&self, s: &State, c: usize) -> bool {
        let cl = &s.clients[c];
        let valid = match cl.phase {
            Phase::Held { valid_until, .. } | Phase::Renewing { valid_until, .. } => {
                s.now < valid_until || self.mutated(Mutation::LeaderIgnoresExpiry)
            }
            _ => false,
        };
        valid
            && matches!(s.vote.lead.get(c), Some(Lead::Leading { attempt, .. }) if *attempt == cl.attempt)
    }

    /// A won hold of client `c` with `token` proclaims its record.
    pub(super) fn proclaim(&self, s: &mut State, c: usize, token: u64) {
        let token = if self.mutated(Mutation::TermIsRevision) {
            1
        } else {
            token
        };
        s.vote.lead[c] = Lead::Proclaiming {
            attempt: s.clients[c].attempt,
            term: token,
            answers: vec![None; self.nodes],
        };
        for i in 0..self.nodes {
            self.call(s, c, i, Body::Proclaim { term: token });
        }
    }

    /// Node `m.node` runs `proclaim.lua` or `leader.lua` for `m`.
    pub(super) fn node_elects(s: &mut State, m: Msg) -> Option<Body> {
        let node = &mut s.nodes[usize::from(m.node)];
        let leases = &node.keys[0];
        match m.body {
            Body::Proclaim { term } => {
                let holder = Holder {
                    client: m.client,
                    attempt: m.attempt,
                };
                let wrote = if !leases.iter().any(|l| l.holder == holder) {
                    Wrote::NotHeld
                } else if node.record.is_some_and(|r| r.term > term) {
                    Wrote::Superseded
                } else {
                    node.record = Some(Rec { holder, term });
                    Wrote::Written
                };
                Some(Body::Proclaimed(wrote))
            }
            Body::Read => Some(Body::Seen(if leases.is_empty() {
                View::Vacant
            } else {
                match node.record {
                    Some(r) if leases.iter().any(|l| l.holder == r.holder) => View::Leads(r),
                    _ => View::Unproclaimed,
                }
            })),
            _ => None,
        }
    }

    /// A candidate reads a proclaim's answer, or the observer a read's.
    pub(super) fn elector_reads(&self, s: &mut State, m: Msg) {
        let n = usize::from(m.node);
        match m.body {
            Body::Seen(v) if m.client == OBSERVER => {
                let o = &mut s.vote.observer;
                if m.attempt == o.reads {
                    if let Some(answers) = &mut o.answers {
                        answers[n] = Some(v);
                        self.read_step(s, false);
                    }
                }
            }
            Body::Proclaimed(w) => {
                let c = usize::from(m.client);
                if let Some(Lead::Proclaiming {
                    attempt, answers, ..
                }) = s.vote.lead.get_mut(c)
                {
                    if *attempt == m.attempt && answers[n].is_none() {
                        answers[n] = Some(w == Wrote::Written);
                        self.proclaim_step(s, c);
                    }
                }
            }
            _ => {}
        }
    }

    /// The proclaim's verdict so far (`leader::proclaim`: written on a
    /// quorum, by the quorum rule): a leadership, a failed campaign (its
    /// hold released), or still open.
    pub(super) fn proclaim_step(&self, s: &mut State, c: usize) {
        let Some(Lead::Proclaiming {
            attempt,
            term,
            answers,
        }) = s.vote.lead.get(c).cloned()
        else {
            return;
        };
        let written = answers.iter().filter(|a| **a == Some(true)).count();
        let pending = answers.iter().filter(|a| a.is_none()).count();
        match Decision::of(written, pending, self.required) {
            Decision::Open => {}
            Decision::Won => {
                // The campaign returns a leadership; one whose hold is no
                // longer valid (released, lost, paused past it) is never
                // leader, and its term is not a leader's.
                s.vote.lead[c] = Lead::Leading { attempt, term };
                if self.leads(s, c) {
                    let v = &mut s.vote;
                    v.stale_term |= term <= v.top;
                    v.top = v.top.max(term);
                }
            }
            Decision::Lost => {
                s.vote.lead[c] = Lead::None;
                self.release(s, c);
            }
        }
    }

    /// The candidate stops waiting for its proclaim's answers.
    pub(super) fn proclaim_times_out(&self, s: &mut State, c: usize) {
        if let Some(Lead::Proclaiming { answers, .. }) = s.vote.lead.get_mut(c) {
            answers
                .iter_mut()
                .for_each(|a| *a = Some(a.unwrap_or(false)));
            self.proclaim_step(s, c);
        }
    }

    /// The observer starts a read.
    pub(super) fn observe(&self, s: &mut State) {
        let o = &mut s.vote.observer;
        o.reads += 1;
        o.answers = Some(vec![None; self.nodes]);
        o.floor = s.vote.top;
        let attempt = o.reads;
        for i in 0..self.nodes {
            s.send(Msg {
                client: OBSERVER,
                node: u8::try_from(i).unwrap_or(u8::MAX),
                to_node: true,
                attempt,
                body: Body::Read,
            });
        }
    }

    /// Whether the observer's read waits for answers.
    pub(super) fn read_pending(s: &State) -> bool {
        s.vote.observer.answers.is_some()
    }

    /// The read's verdict (`quorum::agree`): decided at a leader or a
    /// vacancy, or once nothing is pending (`gave_up`: the rest failed).
    pub(super) fn read_step(&self, s: &mut State, gave_up: bool) {
        let o = &mut s.vote.observer;
        let Some(answers) = &o.answers else {
            return;
        };
        let seen: Vec<Option<Seen>> = answers.iter().map(|a| a.map(seen)).collect();
        let refs: Vec<Option<&Seen>> = seen.iter().map(Option::as_ref).collect();
        let required = if self.mutated(Mutation::ObserverQuorumOne) {
            1
        } else {
            self.required
        };
        let verdict = agree(&refs, required);
        let done = gave_up
            || !answers.contains(&None)
            || matches!(verdict, Agreement::Leader(_) | Agreement::Vacant);
        if !done {
            return;
        }
        if let Agreement::Leader(r) = verdict {
            o.older |= o.last.is_some_and(|l| r.term < l);
            o.behind |= r.term < o.floor;
            o.last = Some(o.last.map_or(r.term, |l| l.max(r.term)));
        }
        o.answers = None;
    }
}
