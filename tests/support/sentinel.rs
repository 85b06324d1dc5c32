//! A local master group under Redis Sentinel: two `redis-server`s (a
//! master and its replica) and three sentinels (`redis-sentinel`, or
//! `redis-server --sentinel` where that is missing), all on 127.0.0.1,
//! with passwords on the servers and on the sentinels. Started once per
//! test binary that asks for it ([`group`]); the tests that fault it take
//! [`serial`] first. `tests/sentinel.rs` and the CLI's tests include it
//! with `#[path]`.

#![allow(dead_code, clippy::unwrap_used, clippy::panic)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::support::local::{free_port, Extra, LocalNodes};

/// The servers' password (`requirepass`, `masterauth`).
pub const MASTER_PASSWORD: &str = "master-secret";
/// The sentinels' password (`requirepass`, `sentinel sentinel-pass`).
pub const SENTINEL_PASSWORD: &str = "sentinel-secret";
/// The master group's name.
pub const NAME: &str = "locks-s";
/// The sentinels' `down-after-milliseconds`.
pub const DOWN_AFTER: Duration = Duration::from_millis(1000);

/// The group: its two servers and its three sentinels.
pub struct SentinelGroup {
    /// Server 0 starts as the master, server 1 as its replica.
    pub servers: LocalNodes,
    sentinels: Vec<Mutex<Sentinel>>,
    dir: PathBuf,
    /// The certificate files' settings when everything is over TLS only
    /// (servers, replication, sentinels); empty otherwise.
    tls: Vec<(String, String)>,
}

struct Sentinel {
    port: u16,
    child: Option<Child>,
}

