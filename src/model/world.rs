//! The model's world: its parameters (how many nodes, clients, names,
//! which faults, which mutation) and its state (nodes, clients, messages in
//! flight, the global tick), with the map from abstract ticks to the
//! `Duration`s and `Instant`s the real verdicts take.

use std::time::Duration;

use tokio::time::Instant;

use crate::keys::{Keys, Role};

pub(crate) use super::election::{Rec, View, Wrote};

/// An abstract instant: global time, a node's clock, a client's.
pub(super) type Tick = u8;

/// Milliseconds per tick: the drift allowance of a lease of a few ticks
/// (`config::drift` with a factor of 0: its 2 ms floor) is one tick.
const MS_PER_TICK: u64 = 2;

/// A tick as a `Duration` (from tick 0).
pub(super) fn dur(t: Tick) -> Duration {
    Duration::from_millis(u64::from(t) * MS_PER_TICK)
}

/// A deliberate bug of the protocol, each passed to the real verdicts as a
/// mutated argument, or switched where the model stands in for I/O.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mutation {
    /// A lock's quorum is `N / 2` (the argument given to `Tally::decide`
    /// and the renewal verdict).
    HalfQuorum,
    /// No drift subtracted: `quorum::valid_until` is given a drift of 0.
    NoDrift,
    /// The fence raise is sent once and the token handed out without
    /// waiting for a quorum of counters (`SingleTryFence`, the code
    /// before the fence rule).
    OneTryFence,
    /// An acquire whose reply was lost is sent again as a call that may be
    /// (`Resend::AfterBrokenConnection` given to `Resend::again`), with no
    /// order of the hold's calls (the code before `node::order`).
    ResendAcquire,
    /// The watchdog repairs the nodes a renewal found empty whatever the
    /// verdict of `RenewalTally`, not only on `Verdict::Renewed`: a repair
    /// without a confirming quorum.
    RepairUnconfirmed,
    /// A failed attempt leaves its grants behind (no rollback; the
    /// simulator's `NoRollback`): they stay until they expire.
    NoRollback,
    /// `Leadership::is_leader` reads the hold's phase without its
    /// validity (the simulator's `LeaderIgnoresExpiry`).
    LeaderIgnoresExpiry,
    /// The observer reads the leader with `quorum::agree(.., 1)`: one
    /// member's record is enough.
    ObserverQuorumOne,
    /// A leader's record is proclaimed with its revision (1) as the term,
    /// not the hold's fencing token.
    TermIsRevision,
}

/// Who sends the operator's `force_unlock`, as a client index on the
/// links.
pub(super) const OPERATOR: u8 = 200;
/// Who sends the observer's reads of an election's leader.
pub(super) const OBSERVER: u8 = 201;

/// What a node keeps through a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Restart {
    /// Its data (AOF with `appendfsync always`): keys, their expiry, the
    /// fence counters.
    WithData,
    /// Nothing, and it answers at once (no fsync, not kept out).
    EmptyAtOnce,
}

/// How permits are counted, for a semaphore world.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Design {
    /// Locks (a semaphore's `P` slots are `P` lock names).
    Locks,
    /// The counter semaphore: one key per node that grants while fewer
    /// than `P` holders are alive there, a majority of grants a permit.
    Counter,
}

