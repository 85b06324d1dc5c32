//! Lock names and the keys they become on every node.
//!
//! Every key a script call touches for one lock lives in the lock's hash
//! slot, the slot of its name (Redis Cluster's rule: `CRC16(tag) mod
//! 16384`, the tag being what stands between the first `{` and the next
//! `}`): the lock hash `<prefix>{<name>}`, its release channel, its queue
//! keys, and its fence counter `<prefix>fence:{<tag>}`, one counter per slot
//! whose tag is a three-character string of that slot ([`slot_tag`]). So a
//! node holds at most 16384 counters whatever the number of names, every
//! name of a slot shares one, and a counter moves with its slot.

use std::collections::HashSet;
use std::sync::{Arc, OnceLock};

use crate::error::Error;
use crate::layout::Layout;

pub(crate) use self::roles::Role;

/// Longest lock name, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// Most names one [`LockManager::lock_all`](crate::LockManager::lock_all)
/// may take: each name is one more key in the acquire script and one more
/// hold renewed by the watchdog.
pub const MAX_LOCK_ALL_NAMES: usize = 64;

/// Redis Cluster's hash slots.
pub(crate) const SLOTS: u16 = 16384;

/// The keys of one lock: `<prefix>{<name>}`, its release channel
/// `<prefix>{<name>}:released`, and the fence counter of its slot
/// `<prefix>fence:{<tag>}` ([`fence_key`]), shared by every name of that
/// slot. The waiters' queue and their deadlines (two sorted sets that exist
/// only while someone waits) are named on demand ([`Keys::queue_parts`],
/// [`Keys::timeouts_parts`]). All of them are in the slot of the name.
///
/// In [`Layout::Redisson`] the lock is the hash at the name itself (no
/// braces: the whole name is hashed, the same bytes as the tag `{<name>}`,
/// so the same slot), and a release also publishes on Redisson's channel
/// `redisson_lock__channel:{<name>}` ([`Keys::foreign_channel`]); the
/// other keys are the same as in the default layout.
#[derive(Debug)]
pub(crate) struct Keys {
    pub(crate) name: Arc<str>,
    pub(crate) lock: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
    /// Another client's release channel, where a release also publishes
    /// (Redisson's, in [`Layout::Redisson`]) and where waiters also listen.
    pub(crate) foreign_channel: Option<String>,
    /// `<prefix>{<name>}`: the start of the channel's and queue's keys
    /// ([`Keys::base`]); `None` where it is the lock's key itself (an
    /// ordinary lock in the default layout), so as not to copy it.
    base: Option<String>,
    /// The hash slot of every key of the lock, computed once: the watchdog
    /// reads it for every hold of every wave.
    slot: u16,
    /// What the key is: an ordinary lock, a semaphore's permit slot, or a
    /// read-write lock's reader or writer.
    pub(crate) role: Role,
    /// The keys shared by a semaphore's slots or a read-write lock's
    /// readers and writer start with this: `<prefix>{semaphore:<name>}` or
    /// `<prefix>{rw:<name>}` (for an ordinary lock, the lock's own base:
    /// `None`, see [`Keys::family`]).
    family: Option<String>,
    /// The channel this lock's waiters listen on when it is not the one
    /// its release publishes on (a reader's: `<family>:writer_released`).
    wake: Option<String>,
}

impl Keys {
    /// The keys of `name` in `layout`, after checking it (see
    /// [`check_name`] and [`check_not_internal`]).
    pub(crate) fn checked(layout: Layout, prefix: &str, name: &str) -> Result<Arc<Self>, Error> {
        check_name(name)?;
        check_not_internal(layout, prefix, name)?;
        Ok(Arc::new(Self::in_layout(layout, prefix, name)))
    }

