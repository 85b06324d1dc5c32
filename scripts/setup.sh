#!/usr/bin/env bash
# Installs what quorumlock's demo, tests and benchmark need on a fresh
# Debian/Ubuntu machine: redis-server (the nodes of the demo and the tests)
# with redis-cli (tests/cluster.rs joins local clusters with it),
# redis-sentinel (the sentinels of tests/sentinel.rs), and tmux
# (cli/tests/cli.rs runs `status --watch` in a real terminal).
# Docker is needed only by the chaos tests (tests/chaos.rs); no registry is
# used: docker/build-image.sh builds the image from the local redis-server.
set -euo pipefail

# The packages missing, named by the command each provides.
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v tmux >/dev/null 2>&1 || missing+=(tmux)
# redis-cli joins the local Redis Clusters of tests/cluster.rs.
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
# redis-sentinel runs the sentinels of tests/sentinel.rs.
command -v redis-sentinel >/dev/null 2>&1 || missing+=(redis-sentinel)

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "setup: installing ${missing[*]} with apt-get" >&2
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "setup: ${missing[*]} missing; install (e.g. sudo apt-get install -y ${missing[*]})" >&2
    exit 1
  fi
fi
# The packaged services are not needed: tests start their own servers.
if command -v systemctl >/dev/null 2>&1; then
  systemctl disable --now redis-server >/dev/null 2>&1 || true
  systemctl disable --now redis-sentinel >/dev/null 2>&1 || true
fi
redis-server --version >&2
tmux -V >&2
