//! Each Lua script pinned against a real server, through a raw connection.

mod support;

use redis::aio::MultiplexedConnection;
use redis::Script;
use support::{raw, unique};

struct Keys {
    lock: String,
    fence: String,
    channel: String,
    queue: String,
    timeouts: String,
}

fn keys() -> Keys {
    let lock = format!("scripts:{{{}}}", unique("s"));
    Keys {
        fence: format!("{lock}:fence"),
        channel: format!("{lock}:released"),
        queue: format!("{lock}:queue"),
        timeouts: format!("{lock}:timeouts"),
        lock,
    }
}

fn script(name: &str) -> Script {
    Script::new(match name {
        "acquire" => include_str!("../src/scripts/acquire.lua"),
        "release" => concat!(
            include_str!("../src/scripts/queue_prelude.lua"),
            include_str!("../src/scripts/release.lua")
        ),
        "acquire_queued" => concat!(
            include_str!("../src/scripts/queue_prelude.lua"),
            include_str!("../src/scripts/acquire_queued.lua")
        ),
        "leave" => include_str!("../src/scripts/leave.lua"),
        "renew" => concat!(
            include_str!("../src/scripts/batch_prelude.lua"),
            include_str!("../src/scripts/renew.lua")
        ),
        "repair" => concat!(
            include_str!("../src/scripts/batch_prelude.lua"),
            include_str!("../src/scripts/repair.lua")
        ),
        "force_release" => include_str!("../src/scripts/force_release.lua"),
        _ => include_str!("../src/scripts/raise_fence.lua"),
    })
}

async fn acquire(c: &mut MultiplexedConnection, k: &Keys, owner: &str, count: u32) -> Vec<i64> {
    script("acquire")
        .key(&k.lock)
        .key(&k.fence)
        .arg(owner)
        .arg(60_000)
        .arg(count)
        .invoke_async(c)
        .await
        .expect("acquire")
}

async fn release(
    c: &mut MultiplexedConnection,
    k: &Keys,
    owner: &str,
    left: u32,
    token: u64,
) -> i64 {
    script("release")
        .key(&k.lock)
        .key(&k.channel)
        .key(&k.fence)
        .key(&k.queue)
        .key(&k.timeouts)
        .arg(owner)
        .arg(left)
        .arg(60_000)
        .arg(token)
        .invoke_async(c)
        .await
        .expect("release")
}

/// `acquire_queued.lua` for `waiter`, as holder `owner` (lease 60 s,
/// count 1), with `ticket`, a queue timeout in ms, fair or plain.
async fn acquire_queued(
    c: &mut MultiplexedConnection,
    k: &Keys,
    owner: &str,
    waiter: &str,
    ticket: u64,
    timeout: u64,
    fair: bool,
) -> Vec<i64> {
    script("acquire_queued")
        .key(&k.lock)
        .key(&k.fence)
        .key(&k.queue)
        .key(&k.timeouts)
        .key(&k.channel)
        .arg(owner)
        .arg(60_000)
        .arg(1)
        .arg(waiter)
        .arg(ticket)
        .arg(timeout)
        .arg(u8::from(fair))
        .invoke_async(c)
        .await
        .expect("acquire_queued")
}

async fn leave(c: &mut MultiplexedConnection, k: &Keys, waiter: &str) -> i64 {
    script("leave")
        .key(&k.lock)
        .key(&k.queue)
        .key(&k.timeouts)
        .key(&k.channel)
        .arg(waiter)
        .invoke_async(c)
        .await
        .expect("leave")
}

/// The queued waiter ids, in order.
async fn queue(c: &mut MultiplexedConnection, k: &Keys) -> Vec<String> {
    redis::cmd("ZRANGE")
        .arg(&k.queue)
        .arg(0)
        .arg(-1)
        .query_async(c)
        .await
        .expect("ZRANGE")
}

async fn pttl_of(c: &mut MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL")
        .arg(key)
        .query_async(c)
        .await
        .expect("PTTL")
}

