//! The waiters' pub/sub connections: one per node, over the node's release
//! feed (`node::Feed`), subscribed to the channels that have local waiters,
//! delivering each message to the [`Board`].
//!
//! The (un)subscriptions that queue while the task waits for the node go
//! out together, up to [`MAX_BATCH`] locks per command, in the order they
//! were asked for (a subscription never overtakes an unsubscription).
//!
//! Every call is bounded: opening by the connect timeout, each SUBSCRIBE and
//! UNSUBSCRIBE by the node timeout. A call that times out or fails counts as
//! a lost connection (its channels are marked unsubscribed, every waiter is
//! woken to poll, and the connection is opened again after a backoff), so a
//! hung connection never stops the task from reading its commands. A node
//! that refuses SUBSCRIBE (an ACL user without channel rights) is retried
//! slowly; its waiters poll meanwhile.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tracing::{debug, warn};

use super::bells::{Board, Channel};
use crate::error::{NodeError, NodeErrorKind};
use crate::node::{Feed, FeedConn};
use crate::telemetry::Metrics;

/// Commands to one node's pub/sub task.
/// A lock's channels go together, in one command: its own, then the
/// foreign one its waiters also listen on, if any.
pub(super) enum Command {
    Subscribe(Vec<Arc<str>>),
    Unsubscribe(Vec<Arc<str>>),
}

/// How long a pub/sub task waits for the node.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timeouts {
    pub(super) connect: Duration,
    pub(super) call: Duration,
}

/// Longest pause between two pub/sub connection attempts to one node.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(10);

/// First pause after a failure.
const FIRST_DELAY: Duration = Duration::from_millis(50);

/// Shortest pause after a node refused SUBSCRIBE: a refusal is a setting
/// (ACL channel rights), not a blip, so it is retried slowly.
const REFUSED_DELAY: Duration = Duration::from_secs(1);

/// The most locks one SUBSCRIBE asks for when subscriptions queued while
/// the task was busy are sent together.
pub(super) const MAX_BATCH: usize = 1024;

/// Locks' channels to subscribe to in one command: every channel of each,
/// and each lock's first channel, which names it on the board.
#[derive(Default)]
struct Batch {
    names: Vec<Arc<str>>,
    firsts: Vec<Arc<str>>,
}

impl Batch {
    /// Adds one lock's channels unless node `i` has them already (its
    /// connection opened since, with every channel of the board).
    fn add(&mut self, board: &Board, i: usize, names: Vec<Arc<str>>) {
        let Some(first) = names.first() else { return };
        if board
            .channel(first)
            .is_some_and(|c| c.subscribed[i].load(Ordering::Acquire))
        {
            return;
        }
        self.firsts.push(Arc::clone(first));
        self.names.extend(names);
    }
}

/// How a (un)subscription went.
enum Outcome {
    Done,
    /// The node refused it: the connection is dropped and retried slowly.
    Refused,
    /// No answer in time, or the connection failed.
    Lost,
}

async fn bounded(
    limit: Duration,
    call: impl std::future::Future<Output = Result<(), NodeError>>,
) -> Outcome {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(())) => Outcome::Done,
        Ok(Err(e)) if e.kind == NodeErrorKind::Server => Outcome::Refused,
        Ok(Err(_)) | Err(_) => Outcome::Lost,
    }
}

/// Waits `delay` while draining commands (subscribers are not kept waiting:
/// their channels are re-sent from the channel map on reconnect). Returns
/// false when the manager is gone.
async fn pause(delay: Duration, commands: &mut mpsc::UnboundedReceiver<Command>) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            biased;
            cmd = commands.recv() => if cmd.is_none() { return false },
            () = &mut sleep => return true,
        }
    }
}

