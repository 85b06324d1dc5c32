//! Process pauses that include the watchdog: a hook in the watchdog's loop
//! waits here while the simulator has paused its manager (as a stopped VM or
//! a long GC pause would), so that a hold can lapse unnoticed.

use std::cell::RefCell;
use std::collections::HashMap;

use tokio::time::Instant;

thread_local! {
    static PAUSED: RefCell<HashMap<String, Instant>> = RefCell::new(HashMap::new());
}

/// Pauses the watchdog of the manager with `client_id` until `until`.
pub(crate) fn pause(client_id: &str, until: Instant) {
    PAUSED.with(|p| p.borrow_mut().insert(client_id.to_owned(), until));
}

/// Forgets every pause (a run ends; the thread runs the next seed).
pub(crate) fn clear() {
    PAUSED.with(|p| p.borrow_mut().clear());
}

/// Waits while the manager with `client_id` is paused.
pub(crate) async fn wait(client_id: &str) {
    loop {
        let until = PAUSED.with(|p| p.borrow().get(client_id).copied());
        match until {
            Some(t) if t > Instant::now() => tokio::time::sleep_until(t).await,
            _ => return,
        }
    }
}