/// Both queue keys have a TTL in `(0, at_most]`.
async fn assert_queue_ttl(c: &mut MultiplexedConnection, k: &Keys, at_most: i64) {
    for key in [&k.queue, &k.timeouts] {
        let t = pttl_of(c, key).await;
        assert!(
            t > 0 && t <= at_most,
            "PTTL {key} = {t}, want (0, {at_most}]"
        );
    }
}

async fn subscribe(k: &Keys) -> redis::aio::PubSub {
    let client = redis::Client::open(support::nodes().url(0)).expect("url");
    let mut sub = client.get_async_pubsub().await.expect("pubsub");
    sub.subscribe(&k.channel).await.expect("subscribe");
    sub
}

/// The payload of the next message on the subscribed channel.
async fn next_payload(sub: &mut redis::aio::PubSub) -> String {
    use futures::StreamExt;
    let msg = tokio::time::timeout(std::time::Duration::from_secs(2), sub.on_message().next())
        .await
        .expect("a message")
        .expect("message");
    msg.get_payload::<String>().expect("payload")
}

async fn renew(c: &mut MultiplexedConnection, items: &[(&Keys, &str, u32, u64)]) -> Vec<i64> {
    let s = script("renew");
    let mut inv = s.prepare_invoke();
    for (k, ..) in items {
        inv.key(&k.lock);
    }
    for (_, owner, count, _) in items {
        inv.arg(*owner).arg(*count).arg(60_000);
    }
    inv.invoke_async(c).await.expect("renew")
}

/// The repair batch: per lock, its key and then its fence counter (the
/// library passes its slot's; locks may share one).
async fn repair(
    c: &mut MultiplexedConnection,
    items: &[(&Keys, &str, &str, u32, u64)],
) -> Vec<i64> {
    let s = script("repair");
    let mut inv = s.prepare_invoke();
    for (k, fence, ..) in items {
        inv.key(&k.lock).key(*fence);
    }
    for (_, _, owner, count, token) in items {
        inv.arg(*owner).arg(*count).arg(*token).arg(60_000);
    }
    inv.invoke_async(c).await.expect("repair")
}

async fn hget(c: &mut MultiplexedConnection, k: &Keys, owner: &str) -> Option<u32> {
    redis::cmd("HGET")
        .arg(&k.lock)
        .arg(owner)
        .query_async(c)
        .await
        .expect("HGET")
}

async fn fence(c: &mut MultiplexedConnection, k: &Keys) -> Option<u64> {
    redis::cmd("GET")
        .arg(&k.fence)
        .query_async(c)
        .await
        .expect("GET")
}

async fn pttl(c: &mut MultiplexedConnection, k: &Keys) -> i64 {
    redis::cmd("PTTL")
        .arg(&k.lock)
        .query_async(c)
        .await
        .expect("PTTL")
}

#[tokio::test]
async fn acquire_grants_reenters_and_reports_the_holder() {
    let mut c = raw(0).await;
    let k = keys();
    assert_eq!(
        acquire(&mut c, &k, "a", 1).await,
        vec![1, 1],
        "fresh grant, token 1"
    );
    assert!(pttl(&mut c, &k).await > 59_000);
    assert_eq!(
        acquire(&mut c, &k, "a", 3).await,
        vec![2, 1],
        "re-entry keeps the token"
    );
    assert_eq!(
        hget(&mut c, &k, "a").await,
        Some(3),
        "the client's count is authoritative"
    );
    let taken = acquire(&mut c, &k, "b", 1).await;
    assert_eq!(taken[0], 0);
    assert!(taken[1] > 59_000 && taken[1] <= 60_000, "{taken:?}");
    assert_eq!(
        fence(&mut c, &k).await,
        Some(1),
        "a refusal does not INCR the fence"
    );
}

