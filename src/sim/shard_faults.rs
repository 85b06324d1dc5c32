//! The faults of a sharded run's member (`shards`): slot migrations and
//! shard faults, drawn from the run's RNG alongside the run's own fault
//! schedule (`faults`).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::checker::{Ev, Log, WORLD};
use super::net::{Cut, Health};
use super::params::Params;
use super::shards::Member;
use crate::rng::up_to;

/// One migration of a lock's slot to another shard, from now: the keys
/// move one by one every 2 to 8 ms (one time in five after a pause of
/// 10 to 40 ms), then the slot is the target's.
async fn migrate(member: Arc<Member>, log: Log) {
    let (slot, from, to) = member.begin_migration();
    log.push(
        WORLD,
        Ev::Fault(format!("Migrate slot {slot} shard {from} -> {to}")),
    );
    loop {
        let gap = if up_to(4) == 0 {
            10 + up_to(30)
        } else {
            2 + up_to(6)
        };
        tokio::time::sleep(Duration::from_millis(gap)).await;
        if !member.migrate_one() {
            continue;
        }
        log.push(
            WORLD,
            Ev::Fault(format!("Migrated slot {slot} to shard {to}")),
        );
        return;
    }
}

/// The shard faults of a sharded run, until the fault phase ends: slot
/// migrations (one at a time), shards that refuse or never answer, slow
/// shards, and shards whose replies are lost to resets, or come after the
/// clients' response timeout, after the call ran (on every process's
/// connection). Each heals after 10 to 310 ms.
pub(crate) async fn faults(member: Arc<Member>, log: Log, params: Params) {
    let n = member.shards.len();
    let mut busy = vec![Instant::now(); n];
    let mut migration: Option<tokio::task::JoinHandle<()>> = None;
    while Instant::now() < params.fault_end {
        let gap = Duration::from_millis(10 + up_to(params.fault_gap_ms));
        tokio::time::sleep(gap).await;
        let now = Instant::now();
        let k = up_to(n as u64 - 1) as usize;
        let dur = Duration::from_millis(10 + up_to(300));
        let kind = up_to(6);
        if kind <= 1 {
            if migration.as_ref().is_none_or(|m| m.is_finished()) {
                let (m, l) = (Arc::clone(&member), log.clone());
                migration = Some(tokio::spawn(migrate(m, l)));
            }
            continue;
        }
        if busy[k] >= now {
            continue;
        }
        busy[k] = now + dur;
        let shard = Arc::clone(&member.shards[k]);
        let what = match kind {
            2 => {
                shard.set_health(Health::Fail);
                "FailFast"
            }
            3 => {
                shard.set_health(Health::BlackHole);
                "BlackHole"
            }
            4 => {
                shard.set_slow(params.node_timeout * 2);
                "Slow"
            }
            5 => {
                for links in &member.links {
                    links[k].set(Cut::Resets);
                }
                "ResetReplies"
            }
            _ => {
                for links in &member.links {
                    links[k].set(Cut::TimesOut);
                }
                "TimeoutReplies"
            }
        };
        log.push(
            WORLD,
            Ev::Fault(format!(
                "{what} shard {k} of node {} for {dur:?}",
                member.node
            )),
        );
        let m = Arc::clone(&member);
        tokio::spawn(async move {
            tokio::time::sleep(dur).await;
            m.shards[k].heal();
            for links in &m.links {
                links[k].set(Cut::None);
            }
        });
    }
    if let Some(m) = migration {
        let _ = m.await;
    }
}
