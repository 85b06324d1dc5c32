//! The server-side Lua scripts, loaded once per process.
//!
//! Each script is documented in its own `.lua` file; the comments are
//! stripped before sending.
//!
//! Acquire (`acquire`, and `acquire_all` for a set of names) and
//! force-release are never re-sent after an error that may have
//! let them run. A call re-sent after such an error (a broken connection, a
//! timeout) goes behind whatever was queued on the connection meanwhile, and an
//! acquire re-sent behind its own release would grant a lock nobody holds.
//! (Release and raise-fence may be: they only lower or delete what their
//! hold owns, or raise a counter, so they are sent once more after a broken
//! connection.) So scripts go out as `EVALSHA` only while the node
//! is known to have the script: for each node and script, calls start as
//! `EVAL` (the script travels with the call and the node caches it), switch
//! to `EVALSHA` once an `EVAL` succeeded, and go back to `EVAL` for every
//! script after a connection error or a `NOSCRIPT`, whichever call met it
//! (the node may have restarted empty). A `NOSCRIPT` that slips through (a
//! restart no call on this connection saw, or `SCRIPT FLUSH` by an operator)
//! means the node ran nothing, so that one call, whatever the script, is
//! sent once more as `EVAL`: nothing can have been queued behind a call that
//! did not run.
//!
//! The watchdog's renewal (and its repair of missing keys) is one `EVALSHA`
//! per thousand locks in a pipeline,
//! re-sent after `NOSCRIPT`: a release never overtakes a renewal in flight
//! (release waits for it), so the retry cannot reorder anything that matters.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

/// What `release.lua` appends to its release message when the release is a
/// rollback (token 0): waiters of other managers retry after their backoff
/// instead of at once (see `wait::bells`).
pub(crate) const ROLLBACK_SUFFIX: &str = " rollback";

/// A script body without its comments, and its digest.
pub(crate) struct Lua {
    /// Index among the one-shot scripts (below [`ONE_SHOT`]).
    pub(crate) id: usize,
    body: String,
    sha: String,
}

/// How many one-shot scripts there are.
pub(crate) const ONE_SHOT: usize = 12;

impl Lua {
    fn new(id: usize, source: &str) -> Self {
        Self::with_prelude(id, "", source)
    }

    /// A script that uses the queue helpers of `queue_prelude.lua`.
    fn queued(id: usize, source: &str) -> Self {
        Self::with_prelude(id, include_str!("queue_prelude.lua"), source)
    }

    /// A batch script as a cluster member sends it per shard: the Redis 7
    /// shebang with `flags`, then `shard_prelude.lua`, then `source`.
    fn per_shard(flags: &str, source: &str) -> Self {
        let shebang = format!("#!lua flags={flags}");
        Self::with_lines(
            ONE_SHOT,
            std::iter::once(shebang.as_str())
                .chain(include_str!("shard_prelude.lua").lines())
                .chain(source.lines()),
        )
    }

    fn with_prelude(id: usize, prelude: &str, source: &str) -> Self {
        Self::with_lines(id, prelude.lines().chain(source.lines()))
    }

    fn with_lines<'a>(id: usize, lines: impl Iterator<Item = &'a str>) -> Self {
        let body = lines
            .map(str::trim_end)
            .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join("\n");
        let sha = Script::new(&body).get_hash().to_owned();
        Self { id, body, sha }
    }

    /// The script's digest (`EVALSHA`).
    pub(crate) fn sha(&self) -> &str {
        &self.sha
    }

    /// `SCRIPT LOAD <body>`: caches the script on the node it reaches.
    pub(crate) fn load_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::cmd("SCRIPT");
        cmd.arg("LOAD").arg(&self.body);
        cmd
    }

    /// `EVAL <body> <keys>` when `send_body`, else `EVALSHA <digest>
    /// <keys>`, sized for `keys` names of about `key_bytes` bytes in all
    /// and a few arguments: write the key names next, then the arguments.
    pub(crate) fn header(&self, send_body: bool, keys: usize, key_bytes: usize) -> redis::Cmd {
        let (name, script) = if send_body {
            ("EVAL", &self.body)
        } else {
            ("EVALSHA", &self.sha)
        };
        // Sized once for the name, the script, the keys and a few
        // arguments, so that building the call does not grow its buffers.
        let data = name.len() + script.len() + key_bytes + 96;
        let mut cmd = redis::Cmd::with_capacity(keys + 8, data);
        cmd.arg(name).arg(script).arg(keys);
        cmd
    }
}

/// Reentrant acquire: grants, re-enters or reports the holder's PTTL.
pub(crate) static ACQUIRE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(0, include_str!("acquire.lua")));

