//! One command for every member of a fan-out: the calls of one acquire or
//! release fan-out send the same script, over the same key names, with the
//! same arguments, to every member. The first call builds the `EVALSHA`
//! command and keeps it in its claim ([`Shared`]); the others send that
//! one. Building a command per member (the header, each name and argument
//! written into a new command) was a third of the client instructions by
//! which a lock + unlock cycle exceeded the limit's (callgrind, issue 35).
//!
//! A call sends the kept command only when it is the one it would have
//! built: the kept one records what it was built from (the script, the key
//! names, the holder and the other arguments), and a call whose own differ
//! in anything builds its own. Sharing changes what a call costs, never
//! what it sends.

use std::sync::{Arc, OnceLock};

use super::script_keys::{Names, Part};
use crate::keys::Keys;
use crate::scripts::Lua;

/// The most numeric arguments of a shared call (a release's four).
const MOST: usize = 4;

/// The arguments of a call about one holder: its holder id, then numbers
/// (a lease, a count, a token). What the call writes after its key names,
/// and what a kept command is compared on: made once per call, with no
/// allocation.
#[derive(Debug, Clone)]
pub(crate) struct HolderArgs {
    holder: Arc<str>,
    numbers: [u64; MOST],
    len: usize,
}

impl HolderArgs {
    /// `holder`, then `numbers` (at most four).
    pub(crate) fn new<const N: usize>(holder: Arc<str>, numbers: [u64; N]) -> Self {
        const { assert!(N <= MOST) };
        let mut all = [0; MOST];
        all[..N].copy_from_slice(&numbers);
        Self {
            holder,
            numbers: all,
            len: N,
        }
    }

    /// Writes the arguments into `cmd`.
    pub(crate) fn write(&self, cmd: &mut redis::Cmd) {
        cmd.arg(&*self.holder);
        for n in &self.numbers[..self.len] {
            cmd.arg(*n);
        }
    }

    fn same(&self, other: &Self) -> bool {
        (Arc::ptr_eq(&self.holder, &other.holder) || self.holder == other.holder)
            && self.numbers[..self.len] == other.numbers[..other.len]
    }
}

/// A kept command and what it was built from: the script (its address:
/// each script is a static of its own), the names (the lock's keys, kept
/// alive here so that their address names them alone, and which of them),
/// the arguments.
struct Kept {
    script: usize,
    keys: Arc<Keys>,
    parts: &'static [Part],
    args: HolderArgs,
    cmd: Arc<redis::Cmd>,
}

/// The `EVALSHA` command a claim's fan-out shares, kept by its first call.
/// A clone (a claim made from another) starts empty.
#[derive(Default)]
pub(crate) struct Shared(OnceLock<Kept>);

impl Clone for Shared {
    fn clone(&self) -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Shared {
    /// The `EVALSHA` command of `script` over `names` with `args`: the
    /// kept one, built here if none is kept yet; `None` when the kept one
    /// was built from anything else, or the names are several locks'
    /// (never kept), for the call to build its own.
    pub(crate) fn command(
        &self,
        script: &'static Lua,
        names: &Names,
        args: &HolderArgs,
    ) -> Option<Arc<redis::Cmd>> {
        let Names::One(keys, parts) = names else {
            return None;
        };
        let script_at = std::ptr::from_ref(script) as usize;
        let kept = self.0.get_or_init(|| {
            let mut cmd = names.call(script, false);
            args.write(&mut cmd);
            Kept {
                script: script_at,
                keys: Arc::clone(keys),
                parts,
                args: args.clone(),
                cmd: Arc::new(cmd),
            }
        });
        let same = kept.script == script_at
            && Arc::ptr_eq(&kept.keys, keys)
            && std::ptr::eq(kept.parts, *parts)
            && kept.args.same(args);
        same.then(|| Arc::clone(&kept.cmd))
    }
}

/// The command a call sends: its fan-out's, or its own.
pub(crate) enum Command<'a> {
    Kept(&'a redis::Cmd),
    Own(redis::Cmd),
}

impl std::ops::Deref for Command<'_> {
    type Target = redis::Cmd;

    fn deref(&self) -> &redis::Cmd {
        match self {
            Self::Kept(c) => c,
            Self::Own(c) => c,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::script_keys;
    use crate::scripts::{ACQUIRE, RELEASE};

    /// What a call builds for itself.
    fn own(script: &Lua, names: &Names, args: &HolderArgs) -> Vec<u8> {
        let mut c = names.call(script, false);
        args.write(&mut c);
        c.get_packed_command()
    }

    /// A call sends the kept command only when it would have built the
    /// same: another script, other names or other arguments (holder or
    /// number) get `None` and build their own. A clone of the claim keeps
    /// nothing.
    #[test]
    fn a_kept_command_is_sent_only_by_calls_that_would_build_it() {
        let keys = Arc::new(Keys::new("p:", "a"));
        let other = Arc::new(Keys::new("p:", "b"));
        let holder: Arc<str> = "holder".into();
        let args = |n: u64| HolderArgs::new(Arc::clone(&holder), [10_000, n]);
        let shared = Shared::default();
        let names = script_keys::acquire(&keys);
        let first = shared
            .command(&ACQUIRE, &names, &args(1))
            .expect("the first call builds and keeps it");
        assert_eq!(
            first.get_packed_command(),
            own(&ACQUIRE, &names, &args(1)),
            "the kept command is the one the call would build"
        );
        // The same call on another member: the same command, not a copy.
        let again = shared.command(&ACQUIRE, &script_keys::acquire(&keys), &args(1));
        assert!(again.is_some_and(|c| Arc::ptr_eq(&c, &first)));
        // A holder equal in text is the same argument.
        let same_text = HolderArgs::new("holder".into(), [10_000, 1]);
        assert!(shared.command(&ACQUIRE, &names, &same_text).is_some());
        let differ: Vec<(&'static Lua, Names, HolderArgs)> = vec![
            (&RELEASE, script_keys::acquire(&keys), args(1)),
            (&ACQUIRE, script_keys::acquire(&other), args(1)),
            (&ACQUIRE, script_keys::release(&keys), args(1)),
            (&ACQUIRE, script_keys::acquire(&keys), args(2)),
            (
                &ACQUIRE,
                script_keys::acquire(&keys),
                HolderArgs::new("another".into(), [10_000, 1]),
            ),
            (
                &ACQUIRE,
                script_keys::acquire(&keys),
                HolderArgs::new(Arc::clone(&holder), [10_000, 1, 0]),
            ),
            (
                &ACQUIRE,
                Names::Many(vec!["p:{a}".into(), "p:fence".into()]),
                args(1),
            ),
        ];
        for (script, names, list) in &differ {
            assert!(
                shared.command(script, names, list).is_none(),
                "{list:?}: not the kept command"
            );
        }
        let clone = shared.clone();
        let fresh = clone
            .command(&ACQUIRE, &names, &args(2))
            .expect("a clone keeps its own");
        assert_eq!(fresh.get_packed_command(), own(&ACQUIRE, &names, &args(2)));
    }
}
