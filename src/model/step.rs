//! What a node does with a call (the scripts, abstracted), and what a
//! client does with the answers: every decision made by the real verdicts
//! of `quorum` (`Tally`, `Decision`, `FenceTally`, `valid_until`,
//! `RenewalTally`) and the real re-send rule (`Resend::again`).

use crate::error::{NodeError, NodeErrorKind};
use crate::node::{Again, Grant, Renewed, Resend};
use crate::quorum::{self, Decision, FenceTally, RenewalTally, Tally, Times, Verdict};

use super::world::{
    dur, Ans, Body, Design, Holder, Lease, Msg, Mutation, Params, Phase, Ren, RenewCode, State,
};

impl Params {
    /// Node `m.node` runs the call `m`; its answer, if it makes one.
    pub(super) fn node_runs(&self, s: &mut State, m: Msg) -> Option<Msg> {
        let n = usize::from(m.node);
        let clock = s.clock(n);
        let me = Holder {
            client: m.client,
            attempt: m.attempt,
        };
        let expiry = clock.saturating_add(self.lease);
        let answer = |body| Msg {
            to_node: false,
            body,
            ..m
        };
        match m.body {
            Body::Force { name } => {
                self.force_lands(s, m.node, name);
                return None;
            }
            Body::Proclaim { .. } | Body::Read => return Self::node_elects(s, m).map(answer),
            _ => {}
        }
        let node = &mut s.nodes[n];
        let reply = match m.body {
            Body::Acquire { name, reader } => {
                let leases = &mut node.keys[usize::from(name)];
                if self.free(leases, me, reader) {
                    leases.retain(|l| l.holder != me);
                    leases.push(Lease {
                        holder: me,
                        reader,
                        expiry,
                    });
                    leases.sort();
                    let counter = &mut node.fence[usize::from(name)];
                    *counter += 1;
                    Some(Body::Grant(Some(*counter)))
                } else {
                    Some(Body::Grant(None))
                }
            }
            Body::Raise { name, token } => {
                let counter = &mut node.fence[usize::from(name)];
                *counter = (*counter).max(token);
                Some(Body::Raised(*counter))
            }
            Body::Renew { name } => {
                let leases = &mut node.keys[usize::from(name)];
                let code = if let Some(l) = leases.iter_mut().find(|l| l.holder == me) {
                    l.expiry = expiry;
                    RenewCode::Extended
                } else if leases.iter().any(|l| !l.reader) {
                    RenewCode::Conflict
                } else {
                    RenewCode::Missing
                };
                leases.sort();
                Some(Body::Renewal(code))
            }
            Body::Repair { name, token } => {
                let leases = &mut node.keys[usize::from(name)];
                if let Some(l) = leases.iter_mut().find(|l| l.holder == me) {
                    l.expiry = expiry;
                } else if self.free(leases, me, false) {
                    leases.push(Lease {
                        holder: me,
                        reader: false,
                        expiry,
                    });
                    let counter = &mut node.fence[usize::from(name)];
                    *counter = (*counter).max(token);
                }
                leases.sort();
                None
            }
            Body::Release { name, token } => {
                node.keys[usize::from(name)].retain(|l| l.holder != me);
                let counter = &mut node.fence[usize::from(name)];
                *counter = (*counter).max(token);
                Some(Body::Released)
            }
            Body::Grant(_)
            | Body::Raised(_)
            | Body::Renewal(_)
            | Body::Released
            | Body::Force { .. }
            | Body::Proclaim { .. }
            | Body::Proclaimed(_)
            | Body::Read
            | Body::Seen(_) => None,
        };
        reply.map(answer)
    }

    /// Whether a node grants `me` beside `leases` (its grants alive).
    fn free(&self, leases: &[Lease], me: Holder, reader: bool) -> bool {
        let mut others = leases.iter().filter(|l| l.holder != me);
        match self.design {
            Design::Counter => others.count() < self.permits.unwrap_or(1),
            Design::Locks if reader => others.all(|l| l.reader),
            Design::Locks => others.next().is_none(),
        }
    }

    /// Client `m.client` reads the answer `m`.
    pub(super) fn client_reads(&self, s: &mut State, m: Msg) {
        if matches!(m.body, Body::Proclaimed(_) | Body::Seen(_)) {
            return self.elector_reads(s, m);
        }
        let c = usize::from(m.client);
        let n = usize::from(m.node);
        if m.body == Body::Released {
            let h = Holder {
                client: m.client,
                attempt: m.attempt,
            };
            if !s.acked.contains(&(m.node, h)) {
                s.acked.push((m.node, h));
                s.acked.sort();
            }
            return;
        }
        if m.attempt != s.clients[c].attempt {
            return;
        }
        match (&mut s.clients[c].phase, m.body) {
            (Phase::Acquiring { replies, .. }, Body::Grant(g)) if replies[n] == Ans::Pending => {
                replies[n] = g.map_or(Ans::Taken, Ans::Granted);
                self.decide(s, c);
            }
            (
                Phase::Fencing {
                    raised, pending, ..
                },
                Body::Raised(v),
            ) if pending[n] => {
                raised[n] = Some(v);
                pending[n] = false;
                self.fence_step(s, c);
            }
            (Phase::Renewing { answers, .. }, Body::Renewal(code))
                if answers[n] == Ren::Pending =>
            {
                answers[n] = match code {
                    RenewCode::Extended => Ren::Extended,
                    RenewCode::Missing => Ren::Missing,
                    RenewCode::Conflict => Ren::Conflict,
                };
                if !answers.contains(&Ren::Pending) {
                    self.renewal_end(s, c);
                }
            }
            _ => {}
        }
    }

