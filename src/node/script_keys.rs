//! The key names (`KEYS`) of each script call, in the order the script
//! reads them (see each `.lua` file's header). No I/O.
//!
//! Every call about one lock names only keys of the lock's hash slot (its
//! name's), fence counter included, so that a Redis Cluster member could
//! run it: see the test `every_single_name_call_stays_in_the_locks_slot`.
//! A set's acquire ([`acquire_all`]) and raise ([`raise_fences`]) name the
//! keys of every slot of the set; the watchdog's batches name the keys of
//! many locks, each lock's keys in its own slot.

use std::io::Write;
use std::sync::Arc;

use crate::keys::{fences, Keys, Role};
use crate::scripts::Lua;

/// The key names of one script call, in the order its script reads them.
/// A call about one lock names them from the lock's [`Keys`] as the call
/// is written (no copies: a fan-out used to clone or format every name for
/// every node, an eighth of a throughput cycle's allocations); a call over
/// several locks owns its list.
pub(crate) enum Names {
    One(Arc<Keys>, &'static [Part]),
    Many(Vec<String>),
}

/// One name of a lock, as [`Names::One`] lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Part {
    Lock,
    Fence,
    Queue,
    Timeouts,
    Channel,
    /// The layout's foreign channel, when it has one (else nothing).
    Foreign,
    /// An election's leader record (`Keys::record_parts`).
    Record,
    /// An election's channel for its observers (`Keys::elected_channel`).
    Elected,
    /// A read-write lock's writer hash, `<family>:writer` (a reader's call).
    Writer,
    /// A read-write lock's set of reader keys, `<family>:readers`.
    Readers,
    /// A read-write lock's waiting writers, `<family>:timeouts`.
    Waiting,
}

impl Names {
    fn has(keys: &Keys, part: Part) -> bool {
        part != Part::Foreign || keys.foreign_channel.is_some()
    }

    /// How many names.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::One(keys, parts) => parts.iter().filter(|&&p| Self::has(keys, p)).count(),
            Self::Many(v) => v.len(),
        }
    }

    /// The first name: a cluster routes the call by its slot.
    pub(crate) fn first(&self) -> Option<&str> {
        match self {
            Self::One(keys, parts) => parts.first().map(|_| keys.lock.as_str()),
            Self::Many(v) => v.first().map(String::as_str),
        }
    }

    /// About how many bytes the names take (to size a command's buffer).
    pub(crate) fn bytes(&self) -> usize {
        match self {
            Self::One(keys, parts) => parts.len() * (keys.lock.len().max(keys.fence.len()) + 12),
            Self::Many(v) => v.iter().map(String::len).sum(),
        }
    }

    /// A call of `script` over these names (`EVAL` when `send_body`, else
    /// `EVALSHA`): add the arguments to it.
    pub(crate) fn call(&self, script: &Lua, send_body: bool) -> redis::Cmd {
        let mut cmd = script.header(send_body, self.len(), self.bytes());
        self.write(&mut cmd);
        cmd
    }

    /// Writes each name as one argument of `cmd`.
    fn write(&self, cmd: &mut redis::Cmd) {
        match self {
            Self::One(keys, parts) => {
                for &part in *parts {
                    match part {
                        Part::Lock => drop(cmd.arg(&keys.lock)),
                        Part::Fence => drop(cmd.arg(&keys.fence)),
                        Part::Channel => drop(cmd.arg(&keys.channel)),
                        Part::Queue
                        | Part::Timeouts
                        | Part::Record
                        | Part::Elected
                        | Part::Writer
                        | Part::Readers
                        | Part::Waiting => {
                            let (base, suffix) = match part {
                                Part::Queue => keys.queue_parts(),
                                Part::Timeouts => keys.timeouts_parts(),
                                Part::Record => keys.record_parts(),
                                Part::Writer => keys.family_parts(":writer"),
                                Part::Readers => keys.family_parts(":readers"),
                                Part::Waiting => keys.family_parts(":timeouts"),
                                _ => keys.elected_parts(),
                            };
                            let mut w = redis::RedisWrite::writer_for_next_arg(cmd);
                            // Writing to the command's own buffer cannot fail.
                            let _ = w.write_all(base.as_bytes());
                            let _ = w.write_all(suffix.as_bytes());
                        }
                        Part::Foreign => {
                            if let Some(c) = &keys.foreign_channel {
                                cmd.arg(c);
                            }
                        }
                    }
                }
            }
            Self::Many(v) => {
                for k in v {
                    cmd.arg(k);
                }
            }
        }
    }

    /// The names, copied (for tests).
    #[cfg(test)]
    pub(crate) fn to_vec(&self) -> Vec<String> {
        match self {
            Self::One(keys, parts) => parts
                .iter()
                .filter_map(|&p| match p {
                    Part::Lock => Some(keys.lock.clone()),
                    Part::Fence => Some(keys.fence.clone()),
                    Part::Queue => Some(keys.queue()),
                    Part::Timeouts => Some(keys.timeouts()),
                    Part::Channel => Some(keys.channel.clone()),
                    Part::Foreign => keys.foreign_channel.clone(),
                    Part::Record => Some(keys.record()),
                    Part::Elected => Some(keys.elected_channel()),
                    Part::Writer | Part::Readers | Part::Waiting => {
                        let (base, suffix) = match p {
                            Part::Writer => keys.family_parts(":writer"),
                            Part::Readers => keys.family_parts(":readers"),
                            _ => keys.family_parts(":timeouts"),
                        };
                        Some(format!("{base}{suffix}"))
                    }
                })
                .collect(),
            Self::Many(v) => v.clone(),
        }
    }
}

