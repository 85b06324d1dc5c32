//! A lock's events (`LockManager::events`) against local masters: one event
//! per release, forced unlock, expiry and deletion, not one per node; no
//! expiry where the nodes send no keyspace notifications; the connections
//! closed when the stream is dropped; in `Layout::Redisson`, a Redisson
//! client's unlock too. Redisson's `testLockListener` (a listener sees the
//! unlock) is `a_release_is_one_event`.

mod support;

#[path = "support/redisson_client.rs"]
mod redisson_client;

use std::sync::LazyLock;
use std::time::Duration;

use futures::StreamExt;
use quorumlock::{Layout, LockEvent, LockEvents, LockManager, Quorum};
use support::{key, nodes, raw, unique};

/// The tests change the nodes' `notify-keyspace-events`: one at a time.
static SERIAL: LazyLock<tokio::sync::Mutex<()>> = LazyLock::new(tokio::sync::Mutex::default);

/// How long a test waits to be sure no second event comes.
const QUIET: Duration = Duration::from_millis(600);

/// Keyspace notifications on every shared node for as long as a test
/// needs them, restored to what they were by [`Keyspace::restore`].
struct Keyspace {
    before: Vec<String>,
}

async fn notify_config(i: usize) -> String {
    let (_, value): (String, String) = redis::cmd("CONFIG")
        .arg("GET")
        .arg("notify-keyspace-events")
        .query_async(&mut raw(i).await)
        .await
        .expect("CONFIG GET");
    value
}

async fn set_notify(i: usize, value: &str) {
    let () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg(value)
        .query_async(&mut raw(i).await)
        .await
        .expect("CONFIG SET");
}

impl Keyspace {
    async fn on() -> Self {
        let mut before = Vec::new();
        for i in 0..nodes().len() {
            before.push(notify_config(i).await);
            set_notify(i, "Kgx").await;
        }
        Self { before }
    }

    async fn restore(self) {
        for (i, value) in self.before.iter().enumerate() {
            set_notify(i, value).await;
        }
    }
}

async fn manager() -> LockManager {
    support::manager(Quorum::Majority).await
}

/// The one event `events` delivers within `within`, after which nothing
/// else comes for [`QUIET`].
async fn exactly_one(events: &mut LockEvents, within: Duration) -> LockEvent {
    let ev = tokio::time::timeout(within, events.next())
        .await
        .expect("an event in time")
        .expect("the stream goes on");
    assert_none(events).await;
    ev
}

async fn assert_none(events: &mut LockEvents) {
    let more = tokio::time::timeout(QUIET, events.next()).await;
    assert!(more.is_err(), "no further event expected, got {more:?}");
}

async fn released_once(m: &LockManager) {
    let name = unique("ev-release");
    let mut events = m.events(&name).await.expect("subscribe");
    release_is_one_event(m, &name, &mut events).await;
}

/// `name` locked and released: `events` delivers that release, once.
async fn release_is_one_event(m: &LockManager, name: &str, events: &mut LockEvents) {
    let guard = m.lock(name).await.expect("lock");
    let holder = guard.holder_id().to_owned();
    guard.release().await.expect("release");
    let ev = exactly_one(events, Duration::from_secs(2)).await;
    assert!(
        matches!(&ev, LockEvent::Released { holder: h, .. } if *h == holder),
        "{ev:?}"
    );
}

#[tokio::test]
async fn a_release_is_one_event() {
    let _serial = SERIAL.lock().await;
    let m = manager().await;
    released_once(&m).await;
    // With keyspace notifications, each node's `del` of the release is
    // not a second event.
    let keyspace = Keyspace::on().await;
    released_once(&m).await;
    keyspace.restore().await;
}

