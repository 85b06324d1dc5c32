//! Release notifications for waiters: one pub/sub connection per node,
//! shared by every waiter of a manager, and a local FIFO so that the
//! longest-waiting local waiter retries first.
//!
//! A released lock publishes on `<prefix>{name}:released` on every node where
//! it was held. A waiter subscribes to that channel (the first waiter of a
//! channel sends SUBSCRIBE on every node; a second after the last one left,
//! UNSUBSCRIBE follows unless a waiter came back), retries once the
//! subscription is confirmed, then sleeps
//! until a message from any node arrives or a fallback timer fires.
//!
//! When a node's pub/sub connection breaks, its channels are marked
//! unsubscribed and every waiter is woken, so that waiters whose channel is
//! no longer covered by enough nodes fall back to polling with the backoff;
//! the connection is re-established with backoff and resubscribes.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, watch};
use tracing::debug;

use crate::lock::lock;

/// Commands to one node's pub/sub task.
enum Command {
    Subscribe(Arc<str>),
    Unsubscribe(Arc<str>),
}

/// One channel's waiters.
struct Channel {
    /// Bumped on every release message (and on pub/sub disconnects).
    generation: watch::Sender<u64>,
    /// Per node: SUBSCRIBE confirmed on the live connection.
    subscribed: Vec<AtomicBool>,
    /// Local waiters in arrival order, by ticket.
    queue: Mutex<VecDeque<u64>>,
    /// Waiters holding this channel.
    refs: Mutex<usize>,
    /// Woken when a node confirms the subscription.
    confirmed: tokio::sync::Notify,
    /// An unsubscribe is scheduled.
    retiring: AtomicBool,
}

impl Channel {
    fn bump(&self) {
        self.generation.send_modify(|g| *g = g.wrapping_add(1));
    }

    fn coverage(&self) -> usize {
        self.subscribed
            .iter()
            .filter(|s| s.load(Ordering::Acquire))
            .count()
    }
}

struct Shared {
    channels: Mutex<HashMap<Arc<str>, Arc<Channel>>>,
    nodes: usize,
    next_ticket: AtomicU64,
    reconnects: AtomicU64,
    messages: AtomicU64,
}

/// Counters of the waiters' pub/sub connections.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PubSubStats {
    /// Release messages received, over all nodes.
    pub messages: u64,
    /// Pub/sub connections established, over all nodes (reconnects included).
    pub connections: u64,
    /// Channels with at least one local waiter now.
    pub channels: usize,
}

/// The waiters' side of a manager.
pub(crate) struct Notifier {
    shared: Arc<Shared>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    /// Nodes whose subscriptions must cover a channel for messages to be
    /// trusted: any holder's quorum then overlaps them.
    needed: usize,
}

impl Notifier {
    /// Starts one pub/sub task per client on the current runtime. With no
    /// clients (fake nodes), waiters only ever poll.
    pub(crate) fn start(n: usize, clients: Vec<redis::Client>, required: usize) -> Self {
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            nodes: n,
            next_ticket: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            messages: AtomicU64::new(0),
        });
        let mut senders = Vec::with_capacity(n);
        for (i, client) in clients.into_iter().enumerate() {
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                drop(handle.spawn(node_task(i, client, Arc::downgrade(&shared), rx)));
            }
        }
        Self {
            shared,
            senders,
            needed: n.saturating_sub(required) + 1,
        }
    }

    /// Joins the waiters of `channel`, subscribing on every node if this is
    /// the first one.
    pub(crate) fn waiter(&self, channel: &str) -> Waiter {
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed);
        let mut channels = lock(&self.shared.channels);
        let (chan, first) = match channels.get(channel) {
            Some(c) => (Arc::clone(c), false),
            None => {
                let c = Arc::new(Channel {
                    generation: watch::Sender::new(0),
                    subscribed: (0..self.shared.nodes)
                        .map(|_| AtomicBool::new(false))
                        .collect(),
                    queue: Mutex::new(VecDeque::new()),
                    refs: Mutex::new(0),
                    confirmed: tokio::sync::Notify::new(),
                    retiring: AtomicBool::new(false),
                });
                channels.insert(channel.into(), Arc::clone(&c));
                (c, true)
            }
        };
        *lock(&chan.refs) += 1;
        lock(&chan.queue).push_back(ticket);
        let name: Arc<str> = channel.into();
        if first {
            for tx in &self.senders {
                let _ = tx.send(Command::Subscribe(Arc::clone(&name)));
            }
        }
        drop(channels);
        Waiter {
            rx: chan.generation.subscribe(),
            chan,
            name,
            ticket,
            shared: Arc::clone(&self.shared),
            senders: self.senders.clone(),
            needed: self.needed,
            acquired: false,
        }
    }

    /// Whether local waiters are queued on `channel`: a newcomer then joins
    /// the queue instead of trying first.
    pub(crate) fn has_waiters(&self, channel: &str) -> bool {
        lock(&self.shared.channels)
            .get(channel)
            .is_some_and(|c| !lock(&c.queue).is_empty())
    }

    pub(crate) fn stats(&self) -> PubSubStats {
        PubSubStats {
            messages: self.shared.messages.load(Ordering::Relaxed),
            connections: self.shared.reconnects.load(Ordering::Relaxed),
            channels: lock(&self.shared.channels).len(),
        }
    }
}

