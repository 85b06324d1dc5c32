//! Candidates of one election campaigning in a loop, each leadership
//! recorded in a history (`history.rs`), and an observer's record checked
//! against what they wrote: `tests/election.rs` and
//! `tests/cluster_chaos.rs` include it with `#[path]`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use quorumlock::{Leader, LockManager};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::history::History;

/// What the campaigners wrote, or may have written, as leader records.
pub type Proclaimed = Arc<Mutex<Writes>>;

/// The leader records of one election's candidates. Every value is unique
/// (`c<id>-r<round>`, `-p` for a proclaim), so it names its candidate.
#[derive(Default, Debug)]
pub struct Writes {
    /// (term, value), each returned by a campaign or a proclaim: written
    /// on a quorum.
    pub written: BTreeSet<(u64, String)>,
    /// (term, value) of each proclaim that failed: its write may have
    /// reached a quorum all the same (a reply lost, a `WAIT` not
    /// confirmed in time).
    pub in_doubt: BTreeSet<(u64, String)>,
    /// The value of every campaign tried, won or not. A campaign that
    /// failed may have won the lock and written its record on a quorum
    /// before failing (its first proclaim's reply lost to a failover),
    /// and a won one may have done so under an earlier term first; its
    /// term is then not known, but it is no other candidate's.
    pub campaigns: BTreeSet<String>,
}

/// The candidate a value names (`c<id>`).
fn candidate_of(value: &str) -> &str {
    value.split('-').next().unwrap_or(value)
}

impl Writes {
    /// Checks what an observer reported (`None`, or term, revision and
    /// value): it never goes back, and each leader it reports is one a
    /// candidate wrote, or may have written, under that term. A campaign's
    /// value, whose term a failed campaign never learns, is accepted at
    /// revision 1 under a term no other candidate wrote under. Returns how
    /// many leaders were reported, and how many of them no campaign or
    /// proclaim returned (written, as far as their candidates know, in
    /// doubt).
    ///
    /// # Errors
    ///
    /// What it found wrong, with the whole record.
    pub fn check_observed(
        &self,
        seen: &[Option<(u64, u64, String)>],
    ) -> Result<(usize, usize), String> {
        let mut last = (0, 0);
        let (mut reported, mut in_doubt) = (0, 0);
        for (term, rev, value) in seen.iter().flatten() {
            if (*term, *rev) <= last {
                return Err(format!("the observer went back: {seen:?}"));
            }
            last = (*term, *rev);
            reported += 1;
            let pair = (*term, value.clone());
            if self.written.contains(&pair) {
                continue;
            }
            in_doubt += 1;
            if self.in_doubt.contains(&pair) {
                continue;
            }
            if !self.campaigns.contains(value) || *rev != 1 {
                return Err(format!(
                    "reported ({term}, {rev}, {value}), which no campaign or proclaim wrote: {seen:?}"
                ));
            }
            let who = candidate_of(value);
            let other = self
                .written
                .iter()
                .chain(&self.in_doubt)
                .find(|(t, v)| t == term && candidate_of(v) != who);
            if let Some((_, v)) = other {
                return Err(format!(
                    "reported ({term}, {value}), but term {term} was {v}'s: {seen:?}"
                ));
            }
        }
        Ok((reported, in_doubt))
    }
}

/// What an observer saw: each change, `None` or (term, revision, value).
pub type Seen = Arc<Mutex<Vec<Option<(u64, u64, String)>>>>;

/// Records every change `rx` reports, until it ends or the task is
/// aborted.
pub fn record(mut rx: watch::Receiver<Option<Leader>>) -> (Seen, JoinHandle<()>) {
    let seen = Seen::default();
    let seen_by = Arc::clone(&seen);
    let task = tokio::spawn(async move {
        while rx.changed().await.is_ok() {
            let now = rx.borrow_and_update().clone();
            let now = now.map(|l| (l.term(), l.revision(), l.value().to_owned()));
            seen_by.lock().unwrap().push(now);
        }
    });
    (seen, task)
}

