//! `lock_all` (the multi-lock) against five real `redis-server` masters: the
//! set on every node, all or none, and a bank whose transfers between two
//! accounts are a non-atomic read-modify-write, safe only under the lock.

mod support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use quorumlock::{Backoff, LockManager, Quorum};
use support::{builder, key, nodes_with_key, pre_take, raw, unique};

async fn hash_on(i: usize, name: &str) -> Vec<(String, u32)> {
    let mut c = raw(i).await;
    redis::cmd("HGETALL")
        .arg(key(name))
        .query_async(&mut c)
        .await
        .expect("HGETALL")
}

async fn manager() -> LockManager {
    builder()
        .quorum(Quorum::Majority)
        .backoff(
            Backoff::new(Duration::from_millis(1), Duration::from_millis(8))
                .expect("valid backoff"),
        )
        .build()
        .await
        .expect("build a manager over the local nodes")
}

#[tokio::test]
async fn lock_all_writes_every_name_on_every_node_and_release_deletes_them() {
    let m = manager().await;
    let (a, b) = (unique("multi-a"), unique("multi-b"));
    let g = m.lock_all([&a, &b]).await.expect("lock_all");
    let holder = g.guards()[0].holder_id().to_owned();
    assert_eq!(g.fencing_token(&a), g.fencing_token(&b));
    assert!(
        support::eventually(Duration::from_secs(1), || async {
            nodes_with_key(&a).await == 5 && nodes_with_key(&b).await == 5
        })
        .await,
        "late grants should reach all 5 nodes"
    );
    for i in 0..5 {
        assert_eq!(hash_on(i, &a).await, vec![(holder.clone(), 1)]);
        assert_eq!(hash_on(i, &b).await, vec![(holder.clone(), 1)]);
    }
    g.release().await.expect("release");
    m.flush().await;
    assert_eq!(nodes_with_key(&a).await + nodes_with_key(&b).await, 0);
}

#[tokio::test]
async fn a_name_taken_on_a_majority_leaves_no_grant_of_the_others() {
    let m = manager().await;
    let (a, b) = (unique("multi-free"), unique("multi-taken"));
    for i in 0..3 {
        pre_take(i, &b, "someone-else").await;
    }
    let err = m
        .try_lock_all([&a, &b], Duration::from_millis(50))
        .await
        .expect_err("b is taken on 3 of 5");
    assert!(err.is_contended(), "{err}");
    assert_eq!(nodes_with_key(&a).await, 0, "grants of a left behind");
    assert_eq!(nodes_with_key(&b).await, 3, "only the other holder's keys");
    m.force_unlock(&b).await.expect("force unlock");
}

#[tokio::test]
async fn the_owner_re_enters_the_set_and_tokens_increase_per_name() {
    let m = manager().await;
    let (a, b) = (unique("multi-re-a"), unique("multi-re-b"));
    let me = m.new_owner();
    let first = m
        .request_all([&a, &b])
        .owner(&me)
        .acquire()
        .await
        .expect("lock_all");
    let again = tokio::time::timeout(Duration::from_millis(500), me.scope(m.lock_all([&b, &a])))
        .await
        .expect("re-entry does not wait")
        .expect("re-enter the set");
    assert_eq!(again.guards()[0].hold_count(), 2);
    let holder = first.guards()[0].holder_id().to_owned();
    for i in 0..5 {
        for name in [&a, &b] {
            let h = hash_on(i, name).await;
            assert!(
                h.is_empty() || h == vec![(holder.clone(), 2)],
                "node {i}: {h:?}"
            );
        }
    }
    let t1 = first.fencing_token(&a).expect("a");
    again.release().await.expect("release 2");
    first.release().await.expect("release 1");
    m.flush().await;
    assert_eq!(nodes_with_key(&a).await + nodes_with_key(&b).await, 0);
    // Successive holds of each name, alone or in a set, get larger tokens.
    let single = m.lock(&a).await.expect("lock a");
    let t2 = single.fencing_token();
    assert!(t2 > t1, "{t2} <= {t1}");
    single.release().await.expect("release a");
    let set = m.lock_all([&b, &a]).await.expect("lock_all again");
    let t3 = set.fencing_token(&b).expect("b");
    assert!(t3 > t2, "{t3} <= {t2}");
    assert_eq!(set.fencing_token(&a), Some(t3));
    set.release().await.expect("release");
}

const ACCOUNTS: usize = 10;
const TASKS: usize = 16;
const START_BALANCE: i64 = 1_000;

/// Ten accounts in their own key space on node 0.
struct Bank {
    prefix: String,
}

