//! A cluster member's slot map as read from `CLUSTER SLOTS`, with no I/O:
//! which shard (master address and node id) serves each hash slot, and the
//! checks `build()` makes of a member's seeds (every seed a cluster node,
//! all of them telling one topology).

use redis::Value;

use crate::admission::ServerId;

/// One shard: the master that serves a range of slots.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Shard {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// The master's node id (`CLUSTER MYID`); empty when not told.
    pub(crate) id: String,
    /// How many replicas `CLUSTER NODES` lists for it, not failing (see
    /// [`SlotMap::count_replicas`]; 0 until counted).
    pub(crate) replicas: usize,
}

impl Shard {
    /// `host:port` of the shard's master.
    pub(crate) fn addr(&self) -> String {
        format!("{}:{}", self.host, self.port)
    }
}

/// Which shard serves which slots, as one node told it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct SlotMap {
    /// `(first, last, shard)`, sorted by first slot.
    ranges: Vec<(u16, u16, usize)>,
    /// The distinct shards, in order of their first range.
    pub(crate) shards: Vec<Shard>,
    /// The replicas `CLUSTER SLOTS` lists (`host`, `port`), once each:
    /// nodes to ask for the map when a master stops answering.
    replicas_at: Vec<(String, u16)>,
}

impl SlotMap {
    /// Reads a `CLUSTER SLOTS` reply: per range `[first, last, [host,
    /// port, id, ...], replicas...]`. An empty host (a node that does not
    /// know its own address yet) is the address it was asked through.
    pub(crate) fn parse(reply: &Value, asked_host: &str) -> Result<Self, String> {
        let Value::Array(ranges) = reply else {
            return Err(format!("CLUSTER SLOTS: not an array: {reply:?}"));
        };
        let mut map = Self::default();
        for r in ranges {
            let Value::Array(parts) = r else {
                return Err("CLUSTER SLOTS: a range is not an array".into());
            };
            let (Some(first), Some(last), Some(Value::Array(master))) =
                (int(parts.first()), int(parts.get(1)), parts.get(2))
            else {
                return Err("CLUSTER SLOTS: a range without first, last and master".into());
            };
            let (Some(first), Some(last)) = (u16::try_from(first).ok(), u16::try_from(last).ok())
            else {
                return Err("CLUSTER SLOTS: a slot out of range".into());
            };
            let host = match master.first() {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => String::new(),
            };
            let host = if host.is_empty() || host == "?" {
                asked_host.to_owned()
            } else {
                host
            };
            let port = int(master.get(1))
                .and_then(|p| u16::try_from(p).ok())
                .ok_or("CLUSTER SLOTS: a master without a port")?;
            let id = match master.get(2) {
                Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                Some(Value::SimpleString(s)) => s.clone(),
                _ => String::new(),
            };
            for replica in parts.iter().skip(3) {
                let Value::Array(r) = replica else { continue };
                let rhost = match r.first() {
                    Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
                    Some(Value::SimpleString(s)) => s.clone(),
                    _ => String::new(),
                };
                let rhost = if rhost.is_empty() || rhost == "?" {
                    asked_host.to_owned()
                } else {
                    rhost
                };
                if let Some(rport) = int(r.get(1)).and_then(|p| u16::try_from(p).ok()) {
                    if !map.replicas_at.contains(&(rhost.clone(), rport)) {
                        map.replicas_at.push((rhost, rport));
                    }
                }
            }
            let shard = Shard {
                host,
                port,
                id,
                replicas: 0,
            };
            let index = match map.shards.iter().position(|s| *s == shard) {
                Some(i) => i,
                None => {
                    map.shards.push(shard);
                    map.shards.len() - 1
                }
            };
            map.ranges.push((first, last, index));
        }
        map.ranges.sort_unstable();
        Ok(map)
    }

    /// Every node the map names, masters first, then replicas.
    pub(crate) fn nodes(&self) -> Vec<(String, u16)> {
        self.shards
            .iter()
            .map(|s| (s.host.clone(), s.port))
            .chain(self.replicas_at.iter().cloned())
            .collect()
    }

    /// The shard serving `slot`, if any serves it.
    pub(crate) fn shard_of(&self, slot: u16) -> Option<usize> {
        let i = self.ranges.partition_point(|&(first, _, _)| first <= slot);
        let &(first, last, shard) = self.ranges.get(i.checked_sub(1)?)?;
        (first <= slot && slot <= last).then_some(shard)
    }

