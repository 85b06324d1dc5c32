//! The `quorumlock` binary, run as a real process against local masters
//! (and the shared local Redis Cluster, in `cli/cluster.rs`; a Sentinel
//! member, in `cli/sentinel.rs`; TLS-only nodes, in `cli/tls.rs`, with the
//! `tls-rustls` feature).

#[path = "cli/cluster.rs"]
mod cluster;
#[path = "cli/elect.rs"]
mod elect;
#[path = "cli/observe.rs"]
mod observe;
#[path = "cli/redisson.rs"]
mod redisson;
// A member that is a master under Redis Sentinel, and its local group.
#[path = "../../tests/support/sentinel.rs"]
mod sentinel;
#[path = "cli/sentinel.rs"]
mod sentinel_member;
// The library's integration test harness, one for both packages.
#[path = "../../tests/support/mod.rs"]
mod support;
#[path = "cli/tls.rs"]
#[cfg(feature = "tls-rustls")]
mod tls;
#[path = "../../tests/support/tls.rs"]
#[cfg(feature = "tls-rustls")]
mod tls_nodes;
#[path = "cli/top.rs"]
mod top;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use quorumlock::Quorum;
use support::{manager, nodes, unique, LocalNodes};

/// The binary, pointed at the shared nodes, with no settings from the
/// environment of whoever runs the tests.
fn ql() -> Command {
    ql_on(&nodes().urls())
}

/// The binary, pointed at `urls`.
fn ql_on(urls: &[String]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_quorumlock"));
    c.env("QUORUMLOCK_NODES", urls.join(","))
        .env_remove("QUORUMLOCK_QUORUM")
        .env_remove("QUORUMLOCK_KEY_PREFIX")
        .env_remove("QUORUMLOCK_LAYOUT")
        .stdin(Stdio::null());
    c
}

/// Runs `c` to completion with captured output.
fn run(c: &mut Command) -> Output {
    c.output().expect("run quorumlock")
}

/// Spawns `c` with captured output.
fn spawn(c: &mut Command) -> Child {
    c.stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn quorumlock")
}

