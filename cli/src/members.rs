//! The quorum members named in `--nodes` (or `QUORUMLOCK_NODES`): a
//! standalone master by its URL, a whole Redis Cluster as `cluster:` and its
//! seed URLs joined by `+`, a master under Redis Sentinel as `sentinel:`,
//! its master's name, `@` and its sentinels' URLs joined by `+`:
//!
//! ```text
//! redis://10.0.0.1:6379,cluster:redis://10.0.1.1:7000+redis://10.0.1.2:7000,sentinel:locks-b@redis://10.0.2.1:26379+redis://10.0.2.2:26379
//! ```
//!
//! A Sentinel member's master name may be a URL whose host is the name,
//! carrying the master's credentials (`sentinel:redis://:pw@locks-b@redis://s1:26379`).
//! The entries are split on `,` (by clap) and a member's URLs on `+`, so
//! neither may appear raw in a password: write them `%2C` and `%2B`. Errors
//! name an entry by its place in the list, never by its text (a URL may
//! carry a password).

use std::fmt;

/// What starts an entry that names a cluster member.
pub const CLUSTER_PREFIX: &str = "cluster:";

/// How a cluster member is written, for error messages and help.
pub const CLUSTER_EXAMPLE: &str = "cluster:redis://HOST:PORT+redis://HOST:PORT";

/// What starts an entry that names a master under Redis Sentinel.
pub const SENTINEL_PREFIX: &str = "sentinel:";

/// How a Sentinel member is written, for error messages and help.
pub const SENTINEL_EXAMPLE: &str = "sentinel:MASTER_NAME@redis://HOST:PORT+redis://HOST:PORT";

/// One quorum member, as named in `--nodes`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Member {
    /// A standalone master: its URL.
    Master(String),
    /// A Redis Cluster: the URLs of one or more of its nodes.
    Cluster(Vec<String>),
    /// A master under Redis Sentinel: its name (or a URL naming it), and
    /// the URLs of one or more of its sentinels.
    Sentinel {
        master: String,
        sentinels: Vec<String>,
    },
}

/// A malformed `--nodes` entry; `entry` counts from 1 in the list as given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MemberError {
    /// `cluster:` with no seed after it.
    NoSeeds { entry: usize },
    /// An empty seed: two `+` in a row, or one at either end.
    EmptySeed { entry: usize, seed: usize },
    /// A seed that is not a `redis://` or `rediss://` URL.
    NotRedisUrl { entry: usize, seed: usize },
    /// An entry that joins several URLs with `+` without `cluster:` before
    /// them: several seeds of a cluster written as one master.
    SeedsWithoutPrefix { entry: usize },
    /// `sentinel:` without `NAME@` and a sentinel URL after it.
    NoSentinels { entry: usize },
    /// `sentinel:@...`: no master name before the `@`.
    NoMasterName { entry: usize },
    /// A sentinel's URL that is empty or not a `redis://` or `rediss://`
    /// URL.
    BadSentinel { entry: usize, sentinel: usize },
}

impl fmt::Display for MemberError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoSeeds { entry } => write!(
                f,
                "--nodes entry {entry}: `cluster:` names no seed; write a cluster member as \
                 {CLUSTER_EXAMPLE}"
            ),
            Self::EmptySeed { entry, seed } => write!(
                f,
                "--nodes entry {entry}: seed {seed} of the cluster is empty (seeds are joined by \
                 one `+`: {CLUSTER_EXAMPLE})"
            ),
            Self::NotRedisUrl { entry, seed } => write!(
                f,
                "--nodes entry {entry}: seed {seed} of the cluster is not a redis:// or \
                 rediss:// URL (write a cluster member as {CLUSTER_EXAMPLE}; a `+` in a password \
                 is written %2B)"
            ),
            Self::NoSentinels { entry } => write!(
                f,
                "--nodes entry {entry}: `sentinel:` names no master and sentinels; write a \
                 Sentinel member as {SENTINEL_EXAMPLE}"
            ),
            Self::NoMasterName { entry } => write!(
                f,
                "--nodes entry {entry}: no master name before the `@` (write a Sentinel member \
                 as {SENTINEL_EXAMPLE})"
            ),
            Self::BadSentinel { entry, sentinel } => write!(
                f,
                "--nodes entry {entry}: sentinel {sentinel} is empty or not a redis:// or \
                 rediss:// URL (write a Sentinel member as {SENTINEL_EXAMPLE}; a `+` in a \
                 password is written %2B)"
            ),
            Self::SeedsWithoutPrefix { entry } => write!(
                f,
                "--nodes entry {entry} joins several URLs with `+`: if they are seeds of one \
                 Redis Cluster, write `cluster:` before them ({CLUSTER_EXAMPLE}); a `+` in a \
                 password is written %2B"
            ),
        }
    }
}

/// The members named by `entries` (the `--nodes` list, split on `,`), in
/// order; blank entries are skipped, as a trailing comma leaves one.
///
/// # Errors
///
/// The first malformed entry, as a [`MemberError`]. The URLs themselves are
/// checked by the library when the manager is built.
pub fn parse(entries: &[String]) -> Result<Vec<Member>, MemberError> {
    entries
        .iter()
        .map(|e| e.trim())
        .filter(|e| !e.is_empty())
        .enumerate()
        .map(|(i, e)| parse_entry(i + 1, e))
        .collect()
}

