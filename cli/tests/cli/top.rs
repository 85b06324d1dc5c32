//! `top` over 20,000 locks, and the bad input of `top` and `--watch`.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use super::{nodes, ql, run, stderr, stdout, unique};

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
