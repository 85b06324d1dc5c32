//! The steps of a case: the calls and actions ([`Op`]), what each answered
//! ([`Out`]), and when two answers count as the same ([`same`]).

use std::fmt;
use std::time::Duration;

use crate::error::NodeErrorKind;
use crate::node::{Released, Renewed};

/// Key prefix of every case.
pub(super) const PREFIX: &str = "nc:";
/// A long lease, in milliseconds.
pub(super) const L: u64 = 10_000;
/// How far two remaining times may differ and still count as the same.
const SLACK: Duration = Duration::from_millis(500);
/// A name in the hash slot of `"a"` (so it shares a's fence counter).
pub(super) const A_TWIN: &str = "a:1599";
pub(super) const H1: &str = "holder-1";
pub(super) const H2: &str = "holder-2";

pub(super) fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One call, or an action around the calls.
#[derive(Debug, Clone)]
pub(super) enum Op {
    Acquire {
        name: &'static str,
        holder: &'static str,
        lease: u64,
        count: u32,
    },
    /// `acquire.lua` in its re-entry mode (never creates a missing key).
    Reenter {
        name: &'static str,
        holder: &'static str,
        lease: u64,
        count: u32,
    },
    /// `acquire_queued.lua`: an acquire by a waiter with a place in the
    /// lock's queue.
    AcquireQueued {
        name: &'static str,
        holder: &'static str,
        lease: u64,
        count: u32,
        waiter: &'static str,
        ticket: u64,
        fair: bool,
        /// Queue timeout in milliseconds.
        timeout: u64,
    },
    /// `leave.lua`.
    Leave {
        name: &'static str,
        waiter: &'static str,
    },
    /// The waiter ids queued for this name, in order.
    Queue(&'static str),
    /// `acquire_all.lua` over several names.
    AcquireAll {
        names: Vec<&'static str>,
        holder: &'static str,
        lease: u64,
        count: u32,
    },
    Release {
        name: &'static str,
        holder: &'static str,
        left: u32,
        lease: u64,
        token: u64,
    },
    /// `(name, holder, count, lease)` per lock.
    Renew(Vec<(&'static str, &'static str, u32, u64)>),
    /// `(name, holder, count, token, lease)` per lock.
    Repair(Vec<(&'static str, &'static str, u32, u64, u64)>),
    /// `keep.lua`: `(name, waiter, queue timeout in ms)` per place.
    Keep(Vec<(&'static str, &'static str, u64)>),
    /// `raise_fence.lua` on the counter of `"a"`'s slot.
    RaiseFence(u64),
    /// `raise_fence.lua` on the counters of these names' slots.
    RaiseFences(Vec<&'static str>, u64),
    ForceRelease(&'static str),
    Status(&'static str),
    /// A string at the lock key of this name.
    ForeignLock(&'static str),
    /// A string at the queue key of this name.
    ForeignQueue(&'static str),
    /// A hash at the fence counter of `"a"`'s slot.
    ForeignFence,
    Sleep(u64),
    /// The node restarts, keeping its data or empty.
    Restart {
        keep_data: bool,
    },
}

/// What a step answered, as the coordinator sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Out {
    Granted(u64),
    Taken(Option<Duration>),
    /// A re-entry found no key.
    Missing,
    /// Not granted, with a place in the queue: the wait and the ticket.
    Queued {
        wait: Option<Duration>,
        ticket: u64,
    },
    /// Whether a leave found the waiter queued.
    Left(bool),
    /// The queued waiter ids, in order.
    Queue(Vec<String>),
    Released(Released),
    Renewed(Vec<Renewed>),
    Fence(u64),
    Forced(bool),
    State {
        holder: Option<String>,
        count: u32,
        pttl: Option<Duration>,
        fence: u64,
    },
    Failed(NodeErrorKind),
    /// An action without an answer.
    Done,
}

impl fmt::Display for Out {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms =
            |d: &Option<Duration>| d.map_or("none".to_owned(), |d| format!("{}ms", d.as_millis()));
        match self {
            Self::Taken(p) => write!(f, "Taken(pttl {})", ms(p)),
            Self::Queued { wait, ticket } => {
                write!(f, "Queued(wait {}, ticket {ticket})", ms(wait))
            }
            Self::State {
                holder,
                count,
                pttl,
                fence,
            } => write!(
                f,
                "State(holder {holder:?}, count {count}, pttl {}, fence {fence})",
                ms(pttl)
            ),
            other => write!(f, "{other:?}"),
        }
    }
}

/// Equal, remaining times within [`SLACK`].
pub(super) fn same(a: &Out, b: &Out) -> bool {
    let near = |x: &Option<Duration>, y: &Option<Duration>| match (x, y) {
        (Some(x), Some(y)) => x.abs_diff(*y) <= SLACK,
        (None, None) => true,
        _ => false,
    };
    match (a, b) {
        (Out::Taken(x), Out::Taken(y)) => near(x, y),
        (Out::Queued { wait: x, ticket: t }, Out::Queued { wait: y, ticket: u }) => {
            t == u && near(x, y)
        }
        (
            Out::State {
                holder: h1,
                count: c1,
                pttl: p1,
                fence: f1,
            },
            Out::State {
                holder: h2,
                count: c2,
                pttl: p2,
                fence: f2,
            },
        ) => h1 == h2 && c1 == c2 && f1 == f2 && near(p1, p2),
        (Out::Renewed(x), Out::Renewed(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|pair| match pair {
                    (Renewed::Kept(p), Renewed::Kept(q)) => near(&Some(*p), &Some(*q)),
                    (p, q) => p == q,
                })
        }
        _ => a == b,
    }
}
