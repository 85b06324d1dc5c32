#!/usr/bin/env bash
# Server cost of one watchdog renewal call of 100 locks, on a standalone
# master and on a one-node Redis Cluster: the script's time as the server
# reports it (`INFO commandstats`, `usec_per_call` of `EVALSHA`, "script"
# rows), and the server process's CPU per call sent one per round trip
# ("process" rows): without the client's CPU or other servers'.
#
#   bash scripts/renew_cost.sh [REV]
#
# Rows: the master script (batch_prelude.lua + renew.lua, 100 declared keys
# of one slot) on the master and on the cluster node (the same keys: what
# cluster mode itself costs a script), and the per-shard script
# (`allow-cross-slot-keys`, shard_prelude.lua + renew.lua, 100 keys of
# 100 slots) on the cluster node. With REV (a git revision), the scripts
# of REV are measured too, alternately with the working tree's. Each
# figure is the mean of ROUNDS (default 3) runs of 20,000 calls.
# Needs redis-server, redis-cli and redis-benchmark (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
rev=${1:-}
rounds=${ROUNDS:-3}
master=7321
cluster=7322
dir=$(mktemp -d)
stop() {
  redis-cli -p "$master" shutdown nosave >/dev/null 2>&1 || true
  redis-cli -p "$cluster" shutdown nosave >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap stop EXIT

# The script bodies as the library assembles them (scripts/mod.rs): the
# per-shard ones open with their flags.
body() { # <rev or ''> <file>
  if [ -n "$1" ]; then git show "$1:src/scripts/$2"; else cat "src/scripts/$2"; fi
}
bodies() { # <rev or ''> <tag>
  { body "$1" batch_prelude.lua; body "$1" renew.lua; } >"$dir/master-$2.lua"
  {
    printf '#!lua flags=allow-cross-slot-keys,allow-oom\n'
    body "$1" shard_prelude.lua
    body "$1" renew.lua
  } >"$dir/shard-$2.lua"
}
bodies "" tree
[ -n "$rev" ] && bodies "$rev" "$rev"

(cd "$dir" && redis-server --port "$master" --save '' --appendonly no --daemonize yes >/dev/null)
(cd "$dir" && redis-server --port "$cluster" --cluster-enabled yes --save '' \
  --appendonly no --daemonize yes >/dev/null)
sleep 0.5
redis-cli -p "$cluster" cluster addslotsrange 0 16383 >/dev/null
until redis-cli -p "$cluster" cluster info | grep -q cluster_state:ok; do sleep 0.2; done

# 100 held locks of one slot ({x}) on both servers, 100 of 100 slots on
# the cluster node; holder h, count 1.
for p in "$master" "$cluster"; do
  for i in $(seq 1 100); do echo "HSET l{x}$i h 1"; done | redis-cli -p "$p" >/dev/null
done
for i in $(seq 1 100); do echo "HSET l{$i} h 1"; done | redis-cli -p "$cluster" >/dev/null
one_slot=""
many_slots="100"
triples=""
for i in $(seq 1 100); do
  one_slot="$one_slot l{x}$i"
  many_slots="$many_slots l{$i}"
  triples="$triples h 1 3600000"
done

# Per call of 20,000 EVALSHA, averaged over the rounds: the script's time
# (usec_per_call), 4 calls in flight; and the server process's CPU
# (used_cpu_user + used_cpu_sys), one call per round trip, as the
# watchdog sends them: reading, parsing and answering the call included.
cpu() { # <port>
  redis-cli -p "$1" info cpu | tr -d '\r' |
    awk -F: '/^used_cpu_(user|sys):/ { s += $2 } END { printf "%.6f", s }'
}
cost() { # <port> <sha> <numkeys> <args...>
  local port=$1 sha=$2 n=$3 total=0 cpu_total=0
  shift 3
  for _ in $(seq 1 "$rounds"); do
    redis-cli -p "$port" config resetstat >/dev/null
    redis-benchmark -p "$port" -n 20000 -c 1 -P 4 evalsha "$sha" "$n" "$@" >/dev/null 2>&1
    local u a b
    u=$(redis-cli -p "$port" info commandstats | tr -d '\r' |
      sed -n 's/^cmdstat_evalsha:.*usec_per_call=\([0-9.]*\).*/\1/p')
    total=$(awk -v a="$total" -v b="$u" 'BEGIN { print a + b }')
    a=$(cpu "$port")
    redis-benchmark -p "$port" -n 20000 -c 1 -P 1 evalsha "$sha" "$n" "$@" >/dev/null 2>&1
    b=$(cpu "$port")
    cpu_total=$(awk -v t="$cpu_total" -v a="$a" -v b="$b" 'BEGIN { print t + (b - a) * 1e6 / 20000 }')
  done
  awk -v t="$total" -v c="$cpu_total" -v n="$rounds" 'BEGIN { printf "%.1f %.1f", t / n, c / n }'
}
row() { # <tag>
  local m s
  m=$(redis-cli -p "$master" script load "$(cat "$dir/master-$1.lua")")
  redis-cli -p "$cluster" script load "$(cat "$dir/master-$1.lua")" >/dev/null
  s=$(redis-cli -p "$cluster" script load "$(cat "$dir/shard-$1.lua")")
  # Every lock renewed (code 1), or the figures mean nothing.
  local ok
  ok=$(redis-cli -p "$cluster" evalsha "$s" 1 'l{1}' $many_slots $triples | grep -c '^1$')
  [ "$ok" = 100 ] || { echo "per-shard script renewed $ok of 100" >&2; exit 1; }
  local mm mc sc
  mm=$(cost "$master" "$m" 100 $one_slot $triples)
  mc=$(cost "$cluster" "$m" 100 $one_slot $triples)
  sc=$(cost "$cluster" "$s" 1 'l{1}' $many_slots $triples)
  for what in script process; do
    local f=1
    [ "$what" = process ] && f=2
    awk -v t="$1" -v w="$what" -v f="$f" -v mm="$mm" -v mc="$mc" -v sc="$sc" 'BEGIN {
      split(mm, a, " "); split(mc, b, " "); split(sc, c, " ")
      printf "| %s | %s | %s | %s | %s | %.2f | %.2f |\n", t, w, a[f], b[f], c[f], b[f] / a[f], c[f] / a[f]
    }'
  done
}
echo "| scripts | per call of 100 locks | master script on a master (µs) | master script on a cluster node (µs) | per-shard script on a cluster node (µs) | cluster mode ÷ master | per-shard ÷ master |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
row tree
[ -n "$rev" ] && row "$rev"
[ -n "$rev" ] && row tree
exit 0