/// `acquire.lua` with ARGV[4] = 1 (a re-entry): our key is re-entered, a
/// missing key is reported as `{3, 0}` and never created (no INCR).
#[tokio::test]
async fn acquire_in_reentry_mode_reports_a_missing_key_and_creates_nothing() {
    let mut c = raw(0).await;
    let k = keys();
    async fn reenter(c: &mut MultiplexedConnection, k: &Keys, owner: &str, count: u32) -> Vec<i64> {
        script("acquire")
            .key(&k.lock)
            .key(&k.fence)
            .arg(owner)
            .arg(60_000)
            .arg(count)
            .arg(1)
            .invoke_async(c)
            .await
            .expect("acquire")
    }
    let missing = reenter(&mut c, &k, "a", 2).await;
    assert_eq!(missing, vec![3, 0]);
    assert_eq!(pttl(&mut c, &k).await, -2, "no key created");
    assert_eq!(fence(&mut c, &k).await, None, "no INCR");
    assert_eq!(acquire(&mut c, &k, "a", 1).await, vec![1, 1]);
    let again = reenter(&mut c, &k, "a", 2).await;
    assert_eq!(again, vec![2, 1]);
    assert_eq!(hget(&mut c, &k, "a").await, Some(2));
    let taken = reenter(&mut c, &k, "b", 1).await;
    assert_eq!(taken[0], 0);
}

/// `release.lua` with the queue key of another type: WRONGTYPE, and the
/// lock and the fence counter are as they were (an error changes nothing).
#[tokio::test]
async fn release_with_a_queue_key_of_another_type_errors_and_changes_nothing() {
    let mut c = raw(0).await;
    let k = keys();
    assert_eq!(acquire(&mut c, &k, "a", 1).await, vec![1, 1]);
    let _: () = redis::cmd("SET")
        .arg(&k.queue)
        .arg("x")
        .query_async(&mut c)
        .await
        .expect("SET");
    let err = script("release")
        .key(&k.lock)
        .key(&k.channel)
        .key(&k.fence)
        .key(&k.queue)
        .key(&k.timeouts)
        .arg("a")
        .arg(0)
        .arg(60_000)
        .arg(5)
        .invoke_async::<i64>(&mut c)
        .await
        .expect_err("WRONGTYPE");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    assert_eq!(hget(&mut c, &k, "a").await, Some(1), "the lock is kept");
    assert_eq!(fence(&mut c, &k).await, Some(1), "the counter is kept");
}

#[tokio::test]
async fn acquire_on_a_wrong_type_key_errors_and_changes_nothing() {
    let mut c = raw(0).await;
    let k = keys();
    let _: () = redis::cmd("SET")
        .arg(&k.lock)
        .arg("v")
        .query_async(&mut c)
        .await
        .expect("SET");
    let err = script("acquire")
        .key(&k.lock)
        .key(&k.fence)
        .arg("a")
        .arg(1_000)
        .arg(1)
        .invoke_async::<Vec<i64>>(&mut c)
        .await
        .expect_err("WRONGTYPE");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let v: String = redis::cmd("GET")
        .arg(&k.lock)
        .query_async(&mut c)
        .await
        .expect("GET");
    assert_eq!(v, "v");
}

