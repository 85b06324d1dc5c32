//! A cluster member's release feed: sharded pub/sub (`SSUBSCRIBE`, Redis
//! 7 and later), where the scripts' `SPUBLISH` on a lock's channel reaches
//! only the shard that serves the lock's slot.
//!
//! One [`Feed::open`] is one redis-rs cluster connection of its own, over
//! RESP3 with a push sender: one connection per shard (redis-rs's, per
//! master), shared by every waiter of the member. A subscription goes to
//! the shard of its channel's slot, as redis-rs routes it (following
//! `MOVED`; a subscription may be sent again, so this connection keeps
//! redis-rs's retries), one `SSUBSCRIBE` per slot, since one command's
//! channels must share a slot.
//!
//! What redis-rs does not do is written here:
//! - **A slot that moved.** When a slot migrates, its old shard drops the
//!   subscriptions of its channels with a `SUNSUBSCRIBE` push; redis-rs
//!   forgets them (it resubscribes only after a reconnect or a topology
//!   refresh). The feed sends `SSUBSCRIBE` again for a channel still
//!   wanted, which reaches the new shard; if that fails, the connection
//!   ends.
//! - **A dropped connection.** redis-rs reconnects a shard's connection and
//!   resubscribes its channels, but the messages published meanwhile are
//!   lost and nobody is told. The feed ends the connection at the
//!   `Disconnection` push instead, so the waiters' task (`wait::pubsub`)
//!   marks the member's channels uncovered (its waiters poll), opens a new
//!   connection and subscribes them all again.
//! - **A frozen master failed over.** Its connection neither closes nor
//!   answers, so nothing above happens; when the member follows the
//!   failover (`watch`), [`ClusterFeed::follow`] ends every
//!   connection opened before, as a dropped one ends, and the next opens
//!   over the nodes that told the new topology.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use redis::cluster_async::ClusterConnection;
use redis::{PushInfo, PushKind, Value};
use tokio::sync::{mpsc, watch};

use crate::error::NodeError;
use crate::keys::key_slot;
use crate::sync::locked;

use super::spec::Certs;
use crate::node::feed::{Feed, FeedConn, FeedMessage, FeedSink};

/// A cluster member's feed: its seeds and certificates, to open a
/// connection of its own.
pub(crate) struct ClusterFeed {
    /// The nodes a connection starts from: the seeds, then the nodes that
    /// told the topology the member last followed.
    seeds: Mutex<Vec<redis::ConnectionInfo>>,
    certs: Certs,
    timeout: Duration,
    /// Bumped by [`ClusterFeed::follow`]: ends the connections opened
    /// before.
    epoch: watch::Sender<u64>,
}

impl ClusterFeed {
    /// `timeout` bounds a subscription sent again after a slot moved.
    pub(crate) fn new(seeds: Vec<redis::ConnectionInfo>, certs: Certs, timeout: Duration) -> Self {
        Self {
            seeds: Mutex::new(seeds),
            certs,
            timeout,
            epoch: watch::Sender::new(0),
        }
    }

    /// The member followed a failover that `first` (the nodes that told
    /// it) report: every connection opened before ends (its waiters poll
    /// until the next one has subscribed their channels again), and the
    /// next ones start from `first`.
    pub(crate) fn follow(&self, first: Vec<redis::ConnectionInfo>) {
        *locked(&self.seeds) = first;
        self.epoch.send_modify(|e| *e += 1);
    }
}

/// The channels a connection is to stay subscribed to.
type Wanted = Arc<Mutex<HashSet<Arc<str>>>>;

impl Feed for ClusterFeed {
    fn open(&self) -> BoxFuture<'static, Result<FeedConn, NodeError>> {
        let builder = self.certs.builder(locked(&self.seeds).clone());
        let timeout = self.timeout;
        let mut epoch = self.epoch.subscribe();
        epoch.mark_unchanged();
        Box::pin(async move {
            let (tx, rx) = mpsc::unbounded_channel::<PushInfo>();
            let tcp = redis::io::tcp::TcpSettings::default().set_nodelay(true);
            let client = builder
                .use_protocol(redis::ProtocolVersion::RESP3)
                .push_sender(tx)
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .tcp_settings(tcp)
                .build()
                .map_err(|e| NodeError::from_redis(&e))?;
            let conn = client
                .get_async_connection()
                .await
                .map_err(|e| NodeError::from_redis(&e))?;
            let wanted = Wanted::default();
            let state = (rx, conn.clone(), Arc::clone(&wanted), timeout, epoch);
            let messages = futures::stream::unfold(state, |mut s| async move {
                let msg = tokio::select! {
                    msg = next_message(&mut s.0, &mut s.1, &s.2, s.3) => msg?,
                    // The member followed a failover: this connection may
                    // sit on a frozen shard.
                    _ = s.4.changed() => return None,
                };
                Some((msg, s))
            })
            .boxed();
            Ok(FeedConn {
                sink: Box::new(ClusterSink { conn, wanted }),
                messages,
            })
        })
    }
}

