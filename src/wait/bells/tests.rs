//! Who a release rings, message by message.

use super::*;

const ME: &str = "host@1#aaaa";

fn owner() -> Arc<str> {
    format!("{ME}:owner-7").into()
}

fn rings(b: &Bell) -> u64 {
    b.rings.load(Ordering::Acquire)
}

fn prompt(b: &Bell) -> bool {
    b.prompt.swap(false, Ordering::AcqRel)
}

/// A channel on three nodes, and the count of the waiters it woke.
fn channel() -> (Channel, AtomicU64) {
    (Channel::new(3), AtomicU64::new(0))
}

/// Joins fair waiter `wait` (`owner-N:wait-M`) of this manager: its id and
/// its bell.
fn join_fair(c: &Channel, wait: &str) -> (Arc<str>, Arc<Bell>) {
    let id: Arc<str> = format!("{ME}:{wait}").into();
    let bell = c.join(&Kind::Fair(&id), &owner());
    (id, bell)
}

fn msg(waiter: &str, releaser: &str) -> Vec<u8> {
    format!("{waiter} {releaser}").into_bytes()
}

#[test]
fn a_release_rings_only_the_head_of_the_fifo() {
    let (c, w) = channel();
    let bells: Vec<_> = (0..3).map(|t| c.join(&Kind::Plain(t), &owner())).collect();
    c.on_message(0, &msg("", &format!("{ME}:owner-1:hold-1@0")), ME, &w);
    assert_eq!(
        bells.iter().map(|b| rings(b)).collect::<Vec<_>>(),
        [1, 0, 0]
    );
    assert!(
        prompt(&bells[0]),
        "our own release needs no quorum of messages"
    );
    c.on_message(0, &msg("", "other@2#bbbb:owner-1:hold-1@0"), ME, &w);
    assert_eq!(rings(&bells[0]), 2);
    assert!(
        !prompt(&bells[0]),
        "another manager's release waits for a quorum"
    );
    assert_eq!(w.load(Ordering::Relaxed), 2);
}

#[test]
fn a_message_naming_another_managers_waiter_rings_nobody_here() {
    let (c, w) = channel();
    let head = c.join(&Kind::Plain(0), &owner());
    c.on_message(0, &msg("other@2#bbbb:owner-3:wait-1", ""), ME, &w);
    assert_eq!(rings(&head), 0);
    // Naming a plain waiter of ours (or one that left) rings the head.
    c.on_message(0, &msg(&format!("{ME}:owner-9:wait-1"), ""), ME, &w);
    assert_eq!(rings(&head), 1);
}

#[test]
fn a_message_naming_a_fair_waiter_rings_it_and_not_the_head() {
    let (c, w) = channel();
    let head = c.join(&Kind::Plain(0), &owner());
    let (id, fair) = join_fair(&c, "owner-2:wait-1");
    c.on_message(0, &msg(&id, ""), ME, &w);
    assert_eq!((rings(&head), rings(&fair)), (0, 1));
}

#[test]
fn a_fair_waiter_waits_for_a_quorum_of_messages_even_from_our_own_release() {
    let (c, w) = channel();
    let (id, fair) = join_fair(&c, "owner-2:wait-1");
    c.on_message(0, &msg(&id, &format!("{ME}:owner-1:hold-1@0")), ME, &w);
    assert_eq!(rings(&fair), 1);
    assert!(
        !prompt(&fair),
        "named on one node, it may be its turn there only"
    );
}

#[test]
fn a_quorum_of_messages_is_a_quorum_of_nodes_not_of_rings() {
    let (c, w) = channel();
    let head = c.join(&Kind::Plain(0), &owner());
    // Two other managers' rollbacks, both seen on node 0.
    c.on_message(0, &msg("", "other@2#bbbb:owner-1:hold-1@0"), ME, &w);
    c.on_message(0, &msg("", "other@3#cccc:owner-1:hold-1@0"), ME, &w);
    assert_eq!((rings(&head), head.nodes_rung()), (2, 1));
    c.on_message(2, &msg("", "other@2#bbbb:owner-1:hold-1@0"), ME, &w);
    assert_eq!(head.take_nodes(), 2);
    assert_eq!(head.nodes_rung(), 0, "taken when looked at");
}

#[test]
fn fair_waiters_are_not_in_the_fifo() {
    let (c, w) = channel();
    let (id, fair) = join_fair(&c, "owner-2:wait-1");
    assert!(!c.has_plain_waiters(), "a plain newcomer would defer to it");
    c.wake_all(&w);
    assert_eq!(
        rings(&fair),
        1,
        "a change of coverage rings fair waiters too"
    );
    c.leave(&Kind::Fair(&id), false, &w);
    c.on_message(0, &msg(&id, ""), ME, &w);
    assert_eq!(rings(&fair), 1, "a fair waiter that left is not rung");
}