    /// The client's answers as the real tallies read them.
    fn grants(replies: &[Ans]) -> Vec<Option<Result<Grant, NodeError>>> {
        replies
            .iter()
            .map(|a| match a {
                Ans::Pending => None,
                Ans::Granted(t) => Some(Ok(Grant::Granted(*t))),
                Ans::Taken => Some(Ok(Grant::Taken(None, 0))),
                Ans::Failed => Some(Err(NodeError::new(NodeErrorKind::Timeout, "no answer"))),
            })
            .collect()
    }

    /// An acquisition's verdict so far (`Tally::decide`): won, lost, or
    /// still open.
    pub(super) fn decide(&self, s: &mut State, c: usize) {
        let Phase::Acquiring {
            name,
            start,
            floor,
            replies,
        } = s.clients[c].phase.clone()
        else {
            return;
        };
        let reader = self.readers[c];
        let grants = Self::grants(&replies);
        match Tally::of(&grants).decide(self.quorum(reader)) {
            Decision::Open => {}
            Decision::Lost => self.roll_back(s, c, name, &replies),
            Decision::Won => {
                let token = replies
                    .iter()
                    .filter_map(|a| match a {
                        Ans::Granted(t) => Some(*t),
                        _ => None,
                    })
                    .max()
                    .unwrap_or(0);
                let fenced = !reader && self.design == Design::Locks;
                if !fenced || FenceTally::shown_by(&grants, token, self.required) {
                    return self.finish(s, c, (name, start, floor, token), &replies);
                }
                if self.mutated(Mutation::OneTryFence) {
                    // Raised once, in the background; not waited for.
                    for (i, a) in replies.iter().enumerate() {
                        if matches!(a, Ans::Granted(t) if *t < token) {
                            self.call(s, c, i, Body::Raise { name, token });
                        }
                    }
                    return self.finish(s, c, (name, start, floor, token), &replies);
                }
                s.clients[c].phase = Phase::Fencing {
                    name,
                    start,
                    floor,
                    token,
                    replies: replies.clone(),
                    raised: vec![None; replies.len()],
                    pending: vec![false; replies.len()],
                    round: 0,
                };
                self.fence_step(s, c);
            }
        }
    }

    /// The fence rule's next step: shown on a quorum (the hold is won),
    /// the next round of raises, or missed (rolled back).
    pub(super) fn fence_step(&self, s: &mut State, c: usize) {
        let Phase::Fencing {
            name,
            start,
            floor,
            token,
            replies,
            raised,
            pending,
            round,
        } = s.clients[c].phase.clone()
        else {
            return;
        };
        let grants = Self::grants(&replies);
        let mut tally = FenceTally::of(&grants, token);
        for (i, r) in raised.iter().enumerate() {
            if let Some(v) = r {
                tally.raised(i, *v);
            }
        }
        if tally.shown(self.required) {
            return self.finish(s, c, (name, start, floor, token), &replies);
        }
        if pending.contains(&true) {
            return;
        }
        let mut round = round;
        while round < 2 {
            round += 1;
            let targets = tally.targets(&grants, round == 1);
            if targets.contains(&true) {
                for (i, t) in targets.iter().enumerate() {
                    if *t {
                        self.call(s, c, i, Body::Raise { name, token });
                    }
                }
                s.clients[c].phase = Phase::Fencing {
                    name,
                    start,
                    floor,
                    token,
                    replies,
                    raised,
                    pending: targets,
                    round,
                };
                return;
            }
        }
        self.roll_back(s, c, name, &replies);
    }

    /// Won and fenced: held if validity is left (`quorum::valid_until`),
    /// else rolled back.
    fn finish(&self, s: &mut State, c: usize, won: (u8, u8, u64, u64), replies: &[Ans]) {
        let (name, start, floor, token) = won;
        let now = self.at(s.now);
        let Some(until) = quorum::valid_until(self.at(start), now, dur(self.lease), self.drift())
        else {
            return self.roll_back(s, c, name, replies);
        };
        let slot = usize::from(name);
        if !self.readers[c] && self.design == Design::Locks {
            s.stale_token |= token <= floor;
            s.top[slot] = s.top[slot].max(token);
        }
        s.clients[c].phase = Phase::Held {
            name,
            token,
            valid_until: self.tick_of(until),
            // Only a world that renews tells waves apart.
            wave: if self.renew { s.now } else { 0 },
        };
        s.served = true;
        if self.election && !self.readers[c] {
            self.proclaim(s, c, token);
        }
    }

