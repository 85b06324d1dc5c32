//! A Sentinel member as given to the builder: its sentinels' URLs and its
//! master's name, checked and read into what the connections need (no I/O).
//!
//! The master's name may be written as a URL whose host is the name
//! (`redis://user:password@locks-b/2`, `rediss://...`): its scheme,
//! credentials and database are the master's, as the sentinels' own URLs
//! carry theirs. The sentinels tell only where the master is.

use redis::{Client, ConnectionAddr, ConnectionInfo, IntoConnectionInfo, RedisResult};

use crate::error::Error;
use crate::node::spec::redact;

/// The longest master name accepted (Sentinel itself has no limit; a name
/// is a config word).
const MAX_NAME: usize = 256;

/// A Sentinel member as given to the builder.
#[derive(Clone, Default)]
pub(crate) struct SentinelSpec {
    /// The sentinels' URLs.
    pub(crate) sentinels: Vec<String>,
    /// The master's name, or a URL whose host is the name.
    pub(crate) master: String,
    /// What its TLS connections trust (`sentinel_with_tls`).
    pub(crate) trust: Trust,
}

/// The TLS certificates of a Sentinel member's connections (to its
/// sentinels and to its master), when given; else the defaults of
/// `rediss://` (the public roots).
#[derive(Clone, Default)]
pub(crate) struct Trust(#[cfg(feature = "tls-rustls")] pub(crate) Option<redis::TlsCertificates>);

impl Trust {
    /// Whether certificates were given.
    pub(crate) fn is_some(&self) -> bool {
        #[cfg(feature = "tls-rustls")]
        return self.0.is_some();
        #[cfg(not(feature = "tls-rustls"))]
        false
    }

    /// A client of `info` that trusts these certificates.
    pub(crate) fn client(&self, info: ConnectionInfo) -> RedisResult<Client> {
        #[cfg(feature = "tls-rustls")]
        if let Some(certs) = &self.0 {
            return Client::build_with_tls(info, certs.clone());
        }
        Client::open(info)
    }
}

impl std::fmt::Debug for SentinelSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let sentinels: Vec<String> = self.sentinels.iter().map(|u| redact(u)).collect();
        f.debug_struct("SentinelSpec")
            .field("sentinels", &sentinels)
            .field("master", &redact(&self.master))
            .field("certs", &self.trust.is_some())
            .finish()
    }
}

/// A Sentinel member, checked: what its connections need.
#[derive(Clone)]
pub(crate) struct Parsed {
    /// The master's name, as the sentinels know it.
    pub(crate) name: String,
    /// How the member is named in errors, logs and status:
    /// `sentinel:<name>`.
    pub(crate) label: String,
    /// Each sentinel: its connection, and its address without credentials.
    pub(crate) sentinels: Vec<(ConnectionInfo, String)>,
    /// How the master is reached once found: scheme, credentials and
    /// database of the name's URL, at the address the sentinels tell.
    pub(crate) master: ConnectionInfo,
    /// What the TLS connections trust.
    pub(crate) trust: Trust,
}

impl SentinelSpec {
    /// Checks the member and reads it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for no sentinel, a malformed sentinel URL or
    /// one naming a database (a sentinel has none), or an empty, blank or
    /// over-long master name, or a malformed master URL.
    pub(crate) fn parse(&self) -> Result<Parsed, Error> {
        if self.sentinels.is_empty() {
            return Err(Error::invalid(
                "sentinel URLs",
                "a sentinel member needs at least one sentinel URL",
            ));
        }
        let sentinels =
            self.sentinels
                .iter()
                .map(|url| {
                    let info = url.as_str().into_connection_info().map_err(|e| {
                        Error::invalid("sentinel URL", format!("{}: {e}", redact(url)))
                    })?;
                    if info.redis_settings().db() != 0 {
                        return Err(Error::invalid(
                            "sentinel URL",
                            format!(
                                "{}: a sentinel has no databases; give the master's database in \
                             the master name's URL (redis://locks-b/2)",
                                redact(url)
                            ),
                        ));
                    }
                    let label = address(info.addr());
                    Ok((nodelay(info), label))
                })
                .collect::<Result<Vec<_>, Error>>()?;
        let (name, master) = master(&self.master)?;
        let tls = |a: &ConnectionAddr| matches!(a, ConnectionAddr::TcpTls { .. });
        if self.trust.is_some()
            && !(tls(master.addr()) && sentinels.iter().all(|(i, _)| tls(i.addr())))
        {
            return Err(Error::invalid(
                "sentinel URLs",
                "sentinel_with_tls takes rediss:// sentinels and a rediss:// master name \
                 (rediss://NAME), all over TLS",
            ));
        }
        Ok(Parsed {
            label: format!("sentinel:{name}"),
            name,
            sentinels,
            master,
            trust: self.trust.clone(),
        })
    }
}

