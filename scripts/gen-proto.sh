#!/usr/bin/env bash
# Regenerates the control plane's Rust code from crates/weir-cluster/proto/cluster.proto.
# Needs protoc (Debian: apt-get install protobuf-compiler). The generated file is committed,
# so building Weir needs neither protoc nor this step.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v protoc >/dev/null || { echo "scripts/gen-proto.sh: protoc not found (apt-get install protobuf-compiler)" >&2; exit 1; }
cargo run --quiet --manifest-path tools/gen-proto/Cargo.toml --target-dir target/gen-proto
rustfmt --edition 2021 crates/weir-cluster/src/proto/weir.cluster.v1.rs
