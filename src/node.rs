//! One Redis master: its connection, timeouts and script calls.
//!
//! The coordinator talks to nodes through the private [`NodeOps`] trait so
//! that it can be tested against fakes that stall, fail or grant partially.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionAddr, IntoConnectionInfo, Value};

use crate::admission::{maxmemory_policy, Admission, ServerInfo};
use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure};
use crate::quorum::Grant;
use crate::scripts;

/// The keys of one lock: `<prefix>{<name>}`, its release channel, and the
/// node's one fence counter `<prefix>fence`, shared by every lock so that
/// counters do not grow with the number of lock names.
#[derive(Debug)]
pub(crate) struct Keys {
    pub(crate) name: Arc<str>,
    pub(crate) lock: String,
    pub(crate) fence: String,
    pub(crate) channel: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        let lock = format!("{prefix}{{{name}}}");
        Self {
            name: name.into(),
            fence: format!("{prefix}fence"),
            channel: format!("{lock}:released"),
            lock,
        }
    }
}

/// How a node answered a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Released {
    /// Deleted, and waiters notified.
    Deleted,
    /// The hold count was lowered; the lock stays.
    Lowered,
    /// No key: expired, or the node lost it.
    Missing,
    /// Another owner holds it.
    OtherOwner,
}

/// How a node answered one lock of a renewal batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Renewed {
    /// Our owner held it; extended.
    Extended,
    /// The key was missing and has been re-created for us (repair only).
    Repaired,
    /// The key is missing (renewal only; nothing was created).
    Missing,
    /// Another owner holds it.
    Conflict,
    /// The key holds another type.
    WrongType,
}

/// One lock of a renewal batch.
#[derive(Debug, Clone)]
pub(crate) struct RenewItem {
    pub(crate) keys: Arc<Keys>,
    pub(crate) owner: Arc<str>,
    pub(crate) count: u32,
    pub(crate) token: u64,
    pub(crate) lease: Duration,
}

/// What one node holds for one lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct NodeLockState {
    /// The owner id holding the lock, if any.
    pub holder: Option<String>,
    /// The holder's hold count (0 when free).
    pub hold_count: u32,
    /// Remaining time of the lock key; `None` when free or without TTL.
    pub pttl: Option<Duration>,
    /// The lock's fence counter on this node (the last token it issued).
    pub fence: u64,
}

/// Calls to one node. Every future is `'static` so that calls still in
/// flight can outlive the caller that started them.
pub(crate) trait NodeOps: Send + Sync + 'static {
    fn addr(&self) -> &str;

    /// The node's `maxmemory-policy` as last read (at connect, when a lazily
    /// connected node first answered, and by each status call); `None` when
    /// the node would not say (`CONFIG` refused or renamed) or never answered.
    fn maxmemory_policy(&self) -> Option<String> {
        None
    }

    /// A client for the node's pub/sub connection, if it has one.
    fn pubsub_client(&self) -> Option<Client> {
        None
    }

    fn acquire(
        &self,
        keys: &Arc<Keys>,
        owner: &Arc<str>,
        lease: Duration,
        count: u32,
    ) -> BoxFuture<'static, Result<Grant, NodeError>>;

    fn release(
        &self,
        keys: &Arc<Keys>,
        owner: &Arc<str>,
        count: u32,
        lease: Duration,
        token: u64,
    ) -> BoxFuture<'static, Result<Released, NodeError>>;

    fn renew(&self, batch: Arc<RenewBatch>) -> BoxFuture<'static, Result<Vec<Renewed>, NodeError>>;

    /// Re-creates the missing keys of a batch (built with
    /// [`RenewBatch::repair`]) and raises the fence counter to each token.
    fn repair(&self, batch: Arc<RenewBatch>)
        -> BoxFuture<'static, Result<Vec<Renewed>, NodeError>>;

    /// Raises the node's fence counter to at least `token`; returns the
    /// counter after the call.
    fn raise_fence(
        &self,
        keys: &Arc<Keys>,
        token: u64,
    ) -> BoxFuture<'static, Result<u64, NodeError>>;

    fn force_release(&self, keys: &Arc<Keys>) -> BoxFuture<'static, Result<bool, NodeError>>;

    fn status(&self, keys: &Arc<Keys>) -> BoxFuture<'static, Result<NodeLockState, NodeError>>;
}

