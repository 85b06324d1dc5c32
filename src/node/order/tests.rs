use super::*;

fn stamp(order: &Arc<Order>, pairs: &[(&str, &str)]) -> Stamp {
    on(order, pairs, Lane::Calls)
}

fn on(order: &Arc<Order>, pairs: &[(&str, &str)], prefer: Lane) -> Stamp {
    let pairs: Vec<u64> = pairs.iter().map(|(l, w)| pair(l, w)).collect();
    order.stamp(&pairs, prefer, 0)
}

/// An order of two lanes whose calls that free always prefer theirs.
fn lanes() -> Arc<Order> {
    Arc::new(Order::new(true, false).crowded_at(0))
}

/// A release whose acquire answered takes the lane of the calls that
/// free; one whose acquire is still in flight goes behind it, on the
/// acquire's lane; a member of one connection sends all on one.
#[test]
fn a_release_frees_apart_only_once_its_acquire_answered() {
    let order = lanes();
    let acquire = on(&order, &[("a", "h1")], Lane::Calls);
    assert_eq!(acquire.lane(), Lane::Calls);
    let early = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(early.lane(), Lane::Calls, "behind its acquire in flight");
    assert_eq!(early.barriers(), Barriers::NONE);
    let other = on(&order, &[("a", "h2")], Lane::Frees);
    assert_eq!(other.lane(), Lane::Frees, "another hold's release");
    for call in [&acquire, &early, &other] {
        call.ended(true);
    }
    drop((acquire, early, other));
    let release = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(release.lane(), Lane::Frees, "its acquire answered");
    release.ended(true);
    drop(release);
    assert_eq!(order.in_flight(), 0);

    let one = Arc::new(Order::new(false, false));
    let acquire = on(&one, &[("a", "h1")], Lane::Calls);
    drop(acquire);
    let release = on(&one, &[("a", "h1")], Lane::Frees);
    assert_eq!(release.lane(), Lane::Calls, "one connection for all");
    drop(release);
    assert_eq!(one.in_flight(), 0);
}

/// An acquire dropped unanswered (its deadline passed) may still run:
/// its hold's calls stay on its lane until a call made after the drop
/// is answered there; an answer made before the drop proves nothing,
/// and nor does a call that failed.
#[test]
fn a_dropped_call_holds_its_lane_until_a_later_call_answered_there() {
    let order = lanes();
    let before = on(&order, &[("b", "x")], Lane::Calls);
    let acquire = on(&order, &[("a", "h1")], Lane::Calls);
    drop(acquire);
    before.ended(true);
    drop(before);
    let rollback = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(rollback.lane(), Lane::Calls, "behind the dropped acquire");
    let failed = on(&order, &[("c", "y")], Lane::Calls);
    failed.ended(false);
    drop(failed);
    rollback.ended(false);
    drop(rollback);
    let again = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(again.lane(), Lane::Calls, "nothing answered after the drop");
    let later = on(&order, &[("b", "x")], Lane::Calls);
    later.ended(true);
    drop((later, again));
    // `again` was dropped unanswered too: one more answer after it.
    let last = on(&order, &[("d", "z")], Lane::Calls);
    last.ended(true);
    drop(last);
    let release = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(release.lane(), Lane::Frees, "the dropped calls have run");
    release.ended(true);
    drop(release);
    assert_eq!(order.in_flight(), 0, "nothing kept");
}

/// An acquire made while its owner's release is in flight on the
/// lane of the calls that free goes behind it there; a queued acquire
/// whose pairs are unsettled on both lanes goes on its own after a
/// barrier on the other, which settles what was dropped there.
#[test]
fn a_call_follows_its_hold_to_the_other_lane_or_waits_for_a_barrier() {
    let order = lanes();
    let release = on(&order, &[("a", "h1")], Lane::Frees);
    let next = on(&order, &[("a", "h1")], Lane::Calls);
    assert_eq!(next.lane(), Lane::Frees, "behind the release in flight");
    let queued = on(&order, &[("a", "w1")], Lane::Calls);
    drop(queued);
    let both = on(&order, &[("a", "h1"), ("a", "w1")], Lane::Calls);
    assert_eq!(both.lane(), Lane::Calls);
    assert_eq!(both.barriers(), Barriers::NONE.with(Lane::Frees));
    release.ended(true);
    next.ended(true);
    drop((release, next));
    both.passed(Lane::Frees);
    both.ended(true);
    drop(both);
    assert_eq!(order.in_flight(), 0, "the barrier and answers settled all");
}

