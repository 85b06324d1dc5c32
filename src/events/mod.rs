//! One lock's events as the nodes tell them ([`LockManager::events`]):
//! releases, forced unlocks, and, where the nodes send keyspace
//! notifications, expiries and deletions by anything else.
//!
//! - `tally`: which messages make one event (pure, unit-tested).
//!
//! A [`LockEvents`] stream has subscriber connections of its own, one per
//! node, over the node's release feed (`node::Feed`), subscribed to the
//! lock's release channel, the layout's foreign channel if any (Redisson's,
//! where our own releases also publish `0`: each such echo follows its own
//! message on the same connection and is dropped there) and its key's
//! keyspace channel. It does not share
//! the waiters' connections (`wait::pubsub`): those subscribe and
//! unsubscribe a channel as local waiters come and go and hand every
//! message to the waiters' bells; a listener wants its channels for as long
//! as it lives, also keyspace channels no waiter wants, and a slow listener
//! must not hold up a waiter's wake-up.
//!
//! [`LockManager::events`]: crate::LockManager::events

mod tally;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures::{Stream, StreamExt};
use tokio::sync::mpsc;
use tokio::time::Instant;

use self::tally::{Seen, Tally};
use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure};
use crate::keys::Keys;
use crate::members::Members;
use crate::node::{Feed, FeedConn};

/// One event of a lock, seen from the nodes.
///
/// Counted once per lock event, not once per node: an event is delivered
/// when a quorum of nodes (as many as a holder needs) has told it, within
/// the node timeout plus one second of the first; the nodes that tell it
/// later are not counted again.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockEvent {
    /// A holder released the lock (its last level; a re-entered level
    /// publishes nothing). Also an acquisition's rollback that had been
    /// granted on a quorum (its validity ran out before it returned).
    #[non_exhaustive]
    Released {
        /// The holder id that released it (see
        /// [`HolderInfo::parse`](crate::HolderInfo::parse)).
        holder: String,
    },
    /// The lock was deleted by [`LockManager::force_unlock`] (or
    /// `quorumlock unlock --force`).
    ///
    /// [`LockManager::force_unlock`]: crate::LockManager::force_unlock
    Forced,
    /// The lock's key expired. Only where the nodes send keyspace
    /// notifications (see [`LockManager::events`]); an expiry publishes
    /// nothing else.
    ///
    /// [`LockManager::events`]: crate::LockManager::events
    Expired,
    /// The lock's key was deleted by something other than quorumlock's
    /// scripts: a `DEL` or `UNLINK`, an eviction, a Redisson client's
    /// unlock in the default layout. Only where the nodes send keyspace
    /// notifications.
    Deleted,
    /// In [`Layout::Redisson`](crate::Layout::Redisson): a Redisson client
    /// released the lock (its last level) or forced it, publishing `0` on
    /// `redisson_lock__channel:{<name>}`. That message names no holder.
    /// Seen with or without keyspace notifications (with them, the
    /// unlock's `del` is not counted again).
    ForeignReleased,
    /// The stream's buffer was full (its reader fell
    /// [`events_buffer`](crate::LockManagerBuilder::events_buffer) events
    /// behind): `missed` events were dropped at this point, the oldest
    /// kept, as tokio's broadcast channel reports `Lagged`. The events
    /// after it are delivered as usual.
    #[non_exhaustive]
    Lagged {
        /// How many events were dropped.
        missed: u64,
    },
}