/// The next message on a subscribed channel; `None` ends the connection
/// (dropped, or a moved slot's channel could not be subscribed again).
async fn next_message(
    rx: &mut mpsc::UnboundedReceiver<PushInfo>,
    conn: &mut ClusterConnection,
    wanted: &Wanted,
    timeout: Duration,
) -> Option<FeedMessage> {
    loop {
        let push = rx.recv().await?;
        match push.kind {
            PushKind::SMessage | PushKind::Message => {
                if let [channel, payload, ..] = &push.data[..] {
                    let channel = text(channel)?;
                    let payload = bytes(payload)?;
                    return Some(FeedMessage {
                        channel: channel.into(),
                        payload,
                    });
                }
            }
            PushKind::SUnsubscribe => {
                let Some(channel) = push.data.first().and_then(text) else {
                    continue;
                };
                if !locked(wanted).contains(channel.as_str()) {
                    continue; // our own SUNSUBSCRIBE
                }
                // The slot moved: subscribe where it is now.
                let again = tokio::time::timeout(timeout, conn.ssubscribe(&channel)).await;
                if !matches!(again, Ok(Ok(()))) {
                    return None;
                }
            }
            PushKind::Disconnection => return None,
            _ => {}
        }
    }
}

fn bytes(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::BulkString(b) => Some(b.clone()),
        Value::SimpleString(s) => Some(s.clone().into_bytes()),
        _ => None,
    }
}

fn text(v: &Value) -> Option<String> {
    bytes(v).and_then(|b| String::from_utf8(b).ok())
}

struct ClusterSink {
    conn: ClusterConnection,
    wanted: Wanted,
}

impl ClusterSink {
    /// Records `channels` in `wanted` (or removes them), then sends one
    /// `SSUBSCRIBE` (or `SUNSUBSCRIBE`) per slot of them, all at once.
    async fn per_slot(
        &mut self,
        channels: Vec<Arc<str>>,
        subscribe: bool,
    ) -> Result<(), NodeError> {
        let mut by_slot: BTreeMap<u16, Vec<String>> = BTreeMap::new();
        {
            let mut wanted = locked(&self.wanted);
            for c in channels {
                by_slot.entry(key_slot(&c)).or_default().push(c.to_string());
                if subscribe {
                    wanted.insert(c);
                } else {
                    wanted.remove(&c);
                }
            }
        }
        let sent = futures::future::join_all(by_slot.into_values().map(|names| {
            let mut conn = self.conn.clone();
            async move {
                if subscribe {
                    conn.ssubscribe(names).await
                } else {
                    conn.sunsubscribe(names).await
                }
            }
        }))
        .await;
        sent.into_iter()
            .try_for_each(|r| r.map_err(|e| NodeError::from_redis(&e)))
    }
}

impl FeedSink for ClusterSink {
    /// One `SSUBSCRIBE` per slot of `channels`, all at once.
    fn subscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        Box::pin(self.per_slot(channels, true))
    }

    /// One `SUNSUBSCRIBE` per slot of `channels`, all at once.
    fn unsubscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        Box::pin(self.per_slot(channels, false))
    }
}

/// Parses `redis_version` from `INFO server`: `build()` refuses a cluster
/// member whose seed runs a Redis older than 7, which has no sharded
/// pub/sub for its release messages.
pub(crate) fn check_version(info: &str) -> Result<(), String> {
    let version = super::map::info_field(info, "redis_version").unwrap_or("");
    let major = version
        .split('.')
        .next()
        .and_then(|m| m.parse::<u32>().ok());
    match major {
        Some(m) if m >= 7 => Ok(()),
        _ => Err(format!(
            "runs Redis {}; a cluster member needs Redis 7 or later, whose sharded pub/sub \
             (SSUBSCRIBE/SPUBLISH) carries its release messages",
            if version.is_empty() {
                "of unknown version"
            } else {
                version
            }
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::check_version;

    #[test]
    fn a_seed_older_than_redis_7_is_refused() {
        assert!(check_version("# Server\r\nredis_version:7.0.15\r\n").is_ok());
        assert!(check_version("redis_version:7.2.4\r\nvalkey_version:8.0.1\r\n").is_ok());
        let old = check_version("# Server\r\nredis_version:6.2.14\r\n").unwrap_err();
        assert!(old.contains("6.2.14") && old.contains("Redis 7"), "{old}");
        assert!(check_version("").is_err());
    }
}
