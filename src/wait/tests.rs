//! The pub/sub side of the waiters against a scripted feed: bounded calls,
//! and unsubscribing when the last waiter leaves.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use tokio::sync::mpsc;

use super::Notifier;
use crate::config::Config;
use crate::error::NodeError;
use crate::node::{Feed, FeedConn, FeedMessage, FeedSink, NodeOps};
use crate::sync::locked;
use crate::telemetry::Metrics;
use crate::tests::fake::FakeNode;
use crate::LockManager;

/// A feed whose first connection never answers SUBSCRIBE when `hang`;
/// it logs every (un)subscription.
#[derive(Default)]
struct Scripted {
    hang: bool,
    opens: AtomicUsize,
    log: Arc<Mutex<Vec<String>>>,
    senders: Mutex<Vec<mpsc::UnboundedSender<FeedMessage>>>,
}

struct Sink {
    hang: bool,
    log: Arc<Mutex<Vec<String>>>,
}

impl FeedSink for Sink {
    fn subscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        let hang = self.hang;
        locked(&self.log).push(format!("subscribe {}", channels.join(",")));
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(())
        })
    }

    fn unsubscribe(&mut self, channels: Vec<Arc<str>>) -> BoxFuture<'_, Result<(), NodeError>> {
        locked(&self.log).push(format!("unsubscribe {}", channels.join(",")));
        Box::pin(async { Ok(()) })
    }
}

impl Feed for Scripted {
    fn open(&self) -> BoxFuture<'static, Result<FeedConn, NodeError>> {
        let n = self.opens.fetch_add(1, Ordering::SeqCst);
        let (tx, rx) = mpsc::unbounded_channel();
        locked(&self.senders).push(tx);
        let sink = Sink {
            hang: self.hang && n == 0,
            log: Arc::clone(&self.log),
        };
        let messages =
            futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) });
        Box::pin(async move {
            Ok(FeedConn {
                sink: Box::new(sink),
                messages: Box::pin(messages),
            })
        })
    }
}

/// The notifier of client `me` over one node whose feed is `feed`, with a
/// node timeout of 200 ms.
fn notifier(feed: &Arc<Scripted>) -> Notifier {
    let node: Arc<dyn NodeOps> = FakeNode::new(0);
    let config: Config = LockManager::builder()
        .node_timeout(Duration::from_millis(200))
        .build_with(vec![node])
        .expect("config")
        .config()
        .clone();
    Notifier::start(
        "me",
        vec![Some(Arc::clone(feed) as Arc<dyn Feed>)],
        &config,
        &Metrics::default(),
    )
}

#[tokio::test(start_paused = true)]
async fn a_hung_subscribe_is_replaced_within_the_node_timeout() {
    let feed = Arc::new(Scripted {
        hang: true,
        ..Scripted::default()
    });
    let notifier = notifier(&feed);
    let w = notifier.waiter("ch", None, &"me:owner-1".into());
    w.confirmed(Duration::from_secs(5)).await;
    assert!(
        w.covered(),
        "the subscription is still not confirmed: {:?}",
        locked(&feed.log)
    );
    assert_eq!(
        feed.opens.load(Ordering::SeqCst),
        2,
        "one connection replaced"
    );
    // The task reads commands again: the last waiter's unsubscription goes out.
    drop(w);
    tokio::time::sleep(super::waiter::LINGER + Duration::from_millis(1)).await;
    assert_eq!(
        locked(&feed.log).last().map(String::as_str),
        Some("unsubscribe ch")
    );
}

#[tokio::test(start_paused = true)]
async fn the_last_waiter_leaving_unsubscribes_after_the_linger() {
    let feed = Arc::new(Scripted::default());
    let notifier = notifier(&feed);
    let a = notifier.waiter("ch", None, &"me:owner-1".into());
    a.confirmed(Duration::from_secs(1)).await;
    let b = notifier.waiter("ch", None, &"me:owner-1".into());
    drop(a);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(notifier.stats().channels, 1, "a waiter is left");
    drop(b);
    tokio::time::sleep(Duration::from_millis(1)).await;
    assert_eq!(notifier.stats().channels, 1, "kept for the linger");
    tokio::time::sleep(super::waiter::LINGER).await;
    assert_eq!(notifier.stats().channels, 0);
    assert_eq!(
        *locked(&feed.log),
        ["subscribe ch", "unsubscribe ch"],
        "subscribed once, unsubscribed when the last waiter left"
    );
}

/// The feed's log, how many `verb` commands it holds, and how many
/// channels they name in all.
fn sent(feed: &Scripted, verb: &str) -> (Vec<String>, usize, usize) {
    let log = locked(&feed.log).clone();
    let prefix = format!("{verb} ");
    let lines: Vec<&str> = log.iter().filter_map(|l| l.strip_prefix(&prefix)).collect();
    let channels = lines.iter().map(|l| l.split(',').count()).sum();
    let commands = lines.len();
    (log, commands, channels)
}

