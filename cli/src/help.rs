//! The long help texts: examples, details and exit statuses of each command.

pub const ROOT_HELP: &str = "\
Nodes:
  Every command needs the Redis masters (independent, not replicas of each
  other), as --nodes or in QUORUMLOCK_NODES, comma separated:
    export QUORUMLOCK_NODES=redis://redis-a:6379,redis://redis-b:6379,redis://redis-c:6379
  URLs may carry a password and a db: redis://:secret@redis-a:6379/2
  A member may be a whole Redis Cluster (one vote, as a master): write
  cluster: and one or more of its nodes' URLs joined by +
    export QUORUMLOCK_NODES=redis://redis-a:6379,cluster:redis://c1:7000+redis://c2:7000,redis://redis-b:6379
  A member may be a master under Redis Sentinel (one vote, followed across
  failovers): write sentinel:, the master's name, @ and one or more of its
  sentinels' URLs joined by + (the name may be a URL carrying the master's
  password: sentinel:redis://:pw@locks-b@redis://s1:26379+redis://s2:26379)
    export QUORUMLOCK_NODES=redis://redis-a:6379,redis://redis-b:6379,sentinel:locks-c@redis://s1:26379+redis://s2:26379
  Rows and messages number the masters first, then the clusters, then the
  Sentinel members, each in the order given; a status row names the shard
  or the Sentinel master that answered (SHARD).
  Write a + or , inside a password as %2B or %2C. A cluster member down at
  the start is connected later, as a master is; --tls-ca applies to its
  rediss:// seeds and shards.

Layout:
  --layout (or QUORUMLOCK_LAYOUT) says where the locks live, as the
  applications sharing them build their managers: quorumlock (the default,
  the hash <prefix>{<name>}) or redisson (Redisson's RLock: the hash at the
  name itself; Redisson holders are shown and excluded, and unlock --force
  removes them). top cannot list locks with --layout redisson.

Examples:
  # Run a report on one host at a time; give up at once if it is running elsewhere
  quorumlock exec --wait 0s nightly-report -- /usr/local/bin/report.sh

  # crontab on every host: at most one run at a time across all of them;
  # --quiet keeps cron from mailing when another host has the lock
  */5 * * * * quorumlock --nodes redis://redis-a:6379,redis://redis-b:6379,redis://redis-c:6379 exec --quiet --wait 0s nightly-report -- /usr/local/bin/report.sh

  # Wait up to 10 minutes for the lock, keep it renewed while migrating
  quorumlock exec --wait 10m db-migrate -- ./migrate.sh --all
  quorumlock exec --fair batch-slot -- ./process-next-batch.sh

  # Who holds it, node by node (or as JSON), and who waits for it
  quorumlock status nightly-report
  quorumlock status --json nightly-report

  # The same, redrawn every second until Ctrl-C
  quorumlock status --watch nightly-report

  # The locks with the most waiters, found by a prefix scan of every node
  quorumlock top --limit 10

  # Break a lock whose holder is known to be gone
  quorumlock unlock --force nightly-report

  # On every host: one leads and runs the scheduler, the others wait their turn
  quorumlock elect --value \"$(hostname):8080\" scheduler -- ./scheduler --port 8080

  # Who leads (value, term, host, pid, since when), and each change until Ctrl-C
  quorumlock leader scheduler
  quorumlock leader --watch --json scheduler

Exit status:
  0        success (exec, elect: the command's own status, whatever it is;
           leader: also when nobody leads; --watch: ended by Ctrl-C)
  1        other failure (confirmation declined, key of the wrong type)
  2        usage or configuration error: bad option, duration, URL, cluster entry,
           quorum, layout, lock or election name, empty --value, or no nodes given
  69       not enough nodes reachable for the quorum (EX_UNAVAILABLE)
  75       exec: lock not obtained within --wait, another owner holds it (EX_TEMPFAIL);
           elect: leadership not obtained within --wait, another candidate leads
  76       exec: lock lost while the command ran; the command was terminated;
           elect: leadership lost while the command ran, likewise
  126/127  exec, elect: the command could not be started / was not found
  128+N    exec, elect: the command was killed by signal N, or quorumlock was
           interrupted by signal N while waiting for the lock or leadership
           (--watch: ended by SIGTERM or SIGHUP)
  Whenever the status is quorumlock's own, a line on stderr says why.";