/// `acquire.lua`, in both of its modes: the lock, its slot's counter.
pub(crate) fn acquire(keys: &Arc<Keys>) -> Names {
    Names::One(Arc::clone(keys), &[Part::Lock, Part::Fence])
}

/// `read.lua`: the reader's key, its counter, the writer, the readers, the
/// waiting writers.
pub(crate) fn read(keys: &Arc<Keys>) -> Names {
    const PARTS: &[Part] = &[
        Part::Lock,
        Part::Fence,
        Part::Writer,
        Part::Readers,
        Part::Waiting,
    ];
    Names::One(Arc::clone(keys), PARTS)
}

/// `write.lua`: the writer's key, its counter, the readers, the waiting
/// writers.
pub(crate) fn write(keys: &Arc<Keys>) -> Names {
    const PARTS: &[Part] = &[Part::Lock, Part::Fence, Part::Readers, Part::Waiting];
    Names::One(Arc::clone(keys), PARTS)
}

/// `permits.lua`: the semaphore's count key, then its `count` slots' keys
/// (`slot` is any slot's keys: they share the family).
pub(crate) fn permits(slot: &Keys, count: u32) -> Names {
    let (family, _) = slot.family_parts("");
    let mut out = Vec::with_capacity(count as usize + 1);
    out.push(format!("{family}:permits"));
    out.extend((0..count).map(|i| format!("{family}:permit:{i}")));
    Names::Many(out)
}

/// `acquire_queued.lua`: the lock, its counter, queue, timeouts, channel.
pub(crate) fn acquire_queued(keys: &Arc<Keys>) -> Names {
    const PARTS: &[Part] = &[
        Part::Lock,
        Part::Fence,
        Part::Queue,
        Part::Timeouts,
        Part::Channel,
    ];
    Names::One(Arc::clone(keys), PARTS)
}

/// `leave.lua`: the lock, its queue, timeouts, channel; for a read-write
/// lock's writer, also the channel its waiting readers listen on.
pub(crate) fn leave(keys: &Arc<Keys>) -> Names {
    const PARTS: &[Part] = &[Part::Lock, Part::Queue, Part::Timeouts, Part::Channel];
    const WRITER: &[Part] = &[
        Part::Lock,
        Part::Queue,
        Part::Timeouts,
        Part::Channel,
        Part::Foreign,
    ];
    match keys.role {
        Role::Writer { .. } => Names::One(Arc::clone(keys), WRITER),
        _ => Names::One(Arc::clone(keys), PARTS),
    }
}

/// `release.lua`: the lock, its channel, counter, queue, timeouts, and
/// the foreign channel of the layout, if any.
pub(crate) fn release(keys: &Arc<Keys>) -> Names {
    const PARTS: &[Part] = &[
        Part::Lock,
        Part::Channel,
        Part::Fence,
        Part::Queue,
        Part::Timeouts,
        Part::Foreign,
    ];
    Names::One(Arc::clone(keys), PARTS)
}

