//! Release notifications for waiters: one pub/sub connection per node,
//! shared by every waiter of a manager, and a local FIFO so that the
//! longest-waiting local waiter retries first.
//!
//! A released lock publishes on `<prefix>{name}:released` on every node where
//! it was held. A waiter subscribes to that channel (the first waiter of a
//! channel sends SUBSCRIBE on every node; a second after the last one left,
//! UNSUBSCRIBE follows unless a waiter came back), retries once the
//! subscription is confirmed, then sleeps until its bell rings or a fallback
//! timer fires.
//!
//! A release message names the waiter whose turn it is on that node (the
//! head of the lock's queue on the node, see the `queue` module). A message
//! naming another manager's waiter rings nobody here. One naming a fair
//! waiter of this manager rings that waiter; one naming a plain waiter of
//! this manager (or one that has left), or nobody (no waiter queued on the
//! node), rings the head of the local queue, whatever the queue's length.
//! A head that leaves without the lock rings the next one.
//! A waiter rung by another manager's release attempts once rung by a
//! quorum of nodes (the release ran there), or a few milliseconds after the
//! first ring: an attempt on the first node's message would often find the
//! release not yet run elsewhere, miss, and be rolled back. A release by
//! this manager rings for an attempt at once: its calls went to every node
//! ahead of the attempt, on the same connections.
//! Every waiter's fallback timer ends no later than the holder's key is
//! known to expire (the PTTL seen by the last attempt, or the lease of a
//! local holder), since an expiry publishes nothing.
//!
//! When a node's pub/sub connection breaks, its channels are marked
//! unsubscribed and every waiter is woken, so that waiters whose channel is
//! no longer covered by enough nodes fall back to polling with the backoff;
//! the connection is re-established with backoff and resubscribes.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{mpsc, Notify};
use tokio::time::Instant;
use tracing::{debug, warn};

use crate::node::{Feed, FeedConn};
use crate::sync::locked;

/// Commands to one node's pub/sub task.
enum Command {
    Subscribe(Arc<str>),
    Unsubscribe(Arc<str>),
}

/// One queued waiter's doorbell: rung to end its wait.
#[derive(Default)]
struct Bell {
    rings: AtomicU64,
    /// A ring since the waiter last looked needs no quorum of rings (see
    /// [`Waiter::wait`]).
    prompt: AtomicBool,
    notify: Notify,
}

impl Bell {
    /// Rings for something that needs no other node's word: this manager's
    /// own release (its calls reach every node on the same connections as
    /// the waiter's attempt, so ahead of it), a lock found free, a change
    /// of coverage, the previous head leaving.
    fn ring(&self, shared: &Shared) {
        self.prompt.store(true, Ordering::Release);
        self.ring_remote(shared);
    }

    fn ring_for(&self, shared: &Shared, prompt: bool) {
        if prompt {
            self.ring(shared);
        } else {
            self.ring_remote(shared);
        }
    }

    /// Rings for another manager's release, seen on one node: it may not
    /// have run on the others yet.
    fn ring_remote(&self, shared: &Shared) {
        self.rings.fetch_add(1, Ordering::AcqRel);
        shared.wakeups.fetch_add(1, Ordering::Relaxed);
        self.notify.notify_one();
    }
}

/// One channel's waiters.
struct Channel {
    /// Per node: SUBSCRIBE confirmed on the live connection.
    subscribed: Vec<AtomicBool>,
    /// Local waiters in arrival order, by ticket: joining, leaving and
    /// finding the head cost O(log W).
    queue: Mutex<BTreeMap<u64, Arc<Bell>>>,
    /// Local fair waiters, by their id in the nodes' queue.
    named: Mutex<HashMap<Arc<str>, Arc<Bell>>>,
    /// The latest instant the current holder's key is known to expire at:
    /// no waiter sleeps past it, since an expiry publishes nothing.
    holder_until: Mutex<Option<Instant>>,
    /// Waiters holding this channel.
    refs: Mutex<usize>,
    /// Woken when a node confirms the subscription.
    confirmed: Notify,
    /// An unsubscribe is scheduled.
    retiring: AtomicBool,
}

impl Channel {
    fn new(nodes: usize) -> Self {
        Self {
            subscribed: (0..nodes).map(|_| AtomicBool::new(false)).collect(),
            queue: Mutex::new(BTreeMap::new()),
            named: Mutex::new(HashMap::new()),
            holder_until: Mutex::new(None),
            refs: Mutex::new(0),
            confirmed: Notify::new(),
            retiring: AtomicBool::new(false),
        }
    }

