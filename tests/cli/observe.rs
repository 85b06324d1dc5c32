//! Watching locks: `status` with its waiters, `status --watch` in a real
//! terminal (tmux) and on a pipe, `top` over 20,000 locks, bad input.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::{finish, nodes, ql, ql_on, run, scratch, spawn, status_json, stderr, stdout};
use super::{unique, wait_for_file, LocalNodes};

/// A holder of `name` run through `quorumlock exec`: it holds the lock
/// from when `started` exists until `stop` does.
fn hold_until_stopped(urls: &[String], name: &str, dir: &std::path::Path) -> Child {
    let child = spawn(
        ql_on(urls)
            .args(["exec", name, "--", "sh", "-c"])
            .arg(r#"touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done"#)
            .arg("sh")
            .arg(dir.join("started"))
            .arg(dir.join("stop")),
    );
    wait_for_file(&dir.join("started"), Duration::from_secs(10));
    child
}

/// Lets the holder of [`hold_until_stopped`] release; waits for it.
fn stop_holder(holder: Child, dir: &std::path::Path) {
    std::fs::write(dir.join("stop"), b"").expect("write the stop file");
    let out = finish(holder, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "holder: {}", stderr(&out));
}

/// Waits until `f` is true, polling every 50 ms; false after `within`.
fn until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if f() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A tmux server of its own (a socket name unique to the test), killed
/// when dropped.
struct Tmux {
    socket: String,
}

impl Tmux {
    fn new() -> Self {
        Self {
            socket: unique("quorumlock-test"),
        }
    }

    /// Runs `tmux -L SOCKET ARGS`; returns its stdout.
    fn run(&self, args: &[&str]) -> String {
        let out = Command::new("tmux")
            .args(["-L", &self.socket, "-f", "/dev/null"])
            .args(args)
            .env_remove("TMUX")
            .stdin(Stdio::null())
            .output()
            .expect("run tmux (scripts/setup.sh installs it)");
        assert!(
            out.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// What the pane shows.
    fn pane(&self) -> String {
        self.run(&["capture-pane", "-p", "-t", "watch"])
    }

    /// A format of the pane, as `display-message -p` prints it.
    fn format(&self, format: &str) -> String {
        self.run(&["display-message", "-p", "-t", "watch", format])
            .trim()
            .to_owned()
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = Command::new("tmux")
            .args(["-L", &self.socket, "kill-server"])
            .stderr(Stdio::null())
            .status();
    }
}

/// `s` quoted for `sh`.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

#[test]
fn status_watch_redraws_in_a_terminal_and_ends_on_ctrl_c() {
    let name = unique("cli-watch-tty");
    let dir = scratch("watch-tty");
    let holder = hold_until_stopped(&nodes().urls(), &name, &dir);
    let holder_pid = holder.id();

    // The shell in the pane survives Ctrl-C (its trap) to report the exit
    // status of quorumlock and keep the pane open: tmux 3.3 may drop what
    // a pane's last process writes just before it exits, here the escape
    // code that shows the cursor again.
    let command = format!(
        "trap : INT; env -u QUORUMLOCK_QUORUM -u QUORUMLOCK_KEY_PREFIX QUORUMLOCK_NODES={} {} \
         status --watch --interval 200ms {}; echo \"quorumlock exited with $?\"; exec sleep 60",
        quote(&nodes().urls().join(",")),
        quote(env!("CARGO_BIN_EXE_quorumlock")),
        quote(&name),
    );
    let tmux = Tmux::new();
    tmux.run(&[
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "40",
        "-s",
        "watch",
        &command,
    ]);

    let held = format!("lock {name}: held by ");
    let pid = format!("pid {holder_pid},");
    assert!(
        until(Duration::from_secs(10), || {
            let pane = tmux.pane();
            pane.contains(&held) && pane.contains(&pid)
        }),
        "the pane shows the holder:\n{}",
        tmux.pane()
    );
    let pane = tmux.pane();
    let lines: Vec<&str> = pane.lines().collect();
    assert!(
        lines[0].starts_with(&format!("-- quorumlock status {name}, every 200ms, at ")),
        "{pane}"
    );
    assert!(lines[2].starts_with("NODE "), "{pane}");
    assert_eq!(
        lines.iter().filter(|l| l.contains(" yes ")).count(),
        5,
        "{pane}"
    );
    assert!(pane.contains("no one waiting"), "{pane}");
    assert_eq!(tmux.format("#{cursor_flag}"), "0", "the cursor is hidden");

    stop_holder(holder, &dir);
    let free = format!("lock {name}: free;");
    assert!(
        until(Duration::from_secs(10), || tmux.pane().contains(&free)),
        "the pane shows the lock free:\n{}",
        tmux.pane()
    );
    // Redrawn in place: one view on the screen, the holder gone from it.
    let pane = tmux.pane();
    assert_eq!(pane.matches("-- quorumlock status").count(), 1, "{pane}");
    assert!(!pane.contains("held by"), "{pane}");
    assert!(pane.lines().next().is_some_and(|l| l.starts_with("-- ")));

    tmux.run(&["send-keys", "-t", "watch", "C-c"]);
    assert!(
        until(Duration::from_secs(10), || tmux
            .pane()
            .contains("quorumlock exited with ")),
        "Ctrl-C ends the watch:\n{}",
        tmux.pane()
    );
    let pane = tmux.pane();
    assert!(pane.contains("quorumlock exited with 0\n"), "{pane}");
    assert_eq!(tmux.format("#{cursor_flag}"), "1", "the cursor is back");
    let _ = std::fs::remove_dir_all(&dir);
}

/// Reads `child`'s stdout in the background, into a string shared with
/// the test.
fn collect_stdout(child: &mut Child) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let mut out = child.stdout.take().expect("piped stdout");
    let shared = Arc::clone(&text);
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n) = out.read(&mut buf) {
            if n == 0 {
                break;
            }
            let mut t = shared
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            t.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    });
    text
}

