#!/usr/bin/env bash
# Sets up what the tests need (scripts/setup.sh) and runs them: every test
# against real Fossil repositories, real bubblewrap and real MCP clients.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --locked