#[tokio::test]
async fn release_lowers_deletes_publishes_and_refuses_others() {
    let mut c = raw(0).await;
    let k = keys();
    assert_eq!(release(&mut c, &k, "a", 0, 0).await, 0, "missing");
    acquire(&mut c, &k, "a", 2).await;
    assert_eq!(release(&mut c, &k, "b", 0, 0).await, -1, "another owner");
    assert_eq!(release(&mut c, &k, "a", 1, 7).await, 1, "lowered");
    assert_eq!(hget(&mut c, &k, "a").await, Some(1));
    assert_eq!(fence(&mut c, &k).await, Some(7), "raised to the token");

    let client = redis::Client::open(support::nodes().url(0)).expect("url");
    let mut sub = client.get_async_pubsub().await.expect("pubsub");
    sub.subscribe(&k.channel).await.expect("subscribe");
    assert_eq!(release(&mut c, &k, "a", 0, 3).await, 2, "deleted");
    assert_eq!(fence(&mut c, &k).await, Some(7), "never lowered");
    let exists: bool = redis::cmd("EXISTS")
        .arg(&k.lock)
        .query_async(&mut c)
        .await
        .expect("EXISTS");
    assert!(!exists);
    use futures::StreamExt;
    let msg = tokio::time::timeout(std::time::Duration::from_secs(2), sub.on_message().next())
        .await
        .expect("a release message")
        .expect("message");
    assert_eq!(msg.get_channel_name(), k.channel);
    // Nobody queued: the message names no waiter, and who released.
    assert_eq!(msg.get_payload::<String>().expect("payload"), " a");

    // Waiters queued: the message names the head once the waiters that
    // stopped calling are dropped.
    assert_eq!(acquire(&mut c, &k, "a", 1).await, vec![1, 8]);
    assert_eq!(
        acquire_queued(&mut c, &k, "h1", "gone", 0, 100, true).await[2],
        1
    );
    assert_eq!(
        acquire_queued(&mut c, &k, "h2", "w2", 0, 60_000, true).await[2],
        2
    );
    assert_eq!(
        acquire_queued(&mut c, &k, "h3", "w3", 0, 60_000, true).await[2],
        3
    );
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(release(&mut c, &k, "a", 0, 8).await, 2, "deleted");
    assert_eq!(next_payload(&mut sub).await, "w2 a");
    assert_eq!(
        queue(&mut c, &k).await,
        vec!["w2", "w3"],
        "the gone head dropped"
    );
    // The head took the lock on other nodes and leaves: w3 is told.
    assert_eq!(leave(&mut c, &k, "w2").await, 1);
    assert_eq!(next_payload(&mut sub).await, "w3");
    assert_eq!(acquire(&mut c, &k, "a", 1).await, vec![1, 9]);
    assert_eq!(release(&mut c, &k, "a", 0, 9).await, 2, "deleted");
    assert_eq!(next_payload(&mut sub).await, "w3 a");
    assert_eq!(leave(&mut c, &k, "w3").await, 1);
    assert_eq!(acquire(&mut c, &k, "a", 1).await, vec![1, 10]);
    assert_eq!(release(&mut c, &k, "a", 0, 10).await, 2, "deleted");
    // The last leave told no one (the queue was empty), so the next
    // message is this release's, with nobody queued.
    assert_eq!(next_payload(&mut sub).await, " a");
}

#[tokio::test]
async fn acquire_queued_hands_out_tickets_and_keeps_the_queue_with_a_ttl() {
    let mut c = raw(0).await;
    let k = keys();
    assert_eq!(acquire(&mut c, &k, "h", 1).await, vec![1, 1]);
    let first = acquire_queued(&mut c, &k, "h1", "w1", 0, 5_000, true).await;
    assert_eq!(
        (first[0], first[2]),
        (0, 1),
        "queued, first ticket: {first:?}"
    );
    assert!(
        first[1] > 59_000 && first[1] <= 60_000,
        "the holder's PTTL: {first:?}"
    );
    assert_queue_ttl(&mut c, &k, 5_000).await;
    assert_eq!(
        acquire_queued(&mut c, &k, "h2", "w2", 0, 5_000, false).await[2],
        2,
        "the tail's ticket + 1"
    );
    assert_eq!(
        acquire_queued(&mut c, &k, "h1", "w1", 0, 5_000, true).await[2],
        1,
        "a refresh keeps the ticket"
    );
    assert_eq!(queue(&mut c, &k).await, vec!["w1", "w2"]);
    assert_eq!(
        acquire_queued(&mut c, &k, "h1", "w1", 7, 5_000, true).await[2],
        7,
        "a sent ticket re-files the waiter"
    );
    assert_eq!(queue(&mut c, &k).await, vec!["w2", "w1"]);
    assert_eq!(
        acquire_queued(&mut c, &k, "h3", "w3", 0, 5_000, true).await[2],
        8
    );
    assert_queue_ttl(&mut c, &k, 5_000).await;
    // The holder re-enters with a place: granted with the counter, and the
    // queue is left alone.
    assert_eq!(
        acquire_queued(&mut c, &k, "h", "wh", 0, 5_000, true).await,
        vec![2, 1]
    );
    assert_eq!(queue(&mut c, &k).await, vec!["w2", "w1", "w3"]);

    assert_eq!(release(&mut c, &k, "h", 0, 1).await, 2, "deleted");
    // Free, but w2's turn: a fair request waits for w2's time left.
    let fair = acquire_queued(&mut c, &k, "h1", "w1", 7, 5_000, true).await;
    assert_eq!((fair[0], fair[2]), (0, 7), "{fair:?}");
    assert!(
        fair[1] > 4_000 && fair[1] <= 5_000,
        "w2's time left: {fair:?}"
    );
    // A plain request is granted whoever heads the queue, and leaves it.
    assert_eq!(
        acquire_queued(&mut c, &k, "h3", "w3", 8, 5_000, false).await,
        vec![1, 2]
    );
    assert_eq!(queue(&mut c, &k).await, vec!["w2", "w1"]);
    assert_eq!(release(&mut c, &k, "h3", 0, 2).await, 2, "deleted");
    // The head's fair request is granted.
    assert_eq!(
        acquire_queued(&mut c, &k, "h2", "w2", 2, 5_000, true).await,
        vec![1, 3]
    );
    assert_eq!(queue(&mut c, &k).await, vec!["w1"]);
    assert_eq!(release(&mut c, &k, "h2", 0, 3).await, 2, "deleted");
    assert_eq!(leave(&mut c, &k, "w1").await, 1);
    // The last waiter gone, the queue's keys are gone.
    for key in [&k.queue, &k.timeouts] {
        assert_eq!(pttl_of(&mut c, key).await, -2, "{key}");
    }
    // A fair request on a free lock with nobody queued is granted.
    assert_eq!(
        acquire_queued(&mut c, &k, "h1", "w1", 0, 5_000, true).await,
        vec![1, 4]
    );
    assert_eq!(pttl_of(&mut c, &k.queue).await, -2, "not queued");
}

