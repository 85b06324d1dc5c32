//! The fake's side of what the scripts read before they write: the re-entry
//! mode of `acquire.lua`, and the types `acquire_queued.lua` checks before
//! it drops gone waiters (an error reply must mean nothing changed).

use std::time::Duration;

use super::{acquire, wrong_type, State};
use crate::error::NodeError;
use crate::keys::Keys;
use crate::node::Grant;

/// `acquire.lua` in its re-entry mode: a missing key is reported, never
/// created.
pub(super) fn reenter(
    s: &mut State,
    keys: &Keys,
    owner: &str,
    lease: Duration,
    count: u32,
) -> Result<Grant, NodeError> {
    if !s.locks.contains_key(&keys.lock) && !s.foreign.contains(&keys.lock) {
        return Ok(Grant::Missing);
    }
    acquire(s, keys, owner, lease, count)
}

/// `acquire_queued.lua`'s reads before any write: the lock key, the fence
/// counter where it would be used (a free lock, or ours), the queue.
pub(super) fn queued_types(s: &State, keys: &Keys, owner: &str) -> Result<(), NodeError> {
    let free_or_ours = s.locks.get(&keys.lock).is_none_or(|e| e.owner == owner);
    let queue = keys.queue();
    for (key, read) in [
        (&keys.lock, true),
        (&keys.fence, free_or_ours),
        (&queue, true),
    ] {
        if read && s.foreign.contains(key) {
            return Err(wrong_type(key));
        }
    }
    Ok(())
}