/// Release one level or all of them; publishes when fully released.
pub(crate) static RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::queued(1, include_str!("release.lua")));

/// Batched renewal: extends held keys, reports missing ones.
pub(crate) static RENEW: LazyLock<Lua> =
    LazyLock::new(|| Lua::with_prelude(ONE_SHOT, BATCH_PRELUDE, include_str!("renew.lua")));

/// Batched repair: re-creates missing keys of holds a quorum confirmed.
pub(crate) static REPAIR: LazyLock<Lua> =
    LazyLock::new(|| Lua::with_prelude(ONE_SHOT, BATCH_PRELUDE, include_str!("repair.lua")));

/// [`RENEW`] as a cluster member sends it per shard: locks of many slots
/// of one shard in one call (Redis 7 script flags: `allow-cross-slot-keys`;
/// `allow-oom`, since the per-slot script, without flags, extends a lock
/// under `maxmemory` too: `PEXPIRE` is not refused there), the key names
/// in `ARGV` (`shard_prelude.lua`); a lock of a slot the node does not
/// serve answers [`RENEW_NOT_HERE`].
pub(crate) static RENEW_SHARD: LazyLock<Lua> =
    LazyLock::new(|| Lua::per_shard("allow-cross-slot-keys,allow-oom", include_str!("renew.lua")));

/// [`REPAIR`] per shard, as [`RENEW_SHARD`] (without `allow-oom`: the
/// per-slot repair fails under `maxmemory` too, at its first write).
pub(crate) static REPAIR_SHARD: LazyLock<Lua> =
    LazyLock::new(|| Lua::per_shard("allow-cross-slot-keys", include_str!("repair.lua")));

/// Batched place keeping: extends the deadlines of waiters queued for
/// locks that are held, reports free locks and lapsed places; its codes are
/// the renew codes (kept [`KEEP_KEPT_FOR`] and up, with the lock's PTTL,
/// or [`RENEW_EXTENDED`] for a key without a TTL; free [`RENEW_MISSING`],
/// not queued [`RENEW_CONFLICT`], [`RENEW_WRONGTYPE`], [`RENEW_NOT_HERE`]).
pub(crate) static KEEP: LazyLock<Lua> =
    LazyLock::new(|| Lua::with_prelude(ONE_SHOT, BATCH_PRELUDE, include_str!("keep.lua")));

/// [`KEEP`] per shard, as [`RENEW_SHARD`] (without `allow-oom`: a place
/// is not kept under `maxmemory`; its waiter attempts instead).
pub(crate) static KEEP_SHARD: LazyLock<Lua> =
    LazyLock::new(|| Lua::per_shard("allow-cross-slot-keys", include_str!("keep.lua")));

/// What the batch scripts start with when every key is declared.
const BATCH_PRELUDE: &str = include_str!("batch_prelude.lua");

/// Administrative delete plus publish.
pub(crate) static FORCE_RELEASE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(2, include_str!("force_release.lua")));

/// Raise a fence counter to at least a token.
pub(crate) static RAISE_FENCE: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(3, include_str!("raise_fence.lua")));

/// All-or-none acquire of several names (the multi-lock): grants every
/// name, re-enters every name, or writes nothing.
pub(crate) static ACQUIRE_ALL: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(4, include_str!("acquire_all.lua")));

/// Acquire for a waiter with a place in the lock's queue (fair, or a plain
/// waiter's retries): grants, re-enters, or queues and reports the wait.
pub(crate) static ACQUIRE_QUEUED: LazyLock<Lua> =
    LazyLock::new(|| Lua::queued(5, include_str!("acquire_queued.lua")));

/// A waiter leaves the lock's queue; the next one is told if it was due.
pub(crate) static LEAVE: LazyLock<Lua> = LazyLock::new(|| Lua::new(6, include_str!("leave.lua")));

/// An election's leader writes its value where its hold is alive.
pub(crate) static PROCLAIM: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(7, include_str!("proclaim.lua")));

/// Reads an election's leader as one node sees it.
pub(crate) static LEADER: LazyLock<Lua> = LazyLock::new(|| Lua::new(8, include_str!("leader.lua")));

/// A read-write lock's reader: granted where no writer holds or waits.
pub(crate) static READ: LazyLock<Lua> = LazyLock::new(|| Lua::new(9, include_str!("read.lua")));

/// A read-write lock's writer: granted where no reader or writer holds it;
/// refused, it holds new readers back.
pub(crate) static WRITE: LazyLock<Lua> = LazyLock::new(|| Lua::new(10, include_str!("write.lua")));

/// A semaphore's permit slots as one node sees them, and its permit count.
pub(crate) static PERMITS: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(11, include_str!("permits.lua")));

