//! The locks one watchdog tick renews (or repairs), built into one pipeline
//! per tick, shared by every node.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::keys::Keys;
use crate::scripts::{self, ms};

/// One lock of a renewal batch.
#[derive(Debug, Clone)]
pub(crate) struct RenewItem {
    pub(crate) keys: Arc<Keys>,
    pub(crate) owner: Arc<str>,
    pub(crate) count: u32,
    pub(crate) token: u64,
    pub(crate) lease: Duration,
}

#[cfg(test)]
impl RenewItem {
    /// The lock `name` (prefix `ql:`) held by owner `o`.
    pub(crate) fn named(name: &str, count: u32, token: u64, lease: Duration) -> Self {
        Self {
            keys: Arc::new(Keys::new("ql:", name)),
            owner: "o".into(),
            count,
            token,
            lease,
        }
    }
}

impl RenewItem {
    /// A waiter's place in the queue of the lock `keys`, for a
    /// [`BatchKind::Keep`] batch: `owner` is the waiter's id, `lease` the
    /// queue timeout its deadline is extended by.
    pub(crate) fn place(keys: &Arc<Keys>, waiter: &Arc<str>, timeout: Duration) -> Self {
        Self {
            keys: Arc::clone(keys),
            owner: Arc::clone(waiter),
            count: 0,
            token: 0,
            lease: timeout,
        }
    }
}

/// Locks per script call in a renewal batch; one pipeline carries them all.
pub(crate) const RENEW_CHUNK: usize = 100;

/// What a batch does to each of its items.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BatchKind {
    /// Extends held locks (`renew.lua`).
    Renew,
    /// Re-creates missing keys of holds (`repair.lua`).
    Repair,
    /// Extends waiters' places in the queues of held locks (`keep.lua`):
    /// the items are places ([`RenewItem::place`]).
    Keep,
}

/// The locks one watchdog tick renews, the same on every node, the locks
/// it repairs on one node, or the waiters' places a manager keeps.
pub(crate) struct RenewBatch {
    pub(crate) items: Vec<RenewItem>,
    kind: BatchKind,
    /// The pipeline, built once per tick by the first node that needs it.
    pipeline: OnceLock<redis::Pipeline>,
    /// When the watchdog stops waiting for the answers, if it does: a
    /// member that sends the batch in parts (a cluster's shards) answers
    /// with the parts that made it before then.
    pub(crate) deadline: Option<Instant>,
}

impl RenewBatch {
    pub(crate) fn new(items: Vec<RenewItem>) -> Self {
        Self {
            items,
            kind: BatchKind::Renew,
            pipeline: OnceLock::new(),
            deadline: None,
        }
    }

    /// A batch that re-creates the missing keys of `items`.
    pub(crate) fn repair(items: Vec<RenewItem>) -> Self {
        Self {
            kind: BatchKind::Repair,
            ..Self::new(items)
        }
    }

    /// A batch that keeps the waiters' places `items` (see
    /// [`RenewItem::place`]).
    pub(crate) fn keep(items: Vec<RenewItem>) -> Self {
        Self {
            kind: BatchKind::Keep,
            ..Self::new(items)
        }
    }

    pub(crate) fn kind(&self) -> BatchKind {
        self.kind
    }

    /// The same batch, its answers waited for until `deadline`.
    #[must_use]
    pub(crate) fn answered_by(mut self, deadline: Instant) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// Builds the pipeline now, so its cost is counted as the watchdog's work.
    pub(crate) fn prepare(&self) {
        let _ = self.pipeline();
    }