/// Waiters that arrive while the connection is open are subscribed in a
/// few SUBSCRIBEs, not one each (one round trip at a time, while the task
/// reads no release message), and unsubscribed in a few UNSUBSCRIBEs when
/// they leave.
#[tokio::test(start_paused = true)]
async fn a_crowd_of_new_channels_is_subscribed_in_a_few_commands() {
    let feed = Arc::new(Scripted::default());
    let notifier = notifier(&feed);
    let first = notifier.waiter("ch", None, &"me:owner-1".into());
    first.confirmed(Duration::from_secs(1)).await;
    let names: Vec<String> = (0..3000).map(|k| format!("ch-{k}")).collect();
    let crowd: Vec<_> = names
        .iter()
        .map(|n| notifier.waiter(n.as_str(), None, &"me:owner-1".into()))
        .collect();
    for w in &crowd {
        w.confirmed(Duration::from_secs(1)).await;
        assert!(w.covered(), "a waiter of the crowd is not subscribed");
    }
    let (log, commands, channels) = sent(&feed, "subscribe");
    assert_eq!(channels, 3001, "every channel once: {log:?}");
    assert!(
        commands <= 1 + 3000 / super::pubsub::MAX_BATCH + 1,
        "{commands} SUBSCRIBEs for 3,001 channels"
    );
    // The crowd leaves: its channels go in a few UNSUBSCRIBEs too.
    drop(crowd);
    tokio::time::sleep(super::waiter::LINGER + Duration::from_millis(10)).await;
    assert_eq!(notifier.stats().channels, 1, "the first waiter's is left");
    let (log, commands, channels) = sent(&feed, "unsubscribe");
    assert_eq!(channels, 3000, "every channel of the crowd once: {log:?}");
    assert!(
        commands <= 3000 / super::pubsub::MAX_BATCH + 1,
        "{commands} UNSUBSCRIBEs for 3,000 channels"
    );
    drop(first);
}

#[tokio::test(start_paused = true)]
async fn a_release_message_rings_the_head_through_the_feed() {
    let feed = Arc::new(Scripted::default());
    let notifier = notifier(&feed);
    let mut w = notifier.waiter("ch", None, &"me:owner-1".into());
    w.confirmed(Duration::from_secs(1)).await;
    w.mark();
    for tx in locked(&feed.senders).iter() {
        let _ = tx.send(FeedMessage {
            channel: "ch".into(),
            payload: b" other#x:owner-1:hold-1@0".to_vec(),
        });
    }
    let woke = w
        .wait(
            Duration::from_secs(60),
            || Duration::from_millis(10),
            None,
            false,
        )
        .await;
    assert_eq!(woke, super::waiter::Woke::Notified);
    assert_eq!(notifier.stats().messages, 1);
}

/// Sends `payload` on channel `ch` from every node of the feed.
fn publish_everywhere(feed: &Scripted, payload: &[u8]) {
    for tx in locked(&feed.senders).iter() {
        let _ = tx.send(FeedMessage {
            channel: "ch".into(),
            payload: payload.to_vec(),
        });
    }
}

/// Another manager's release heard on every node wakes the head at once;
/// its rollback (a failed attempt undoing its grants), heard on every node
/// too, wakes it only after its backoff: attempts that keep failing must
/// not ring each other into new attempts without pause (the reset-heavy
/// simulator sweep spun in a third of its seeds).
#[tokio::test(start_paused = true)]
async fn rollbacks_ring_the_head_after_its_backoff_not_at_once() {
    let feed = Arc::new(Scripted::default());
    let notifier = notifier(&feed);
    let mut w = notifier.waiter("ch", None, &"me:owner-1".into());
    w.confirmed(Duration::from_secs(1)).await;
    let backoff = Duration::from_millis(80);
    for (payload, at_least, below) in [
        (
            &b" other#x:owner-1:hold-1@0"[..],
            Duration::ZERO,
            Duration::from_millis(20),
        ),
        (
            &b" other#x:owner-1:hold-2@0 rollback"[..],
            backoff,
            Duration::from_millis(200),
        ),
    ] {
        w.mark();
        publish_everywhere(&feed, payload);
        let t0 = tokio::time::Instant::now();
        let woke = w
            .wait(Duration::from_secs(60), || backoff, None, false)
            .await;
        let took = t0.elapsed();
        assert_eq!(woke, super::waiter::Woke::Notified);
        assert!(
            took >= at_least && took < below,
            "{} woke the waiter after {took:?}",
            String::from_utf8_lossy(payload)
        );
    }
}
