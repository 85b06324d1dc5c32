//! Who holds a lock: each acquisition its own owner by default; an explicit
//! shared handle, or a scope, for re-entry.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

static NEXT_EXPLICIT: AtomicU64 = AtomicU64::new(1);
static NEXT_HOLD: AtomicU64 = AtomicU64::new(1);

tokio::task_local! {
    /// The owner that acquisitions inside [`Owner::scope`] default to.
    static SCOPE: Owner;
}

/// A lock owner: acquisitions by the same owner re-enter its hold.
///
/// By default every acquisition is its own owner, so two futures never
/// share a hold by accident: two `lock("x")` calls joined in one task, or
/// run by `for_each_concurrent`, exclude each other like two tasks do.
/// Re-entry is explicit or scoped:
///
/// - create an `Owner` with [`crate::LockManager::new_owner`] and pass it to
///   [`crate::LockRequest::owner`] (clones are the same owner, and can move
///   to other tasks);
/// - or run code under [`Owner::scope`] (or [`crate::LockGuard::run`], which
///   scopes its closure to the guard's owner): acquisitions inside it that
///   name no owner act as that owner.
///
/// # Examples
///
/// ```no_run
/// # async fn demo(locks: quorumlock::LockManager) -> Result<(), quorumlock::Error> {
/// let me = locks.new_owner();
/// let outer = locks.request("account:7").owner(&me).acquire().await?;
/// // Same owner: re-enters at once instead of waiting for itself.
/// let inner = me.scope(locks.lock("account:7")).await?;
/// assert_eq!(inner.hold_count(), 2);
/// inner.release().await?;
/// outer.release().await?;
/// # Ok(())
/// # }
/// # fn main() { let _ = demo; }
/// ```
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Owner {
    id: Arc<str>,
}

impl Owner {
    pub(crate) fn explicit(client_id: &str) -> Self {
        let n = NEXT_EXPLICIT.fetch_add(1, Ordering::Relaxed);
        Self {
            id: suffixed(client_id, ":owner-", n, None),
        }
    }

    /// The owner of the enclosing [`Owner::scope`], if it belongs to the
    /// client `client_id`.
    pub(crate) fn scoped(client_id: &str) -> Option<Self> {
        SCOPE
            .try_with(|o| {
                let own =
                    o.id.strip_prefix(client_id)
                        .is_some_and(|rest| rest.starts_with(':'));
                own.then(|| o.clone())
            })
            .ok()
            .flatten()
    }

    /// Runs `fut` with this owner as the default owner of the acquisitions
    /// it makes through the manager that created the owner: they re-enter
    /// this owner's holds instead of waiting for them.
    ///
    /// # Cancel safety
    ///
    /// Dropping the returned future drops `fut`; the scope ends with it.
    pub async fn scope<F: std::future::Future>(&self, fut: F) -> F::Output {
        SCOPE.scope(self.clone(), fut).await
    }

    /// The owner's id, `host@pid#client:owner-N`. Each hold of the owner is written
    /// into the lock hash under this id plus a suffix unique to the hold (see
    /// [`crate::LockGuard::holder_id`]).
    #[must_use]
    pub fn id(&self) -> &str {
        &self.id
    }

    pub(crate) fn shared_id(&self) -> Arc<str> {
        Arc::clone(&self.id)
    }

    /// The id of a new hold of this owner: `owner-id:hold-N@unix-ms`, the
    /// suffix telling when the hold was taken (see [`HolderInfo`]).
    pub(crate) fn holder_id(&self) -> Arc<str> {
        let n = NEXT_HOLD.fetch_add(1, Ordering::Relaxed);
        let since = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX));
        suffixed(&self.id, ":hold-", n, Some(since))
    }
}

impl Owner {
    /// The id of one acquisition's place in a lock's queue:
    /// `owner-id:wait-N`. It starts with the client id, so a release
    /// message naming it is recognised by the manager that made it.
    pub(crate) fn waiter_id(&self) -> Arc<str> {
        Self::waiter_id_of(&self.id)
    }

    /// [`Owner::waiter_id`] of the owner whose id is `owner_id`.
    pub(crate) fn waiter_id_of(owner_id: &str) -> Arc<str> {
        let n = NEXT_HOLD.fetch_add(1, Ordering::Relaxed);
        suffixed(owner_id, ":wait-", n, None)
    }
}

/// `{base}{tag}{n}`, then `@{since}` if given, written into a buffer on
/// the stack and copied once into its `Arc` (this runs on every
/// acquisition and every attempt: one allocation, no formatting).
fn suffixed(base: &str, tag: &str, n: u64, since: Option<u64>) -> Arc<str> {
    let mut id = IdBuf::default();
    id.push(base.as_bytes());
    id.push(tag.as_bytes());
    id.push_number(n);
    if let Some(since) = since {
        id.push(b"@");
        id.push_number(since);
    }
    id.into_arc()
}

/// An id being written: on the stack while it fits, else on the heap.
struct IdBuf {
    stack: [u8; 192],
    len: usize,
    heap: Vec<u8>,
}

impl Default for IdBuf {
    fn default() -> Self {
        Self {
            stack: [0; 192],
            len: 0,
            heap: Vec::new(),
        }
    }
}

impl IdBuf {
    fn push(&mut self, bytes: &[u8]) {
        let end = self.len + bytes.len();
        match self.stack.get_mut(self.len..end) {
            Some(room) if self.heap.is_empty() => {
                room.copy_from_slice(bytes);
                self.len = end;
            }
            _ => {
                if self.heap.is_empty() {
                    self.heap.extend_from_slice(&self.stack[..self.len]);
                }
                self.heap.extend_from_slice(bytes);
            }
        }
    }

