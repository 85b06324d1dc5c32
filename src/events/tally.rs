//! Which of the nodes' messages make one lock event, with no I/O: a node's
//! observations paired (a keyspace `del` with the release message of the
//! same script), then counted across nodes, one event once a quorum of
//! nodes saw the same thing.

use std::time::Duration;

use tokio::time::Instant;

use super::LockEvent;

/// How long a node's keyspace `del` waits for the release message of the
/// script that caused it (the script deletes, then publishes: both reach
/// the one subscriber connection back to back), before it counts as a
/// deletion by something else.
pub(super) const PAIR_GRACE: Duration = Duration::from_millis(100);

/// What one node said about the lock, on either channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Seen {
    /// `release.lua`: `<waiter> <holder id>`.
    Released(String),
    /// `force_release.lua`: an empty message.
    Forced,
    /// Another client's release, on the layout's foreign channel: `0`
    /// (Redisson's unlock or forced unlock), not an echo of ours.
    ForeignReleased,
    /// Keyspace notification `del` (also `UNLINK`) or `evicted`.
    Del,
    /// Keyspace notification `expired`.
    Expired,
    /// Anything else: a queue's nudge (a bare waiter id), another keyspace
    /// event (`expire`, `hset`, ...).
    Other,
}

impl Seen {
    /// A message on the lock's release channel.
    pub(super) fn release_message(payload: &[u8]) -> Self {
        if payload.is_empty() {
            return Self::Forced;
        }
        match std::str::from_utf8(payload)
            .ok()
            .and_then(|p| p.split_once(' '))
        {
            Some((_waiter, holder)) => Self::Released(holder.to_owned()),
            None => Self::Other,
        }
    }

    /// A message on the layout's foreign channel that is not the echo of
    /// one of our releases.
    pub(super) fn foreign_message(payload: &[u8]) -> Self {
        if payload == crate::layout::REDISSON_UNLOCK.as_bytes() {
            Self::ForeignReleased
        } else {
            Self::Other
        }
    }

    /// A keyspace notification about the lock's key.
    pub(super) fn keyspace(payload: &[u8]) -> Self {
        match payload {
            b"del" | b"evicted" => Self::Del,
            b"expired" => Self::Expired,
            _ => Self::Other,
        }
    }
}

/// What a round counts: one kind of event, and for a release, whose.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Key {
    Released(String),
    Forced,
    ForeignReleased,
    Deleted,
    Expired,
}

impl Key {
    fn event(&self) -> LockEvent {
        match self {
            Self::Released(holder) => LockEvent::Released {
                holder: holder.clone(),
            },
            Self::Forced => LockEvent::Forced,
            Self::ForeignReleased => LockEvent::ForeignReleased,
            Self::Deleted => LockEvent::Deleted,
            Self::Expired => LockEvent::Expired,
        }
    }
}

/// The nodes that saw one thing, since the first of them did.
struct Round {
    key: Key,
    nodes: Vec<bool>,
    count: usize,
    started: Instant,
}

/// Per node, the pairing of a keyspace `del` with a release message.
#[derive(Default, Clone, Copy)]
struct Pairing {
    /// A `del` not yet explained, and when it stops waiting.
    del_until: Option<Instant>,
    /// A release message not yet matched by its `del`, and until when.
    message_until: Option<Instant>,
}

/// The counting of one lock's events across `n` nodes.
pub(super) struct Tally {
    required: usize,
    window: Duration,
    pairing: Vec<Pairing>,
    rounds: Vec<Round>,
}

impl Tally {
    /// `required` nodes make an event; a round not complete after `window`
    /// is forgotten.
    pub(super) fn new(n: usize, required: usize, window: Duration) -> Self {
        Self {
            required: required.max(1),
            window,
            pairing: vec![Pairing::default(); n],
            rounds: Vec::new(),
        }
    }

    /// Node `node` saw `seen` at `now`: the event it completes, if any.
    pub(super) fn seen(&mut self, node: usize, seen: Seen, now: Instant) -> Option<LockEvent> {
        let pair = self.pairing.get_mut(node)?;
        let key = match seen {
            Seen::Released(holder) => Key::Released(holder),
            Seen::Forced => Key::Forced,
            Seen::ForeignReleased => Key::ForeignReleased,
            Seen::Expired => Key::Expired,
            Seen::Other => return None,
            Seen::Del => {
                if pair.message_until.take().is_some_and(|t| now <= t) {
                    return None;
                }
                pair.del_until = Some(now + PAIR_GRACE);
                return None;
            }
        };
        if matches!(key, Key::Released(_) | Key::Forced | Key::ForeignReleased) {
            if pair.del_until.take().is_some_and(|t| now <= t) {
                pair.message_until = None;
            } else {
                pair.message_until = Some(now + PAIR_GRACE);
            }
        }
        self.count(key, node, now)
    }