/// The events of one lock, as a [`Stream`]; made by
/// [`LockManager::events`](crate::LockManager::events).
///
/// The stream never ends by itself: a node whose connection fails is
/// reconnected in the background (its messages meanwhile are missed, an
/// event still counts when a quorum of the others told it).
///
/// It keeps up to
/// [`events_buffer`](crate::LockManagerBuilder::events_buffer) events
/// (1,024 by default) that its reader has not taken yet. Past that, newer
/// events are dropped and counted, and one [`LockEvent::Lagged`] says how
/// many, in their place, as soon as there is room again: a reader that
/// stops reading costs a bounded amount of memory, and the nodes'
/// connections are read on regardless (a slow reader never holds up the
/// nodes, nor makes them drop the subscriber).
///
/// # Cancel safety
///
/// Dropping the stream closes its connections, which unsubscribes them, at
/// once. Polling it is cancel safe: an event is either returned or kept for
/// the next poll.
pub struct LockEvents {
    name: String,
    events: mpsc::Receiver<LockEvent>,
}

impl std::fmt::Debug for LockEvents {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockEvents")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl LockEvents {
    /// The lock's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Stream for LockEvents {
    type Item = LockEvent;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LockEvent>> {
        self.events.poll_recv(cx)
    }
}

/// Longest pause between two connection attempts to one node.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(10);

/// First pause after a failure.
const FIRST_DELAY: Duration = Duration::from_millis(50);

/// What a node's task sends to the tally.
enum Report {
    /// The node confirmed the subscription (again, after a reconnect).
    Subscribed(usize),
    /// The node's connection or subscription failed; it is retried.
    Failed(usize, NodeError),
    Seen(usize, Seen),
}

/// Subscribes to `keys`' events on every node that has a release feed, and
/// returns once a quorum of them confirmed.
pub(crate) async fn subscribe(nodes: &Members, keys: &Keys) -> Result<LockEvents, Error> {
    let span = tracing::debug_span!("quorumlock.events", lock = %keys.name);
    tracing::Instrument::instrument(subscribe_in_span(nodes, keys), span).await
}

async fn subscribe_in_span(nodes: &Members, keys: &Keys) -> Result<LockEvents, Error> {
    let (n, required) = (nodes.len(), nodes.required());
    let config = &nodes.config;
    // Unbounded: its one reader, the tally's task, never waits for the
    // stream's reader, so it holds only what arrived since that task last
    // ran.
    let (reports, mut from_nodes) = mpsc::unbounded_channel();
    let mut failures: Vec<Option<NodeFailure>> = vec![None; n];
    let channel: Arc<str> = keys.channel.as_str().into();
    let foreign: Option<Arc<str>> = keys.foreign_channel.as_deref().map(Into::into);
    for (i, failure) in failures.iter_mut().enumerate() {
        let node = nodes.node(i);
        let Some(feed) = node.feed() else {
            let e = NodeError::new(
                NodeErrorKind::Refused,
                "this member publishes no release messages (a cluster member)",
            );
            *failure = Some(e.at(i, node.addr()));
            continue;
        };
        let mut channels = vec![Arc::clone(&channel)];
        channels.extend(foreign.clone());
        channels.extend(feed.keyspace_channel(&keys.lock));
        let task = NodeTask {
            i,
            feed,
            channels,
            foreign: foreign.clone(),
            connect: config.connect_timeout,
            call: config.node_timeout,
            reports: reports.clone(),
        };
        tokio::spawn(crate::clock::inherit(task.run()));
    }
    drop(reports);
    let unavailable = |failures: Vec<Option<NodeFailure>>, granted| Error::Unavailable {
        name: keys.name.to_string(),
        failures: failures.into_iter().flatten().collect(),
        required,
        granted,
    };

    // Until a quorum confirmed (or can no longer), bounded like one call.
    let deadline = Instant::now() + config.connect_timeout + config.node_timeout;
    let mut confirmed = vec![false; n];
    let mut early: Vec<(usize, Seen)> = Vec::new();
    loop {
        let ok = confirmed.iter().filter(|c| **c).count();
        if ok >= required {
            break;
        }
        let failed = (0..n).filter(|&i| !confirmed[i] && failures[i].is_some());
        if n - failed.count() < required {
            return Err(unavailable(failures, ok));
        }
        match tokio::time::timeout_at(deadline, from_nodes.recv()).await {
            Ok(Some(Report::Subscribed(i))) => confirmed[i] = true,
            Ok(Some(Report::Failed(i, e))) => {
                failures[i] = Some(e.at(i, nodes.node(i).addr()));
            }
            Ok(Some(Report::Seen(i, seen))) => early.push((i, seen)),
            Ok(None) => return Err(unavailable(failures, ok)),
            Err(_) => {
                for (i, f) in failures.iter_mut().enumerate() {
                    if !confirmed[i] && f.is_none() {
                        *f = Some(NodeError::timeout().at(i, nodes.node(i).addr()));
                    }
                }
                return Err(unavailable(failures, ok));
            }
        }
    }

    let window = config.node_timeout + Duration::from_secs(1);
    let mut tally = Tally::new(n, required, window);
    let (out, events) = mpsc::channel(config.events_buffer);
    let mut missed = 0;
    for (i, seen) in early {
        if let Some(ev) = tally.seen(i, seen, Instant::now()) {
            deliver(&out, &mut missed, ev);
        }
    }
    tokio::spawn(crate::clock::inherit(count(tally, from_nodes, out, missed)));
    Ok(LockEvents {
        name: keys.name.to_string(),
        events,
    })
}

