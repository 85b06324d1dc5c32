//! The CLI over a mixed set of members: two local masters and the shared
//! local Redis Cluster, named `cluster:URL+URL` in `QUORUMLOCK_NODES`.

use std::process::Command;
use std::time::Duration;

use super::support::local_cluster::cluster;
use super::{finish, nodes, ql_on, run, scratch, spawn, stderr, stdout, unique, wait_for_file};

/// The members: masters 0 and 1, then the cluster through two seeds.
fn mixed() -> Vec<String> {
    let seeds = cluster().urls();
    let mut members = nodes().urls()[..2].to_vec();
    members.push(format!("cluster:{}+{}", seeds[0], seeds[1]));
    members
}

/// `status --json NAME` over the mixed members, parsed.
fn status_json(name: &str) -> serde_json::Value {
    let out = run(ql_on(&mixed()).args(["status", "--json", name]));
    assert_eq!(out.status.code(), Some(0), "status: {}", stderr(&out));
    serde_json::from_slice(&out.stdout).expect("status --json prints JSON")
}

/// Whether the master on `port` has the lock hash of `name`.
fn has_lock_at(port: u16, name: &str) -> bool {
    let mut c = redis::Client::open(format!("redis://127.0.0.1:{port}"))
        .expect("a node url")
        .get_connection()
        .expect("connect to a cluster node");
    redis::cmd("EXISTS")
        .arg(format!("quorumlock:{{{name}}}"))
        .query::<u32>(&mut c)
        .expect("EXISTS")
        == 1
}

#[test]
fn a_cluster_member_holds_the_lock_and_status_names_its_shard() {
    let name = unique("cli-cluster");
    let slot = quorumlock::lock_slot(&name).expect("a valid name");
    let shard_port = cluster().port_of_slot(slot);
    let dir = scratch("cluster");
    let started = dir.join("started");
    let holder = spawn(ql_on(&mixed()).args([
        "exec",
        "--lease",
        "3s",
        &name,
        "--",
        "sh",
        "-c",
        &format!(
            "echo $QUORUMLOCK_TOKEN > {0}.tmp && mv {0}.tmp {0} && sleep 4",
            started.display()
        ),
    ]));
    wait_for_file(&started, Duration::from_secs(10));
    // Held on the shard that serves the name's slot, past one renewal.
    std::thread::sleep(Duration::from_millis(1_500));
    assert!(has_lock_at(shard_port, &name), "the lock is on its shard");

    let json = status_json(&name);
    let rows = json["nodes"].as_array().expect("nodes");
    assert_eq!(rows.len(), 3, "{json}");
    assert!(json["holder"].is_string(), "held on a quorum: {json}");
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(row["node"], i, "{json}");
        assert_eq!(row["holder"], json["holder"], "{json}");
        let shard = &row["shard"];
        if i < 2 {
            assert_eq!(row["addr"], format!("127.0.0.1:{}", nodes().port(i)));
            assert!(shard.is_null(), "a master has no shard: {row}");
        } else {
            assert!(row["addr"]
                .as_str()
                .is_some_and(|a| a.starts_with("cluster(")));
            assert_eq!(*shard, format!("127.0.0.1:{shard_port}"), "{row}");
        }
    }

    let out = run(ql_on(&mixed()).args(["status", &name]));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let table = stdout(&out);
    let lines: Vec<&str> = table.lines().collect();
    let header: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        header[..4],
        ["NODE", "ADDRESS", "SHARD", "REACHABLE"],
        "{table}"
    );
    let cluster_row: Vec<&str> = lines[4].split_whitespace().collect();
    assert_eq!(cluster_row[0], "2", "{table}");
    assert_eq!(cluster_row[2], format!("127.0.0.1:{shard_port}"), "{table}");
    assert_eq!(cluster_row[3], "yes", "{table}");
    for line in &lines[2..4] {
        assert_eq!(line.split_whitespace().nth(2), Some("-"), "{table}");
    }

    // Another exec is refused while it is held, and top lists the lock on
    // all three members (the cluster's shards scanned one by one).
    let refused = run(ql_on(&mixed()).args(["exec", "--wait", "0s", &name, "--", "true"]));
    assert_eq!(refused.status.code(), Some(75), "{}", stderr(&refused));
    let top = run(ql_on(&mixed()).args(["top", "--limit", "100000"]));
    assert_eq!(top.status.code(), Some(0), "{}", stderr(&top));
    let listing = stdout(&top);
    assert!(listing.contains("on 3 of 3 node(s)"), "{listing}");
    let row = listing
        .lines()
        .find(|l| l.split_whitespace().next() == Some(name.as_str()))
        .unwrap_or_else(|| panic!("top lists {name}: {listing}"));
    assert!(row.trim_end().ends_with("3/3"), "{row}");

    let out = finish(holder, Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!has_lock_at(shard_port, &name), "released on its shard");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn malformed_cluster_entries_are_one_line_and_status_2() {
    let name = unique("cli-cluster-bad");
    let seed = &cluster().urls()[0];
    let master = &nodes().urls()[0];
    let secret = "redis://:s3cret@127.0.0.1:1";
    let cases = [
        ("no seed", format!("{master},cluster:"), "names no seed"),
        (
            "empty seed",
            format!("cluster:{seed}++{seed}"),
            "seed 2 of the cluster is empty",
        ),
        (
            "seed without scheme",
            format!("{master},cluster:{seed}+127.0.0.1:1"),
            "entry 2: seed 2 of the cluster is not a redis://",
        ),
        (
            "seeds without cluster:",
            format!("{secret}+{seed}"),
            "write `cluster:` before them",
        ),
        (
            "a master as a cluster seed",
            format!("cluster:{master}"),
            "is a standalone server",
        ),
        (
            "a cluster node as a master",
            format!("{master},{seed}"),
            "Redis Cluster",
        ),
    ];
    for (what, list, says) in cases {
        let mut c: Command = ql_on(&[list]);
        let out = run(c.args(["status", &name]));
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{what}: {err}");
        assert_eq!(err.lines().count(), 1, "{what}: one line: {err}");
        assert!(err.starts_with("quorumlock: error: "), "{what}: {err}");
        assert!(err.contains(says), "{what}: {err}");
        assert!(!err.contains("s3cret"), "{what}: {err}");
    }
    // `--tls-ca` applies to cluster members too: a CA file that cannot be
    // read, and a cluster seed that is not `rediss://`, are usage errors.
    let out = run(ql_on(&mixed()).args(["--tls-ca", "/nonexistent", "status", &name]));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("--tls-ca /nonexistent"),
        "{}",
        stderr(&out)
    );
    let ca = scratch("ca").join("ca.pem");
    std::fs::write(&ca, "any bytes: the seeds are checked first").expect("write a CA file");
    let out = run(ql_on(&[format!("cluster:{seed}")]).args([
        "--tls-ca",
        &ca.to_string_lossy(),
        "status",
        &name,
    ]));
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.contains("--tls-ca is for rediss:// nodes; a seed of node 0 is not one"),
        "{err}"
    );
}
