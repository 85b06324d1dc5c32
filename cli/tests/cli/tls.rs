//! `--tls-ca` over TLS-only nodes whose certificate comes from a CA of the
//! test's own (`tests/support/tls.rs`): masters and a `cluster:` member.

use quorumlock::{LockManager, Quorum};

use super::tls_nodes::{tls_cluster, tls_masters, trusting};
use super::unique;

/// The command line's `--tls-ca` applies to a `cluster:` member whose nodes
/// show a certificate of a CA of our own, `status` and `top` alike.
#[tokio::test]
async fn tls_ca_applies_to_a_cluster_member() {
    let dir = std::env::temp_dir().join(unique("quorumlock-cli-tls-cluster"));
    let (nodes, ca) = tls_cluster(&dir);
    let m = LockManager::builder()
        .cluster_with_tls(nodes.urls(), trusting(&ca))
        .build()
        .await
        .expect("a cluster member over TLS");
    let name = unique("tls-cluster");
    let held = m.lock(&name).await.expect("lock over TLS");

    let member = format!("cluster:{}", nodes.url(0));
    let cli = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .env("QUORUMLOCK_NODES", &member)
            .env_remove("QUORUMLOCK_QUORUM")
            .env_remove("QUORUMLOCK_KEY_PREFIX")
            .env_remove("QUORUMLOCK_TLS_CA")
            .args(["--tls-ca", &dir.join("ca.pem").to_string_lossy()])
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run quorumlock")
    };
    let out = cli(&["status", "--json", &name]);
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "status with --tls-ca: {err}");
    assert!(stdout.contains(held.holder_id()), "{stdout}");
    let out = cli(&["top", "--limit", "100000"]);
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "top with --tls-ca: {err}");
    assert!(stdout.contains(&name), "{stdout}");
    assert!(stdout.contains("on 1 of 1 node(s)"), "{stdout}");
    held.release().await.expect("release");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The command line over rediss:// masters: without `--tls-ca` the nodes'
/// certificate (not from a public root) is refused in one line, with no
/// panic; with it, status reads the lock; a CA file that is not there is a
/// usage error.
#[tokio::test]
async fn tls_ca_is_what_trusts_masters_of_a_private_ca() {
    let dir = std::env::temp_dir().join(unique("quorumlock-cli-tls"));
    let (nodes, ca) = tls_masters(&dir, 3);
    let mut builder = LockManager::builder().quorum(Quorum::Majority);
    for url in nodes.urls() {
        let client = redis::Client::build_with_tls(url.as_str(), trusting(&ca))
            .expect("a TLS client trusting the test CA");
        builder = builder.client(client);
    }
    let m = builder.build().await.expect("connect over TLS");
    let name = unique("tls");

    let cli = |extra: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_quorumlock"))
            .env("QUORUMLOCK_NODES", nodes.urls().join(","))
            .env_remove("QUORUMLOCK_QUORUM")
            .env_remove("QUORUMLOCK_KEY_PREFIX")
            .env_remove("QUORUMLOCK_TLS_CA")
            .args(extra)
            .args(["status", "--json", &name])
            .stdin(std::process::Stdio::null())
            .output()
            .expect("run quorumlock")
    };
    let out = cli(&[]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(69), "status over TLS: {err}");
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("UnknownIssuer"), "{err}");

    let ca_file = dir.join("ca.pem");
    let held = m.lock(&name).await.expect("hold it for status");
    let out = cli(&["--tls-ca", &ca_file.to_string_lossy()]);
    let (stdout, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "status with --tls-ca: {err}");
    assert!(stdout.contains(held.holder_id()), "{stdout}");
    held.release().await.expect("release");

    let out = cli(&["--tls-ca", "/nonexistent/ca.pem"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a missing CA file: {err}");
    assert!(err.contains("--tls-ca"), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