impl Parsed {
    /// The master's connection at `host:port`, as a sentinel told it.
    pub(crate) fn master_at(&self, host: String, port: u16) -> ConnectionInfo {
        let addr = match self.master.addr() {
            ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        self.master.clone().set_addr(addr)
    }
}

/// The master's name and its connection template, from a bare name or a
/// URL whose host is the name.
fn master(given: &str) -> Result<(String, ConnectionInfo), Error> {
    let given = given.trim();
    let (name, info) = if given.contains("://") {
        let info = given.into_connection_info().map_err(|e| {
            Error::invalid("sentinel master name", format!("{}: {e}", redact(given)))
        })?;
        let name = match info.addr() {
            ConnectionAddr::Tcp(host, _) | ConnectionAddr::TcpTls { host, .. } => host.clone(),
            other => {
                return Err(Error::invalid(
                    "sentinel master name",
                    format!("{other}: the master's URL names it by its host (redis://NAME)"),
                ))
            }
        };
        (name, info)
    } else {
        let info = ("localhost", 0)
            .into_connection_info()
            .map_err(|e| Error::invalid("sentinel master name", e.to_string()))?
            .set_addr(ConnectionAddr::Tcp(given.to_owned(), 0));
        (given.to_owned(), info)
    };
    if name.is_empty() || name.len() > MAX_NAME || name.chars().any(char::is_whitespace) {
        return Err(Error::invalid(
            "sentinel master name",
            format!(
                "{name:?}: a master name is 1 to {MAX_NAME} characters, without spaces (the \
                 name in the sentinels' `sentinel monitor NAME ...`)"
            ),
        ));
    }
    Ok((name, nodelay(info)))
}

fn nodelay(info: ConnectionInfo) -> ConnectionInfo {
    let tcp = info.tcp_settings().clone().set_nodelay(true);
    info.set_tcp_settings(tcp)
}

/// `host:port` (`tls://host:port` for TLS), never credentials.
pub(crate) fn address(addr: &ConnectionAddr) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("tls://{host}:{port}"),
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(sentinels: &[&str], master: &str) -> SentinelSpec {
        SentinelSpec {
            sentinels: sentinels.iter().map(|s| (*s).to_owned()).collect(),
            master: master.to_owned(),
            trust: Trust::default(),
        }
    }

    #[test]
    fn a_bare_name_and_a_url_name_read_alike() {
        let p = spec(&["redis://:pw@s1:26379", "redis://s2:26379"], "locks-b")
            .parse()
            .expect("valid");
        assert_eq!(
            (p.name.as_str(), p.label.as_str()),
            ("locks-b", "sentinel:locks-b")
        );
        assert_eq!(p.sentinels[0].1, "s1:26379");
        let at = p.master_at("10.0.0.1".into(), 7000);
        assert_eq!(address(at.addr()), "10.0.0.1:7000");
        let p = spec(&["redis://s1:26379"], "redis://u:secret@locks-b/2")
            .parse()
            .expect("valid");
        assert_eq!(p.name, "locks-b");
        let at = p.master_at("10.0.0.1".into(), 7000);
        assert_eq!(at.redis_settings().db(), 2);
        assert_eq!(at.redis_settings().password(), Some("secret"));
        assert_eq!(at.redis_settings().username(), Some("u"));
    }

    #[test]
    fn a_tls_master_stays_tls_at_the_address_told() {
        let p = spec(&["redis://s1:26379"], "rediss://locks-b/#insecure")
            .parse()
            .expect("valid");
        let at = p.master_at("127.0.0.1".into(), 7000);
        assert!(matches!(
            at.addr(),
            ConnectionAddr::TcpTls {
                insecure: true,
                port: 7000,
                ..
            }
        ));
    }

    #[test]
    fn bad_members_are_typed_errors_without_passwords() {
        for (sentinels, master) in [
            (&[][..], "locks"),
            (&["not a url"][..], "locks"),
            (&["redis://s1:26379/3"][..], "locks"),
            (&["redis://s1:26379"][..], ""),
            (&["redis://s1:26379"][..], "two words"),
            (&["redis://s1:26379"][..], "unix:///tmp/x"),
        ] {
            let e = spec(sentinels, master).parse().err().expect("refused");
            assert!(matches!(e, Error::InvalidInput { .. }), "{e}");
        }
        let long = "x".repeat(MAX_NAME + 1);
        assert!(spec(&["redis://s1:26379"], &long).parse().is_err());
        let e = spec(&["redis://:hunter2@s1:26379/3"], "locks")
            .parse()
            .err()
            .expect("refused");
        assert!(!e.to_string().contains("hunter2"), "{e}");
    }
}
