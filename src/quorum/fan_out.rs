//! The one fan-out helper that acquire, release, renewal and status share:
//! a call to every node at once under one deadline for the whole fan-out,
//! read as the replies land, and the quorum stop rule every fan-out of a
//! quorum follows ([`FanOut::until_quorum`], deciding by
//! [`Decision`](super::verdict::Decision)).

use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use futures::future::BoxFuture;

use super::verdict::Decision;
use crate::error::NodeError;
use crate::telemetry::Meter;

/// `now + timeout`, or a deadline decades away when that would overflow
/// (`Duration::MAX` means no deadline, as for `tokio::time::timeout`).
pub(crate) fn deadline_after(now: Instant, timeout: Duration) -> Instant {
    const FAR: Duration = Duration::from_secs(30 * 365 * 24 * 3600);
    now.checked_add(timeout)
        .or_else(|| now.checked_add(FAR))
        .unwrap_or(now)
}

/// The reply of one node to one call.
pub(crate) type NodeReply<T> = (usize, Result<T, NodeError>);

/// Replies by node index; `None` where still pending.
pub(crate) type Replies<T> = Vec<Option<Result<T, NodeError>>>;

/// What a fan-out does with each reply of a call as it lands (see
/// [`FanOut::on_reply`]).
type OnReply<T> = Box<dyn FnMut(usize, &Result<T, NodeError>) + Send>;

/// Calls still in flight, by node index. There are few (one per node), so
/// a wake-up polls each pending call in turn: no task allocated per call,
/// as `FuturesUnordered` would.
///
/// Every call is metered here (`telemetry`), where its reply lands: its
/// latency from the fan-out's start, its error; a call still unanswered
/// when it is dropped after the deadline counts a timeout, one dropped
/// sooner (the outcome was decided without it) nothing.
struct Pending<T> {
    calls: Vec<Option<BoxFuture<'static, Result<T, NodeError>>>>,
    left: usize,
    deadline: Instant,
    meter: Meter,
    on_reply: Option<OnReply<T>>,
}

impl<T> Pending<T> {
    #[cfg(test)]
    fn len(&self) -> usize {
        self.left
    }

    fn is_empty(&self) -> bool {
        self.left == 0
    }

    /// The next reply, of whichever call is ready first; `None` when none is
    /// left.
    fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<NodeReply<T>>> {
        if self.left == 0 {
            return Poll::Ready(None);
        }
        for (i, cell) in self.calls.iter_mut().enumerate() {
            if let Some(call) = cell {
                if let Poll::Ready(r) = call.as_mut().poll(cx) {
                    *cell = None;
                    self.left -= 1;
                    self.meter.answered(i, &r, &mut None);
                    if let Some(f) = self.on_reply.as_mut() {
                        f(i, &r);
                    }
                    return Poll::Ready(Some((i, r)));
                }
            }
        }
        Poll::Pending
    }

    async fn next(&mut self) -> Option<NodeReply<T>> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// Polls every call in flight (so each is sent at the first poll) and
    /// stores each reply that is ready into `replies`. Ready once at least
    /// one reply landed, or when no call is left.
    fn poll_into(&mut self, cx: &mut Context<'_>, replies: &mut Replies<T>) -> Poll<()> {
        if self.left == 0 {
            return Poll::Ready(());
        }
        let mut landed = false;
        // Replies seen in one pass landed by the same instant: one clock
        // read for all of them.
        let mut now = None;
        for (i, (cell, reply)) in self.calls.iter_mut().zip(replies.iter_mut()).enumerate() {
            if let Some(call) = cell {
                if let Poll::Ready(r) = call.as_mut().poll(cx) {
                    *cell = None;
                    self.left -= 1;
                    self.meter.answered(i, &r, &mut now);
                    if let Some(f) = self.on_reply.as_mut() {
                        f(i, &r);
                    }
                    *reply = Some(r);
                    landed = true;
                }
            }
        }
        if landed {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        if self.left > 0 {
            let unanswered = self.calls.iter().enumerate().filter(|(_, c)| c.is_some());
            self.meter
                .given_up(self.deadline, unanswered.map(|(i, _)| i));
        }
    }
}

/// One leg of a fan-out, what it does with one node: a call to send, or a
/// reply known without asking (a node left out of this round).
pub(crate) enum Leg<T> {
    Call(BoxFuture<'static, Result<T, NodeError>>),
    Known(Result<T, NodeError>),
}

impl<T> From<BoxFuture<'static, Result<T, NodeError>>> for Leg<T> {
    fn from(call: BoxFuture<'static, Result<T, NodeError>>) -> Self {
        Self::Call(call)
    }
}

/// Calls in flight to several nodes, read as they complete, under one
/// deadline for the whole fan-out (one timer, not one per node).
pub(crate) struct FanOut<T> {
    pending: Pending<T>,
    replies: Replies<T>,
}

impl<T: Send + 'static> FanOut<T> {
    /// Starts one call per node (`each` says what to do with node `i`);
    /// each has until `timeout` from now. `meter` (made from the same
    /// start) times and counts them.
    pub(crate) fn start<F, S>(
        nodes: usize,
        start: Instant,
        timeout: Duration,
        meter: Meter,
        mut each: F,
    ) -> Self
    where
        F: FnMut(usize) -> S,
        S: Into<Leg<T>>,
    {
        let mut calls = Vec::with_capacity(nodes);
        let mut replies = Vec::with_capacity(nodes);
        for i in 0..nodes {
            match each(i).into() {
                Leg::Call(call) => {
                    calls.push(Some(call));
                    replies.push(None);
                }
                Leg::Known(reply) => {
                    calls.push(None);
                    replies.push(Some(reply));
                }
            }
        }
        let left = calls.iter().filter(|c| c.is_some()).count();
        Self {
            pending: Pending {
                calls,
                left,
                deadline: deadline_after(start, timeout),
                meter,
                on_reply: None,
            },
            replies,
        }
    }

