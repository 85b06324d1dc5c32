//! Fenced writes: the resource's half of a fencing token.
//!
//! A lock holder passes [`LockGuard::fencing_token`](crate::LockGuard::fencing_token)
//! with every write, and the resource accepts a write only with a token at
//! least as large as the largest it has seen for that lock name
//! ([`admits`]), then records the new largest. A holder that was paused
//! past its lease (a GC pause, a stopped VM) and writes after a later
//! holder did is rejected there, whatever it believes.
//!
//! [`Fence`] does it on a resource kept in Redis: one script reads the
//! largest token, checks it, writes the value and raises the largest, all
//! on the resource's Redis, which need not be one of the lock's nodes.
//! Other stores apply [`admits`] in a transaction of their own (the
//! `fenced_sqlite` example does it in SQL).
//!
//! A token only protects a resource that checks it: writes that do not go
//! through the fence are not fenced.

use std::time::Duration;

use redis::aio::ConnectionLike;
use redis::{ToRedisArgs, Value};

use crate::error::{Error, NodeError, NodeErrorKind};
use crate::keys::check_name;
use crate::scripts::{ms, FENCED_SET};

/// Whether a write with `token` is admitted after the largest token seen,
/// `largest` (`None` when no token was seen): `token >= largest`. An equal
/// token is admitted, so the same holder may write several times.
///
/// The rule of [`Fence::set`], for stores other than Redis: check it and
/// record the new largest in the same transaction as the write.
///
/// ```
/// use quorumlock::fenced::admits;
///
/// assert!(admits(None, 1));
/// assert!(admits(Some(7), 7));
/// assert!(admits(Some(7), 8));
/// assert!(!admits(Some(7), 6));
/// ```
#[must_use]
pub const fn admits(largest: Option<u64>, token: u64) -> bool {
    match largest {
        None => true,
        Some(largest) => token >= largest,
    }
}

/// What a fenced write did.
#[must_use = "a rejected write did not happen"]
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FencedWrite {
    /// The token was admitted: the value is written, and the token is the
    /// largest the fence has seen.
    Written,
    /// A larger token was seen before: nothing was written.
    Rejected {
        /// The largest token the fence had seen.
        largest: u64,
    },
}

impl FencedWrite {
    /// Whether the value was written.
    #[must_use]
    pub const fn is_written(self) -> bool {
        matches!(self, Self::Written)
    }
}

/// The largest fencing token a resource has seen for one lock name, kept in
/// a Redis key (a string of decimal digits, without expiry).
///
/// The fence lives on the resource's Redis, next to the keys it guards.
/// Deleting its key forgets the largest token: the next write is then
/// admitted whatever its token.
///
/// ```no_run
/// use quorumlock::fenced::{Fence, FencedWrite};
///
/// # async fn demo(
/// #     locks: quorumlock::LockManager,
/// #     mut db: quorumlock::redis::aio::MultiplexedConnection,
/// # ) -> Result<(), quorumlock::Error> {
/// let guard = locks.lock("invoice:7").await?;
/// let fence = Fence::for_lock("invoice:7")?;
/// // The resource key carries the lock's hash tag: the same cluster slot.
/// let key = "invoice:{invoice:7}:total";
/// match fence.set(&mut db, guard.fencing_token(), key, 120).await? {
///     FencedWrite::Written => {}
///     FencedWrite::Rejected { largest } => {
///         eprintln!("a later holder (token {largest}) has written: stop");
///     }
/// }
/// guard.release().await?;
/// # Ok(())
/// # }
/// # fn main() { let _ = demo; }
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Fence {
    key: String,
}

impl Fence {
    /// The fence of the lock `lock_name`, at the key
    /// `quorumlock:fenced:{<lock_name>}`. The name is the key's hash tag:
    /// resource keys that carry the same `{<lock_name>}` live in its Redis
    /// Cluster slot, so that one script may touch both.
    ///
    /// ```
    /// use quorumlock::fenced::Fence;
    ///
    /// let fence = Fence::for_lock("orders:42")?;
    /// assert_eq!(fence.key(), "quorumlock:fenced:{orders:42}");
    /// # Ok::<(), quorumlock::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for a name a lock could not have (empty,
    /// longer than [`MAX_NAME_LEN`](crate::MAX_NAME_LEN), or with a brace
    /// or a control character).
    pub fn for_lock(lock_name: &str) -> Result<Self, Error> {
        check_name(lock_name)?;
        Ok(Self {
            key: format!("quorumlock:fenced:{{{lock_name}}}"),
        })
    }

