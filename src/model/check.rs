//! The world as a stateright `Model`: the actions of the environment
//! (time, clocks, restarts, delivery and loss of messages), of the clients
//! (attempt, give up waiting, re-send, renew, release), of the operator
//! (`force_unlock`) and of the election's observer (read, give up); the
//! properties are `props`'.

use stateright::{Model, Property};

use super::election::{Lead, Vote};

use crate::node::Again;

use super::world::{Ans, Body, Client, Msg, Node, Params, Phase, Ren, Restart, State};

/// One step of the world.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Action {
    /// Global time advances one tick (clients that take no step meanwhile
    /// are paused).
    Tick,
    /// Node `n`'s clock steps ahead, as far as the world lets it.
    Lead(u8),
    /// Node `n` restarts; its connections break (their messages are lost).
    Restart(u8),
    /// The first message of a link arrives: the node runs it, and its
    /// answer reaches the client.
    Deliver(Msg),
    /// The same, but the answer is lost (the connection broke after the
    /// call ran).
    DeliverLost(Msg),
    /// A message is lost.
    Lose(Msg),
    /// Client `c` starts an attempt on name `name`.
    Start(u8, u8),
    /// Client `c` stops waiting: every pending answer failed (its node
    /// timeout).
    Timeout(u8),
    /// Client `c` sends its acquire to node `n` again (the re-send rule).
    Resend(u8, u8),
    /// Client `c`'s watchdog starts a renewal wave.
    Renew(u8),
    /// Client `c` releases its hold.
    Release(u8),
    /// The operator asks `force_unlock` of name `name`.
    Force(u8),
    /// The observer starts a quorum read of the leader.
    Observe,
    /// The observer stops waiting: every pending answer failed.
    GiveUp,
}

/// Whether client `c` believes its hold valid now (`is_held()`).
pub(super) fn believes(s: &State, c: usize) -> Option<u8> {
    match &s.clients[c].phase {
        Phase::Held {
            name, valid_until, ..
        }
        | Phase::Renewing {
            name, valid_until, ..
        } if s.now < *valid_until => Some(*name),
        _ => None,
    }
}

fn idx(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
}

