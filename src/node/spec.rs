//! A node as given to the builder, before connecting, and URL redaction.

use redis::{Client, ConnectionAddr, IntoConnectionInfo};

use crate::error::Error;

/// A node as given to the builder, before connecting.
#[derive(Clone)]
pub(crate) struct NodeSpec {
    pub(crate) client: Client,
    pub(crate) addr: String,
    /// Identity used to refuse the same node twice.
    pub(crate) identity: String,
}

impl NodeSpec {
    pub(crate) fn from_url(url: &str) -> Result<Self, Error> {
        let info = url.into_connection_info().map_err(|e| {
            Error::invalid(
                "node URL",
                format!("{}: {}", redact(url), redact_message(&e.to_string(), url)),
            )
        })?;
        Self::from_info(info)
    }

    pub(crate) fn from_client(client: &Client) -> Result<Self, Error> {
        Self::from_info(client.get_connection_info().clone())
    }

    fn from_info(info: redis::ConnectionInfo) -> Result<Self, Error> {
        let tcp = info.tcp_settings().clone().set_nodelay(true);
        let info = info.set_tcp_settings(tcp);
        let db = info.redis_settings().db();
        let addr = match info.addr() {
            ConnectionAddr::Tcp(host, port) => format!("{host}:{port}"),
            ConnectionAddr::TcpTls { host, port, .. } => format!("tls://{host}:{port}"),
            ConnectionAddr::Unix(path) => format!("unix:{}", path.display()),
            other => format!("{other}"),
        };
        let addr = if db == 0 {
            addr
        } else {
            format!("{addr}/{db}")
        };
        let identity = match info.addr() {
            ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => {
                let host = if host == "localhost" || host == "::1" || host == "[::1]" {
                    "127.0.0.1"
                } else {
                    host.as_str()
                };
                format!("{host}:{port}/{db}")
            }
            _ => addr.clone(),
        };
        let client =
            Client::open(info).map_err(|e| Error::invalid("node", format!("{addr}: {e}")))?;
        Ok(Self {
            client,
            addr,
            identity,
        })
    }
}

/// Replaces the password of a URL with `***`.
pub(crate) fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            let user = userinfo.split(':').next().unwrap_or("");
            if userinfo.contains(':') {
                format!("{}{user}:***{}", &url[..scheme + 3], &url[at..])
            } else {
                url.to_owned()
            }
        }
        _ => url.to_owned(),
    }
}

fn redact_message(message: &str, url: &str) -> String {
    match url.rfind('@').zip(url.find("://")) {
        Some((at, scheme)) if at > scheme => {
            let userinfo = &url[scheme + 3..at];
            match userinfo.split_once(':') {
                Some((_, password)) if !password.is_empty() => message.replace(password, "***"),
                _ => message.to_owned(),
            }
        }
        _ => message.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(redact("redis://u:secret@h:1/0"), "redis://u:***@h:1/0");
        assert_eq!(redact("redis://:secret@h:1"), "redis://:***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
        assert_eq!(
            redact_message("bad secret here", "redis://u:secret@h"),
            "bad *** here"
        );
    }

    #[test]
    fn specs_name_nodes_without_credentials_and_detect_duplicates() {
        let a = NodeSpec::from_url("redis://user:pw@localhost:7001/2").expect("valid url");
        assert_eq!(a.addr, "localhost:7001/2");
        let b = NodeSpec::from_url("redis://127.0.0.1:7001/2").expect("valid url");
        assert_eq!(a.identity, b.identity);
        assert!(NodeSpec::from_url("http://nope").is_err());
        assert!(NodeSpec::from_url("not a url").is_err());
    }
}
