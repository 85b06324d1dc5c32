//! One script call on one node: `EVAL` or `EVALSHA`, and when it may be
//! sent again.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redis::aio::ConnectionManager;
use tokio::time::Instant;

use super::shared::Command;
use crate::error::{NodeError, NodeErrorKind};
use crate::scripts;
use crate::sync::locked;

pub(super) fn map_err(e: &redis::RedisError) -> NodeError {
    NodeError::from_redis(e)
}

/// Whether the connection broke, so that the manager reconnects and a second
/// try may reach the node.
pub(super) fn broken(e: &redis::RedisError) -> bool {
    e.is_io_error() || e.is_connection_dropped() || e.is_connection_refusal()
}

/// One script call on one node, as `EVAL` or `EVALSHA` depending on what the
/// node is known to have. It is sent again only when that cannot reorder it
/// (see the `scripts` module): once as `EVAL` after `NOSCRIPT`, which means
/// nothing ran, and, for [`Resend::AfterBrokenConnection`], once after a
/// broken connection.
pub(super) struct ScriptCall {
    pub(super) conn: ConnectionManager,
    /// Per one-shot script: the node is known to have it.
    pub(super) loaded: Arc<[AtomicBool; scripts::ONE_SHOT]>,
    pub(super) breaker: Arc<Breaker>,
}

/// Shortest and longest pause in dialling a node that refused connections.
const DOWN_MIN: Duration = Duration::from_millis(50);
const DOWN_MAX: Duration = Duration::from_secs(1);

/// Keeps calls from dialling a node that refuses connections (its process
/// is down) on every call. The connection manager starts a new connection
/// attempt for each call that meets a failed one; here, once a connect is
/// refused, calls fail at once for a pause that doubles from 50 ms up to
/// 1 s while refusals go on, and the first call after the pause dials
/// again. A refused call could not have run, so failing it early changes
/// nothing but cost; a node that comes back is used again within a pause.
/// The error of a call failed so, or refused, and never sent, says until
/// when the pause lasts ([`NodeError::unsent_until`]), so that a release
/// met by it can be sent once it ends (see `Members::releases`).
///
/// It also keeps calls from piling up on a node that keeps its connection
/// but answers nothing (a stopped or frozen process, a black-holed link):
/// once no call has been answered for `silence` since the first call sent
/// after the last answer, every call fails at once, unsent, except one
/// probe per `silence`, which is sent; the first answer of any call ends
/// it. Before, every call was written to such a node and dropped at its
/// timeout, and the client's memory grew with them (a stopped master under
/// 15,000 cycles a second: 22 MB to 189 MB in 16 s).
#[derive(Default)]
pub(super) struct Breaker {
    /// Until when calls fail at once, and the pause after the next refusal.
    down: Mutex<Option<(Instant, Duration)>>,
    /// Whether `down` is set: a node that answers (every call but those
    /// after a refusal) is checked and answered without the lock.
    tripped: AtomicBool,
    /// How long a node may leave every call unanswered before calls fail
    /// at once; `None`: never.
    silence: Option<Silence>,
    /// When the first call sent since the last answer was sent, in
    /// milliseconds after the silence's origin, plus 1; 0 when every call
    /// sent was answered since.
    quiet_since: AtomicU64,
    /// While silent: when the next probe may be sent (milliseconds after
    /// the silence's origin, plus 1).
    next_probe: AtomicU64,
    /// Whether the silence was reported (once per silence).
    silent: AtomicBool,
}

/// How long a node may answer nothing, and the origin of the breaker's
/// clock readings (its creation).
struct Silence {
    after: Duration,
    origin: Instant,
}

impl Silence {
    /// Milliseconds from the origin to `t`, plus 1 (0 means none).
    fn ms_at(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.origin).as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }
}

impl Breaker {
    /// A breaker that also fails calls at once while the node has left
    /// every call unanswered for `silence` (see the type's doc).
    pub(super) fn silent_after(silence: Duration) -> Self {
        Self {
            silence: Some(Silence {
                after: silence.max(Duration::from_millis(1)),
                origin: Instant::now(),
            }),
            ..Self::default()
        }
    }

