//! Candidates of one election campaigning in a loop, each leadership
//! recorded in a history (`history.rs`): `tests/election.rs` and
//! `tests/cluster_chaos.rs` include it with `#[path]`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::LockManager;

use crate::history::History;

/// What the campaigners proclaimed: (term, value) pairs, each returned by
/// a campaign or a proclaim (so written on a quorum).
pub type Proclaimed = Arc<Mutex<BTreeSet<(u64, String)>>>;

/// One candidate: campaigns in a loop until `stop`, holds its leadership
/// for a while checking `is_leader` as it works, proclaims now and then,
/// and ends it by resigning or by dropping it.
pub async fn candidate(
    id: usize,
    m: LockManager,
    election: String,
    history: Arc<History>,
    proclaimed: Proclaimed,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut terms = 0;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let value = format!("c{id}-r{round}");
        let wait = Duration::from_millis(300);
        let Ok(me) = m.election(&*election).try_campaign(&value, wait).await else {
            continue;
        };
        terms += 1;
        proclaimed.lock().unwrap().insert((me.term(), value));
        let who = format!("c{id}");
        let mut hold = history.enter(&who, me.holder_id(), me.term(), me.valid_until());
        let work = Duration::from_millis(10 + (round * 37 + id as u64 * 13) % 60);
        let end = Instant::now() + work;
        while Instant::now() < end {
            if !me.is_leader() {
                hold.lost_now();
                break;
            }
            hold.observe(me.valid_until());
            if round.is_multiple_of(3) {
                let v = format!("c{id}-r{round}-p");
                if me.proclaim(&v).await.is_ok() {
                    proclaimed.lock().unwrap().insert((me.term(), v));
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        hold.exit(me.valid_until());
        if round.is_multiple_of(2) {
            let _ = me.resign().await;
        } else {
            drop(me);
        }
    }
    terms
}
