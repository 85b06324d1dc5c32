#!/usr/bin/env bash
# Every test: unit tests, integration tests against local redis-server
# masters, the CLI tests, the chaos suite against Docker containers, and the
# doctests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! docker info >/dev/null 2>&1; then
  echo "test: no Docker engine reachable; the chaos suite (tests/chaos.rs) needs one" >&2
  exit 1
fi
cargo test --all-features