/// Locks per script call in a renewal batch; one pipeline carries them all.
pub(crate) const RENEW_CHUNK: usize = 1_000;

/// The locks one watchdog tick renews, the same on every node, or the
/// locks it repairs on one node.
pub(crate) struct RenewBatch {
    pub(crate) items: Vec<RenewItem>,
    /// Renew (extend only) or repair (re-create missing keys).
    repair: bool,
    /// The pipeline, built once per tick by the first node that needs it.
    pipeline: std::sync::OnceLock<redis::Pipeline>,
}

impl RenewBatch {
    pub(crate) fn new(items: Vec<RenewItem>) -> Self {
        Self {
            items,
            repair: false,
            pipeline: std::sync::OnceLock::new(),
        }
    }

    /// A batch that re-creates the missing keys of `items`.
    pub(crate) fn repair(items: Vec<RenewItem>) -> Self {
        Self {
            items,
            repair: true,
            pipeline: std::sync::OnceLock::new(),
        }
    }

    /// Builds the pipeline now, so its cost is counted as the watchdog's work.
    pub(crate) fn prepare(&self) {
        let _ = self.pipeline();
    }

    fn script(&self) -> &'static redis::Script {
        if self.repair {
            &scripts::REPAIR
        } else {
            &scripts::RENEW
        }
    }

    /// One EVALSHA of the renew (or repair) script per chunk of
    /// [`RENEW_CHUNK`] locks.
    fn pipeline(&self) -> &redis::Pipeline {
        self.pipeline.get_or_init(|| {
            let mut pipe = redis::Pipeline::with_capacity(self.items.len().div_ceil(RENEW_CHUNK));
            for chunk in self.items.chunks(RENEW_CHUNK) {
                let fence = chunk.first().map(|i| i.keys.fence.as_str());
                let keys = chunk.len() + usize::from(self.repair);
                let cmd = pipe.cmd("EVALSHA").arg(self.script().get_hash()).arg(keys);
                for item in chunk {
                    cmd.arg(&item.keys.lock);
                }
                if self.repair {
                    cmd.arg(fence.unwrap_or_default());
                }
                for item in chunk {
                    cmd.arg(&*item.owner).arg(item.count);
                    if self.repair {
                        cmd.arg(item.token);
                    }
                    cmd.arg(ms(item.lease));
                }
            }
            pipe
        })
    }
}

/// A Redis master reached through a [`ConnectionManager`].
pub(crate) struct RedisNode {
    addr: String,
    conn: ConnectionManager,
    client: Client,
    /// Set when a node connected lazily was refused when it first answered:
    /// not a master, the same server as another node, or evicting while
    /// `require_noeviction` is set. Every call then fails with this error.
    refused: Arc<OnceLock<NodeError>>,
    /// The server's `run_id` (INFO server), read at connect.
    run_id: Option<String>,
    /// The server's `maxmemory-policy`, as last read.
    policy: Arc<Mutex<Option<String>>>,
    /// Per one-shot script: the node is known to have it, so `EVALSHA` is
    /// enough. Cleared after a connection error (the node may have restarted).
    loaded: Arc<[AtomicBool; scripts::ONE_SHOT]>,
}

/// A node as given to the builder, before connecting.
#[derive(Clone)]
pub(crate) struct NodeSpec {
    pub(crate) client: Client,
    pub(crate) addr: String,
    /// Identity used to refuse the same node twice.
    pub(crate) identity: String,
}

impl NodeSpec {
    pub(crate) fn from_url(url: &str) -> Result<Self, Error> {
        let info = url.into_connection_info().map_err(|e| {
            Error::invalid(
                "node URL",
                format!("{}: {}", redact(url), redact_message(&e.to_string(), url)),
            )
        })?;
        Self::from_info(info)
    }

    pub(crate) fn from_client(client: &Client) -> Result<Self, Error> {
        Self::from_info(client.get_connection_info().clone())
    }

    fn from_info(info: redis::ConnectionInfo) -> Result<Self, Error> {
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let info = info.set_tcp_settings(tcp);
        let db = info.redis_settings().db();
        let addr = match info.addr() {
            ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            ConnectionAddr::TcpTls { host, port, .. } => format!("tls://{host}:{port}"),
            ConnectionAddr::Unix(path) => format!("unix:{}", path.display()),
            other => format!("{other}"),
        };
        let addr = if db == 0 {
            addr
        } else {
            format!("{addr}/{db}")
        };
        let identity = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                let host = if host == "localhost" || host == "::1" || host == "[::1]" {
                    "127.0.0.1"
                } else {
                    host.as_str()
                };
                format!("{host}:{port}/{db}")
            }
            _ => addr.clone(),
        };
        let client =
            Client::open(info).map_err(|e| Error::invalid("node", format!("{addr}: {e}")))?;
        Ok(Self {
            client,
            addr,
            identity,
        })
    }
}

