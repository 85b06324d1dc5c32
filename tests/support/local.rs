//! Local `redis-server` processes on 127.0.0.1, for tests, examples and the
//! benchmark. Each node is an independent master without persistence.
//!
//! Processes are killed when the [`LocalNodes`] is dropped, and also by a
//! small reaper shell when the owning process exits (statics are never
//! dropped), so no server outlives its test binary.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A set of local masters.
pub struct LocalNodes {
    dir: PathBuf,
    nodes: Vec<Mutex<Node>>,
    extra: Extra,
}

/// Extra server settings for [`LocalNodes::start_with`], kept across
/// restarts.
#[derive(Debug, Clone, Default)]
pub struct Extra {
    /// Arguments appended to every server's command line (ACL users, TLS
    /// certificate files, ...).
    pub args: Vec<String>,
    /// Serve TLS only, on the node's port (`--port 0 --tls-port PORT`); the
    /// certificate files go in `args`. Readiness is then a TCP connect.
    pub tls: bool,
}

struct Node {
    port: u16,
    child: Option<Child>,
}

/// The `redis-server` binary: `$REDIS_SERVER`, or `redis-server` on the PATH.
fn server_binary() -> String {
    std::env::var("REDIS_SERVER").unwrap_or_else(|_| "redis-server".to_owned())
}

/// The ports [`free_port`] handed out in this process, with their cluster
/// bus ports: none is handed out twice. A port is free to bind until its
/// server starts, so a bind alone could give two nodes of one set the same
/// port; the second server then failed to bind and exited, and the first
/// one's PING answered for both (CI: "node 4 (127.0.0.1:23191) is the same
/// node as node 2").
static HANDED_OUT: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// A free port below the kernel's ephemeral range (32768 and up), so that a
/// client connection cannot take a stopped node's port before it restarts;
/// never one handed out before in this process, nor the cluster bus port
/// (port + 10000) of one.
pub fn free_port() -> std::io::Result<u16> {
    let mut taken = HANDED_OUT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    for _ in 0..200 {
        let port = rand::random_range(20_000..32_000u16);
        // A cluster node also binds its bus at port + 10000: a node whose
        // bus port was taken answered its first connection and exited.
        let bus = port + 10_000;
        let free = |p: u16| !taken.contains(&p) && TcpListener::bind(("127.0.0.1", p)).is_ok();
        if free(port) && free(bus) {
            taken.extend([port, bus]);
            return Ok(port);
        }
    }
    loop {
        let port = TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        if taken.insert(port) {
            return Ok(port);
        }
    }
}

/// Sends PING over a raw socket; true on `+PONG`.
pub fn ping(port: u16, timeout: Duration) -> bool {
    answer(port, timeout).is_some_and(|buf| &buf == b"+PONG\r\n")
}

/// The first 7 bytes of the reply to PING over a raw socket.
fn answer(port: u16, timeout: Duration) -> Option<[u8; 7]> {
    let mut s = TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout).ok()?;
    let _ = s.set_read_timeout(Some(timeout));
    s.write_all(b"PING\r\n").ok()?;
    let mut buf = [0u8; 7];
    s.read_exact(&mut buf).ok()?;
    Some(buf)
}

/// The nodes an example runs against: the comma-separated URLs of
/// `QUORUMLOCK_NODES` when it is set, else `n` local masters started here
/// (kept alive by the returned value).
pub fn env_or_local(n: usize) -> std::io::Result<(Option<LocalNodes>, Vec<String>)> {
    let configured = std::env::var("QUORUMLOCK_NODES")
        .ok()
        .filter(|v| !v.trim().is_empty());
    if let Some(list) = configured {
        return Ok((None, list.split(',').map(|u| u.trim().to_owned()).collect()));
    }
    println!("QUORUMLOCK_NODES is not set: starting {n} local redis-server masters");
    let nodes = LocalNodes::start(n)?;
    let urls = nodes.urls();
    Ok((Some(nodes), urls))
}

impl LocalNodes {
    /// Starts `n` masters on free loopback ports and waits until each answers PING.
    ///
    /// # Errors
    ///
    /// When `redis-server` cannot be started (not installed: `apt-get install
    /// redis-server`) or does not answer within 10 s.
    pub fn start(n: usize) -> std::io::Result<Self> {
        Self::start_with(n, Extra::default())
    }