#[tokio::test]
async fn acquire_queued_drops_gone_heads_and_a_short_timeout_keeps_longer_ones() {
    let mut c = raw(0).await;
    let k = keys();
    assert_eq!(acquire(&mut c, &k, "h", 1).await, vec![1, 1]);
    assert_eq!(
        acquire_queued(&mut c, &k, "h1", "gone", 0, 100, true).await[2],
        1
    );
    assert_queue_ttl(&mut c, &k, 100).await;
    assert_eq!(
        acquire_queued(&mut c, &k, "h2", "w2", 0, 60_000, true).await[2],
        2
    );
    assert_queue_ttl(&mut c, &k, 60_000).await;
    // A later waiter with a shorter timeout does not shorten the queue's
    // TTL: the keys live to the latest deadline among the waiters.
    assert_eq!(
        acquire_queued(&mut c, &k, "h3", "w3", 0, 1_000, true).await[2],
        3
    );
    for key in [&k.queue, &k.timeouts] {
        let t = pttl_of(&mut c, key).await;
        assert!(t > 59_000 && t <= 60_000, "PTTL {key} = {t}");
    }
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert_eq!(queue(&mut c, &k).await, vec!["gone", "w2", "w3"]);
    // The next call drops the gone head.
    assert_eq!(
        acquire_queued(&mut c, &k, "h3", "w3", 0, 1_000, true).await[2],
        3
    );
    assert_eq!(queue(&mut c, &k).await, vec!["w2", "w3"]);
    let score: Option<f64> = redis::cmd("ZSCORE")
        .arg(&k.timeouts)
        .arg("gone")
        .query_async(&mut c)
        .await
        .expect("ZSCORE");
    assert_eq!(score, None, "dropped from both sets");

    // On a free lock, a call that drops the gone head tells the next one
    // whose turn it is now.
    let k = keys();
    assert_eq!(acquire(&mut c, &k, "h", 1).await, vec![1, 1]);
    acquire_queued(&mut c, &k, "h1", "gone", 0, 100, true).await;
    acquire_queued(&mut c, &k, "h2", "w2", 0, 60_000, true).await;
    acquire_queued(&mut c, &k, "h3", "w3", 0, 60_000, true).await;
    let mut sub = subscribe(&k).await;
    assert_eq!(release(&mut c, &k, "h", 0, 1).await, 2, "deleted");
    assert_eq!(next_payload(&mut sub).await, "gone h", "not gone yet");
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let w3 = acquire_queued(&mut c, &k, "h3", "w3", 0, 60_000, true).await;
    assert_eq!((w3[0], w3[2]), (0, 3), "w2's turn: {w3:?}");
    assert!(w3[1] > 58_000 && w3[1] <= 60_000, "w2's time left: {w3:?}");
    assert_eq!(next_payload(&mut sub).await, "w2");
    assert_eq!(queue(&mut c, &k).await, vec!["w2", "w3"]);
}