#[test]
fn a_head_that_gives_up_rings_the_next_and_one_that_wins_nudges_it() {
    let (c, w) = channel();
    let b: Vec<_> = (0..3).map(|t| c.join(&Kind::Plain(t), &owner())).collect();
    c.leave(&Kind::Plain(0), false, &w);
    assert_eq!(rings(&b[1]), 1);
    assert!(prompt(&b[1]), "the lock may be free: attempt at once");
    assert!(c.is_head(1));
    c.leave(&Kind::Plain(1), true, &w);
    assert_eq!(rings(&b[2]), 0, "the lock is ours: the next only re-arms");
    assert!(c.is_head(2));
    // Leaving from the middle rings nobody.
    let b3 = c.join(&Kind::Plain(3), &owner());
    let _b4 = c.join(&Kind::Plain(4), &owner());
    c.leave(&Kind::Plain(3), false, &w);
    assert_eq!((rings(&b[2]), rings(&b3)), (0, 0));
}

#[test]
fn a_waiters_own_rollback_does_not_ring_it() {
    let (c, w) = channel();
    let head = c.join(&Kind::Plain(0), &owner());
    let (id, fair) = join_fair(&c, "owner-7:wait-2");
    // The rollback of a failed attempt of owner-7 (its holder id).
    c.on_message(0, &msg("", &format!("{ME}:owner-7:hold-9@0")), ME, &w);
    c.on_message(0, &msg(&id, &format!("{ME}:owner-7:hold-9@0")), ME, &w);
    assert_eq!((rings(&head), rings(&fair)), (0, 0));
    // owner-70 is another owner.
    c.on_message(0, &msg("", &format!("{ME}:owner-70:hold-1@0")), ME, &w);
    assert_eq!(rings(&head), 1);
}

/// Redisson's unlock message `0` names no waiter and no releaser: a
/// release by someone unknown, which rings the head of the FIFO and every
/// fair waiter as another manager's release does (a quorum of nodes).
#[test]
fn a_redisson_unlock_rings_like_another_managers_release() {
    let (c, w) = channel();
    let head = c.join(&Kind::Plain(0), &owner());
    let behind = c.join(&Kind::Plain(1), &owner());
    let (_, fair) = join_fair(&c, "owner-3:wait-1");
    c.on_message(1, b"0", ME, &w);
    assert_eq!((rings(&head), rings(&behind), rings(&fair)), (1, 0, 1));
    assert!(!prompt(&head), "an unknown release waits for a quorum");
    assert_eq!((head.nodes_rung(), fair.nodes_rung()), (1, 1));
}

/// In Redisson's layout our own release publishes its message, then `0`
/// on the foreign channel: the `0` is its echo, dropped; a `0` that no
/// message of ours announced on that node is another client's unlock.
#[test]
fn an_own_releases_echo_on_the_foreign_channel_rings_once() {
    let c = Channel::with_foreign(3, Some("redisson_lock__channel:{a}".into()));
    let w = AtomicU64::new(0);
    let head = c.join(&Kind::Plain(0), &owner());
    c.on_message(0, &msg("", "other@2#bbbb:owner-1:hold-1@0"), ME, &w);
    c.on_foreign(0, &w);
    assert_eq!(rings(&head), 1, "the echo is dropped");
    c.on_foreign(0, &w);
    assert_eq!(rings(&head), 2, "a Redisson unlock rings");
    assert_eq!(head.nodes_rung(), 1);
    c.on_message(1, b"", ME, &w);
    c.forget_echoes(1);
    c.on_foreign(1, &w);
    assert_eq!(
        rings(&head),
        4,
        "an echo owed by a lost connection is forgotten"
    );
}

#[test]
fn garbage_payloads_ring_the_head_at_most() {
    let (c, w) = channel();
    let head = c.join(&Kind::Plain(0), &owner());
    for payload in [&b"\xff\xfe"[..], b"", b" ", b"x y z"] {
        c.on_message(0, payload, ME, &w);
    }
    assert!(rings(&head) <= 4);
}

/// Five nodes, a quorum of three: a channel is covered from three
/// subscribed nodes on (any holder's quorum then publishes on one of them).
#[test]
fn only_a_coverage_change_across_the_threshold_rings_the_waiters() {
    let board = Board::new(ME, 5, 3);
    let chan = Arc::new(Channel::new(5));
    let chans = [Arc::clone(&chan)];
    let (_, fair) = join_fair(&chan, "owner-1:wait-1");
    let head = chan.join(&Kind::Plain(0), &owner());
    let rung = || (rings(&fair), rings(&head));

    board.covered(0, &chans, true);
    board.covered(1, &chans, true);
    assert_eq!(rung(), (0, 0), "below the threshold: still polling");
    board.covered(2, &chans, true);
    assert_eq!(
        rung(),
        (1, 1),
        "now covered: a release may have gone unheard"
    );
    assert!(prompt(&fair) && prompt(&head));

    // One node's connection flapping while the channel stays covered
    // rang every waiter of every manager at each flap.
    for _ in 0..10 {
        board.covered(3, &chans, true);
        board.covered(3, &chans, false);
    }
    assert_eq!(rung(), (1, 1), "covered throughout: nothing went unheard");

    board.covered(0, &chans, false);
    assert_eq!(rung(), (2, 2), "no longer covered: poll from now on");
    board.covered(4, &chans, true);
    assert_eq!(rung(), (3, 3), "covered again");
}
