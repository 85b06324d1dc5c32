//! The crate's randomness (backoff jitter, fallback jitter, client ids) from
//! one place, so that the deterministic simulator can seed it: a seeded
//! thread-local generator when one is installed, rand's thread RNG otherwise.

use std::cell::RefCell;

use rand::rngs::SmallRng;
use rand::RngExt;

thread_local! {
    static SEEDED: RefCell<Option<SmallRng>> = const { RefCell::new(None) };
}

fn with<T>(seeded: impl FnOnce(&mut SmallRng) -> T, fallback: impl FnOnce() -> T) -> T {
    SEEDED.with(|s| match s.borrow_mut().as_mut() {
        Some(rng) => seeded(rng),
        None => fallback(),
    })
}

/// Uniform in `[0, max]`.
pub(crate) fn up_to(max: u64) -> u64 {
    with(|r| r.random_range(0..=max), || rand::random_range(0..=max))
}

/// Up to 2 ms: spreads out waiters whose timers end together, and
/// managers whose attempts would otherwise retry in step.
pub(crate) fn jitter() -> std::time::Duration {
    std::time::Duration::from_micros(up_to(2_000))
}

/// 128 random bits.
pub(crate) fn bits128() -> u128 {
    with(|r| r.random(), rand::random)
}

/// Installs a generator seeded with `seed` on this thread until the
/// returned guard is dropped.
#[cfg(test)]
pub(crate) fn seed(seed: u64) -> Seeded {
    use rand::SeedableRng;
    SEEDED.with(|s| *s.borrow_mut() = Some(SmallRng::seed_from_u64(seed)));
    Seeded(())
}

/// Removes the seeded generator when dropped.
#[cfg(test)]
pub(crate) struct Seeded(());

#[cfg(test)]
impl Drop for Seeded {
    fn drop(&mut self) {
        SEEDED.with(|s| *s.borrow_mut() = None);
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_seed_gives_the_same_sequence() {
        let draw = || (0..8).map(|_| super::up_to(1_000)).collect::<Vec<_>>();
        let a = {
            let _s = super::seed(7);
            draw()
        };
        let b = {
            let _s = super::seed(7);
            draw()
        };
        assert_eq!(a, b);
        assert!(draw().iter().all(|x| *x <= 1_000));
    }
}