/// One world's size, faults and mutation.
#[derive(Debug, Clone)]
pub(crate) struct Params {
    pub(crate) nodes: usize,
    /// Each client's role, by client: reader (`true`) or not.
    pub(crate) readers: Vec<bool>,
    /// Lock names (a semaphore: its slots).
    pub(crate) names: u8,
    /// Attempts each client makes, at most.
    pub(crate) attempts: u8,
    /// The lease, in ticks.
    pub(crate) lease: Tick,
    /// Time stops at this tick.
    pub(crate) horizon: Tick,
    /// How far a node's clock may step ahead of the global one, in ticks
    /// (in one step).
    pub(crate) lead: Tick,
    /// Each node's fence counter at the start (an earlier history of the
    /// name, e.g. a rolled-back grant on one node).
    pub(crate) counters: Vec<u64>,
    /// Nodes whose clock may step ahead.
    pub(crate) skewed: u8,
    /// Messages that may be lost.
    pub(crate) losses: u8,
    /// Node restarts, and what they keep.
    pub(crate) restarts: u8,
    pub(crate) restart: Restart,
    /// Whether holds are renewed (the watchdog).
    pub(crate) renew: bool,
    /// Whether clients release their holds (else holds lapse).
    pub(crate) release: bool,
    /// The semaphore's permits, checked (`None`: not a semaphore).
    pub(crate) permits: Option<usize>,
    pub(crate) design: Design,
    pub(crate) mutation: Option<Mutation>,
    /// `force_unlock`s the operator may ask (each deletes the name on
    /// every node, its deletes in flight like any call).
    pub(crate) forces: u8,
    /// Whether the operator forces only while nothing is in flight (no
    /// call of any hold: its grants landed, no renewal or repair under
    /// way).
    pub(crate) force_quiet: bool,
    /// Whether a `force_unlock`'s deletes land on every node at once (one
    /// step), not each at its own time.
    pub(crate) force_atomic: bool,
    /// Whether a client may stop waiting for answers still in flight (its
    /// node timeout); without, every answer comes in time.
    pub(crate) timeouts: bool,
    /// Whether the liveness property applies (a world explored
    /// completely, every path ending).
    pub(crate) live: bool,
    /// Whether the clients are candidates of an election (name 0): a
    /// won hold proclaims its record, a quorum of it makes a leadership.
    pub(crate) election: bool,
    /// Quorum reads of the leader the observer makes.
    pub(crate) reads: u8,
    /// A lock's (and a writer's) quorum, and a reader's, from
    /// `Keys::required` at construction.
    pub(crate) required: usize,
    pub(crate) reader_required: usize,
    /// The instant of tick 0, for the verdicts that take instants.
    pub(crate) base: Instant,
}

impl Params {
    /// A lock world of 3 nodes and `clients` lock clients, one name, with
    /// no faults; the tests add them.
    pub(crate) fn lock(clients: usize) -> Self {
        let nodes = 3;
        let majority = crate::config::Quorum::Majority
            .required(nodes)
            .expect("3 nodes make a majority");
        let mut p = Self {
            nodes,
            readers: vec![false; clients],
            names: 1,
            attempts: 1,
            lease: 3,
            horizon: 5,
            lead: 0,
            counters: vec![0; nodes],
            skewed: 1,
            losses: 0,
            restarts: 0,
            restart: Restart::WithData,
            renew: false,
            release: true,
            permits: None,
            design: Design::Locks,
            mutation: None,
            forces: 0,
            force_quiet: false,
            force_atomic: false,
            timeouts: true,
            live: false,
            election: false,
            reads: 0,
            required: majority,
            reader_required: majority,
            base: Instant::now(),
        };
        p.quorums();
        p
    }

    /// Sets the quorums from the real `Keys::required` (under whatever
    /// simulator mutation the calling thread has switched on), and the
    /// model's own mutation.
    pub(crate) fn quorums(&mut self) {
        let majority = crate::config::Quorum::Majority
            .required(self.nodes)
            .expect("a majority of the nodes");
        let role = Role::Writer {
            waiter: "w".into(),
            hold_back: Duration::ZERO,
        };
        let writer = Keys::rw("", "m", role, "");
        let reader = Keys::rw("", "m", Role::Reader, "r");
        self.required = writer.required(self.nodes, majority);
        self.reader_required = reader.required(self.nodes, majority);
        if self.permits.is_some() {
            self.required = Keys::permit("", "m", 0).required(self.nodes, majority);
        }
        if self.mutation == Some(Mutation::HalfQuorum) {
            self.required = self.nodes / 2;
        }
    }

