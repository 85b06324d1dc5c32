#!/usr/bin/env bash
# Every test of both packages (the library, and the command in cli/): unit
# tests, integration tests against local redis-server masters, the CLI tests,
# the chaos suite against Docker containers, and the doctests.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if ! docker info >/dev/null 2>&1; then
  echo "test: no Docker engine reachable; the chaos suite (tests/chaos.rs) needs one" >&2
  exit 1
fi
# docker/compose.yml parses under every profile (about 1 s; no container is
# started). Compose is not needed by any test, so without it this check
# alone is left out, and says so.
compose=()
if command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
elif docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
fi
if [ ${#compose[@]} -gt 0 ]; then
  for profile in safe fast cluster; do
    "${compose[@]}" -f docker/compose.yml --profile "$profile" config -q
  done
else
  echo "test: docker/compose.yml NOT checked: neither docker-compose nor docker compose is installed" >&2
fi
cargo test --workspace --all-features