    /// The keys of `name` in the default layout.
    #[cfg(test)]
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        Self::in_layout(Layout::Quorumlock, prefix, name)
    }

    /// The keys of `name` in `layout`.
    ///
    /// Built on every acquisition: each name is written once, in a buffer
    /// of its size (no formatting), and the base is the lock's key itself
    /// where the layout makes them the same.
    pub(crate) fn in_layout(layout: Layout, prefix: &str, name: &str) -> Self {
        let base = concat(&[prefix, "{", name, "}"]);
        let slot = slot_of(name.as_bytes());
        let channel = concat(&[&base, ":released"]);
        let (lock, base) = match layout {
            Layout::Quorumlock => (base, None),
            Layout::Redisson => (layout.key_at(&base, name), Some(base)),
        };
        Self {
            name: name.into(),
            lock,
            fence: fence_key(prefix, slot),
            channel,
            foreign_channel: layout.foreign_channel(name),
            family: None,
            base,
            slot,
            role: Role::Lock,
            wake: None,
        }
    }

    /// `<prefix>{<name>}`: the start of the channel's and queue's keys.
    fn base(&self) -> &str {
        self.base.as_deref().unwrap_or(&self.lock)
    }

    /// The start of the keys a semaphore's slots or a read-write lock's
    /// readers and writer share (an ordinary lock's: its base).
    fn family(&self) -> &str {
        self.family.as_deref().unwrap_or_else(|| self.base())
    }
}

/// `parts` joined, in a buffer of their size.
fn concat(parts: &[&str]) -> String {
    let mut out = String::with_capacity(parts.iter().map(|p| p.len()).sum());
    for p in parts {
        out.push_str(p);
    }
    out
}

impl Keys {
    /// The lock's queue of waiters (see `scripts/acquire_queued.lua`),
    /// built when a call needs it: a held lock does not carry it.
    #[cfg(test)]
    pub(crate) fn queue(&self) -> String {
        let (base, suffix) = self.queue_parts();
        format!("{base}{suffix}")
    }

    /// The deadlines of the lock's queued waiters.
    #[cfg(test)]
    pub(crate) fn timeouts(&self) -> String {
        let (base, suffix) = self.timeouts_parts();
        format!("{base}{suffix}")
    }

    /// [`Keys::queue`] in two parts, to write without building it.
    pub(crate) fn queue_parts(&self) -> (&str, &'static str) {
        (self.base(), ":queue")
    }

    /// [`Keys::timeouts`] in two parts, to write without building it.
    pub(crate) fn timeouts_parts(&self) -> (&str, &'static str) {
        (self.base(), ":timeouts")
    }

    /// An election's leader record, `<prefix>{<name>}:leader` (see
    /// `scripts/proclaim.lua`), in two parts.
    pub(crate) fn record_parts(&self) -> (&str, &'static str) {
        (self.base(), ":leader")
    }

    /// The channel a proclaim publishes on, `<prefix>{<name>}:elected`,
    /// where an election's observers listen.
    pub(crate) fn elected_channel(&self) -> String {
        let (base, suffix) = self.elected_parts();
        format!("{base}{suffix}")
    }

    /// [`Keys::elected_channel`] in two parts, to write without building it.
    pub(crate) fn elected_parts(&self) -> (&str, &'static str) {
        (self.base(), ":elected")
    }

    /// The leader record's key (see [`Keys::record_parts`]).
    #[cfg(test)]
    pub(crate) fn record(&self) -> String {
        let (base, suffix) = self.record_parts();
        format!("{base}{suffix}")
    }

    /// The hash slot of every key of the lock: its name's.
    pub(crate) fn slot(&self) -> u16 {
        self.slot
    }
}

/// The hash slot of every key of the lock `name`, in either layout.
pub(crate) fn name_slot(name: &str) -> u16 {
    slot_of(name.as_bytes())
}