    /// `n` in decimal.
    fn push_number(&mut self, mut n: u64) {
        let mut digits = [0u8; 20];
        let mut at = digits.len();
        loop {
            at -= 1;
            // A digit: `n % 10` is below 10.
            digits[at] = b'0' + (n % 10) as u8;
            n /= 10;
            if n == 0 {
                break;
            }
        }
        self.push(&digits[at..]);
    }

    fn into_arc(self) -> Arc<str> {
        let bytes = if self.heap.is_empty() {
            &self.stack[..self.len]
        } else {
            &self.heap[..]
        };
        // Only `str`s and ASCII digits were written: always `Ok`.
        match std::str::from_utf8(bytes) {
            Ok(id) => id.into(),
            Err(_) => String::from_utf8_lossy(bytes).into(),
        }
    }
}

/// Where and since when a hold was taken, read from its holder id (as
/// [`LockStatus::holder`](crate::LockStatus::holder) and
/// [`LockGuard::holder_id`](crate::LockGuard::holder_id) show it): the
/// host and process of the manager that took it, and the wall-clock time
/// of the attempt that won it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct HolderInfo {
    /// The host name of the holder's machine.
    pub host: String,
    /// The holder's process id.
    pub pid: u32,
    /// When the hold was taken, on the holder's wall clock.
    pub since: SystemTime,
}

impl HolderInfo {
    /// Reads a holder id written by this crate (`host@pid#id:owner-N:hold-M@ms`);
    /// `None` for any other string.
    ///
    /// # Examples
    ///
    /// ```
    /// use quorumlock::HolderInfo;
    ///
    /// let info = HolderInfo::parse("web-3@4242#00ff:owner-1:hold-7@1700000000000").unwrap();
    /// assert_eq!((info.host.as_str(), info.pid), ("web-3", 4242));
    /// assert!(HolderInfo::parse("someone-else").is_none());
    /// ```
    #[must_use]
    pub fn parse(holder_id: &str) -> Option<Self> {
        let (client, rest) = holder_id.split_once('#')?;
        let (host, pid) = client.rsplit_once('@')?;
        let (hold, ms) = rest.rsplit_once('@')?;
        if !hold.contains(":hold-") || host.is_empty() {
            return None;
        }
        Some(Self {
            host: host.to_owned(),
            pid: pid.parse().ok()?,
            since: UNIX_EPOCH.checked_add(Duration::from_millis(ms.parse().ok()?))?,
        })
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Owner").field(&&*self.id).finish()
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.id)
    }
}

/// A new client id, `host@pid#random`: the host and process let
/// [`HolderInfo`] tell operators where a holder runs; 64 random bits keep
/// two managers of one process apart.
pub(crate) fn new_client_id() -> String {
    #[allow(clippy::cast_possible_truncation)]
    let random = crate::rng::bits128() as u64;
    format!("{}@{}#{random:016x}", host(), std::process::id())
}

/// This machine's host name, with the characters a client id uses as
/// separators replaced, at most 64 bytes; `unknown-host` if it has none.
fn host() -> String {
    let name = nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .unwrap_or_default();
    let clean: String = name
        .chars()
        .filter(|c| !c.is_control())
        .map(|c| {
            if matches!(c, '@' | '#' | ':' | ' ') {
                '-'
            } else {
                c
            }
        })
        .take(64)
        .collect();
    if clean.is_empty() {
        "unknown-host".to_owned()
    } else {
        clean
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn scopes_give_their_owner_to_their_own_client_only() {
        let a = Owner::explicit("c");
        assert_eq!(Owner::scoped("c"), None);
        let inside = a.scope(async { Owner::scoped("c") }).await;
        assert_eq!(inside, Some(a.clone()));
        let other_client = a.scope(async { Owner::scoped("d") }).await;
        assert_eq!(other_client, None);
        let prefix_only = a.scope(async { Owner::scoped("") }).await;
        assert_eq!(prefix_only, None);
    }

    #[test]
    fn explicit_owners_are_unique_and_clones_equal() {
        let a = Owner::explicit("c");
        let b = Owner::explicit("c");
        assert_ne!(a, b);
        assert_eq!(a.clone(), a);
    }

    #[test]
    fn ids_are_written_as_formatting_would() {
        let long = "h".repeat(300);
        for base in ["", "host@1#c", long.as_str()] {
            for (n, since) in [(0, None), (7, Some(0)), (u64::MAX, Some(1_700_000_000_123))] {
                let want = match since {
                    Some(s) => format!("{base}:hold-{n}@{s}"),
                    None => format!("{base}:hold-{n}"),
                };
                assert_eq!(&*suffixed(base, ":hold-", n, since), want);
            }
        }
    }

    #[test]
    fn a_holder_id_tells_host_pid_and_since() {
        let client = new_client_id();
        let owner = Owner::explicit(&client);
        let before = SystemTime::now() - Duration::from_millis(1);
        let holder = owner.holder_id();
        let info = HolderInfo::parse(&holder).expect("a holder id of this crate");
        assert_eq!(info.pid, std::process::id());
        assert!(!info.host.is_empty() && !info.host.contains(['@', '#', ':']));
        assert!(info.since >= before && info.since <= SystemTime::now());
        assert_eq!(Owner::scoped(&client), None);
        for other in [
            "",
            "x",
            "a@b#c",
            "h@12#id:owner-1:hold-2@notms",
            "@1#c:hold-1@5",
        ] {
            assert_eq!(HolderInfo::parse(other), None, "{other}");
        }
    }
}