/// The `redis-sentinel` binary where installed, else `redis-server` in
/// sentinel mode.
fn sentinel_command(conf: &std::path::Path) -> Command {
    let installed = Command::new("sh")
        .args(["-c", "command -v redis-sentinel"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if installed {
        let mut c = Command::new("redis-sentinel");
        c.arg(conf);
        c
    } else {
        let mut c = Command::new("redis-server");
        c.arg(conf).arg("--sentinel");
        c
    }
}

impl SentinelGroup {
    /// Starts the servers, makes server 1 a replica of server 0, starts
    /// the sentinels monitoring server 0 as [`NAME`], and waits until the
    /// sentinels know the replica and each other.
    pub fn start() -> Self {
        Self::start_with(Vec::new())
    }

    /// A group over TLS only, with the certificate files of `tls_args`
    /// (`--tls-cert-file PATH ...`, as `support/tls.rs` writes them). Its
    /// health is not checked here (the checks speak plain TCP): the test
    /// retries its first `build()`.
    pub fn start_tls(tls_args: Vec<String>) -> Self {
        Self::start_with(tls_args)
    }

    fn start_with(tls_args: Vec<String>) -> Self {
        let tls: Vec<(String, String)> = tls_args
            .chunks(2)
            .map(|kv| (kv[0].trim_start_matches('-').to_owned(), kv[1].clone()))
            .collect();
        let mut args: Vec<String> = vec![
            "--requirepass".into(),
            MASTER_PASSWORD.into(),
            "--masterauth".into(),
            MASTER_PASSWORD.into(),
        ];
        if !tls.is_empty() {
            args.extend(tls_args);
            args.extend(["--tls-replication".to_owned(), "yes".to_owned()]);
        }
        let extra = Extra {
            args,
            tls: !tls.is_empty(),
        };
        let servers = LocalNodes::start_with(2, extra).expect("start the group's servers");
        servers
            .restart_as_replica(1, servers.port(0))
            .expect("start the replica");
        let dir = servers.dir().to_path_buf();
        let this = Self {
            sentinels: (0..3)
                .map(|_| {
                    Mutex::new(Sentinel {
                        port: free_port().expect("a free port"),
                        child: None,
                    })
                })
                .collect(),
            servers,
            dir,
            tls,
        };
        let master = this.servers.port(0);
        // On a thread of its own: the first caller may be inside a runtime.
        std::thread::scope(|scope| {
            scope
                .spawn(|| {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .unwrap();
                    rt.block_on(async {
                        if this.tls.is_empty() {
                            this.wait_replica_synced(master).await;
                        }
                        for k in 0..3 {
                            this.launch(k, master);
                        }
                        if this.tls.is_empty() {
                            this.wait_healthy(Duration::from_secs(30)).await;
                        }
                    });
                })
                .join()
                .unwrap();
        });
        this
    }

    fn launch(&self, k: usize, master: u16) {
        let mut s = self.sentinels[k].lock().unwrap();
        let conf = self.dir.join(format!("sentinel-{k}.conf"));
        let listen = if self.tls.is_empty() {
            format!("port {}\n", s.port)
        } else {
            let files: String = self.tls.iter().map(|(k, v)| format!("{k} {v}\n")).collect();
            format!("port 0\ntls-port {}\ntls-replication yes\n{files}", s.port)
        };
        let text = format!(
            "{listen}bind 127.0.0.1\nprotected-mode no\ndir {dir}\n\
             pidfile {dir}/sentinel-{k}.pid\nrequirepass {SENTINEL_PASSWORD}\n\
             sentinel sentinel-pass {SENTINEL_PASSWORD}\n\
             sentinel monitor {NAME} 127.0.0.1 {master} 2\n\
             sentinel auth-pass {NAME} {MASTER_PASSWORD}\n\
             sentinel down-after-milliseconds {NAME} {down}\n\
             sentinel failover-timeout {NAME} 2000\n\
             sentinel parallel-syncs {NAME} 1\n",
            dir = self.dir.display(),
            down = DOWN_AFTER.as_millis(),
        );
        std::fs::write(&conf, text).unwrap();
        let child = sentinel_command(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start a sentinel (apt-get install -y redis-sentinel)");
        s.child = Some(child);
    }

    /// Stops (SIGSTOP) or resumes (SIGCONT) every sentinel.
    pub fn signal_sentinels(&self, signal: &str) {
        for s in &self.sentinels {
            if let Some(c) = s.lock().unwrap().child.as_ref() {
                let ok = Command::new("kill")
                    .arg(signal)
                    .arg(c.id().to_string())
                    .status()
                    .is_ok_and(|s| s.success());
                assert!(ok, "kill {signal} of a sentinel");
            }
        }
    }

    /// The sentinels' URLs, with their password.
    pub fn sentinel_urls(&self) -> Vec<String> {
        self.sentinels
            .iter()
            .map(|s| {
                let port = s.lock().unwrap().port;
                format!("{}://:{SENTINEL_PASSWORD}@127.0.0.1:{port}", self.scheme())
            })
            .collect()
    }

    /// The master's name as a URL carrying the servers' password.
    pub fn master_name(&self) -> String {
        format!("{}://:{MASTER_PASSWORD}@{NAME}", self.scheme())
    }

    fn scheme(&self) -> &'static str {
        if self.tls.is_empty() {
            "redis"
        } else {
            "rediss"
        }
    }

    /// The port of sentinel `k`.
    pub fn sentinel_port(&self, k: usize) -> u16 {
        self.sentinels[k].lock().unwrap().port
    }

    /// Which server listens on `port`.
    pub fn server_of(&self, port: u16) -> usize {
        (0..2).find(|&i| self.servers.port(i) == port).unwrap()
    }

    /// The master's port as sentinel `k` tells it.
    pub async fn master_told(&self, k: usize) -> Option<u16> {
        let mut c = sentinel_conn(self.sentinel_port(k)).await.ok()?;
        let told: Option<(String, u16)> = redis::cmd("SENTINEL")
            .arg("GET-MASTER-ADDR-BY-NAME")
            .arg(NAME)
            .query_async(&mut c)
            .await
            .ok()?;
        told.map(|(_, p)| p)
    }

    /// Asks sentinel 0 for a failover now (`SENTINEL FAILOVER`).
    pub async fn failover(&self) {
        let mut c = sentinel_conn(self.sentinel_port(0)).await.unwrap();
        let _: String = redis::cmd("SENTINEL")
            .arg("FAILOVER")
            .arg(NAME)
            .query_async(&mut c)
            .await
            .unwrap();
    }

    /// Waits until every sentinel names a master other than `old`; its port.
    pub async fn wait_promoted(&self, old: u16, within: Duration) -> u16 {
        let end = tokio::time::Instant::now() + within;
        loop {
            let mut told = Vec::new();
            for k in 0..3 {
                told.push(self.master_told(k).await);
            }
            if let Some(Some(new)) = told.first().copied() {
                if new != old && told.iter().all(|t| *t == Some(new)) {
                    return new;
                }
            }
            assert!(
                tokio::time::Instant::now() < end,
                "no failover away from {old} within {within:?} (sentinels say {told:?})"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits until the group is whole again: both servers up and not
    /// stopped, the sentinels agreeing on a master that answers as one,
    /// its replica linked, and the sentinels seeing it as a healthy
    /// replica. Restarts a server that is down (empty; the sentinels make
    /// it a replica).
    pub async fn wait_healthy(&self, within: Duration) {
        for i in 0..2 {
            self.servers.resume(i);
            if !crate::support::local::ping(self.servers.port(i), Duration::from_millis(300))
                && !noauth(self.servers.port(i))
            {
                self.servers.restart(i).unwrap();
            }
        }
        let end = tokio::time::Instant::now() + within;
        loop {
            if self.is_healthy().await {
                return;
            }
            assert!(
                tokio::time::Instant::now() < end,
                "the sentinel group did not become healthy within {within:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn is_healthy(&self) -> bool {
        let mut told = Vec::new();
        for k in 0..3 {
            told.push(self.master_told(k).await);
        }
        let Some(Some(master)) = told.first().copied() else {
            return false;
        };
        if told.iter().any(|t| *t != Some(master)) {
            return false;
        }
        let replica = self.servers.port(1 - self.server_of(master));
        if role(master).await.as_deref() != Some("master") {
            return false;
        }
        if !linked(replica).await {
            return false;
        }
        // Every sentinel sees the replica up and the other sentinels.
        for k in 0..3 {
            let Ok(mut c) = sentinel_conn(self.sentinel_port(k)).await else {
                return false;
            };
            let replicas: Result<Vec<std::collections::HashMap<String, String>>, _> =
                redis::cmd("SENTINEL")
                    .arg("REPLICAS")
                    .arg(NAME)
                    .query_async(&mut c)
                    .await;
            let ok = replicas.is_ok_and(|r| {
                r.iter().any(|m| {
                    m.get("port").map(String::as_str) == Some(&replica.to_string())
                        && m.get("flags").is_some_and(|f| f == "slave")
                        && m.get("master-link-status").map(String::as_str) == Some("ok")
                })
            });
            let peers: Result<Vec<std::collections::HashMap<String, String>>, _> =
                redis::cmd("SENTINEL")
                    .arg("SENTINELS")
                    .arg(NAME)
                    .query_async(&mut c)
                    .await;
            if !ok || !peers.is_ok_and(|p| p.len() == 2) {
                return false;
            }
        }
        true
    }

    async fn wait_replica_synced(&self, master: u16) {
        let replica = self.servers.port(1 - self.server_of(master));
        for _ in 0..300 {
            if linked(replica).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("the replica on {replica} did not sync");
    }
}

/// One more sentinel, without a password, monitoring the master on
/// `master_port` as [`NAME`]: one that disagrees with the group's.
pub struct LoneSentinel {
    pub port: u16,
    child: Child,
}

impl LoneSentinel {
    pub fn start(dir: &std::path::Path, master_port: u16) -> Self {
        let port = free_port().unwrap();
        std::fs::create_dir_all(dir).unwrap();
        let conf = dir.join(format!("lone-sentinel-{port}.conf"));
        let text = format!(
            "port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {}\n\
             sentinel monitor {NAME} 127.0.0.1 {master_port} 1\n",
            dir.display()
        );
        std::fs::write(&conf, text).unwrap();
        let child = sentinel_command(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        for _ in 0..200 {
            if crate::support::local::ping(port, Duration::from_millis(100)) {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Self { port, child }
    }
}

impl Drop for LoneSentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for SentinelGroup {
    fn drop(&mut self) {
        for s in &self.sentinels {
            if let Some(mut c) = s.lock().unwrap().child.take() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

/// Whether the server on `port` asks for a password (it is up).
fn noauth(port: u16) -> bool {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect_timeout(
        &([127, 0, 0, 1], port).into(),
        Duration::from_millis(300),
    ) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(300)));
    let mut buf = [0u8; 7];
    s.write_all(b"PING\r\n").is_ok()
        && s.read_exact(&mut buf).is_ok()
        && buf.starts_with(b"-NOAUTH")
}

/// A connection to the group's server on `port`.
pub async fn server_conn(port: u16) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    conn(MASTER_PASSWORD, port).await
}

async fn sentinel_conn(port: u16) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    conn(SENTINEL_PASSWORD, port).await
}

/// A connection to 127.0.0.1:`port` with `password`, made within 500 ms.
async fn conn(password: &str, port: u16) -> redis::RedisResult<redis::aio::MultiplexedConnection> {
    let client = redis::Client::open(format!("redis://:{password}@127.0.0.1:{port}"))?;
    tokio::time::timeout(
        Duration::from_millis(500),
        client.get_multiplexed_async_connection(),
    )
    .await
    .map_err(|_| redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::TimedOut)))?
}

/// `ROLE`'s first word of the server on `port`.
pub async fn role(port: u16) -> Option<String> {
    let mut c = server_conn(port).await.ok()?;
    let v: redis::Value = tokio::time::timeout(
        Duration::from_millis(500),
        redis::cmd("ROLE").query_async(&mut c),
    )
    .await
    .ok()?
    .ok()?;
    match v {
        redis::Value::Array(items) => match items.first() {
            Some(redis::Value::BulkString(b)) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        },
        _ => None,
    }
}

/// Whether the replica on `port` has its link to its master up.
async fn linked(port: u16) -> bool {
    let Ok(mut c) = server_conn(port).await else {
        return false;
    };
    let info: Result<Result<String, _>, _> = tokio::time::timeout(
        Duration::from_millis(500),
        redis::cmd("INFO").arg("replication").query_async(&mut c),
    )
    .await;
    info.is_ok_and(|i| i.is_ok_and(|i| i.contains("master_link_status:up")))
}

/// Whether the server on `port` has the lock key of `name`.
pub async fn has_lock(port: u16, name: &str) -> bool {
    let Ok(mut c) = server_conn(port).await else {
        return false;
    };
    redis::cmd("EXISTS")
        .arg(crate::support::key(name))
        .query_async::<bool>(&mut c)
        .await
        .unwrap_or(false)
}

/// The group shared by every test of this binary.
pub fn group() -> &'static SentinelGroup {
    static GROUP: OnceLock<SentinelGroup> = OnceLock::new();
    GROUP.get_or_init(SentinelGroup::start)
}

/// One faulting test at a time; the group healthy before it starts.
pub async fn serial() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let guard = SERIAL.lock().await;
    group().wait_healthy(Duration::from_secs(40)).await;
    guard
}

/// How many subscribed clients (`sub=` or `psub=` above 0 in `CLIENT
/// LIST`) sentinel `k` of the group has.
pub async fn sentinel_subscribers(k: usize) -> usize {
    let mut c = sentinel_conn(group().sentinel_port(k)).await.unwrap();
    let list: String = redis::cmd("CLIENT")
        .arg("LIST")
        .query_async(&mut c)
        .await
        .unwrap();
    list.lines()
        .filter(|l| l.split(' ').any(|f| f.starts_with("sub=") && f != "sub=0"))
        .count()
}
