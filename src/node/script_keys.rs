//! The key names (`KEYS`) of each script call, in the order the script
//! reads them (see each `.lua` file's header). No I/O.
//!
//! Every call about one lock names only keys of the lock's hash slot (its
//! name's), fence counter included, so that a Redis Cluster member could
//! run it: see the test `every_single_name_call_stays_in_the_locks_slot`.
//! A set's acquire ([`acquire_all`]) and raise ([`raise_fences`]) name the
//! keys of every slot of the set; the watchdog's batches name the keys of
//! many locks, each lock's keys in its own slot.

use std::sync::Arc;

use crate::keys::{fences, Keys};

/// `acquire.lua`, in both of its modes: the lock, its slot's counter.
pub(crate) fn acquire(keys: &Keys) -> Vec<String> {
    vec![keys.lock.clone(), keys.fence.clone()]
}

/// `acquire_queued.lua`: the lock, its counter, queue, timeouts, channel.
pub(crate) fn acquire_queued(keys: &Keys) -> Vec<String> {
    vec![
        keys.lock.clone(),
        keys.fence.clone(),
        keys.queue(),
        keys.timeouts(),
        keys.channel.clone(),
    ]
}

/// `leave.lua`: the lock, its queue, timeouts, channel.
pub(crate) fn leave(keys: &Keys) -> Vec<String> {
    vec![
        keys.lock.clone(),
        keys.queue(),
        keys.timeouts(),
        keys.channel.clone(),
    ]
}

/// `release.lua`: the lock, its channel, counter, queue, timeouts, and
/// the foreign channel of the layout, if any.
pub(crate) fn release(keys: &Keys) -> Vec<String> {
    let mut out = vec![
        keys.lock.clone(),
        keys.channel.clone(),
        keys.fence.clone(),
        keys.queue(),
        keys.timeouts(),
    ];
    out.extend(keys.foreign_channel.clone());
    out
}

/// `force_release.lua`: the lock, its channel, and the foreign channel of
/// the layout, if any.
pub(crate) fn force_release(keys: &Keys) -> Vec<String> {
    let mut out = vec![keys.lock.clone(), keys.channel.clone()];
    out.extend(keys.foreign_channel.clone());
    out
}

/// What a status call reads (`HGETALL`, `PTTL`, `GET` in one pipeline):
/// the lock, its counter.
pub(crate) fn status(keys: &Keys) -> [&str; 2] {
    [&keys.lock, &keys.fence]
}

/// `raise_fence.lua`: the distinct counters of the locks of `set` (one
/// lock's counter for a single name).
pub(crate) fn raise_fences(set: &[Arc<Keys>]) -> Vec<String> {
    fences(set).into_iter().map(str::to_owned).collect()
}

/// `acquire_all.lua`: every lock of the set, then the set's distinct
/// counters. The script tells them apart by `ARGV[4]`, the number of locks.
pub(crate) fn acquire_all(set: &[Arc<Keys>]) -> Vec<String> {
    let counters = fences(set);
    let mut out = Vec::with_capacity(set.len() + counters.len());
    out.extend(set.iter().map(|k| k.lock.clone()));
    out.extend(counters.into_iter().map(str::to_owned));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::key_slot;
    use crate::layout::Layout;
    use crate::node::{RenewBatch, RenewItem};
    use std::time::Duration;

    fn slots(keys: &[String]) -> Vec<u16> {
        keys.iter().map(|k| key_slot(k)).collect()
    }

    /// Every script call about one name passes only keys of the name's
    /// slot: the lock, its queue keys, its channel (the slot sharded
    /// pub/sub would publish in) and its fence counter.
    #[test]
    fn every_single_name_call_stays_in_the_locks_slot() {
        for (layout, prefix) in [Layout::Quorumlock, Layout::Redisson]
            .into_iter()
            .flat_map(|l| ["quorumlock:", "ql:", ""].map(|p| (l, p)))
        {
            for name in ["a", "orders:42", "tp-17", "ünïcode", "x y"] {
                let k = Arc::new(Keys::in_layout(layout, prefix, name));
                let one = std::slice::from_ref(&k);
                let status: Vec<String> = status(&k).map(str::to_owned).into();
                for (call, keys) in [
                    ("acquire", acquire(&k)),
                    ("acquire_queued", acquire_queued(&k)),
                    ("leave", leave(&k)),
                    ("release", release(&k)),
                    ("force_release", force_release(&k)),
                    ("raise_fence", raise_fences(one)),
                    ("acquire_all of one name", acquire_all(one)),
                    ("status", status),
                ] {
                    let want = vec![key_slot(&k.lock); keys.len()];
                    let named = k.foreign_channel.iter().all(|c| keys.contains(c));
                    let releases = call.contains("release");
                    assert!(named || !releases, "{call} publishes on {keys:?}");
                    assert_eq!(slots(&keys), want, "{call} of {name:?}: {keys:?}");
                }
            }
        }
    }

    /// A set whose names share a slot stays in it; a set over several slots
    /// names each slot's counter once, and every counter it raises.
    #[test]
    fn a_sets_calls_name_one_counter_per_slot() {
        let a = Arc::new(Keys::new("ql:", "a"));
        let twin = (0..)
            .map(|i| Keys::new("ql:", &format!("n{i}")))
            .find(|k| k.slot() == a.slot())
            .map(Arc::new)
            .expect("a name in the slot of 'a'");
        let b = Arc::new(Keys::new("ql:", "b"));
        let same = [Arc::clone(&a), Arc::clone(&twin)];
        let keys = acquire_all(&same);
        assert_eq!(keys.len(), 3, "two locks, one counter: {keys:?}");
        assert_eq!(slots(&keys), vec![a.slot(); 3]);
        assert_eq!(raise_fences(&same), vec![a.fence.clone()]);
        let mixed = [Arc::clone(&a), b, twin];
        let keys = acquire_all(&mixed);
        assert_eq!(keys.len(), 5, "three locks, two counters: {keys:?}");
        let mut counters = raise_fences(&mixed);
        assert_eq!(counters, keys[3..].to_vec());
        counters.dedup();
        assert_eq!(counters.len(), 2);
    }

    /// The watchdog's batches: each lock's keys (and, for a repair, the
    /// counter right after it) are in the lock's slot.
    #[test]
    fn batch_items_keep_their_keys_in_their_slot() {
        let items: Vec<RenewItem> = ["a", "b", "c", "orders:42"]
            .into_iter()
            .map(|n| RenewItem {
                keys: Arc::new(Keys::new("ql:", n)),
                owner: "owner".into(),
                count: 1,
                token: 7,
                lease: Duration::from_secs(1),
            })
            .collect();
        for (repair, per_item) in [(false, 1), (true, 2)] {
            let batch = if repair {
                RenewBatch::repair(items.clone())
            } else {
                RenewBatch::new(items.clone())
            };
            let keys = batch.script_keys();
            assert_eq!(keys.len(), 1, "one script call for four locks");
            for (item, chunk) in items.iter().zip(keys[0].chunks(per_item)) {
                let chunk: Vec<String> = chunk.to_vec();
                assert_eq!(chunk[0], item.keys.lock);
                assert_eq!(slots(&chunk), vec![item.keys.slot(); per_item], "{chunk:?}");
            }
        }
    }
}