    /// The slots at which the shard serving the slots changes, ascending:
    /// the first slot of each range whose shard is not the one of the
    /// range before it (a slot after one no shard serves counts as a
    /// change). Empty for a cluster of one shard.
    pub(crate) fn shard_breaks(&self) -> Vec<u16> {
        let mut breaks = Vec::new();
        let mut before: Option<(u16, usize)> = None;
        for &(first, last, shard) in &self.ranges {
            if let Some((end, prev)) = before {
                if prev != shard || u32::from(end) + 1 != u32::from(first) {
                    breaks.push(first);
                }
            }
            before = Some((last, shard));
        }
        breaks
    }

    /// How many of the 16384 slots are served.
    pub(crate) fn covered(&self) -> usize {
        self.ranges
            .iter()
            .map(|&(f, l, _)| usize::from(l - f) + 1)
            .sum()
    }

    /// The topology as comparable text: each range and its master's id
    /// (addresses differ with how a node is reached; ids do not).
    pub(crate) fn fingerprint(&self) -> String {
        self.ranges
            .iter()
            .map(|&(f, l, s)| format!("{f}-{l}:{}", self.shards[s].id))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// Counts each shard's replicas in a `CLUSTER NODES` reply: the nodes
    /// flagged `slave` (not `fail`, `fail?` or `noaddr`) that name its
    /// master's id. (`CLUSTER SLOTS` does not do: it leaves out replicas
    /// whose replication offset is still 0, those of a cluster that has
    /// had no write yet.)
    pub(crate) fn count_replicas(&mut self, nodes: &str) {
        for shard in &mut self.shards {
            shard.replicas = nodes
                .lines()
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
                .filter(|f| {
                    let flags = f.get(2).map_or(Vec::new(), |f| f.split(',').collect());
                    flags.contains(&"slave")
                        && !flags
                            .iter()
                            .any(|g| matches!(*g, "fail" | "fail?" | "noaddr"))
                        && f.get(3) == Some(&shard.id.as_str())
                })
                .count();
        }
    }

    /// The cluster's server identities: its masters' node ids (those
    /// told), so that a member sharing one with another member (the same
    /// cluster twice, or one of its nodes also given as a master) is
    /// refused as one server twice.
    pub(crate) fn identity(&self) -> Vec<ServerId> {
        self.shards
            .iter()
            .filter(|s| !s.id.is_empty())
            .map(|s| ServerId::NodeId(s.id.clone()))
            .collect()
    }
}

fn int(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        _ => None,
    }
}

/// A field of an `INFO` section (`cluster_enabled`, ...).
pub(crate) fn info_field<'a>(info: &'a str, field: &str) -> Option<&'a str> {
    info.lines().find_map(|l| {
        l.trim()
            .strip_prefix(field)
            .and_then(|rest| rest.strip_prefix(':'))
    })
}

/// Why a member cannot confirm writes on `replicas` replicas: a shard that
/// has fewer (see [`crate::LockManagerBuilder::replica_wait`]).
pub(crate) fn check_replicas(map: &SlotMap, replicas: u32) -> Result<(), String> {
    let want = usize::try_from(replicas).unwrap_or(usize::MAX);
    match map.shards.iter().find(|s| s.replicas < want) {
        Some(s) => Err(format!(
            "replica_wait asks for {want} replica(s), but shard {} has {}: its grants could \
             never count (WAIT would time out on each); add replicas or lower replica_wait",
            s.addr(),
            s.replicas
        )),
        None => Ok(()),
    }
}

/// Why the seeds of one cluster member cannot make one member: they tell
/// different topologies (each seed's map, by seed address), or one covers
/// fewer than every slot.
pub(crate) fn check_seeds(maps: &[(String, SlotMap)]) -> Result<(), String> {
    let Some((first_addr, first)) = maps.first() else {
        return Err("a cluster member needs at least one seed URL".into());
    };
    for (addr, map) in maps {
        if map.covered() != 16384 {
            return Err(format!(
                "seed {addr} serves {} of the 16384 slots (cluster not ready, or slots \
                 unassigned)",
                map.covered()
            ));
        }
        if map.fingerprint() != first.fingerprint() {
            return Err(format!(
                "seeds {first_addr} and {addr} disagree on the cluster's topology (different \
                 clusters, or one is mid-failover or mid-resharding): one member is one \
                 cluster; give each cluster as its own member"
            ));
        }
    }
    Ok(())
}

