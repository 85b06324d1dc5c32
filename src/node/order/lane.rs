//! A member's lanes, the connections its calls go on, and the set of lanes
//! a call passes a barrier on before it is sent.

/// Which of a member's connections a call goes on (see the module doc of
/// `order`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lane {
    /// The connection of acquisitions and of every call not below.
    Calls,
    /// The connection of the calls that free (a release, a queue exit),
    /// on a member whose server has one.
    Frees,
    /// The connection of the watchdog's renewal and repair batches: a
    /// call of a hold goes there while a batch about the hold may still
    /// run there (a repair given up unanswered), so that it runs after it.
    Renewals,
}

/// How many lanes a member has.
pub(super) const LANES: usize = 3;

impl Lane {
    pub(super) const ALL: [Self; LANES] = [Self::Calls, Self::Frees, Self::Renewals];

    pub(super) fn index(self) -> usize {
        match self {
            Self::Calls => 0,
            Self::Frees => 1,
            Self::Renewals => 2,
        }
    }
}

/// The lanes where a `PING` must be answered before a call is sent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Barriers(u8);

impl Barriers {
    /// No barrier.
    pub(crate) const NONE: Self = Self(0);

    pub(super) fn with(self, lane: Lane) -> Self {
        Self(self.0 | 1 << lane.index())
    }

    /// Whether there is none (the usual case).
    pub(crate) fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// Whether `lane` is one of them.
    pub(crate) fn contains(self, lane: Lane) -> bool {
        self.0 & 1 << lane.index() != 0
    }

    /// The lanes, in the order of [`Lane::ALL`].
    pub(crate) fn iter(self) -> impl Iterator<Item = Lane> {
        Lane::ALL.into_iter().filter(move |&l| self.contains(l))
    }
}