/// One waiting acquisition's membership of a channel. Dropping it leaves
/// the queue and, for the last waiter, unsubscribes on every node.
pub(crate) struct Waiter {
    chan: Arc<Channel>,
    rx: watch::Receiver<u64>,
    name: Arc<str>,
    ticket: u64,
    shared: Arc<Shared>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    needed: usize,
    acquired: bool,
}

/// Why a wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// A release message (or a queue change) woke us.
    Notified,
    /// The fallback timer fired.
    Timer,
}

impl Waiter {
    /// Records the current generation: a message that arrives from now on
    /// ends the next `wait` at once.
    pub(crate) fn mark(&mut self) {
        self.rx.borrow_and_update();
    }

    /// Whether enough nodes confirmed the subscription for release messages
    /// to be relied on.
    pub(crate) fn covered(&self) -> bool {
        self.chan.coverage() >= self.needed
    }

    /// Waits until the subscription is confirmed on enough nodes, or `limit`.
    pub(crate) async fn confirmed(&self, limit: Duration) {
        let wait = async {
            loop {
                let notified = self.chan.confirmed.notified();
                if self.covered() {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(limit, wait).await;
    }

    /// Whether this waiter is the longest-waiting local one.
    pub(crate) fn is_head(&self) -> bool {
        lock(&self.chan.queue).front() == Some(&self.ticket)
    }

    /// Sleeps until a release message reaches this waiter while it heads the
    /// local queue, or until `fallback` passes. Any waiter also wakes when
    /// release messages stop being covered, to fall back to polling.
    pub(crate) async fn wait(&mut self, fallback: Duration) -> Woke {
        let timer = tokio::time::sleep(fallback);
        tokio::pin!(timer);
        loop {
            // Biased, so that a seeded simulation replays the same wake-ups.
            tokio::select! {
                biased;
                () = &mut timer => return Woke::Timer,
                changed = self.rx.changed() => {
                    if changed.is_err() {
                        // The channel is gone; only the timer is left.
                        (&mut timer).await;
                        return Woke::Timer;
                    }
                    if self.is_head() || !self.covered() {
                        return Woke::Notified;
                    }
                }
            }
        }
    }

    /// Marks the acquisition as successful: leaving the queue then does not
    /// wake the next waiter (the lock is taken).
    pub(crate) fn acquired(mut self) {
        self.acquired = true;
    }
}

/// How long a channel stays subscribed after its last waiter left, so that a
/// task that takes the same lock again and again does not SUBSCRIBE and
/// UNSUBSCRIBE on every node each time.
const LINGER: Duration = Duration::from_secs(1);

impl Waiter {
    /// Unsubscribes the channel after [`LINGER`] unless a waiter came back.
    fn linger(&self) {
        if self.chan.retiring.swap(true, Ordering::AcqRel) {
            return; // a retirement is already scheduled
        }
        let retire = {
            let shared = Arc::downgrade(&self.shared);
            let (chan, name, senders) = (
                Arc::clone(&self.chan),
                Arc::clone(&self.name),
                self.senders.clone(),
            );
            move || {
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let mut channels = lock(&shared.channels);
                chan.retiring.store(false, Ordering::Release);
                let unused = *lock(&chan.refs) == 0
                    && channels.get(&name).is_some_and(|c| Arc::ptr_eq(c, &chan));
                if unused {
                    channels.remove(&name);
                    for tx in &senders {
                        let _ = tx.send(Command::Unsubscribe(Arc::clone(&name)));
                    }
                }
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => drop(handle.spawn(async move {
                tokio::time::sleep(LINGER).await;
                retire();
            })),
            Err(_) => retire(),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        let channels = lock(&self.shared.channels);
        let was_head = {
            let mut q = lock(&self.chan.queue);
            let was_head = q.front() == Some(&self.ticket);
            q.retain(|t| *t != self.ticket);
            was_head
        };
        let mut refs = lock(&self.chan.refs);
        *refs = refs.saturating_sub(1);
        if *refs == 0 {
            drop(refs);
            drop(channels);
            self.linger();
        } else if was_head && !self.acquired {
            // Let the next waiter try in our place.
            self.chan.bump();
        }
    }
}

/// Keeps one pub/sub connection to node `i` alive while the manager lives.
async fn node_task(
    i: usize,
    client: redis::Client,
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut delay = Duration::from_millis(50);
    loop {
        let connected =
            tokio::time::timeout(Duration::from_secs(2), client.get_async_pubsub()).await;
        let pubsub = match connected {
            Ok(Ok(p)) => p,
            _ => {
                // Drain commands so subscribers are not kept waiting; they
                // are re-sent from the channel map on reconnect.
                let sleep = tokio::time::sleep(delay);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        () = &mut sleep => break,
                        cmd = commands.recv() => if cmd.is_none() { return },
                    }
                }
                delay = (delay * 2).min(Duration::from_secs(2));
                continue;
            }
        };
        delay = Duration::from_millis(50);
        let (mut sink, mut stream) = pubsub.split();
        let Some(s) = shared.upgrade() else {
            return;
        };
        s.reconnects.fetch_add(1, Ordering::Relaxed);
        let current: Vec<(Arc<str>, Arc<Channel>)> = lock(&s.channels)
            .iter()
            .map(|(k, c)| (Arc::clone(k), Arc::clone(c)))
            .collect();
        drop(s);
        let mut ok = true;
        if !current.is_empty() {
            let names: Vec<&str> = current.iter().map(|(k, _)| &**k).collect();
            ok = sink.subscribe(names).await.is_ok();
            if ok {
                for (_, c) in &current {
                    c.subscribed[i].store(true, Ordering::Release);
                    c.confirmed.notify_waiters();
                    c.bump();
                }
            }
        }
        while ok {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(msg) => {
                        let Some(s) = shared.upgrade() else { return };
                        s.messages.fetch_add(1, Ordering::Relaxed);
                        let chan = lock(&s.channels).get(msg.get_channel_name()).cloned();
                        if let Some(c) = chan {
                            c.bump();
                        }
                    }
                    None => ok = false,
                },
                cmd = commands.recv() => match cmd {
                    None => return,
                    Some(Command::Subscribe(name)) => {
                        let Some(s) = shared.upgrade() else { return };
                        let chan = lock(&s.channels).get(&name).cloned();
                        drop(s);
                        if sink.subscribe(&*name).await.is_ok() {
                            if let Some(c) = chan {
                                c.subscribed[i].store(true, Ordering::Release);
                                c.confirmed.notify_waiters();
                            }
                        } else {
                            ok = false;
                        }
                    }
                    Some(Command::Unsubscribe(name)) => {
                        // A waiter that arrived meanwhile keeps the channel.
                        let Some(s) = shared.upgrade() else { return };
                        let still_wanted = lock(&s.channels).contains_key(&name);
                        drop(s);
                        if !still_wanted && sink.unsubscribe(&*name).await.is_err() {
                            ok = false;
                        }
                    }
                },
            }
        }
        debug!(
            node = i,
            "pub/sub connection lost; waiters fall back to polling"
        );
        let Some(s) = shared.upgrade() else {
            return;
        };
        for c in lock(&s.channels).values() {
            c.subscribed[i].store(false, Ordering::Release);
            c.bump();
        }
    }
}
