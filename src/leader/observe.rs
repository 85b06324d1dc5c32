//! The observers of a manager: one watch per election name, whatever the
//! number of observers of it in the process, each a
//! `tokio::sync::watch::Receiver<Option<Leader>>` of one channel.
//!
//! The watch of a name is one task: it reads the leader by one quorum read
//! (`super::read`) when it starts, whenever a member publishes on the
//! election's channels (a proclaim on `:elected`, a resignation or forced
//! unlock on the lock's `:released`), when the agreed leader's keys are due
//! to expire (an expiry publishes nothing), and at the latest every poll
//! interval (the manager's renew interval: a message lost, a member that
//! came back). Messages come over one subscriber connection per member of
//! the watch's own, so the members' cost is one read per change per
//! process, not one per observer.
//!
//! What it sends never goes back: a leader only of a later (term,
//! revision) than every leader sent before, `None` only when a quorum read
//! finds nobody can lead (`Agreement::Vacant`); an undecided or
//! unavailable read changes nothing. The task ends once its last receiver
//! is dropped.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tracing::debug;

use super::{read, Leader};
use crate::keys::Keys;
use crate::members::Members;
use crate::node::Feed;
use crate::quorum::Agreement;
use crate::sync::locked;

type Watches = Mutex<HashMap<Arc<str>, watch::Sender<Option<Leader>>>>;

/// One manager's watches, by election lock name.
#[derive(Default)]
pub(crate) struct Observers {
    watches: Arc<Watches>,
}

impl Observers {
    /// A receiver of the leader of `keys`'s election: of the watch already
    /// running for it, or of a new one. Without a runtime there is no
    /// watch: the receiver stays at `None` and its sender is gone.
    pub(crate) fn observe(
        &self,
        nodes: &Arc<Members>,
        keys: &Arc<Keys>,
    ) -> watch::Receiver<Option<Leader>> {
        let mut watches = locked(&self.watches);
        if let Some(tx) = watches.get(&keys.name) {
            return tx.subscribe();
        }
        let (tx, rx) = watch::channel(None);
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            return rx;
        };
        watches.insert(Arc::clone(&keys.name), tx.clone());
        let task = Watch {
            nodes: Arc::clone(nodes),
            keys: Arc::clone(keys),
            tx,
            watches: Arc::downgrade(&self.watches),
        };
        drop(handle.spawn(crate::clock::inherit(task.run())));
        rx
    }

    /// How many watches run (tests).
    #[cfg(test)]
    pub(crate) fn running(&self) -> usize {
        locked(&self.watches).len()
    }
}

/// The watch of one election name.
struct Watch {
    nodes: Arc<Members>,
    keys: Arc<Keys>,
    tx: watch::Sender<Option<Leader>>,
    watches: Weak<Watches>,
}

/// Slack after the agreed leader's keys are due to expire before the read
/// that is to find them gone.
const EXPIRY_SLACK: Duration = Duration::from_millis(5);

impl Watch {
    async fn run(self) {
        let wake = Arc::new(Notify::new());
        let mut listeners = JoinSet::new();
        let channels: Vec<Arc<str>> = vec![
            self.keys.elected_channel().into(),
            self.keys.channel.as_str().into(),
        ];
        for node in self.nodes.all() {
            if let Some(feed) = node.feed() {
                listeners.spawn(crate::clock::inherit(listen(
                    feed,
                    channels.clone(),
                    Arc::clone(&wake),
                    self.nodes.config.connect_timeout + self.nodes.config.node_timeout,
                )));
            }
        }
        let poll = self.nodes.config.renew_interval;
        let mut last: Option<(u64, u64)> = None;
        loop {
            let r = read(&self.nodes, &self.keys).await;
            let mut next = poll;
            match r.agreement {
                Agreement::Leader(rec) => {
                    let leader = Leader::from_record(&rec);
                    // Only a later (term, revision) than any sent: the
                    // same one again (after a read that found nobody)
                    // or an older one is not news.
                    if last.is_none_or(|v| leader.version() > v) {
                        last = Some(leader.version());
                        self.tx.send_replace(Some(leader));
                    }
                    if let Some(e) = r.expires_in {
                        next = next.min(e + EXPIRY_SLACK);
                    }
                }
                Agreement::Vacant => {
                    self.tx.send_if_modified(|v| v.take().is_some());
                }
                Agreement::Undecided | Agreement::Unavailable => {
                    debug!(election = %self.keys.name, failures = r.failures.len(), "leader undecided");
                    next = next.min(self.nodes.config.node_timeout.max(EXPIRY_SLACK));
                }
            }
            tokio::select! {
                biased;
                () = wake.notified() => {}
                () = crate::clock::sleep(next) => {}
                () = self.tx.closed() => {
                    if self.retire() {
                        return;
                    }
                }
            }
        }
    }

    /// Ends the watch if nobody receives it any more, decided under the
    /// watches' lock (a new observer subscribes under it too).
    fn retire(&self) -> bool {
        let Some(watches) = self.watches.upgrade() else {
            return true;
        };
        let mut watches = locked(&watches);
        if self.tx.receiver_count() > 0 {
            return false;
        }
        if watches
            .get(&self.keys.name)
            .is_some_and(|tx| tx.same_channel(&self.tx))
        {
            watches.remove(&self.keys.name);
        }
        true
    }
}

/// Listens on `channels` of one member: every message, and every new
/// subscription (messages may have been missed before it), wakes the
/// watch. Reconnects after a pause when the connection fails.
async fn listen(feed: Arc<dyn Feed>, channels: Vec<Arc<str>>, wake: Arc<Notify>, bound: Duration) {
    let mut pause = Duration::from_millis(50);
    loop {
        let opened = tokio::time::timeout(bound, async {
            let mut conn = feed.open().await?;
            conn.sink.subscribe(channels.clone()).await?;
            Ok::<_, crate::error::NodeError>(conn)
        })
        .await;
        if let Ok(Ok(mut conn)) = opened {
            pause = Duration::from_millis(50);
            wake.notify_one();
            while conn.messages.next().await.is_some() {
                wake.notify_one();
            }
        }
        crate::clock::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_secs(1));
    }
}
