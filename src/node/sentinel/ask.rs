//! What a Sentinel member's sentinels say of its master: at `build()`,
//! every sentinel asked and their answers checked against each other
//! ([`agreed`], no I/O); afterwards, the master found through redis-rs's
//! own Sentinel support ([`Finder`]), one sentinel at a time in a race so
//! that a frozen sentinel costs nothing but its own answer.

use std::time::Duration;

use futures::StreamExt;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{Client, ConnectionAddr, ConnectionInfo, TlsMode};
use tokio::sync::watch;

use crate::error::{Error, NodeError, NodeErrorKind, NodeFailure};

use super::spec::{address, Parsed};

/// One sentinel's answer to `SENTINEL GET-MASTER-ADDR-BY-NAME`: where the
/// master is, or `None` when it does not know the name.
pub(crate) type Told = Result<Option<(String, u16)>, NodeError>;

/// Asks every sentinel where the master is, in parallel, each within
/// `timeout`.
pub(crate) async fn ask_all(parsed: &Parsed, timeout: Duration) -> Vec<Told> {
    futures::future::join_all(parsed.sentinels.iter().map(|(info, _)| async move {
        let ask = async {
            let client = parsed
                .trust
                .client(info.clone())
                .map_err(|e| NodeError::from_redis(&e))?;
            let mut conn = client
                .get_multiplexed_async_connection()
                .await
                .map_err(|e| NodeError::from_redis(&e))?;
            let told: Option<(String, u16)> = redis::cmd("SENTINEL")
                .arg("GET-MASTER-ADDR-BY-NAME")
                .arg(&parsed.name)
                .query_async(&mut conn)
                .await
                .map_err(|e| NodeError::from_redis(&e))?;
            Ok(told)
        };
        tokio::time::timeout(timeout, ask)
            .await
            .unwrap_or_else(|_| Err(NodeError::new(NodeErrorKind::Timeout, "no answer")))
    }))
    .await
}

/// The master every answering sentinel names, as `build()` requires it.
///
/// # Errors
///
/// - [`Error::Connect`] when no sentinel answered (each sentinel's failure
///   named `sentinel:<name> via <sentinel>`);
/// - [`Error::Config`] when a server answered the question with an error
///   (it is not a sentinel), no sentinel that answered knows the name, or
///   the sentinels that answered name different masters (or some know the
///   name and some do not).
pub(crate) fn agreed(
    index: usize,
    parsed: &Parsed,
    told: &[Told],
) -> Result<(String, u16), Refused> {
    let via = |k: usize| format!("{} via {}", parsed.label, parsed.sentinels[k].1);
    let mut failures: Vec<NodeFailure> = Vec::new();
    let mut answers = Vec::new();
    for (k, t) in told.iter().enumerate() {
        match t {
            Ok(answer) => answers.push((k, answer.clone())),
            Err(e) if e.kind == NodeErrorKind::Server => {
                return Err(Refused::now(Error::Config(format!(
                    "member {index} ({}): {} is not a sentinel (it answered SENTINEL with: {})",
                    parsed.label, parsed.sentinels[k].1, e.message
                ))))
            }
            Err(e) => failures.push(e.clone().at(index, &via(k))),
        }
    }
    let Some((_, first)) = answers.first().cloned() else {
        return Err(Refused::later(Error::Connect { failures }));
    };
    if answers.iter().all(|(_, a)| a.is_none()) {
        return Err(Refused::later(Error::Config(format!(
            "member {index} ({}): no sentinel that answered knows a master named {:?}",
            parsed.label, parsed.name
        ))));
    }
    if answers.iter().any(|(_, a)| *a != first) {
        let said: Vec<String> = answers
            .iter()
            .map(|(k, a)| {
                let at = a
                    .as_ref()
                    .map_or_else(|| "no such master".to_owned(), |(h, p)| format!("{h}:{p}"));
                format!("{} says {at}", parsed.sentinels[*k].1)
            })
            .collect();
        return Err(Refused::later(Error::Config(format!(
            "member {index} ({}): the sentinels disagree on the master ({}); build again once \
             they agree (a failover may be under way)",
            parsed.label,
            said.join(", ")
        ))));
    }
    first.ok_or_else(|| Refused::later(Error::Config(format!("member {index}: no master"))))
}