/// Replaces the password of a URL with `***`.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
            } else {
                url.to_owned()
            }
        }
        _ => url.to_owned(),
    }
}

fn redact_message(message: &str, url: &str) -> String {
    match url.rfind('@').zip(url.find("://")) {
        Some((at, scheme)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((_, password)) if !password.is_empty() => message.replace(password, "***"),
                _ => message.to_owned(),
            }
        }
        _ => message.to_owned(),
    }
}

impl RedisNode {
    /// The connection manager's settings. Its response timeout is off: every
    /// call already runs under one of our own timeouts (the fan-out's per-node
    /// timeout, the watchdog's renewal timeout, the connect timeout), and
    /// redis-rs's default of 500 ms would otherwise cut every longer one short
    /// (a `node_timeout` of 2 s would act as 500 ms). Reconnecting uses the
    /// connect timeout. The pub/sub connection (`Client::get_async_pubsub`)
    /// has no response timeout of its own in redis-rs 1.x.
    fn manager_config(connect_timeout: Duration) -> ConnectionManagerConfig {
        ConnectionManagerConfig::new()
            .set_response_timeout(None)
            .set_connection_timeout(Some(connect_timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(20))
            .set_max_delay(Duration::from_millis(500))
    }

    /// Connects and checks that the node is a master.
    pub(crate) async fn connect(
        index: usize,
        spec: NodeSpec,
        connect_timeout: Duration,
    ) -> Result<Self, Error> {
        let failure = |e: NodeError| Error::Connect {
            failures: vec![e.at(index, &spec.addr)],
        };
        let mut conn = tokio::time::timeout(
            connect_timeout,
            ConnectionManager::new_with_config(
                spec.client.clone(),
                Self::manager_config(connect_timeout),
            ),
        )
        .await
        .map_err(|_| failure(NodeError::new(NodeErrorKind::Timeout, "connect timed out")))?
        .map_err(|e| failure(NodeError::from_redis(&e)))?;
        let role = tokio::time::timeout(connect_timeout, role(&mut conn))
            .await
            .map_err(|_| failure(NodeError::new(NodeErrorKind::Timeout, "ROLE timed out")))?
            .map_err(|e| failure(NodeError::from_redis(&e)))?;
        if role != "master" {
            return Err(Error::NotMaster {
                node: index,
                addr: spec.addr,
                role,
            });
        }
        let info = ServerInfo::read(&mut conn, connect_timeout).await;
        Ok(Self {
            addr: spec.addr,
            conn,
            client: spec.client,
            refused: Arc::default(),
            run_id: info.run_id,
            policy: Arc::new(Mutex::new(info.policy)),
            loaded: Arc::default(),
        })
    }

    /// What `build()` checks of a node that answered: its identity and
    /// eviction policy (see [`Admission`]).
    pub(crate) fn info(&self) -> ServerInfo {
        ServerInfo {
            run_id: self.run_id.clone(),
            policy: self.maxmemory_policy(),
        }
    }

    /// A node that could not be reached at build time: its connection is
    /// made on first use, and a background probe checks it as soon as it
    /// answers: its role, and through `admission` its identity (not the same
    /// server as another node) and eviction policy. A node refused then is
    /// never used: every call to it fails with [`NodeErrorKind::NotMaster`]
    /// or [`NodeErrorKind::Refused`].
    pub(crate) fn lazy(
        index: usize,
        spec: NodeSpec,
        connect_timeout: Duration,
        admission: Arc<Admission>,
    ) -> Result<Self, Error> {
        let conn = ConnectionManager::new_lazy_with_config(
            spec.client.clone(),
            Self::manager_config(connect_timeout),
        )
        .map_err(|e| Error::Connect {
            failures: vec![NodeError::from_redis(&e).at(index, &spec.addr)],
        })?;
        let refused: Arc<OnceLock<NodeError>> = Arc::default();
        let policy: Arc<Mutex<Option<String>>> = Arc::default();
        let probe = Arc::downgrade(&refused);
        let probe_policy = Arc::downgrade(&policy);
        let (mut probe_conn, addr) = (conn.clone(), spec.addr.clone());
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            drop(handle.spawn(async move {
                loop {
                    if probe.strong_count() == 0 {
                        return;
                    }
                    if let Ok(Ok(role)) = tokio::time::timeout(connect_timeout, role(&mut probe_conn)).await {
                        let refusal = if role == "master" {
                            let info = ServerInfo::read(&mut probe_conn, connect_timeout).await;
                            if let Some(p) = probe_policy.upgrade() {
                                set_policy(&p, info.policy.clone());
                            }
                            admission
                                .admit(index, &addr, &info)
                                .err()
                                .map(|why| NodeError::new(NodeErrorKind::Refused, why))
                        } else {
                            Some(NodeError::new(
                                NodeErrorKind::NotMaster,
                                format!("the node is a {role}, not a master"),
                            ))
                        };
                        match (refusal, probe.upgrade()) {
                            (Some(why), Some(flag)) => {
                                tracing::error!(node = index, addr = %addr, reason = %why.message, "node refused; it will not be used");
                                let _ = flag.set(why);
                            }
                            (Some(_), None) => {}
                            (None, _) => tracing::info!(node = index, addr = %addr, "node reached"),
                        }
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
            }));
        }
        Ok(Self {
            addr: spec.addr,
            conn,
            client: spec.client,
            refused,
            run_id: None,
            policy,
            loaded: Arc::default(),
        })
    }

    /// The connection, unless the node was found not to be a master.
    fn checked(&self) -> Result<ConnectionManager, NodeError> {
        match self.refused.get() {
            Some(why) => Err(why.clone()),
            None => Ok(self.conn.clone()),
        }
    }
}

fn set_policy(slot: &Mutex<Option<String>>, policy: Option<String>) {
    *slot.lock().unwrap_or_else(PoisonError::into_inner) = policy;
}

/// The node's role: `master`, `slave` or `sentinel`.
async fn role(conn: &mut ConnectionManager) -> redis::RedisResult<String> {
    let role: Value = redis::cmd("ROLE").query_async(conn).await?;
    let role = match role {
        Value::Array(items) => match items.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            _ => String::new(),
        },
        _ => String::new(),
    };
    Ok(if role.is_empty() {
        "unknown role".to_owned()
    } else {
        role
    })
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        Value::Nil => Some(0),
        _ => None,
    }
}