#[tokio::test]
async fn leave_removes_the_waiter_and_tells_the_next_when_due() {
    let mut c = raw(0).await;
    let k = keys();
    assert_eq!(leave(&mut c, &k, "w1").await, 0, "nothing queued");
    assert_eq!(acquire(&mut c, &k, "h", 1).await, vec![1, 1]);
    for w in ["w1", "w2", "w3"] {
        acquire_queued(&mut c, &k, "h1", w, 0, 60_000, true).await;
    }
    let mut sub = subscribe(&k).await;
    // Not the head: taken out, no one told.
    assert_eq!(leave(&mut c, &k, "w2").await, 1);
    assert_eq!(leave(&mut c, &k, "w2").await, 0, "already out");
    assert_eq!(queue(&mut c, &k).await, vec!["w1", "w3"]);
    // The head of a held lock: taken out, no one told (the release will).
    assert_eq!(leave(&mut c, &k, "w1").await, 1);
    assert_eq!(queue(&mut c, &k).await, vec!["w3"]);
    assert_eq!(release(&mut c, &k, "h", 0, 1).await, 2, "deleted");
    assert_eq!(
        next_payload(&mut sub).await,
        "w3 h",
        "the leaves published nothing"
    );
    acquire_queued(&mut c, &k, "h1", "w4", 0, 60_000, true).await;
    // The head of a free lock: the next waiter is told.
    assert_eq!(leave(&mut c, &k, "w3").await, 1);
    assert_eq!(next_payload(&mut sub).await, "w4");
    assert_eq!(leave(&mut c, &k, "w4").await, 1);
    for key in [&k.queue, &k.timeouts] {
        assert_eq!(pttl_of(&mut c, key).await, -2, "{key}");
    }
}

#[tokio::test]
async fn renew_extends_and_reports_missing_and_conflicts_and_repair_recreates() {
    let mut c = raw(0).await;
    let (mine, gone, theirs, wrong) = (keys(), keys(), keys(), keys());
    acquire(&mut c, &mine, "a", 1).await;
    acquire(&mut c, &theirs, "b", 1).await;
    let _: () = redis::cmd("PEXPIRE")
        .arg(&mine.lock)
        .arg(500)
        .query_async(&mut c)
        .await
        .expect("PEXPIRE");
    let _: () = redis::cmd("SET")
        .arg(&wrong.lock)
        .arg("v")
        .query_async(&mut c)
        .await
        .expect("SET");
    let items = [
        (&mine, "a", 2, 1),
        (&gone, "a", 3, 9),
        (&theirs, "a", 1, 1),
        (&wrong, "a", 1, 1),
    ];
    let codes = renew(&mut c, &items).await;
    assert_eq!(codes, vec![1, 3, 0, -2]);
    assert!(pttl(&mut c, &mine).await > 59_000, "extended");
    assert_eq!(hget(&mut c, &mine, "a").await, Some(2), "count converged");
    assert_eq!(
        hget(&mut c, &gone, "a").await,
        None,
        "renew creates nothing"
    );
    // The watchdog repairs only after a quorum confirmed the hold.
    let items = items.map(|(k, owner, count, token)| (k, k.fence.as_str(), owner, count, token));
    let codes = repair(&mut c, &items).await;
    assert_eq!(codes, vec![1, 2, 0, -2]);
    assert_eq!(
        hget(&mut c, &gone, "a").await,
        Some(3),
        "re-created with the count"
    );
    assert!(pttl(&mut c, &gone).await > 59_000);
    assert_eq!(
        fence(&mut c, &gone).await,
        Some(9),
        "a repaired node's fence is raised"
    );
    assert_eq!(
        hget(&mut c, &theirs, "b").await,
        Some(1),
        "another owner is untouched"
    );
    assert_eq!(hget(&mut c, &theirs, "a").await, None);
}