/// The distinct fence counters of a set of locks, sorted: names of one slot
/// share a counter, so a set of n names has at most n.
pub(crate) fn fences(set: &[Arc<Keys>]) -> Vec<&str> {
    let mut out: Vec<&str> = set.iter().map(|k| k.fence.as_str()).collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The fence counter of `slot`: `<prefix>fence:{<tag>}`, where the tag is
/// the slot's [`slot_tag`], so the counter lives in that slot.
pub(crate) fn fence_key(prefix: &str, slot: u16) -> String {
    concat(&[prefix, "fence:{", slot_tag(slot), "}"])
}

/// The one fence counter per node of the layout before per-slot counters,
/// `<prefix>fence`: what `build()` adopts (`scripts/adopt_fence.lua`) when a
/// node still has it. Those versions had only [`Layout::Quorumlock`], so
/// only a manager in that layout adopts it (in [`Layout::Redisson`] a key
/// of that name may be a Redisson object of the user's).
pub(crate) fn legacy_fence_key(prefix: &str) -> String {
    format!("{prefix}fence")
}

/// Refuses a name whose lock key in `layout` would be one of quorumlock's
/// own keys under `prefix`. Every own key but one carries a brace, which no
/// name may (see [`check_name`]): the one is [`legacy_fence_key`], a bare
/// `<prefix>fence`, which in [`Layout::Redisson`] (the lock at the name
/// itself) is the lock of the name `<prefix>fence`. In
/// [`Layout::Quorumlock`] every lock key is `<prefix>{<name>}`, never an
/// own key.
pub(crate) fn check_not_internal(layout: Layout, prefix: &str, name: &str) -> Result<(), Error> {
    if layout == Layout::Quorumlock || name != legacy_fence_key(prefix) {
        return Ok(());
    }
    Err(Error::invalid(
        "lock name",
        format!(
            "{name:?} is quorumlock's own key under the key prefix {prefix:?} (the fence \
             counter of older versions), and in the Redisson layout a lock's key is its \
             name; choose another name, or another key prefix"
        ),
    ))
}

/// Every per-slot fence counter, in slot order: where `build()` raises an
/// adopted [`legacy_fence_key`] to. Named only when a node has one to adopt.
pub(crate) fn fence_keys(prefix: &str) -> Vec<String> {
    (0..SLOTS).map(|s| fence_key(prefix, s)).collect()
}

/// The key of the fence counter that serves the lock `name` under the key
/// prefix `prefix` (the builder's
/// [`key_prefix`](crate::LockManagerBuilder::key_prefix), `quorumlock:` by
/// default), on every node: `<prefix>fence:{<tag>}`, one counter per Redis
/// Cluster hash slot, in the slot of `name`; every name of that slot shares
/// it. For operators who inspect, back up or move counters, and for tests.
///
/// # Errors
///
/// [`Error::InvalidInput`] for a name a lock could not have (empty, longer
/// than [`MAX_NAME_LEN`], or with a brace or a control character), or a
/// prefix the builder refuses (with a brace).
pub fn fence_counter_key(prefix: &str, name: &str) -> Result<String, Error> {
    check_prefix_and_name(prefix, name)?;
    Ok(fence_key(prefix, slot_of(name.as_bytes())))
}

/// Key names for tools and operators that read the nodes directly.
impl Layout {
    /// The key of the lock `name` on every node, under the key prefix
    /// `prefix` (the builder's
    /// [`key_prefix`](crate::LockManagerBuilder::key_prefix), `quorumlock:`
    /// by default): the hash `<prefix>{<name>}` in [`Layout::Quorumlock`],
    /// the name itself in [`Layout::Redisson`] (where the prefix plays no
    /// part). For tools and operators that read the nodes directly.
    ///
    /// ```
    /// use quorumlock::Layout;
    /// assert_eq!(Layout::Quorumlock.lock_key("ql:", "orders")?, "ql:{orders}");
    /// assert_eq!(Layout::Redisson.lock_key("ql:", "orders")?, "orders");
    /// # Ok::<(), quorumlock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`](crate::Error::InvalidInput) for a name a
    /// lock could not have (empty, longer than
    /// [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), or with a brace or a control
    /// character; in [`Layout::Redisson`] also `<prefix>fence`, a key of
    /// quorumlock's own), or a prefix the builder refuses (with a brace).
    pub fn lock_key(self, prefix: &str, name: &str) -> Result<String, Error> {
        check_prefix_and_name(prefix, name)?;
        check_not_internal(self, prefix, name)?;
        Ok(self.key_at(&format!("{prefix}{{{name}}}"), name))
    }

    /// The two sorted sets of the waiters queued for the lock `name`, in
    /// every layout quorumlock's own keys under `prefix`, in the lock's
    /// hash slot: `<prefix>{<name>}:queue` (waiter id -> ticket) and
    /// `<prefix>{<name>}:timeouts` (waiter id -> the node time in ms after
    /// which the nodes skip it). They exist only while someone waits, and
    /// only quorumlock's waiters are in them (Redisson's waiters wait on
    /// their channel alone).
    ///
    /// # Errors
    ///
    /// As [`Layout::lock_key`].
    pub fn queue_keys(self, prefix: &str, name: &str) -> Result<(String, String), Error> {
        check_prefix_and_name(prefix, name)?;
        check_not_internal(self, prefix, name)?;
        let base = format!("{prefix}{{{name}}}");
        Ok((format!("{base}:queue"), format!("{base}:timeouts")))
    }
}

/// Checks a key prefix as the builder does (no brace) and a lock name as
/// [`check_name`] does.
pub(crate) fn check_prefix_and_name(prefix: &str, name: &str) -> Result<(), Error> {
    if prefix.contains(['{', '}']) {
        let reason = "must not contain '{' or '}' (the lock name is the hash tag)";
        return Err(Error::invalid("key prefix", reason));
    }
    check_name(name)
}

/// The hash slot of `bytes` taken as a whole (no hash tag rule).
fn slot_of(bytes: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(bytes) % SLOTS
}

/// The hash slot of a key, by Redis Cluster's rule: the slot of its hash
/// tag, the bytes between its first `{` and the first `}` after it when
/// there is at least one; of the whole key otherwise.
pub(crate) fn key_slot(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let tag = bytes.iter().position(|b| *b == b'{').and_then(|open| {
        let rest = bytes.get(open + 1..)?;
        let close = rest.iter().position(|b| *b == b'}')?;
        rest.get(..close).filter(|t| !t.is_empty())
    });
    slot_of(tag.unwrap_or(bytes))
}

/// The characters of slot tags, in the order tags are tried.
const TAG_CHARS: &[u8; 62] = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

/// Length of every slot tag.
const TAG_LEN: usize = 3;

/// A three-character tag (letters and digits) whose hash slot is `slot`
/// (taken modulo [`SLOTS`]): the first one, in the order of [`TAG_CHARS`],
/// of the 238,328 such strings; the first 69,127 of them cover every slot.
/// The table is built on first use (about 69,000 CRC16s of three bytes,
/// well under a millisecond: see `slot_tags_cover_every_slot`).
pub(crate) fn slot_tag(slot: u16) -> &'static str {
    static TAGS: OnceLock<String> = OnceLock::new();
    let tags = TAGS.get_or_init(build_tags);
    let at = usize::from(slot % SLOTS) * TAG_LEN;
    tags.get(at..at + TAG_LEN).unwrap_or_default()
}