/// Puts `ev` into the stream's buffer without waiting: after the count of
/// the events `missed` before it ([`LockEvent::Lagged`]), if any; counted
/// among them when there is no room.
fn deliver(out: &mpsc::Sender<LockEvent>, missed: &mut u64, ev: LockEvent) {
    if *missed > 0 {
        match out.try_reserve() {
            Ok(permit) => lagged(permit, missed),
            Err(_) => {
                *missed += 1;
                return;
            }
        }
    }
    if let Err(mpsc::error::TrySendError::Full(_)) = out.try_send(ev) {
        *missed += 1;
    }
}

/// Tells the reader how many events it `missed`, in the slot `permit`
/// holds.
fn lagged(permit: mpsc::Permit<'_, LockEvent>, missed: &mut u64) {
    permit.send(LockEvent::Lagged {
        missed: std::mem::take(missed),
    });
}

/// Turns the nodes' reports into events until the stream is dropped (then
/// the node tasks see their channel closed and close their connections).
/// Events that found the buffer full are told as soon as the reader made
/// room, not only before the next event.
async fn count(
    mut tally: Tally,
    mut from_nodes: mpsc::UnboundedReceiver<Report>,
    out: mpsc::Sender<LockEvent>,
    mut missed: u64,
) {
    loop {
        let due = tally.next_deadline();
        let report = tokio::select! {
            biased;
            () = out.closed() => return,
            () = sleep_until(due) => {
                for ev in tally.due(Instant::now()) {
                    deliver(&out, &mut missed, ev);
                }
                continue;
            }
            Ok(permit) = out.reserve(), if missed > 0 => {
                lagged(permit, &mut missed);
                continue;
            }
            report = from_nodes.recv() => report,
        };
        match report {
            Some(Report::Seen(i, seen)) => {
                if let Some(ev) = tally.seen(i, seen, Instant::now()) {
                    deliver(&out, &mut missed, ev);
                }
            }
            Some(Report::Subscribed(_) | Report::Failed(..)) => {}
            None => return,
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One node's subscriber connection for one stream.
struct NodeTask {
    i: usize,
    feed: Arc<dyn Feed>,
    /// The lock's own channel first.
    channels: Vec<Arc<str>>,
    /// Another client's release channel, if the layout has one.
    foreign: Option<Arc<str>>,
    connect: Duration,
    call: Duration,
    reports: mpsc::UnboundedSender<Report>,
}

impl NodeTask {
    /// Keeps the connection subscribed until the tally is gone, reconnecting
    /// after a backoff that doubles up to [`MAX_RECONNECT_DELAY`].
    async fn run(self) {
        let mut delay = FIRST_DELAY;
        loop {
            let result = tokio::select! {
                biased;
                () = self.reports.closed() => return,
                result = self.connection() => result,
            };
            if let Err(e) = result {
                if self.reports.send(Report::Failed(self.i, e)).is_err() {
                    return;
                }
            } else {
                delay = FIRST_DELAY;
            }
            tokio::select! {
                biased;
                () = self.reports.closed() => return,
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(MAX_RECONNECT_DELAY);
        }
    }

    /// One connection: opened, subscribed, read until it ends. `Ok` when
    /// it ended after a confirmed subscription.
    async fn connection(&self) -> Result<(), NodeError> {
        let FeedConn {
            mut sink,
            mut messages,
        } = tokio::time::timeout(self.connect, self.feed.open())
            .await
            .map_err(|_| NodeError::timeout())??;
        tokio::time::timeout(self.call, sink.subscribe(self.channels.clone()))
            .await
            .map_err(|_| NodeError::timeout())??;
        if self.reports.send(Report::Subscribed(self.i)).is_err() {
            return Ok(());
        }
        // Our own releases' `0`s on the foreign channel still to come.
        let mut echoes: u32 = 0;
        while let Some(msg) = messages.next().await {
            let seen = if msg.channel == self.channels[0] {
                let seen = Seen::release_message(&msg.payload);
                if self.foreign.is_some() && matches!(seen, Seen::Released(_) | Seen::Forced) {
                    echoes += 1;
                }
                seen
            } else if self.foreign.as_ref() == Some(&msg.channel) {
                if echoes > 0 {
                    echoes -= 1;
                    continue;
                }
                Seen::foreign_message(&msg.payload)
            } else {
                Seen::keyspace(&msg.payload)
            };
            if matches!(seen, Seen::Other) {
                continue;
            }
            if self.reports.send(Report::Seen(self.i, seen)).is_err() {
                return Ok(());
            }
        }
        tracing::debug!(node = self.i, "events connection lost; reconnecting");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn released(holder: &str) -> LockEvent {
        LockEvent::Released {
            holder: holder.to_owned(),
        }
    }

    /// Every event is delivered or counted in a `Lagged`, in order, and a
    /// full buffer never blocks nor panics.
    #[test]
    fn a_full_buffer_drops_newer_events_and_tells_how_many_in_their_place() {
        let (out, mut rx) = mpsc::channel(2);
        let mut missed = 0;
        for h in ["0", "1", "2", "3", "4"] {
            deliver(&out, &mut missed, released(h));
        }
        assert_eq!(missed, 3);
        assert_eq!(rx.try_recv().ok(), Some(released("0")));
        // One slot free: the count of the missed goes in; "5" finds no room.
        deliver(&out, &mut missed, released("5"));
        assert_eq!(missed, 1);
        assert_eq!(rx.try_recv().ok(), Some(released("1")));
        assert_eq!(rx.try_recv().ok(), Some(LockEvent::Lagged { missed: 3 }));
        deliver(&out, &mut missed, released("6"));
        assert_eq!(missed, 0);
        assert_eq!(rx.try_recv().ok(), Some(LockEvent::Lagged { missed: 1 }));
        assert_eq!(rx.try_recv().ok(), Some(released("6")));
        assert!(rx.try_recv().is_err());
    }

    /// The count task tells the missed events once the reader made room,
    /// with no further event to carry them.
    #[tokio::test(start_paused = true)]
    async fn the_missed_are_told_when_room_is_made_without_a_later_event() {
        let (out, mut rx) = mpsc::channel(1);
        let mut missed = 0;
        deliver(&out, &mut missed, released("0"));
        deliver(&out, &mut missed, released("1"));
        let (_reports, from_nodes) = mpsc::unbounded_channel();
        let tally = Tally::new(3, 2, Duration::from_secs(1));
        tokio::spawn(count(tally, from_nodes, out, missed));
        assert_eq!(rx.recv().await, Some(released("0")));
        assert_eq!(rx.recv().await, Some(LockEvent::Lagged { missed: 1 }));
    }
}