    /// Starts `n` masters with `extra` settings and waits until each is
    /// ready: answers PING (`-NOAUTH` counts when the default user is off),
    /// or, with TLS, accepts a connection.
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub fn start_with(n: usize, extra: Extra) -> std::io::Result<Self> {
        let dir = std::env::temp_dir().join(format!(
            "quorumlock-nodes-{}-{}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir)?;
        spawn_reaper(&dir)?;
        let mut nodes = Vec::with_capacity(n);
        for _ in 0..n {
            nodes.push(Mutex::new(Node {
                port: free_port()?,
                child: None,
            }));
        }
        let this = Self { dir, nodes, extra };
        for i in 0..n {
            this.launch(i)?;
        }
        for i in 0..n {
            this.ready_or_move(i)?;
        }
        Ok(this)
    }

    /// Waits for node `i`; if its server exited (another process took the
    /// port between our probe and its bind), starts it on a new port.
    fn ready_or_move(&self, i: usize) -> std::io::Result<()> {
        for _ in 0..5 {
            let exited = {
                let mut node = self.node(i);
                let deadline = Instant::now() + Duration::from_secs(10);
                loop {
                    if self.ready(node.port) {
                        return Ok(());
                    }
                    let gone = node
                        .child
                        .as_mut()
                        .is_none_or(|c| c.try_wait().ok().flatten().is_some());
                    if gone || Instant::now() >= deadline {
                        break gone;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            };
            if !exited {
                break;
            }
            self.kill(i);
            self.node(i).port = free_port()?;
            self.launch(i)?;
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("redis-server node {i} did not answer PING"),
        ))
    }

    /// Whether the server on `port` is ready for clients.
    fn ready(&self, port: u16) -> bool {
        let timeout = Duration::from_millis(200);
        if self.extra.tls {
            return TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), timeout).is_ok();
        }
        answer(port, timeout).is_some_and(|buf| &buf == b"+PONG\r\n" || buf.starts_with(b"-NOAUTH"))
    }

    fn launch(&self, i: usize) -> std::io::Result<()> {
        self.launch_with(i, &[])
    }

    fn launch_with(&self, i: usize, extra: &[String]) -> std::io::Result<()> {
        let mut node = self.node(i);
        let port = node.port;
        let node_dir = self.dir.join(format!("node-{i}"));
        std::fs::create_dir_all(&node_dir)?;
        let child = Command::new(server_binary())
            .arg("--port")
            .arg(port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(["--protected-mode", "no", "--maxmemory-policy", "noeviction"])
            .arg("--dir")
            .arg(&node_dir)
            .arg("--pidfile")
            .arg(self.dir.join(format!("node-{i}.pid")))
            .args(
                self.extra
                    .tls
                    .then(|| {
                        [
                            "--port".to_owned(),
                            "0".to_owned(),
                            "--tls-port".to_owned(),
                            port.to_string(),
                        ]
                    })
                    .into_iter()
                    .flatten(),
            )
            .args(&self.extra.args)
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "cannot start {}: {e} (install it: apt-get install -y redis-server)",
                        server_binary()
                    ),
                )
            })?;
        node.child = Some(child);
        Ok(())
    }

    fn node(&self, i: usize) -> std::sync::MutexGuard<'_, Node> {
        self.nodes[i]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits until node `i` answers PING (10 s at most).
    pub fn wait_ready(&self, i: usize) -> std::io::Result<()> {
        let port = self.port(i);
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if self.ready(port) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        Err(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!("redis-server on port {port} did not answer PING"),
        ))
    }

    /// How many nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// The port of node `i`.
    pub fn port(&self, i: usize) -> u16 {
        self.node(i).port
    }

    /// `redis://127.0.0.1:PORT` of node `i` (`rediss://` with TLS).
    pub fn url(&self, i: usize) -> String {
        let scheme = if self.extra.tls { "rediss" } else { "redis" };
        format!("{scheme}://127.0.0.1:{}", self.port(i))
    }

    /// Every node's URL.
    pub fn urls(&self) -> Vec<String> {
        (0..self.len()).map(|i| self.url(i)).collect()
    }

    /// Kills node `i` (SIGKILL): its data is gone, connections are refused.
    pub fn kill(&self, i: usize) {
        let mut node = self.node(i);
        if let Some(mut child) = node.child.take() {
            let _ = child.kill();
            let _ = child.wait();
            let _ = std::fs::remove_file(self.dir.join(format!("node-{i}.pid")));
        }
    }

    /// Stops node `i` (SIGSTOP): it keeps its connections and answers
    /// nothing until [`LocalNodes::resume`].
    pub fn stop(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Resumes a node stopped by [`LocalNodes::stop`] (SIGCONT).
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    fn signal(&self, i: usize, signal: &str) {
        let node = self.node(i);
        let Some(child) = node.child.as_ref() else {
            return;
        };
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "kill {signal} of node {i}"
        );
    }

    /// Starts a killed node `i` again on the same port, empty.
    ///
    /// # Errors
    ///
    /// When it cannot be started or does not answer PING.
    pub fn restart(&self, i: usize) -> std::io::Result<()> {
        self.kill(i);
        self.launch(i)?;
        self.wait_ready(i)
    }

    /// Starts a killed node `i` again on the same port as a replica of the
    /// master on `master_port`.
    ///
    /// # Errors
    ///
    /// When it cannot be started or does not answer PING.
    pub fn restart_as_replica(&self, i: usize, master_port: u16) -> std::io::Result<()> {
        self.kill(i);
        self.launch_with(
            i,
            &[
                "--replicaof".to_owned(),
                "127.0.0.1".to_owned(),
                master_port.to_string(),
            ],
        )?;
        self.wait_ready(i)
    }

    /// The scratch directory of these nodes.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for LocalNodes {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A shell that waits for this process to exit, then kills every node whose
/// pidfile is in `dir` and removes `dir`.
fn spawn_reaper(dir: &Path) -> std::io::Result<()> {
    let script = r#"
        while kill -0 "$1" 2>/dev/null; do sleep 0.5; done
        for f in "$2"/*.pid; do [ -f "$f" ] && kill -9 "$(cat "$f")" 2>/dev/null; done
        rm -rf "$2"
    "#;
    Command::new("sh")
        .arg("-c")
        .arg(script)
        .arg("reaper")
        .arg(std::process::id().to_string())
        .arg(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    // Named in full: a bench that includes this file builds without the
    // test harness, which leaves the `#[test]` out and would leave an
    // import unused.
    #[test]
    fn free_port_never_hands_out_a_port_twice() {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..500 {
            let port = super::free_port().unwrap();
            assert!(seen.insert(port), "{port} handed out twice");
            assert!(
                !seen.contains(&(port + 10_000)),
                "{port} is another node's bus port"
            );
        }
        for port in &seen {
            assert!(
                !seen.contains(&(port + 10_000)),
                "{port}'s bus port handed out"
            );
        }
    }
}