/// Every slot's tag, concatenated in slot order ([`TAG_LEN`] bytes each).
fn build_tags() -> String {
    let mut table = vec![[0u8; TAG_LEN]; usize::from(SLOTS)];
    let mut found = vec![false; usize::from(SLOTS)];
    let mut left = usize::from(SLOTS);
    'search: for a in TAG_CHARS {
        for b in TAG_CHARS {
            for c in TAG_CHARS {
                let tag = [*a, *b, *c];
                let s = usize::from(slot_of(&tag));
                if !found[s] {
                    found[s] = true;
                    table[s] = tag;
                    left -= 1;
                    if left == 0 {
                        break 'search;
                    }
                }
            }
        }
    }
    // Every byte is one of TAG_CHARS (ASCII), so this is the tags' text.
    table.iter().flatten().map(|b| char::from(*b)).collect()
}

/// What one acquisition takes: one lock (`lock`), or a set of locks granted
/// all or none on each node (`lock_all`, even of one name).
pub(crate) struct Target {
    /// The keys of every name, sorted by name for a set.
    pub(crate) keys: Arc<[Arc<Keys>]>,
    /// The name, or a set's names joined, for errors and traces.
    pub(crate) label: Arc<str>,
    /// A set: taken by `acquire_all.lua`, all or none.
    pub(crate) set: bool,
}

