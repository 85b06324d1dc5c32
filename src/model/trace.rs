//! A path of the model as lines a person reads: each step's action, then
//! the world after it (time, each node's grants and counters, each
//! client's phase, how many messages are in flight).

use std::fmt::Write as _;

use stateright::Path;

use super::check::Action;
use super::election::Lead;
use super::world::{Ans, Body, Msg, Phase, Rec, State, View, OBSERVER, OPERATOR};

/// The path, one line per step.
pub(crate) fn show(path: &Path<State, Action>) -> String {
    let mut out = String::new();
    for (i, (state, action)) in path.clone().into_vec().into_iter().enumerate() {
        let _ = writeln!(out, "{i:>3}. {}", world(&state));
        if let Some(a) = action {
            let _ = writeln!(out, "     -> {}", act(&a));
        }
    }
    out
}

fn act(a: &Action) -> String {
    match a {
        Action::Tick => "tick".into(),
        Action::Lead(n) => format!("node {n}'s clock steps ahead"),
        Action::Restart(n) => format!("node {n} restarts"),
        Action::Deliver(m) => format!("deliver {} (and its answer)", msg(m)),
        Action::DeliverLost(m) => format!("deliver {}, its answer lost", msg(m)),
        Action::Lose(m) => format!("lose {}", msg(m)),
        Action::Start(c, name) => format!("client {c} starts an attempt on name {name}"),
        Action::Timeout(c) => format!("client {c} stops waiting"),
        Action::Resend(c, n) => format!("client {c} sends its acquire to node {n} again"),
        Action::Renew(c) => format!("client {c} renews"),
        Action::Release(c) => format!("client {c} releases"),
        Action::Force(name) => format!("the operator forces name {name} open (force_unlock)"),
        Action::Observe => "the observer reads the leader".into(),
        Action::GiveUp => "the observer stops waiting".into(),
    }
}

fn msg(m: &Msg) -> String {
    let who = format!("c{}#{}", m.client, m.attempt);
    let body = match m.body {
        Body::Acquire { name, reader } => {
            format!("acquire{} {name}", if reader { "(read)" } else { "" })
        }
        Body::Grant(Some(t)) => format!("granted, counter {t}"),
        Body::Grant(None) => "taken".into(),
        Body::Raise { name, token } => format!("raise fence {name} to {token}"),
        Body::Raised(v) => format!("raised, counter {v}"),
        Body::Renew { name } => format!("renew {name}"),
        Body::Renewal(code) => format!("renewal {code:?}"),
        Body::Repair { name, token } => format!("repair {name} (token {token})"),
        Body::Release { name, token } => format!("release {name} (token {token})"),
        Body::Released => "released".into(),
        Body::Force { name } => format!("force delete {name}"),
        Body::Proclaim { term } => format!("proclaim term {term}"),
        Body::Proclaimed(w) => format!("proclaimed: {w:?}"),
        Body::Read => "read the leader".into(),
        Body::Seen(View::Leads(r)) => format!("leads: {} term {}", rec(r), r.term),
        Body::Seen(v) => format!("{v:?}"),
    };
    let who = match m.client {
        OPERATOR => "operator".to_string(),
        OBSERVER => format!("observer#{}", m.attempt),
        _ => who,
    };
    if m.to_node {
        format!("{who} -> node {}: {body}", m.node)
    } else {
        format!("node {} -> {who}: {body}", m.node)
    }
}

fn rec(r: Rec) -> String {
    format!("c{}#{}", r.holder.client, r.holder.attempt)
}

fn world(s: &State) -> String {
    let mut out = format!("t={}", s.now);
    for (n, node) in s.nodes.iter().enumerate() {
        let _ = write!(out, " | n{n}");
        if node.lead > 0 {
            let _ = write!(out, "(+{})", node.lead);
        }
        let _ = write!(out, " fence {:?} [", node.fence);
        for (name, leases) in node.keys.iter().enumerate() {
            for l in leases {
                let r = if l.reader { "r" } else { "" };
                let h = l.holder;
                let _ = write!(out, " {name}:c{}#{}{r}<{}", h.client, h.attempt, l.expiry);
            }
        }
        out.push_str(" ]");
        if s.forced.get(n) == Some(&true) {
            out.push_str(" forced");
        }
        if let Some(r) = node.record {
            let _ = write!(out, " rec {} term {}", rec(r), r.term);
        }
    }
    for (c, cl) in s.clients.iter().enumerate() {
        let _ = write!(out, " | c{c}#{} {}", cl.attempt, phase(&cl.phase));
        match s.vote.lead.get(c).cloned().unwrap_or(Lead::None) {
            Lead::Proclaiming { term, .. } => {
                let _ = write!(out, ", proclaiming term {term}");
            }
            Lead::Leading { attempt, term } if attempt == cl.attempt && cl.phase != Phase::Idle => {
                let _ = write!(out, ", LEADS term {term}");
            }
            _ => {}
        }
    }
    let o = &s.vote.observer;
    if o.reads > 0 {
        let _ = write!(out, " | observer read {}", o.reads);
        if o.answers.is_some() {
            out.push_str(" (reading)");
        }
        if let Some(t) = o.last {
            let _ = write!(out, ", reported up to term {t}");
        }
        if o.older {
            out.push_str(", WENT BACK");
        }
        if o.behind {
            out.push_str(", BEHIND A LEADER MADE BEFORE ITS READ");
        }
    }
    let _ = write!(out, " | {} in flight", s.net.len());
    out
}

fn phase(p: &Phase) -> String {
    let ans = |r: &[Ans]| {
        r.iter()
            .map(|a| match a {
                Ans::Pending => "?".to_string(),
                Ans::Granted(t) => format!("g{t}"),
                Ans::Taken => "x".into(),
                Ans::Failed => "!".into(),
            })
            .collect::<Vec<_>>()
            .join(",")
    };
    match p {
        Phase::Idle => "idle".into(),
        Phase::Acquiring {
            name,
            start,
            replies,
            ..
        } => format!("acquiring {name} since {start} [{}]", ans(replies)),
        Phase::Fencing { token, round, .. } => format!("fencing {token} (round {round})"),
        Phase::Held {
            name,
            token,
            valid_until,
            ..
        } => format!("HOLDS {name} token {token} until {valid_until}"),
        Phase::Renewing {
            name,
            token,
            valid_until,
            ..
        } => format!("HOLDS {name} token {token} until {valid_until}, renewing"),
    }
}