    /// Rings the longest-waiting local waiter only.
    fn wake_head(&self, shared: &Shared, prompt: bool) {
        let head = locked(&self.queue).values().next().cloned();
        if let Some(bell) = head {
            bell.ring_for(shared, prompt);
        }
    }

    /// A message `<waiter> <releaser>` (see `release.lua`): the waiter it
    /// names if that is a fair waiter of ours, nobody if it is another
    /// manager's, else the local head. A release by another manager (the
    /// releaser's holder id does not start with our client id) rings
    /// without `prompt`.
    fn wake_named(&self, payload: &[u8], shared: &Shared) {
        let text = std::str::from_utf8(payload).unwrap_or_default();
        let (id, releaser) = text.split_once(' ').unwrap_or((text, ""));
        let ours = |id: &str| {
            id.strip_prefix(&*shared.client_id)
                .is_some_and(|rest| rest.starts_with(':'))
        };
        let prompt = releaser.is_empty() || ours(releaser);
        if !id.is_empty() {
            let named = locked(&self.named).get(id).cloned();
            if let Some(bell) = named {
                bell.ring_for(shared, prompt);
                return;
            }
            if !ours(id) {
                return;
            }
        }
        self.wake_head(shared, prompt);
    }

    /// Coverage changed (a pub/sub connection came or went): every waiter
    /// re-checks whether to poll. Rare, unlike release messages.
    fn wake_all(&self, shared: &Shared) {
        let bells: Vec<Arc<Bell>> = locked(&self.queue).values().cloned().collect();
        for bell in bells {
            bell.ring(shared);
        }
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
    /// The manager's client id: the prefix of its waiters' ids.
    client_id: Arc<str>,
    nodes: usize,
    next_ticket: AtomicU64,
    reconnects: AtomicU64,
    messages: AtomicU64,
    wakeups: AtomicU64,
    refusals: AtomicU64,
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
    /// Waiters woken by a release message, a queue change or a change of
    /// coverage: one per release message whatever the queue's length.
    pub wakeups: u64,
    /// Subscriptions a node refused (e.g. an ACL user without channel
    /// rights); waiters then poll with the backoff.
    pub refusals: u64,
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
    /// Starts one pub/sub task per client on the current runtime, each
    /// connecting within `connect_timeout`. With no clients (fake nodes),
    /// waiters only ever poll.
    pub(crate) fn start(
        client_id: &str,
        feeds: Vec<Option<Arc<dyn Feed>>>,
        required: usize,
        connect_timeout: Duration,
    ) -> Self {
        let n = feeds.len();
        let shared = Arc::new(Shared {
            channels: Mutex::new(HashMap::new()),
            client_id: client_id.into(),
            nodes: n,
            next_ticket: AtomicU64::new(0),
            reconnects: AtomicU64::new(0),
            messages: AtomicU64::new(0),
            wakeups: AtomicU64::new(0),
            refusals: AtomicU64::new(0),
        });
        let mut senders = Vec::with_capacity(n);
        for (i, feed) in feeds.into_iter().enumerate() {
            let Some(feed) = feed else { continue };
            let (tx, rx) = mpsc::unbounded_channel();
            senders.push(tx);
            if let Ok(handle) = tokio::runtime::Handle::try_current() {
                drop(handle.spawn(node_task(
                    i,
                    feed,
                    connect_timeout,
                    Arc::downgrade(&shared),
                    rx,
                )));
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
        let mut channels = locked(&self.shared.channels);
        self.enter(&mut channels, channel)
    }

    /// Joins the waiters of `channel` only if some are queued already (a
    /// newcomer then queues behind them instead of barging in). Decided
    /// under the channel map's lock, so a newcomer that arrives as the last
    /// waiter leaves either finds the queue empty or becomes its head.
    pub(crate) fn join_if_queued(&self, channel: &str) -> Option<Waiter> {
        let mut channels = locked(&self.shared.channels);
        let queued = channels
            .get(channel)
            .is_some_and(|c| !locked(&c.queue).is_empty());
        queued.then(|| self.enter(&mut channels, channel))
    }

    /// Joins the waiters of `channel` only if this manager is subscribed to
    /// it on enough nodes already (other waiters, or one that left less
    /// than [`LINGER`] ago): a waiter named before its first attempt needs
    /// no second one to catch a release that came before it listened.
    pub(crate) fn join_if_covered(&self, channel: &str) -> Option<Waiter> {
        let mut channels = locked(&self.shared.channels);
        let covered = channels
            .get(channel)
            .is_some_and(|c| c.coverage() >= self.needed);
        covered.then(|| self.enter(&mut channels, channel))
    }

    fn enter(&self, channels: &mut HashMap<Arc<str>, Arc<Channel>>, channel: &str) -> Waiter {
        let ticket = self.shared.next_ticket.fetch_add(1, Ordering::Relaxed);
        let name: Arc<str> = channel.into();
        let chan = match channels.get(channel) {
            Some(c) => Arc::clone(c),
            None => {
                let c = Arc::new(Channel::new(self.shared.nodes));
                channels.insert(Arc::clone(&name), Arc::clone(&c));
                for tx in &self.senders {
                    let _ = tx.send(Command::Subscribe(Arc::clone(&name)));
                }
                c
            }
        };
        *locked(&chan.refs) += 1;
        let bell = Arc::new(Bell::default());
        locked(&chan.queue).insert(ticket, Arc::clone(&bell));
        Waiter {
            chan,
            bell,
            seen: 0,
            name,
            ticket,
            shared: Arc::clone(&self.shared),
            senders: self.senders.clone(),
            needed: self.needed,
            acquired: false,
            id: None,
        }
    }

    pub(crate) fn stats(&self) -> PubSubStats {
        PubSubStats {
            messages: self.shared.messages.load(Ordering::Relaxed),
            connections: self.shared.reconnects.load(Ordering::Relaxed),
            channels: locked(&self.shared.channels).len(),
            wakeups: self.shared.wakeups.load(Ordering::Relaxed),
            refusals: self.shared.refusals.load(Ordering::Relaxed),
        }
    }
}

/// One waiting acquisition's membership of a channel. Dropping it leaves
/// the queue (waking the next waiter if it headed the queue without taking
/// the lock) and, for the last waiter, unsubscribes on every node.
pub(crate) struct Waiter {
    chan: Arc<Channel>,
    bell: Arc<Bell>,
    /// Rings seen so far: a ring after `mark` ends the next `wait` at once.
    seen: u64,
    name: Arc<str>,
    ticket: u64,
    shared: Arc<Shared>,
    senders: Vec<mpsc::UnboundedSender<Command>>,
    needed: usize,
    acquired: bool,
    /// The waiter's id in the nodes' queue, once it has a place there.
    id: Option<Arc<str>>,
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
    /// Records the rings so far: a ring that arrives from now on ends the
    /// next `wait` at once.
    pub(crate) fn mark(&mut self) {
        self.seen = self.bell.rings.load(Ordering::Acquire);
        self.bell.prompt.store(false, Ordering::Release);
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

    /// Gives a fair waiter its id in the nodes' queue: release messages
    /// naming it ring it (and not the local head).
    pub(crate) fn name(&mut self, id: &Arc<str>) {
        if self.id.is_none() {
            locked(&self.chan.named).insert(Arc::clone(id), Arc::clone(&self.bell));
            self.id = Some(Arc::clone(id));
        }
    }

    /// How many rings end a wait at once: one per node of a quorum (the
    /// nodes a release must have run on for an attempt to win), or fewer if
    /// fewer nodes are subscribed.
    fn quorum_of_messages(&self) -> u64 {
        let quorum = (self.shared.nodes + 1).saturating_sub(self.needed);
        u64::try_from(quorum.min(self.chan.coverage())).unwrap_or(u64::MAX)
    }

    /// Whether this waiter is the longest-waiting local one.
    pub(crate) fn is_head(&self) -> bool {
        locked(&self.chan.queue).keys().next() == Some(&self.ticket)
    }

    /// Records that the lock's holder has `pttl` left on the nodes.
    pub(crate) fn holder_seen(&self, pttl: Duration) {
        *locked(&self.chan.holder_until) = Instant::now().checked_add(pttl);
    }

    /// How long until the current holder's key is known to expire, if known.
    pub(crate) fn holder_left(&self) -> Option<Duration> {
        locked(&self.chan.holder_until).map(|t| t.saturating_duration_since(Instant::now()))
    }

    /// Sleeps until this waiter's bell rings (a release message while it
    /// heads the local queue, the previous head leaving, a change of
    /// coverage), or until `fallback` passes. While release messages are
    /// covered, a timer that fires before the holder's known expiry (moved
    /// later by a newer holder) sleeps on until it, never past `deadline`:
    /// no attempt is made while the lock is known to be held.
    pub(crate) async fn wait(&mut self, fallback: Duration, deadline: Option<Instant>) -> Woke {
        let now = Instant::now();
        let mut until = now
            .checked_add(fallback)
            .unwrap_or(now + Duration::from_secs(86_400));
        let mut grace: Option<Instant> = None;
        loop {
            let notified = self.bell.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let rings = self.bell.rings.load(Ordering::Acquire);
            if rings != self.seen {
                // A release publishes on every node as it runs there: the
                // first message may come before the release ran on a quorum,
                // and an attempt then would miss and be rolled back. Wait for
                // a quorum's messages, or a moment for the rest.
                let now = Instant::now();
                let due = grace.get_or_insert(now + QUORUM_GRACE);
                let prompt = self.bell.prompt.swap(false, Ordering::AcqRel);
                if prompt || rings - self.seen >= self.quorum_of_messages() || now >= *due {
                    self.seen = rings;
                    return Woke::Notified;
                }
            }
            // Biased, so that a seeded simulation replays the same wake-ups.
            tokio::select! {
                biased;
                () = &mut notified => {}
                // The grace ends before the timer: look at the rings again.
                () = tokio::time::sleep_until(grace.unwrap_or(until)), if grace.is_some_and(|g| g < until) => {}
                () = tokio::time::sleep_until(until) => {
                    let later = locked(&self.chan.holder_until)
                        .filter(|h| *h > Instant::now())
                        .map(|h| h + jitter());
                    match later {
                        Some(h) if self.covered() && h > until => {
                            until = deadline.map_or(h, |d| h.min(d));
                            if until <= Instant::now() {
                                return Woke::Timer;
                            }
                        }
                        _ => return Woke::Timer,
                    }
                }
            }
        }
    }

    /// Marks the acquisition as successful, holding the lock on the nodes
    /// for `lease` from now: queued waiters sleep until then at most, and
    /// leaving the queue does not wake the next waiter (the lock is taken;
    /// its release message will).
    pub(crate) fn acquired(mut self, lease: Duration) {
        self.holder_seen(lease);
        self.acquired = true;
    }
}

/// How long a waiter whose bell rang waits for the release messages of the
/// other nodes of a quorum before it attempts anyway (a node that is down,
/// or a ring that is not a release: a change of coverage, the previous head
/// leaving).
const QUORUM_GRACE: Duration = Duration::from_millis(5);

/// Up to 2 ms, so that waiters whose timers end together spread out.
fn jitter() -> Duration {
    Duration::from_micros(crate::rng::up_to(2_000))
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
                let mut channels = locked(&shared.channels);
                chan.retiring.store(false, Ordering::Release);
                let unused = *locked(&chan.refs) == 0
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
        let channels = locked(&self.shared.channels);
        let next = {
            let mut q = locked(&self.chan.queue);
            let was_head = q.keys().next() == Some(&self.ticket);
            q.remove(&self.ticket);
            if let Some(id) = &self.id {
                locked(&self.chan.named).remove(id);
            }
            // Let the next waiter try in our place.
            (was_head && !self.acquired)
                .then(|| q.values().next().cloned())
                .flatten()
        };
        if let Some(bell) = next {
            bell.ring(&self.shared);
        }
        let mut refs = locked(&self.chan.refs);
        *refs = refs.saturating_sub(1);
        if *refs == 0 {
            drop(refs);
            drop(channels);
            self.linger();
        }
    }
}

/// Longest pause between two pub/sub connection attempts to one node.
const MAX_RECONNECT_DELAY: Duration = Duration::from_secs(10);

/// Shortest pause after a node refused SUBSCRIBE: a refusal is a setting
/// (ACL channel rights), not a blip, so it is retried slowly.
const REFUSED_DELAY: Duration = Duration::from_secs(1);

/// Waits `delay` while draining commands (subscribers are not kept waiting:
/// their channels are re-sent from the channel map on reconnect). Returns
/// false when the manager is gone.
async fn pause(delay: Duration, commands: &mut mpsc::UnboundedReceiver<Command>) -> bool {
    let sleep = tokio::time::sleep(delay);
    tokio::pin!(sleep);
    loop {
        tokio::select! {
            biased;
            () = &mut sleep => return true,
            cmd = commands.recv() => if cmd.is_none() { return false },
        }
    }
}

/// Keeps one pub/sub connection to node `i` alive while the manager lives.
///
/// Every failure (connecting, or a SUBSCRIBE the node refuses, such as an
/// ACL user without channel rights) pauses before the next attempt, with a
/// delay that doubles up to [`MAX_RECONNECT_DELAY`] and resets only once a
/// subscription succeeds: a refusing node costs one attempt per pause, never
/// a spin. Meanwhile its channels are not covered and waiters poll.
async fn node_task(
    i: usize,
    feed: Arc<dyn Feed>,
    connect_timeout: Duration,
    shared: Weak<Shared>,
    mut commands: mpsc::UnboundedReceiver<Command>,
) {
    let mut delay = Duration::from_millis(50);
    loop {
        let connected = tokio::time::timeout(connect_timeout, feed.open()).await;
        let Ok(Ok(FeedConn {
            mut sink,
            messages: mut stream,
        })) = connected
        else {
            if !pause(delay, &mut commands).await {
                return;
            }
            delay = (delay * 2).min(MAX_RECONNECT_DELAY);
            continue;
        };
        let Some(s) = shared.upgrade() else {
            return;
        };
        s.reconnects.fetch_add(1, Ordering::Relaxed);
        let mut current: Vec<(Arc<str>, Arc<Channel>)> = locked(&s.channels)
            .iter()
            .map(|(k, c)| (Arc::clone(k), Arc::clone(c)))
            .collect();
        current.sort_by(|a, b| a.0.cmp(&b.0)); // a seeded simulation replays its wake-ups
        let mut ok = true;
        if !current.is_empty() {
            let names: Vec<Arc<str>> = current.iter().map(|(k, _)| Arc::clone(k)).collect();
            ok = sink.subscribe(names).await.is_ok();
            if ok {
                delay = Duration::from_millis(50);
                for (_, c) in &current {
                    c.subscribed[i].store(true, Ordering::Release);
                    c.confirmed.notify_waiters();
                    c.wake_all(&s);
                }
            } else {
                refused(&s, i);
                delay = delay.max(REFUSED_DELAY);
            }
        }
        drop(s);
        while ok {
            tokio::select! {
                biased;
                msg = stream.next() => match msg {
                    Some(msg) => {
                        let Some(s) = shared.upgrade() else { return };
                        s.messages.fetch_add(1, Ordering::Relaxed);
                        let chan = locked(&s.channels).get(&msg.channel).cloned();
                        if let Some(c) = chan {
                            c.wake_named(&msg.payload, &s);
                        }
                    }
                    None => ok = false,
                },
                cmd = commands.recv() => match cmd {
                    None => return,
                    Some(Command::Subscribe(name)) => {
                        let Some(s) = shared.upgrade() else { return };
                        let chan = locked(&s.channels).get(&name).cloned();
                        if sink.subscribe(vec![Arc::clone(&name)]).await.is_ok() {
                            delay = Duration::from_millis(50);
                            if let Some(c) = chan {
                                c.subscribed[i].store(true, Ordering::Release);
                                c.confirmed.notify_waiters();
                            }
                        } else {
                            refused(&s, i);
                            delay = delay.max(REFUSED_DELAY);
                            ok = false;
                        }
                    }
                    Some(Command::Unsubscribe(name)) => {
                        // A waiter that arrived meanwhile keeps the channel.
                        let Some(s) = shared.upgrade() else { return };
                        let still_wanted = locked(&s.channels).contains_key(&name);
                        drop(s);
                        if !still_wanted && sink.unsubscribe(Arc::clone(&name)).await.is_err() {
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
        let channels: BTreeMap<Arc<str>, Arc<Channel>> =
            locked(&s.channels).clone().into_iter().collect();
        for c in channels.into_values() {
            c.subscribed[i].store(false, Ordering::Release);
            c.wake_all(&s);
        }
        drop(s);
        if !pause(delay, &mut commands).await {
            return;
        }
        delay = (delay * 2).min(MAX_RECONNECT_DELAY);
    }
}

/// Counts a refused subscription; warns on the first one of a manager.
fn refused(s: &Shared, node: usize) {
    if s.refusals.fetch_add(1, Ordering::Relaxed) == 0 {
        warn!(
            node,
            "the node refused SUBSCRIBE (no channel rights?); waiters poll instead"
        );
    }
}
