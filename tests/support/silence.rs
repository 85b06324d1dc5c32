//! TCP proxies in front of some servers that can go silent at once, as a
//! crashed process's peers see it: open connections stop forwarding, new
//! ones are dropped. `tests/election.rs` and `benches/election.rs` include
//! it with `#[path]`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The proxies' URLs, in the order of the ports given, and their switch.
pub struct Silence {
    pub urls: Vec<String>,
    pub silent: Arc<AtomicBool>,
}

/// One proxy per port of `ports` on 127.0.0.1, forwarding until `silent`.
///
/// # Errors
///
/// When a proxy cannot listen.
pub async fn silence(ports: &[u16]) -> std::io::Result<Silence> {
    let silent = Arc::new(AtomicBool::new(false));
    let mut urls = Vec::new();
    for &to in ports {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        urls.push(format!(
            "redis://127.0.0.1:{}",
            listener.local_addr()?.port()
        ));
        let silent = Arc::clone(&silent);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if silent.load(Ordering::SeqCst) {
                    continue;
                }
                let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await else {
                    continue;
                };
                let silent = Arc::clone(&silent);
                tokio::spawn(async move {
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    // Closes idle connections soon after the switch; the
                    // pumps themselves never forward a byte read after it.
                    let cut = async {
                        while !silent.load(Ordering::SeqCst) {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    };
                    tokio::select! {
                        () = pump(&mut cr, &mut sw, &silent) => {}
                        () = pump(&mut sr, &mut cw, &silent) => {}
                        () = cut => {}
                    }
                });
            }
        });
    }
    Ok(Silence { urls, silent })
}

/// Forwards `from` to `to` until either closes or `silent` is set, checking
/// the switch after every read: bytes sent after the switch was set never
/// reach the other side, however late the cut's timer fires (a timer alone
/// let a request sent just after the switch through on a busy machine).
async fn pump<R, W>(from: &mut R, to: &mut W, silent: &AtomicBool)
where
    R: tokio::io::AsyncRead + Unpin,
    W: tokio::io::AsyncWrite + Unpin,
{
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        if silent.load(Ordering::SeqCst) || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