impl Model for Params {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        let names = usize::from(self.names);
        vec![State {
            now: 0,
            nodes: self
                .counters
                .iter()
                .map(|c| Node {
                    keys: vec![Vec::new(); names],
                    fence: vec![*c; names],
                    lead: 0,
                    record: None,
                })
                .collect(),
            clients: vec![
                Client {
                    attempt: 0,
                    name: 0,
                    phase: Phase::Idle,
                    lost: vec![false; self.nodes],
                    later: vec![false; self.nodes],
                };
                self.readers.len()
            ],
            net: Vec::new(),
            losses: 0,
            restarts: 0,
            top: vec![0; names],
            stale_token: false,
            acked: Vec::new(),
            forces: 0,
            // Allocated only where used: a world's states are cloned often.
            forced: if self.forces > 0 {
                vec![false; self.nodes]
            } else {
                Vec::new()
            },
            broken: Vec::new(),
            held_at_force: Vec::new(),
            deleted: Vec::new(),
            served: false,
            vote: Vote::new(if self.election { self.readers.len() } else { 0 }),
        }]
    }

    fn actions(&self, s: &State, actions: &mut Vec<Action>) {
        if s.now < self.horizon {
            actions.push(Action::Tick);
        }
        let skewed = s.nodes.iter().filter(|n| n.lead > 0).count();
        for n in 0..self.nodes {
            if s.nodes[n].lead < self.lead && skewed < usize::from(self.skewed) {
                actions.push(Action::Lead(idx(n)));
            }
            if s.restarts < self.restarts {
                actions.push(Action::Restart(idx(n)));
            }
        }
        for (i, m) in s.net.iter().enumerate() {
            if s.head(i) {
                actions.push(Action::Deliver(*m));
                if s.losses < self.losses {
                    actions.push(Action::DeliverLost(*m));
                }
            }
            if s.losses < self.losses && (i == 0 || s.net[i - 1] != *m) {
                actions.push(Action::Lose(*m));
            }
        }
        if s.forces < self.forces && (!self.force_quiet || s.net.is_empty()) {
            for name in 0..self.names {
                actions.push(Action::Force(name));
            }
        }
        if Self::read_pending(s) {
            if self.timeouts {
                actions.push(Action::GiveUp);
            }
        } else if s.vote.observer.reads < self.reads {
            actions.push(Action::Observe);
        }
        for (c, cl) in s.clients.iter().enumerate() {
            let c8 = idx(c);
            let proclaiming = matches!(
                s.vote.lead.get(c),
                Some(Lead::Proclaiming { answers, .. }) if answers.contains(&None)
            );
            let waiting = proclaiming
                || match &cl.phase {
                    Phase::Acquiring { replies, .. } => replies.contains(&Ans::Pending),
                    Phase::Fencing { pending, .. } => pending.contains(&true),
                    Phase::Renewing { answers, .. } => answers.contains(&Ren::Pending),
                    Phase::Idle | Phase::Held { .. } => false,
                };
            if waiting && self.timeouts {
                actions.push(Action::Timeout(c8));
            }
            match &cl.phase {
                Phase::Idle if cl.attempt < self.attempts => {
                    for name in 0..self.names {
                        actions.push(Action::Start(c8, name));
                    }
                }
                Phase::Held {
                    valid_until, wave, ..
                } => {
                    if self.renew && *wave < s.now && s.now < *valid_until {
                        actions.push(Action::Renew(c8));
                    }
                    if self.release {
                        actions.push(Action::Release(c8));
                    }
                }
                _ => {}
            }
            for n in 0..self.nodes {
                if self.may_resend(s, c, n) {
                    actions.push(Action::Resend(c8, idx(n)));
                }
            }
        }
    }

    fn next_state(&self, last: &State, action: Action) -> Option<State> {
        let mut s = last.clone();
        match action {
            Action::Tick => {
                s.now += 1;
                s.expire();
            }
            Action::Lead(n) => {
                s.nodes[usize::from(n)].lead = self.lead;
                s.expire();
            }
            Action::Restart(n) => {
                s.restarts += 1;
                s.net.retain(|m| m.node != n);
                if self.restart == Restart::EmptyAtOnce {
                    let node = &mut s.nodes[usize::from(n)];
                    node.keys.iter_mut().for_each(Vec::clear);
                    node.fence.iter_mut().for_each(|f| *f = 0);
                    node.record = None;
                }
            }
            Action::Deliver(m) | Action::DeliverLost(m) => {
                let i = s.net.iter().position(|o| *o == m)?;
                s.net.remove(i);
                let reply = self.node_runs(&mut s, m);
                if let (Some(r), Action::Deliver(_)) = (reply, &action) {
                    self.client_reads(&mut s, r);
                }
                if matches!(action, Action::DeliverLost(_)) {
                    s.losses += 1;
                }
            }
            Action::Lose(m) => {
                let i = s.net.iter().position(|o| *o == m)?;
                s.net.remove(i);
                s.losses += 1;
            }
            Action::Start(c, name) => {
                let c = usize::from(c);
                let cl = &mut s.clients[c];
                cl.attempt += 1;
                cl.name = name;
                cl.lost = vec![false; self.nodes];
                cl.later = vec![false; self.nodes];
                cl.phase = Phase::Acquiring {
                    name,
                    start: s.now,
                    floor: s.top[usize::from(name)],
                    replies: vec![Ans::Pending; self.nodes],
                };
                let reader = self.readers[c];
                for n in 0..self.nodes {
                    self.call(&mut s, c, n, Body::Acquire { name, reader });
                }
            }
            Action::Timeout(c) => {
                self.time_out(&mut s, usize::from(c));
                self.proclaim_times_out(&mut s, usize::from(c));
            }
            Action::Resend(c, n) => {
                let (c, n) = (usize::from(c), usize::from(n));
                s.clients[c].lost[n] = false;
                let (name, reader) = (s.clients[c].name, self.readers[c]);
                self.call(&mut s, c, n, Body::Acquire { name, reader });
            }
            Action::Renew(c) => {
                let c = usize::from(c);
                let Phase::Held {
                    name,
                    token,
                    valid_until,
                    ..
                } = s.clients[c].phase
                else {
                    return None;
                };
                s.clients[c].phase = Phase::Renewing {
                    name,
                    token,
                    valid_until,
                    wave: s.now,
                    answers: vec![Ren::Pending; self.nodes],
                };
                for n in 0..self.nodes {
                    self.call(&mut s, c, n, Body::Renew { name });
                }
            }
            Action::Release(c) => {
                let c = usize::from(c);
                if !matches!(s.clients[c].phase, Phase::Held { .. }) {
                    return None;
                }
                self.release(&mut s, c);
            }
            Action::Force(name) => self.force(&mut s, name),
            Action::Observe => self.observe(&mut s),
            Action::GiveUp => self.read_step(&mut s, true),
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        super::props::all()
    }
}

impl Params {
    /// Client `c` stops waiting for the answers still pending.
    fn time_out(&self, s: &mut State, c: usize) {
        let cl = &mut s.clients[c];
        match &mut cl.phase {
            Phase::Acquiring { replies, .. } => {
                for (n, a) in replies.iter_mut().enumerate() {
                    if *a == Ans::Pending {
                        *a = Ans::Failed;
                        // Kept only where the re-send rule may send it.
                        cl.lost[n] = self.resend(false) != Again::Stop;
                    }
                }
                self.decide(s, c);
            }
            Phase::Fencing { pending, .. } => {
                pending.iter_mut().for_each(|p| *p = false);
                self.fence_step(s, c);
            }
            Phase::Renewing { answers, .. } => {
                for a in answers.iter_mut() {
                    if *a == Ren::Pending {
                        *a = Ren::Failed;
                    }
                }
                self.renewal_end(s, c);
            }
            Phase::Idle | Phase::Held { .. } => {}
        }
    }
}
