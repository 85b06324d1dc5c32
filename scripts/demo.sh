#!/usr/bin/env bash
# The main demo: several service instances sell a scarce stock at once,
# without a lock and under quorumlock. Starts its own 5 local masters unless
# QUORUMLOCK_NODES lists some.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo run --quiet --example inventory