fn map_err(e: &redis::RedisError) -> NodeError {
    NodeError::from_redis(e)
}

/// Whether the connection broke, so that the manager reconnects and a second
/// try may reach the node.
fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// One script call on one node, as `EVAL` or `EVALSHA` depending on what the
/// node is known to have. It is sent again only when that cannot reorder it
/// (see the `scripts` module): once as `EVAL` after `NOSCRIPT`, which means
/// nothing ran, and, for [`Resend::AfterBrokenConnection`], once after a
/// broken connection.
struct ScriptCall {
    conn: ConnectionManager,
    loaded: Arc<[AtomicBool; scripts::ONE_SHOT]>,
}

impl RedisNode {
    fn script_call(&self) -> Result<ScriptCall, NodeError> {
        Ok(ScriptCall {
            conn: self.checked()?,
            loaded: Arc::clone(&self.loaded),
        })
    }

    /// Sends a renew or repair batch: one pipeline, one round trip.
    fn batch(&self, batch: Arc<RenewBatch>) -> BoxFuture<'static, Result<Vec<Renewed>, NodeError>> {
        let conn = self.checked();
        let loaded = Arc::clone(&self.loaded);
        Box::pin(async move {
            let mut conn = conn?;
            let pipe = batch.pipeline();
            let seen = |e: redis::RedisError| {
                forget_scripts(&loaded, &e);
                e
            };
            // Retrying is safe here, unlike for acquire and release: a release
            // waits until the renewal that includes its lock has finished,
            // repairs and retries included. The retry after a broken
            // connection reaches a node that just came back.
            let first = match pipe.query_async(&mut conn).await.map_err(seen) {
                Err(e) if broken(&e) => pipe.query_async(&mut conn).await.map_err(seen),
                other => other,
            };
            let replies: Vec<Vec<i64>> = match first {
                Ok(r) => r,
                Err(e) if no_script(&e) => {
                    batch
                        .script()
                        .prepare_invoke()
                        .load_async(&mut conn)
                        .await
                        .map_err(|e| map_err(&seen(e)))?;
                    pipe.query_async(&mut conn)
                        .await
                        .map_err(|e| map_err(&seen(e)))?
                }
                Err(e) => return Err(map_err(&e)),
            };
            let codes: Vec<i64> = replies.into_iter().flatten().collect();
            if codes.len() != batch.items.len() {
                return Err(NodeError::protocol("renew batch length"));
            }
            codes
                .into_iter()
                .map(|c| match c {
                    scripts::RENEW_EXTENDED => Ok(Renewed::Extended),
                    scripts::RENEW_REPAIRED => Ok(Renewed::Repaired),
                    scripts::RENEW_MISSING => Ok(Renewed::Missing),
                    scripts::RENEW_CONFLICT => Ok(Renewed::Conflict),
                    scripts::RENEW_WRONGTYPE => Ok(Renewed::WrongType),
                    _ => Err(NodeError::protocol("renew")),
                })
                .collect()
        })
    }
}

