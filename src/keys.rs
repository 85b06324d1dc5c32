//! Lock names and the keys they become on every node.

use std::collections::HashSet;
use std::sync::Arc;

use crate::error::Error;

/// Longest lock name, in bytes.
pub const MAX_NAME_LEN: usize = 512;

/// Most names one [`LockManager::lock_all`](crate::LockManager::lock_all)
/// may take: each name is one more key in the acquire script and one more
/// hold renewed by the watchdog.
pub const MAX_LOCK_ALL_NAMES: usize = 64;

/// The keys of one lock: `<prefix>{<name>}`, its release channel, and the
/// node's one fence counter `<prefix>fence`, shared by every lock so that
/// counters do not grow with the number of lock names. The waiters' queue
/// and their deadlines (two sorted sets that exist only while someone
/// waits) are named on demand ([`Keys::queue`], [`Keys::timeouts`]).
#[derive(Debug)]
pub(crate) struct Keys {
    pub(crate) name: Arc<str>,
    pub(crate) lock: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
}

impl Keys {
    /// The keys of `name`, after checking it (see [`check_name`]).
    pub(crate) fn checked(prefix: &str, name: &str) -> Result<Arc<Self>, Error> {
        check_name(name)?;
        Ok(Arc::new(Self::new(prefix, name)))
    }

    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{{{name}}}");
        Self {
            name: name.into(),
            fence: format!("{prefix}fence"),
            channel: format!("{lock}:released"),
            lock,
        }
    }
}

impl Keys {
    /// The lock's queue of waiters (see `scripts/acquire_queued.lua`),
    /// built when a call needs it: a held lock does not carry it.
    pub(crate) fn queue(&self) -> String {
        format!("{}:queue", self.lock)
    }

    /// The deadlines of the lock's queued waiters.
    pub(crate) fn timeouts(&self) -> String {
        format!("{}:timeouts", self.lock)
    }
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
    pub(crate) fn set_checked(prefix: &str, names: &[String]) -> Result<Self, Error> {
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
                .map(|n| Arc::new(Keys::new(prefix, n)))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_tag() {
        let k = Keys::new("ql:", "orders");
        assert_eq!(k.lock, "ql:{orders}");
        assert_eq!(k.fence, "ql:fence");
        assert_eq!(k.channel, "ql:{orders}:released");
        assert_eq!(k.queue(), "ql:{orders}:queue");
        assert_eq!(k.timeouts(), "ql:{orders}:timeouts");
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
}