/// Why a Sentinel member was not connected at `build()`, and whether it
/// may resolve by itself (no sentinel answered, they disagree or do not
/// know the name, or they name a replica: a failover may be under way),
/// so that `allow_unreachable` connects it later.
#[derive(Debug)]
pub(crate) struct Refused {
    pub(crate) error: Error,
    pub(crate) later: bool,
}

impl Refused {
    pub(crate) fn now(error: Error) -> Self {
        Self {
            error,
            later: false,
        }
    }

    pub(crate) fn later(error: Error) -> Self {
        Self { error, later: true }
    }
}

impl From<Error> for Refused {
    fn from(error: Error) -> Self {
        Self::now(error)
    }
}

/// Finds the master through redis-rs's Sentinel support: each sentinel a
/// [`SentinelClient`] of its own (its own credentials; the master's
/// scheme, credentials, database and certificates), asked in a race; the
/// first master found (named by a sentinel that does not flag it down, and
/// answering `ROLE` as a master) wins.
pub(crate) struct Finder {
    sentinels: Vec<tokio::sync::Mutex<SentinelClient>>,
}

impl Finder {
    pub(crate) fn new(parsed: &Parsed) -> Result<Self, Error> {
        let sentinels = parsed
            .sentinels
            .iter()
            .map(|(info, label)| {
                client(parsed, info)
                    .map(tokio::sync::Mutex::new)
                    .map_err(|e| Error::invalid("sentinel URL", format!("{label}: {e}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self { sentinels })
    }

    /// The master's connection, as the first sentinel to find it tells,
    /// each sentinel within `timeout`.
    pub(crate) async fn find(&self, timeout: Duration) -> Result<ConnectionInfo, NodeError> {
        let asks = self.sentinels.iter().map(|s| {
            Box::pin(async move {
                let found = async { s.lock().await.async_get_client().await };
                match tokio::time::timeout(timeout, found).await {
                    Ok(Ok(client)) => Ok(client.get_connection_info().clone()),
                    Ok(Err(e)) => Err(NodeError::from_redis(&e)),
                    Err(_) => Err(NodeError::new(NodeErrorKind::Timeout, "no answer")),
                }
            })
        });
        futures::future::select_ok(asks).await.map(|(info, _)| info)
    }
}

/// A Sentinel client of the sentinel at `sentinel` alone, reaching the
/// master as `parsed` says.
fn client(parsed: &Parsed, sentinel: &ConnectionInfo) -> redis::RedisResult<SentinelClient> {
    let (to_sentinel, to_master) = (sentinel.redis_settings(), parsed.master.redis_settings());
    let mut b = SentinelClientBuilder::new(
        [sentinel.addr().clone()],
        &parsed.name,
        SentinelServerType::Master,
    )?
    .set_client_to_sentinel_tcp_settings(sentinel.tcp_settings().clone())
    .set_client_to_redis_tcp_settings(parsed.master.tcp_settings().clone())
    .set_client_to_redis_db(to_master.db());
    if let Some(user) = to_sentinel.username() {
        b = b.set_client_to_sentinel_username(user);
    }
    if let Some(password) = to_sentinel.password() {
        b = b.set_client_to_sentinel_password(password);
    }
    if let Some(user) = to_master.username() {
        b = b.set_client_to_redis_username(user);
    }
    if let Some(password) = to_master.password() {
        b = b.set_client_to_redis_password(password);
    }
    if let ConnectionAddr::TcpTls { insecure, .. } = parsed.master.addr() {
        let mode = if *insecure {
            TlsMode::Insecure
        } else {
            TlsMode::Secure
        };
        b = b.set_client_to_redis_tls_mode(mode);
    }
    #[cfg(feature = "tls-rustls")]
    if let Some(certs) = &parsed.trust.0 {
        b = b
            .set_client_to_sentinel_certificates(certs.clone())
            .set_client_to_redis_certificates(certs.clone());
    }
    b.build()
}

/// Listens to one sentinel's `+switch-master` messages and calls `ring`
/// for those naming the master `name`; reconnects (each try within
/// `timeout`) while the member is `alive`, and ends, closing its
/// connection, when the member is gone (its sender dropped, or `ring`
/// says so).
pub(crate) async fn listen(
    client: redis::RedisResult<Client>,
    (name, timeout): (String, Duration),
    mut alive: watch::Receiver<u64>,
    ring: impl Fn() -> bool + Send + 'static,
) {
    let Ok(client) = client else { return };
    let prefix = format!("{name} ");
    loop {
        if alive.has_changed().is_err() {
            return;
        }
        let subscribed = async {
            let mut pubsub = client.get_async_pubsub().await?;
            pubsub.subscribe("+switch-master").await?;
            Ok::<_, redis::RedisError>(pubsub)
        };
        if let Ok(Ok(mut pubsub)) = tokio::time::timeout(timeout, subscribed).await {
            let mut messages = pubsub.on_message();
            loop {
                let msg = tokio::select! {
                    msg = messages.next() => msg,
                    gone = alive.changed() => match gone {
                        Ok(()) => continue,
                        Err(_) => return,
                    },
                };
                let Some(msg) = msg else { break };
                if msg.get_payload_bytes().starts_with(prefix.as_bytes()) && !ring() {
                    return;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// Where `info` reaches, for comparing masters.
pub(crate) fn where_(info: &ConnectionInfo) -> String {
    address(info.addr())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::sentinel::spec::SentinelSpec;

    fn parsed(n: usize) -> Parsed {
        SentinelSpec {
            sentinels: (0..n).map(|i| format!("redis://s{i}:26379")).collect(),
            master: "locks".into(),
            trust: crate::node::sentinel::spec::Trust::default(),
        }
        .parse()
        .expect("valid")
    }

    fn at(port: u16) -> Told {
        Ok(Some(("10.0.0.1".into(), port)))
    }

    #[test]
    fn the_sentinels_that_answer_must_agree() {
        let p = parsed(3);
        let down = || Err(NodeError::new(NodeErrorKind::Connection, "refused"));
        assert_eq!(
            agreed(1, &p, &[at(7000), down(), at(7000)]).expect("agreed"),
            ("10.0.0.1".into(), 7000)
        );
        let e = agreed(1, &p, &[at(7000), at(7001), down()]).expect_err("disagree");
        assert!(e.later);
        let e = e.error;
        assert!(e.to_string().contains("disagree"), "{e}");
        let e = agreed(1, &p, &[at(7000), Ok(None), at(7000)])
            .expect_err("one does not know")
            .error;
        assert!(e.to_string().contains("no such master"), "{e}");
        let e = agreed(1, &p, &[Ok(None), Ok(None), down()])
            .expect_err("unknown")
            .error;
        assert!(e.to_string().contains("knows a master named"), "{e}");
        let e = agreed(1, &p, &[down(), down(), down()])
            .expect_err("unreachable")
            .error;
        assert!(
            matches!(&e, Error::Connect { failures } if failures.len() == 3),
            "{e}"
        );
        let server = Err(NodeError::new(NodeErrorKind::Server, "ERR unknown command"));
        let e = agreed(1, &p, &[at(7000), server, at(7000)]).expect_err("not a sentinel");
        assert!(!e.later);
        let e = e.error;
        assert!(e.to_string().contains("is not a sentinel"), "{e}");
    }
}