    /// Releases the attempt's grants on every node that did not answer
    /// "taken" (granted, failed, or not answered), and ends the attempt.
    /// Under [`Mutation::NoRollback`], nowhere.
    fn roll_back(&self, s: &mut State, c: usize, name: u8, replies: &[Ans]) {
        for (i, a) in replies.iter().enumerate() {
            if *a != Ans::Taken && !self.mutated(Mutation::NoRollback) {
                self.call(s, c, i, Body::Release { name, token: 0 });
            }
        }
        s.clients[c].phase = Phase::Idle;
    }

    /// Client `c` makes a call of its current hold to node `i`.
    pub(super) fn call(&self, s: &mut State, c: usize, i: usize, body: Body) {
        let cl = &mut s.clients[c];
        // A later call of the hold, after the loss was seen (the only
        // calls the re-send rule is asked about).
        cl.later[i] |= cl.lost[i] && matches!(body, Body::Acquire { .. } | Body::Release { .. });
        let m = Msg {
            client: u8::try_from(c).unwrap_or(u8::MAX),
            node: u8::try_from(i).unwrap_or(u8::MAX),
            to_node: true,
            attempt: cl.attempt,
            body,
        };
        s.send(m);
    }

    /// The re-send rule for an acquire whose reply was lost (the
    /// connection broke: it may have run), `superseded` when a later call
    /// of its hold was made to the node. An acquire is `Resend::Never`;
    /// under [`Mutation::ResendAcquire`], one that may be sent again, with
    /// no order of the hold's calls.
    pub(super) fn resend(&self, superseded: bool) -> Again {
        if self.mutated(Mutation::ResendAcquire) {
            Resend::AfterBrokenConnection.again(false, true, true, || false)
        } else {
            Resend::Never.again(false, true, true, || superseded)
        }
    }

    /// Whether client `c` may send its acquire to node `i` again now.
    pub(super) fn may_resend(&self, s: &State, c: usize, i: usize) -> bool {
        let cl = &s.clients[c];
        cl.lost[i] && self.resend(cl.later[i]) == Again::Send
    }

    /// The end of a renewal wave: the real verdict (`RenewalTally`), the
    /// nodes found empty repaired when renewed.
    pub(super) fn renewal_end(&self, s: &mut State, c: usize) {
        let Phase::Renewing {
            name,
            token,
            valid_until,
            wave,
            answers,
        } = s.clients[c].phase.clone()
        else {
            return;
        };
        let tally = RenewalTally::of(answers.iter().map(|a| match a {
            Ren::Extended => Some(Renewed::Extended),
            Ren::Missing => Some(Renewed::Missing),
            Ren::Conflict => Some(Renewed::Conflict),
            Ren::Pending | Ren::Failed => None,
        }));
        let now = self.at(s.now);
        let times = Times {
            valid_until: self.at(valid_until),
            lapsed: valid_until <= s.now,
            validity: quorum::valid_until(self.at(wave), now, dur(self.lease), self.drift()),
            next_tick: self.at(s.now.saturating_add(1)),
        };
        let held = |valid_until| Phase::Held {
            name,
            token,
            valid_until,
            wave,
        };
        let verdict = tally.verdict(self.quorum(self.readers[c]), &times);
        // Repaired only when renewed on a quorum (which a quorum that can
        // no longer confirm the hold never is); under
        // [`Mutation::RepairUnconfirmed`], whatever the verdict.
        let repair =
            matches!(verdict, Verdict::Renewed(_)) || self.mutated(Mutation::RepairUnconfirmed);
        if repair && !self.readers[c] {
            let empty: Vec<usize> = tally.empty().collect();
            for i in empty {
                self.call(s, c, i, Body::Repair { name, token });
            }
        }
        s.clients[c].phase = match verdict {
            Verdict::Renewed(until) => held(self.tick_of(until)),
            Verdict::Retry => held(valid_until),
            Verdict::Lost(_) => Phase::Idle,
        };
    }

    /// Client `c` releases its hold on every node (a reader's with token
    /// 0), and is idle.
    pub(super) fn release(&self, s: &mut State, c: usize) {
        let (Phase::Held { name, token, .. } | Phase::Renewing { name, token, .. }) =
            s.clients[c].phase
        else {
            return;
        };
        let token = if self.readers[c] { 0 } else { token };
        for n in 0..self.nodes {
            self.call(s, c, n, Body::Release { name, token });
        }
        s.clients[c].phase = Phase::Idle;
    }
}