    /// The same world with `m`.
    pub(crate) fn with(mut self, m: Mutation) -> Self {
        self.mutation = Some(m);
        self.quorums();
        self
    }

    pub(super) fn mutated(&self, m: Mutation) -> bool {
        self.mutation == Some(m)
    }

    /// Tick `t` as an instant.
    pub(super) fn at(&self, t: Tick) -> Instant {
        self.base + dur(t)
    }

    /// An instant as the last tick not after it (a validity is never
    /// rounded up).
    pub(super) fn tick_of(&self, i: Instant) -> Tick {
        let ms =
            u64::try_from(i.saturating_duration_since(self.base).as_millis()).unwrap_or(u64::MAX);
        Tick::try_from(ms / MS_PER_TICK).unwrap_or(Tick::MAX)
    }

    /// The drift allowance of the lease (`config::drift`), or none under
    /// [`Mutation::NoDrift`].
    pub(super) fn drift(&self) -> Duration {
        if self.mutated(Mutation::NoDrift) {
            Duration::ZERO
        } else {
            crate::config::drift(dur(self.lease), 0.0)
        }
    }

    /// Grants a hold of this role needs.
    pub(super) fn quorum(&self, reader: bool) -> usize {
        if reader {
            self.reader_required
        } else {
            self.required
        }
    }
}

/// A hold: its client and the attempt that made it (the holder id its
/// grants are written for).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Holder {
    pub(crate) client: u8,
    pub(crate) attempt: u8,
}

/// A grant alive on a node until `expiry` on the node's clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Lease {
    pub(crate) holder: Holder,
    pub(crate) reader: bool,
    pub(crate) expiry: Tick,
}

/// One node: its keys (per name, the grants alive on it), its fence
/// counter per name, how far its clock runs ahead.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Node {
    pub(crate) keys: Vec<Vec<Lease>>,
    pub(crate) fence: Vec<u64>,
    pub(crate) lead: Tick,
    /// The leader's record of name 0's election.
    pub(crate) record: Option<Rec>,
}

/// One node's answer to an acquisition, as the client gathered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Ans {
    Pending,
    Granted(u64),
    Taken,
    Failed,
}

/// One node's answer to a renewal, as the client gathered it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Ren {
    Pending,
    Extended,
    Missing,
    Conflict,
    Failed,
}

/// Where a client stands.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Phase {
    Idle,
    /// Fanned out an acquire at `start`; `floor`: the largest token handed
    /// out for the name when the attempt began.
    Acquiring {
        name: u8,
        start: Tick,
        floor: u64,
        replies: Vec<Ans>,
    },
    /// Won, raising lagging fence counters to `token` (`round` 1 or 2).
    Fencing {
        name: u8,
        start: Tick,
        floor: u64,
        token: u64,
        replies: Vec<Ans>,
        raised: Vec<Option<u64>>,
        pending: Vec<bool>,
        round: u8,
    },
    /// Held, believed valid until `valid_until`; `wave`: the tick of its
    /// grant or last renewal wave (the watchdog renews once a tick).
    Held {
        name: u8,
        token: u64,
        valid_until: Tick,
        wave: Tick,
    },
    /// Held, a renewal wave out since `wave`.
    Renewing {
        name: u8,
        token: u64,
        valid_until: Tick,
        wave: Tick,
        answers: Vec<Ren>,
    },
}

/// A message's body.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Body {
    Acquire {
        name: u8,
        reader: bool,
    },
    /// Granted with the node's counter, or taken (`None`).
    Grant(Option<u64>),
    Raise {
        name: u8,
        token: u64,
    },
    Raised(u64),
    Renew {
        name: u8,
    },
    Renewal(RenewCode),
    Repair {
        name: u8,
        token: u64,
    },
    /// Release (token 0: a rollback).
    Release {
        name: u8,
        token: u64,
    },
    Released,
    /// The operator's delete of the name, whoever holds it
    /// (`force_release.lua`); answered to nobody who reads it.
    Force {
        name: u8,
    },
    /// A candidate's record for name 0 (`proclaim.lua`), of its hold's
    /// term.
    Proclaim {
        term: u64,
    },
    Proclaimed(Wrote),
    /// The observer's read of the leader (`leader.lua`).
    Read,
    /// A node's view of the leader: a record whose holder holds the lock
    /// there (`Leads`), the lock held by another (`Unproclaimed`), or no
    /// lock (`Vacant`).
    Seen(View),
}

