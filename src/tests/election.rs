//! Leader election over fake nodes, on a paused clock: terms, hand-over on
//! resignation, proclaims, the quorum read, the shared observer, loss by
//! `valid_until`, and bad input.

use std::fmt::Debug;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::keys::Keys;
use crate::node::{Answer, NodeOps, Record};
use crate::tests::fake::{
    cluster_with, peer, peer_over, renewed_each_second, FakeNode, Mode, Script, TestNode,
};
use crate::{Error, Leader, MAX_LEADER_VALUE};

const MS: Duration = Duration::from_millis(1);

/// A link to a fake node that goes silent (every call hangs) once `cut`,
/// and that loses the answer of every proclaim while `mute` (the node
/// writes the record, the caller never hears).
struct Cuttable {
    fake: Arc<FakeNode>,
    cut: Arc<AtomicBool>,
    mute: Arc<AtomicBool>,
}

impl Cuttable {
    fn links(
        fakes: &[Arc<FakeNode>],
        cut: &Arc<AtomicBool>,
        mute: &Arc<AtomicBool>,
    ) -> Vec<Arc<dyn NodeOps>> {
        fakes
            .iter()
            .map(|f| {
                Arc::new(Self {
                    fake: Arc::clone(f),
                    cut: Arc::clone(cut),
                    mute: Arc::clone(mute),
                }) as _
            })
            .collect()
    }
}

impl TestNode for Cuttable {
    fn fake(&self) -> &FakeNode {
        &self.fake
    }

    fn reach<T: Debug + Send + 'static>(
        &self,
        what: &'static str,
        script: impl Script<T>,
    ) -> Answer<T> {
        if self.cut.load(Ordering::SeqCst) {
            return Box::pin(std::future::pending());
        }
        let answer = self.fake.reach(what, script);
        if what == "proclaim" && self.mute.load(Ordering::SeqCst) {
            return Box::pin(async move {
                let _ = answer.await;
                std::future::pending().await
            });
        }
        answer
    }
}

fn keys(name: &str) -> Keys {
    Keys::new("quorumlock:", &format!("election:{name}"))
}

