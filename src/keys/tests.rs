//! The key layout's unit tests: names, slots, tags, both layouts.

use super::*;

#[test]
fn keys_share_a_hash_tag() {
    let k = Keys::new("ql:", "orders");
    assert_eq!(k.lock, "ql:{orders}");
    assert_eq!(k.fence, format!("ql:fence:{{{}}}", slot_tag(k.slot())));
    assert_eq!(k.channel, "ql:{orders}:released");
    assert_eq!(k.queue(), "ql:{orders}:queue");
    assert_eq!(k.timeouts(), "ql:{orders}:timeouts");
    for key in [&k.lock, &k.fence, &k.channel, &k.queue(), &k.timeouts()] {
        assert_eq!(key_slot(key), k.slot(), "{key}");
    }
}

/// The public key names of `Layout` are the ones the managers use.
#[test]
fn public_key_names_match_the_layouts() {
    for layout in [Layout::Quorumlock, Layout::Redisson] {
        let k = Keys::in_layout(layout, "ql:", "orders");
        assert_eq!(layout.lock_key("ql:", "orders").ok(), Some(k.lock.clone()));
        let (queue, timeouts) = layout.queue_keys("ql:", "orders").expect("valid");
        assert_eq!((queue, timeouts), (k.queue(), k.timeouts()));
        assert!(layout.lock_key("q{l:", "orders").is_err());
        assert!(layout.lock_key("ql:", "a{b}").is_err());
        assert!(layout.queue_keys("ql:", "").is_err());
    }
    assert_eq!(
        Layout::Redisson.lock_key("ql:", "orders").ok().as_deref(),
        Some("orders")
    );
    assert!(Layout::Quorumlock.lock_keys_are_scannable());
    assert!(!Layout::Redisson.lock_keys_are_scannable());
}

/// Redis Cluster's CRC16 (XMODEM) and its hash tag rule, on the values
/// the cluster specification and `CLUSTER KEYSLOT` give.
/// Redisson's layout: the lock at the name itself, Redisson's channel,
/// quorumlock's own keys under the prefix; all in the name's slot.
#[test]
fn redisson_layout_keys_share_the_names_slot() {
    for name in ["orders", "a", "orders:42", "ünïcode", "x y"] {
        let k = Keys::in_layout(Layout::Redisson, "ql:", name);
        let d = Keys::new("ql:", name);
        assert_eq!(k.lock, name);
        assert_eq!(
            k.foreign_channel.as_deref(),
            Some(format!("redisson_lock__channel:{{{name}}}").as_str())
        );
        assert_eq!(d.foreign_channel, None);
        assert_eq!(
            (&k.fence, &k.channel, k.queue(), k.timeouts()),
            (&d.fence, &d.channel, d.queue(), d.timeouts())
        );
        let foreign = k.foreign_channel.clone().unwrap_or_default();
        for key in [
            &k.lock,
            &k.fence,
            &k.channel,
            &k.queue(),
            &k.timeouts(),
            &foreign,
        ] {
            assert_eq!(key_slot(key), k.slot(), "{key}");
        }
    }
}

#[test]
fn key_slots_follow_redis_cluster() {
    assert_eq!(
        crc16::State::<crc16::XMODEM>::calculate(b"123456789"),
        0x31C3
    );
    assert_eq!(key_slot("123456789"), 12739);
    assert_eq!(key_slot("foo"), 12182);
    assert_eq!(key_slot("{user1000}.following"), key_slot("user1000"));
    assert_eq!(key_slot("foo{}{bar}"), key_slot("foo{}{bar}"));
    assert_ne!(
        key_slot("foo{}{bar}"),
        key_slot("bar"),
        "an empty tag hashes the whole key"
    );
    assert_eq!(key_slot("foo{{bar}}zap"), key_slot("{bar"));
    assert_eq!(key_slot("foo{bar}{zap}"), key_slot("bar"));
}

#[test]
fn slot_tags_cover_every_slot() {
    let started = std::time::Instant::now();
    let tags = build_tags();
    let took = started.elapsed();
    eprintln!("slot tag table: {} bytes in {took:?}", tags.len());
    assert_eq!(tags.len(), usize::from(SLOTS) * TAG_LEN);
    let mut seen = std::collections::HashSet::new();
    for slot in 0..SLOTS {
        let tag = slot_tag(slot);
        assert_eq!(tag.len(), TAG_LEN);
        assert!(tag.bytes().all(|b| b.is_ascii_alphanumeric()), "{tag:?}");
        assert_eq!(slot_of(tag.as_bytes()), slot, "{tag:?}");
        assert_eq!(key_slot(&fence_key("ql:", slot)), slot);
        assert!(seen.insert(tag), "{tag:?} twice");
    }
}

#[test]
fn a_set_counts_each_slot_once() {
    let (a, b) = (Keys::new("ql:", "a"), Keys::new("ql:", "b"));
    assert_ne!(a.slot(), b.slot());
    let twin = (0..)
        .map(|i| format!("n{i}"))
        .find(|n| slot_of(n.as_bytes()) == a.slot())
        .map(|n| Keys::new("ql:", &n))
        .expect("a name in the slot of 'a'");
    let set: Vec<Arc<Keys>> = [b, a, twin].into_iter().map(Arc::new).collect();
    let mut want = vec![set[0].fence.as_str(), set[1].fence.as_str()];
    want.sort_unstable();
    assert_eq!(fences(&set), want);
    assert_eq!(
        fence_counter_key("ql:", &set[2].name).expect("a valid name"),
        set[1].fence
    );
    assert!(fence_counter_key("ql:", "a{b}").is_err());
    assert!(fence_counter_key("q{l}:", "a").is_err());
}

#[test]
fn name_checks() {
    assert!(check_name("").is_err());
    assert!(check_name(&"x".repeat(MAX_NAME_LEN + 1)).is_err());
    assert!(check_name(&"x".repeat(MAX_NAME_LEN)).is_ok());
    assert!(check_name("a{b}").is_err());
    assert!(check_name("line\nbreak").is_err());
    assert!(check_name("orders:42").is_ok());
}

/// In the Redisson layout the name `<prefix>fence` would be the lock at
/// quorumlock's own key (the older fence counter): refused there, for that
/// prefix only; every other own key carries a brace, which no name may.
/// The quorumlock layout's lock keys are never own keys.
#[test]
fn a_name_whose_lock_key_is_an_own_key_is_refused() {
    let own = legacy_fence_key("ql:");
    let e = Keys::checked(Layout::Redisson, "ql:", &own).expect_err("own key");
    assert!(
        e.is_invalid_input() && e.to_string().contains("ql:fence"),
        "{e}"
    );
    assert!(Keys::checked(Layout::Quorumlock, "ql:", &own).is_ok());
    assert!(Keys::checked(Layout::Redisson, "other:", &own).is_ok());
    assert!(Keys::checked(Layout::Redisson, "ql:", "ql:fence2").is_ok());
    let names = [own.clone(), "a".to_owned()];
    assert!(Target::set_checked(Layout::Redisson, "ql:", &names).is_err());
    assert!(Target::set_checked(Layout::Quorumlock, "ql:", &names).is_ok());
    assert!(Layout::Redisson.lock_key("ql:", &own).is_err());
    assert!(Layout::Redisson.queue_keys("ql:", &own).is_err());
    // Every own key but the older counter holds a brace.
    let k = Keys::new("ql:", "a");
    for key in [k.fence.clone(), k.queue(), k.timeouts(), k.lock.clone()] {
        assert!(key.contains('{'), "{key}");
    }
}