/// A later call of the same (lock, holder) supersedes an earlier one,
/// also once it ended; another holder's or another lock's does not;
/// the map forgets a pair once none of its calls is in flight.
#[test]
fn a_later_call_of_the_same_hold_supersedes_an_earlier_one() {
    let order = Arc::new(Order::default());
    let acquire = stamp(&order, &[("a", "h1")]);
    let other_holder = stamp(&order, &[("a", "h2")]);
    let other_lock = stamp(&order, &[("b", "h1")]);
    assert!(!acquire.superseded());
    assert!(acquire.may_resend().is_ok());
    let release = stamp(&order, &[("a", "h1")]);
    assert!(acquire.superseded(), "the release was made after it");
    let e = acquire.may_resend().expect_err("superseded");
    assert_eq!(e.kind, NodeErrorKind::Superseded);
    assert!(!release.superseded());
    assert!(!other_holder.superseded() && !other_lock.superseded());
    drop(release);
    assert!(
        acquire.superseded(),
        "a release that already ended still comes first"
    );
    drop(acquire);
    let next = stamp(&order, &[("a", "h1")]);
    assert!(!next.superseded(), "a new call after both ended");
    drop((next, other_holder, other_lock));
    assert_eq!(order.in_flight(), 0, "nothing kept once the calls end");
}

/// A queued acquire is ordered by its holder and by its waiter: a
/// `leave` of the waiter supersedes it, as a release of the holder
/// does; a stamp of no pair is never superseded.
#[test]
fn a_queued_acquire_is_ordered_by_its_holder_and_its_waiter() {
    let order = Arc::new(Order::default());
    let queued = stamp(&order, &[("a", "h1"), ("a", "w1")]);
    let leave = stamp(&order, &[("a", "w1")]);
    assert!(queued.superseded());
    drop(leave);
    assert!(queued.superseded(), "the leave came first");
    assert!(!Stamp::none().superseded());
}

/// On a member whose lanes are a connection per shard (a cluster member),
/// an answer proves only what was sent before it to its own slot's
/// master: a call dropped in one slot is settled by a later answer in
/// that slot, or a barrier passed there, never by one in another slot.
#[test]
fn on_a_cluster_member_an_answer_settles_only_its_own_slot() {
    let order = Arc::new(Order::new(true, true).crowded_at(0));
    let at = |pairs: &[(&str, &str)], prefer: Lane, slot: u16| {
        let pairs: Vec<u64> = pairs.iter().map(|(l, w)| pair(l, w)).collect();
        order.stamp(&pairs, prefer, slot)
    };
    let acquire = at(&[("a", "h1")], Lane::Calls, 7);
    drop(acquire);
    let elsewhere = at(&[("b", "x")], Lane::Calls, 8);
    elsewhere.ended(true);
    drop(elsewhere);
    let rollback = at(&[("a", "h1")], Lane::Frees, 7);
    assert_eq!(
        rollback.lane(),
        Lane::Calls,
        "an answer of another slot proves nothing of slot 7"
    );
    rollback.ended(true);
    drop(rollback);
    let release = at(&[("a", "h1")], Lane::Frees, 7);
    assert_eq!(
        release.lane(),
        Lane::Frees,
        "slot 7 answered after the drop"
    );
    release.ended(true);
    drop(release);
    // A barrier settles its own slot only.
    let (c, d) = (
        at(&[("c", "h2")], Lane::Calls, 9),
        at(&[("d", "h3")], Lane::Calls, 10),
    );
    drop((c, d));
    let leave = at(&[("c", "w2")], Lane::Frees, 9);
    let queued = at(&[("c", "h2"), ("c", "w2")], Lane::Frees, 9);
    assert_eq!(queued.barriers(), Barriers::NONE.with(Lane::Calls));
    queued.passed(Lane::Calls);
    leave.ended(true);
    queued.ended(true);
    drop((leave, queued));
    let after = at(&[("c", "h2")], Lane::Frees, 9);
    assert_eq!(after.lane(), Lane::Frees, "slot 9 settled by the barrier");
    let other = at(&[("d", "h3")], Lane::Frees, 10);
    assert_eq!(other.lane(), Lane::Calls, "slot 10 is not");
    for s in [after, other] {
        s.ended(true);
        drop(s);
    }
    let last = at(&[("d", "h3")], Lane::Frees, 10);
    assert_eq!(last.lane(), Lane::Frees, "slot 10 answered after its drop");
    last.ended(true);
    drop(last);
    assert_eq!(order.in_flight(), 0, "nothing kept");
}

