//! The in-memory node's release feed: a hub of subscriber connections
//! (each a set of channels and an unbounded sender) that the fake scripts
//! publish on, exactly where the Lua scripts publish (`release.lua`,
//! `leave.lua`, `acquire_queued.lua`, `force_release.lua`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, Weak};

use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::mpsc;

use crate::error::NodeError;
use crate::node::{Feed, FeedConn, FeedMessage, FeedSink};
use crate::sync::locked;

/// One subscriber connection as the node sees it.
struct Sub {
    channels: HashSet<Arc<str>>,
    tx: mpsc::UnboundedSender<FeedMessage>,
}

/// Every subscriber connection of one node.
#[derive(Default)]
pub(crate) struct Hub {
    subs: Mutex<Vec<Arc<Mutex<Sub>>>>,
}

impl Hub {
    /// Publishes `payload` on `channel` to every connection subscribed to
    /// it (as PUBLISH: in order, to the connections alive now); returns how
    /// many received it.
    pub(crate) fn publish(&self, channel: &str, payload: impl Into<Vec<u8>>) -> usize {
        let payload = payload.into();
        let mut subs = locked(&self.subs);
        subs.retain(|s| !locked(s).tx.is_closed());
        let mut n = 0;
        for s in subs.iter() {
            let s = locked(s);
            if s.channels.contains(channel) {
                let msg = FeedMessage {
                    channel: channel.into(),
                    payload: payload.clone(),
                };
                if s.tx.send(msg).is_ok() {
                    n += 1;
                }
            }
        }
        n
    }

    /// Ends every subscriber connection (a restart): their streams end.
    pub(crate) fn disconnect_all(&self) {
        locked(&self.subs).clear();
    }

    fn open(self: &Arc<Self>) -> FeedConn {
        let (tx, rx) = mpsc::unbounded_channel();
        let sub = Arc::new(Mutex::new(Sub {
            channels: HashSet::new(),
            tx,
        }));
        locked(&self.subs).push(Arc::clone(&sub));
        FeedConn {
            sink: Box::new(HubSink(Arc::downgrade(&sub))),
            messages: tokio_stream_of(rx),
        }
    }
}

/// The messages of an unbounded receiver as a stream that ends when every
/// sender is gone (the node dropped the connection).
fn tokio_stream_of(
    rx: mpsc::UnboundedReceiver<FeedMessage>,
) -> futures::stream::BoxStream<'static, FeedMessage> {
    futures::stream::unfold(rx, |mut rx| async move {
        let msg = rx.recv().await?;
        Some((msg, rx))
    })
    .boxed()
}

/// The hub as a [`Feed`]: every `open` is a new connection.
pub(crate) struct HubFeed(pub(crate) Arc<Hub>);

impl Feed for HubFeed {
    fn open(&self) -> BoxFuture<'static, Result<FeedConn, NodeError>> {
        let conn = self.0.open();
        Box::pin(async move { Ok(conn) })
    }
}

/// A connection's (un)subscriptions; fails once the node dropped it.
struct HubSink(Weak<Mutex<Sub>>);

impl HubSink {
    fn apply(&self, f: impl FnOnce(&mut HashSet<Arc<str>>)) -> Result<(), NodeError> {
        match self.0.upgrade() {
            Some(sub) => {
                f(&mut locked(&sub).channels);
                Ok(())
            }
            None => Err(NodeError::new(
                crate::error::NodeErrorKind::Connection,
                "connection closed",
            )),
        }
    }
}

impl FeedSink for HubSink {
    fn subscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        let r = self.apply(|c| c.extend(channels));
        Box::pin(async move { r })
    }

    fn unsubscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        let r = self.apply(|c| {
            for channel in &channels {
                c.remove(channel);
            }
        });
        Box::pin(async move { r })
    }
}
