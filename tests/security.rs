//! Security settings of the nodes: ACL users and passwords, channel rights,
//! and TLS (`rediss://`, with the `tls-rustls` feature).

mod support;
#[cfg(feature = "tls-rustls")]
#[path = "support/tls.rs"]
mod tls_nodes;

use std::time::Duration;

use quorumlock::{LockManager, Quorum};
use support::local::{Extra, LocalNodes};
use support::unique;

const PASSWORD: &str = "s3cret-pa55word";

/// Three masters whose default user is off and where `alice` (password
/// [`PASSWORD`]) has `rights`.
fn acl_nodes(rights: &[&str]) -> LocalNodes {
    let mut args: Vec<String> = ["--user", "default", "off", "--user", "alice", "on"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    args.push(format!(">{PASSWORD}"));
    args.extend(rights.iter().map(|s| (*s).to_owned()));
    LocalNodes::start_with(3, Extra { args, tls: false }).expect("start 3 masters with ACLs")
}

/// `redis://user:pass@127.0.0.1:PORT` for every node.
fn urls_as(nodes: &LocalNodes, user: &str, pass: &str) -> Vec<String> {
    (0..nodes.len())
        .map(|i| format!("redis://{user}:{pass}@127.0.0.1:{}", nodes.port(i)))
        .collect()
}

async fn manager_as(
    nodes: &LocalNodes,
    user: &str,
    pass: &str,
) -> Result<LockManager, quorumlock::Error> {
    LockManager::builder()
        .nodes(urls_as(nodes, user, pass))
        .quorum(Quorum::Majority)
        .node_timeout(Duration::from_millis(300))
        .build()
        .await
}

#[tokio::test]
async fn an_acl_user_locks_and_its_password_is_never_shown() {
    let nodes = acl_nodes(&["~*", "&*", "+@all"]);
    let m = manager_as(&nodes, "alice", PASSWORD)
        .await
        .expect("alice connects with her password");
    let name = unique("acl");

    let guard = m.lock(&name).await.expect("lock");
    let status = m.status(&name).await.expect("status");
    assert_eq!(status.holder(), Some(guard.holder_id()));
    let other = m.new_owner();
    let refused = m
        .request(name.as_str())
        .owner(&other)
        .wait(Duration::from_millis(200))
        .acquire()
        .await
        .expect_err("held by the first owner");
    assert!(refused.is_contended(), "{refused}");
    guard.release().await.expect("release");
    let again = m
        .try_lock(&name, Duration::from_secs(1))
        .await
        .expect("try_lock after release");
    again.release().await.expect("release again");

    let shown = [
        format!("{m:?}"),
        format!("{refused}"),
        format!("{refused:?}"),
        format!("{:?}", m.status(&name).await),
    ];
    for text in &shown {
        assert!(!text.contains(PASSWORD), "the password is shown: {text}");
    }

    // A wrong password is refused, and not shown either.
    let wrong = "wrong-pa55word";
    let e = manager_as(&nodes, "alice", wrong)
        .await
        .expect_err("a wrong password is refused");
    for text in [format!("{e}"), format!("{e:?}")] {
        assert!(!text.contains(wrong), "the password is shown: {text}");
    }
    // No password at all: the default user is off.
    let e = LockManager::builder()
        .nodes(nodes.urls())
        .build()
        .await
        .expect_err("the default user is off");
    assert!(!format!("{e:?}").contains(PASSWORD));
}

/// Everything a tracing subscriber is given, as text.
#[derive(Clone, Default)]
struct Captured(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Captured {
    fn text(&self) -> String {
        let bytes = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        String::from_utf8_lossy(&bytes).into_owned()
    }
}

/// Every span and event at every level, while a manager is built over
/// `redis://:PASSWORD@..` URLs (one with a wrong password), locks, waits,
/// listens, releases and breaks a lock: the password never appears, the
/// spans are named by the scheme of docs/OBSERVABILITY.md's "Tracing" section.
#[tokio::test]
async fn the_password_never_appears_in_tracing_output() {
    use tracing_subscriber::fmt::format::FmtSpan;

    let nodes = LocalNodes::start_with(
        3,
        Extra {
            args: vec!["--requirepass".to_owned(), PASSWORD.to_owned()],
            tls: false,
        },
    )
    .expect("start 3 masters with a password");
    let wrong = "wrong-pa55word";
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_span_events(FmtSpan::FULL)
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    // The process's subscriber (a scoped one misses callsites whose
    // interest other tests' threads cached meanwhile): it also captures
    // the other tests of this binary, whose passwords must not show either.
    tracing::subscriber::set_global_default(subscriber).expect("the one subscriber");

    let urls = |pass: &str| -> Vec<String> {
        (0..nodes.len())
            .map(|i| format!("redis://:{pass}@127.0.0.1:{}", nodes.port(i)))
            .collect()
    };
    let mut some_wrong = urls(PASSWORD);
    some_wrong[2] = format!("redis://:{wrong}@127.0.0.1:{}", nodes.port(2));
    let refused = LockManager::builder()
        .nodes(some_wrong)
        .allow_unreachable(true)
        .node_timeout(Duration::from_millis(300))
        .build()
        .await;
    drop(refused);
    let m = LockManager::builder()
        .nodes(urls(PASSWORD))
        .node_timeout(Duration::from_millis(300))
        .build()
        .await
        .expect("connects with the password");
    let name = unique("traced");
    let events = m.events(&name).await.expect("events");
    let guard = m.lock(&name).await.expect("lock");
    let busy = m
        .request(name.as_str())
        .owner(&m.new_owner())
        .wait(Duration::from_millis(100))
        .acquire()
        .await
        .expect_err("held");
    assert!(busy.is_contended(), "{busy}");
    guard.release().await.expect("release");
    let again = m.lock(&name).await.expect("lock again");
    assert_eq!(m.force_unlock(&name).await.expect("force"), 3);
    drop(again);
    drop(events);
    m.flush().await;

    let text = captured.text();
    for span in [
        "quorumlock.build",
        "quorumlock.acquire",
        "quorumlock.release",
        "quorumlock.events",
    ] {
        assert!(text.contains(span), "no {span} span in:\n{text}");
    }
    assert!(
        text.contains(&format!("127.0.0.1:{}", nodes.port(2))),
        "the refused node is named:\n{text}"
    );
    assert!(!text.contains(PASSWORD), "the password appears:\n{text}");
    assert!(!text.contains(wrong), "the wrong password appears:\n{text}");
}

#[tokio::test]
async fn a_user_without_channel_rights_releases() {
    let nodes = acl_nodes(&["~*", "resetchannels", "+@all"]);
    let m = manager_as(&nodes, "alice", PASSWORD)
        .await
        .expect("alice connects with her password");
    let name = unique("acl-release");
    // The release script's PUBLISH is refused; the release must not be.
    let guard = m.lock(&name).await.expect("lock");
    guard
        .release()
        .await
        .expect("release without channel rights");
    assert!(m.status(&name).await.expect("status").holder().is_none());
    let again = m
        .try_lock(&name, Duration::from_secs(1))
        .await
        .expect("free again");
    assert_eq!(
        m.force_unlock(&name)
            .await
            .expect("force unlock without channel rights"),
        3,
        "deleted on every node"
    );
    // Broken under it: its release finds the lock gone.
    assert!(again.release().await.is_err());
}

#[tokio::test]

async fn a_user_without_channel_rights_waits_by_polling_without_spinning() {
    let nodes = acl_nodes(&["~*", "resetchannels", "+@all"]);
    let m = manager_as(&nodes, "alice", PASSWORD)
        .await
        .expect("alice connects with her password");
    let name = unique("acl-nochan");
    let holder = m.lock(&name).await.expect("lock");
    let before = m.pubsub_stats().connections;

    let waiter = {
        let m = m.clone();
        let name = name.clone();
        tokio::spawn(async move {
            m.request(name.as_str())
                .owner(&m.new_owner())
                .wait(Duration::from_secs(15))
                .acquire()
                .await
        })
    };
    // A contended wait of about 2 s: SUBSCRIBE is refused on every node.
    let mut most = 0;
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        most = most.max(m.pubsub_stats().connections - before);
        assert!(!waiter.is_finished(), "the waiter cannot have the lock yet");
    }
    assert!(
        most < 10,
        "{most} pub/sub connections in 2 s: the refused SUBSCRIBE spins"
    );

    holder.release().await.expect("release");
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter acquires by polling after the release")
        .expect("the waiter task")
        .expect("the waiter gets the lock");
    assert!(got.is_held());
    got.release().await.expect("release the waiter's hold");
}

#[cfg(feature = "tls-rustls")]
mod tls {
    use super::tls_nodes::{tls_cluster, tls_masters, trusting};
    use super::*;

    /// A cluster member whose nodes show a certificate of a CA of our own:
    /// `cluster_with_tls` with that CA locks, reads the status and wakes a
    /// waiter through sharded pub/sub, all over TLS; `cluster` alone (the
    /// public roots) is refused at build.
    #[tokio::test]
    async fn a_cluster_member_over_tls_with_a_trusted_ca() {
        let dir = std::env::temp_dir().join(unique("quorumlock-tls-cluster"));
        let (nodes, ca) = tls_cluster(&dir);
        let certs = trusting(&ca);
        let untrusted = LockManager::builder()
            .cluster(nodes.urls())
            .build()
            .await
            .expect_err("a certificate from an unknown CA is refused");
        assert!(
            matches!(untrusted, quorumlock::Error::Connect { .. }),
            "{untrusted:?}"
        );
        let text = untrusted.to_string();
        assert!(
            text.contains("127.0.0.1") && text.contains("UnknownIssuer"),
            "{text}"
        );

        let plain = LockManager::builder()
            .cluster_with_tls(["redis://127.0.0.1:1"], certs.clone())
            .build()
            .await
            .expect_err("a redis:// seed with certificates");
        assert!(plain.is_invalid_input(), "{plain:?}");
        assert!(plain.to_string().contains("rediss://"), "{plain}");

        let m = LockManager::builder()
            .cluster_with_tls(nodes.urls(), certs)
            .build()
            .await
            .expect("a cluster member over TLS");
        let name = unique("tls-cluster");
        let held = m.lock(&name).await.expect("lock over TLS");
        let status = m.status(&name).await.expect("status over TLS");
        assert_eq!(status.holder(), Some(held.holder_id()));
        // A waiter subscribes on the shard (SSUBSCRIBE over TLS) and is
        // woken by the release.
        let waiter = tokio::spawn({
            let (m, name) = (m.clone(), name.clone());
            async move { m.lock(&name).await }
        });
        let channel = format!("quorumlock:{{{name}}}:released");
        let mut raw = redis::Client::build_with_tls(
            nodes.url(0).as_str(),
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(dir.join("ca.pem")).expect("the CA")),
            },
        )
        .expect("a TLS client")
        .get_multiplexed_async_connection()
        .await
        .expect("connect over TLS");
        let until = std::time::Instant::now() + Duration::from_secs(5);
        loop {
            let (_, n): (String, u64) = redis::cmd("PUBSUB")
                .arg("SHARDNUMSUB")
                .arg(&channel)
                .query_async(&mut raw)
                .await
                .expect("PUBSUB SHARDNUMSUB");
            if n > 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < until,
                "no subscriber on {channel}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        held.release().await.expect("release over TLS");
        let woken = tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter is woken")
            .expect("the waiter task")
            .expect("the waiter gets the lock");

        woken.release().await.expect("release");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn locks_work_over_tls_with_a_trusted_ca() {
        let dir = std::env::temp_dir().join(unique("quorumlock-tls"));
        let (nodes, ca) = tls_masters(&dir, 3);
        let mut builder = LockManager::builder().quorum(Quorum::Majority);
        for url in nodes.urls() {
            assert!(url.starts_with("rediss://"), "{url}");
            let client = redis::Client::build_with_tls(url.as_str(), trusting(&ca))
                .expect("a TLS client trusting the test CA");
            builder = builder.client(client);
        }
        let m = builder.build().await.expect("connect over TLS");
        let name = unique("tls");
        let guard = m.lock(&name).await.expect("lock over TLS");
        let status = m.status(&name).await.expect("status over TLS");
        assert_eq!(status.holder(), Some(guard.holder_id()));
        guard.release().await.expect("release over TLS");

        // Without the CA, the server's certificate is not trusted.
        let untrusted = LockManager::builder()
            .nodes(nodes.urls())
            .build()
            .await
            .expect_err("a certificate from an unknown CA is refused");
        assert!(untrusted.to_string().contains("127.0.0.1"), "{untrusted}");

        let _ = std::fs::remove_dir_all(&dir);
    }
}
