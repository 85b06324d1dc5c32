//! Pure: the fence rule, with no I/O. A fencing token is handed out only
//! once a quorum of nodes is known to have a fence counter at least as
//! large ([`FenceTally::shown`]): the nodes whose grant returned it or
//! more, plus lagging nodes raised to it. Which nodes a raise asks, and in
//! which round ([`FenceTally::targets`]), is decided here too; the raise
//! itself is `acquire::fence`'s.

use crate::error::NodeError;
use crate::node::Grant;

/// Whether a reply is a grant with a counter of at least `token`.
fn granted_at(reply: &Option<Result<Grant, NodeError>>, token: u64) -> bool {
    matches!(reply, Some(Ok(Grant::Granted(t))) if *t >= token)
}

/// Per node, whether its fence counter is known to be at least one token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FenceTally {
    token: u64,
    at: Vec<bool>,
}

impl FenceTally {
    /// The nodes an acquisition's `replies` (by node; `None`: no answer)
    /// show at `token`: those that granted with a counter of at least it.
    pub(crate) fn of(replies: &[Option<Result<Grant, NodeError>>], token: u64) -> Self {
        let at = replies.iter().map(|r| granted_at(r, token)).collect();
        Self { token, at }
    }

    /// Whether `replies` alone show `token` on `required` nodes (as
    /// [`FenceTally::of`] then [`FenceTally::shown`] would say), without a
    /// tally: the common case, where nothing needs raising.
    pub(crate) fn shown_by(
        replies: &[Option<Result<Grant, NodeError>>],
        token: u64,
        required: usize,
    ) -> bool {
        replies.iter().filter(|r| granted_at(r, token)).count() >= required
    }

    /// Whether node `i` is known to be at the token.
    pub(crate) fn at(&self, i: usize) -> bool {
        self.at[i]
    }

    /// Node `i` answered a raise with its counter now `counter`.
    pub(crate) fn raised(&mut self, i: usize, counter: u64) {
        if counter >= self.token {
            self.at[i] = true;
        }
    }

    /// The fence rule: whether `required` nodes are shown at the token, so
    /// that every later quorum overlaps them in a node whose next INCR is
    /// above it (the model's, after raises; an acquisition counts the
    /// raises' answers as they land).
    #[cfg(test)]
    pub(crate) fn shown(&self, required: usize) -> bool {
        self.at.iter().filter(|b| **b).count() >= required
    }

    /// The nodes a raise asks in its first round (`first_round`) or its
    /// second: first those that granted below the token or have not
    /// answered (their grant lands late and will hold the lock too), then
    /// the ones that answered "taken" or failed; never a node at the token.
    pub(crate) fn targets(
        &self,
        replies: &[Option<Result<Grant, NodeError>>],
        first_round: bool,
    ) -> Vec<bool> {
        (0..self.at.len())
            .map(|i| {
                let first = matches!(replies[i], None | Some(Ok(Grant::Granted(_))));
                !self.at[i] && first == first_round
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::NodeErrorKind;

    fn failed() -> Option<Result<Grant, NodeError>> {
        Some(Err(NodeError::new(NodeErrorKind::Connection, "down")))
    }

    /// Granted at or above the token counts; a lower grant, "taken", a
    /// failure or no answer does not, until raised.
    #[test]
    fn a_token_is_shown_by_a_quorum_of_counters_at_least_as_large() {
        let replies = [
            Some(Ok(Grant::Granted(7))),
            Some(Ok(Grant::Granted(3))),
            None,
            Some(Ok(Grant::Taken(None, 0))),
            failed(),
        ];
        let mut t = FenceTally::of(&replies, 7);
        assert!(t.at(0) && !t.at(1) && !t.at(2));
        assert!(!t.shown(2));
        assert_eq!(t.targets(&replies, true), [false, true, true, false, false]);
        assert_eq!(
            t.targets(&replies, false),
            [false, false, false, true, true]
        );
        t.raised(1, 6);
        assert!(!t.shown(2), "raised below the token");
        t.raised(3, 9);
        assert!(t.shown(2));
        assert_eq!(
            t.targets(&replies, false),
            [false, false, false, false, true]
        );
    }
}
