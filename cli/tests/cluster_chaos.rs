//! Failover chaos for the command line, on the local Redis Cluster of three
//! masters with one replica each that `tests/cluster_chaos.rs` faults
//! (`support::local_cluster::replica_cluster`: started once for this
//! binary, `cluster-node-timeout` 1 s).
//!
//! | test | fault | manager | expected |
//! | --- | --- | --- | --- |
//! | `top_and_status_watch_follow_a_failover` | the lock's master killed, its replica promoted, while `quorumlock top --watch` and `status --watch` run | fixed lease, no watchdog | the frames after the promotion scan the promoted replica and list the lock (`top`), and name it as the lock's shard (`status`) |
//!
//! Every test takes [`serial`] (they fault the one cluster) and leaves the
//! cluster healthy: every shard with a master and a replica in sync.

#![allow(clippy::unwrap_used, clippy::panic)]

// The library's integration test harness, one for both packages.
#[path = "../../tests/support/mod.rs"]
mod support;
// One test at a time, managers of the cluster alone, placed names.
#[path = "../../tests/support/failover.rs"]
mod failover;

use std::time::{Duration, Instant};

use failover::{build, only, placed, serial};
use support::local_cluster::{has_lock_at, replica_cluster, LocalCluster};
use support::unique;

/// The last whole frame of a `--watch` of `title` that wrote `text`
/// (frames start with a `-- <title>` header; the last one may still be
/// written).
fn last_frame<'t>(text: &'t str, title: &str) -> Option<&'t str> {
    let mut frames: Vec<&str> = text.split(&format!("-- {title}")).collect();
    frames.pop();
    frames.pop().filter(|f| !f.is_empty())
}

/// `quorumlock <args> --watch --interval 200ms` over the replica cluster,
/// its output into `out`.
fn watching(args: &[&str], out: &std::path::Path) -> std::process::Child {
    std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
        .env(
            "QUORUMLOCK_NODES",
            format!("cluster:{}", replica_cluster().urls().join("+")),
        )
        .env_remove("QUORUMLOCK_QUORUM")
        .env_remove("QUORUMLOCK_KEY_PREFIX")
        .env_remove("QUORUMLOCK_LAYOUT")
        .args(args)
        .args(["--watch", "--interval", "200ms"])
        .stdin(std::process::Stdio::null())
        .stdout(std::fs::File::create(out).unwrap())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap()
}

/// Waits at most 20 s for a frame of `title` in `out`, after its first
/// `from` bytes, that `ok` accepts; returns the output's length then.
fn frame_after(
    out: &std::path::Path,
    title: &str,
    from: usize,
    ok: &dyn Fn(&str) -> bool,
) -> usize {
    let until = Instant::now() + Duration::from_secs(20);
    loop {
        let text = std::fs::read_to_string(out).unwrap_or_default();
        let frame = text
            .get(from..)
            .and_then(|t| last_frame(t, title))
            .unwrap_or("");
        if ok(frame) {
            return text.len();
        }
        assert!(
            Instant::now() < until,
            "no such {title} frame; the last:\n{frame}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// `top --watch` and `status --watch` follow a failover inside a cluster
/// member: once the lock's master is killed and its replica promoted, the
/// frames of `top` scan the promoted replica and list the lock again, and
/// those of `status` name it as the lock's shard. (`top` used to list the
/// shards once: every later frame asked the dead master, "cannot scan",
/// and missed the lock.)
#[tokio::test]
async fn top_and_status_watch_follow_a_failover() {
    let _serial = serial().await;
    let c: &LocalCluster = replica_cluster();
    let (name, slot, master, replica) = placed("top-watch").await;
    let m = build(only(Duration::from_secs(10))).await;
    let g = m
        .lock_with_lease(&name, Duration::from_secs(120))
        .await
        .unwrap();
    let started = Instant::now();
    while !has_lock_at(replica, &name).await {
        assert!(started.elapsed() < Duration::from_secs(5), "not replicated");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (top_title, status_title) = ("quorumlock top", format!("quorumlock status {name}"));
    let top_out = std::env::temp_dir().join(format!("{}.out", unique("top-watch")));
    let status_out = std::env::temp_dir().join(format!("{}.out", unique("status-watch")));
    let mut top = watching(&["top", "--limit", "100000"], &top_out);
    let mut status = watching(&["status", &name], &status_out);
    let whole = |f: &str| f.contains(&name) && f.contains("on 1 of 1 node(s)");
    // The SHARD column of the member's row (its ADDRESS lists every seed).
    let at = |port: u16| {
        move |f: &str| {
            f.lines()
                .skip_while(|l| !l.starts_with("NODE "))
                .nth(1)
                .and_then(|row| row.split_whitespace().nth(2))
                == Some(&format!("127.0.0.1:{port}"))
        }
    };
    frame_after(&top_out, top_title, 0, &whole);
    frame_after(&status_out, &status_title, 0, &at(master));
    let i = c.index_of(master);
    c.nodes.kill(i);
    let promoted = c.wait_promoted(slot, master, Duration::from_secs(20)).await;
    assert_eq!(promoted, replica);
    let len = |out: &std::path::Path| std::fs::read_to_string(out).unwrap_or_default().len();
    let (top_len, status_len) = (len(&top_out), len(&status_out));
    let result = std::panic::catch_unwind(|| {
        // The frame being drawn at the promotion may still be the dead
        // master's: one more after it.
        let next = frame_after(&top_out, top_title, top_len, &|f: &str| !f.is_empty());
        frame_after(&top_out, top_title, next, &|f: &str| {
            whole(f) && !f.contains("cannot scan")
        });
        let next = frame_after(&status_out, &status_title, status_len, &|f: &str| {
            !f.is_empty()
        });
        frame_after(&status_out, &status_title, next, &at(promoted));
    });
    for child in [&mut top, &mut status] {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_file(&top_out);
    let _ = std::fs::remove_file(&status_out);
    c.nodes.restart(i).expect("restart the old master");
    c.wait_healthy(Duration::from_secs(30)).await;
    let _ = g.release().await;
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