impl Target {
    /// One lock.
    pub(crate) fn one(keys: &Arc<Keys>) -> Self {
        Self {
            keys: Arc::new([Arc::clone(keys)]),
            label: Arc::clone(&keys.name),
            set: false,
        }
    }

    /// The set of `names`, after checking them: at least one, at most
    /// [`MAX_LOCK_ALL_NAMES`], each a valid lock name, no name twice.
    /// Sorted by name.
    pub(crate) fn set_checked(
        layout: Layout,
        prefix: &str,
        names: &[String],
    ) -> Result<Self, Error> {
        if names.is_empty() {
            return Err(Error::invalid("lock names", "the list of names is empty"));
        }
        if names.len() > MAX_LOCK_ALL_NAMES {
            return Err(Error::invalid(
                "lock names",
                format!("{} names is more than {MAX_LOCK_ALL_NAMES}", names.len()),
            ));
        }
        let mut seen = HashSet::with_capacity(names.len());
        for name in names {
            check_name(name)?;
            check_not_internal(layout, prefix, name)?;
            if !seen.insert(name.as_str()) {
                return Err(Error::invalid(
                    "lock names",
                    format!("{name:?} is listed twice"),
                ));
            }
        }
        let mut sorted: Vec<&String> = names.iter().collect();
        sorted.sort();
        Ok(Self::set_of(
            sorted
                .into_iter()
                .map(|n| Arc::new(Keys::in_layout(layout, prefix, n)))
                .collect(),
        ))
    }

    /// The set of `keys`, already checked and sorted.
    pub(crate) fn set_of(keys: Vec<Arc<Keys>>) -> Self {
        let label = keys.iter().map(|k| &*k.name).collect::<Vec<_>>().join(", ");
        Self {
            keys: keys.into(),
            label: label.into(),
            set: true,
        }
    }

    /// The one lock of a single-name target (the first name of a set).
    pub(crate) fn first(&self) -> &Arc<Keys> {
        &self.keys[0]
    }
}

/// The hash slot a lock name's keys live in (Redis Cluster's CRC16 of the
/// name, mod 16384), whatever the key prefix: on a member that is a Redis
/// Cluster, the slot picks the shard. Names of one slot can be taken
/// together by [`lock_all`](crate::LockManager::lock_all) on a manager with
/// a cluster member; names of several slots cannot.
///
/// # Errors
///
/// [`Error::InvalidInput`] for a name that is not a valid lock name (empty,
/// too long, or with `{` or `}`).
pub fn lock_slot(name: &str) -> Result<u16, Error> {
    check_name(name)?;
    Ok(name_slot(name))
}

/// Checks a lock name: non-empty, at most [`MAX_NAME_LEN`] bytes, and free of
/// `{` and `}` (the name becomes the key's hash tag).
pub(crate) fn check_name(name: &str) -> Result<(), Error> {
    let reason = if name.is_empty() {
        "the name is empty".to_owned()
    } else if name.len() > MAX_NAME_LEN {
        format!("{} bytes is longer than {MAX_NAME_LEN}", name.len())
    } else if name.contains(['{', '}']) {
        format!("{name:?} contains '{{' or '}}', which would break its hash tag")
    } else if name.chars().any(char::is_control) {
        format!("{name:?} contains a control character")
    } else {
        return Ok(());
    };
    Err(Error::invalid("lock name", reason))
}

mod roles;
#[cfg(test)]
mod tests;