/// Whether a script call may be sent again after the connection broke.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Resend {
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
    async fn run<T: redis::FromRedisValue>(
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
fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// After an error that means the node may have restarted (a broken
/// connection: the manager reconnects, perhaps to a new server) or lost its
/// scripts (`NOSCRIPT`), forgets which scripts the node has, so the next
/// call of each sends its body. Every call on the connection goes through
/// here, whichever call meets the break first: renewal, status or a script.
/// A reconnect that no call sees (redis-rs reconnects on its own after a
/// RESP3 disconnection push) is caught by the `NOSCRIPT` resend instead.
fn forget_scripts(loaded: &[AtomicBool; scripts::ONE_SHOT], e: &redis::RedisError) {
    if no_script(e) || broken(e) {
        for l in loaded {
            l.store(false, Ordering::Release);
        }
    }
}

impl NodeOps for RedisNode {
    fn addr(&self) -> &str {
        &self.addr
    }

    fn pubsub_client(&self) -> Option<Client> {
        Some(self.client.clone())
    }

    fn maxmemory_policy(&self) -> Option<String> {
        self.policy
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn acquire(
        &self,
        keys: &Arc<Keys>,
        owner: &Arc<str>,
        lease: Duration,
        count: u32,
    ) -> BoxFuture<'static, Result<Grant, NodeError>> {
        let call = self.script_call();
        let keys = Arc::clone(keys);
        let owner = Arc::clone(owner);
        Box::pin(async move {
            let reply: Vec<Value> = call?
                .run(
                    &scripts::ACQUIRE,
                    &[&keys.lock, &keys.fence],
                    Resend::Never,
                    |c| {
                        c.arg(&*owner).arg(ms(lease)).arg(count);
                    },
                )
                .await?;
            let code = reply.first().and_then(int);
            let value = reply.get(1).and_then(int);
            match (code, value) {
                (Some(scripts::ACQ_GRANTED | scripts::ACQ_REENTERED), Some(t)) => {
                    Ok(Grant::Granted(u64::try_from(t).unwrap_or(0)))
                }
                (Some(scripts::ACQ_TAKEN), Some(pttl)) => Ok(Grant::Taken(
                    u64::try_from(pttl).ok().map(Duration::from_millis),
                )),
                _ => Err(NodeError::protocol("acquire")),
            }
        })
    }

    fn release(
        &self,
        keys: &Arc<Keys>,
        owner: &Arc<str>,
        count: u32,
        lease: Duration,
        token: u64,
    ) -> BoxFuture<'static, Result<Released, NodeError>> {
        let call = self.script_call();
        let keys = Arc::clone(keys);
        let owner = Arc::clone(owner);
        Box::pin(async move {
            let code: i64 = call?
                .run(
                    &scripts::RELEASE,
                    &[&keys.lock, &keys.channel, &keys.fence],
                    Resend::AfterBrokenConnection,
                    |c| {
                        c.arg(&*owner).arg(count).arg(ms(lease)).arg(token);
                    },
                )
                .await?;
            match code {
                scripts::REL_RELEASED => Ok(Released::Deleted),
                scripts::REL_LOWERED => Ok(Released::Lowered),
                scripts::REL_MISSING => Ok(Released::Missing),
                scripts::REL_OTHER_OWNER => Ok(Released::OtherOwner),
                _ => Err(NodeError::protocol("release")),
            }
        })
    }

    fn renew(&self, batch: Arc<RenewBatch>) -> BoxFuture<'static, Result<Vec<Renewed>, NodeError>> {
        self.batch(batch)
    }

    fn repair(
        &self,
        batch: Arc<RenewBatch>,
    ) -> BoxFuture<'static, Result<Vec<Renewed>, NodeError>> {
        self.batch(batch)
    }

    fn raise_fence(
        &self,
        keys: &Arc<Keys>,
        token: u64,
    ) -> BoxFuture<'static, Result<u64, NodeError>> {
        let call = self.script_call();
        let keys = Arc::clone(keys);
        Box::pin(async move {
            let counter: i64 = call?
                .run(
                    &scripts::RAISE_FENCE,
                    &[&keys.fence],
                    Resend::AfterBrokenConnection,
                    |c| {
                        c.arg(token);
                    },
                )
                .await?;
            Ok(u64::try_from(counter).unwrap_or(0))
        })
    }

    fn force_release(&self, keys: &Arc<Keys>) -> BoxFuture<'static, Result<bool, NodeError>> {
        let call = self.script_call();
        let keys = Arc::clone(keys);
        Box::pin(async move {
            let n: i64 = call?
                .run(
                    &scripts::FORCE_RELEASE,
                    &[&keys.lock, &keys.channel],
                    Resend::Never,
                    |_| {},
                )
                .await?;
            Ok(n == 1)
        })
    }

    fn status(&self, keys: &Arc<Keys>) -> BoxFuture<'static, Result<NodeLockState, NodeError>> {
        let conn = self.checked();
        let keys = Arc::clone(keys);
        let loaded = Arc::clone(&self.loaded);
        let policy = Arc::clone(&self.policy);
        Box::pin(async move {
            let mut conn = conn?;
            // The policy can change at run time (CONFIG SET); a node that
            // refuses CONFIG keeps what was read before.
            match maxmemory_policy(&mut conn).await {
                Ok(Some(p)) => set_policy(&policy, Some(p)),
                Ok(None) => {}
                Err(e) => forget_scripts(&loaded, &e),
            }
            let (fields, pttl, fence): (Vec<(String, String)>, i64, Option<String>) = redis::pipe()
                .cmd("HGETALL")
                .arg(&keys.lock)
                .cmd("PTTL")
                .arg(&keys.lock)
                .cmd("GET")
                .arg(&keys.fence)
                .query_async(&mut conn)
                .await
                .map_err(|e| {
                    forget_scripts(&loaded, &e);
                    map_err(&e)
                })?;
            let fence = match fence {
                None => 0,
                Some(f) => f.parse().map_err(|_| {
                    NodeError::new(NodeErrorKind::WrongType, "fence counter is not an integer")
                })?,
            };
            let (holder, hold_count) = match fields.into_iter().next() {
                Some((owner, count)) => (Some(owner), count.parse().unwrap_or(0)),
                None => (None, 0),
            };
            Ok(NodeLockState {
                holder,
                hold_count,
                pttl: u64::try_from(pttl).ok().map(Duration::from_millis),
                fence,
            })
        })
    }
}

/// Failures of one node, with its identity.
pub(crate) fn failure(nodes: &[Arc<dyn NodeOps>], i: usize, e: &NodeError) -> NodeFailure {
    e.clone().at(i, nodes[i].addr())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_share_a_hash_tag() {
        let k = Keys::new("ql:", "orders");
        assert_eq!(k.lock, "ql:{orders}");
        assert_eq!(k.fence, "ql:fence");
        assert_eq!(k.channel, "ql:{orders}:released");
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact_message("bad secret here", "redis://u:secret@h"),
            "bad *** here"
        );
    }

    #[test]
    fn specs_name_nodes_without_credentials_and_detect_duplicates() {
        let a = NodeSpec::from_url("redis://user:pw@localhost:7001/2").expect("valid url");
        assert_eq!(a.addr, "localhost:7001/2");
        let b = NodeSpec::from_url("redis://127.0.0.1:7001/2").expect("valid url");
        assert_eq!(a.identity, b.identity);
        assert!(NodeSpec::from_url("http://nope").is_err());
        assert!(NodeSpec::from_url("not a url").is_err());
    }
}