    /// A fence kept at a key of the caller's choosing. On a Redis Cluster,
    /// give it the hash tag of the resource keys it guards.
    ///
    /// ```
    /// use quorumlock::fenced::Fence;
    ///
    /// let fence = Fence::at("billing:{acct:9}:fence");
    /// assert_eq!(fence.key(), "billing:{acct:9}:fence");
    /// ```
    pub fn at(key: impl Into<String>) -> Self {
        Self { key: key.into() }
    }

    /// The fence's key.
    #[must_use]
    pub fn key(&self) -> &str {
        &self.key
    }

    /// SETs `key` to `value` if `token` is at least the largest token the
    /// fence has seen ([`admits`]), and records `token` as the largest: one
    /// script call on `conn`, the resource's Redis. The value has no expiry
    /// (a previous one is cleared, as SET does); see
    /// [`Fence::set_expiring`].
    ///
    /// On a Redis Cluster connection, `key` must be in the fence's slot
    /// (for [`Fence::for_lock`], carry the tag `{<lock_name>}`), or Redis
    /// refuses the call.
    ///
    /// # Errors
    ///
    /// - [`Error::InvalidInput`] when `key` is the fence's own key, or
    ///   `value` is not one Redis argument (a list, say); nothing is sent.
    /// - [`Error::Resource`] when the call fails: a fence key of another
    ///   type ([`NodeErrorKind::WrongType`]) or holding no token, or another
    ///   error reply, with nothing written; a timeout or a broken connection
    ///   ([`Error::is_unavailable`]), after which the write may or may not
    ///   have run.
    ///
    /// # Cancel safety
    ///
    /// The script runs on the server entirely or not at all: dropping the
    /// future leaves either the write with its new largest token, or
    /// nothing. Which one is not known; sending the write again with the
    /// same token is safe, since an equal token is admitted.
    pub async fn set<C>(
        &self,
        conn: &mut C,
        token: u64,
        key: &str,
        value: impl ToRedisArgs + Send + Sync,
    ) -> Result<FencedWrite, Error>
    where
        C: ConnectionLike + Send,
    {
        self.write(conn, token, key, &value, None).await
    }

    /// As [`Fence::set`], the value expiring after `expiry` (whole
    /// milliseconds). The fence itself never expires.
    ///
    /// # Errors
    ///
    /// As [`Fence::set`], and [`Error::InvalidInput`] for a zero `expiry`.
    ///
    /// # Cancel safety
    ///
    /// As [`Fence::set`]: the script runs entirely or not at all.
    pub async fn set_expiring<C>(
        &self,
        conn: &mut C,
        token: u64,
        key: &str,
        value: impl ToRedisArgs + Send + Sync,
        expiry: Duration,
    ) -> Result<FencedWrite, Error>
    where
        C: ConnectionLike + Send,
    {
        if expiry.is_zero() {
            return Err(Error::invalid(
                "expiry",
                "a zero expiry would delete the value at once",
            ));
        }
        self.write(conn, token, key, &value, Some(expiry)).await
    }

    /// The largest token the fence has seen, `None` if none.
    ///
    /// # Errors
    ///
    /// [`Error::Resource`] when the read fails, or the fence key is of
    /// another type ([`NodeErrorKind::WrongType`]) or holds no token.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: it only reads.
    pub async fn largest<C>(&self, conn: &mut C) -> Result<Option<u64>, Error>
    where
        C: ConnectionLike + Send,
    {
        let got: Option<Vec<u8>> = redis::cmd("GET")
            .arg(&self.key)
            .query_async(conn)
            .await
            .map_err(|e| self.failed(&e))?;
        got.map(|raw| {
            parse_token(&raw).ok_or_else(|| {
                self.error(NodeErrorKind::Server, "the fence holds no fencing token")
            })
        })
        .transpose()
    }

