//! A call's (lock, party) pairs, held inline when there are one or two.

/// A call's pairs: one or two inline (a lock's holder, a queued waiter),
/// more for a set.
pub(super) struct Pairs {
    inline: [u64; 2],
    len: usize,
    more: Vec<u64>,
}

impl Pairs {
    pub(super) fn of(pairs: &[u64]) -> Self {
        match *pairs {
            [] => Self::none(),
            [a] => Self {
                inline: [a, 0],
                len: 1,
                more: Vec::new(),
            },
            [a, b] => Self {
                inline: [a, b],
                len: 2,
                more: Vec::new(),
            },
            _ => Self {
                inline: [0; 2],
                len: 0,
                more: pairs.to_vec(),
            },
        }
    }

    pub(super) fn none() -> Self {
        Self {
            inline: [0; 2],
            len: 0,
            more: Vec::new(),
        }
    }

    pub(super) fn as_slice(&self) -> &[u64] {
        if self.more.is_empty() {
            &self.inline[..self.len]
        } else {
            &self.more
        }
    }

    pub(super) fn take(&mut self) -> Self {
        std::mem::replace(self, Self::none())
    }
}
