//! Re-entry: a manager's entries, one per (owner, name) that some
//! acquisition or hold uses. An entry serializes the acquisitions of one
//! name by one owner (its gate) and remembers the owner's live hold of it,
//! so that a second acquisition re-enters instead of taking the lock anew.
//! An entry is forgotten as soon as nothing uses it: no acquisition in it,
//! no hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::hold::{Hold, OnDrop};
use crate::owner::Owner;
use crate::sync::locked;

type Key = (Arc<str>, Arc<str>);

/// The re-entry entries of one manager.
#[derive(Default)]
pub(crate) struct Reentry {
    map: Mutex<HashMap<Key, Arc<Entry>>>,
}

/// Serializes acquisitions of one name by one owner and remembers its hold.
struct Entry {
    gate: tokio::sync::Mutex<()>,
    hold: Mutex<Weak<Hold>>,
}

impl Reentry {
    /// Enters the entry of (`owner`, `name`), making it if needed. The
    /// use leaves it when dropped, and the entry goes unless a hold keeps it.
    pub(crate) fn enter(self: &Arc<Self>, owner: &Owner, name: &Arc<str>) -> Entered {
        let key = (owner.shared_id(), Arc::clone(name));
        let entry = Arc::clone(locked(&self.map).entry(key.clone()).or_insert_with(|| {
            Arc::new(Entry {
                gate: tokio::sync::Mutex::new(()),
                hold: Mutex::new(Weak::new()),
            })
        }));
        Entered {
            reentry: Arc::clone(self),
            entry,
            key,
        }
    }

    /// How many (owner, name) entries are tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        locked(&self.map).len()
    }

    /// Drops the entry at `key` if nobody uses it any more besides the map
    /// and the caller's `own` references.
    fn forget_if_idle(&self, key: &Key, own: usize) {
        let mut map = locked(&self.map);
        let idle = map.get(key).is_some_and(|entry| {
            Arc::strong_count(entry) == 1 + own && locked(&entry.hold).strong_count() == 0
        });
        if idle {
            map.remove(key);
        }
    }
}

/// An acquisition's use of its entry: when the acquisition ends, however
/// it ends (including by being dropped), an entry left without a hold is
/// removed.
pub(crate) struct Entered {
    reentry: Arc<Reentry>,
    entry: Arc<Entry>,
    key: Key,
}

impl Entered {
    /// Waits for the acquisitions of this owner and name before this one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while waiting, it takes no turn.
    pub(crate) async fn gate(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.entry.gate.lock().await
    }

    /// The owner's hold of the name, if it is still live.
    pub(crate) fn live_hold(&self) -> Option<Arc<Hold>> {
        locked(&self.entry.hold).upgrade().filter(|h| h.is_live())
    }

    /// Remembers `hold` as the owner's hold of the name.
    pub(crate) fn keep(&self, hold: &Arc<Hold>) {
        *locked(&self.entry.hold) = Arc::downgrade(hold);
    }

    /// The name this entry is for.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.key.1
    }

    /// What a new hold of this entry runs when dropped: forget the entry if
    /// idle. `alive` is kept as long as the hold (the manager's state).
    pub(crate) fn on_hold_drop<K: Send + Sync + 'static>(&self, alive: K) -> OnDrop {
        let (reentry, key) = (Arc::clone(&self.reentry), self.key.clone());
        OnDrop::new(move || {
            let _alive = &alive;
            reentry.forget_if_idle(&key, 0);
        })
    }
}

impl Drop for Entered {
    fn drop(&mut self) {
        self.reentry.forget_if_idle(&self.key, 1);
    }
}
