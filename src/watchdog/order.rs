//! The order of a tick's holds on a manager with a cluster member of
//! several shards: by hash slot, each wave ending where a member's serving
//! shard changes, so that a wave's locks sit on one shard of each cluster
//! member and every shard's locks go out in full script calls of
//! [`RENEW_CHUNK`](crate::node::RENEW_CHUNK) (and one call for the rest).
//! Without it, a wave of 100 locks over three shards costs three calls of
//! about 33 locks each, and a call's own cost (the script invocation, its
//! pipeline, its round trip) is paid three times for the locks a master
//! renews in one. A manager of masters only keeps its holds in the order
//! they were registered, in waves cut by size alone.

use std::sync::Arc;

use crate::hold::Hold;
use crate::nodes::Nodes;

/// Orders `holds` by slot when a member has several shards, and returns
/// where waves must end (indices into `holds`, ascending): at each slot
/// where some member's serving shard changes. Empty, and `holds` left in
/// its order, on a manager of masters (or of one-shard clusters).
pub(super) fn by_shard(nodes: &Nodes, holds: &mut [Arc<Hold>]) -> Vec<usize> {
    let mut breaks: Vec<u16> = (0..nodes.len())
        .flat_map(|i| nodes.node(i).shard_breaks())
        .collect();
    if breaks.is_empty() {
        return Vec::new();
    }
    breaks.sort_unstable();
    breaks.dedup();
    // Stable: the names of one `lock_all` set (one slot on a cluster
    // member) stay together, in the order they were registered.
    holds.sort_by_key(|h| h.keys.slot());
    let slots: Vec<u16> = holds.iter().map(|h| h.keys.slot()).collect();
    cuts(&slots, &breaks)
}

/// Where a wave must end in holds of `slots` (ascending): the index of the
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

/// At a shard's edge: the cluster members that failed a wave (on the
/// shard before) are no longer down; masters stay down for the tick.
pub(super) fn shard_changed(nodes: &Nodes, down: &mut [bool]) {
    for (i, d) in down.iter_mut().enumerate() {
        if nodes.node(i).is_cluster() {
            *d = false;
        }
    }
}

/// The end of the wave that starts at hold `done`: `size` holds later, at
/// the end of the holds, or at the next cut, whichever comes first.
pub(super) fn wave_end(done: usize, size: usize, len: usize, cuts: &[usize]) -> usize {
    let end = done.saturating_add(size).min(len);
    let next = cuts.partition_point(|&c| c <= done);
    cuts.get(next).map_or(end, |&c| end.min(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waves cut at every shard change the holds straddle, never empty.
    #[test]
    fn waves_end_where_the_shard_changes() {
        // Slots of 10 holds, sorted; shards change at 5461 and 10923.
        let slots = [3, 40, 5000, 5461, 6000, 7000, 9000, 12000, 16000, 16383];
        let c = cuts(&slots, &[5461, 10923]);
        assert_eq!(c, [3, 7]);
        // A break before every hold or after every one cuts nothing; two
        // breaks with no hold between them cut once.
        assert!(cuts(&slots, &[0, 2]).is_empty());
        assert!(cuts(&[1, 2], &[100]).is_empty());
        assert_eq!(cuts(&slots, &[5100, 5200]), [3]);
        // Waves of 2: [0,2) [2,3) [3,5) [5,7) [7,9) [9,10).
        let mut waves = Vec::new();
        let mut done = 0;
        while done < slots.len() {
            let end = wave_end(done, 2, slots.len(), &c);
            waves.push((done, end));
            done = end;
        }
        assert_eq!(waves, [(0, 2), (2, 3), (3, 5), (5, 7), (7, 9), (9, 10)]);
        // No cuts: by size alone.
        assert_eq!(wave_end(4, 100, 10, &[]), 10);
        assert_eq!(wave_end(4, 3, 10, &[]), 7);
    }

    /// Per shard of 250 locks, waves of 100 cut at the shards' edges give
    /// 3 waves each: ceil(250 / 100), not one more for a wave straddling
    /// an edge.
    #[test]
    fn each_shard_gets_ceil_of_its_locks_over_a_wave() {
        let slots: Vec<u16> = (0..750u16)
            .map(|i| (i / 250) * 5461 + (i % 250) * 20)
            .collect();
        let c = cuts(&slots, &[5461, 10922]);
        assert_eq!(c, [250, 500]);
        let mut waves = 0;
        let mut done = 0;
        while done < slots.len() {
            let end = wave_end(done, 100, slots.len(), &c);
            assert!(end - done <= 100);
            waves += 1;
            done = end;
        }
        assert_eq!(waves, 9);
    }
}