impl Bank {
    async fn open() -> Self {
        let bank = Self {
            prefix: unique("bank"),
        };
        let mut c = raw(0).await;
        for i in 0..ACCOUNTS {
            let () = redis::cmd("SET")
                .arg(bank.account(i))
                .arg(START_BALANCE)
                .query_async(&mut c)
                .await
                .expect("SET");
        }
        bank
    }

    fn account(&self, i: usize) -> String {
        format!("{}:account:{i}", self.prefix)
    }

    fn lock_name(&self, i: usize) -> String {
        format!("{}:lock:{i}", self.prefix)
    }

    async fn total(&self) -> i64 {
        let mut c = raw(0).await;
        let mut sum = 0;
        for i in 0..ACCOUNTS {
            let v: i64 = redis::cmd("GET")
                .arg(self.account(i))
                .query_async(&mut c)
                .await
                .expect("GET");
            sum += v;
        }
        sum
    }

    /// Moves `amount` from `from` to `to`: two GETs, a pause, two SETs.
    async fn transfer(
        &self,
        c: &mut redis::aio::MultiplexedConnection,
        from: usize,
        to: usize,
        amount: i64,
    ) {
        let (a, b) = (self.account(from), self.account(to));
        let x: i64 = redis::cmd("GET").arg(&a).query_async(c).await.expect("GET");
        let y: i64 = redis::cmd("GET").arg(&b).query_async(c).await.expect("GET");
        tokio::time::sleep(Duration::from_millis(1)).await;
        let () = redis::cmd("SET")
            .arg(&a)
            .arg(x - amount)
            .query_async(c)
            .await
            .expect("SET");
        let () = redis::cmd("SET")
            .arg(&b)
            .arg(y + amount)
            .query_async(c)
            .await
            .expect("SET");
    }

    /// `TASKS` tasks make `transfers` transfers between random pairs, under
    /// `lock_all` of both accounts when `m` is given.
    async fn run(self: &Arc<Self>, m: Option<&LockManager>, transfers: usize) -> u64 {
        let done = Arc::new(AtomicU64::new(0));
        let tasks: Vec<_> = (0..TASKS)
            .map(|t| {
                let (bank, m, done) = (Arc::clone(self), m.cloned(), Arc::clone(&done));
                let share = transfers / TASKS + usize::from(t < transfers % TASKS);
                tokio::spawn(async move {
                    let mut c = raw(0).await;
                    for _ in 0..share {
                        let from = rand::random_range(0..ACCOUNTS);
                        let to = (from + rand::random_range(1..ACCOUNTS)) % ACCOUNTS;
                        let amount = rand::random_range(1..=100);
                        match &m {
                            Some(m) => {
                                // Either order: the set is taken all at once.
                                let g = m
                                    .lock_all([bank.lock_name(from), bank.lock_name(to)])
                                    .await
                                    .expect("lock_all");
                                bank.transfer(&mut c, from, to, amount).await;
                                g.release().await.expect("release");
                            }
                            None => bank.transfer(&mut c, from, to, amount).await,
                        }
                        done.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("transfer task");
        }
        done.load(Ordering::Relaxed)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn transfers_under_lock_all_conserve_the_total() {
    let m = manager().await;
    let bank = Arc::new(Bank::open().await);
    let start = Instant::now();
    let done = tokio::time::timeout(Duration::from_secs(60), bank.run(Some(&m), 2_000))
        .await
        .expect("2,000 transfers finish (no deadlock)");
    assert_eq!(done, 2_000);
    assert_eq!(
        bank.total().await,
        START_BALANCE * ACCOUNTS as i64,
        "money created or destroyed under the lock"
    );
    eprintln!("2,000 transfers under lock_all in {:?}", start.elapsed());
    m.flush().await;
    for i in 0..ACCOUNTS {
        assert_eq!(nodes_with_key(&bank.lock_name(i)).await, 0, "lock {i} left");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn without_the_lock_the_same_transfers_lose_updates() {
    // The control: the same read-modify-write without the lock. A few
    // hundred transfers by 16 tasks over 10 accounts lose updates; a run
    // that happens to conserve the total is retried (up to 3).
    let mut totals = Vec::new();
    for _ in 0..3 {
        let bank = Arc::new(Bank::open().await);
        assert_eq!(bank.run(None, 400).await, 400);
        let total = bank.total().await;
        totals.push(total);
        if total != START_BALANCE * ACCOUNTS as i64 {
            return;
        }
    }
    panic!("the total was conserved without the lock in every run: {totals:?}");
}
