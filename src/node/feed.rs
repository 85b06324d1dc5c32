//! A node's release feed: the messages the scripts publish on a lock's
//! channel (`release.lua`, `leave.lua`, `acquire_queued.lua`,
//! `force_release.lua`), as the waiters' side of a manager receives them.
//!
//! The waiters (`wait::pubsub`) open one subscriber connection per node and
//! never see what carries it: a real master's pub/sub connection
//! ([`RedisFeed`]), or the in-memory node's and the simulator's broadcast,
//! which publish what the scripts publish (with the simulator's faults on
//! the way), or a cluster member's sharded pub/sub (`cluster::feed`).

use std::sync::Arc;

use futures::future::BoxFuture;
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::error::NodeError;

/// One message published on a lock's channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FeedMessage {
    pub(crate) channel: Arc<str>,
    pub(crate) payload: Vec<u8>,
}

/// Where a node's release messages come from.
pub(crate) trait Feed: Send + Sync + 'static {
    /// Opens one subscriber connection. The caller bounds the time it takes.
    fn open(&self) -> BoxFuture<'static, Result<FeedConn, NodeError>>;

    /// The keyspace notification channel of `key` on this node
    /// (`__keyspace@<db>__:<key>`), if the node can send them.
    fn keyspace_channel(&self, key: &str) -> Option<Arc<str>> {
        let _ = key;
        None
    }
}

/// Sends a subscriber connection's (un)subscriptions; the answer says the
/// node confirmed them (or refused, or the connection failed).
pub(crate) trait FeedSink: Send {
    fn subscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>>;
    fn unsubscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>>;
}

/// One subscriber connection: its commands, and the messages of the
/// channels it subscribed to, in the order the node published them. The
/// stream ends when the connection is gone; dropping both closes it.
pub(crate) struct FeedConn {
    pub(crate) sink: Box<dyn FeedSink>,
    pub(crate) messages: BoxStream<'static, FeedMessage>,
}

/// A real master's feed: a pub/sub connection of its own per
/// [`Feed::open`].
pub(crate) struct RedisFeed {
    client: redis::Client,
}

impl RedisFeed {
    pub(crate) fn new(client: redis::Client) -> Self {
        Self { client }
    }
}

impl Feed for RedisFeed {
    fn open(&self) -> BoxFuture<'static, Result<FeedConn, NodeError>> {
        let client = self.client.clone();
        Box::pin(async move {
            let pubsub = client
                .get_async_pubsub()
                .await
                .map_err(|e| NodeError::from_redis(&e))?;
            let (sink, stream) = pubsub.split();
            let messages = stream
                .map(|msg| FeedMessage {
                    channel: msg.get_channel_name().into(),
                    payload: msg.get_payload_bytes().to_vec(),
                })
                .boxed();
            Ok(FeedConn {
                sink: Box::new(RedisSink(sink)),
                messages,
            })
        })
    }

    fn keyspace_channel(&self, key: &str) -> Option<Arc<str>> {
        let db = self.client.get_connection_info().redis_settings().db();
        Some(format!("__keyspace@{db}__:{key}").into())
    }
}

struct RedisSink(redis::aio::PubSubSink);

impl FeedSink for RedisSink {
    fn subscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        Box::pin(async move {
            let names: Vec<&str> = channels.iter().map(|c| &**c).collect();
            self.0
                .subscribe(names)
                .await
                .map_err(|e| NodeError::from_redis(&e))
        })
    }

    fn unsubscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        Box::pin(async move {
            let names: Vec<&str> = channels.iter().map(|c| &**c).collect();
            self.0
                .unsubscribe(names)
                .await
                .map_err(|e| NodeError::from_redis(&e))
        })
    }
}