/// Waits for `child` at most `within`; kills it and fails the test after that.
fn finish(mut child: Child, within: Duration) -> Output {
    let deadline = Instant::now() + within;
    let mut timed_out = false;
    while child.try_wait().expect("poll the child").is_none() {
        if Instant::now() >= deadline {
            timed_out = true;
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("collect the child");
    assert!(
        !timed_out,
        "quorumlock did not finish within {within:?}; stderr: {}",
        stderr(&out)
    );
    out
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A fresh scratch directory.
fn scratch(prefix: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(unique(&format!("quorumlock-cli-{prefix}")));
    std::fs::create_dir_all(&dir).expect("create a scratch dir");
    dir
}

/// Waits until `path` exists (the command under the lock has started).
fn wait_for_file(path: &Path, within: Duration) {
    let deadline = Instant::now() + within;
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} did not appear within {within:?}",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Sends `sig` (`-TERM`) to process `pid`.
fn signal(pid: u32, sig: &str) {
    let sent = Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(sent.success(), "kill {sig} {pid}");
}

/// Whether a JSON `since_unix_ms` is a time within the last minute.
fn just_now(since_unix_ms: &serde_json::Value) -> bool {
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    since_unix_ms
        .as_u64()
        .map(u128::from)
        .is_some_and(|since| since <= now_ms && now_ms - since < 60_000)
}

/// `status --json` parsed.
fn status_json(name: &str) -> serde_json::Value {
    let out = run(ql().args(["status", "--json", name]));
    assert_eq!(out.status.code(), Some(0), "status: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
}

#[test]
fn concurrent_execs_never_interleave() {
    let name = unique("cli-mutex");
    let dir = scratch("mutex");
    let log = dir.join("log");
    let script = r#"echo "start $$" >> "$1"; sleep 0.3; echo "end $$" >> "$1""#;
    let children: Vec<Child> = (0..3)
        .map(|_| {
            spawn(
                ql().args(["exec", &name, "--", "sh", "-c", script, "sh"])
                    .arg(&log),
            )
        })
        .collect();
    for child in children {
        let out = finish(child, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0), "exec: {}", stderr(&out));
    }
    let text = std::fs::read_to_string(&log).expect("read the log");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 6, "three runs, two lines each:\n{text}");
    for pair in lines.chunks(2) {
        let start = pair[0].strip_prefix("start ");
        let end = pair[1].strip_prefix("end ");
        assert!(start.is_some() && start == end, "runs interleaved:\n{text}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn fair_execs_run_in_the_order_they_asked() {
    let name = unique("cli-fair");
    let dir = scratch("fair");
    let (started, log) = (dir.join("started"), dir.join("log"));
    let holder = spawn(
        ql().args(["exec", "--fair", &name, "--", "sh", "-c"])
            .arg(r#"touch "$1"; sleep 2"#)
            .args(["sh"])
            .arg(&started),
    );
    wait_for_file(&started, Duration::from_secs(10));
    // Four processes queue 300 ms apart while the lock is held.
    let waiters: Vec<Child> = (0..4)
        .map(|i| {
            let child = spawn(
                ql().args(["exec", "--fair", &name, "--", "sh", "-c"])
                    .arg(format!(r#"echo {i} >> "$1""#))
                    .args(["sh"])
                    .arg(&log),
            );
            std::thread::sleep(Duration::from_millis(300));
            child
        })
        .collect();
    let out = finish(holder, Duration::from_secs(30));
    assert_eq!(out.status.code(), Some(0), "holder: {}", stderr(&out));
    for child in waiters {
        let out = finish(child, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0), "exec --fair: {}", stderr(&out));
    }
    let text = std::fs::read_to_string(&log).expect("read the log");
    assert_eq!(text, "0\n1\n2\n3\n", "runs out of order");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn exit_status_and_environment_pass_through() {
    let name = unique("cli-env");
    let out = run(ql().args([
        "exec",
        &name,
        "--",
        "sh",
        "-c",
        r#"echo "$QUORUMLOCK_NAME $QUORUMLOCK_TOKEN"; exit 7"#,
    ]));
    assert_eq!(out.status.code(), Some(7), "stderr: {}", stderr(&out));
    let printed = stdout(&out);
    let (seen_name, token) = printed
        .trim()
        .split_once(' ')
        .expect("the command printed its name and token");
    assert_eq!(seen_name, name);
    let token: u64 = token.parse().expect("QUORUMLOCK_TOKEN is a number");
    assert!(token > 0);

    // A second run gets a larger fencing token.
    let out = run(ql().args(["exec", &name, "--", "sh", "-c", "echo $QUORUMLOCK_TOKEN"]));
    assert_eq!(out.status.code(), Some(0));
    let next: u64 = stdout(&out).trim().parse().expect("a token");
    assert!(next > token, "{next} > {token}");

    // Killed by a signal: 128 + N, as shells report it.
    let out = run(ql().args(["exec", &name, "--", "sh", "-c", "kill -9 $$"]));
    assert_eq!(out.status.code(), Some(128 + 9));

    // Not found: 127, with a line saying so.
    let out = run(ql().args(["exec", &name, "--", "/nonexistent/command"]));
    assert_eq!(out.status.code(), Some(127));
    assert!(stderr(&out).contains("cannot run /nonexistent/command"));

    // The lock was released every time.
    let json = status_json(&name);
    assert!(json["holder"].is_null(), "{json}");
}

#[test]
fn losing_the_lock_terminates_the_command() {
    let private = LocalNodes::start(3).expect("start 3 private masters");
    let name = unique("cli-lost");
    let dir = scratch("lost");
    let pidfile = dir.join("pid");
    let started = Instant::now();
    let child = spawn(
        ql_on(&private.urls())
            .args(["exec", "--lease", "1s", "--grace", "1s", &name, "--"])
            .args([
                "sh",
                "-c",
                r#"echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 30"#,
                "sh",
            ])
            .arg(&pidfile),
    );
    wait_for_file(&pidfile, Duration::from_secs(10));
    let pid = std::fs::read_to_string(&pidfile).expect("read the pid");
    private.kill(0);
    private.kill(1);
    let out = finish(child, Duration::from_secs(20));
    let elapsed = started.elapsed();
    assert_eq!(out.status.code(), Some(76), "stderr: {}", stderr(&out));
    assert!(elapsed < Duration::from_secs(15), "took {elapsed:?}");
    assert!(stderr(&out).contains("lost"), "stderr: {}", stderr(&out));
    let alive = Command::new("kill")
        .args(["-0", pid.trim()])
        .stderr(Stdio::null())
        .status()
        .expect("run kill -0");
    assert!(!alive.success(), "the command outlived the lock");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_node_down_at_start_gets_the_lock_when_it_returns() {
    let private = LocalNodes::start(3).expect("start 3 private masters");
    private.kill(2);
    let name = unique("cli-late-node");
    let dir = scratch("late");
    let marker = dir.join("started");
    let child = spawn(
        ql_on(&private.urls())
            .args(["exec", "--lease", "1500ms", &name, "--"])
            .args(["sh", "-c", r#"touch "$1"; exec sleep 4"#, "sh"])
            .arg(&marker),
    );
    wait_for_file(&marker, Duration::from_secs(10));
    private.restart(2).expect("node 2 returns");
    let key = format!("quorumlock:{{{name}}}");
    let mut c = redis::Client::open(private.url(2))
        .expect("url")
        .get_connection()
        .expect("connect to node 2");
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut repaired = false;
    while Instant::now() < deadline && !repaired {
        repaired = redis::cmd("EXISTS")
            .arg(&key)
            .query::<bool>(&mut c)
            .unwrap_or(false);
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        repaired,
        "the watchdog should top the lock up on the node that came back"
    );
    let out = finish(child, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("unreachable"),
        "stderr: {}",
        stderr(&out)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn wait_gives_up_with_the_holders_pttl() {
    let name = unique("cli-wait");
    let dir = scratch("wait");
    let marker = dir.join("held");
    let holder = spawn(
        ql().args([
            "exec",
            &name,
            "--",
            "sh",
            "-c",
            r#"touch "$1"; sleep 20"#,
            "sh",
        ])
        .arg(&marker),
    );
    wait_for_file(&marker, Duration::from_secs(10));

    let started = Instant::now();
    let out = run(ql().args(["exec", "--wait", "500ms", &name, "--", "true"]));
    assert_eq!(out.status.code(), Some(75), "stderr: {}", stderr(&out));
    assert!(started.elapsed() >= Duration::from_millis(500));
    let err = stderr(&out);
    let reason = err.lines().last().unwrap_or_default();
    assert!(reason.starts_with("quorumlock: error: lock "), "{err}");
    assert!(reason.contains(&name) && reason.contains("PTTL"), "{err}");
    assert!(
        reason.contains("127.0.0.1:"),
        "names the taken nodes: {err}"
    );

    // --quiet says nothing, the status still tells.
    let out = run(ql().args(["exec", "-q", "--wait", "0s", &name, "--", "true"]));
    assert_eq!(out.status.code(), Some(75));
    assert_eq!(stderr(&out), "");

    // SIGTERM to the holder reaches its command, then the lock is released.
    let term = Command::new("kill")
        .args(["-TERM", &holder.id().to_string()])
        .status()
        .expect("run kill");
    assert!(term.success());
    let out = finish(holder, Duration::from_secs(10));
    assert_eq!(
        out.status.code(),
        Some(128 + 15),
        "stderr: {}",
        stderr(&out)
    );
    let json = status_json(&name);
    assert!(json["holder"].is_null(), "{json}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn status_shows_every_node() {
    let m = manager(Quorum::Majority).await;
    let name = unique("cli-status");
    let me = m.new_owner();
    let outer = m.request(&name).owner(&me).acquire().await.expect("lock");
    let inner = m
        .request(&name)
        .owner(&me)
        .acquire()
        .await
        .expect("re-enter");
    let owner = outer.holder_id().to_owned();
    let token = outer.fencing_token();
    let settled = support::eventually(Duration::from_secs(2), || async {
        let s = m.status(&name).await.expect("status");
        s.nodes.iter().all(|n| {
            n.state
                .as_ref()
                .is_ok_and(|s| s.hold_count == 2 && s.fence >= token)
        })
    })
    .await;
    assert!(settled, "every node shows the hold");

    let n = name.clone();
    let json = tokio::task::spawn_blocking(move || status_json(&n))
        .await
        .expect("status --json");
    assert_eq!(json["name"], name.as_str());
    assert_eq!(json["required"], 3);
    assert_eq!(json["holder"], owner.as_str());
    // Who holds it: this test process, on this host, since just now.
    let info = &json["holder_info"];
    assert_eq!(info["pid"], std::process::id(), "{info}");
    assert!(
        info["host"].as_str().is_some_and(|h| !h.is_empty()),
        "{info}"
    );
    assert!(just_now(&info["since_unix_ms"]), "{info}");
    let rows = json["nodes"].as_array().expect("nodes array");
    assert_eq!(rows.len(), 5);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["node"], i);
        assert_eq!(row["addr"], format!("127.0.0.1:{}", nodes().port(i)));
        assert_eq!(row["reachable"], true);
        assert_eq!(row["holder"], owner.as_str());
        assert_eq!(row["hold_count"], 2);
        // One counter per node for every lock: other tests move it on.
        assert!(row["fence"].as_u64().is_some_and(|f| f >= token), "{row}");
        assert_eq!(row["maxmemory_policy"], "noeviction");
        let pttl = row["pttl_ms"].as_u64().expect("a PTTL");
        assert!(pttl > 0 && pttl <= 30_000, "{pttl}");
    }

    let n = name.clone();
    let out = tokio::task::spawn_blocking(move || run(ql().args(["status", &n])))
        .await
        .expect("status");
    assert_eq!(out.status.code(), Some(0));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].contains(&format!("held by {owner}")), "{table}");
    assert!(lines[1].starts_with("NODE"), "{table}");
    assert_eq!(lines.len(), 8, "{table}");
    assert_eq!(lines[7], "no one waiting", "{table}");
    for (i, line) in lines[2..7].iter().enumerate() {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[0], i.to_string(), "{table}");
        assert_eq!(cells[1], format!("127.0.0.1:{}", nodes().port(i)));
        assert_eq!(cells[2], "yes");
        assert_eq!(cells[3], owner);
        assert_eq!(cells[4], "2");
        assert!(cells[5].ends_with('s'), "a PTTL: {line}");
        assert!(cells[6].parse::<u64>().is_ok_and(|f| f >= token), "{line}");
        assert_eq!(cells[7], "noeviction", "{table}");
    }

    inner.release().await.expect("release the inner level");
    outer.release().await.expect("release");
    let n = name.clone();
    let json = tokio::task::spawn_blocking(move || status_json(&n))
        .await
        .expect("status --json");
    assert!(json["holder"].is_null(), "{json}");
    for row in json["nodes"].as_array().expect("nodes array") {
        assert!(row["holder"].is_null());
        assert_eq!(row["hold_count"], 0);
        assert!(row["pttl_ms"].is_null());
        assert!(
            row["fence"].as_u64().is_some_and(|f| f >= token),
            "the fence counter survives release: {row}"
        );
    }
}

#[tokio::test]
async fn unlock_force_breaks_a_held_lock() {
    let m = manager(Quorum::Majority).await;
    let name = unique("cli-unlock");
    let guard = m.lock(&name).await.expect("lock");

    let n = name.clone();
    let (refused, declined) = tokio::task::spawn_blocking(move || {
        let refused = run(ql().args(["unlock", &n]));
        let mut c = ql();
        c.args(["unlock", "--force", &n])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = c.spawn().expect("spawn unlock");
        {
            use std::io::Write;
            let mut stdin = child.stdin.take().expect("stdin");
            stdin.write_all(b"not-the-name\n").expect("answer");
        }
        (refused, finish(child, Duration::from_secs(10)))
    })
    .await
    .expect("unlock runs");
    assert_eq!(refused.status.code(), Some(2));
    assert!(stderr(&refused).contains("administrative break"));
    assert_eq!(declined.status.code(), Some(1), "{}", stderr(&declined));
    assert!(stderr(&declined).contains("Type the lock name to confirm"));
    assert!(guard.is_held(), "a declined unlock leaves the lock alone");

    let n = name.clone();
    let (out, json) = tokio::task::spawn_blocking(move || {
        let out = run(ql().args(["unlock", "--force", "--yes", &n]));
        (out, status_json(&n))
    })
    .await
    .expect("unlock runs");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("deleted on"), "{}", stdout(&out));
    assert!(json["holder"].is_null(), "{json}");
    for row in json["nodes"].as_array().expect("nodes array") {
        assert!(row["holder"].is_null(), "{json}");
        assert_eq!(row["hold_count"], 0);
    }
    // The holder finds out when it releases.
    assert!(guard.release().await.is_err());
}

#[test]
fn bad_input_is_one_line_and_status_2() {
    let name = unique("cli-bad");
    let cases: Vec<(&str, Command)> = vec![
        ("duration", {
            let mut c = ql();
            c.args(["exec", "--wait", "5x", &name, "--", "true"]);
            c
        }),
        ("lease", {
            let mut c = ql();
            c.args(["exec", "--lease", "soon", &name, "--", "true"]);
            c
        }),
        ("quorum", {
            let mut c = ql();
            c.args(["--quorum", "most", "status", &name]);
            c
        }),
        ("quorum too large", {
            let mut c = ql();
            c.args(["--quorum", "9", "exec", &name, "--", "true"]);
            c
        }),
        ("url", {
            let mut c = ql_on(&["not a url".to_owned()]);
            c.args(["status", &name]);
            c
        }),
        ("url scheme", {
            let mut c = ql();
            c.args(["--nodes", "http://127.0.0.1:1", "status", &name]);
            c
        }),
        ("no nodes", {
            let mut c = ql();
            c.env_remove("QUORUMLOCK_NODES").args(["status", &name]);
            c
        }),
        ("lock name", {
            let mut c = ql();
            c.args(["exec", "a{b}", "--", "true"]);
            c
        }),
        ("empty value", {
            let mut c = ql();
            c.args(["elect", "--value", "", &name, "--", "true"]);
            c
        }),
        ("election name", {
            let mut c = ql();
            c.args(["elect", "--value", "v", "a{b}", "--", "true"]);
            c
        }),
        ("leader name", {
            let mut c = ql();
            c.args(["leader", "a}b"]);
            c
        }),
        ("leader name, watched", {
            let mut c = ql();
            c.args(["leader", "--watch", "--json", "{a"]);
            c
        }),
    ];
    for (what, mut c) in cases {
        let out = run(&mut c);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(err.starts_with("quorumlock: error: "), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        if what == "no nodes" {
            assert!(err.contains("QUORUMLOCK_NODES=redis://"), "{err}");
        }
    }
}

/// Whether process `pid` is running (present and not a zombie).
fn running(pid: &str) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())) else {
        return false;
    };
    // The state follows the parenthesised command name.
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.trim_start().chars().next());
    !matches!(state, Some('Z' | 'X') | None)
}

/// Waits until process `pid` is no longer running; false after `within`.
fn gone_within(pid: &str, within: Duration) -> bool {
    let deadline = Instant::now() + within;
    while running(pid) {
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}

/// SIGKILLs `pid` if it still runs (cleanup after a failed assertion).
fn kill_if_running(pid: &str) {
    if running(pid) {
        let _ = Command::new("kill").args(["-9", pid.trim()]).status();
    }
}

/// Hands lock `name` to another owner on every shared node, atomically per
/// node, behind its holder's back (as a forced unlock followed by someone
/// else's acquisition would).
fn steal(name: &str) {
    for url in nodes().urls() {
        let mut c = redis::Client::open(url)
            .expect("node url")
            .get_connection()
            .expect("connect to a node");
        let _: () = redis::pipe()
            .atomic()
            .cmd("DEL")
            .arg(support::key(name))
            .cmd("HSET")
            .arg(support::key(name))
            .arg("thief")
            .arg(1)
            .cmd("PEXPIRE")
            .arg(support::key(name))
            .arg(60_000)
            .query(&mut c)
            .expect("take the lock over on a node");
    }
}

/// Removes what [`steal`] left.
fn unsteal(name: &str) {
    let out = run(ql().args(["unlock", "--force", "--yes", name]));
    assert_eq!(out.status.code(), Some(0), "unlock: {}", stderr(&out));
}

/// A shell script that writes its pid to `$1` atomically, then ignores
/// SIGTERM and runs until killed (with its output closed, so that it holds
/// no pipe of the test open).
const STUBBORN: &str = r#"exec >/dev/null 2>&1; trap '' TERM; echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; while :; do sleep 0.1; done"#;

#[test]
fn the_grace_after_a_loss_is_capped_at_the_remaining_validity() {
    let name = unique("cli-grace-cap");
    let dir = scratch("grace-cap");
    let pidfile = dir.join("pid");
    let child = spawn(
        ql().args(["exec", "--lease", "3s", "--grace", "60s", &name, "--"])
            .args(["sh", "-c", STUBBORN, "sh"])
            .arg(&pidfile),
    );
    wait_for_file(&pidfile, Duration::from_secs(10));
    let pid = std::fs::read_to_string(&pidfile).expect("read the pid");
    // Give the lock to someone else behind the holder's back: its next
    // renewal finds it taken, with at most a lease of validity left, far
    // less than --grace.
    let broken = Instant::now();
    steal(&name);
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut child = child;
    while child.try_wait().expect("poll quorumlock").is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let finished = child.try_wait().expect("poll quorumlock").is_some();
    if !finished {
        let _ = child.kill();
    }
    let out = child.wait_with_output().expect("collect quorumlock");
    let elapsed = broken.elapsed();
    let command_gone = gone_within(&pid, Duration::from_secs(1));
    kill_if_running(&pid);
    assert!(
        finished,
        "the command ran on for the whole --grace after the loss; stderr: {}",
        stderr(&out)
    );
    assert!(command_gone, "the command outlived quorumlock");
    assert_eq!(out.status.code(), Some(76), "stderr: {}", stderr(&out));
    // At most one renewal period to notice, plus a lease of validity.
    assert!(elapsed < Duration::from_secs(8), "took {elapsed:?}");
    let err = stderr(&out);
    assert!(
        err.contains("capped at the lock's remaining validity"),
        "{err}"
    );
    assert!(err.contains("SIGKILL"), "{err}");
    unsteal(&name);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_lock_is_held_until_the_whole_group_is_gone() {
    let name = unique("cli-group");
    let dir = scratch("group");
    let started = dir.join("started");
    let done = dir.join("done");
    // The command exits at once, leaving a member of its group running.
    let child = spawn(
        ql().args(["exec", &name, "--"])
            .args([
                "sh",
                "-c",
                r#"(sleep 1.5; touch "$2") >/dev/null 2>&1 & touch "$1"; exit 0"#,
                "sh",
            ])
            .arg(&started)
            .arg(&done),
    );
    wait_for_file(&started, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    assert!(!done.exists(), "the background member is still running");
    let json = status_json(&name);
    assert!(
        !json["holder"].is_null(),
        "released while a member of the command's group still ran: {json}"
    );
    let out = finish(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(done.exists(), "quorumlock exited before the member did");
    let json = status_json(&name);
    assert!(json["holder"].is_null(), "released after the group: {json}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_lock_lost_while_waiting_for_the_group_stops_the_group() {
    let name = unique("cli-group-lost");
    let dir = scratch("group-lost");
    let pidfile = dir.join("pid");
    // The command exits at once; the member it leaves ignores SIGTERM.
    let script = format!(
        r#"sh -c '{}' sh "$1" >/dev/null 2>&1 & exit 0"#,
        STUBBORN.replace('\'', r#"'\''"#)
    );
    let child = spawn(
        ql().args(["exec", "--lease", "3s", "--grace", "60s", &name, "--"])
            .args(["sh", "-c", &script, "sh"])
            .arg(&pidfile),
    );
    wait_for_file(&pidfile, Duration::from_secs(10));
    let pid = std::fs::read_to_string(&pidfile).expect("read the pid");
    steal(&name);
    let out = finish(child, Duration::from_secs(15));
    let member_gone = gone_within(&pid, Duration::from_secs(1));
    kill_if_running(&pid);
    assert!(member_gone, "the member outlived the lock");
    assert_eq!(out.status.code(), Some(76), "stderr: {}", stderr(&out));
    unsteal(&name);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn killing_quorumlock_kills_the_command() {
    let name = unique("cli-pdeathsig");
    let dir = scratch("pdeathsig");
    let pidfile = dir.join("pid");
    let mut child = spawn(
        ql().args(["exec", "--lease", "2s", &name, "--"])
            .args([
                "sh",
                "-c",
                r#"echo $$ > "$1.tmp"; mv "$1.tmp" "$1"; exec sleep 30"#,
                "sh",
            ])
            .arg(&pidfile),
    );
    wait_for_file(&pidfile, Duration::from_secs(10));
    let pid = std::fs::read_to_string(&pidfile).expect("read the pid");
    assert!(running(&pid), "the command runs");
    child.kill().expect("SIGKILL quorumlock");
    let _ = child.wait();
    let gone = gone_within(&pid, Duration::from_secs(2));
    kill_if_running(&pid);
    assert!(gone, "the command ran on after quorumlock was killed");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `exec` over five masters, two of them down from the start: the command
/// runs under the lock, and `quorumlock` exits as soon as it has released,
/// not a lease later (its releases to the dead nodes are sent again when
/// their dial pauses end, for as long as the lease lasts: the exit waited
/// for them, 29.7 s with the default 30 s lease).
#[test]
fn exec_exits_promptly_with_nodes_down() {
    let private = LocalNodes::start(5).expect("start 5 private masters");
    private.kill(3);
    private.kill(4);
    let name = unique("cli-prompt-exit");
    let began = Instant::now();
    let out = run(ql_on(&private.urls()).args(["exec", "--lease", "30s", &name, "--", "true"]));
    let took = began.elapsed();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("2 of 5 node(s) unreachable"),
        "stderr: {}",
        stderr(&out)
    );
    assert!(
        took < Duration::from_secs(10),
        "exec took {took:?} to exit with a 30 s lease"
    );
    let key = format!("quorumlock:{{{name}}}");
    for i in 0..3 {
        let mut c = redis::Client::open(private.url(i))
            .expect("url")
            .get_connection()
            .expect("connect to a live node");
        let left: bool = redis::cmd("EXISTS")
            .arg(&key)
            .query(&mut c)
            .expect("EXISTS");
        assert!(!left, "released on live node {i}");
    }
}
