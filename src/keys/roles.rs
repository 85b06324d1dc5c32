//! What a lock key serves beyond an ordinary lock: a semaphore's permit
//! slots and a read-write lock's readers and writer, their keys, the
//! quorum each needs and the channels their waiters listen on.

use std::sync::Arc;

use super::{fence_key, slot_of, Keys};

/// What one lock key serves. Every role is held, renewed and released as
/// an ordinary lock (one holder per key); the roles differ in the acquire
/// script and in the quorum (see [`Keys::required`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Role {
    /// An ordinary lock.
    Lock,
    /// One permit slot of a semaphore, `<family>:permit:<i>`: an ordinary
    /// lock whose release channel is the semaphore's, shared by its slots.
    Permit,
    /// One reader of a read-write lock, a key of its own
    /// (`<family>:reader:<id>`), granted by `scripts/read.lua` only while
    /// no writer holds or waits for the lock on that node.
    Reader,
    /// The writer of a read-write lock, the hash `<family>:writer`, granted
    /// by `scripts/write.lua` only while no reader key is alive on that
    /// node. `waiter` names the acquisition in the waiting writers' set
    /// (`<family>:timeouts`), where a refused writer holds new readers back
    /// for `hold_back` from its last attempt.
    Writer {
        waiter: Arc<str>,
        hold_back: std::time::Duration,
    },
}

impl Keys {
    /// Permit slot `index` of the semaphore `name` (already checked): the
    /// lock `<prefix>{semaphore:<name>}:permit:<index>`, releasing on the
    /// semaphore's channel `<prefix>{semaphore:<name>}:released`.
    pub(crate) fn permit(prefix: &str, name: &str, index: u32) -> Self {
        let tag = format!("semaphore:{name}");
        let family = format!("{prefix}{{{tag}}}");
        let lock = format!("{family}:permit:{index}");
        let slot = slot_of(tag.as_bytes());
        Self {
            name: format!("{name}#{index}").into(),
            fence: fence_key(prefix, slot),
            channel: format!("{family}:released"),
            foreign_channel: None,
            base: None,
            lock,
            slot,
            role: Role::Permit,
            family: Some(family),
            wake: None,
        }
    }

    /// The read-write lock `name` (already checked) as one `role`, a
    /// [`Role::Reader`] under the reader key id `id` (unused for a writer):
    /// both release on `<family>:released`, where waiting writers listen;
    /// a writer's release also publishes on `<family>:writer_released`,
    /// where waiting readers listen (a reader's release frees nothing a
    /// reader waits for).
    pub(crate) fn rw(prefix: &str, name: &str, role: Role, id: &str) -> Self {
        let tag = format!("rw:{name}");
        let family = format!("{prefix}{{{tag}}}");
        let slot = slot_of(tag.as_bytes());
        let writer_released = format!("{family}:writer_released");
        // A reader's queue keys are its own (unused); a writer's are the
        // family's, whose `:timeouts` is the waiting writers' set.
        let (lock, base, foreign_channel, wake) = match role {
            Role::Reader => {
                let lock = format!("{family}:reader:{id}");
                (lock, None, None, Some(writer_released))
            }
            _ => (
                format!("{family}:writer"),
                Some(family.clone()),
                Some(writer_released),
                None,
            ),
        };
        Self {
            name: format!("rw:{name}").into(),
            fence: fence_key(prefix, slot),
            channel: format!("{family}:released"),
            foreign_channel,
            base,
            lock,
            slot,
            role,
            family: Some(family),
            wake,
        }
    }

    /// Grants a hold of this key needs among `n` members whose quorum is
    /// `required`: a reader's is the read quorum `n - required + 1`, which
    /// meets every write quorum in a node (Gifford's `q_r + q_w > n`);
    /// every other role's is `required`.
    pub(crate) fn required(&self, n: usize, required: usize) -> usize {
        match self.role {
            Role::Reader if reader_quorum_one() => 1,
            Role::Reader => n.saturating_sub(required) + 1,
            Role::Permit | Role::Writer { .. } if minority_quorum() => n / 2,
            _ => required,
        }
    }

    /// Whether an acquisition of this key may take a place in its queue on
    /// the nodes (`scripts/acquire_queued.lua`): an ordinary lock's only.
    /// The other roles have acquire scripts of their own and wait on their
    /// channel alone.
    pub(crate) fn queued(&self) -> bool {
        self.role == Role::Lock
    }

    /// Whether holds of this key are shared: several of them are held at
    /// once (a semaphore's slots, readers), so a waiter that wins one
    /// passes the ring on to the next local waiter at once.
    pub(crate) fn shared(&self) -> bool {
        matches!(self.role, Role::Permit | Role::Reader)
    }

    /// The channel this lock's waiters listen on, and whether they also
    /// listen on its foreign channel: its release channel and the foreign
    /// one for an ordinary lock; a writer's release channel alone (every
    /// release of the lock publishes there); for a reader, the channel
    /// where only a writer's release publishes.
    pub(crate) fn listen(&self) -> (&str, Option<&str>) {
        match (&self.role, &self.wake) {
            (_, Some(wake)) => (wake, None),
            (Role::Writer { .. }, None) => (&self.channel, None),
            _ => (&self.channel, self.foreign_channel.as_deref()),
        }
    }

    /// The shared keys of a semaphore or a read-write lock, in two parts:
    /// `<family>` and `suffix`.
    pub(crate) fn family_parts(&self, suffix: &'static str) -> (&str, &'static str) {
        (self.family(), suffix)
    }
}

/// The simulator's mutation that lets a reader stand on one grant (never
/// on outside tests).
fn reader_quorum_one() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::ReaderQuorumOne);
    #[cfg(not(test))]
    false
}

/// The simulator's mutation that lets a permit slot or a writer stand on
/// `N / 2` grants (never on outside tests).
fn minority_quorum() -> bool {
    #[cfg(test)]
    return crate::hooks::mutation::active(crate::hooks::mutation::Mutation::MinorityQuorum);
    #[cfg(not(test))]
    false
}