    /// Fails at once while the node is known to refuse connections, or
    /// while it answers nothing (but for one probe per silence).
    pub(super) fn check(&self) -> Result<(), NodeError> {
        self.check_silence()?;
        if !self.tripped.load(Ordering::Acquire) {
            return Ok(());
        }
        match *locked(&self.down) {
            Some((until, _)) if Instant::now() < until => Err(NodeError {
                unsent_until: Some(until),
                ..NodeError::new(
                    NodeErrorKind::Connection,
                    "connection refused; the node is dialled again after a pause",
                )
            }),
            _ => Ok(()),
        }
    }

    /// `Err` while the node is silent, unless this call is the probe.
    fn check_silence(&self) -> Result<(), NodeError> {
        let Some(quiet) = &self.silence else {
            return Ok(());
        };
        let since = self.quiet_since.load(Ordering::Acquire);
        if since == 0 {
            return Ok(());
        }
        let (now, silence) = (Instant::now(), quiet.after);
        let (now_ms, silence_ms) = (
            quiet.ms_at(now),
            u64::try_from(silence.as_millis()).unwrap_or(u64::MAX),
        );
        if now_ms.saturating_sub(since) < silence_ms {
            return Ok(());
        }
        if !self.silent.swap(true, Ordering::AcqRel) {
            tracing::warn!(
                silent_ms = now_ms.saturating_sub(since),
                "node answers nothing: its calls fail at once, but for a probe per {silence:?}, until it answers"
            );
        }
        let probe = self.next_probe.load(Ordering::Acquire);
        if now_ms >= probe
            && self
                .next_probe
                .compare_exchange(
                    probe,
                    now_ms.saturating_add(silence_ms),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                )
                .is_ok()
        {
            return Ok(());
        }
        let next = self.next_probe.load(Ordering::Acquire);
        let until = now + Duration::from_millis(next.saturating_sub(now_ms));
        Err(NodeError {
            unsent_until: Some(until),
            ..NodeError::new(
                NodeErrorKind::Timeout,
                format!(
                    "no answer for {:?}: not sent (calls fail at once, but for a probe per \
                     {silence:?}, until the node answers)",
                    Duration::from_millis(now_ms.saturating_sub(since))
                ),
            )
        })
    }

