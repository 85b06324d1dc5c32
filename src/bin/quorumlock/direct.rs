//! Plain connections to the nodes, for the reads the library does not make
//! (a lock's queue, a prefix scan): one connection per node, opened on
//! first use and again after a failure, every round trip bounded.

use std::time::Duration;

use quorumlock::redis::aio::MultiplexedConnection;
use quorumlock::redis::{self, AsyncConnectionConfig, FromRedisValue, Pipeline};

/// How long a node has to accept a connection or answer one round trip
/// before it counts as down for this read.
pub const NODE_TIMEOUT: Duration = Duration::from_secs(3);

/// One node, reached directly.
pub struct DirectNode {
    /// Index in `--nodes`.
    pub index: usize,
    /// Address, without credentials.
    pub addr: String,
    client: redis::Client,
    conn: Option<MultiplexedConnection>,
}

impl DirectNode {
    /// Node `index` at `addr` (for messages), reached through `client`.
    pub fn new(index: usize, addr: String, client: redis::Client) -> Self {
        Self {
            index,
            addr,
            client,
            conn: None,
        }
    }

    /// Sends `pipe` and reads its replies as `T`; the error says why, in
    /// words (never with the URL, which may carry a password). A failed
    /// round trip closes the connection: the next one opens a new one.
    pub async fn query<T: FromRedisValue>(&mut self, pipe: &Pipeline) -> Result<T, String> {
        let conn = self.connection().await?;
        match tokio::time::timeout(NODE_TIMEOUT, pipe.query_async::<T>(conn)).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(e)) => {
                if !matches!(e.kind(), redis::ErrorKind::Server(_)) {
                    self.conn = None;
                }
                Err(e.to_string())
            }
            Err(_) => {
                self.conn = None;
                Err(format!("no answer within {NODE_TIMEOUT:?}"))
            }
        }
    }

    async fn connection(&mut self) -> Result<&mut MultiplexedConnection, String> {
        if self.conn.is_none() {
            let config = AsyncConnectionConfig::new()
                .set_connection_timeout(Some(NODE_TIMEOUT))
                .set_response_timeout(Some(NODE_TIMEOUT));
            let connect = self
                .client
                .get_multiplexed_async_connection_with_config(&config);
            let conn = match tokio::time::timeout(NODE_TIMEOUT, connect).await {
                Ok(Ok(c)) => c,
                Ok(Err(e)) => return Err(format!("cannot connect: {e}")),
                Err(_) => return Err(format!("cannot connect within {NODE_TIMEOUT:?}")),
            };
            self.conn = Some(conn);
        }
        self.conn.as_mut().ok_or_else(|| "not connected".to_owned())
    }
}

/// Parses one reply of a pipeline read with `ignore_errors`: a server
/// error (a key of another type) or a reply of another shape is `None`.
pub fn reply<T: FromRedisValue>(value: redis::Value) -> Option<T> {
    match value {
        redis::Value::ServerError(_) => None,
        v => redis::from_redis_value(v).ok(),
    }
}