#[tokio::test]
async fn a_nested_release_is_no_event_and_the_last_is_one() {
    let _serial = SERIAL.lock().await;
    let m = manager().await;
    let name = unique("ev-nested");
    let mut events = m.events(&name).await.expect("subscribe");
    let me = m.new_owner();
    let outer = m
        .request(name.as_str())
        .owner(&me)
        .acquire()
        .await
        .expect("lock");
    let inner = m
        .request(name.as_str())
        .owner(&me)
        .acquire()
        .await
        .expect("re-enter");
    inner.release().await.expect("release the inner level");
    assert_none(&mut events).await;
    outer.release().await.expect("release");
    let ev = exactly_one(&mut events, Duration::from_secs(2)).await;
    assert!(matches!(ev, LockEvent::Released { .. }), "{ev:?}");
}

#[tokio::test]
async fn a_forced_unlock_is_one_event() {
    let _serial = SERIAL.lock().await;
    let keyspace = Keyspace::on().await;
    forced_once(&manager().await).await;
    keyspace.restore().await;
}

async fn forced_once(m: &LockManager) {
    let name = unique("ev-forced");
    let mut events = m.events(&name).await.expect("subscribe");
    let guard = support::hold_as_new_owner(m, &name).await;
    assert_eq!(m.force_unlock(&name).await.expect("force"), 5);
    let ev = exactly_one(&mut events, Duration::from_secs(2)).await;
    assert_eq!(ev, LockEvent::Forced);
    drop(guard);
}

#[tokio::test]
async fn an_expiry_is_one_event_with_keyspace_notifications() {
    let _serial = SERIAL.lock().await;
    let keyspace = Keyspace::on().await;
    let m = manager().await;
    let name = unique("ev-expired");
    let mut events = m.events(&name).await.expect("subscribe");
    // A fixed lease is not renewed: the keys expire while the guard lives.
    let guard = m
        .lock_with_lease(&name, Duration::from_millis(300))
        .await
        .expect("lock");
    let ev = exactly_one(&mut events, Duration::from_secs(3)).await;
    assert_eq!(ev, LockEvent::Expired);
    drop(guard);
    keyspace.restore().await;
}

#[tokio::test]
async fn without_keyspace_notifications_an_expiry_is_not_seen() {
    let _serial = SERIAL.lock().await;
    for i in 0..nodes().len() {
        assert!(
            !notify_config(i).await.contains('x'),
            "node {i} sends expiries"
        );
    }
    let m = manager().await;
    let name = unique("ev-silent");
    let mut events = m.events(&name).await.expect("subscribe");
    let guard = m
        .lock_with_lease(&name, Duration::from_millis(200))
        .await
        .expect("lock");
    tokio::time::sleep(Duration::from_millis(800)).await;
    assert_eq!(support::nodes_with_key(&name).await, 0, "expired");
    assert_none(&mut events).await;
    drop(guard);
}

#[tokio::test]
async fn a_del_behind_quorumlocks_back_is_one_deletion() {
    let _serial = SERIAL.lock().await;
    let keyspace = Keyspace::on().await;
    let m = manager().await;
    let name = unique("ev-del");
    let mut events = m.events(&name).await.expect("subscribe");
    let guard = support::hold_as_new_owner(&m, &name).await;
    for i in 0..nodes().len() {
        let () = redis::cmd("DEL")
            .arg(key(&name))
            .query_async(&mut raw(i).await)
            .await
            .map(|_: i64| ())
            .expect("DEL");
    }
    let ev = exactly_one(&mut events, Duration::from_secs(2)).await;
    assert_eq!(ev, LockEvent::Deleted);
    drop(guard);
    keyspace.restore().await;
}

async fn subscribers(name: &str) -> i64 {
    let channel = format!("{}:released", key(name));
    let mut total = 0;
    for i in 0..nodes().len() {
        let (_, n): (String, i64) = redis::cmd("PUBSUB")
            .arg("NUMSUB")
            .arg(&channel)
            .query_async(&mut raw(i).await)
            .await
            .expect("PUBSUB NUMSUB");
        total += n;
    }
    total
}