/// A fenced write on a resource's Redis (`fenced::Fence`): SETs a key
/// only with a token at least as large as the largest its fence has seen.
/// Sent on the caller's connection, never to a member, so it has no place
/// among the one-shot scripts a member tracks.
pub(crate) static FENCED_SET: LazyLock<Lua> =
    LazyLock::new(|| Lua::new(ONE_SHOT, include_str!("fenced_set.lua")));

/// Upgrade from the single fence counter per node: raises every per-slot
/// counter to the old one and deletes it (run once, at `build()`).
pub(crate) const ADOPT_FENCE: &str = include_str!("adopt_fence.lua");

/// Acquire reply code: the lock was free and is now ours.
pub(crate) const ACQ_GRANTED: i64 = 1;
/// Acquire reply code: our owner already held it (re-entry).
pub(crate) const ACQ_REENTERED: i64 = 2;
/// Acquire reply code: another owner holds it.
pub(crate) const ACQ_TAKEN: i64 = 0;
/// Acquire reply code, re-entry only: the key is missing (nothing created).
pub(crate) const ACQ_MISSING: i64 = 3;

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
/// Renew reply code: re-created on a node that lost the key (repair).
pub(crate) const RENEW_REPAIRED: i64 = 2;
/// Renew reply code: the key is missing (renew; nothing created).
pub(crate) const RENEW_MISSING: i64 = 3;
/// Renew reply code: another owner holds it.
pub(crate) const RENEW_CONFLICT: i64 = 0;
/// Renew reply code: wrong type.
pub(crate) const RENEW_WRONGTYPE: i64 = -2;
/// Renew reply code, per shard only: the lock's slot is not served by the
/// node that ran the call (nothing was done for it).
pub(crate) const RENEW_NOT_HERE: i64 = 4;
/// Keep reply codes from here up: the place was kept, and the lock's key
/// had `code - KEEP_KEPT_FOR` milliseconds left (a key without a TTL
/// answers [`RENEW_EXTENDED`]). No renew or repair code reaches it.
pub(crate) const KEEP_KEPT_FOR: i64 = 16;

/// A duration as the scripts take it (leases, queue timeouts): whole
/// milliseconds, at least 1 (a `PEXPIRE` of 0 would delete the key).
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_are_stripped_and_code_kept() {
        let lua = Lua::new(
            0,
            "-- header\nlocal x = 1 -- trailing\n\n  -- indented\nreturn x\n",
        );
        assert_eq!(lua.body, "local x = 1 -- trailing\nreturn x");
        for (i, script) in [
            &*ACQUIRE,
            &*RELEASE,
            &*FORCE_RELEASE,
            &*RAISE_FENCE,
            &*ACQUIRE_ALL,
            &*ACQUIRE_QUEUED,
            &*LEAVE,
            &*PROCLAIM,
            &*LEADER,
            &*READ,
            &*WRITE,
            &*PERMITS,
        ]
        .into_iter()
        .enumerate()
        {
            assert_eq!(script.id, i);
            assert!(!script.body.contains("\n--"));
            assert!(script.body.contains("redis.call"));
        }
    }

    /// The per-shard scripts open with the Redis 7 shebang (a flag on any
    /// other line is not read), then the prelude that reads the keys and
    /// arguments from ARGV.
    #[test]
    fn per_shard_scripts_start_with_their_flags() {
        assert!(RENEW_SHARD
            .body
            .starts_with("#!lua flags=allow-cross-slot-keys,allow-oom\n"));
        assert!(REPAIR_SHARD
            .body
            .starts_with("#!lua flags=allow-cross-slot-keys\n"));
        assert!(KEEP_SHARD
            .body
            .starts_with("#!lua flags=allow-cross-slot-keys\n"));
        for s in [&*RENEW_SHARD, &*REPAIR_SHARD, &*KEEP_SHARD] {
            assert!(s
                .body
                .contains("local K, ko, A, ao = ARGV, 1, ARGV, 1 + nk"));
        }
        for s in [&*RENEW, &*REPAIR] {
            assert!(!s.body.contains("#!lua") && s.body.contains("hget_error(held)"));
        }
        assert!(!KEEP.body.contains("#!lua") && KEEP.body.contains("hget_error(at)"));
        assert_ne!(KEEP.sha(), KEEP_SHARD.sha());
        assert_ne!(RENEW.sha(), RENEW_SHARD.sha());
    }

    #[test]
    fn durations_are_whole_milliseconds_at_least_one() {
        assert_eq!(ms(Duration::ZERO), 1);
        assert_eq!(ms(Duration::from_micros(1_500)), 1);
        assert_eq!(ms(Duration::from_secs(3)), 3_000);
        assert_eq!(ms(Duration::MAX), u64::MAX);
    }
}