/// A release takes the lane of the calls that free only while the other
/// lane is crowded: with fewer than [`CROWDED`] calls in flight there, it
/// shares their connection (one write and one read for both); from
/// [`CROWDED`] on, it goes apart; once they end, it shares again.
#[test]
fn a_release_frees_apart_only_behind_a_crowd() {
    let order = Arc::new(Order::new(true, false));
    let names: Vec<String> = (0..CROWDED).map(|i| format!("crowd-{i}")).collect();
    let mut crowd: Vec<Stamp> = names[..CROWDED - 1]
        .iter()
        .map(|n| stamp(&order, &[(n, "w")]))
        .collect();
    let alone = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(alone.lane(), Lane::Calls, "{} calls ahead", CROWDED - 1);
    alone.ended(true);
    drop(alone);
    crowd.push(stamp(&order, &[(&names[CROWDED - 1], "w")]));
    let apart = on(&order, &[("a", "h2")], Lane::Frees);
    assert_eq!(apart.lane(), Lane::Frees, "{CROWDED} calls ahead");
    // An acquire prefers its lane whatever the crowd.
    let acquire = on(&order, &[("b", "h3")], Lane::Calls);
    assert_eq!(acquire.lane(), Lane::Calls);
    // The crowd ends, answered or dropped alike.
    for (i, s) in crowd.drain(..).enumerate() {
        if i % 2 == 0 {
            s.ended(true);
        }
    }
    acquire.ended(true);
    drop(acquire);
    let again = on(&order, &[("a", "h4")], Lane::Frees);
    assert_eq!(again.lane(), Lane::Calls, "the crowd is gone");
}

/// A repair given up unanswered keeps its holds on the renewal connection:
/// their releases go there, behind it, until a later batch there answers;
/// a repair that answered or failed leaves them free.
#[test]
fn a_release_goes_behind_a_repair_given_up_on_the_renewal_connection() {
    let order = lanes();
    let repair = order.batch(&[(0, pair("a", "h1"))]).expect("lanes");
    drop(repair);
    let release = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(release.lane(), Lane::Renewals, "behind the dropped repair");
    assert_eq!(release.barriers(), Barriers::NONE);
    let other = on(&order, &[("b", "h1")], Lane::Frees);
    assert_eq!(other.lane(), Lane::Frees, "another hold's release");
    release.ended(false);
    other.ended(true);
    // A renewal made after the drop answered there: the repair has run.
    let renewal = order.batch(&[]).expect("lanes");
    renewal.answered(1, |_| Some(0));
    let release = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(release.lane(), Lane::Frees, "the repair has run");
    release.ended(true);
    assert_eq!(order.in_flight(), 0);

    for answered in [true, false] {
        let repair = order.batch(&[(0, pair("c", "h1"))]).expect("lanes");
        if answered {
            repair.answered(1, |_| Some(0));
        } else {
            repair.failed();
        }
        let release = on(&order, &[("c", "h1")], Lane::Frees);
        assert_eq!(release.lane(), Lane::Frees, "answered: {answered}");
        release.ended(true);
    }
    assert_eq!(order.in_flight(), 0);
    // One connection for all: nothing to order.
    assert!(Arc::new(Order::new(false, false)).batch(&[]).is_none());
}

/// A release behind a dropped repair whose acquire was dropped on the
/// calls' connection too goes on the renewal connection after a barrier
/// there; the release's answer settles the repair.
#[test]
fn a_release_behind_a_repair_and_an_acquire_passes_a_barrier() {
    let order = lanes();
    drop(on(&order, &[("a", "h1")], Lane::Calls));
    drop(order.batch(&[(0, pair("a", "h1"))]));
    let release = on(&order, &[("a", "h1")], Lane::Frees);
    assert_eq!(release.lane(), Lane::Renewals);
    assert_eq!(release.barriers(), Barriers::NONE.with(Lane::Calls));
    release.passed(Lane::Calls);
    release.ended(true);
    assert_eq!(
        order.in_flight(),
        0,
        "the release's answer proves the repair ran"
    );
}

/// On a cluster member, a repair part that failed may still run on its
/// shard; only a later answer in its slot settles it.
#[test]
fn a_cluster_repair_part_is_settled_only_by_an_answer_in_its_slot() {
    let order = Arc::new(Order::new(true, true).crowded_at(0));
    let at = |slot: u16| {
        let pairs = [pair("a", "h1")];
        order.stamp(&pairs, Lane::Frees, slot)
    };
    let repair = order.batch(&[(5, pair("a", "h1"))]).expect("lanes");
    repair.answered(1, |_| None);
    let release = at(5);
    assert_eq!(release.lane(), Lane::Renewals, "its part failed");
    drop(release);
    // A renewal answered in slot 6 proves nothing about slot 5; one whose
    // slot-5 part failed neither.
    order
        .batch(&[])
        .expect("lanes")
        .answered(2, |i| (i == 0).then_some(6));
    let release = at(5);
    assert_eq!(release.lane(), Lane::Renewals);
    release.ended(false);
    order.batch(&[]).expect("lanes").answered(1, |_| Some(5));
    let release = at(5);
    assert_eq!(release.lane(), Lane::Frees, "slot 5 answered after it");
    release.ended(true);
    assert_eq!(order.in_flight(), 0);
}
