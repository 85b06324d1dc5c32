//! Leader elections: `elect` runs its command while it leads and hands
//! over when killed, `leader` shows the leader once or on each change.

use std::collections::HashMap;
use std::path::Path;
use std::process::Child;
use std::time::{Duration, Instant};

use super::observe::{collect_stdout, read, until};
use super::{finish, gone_within, kill_if_running, ql, run, scratch, signal, spawn, status_json};
use super::{stderr, stdout, unique, wait_for_file};

/// A candidate of election `name` proclaiming `value`, with a lease of 2 s:
/// once it leads, its command appends `VALUE TERM PID` to `log` (the pid
/// of the command, which then sleeps until killed).
fn candidate(name: &str, value: &str, log: &Path) -> Child {
    spawn(
        ql().args(["elect", "--value", value, "--lease", "2s", name, "--"])
            .args([
                "sh",
                "-c",
                r#"echo "$QUORUMLOCK_VALUE $QUORUMLOCK_TERM $$" >> "$1"; exec sleep 60"#,
                "sh",
            ])
            .arg(log),
    )
}

/// The lines of `log`: (value, term, pid) each.
fn terms(log: &Path) -> Vec<(String, u64, String)> {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    text.lines()
        .map(|l| {
            let cells: Vec<&str> = l.split_whitespace().collect();
            assert_eq!(cells.len(), 3, "value, term, pid: {text}");
            let term = cells[1].parse().expect("QUORUMLOCK_TERM is a number");
            (cells[0].to_owned(), term, cells[2].to_owned())
        })
        .collect()
}

