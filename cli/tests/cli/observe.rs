//! Watching one lock: `status` with its waiters, `status --watch` in a
//! real terminal (tmux) and on a pipe.

use std::io::Read;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

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
pub(super) fn until(within: Duration, mut f: impl FnMut() -> bool) -> bool {
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
pub(super) fn collect_stdout(child: &mut Child) -> Arc<Mutex<String>> {
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

pub(super) fn read(text: &Arc<Mutex<String>>) -> String {
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