    /// Runs `f` on each reply of a call as it lands, the fan-out's and its
    /// stragglers' alike (not on the replies known without asking, nor on
    /// a call given up unanswered): one closure for the whole fan-out
    /// where a wrapper per call would cost a future per node.
    pub(crate) fn on_reply(
        mut self,
        f: impl FnMut(usize, &Result<T, NodeError>) + Send + 'static,
    ) -> Self {
        self.pending.on_reply = Some(Box::new(f));
        self
    }

    /// Reads replies until `decided` says the outcome is known, all replied,
    /// or the deadline passed (the calls still pending then count as timed
    /// out).
    pub(crate) async fn until(&mut self, mut decided: impl FnMut(&Self) -> bool) {
        let deadline = tokio::time::sleep_until(self.pending.deadline);
        tokio::pin!(deadline);
        // Every reply already in is counted before each decision.
        while !decided(self) {
            if self.pending.is_empty() {
                break;
            }
            let (pending, replies) = (&mut self.pending, &mut self.replies);
            tokio::select! {
                biased;
                () = std::future::poll_fn(|cx| pending.poll_into(cx, replies)) => {}
                () = &mut deadline => {
                    for r in self.replies.iter_mut().filter(|r| r.is_none()) {
                        *r = Some(Err(NodeError::timeout()));
                    }
                    break;
                }
            }
        }
    }

    /// The quorum stop rule, the one every fan-out of a quorum follows:
    /// reads replies until `required` of them are successes (`ok`), or so
    /// many are not that the rest can no longer make `required`, or the
    /// deadline passed. Returns the successes.
    pub(crate) async fn until_quorum(&mut self, required: usize, ok: impl Fn(&T) -> bool) -> usize {
        let count = |f: &Self| {
            let (mut done, mut pending) = (0, 0);
            for r in f.replies() {
                match r {
                    Some(Ok(v)) if ok(v) => done += 1,
                    None => pending += 1,
                    _ => {}
                }
            }
            (done, pending)
        };
        self.until(|f| {
            let (done, pending) = count(f);
            Decision::of(done, pending, required) != Decision::Open
        })
        .await;
        count(self).0
    }

    /// Replies so far, by node index; `None` where still pending.
    pub(crate) fn replies(&self) -> &[Option<Result<T, NodeError>>] {
        &self.replies
    }

    /// How many calls are still in flight.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.pending.len()
    }

    /// Gives up the replies and the calls still in flight.
    pub(crate) fn into_parts(self) -> (Replies<T>, Stragglers<T>) {
        (
            self.replies,
            Stragglers {
                pending: self.pending,
            },
        )
    }
}

/// Calls still in flight when the outcome was decided; still bounded by the
/// fan-out's deadline.
pub(crate) struct Stragglers<T> {
    pending: Pending<T>,
}

impl<T> Stragglers<T> {
    pub(crate) fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Feeds each reply that lands before the deadline to `f`.
    pub(crate) async fn for_each(mut self, mut f: impl FnMut(usize, Result<T, NodeError>)) {
        let deadline = self.pending.deadline;
        let drain = async {
            while let Some((i, r)) = self.pending.next().await {
                f(i, r);
            }
        };
        let _ = tokio::time::timeout_at(deadline, drain).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MAX_LEASE;

    const MS: Duration = Duration::from_millis(1);

    #[tokio::test(start_paused = true)]
    async fn fan_out_takes_any_timeout() {
        let mut f: FanOut<u8> =
            FanOut::start(2, Instant::now(), Duration::MAX, Meter::default(), |i| {
                Box::pin(async move { Ok(u8::try_from(i).unwrap_or(0)) }) as BoxFuture<'static, _>
            });
        f.until(|_| false).await;
        assert!(matches!(f.replies(), [Some(Ok(0)), Some(Ok(1))]));
        let now = Instant::now();
        assert!(deadline_after(now, Duration::MAX) > now + MAX_LEASE);
        assert_eq!(deadline_after(now, MS), now + MS);
    }

    #[tokio::test(start_paused = true)]
    async fn fan_out_times_out_each_node() {
        let mut f: FanOut<u8> = FanOut::start(3, Instant::now(), 50 * MS, Meter::default(), |i| {
            Box::pin(async move {
                if i == 1 {
                    futures::future::pending::<()>().await;
                }
                Ok(i as u8)
            }) as BoxFuture<'static, _>
        });
        f.until(|_| false).await;
        assert!(matches!(f.replies()[0], Some(Ok(0))));
        assert!(
            matches!(&f.replies()[1], Some(Err(e)) if e.kind == crate::error::NodeErrorKind::Timeout)
        );
        assert!(matches!(f.replies()[2], Some(Ok(2))));
        assert_eq!(
            f.in_flight(),
            1,
            "the stalled call is given up, not awaited"
        );
    }
}
