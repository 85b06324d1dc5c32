//! [`LockManagerBuilder::sentinel`], and connecting its members in
//! `build()`.

use std::sync::Arc;

use crate::admission::Admission;
use crate::config::Config;
use crate::error::{Error, NodeFailure};
use crate::error::{NodeError, NodeErrorKind};
use crate::node::{Member, NodeOps, SentinelNode, SentinelRefused, SentinelSpec, SentinelTrust};

use super::LockManagerBuilder;

impl LockManagerBuilder {
    /// Adds one member that is a master under Redis Sentinel: the master
    /// of the group the sentinels at `sentinel_urls` monitor as
    /// `master_name`. It counts as one vote, as a master or a cluster
    /// does, and follows the group's failovers. Sentinel members come after
    /// the cluster members, in the order added.
    ///
    /// The sentinels' URLs carry the sentinels' credentials (and
    /// `rediss://` for TLS). `master_name` is the name alone (`"locks-b"`),
    /// or a URL whose host is the name, carrying the master's scheme,
    /// credentials and database: `"redis://user:password@locks-b/2"`,
    /// `"rediss://locks-b"` (TLS to the master, trusting the public roots;
    /// add `#insecure` to skip verifying its certificate; for a CA of your
    /// own, see `sentinel_with_tls`, feature `tls-rustls`).
    ///
    /// `build()` asks every sentinel where the master is; they must agree,
    /// and the server they name must be a master, not the same server as
    /// another member, and pass [`require_noeviction`](Self::require_noeviction)
    /// when set. Afterwards the member asks the sentinels again (through
    /// redis-rs's Sentinel support) on a sentinel's `+switch-master` for
    /// the name, on a call that fails or goes unanswered, and at least
    /// every second; a master found then is checked as at `build()` before
    /// any call goes to it. See docs/SENTINEL.md for the bound on
    /// following a failover and what one costs.
    pub fn sentinel<I, S>(mut self, sentinel_urls: I, master_name: impl Into<String>) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.sentinels.push(SentinelSpec {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master: master_name.into(),
            trust: SentinelTrust::default(),
        });
        self
    }

    /// Adds one member that is a master under Redis Sentinel reached over
    /// TLS, as [`sentinel`](Self::sentinel) does, with `certs` for every
    /// connection to it: its sentinels and its master. Give `root_cert`
    /// (PEM) to trust a CA of your own instead of the public roots,
    /// `client_tls` to show a client certificate (mutual TLS). The
    /// sentinels are `rediss://` URLs and the master's name is written
    /// `rediss://NAME` (with its credentials, if any); the master's address
    /// comes from the sentinels, so its certificate must name the host
    /// they announce.
    ///
    /// Needs the `tls-rustls` feature. `build()` refuses a sentinel or a
    /// master name that is not `rediss://` with
    /// [`Error::InvalidInput`](crate::Error::InvalidInput).
    #[cfg(feature = "tls-rustls")]
    pub fn sentinel_with_tls<I, S>(
        mut self,
        sentinel_urls: I,
        master_name: impl Into<String>,
        certs: redis::TlsCertificates,
    ) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.sentinels.push(SentinelSpec {
            sentinels: sentinel_urls.into_iter().map(Into::into).collect(),
            master: master_name.into(),
            trust: SentinelTrust(Some(certs)),
        });
        self
    }
}

/// Connects the Sentinel members, the first numbered `first`: each joins
/// `nodes`, or, with `allow_unreachable`, when what its sentinels said may
/// resolve by itself (none answered; they disagree, do not know the name,
/// or name a replica), is connected when it does; the failures of the
/// members not connected join `failures`.
pub(super) async fn connect(
    builder: &LockManagerBuilder,
    first: usize,
    config: &Config,
    admission: &Arc<Admission>,
    (nodes, failures): (&mut Vec<Arc<dyn NodeOps>>, &mut Vec<NodeFailure>),
) -> Result<(), Error> {
    let parsed = builder
        .sentinels
        .iter()
        .map(SentinelSpec::parse)
        .collect::<Result<Vec<_>, _>>()?;
    let results = futures::future::join_all(
        parsed
            .iter()
            .cloned()
            .enumerate()
            .map(|(k, p)| SentinelNode::connect(first + k, p, config, Arc::clone(admission))),
    )
    .await;
    for (k, r) in results.into_iter().enumerate() {
        let i = first + k;
        let label = &parsed[k].label;
        match r {
            Ok(node) => nodes.push(Arc::new(Member::new(node))),
            Err(SentinelRefused { error, later: true }) if builder.allow_unreachable => {
                tracing::warn!(node = i, member = %label, reason = %error, "sentinel member not connected at build; finding its master in the background");
                let lazy = SentinelNode::lazy(i, parsed[k].clone(), config, Arc::clone(admission))?;
                nodes.push(Arc::new(Member::new(lazy)));
                failures.extend(as_failures(i, label, error));
            }
            Err(SentinelRefused {
                error: Error::Connect { failures: f },
                ..
            }) => failures.extend(f),
            Err(SentinelRefused { error, .. }) => return Err(error),
        }
    }
    Ok(())
}

/// What `unreachable_at_build` lists for a member connected later: its
/// sentinels' failures, or why what they said could not be used yet.
fn as_failures(index: usize, label: &str, error: Error) -> Vec<NodeFailure> {
    match error {
        Error::Connect { failures } => failures,
        Error::NotMaster { .. } => {
            vec![NodeError::new(NodeErrorKind::NotMaster, error.to_string()).at(index, label)]
        }
        other => vec![NodeError::new(NodeErrorKind::Refused, other.to_string()).at(index, label)],
    }
}
