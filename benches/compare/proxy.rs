//! A small fault-injecting TCP proxy for the tail-tolerance cases: put in
//! front of a node, it adds latency with jitter to each chunk of bytes in
//! each direction (keeping their order), or turns into a black hole that
//! accepts and reads but never answers. A refusing node needs no proxy: it
//! is a port with nothing listening ([`refused_port`]).
//!
//! The proxies run on a runtime of their own whose threads are named
//! [`THREAD_NAME`], so their CPU time can be told apart from the client's
//! ([`proxy_cpu_secs`]). tokio's timers tick in whole milliseconds, too
//! coarse for a 0.1 ms delay, so the last stretch of a wait is a
//! `std::thread::sleep` on the runtime's blocking pool.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinSet;

use crate::BoxError;

/// The name of the proxy runtime's threads (at most 15 bytes: `comm`).
pub(crate) const THREAD_NAME: &str = "ql-proxy";

/// What a proxy does with the bytes it reads.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Mode {
    /// Forward each chunk `one_way` later, ± `jitter` (a fraction of it,
    /// drawn uniformly per chunk), never before an earlier chunk.
    Delay { one_way: Duration, jitter: f64 },
    /// Read and drop everything, answer nothing, on open connections and
    /// new ones alike.
    BlackHole,
}

fn runtime() -> Result<&'static tokio::runtime::Runtime, BoxError> {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    if let Some(rt) = RT.get() {
        return Ok(rt);
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name(THREAD_NAME)
        // Exited threads leave /proc/self/task, and their CPU time with them.
        .thread_keep_alive(Duration::from_secs(24 * 3600))
        .enable_all()
        .build()?;
    Ok(RT.get_or_init(|| rt))
}

/// One proxy in front of one node. Dropping it closes the listener and
/// every connection it carries.
pub(crate) struct Proxy {
    addr: SocketAddr,
    mode: Arc<Mutex<Mode>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Listens on a free loopback port and forwards to `upstream`.
    pub(crate) fn start(upstream: SocketAddr, mode: Mode) -> Result<Self, BoxError> {
        let rt = runtime()?;
        let std_listener = std::net::TcpListener::bind("127.0.0.1:0")?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let listener = {
            let _guard = rt.enter();
            TcpListener::from_std(std_listener)?
        };
        let mode = Arc::new(Mutex::new(mode));
        let task = rt.spawn(serve(listener, upstream, Arc::clone(&mode)));
        Ok(Self { addr, mode, task })
    }

    pub(crate) fn url(&self) -> String {
        format!("redis://{}", self.addr)
    }

    /// Changes the mode of every connection, open or to come.
    pub(crate) fn set(&self, mode: Mode) {
        if let Ok(mut m) = self.mode.lock() {
            *m = mode;
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn current(mode: &Mutex<Mode>) -> Mode {
    mode.lock().map_or(Mode::BlackHole, |m| *m)
}

async fn serve(listener: TcpListener, upstream: SocketAddr, mode: Arc<Mutex<Mode>>) {
    // Aborting this task drops the set, which aborts every connection.
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((client, _)) => {
                    conns.spawn(connection(client, upstream, Arc::clone(&mode)));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

async fn connection(client: TcpStream, upstream: SocketAddr, mode: Arc<Mutex<Mode>>) {
    let _ = client.set_nodelay(true);
    if current(&mode) == Mode::BlackHole {
        let (mut r, _w) = client.into_split();
        let mut buf = vec![0u8; 16 * 1024];
        while matches!(r.read(&mut buf).await, Ok(n) if n > 0) {}
        return;
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return;
    };
    let _ = server.set_nodelay(true);
    let (cr, cw) = client.into_split();
    let (sr, sw) = server.into_split();
    tokio::join!(
        pipe(cr, sw, Arc::clone(&mode)),
        pipe(sr, cw, Arc::clone(&mode))
    );
}

/// One direction: a reader stamping each chunk with the instant it is due,
/// and a writer sending chunks in order, each no earlier than due.
async fn pipe(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mode: Arc<Mutex<Mode>>,
) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
    let reader = async move {
        let mut buf = vec![0u8; 16 * 1024];
        let mut last_due = Instant::now();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            let now = Instant::now();
            let Mode::Delay { one_way, jitter } = current(&mode) else {
                continue; // black hole: read and drop
            };
            let factor = 1.0 + jitter * (rand::random::<f64>() * 2.0 - 1.0);
            let due = (now + one_way.mul_f64(factor.max(0.0))).max(last_due);
            last_due = due;
            if tx.send((due, buf[..n].to_vec())).is_err() {
                break;
            }
        }
    };
    let writer = async move {
        while let Some((due, chunk)) = rx.recv().await {
            wait_until(due).await;
            if to.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = to.shutdown().await;
    };
    tokio::join!(reader, writer);
}

/// Waits until `due` with sub-millisecond precision: tokio's timer for the
/// bulk, a thread sleep for the last 1.5 ms.
async fn wait_until(due: Instant) {
    const FINE: Duration = Duration::from_micros(1_500);
    let now = Instant::now();
    if due <= now {
        return;
    }
    if due - now > FINE * 2 {
        tokio::time::sleep_until((due - FINE).into()).await;
    }
    let left = due.saturating_duration_since(Instant::now());
    if !left.is_zero() {
        let _ = tokio::task::spawn_blocking(move || std::thread::sleep(left)).await;
    }
}

/// A loopback port with nothing listening: connecting is refused.
pub(crate) fn refused_port() -> Result<u16, BoxError> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

/// CPU time (user + system) of the proxy runtime's threads, from
/// `/proc/self/task/*/stat`.
pub(crate) fn proxy_cpu_secs(tck: f64) -> f64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0.0;
    for entry in dir.flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        if &stat[open + 1..close] != THREAD_NAME {
            continue;
        }
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // After "(comm)", field 3 (state) is index 0; utime is 14, stime 15.
        let utime: f64 = fields.get(11).and_then(|f| f.parse().ok()).unwrap_or(0.0);
        let stime: f64 = fields.get(12).and_then(|f| f.parse().ok()).unwrap_or(0.0);
        ticks += utime + stime;
    }
    ticks / tck
}
