//! The properties checked: safety (`always`, in every state) of the
//! lock, the semaphore, the read-write lock, `force_unlock` and the
//! election, and one liveness property (`eventually`, on every path that
//! ends) for the worlds that ask for it.

use stateright::Property;

use super::check::believes;
use super::world::{Design, Holder, Params, State};

/// Whether client `c`'s current attempt was broken by a `force_unlock`.
fn broken(s: &State, c: usize) -> bool {
    let h = Holder {
        client: u8::try_from(c).unwrap_or(u8::MAX),
        attempt: s.clients[c].attempt,
    };
    s.broken.binary_search(&h).is_ok()
}

/// Every property, by name.
pub(super) fn all() -> Vec<Property<Params>> {
    vec![
        Property::always("mutual exclusion", |p: &Params, s: &State| {
            p.design == Design::Counter
                || (0..p.names).all(|name| {
                    let holds = (0..s.clients.len()).filter(|&c| {
                        !p.readers[c] && believes(s, c) == Some(name) && !broken(s, c)
                    });
                    holds.count() <= 1
                })
        }),
        Property::always("fencing tokens increase", |_: &Params, s: &State| {
            !s.stale_token
        }),
        Property::always(
            "no grant after its release was acknowledged",
            |_: &Params, s: &State| {
                s.acked.iter().all(|(n, h)| {
                    s.nodes[usize::from(*n)]
                        .keys
                        .iter()
                        .flatten()
                        .all(|l| l.holder != *h)
                })
            },
        ),
        Property::always("at most P permits", |p: &Params, s: &State| {
            p.permits.is_none_or(|permits| {
                (0..s.clients.len())
                    .filter(|&c| believes(s, c).is_some())
                    .count()
                    <= permits
            })
        }),
        Property::always("no reader beside a writer", |p: &Params, s: &State| {
            (0..p.names).all(|name| {
                let holds = |reader: bool| {
                    (0..s.clients.len())
                        .any(|c| p.readers[c] == reader && believes(s, c) == Some(name))
                };
                !(holds(true) && holds(false))
            })
        }),
        Property::always("a forced unlock is not undone", |p: &Params, s: &State| {
            !p.undone(s)
        }),
        Property::always(
            "no key a forced unlock deleted comes back on its node",
            |_: &Params, s: &State| !Params::recreated(s),
        ),
        Property::always("one leader at a time", |p: &Params, s: &State| {
            (0..s.clients.len()).filter(|&c| p.leads(s, c)).count() <= 1
        }),
        Property::always("terms increase", |_: &Params, s: &State| !s.vote.stale_term),
        Property::always(
            "the observer never reports an older term than before",
            |_: &Params, s: &State| !s.vote.observer.older,
        ),
        Property::always(
            "the observer never reports a term older than a leader made before its read",
            |_: &Params, s: &State| !s.vote.observer.behind,
        ),
        Property::eventually("a waiter holds", |p: &Params, s: &State| {
            !p.live || s.served
        }),
    ]
}
