//! Lock names and the keys they become on every node.

use std::sync::Arc;

use crate::error::Error;

/// Longest lock name, in bytes.
pub const MAX_NAME_LEN: usize = 512;

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