/// `force_release.lua`: the lock, its channel, and the foreign channel of
/// the layout, if any.
pub(crate) fn force_release(keys: &Arc<Keys>) -> Names {
    Names::One(
        Arc::clone(keys),
        &[Part::Lock, Part::Channel, Part::Foreign],
    )
}

/// `proclaim.lua`: the election's lock, its leader record, its channel.
pub(crate) fn proclaim(keys: &Arc<Keys>) -> Names {
    Names::One(Arc::clone(keys), &[Part::Lock, Part::Record, Part::Elected])
}

/// `leader.lua`: the election's lock and its leader record.
pub(crate) fn leader(keys: &Arc<Keys>) -> Names {
    Names::One(Arc::clone(keys), &[Part::Lock, Part::Record])
}

/// What a status call reads (`HGETALL`, `PTTL`, `GET` in one pipeline):
/// the lock, its counter.
pub(crate) fn status(keys: &Keys) -> [&str; 2] {
    [&keys.lock, &keys.fence]
}

/// `raise_fence.lua`: the distinct counters of the locks of `set` (one
/// lock's counter for a single name).
pub(crate) fn raise_fences(set: &[Arc<Keys>]) -> Names {
    Names::Many(fences(set).into_iter().map(str::to_owned).collect())
}

/// `acquire_all.lua`: every lock of the set, then the set's distinct
/// counters. The script tells them apart by `ARGV[4]`, the number of locks.
pub(crate) fn acquire_all(set: &[Arc<Keys>]) -> Names {
    let counters = fences(set);
    let mut out = Vec::with_capacity(set.len() + counters.len());
    out.extend(set.iter().map(|k| k.lock.clone()));
    out.extend(counters.into_iter().map(str::to_owned));
    Names::Many(out)
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
                    ("acquire", acquire(&k).to_vec()),
                    ("acquire_queued", acquire_queued(&k).to_vec()),
                    ("leave", leave(&k).to_vec()),
                    ("release", release(&k).to_vec()),
                    ("force_release", force_release(&k).to_vec()),
                    ("proclaim", proclaim(&k).to_vec()),
                    ("leader", leader(&k).to_vec()),
                    ("raise_fence", raise_fences(one).to_vec()),
                    ("acquire_all of one name", acquire_all(one).to_vec()),
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

    /// Every call writes, as its keys, exactly the names it lists (the
    /// queue's names are written in two parts, straight into the command),
    /// and counts them right.
    #[test]
    fn a_call_writes_the_names_it_lists() {
        for layout in [Layout::Quorumlock, Layout::Redisson] {
            let k = Arc::new(Keys::in_layout(layout, "ql:", "orders:42"));
            let one = std::slice::from_ref(&k);
            for names in [
                acquire(&k),
                acquire_queued(&k),
                leave(&k),
                release(&k),
                force_release(&k),
                raise_fences(one),
                acquire_all(one),
                proclaim(&k),
                leader(&k),
            ] {
                let cmd = names.call(&crate::scripts::RELEASE, false);
                let args = crate::node::batch::cmd_args(&cmd);
                let listed = names.to_vec();
                assert_eq!(args[2], listed.len().to_string(), "{args:?}");
                assert_eq!(names.len(), listed.len());
                assert_eq!(names.first(), listed.first().map(String::as_str));
                assert_eq!(args[3..], listed[..], "{layout:?}");
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
        let keys = acquire_all(&same).to_vec();
        assert_eq!(keys.len(), 3, "two locks, one counter: {keys:?}");
        assert_eq!(slots(&keys), vec![a.slot(); 3]);
        assert_eq!(raise_fences(&same).to_vec(), vec![a.fence.clone()]);
        let mixed = [Arc::clone(&a), b, twin];
        let keys = acquire_all(&mixed).to_vec();
        assert_eq!(keys.len(), 5, "three locks, two counters: {keys:?}");
        let mut counters = raise_fences(&mixed).to_vec();
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
            .map(|n| RenewItem::named(n, 1, 7, Duration::from_secs(1)))
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