fn read(text: &Arc<Mutex<String>>) -> String {
    text.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .clone()
}

/// The snapshots of a plain `--watch`, each from its header line on.
fn snapshots(text: &str) -> Vec<String> {
    text.split("\n\n-- ")
        .map(|s| {
            if s.starts_with("-- ") {
                s.to_owned()
            } else {
                format!("-- {s}")
            }
        })
        .collect()
}

/// The REACHABLE cell of node `i` in a snapshot.
fn reachable(snapshot: &str, i: usize) -> Option<String> {
    snapshot
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|c| c.first() == Some(&i.to_string().as_str()) && c.len() > 2)
        .map(|c| c[2].to_owned())
}

/// Waits until the last `n` complete snapshots (the newest may still be
/// coming) show the REACHABLE cells `want` for nodes 0, 1 and 2.
fn settles_on(text: &Arc<Mutex<String>>, n: usize, want: [&str; 3]) -> bool {
    until(Duration::from_secs(10), || {
        let s = snapshots(&read(text));
        s.len() > n
            && s[s.len() - 1 - n..s.len() - 1]
                .iter()
                .all(|s| (0..3).all(|i| reachable(s, i).as_deref() == Some(want[i])))
    })
}

#[test]
fn status_watch_prints_plain_snapshots_and_follows_the_nodes() {
    let private = LocalNodes::start(3).expect("start 3 private masters");
    // Node 2 is down at the start, comes back, then node 1 goes down.
    private.kill(2);
    let name = unique("cli-watch-plain");
    let mut child =
        spawn(ql_on(&private.urls()).args(["status", "--watch", "--interval", "200ms", &name]));
    let text = collect_stdout(&mut child);
    assert!(
        settles_on(&text, 2, ["yes", "yes", "no"]),
        "node 2 down: {}",
        read(&text)
    );
    private.restart(2).expect("node 2 returns");
    assert!(
        settles_on(&text, 2, ["yes", "yes", "yes"]),
        "node 2 back: {}",
        read(&text)
    );
    private.kill(1);
    assert!(
        settles_on(&text, 3, ["yes", "no", "yes"]),
        "the view goes on with node 1 down: {}",
        read(&text)
    );
    let int = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(int.success());
    let out = finish(child, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "SIGINT: {}", stderr(&out));
    let text = read(&text);
    assert!(
        !text.contains('\x1b'),
        "no escape codes on a pipe: {text:?}"
    );
    let all = snapshots(&text);
    for s in &all[..all.len() - 1] {
        let lines: Vec<&str> = s.lines().collect();
        assert!(
            lines[0].starts_with(&format!("-- quorumlock status {name}, every 200ms, at ")),
            "{s}"
        );
        let up = (0..3)
            .filter(|&i| reachable(s, i).as_deref() == Some("yes"))
            .count();
        assert_eq!(
            lines[1],
            format!("lock {name}: free; quorum majority needs 2 of 3, {up} reachable"),
            "{s}"
        );
        let last = lines.last().copied().unwrap_or_default();
        if up == 3 {
            assert_eq!(last, "no one waiting", "{s}");
        } else {
            assert!(last.starts_with("node "), "why a node is down: {s}");
        }
    }
    let down = &all[all.len() - 2];
    assert!(
        down.contains(&format!("node 1 (127.0.0.1:{}): ", private.port(1))),
        "the reason node 1 is down: {down}"
    );
}