    /// When [`Tally::due`] has something to do next.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.pairing.iter().filter_map(|p| p.del_until).min()
    }

    /// The deletions whose grace ended by `now` without a release message,
    /// counted: the events they complete.
    pub(super) fn due(&mut self, now: Instant) -> Vec<LockEvent> {
        let mut out = Vec::new();
        for node in 0..self.pairing.len() {
            let pair = &mut self.pairing[node];
            if pair.message_until.is_some_and(|t| now > t) {
                pair.message_until = None;
            }
            if pair.del_until.is_some_and(|t| now >= t) {
                pair.del_until = None;
                out.extend(self.count(Key::Deleted, node, now));
            }
        }
        out
    }

    /// Counts `node` in the oldest round of `key` it is not in yet (a node
    /// seen twice starts a new one); the event when that round reaches the
    /// quorum, once.
    fn count(&mut self, key: Key, node: usize, now: Instant) -> Option<LockEvent> {
        let window = self.window;
        self.rounds
            .retain(|r| now.saturating_duration_since(r.started) <= window);
        let at = self
            .rounds
            .iter()
            .position(|r| r.key == key && !r.nodes[node]);
        let round = match at {
            Some(i) => &mut self.rounds[i],
            None => {
                self.rounds.push(Round {
                    key,
                    nodes: vec![false; self.pairing.len()],
                    count: 0,
                    started: now,
                });
                let last = self.rounds.len() - 1;
                &mut self.rounds[last]
            }
        };
        round.nodes[node] = true;
        round.count += 1;
        (round.count == self.required).then(|| round.key.event())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally() -> (Tally, Instant) {
        (Tally::new(3, 2, Duration::from_secs(1)), Instant::now())
    }

    fn released(h: &str) -> Seen {
        Seen::Released(h.to_owned())
    }

    #[test]
    fn messages_are_read() {
        assert_eq!(Seen::release_message(b" h1"), released("h1"));
        assert_eq!(Seen::release_message(b"w1 h1"), released("h1"));
        assert_eq!(Seen::release_message(b""), Seen::Forced);
        assert_eq!(Seen::release_message(b"w1"), Seen::Other);
        assert_eq!(Seen::keyspace(b"del"), Seen::Del);
        assert_eq!(Seen::keyspace(b"expired"), Seen::Expired);
        assert_eq!(Seen::keyspace(b"expire"), Seen::Other);
    }

    #[test]
    fn a_release_is_one_event_at_the_quorum() {
        let (mut t, now) = tally();
        assert_eq!(t.seen(0, released("h"), now), None);
        assert_eq!(t.seen(0, released("h"), now), None, "one node counts once");
        let ev = t.seen(1, released("h"), now);
        assert_eq!(ev, Some(LockEvent::Released { holder: "h".into() }));
        assert_eq!(
            t.seen(2, released("h"), now),
            None,
            "the third node is late"
        );
    }

    #[test]
    fn a_rollback_on_a_minority_is_no_event() {
        let (mut t, now) = tally();
        assert_eq!(t.seen(0, released("h"), now), None);
        let later = now + Duration::from_secs(2);
        assert_eq!(t.seen(1, released("h"), later), None, "the round aged out");
    }

    #[test]
    fn a_del_paired_with_its_message_is_the_release_only() {
        let (mut t, now) = tally();
        for node in 0..2 {
            assert_eq!(t.seen(node, Seen::Del, now), None);
        }
        assert_eq!(t.seen(0, Seen::Forced, now), None);
        assert_eq!(t.seen(1, Seen::Forced, now), Some(LockEvent::Forced));
        // The message before its `del`, too.
        assert_eq!(t.seen(2, Seen::Forced, now), None);
        assert_eq!(t.seen(2, Seen::Del, now), None);
        assert_eq!(t.next_deadline(), None);
        assert!(t.due(now + PAIR_GRACE * 2).is_empty());
    }

    #[test]
    fn a_del_alone_is_a_deletion_after_the_grace() {
        let (mut t, now) = tally();
        assert_eq!(t.seen(0, Seen::Del, now), None);
        assert_eq!(t.seen(1, Seen::Del, now), None);
        assert_eq!(t.next_deadline(), Some(now + PAIR_GRACE));
        assert!(t.due(now).is_empty());
        assert_eq!(t.due(now + PAIR_GRACE), vec![LockEvent::Deleted]);
        assert_eq!(t.next_deadline(), None);
    }

    #[test]
    fn a_foreign_release_pairs_with_its_del() {
        let (mut t, now) = tally();
        assert_eq!(Seen::foreign_message(b"0"), Seen::ForeignReleased);
        assert_eq!(Seen::foreign_message(b"1"), Seen::Other);
        for node in 0..2 {
            assert_eq!(t.seen(node, Seen::Del, now), None);
        }
        assert_eq!(t.seen(0, Seen::ForeignReleased, now), None);
        let ev = t.seen(1, Seen::ForeignReleased, now);
        assert_eq!(ev, Some(LockEvent::ForeignReleased));
        assert!(t.due(now + PAIR_GRACE * 2).is_empty(), "no deletion too");
    }

    #[test]
    fn expiries_count_once() {
        let (mut t, now) = tally();
        assert_eq!(t.seen(2, Seen::Expired, now), None);
        assert_eq!(t.seen(0, Seen::Expired, now), Some(LockEvent::Expired));
        assert_eq!(t.seen(1, Seen::Expired, now), None);
        // A later expiry is a new round.
        let later = now + Duration::from_millis(10);
        assert_eq!(t.seen(2, Seen::Expired, later), None);
        assert_eq!(t.seen(1, Seen::Expired, later), Some(LockEvent::Expired));
    }
}