/// `leader --json` parsed.
fn leader_json(name: &str) -> serde_json::Value {
    let out = run(ql().args(["leader", "--json", name]));
    assert_eq!(out.status.code(), Some(0), "leader: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("leader --json prints JSON")
}

/// The documents `leader --watch --json` printed so far, one per line.
fn documents(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON document per line"))
        .collect()
}

/// The (value, term) of each document, None for no leader.
fn leaders(docs: &[serde_json::Value]) -> Vec<Option<(String, u64)>> {
    docs.iter()
        .map(|d| {
            let l = &d["leader"];
            l.as_object().map(|_| {
                let value = l["value"].as_str().expect("a value").to_owned();
                (value, l["term"].as_u64().expect("a term"))
            })
        })
        .collect()
}

#[test]
fn a_killed_leader_is_followed_and_leader_watch_shows_the_change() {
    let name = unique("cli-elect");
    let dir = scratch("elect");
    let log = dir.join("log");
    let mut watch = spawn(ql().args(["leader", "--watch", "--json", &name]));
    let watched = collect_stdout(&mut watch);
    let watched_leaders = || leaders(&documents(&read(&watched)));

    let mut first = candidate(&name, "a", &log);
    assert!(
        until(Duration::from_secs(20), || terms(&log).len() == 1),
        "the first candidate leads and runs its command"
    );
    let second = candidate(&name, "b", &log);
    // The second waits its turn in the fair queue of the election's lock.
    let lock = format!("election:{name}");
    assert!(
        until(Duration::from_secs(20), || status_json(&lock)["queue"]
            ["waiting"]
            == 1),
        "the second candidate queues: {}",
        status_json(&lock)
    );
    assert_eq!(terms(&log).len(), 1, "one leader at a time");
    let (_, term, _) = terms(&log)[0].clone();
    let json = leader_json(&name);
    assert_eq!(json["leader"]["value"], "a", "{json}");
    assert_eq!(json["leader"]["term"], term, "{json}");
    assert_eq!(json["leader"]["pid"], first.id(), "{json}");

    // The leader dies without resigning: the other takes over once its
    // lease (2 s) has run out.
    first.kill().expect("SIGKILL the leader");
    let killed = Instant::now();
    let _ = first.wait();
    let took_over = until(Duration::from_secs(20), || terms(&log).len() == 2);
    let elapsed = killed.elapsed();
    let lines = terms(&log);
    let first_command = lines[0].2.clone();
    let command_gone = gone_within(&first_command, Duration::from_secs(5));
    kill_if_running(&first_command);
    assert!(took_over, "the second candidate took over: {lines:?}");
    assert!(
        elapsed < Duration::from_secs(15),
        "took over {elapsed:?} after the kill"
    );
    assert!(command_gone, "the dead leader's command ran on");
    let (ref value, next, ref command) = lines[1];
    assert_eq!(value, "b", "{lines:?}");
    assert!(next > term, "terms increase: {lines:?}");
    assert!(super::running(command), "the new leader's command runs");

    // The watch showed a, then b, in increasing terms.
    let want = Some(("b".to_owned(), next));
    assert!(
        until(Duration::from_secs(20), || watched_leaders()
            .contains(&want)),
        "the watch shows the new leader: {}",
        read(&watched)
    );
    let seen: Vec<(String, u64)> = watched_leaders().into_iter().flatten().collect();
    assert!(seen.contains(&("a".to_owned(), term)), "{seen:?}");
    assert!(seen.windows(2).all(|w| w[0].1 < w[1].1), "{seen:?}");
    for doc in documents(&read(&watched)) {
        assert_eq!(doc["election"], name.as_str(), "{doc}");
    }

    // SIGTERM reaches the new leader's command; it resigns, and the watch
    // shows nobody.
    signal(second.id(), "-TERM");
    let out = finish(second, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(128 + 15), "{}", stderr(&out));
    assert!(
        until(Duration::from_secs(20), || watched_leaders().last()
            == Some(&None)),
        "the watch shows nobody after the resignation: {}",
        read(&watched)
    );
    signal(watch.id(), "-INT");
    let out = finish(watch, Duration::from_secs(10));
    assert_eq!(out.status.code(), Some(0), "SIGINT: {}", stderr(&out));
    let _ = std::fs::remove_dir_all(&dir);
}

/// The `NAME=VALUE` lines of `path`.
fn environment(path: &Path) -> HashMap<String, String> {
    std::fs::read_to_string(path)
        .expect("read the environment")
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect()
}

#[test]
fn leader_shows_the_leader_and_elect_gives_its_command_the_term() {
    let name = unique("cli-leader");
    let dir = scratch("leader");
    let (env, stop) = (dir.join("env"), dir.join("stop"));

    let none = leader_json(&name);
    assert_eq!(none["election"], name.as_str(), "{none}");
    assert!(none["leader"].is_null(), "{none}");
    let out = run(ql().args(["leader", &name]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(stdout(&out), format!("election {name}: no leader\n"));

    let leader = spawn(
        ql().args(["elect", "--value", "host-a:8080", "--lease", "2s", &name])
            .args(["--", "sh", "-c"])
            .arg(
                r#"env | grep '^QUORUMLOCK_' > "$1.tmp"; mv "$1.tmp" "$1";
                   while [ ! -e "$2" ]; do sleep 0.05; done; exit 3"#,
            )
            .arg("sh")
            .arg(&env)
            .arg(&stop),
    );
    wait_for_file(&env, Duration::from_secs(20));
    let vars = environment(&env);
    assert_eq!(vars["QUORUMLOCK_ELECTION"], name, "{vars:?}");
    assert_eq!(vars["QUORUMLOCK_VALUE"], "host-a:8080", "{vars:?}");
    assert_eq!(vars["QUORUMLOCK_NAME"], format!("election:{name}"));
    let term: u64 = vars["QUORUMLOCK_TERM"].parse().expect("a term");
    assert_eq!(vars["QUORUMLOCK_TOKEN"], term.to_string(), "{vars:?}");

    let json = leader_json(&name);
    let shown = &json["leader"];
    assert_eq!(shown["value"], "host-a:8080", "{json}");
    assert_eq!(shown["term"], term, "{json}");
    assert_eq!(shown["revision"], 1, "{json}");
    assert_eq!(shown["pid"], leader.id(), "{json}");
    let host = shown["host"].as_str().expect("a host").to_owned();
    assert!(!host.is_empty(), "{json}");
    assert!(super::just_now(&shown["since_unix_ms"]), "{json}");
    let holder = shown["holder_id"].as_str().expect("a holder id");
    assert!(holder.contains(&format!("@{}#", leader.id())), "{json}");
    let out = run(ql().args(["leader", &name]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let line = stdout(&out);
    let want = format!(
        "election {name}: leader host-a:8080, term {term}, revision 1, host {host}, pid {}, since ",
        leader.id()
    );
    assert!(line.starts_with(&want), "{line}");

    // Another candidate gives up after --wait, with 75.
    let out = run(ql().args([
        "elect", "--value", "b", "--wait", "300ms", &name, "--", "true",
    ]));
    assert_eq!(out.status.code(), Some(75), "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "leadership of election {name} not obtained within 300ms"
        )),
        "{err}"
    );
    let out = run(ql().args([
        "elect", "-q", "--value", "b", "--wait", "0s", &name, "--", "true",
    ]));
    assert_eq!(out.status.code(), Some(75));
    assert_eq!(stderr(&out), "", "--quiet");

    // The command's status is elect's; it resigned: nobody leads.
    std::fs::write(&stop, b"").expect("write the stop file");
    let out = finish(leader, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let json = leader_json(&name);
    assert!(json["leader"].is_null(), "resigned: {json}");

    // The next leader's term is larger.
    let out = run(ql().args([
        "elect",
        "--value",
        "c",
        &name,
        "--",
        "sh",
        "-c",
        "echo $QUORUMLOCK_TERM",
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let next: u64 = stdout(&out).trim().parse().expect("a term");
    assert!(next > term, "{next} > {term}");
    let _ = std::fs::remove_dir_all(&dir);
}