    async fn write<C>(
        &self,
        conn: &mut C,
        token: u64,
        key: &str,
        value: &(impl ToRedisArgs + Send + Sync),
        expiry: Option<Duration>,
    ) -> Result<FencedWrite, Error>
    where
        C: ConnectionLike + Send,
    {
        if key == self.key {
            return Err(Error::invalid(
                "resource key",
                format!("{key:?} is the fence's own key"),
            ));
        }
        let value = match value.to_redis_args().as_mut_slice() {
            [one] => std::mem::take(one),
            many => {
                return Err(Error::invalid(
                    "value",
                    format!("{} Redis arguments where SET takes one", many.len()),
                ))
            }
        };
        let expiry = expiry.map_or_else(String::new, |e| ms(e).to_string());
        let call = |send_body: bool| {
            let mut cmd = FENCED_SET.header(send_body, 2, self.key.len() + key.len());
            cmd.arg(&self.key)
                .arg(key)
                .arg(token)
                .arg(value.as_slice())
                .arg(&expiry);
            cmd
        };
        // As `EVALSHA` first; `NOSCRIPT` means nothing ran, so the same
        // call goes once more as `EVAL`, which caches the script.
        let reply = match call(false).query_async::<Value>(conn).await {
            Err(e) if is_no_script(&e) => call(true).query_async(conn).await,
            other => other,
        }
        .map_err(|e| self.failed(&e))?;
        parse_reply(&reply).ok_or_else(|| {
            self.error(
                NodeErrorKind::Server,
                format!("unexpected reply: {reply:?}"),
            )
        })
    }

    fn failed(&self, e: &redis::RedisError) -> Error {
        let e = NodeError::from_redis(e);
        self.error(e.kind, e.message)
    }

    fn error(&self, kind: NodeErrorKind, message: impl Into<String>) -> Error {
        Error::Resource {
            fence: self.key.clone(),
            kind,
            message: message.into(),
        }
    }
}

fn is_no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// A token as the script and the fence key hold it: decimal digits.
fn parse_token(raw: &[u8]) -> Option<u64> {
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// What `fenced_set.lua` answered: `{1}`, or `{0, largest}`.
fn parse_reply(reply: &Value) -> Option<FencedWrite> {
    let Value::Array(items) = reply else {
        return None;
    };
    match items.as_slice() {
        [Value::Int(1)] => Some(FencedWrite::Written),
        [Value::Int(0), Value::BulkString(largest)] => Some(FencedWrite::Rejected {
            largest: parse_token(largest)?,
        }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn admits_a_token_at_least_the_largest() {
        assert!(admits(None, 0));
        assert!(admits(None, u64::MAX));
        assert!(admits(Some(0), 0));
        assert!(admits(Some(41), 41), "an equal token writes again");
        assert!(admits(Some(41), 42));
        assert!(!admits(Some(42), 41));
        assert!(!admits(Some(u64::MAX), u64::MAX - 1));
        assert!(admits(Some(u64::MAX), u64::MAX));
    }

    #[test]
    fn a_fence_for_a_lock_is_tagged_with_its_name() {
        let fence = Fence::for_lock("orders:42").expect("a valid name");
        assert_eq!(fence.key(), "quorumlock:fenced:{orders:42}");
        assert_eq!(Fence::at("mine").key(), "mine");
    }

    #[test]
    fn a_fence_for_a_bad_lock_name_is_invalid_input() {
        let long = "x".repeat(crate::MAX_NAME_LEN + 1);
        for name in ["", "a{b", "a}b", "a\nb", long.as_str()] {
            let err = Fence::for_lock(name).expect_err("an invalid name");
            assert!(
                matches!(
                    err,
                    Error::InvalidInput {
                        what: "lock name",
                        ..
                    }
                ),
                "{name:?}: {err:?}"
            );
        }
    }

    #[test]
    fn replies_are_read_strictly() {
        let int = Value::Int;
        let bulk = |s: &str| Value::BulkString(s.as_bytes().to_vec());
        assert_eq!(
            parse_reply(&Value::Array(vec![int(1)])),
            Some(FencedWrite::Written)
        );
        assert_eq!(
            parse_reply(&Value::Array(vec![int(0), bulk("18446744073709551615")])),
            Some(FencedWrite::Rejected { largest: u64::MAX })
        );
        for bad in [
            Value::Int(1),
            Value::Array(vec![]),
            Value::Array(vec![int(0)]),
            Value::Array(vec![int(0), bulk("x")]),
            Value::Array(vec![int(0), bulk("18446744073709551616")]),
            Value::Array(vec![int(2)]),
        ] {
            assert_eq!(parse_reply(&bad), None, "{bad:?}");
        }
    }
}
