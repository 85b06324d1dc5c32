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
        "renew" => include_str!("../src/scripts/renew.lua"),
        "repair" => include_str!("../src/scripts/repair.lua"),
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

/// The repair batch: the locks, then one fence counter (the node's).
async fn repair(
    c: &mut MultiplexedConnection,
    fence: &Keys,
    items: &[(&Keys, &str, u32, u64)],
) -> Vec<i64> {
    let s = script("repair");
    let mut inv = s.prepare_invoke();
    for (k, ..) in items {
        inv.key(&k.lock);
    }
    inv.key(&fence.fence);
    for (_, owner, count, token) in items {
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
    // Nobody queued: the message names no waiter.
    assert_eq!(msg.get_payload::<String>().expect("payload"), "");
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
    let codes = repair(&mut c, &gone, &items).await;
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
    let (first, second) = (keys(), keys());
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
        // Both locks are missing: each needs the counter, so neither is
        // re-created (not the first one before an error on the second).
        let codes = repair(&mut c, &first, &[(&first, "a", 1, 5), (&second, "a", 1, 6)]).await;
        assert_eq!(codes, vec![-2, -2], "{bad}");
        assert_eq!(hget(&mut c, &first, "a").await, None, "{bad}");
        assert_eq!(hget(&mut c, &second, "a").await, None, "{bad}");
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
}