#[tokio::test]
async fn dropping_the_stream_unsubscribes() {
    let _serial = SERIAL.lock().await;
    let m = manager().await;
    let name = unique("ev-drop");
    let events = m.events(&name).await.expect("subscribe");
    assert!(subscribers(&name).await >= 3, "a quorum subscribed");
    drop(events);
    let gone = support::eventually(Duration::from_secs(2), || async {
        subscribers(&name).await == 0
    })
    .await;
    assert!(gone, "the stream's connections are closed");
}

#[tokio::test]
async fn a_bad_name_is_refused() {
    let m = manager().await;
    let e = m.events("").await.expect_err("empty name");
    assert!(matches!(e, quorumlock::Error::InvalidInput { .. }), "{e}");
}

async fn redisson_manager() -> LockManager {
    support::builder()
        .layout(Layout::Redisson)
        .build()
        .await
        .expect("build a manager in the Redisson layout")
}

/// In `Layout::Redisson`: a quorumlock release is one `Released` and a
/// forced unlock one `Forced` (the `0` each also publishes on Redisson's
/// channel is not a second event, nor is its `del` with keyspace
/// notifications on), and a Redisson RedLock's
/// unlock over the same masters, which publishes only `0` on
/// `redisson_lock__channel:{<name>}`, is one `ForeignReleased`, with or
/// without keyspace notifications (its `del` pairs with its `0`).
#[tokio::test]
async fn releases_in_the_redisson_layout_are_one_event_each() {
    let _serial = SERIAL.lock().await;
    let m = redisson_manager().await;
    for notify in [false, true] {
        let keyspace = if notify {
            Some(Keyspace::on().await)
        } else {
            None
        };
        released_once(&m).await;

        forced_once(&m).await;

        let name = unique("ev-redisson");
        let mut events = m.events(&name).await.expect("subscribe");
        let red =
            redisson_client::MultiLock::redlock(&nodes().urls(), &name, Duration::from_secs(30))
                .await;
        red.lock().await;
        red.unlock().await;
        let ev = exactly_one(&mut events, Duration::from_secs(2)).await;
        assert_eq!(
            ev,
            LockEvent::ForeignReleased,
            "keyspace notifications: {notify}"
        );
        if let Some(k) = keyspace {
            k.restore().await;
        }
    }
}

/// A reader that does not read: its stream keeps `events_buffer` events,
/// drops the rest and says how many in one `Lagged`, and goes on with the
/// next events once read again.
#[tokio::test]
async fn a_reader_that_falls_behind_is_told_what_it_missed() {
    let _serial = SERIAL.lock().await;
    let m = support::builder()
        .quorum(Quorum::Majority)
        .events_buffer(4)
        .build()
        .await
        .expect("build");
    let name = unique("ev-lag");
    let mut events = m.events(&name).await.expect("subscribe");
    const RELEASES: u64 = 12;
    for _ in 0..RELEASES {
        let guard = m.lock(&name).await.expect("lock");
        guard.release().await.expect("release");
    }
    // Every release counted by the stream's task, none read yet.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (mut released, mut missed, mut lagged) = (0, 0, 0);
    while let Ok(Some(ev)) = tokio::time::timeout(QUIET, events.next()).await {
        match ev {
            LockEvent::Released { .. } => released += 1,
            LockEvent::Lagged { missed: n, .. } => {
                lagged += 1;
                missed += n;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(released, 4, "the buffer's worth, oldest first");
    assert_eq!((lagged, missed), (1, RELEASES - 4));
    // Read again: the stream goes on.
    release_is_one_event(&m, &name, &mut events).await;
}

#[tokio::test]
async fn an_events_buffer_of_zero_is_refused() {
    let err = support::builder()
        .events_buffer(0)
        .build()
        .await
        .expect_err("a zero buffer");
    assert!(
        matches!(err, quorumlock::Error::InvalidInput { .. }),
        "{err:?}"
    );
}
