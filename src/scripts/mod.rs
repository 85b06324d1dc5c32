//! The server-side Lua scripts, loaded once per process.
//!
//! Each script is documented in its own `.lua` file; the comments are
//! stripped before sending.
//!
//! Acquire, release, force-release and raise-fence go out as `EVAL` with the
//! script's body, never `EVALSHA`. An `EVALSHA` that meets a node without the
//! script (after a restart) fails with `NOSCRIPT` and must be sent again,
//! behind whatever was queued on the connection meanwhile: an acquire re-sent
//! behind its own release would grant a lock nobody holds. With `EVAL` every
//! call runs the first time, in the order it was sent; the node caches the
//! compiled script by its digest, so the cost is hashing a few hundred bytes.
//!
//! The watchdog's renewal is one `EVALSHA` per thousand locks in a pipeline:
//! its body would be sent once per call anyway, and a release never overtakes
//! a renewal in flight (release waits for it).

use std::sync::LazyLock;

use redis::Script;

/// A script body without its comments, ready for `EVAL`.
pub(crate) struct Lua {
    body: String,
}

impl Lua {
    fn new(source: &str) -> Self {
        let body = source
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        Self { body }
    }

    /// `EVAL <body> <keys.len()> <keys…>`; add the arguments to it.
    pub(crate) fn eval(&self, keys: &[&str]) -> redis::Cmd {
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(&self.body).arg(keys.len());
        for k in keys {
            cmd.arg(*k);
        }
        cmd
    }
}

/// Reentrant acquire: grants, re-enters or reports the holder's PTTL.
pub(crate) static ACQUIRE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("acquire.lua")));

/// Release one level or all of them; publishes when fully released.
pub(crate) static RELEASE: LazyLock<Lua> = LazyLock::new(|| Lua::new(include_str!("release.lua")));

/// Batched renewal with repair of missing keys.
pub(crate) static RENEW: LazyLock<Script> =
    LazyLock::new(|| Script::new(&Lua::new(include_str!("renew.lua")).body));

/// Administrative delete plus publish.
pub(crate) static FORCE_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("force_release.lua")));

/// Raise a fence counter to at least a token.
pub(crate) static RAISE_FENCE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(include_str!("raise_fence.lua")));

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_stripped_and_code_kept() {
        let lua = Lua::new("-- header\nlocal x = 1 -- trailing\n\n  -- indented\nreturn x\n");
        assert_eq!(lua.body, "local x = 1 -- trailing\nreturn x");
        for script in [&*ACQUIRE, &*RELEASE, &*FORCE_RELEASE, &*RAISE_FENCE] {
            assert!(!script.body.contains("\n--"));
            assert!(script.body.contains("redis.call"));
        }
    }
}