/// One entry, the `entry`-th of the list.
fn parse_entry(entry: usize, text: &str) -> Result<Member, MemberError> {
    if let Some(rest) = text.strip_prefix(SENTINEL_PREFIX) {
        return parse_sentinel(entry, rest.trim());
    }
    let Some(seeds) = text.strip_prefix(CLUSTER_PREFIX) else {
        if is_redis_url(text) && ["+redis://", "+rediss://"].iter().any(|s| text.contains(s)) {
            return Err(MemberError::SeedsWithoutPrefix { entry });
        }
        return Ok(Member::Master(text.to_owned()));
    };
    let seeds = seeds.trim();
    if seeds.is_empty() {
        return Err(MemberError::NoSeeds { entry });
    }
    seeds
        .split('+')
        .enumerate()
        .map(|(i, seed)| {
            let seed = seed.trim();
            if seed.is_empty() {
                Err(MemberError::EmptySeed { entry, seed: i + 1 })
            } else if !is_redis_url(seed) {
                Err(MemberError::NotRedisUrl { entry, seed: i + 1 })
            } else {
                Ok(seed.to_owned())
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Member::Cluster)
}

/// A Sentinel member after `sentinel:`: `NAME@URL+URL`, the name ending
/// at the first `@` that a Redis URL follows (a name given as a URL may
/// carry an `@` of its own).
fn parse_sentinel(entry: usize, text: &str) -> Result<Member, MemberError> {
    let at = ["@redis://", "@rediss://"]
        .iter()
        .filter_map(|s| text.find(s))
        .min()
        .ok_or(MemberError::NoSentinels { entry })?;
    let master = text[..at].trim();
    if master.is_empty() {
        return Err(MemberError::NoMasterName { entry });
    }
    text[at + 1..]
        .split('+')
        .enumerate()
        .map(|(i, s)| {
            let s = s.trim();
            if is_redis_url(s) {
                Ok(s.to_owned())
            } else {
                Err(MemberError::BadSentinel {
                    entry,
                    sentinel: i + 1,
                })
            }
        })
        .collect::<Result<Vec<_>, _>>()
        .map(|sentinels| Member::Sentinel {
            master: master.to_owned(),
            sentinels,
        })
}

/// Whether `s` starts with the scheme of a Redis URL.
fn is_redis_url(s: &str) -> bool {
    s.starts_with("redis://") || s.starts_with("rediss://")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(list: &str) -> Vec<String> {
        list.split(',').map(str::to_owned).collect()
    }

    #[test]
    fn masters_and_clusters_mix() {
        let members = parse(&entries(
            "redis://a:1, cluster:redis://b:2+redis://:p%2Bw@c:3 ,rediss://d:4,cluster:redis://e:5,",
        ))
        .expect("valid");
        assert_eq!(
            members,
            [
                Member::Master("redis://a:1".into()),
                Member::Cluster(vec!["redis://b:2".into(), "redis://:p%2Bw@c:3".into()]),
                Member::Master("rediss://d:4".into()),
                Member::Cluster(vec!["redis://e:5".into()]),
            ]
        );
    }

    #[test]
    fn sentinel_members_mix_with_the_others() {
        let members = parse(&entries(
            "redis://a:1,sentinel:locks-b@redis://:p%2Bw@s1:26379+redis://s2:26379,\
             sentinel: redis://:m%40p@locks-c@rediss://s3:26379",
        ))
        .expect("valid");
        assert_eq!(
            members,
            [
                Member::Master("redis://a:1".into()),
                Member::Sentinel {
                    master: "locks-b".into(),
                    sentinels: vec!["redis://:p%2Bw@s1:26379".into(), "redis://s2:26379".into()],
                },
                Member::Sentinel {
                    master: "redis://:m%40p@locks-c".into(),
                    sentinels: vec!["rediss://s3:26379".into()],
                },
            ]
        );
        let cases = [
            ("sentinel:", MemberError::NoSentinels { entry: 1 }),
            ("sentinel:locks", MemberError::NoSentinels { entry: 1 }),
            (
                "sentinel:@redis://s:1",
                MemberError::NoMasterName { entry: 1 },
            ),
            (
                "redis://a:1,sentinel:locks@redis://:s3cret@s:1++redis://t:2",
                MemberError::BadSentinel {
                    entry: 2,
                    sentinel: 2,
                },
            ),
        ];
        for (list, expected) in cases {
            let e = parse(&entries(list)).expect_err(list);
            assert_eq!(e, expected, "{list}");
            assert!(!e.to_string().contains("s3cret"), "{e}");
        }
    }

    #[test]
    fn malformed_entries_are_typed_errors_that_do_not_echo_them() {
        let cases = [
            ("redis://a:1,cluster:", MemberError::NoSeeds { entry: 2 }),
            ("cluster:  ", MemberError::NoSeeds { entry: 1 }),
            (
                "cluster:redis://a:1++redis://b:2",
                MemberError::EmptySeed { entry: 1, seed: 2 },
            ),
            (
                "cluster:redis://a:1+",
                MemberError::EmptySeed { entry: 1, seed: 2 },
            ),
            (
                "redis://x:1,cluster:redis://:s3cret@a:1+b:2",
                MemberError::NotRedisUrl { entry: 2, seed: 2 },
            ),
            (
                "cluster://a:7000",
                MemberError::NotRedisUrl { entry: 1, seed: 1 },
            ),
            (
                "redis://:s3cret@a:1+redis://b:2",
                MemberError::SeedsWithoutPrefix { entry: 1 },
            ),
        ];
        for (list, want) in cases {
            let got = parse(&entries(list)).expect_err(list);
            assert_eq!(got, want, "{list}");
            let text = got.to_string();
            assert!(text.starts_with("--nodes entry "), "{text}");
            assert!(!text.contains("s3cret"), "{text}");
            assert!(!text.contains('\n'), "{text}");
        }
    }

    #[test]
    fn a_plus_in_a_master_password_is_left_alone() {
        assert_eq!(
            parse(&entries("redis://:a+b@h:1")).expect("valid"),
            [Member::Master("redis://:a+b@h:1".into())]
        );
    }
}