/// How the command runs under the lock, for the help of `exec` and
/// `elect`.
macro_rules! under_lock_help {
    () => {
        "\
While the command runs, the lock is renewed every lease/3. If renewal cannot
show a quorum in time, the lock is lost: the command's process group gets
SIGTERM, then SIGKILL after --grace, and quorumlock exits with 76. The grace
is capped at what is left of the lock's validity at that moment, because
another owner may take the lock once it has expired: a lock lost with
nothing left gets SIGKILL right after SIGTERM.

SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to quorumlock are forwarded to the
command (its whole process group); quorumlock waits for it, releases the
lock and exits with the command's status.

Run from cron, a script or a service, the command gets a process group of
its own, so that these signals reach every process it starts, and the lock
is held until every process of that group has exited, not only the command
(background jobs it left running included; if the lock is lost meanwhile,
they get SIGTERM and SIGKILL as above). A process that leaves the group
(setsid, a daemon) is not tracked. Run in the foreground of a terminal (or
with --foreground), the command shares quorumlock's process group so that
it can read the terminal; signals then go to the command alone, and the
lock is released as soon as the command exits: processes it left running
in the background cannot be told apart from quorumlock's own group and are
neither waited for nor stopped.

On Linux, if quorumlock itself dies (even by SIGKILL), the kernel kills the
command with SIGKILL, so that it does not run on without the lock. Only the
command's own process gets this signal; processes it started keep running
then (in their own group, a `kill -KILL -- -PGID` stops them all).
"
    };
}

/// The exit statuses of a command run under `$it` (`lock`), which `$who`
/// (`another owner holds it`) when not obtained.
macro_rules! under_lock_exit_status {
    ($it:literal, $who:literal) => {
        concat!(
            "\
Exit status:
  N        the command's own status (128+N if it was killed by signal N)
  2        usage or configuration error
  69       not enough nodes reachable for the quorum
  75       ",
            $it,
            " not obtained within --wait (",
            $who,
            ")
  76       ",
            $it,
            " lost while the command ran; the command was terminated
  126/127  the command could not be started / was not found
  128+N    quorumlock was interrupted by signal N while waiting for the ",
            $it
        )
    };
}

pub const EXEC_HELP: &str = concat!(
    "\
The command gets QUORUMLOCK_NAME (the lock name) and QUORUMLOCK_TOKEN (the
fencing token: larger than every token issued for this lock before; pass it
to the resource you protect and have it reject smaller ones).

",
    under_lock_help!(),
    "
Examples:
  quorumlock exec --wait 0s nightly-report -- /usr/local/bin/report.sh
  */5 * * * * quorumlock --nodes redis://redis-a:6379,redis://redis-b:6379,redis://redis-c:6379 exec --quiet --wait 0s nightly-report -- /usr/local/bin/report.sh
  quorumlock exec --wait 2m --lease 10s --grace 5s deploy -- sh -c 'echo token $QUORUMLOCK_TOKEN; ./deploy.sh'

",
    under_lock_exit_status!("lock", "another owner holds it")
);

pub const ELECT_HELP: &str = concat!(
    "\
Candidates of one election take their turn to lead in the order they
arrived, across hosts: each waits in the fair queue of the election's lock,
election:NAME, as exec --fair does (a candidate that stops calling the
nodes, killed, is skipped after 5 s). Once its turn comes, quorumlock
writes --value on a quorum of the nodes (what `quorumlock leader NAME`
shows) and runs the command; the leadership is that lock's hold, and when
the command exits quorumlock resigns, so that the next candidate in line
leads at once. A leader that dies without resigning leads no more once its
--lease runs out; the next candidate takes over then.

The command gets QUORUMLOCK_ELECTION (the election name), QUORUMLOCK_VALUE
(--value), QUORUMLOCK_TERM (the term: larger than every term of this
election before; pass it to what the leader writes to and have it reject
smaller ones), and, as exec gives them, QUORUMLOCK_NAME (the lock,
election:NAME) and QUORUMLOCK_TOKEN (its fencing token, the term).

Below, the lock is the election's lock: losing it is losing the
leadership, releasing it is resigning.

",
    under_lock_help!(),
    "
Examples:
  # On every host: one runs the scheduler, the others wait to take over
  quorumlock elect --value \"$(hostname):8080\" --lease 10s scheduler -- ./scheduler --port 8080
  # Lead if nobody does now, else exit with 75
  quorumlock elect --wait 0s --quiet --value batch-1 nightly -- ./nightly.sh
  # Who leads
  quorumlock leader scheduler

",
    under_lock_exit_status!("leadership", "another candidate leads")
);

pub const LEADER_HELP: &str = "\
Prints the leader a quorum of nodes agree on, read once on a quorum: its
value (what it proclaimed, elect --value), its term, the revision of its
value in that term (1: the value it campaigned with), and the host and
process id of the quorumlock that leads, with the time it won its term on
that host's clock. Or `no leader`: nobody leads, a new leader has not
written its value yet, or the nodes disagree (a write half done).

