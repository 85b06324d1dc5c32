//! The release feed of one client↔node link, with the simulator's faults:
//! a connection opens only through a working link (a refusing node fails
//! the open, a black hole or a cut link never answers it), messages are
//! lost, duplicated or delayed (in order) while the link is lossy or the
//! node slow, and a connection dies with a node restart or a kill of the
//! link's pub/sub connections (its stream ends; the waiters reconnect).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::net::{Cut, Health, LinkCtl, NodeCtl};
use crate::error::{NodeError, NodeErrorKind};
use crate::node::{Feed, FeedConn, FeedMessage, FeedSink};
use crate::rng::up_to;
use crate::tests::fake_feed::HubFeed;

/// One client's feed from one node.
pub(crate) struct SimFeed {
    pub(crate) node: Arc<NodeCtl>,
    pub(crate) link: Arc<LinkCtl>,
    pub(crate) process: Arc<LinkCtl>,
    /// How long a (un)subscription waits on a link that does not answer
    /// before the connection counts as failed.
    pub(crate) timeout: Duration,
}

fn refused() -> NodeError {
    NodeError::new(NodeErrorKind::Connection, "refused")
}

/// How the link carries traffic now: `Ok(true)` delivers, `Ok(false)`
/// swallows silently, `Err` refuses.
fn state(node: &NodeCtl, link: &LinkCtl, process: &LinkCtl) -> Result<bool, NodeError> {
    match node.health() {
        Health::Fail | Health::Down => Err(refused()),
        Health::BlackHole => Ok(false),
        // A link resetting its command connections keeps its pub/sub one.
        Health::Up => {
            Ok(process.cut() == Cut::None && matches!(link.cut(), Cut::None | Cut::Resets))
        }
    }
}

impl Feed for SimFeed {
    fn open(&self) -> BoxFuture<'static, Result<FeedConn, NodeError>> {
        let (node, link, process) = (
            Arc::clone(&self.node),
            Arc::clone(&self.link),
            Arc::clone(&self.process),
        );
        let timeout = self.timeout;
        Box::pin(async move {
            tokio::task::yield_now().await;
            if !state(&node, &link, &process)? {
                // The caller bounds the open.
                futures::future::pending::<()>().await;
            }
            let inner = HubFeed(node.fake.hub()).open().await?;
            let (tx, rx) = mpsc::unbounded_channel();
            tokio::spawn(forward(
                inner.messages,
                tx,
                Arc::clone(&node),
                Arc::clone(&link),
                Arc::clone(&process),
            ));
            let messages = futures::stream::unfold(rx, |mut rx| async move {
                let msg = rx.recv().await?;
                Some((msg, rx))
            })
            .boxed();
            Ok(FeedConn {
                sink: Box::new(SimSink {
                    inner: inner.sink,
                    node,
                    link,
                    process,
                    timeout,
                }),
                messages,
            })
        })
    }
}

/// Carries one connection's messages to the client, with the link's
/// faults, until the node drops it, the link's connections are killed or
/// the client closes it.
async fn forward(
    mut inner: futures::stream::BoxStream<'static, FeedMessage>,
    tx: mpsc::UnboundedSender<FeedMessage>,
    node: Arc<NodeCtl>,
    link: Arc<LinkCtl>,
    process: Arc<LinkCtl>,
) {
    let mut last = Instant::now();
    loop {
        let killed = link.feed.killed();
        tokio::pin!(killed);
        killed.as_mut().enable();
        let msg = tokio::select! {
            biased;
            () = &mut killed => return,
            () = tx.closed() => return,
            msg = inner.next() => match msg {
                Some(msg) => msg,
                None => return,
            },
        };
        // Lost on the way back, or read by nobody (a stalled process).
        let through =
            node.health() == Health::Up && link.cut() != Cut::Replies && process.cut() == Cut::None;
        if !through {
            continue;
        }
        let lossy = u64::from(link.feed.lossy());
        let copies = if lossy == 0 {
            1
        } else {
            match up_to(99) {
                r if r < lossy => 0,
                r if r < lossy + lossy / 2 => 2,
                _ => 1,
            }
        };
        if let Some(delay) = node.jitter() {
            last = last.max(Instant::now() + delay);
            tokio::select! {
                biased;
                () = &mut killed => return,
                () = tokio::time::sleep_until(last) => {}
            }
        }
        for _ in 0..copies {
            if tx.send(msg.clone()).is_err() {
                return;
            }
        }
    }
}

/// A connection's (un)subscriptions through the link: refused by a
/// refusing node, failed after `timeout` on a link that does not answer.
struct SimSink {
    inner: Box<dyn FeedSink>,
    node: Arc<NodeCtl>,
    link: Arc<LinkCtl>,
    process: Arc<LinkCtl>,
    timeout: Duration,
}

impl SimSink {
    fn through(&self) -> BoxFuture<'static, Result<(), NodeError>> {
        let now = state(&self.node, &self.link, &self.process);
        let timeout = self.timeout;
        Box::pin(async move {
            tokio::task::yield_now().await;
            if now? {
                return Ok(());
            }
            tokio::time::sleep(timeout).await;
            Err(NodeError::timeout())
        })
    }
}

impl FeedSink for SimSink {
    fn subscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        let through = self.through();
        Box::pin(async move {
            through.await?;
            self.inner.subscribe(channels).await
        })
    }

    fn unsubscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        let through = self.through();
        Box::pin(async move {
            through.await?;
            self.inner.unsubscribe(channels).await
        })
    }
}