#[tokio::test]
async fn repair_with_an_unusable_fence_counter_creates_nothing() {
    let mut c = raw(0).await;
    let (first, second, third) = (keys(), keys(), keys());
    for bad in ["not a number", "hash"] {
        let _: () = redis::cmd("DEL")
            .arg(&first.fence)
            .query_async(&mut c)
            .await
            .expect("DEL");
        if bad == "hash" {
            let _: () = redis::cmd("HSET")
                .arg(&first.fence)
                .arg("f")
                .arg("v")
                .query_async(&mut c)
                .await
                .expect("HSET");
        } else {
            let _: () = redis::cmd("SET")
                .arg(&first.fence)
                .arg(bad)
                .query_async(&mut c)
                .await
                .expect("SET");
        }
        // Both locks are missing and share the counter: neither is
        // re-created (not the first one before an error on the second). A
        // third lock with a counter of its own is.
        let bad_fence = first.fence.as_str();
        let codes = repair(
            &mut c,
            &[
                (&first, bad_fence, "a", 1, 5),
                (&second, bad_fence, "a", 1, 6),
                (&third, third.fence.as_str(), "a", 1, 7),
            ],
        )
        .await;
        assert_eq!(codes, vec![-2, -2, 2], "{bad}");
        assert_eq!(hget(&mut c, &first, "a").await, None, "{bad}");
        assert_eq!(hget(&mut c, &second, "a").await, None, "{bad}");
        assert_eq!(hget(&mut c, &third, "a").await, Some(1), "{bad}");
        assert_eq!(fence(&mut c, &third).await, Some(7), "{bad}");
        let _: () = redis::cmd("DEL")
            .arg(&third.lock)
            .query_async(&mut c)
            .await
            .expect("DEL");
    }
}

#[tokio::test]
async fn force_release_and_raise_fence() {
    let mut c = raw(0).await;
    let k = keys();
    let force_script = script("force_release");
    let force = |k: &Keys| {
        let mut inv = force_script.prepare_invoke();
        inv.key(&k.lock).key(&k.channel);
        inv
    };
    assert_eq!(
        force(&k).invoke_async::<i64>(&mut c).await.expect("force"),
        0
    );
    acquire(&mut c, &k, "a", 1).await;
    assert_eq!(
        force(&k).invoke_async::<i64>(&mut c).await.expect("force"),
        1
    );
    assert_eq!(hget(&mut c, &k, "a").await, None);
    let raise_script = script("raise_fence");
    let raise = |t: u64| {
        let mut inv = raise_script.prepare_invoke();
        inv.key(&k.fence).arg(t);
        inv
    };
    assert_eq!(
        raise(5).invoke_async::<u64>(&mut c).await.expect("raise"),
        5
    );
    assert_eq!(
        raise(3).invoke_async::<u64>(&mut c).await.expect("raise"),
        5,
        "never lowered"
    );
    // A set's counters: all raised, the lowest returned; one that is not
    // a number fails the call before any is written.
    let (other, bad) = (keys(), keys());
    let raise_all = |ks: &[&str], t: u64| {
        let mut inv = raise_script.prepare_invoke();
        for k in ks {
            inv.key(*k);
        }
        inv.arg(t);
        inv
    };
    let both = [k.fence.as_str(), other.fence.as_str()];
    assert_eq!(
        raise_all(&both, 4)
            .invoke_async::<u64>(&mut c)
            .await
            .expect("raise"),
        4
    );
    assert_eq!(fence(&mut c, &k).await, Some(5), "never lowered");
    assert_eq!(fence(&mut c, &other).await, Some(4), "raised");
    let _: () = redis::cmd("SET")
        .arg(&bad.fence)
        .arg("x")
        .query_async(&mut c)
        .await
        .expect("SET");
    let three = [other.fence.as_str(), bad.fence.as_str()];
    assert!(raise_all(&three, 9)
        .invoke_async::<u64>(&mut c)
        .await
        .is_err());
    assert_eq!(fence(&mut c, &other).await, Some(4), "nothing written");
}