/// Keeps one pub/sub connection to node `i` alive while the manager lives.
///
/// Every failure pauses before the next attempt, with a delay that doubles
/// up to [`MAX_RECONNECT_DELAY`] and resets only once a subscription
/// succeeds: a failing node costs one attempt per pause, never a spin.
/// Meanwhile its channels are not covered and waiters poll.
pub(super) async fn node_task(
    i: usize,
    feed: Arc<dyn Feed>,
    timeouts: Timeouts,
    board: Weak<Board>,
    mut commands: mpsc::UnboundedReceiver<Command>,
    metrics: Metrics,
) {
    let mut delay = FIRST_DELAY;
    let mut opened_before = false;
    loop {
        let opened = tokio::time::timeout(timeouts.connect, feed.open()).await;
        let Ok(Ok(FeedConn {
            mut sink,
            mut messages,
        })) = opened
        else {
            if !pause(delay, &mut commands).await {
                return;
            }
            delay = (delay * 2).min(MAX_RECONNECT_DELAY);
            continue;
        };
        let Some(b) = board.upgrade() else {
            return;
        };
        b.connections.fetch_add(1, Ordering::Relaxed);
        if opened_before {
            metrics.pubsub_reconnected(i);
        }
        opened_before = true;
        let current = b.sorted_channels();
        drop(b);
        let mut outcome = Outcome::Done;
        if !current.is_empty() {
            let names = current.iter().map(|(k, _)| Arc::clone(k)).collect();
            outcome = bounded(timeouts.call, sink.subscribe(names)).await;
            if let (Outcome::Done, Some(b)) = (&outcome, board.upgrade()) {
                delay = FIRST_DELAY;
                let chans: Vec<Arc<Channel>> = current.into_iter().map(|(_, c)| c).collect();
                b.covered(i, &chans, true);
            }
        }
        // A command read while coalescing subscriptions, handled next.
        let mut held: Option<Command> = None;
        while matches!(outcome, Outcome::Done) {
            let cmd = match held.take() {
                Some(cmd) => cmd,
                None => tokio::select! {
                    biased;
                    cmd = commands.recv() => match cmd {
                        None => return,
                        Some(cmd) => cmd,
                    },
                    msg = messages.next() => {
                        match msg {
                            Some(msg) => {
                                let Some(b) = board.upgrade() else { return };
                                b.deliver(i, &msg.channel, &msg.payload);
                            }
                            None => outcome = Outcome::Lost,
                        }
                        continue;
                    }
                },
            };
            match cmd {
                Command::Subscribe(names) => {
                    let Some(b) = board.upgrade() else { return };
                    let mut batch = Batch::default();
                    batch.add(&b, i, names);
                    // The subscriptions queued meanwhile go in the same
                    // SUBSCRIBE: one round trip for a crowd of new waiters
                    // (one each, a task's release messages waited behind
                    // thousands of round trips).
                    while batch.firsts.len() < MAX_BATCH {
                        match commands.try_recv() {
                            Ok(Command::Subscribe(names)) => batch.add(&b, i, names),
                            Ok(other) => {
                                held = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    drop(b);
                    if batch.firsts.is_empty() {
                        continue;
                    }
                    outcome = bounded(timeouts.call, sink.subscribe(batch.names)).await;
                    let Some(b) = board.upgrade() else { return };
                    if matches!(outcome, Outcome::Done) {
                        delay = FIRST_DELAY;
                        for c in batch.firsts.iter().filter_map(|n| b.channel(n)) {
                            c.subscribed[i].store(true, Ordering::Release);
                            c.confirmed.notify_waiters();
                        }
                    }
                }
                Command::Unsubscribe(names) => {
                    // A waiter that arrived meanwhile keeps the channel;
                    // the unsubscriptions queued meanwhile go together.
                    let Some(b) = board.upgrade() else { return };
                    let unwanted =
                        |names: Vec<Arc<str>>| names.into_iter().filter(|n| b.channel(n).is_none());
                    let mut gone: Vec<Arc<str>> = unwanted(names).collect();
                    while gone.len() < MAX_BATCH {
                        match commands.try_recv() {
                            Ok(Command::Unsubscribe(names)) => gone.extend(unwanted(names)),
                            Ok(other) => {
                                held = Some(other);
                                break;
                            }
                            Err(_) => break,
                        }
                    }
                    drop(b);
                    if !gone.is_empty() {
                        outcome = bounded(timeouts.call, sink.unsubscribe(gone)).await;
                    }
                }
            }
        }
        let Some(b) = board.upgrade() else {
            return;
        };
        if matches!(outcome, Outcome::Refused) {
            if b.refusals.fetch_add(1, Ordering::Relaxed) == 0 {
                warn!(
                    node = i,
                    "the node refused SUBSCRIBE (no channel rights?); waiters poll instead"
                );
            }
            delay = delay.max(REFUSED_DELAY);
        } else {
            debug!(
                node = i,
                "pub/sub connection lost; waiters fall back to polling"
            );
        }
        let chans: Vec<Arc<Channel>> = b.sorted_channels().into_iter().map(|(_, c)| c).collect();
        b.covered(i, &chans, false);
        drop(b);
        drop((sink, messages));
        if !pause(delay, &mut commands).await {
            return;
        }
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
}