    /// A call is about to be sent.
    pub(super) fn sent(&self) {
        let Some(quiet) = &self.silence else { return };
        if self.quiet_since.load(Ordering::Relaxed) == 0 {
            let _ = self.quiet_since.compare_exchange(
                0,
                quiet.ms_at(Instant::now()),
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// A call got an answer, or its connection failed: the node is not
    /// silent (what was sent before it on that connection has been seen
    /// to, or will not be).
    pub(super) fn heard(&self) {
        if self.quiet_since.load(Ordering::Relaxed) != 0 {
            self.quiet_since.store(0, Ordering::Release);
            if self.silent.swap(false, Ordering::AcqRel) {
                tracing::info!("node answers again");
            }
        }
    }

    /// A connect was refused: pauses; returns when the pause ends.
    fn refused(&self) -> Instant {
        let mut down = locked(&self.down);
        let pause = down.map_or(DOWN_MIN, |(_, p)| (p * 2).min(DOWN_MAX));
        let until = Instant::now() + pause;
        *down = Some((until, pause));
        self.tripped.store(true, Ordering::Release);
        until
    }

    fn answered(&self) {
        if self.tripped.load(Ordering::Acquire) {
            let mut down = locked(&self.down);
            *down = None;
            self.tripped.store(false, Ordering::Release);
        }
    }
}

/// Whether a script call may be sent again after the connection broke.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Resend {
    /// Never: acquire (it could land behind its own release or rollback)
    /// and force-release (it could delete a lock taken meanwhile).
    Never,
    /// Once, on the new connection: release and raise-fence only ever lower
    /// or delete what this hold owns, or raise a counter, so a late copy is
    /// harmless; without the second try, the first release to a node that
    /// restarted would fail on the dead connection and leave the key behind.
    AfterBrokenConnection,
}

/// What the re-send rule ([`Resend::again`]) says of a call whose try
/// failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Again {
    /// Send it again.
    Send,
    /// It may be sent again by its kind, but a later call of its hold has
    /// been made to the member meanwhile: it fails instead (see `order`).
    Superseded,
    /// Not again: the try's error is the call's.
    Stop,
}

impl Resend {
    /// The re-send rule, with no I/O: whether a call of this kind whose try
    /// failed may be sent again. One proven not run (`proven_not_run`:
    /// `NOSCRIPT`, sent again as `EVAL`) may; one that may have run (the
    /// connection `broken`) only when its kind allows it and its one second
    /// try is left (`try_left`). Neither once a later call of its hold has
    /// been made to the member (`superseded`, asked only then): sent again,
    /// it could land behind that call (an acquire behind its own release).
    pub(crate) fn again(
        self,
        proven_not_run: bool,
        broken: bool,
        try_left: bool,
        superseded: impl FnOnce() -> bool,
    ) -> Again {
        let allowed = broken && try_left && self == Self::AfterBrokenConnection;
        if !(proven_not_run || allowed) {
            Again::Stop
        } else if superseded() {
            Again::Superseded
        } else {
            Again::Send
        }
    }
}

impl ScriptCall {
    pub(super) async fn run<T: redis::FromRedisValue>(
        mut self,
        script: &scripts::Lua,
        keys: &super::script_keys::Names,
        (resend, stamp): (Resend, &super::order::Stamp),
        (args, share): (impl Fn(&mut redis::Cmd), Option<&redis::Cmd>),
    ) -> Result<T, NodeError> {
        let mut tries = if resend == Resend::Never { 1 } else { 2 };
        let mut no_script_resent = false;
        // Whether a try may have run: one that met a refused connection or
        // `NOSCRIPT` did not. A call failed by the pause with no such try
        // was never sent, and its error says so.
        let mut may_have_run = false;
        loop {
            if let Err(mut e) = self.breaker.check() {
                if may_have_run {
                    e.unsent_until = None;
                }
                return Err(e);
            }
            tries -= 1;
            let loaded = &self.loaded[script.id];
            let send_body = !loaded.load(Ordering::Acquire);
            // The fan-out's `EVALSHA` when it is the one this call would
            // build (`shared`), else its own.
            let cmd = match share {
                Some(shared) if !send_body => Command::Kept(shared),
                _ => {
                    let mut cmd = keys.call(script, send_body);
                    args(&mut cmd);
                    Command::Own(cmd)
                }
            };
            self.breaker.sent();
            let reply = cmd.query_async(&mut self.conn).await;
            self.breaker.heard();
            match reply {
                Ok(v) => {
                    loaded.store(true, Ordering::Release);
                    self.breaker.answered();
                    return Ok(v);
                }
                Err(e) => {
                    forget_scripts(&self.loaded, &e);
                    let mut unsent_until = None;
                    if e.is_connection_refusal() {
                        unsent_until = Some(self.breaker.refused());
                    } else if !no_script(&e) {
                        may_have_run = true;
                    }
                    // NOSCRIPT means nothing ran: sending the same call again
                    // as EVAL cannot reorder it behind anything, whatever the
                    // script. The node restarted or its scripts were flushed
                    // without this connection seeing it.
                    let again_as_eval = no_script(&e) && !send_body && !no_script_resent;
                    // Never again behind a later call of the same hold (see
                    // `order`).
                    match resend.again(again_as_eval, broken(&e), tries > 0, || stamp.superseded())
                    {
                        Again::Superseded => {
                            let mut superseded = super::order::superseded_error();
                            if may_have_run {
                                superseded.kind = NodeErrorKind::Connection;
                                superseded.message = e.to_string();
                            }
                            return Err(superseded);
                        }
                        Again::Send if again_as_eval => {
                            no_script_resent = true;
                            tries += 1;
                        }
                        Again::Send => {}
                        Again::Stop => {
                            let mut err = map_err(&e);
                            if !may_have_run {
                                err.unsent_until = unsent_until;
                            }
                            return Err(err);
                        }
                    }
                }
            }
        }
    }
}

/// Whether the node answered that it does not have the script.
pub(super) fn no_script(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript)
}