/// A renewal's answer on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum RenewCode {
    Extended,
    Missing,
    Conflict,
}

/// A message in flight between a client and a node, in either direction.
/// One link per (client, node, direction) delivers in order (one
/// connection); links overtake each other freely.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Msg {
    pub(crate) client: u8,
    pub(crate) node: u8,
    pub(crate) to_node: bool,
    pub(crate) attempt: u8,
    pub(crate) body: Body,
}

impl Msg {
    pub(super) fn link(&self) -> (u8, u8, bool) {
        (self.client, self.node, self.to_node)
    }
}

/// One client.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Client {
    /// Attempts made (the current one's number).
    pub(crate) attempt: u8,
    /// The name of the current attempt.
    pub(crate) name: u8,
    pub(crate) phase: Phase,
    /// Per node: the current attempt's acquire whose reply was lost (a
    /// candidate for the re-send rule).
    pub(crate) lost: Vec<bool>,
    /// Per node: a later call of the current hold (an acquire, a release)
    /// was made there after the loss was seen.
    pub(crate) later: Vec<bool>,
}

/// The whole world.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct State {
    pub(crate) now: Tick,
    pub(crate) nodes: Vec<Node>,
    pub(crate) clients: Vec<Client>,
    /// In flight, per link in send order, links in a canonical order.
    pub(crate) net: Vec<Msg>,
    pub(crate) losses: u8,
    pub(crate) restarts: u8,
    /// Per name: the largest token handed out.
    pub(crate) top: Vec<u64>,
    /// A hold was handed out a token not above one handed out before its
    /// attempt began.
    pub(crate) stale_token: bool,
    /// (node, holder): the node answered the holder's release.
    pub(crate) acked: Vec<(u8, Holder)>,
    /// `force_unlock`s asked.
    pub(crate) forces: u8,
    /// Per node: a forced delete ran there.
    pub(crate) forced: Vec<bool>,
    /// The holds a `force_unlock` broke: every attempt begun when it was
    /// asked or when one of its deletes ran (no longer owed exclusion).
    pub(crate) broken: Vec<Holder>,
    /// The holds that held when a `force_unlock` was asked.
    pub(crate) held_at_force: Vec<Holder>,
    /// (node, holder): a forced delete removed the holder's key there.
    pub(crate) deleted: Vec<(u8, Holder)>,
    /// Some client has held (liveness).
    pub(crate) served: bool,
    /// The election's leaderships and observer (empty without one).
    pub(crate) vote: super::election::Vote,
}

impl State {
    /// The tick on node `n`'s clock.
    pub(super) fn clock(&self, n: usize) -> Tick {
        self.now.saturating_add(self.nodes[n].lead)
    }

    /// Sends `m`, behind every message of its link.
    pub(super) fn send(&mut self, m: Msg) {
        let at = self
            .net
            .iter()
            .rposition(|o| o.link() <= m.link())
            .map_or(0, |i| i + 1);
        self.net.insert(at, m);
    }

    /// Whether `i` is the first message of its link.
    pub(super) fn head(&self, i: usize) -> bool {
        self.net[..i].iter().all(|o| o.link() != self.net[i].link())
    }

    /// Drops the grants that expired on each node's clock.
    pub(super) fn expire(&mut self) {
        for n in 0..self.nodes.len() {
            let clock = self.clock(n);
            for leases in &mut self.nodes[n].keys {
                leases.retain(|l| l.expiry > clock);
            }
        }
    }
}