    pub(super) fn script(&self) -> &'static scripts::Lua {
        match self.kind {
            BatchKind::Renew => &scripts::RENEW,
            BatchKind::Repair => &scripts::REPAIR,
            BatchKind::Keep => &scripts::KEEP,
        }
    }

    /// The batch's script as a cluster member sends it per shard.
    pub(super) fn shard_script(&self) -> &'static scripts::Lua {
        match self.kind {
            BatchKind::Renew => &scripts::RENEW_SHARD,
            BatchKind::Repair => &scripts::REPAIR_SHARD,
            BatchKind::Keep => &scripts::KEEP_SHARD,
        }
    }

    /// Key names per item: the lock; for a repair also its slot's fence
    /// counter; for a place also the lock's queue and timeouts.
    fn keys_per_item(&self) -> usize {
        match self.kind {
            BatchKind::Renew => 1,
            BatchKind::Repair => 2,
            BatchKind::Keep => 3,
        }
    }

    /// One EVALSHA of the renew (or repair) script per chunk of
    /// [`RENEW_CHUNK`] locks.
    pub(super) fn pipeline(&self) -> &redis::Pipeline {
        self.pipeline.get_or_init(|| {
            let mut pipe = redis::Pipeline::with_capacity(self.items.len().div_ceil(RENEW_CHUNK));
            for chunk in self.items.chunks(RENEW_CHUNK) {
                self.add_call(&mut pipe, chunk.iter());
            }
            pipe
        })
    }

    /// Adds one EVALSHA of the batch's script over `items` to `pipe` (a
    /// cluster member sends only items of one slot per call).
    pub(super) fn add_call<'a>(
        &self,
        pipe: &mut redis::Pipeline,
        items: impl Iterator<Item = &'a RenewItem> + Clone,
    ) {
        let keys = items.clone().count() * self.keys_per_item();
        let cmd = pipe.cmd("EVALSHA").arg(self.script().sha()).arg(keys);
        self.add_items(cmd, items);
    }

    /// Adds one EVALSHA of the batch's per-shard script over `items` (locks
    /// of any slots of one shard) to `pipe`: the first lock's key declared
    /// (it routes the call), the key names and arguments in `ARGV`
    /// (`shard_prelude.lua`). Nothing when `items` is empty.
    pub(super) fn add_shard_call<'a>(
        &self,
        pipe: &mut redis::Pipeline,
        items: impl Iterator<Item = &'a RenewItem> + Clone,
    ) {
        let Some(first) = items.clone().next() else {
            return;
        };
        let keys = items.clone().count() * self.keys_per_item();
        let cmd = pipe.cmd("EVALSHA").arg(self.shard_script().sha());
        cmd.arg(1).arg(&first.keys.lock).arg(keys);
        self.add_items(cmd, items);
    }

    /// The keys, then the arguments, of `items`.
    fn add_items<'a>(
        &self,
        cmd: &mut redis::Pipeline,
        items: impl Iterator<Item = &'a RenewItem> + Clone,
    ) {
        // Renew: the locks. Repair: each lock, then its slot's fence
        // counter (repair.lua raises it). Keep: each lock, its queue and
        // its timeouts.
        for item in items.clone() {
            cmd.arg(&item.keys.lock);
            match self.kind {
                BatchKind::Renew => {}
                BatchKind::Repair => {
                    cmd.arg(&item.keys.fence);
                }
                BatchKind::Keep => {
                    let ((q, qs), (t, ts)) = (item.keys.queue_parts(), item.keys.timeouts_parts());
                    cmd.arg(joined(q, qs)).arg(joined(t, ts));
                }
            }
        }
        for item in items {
            cmd.arg(&*item.owner);
            match self.kind {
                BatchKind::Renew => {
                    cmd.arg(item.count);
                }
                BatchKind::Repair => {
                    cmd.arg(item.count).arg(item.token);
                }
                BatchKind::Keep => {}
            }
            cmd.arg(ms(item.lease));
        }
    }
}

/// `base` and `suffix` as one key name.
fn joined(base: &str, suffix: &str) -> String {
    let mut name = String::with_capacity(base.len() + suffix.len());
    name.push_str(base);
    name.push_str(suffix);
    name
}

/// A command's arguments as text, as sent (tests).
#[cfg(test)]
pub(crate) fn cmd_args(cmd: &redis::Cmd) -> Vec<String> {
    cmd.args_iter()
        .map(|a| match a {
            redis::Arg::Simple(b) => String::from_utf8_lossy(b).into_owned(),
            _ => String::new(),
        })
        .collect()
}

#[cfg(test)]
impl RenewBatch {
    /// The key names (`KEYS`) of each script call of the pipeline, as sent.
    pub(crate) fn script_keys(&self) -> Vec<Vec<String>> {
        self.pipeline()
            .cmd_iter()
            .map(|cmd| {
                let args = cmd_args(cmd);
                let n: usize = args.get(2).and_then(|n| n.parse().ok()).unwrap_or(0);
                args.into_iter().skip(3).take(n).collect()
            })
            .collect()
    }
}
