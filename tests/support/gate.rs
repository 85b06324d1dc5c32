//! A TCP proxy in front of one server that can hold back the requests of
//! one connection: once armed, the first chunk a client sends that
//! contains a needle (a script's digest) is held, with everything that
//! connection sends after it, until the gate opens. The other connections
//! go on. This is a slow link on one flow, as a pipeline stuck behind a
//! busy server's reads is. `tests/watchdog.rs` includes it with `#[path]`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Notify;

/// The proxy's URL and its switches.
pub struct Gate {
    pub url: String,
    state: Arc<State>,
}

struct State {
    needle: Vec<u8>,
    armed: AtomicBool,
    holding: AtomicBool,
    open: AtomicBool,
    opened: Notify,
}

impl Gate {
    /// A proxy on 127.0.0.1 in front of `port`, holding the first chunk
    /// that contains `needle` once armed.
    ///
    /// # Errors
    ///
    /// When it cannot listen.
    pub async fn start(port: u16, needle: &str) -> std::io::Result<Self> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("redis://127.0.0.1:{}", listener.local_addr()?.port());
        let state = Arc::new(State {
            needle: needle.as_bytes().to_vec(),
            armed: AtomicBool::new(false),
            holding: AtomicBool::new(false),
            open: AtomicBool::new(false),
            opened: Notify::new(),
        });
        let st = Arc::clone(&state);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
                    continue;
                };
                let st = Arc::clone(&st);
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    tokio::select! {
                        () = requests(&mut cr, &mut sw, &st) => {}
                        _ = tokio::io::copy(&mut sr, &mut cw) => {}
                    }
                });
            }
        });
        Ok(Self { url, state })
    }

    /// From now on, the first chunk with the needle is held.
    pub fn arm(&self) {
        self.state.armed.store(true, Ordering::SeqCst);
    }

    /// Whether a chunk is held now; waits up to `within` for one.
    pub async fn holding(&self, within: Duration) -> bool {
        let end = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < end {
            if self.state.holding.load(Ordering::SeqCst) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        false
    }

    /// Lets the held chunk, and what its connection sent after it, through.
    pub fn open(&self) {
        self.state.open.store(true, Ordering::SeqCst);
        self.state.opened.notify_waiters();
    }
}

/// Forwards one connection's requests, holding them from the first chunk
/// with the needle while armed until the gate opens.
async fn requests<R, W>(from: &mut R, to: &mut W, st: &State)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        let chunk = &buf[..n];
        let hit = chunk.windows(st.needle.len()).any(|w| w == st.needle);
        if hit && st.armed.load(Ordering::SeqCst) && !st.holding.swap(true, Ordering::SeqCst) {
            // Held, and with it everything this connection sends later:
            // this task reads nothing more until the gate opens.
            loop {
                let opened = st.opened.notified();
                if st.open.load(Ordering::SeqCst) {
                    break;
                }
                opened.await;
            }
        }
        if to.write_all(chunk).await.is_err() {
            return;
        }
    }
}

/// The watchdog's repair batch script on a master, as quorumlock sends it:
/// the batch prelude, then `repair.lua`, without comments or blank lines.
pub fn repair_script() -> redis::Script {
    let source = [
        include_str!("../../src/scripts/batch_prelude.lua"),
        include_str!("../../src/scripts/repair.lua"),
    ];
    let body = source
        .iter()
        .flat_map(|s| s.lines())
        .map(str::trim_end)
        .filter(|l| !l.trim_start().starts_with("--") && !l.trim().is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    redis::Script::new(&body)
}
