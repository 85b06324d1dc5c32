//! The server-side Lua scripts, loaded once per process.
//!
//! Each script is documented in its own `.lua` file. They are sent with
//! `EVALSHA` and fall back to loading themselves when a node answers `NOSCRIPT`
//! (for example after it restarted).

use std::sync::LazyLock;

use redis::Script;

/// Reentrant acquire: grants, re-enters or reports the holder's PTTL.
pub(crate) static ACQUIRE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("acquire.lua")));

/// Release one level or all of them; publishes when fully released.
pub(crate) static RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("release.lua")));

/// Batched renewal with repair of missing keys.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("renew.lua")));

/// Administrative delete plus publish.
pub(crate) static FORCE_RELEASE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("force_release.lua")));

/// Raise a fence counter to at least a token.
pub(crate) static RAISE_FENCE: LazyLock<Script> =
    LazyLock::new(|| Script::new(include_str!("raise_fence.lua")));

/// Acquire reply code: the lock was free and is now ours.
pub(crate) const ACQ_GRANTED: i64 = 1;
/// Acquire reply code: our owner already held it (re-entry).
pub(crate) const ACQ_REENTERED: i64 = 2;
/// Acquire reply code: another owner holds it.
pub(crate) const ACQ_TAKEN: i64 = 0;

/// Release reply code: deleted and published.
pub(crate) const REL_RELEASED: i64 = 2;
/// Release reply code: count lowered.
pub(crate) const REL_LOWERED: i64 = 1;
/// Release reply code: no key.
pub(crate) const REL_MISSING: i64 = 0;
/// Release reply code: another owner holds it.
pub(crate) const REL_OTHER_OWNER: i64 = -1;

/// Renew reply code: extended.
pub(crate) const RENEW_EXTENDED: i64 = 1;
/// Renew reply code: re-created on a node that lost the key.
pub(crate) const RENEW_REPAIRED: i64 = 2;
/// Renew reply code: another owner holds it.
pub(crate) const RENEW_CONFLICT: i64 = 0;
/// Renew reply code: wrong type.
pub(crate) const RENEW_WRONGTYPE: i64 = -2;