/// A `CLUSTER SLOTS` reply: per range, its first and last slot and its
/// master's port and id (on 127.0.0.1).
#[cfg(test)]
pub(super) fn slots_reply(ranges: &[(i64, i64, i64, &str)]) -> Value {
    Value::Array(
        ranges
            .iter()
            .map(|&(first, last, port, id)| tests::range(first, last, port, id))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    pub(super) fn range(first: i64, last: i64, port: i64, id: &str) -> Value {
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(vec![bulk("127.0.0.1"), Value::Int(port), bulk(id)]),
        ])
    }

    fn three() -> Value {
        Value::Array(vec![
            range(5461, 10922, 7002, "b"),
            range(0, 5460, 7001, "a"),
            range(10923, 16383, 7003, "c"),
        ])
    }

    #[test]
    fn a_slot_map_finds_each_slots_shard() {
        let map = SlotMap::parse(&three(), "h").expect("parses");
        assert_eq!(map.covered(), 16384);
        let addr = |slot| map.shard_of(slot).map(|s| map.shards[s].addr());
        assert_eq!(addr(0).as_deref(), Some("127.0.0.1:7001"));
        assert_eq!(addr(5461).as_deref(), Some("127.0.0.1:7002"));
        assert_eq!(addr(16383).as_deref(), Some("127.0.0.1:7003"));
        let ids = ["b", "a", "c"].map(|id| ServerId::NodeId(id.to_owned()));
        assert_eq!(map.identity(), ids);
        let part = SlotMap::parse(&Value::Array(vec![range(0, 99, 1, "a")]), "h").expect("ok");
        assert_eq!(part.shard_of(100), None);
    }

    /// Where the serving shard changes: between shards, not between two
    /// adjacent ranges of one shard; after a gap too.
    #[test]
    fn shard_breaks_are_where_the_serving_shard_changes() {
        let map = SlotMap::parse(&three(), "h").expect("parses");
        assert_eq!(map.shard_breaks(), [5461, 10923]);
        let split = Value::Array(vec![
            range(0, 99, 7001, "a"),
            range(100, 199, 7001, "a"),
            range(200, 16000, 7002, "b"),
            range(16100, 16383, 7002, "b"),
        ]);
        let split = SlotMap::parse(&split, "h").expect("parses");
        assert_eq!(split.shard_breaks(), [200, 16100]);
        let one = SlotMap::parse(&Value::Array(vec![range(0, 16383, 1, "a")]), "h");
        assert!(one.expect("parses").shard_breaks().is_empty());
    }

    #[test]
    fn seeds_must_tell_one_complete_topology() {
        let map = SlotMap::parse(&three(), "h").expect("parses");
        let ok = [
            ("s1".to_owned(), map.clone()),
            ("s2".to_owned(), map.clone()),
        ];
        assert!(check_seeds(&ok).is_ok());
        let other = Value::Array(vec![range(0, 16383, 7009, "z")]);
        let other = SlotMap::parse(&other, "h").expect("parses");
        let why = check_seeds(&[("s1".to_owned(), map), ("s2".to_owned(), other)])
            .expect_err("two clusters");
        assert!(why.contains("disagree"), "{why}");
        let part = SlotMap::parse(&Value::Array(vec![range(0, 99, 1, "a")]), "h").expect("ok");
        assert!(check_seeds(&[("s".to_owned(), part)]).is_err());
        assert!(check_seeds(&[]).is_err());
        assert!(SlotMap::parse(&Value::Int(3), "h").is_err());
        assert!(SlotMap::parse(&Value::Array(vec![Value::Int(1)]), "h").is_err());
    }

    #[test]
    fn replica_wait_needs_as_many_replicas_on_every_shard() {
        let mut map = SlotMap::parse(&three(), "h").expect("parses");
        assert!(map.shards.iter().all(|s| s.replicas == 0));
        assert!(check_replicas(&map, 1).is_err());
        let nodes = "\
a 127.0.0.1:7001@17001 myself,master - 0 0 1 connected 0-5460
b 127.0.0.1:7002@17002 master - 0 0 2 connected 5461-10922
c 127.0.0.1:7003@17003 master - 0 0 3 connected 10923-16383
r1 127.0.0.1:8001@18001 slave a 0 0 1 connected
r2 127.0.0.1:8002@18002 slave b 0 0 2 connected
r3 127.0.0.1:8003@18003 slave c 0 0 3 connected
r4 127.0.0.1:8004@18004 slave a 0 0 1 connected
r5 127.0.0.1:8005@18005 slave,fail b 0 0 2 connected
";
        map.count_replicas(nodes);
        let counts: Vec<usize> = map.shards.iter().map(|s| s.replicas).collect();
        // In the order of their first range: b (5461), a (0), c (10923).
        assert_eq!(counts, [1, 2, 1]);
        assert!(check_replicas(&map, 1).is_ok());
        let why = check_replicas(&map, 2).expect_err("too few");
        assert!(why.contains("127.0.0.1:7002 has 1"), "{why}");
        assert!(check_replicas(&map, u32::MAX).is_err());
    }

    #[test]
    fn info_fields_are_read_by_name() {
        let info = "# Cluster\r\ncluster_enabled:1\r\n";
        assert_eq!(info_field(info, "cluster_enabled"), Some("1"));
        assert_eq!(info_field(info, "cluster"), None);
    }
}