With --json, one JSON document: {\"election\": NAME, \"leader\": null} or
the leader as {\"value\", \"term\", \"revision\", \"holder_id\", \"host\",
\"pid\", \"since_unix_ms\"} (host, pid and since are null for a holder
that is not quorumlock's).

With --watch, the leader is shown again on each change until Ctrl-C: a
new leader (a later term), a new value, or nobody once the leader resigned
or its lease ran out. A change is seen within moments (the nodes publish
it); a change that publishes nothing (a lease running out), within the
lease's renew interval at the latest. Terms never go back. On a terminal
the line is redrawn in place; otherwise each change is printed in turn
after a header line `-- quorumlock leader NAME, at TIME` (with --json: one
document per line, without header). While nodes are down, the last leader
a quorum agreed on stays shown.

Examples:
  quorumlock leader scheduler
  quorumlock leader --json scheduler | jq -r '.leader.value // empty'
  quorumlock leader --watch scheduler

Exit status: 0 when the leader (or `no leader`) was shown, and with --watch
when ended by Ctrl-C; 2 for a bad option or election name; 69 when fewer
than a quorum of nodes answered (at the start, with --watch); 128+N when
the watch was ended by SIGTERM or SIGHUP.";

/// What `--watch` does, for the help of `status` and `top`.
macro_rules! watch_help {
    () => {
        "\
With --watch, the view is redrawn every --interval until Ctrl-C. On a
terminal it is redrawn in place (cut to the terminal's size, the cursor
hidden meanwhile and shown again at the end); otherwise each snapshot is
printed in turn, plain text without escape codes, after a header line
`-- quorumlock ... at TIME` (with --json: one JSON document per line).
Nodes that go down show as unreachable and the view goes on; a node that
does not answer within 3 s counts as down for that snapshot.

Exit status: 0 (also when ended by Ctrl-C), 2 for a bad option or
interval, 69 when no node can be reached at the start, 128+N when ended
by SIGTERM or SIGHUP."
    };
}

pub const STATUS_HELP: &str = concat!(
    "\
For every node: whether it answered (for a cluster member, the shard that
did: the master serving the lock's hash slot), the holder id, the hold
count (the reentrancy count), the PTTL, the node's fence counter (the last fencing
token it issued) and its maxmemory-policy. The holder id tells the host,
process id and since when it holds the lock. Below, the waiters queued on
the nodes (waiters that missed the lock once, fair or not), in ticket
order: waiter id, host, pid, ticket, on how many nodes it is queued, and
how long until the nodes skip it if it stops calling (they do after the
queue timeout, 5 s by default, which each attempt renews). At most 20 are
listed, with the total.

Examples:
  quorumlock status nightly-report
  quorumlock status --json nightly-report
  quorumlock status --watch --interval 500ms nightly-report

",
    watch_help!()
);

pub const TOP_HELP: &str = concat!(
    "\
Scans every node for the lock hashes under the key prefix (SCAN with MATCH
`<prefix>{*}` and COUNT --batch, never KEYS) and reads each lock found with
one pipeline per batch (HGETALL, PTTL and ZCARD of its queue), so a node
holding 100,000 locks answers other clients between batches; a cluster
member is scanned on the master of each of its shards, listed again for
every scan (with --watch, a failover or a resharding shows in the next
frame). Locks are
listed by waiters (most first), then by name: holder (host@pid when the
holder id tells, the raw id otherwise), hold count, the smallest PTTL over
the nodes that hold it, waiters (the longest queue over the nodes), and on
how many nodes the lock exists. A lock held by no owner on a quorum shows
the owner with the most nodes, marked `(no quorum)`. A lock that is free
while waiters are queued (between two holders) has no hash and is not
listed. With --layout redisson it refuses (exit status 2): the locks are
then hashes at bare names, which no SCAN pattern tells from other keys;
use `quorumlock status NAME`. While it scans, a progress bar is shown on stderr when stderr is a
terminal (not with --watch).

Examples:
  quorumlock top
  quorumlock top --limit 50 --key-prefix jobs:
  quorumlock top --watch --interval 5s

A node that cannot be scanned is named below the list, and the others are
listed; without --watch, the exit status is 69 when no node could be.

",
    watch_help!()
);

pub const UNLOCK_HELP: &str = "\
An administrative break: the lock is deleted on every node whoever holds it.
The holder is not told until its next renewal finds the lock gone, so for a
moment two processes may both believe they hold it. Use it only when the
holder is known to be gone, or wait for the lease to run out instead.

Without --yes, asks on stdin to type the lock name to confirm.

Exit status: 0 when deleted on every node (or held nowhere), 1 when not
confirmed, 2 without --force, 69 when some node could not be reached (the
lock may survive there until its TTL).";
