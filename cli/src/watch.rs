//! `--watch`: a view redrawn every interval (or on each change) until
//! interrupted, in place on a terminal, as plain snapshots one after
//! another otherwise.

use std::io::{ErrorKind, IsTerminal, Write};
use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::cluster::human;
use crate::exit::{self, Failure};
use crate::signals::Signals;

/// Something `--watch` redraws.
pub trait View {
    /// The command line it shows, for the header (`quorumlock top`).
    fn title(&self) -> String;

    /// Whether snapshots are JSON documents, one per line, without header.
    fn json(&self) -> bool {
        false
    }

    /// One snapshot, ending with a newline. An error ends the watch.
    async fn frame(&mut self) -> Result<String, Failure>;
}

/// Redraws `view` every `interval` until SIGINT (exit status 0), SIGTERM
/// or SIGHUP (128+N), or until stdout goes away (0). The terminal gets its
/// cursor back however the loop ends.
pub async fn run(view: &mut impl View, interval: Duration) -> Result<u8, Failure> {
    redraw(view, Some(interval)).await
}

/// Redraws `view` on each change, as [`run`] does every interval: each of
/// its frames waits for the next change.
pub async fn follow(view: &mut impl View) -> Result<u8, Failure> {
    redraw(view, None).await
}

/// Draws the frames of `view`, one every `interval`, or one after the
/// other (each waits for its change) without.
async fn redraw(view: &mut impl View, interval: Option<Duration>) -> Result<u8, Failure> {
    let mut signals = Signals::new()?;
    let mut screen = Screen::new(view.json());
    let title = view.title();
    let pace = interval.map_or_else(String::new, |i| format!(", every {}", human(i)));
    loop {
        let started = Instant::now();
        let frame = tokio::select! {
            frame = view.frame() => frame?,
            code = ended(&mut signals) => return Ok(code),
        };
        let header = format!(
            "-- {title}{pace}, at {}",
            humantime::format_rfc3339_seconds(SystemTime::now())
        );
        if !screen.draw(&header, &frame)? {
            return Ok(0);
        }
        let Some(interval) = interval else { continue };
        // `sleep_until` takes any deadline: a huge interval sleeps "forever".
        let next = started.checked_add(interval);
        tokio::select! {
            () = sleep_until(next) => {}
            code = ended(&mut signals) => return Ok(code),
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// Waits for a signal; returns the exit status it means: Ctrl-C is the way
/// to end a watch (0), the others 128+N as usual.
async fn ended(signals: &mut Signals) -> u8 {
    match signals.recv().await {
        nix::sys::signal::Signal::SIGINT => 0,
        other => exit::signaled(other as i32),
    }
}

/// Where the snapshots go: a terminal redrawn in place, or a plain stream.
struct Screen {
    /// Redraw in place (stdout is a terminal, and not JSON).
    terminal: bool,
    /// Snapshots are JSON lines: no header, no blank line.
    json: bool,
    /// The cursor is hidden (restored on drop).
    hidden: bool,
    /// Snapshots drawn so far.
    drawn: u64,
}

const HIDE_CURSOR: &str = "\x1b[?25l";
const SHOW_CURSOR: &str = "\x1b[?25h";
const HOME: &str = "\x1b[H";
const CLEAR_SCREEN: &str = "\x1b[2J";
const CLEAR_LINE_END: &str = "\x1b[K";
const CLEAR_BELOW: &str = "\x1b[J";

impl Screen {
    fn new(json: bool) -> Self {
        Self {
            terminal: !json && std::io::stdout().is_terminal(),
            json,
            hidden: false,
            drawn: 0,
        }
    }

    /// Draws one snapshot; false once stdout is gone (a closed pipe).
    fn draw(&mut self, header: &str, frame: &str) -> Result<bool, Failure> {
        let text = if self.json {
            frame.to_owned()
        } else if self.terminal {
            self.in_place(header, frame)
        } else {
            let gap = if self.drawn == 0 { "" } else { "\n" };
            format!("{gap}{header}\n{frame}")
        };
        self.drawn += 1;
        write_out(&text)
    }

    /// The escape codes and lines that redraw the terminal from its top
    /// left corner, cut to its size so that nothing scrolls.
    fn in_place(&mut self, header: &str, frame: &str) -> String {
        let (rows, cols) = console::Term::stdout()
            .size_checked()
            .map_or((usize::MAX, usize::MAX), |(r, c)| {
                (usize::from(r), usize::from(c))
            });
        let mut out = String::new();
        if !self.hidden {
            out.push_str(HIDE_CURSOR);
            out.push_str(CLEAR_SCREEN);
            self.hidden = true;
        }
        out.push_str(HOME);
        // The last row stays empty: writing a newline there would scroll.
        let lines = std::iter::once(header).chain(frame.lines());
        for line in lines.take(rows.saturating_sub(1).max(1)) {
            out.push_str(&console::truncate_str(line, cols, ""));
            out.push_str(CLEAR_LINE_END);
            out.push('\n');
        }
        out.push_str(CLEAR_BELOW);
        out
    }
}

impl Drop for Screen {
    fn drop(&mut self) {
        if self.hidden {
            // A new line, for the shell's prompt after the `^C` the
            // terminal echoed.
            let _ = write_out(&format!("{SHOW_CURSOR}\n"));
        }
    }
}

/// Writes `text` to stdout; false when the reader went away.
fn write_out(text: &str) -> Result<bool, Failure> {
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(Failure::new(
            exit::FAILURE,
            format!("cannot write to stdout: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_terminal_frame_is_cut_to_the_screen() {
        let mut s = Screen {
            terminal: true,
            json: false,
            hidden: false,
            drawn: 0,
        };
        let first = s.in_place("head", "a\nb\n");
        assert!(first.starts_with(HIDE_CURSOR), "{first:?}");
        assert!(first.ends_with(CLEAR_BELOW), "{first:?}");
        assert_eq!(first.matches(CLEAR_LINE_END).count(), 3, "{first:?}");
        let second = s.in_place("head", "a\n");
        assert!(second.starts_with(HOME), "no second clear: {second:?}");
        assert!(s.hidden, "shown again on drop");
        // Not here: the test's stdout is no terminal to restore.
        s.hidden = false;
    }
}