#[test]
fn status_lists_the_waiters_in_ticket_order() {
    let name = unique("cli-waiters");
    let dir = scratch("waiters");
    let holder = hold_until_stopped(&nodes().urls(), &name, &dir);
    let queued = |n: u64| {
        let json = status_json(&name);
        json["queue"]["waiting"].as_u64() == Some(n)
            && json["queue"]["waiters"]
                .as_array()
                .is_some_and(|w| w.iter().all(|w| w["nodes"] == 5))
    };
    let mut waiters = Vec::new();
    for n in 1..=2 {
        waiters.push(spawn(
            ql().args(["exec", "--fair", "--wait", "30s", &name, "--", "true"]),
        ));
        assert!(
            until(Duration::from_secs(10), || queued(n)),
            "{n} waiter(s) queued on every node: {}",
            status_json(&name)
        );
    }
    let json = status_json(&name);
    let listed = json["queue"]["waiters"].as_array().expect("waiters");
    assert_eq!(listed.len(), 2, "{json}");
    for (w, child) in listed.iter().zip(&waiters) {
        assert_eq!(w["pid"], child.id(), "{json}");
        assert!(w["host"].as_str().is_some_and(|h| !h.is_empty()), "{json}");
        assert_eq!(w["ticket"], w["min_ticket"], "{json}");
        let left = w["skipped_in_ms"].as_i64().expect("a deadline");
        assert!(left > 0 && left <= 5_000, "{json}");
    }
    let (first, second) = (&listed[0]["ticket"], &listed[1]["ticket"]);
    assert!(first.as_u64() < second.as_u64(), "{json}");

    let out = run(ql().args(["status", &name]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines[7], "2 waiting, in ticket order:", "{table}");
    assert!(lines[8].starts_with("TICKET"), "{table}");
    for (line, (w, child)) in lines[9..11].iter().zip(listed.iter().zip(&waiters)) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[0], w["ticket"].to_string(), "{table}");
        assert_eq!(Some(cells[1]), w["id"].as_str(), "{table}");
        assert_eq!(cells[3], child.id().to_string(), "{table}");
        assert_eq!(cells[4], "5/5", "{table}");
    }

    stop_holder(holder, &dir);
    for child in waiters {
        let out = finish(child, Duration::from_secs(30));
        assert_eq!(out.status.code(), Some(0), "waiter: {}", stderr(&out));
    }
    assert!(
        until(Duration::from_secs(10), || queued(0)),
        "{}",
        status_json(&name)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Locks made by hand for `top`: `count` locks `lock-NNNNN` under
/// `prefix` on nodes 0 to 2, held by `web-{i % 3}@{100 + i % 7}` with a
/// count of 1 or 2, and queues of the given lengths.
fn make_locks(prefix: &str, count: usize, queues: &[(usize, usize)]) {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis();
    let key = |i: usize| format!("{prefix}{{lock-{i:05}}}");
    for url in &nodes().urls()[..3] {
        let mut c = redis::Client::open(url.as_str())
            .expect("node url")
            .get_connection()
            .expect("connect to a node");
        for chunk in (0..count).collect::<Vec<_>>().chunks(5_000) {
            let mut pipe = redis::pipe();
            for &i in chunk {
                let owner = format!(
                    "web-{}@{}#c0ffee:owner-1:hold-{i}@{now_ms}",
                    i % 3,
                    100 + i % 7
                );
                pipe.cmd("HSET")
                    .arg(key(i))
                    .arg(owner)
                    .arg(1 + i % 2)
                    .ignore();
                pipe.cmd("PEXPIRE").arg(key(i)).arg(600_000).ignore();
            }
            let (): () = pipe.query(&mut c).expect("make the locks");
        }
        let mut pipe = redis::pipe();
        for &(i, waiting) in queues {
            for w in 0..waiting {
                pipe.cmd("ZADD")
                    .arg(format!("{}:queue", key(i)))
                    .arg(w + 1)
                    .arg(format!("web-9@9#c0ffee:owner-{w}:wait-1"))
                    .ignore();
            }
            pipe.cmd("PEXPIRE")
                .arg(format!("{}:queue", key(i)))
                .arg(600_000)
                .ignore();
        }
        // Not a lock: a key of another type under the pattern.
        pipe.cmd("SET")
            .arg(format!("{prefix}{{not-a-hash}}"))
            .arg("x")
            .ignore();
        let (): () = pipe.query(&mut c).expect("make the queues");
    }
}

/// Deletes every key under `prefix` on the shared nodes.
fn drop_keys(prefix: &str) {
    for url in nodes().urls() {
        let mut c = redis::Client::open(url.as_str())
            .expect("node url")
            .get_connection()
            .expect("connect to a node");
        let keys: Vec<String> = redis::cmd("SCAN")
            .arg(0)
            .arg("MATCH")
            .arg(format!("{prefix}*"))
            .arg("COUNT")
            .arg(1_000_000)
            .query::<(u64, Vec<String>)>(&mut c)
            .map(|(_, k)| k)
            .unwrap_or_default();
        for chunk in keys.chunks(5_000) {
            let _: redis::RedisResult<()> = redis::cmd("UNLINK").arg(chunk).query(&mut c);
        }
    }
}

#[test]
fn top_lists_the_busiest_of_20000_locks() {
    let prefix = format!("{}:", unique("top"));
    make_locks(
        &prefix,
        20_000,
        &[(12_345, 4), (7, 2), (19_999, 2), (500, 1)],
    );
    // Lock 1 is also in someone else's hands on node 3 (not a quorum).
    let mut c = redis::Client::open(nodes().url(3))
        .expect("node url")
        .get_connection()
        .expect("connect to node 3");
    let (): () = redis::cmd("HSET")
        .arg(format!("{prefix}{{lock-00001}}"))
        .arg("thief")
        .arg(1)
        .query(&mut c)
        .expect("a stray hold");

    let started = Instant::now();
    let out = run(ql().args(["--key-prefix", &prefix, "top", "--limit", "6"]));
    let took = started.elapsed();
    drop_keys(&prefix);
    eprintln!("top over 20,000 locks on 3 of 5 nodes took {took:?}");
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stderr(&out), "", "no bar on a pipe");
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let (head, rest) = lines[0]
        .split_once(", scanned in ")
        .expect("a summary line");
    assert_eq!(
        head,
        format!("20000 lock(s) under prefix {prefix} on 5 of 5 node(s)"),
        "{text}"
    );
    assert!(
        rest.ends_with("; 4 with waiters; 6 shown, most waiters first"),
        "{text}"
    );
    assert_eq!(
        lines[1].split_whitespace().collect::<Vec<_>>(),
        ["NAME", "WAITERS", "HOLDER", "HOLDS", "HELD", "FOR", "PTTL", "NODES"],
        "{text}"
    );
    // Name, waiters, holder, holds; then the time held and the PTTL, which
    // move; then the nodes.
    let expected = [
        ("lock-12345", "4", "web-0@104", "2", "3/5"),
        ("lock-00007", "2", "web-1@100", "2", "3/5"),
        ("lock-19999", "2", "web-1@100", "2", "3/5"),
        ("lock-00500", "1", "web-2@103", "1", "3/5"),
        ("lock-00000", "0", "web-0@100", "1", "3/5"),
        ("lock-00001", "0", "web-1@101", "2", "4/5"),
    ];
    assert_eq!(lines.len(), 2 + expected.len(), "{text}");
    for (line, (name, waiting, holder, holds, on)) in lines[2..].iter().zip(expected) {
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells[..4], [name, waiting, holder, holds], "{text}");
        assert!(cells[4].ends_with('s'), "held for: {line}");
        let pttl = cells[5..cells.len() - 1].join(" ");
        assert!(pttl.starts_with("9m ") || pttl == "10m 0s", "PTTL: {line}");
        assert_eq!(cells[cells.len() - 1], on, "{text}");
    }
}