/// One candidate: campaigns in a loop until `stop`, holds its leadership
/// for a while checking `is_leader` as it works, proclaims now and then,
/// and ends it by resigning or by dropping it.
pub async fn candidate(
    id: usize,
    m: LockManager,
    election: String,
    history: Arc<History>,
    proclaimed: Proclaimed,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut terms = 0;
    let mut round = 0u64;
    while !stop.load(Ordering::Relaxed) {
        round += 1;
        let value = format!("c{id}-r{round}");
        let wait = Duration::from_millis(300);
        proclaimed.lock().unwrap().campaigns.insert(value.clone());
        let Ok(me) = m.election(&*election).try_campaign(&value, wait).await else {
            continue;
        };
        terms += 1;
        proclaimed
            .lock()
            .unwrap()
            .written
            .insert((me.term(), value));
        let who = format!("c{id}");
        let mut hold = history.enter(&who, me.holder_id(), me.term(), me.valid_until());
        let work = Duration::from_millis(10 + (round * 37 + id as u64 * 13) % 60);
        let end = Instant::now() + work;
        while Instant::now() < end {
            if !me.is_leader() {
                hold.lost_now();
                break;
            }
            hold.observe(me.valid_until());
            if round.is_multiple_of(3) {
                let v = format!("c{id}-r{round}-p");
                let pair = (me.term(), v.clone());
                let ok = me.proclaim(&v).await.is_ok();
                let mut writes = proclaimed.lock().unwrap();
                if ok {
                    writes.written.insert(pair);
                } else {
                    writes.in_doubt.insert(pair);
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        hold.exit(me.valid_until());
        if round.is_multiple_of(2) {
            let _ = me.resign().await;
        } else {
            drop(me);
        }
    }
    terms
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(items: &[(u64, u64, &str)]) -> Vec<Option<(u64, u64, String)>> {
        items
            .iter()
            .map(|(t, r, v)| Some((*t, *r, (*v).to_owned())))
            .collect()
    }

    fn writes() -> Writes {
        let mut w = Writes::default();
        for v in ["c0-r1", "c1-r1", "c2-r1", "c2-r2"] {
            w.campaigns.insert(v.to_owned());
        }
        w.written.insert((19, "c0-r1".to_owned()));
        w.written.insert((21, "c1-r1".to_owned()));
        w.in_doubt.insert((21, "c1-r1-p".to_owned()));
        w
    }

    #[test]
    fn a_failed_campaigns_record_under_a_term_of_its_own_is_accepted() {
        // c2-r1's campaign failed after its record reached the member (a
        // failover took the reply); term 20 was nobody else's.
        let got = writes().check_observed(&seen(&[
            (19, 1, "c0-r1"),
            (20, 1, "c2-r1"),
            (21, 1, "c1-r1"),
            (21, 2, "c1-r1-p"),
        ]));
        assert_eq!(got, Ok((4, 2)));
    }

    #[test]
    fn flags_a_campaign_value_under_another_candidates_term() {
        let got = writes().check_observed(&seen(&[(21, 1, "c2-r2")]));
        assert!(got.unwrap_err().contains("was c1-r1's"));
    }

    #[test]
    fn flags_a_value_nobody_wrote_and_an_observer_that_goes_back() {
        let w = writes();
        let never = w.check_observed(&seen(&[(22, 1, "c0-r9")]));
        assert!(never.unwrap_err().contains("no campaign or proclaim wrote"));
        let late_rev = w.check_observed(&seen(&[(20, 2, "c2-r1")]));
        assert!(late_rev
            .unwrap_err()
            .contains("no campaign or proclaim wrote"));
        let back = w.check_observed(&seen(&[(21, 1, "c1-r1"), (19, 1, "c0-r1")]));
        assert!(back.unwrap_err().contains("went back"));
    }
}
