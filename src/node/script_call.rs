//! One script call on one node: `EVAL` or `EVALSHA`, and when it may be
//! sent again.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionManager;

use crate::error::NodeError;
use crate::scripts;

pub(super) fn map_err(e: &redis::RedisError) -> NodeError {
    NodeError::from_redis(e)
}

/// Whether the connection broke, so that the manager reconnects and a second
/// try may reach the node.
pub(super) fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// One script call on one node, as `EVAL` or `EVALSHA` depending on what the
/// node is known to have. It is sent again only when that cannot reorder it
/// (see the `scripts` module): once as `EVAL` after `NOSCRIPT`, which means
/// nothing ran, and, for [`Resend::AfterBrokenConnection`], once after a
/// broken connection.
pub(super) struct ScriptCall {
    pub(super) conn: ConnectionManager,
    /// Per one-shot script: the node is known to have it.
    pub(super) loaded: Arc<[AtomicBool; scripts::ONE_SHOT]>,
}

/// Whether a script call may be sent again after the connection broke.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Resend {
    /// Never: acquire (it could land behind its own release or rollback)
    /// and force-release (it could delete a lock taken meanwhile).
    Never,
    /// Once, on the new connection: release and raise-fence only ever lower
    /// or delete what this hold owns, or raise a counter, so a late copy is
    /// harmless; without the second try, the first release to a node that
    /// restarted would fail on the dead connection and leave the key behind.
    AfterBrokenConnection,
}

impl ScriptCall {
    pub(super) async fn run<T: redis::FromRedisValue>(
        mut self,
        script: &scripts::Lua,
        keys: &[&str],
        resend: Resend,
        args: impl Fn(&mut redis::Cmd),
    ) -> Result<T, NodeError> {
        let mut tries = if resend == Resend::Never { 1 } else { 2 };
        let mut no_script_resent = false;
        loop {
            tries -= 1;
            let loaded = &self.loaded[script.id];
            let send_body = !loaded.load(Ordering::Acquire);
            let mut cmd = script.call(send_body, keys);
            args(&mut cmd);
            match cmd.query_async(&mut self.conn).await {
                Ok(v) => {
                    loaded.store(true, Ordering::Release);
                    return Ok(v);
                }
                Err(e) => {
                    forget_scripts(&self.loaded, &e);
                    // NOSCRIPT means nothing ran: sending the same call again
                    // as EVAL cannot reorder it behind anything, whatever the
                    // script. The node restarted or its scripts were flushed
                    // without this connection seeing it.
                    if no_script(&e) && !send_body && !no_script_resent {
                        no_script_resent = true;
                        tries += 1;
                        continue;
                    }
                    if !(broken(&e) && tries > 0) {
                        return Err(map_err(&e));
                    }
                }
            }
        }
    }
}

/// Whether the node answered that it does not have the script.
pub(super) fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// After an error that means the node may have restarted (a broken
/// connection: the manager reconnects, perhaps to a new server) or lost its
/// scripts (`NOSCRIPT`), forgets which scripts the node has, so the next
/// call of each sends its body. Every call on the connection goes through
/// here, whichever call meets the break first: renewal, status or a script.
/// A reconnect that no call sees (redis-rs reconnects on its own after a
/// RESP3 disconnection push) is caught by the `NOSCRIPT` resend instead.
pub(super) fn forget_scripts(loaded: &[AtomicBool; scripts::ONE_SHOT], e: &redis::RedisError) {
    if no_script(e) || broken(e) {
        for l in loaded {
            l.store(false, Ordering::Release);
        }
    }
}
