//! The CLI with a member that is a master under Redis Sentinel
//! (`support/sentinel.rs`), named `sentinel:NAME@URL+URL` in
//! `QUORUMLOCK_NODES`, through a failover of that member.

use std::time::{Duration, Instant};

use super::sentinel::{group, serial};
use super::{finish, nodes, ql_on, run, scratch, spawn, stderr, stdout, unique, wait_for_file};

/// The members: masters 0 and 1, then the Sentinel member.
fn members() -> Vec<String> {
    let g = group();
    let mut members = nodes().urls()[..2].to_vec();
    members.push(format!(
        "sentinel:{}@{}",
        g.master_name(),
        g.sentinel_urls().join("+")
    ));
    members
}

/// The Sentinel member's row of `status --json NAME`: its holder and the
/// master that answered.
fn member_row(name: &str) -> (serde_json::Value, serde_json::Value) {
    let out = run(ql_on(&members()).args(["status", "--json", name]));
    assert_eq!(out.status.code(), Some(0), "status: {}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let row = &json["nodes"][2];
    assert_eq!(row["addr"], "sentinel:locks-s", "{json}");
    (row["holder"].clone(), row["shard"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_and_status_follow_a_sentinel_members_failover() {
    let _serial = serial().await;
    let g = group();
    let name = unique("cli-sentinel");
    let dir = scratch("sentinel");
    let started = dir.join("started");
    let holder = spawn(ql_on(&members()).args([
        "exec",
        "--lease",
        "2s",
        &name,
        "--",
        "sh",
        "-c",
        &format!("touch {} && sleep 8 && echo done", started.display()),
    ]));
    wait_for_file(&started, Duration::from_secs(10));
    let old = g.master_told(0).await.unwrap();
    let (held_by, shard) = member_row(&name);
    assert!(held_by.is_string(), "held on the member");
    assert_eq!(shard, format!("127.0.0.1:{old}"));

    g.servers.kill(g.server_of(old));
    let new = g.wait_promoted(old, Duration::from_secs(20)).await;
    // The member follows, and the watchdog keeps (or repairs) the hold on
    // the promoted replica.
    let since = Instant::now();
    loop {
        let (holder, shard) = member_row(&name);
        if holder == held_by && shard == format!("127.0.0.1:{new}") {
            break;
        }
        assert!(
            since.elapsed() < Duration::from_secs(5),
            "status after the failover: holder {holder}, master {shard}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eprintln!(
        "status names the promoted master {new} {:?} after the promotion",
        since.elapsed()
    );
    let out = tokio::task::spawn_blocking(move || finish(holder, Duration::from_secs(20)))
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "exec: {}", stderr(&out));
    assert!(stdout(&out).contains("done"));
    g.wait_healthy(Duration::from_secs(30)).await;
}

#[test]
fn a_malformed_sentinel_member_is_one_line_and_status_2() {
    let out = run(ql_on(&["sentinel:locks-s".to_owned()]).args(["status", "x"]));
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(err.contains("sentinel:MASTER_NAME@"), "{err}");
}

/// A Sentinel member none of whose three sentinels answers is one member
/// down, not three: `exec` says so and goes on (it counted each sentinel,
/// and with a master down too subtracted past zero: a panic in a debug
/// build).
#[test]
fn a_sentinel_member_whose_sentinels_are_down_counts_as_one_member() {
    let dead = "sentinel:locks-s@redis://127.0.0.1:1+redis://127.0.0.1:2+redis://127.0.0.1:3";
    let members = [
        nodes().url(0),
        "redis://127.0.0.1:4".to_owned(),
        dead.to_owned(),
    ];
    let name = unique("cli-sentinel-down");
    let args = [
        "--quorum", "1", "exec", "--lease", "2s", &name, "--", "true",
    ];
    let out = run(ql_on(&members).args(args));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(0), "exec: {err}");
    assert!(
        err.contains("2 of 3 node(s) unreachable, going on with the other 1"),
        "{err}"
    );
}