/// After an error that means the node may have restarted (a broken
/// connection: the manager reconnects, perhaps to a new server) or lost its
/// scripts (`NOSCRIPT`), forgets which scripts the node has, so the next
/// call of each sends its body. Every call on the connection goes through
/// here, whichever call meets the break first: renewal, status or a script.
/// A reconnect that no call sees (redis-rs reconnects on its own after a
/// RESP3 disconnection push) is caught by the `NOSCRIPT` resend instead.
pub(super) fn forget_scripts(loaded: &[AtomicBool; scripts::ONE_SHOT], e: &redis::RedisError) {
    if no_script(e) || broken(e) {
        for l in loaded {
            l.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The re-send rule: proven not run, again; may have run, only a kind
    /// that allows it, once; never once superseded (asked only then).
    #[test]
    fn a_call_is_sent_again_only_as_its_kind_and_order_allow() {
        let (never, once) = (Resend::Never, Resend::AfterBrokenConnection);
        let no = || false;
        assert_eq!(never.again(true, false, false, no), Again::Send);
        assert_eq!(never.again(false, true, true, no), Again::Stop);
        assert_eq!(once.again(false, true, true, no), Again::Send);
        assert_eq!(once.again(false, true, false, no), Again::Stop);
        assert_eq!(once.again(false, false, true, no), Again::Stop);
        assert_eq!(once.again(false, true, true, || true), Again::Superseded);
        assert_eq!(never.again(true, false, false, || true), Again::Superseded);
        let asked = std::cell::Cell::new(false);
        let _ = never.again(false, true, true, || {
            asked.set(true);
            true
        });
        assert!(
            !asked.get(),
            "the order is asked only of a call to send again"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusing_node_is_dialled_again_only_after_a_doubling_pause() {
        let b = Breaker::default();
        assert!(b.check().is_ok(), "a node starts reachable");
        b.refused();
        let e = b.check().expect_err("fails at once after a refusal");
        assert_eq!(e.kind, NodeErrorKind::Connection);
        assert!(
            e.unsent_until.is_some(),
            "the error says the call was not sent"
        );
        tokio::time::sleep(DOWN_MIN).await;
        assert!(b.check().is_ok(), "dialled again after the pause");
        // Refused again: the pause doubles, up to its ceiling.
        b.refused();
        tokio::time::sleep(DOWN_MIN).await;
        assert!(b.check().is_err(), "second pause is longer");
        tokio::time::sleep(DOWN_MIN).await;
        assert!(b.check().is_ok());
        for _ in 0..10 {
            b.refused();
        }
        tokio::time::sleep(DOWN_MAX).await;
        assert!(b.check().is_ok(), "never paused past {DOWN_MAX:?}");
        // An answer ends it: the next refusal pauses for the shortest time.
        b.answered();
        b.refused();
        tokio::time::sleep(DOWN_MIN).await;
        assert!(b.check().is_ok());
    }

    /// A node that leaves every call unanswered for the silence fails its
    /// calls at once, unsent until the next probe, but for one probe per
    /// silence; the first answer ends it. A node that answers within the
    /// silence never trips.
    #[tokio::test(start_paused = true)]
    async fn a_silent_node_fails_calls_at_once_but_for_a_probe_until_it_answers() {
        let silence = Duration::from_millis(400);
        let b = Breaker::silent_after(silence);
        assert!(b.check().is_ok());
        b.sent();
        tokio::time::advance(silence - Duration::from_millis(1)).await;
        assert!(b.check().is_ok(), "not silent yet");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(b.check().is_ok(), "the first call after the silence probes");
        let e = b.check().expect_err("silent");
        assert_eq!(e.kind, NodeErrorKind::Timeout);
        let until = e.unsent_until.expect("not sent");
        assert_eq!(until - Instant::now(), silence, "until the next probe");
        tokio::time::advance(silence).await;
        assert!(b.check().is_ok(), "the next probe");
        assert!(b.check().is_err());
        b.heard();
        assert!(b.check().is_ok(), "answered");
        assert!(b.check().is_ok());
        for _ in 0..5 {
            b.sent();
            tokio::time::advance(silence / 2).await;
            b.heard();
        }
        b.sent();
        tokio::time::advance(silence / 2).await;
        assert!(b.check().is_ok(), "answering within the silence");
        // Without a silence (a breaker for refusals only), never.
        let plain = Breaker::default();
        plain.sent();
        tokio::time::advance(10 * silence).await;
        assert!(plain.check().is_ok());
    }
}
