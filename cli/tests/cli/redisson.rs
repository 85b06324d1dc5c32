//! `--layout redisson`: a Redisson `RLock` holder, made by hand as Redisson
//! writes it (a hash at the lock name, field `<uuid>:<thread id>`, value
//! the count, lease by `PEXPIRE`), seen, excluded and broken by the CLI.

use super::{nodes, ql, run, stderr, stdout, unique};

/// The field a Redisson client writes: `<client uuid>:<thread id>`.
const REDISSON_FIELD: &str = "6f1c2a9e-0b4d-4c1e-9a57-3d2e8f1b7c40:57";

fn connect(url: &str) -> redis::Connection {
    redis::Client::open(url)
        .expect("node url")
        .get_connection()
        .expect("connect to a node")
}

/// Takes `name` as a Redisson `RedissonMultiLock` over every node would:
/// the hash at the name on each, count 1, a 60 s lease.
fn hold_as_redisson(name: &str) {
    for url in nodes().urls() {
        let mut c = connect(&url);
        let () = redis::pipe()
            .cmd("HSET")
            .arg(name)
            .arg(REDISSON_FIELD)
            .arg(1)
            .ignore()
            .cmd("PEXPIRE")
            .arg(name)
            .arg(60_000)
            .ignore()
            .query(&mut c)
            .expect("write a Redisson lock");
    }
}

/// On how many nodes a key `key` exists.
fn nodes_with(key: &str) -> usize {
    nodes()
        .urls()
        .iter()
        .filter(|url| {
            let exists: bool = redis::cmd("EXISTS")
                .arg(key)
                .query(&mut connect(url))
                .expect("EXISTS");
            exists
        })
        .count()
}

#[test]
fn status_shows_a_redisson_holder_as_foreign() {
    let name = unique("cli-redisson-status");
    hold_as_redisson(&name);
    let total = nodes().urls().len();

    let out = run(ql().args(["status", "--layout", "redisson", "--json", &name]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(
        json["foreign_holders"],
        serde_json::json!([REDISSON_FIELD]),
        "{json}"
    );
    assert_eq!(json["holder"], REDISSON_FIELD, "{json}");
    assert!(json["holder_info"].is_null(), "{json}");
    for row in json["nodes"].as_array().expect("nodes") {
        assert_eq!(row["holder"], REDISSON_FIELD, "{json}");
        assert_eq!(row["hold_count"], 1, "{json}");
        assert!(
            row["pttl_ms"].as_u64().is_some_and(|p| p > 50_000),
            "{json}"
        );
    }

    // The same through the environment, as a table.
    let out = run(ql()
        .env("QUORUMLOCK_LAYOUT", "redisson")
        .args(["status", &name]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "held by {REDISSON_FIELD} (another client, not quorumlock) on {total} of {total}"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!("held by another client (not quorumlock; no host, pid or fencing token): {REDISSON_FIELD}")),
        "{text}"
    );

    // In the default layout the lock is elsewhere: this name is free.
    let out = run(ql().args(["status", "--json", &name]));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(json["holder"].is_null(), "{json}");
    assert_eq!(json["foreign_holders"], serde_json::json!([]), "{json}");
    assert_eq!(nodes_with(&name), total, "status changes nothing");
}

#[test]
fn exec_excludes_a_redisson_holder_and_unlock_force_removes_it() {
    let name = unique("cli-redisson-exec");
    hold_as_redisson(&name);
    let total = nodes().urls().len();

    let out = run(ql().args([
        "exec", "--layout", "redisson", "--wait", "0s", &name, "--", "true",
    ]));
    assert_eq!(out.status.code(), Some(75), "excluded: {}", stderr(&out));
    assert!(stderr(&out).contains("not obtained"), "{}", stderr(&out));
    assert_eq!(nodes_with(&name), total, "the Redisson lock is left alone");

    // The default layout does not see it (another key): it runs.
    let out = run(ql().args(["exec", "--wait", "0s", &name, "--", "true"]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));

    let out = run(ql().args(["unlock", "--force", "--yes", "--layout", "redisson", &name]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(stdout(&out).contains("deleted on"), "{}", stdout(&out));
    assert_eq!(nodes_with(&name), 0, "the Redisson hash is gone everywhere");

    // Now quorumlock takes it, at the bare name, and leaves nothing behind.
    let out = run(ql().args([
        "exec",
        "--layout",
        "redisson",
        "--wait",
        "0s",
        &name,
        "--",
        "sh",
        "-c",
        r#"redis-cli -p "$0" hlen "$QUORUMLOCK_NAME""#,
        &nodes().port(0).to_string(),
    ]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        "1",
        "held at the bare name while it ran"
    );
    assert_eq!(nodes_with(&name), 0, "released");
}

#[test]
fn top_refuses_the_redisson_layout_and_bad_layouts_are_usage_errors() {
    let out = run(ql().args(["top", "--layout", "redisson"]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("quorumlock: error: top cannot list locks with --layout redisson"),
        "{err}"
    );
    assert!(err.contains("SCAN cannot tell"), "{err}");

    let name = unique("cli-redisson-bad");
    for mut c in [
        {
            let mut c = ql();
            c.args(["--layout", "redison", "status", &name]);
            c
        },
        {
            let mut c = ql();
            c.env("QUORUMLOCK_LAYOUT", "Redisson")
                .args(["status", &name]);
            c
        },
    ] {
        let out = run(&mut c);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.starts_with("quorumlock: error: "), "{err}");
        assert!(
            err.contains("expected `quorumlock` (the default) or `redisson`"),
            "{err}"
        );
        assert!(!err.contains("panicked"), "{err}");
    }
}