#[test]
fn watch_and_top_refuse_bad_input() {
    let name = unique("cli-bad-watch");
    let cases: Vec<(&str, Vec<&str>, &str)> = vec![
        (
            "zero interval",
            vec!["status", "--watch", "--interval", "0s", &name],
            "at least 100ms",
        ),
        (
            "garbage interval",
            vec!["status", "--watch", "--interval", "soon", &name],
            "expected a duration",
        ),
        (
            "interval past what a duration holds",
            vec!["top", "--watch", "--interval", "99999999999999999999y"],
            "too large",
        ),
        (
            "interval without --watch",
            vec!["status", "--interval", "1s", &name],
            "--watch",
        ),
        ("unknown flag", vec!["top", "--bogus"], "'--bogus'"),
        (
            "unknown flag of status",
            vec!["status", "--follow", &name],
            "'--follow'",
        ),
        ("zero limit", vec!["top", "--limit", "0"], "from 1 to"),
        (
            "huge batch",
            vec!["top", "--batch", "99999999999"],
            "from 1 to",
        ),
    ];
    for (what, args, says) in cases {
        let out = run(ql().args(&args));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        let first = err.lines().next().unwrap_or_default();
        assert!(first.starts_with("quorumlock: error: "), "{what}: {err}");
        assert!(first.contains(says), "{what}: {err}");
        assert!(!err.contains("panicked"), "{what}: {err}");
        assert_eq!(stdout(&out), "", "{what}");
    }
}
