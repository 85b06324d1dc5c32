//! The slots of a manager: one per (owner, name) that some acquisition or
//! hold uses. A slot serializes the acquisitions of one name by one owner
//! (its gate) and remembers the owner's live hold of it, so that a second
//! acquisition re-enters instead of taking the lock anew. A slot is
//! forgotten as soon as nothing uses it: no acquisition in it, no hold.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use crate::hold::{Hold, OnDrop};
use crate::owner::Owner;
use crate::sync::locked;

type Key = (Arc<str>, Arc<str>);

/// The slots of one manager.
#[derive(Default)]
pub(crate) struct Slots {
    map: Mutex<HashMap<Key, Arc<Slot>>>,
}

/// Serializes acquisitions of one name by one owner and remembers its hold.
struct Slot {
    gate: tokio::sync::Mutex<()>,
    hold: Mutex<Weak<Hold>>,
}

impl Slots {
    /// Enters the slot of (`owner`, `name`), making it if needed. The use
    /// leaves it when dropped, and the slot goes unless a hold keeps it.
    pub(crate) fn enter(self: &Arc<Self>, owner: &Owner, name: &Arc<str>) -> SlotUse {
        let key = (owner.shared_id(), Arc::clone(name));
        let slot = Arc::clone(locked(&self.map).entry(key.clone()).or_insert_with(|| {
            Arc::new(Slot {
                gate: tokio::sync::Mutex::new(()),
                hold: Mutex::new(Weak::new()),
            })
        }));
        SlotUse {
            slots: Arc::clone(self),
            slot,
            key,
        }
    }

    /// How many (owner, name) slots are tracked.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        locked(&self.map).len()
    }

    /// Drops the slot at `key` if nobody uses it any more besides the map
    /// and the caller's `own` references.
    fn forget_if_idle(&self, key: &Key, own: usize) {
        let mut map = locked(&self.map);
        let idle = map.get(key).is_some_and(|slot| {
            Arc::strong_count(slot) == 1 + own && locked(&slot.hold).strong_count() == 0
        });
        if idle {
            map.remove(key);
        }
    }
}

/// An acquisition's use of its slot: when the acquisition ends, however it
/// ends (including by being dropped), a slot left without a hold is removed.
pub(crate) struct SlotUse {
    slots: Arc<Slots>,
    slot: Arc<Slot>,
    key: Key,
}

impl SlotUse {
    /// Waits for the acquisitions of this owner and name before this one.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while waiting, it takes no turn.
    pub(crate) async fn gate(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.slot.gate.lock().await
    }

    /// The owner's hold of the name, if it is still live.
    pub(crate) fn live_hold(&self) -> Option<Arc<Hold>> {
        locked(&self.slot.hold).upgrade().filter(|h| h.is_live())
    }

    /// Remembers `hold` as the owner's hold of the name.
    pub(crate) fn keep(&self, hold: &Arc<Hold>) {
        *locked(&self.slot.hold) = Arc::downgrade(hold);
    }

    /// The name this slot is for.
    pub(crate) fn name(&self) -> &Arc<str> {
        &self.key.1
    }

    /// What a new hold of this slot runs when dropped: forget the slot if
    /// idle. `alive` is kept as long as the hold (the manager's state).
    pub(crate) fn on_hold_drop<K: Send + Sync + 'static>(&self, alive: K) -> OnDrop {
        let (slots, key) = (Arc::clone(&self.slots), self.key.clone());
        OnDrop::new(move || {
            let _alive = &alive;
            slots.forget_if_idle(&key, 0);
        })
    }
}

impl Drop for SlotUse {
    fn drop(&mut self) {
        self.slots.forget_if_idle(&self.key, 1);
    }
}
