//! The order of a tick's holds on a manager with a cluster member of
//! several shards: by hash slot, in lanes that end where a member's
//! serving shard changes, so that a lane's locks sit on one shard of each
//! cluster member and every shard's locks go out in full script calls of
//! [`RENEW_CHUNK`](crate::node::RENEW_CHUNK) (and one call for the rest).
//! The lanes run at the same time: each shard is a server of its own, so
//! a member renews as fast as its shards together, not one at a time.
//! Without it, a wave of 100 locks over three shards costs three calls of
//! about 33 locks each, and a call's own cost (the script invocation, its
//! pipeline, its round trip) is paid three times for the locks a master
//! renews in one. A manager of masters only keeps its holds in the order
//! they were registered, in waves cut by size alone.

use std::ops::Range;
use std::sync::Arc;

use crate::hold::Hold;
use crate::members::Members;

/// Orders `holds` by slot when a member has several shards, and returns
/// where lanes must end (indices into `holds`, ascending): at each slot
/// where some member's serving shard changes. Empty, and `holds` left in
/// its order, on a manager of masters (or of one-shard clusters).
pub(super) fn by_shard(nodes: &Members, holds: &mut [Arc<Hold>]) -> Vec<usize> {
    let mut breaks: Vec<u16> = (0..nodes.len())
        .flat_map(|i| nodes.node(i).shard_breaks())
        .collect();
    if breaks.is_empty() {
        return Vec::new();
    }
    breaks.sort_unstable();
    breaks.dedup();
    // Stable: the names of one `lock_all` set (one slot on a cluster
    // member) stay together, in the order they were registered. Each slot
    // is read once (a comparison reading two holds' keys would reach two
    // heap objects, n log n times a tick).
    holds.sort_by_cached_key(|h| h.keys.slot());
    let slots: Vec<u16> = holds.iter().map(|h| h.keys.slot()).collect();
    cuts(&slots, &breaks)
}

/// Where a lane must end in holds of `slots` (ascending): the index of the
/// first hold at or past each break, but neither 0 nor the end, once each.
fn cuts(slots: &[u16], breaks: &[u16]) -> Vec<usize> {
    let mut cuts: Vec<usize> = breaks
        .iter()
        .map(|&b| slots.partition_point(|&s| s < b))
        .filter(|&i| i > 0 && i < slots.len())
        .collect();
    cuts.dedup();
    cuts
}

/// The lanes of a tick of `len` holds cut at `cuts` (ascending, neither 0
/// nor `len`): the runs of holds between two cuts, each on one shard of
/// every cluster member; one lane of all the holds without cuts.
pub(super) fn lanes(cuts: &[usize], len: usize) -> Vec<Range<usize>> {
    let mut lanes = Vec::with_capacity(cuts.len() + 1);
    let mut from = 0;
    for &c in cuts.iter().chain(std::iter::once(&len)) {
        if c > from {
            lanes.push(from..c);
            from = c;
        }
    }
    lanes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lanes cut at every shard change the holds straddle, never empty.
    #[test]
    fn lanes_end_where_the_shard_changes() {
        // Slots of 10 holds, sorted; shards change at 5461 and 10923.
        let slots = [3, 40, 5000, 5461, 6000, 7000, 9000, 12000, 16000, 16383];
        let c = cuts(&slots, &[5461, 10923]);
        assert_eq!(c, [3, 7]);
        assert_eq!(lanes(&c, slots.len()), [0..3, 3..7, 7..10]);
        // A break before every hold or after every one cuts nothing; two
        // breaks with no hold between them cut once.
        assert!(cuts(&slots, &[0, 2]).is_empty());
        assert!(cuts(&[1, 2], &[100]).is_empty());
        assert_eq!(cuts(&slots, &[5100, 5200]), [3]);
        // No cuts: one lane of every hold.
        let all = lanes(&[], 10);
        assert_eq!(all.len(), 1);
        assert_eq!(all[0], 0..10);
        assert!(lanes(&[], 0).is_empty());
    }

    /// Per shard of 250 locks, lanes cut at the shards' edges, in waves of
    /// 100, give 3 waves each: ceil(250 / 100), not one more for a wave
    /// straddling an edge.
    #[test]
    fn each_shard_gets_ceil_of_its_locks_over_a_wave() {
        let slots: Vec<u16> = (0..750u16)
            .map(|i| (i / 250) * 5461 + (i % 250) * 20)
            .collect();
        let c = cuts(&slots, &[5461, 10922]);
        assert_eq!(c, [250, 500]);
        let lanes = lanes(&c, slots.len());
        assert_eq!(lanes, [0..250, 250..500, 500..750]);
        let waves: usize = lanes.iter().map(|l| l.len().div_ceil(100)).sum();
        assert_eq!(waves, 9);
    }
}