/// Waits (on the paused clock) until `rx` holds what `want` accepts, at
/// most `within`; returns what it holds then.
async fn until(
    rx: &mut tokio::sync::watch::Receiver<Option<Leader>>,
    within: Duration,
    want: impl Fn(&Option<Leader>) -> bool,
) -> Option<Leader> {
    let deadline = Instant::now() + within;
    loop {
        if want(&rx.borrow_and_update()) {
            return rx.borrow().clone();
        }
        tokio::select! {
            r = rx.changed() => r.expect("the watch runs"),
            () = tokio::time::sleep_until(deadline) => panic!("not within {within:?}: {:?}", *rx.borrow()),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_campaign_leads_with_its_holds_token_as_the_term() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let election = m.election("scheduler");
    let me = election.campaign("host-a:8080").await.unwrap();
    assert!(me.is_leader());
    assert_eq!(me.value(), "host-a:8080");
    let fence = fakes
        .iter()
        .map(|f| f.fence(&keys("scheduler").fence))
        .max();
    assert_eq!(Some(me.term()), fence);
    let leader = election.leader().await.unwrap().expect("a leader");
    assert_eq!((leader.value(), leader.term()), ("host-a:8080", me.term()));
    assert_eq!(leader.revision(), 1);
    assert_eq!(leader.holder_id(), me.holder_id());
    assert_eq!(leader.pid(), Some(std::process::id()));
    assert!(leader.host().is_some_and(|h| !h.is_empty()) && leader.since().is_some());
    assert_eq!(me.leader(), leader);
    me.resign().await.unwrap();
    assert_eq!(election.leader().await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn terms_strictly_increase_across_resignations_drops_and_losses() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let other = peer(&fakes);
    let mut terms = Vec::new();
    for round in 0..6 {
        let manager = if round % 2 == 0 { &m } else { &other };
        let me = manager
            .election("e")
            .campaign(format!("r{round}"))
            .await
            .unwrap();
        terms.push(me.term());
        match round % 3 {
            0 => me.resign().await.unwrap(),
            1 => drop(me),
            _ => {
                // Lost: an operator breaks the lock; the watchdog finds
                // it gone and declares the leadership lost.
                assert_eq!(m.force_unlock("election:e").await.unwrap(), 3);
                tokio::time::timeout(Duration::from_secs(3), me.lost())
                    .await
                    .expect("lost by valid_until");
                assert!(!me.is_leader());
            }
        }
        m.flush().await;
        other.flush().await;
    }
    assert!(terms.windows(2).all(|w| w[0] < w[1]), "{terms:?}");
}

#[tokio::test(start_paused = true)]
async fn the_next_candidate_leads_when_the_leader_resigns() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let other = peer(&fakes);
    let first = m.election("e").campaign("a").await.unwrap();
    let waiting = tokio::spawn(async move { other.election("e").campaign("b").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished(), "b waits while a leads");
    let resigned = Instant::now();
    let term = first.term();
    first.resign().await.unwrap();
    let next = waiting.await.unwrap().unwrap();
    // Woken by the release message: a round trip, not a poll or a lease.
    assert!(
        resigned.elapsed() < Duration::from_millis(50),
        "{:?}",
        resigned.elapsed()
    );
    assert!(next.term() > term && next.is_leader());
    assert_eq!(next.value(), "b");
}

#[tokio::test(start_paused = true)]
async fn candidates_lead_in_the_order_they_arrived() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let first = m.election("e").campaign("0").await.unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 1..=4 {
        let (other, tx) = (peer(&fakes), tx.clone());
        tokio::spawn(async move {
            let me = other.election("e").campaign(i.to_string()).await.unwrap();
            tx.send((i, me.term())).unwrap();
            tokio::time::sleep(Duration::from_millis(20)).await;
            me.resign().await.unwrap();
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    first.resign().await.unwrap();
    let mut order = Vec::new();
    for _ in 1..=4 {
        order.push(rx.recv().await.unwrap());
    }
    assert_eq!(order.iter().map(|o| o.0).collect::<Vec<_>>(), [1, 2, 3, 4]);
    assert!(order.windows(2).all(|w| w[0].1 < w[1].1), "{order:?}");
}

#[tokio::test(start_paused = true)]
async fn proclaim_changes_the_value_and_keeps_the_term() {
    let (m, _fakes) = cluster_with(3, renewed_each_second);
    let election = m.election("e");
    let me = election.campaign("host-a:8080").await.unwrap();
    me.proclaim("host-a:9090").await.unwrap();
    assert_eq!(me.value(), "host-a:9090");
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!(
        (leader.value(), leader.term(), leader.revision()),
        ("host-a:9090", me.term(), 2)
    );
    // Another campaign of the same process waits its turn like any other.
    let again = election
        .try_campaign("host-b", Duration::from_millis(100))
        .await;
    assert!(again.is_err_and(|e| e.is_contended()));
    me.resign().await.unwrap();
}

/// A record of a later term on a minority (a campaign rolled back after
/// writing it there) is no leader: the read reports the quorum's leader,
/// or nobody.
#[tokio::test(start_paused = true)]
async fn a_record_on_a_minority_is_never_the_leader() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let election = m.election("e");
    let k = keys("e");
    let intruder = Record {
        holder: "intruder".into(),
        term: 1_000,
        rev: 1,
        value: "x".into(),
    };
    fakes[0].take(&k.lock, "intruder", Duration::from_secs(60));
    fakes[0].put_record(&k, intruder.clone());
    assert_eq!(election.leader().await.unwrap(), None);
    let mut rx = election.observe();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(*rx.borrow_and_update(), None);
    drop(rx);
    fakes[0].wipe();
    let me = election.campaign("real").await.unwrap();
    fakes[2].take(&k.lock, "intruder", Duration::from_secs(60));
    fakes[2].put_record(&k, intruder);
    let leader = election.leader().await.unwrap().unwrap();
    assert_eq!((leader.value(), leader.term()), ("real", me.term()));
}

#[tokio::test(start_paused = true)]
async fn observers_share_one_watch_that_never_goes_back() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let other = peer(&fakes);
    let election = m.election("e");
    let mut rx = election.observe();
    let mut more: Vec<_> = (0..10).map(|_| m.election("e").observe()).collect();
    assert_eq!(m.inner.observers.running(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(*rx.borrow_and_update(), None);

    let a = other.election("e").campaign("a").await.unwrap();
    let seen = until(&mut rx, 20 * MS, Option::is_some).await.unwrap();
    assert_eq!((seen.value(), seen.term()), ("a", a.term()));
    a.proclaim("a2").await.unwrap();
    let seen = until(&mut rx, 20 * MS, |l| {
        l.as_ref().is_some_and(|l| l.value() == "a2")
    })
    .await;
    assert_eq!(seen.unwrap().revision(), 2);
    let term = a.term();
    a.resign().await.unwrap();
    until(&mut rx, 20 * MS, Option::is_none).await;
    let b = other.election("e").campaign("b").await.unwrap();
    let seen = until(&mut rx, 20 * MS, Option::is_some).await.unwrap();
    assert!(seen.term() > term && seen.term() == b.term());
    for r in &mut more {
        assert_eq!(
            r.borrow_and_update().as_ref().map(Leader::term),
            Some(b.term())
        );
    }
    drop((rx, more));
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        m.inner.observers.running(),
        0,
        "the watch ends with its receivers"
    );
}

/// An expiry publishes nothing: the observer reads again when the agreed
/// leader's keys are due to expire.
#[tokio::test(start_paused = true)]
async fn an_observer_sees_an_expiry_without_any_message() {
    // The observer's own poll (its manager's renew interval) is 20 s.
    let (m, fakes) = cluster_with(3, |b| {
        b.lease(Duration::from_secs(30))
            .renew_interval(Duration::from_secs(20))
    });
    let cut = Arc::new(AtomicBool::new(false));
    let links = Cuttable::links(&fakes, &cut, &Arc::new(AtomicBool::new(false)));
    let leader = peer_over(links);
    let election = m.election("e");
    let mut rx = election.observe();
    let me = leader.election("e").campaign("a").await.unwrap();
    until(&mut rx, 20 * MS, Option::is_some).await;
    // The leader's process stops talking to the nodes (stalled): its keys
    // expire 3 s after the last write.
    // The leader's process goes silent (a crash, as the nodes see it):
    // its keys expire at most 3 s later (its last renewal), publishing
    // nothing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    cut.store(true, Ordering::SeqCst);
    let stop = Instant::now();
    until(&mut rx, Duration::from_secs(4), Option::is_none).await;
    let took = stop.elapsed();
    assert!(took <= Duration::from_secs(3) + 20 * MS, "{took:?}");
    assert!(
        took >= Duration::from_secs(2),
        "{took:?}: before the keys expired"
    );
    drop(me);
}

#[tokio::test(start_paused = true)]
async fn a_leader_whose_renewals_fail_stops_leading_by_valid_until() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let me = m.election("e").campaign("a").await.unwrap();
    let until = me.valid_until();
    for f in &fakes {
        f.set_mode(Mode::Stall);
    }
    tokio::time::timeout(Duration::from_secs(5), me.lost())
        .await
        .expect("lost");
    assert!(std::time::Instant::now() <= until + Duration::from_millis(5));
    assert!(!me.is_leader());
    assert!(matches!(me.proclaim("b").await, Err(Error::Lost { .. })));
}

/// A campaign whose first record reached every member but whose answers
/// were all lost fails, and is released: observers may report its record
/// meanwhile (ELECTION.md: a campaign whose result is in doubt), under the
/// term of the hold it won, and the next leader's term is larger.
#[tokio::test(start_paused = true)]
async fn a_campaign_whose_record_landed_unheard_fails_and_is_reported_until_released() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let mute = Arc::new(AtomicBool::new(true));
    let links = Cuttable::links(&fakes, &Arc::new(AtomicBool::new(false)), &mute);
    let unheard = peer_over(links);
    let mut rx = m.election("e").observe();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen_by = Arc::clone(&seen);
    let recorder = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let now = rx.borrow_and_update().clone();
            seen_by
                .lock()
                .unwrap()
                .push(now.map(|l| (l.value().to_owned(), l.term())));
        }
    });
    let e = unheard
        .election("e")
        .try_campaign("in-doubt", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");
    tokio::time::sleep(Duration::from_millis(50)).await;
    let next = m.election("e").campaign("next").await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    recorder.abort();
    let seen = seen.lock().unwrap().clone();
    let doubtful: Vec<u64> = seen
        .iter()
        .flatten()
        .filter(|(v, _)| v == "in-doubt")
        .map(|(_, t)| *t)
        .collect();
    assert!(
        !doubtful.is_empty(),
        "the record that landed was reported: {seen:?}"
    );
    assert!(doubtful.iter().all(|t| *t < next.term()), "{seen:?}");
    assert_eq!(
        seen.last(),
        Some(&Some(("next".to_owned(), next.term()))),
        "the failed campaign was released, and the next leads: {seen:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn try_campaign_gives_up_after_its_wait() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    let _leader = m.election("e").campaign("a").await.unwrap();
    let other = peer(&fakes);
    let started = Instant::now();
    let e = other
        .election("e")
        .try_campaign("b", Duration::from_millis(300))
        .await
        .unwrap_err();
    assert!(e.is_contended(), "{e}");
    assert!(started.elapsed() < Duration::from_millis(500));
}

#[tokio::test(start_paused = true)]
async fn bad_input_is_a_typed_error() {
    let (m, _fakes) = cluster_with(3, renewed_each_second);
    let bad_name = m.election("a{b}");
    let invalid = |r: Result<_, Error>, what: &str| {
        assert!(
            matches!(&r, Err(Error::InvalidInput { what: w, .. }) if *w == what),
            "{:?}",
            r.map(|_: crate::Leadership| ())
        );
    };
    invalid(bad_name.campaign("v").await, "election name");
    invalid(
        bad_name.try_campaign("v", Duration::ZERO).await,
        "election name",
    );
    assert!(matches!(
        bad_name.leader().await,
        Err(Error::InvalidInput { .. })
    ));
    let mut rx = bad_name.observe();
    assert!(rx.changed().await.is_err() && rx.borrow().is_none());
    assert!(matches!(
        m.election("").leader().await,
        Err(Error::InvalidInput { .. })
    ));
    let long = "x".repeat(crate::MAX_NAME_LEN);
    assert!(matches!(
        m.election(long).leader().await,
        Err(Error::InvalidInput { .. })
    ));

    let election = m.election("ok");
    invalid(election.campaign("").await, "leader value");
    invalid(
        election.campaign("v".repeat(MAX_LEADER_VALUE + 1)).await,
        "leader value",
    );
    let me = election
        .campaign("v".repeat(MAX_LEADER_VALUE))
        .await
        .unwrap();
    assert!(matches!(
        me.proclaim("").await,
        Err(Error::InvalidInput { .. })
    ));
    assert_eq!(me.value().len(), MAX_LEADER_VALUE);
    me.resign().await.unwrap();
}

/// A record key of another type fails the campaign with a typed error
/// once, instead of taking and releasing the lock without end.
#[tokio::test(start_paused = true)]
async fn a_record_key_of_another_type_is_a_typed_error() {
    let (m, fakes) = cluster_with(3, renewed_each_second);
    for f in &fakes {
        f.put_foreign(&keys("e").record());
    }
    let e = m.election("e").campaign("a").await.unwrap_err();
    assert!(e.is_wrong_type(), "{e}");
    m.flush().await;
    assert!(fakes.iter().all(|f| f.holder(&keys("e").lock).is_none()));
}
