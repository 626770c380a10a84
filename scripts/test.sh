#!/usr/bin/env bash
# Weir's test command: everything the tests need, then every test of the workspace.
# Usage: scripts/test.sh [extra cargo test arguments]
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "scripts/test.sh: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi

# The tests use only local files and loopback so far: no services to start yet.
cargo test --workspace --all-targets "$@"
cargo test --workspace --doc "$@"
